//! Model check of the fencing-token scheme in `design.md`, section "Fencing
//! tokens" (steps 1–4), with [stateright].
//!
//! This is an abstract model: there is no Redis and no code from the crate in
//! here. It models what the acquire pipeline (`src/acquire.rs`: native
//! `SET fence S NX`, `SET lock NX GET`, `INCR fence`, `PEXPIRE fence`) and
//! `lua/fence_raise.lua` do to the per-instance fence counters, and how the
//! client turns the replies into a token, and checks that the tokens handed
//! out to successive grants of one resource strictly increase.
//!
//! # The model
//!
//! * N = 3 independent instances, quorum 2.
//! * Per instance: a fence counter (`None` = the key does not exist) and the
//!   lock key (free, held by the client currently acquiring, or held by
//!   someone else: a past holder whose lease has not been released or has not
//!   expired yet).
//! * A global clock, used to seed a missing counter: the seed `S` the client
//!   sends is its reading of the instances' clocks in microseconds (`TIME`
//!   read at connect time, carried forward on the client's monotonic
//!   clock), and the raise script seeds from `TIME` itself. The design's
//!   assumption is that clocks are roughly right, a resource is locked fewer
//!   than a million times a second and a counter is not lost within about a
//!   millisecond of its creation, so the clock always runs ahead of every
//!   counter value and every token issued so far. The model encodes exactly that assumption and nothing stronger:
//!   after every step the clock is moved to at least one more than every
//!   counter and every token seen. (Moving it only as far as needed keeps the
//!   state space small; a clock further ahead only leaves more room.)
//! * Grants are sequential: a client starts acquiring only when the previous
//!   attempt is over (its token handed out, or the attempt given up). That is
//!   the premise of the property: "grant A's token was handed out before grant
//!   B began".
//!
//! Steps (all nondeterministic):
//!
//! * `Acquire { granted, bumped, seeded, mid_loss }`: `SET lock NX`
//!   succeeds on `granted`, any non-empty subset of the instances whose lock
//!   key is free. The pipeline is not a transaction: `INCR` runs on every
//!   instance the request reached, `bumped` (the granting ones and any
//!   others: refusing instances, or ones whose reply was lost), each after
//!   `SET fence S NX` created a missing counter at `S`. `S` is the clock
//!   when the client has read an instance clock (`seeded`), else 0 (a client
//!   whose connections are still being set up). `mid_loss`: one bumped
//!   instance loses its data between the seed and the `INCR` (another
//!   client's FLUSHALL can run between two commands of a pipeline), so its
//!   `INCR` recreates the counter at 1, and its lock key is kept or lost.
//!   Fewer than a quorum granted: the attempt fails and releases, but the
//!   bumps stay (this is how counters drift apart in practice). A quorum:
//!   each granting counter below `FLOOR` (one no seed reached) counts as the
//!   client's current clock reading plus that counter; the token is the
//!   maximum; if the granting counters are not all equal to it, a raise
//!   round is needed before the token can be handed out.
//! * `Raise { now, late }`: the raise round. Every instance in `now` gets its
//!   counter raised to at least the token, never lowered. A missing counter
//!   is first seeded from the clock, like in the acquire: step 4 says so of
//!   every counter that does not exist, and `lua/fence_raise.lua` does it.
//!   (An earlier version set a missing counter to the token; the last variant
//!   below shows that this breaks the property.) The grant stands only if
//!   at least a quorum of the instances in `now` still hold our lock;
//!   otherwise the attempt is given up and released. The client decides as
//!   soon as the outcome is known and does not wait for slow instances: the
//!   raise request to instance `late` may still be queued or in flight and
//!   land at any later point (`LateRaise`), possibly after the next grant, or
//!   after that instance lost its data. (One such straggler at a time keeps
//!   the search small; a late acquire only bumps a counter, which is
//!   harmless here, so it is not modelled.)
//! * `HandOut`: no raise needed (all granting counters agreed), the token is
//!   handed out.
//! * `GiveUp`: the attempt runs out of validity or wait budget before the
//!   token is handed out and releases.
//! * `LockGone(i)`: the lock key on instance `i` disappears (released, or the
//!   lease expired, possibly in the middle of someone's acquisition).
//! * `DataLost(i)`: instance `i` loses its data (restart without fsync,
//!   FLUSHALL, eviction): counter and lock key are gone.
//! * `CounterExpired(i)`: the idle counter on instance `i` expires (only
//!   while no lock is held there).
//!
//! Acquisition attempts and faults are bounded so that the search is
//! exhaustive and quick.
//!
//! # Variants
//!
//! * the design as written (raise round, counters seeded from the clock):
//!   the property holds in every reachable state;
//! * without the raise round: the checker finds tokens going backwards;
//! * with missing counters restarting from 0 instead of the clock (a plain
//!   `INCR`, no seed and no floor rule): the checker finds tokens going
//!   backwards after a counter is lost;
//! * with the seed but without the floor rule (the client trusting a counter
//!   that no seed reached): the checker finds tokens going backwards;
//! * with a raise that sets a missing counter to its token instead of seeding
//!   it from the clock first: the checker finds tokens going backwards when a
//!   straggling raise of an earlier attempt lands on an instance that lost
//!   its data.
//!
//! [stateright]: https://docs.rs/stateright

