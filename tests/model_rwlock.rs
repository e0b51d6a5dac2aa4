//! Model check of the reader-writer lock (`lua/rw_acquire.lua`,
//! `lua/rw_release.lua`, `lua/fence_raise.lua` and what each attempt's
//! client decides), with [stateright].
//!
//! An abstract model, with no Redis and no code from the crate, of one
//! lock on three instances, quorum two. Each instance holds the `writer`
//! key (free, or one attempt's value), the `readers` (a set of attempts'
//! values, each entry with its own expiry), the `intent` key (free, or the
//! value of a writer waiting for readers to leave) and the fencing
//! `counter`, shared by reads and writes. Each attempt is one client's, to
//! read or to write, with its own value.
//!
//! # What may happen
//!
//! * **The scripts**, each atomic on one instance. `acquire(read, v)`:
//!   refused if `v` is void here, or another writer holds the lock, or a
//!   writer's intent is set and `v` is not already a reader; otherwise `v`
//!   joins the readers and gets the counter plus one (the counter as it is
//!   when `v` was there already: a resend). `acquire(write, v)`: refused
//!   if `v` is void, or another writer holds the lock; refused, with the
//!   intent set to `v` if it is free, while readers hold it; otherwise the
//!   writer is `v`, the intent cleared if it was `v`, and the token the
//!   counter plus one (as it is for a resend). `release(v)`: deletes the
//!   writer key and the reader entry holding `v` and the intent if it is
//!   `v`; marks `v` void where neither key held it, and always for a failed
//!   attempt's clean-up (`ARGV[3]` of `lua/rw_release.lua`). A void mark
//!   outlives every request of the run (it lives one TTL; what an acquire
//!   landing later can do is bounded in `tests/model_grants.rs`).
//!   `raise(v, t)`: the counter becomes at least `t` if `v` still holds
//!   (writer or reader), which it confirms.
//! * **The client** sends its acquire to every instance. It decides on the
//!   grants of any quorum it heard (a reply lost, or too late, is a grant
//!   it does not count): the token is the highest of their answers, handed
//!   out at once if a quorum of them answered it, otherwise after a raise
//!   round to every instance that a quorum confirms. It gives up at any
//!   time before (refusals, timeouts) and sends its clean-up, `release(v)`,
//!   to every instance. A holder stops at any time (it releases).
//! * **Requests** land on each instance at any later point — after their
//!   attempt decided or gave up, after other attempts' requests — or
//!   never. `duplicates` acquires land twice (a resend after a reset;
//!   either reply may be the one the client keeps). A release or raise
//!   landing twice adds nothing: the second only removes the attempt's own
//!   keys (as expiry may), only marks it void (as a copy never landing), or
//!   raises a counter already raised.
//! * **Keys expire** at any time: the writer key, a reader's entry, the
//!   intent key (set with the lease's TTL, as `lua/rw_acquire.lua` does:
//!   without one, a writer whose clean-up never lands would keep new
//!   readers out of that instance for good). A lock key was written after its attempt started and
//!   lives a whole TTL, longer than the validity the client measures from
//!   its start, so when one expires that validity has ended: a client still
//!   deciding gives up, a holder stops. A holder's release is modelled as
//!   its keys expiring whenever they do: it deletes only its own keys, and
//!   the void mark it leaves where it held nothing only refuses its own
//!   late copies, which may as well never land.
//!
//! A guard is *valid* while its attempt holds (granted, not stopped) and a
//! quorum of instances hold its value: the Redlock abstraction of the
//! validity.
//!
//! # Properties
//!
//! * **A valid writer excludes every other valid guard**: never a valid
//!   write guard together with another valid guard, read or write.
//! * **Readers share**: two read guards valid at once is reachable.
//! * **A write token is above every token granted before it** (in the
//!   order the clients decided), read or write.
//! * **A read token is above every write token granted before it**: what
//!   `lua/fenced_read.lua` needs to refuse a writer whose lease ran out
//!   (it and `lua/fenced_write.lua` accept a token equal to the highest).
//! * **A valid guard's value is held by a quorum**: holding, as the client
//!   knows it, and the quorum abstraction agree.
//! * **A failed attempt holds nothing where its clean-up landed**: no
//!   writer key, reader entry or intent of it is written there afterwards
//!   (keys owned by nobody after a clean-up; ones written before it are
//!   what it deletes).
//!
//! # Searches
//!
//! Each search is exhaustive, with the instances taken as interchangeable,
//! and attempts of one kind too. States that differ only by what can no
//! longer matter are one: the answers of a client that decided, a request
//! that can change nothing where it lands, and the tokens' numbers up to a
//! shift (only their order and a bump of one count).
//!
//!
//! | search | attempts | what it leaves out | states, time |
//! |---|---|---|---|
//! | exclusion | a writer and two readers; two writers and a reader | counters (never bumped: every grant agrees, no raise round, which only delays a grant); anything after every attempt decided or gave up (no guard becomes valid then) | 40 and 38 thousand states, 1 s each |
//! | tokens | a writer and two readers; two writers and a reader | the intent key (it only refuses reads, and a refused read is one whose request never lands); holding (a grant is done once handed out); anything after every attempt decided or gave up | 382 and 108 thousand states, 10 s and 2 s |
//! | everything | a writer and a reader; two writers; two acquires landing twice | nothing | 131 and 38 thousand states, 2 s and 1 s |
//!
//! The whole binary runs in about 14 s on two cores. A failed attempt's
//! clean-up concerns only its own keys (its void mark is checked before
//! anything else), so two attempts with resends cover it. Three attempts
//! with everything and one acquire landing twice outgrow a test run (2.9
//! million states for two writers and a reader, 75 s; 11 million for a
//! writer and two readers, 5.5 minutes); they pass, as does the tokens
//! search with the plain lock's choice of token (the quorum-th smallest
//! answer, `src/lock/acquire.rs`; the same sizes): run them with `cargo
//! test --test model_rwlock -- --ignored`.
//!
//! # Variants
//!
//! Each must fail, with its counterexample printed (the shortest, by a
//! breadth-first search):
//!
//! | variant | breaks | steps |
//! |---|---|---|
//! | a read acquire that ignores `writer` | exclusion: a writer granted on two instances, then a reader on the same two | 6 |
//! | a write acquire that ignores `readers` | exclusion: a reader and a writer granted on the same two instances | 6 |
//! | a write grant that answers the counter without bumping it | write tokens: a writer granted on two instances; the next one, on one of them (its key expired) and the third, answers the same token | 7 |
//! | a read grant that answers the counter without bumping it | read tokens: a reader after a writer (whose keys expired) answers the writer's token | 8 |
//! | the highest answer handed out without a raise round | write tokens, three attempts: the writer lands on instance 0, a reader on 1, the other reader on 1 and 2 (answers 2 and 1), which hands out 2 with only instance 1 holding it; its entry on 2 expires, and the writer, granted on 0 and 2, answers 1 and 2: token 2 again | 8 |
//! | a client that goes on deciding after one of its keys expired (no validity) | write tokens: a writer heard two grants, its keys expire, a reader is granted there with a higher token, then the writer hands out its lower one | 8 |
//! | a clean-up without the void mark | clean-up: the clean-up lands before the acquire, which then takes the writer key for an attempt that gave up | 3 |
//! | a void mark only where the clean-up found nothing (for a failed attempt's clean-up too) | clean-up: the acquire lands, the attempt gives up, its clean-up deletes the key (so marks nothing), and the resent copy takes it again | 4 |
//!
//! A read grant that does not bump the counter keeps write tokens above
//! every earlier grant (a writer's answer is still one above any counter a
//! reader left; the tokens search with that rule, run once, found no
//! counterexample in 69 and 72 thousand states): it breaks only the read
//! tokens' property, which is why that property is here.
//!
//! [stateright]: https://docs.rs/stateright

