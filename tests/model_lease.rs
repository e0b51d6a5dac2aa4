//! Model checks of the lease rules that late requests could break, with
//! [stateright]: extensions (`lua/extend.lua`, `src/lock/lease.rs`) and the
//! clean-up of a failed attempt (`lua/release.lua`, `lua/acquire.lua`).
//!
//! Abstract models, no Redis and no code from the crate: what the scripts
//! do to a lock key, and what the client believes, with every request free
//! to land late (after later ones), twice, or never. `tests/model_fencing.rs`
//! checks the tokens; `tests/late_requests.rs` plays the same failures on
//! real servers.
//!
//! # Extensions
//!
//! Three instances hold our lock key with an expiry (in ticks; time moves
//! by `Tick`, and a key whose expiry is reached is gone). The client sends
//! extension rounds asking for a short or a long TTL. Each instance applies
//! a round's request right away (it answers in time), later (`Land`: the
//! request was held up, after the client gave up on it, possibly after
//! later rounds), or never. A round succeeds when a quorum applied it in
//! time on a key that was still ours; the client then believes the lease
//! valid until the round's start plus its TTL (the drift allowance is left
//! out: it only makes the client more careful). A failed round leaves the
//! belief as it was.
//!
//! Property: **while the client believes its lease valid, a quorum of
//! instances holds its key** — otherwise another client can be granted the
//! lock while this one still works under it.
//!
//! * The design (`PEXPIRE … GT`: an expiry only moves later) keeps it.
//! * Plain `PEXPIRE` does not: a short extension that timed out lands after
//!   a later long one succeeded, and cuts the keys short under the client's
//!   belief.
//! * The native extension on servers that have it (`SET key value IFEQ
//!   value PX ttl`, Valkey 8.1+ and Redis 8.4+; `src/protocol/native.rs`) is a
//!   compare-and-pexpire *without* GT. It keeps the property as the client
//!   uses it: only for rounds that ask the lease's own TTL, only while the
//!   client believes the lease for no longer than that TTL from now (so the
//!   request, landing at any time, sets no expiry below a belief), and,
//!   once one was sent, believing any longer round only up to that TTL.
//!   Sending it while a longer belief stands, or believing a longer round
//!   in full, breaks it.
//!
//! # Clean-up of a failed attempt
//!
//! One instance, one attempt. Its acquire may be sent twice (a resend after
//! a reset: the first copy applied, its reply lost), each copy landing at
//! any time or never. The attempt fails (for its other instances' sake) at
//! any point; the client then sends the clean-up to this instance unless
//! the instance refused the acquire, and the clean-up too lands at any time
//! (before a held acquire) or never.
//!
//! Property: **once the clean-up has landed and no acquire is still on its
//! way, the instance holds no lock of the failed attempt** — otherwise a
//! lock nobody owns blocks everyone for a whole TTL.
//!
//! * The design (the clean-up leaves a void key on every instance it
//!   reaches; the acquire refuses when it finds the void key; a resend that
//!   finds its own value is a grant) keeps it.
//! * A void key only where the lock was not ours does not: the resend of an
//!   acquire whose first copy the clean-up deleted lands after it.
//! * Without the void key, a clean-up that overtakes its acquire leaves an
//!   orphan.
//! * If a resend that finds its own value counted as "held by someone
//!   else", the client would skip the clean-up there and leave an orphan.
//!
//! [stateright]: https://docs.rs/stateright

#[path = "common/model.rs"]
mod model_support;

use model_support::{Stop, N, QUORUM};
use stateright::{Checker, Model, Property};

// --- Extensions ----------------------------------------------------------

/// TTLs a round may ask for, in ticks.
const SHORT: u8 = 2;
const LONG: u8 = 6;
/// The acquisition's TTL: every key expires at this tick to begin with.
const FIRST_TTL: u8 = 3;
const MAX_ROUNDS: u8 = 3;
const MAX_TICK: u8 = 7;
const BELIEVED: &str = "a believed lease is held by a quorum";
const HOLD_KEPT: &str = "a hold is never cut short, its release landed or not";