use std::fmt;
use std::time::Instant;

use stateright::{Checker, Expectation, HasDiscoveries, Model, Property};

/// Number of independent instances.
const N: usize = 3;
/// Majority of `N`.
const QUORUM: usize = N / 2 + 1;
/// Counters below this were created by an `INCR` that no seed reached
/// (`SEED_FLOOR` in `src/acquire.rs`, 2^40 there). Every clock reading is
/// at least this, so the model's clock starts here.
const FLOOR: u64 = 100;

/// Name of the safety property checked in every variant.
const TOKENS_INCREASE: &str = "tokens strictly increase in grant order";
/// A token was handed out after a raise round (the model exercises step 3).
const RAISED_GRANT: &str = "a token is handed out after a raise round";
/// A token was handed out after a counter went missing since the previous
/// token (the model exercises step 4).
const GRANT_AFTER_LOSS: &str = "a token is handed out after a counter was lost";
/// A token was handed out although a granting counter was below the floor
/// (no seed reached it: an unseeded attempt, or data lost mid-pipeline).
const FLOOR_GRANT: &str = "a token is handed out from a counter below the floor";
/// The model reaches the maximum number of grants.
const ALL_GRANTS: &str = "every grant is handed out";

/// A set of instances, as a bit mask.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Set(u8);

impl Set {
    fn contains(self, i: usize) -> bool {
        self.0 & (1 << i) != 0
    }

    fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    fn members(self) -> impl Iterator<Item = usize> {
        (0..N).filter(move |&i| self.contains(i))
    }

    /// Every subset of the `N` instances, the empty one included.
    fn all() -> impl Iterator<Item = Set> {
        (0..1u8 << N).map(Set)
    }

    fn is_subset_of(self, other: Set) -> bool {
        self.0 & !other.0 == 0
    }
}

impl fmt::Debug for Set {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.members()).finish()
    }
}

/// The lock key of the resource on one instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Lock {
    Free,
    /// Set by the client whose acquisition is in progress.
    Ours,
    /// Held by someone else (a past grant's holder).
    Other,
}

/// An acquisition that reached a quorum and has not handed out its token yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Pending {
    token: u64,
    /// The granting counters did not all agree.
    needs_raise: bool,
    /// A granting counter was below `FLOOR` (no seed reached it).
    below_floor: bool,
}

/// One token handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Issued {
    token: u64,
    /// It went through a raise round.
    after_raise: bool,
    /// Faults (lost counters) that had happened when it was handed out.
    faults_before: u8,
    /// A granting counter was below `FLOOR`.
    below_floor: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    counters: [Option<u64>; N],
    locks: [Lock; N],
    pending: Option<Pending>,
    /// Tokens handed out, in grant order.
    issued: Vec<Issued>,
    /// The instances' clock, used to seed missing counters.
    clock: u64,
    /// A raise request still in flight: instance and token.
    late_raise: Option<(usize, u64)>,
    attempts: u8,
    faults: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    Acquire {
        granted: Set,
        bumped: Set,
        seeded: bool,
        /// An instance that lost its data between the seed and the `INCR`,
        /// and whether its lock key (if it granted) survived.
        mid_loss: Option<(usize, bool)>,
    },
    Raise {
        now: Set,
        late: Option<usize>,
    },
    LateRaise,
    HandOut,
    GiveUp,
    LockGone(usize),
    DataLost(usize),
    CounterExpired(usize),
}