#[path = "common/model.rs"]
mod model_support;

use model_support::{Stop, N, QUORUM};
use stateright::{Checker, Model, Property};

/// Attempts in a run, at most.
const ATTEMPTS: usize = 3;

const EXCLUSION: &str = "a valid writer excludes every other valid guard";
const WRITE_TOKENS: &str = "a write token is above every token granted before it";
const READ_TOKENS: &str = "a read token is above every write token granted before it";
const ON_A_QUORUM: &str = "a valid guard's value is held by a quorum";
const ORPHAN: &str = "a failed attempt holds nothing where its clean-up landed";
const SAFETY: [&str; 5] = [EXCLUSION, WRITE_TOKENS, READ_TOKENS, ON_A_QUORUM, ORPHAN];

const READERS_SHARE: &str = "two read guards are valid at once";
const RAISED: &str = "a raise round confirms a grant";
const RESEND: &str = "an acquire lands where its first copy already holds";
const INTENT: &str = "a waiting writer's intent stands in a reader's way";
const VOIDED: &str = "a clean-up races a copy of its acquire";

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Read,
    Write,
    /// No attempt (a run of fewer than `ATTEMPTS`).
    Absent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rules {
    Design,
    /// The design with the token the plain lock's client chooses
    /// (`src/lock/acquire.rs`): the quorum-th smallest answer, with a raise
    /// round when fewer than a quorum answered at least it.
    QuorumTh,
    /// A read acquire that does not look at `writer`.
    ReadIgnoresWriter,
    /// A write acquire that does not look at `readers`.
    WriteIgnoresReaders,
    /// A write grant answers the counter as it is, without bumping it.
    WriteNotBumped,
    /// A read grant answers the counter as it is, without bumping it.
    ReadNotBumped,
    /// The client hands out the highest answer without a raise round.
    NoRaise,
    /// `release` never marks the attempt void.
    NoVoid,
    /// `release` marks the attempt void only where it held nothing, for a
    /// failed attempt's clean-up too.
    VoidWhereNothingHeld,
    /// A client that goes on deciding, and holding, after one of its keys
    /// expired: one that does not measure its validity.
    NoValidity,
}

#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
struct Inst {
    /// The attempt whose value the writer key holds.
    writer: Option<u8>,
    /// The attempts whose values are readers here (a mask).
    readers: u8,
    /// The waiting writer's value.
    intent: Option<u8>,
    counter: u8,
}

impl Inst {
    fn holds(&self, a: usize) -> bool {
        self.writer == Some(a as u8) || self.readers & 1 << a != 0
    }
}