/// A lease with a hold (`LockOptions::hold_at_least`): its release keeps the
/// keys until this tick.
const HOLD_END: u8 = MAX_TICK;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expire {
    /// `PEXPIRE key ttl GT`: only ever later.
    Gt,
    /// Plain `PEXPIRE key ttl`.
    Plain,
    /// `SET key value IFEQ value PX ttl` (plain) for rounds asking
    /// `ttl`, `PEXPIRE … GT` for the others; with `only_within`, only while
    /// the belief ends no later than `ttl` from now; with `cap`, the client
    /// believes no round longer than `ttl` once a native request was sent.
    Native {
        ttl: u8,
        only_within: bool,
        cap: bool,
    },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct LeaseState {
    tick: u8,
    /// Each instance's key expiry (`None`: the key is gone).
    keys: [Option<u8>; N],
    /// What the client believes: valid while `tick < valid_until`.
    valid_until: u8,
    /// Requests still on their way: (instance, TTL, round, native).
    in_flight: Vec<(usize, u8, u8, bool)>,
    /// A native (non-GT) request was sent.
    native_sent: bool,
    rounds: u8,
    /// The last round that succeeded.
    last_success: u8,
    /// A request landed after a later round had succeeded.
    landed_after_later: bool,
    /// The hold's release (`lua/release_hold.lua`) was sent: no round
    /// follows it.
    released: bool,
    /// Instances the hold's release is still on its way to, with the rest
    /// of the hold it carries (computed when it was sent).
    hold_in_flight: Vec<(usize, u8)>,
    /// A request landed after the hold's release.
    landed_after_release: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum LeaseAction {
    Tick,
    /// A round with this TTL; `now` applied in time, `late` on their way,
    /// the others never arrive.
    Round {
        ttl: u8,
        now: u8,
        late: u8,
    },
    /// The request in flight at this position lands.
    Land(usize),
    /// The holder releases a lease with a hold: `now` applied in time,
    /// `late` on their way.
    ReleaseHold {
        now: u8,
        late: u8,
    },
    /// The hold's release in flight at this position lands.
    LandHold(usize),
}

struct ExtendModel {
    expire: Expire,
    /// What a failed round does to the client's belief: nothing (the
    /// design: whatever it applied, now or late, only lengthened keys), or
    /// cut it to the round's own end (the previous code, for a plain
    /// `PEXPIRE` that may have shortened some keys).
    shorten_on_failure: bool,
    /// The lease has a hold: its release sets the keys to live until
    /// `HOLD_END`.
    hold: bool,
    /// Whether a lease with a hold may extend natively (the previous rule:
    /// a late `SET … PX` then cuts the hold short).
    native_with_hold: bool,
    /// Whether the acquire sets the keys of a lease with a hold to outlive
    /// the hold (the design, `Lifetime` in src/lock/acquire.rs), or to the
    /// TTL only, the hold resting on the release alone (the previous
    /// design: a lost release cut the hold short).
    keys_outlive_hold: bool,
    /// The one property a counterexample search looks for (the search then
    /// stops at the first violation), or `None`: every property.
    focus: Option<&'static str>,
    /// Extension rounds in one run: `MAX_ROUNDS`, or fewer with a hold (its
    /// release multiplies the space; two rounds, one of them landing after
    /// the release, are what a late extension needs).
    max_rounds: u8,
}

impl ExtendModel {
    /// A lease without a hold whose extensions use `expire`, a failed round
    /// leaving the belief as it was.
    fn new(expire: Expire) -> Self {
        ExtendModel {
            expire,
            shorten_on_failure: false,
            hold: false,
            native_with_hold: false,
            keys_outlive_hold: true,
            focus: None,
            max_rounds: MAX_ROUNDS,
        }
    }

    /// The same model, searched for a violation of `property` only.
    fn broken(self, property: &'static str) -> Self {
        ExtendModel {
            focus: Some(property),
            ..self
        }
    }

    /// The design's native extension: the lease's own TTL, only within the
    /// belief, longer rounds capped.
    fn native_design() -> Self {
        Self::new(Expire::Native {
            ttl: FIRST_TTL,
            only_within: true,
            cap: true,
        })
    }

    /// The same lease with a hold, extended natively or not.
    fn with_hold(self, native_with_hold: bool) -> Self {
        ExtendModel {
            hold: true,
            native_with_hold,
            max_rounds: 2,
            ..self
        }
    }

    fn apply(&self, s: &mut LeaseState, i: usize, ttl: u8, native: bool) -> bool {
        match s.keys[i] {
            // Not ours any more (expired): extend.lua, and SET … IFEQ, touch
            // nothing.
            None => false,
            Some(expiry) => {
                let asked = s.tick + ttl;
                s.keys[i] = Some(match self.expire {
                    Expire::Plain => asked,
                    Expire::Native { .. } if native => asked,
                    Expire::Gt | Expire::Native { .. } => expiry.max(asked),
                });
                true
            }
        }
    }

    /// `lua/release_hold.lua` on instance `i`: our key now expires `rest`
    /// ticks from when it runs (lengthened or shortened: it is ours).
    fn apply_hold(s: &mut LeaseState, i: usize, rest: u8) -> bool {
        match s.keys[i] {
            None => false,
            Some(_) => {
                s.keys[i] = Some(s.tick + rest);
                true
            }
        }
    }

    /// Whether a round asking `ttl` is sent as the native command.
    fn native(&self, s: &LeaseState, ttl: u8) -> bool {
        if self.hold && !self.native_with_hold {
            return false;
        }
        match self.expire {
            Expire::Native {
                ttl: native,
                only_within,
                ..
            } => native == ttl && (!only_within || s.valid_until <= s.tick + ttl),
            _ => false,
        }
    }

    /// The TTLs a round may ask for.
    fn ttls(&self) -> &'static [u8] {
        match self.expire {
            Expire::Gt | Expire::Plain => &[SHORT, LONG],
            Expire::Native { .. } => &[SHORT, FIRST_TTL, LONG],
        }
    }

    /// How long a successful round asking `ttl` is believed.
    fn believed(&self, s: &LeaseState, ttl: u8) -> u8 {
        match self.expire {
            Expire::Native {
                ttl: native,
                cap: true,
                ..
            } if s.native_sent => ttl.min(native),
            _ => ttl,
        }
    }
}

impl Model for ExtendModel {
    type State = LeaseState;
    type Action = LeaseAction;

    fn init_states(&self) -> Vec<LeaseState> {
        // The acquire's expiry: the TTL, plus the hold with one.
        let first = if self.hold && self.keys_outlive_hold {
            FIRST_TTL + HOLD_END
        } else {
            FIRST_TTL
        };
        vec![LeaseState {
            tick: 0,
            keys: [Some(first); N],
            valid_until: FIRST_TTL,
            in_flight: Vec::new(),
            native_sent: false,
            rounds: 0,
            last_success: 0,
            landed_after_later: false,
            released: false,
            hold_in_flight: Vec::new(),
            landed_after_release: false,
        }]
    }

    fn actions(&self, s: &LeaseState, actions: &mut Vec<LeaseAction>) {
        if s.tick < MAX_TICK {
            actions.push(LeaseAction::Tick);
        }
        // The watchdog and `extend()` only extend a lease they still hold,
        // and not once it is released.
        let believed = s.tick < s.valid_until && !s.released;
        if self.hold && believed {
            for now in 0..1u8 << N {
                for late in 0..1u8 << N {
                    if now & late == 0 {
                        actions.push(LeaseAction::ReleaseHold { now, late });
                    }
                }
            }
        }
        for k in 0..s.hold_in_flight.len() {
            actions.push(LeaseAction::LandHold(k));
        }
        if s.rounds < self.max_rounds && believed {
            for &ttl in self.ttls() {
                for now in 0..1u8 << N {
                    for late in 0..1u8 << N {
                        if now & late == 0 {
                            actions.push(LeaseAction::Round { ttl, now, late });
                        }
                    }
                }
            }
        }
        for k in 0..s.in_flight.len() {
            actions.push(LeaseAction::Land(k));
        }
    }

    fn next_state(&self, s: &LeaseState, action: LeaseAction) -> Option<LeaseState> {
        let mut s = s.clone();
        match action {
            LeaseAction::Tick => {
                s.tick += 1;
                for key in &mut s.keys {
                    if key.is_some_and(|expiry| expiry <= s.tick) {
                        *key = None;
                    }
                }
            }
            LeaseAction::Round { ttl, now, late } => {
                s.rounds += 1;
                let round = s.rounds;
                let native = self.native(&s, ttl);
                s.native_sent |= native;
                let confirmed = model_support::members(now, N)
                    .filter(|&i| self.apply(&mut s, i, ttl, native))
                    .count();
                s.in_flight
                    .extend(model_support::members(late, N).map(|i| (i, ttl, round, native)));
                // A set of requests, not a sequence: one order per set.
                s.in_flight.sort_unstable();
                if confirmed >= QUORUM {
                    s.valid_until = s.tick + self.believed(&s, ttl);
                    s.last_success = round;
                } else if self.shorten_on_failure {
                    s.valid_until = s.valid_until.min(s.tick + ttl);
                }
            }
            LeaseAction::Land(k) => {
                let (i, ttl, round, native) = s.in_flight.remove(k);
                s.landed_after_later |= round < s.last_success;
                s.landed_after_release |= s.released;
                self.apply(&mut s, i, ttl, native);
            }
            LeaseAction::ReleaseHold { now, late } => {
                s.released = true;
                let rest = HOLD_END - s.tick;
                let confirmed = model_support::members(now, N)
                    .filter(|&i| Self::apply_hold(&mut s, i, rest))
                    .count();
                s.hold_in_flight
                    .extend(model_support::members(late, N).map(|i| (i, rest)));
                s.hold_in_flight.sort_unstable();
                // Whether a quorum confirmed it or not: the hold stands.
                let _ = confirmed;
            }
            LeaseAction::LandHold(k) => {
                let (i, rest) = s.hold_in_flight.remove(k);
                Self::apply_hold(&mut s, i, rest);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let all = vec![
            // A released lease is believed no more (its release may even
            // shorten its own keys, to the rest of the hold).
            Property::<Self>::always(BELIEVED, |_, s| {
                s.released
                    || s.tick >= s.valid_until
                    || s.keys
                        .iter()
                        .filter(|k| k.is_some_and(|e| e > s.tick))
                        .count()
                        >= QUORUM
            }),
            Property::<Self>::sometimes("a late extension lands after a later round", |_, s| {
                s.landed_after_later
            }),
            // Until the hold's end, a quorum holds the key whatever became
            // of the release: lost (`now` and `late` empty), late, or never
            // sent (the holder crashed).
            Property::<Self>::always(HOLD_KEPT, |m, s| {
                !m.hold
                    || s.tick >= HOLD_END
                    || s.keys
                        .iter()
                        .filter(|k| k.is_some_and(|e| e > s.tick))
                        .count()
                        >= QUORUM
            }),
        ];
        all.into_iter()
            .filter(|p| self.focus.is_none_or(|name| p.name == name))
            .collect()
    }
}

/// The instances are interchangeable: states that differ only by their
/// numbering are one (symmetry reduction).
fn lease_representative(s: &LeaseState) -> LeaseState {
    let key = |i: usize| {
        let mut flying: Vec<(u8, u8, bool)> = s
            .in_flight
            .iter()
            .filter(|f| f.0 == i)
            .map(|f| (f.1, f.2, f.3))
            .collect();
        flying.sort_unstable();
        let holding: Vec<u8> = s
            .hold_in_flight
            .iter()
            .filter(|f| f.0 == i)
            .map(|f| f.1)
            .collect();
        (s.keys[i], flying, holding)
    };
    let mut order: Vec<usize> = (0..N).collect();
    order.sort_by_key(|&i| key(i));
    let mut r = s.clone();
    for (new, &old) in order.iter().enumerate() {
        r.keys[new] = s.keys[old];
    }
    for f in &mut r.in_flight {
        f.0 = order.iter().position(|&old| old == f.0).unwrap_or(f.0);
    }
    r.in_flight.sort_unstable();
    for f in &mut r.hold_in_flight {
        f.0 = order.iter().position(|&old| old == f.0).unwrap_or(f.0);
    }
    r.hold_in_flight.sort_unstable();
    r
}

// --- Clean-up ---------------------------------------------------------------

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Reply {
    Granted,
    /// The lock already held our value: a resend of an applied acquire.
    Ours,
    Refused,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct CleanState {
    /// The instance holds our lock value.
    locked: bool,
    void: bool,
    /// Copies of the acquire still on their way (at most two).
    acquires: u8,
    /// Copies that landed, in total.
    landed: u8,
    /// The last reply the client saw, if any.
    seen: Option<Reply>,
    decided: bool,
    /// The clean-up: sent and on its way.
    cleanup_pending: bool,
    cleanup_landed: bool,
    /// The client skipped the clean-up here (the instance refused).
    cleanup_skipped: bool,
    /// A copy of the acquire took the lock afresh after the clean-up (or
    /// the hold's release) had landed.
    rewritten: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum CleanAction {
    /// A copy of the acquire lands; its reply reaches the client or not.
    LandAcquire {
        reply_seen: bool,
    },
    /// A copy is lost for good.
    DropAcquire,
    /// The attempt fails: clean up here, or not.
    Fail,
    LandCleanup,
}

struct CleanupModel {
    /// release.lua leaves a void key the acquire honours: where the lock
    /// was not ours, and (a failed attempt's clean-up) where it deleted it.
    void_key: bool,
    /// The clean-up voids the attempt even where it deleted its lock.
    void_always: bool,
    /// A resend finding its own value counts as granted (not as held).
    resend_is_grant: bool,
    /// The attempt was granted and its holder released it within a hold:
    /// `lua/release_hold.lua` keeps a key that is ours (to the hold's end)
    /// and leaves the void key only where the key was not ours.
    hold_release: bool,
}

/// What the clean-up models check: once the clean-up (or the hold's
/// release) has landed, no copy of the acquire takes the lock afresh.
const NOT_REWRITTEN: &str = "no acquire takes the lock after its release landed";

impl Model for CleanupModel {
    type State = CleanState;
    type Action = CleanAction;

    fn init_states(&self) -> Vec<CleanState> {
        // Sent once, and possibly once more after a reset.
        [1, 2]
            .into_iter()
            .map(|copies| CleanState {
                locked: false,
                void: false,
                acquires: copies,
                landed: 0,
                seen: None,
                decided: false,
                cleanup_pending: false,
                cleanup_landed: false,
                cleanup_skipped: false,
                rewritten: false,
            })
            .collect()
    }

    fn actions(&self, s: &CleanState, actions: &mut Vec<CleanAction>) {
        if s.acquires > 0 {
            actions.push(CleanAction::LandAcquire { reply_seen: true });
            actions.push(CleanAction::LandAcquire { reply_seen: false });
            actions.push(CleanAction::DropAcquire);
        }
        if !s.decided {
            actions.push(CleanAction::Fail);
        }
        if s.cleanup_pending {
            actions.push(CleanAction::LandCleanup);
        }
    }

    fn next_state(&self, s: &CleanState, action: CleanAction) -> Option<CleanState> {
        let mut s = s.clone();
        match action {
            CleanAction::LandAcquire { reply_seen } => {
                s.acquires -= 1;
                s.landed += 1;
                let reply = if self.void_key && s.void {
                    Reply::Refused
                } else if s.locked {
                    Reply::Ours
                } else {
                    s.locked = true;
                    s.rewritten |= s.cleanup_landed;
                    Reply::Granted
                };
                if reply_seen && !s.decided {
                    s.seen = Some(reply);
                }
            }
            CleanAction::DropAcquire => s.acquires -= 1,
            CleanAction::Fail if self.hold_release => {
                // A holder's release goes to every instance.
                s.decided = true;
                s.cleanup_pending = true;
            }
            CleanAction::Fail => {
                s.decided = true;
                let refused = match s.seen {
                    Some(Reply::Refused) => true,
                    Some(Reply::Ours) => !self.resend_is_grant,
                    _ => false,
                };
                if refused {
                    s.cleanup_skipped = true;
                } else {
                    s.cleanup_pending = true;
                }
            }
            CleanAction::LandCleanup if self.hold_release => {
                // Ours: kept to the hold's end. Not ours: the void key.
                s.cleanup_pending = false;
                s.cleanup_landed = true;
                s.void |= self.void_key && !s.locked;
            }
            CleanAction::LandCleanup => {
                s.cleanup_pending = false;
                s.cleanup_landed = true;
                if s.locked {
                    s.locked = false;
                    s.void |= self.void_key && self.void_always;
                } else if self.void_key {
                    s.void = true;
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            // A hold's release keeps a key that is ours on purpose.
            Property::<Self>::always("no orphan once everything landed", |m, s| {
                let settled = s.decided && !s.cleanup_pending && s.acquires == 0;
                m.hold_release || !settled || !s.locked
            }),
            Property::<Self>::always(NOT_REWRITTEN, |_, s| !s.rewritten),
            Property::<Self>::sometimes("a clean-up overtakes its acquire", |_, s| {
                s.cleanup_landed && s.landed > 0 && s.void
            }),
        ]
    }
}

/// Searches every behaviour of `model` and asserts its properties.
fn assert_safe(label: &str, model: ExtendModel) {
    model_support::exhaustively(label, model, Some(lease_representative), None).assert_properties();
}

#[test]
#[ignore = "long model search (minutes): `cargo test --test model_lease -- --ignored`, run by .ci/run"]
fn extensions_never_cut_a_lease_the_client_believes_in() {
    assert_safe("extend with GT", ExtendModel::new(Expire::Gt));
}

#[test]
#[ignore = "long model search (minutes): `cargo test --test model_lease -- --ignored`, run by .ci/run"]
fn a_plain_pexpire_lets_a_late_short_extension_cut_the_lease() {
    let model = ExtendModel {
        shorten_on_failure: true,
        ..ExtendModel::new(Expire::Plain)
    }
    .broken(BELIEVED);
    let label = "extend with plain PEXPIRE";
    let (_, path) = model_support::counterexample(label, model, Stop::END, &[BELIEVED]);
    let actions = path.into_actions();
    assert!(
        actions.iter().any(|a| matches!(a, LeaseAction::Land(_))),
        "the counterexample needs an extension that lands late"
    );
}

#[test]
#[ignore = "long model search (minutes): `cargo test --test model_lease -- --ignored`, run by .ci/run"]
fn native_extensions_of_the_leases_own_ttl_never_cut_a_believed_lease() {
    assert_safe(
        "extend natively with the lease's TTL",
        ExtendModel::native_design(),
    );
}

/// The counterexample of a native variant that must fail, and whether a
/// native request landing late is part of it.
fn native_counterexample(only_within: bool, cap: bool) -> (Vec<LeaseAction>, bool) {
    let model = ExtendModel::new(Expire::Native {
        ttl: FIRST_TTL,
        only_within,
        cap,
    })
    .broken(BELIEVED);
    let label = format!("native extension, only within {only_within}, capped {cap}");
    let (_, path) = model_support::counterexample(&label, model, Stop::END, &[BELIEVED]);
    let states = path.clone().into_states();
    let actions = path.into_actions();
    let late_native = actions
        .iter()
        .zip(&states)
        .any(|(a, before)| matches!(a, LeaseAction::Land(k) if before.in_flight[*k].3));
    (actions, late_native)
}

#[test]
#[ignore = "long model search (minutes): `cargo test --test model_lease -- --ignored`, run by .ci/run"]
fn a_longer_round_believed_in_full_is_cut_by_a_late_native_extension() {
    let (actions, late_native) = native_counterexample(true, false);
    assert!(
        late_native,
        "the counterexample needs a native request landing late"
    );
    assert!(actions
        .iter()
        .any(|a| matches!(a, LeaseAction::Round { ttl: LONG, .. })));
}

#[test]
#[ignore = "long model search (minutes): `cargo test --test model_lease -- --ignored`, run by .ci/run"]
fn a_native_extension_sent_under_a_longer_belief_cuts_it() {
    // Even in time: SET … PX sets the expiry it is given, shorter or not.
    let (actions, _) = native_counterexample(false, true);
    assert!(actions
        .iter()
        .any(|a| matches!(a, LeaseAction::Round { ttl: LONG, .. })));
}

/// A lease with a hold, on servers with the native extension: the design
/// extends it only with `PEXPIRE … GT`, so an extension landing after the
/// hold's release only lengthens the keys.
#[test]
#[ignore = "long model search (minutes): `cargo test --test model_lease -- --ignored`, run by .ci/run"]
fn a_hold_is_never_cut_short_by_a_late_extension() {
    assert_safe(
        "a lease with a hold",
        ExtendModel::native_design().with_hold(false),
    );
}

/// A native extension of a lease with a hold (`SET … IFEQ … PX`, no GT),
/// landing in time or late, sets the keys back to the lease's TTL from
/// then, below the hold's end: why a lease with a hold never extends
/// natively.
#[test]
#[ignore = "long model search (minutes): `cargo test --test model_lease -- --ignored`, run by .ci/run"]
fn a_native_extension_cuts_the_hold() {
    let model = ExtendModel::native_design()
        .with_hold(true)
        .broken(HOLD_KEPT);
    let label = "native extension of a hold";
    let (_, path) = model_support::counterexample(label, model, Stop::END, &[HOLD_KEPT]);
    let states = path.clone().into_states();
    assert!(
        states.last().is_some_and(|s| s.native_sent),
        "the counterexample needs a native extension"
    );
}

#[test]
#[ignore = "long model search (minutes): `cargo test --test model_lease -- --ignored`, run by .ci/run"]
fn a_hold_resting_on_its_release_is_cut_short_when_the_release_is_lost() {
    let model = ExtendModel {
        keys_outlive_hold: false,
        ..ExtendModel::new(Expire::Gt).with_hold(false)
    }
    .broken(HOLD_KEPT);
    let label = "a hold resting on its release";
    let (_, path) = model_support::counterexample(label, model, Stop::END, &[HOLD_KEPT]);
    let actions = path.into_actions();
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, LeaseAction::LandHold(_))),
        "no release landed in the counterexample"
    );
}

#[test]
fn a_clean_up_never_leaves_an_orphan_lock() {
    let model = CleanupModel {
        void_key: true,
        void_always: true,
        resend_is_grant: true,
        hold_release: false,
    };
    model_support::exhaustively("clean-up with void key", model, None, None).assert_properties();
}

#[test]
fn without_the_void_key_a_clean_up_overtaken_by_its_acquire_leaves_an_orphan() {
    let model = CleanupModel {
        void_key: false,
        void_always: false,
        resend_is_grant: true,
        hold_release: false,
    };
    let label = "clean-up without the void key";
    // an acquire landing after its clean-up must leave an orphan
    model_support::counterexample(
        label,
        model,
        Stop::END,
        &["no orphan once everything landed"],
    );
}

/// A void key only where the lock was not ours is not enough: the first
/// copy of the acquire lands (its reply lost), the clean-up deletes it, and
/// the resent copy lands after that.
#[test]
fn a_clean_up_that_voids_only_where_it_found_nothing_leaves_an_orphan_after_a_resend() {
    let model = CleanupModel {
        void_key: true,
        void_always: false,
        resend_is_grant: true,
        hold_release: false,
    };
    let label = "clean-up voiding only where it found nothing";
    // a resend landing after the clean-up must leave an orphan
    model_support::counterexample(
        label,
        model,
        Stop::END,
        &["no orphan once everything landed"],
    );
}

#[test]
fn a_resend_counted_as_held_skips_the_clean_up_and_leaves_an_orphan() {
    let model = CleanupModel {
        void_key: true,
        void_always: true,
        resend_is_grant: false,
        hold_release: false,
    };
    let label = "clean-up, a resend counted as held";
    // a resend read as 'held' must leave an orphan
    let (_, path) = model_support::counterexample(
        label,
        model,
        Stop::END,
        &["no orphan once everything landed"],
    );
    let actions = path.into_actions();
    assert!(
        actions
            .iter()
            .filter(|a| matches!(a, CleanAction::LandAcquire { .. }))
            .count()
            >= 2,
        "the counterexample needs the resend"
    );
}

/// A holder's release within a hold (`lua/release_hold.lua`), its acquire
/// sent once or twice and landing before or after it, or never: a key that
/// is ours is kept to the hold's end, and where the key was not ours the
/// void key refuses the acquire landing later, so no copy takes the lock
/// afresh after the release.
#[test]
fn a_hold_release_leaves_the_void_key_where_its_acquire_had_not_landed() {
    let model = CleanupModel {
        void_key: true,
        void_always: false,
        resend_is_grant: true,
        hold_release: true,
    };
    model_support::exhaustively("hold release with void key", model, None, None)
        .assert_properties();
}

/// Without the void key, the hold's release overtakes its acquire, which
/// then takes the lock for a holder that has released it.
#[test]
fn a_hold_release_without_the_void_key_is_overtaken_by_its_acquire() {
    let model = CleanupModel {
        void_key: false,
        void_always: false,
        resend_is_grant: true,
        hold_release: true,
    };
    let label = "hold release without the void key";
    // an acquire landing after the hold's release must take the lock
    model_support::counterexample(label, model, Stop::END, &[NOT_REWRITTEN]);
}