/// Where a missing counter starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seed {
    /// From the clock, as read by the client (the design).
    Clock,
    /// From 0, as a plain `INCR` on a missing key would, and the client
    /// trusts whatever the counters say.
    Zero,
}

/// What a raise does to a counter that does not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RaiseMissing {
    /// Seed it like the acquire does (step 4 applies to every missing
    /// counter), then raise it to at least the token.
    Seed,
    /// Set it to the token: what an earlier `lua/fence_raise.lua` did. The
    /// script now seeds a missing counter from the clock (`Seed`), and
    /// `raise_setting_missing_counter_to_token_breaks_monotonicity` shows why.
    SetToToken,
}

#[derive(Clone, Debug)]
struct FencingModel {
    /// Step 3 of the design: raise the counters when the granting counters
    /// disagree. `false` hands out the maximum as is.
    raise_round: bool,
    seed: Seed,
    /// The client counts a granting counter below `FLOOR` as its clock
    /// reading plus that counter. `false` trusts it as it is.
    floor_rule: bool,
    /// Explore what the pipeline not being a transaction allows: requests
    /// that bump counters without granting, unseeded attempts, data lost
    /// between the seed and the `INCR`. Off only to keep the searches for
    /// the other variants' counterexamples short (they need none of it).
    pipeline_faults: bool,
    /// What the raise does with a missing counter.
    raise_missing: RaiseMissing,
    /// Most tokens handed out in one run.
    max_grants: usize,
    /// Most `Acquire` steps in one run (successful or not).
    max_attempts: u8,
    /// Most `DataLost` + `CounterExpired` steps in one run.
    max_faults: u8,
}

impl FencingModel {
    /// The design as written (step 4 applied to every missing counter).
    fn design() -> Self {
        FencingModel {
            raise_round: true,
            seed: Seed::Clock,
            floor_rule: true,
            pipeline_faults: true,
            raise_missing: RaiseMissing::Seed,
            max_grants: 3,
            max_attempts: 4,
            max_faults: 1,
        }
    }

    /// Where a missing counter starts.
    fn seed(&self, state: &State) -> u64 {
        match self.seed {
            Seed::Clock => state.clock,
            Seed::Zero => 0,
        }
    }

    /// The raise script on instance `i`: raise the counter to at least
    /// `token`, never lower it. (Whether the lock is still ours there is read
    /// by the caller.)
    fn raise(&self, state: &mut State, i: usize, token: u64) {
        let current = match (state.counters[i], self.raise_missing) {
            (Some(c), _) => c,
            (None, RaiseMissing::Seed) => self.seed(state),
            (None, RaiseMissing::SetToToken) => 0,
        };
        state.counters[i] = Some(current.max(token));
    }

    fn free(state: &State) -> Set {
        Set(Self::mask(state, |_, l| l == Lock::Free))
    }

    fn mask(state: &State, pick: impl Fn(usize, Lock) -> bool) -> u8 {
        (0..N)
            .filter(|&i| pick(i, state.locks[i]))
            .fold(0, |m, i| m | 1 << i)
    }

    /// Release our lock keys (compare-and-delete on all instances).
    fn release_ours(state: &mut State) {
        for l in &mut state.locks {
            if *l == Lock::Ours {
                *l = Lock::Free;
            }
        }
    }

    fn hand_out(state: &mut State, p: Pending, after_raise: bool) {
        state.issued.push(Issued {
            token: p.token,
            after_raise,
            faults_before: state.faults,
            below_floor: p.below_floor,
        });
        // Our lock keys now belong to a holder of a past grant.
        for l in &mut state.locks {
            if *l == Lock::Ours {
                *l = Lock::Other;
            }
        }
        state.pending = None;
    }
}

/// The `always` property: each token is strictly greater than the one before.
fn tokens_strictly_increase(state: &State) -> bool {
    state.issued.windows(2).all(|w| w[0].token < w[1].token)
}