/// What one attempt sent to, and heard from, one instance.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
struct Link {
    /// Copies of the acquire still on their way.
    acquire: u8,
    /// The token this instance granted, as the client heard it (while
    /// voting).
    granted: Option<u8>,
    raise: bool,
    /// This instance confirmed the raise (while raising).
    confirmed: bool,
    /// The failed attempt's clean-up, on its way.
    release: bool,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Voting,
    Raising,
    Held,
    /// Stopped holding (released, or its validity ended), or failed and
    /// left nothing behind.
    Done,
    /// Gave up; its clean-up went to every instance.
    Failed,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
struct Attempt {
    kind: Kind,
    phase: Phase,
    /// The token it decided on (while raising, and for its raise requests
    /// still on their way).
    token: u8,
    links: [Link; N],
}

impl Attempt {
    /// Voting, or raising: it may still be granted.
    fn deciding(&self) -> bool {
        matches!(self.phase, Phase::Voting | Phase::Raising)
    }

    /// Its clean-up landed on instance `i`.
    fn cleaned(&self, i: usize) -> bool {
        self.phase == Phase::Failed && !self.links[i].release
    }
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
struct RwState {
    inst: [Inst; N],
    attempts: [Attempt; ATTEMPTS],
    /// The highest token of the grants handed out so far, and of the write
    /// grants among them (0: none, or below every token still to come).
    last: u8,
    last_write: u8,
    write_backwards: bool,
    read_backwards: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum RwAction {
    /// A copy of attempt `a`'s acquire lands on instance `i`; its reply
    /// reaches the client or not.
    LandAcquire {
        a: usize,
        i: usize,
        seen: bool,
    },
    /// The grants heard from the instances of `on` (a quorum) decide: the
    /// client hands out the token, or starts a raise round. (Deciding on
    /// some of the grants heard is how a reply that was lost, or came too
    /// late, is modelled.) Or a quorum confirmed the raise round (`on` is
    /// 0).
    Decide {
        a: usize,
        on: u8,
    },
    LandRaise(usize, usize),
    /// The attempt fails (refusals, timeouts): its clean-up goes everywhere.
    GiveUp(usize),
    /// The holder stops: it released, or its validity ended.
    Release(usize),
    LandRelease(usize, usize),
    /// A key expires: the writer key, a reader's entry, the intent key.
    ExpireWriter(usize),
    ExpireReader(usize, usize),
    ExpireIntent(usize),
}

/// What a search covers, and what it leaves out because it cannot change
/// the properties it checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// Everything, every property.
    Full,
    /// The tokens: no intent key (it only refuses reads, and a refused read
    /// is one whose request never lands); a grant is done as soon as it is
    /// handed out (holding changes no token); the search stops once no
    /// attempt is deciding (no token is handed out after that).
    Tokens,
    /// Exclusion: counters never bumped (every grant agrees, no raise
    /// round: a raise round only delays a grant); the search stops once no
    /// attempt is deciding (no grant becomes valid after that).
    Keys,
}

impl Scope {
    fn checks(self, property: &str) -> bool {
        match self {
            Scope::Full => true,
            Scope::Tokens => [WRITE_TOKENS, READ_TOKENS, RAISED].contains(&property),
            Scope::Keys => {
                [EXCLUSION, ON_A_QUORUM, READERS_SHARE, RESEND, INTENT].contains(&property)
            }
        }
    }
}

struct RwModel {
    kinds: &'static [Kind],
    rules: Rules,
    /// How many acquires (of any attempt, to any instance) may land twice.
    duplicates: usize,
    scope: Scope,
    /// The one property a counterexample search looks for, or `None`.
    focus: Option<&'static str>,
}

impl RwModel {
    fn with(self, rules: Rules) -> Self {
        RwModel { rules, ..self }
    }

    fn new(kinds: &'static [Kind], rules: Rules) -> Self {
        RwModel {
            kinds,
            rules,
            duplicates: 0,
            scope: Scope::Full,
            focus: None,
        }
    }

    /// `rw_acquire.lua` of attempt `a` on instance `i`: the token, or
    /// `None` when refused.
    fn acquire(&self, s: &mut RwState, a: usize, i: usize) -> Option<u8> {
        let rules = self.rules;
        let value = a as u8;
        let other_writer = s.inst[i].writer.is_some_and(|w| w != value);
        let kind = s.attempts[a].kind;
        let inst = &mut s.inst[i];
        let resent = match kind {
            Kind::Read => {
                if other_writer && rules != Rules::ReadIgnoresWriter {
                    return None;
                }
                let resent = inst.readers & 1 << a != 0;
                if !resent {
                    if inst.intent.is_some() {
                        return None;
                    }
                    inst.readers |= 1 << a;
                }
                resent
            }
            Kind::Write => {
                if other_writer {
                    return None;
                }
                let resent = inst.writer == Some(value);
                if !resent {
                    if inst.readers != 0 && rules != Rules::WriteIgnoresReaders {
                        if self.scope != Scope::Tokens {
                            inst.intent.get_or_insert(value);
                        }
                        return None;
                    }
                    inst.writer = Some(value);
                    if inst.intent == Some(value) {
                        inst.intent = None;
                    }
                }
                resent
            }
            Kind::Absent => return None,
        };
        let bump = !resent
            && match kind {
                Kind::Read => rules != Rules::ReadNotBumped,
                Kind::Write => rules != Rules::WriteNotBumped,
                Kind::Absent => false,
            };
        if bump && self.scope != Scope::Keys {
            inst.counter += 1;
        }
        Some(inst.counter)
    }

    /// `fence_raise.lua` of attempt `a` on instance `i`: whether the
    /// instance still holds its value, its counter now at least the token.
    fn raise(s: &mut RwState, a: usize, i: usize) -> bool {
        let token = s.attempts[a].token;
        let inst = &mut s.inst[i];
        if !inst.holds(a) {
            return false;
        }
        inst.counter = inst.counter.max(token);
        true
    }

    /// `rw_release.lua` of attempt `a` on instance `i`.
    fn release(&self, s: &mut RwState, a: usize, i: usize) {
        let value = a as u8;
        let failed = s.attempts[a].phase == Phase::Failed;
        let inst = &mut s.inst[i];
        let held = inst.holds(a);
        if inst.writer == Some(value) {
            inst.writer = None;
        }
        inst.readers &= !(1 << a);
        if inst.intent == Some(value) {
            inst.intent = None;
        }
        let void = match self.rules {
            Rules::NoVoid => false,
            Rules::VoidWhereNothingHeld => !held,
            _ => !held || failed,
        };
        if void {
            // The void mark refuses every copy of the acquire still on its
            // way here: they are as good as lost (the mark outlives them).
            s.attempts[a].links[i].acquire = 0;
        }
    }

    /// The attempt fails: its clean-up goes to every instance.
    fn fail(s: &mut RwState, a: usize) {
        let att = &mut s.attempts[a];
        att.phase = Phase::Failed;
        for link in &mut att.links {
            link.release = true;
        }
    }

    /// A key of attempt `a` expired. It was written after the attempt
    /// started and lived a whole TTL, longer than the validity the client
    /// measures from its start: that validity has ended. A client still
    /// deciding gives up; a holder stops.
    fn expired(&self, s: &mut RwState, a: usize) {
        if self.rules == Rules::NoValidity {
            return;
        }
        match s.attempts[a].phase {
            Phase::Voting | Phase::Raising => Self::fail(s, a),
            Phase::Held => s.attempts[a].phase = Phase::Done,
            Phase::Done | Phase::Failed => {}
        }
    }

    /// The attempt holds: its token is handed out.
    fn hand_out(&self, s: &mut RwState, a: usize) {
        let token = s.attempts[a].token;
        match s.attempts[a].kind {
            Kind::Write => {
                s.write_backwards |= token <= s.last;
                s.last_write = s.last_write.max(token);
            }
            Kind::Read => s.read_backwards |= token <= s.last_write,
            Kind::Absent => {}
        }
        s.last = s.last.max(token);
        s.attempts[a].phase = match self.scope {
            Scope::Tokens => Phase::Done,
            _ => Phase::Held,
        };
    }

    /// A quorum granted: the token is the highest answer; it is handed out
    /// at once when a quorum answered it, after a raise round otherwise.
    /// Or a quorum confirmed the raise round.
    fn decide(&self, s: &mut RwState, a: usize, on: u8) {
        let att = &mut s.attempts[a];
        if att.phase == Phase::Raising {
            return self.hand_out(s, a);
        }
        let mut answers: Vec<u8> = model_support::members(on, N)
            .filter_map(|i| att.links[i].granted)
            .collect();
        answers.sort_unstable();
        let token = match self.rules {
            Rules::QuorumTh => answers[QUORUM - 1],
            _ => answers[answers.len() - 1],
        };
        att.token = token;
        let agreed = answers.iter().filter(|&&t| t >= token).count() >= QUORUM;
        if agreed || self.rules == Rules::NoRaise {
            return self.hand_out(s, a);
        }
        att.phase = Phase::Raising;
        for link in &mut att.links {
            link.raise = true;
        }
    }

    /// Forgets what no longer matters, so that states differing only by it
    /// are one: the answers once decided; requests that can no longer
    /// change anything where they land (a release where the attempt holds
    /// nothing and no copy of its acquire is on its way, a raise that can
    /// neither raise the counter nor confirm); the token once no raise
    /// needs it; whether an attempt that left nothing behind failed.
    fn forget(s: &mut RwState) {
        for (a, att) in s.attempts.iter_mut().enumerate() {
            let voting = att.phase == Phase::Voting;
            let raising = att.phase == Phase::Raising;
            for (i, link) in att.links.iter_mut().enumerate() {
                let inst = &s.inst[i];
                let dead = link.acquire == 0 && !inst.holds(a);
                if !voting {
                    link.granted = None;
                }
                if !raising {
                    link.confirmed = false;
                }
                if dead && inst.intent != Some(a as u8) && !voting && !raising {
                    link.release = false;
                }
                if dead || (!raising && att.token <= inst.counter) {
                    link.raise = false;
                }
            }
            if !raising && att.links.iter().all(|l| !l.raise) {
                att.token = 0;
            }
            let inert = att
                .links
                .iter()
                .all(|l| l.acquire == 0 && !l.raise && !l.release);
            let left = s
                .inst
                .iter()
                .any(|x| x.holds(a) || x.intent == Some(a as u8));
            if att.phase == Phase::Failed && inert && !left {
                att.phase = Phase::Done;
            }
        }
        Self::rebase(s);
    }