impl Model for FencingModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        // A resource never locked before: no counters, no locks.
        vec![State {
            counters: [None; N],
            locks: [Lock::Free; N],
            pending: None,
            issued: Vec::new(),
            clock: FLOOR,
            late_raise: None,
            attempts: 0,
            faults: 0,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        match state.pending {
            None => {
                if state.attempts < self.max_attempts && state.issued.len() < self.max_grants {
                    let free = Self::free(state);
                    let wide = self.pipeline_faults;
                    let may_lose = wide && state.faults < self.max_faults;
                    for granted in Set::all() {
                        if granted.len() == 0 || !granted.is_subset_of(free) {
                            continue;
                        }
                        let bumps = Set::all().filter(|b| granted.is_subset_of(*b));
                        for bumped in bumps.filter(|&b| wide || b == granted) {
                            for seeded in [true, false].into_iter().filter(|&x| wide || x) {
                                let mut losses = vec![None];
                                if may_lose {
                                    for i in bumped.members() {
                                        losses.push(Some((i, false)));
                                        if granted.contains(i) {
                                            losses.push(Some((i, true)));
                                        }
                                    }
                                }
                                for mid_loss in losses {
                                    actions.push(Action::Acquire {
                                        granted,
                                        bumped,
                                        seeded,
                                        mid_loss,
                                    });
                                }
                            }
                        }
                    }
                }
            }
            Some(p) => {
                if p.needs_raise {
                    for now in Set::all() {
                        actions.push(Action::Raise { now, late: None });
                        if state.late_raise.is_none() {
                            for i in (0..N).filter(|&i| !now.contains(i)) {
                                actions.push(Action::Raise { now, late: Some(i) });
                            }
                        }
                    }
                } else {
                    actions.push(Action::HandOut);
                }
                actions.push(Action::GiveUp);
            }
        }
        if state.late_raise.is_some() {
            actions.push(Action::LateRaise);
        }
        for i in 0..N {
            if state.locks[i] != Lock::Free {
                actions.push(Action::LockGone(i));
            }
        }
        if state.faults < self.max_faults {
            for i in 0..N {
                if state.counters[i].is_some() {
                    actions.push(Action::DataLost(i));
                    if state.locks[i] == Lock::Free {
                        actions.push(Action::CounterExpired(i));
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Acquire {
                granted,
                bumped,
                seeded,
                mid_loss,
            } => {
                s.attempts += 1;
                // On each instance the request reached: SET fence S NX, then
                // SET lock NX on the granting ones, then INCR.
                let seed = if seeded { self.seed(&s) } else { 0 };
                let mut returned = Vec::new();
                for i in bumped.members() {
                    let c = match mid_loss {
                        Some((lost, kept)) if lost == i => {
                            // Data lost after the seed: INCR starts from 0.
                            s.faults += 1;
                            s.locks[i] = if granted.contains(i) && kept {
                                Lock::Ours
                            } else {
                                Lock::Free
                            };
                            1
                        }
                        _ => {
                            if granted.contains(i) {
                                s.locks[i] = Lock::Ours;
                            }
                            s.counters[i].unwrap_or(seed) + 1
                        }
                    };
                    s.counters[i] = Some(c);
                    if granted.contains(i) {
                        returned.push(c);
                    }
                }
                if granted.len() < QUORUM {
                    // No quorum: release everywhere and retry later. The
                    // counter bumps stay.
                    Self::release_ours(&mut s);
                } else {
                    // The client's clock reading when it decides: it has
                    // read the clock of every instance that answered.
                    let now = self.seed(&s);
                    let effective = |c: u64| {
                        if self.floor_rule && c < FLOOR {
                            now + c
                        } else {
                            c
                        }
                    };
                    let token = returned
                        .iter()
                        .map(|&c| effective(c))
                        .max()
                        .expect("a quorum is not empty");
                    let agree = returned.iter().all(|&c| c == token);
                    s.pending = Some(Pending {
                        token,
                        needs_raise: self.raise_round && !agree,
                        below_floor: returned.iter().any(|&c| c < FLOOR),
                    });
                }
            }
            Action::Raise { now, late } => {
                let p = s.pending.expect("raise only while acquiring");
                let mut confirmed = 0;
                for i in now.members() {
                    self.raise(&mut s, i, p.token);
                    if s.locks[i] == Lock::Ours {
                        confirmed += 1;
                    }
                }
                s.late_raise = late.map(|i| (i, p.token));
                if confirmed >= QUORUM {
                    Self::hand_out(&mut s, p, true);
                } else {
                    Self::release_ours(&mut s);
                    s.pending = None;
                }
            }
            Action::HandOut => {
                let p = s.pending.expect("hand out only while acquiring");
                Self::hand_out(&mut s, p, false);
            }
            Action::GiveUp => {
                Self::release_ours(&mut s);
                s.pending = None;
            }
            Action::LateRaise => {
                let (i, token) = s.late_raise.take().expect("a raise in flight");
                self.raise(&mut s, i, token);
            }
            Action::LockGone(i) => s.locks[i] = Lock::Free,
            Action::DataLost(i) => {
                s.faults += 1;
                s.counters[i] = None;
                s.locks[i] = Lock::Free;
            }
            Action::CounterExpired(i) => {
                s.faults += 1;
                s.counters[i] = None;
            }
        }
        // The clock assumption: the clock stays ahead of every counter value
        // and every token issued so far.
        let highest = s
            .counters
            .iter()
            .flatten()
            .copied()
            .chain(s.issued.iter().map(|t| t.token))
            .max()
            .unwrap_or(0);
        s.clock = s.clock.max(highest + 1);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always(TOKENS_INCREASE, |_, s| tokens_strictly_increase(s)),
            Property::<Self>::sometimes(RAISED_GRANT, |_, s| {
                s.issued.iter().any(|t| t.after_raise)
            }),
            Property::<Self>::sometimes(GRANT_AFTER_LOSS, |_, s| {
                s.issued
                    .windows(2)
                    .any(|w| w[1].faults_before > w[0].faults_before)
            }),
            Property::<Self>::sometimes(FLOOR_GRANT, |_, s| s.issued.iter().any(|t| t.below_floor)),
            Property::<Self>::sometimes(ALL_GRANTS, |m, s| s.issued.len() == m.max_grants),
        ]
    }
}

/// The instances are interchangeable: states that differ only by a
/// renumbering of the instances are equivalent. The representative lists the
/// instances in a fixed order (symmetry reduction).
fn representative(s: &State) -> State {
    let key = |i: usize| {
        let late = s.late_raise.filter(|&(j, _)| j == i).map(|(_, t)| t);
        (s.counters[i], s.locks[i] as u8, late)
    };
    let mut order: Vec<usize> = (0..N).collect();
    order.sort_by_key(|&i| key(i));
    let mut r = s.clone();
    for (new, &old) in order.iter().enumerate() {
        r.counters[new] = s.counters[old];
        r.locks[new] = s.locks[old];
    }
    r.late_raise = s.late_raise.map(|(j, t)| {
        let new = order
            .iter()
            .position(|&old| old == j)
            .expect("a permutation");
        (new, t)
    });
    r
}

/// Exhaustive check (depth first, with symmetry reduction).
fn check_all(model: FencingModel) -> impl Checker<FencingModel> {
    let label = format!("{model:?}");
    let start = Instant::now();
    let checker = model
        .checker()
        .symmetry_fn(representative)
        .spawn_dfs()
        .join();
    report(&label, start, &checker);
    checker
}

/// Breadth-first check that stops soon after the first counterexample, so the
/// counterexample is one of the shortest.
fn find_counterexample(model: FencingModel) -> impl Checker<FencingModel> {
    let label = format!("{model:?}");
    let start = Instant::now();
    let checker = model
        .checker()
        .finish_when(HasDiscoveries::AnyFailures)
        .spawn_bfs()
        .join();
    report(&label, start, &checker);
    checker
}

fn report(label: &str, start: Instant, checker: &impl Checker<FencingModel>) {
    println!(
        "{label}\n  {} unique states ({} generated), max depth {}, {:.2?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        start.elapsed(),
    );
}

type Steps = Vec<(State, Option<Action>)>;

/// The discovery for property `name`, cut at the first state that makes it a
/// discovery (a state breaking an `always` property, or satisfying a
/// `sometimes` one): the checker keeps the path to some such state, which
/// may lie past the first one on that path.
fn discovery(checker: &impl Checker<FencingModel>, name: &'static str) -> Option<Steps> {
    let property = checker.model().property(name);
    let found = |s: &State| {
        let holds = (property.condition)(checker.model(), s);
        match property.expectation {
            Expectation::Sometimes => holds,
            Expectation::Always | Expectation::Eventually => !holds,
        }
    };
    let mut steps = checker.discovery(name)?.into_vec();
    let first = steps
        .iter()
        .position(|(s, _)| found(s))
        .expect("a discovery path reaches a state that makes it one");
    steps.truncate(first + 1);
    steps[first].1 = None;
    Some(steps)
}

/// Prints a discovery step by step: each action and the state it leads to.
fn print_path(name: &str, steps: &[(State, Option<Action>)]) {
    println!("Discovery for {name:?} ({} steps):", steps.len() - 1);
    println!("  init: {}", describe(&steps[0].0));
    for pair in steps.windows(2) {
        let action = pair[0]
            .1
            .as_ref()
            .expect("every step but the last has an action");
        println!("  {action:?}\n    -> {}", describe(&pair[1].0));
    }
}

fn describe(s: &State) -> String {
    let counters: Vec<String> = s
        .counters
        .iter()
        .map(|c| c.map_or_else(|| "-".to_string(), |c| c.to_string()))
        .collect();
    let tokens: Vec<u64> = s.issued.iter().map(|t| t.token).collect();
    format!(
        "counters [{}], locks {:?}, pending {:?}, raise in flight {:?}, tokens {:?}, clock {}",
        counters.join(", "),
        s.locks,
        s.pending,
        s.late_raise,
        tokens,
        s.clock
    )
}

/// The design as written (raise round, counters seeded from the clock) keeps
/// tokens strictly increasing, in every reachable state: up to three grants,
/// four acquisition attempts (so failed, minority-only attempts and grants on
/// different quorums that make the counters drift apart), leases released or
/// expiring at any point (including in the middle of an acquisition, so a
/// raise round may not be confirmed), a raise request that lands late, and
/// one lost or expired counter.
///
/// Why it holds: when a token is handed out, a quorum of counters is at least
/// that token (either all granting counters returned it, or a quorum confirmed
/// the raise). The next grant's quorum overlaps that quorum in at least one
/// instance, whose counter either only went up since (raises, late or not,
/// never lower it; the grant bumps it once more) or went missing and is
/// seeded from a clock that is already past every token issued.
///
/// The `sometimes` properties show the check is not vacuous: a token is handed
/// out after a raise round, after a lost counter, and all three grants happen.
/// The tests below show the `always` property does fail when one ingredient
/// is taken away.
#[test]
fn fencing_tokens_strictly_increase_with_raise_round() {
    let checker = check_all(FencingModel::design());
    assert!(checker.is_done(), "the search must be exhaustive");
    for name in [RAISED_GRANT, GRANT_AFTER_LOSS, FLOOR_GRANT] {
        checker.assert_any_discovery(name);
        print_path(name, &discovery(&checker, name).expect("asserted above"));
    }
    checker.assert_properties();
}

/// Without the raise round (step 3) the token is just the maximum of the
/// granting counters, and the checker finds tokens going backwards (or
/// repeating), even with no counter ever lost: counters drift apart (a
/// minority-only attempt, or a grant on a different quorum), a grant reads the
/// high counter of one instance, and the next grant's quorum overlaps the
/// previous one only in an instance whose counter is still low. The quorum
/// overlap gives an increase only if the overlapping instance was already at
/// least the previous token, and the raise round is what makes that so.
#[test]
fn without_raise_round_tokens_can_go_backwards() {
    let model = FencingModel {
        raise_round: false,
        max_faults: 0,
        pipeline_faults: false,
        ..FencingModel::design()
    };
    let checker = find_counterexample(model);
    let steps = discovery(&checker, TOKENS_INCREASE)
        .expect("without the raise round the checker must find a counterexample");
    print_path(TOKENS_INCREASE, &steps);
    let last = &steps.last().expect("a path has a state").0;
    assert!(!tokens_strictly_increase(last));
    assert_eq!(last.faults, 0, "drift alone breaks it");
    assert!(last.issued.iter().all(|t| !t.after_raise));
}

/// If a missing counter restarted from 0 (a plain `INCR`) instead of being
/// seeded from the instance clock (step 4), losing a counter (restart without
/// fsync, FLUSHALL, eviction, idle expiry) sends tokens backwards even with
/// the raise round: the instance where the next quorum overlaps the previous
/// one no longer remembers anything, and the other granting counters may be
/// just as low. Seeding from a clock that is ahead of every token issued is
/// what keeps a fresh counter above them.
///
/// The same variant with no counter loss passes: the raise round alone covers
/// counters that never went missing, so the clock seed is what covers loss.
#[test]
fn counter_reset_to_zero_breaks_monotonicity() {
    let model = FencingModel {
        seed: Seed::Zero,
        floor_rule: false,
        pipeline_faults: false,
        ..FencingModel::design()
    };
    let checker = find_counterexample(model.clone());
    let steps = discovery(&checker, TOKENS_INCREASE)
        .expect("with counters restarting from 0 the checker must find a counterexample");
    print_path(TOKENS_INCREASE, &steps);
    let last = &steps.last().expect("a path has a state").0;
    assert!(!tokens_strictly_increase(last));
    assert!(last.faults > 0, "the counterexample loses a counter");

    let without_loss = check_all(FencingModel {
        max_faults: 0,
        ..model
    });
    assert!(without_loss.is_done());
    without_loss.assert_no_discovery(TOKENS_INCREASE);
}

/// Step 4 applies to every script that may create the counter, the raise
/// included. A raise that sets a missing counter to its token (instead of
/// seeding it from the clock and then raising it to at least the token) lets
/// an old token re-enter: a raise request of an earlier attempt that is still
/// queued or in flight (the client decided without waiting for that
/// instance) lands after the instance lost its data, and recreates the
/// counter below the token handed out since. If the next grant's quorum
/// overlaps the previous one only there, its token is not above the previous
/// one. Counters "going backwards" is exactly what the design's argument
/// rules out, and a straggler makes it happen without any clock misbehaving.
#[test]
fn raise_setting_missing_counter_to_token_breaks_monotonicity() {
    let model = FencingModel {
        raise_missing: RaiseMissing::SetToToken,
        pipeline_faults: false,
        ..FencingModel::design()
    };
    let checker = find_counterexample(model.clone());
    let steps = discovery(&checker, TOKENS_INCREASE)
        .expect("a raise that recreates a lost counter at an old token must break monotonicity");
    print_path(TOKENS_INCREASE, &steps);
    let last = &steps.last().expect("a path has a state").0;
    assert!(!tokens_strictly_increase(last));
    assert!(last.faults > 0, "the counterexample loses a counter");
    assert!(
        steps
            .iter()
            .any(|(_, a)| matches!(a, Some(Action::LateRaise))),
        "the counterexample needs a straggling raise"
    );

    // With no lost counter, setting a missing counter to the token is only
    // reached for counters that never existed, and that is harmless.
    let without_loss = check_all(FencingModel {
        max_faults: 0,
        ..model
    });
    assert!(without_loss.is_done());
    without_loss.assert_no_discovery(TOKENS_INCREASE);
}

/// The acquire pipeline is not a transaction, and a client may send its
/// first requests before it has read any instance clock (seed 0): a counter
/// can then be created by `INCR` alone, at 1. Trusting such a counter sends
/// tokens backwards once the instance where the next quorum overlaps the
/// previous one lost its data. Counting it as the client's clock reading
/// plus the counter (and raising the stored counter to the token) is what
/// keeps the design safe.
#[test]
fn trusting_counters_below_the_floor_breaks_monotonicity() {
    // Two grants are enough to show it, and keep the breadth-first search
    // short.
    let model = FencingModel {
        floor_rule: false,
        max_grants: 2,
        max_attempts: 3,
        ..FencingModel::design()
    };
    let checker = find_counterexample(model);
    let steps = discovery(&checker, TOKENS_INCREASE)
        .expect("trusting unseeded counters must break monotonicity");
    print_path(TOKENS_INCREASE, &steps);
    let last = &steps.last().expect("a path has a state").0;
    assert!(!tokens_strictly_increase(last));
    assert!(last.issued.iter().any(|t| t.below_floor));
}