    /// Tokens only matter by their order, and by one step (a bump): states
    /// whose numbers differ by a constant are one. Every token handed out
    /// from now on is at least the least of the counters, of the answers
    /// the voting attempts heard, and of the raising attempts' tokens (the
    /// floor); that floor becomes 1. The highest tokens handed out so far
    /// matter only where they reach the floor: below it they become 0,
    /// which also stands for none.
    fn rebase(s: &mut RwState) {
        let mut floor = s.inst.iter().map(|x| x.counter).min().unwrap_or(0);
        for att in &s.attempts {
            match att.phase {
                Phase::Voting => {
                    for t in att.links.iter().filter_map(|l| l.granted) {
                        floor = floor.min(t);
                    }
                }
                Phase::Raising => floor = floor.min(att.token),
                _ => {}
            }
        }
        let shift = |v: u8| v + 1 - floor;
        for inst in &mut s.inst {
            inst.counter = shift(inst.counter);
        }
        for att in &mut s.attempts {
            if att.phase == Phase::Raising || att.links.iter().any(|l| l.raise) {
                att.token = shift(att.token);
            }
            for link in &mut att.links {
                link.granted = link.granted.map(shift);
            }
        }
        let below = |v: u8| if v == 0 || v < floor { 0 } else { shift(v) };
        s.last = below(s.last);
        s.last_write = below(s.last_write);
    }
}

impl Model for RwModel {
    type State = RwState;
    type Action = RwAction;

    fn init_states(&self) -> Vec<RwState> {
        // Every attempt has started: an attempt whose requests are all
        // still on their way is one that has not, so this loses nothing.
        let attempts = std::array::from_fn(|a| match self.kinds.get(a) {
            Some(&kind) => Attempt {
                kind,
                phase: Phase::Voting,
                token: 0,
                links: [Link {
                    acquire: 1,
                    ..Link::default()
                }; N],
            },
            None => Attempt {
                kind: Kind::Absent,
                phase: Phase::Done,
                token: 0,
                links: [Link::default(); N],
            },
        });
        let first = RwState {
            inst: [Inst::default(); N],
            attempts,
            last: 0,
            last_write: 0,
            write_backwards: false,
            read_backwards: false,
        };
        // The acquires that land twice: their second copy is on its way
        // from the start (and may land at any time, or never).
        let mut states = vec![first];
        for _ in 0..self.duplicates {
            let mut next = Vec::new();
            for s in &states {
                for a in 0..self.kinds.len() {
                    for i in 0..N {
                        if s.attempts[a].links[i].acquire == 1 {
                            let mut t = *s;
                            t.attempts[a].links[i].acquire = 2;
                            next.push(t);
                        }
                    }
                }
            }
            states.extend(next);
        }
        for s in &mut states {
            Self::rebase(s);
        }
        states.sort();
        states.dedup();
        states
    }

    fn actions(&self, s: &RwState, actions: &mut Vec<RwAction>) {
        if self.scope != Scope::Full && s.attempts.iter().all(|a| !a.deciding()) {
            return;
        }
        for (a, att) in s.attempts.iter().enumerate() {
            let voting = att.phase == Phase::Voting;
            for (i, link) in att.links.iter().enumerate() {
                // While voting, the reply reaches the client; of two copies,
                // the client keeps the first reply or takes the second.
                if link.acquire > 0 {
                    actions.push(RwAction::LandAcquire {
                        a,
                        i,
                        seen: voting && link.granted.is_none(),
                    });
                    if voting && link.granted.is_some() {
                        actions.push(RwAction::LandAcquire { a, i, seen: true });
                    }
                }
                if link.raise {
                    actions.push(RwAction::LandRaise(a, i));
                }
                if link.release {
                    actions.push(RwAction::LandRelease(a, i));
                }
            }
            let count = |f: fn(&Link) -> bool| att.links.iter().filter(|l| f(l)).count();
            match att.phase {
                Phase::Voting => {
                    let heard = mask(&att.links, |l| l.granted.is_some());
                    for on in 1..1u8 << N {
                        if on & heard == on && on.count_ones() as usize >= QUORUM {
                            actions.push(RwAction::Decide { a, on });
                            if self.scope == Scope::Keys {
                                // Every grant answers the same token.
                                break;
                            }
                        }
                    }
                }
                Phase::Raising if count(|l| l.confirmed) >= QUORUM => {
                    actions.push(RwAction::Decide { a, on: 0 });
                }
                Phase::Held => actions.push(RwAction::Release(a)),
                _ => {}
            }
            if matches!(att.phase, Phase::Voting | Phase::Raising) {
                actions.push(RwAction::GiveUp(a));
            }
        }
        for (i, inst) in s.inst.iter().enumerate() {
            if inst.writer.is_some() {
                actions.push(RwAction::ExpireWriter(i));
            }
            for r in model_support::members(inst.readers, ATTEMPTS) {
                actions.push(RwAction::ExpireReader(i, r));
            }
            if inst.intent.is_some() {
                actions.push(RwAction::ExpireIntent(i));
            }
        }
    }

    fn next_state(&self, s: &RwState, action: RwAction) -> Option<RwState> {
        let mut s = *s;
        match action {
            RwAction::LandAcquire { a, i, seen } => {
                s.attempts[a].links[i].acquire -= 1;
                let token = self.acquire(&mut s, a, i);
                if seen {
                    s.attempts[a].links[i].granted = token;
                }
            }
            RwAction::Decide { a, on } => self.decide(&mut s, a, on),
            RwAction::LandRaise(a, i) => {
                s.attempts[a].links[i].raise = false;
                let held = Self::raise(&mut s, a, i);
                let att = &mut s.attempts[a];
                if held && att.phase == Phase::Raising {
                    att.links[i].confirmed = true;
                }
            }
            RwAction::GiveUp(a) => Self::fail(&mut s, a),
            // Its keys vanish at any time from now on, as expiry has them
            // do: what its release does where it lands.
            RwAction::Release(a) => s.attempts[a].phase = Phase::Done,
            RwAction::LandRelease(a, i) => {
                s.attempts[a].links[i].release = false;
                self.release(&mut s, a, i);
            }
            RwAction::ExpireWriter(i) => {
                if let Some(w) = s.inst[i].writer.take() {
                    self.expired(&mut s, usize::from(w));
                }
            }
            RwAction::ExpireReader(i, r) => {
                s.inst[i].readers &= !(1 << r);
                self.expired(&mut s, r);
            }
            RwAction::ExpireIntent(i) => s.inst[i].intent = None,
        }
        Self::forget(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let all = vec![
            Property::<Self>::always(EXCLUSION, |_, s| {
                let valid: Vec<usize> = valid(s).collect();
                valid
                    .iter()
                    .all(|&a| s.attempts[a].kind == Kind::Read || valid.len() == 1)
            }),
            Property::<Self>::always(WRITE_TOKENS, |_, s| !s.write_backwards),
            Property::<Self>::always(READ_TOKENS, |_, s| !s.read_backwards),
            Property::<Self>::always(ON_A_QUORUM, |_, s| {
                (0..ATTEMPTS)
                    .filter(|&a| s.attempts[a].phase == Phase::Held)
                    .all(|a| quorum_holds(s, a))
            }),
            Property::<Self>::always(ORPHAN, |_, s| {
                s.attempts.iter().enumerate().all(|(a, att)| {
                    (0..N).all(|i| {
                        let inst = &s.inst[i];
                        !att.cleaned(i) || !(inst.holds(a) || inst.intent == Some(a as u8))
                    })
                })
            }),
            Property::<Self>::sometimes(READERS_SHARE, |_, s| {
                valid(s)
                    .filter(|&a| s.attempts[a].kind == Kind::Read)
                    .count()
                    >= 2
            }),
            Property::<Self>::sometimes(RAISED, |_, s| {
                s.attempts.iter().any(|att| {
                    att.phase == Phase::Raising
                        && att.links.iter().filter(|l| l.confirmed).count() >= QUORUM
                })
            }),
            Property::<Self>::sometimes(RESEND, |_, s| {
                s.attempts
                    .iter()
                    .enumerate()
                    .any(|(a, att)| (0..N).any(|i| att.links[i].acquire > 0 && s.inst[i].holds(a)))
            }),
            Property::<Self>::sometimes(INTENT, |_, s| {
                s.attempts.iter().enumerate().any(|(a, att)| {
                    s.attempts[a].kind == Kind::Read
                        && (0..N).any(|i| {
                            let inst = &s.inst[i];
                            att.links[i].acquire > 0
                                && inst.intent.is_some()
                                && inst.writer.is_none()
                                && inst.readers & 1 << a == 0
                        })
                })
            }),
            Property::<Self>::sometimes(VOIDED, |_, s| {
                s.attempts.iter().any(|att| {
                    att.phase == Phase::Failed
                        && att.links.iter().any(|l| l.release && l.acquire > 0)
                })
            }),
        ];
        all.into_iter()
            .filter(|p| self.scope.checks(p.name))
            .filter(|p| self.focus.is_none_or(|name| p.name == name))
            .collect()
    }
}

/// The instances (a mask) whose link satisfies `f`.
fn mask(links: &[Link; N], f: impl Fn(&Link) -> bool) -> u8 {
    (0..N).filter(|&i| f(&links[i])).fold(0, |m, i| m | 1 << i)
}

/// Whether a quorum of instances hold attempt `a`'s value.
fn quorum_holds(s: &RwState, a: usize) -> bool {
    s.inst.iter().filter(|inst| inst.holds(a)).count() >= QUORUM
}

/// The attempts holding a valid guard: granted, and their value held by a
/// quorum.
fn valid(s: &RwState) -> impl Iterator<Item = usize> + '_ {
    (0..ATTEMPTS).filter(|&a| s.attempts[a].phase == Phase::Held && quorum_holds(s, a))
}

/// `s` with its attempts renumbered: attempt `a` becomes `perm[a]`.
fn renumber(s: &RwState, perm: &[usize]) -> RwState {
    let id = |a: u8| perm[usize::from(a)] as u8;
    let mask = |m: u8| {
        (0..perm.len())
            .filter(|&a| m & 1 << a != 0)
            .fold(0, |acc, a| acc | 1 << perm[a])
    };
    let mut r = *s;
    for (a, att) in s.attempts.iter().enumerate() {
        r.attempts[perm[a]] = *att;
    }
    for inst in &mut r.inst {
        inst.writer = inst.writer.map(id);
        inst.intent = inst.intent.map(id);
        inst.readers = mask(inst.readers);
    }
    r
}

/// `s` with its instances in a canonical order.
fn sort_instances(s: &RwState) -> RwState {
    let keys: [(Inst, [Link; ATTEMPTS]); N] =
        std::array::from_fn(|i| (s.inst[i], s.attempts.map(|att| att.links[i])));
    let mut order: [usize; N] = std::array::from_fn(|i| i);
    order.sort_by(|&x, &y| keys[x].cmp(&keys[y]));
    let mut r = *s;
    for (new, &old) in order.iter().enumerate() {
        r.inst[new] = s.inst[old];
        for (ra, sa) in r.attempts.iter_mut().zip(&s.attempts) {
            ra.links[new] = sa.links[old];
        }
    }
    r
}

/// Every renumbering of the attempts.
const PERMUTATIONS: [[usize; ATTEMPTS]; 6] = [
    [0, 1, 2],
    [0, 2, 1],
    [1, 0, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
];

/// The instances are interchangeable, and so are attempts of one kind:
/// states that differ only by their numbering are one (symmetry
/// reduction).
fn representative(s: &RwState) -> RwState {
    let mut best = sort_instances(s);
    for perm in &PERMUTATIONS[1..] {
        if (0..ATTEMPTS).any(|a| s.attempts[a].kind != s.attempts[perm[a]].kind) {
            continue;
        }
        let candidate = sort_instances(&renumber(s, perm));
        if candidate < best {
            best = candidate;
        }
    }
    best
}

/// Searches every behaviour of `model`, with the instances taken as
/// interchangeable and attempts of one kind too, and asserts that no safety
/// property its scope checks fails, and that the search reached each of
/// `reached`.
fn assert_safe(label: &str, model: RwModel, reached: &[&'static str]) {
    let scope = model.scope;
    let checker = model_support::exhaustively(label, model, Some(representative), Some(BOUND));
    for property in SAFETY.into_iter().filter(|p| scope.checks(p)) {
        if let Some(path) = checker.discovery(property) {
            panic!("{label}: {property}: {:?}", path.into_actions());
        }
    }
    for &property in reached {
        checker.assert_any_discovery(property);
    }
}

/// A safety net on each search's size.
const BOUND: usize = 30_000_000;

/// The shortest behaviour of `model` that breaks `property`.
fn shortest_break(label: &str, model: RwModel, property: &'static str) -> Vec<RwAction> {
    let focused = RwModel {
        focus: Some(property),
        ..model
    };
    let stop = Stop {
        bound: Some(BOUND),
        at_failure: true,
    };
    let (_, path) = model_support::counterexample(label, focused, stop, &[property]);
    path.into_actions()
}

use Kind::{Read, Write};

/// One writer and two readers.
const ONE_WRITER: &[Kind] = &[Write, Read, Read];
/// Two writers and one reader.
const TWO_WRITERS: &[Kind] = &[Write, Write, Read];
/// A writer and a reader.
const PAIR: &[Kind] = &[Write, Read];
/// Two writers.
const WRITERS: &[Kind] = &[Write, Write];

fn model(kinds: &'static [Kind], scope: Scope, duplicates: usize) -> RwModel {
    RwModel {
        duplicates,
        scope,
        ..RwModel::new(kinds, Rules::Design)
    }
}

/// Exclusion, three attempts.
#[test]
#[ignore = "long model search (minutes): `cargo test --test model_rwlock -- --ignored`, run by .ci/run"]
fn a_valid_writer_excludes_every_other_valid_guard() {
    assert_safe(
        "exclusion, one writer and two readers",
        model(ONE_WRITER, Scope::Keys, 0),
        &[READERS_SHARE, INTENT],
    );
    assert_safe(
        "exclusion, two writers and one reader",
        model(TWO_WRITERS, Scope::Keys, 0),
        &[],
    );
}

/// Tokens, three attempts.
#[test]
#[ignore = "long model search (minutes): `cargo test --test model_rwlock -- --ignored`, run by .ci/run"]
fn a_write_token_is_above_every_token_granted_before_it() {
    assert_safe(
        "tokens, one writer and two readers",
        model(ONE_WRITER, Scope::Tokens, 0),
        &[RAISED],
    );
    assert_safe(
        "tokens, two writers and one reader",
        model(TWO_WRITERS, Scope::Tokens, 0),
        &[RAISED],
    );
}

/// Everything, two attempts, two acquires landing twice.
#[test]
#[ignore = "long model search (minutes): `cargo test --test model_rwlock -- --ignored`, run by .ci/run"]
fn two_attempts_with_resends_keep_every_property() {
    assert_safe(
        "everything, a writer and a reader",
        model(PAIR, Scope::Full, 2),
        &[RAISED, RESEND, INTENT, VOIDED],
    );
    assert_safe(
        "everything, two writers",
        model(WRITERS, Scope::Full, 2),
        &[RAISED, RESEND, VOIDED],
    );
}

/// Three attempts with everything, one acquire landing twice; and the
/// tokens with the plain lock's choice of token.
#[test]
#[ignore = "deeper run: minutes"]
fn three_attempts_with_a_resend_keep_every_property() {
    assert_safe(
        "everything, two writers and one reader, a resend",
        model(TWO_WRITERS, Scope::Full, 1),
        &[RAISED, RESEND, VOIDED],
    );
    assert_safe(
        "everything, one writer and two readers, a resend",
        model(ONE_WRITER, Scope::Full, 1),
        &[READERS_SHARE, RAISED, RESEND, INTENT, VOIDED],
    );
    for kinds in [ONE_WRITER, TWO_WRITERS] {
        assert_safe(
            "tokens, the quorum-th smallest answer",
            model(kinds, Scope::Tokens, 0).with(Rules::QuorumTh),
            &[RAISED],
        );
    }
}

/// Whether `actions` decide attempt `a` (hand out its token, or start
/// its raise round).
fn decides(actions: &[RwAction], a: usize) -> bool {
    actions
        .iter()
        .any(|x| matches!(x, RwAction::Decide { a: b, .. } if *b == a))
}

/// A reader granted over the writer's keys.
#[test]
fn a_read_acquire_that_ignores_the_writer_breaks_exclusion() {
    let actions = shortest_break(
        "read ignores the writer",
        RwModel::new(PAIR, Rules::ReadIgnoresWriter),
        EXCLUSION,
    );
    assert!(decides(&actions, 0) && decides(&actions, 1));
}

/// A writer granted over live readers.
#[test]
fn a_write_acquire_that_ignores_the_readers_breaks_exclusion() {
    let actions = shortest_break(
        "write ignores the readers",
        RwModel::new(PAIR, Rules::WriteIgnoresReaders),
        EXCLUSION,
    );
    assert!(decides(&actions, 0) && decides(&actions, 1));
}

/// The next writer, on an instance the last one held, answers that one's
/// token.
#[test]
fn a_write_grant_without_a_bump_repeats_a_token() {
    let actions = shortest_break(
        "write not bumped",
        RwModel::new(WRITERS, Rules::WriteNotBumped),
        WRITE_TOKENS,
    );
    assert!(decides(&actions, 0) && decides(&actions, 1));
}

/// A reader after a writer answers the writer's token: a fenced read does
/// not shut that writer out once its lease ran out.
#[test]
fn a_read_grant_without_a_bump_repeats_a_writers_token() {
    let actions = shortest_break(
        "read not bumped",
        RwModel::new(PAIR, Rules::ReadNotBumped),
        READ_TOKENS,
    );
    assert!(decides(&actions, 0) && decides(&actions, 1));
}

/// Two readers leave counters apart; the second hands out the highest
/// answer without a quorum holding it; the writer's quorum, on the
/// instance that did not answer it, counts only up to it.
#[test]
#[ignore = "long model search (minutes): `cargo test --test model_rwlock -- --ignored`, run by .ci/run"]
fn the_highest_answer_without_a_raise_round_sends_a_write_token_back() {
    let actions = shortest_break(
        "no raise round",
        model(ONE_WRITER, Scope::Tokens, 0).with(Rules::NoRaise),
        WRITE_TOKENS,
    );
    let attempts = (0..ATTEMPTS)
        .filter(|&a| {
            actions
                .iter()
                .any(|x| matches!(x, RwAction::LandAcquire { a: b, .. } if *b == a))
        })
        .count();
    assert_eq!(attempts, 3, "the counterexample needs three attempts");
}

/// A writer whose keys expired hands out its token after a reader took
/// the lock and a higher token.
#[test]
fn a_client_that_decides_after_its_keys_expired_sends_a_write_token_back() {
    let actions = shortest_break(
        "no validity",
        model(PAIR, Scope::Tokens, 0).with(Rules::NoValidity),
        WRITE_TOKENS,
    );
    let expired = actions
        .iter()
        .position(|x| matches!(x, RwAction::ExpireWriter(_)));
    let decided = actions
        .iter()
        .rposition(|x| matches!(x, RwAction::Decide { a: 0, .. }));
    assert!(matches!((expired, decided), (Some(e), Some(d)) if e < d));
}

/// The clean-up lands first and leaves no mark; the acquire lands after.
#[test]
fn a_clean_up_without_the_void_mark_leaves_a_late_acquire_holding() {
    let actions = shortest_break(
        "no void mark",
        model(PAIR, Scope::Full, 0).with(Rules::NoVoid),
        ORPHAN,
    );
    assert!(matches!(actions.last(), Some(RwAction::LandAcquire { .. })));
}

/// The rule as first written: the clean-up deletes the first copy's key,
/// so it leaves no mark, and the resent copy lands after it.
#[test]
fn a_void_mark_only_where_nothing_was_held_lets_a_resend_hold_again() {
    let actions = shortest_break(
        "void only where nothing was held",
        model(PAIR, Scope::Full, 1).with(Rules::VoidWhereNothingHeld),
        ORPHAN,
    );
    let landed = |a: &RwAction| match a {
        RwAction::LandAcquire { a, i, .. } => Some((*a, *i)),
        _ => None,
    };
    let copies: Vec<(usize, usize)> = actions.iter().filter_map(landed).collect();
    assert!(
        copies
            .iter()
            .any(|c| copies.iter().filter(|d| *d == c).count() == 2),
        "the counterexample needs an acquire landing twice: {actions:?}"
    );
}
