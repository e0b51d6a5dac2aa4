//! Model check of the fair (FIFO) lock: its queue's scripts
//! (`lua/fair_ticket.lua`, `lua/fair_enqueue.lua`, `lua/fair_acquire.lua`
//! around `lua/acquire.lua`, `lua/fair_withdraw.lua`) and what each
//! caller's client decides, with [stateright].
//!
//! An abstract model, with no Redis and no code from the crate, of one
//! fair lock on three instances, quorum two. Each instance holds the lock
//! key (free, or one caller's value), a ticket counter, and the queue: an
//! entry per waiter, `(ticket, caller)`, ordered by ticket then by the
//! caller's id (a sorted set orders equal scores by member), each with a
//! liveness record that is either current or expired.
//!
//! # What may happen
//!
//! * **The scripts**, each atomic on one instance, each first purging the
//!   queue's entries whose liveness expired. `ticket(c)`: if the queue is
//!   empty and the lock free, the lock is `c`'s (a grant: the fast path of
//!   an uncontended lock, one round); otherwise the reply carries a
//!   ticket, the counter plus one, which it does not write (a grant
//!   carries none). `enqueue(c, t)`: the counter becomes at
//!   least `t`; `c`'s entry is added with ticket `t` if it is missing, and
//!   its liveness made current. `acquire(c)`: granted again if the lock
//!   holds `c` already (a resend); "gone" if `c` has no entry; otherwise
//!   `c`'s liveness is made current (the attempt is the heartbeat), and if
//!   `c` is the first entry and the lock is free, the lock is `c`'s and
//!   its entry removed (a grant); else refused. `withdraw(c)`: removes
//!   `c`'s entry.
//! * **The client** sends `ticket` to every instance and decides on any
//!   quorum of replies: a quorum of grants holds the lock; a quorum of
//!   tickets makes its ticket the *largest* of them, and it sends
//!   `enqueue` to every instance, then, once a quorum acknowledged,
//!   attempts (`acquire` to every instance) until a quorum grants (it
//!   holds, and sends `withdraw` everywhere to leave the queues of the
//!   instances that did not grant), a quorum says "gone" (it lost its
//!   place and is told), or it gives up (a timeout or a cancel: `withdraw`
//!   everywhere). A round with a grant short of a quorum sends `enqueue`
//!   again (the grant removed the entry there). A round with neither
//!   quorum is followed by another (a new value) or the client gives up.
//!   A round that fails with grants sends its clean-up, `release(c)`,
//!   deleting the lock where it holds that attempt's value.
//! * **Requests** land on each instance at any later point, up to twice,
//!   or never. Successive attempt rounds send the same request (same
//!   caller, same arguments), so the model keeps one per instance: an old
//!   round's copy landing late is a new round's landing.
//! * **Callers** may die at any time, or (while waiting) pause and later
//!   resume. A caller that is not heartbeating (dead, paused, holding or
//!   gone) has its liveness record expire on any instance, at any time
//!   (each instance by its own clock). A caller that waits and lives does
//!   not: its heartbeat comes within the record's TTL (the documented
//!   assumption, as a lease's TTL is for a lock).
//! * **Keys expire**: a lock key vanishes at any time (its lease ran out,
//!   or it was released); a holder's validity ends when one of its keys
//!   does. An instance may restart empty, once: it loses its queue and
//!   ticket counter. Tickets come from the instance clock (as fencing
//!   tokens do), so a counter restarts above every ticket handed out
//!   before. Lock keys and
//!   fence counters keep their own rules (a restarted instance's locks are
//!   covered by the lock models' restart delay), so they stay here.
//!
//! # Properties
//!
//! * **Exclusion**: no two callers hold at once, and a holder's value is
//!   in the lock key of a quorum of instances. A fair grant is a lock's
//!   grant (the queue only adds refusals in front of `lua/acquire.lua`,
//!   and a refusal writes no lock key), so tokens keep every guarantee of
//!   a lock's (`tests/model_fencing.rs`, `tests/model_grants.rs`).
//! * **Order among live waiters**: no instance grants a caller `c` while
//!   an older caller `w` waits, alive, with its entry in the queue of
//!   every instance. *Older*: `w`'s enqueue was acknowledged by a quorum
//!   before `c` sent its ticket round (real-time order of the asks).
//! * **No stall on the dead**: no attempt is refused because the first
//!   entry of a queue is a caller whose liveness record there expired.
//!
//! # Variants that must fail
//!
//! * `ClientClock`: tickets from the caller's clock; clocks differ, so a
//!   later caller may be ordered first (breaks order).
//! * `NoHeartbeat`: no liveness records; entries leave only by a grant or
//!   a withdraw, so a dead waiter blocks the queue (breaks no stall).
//! * `HeadNeverExpires`: the purge skips the first entry (breaks no stall).
//!
//! [stateright]: https://docs.rs/stateright

#[path = "common/model.rs"]
mod model_support;

use model_support::{Stop, N, QUORUM};
use stateright::{Checker, Model, Property};

/// The value of the holder the lock may start with (not a caller).
const OUTSIDER: u8 = 7;
/// Attempt rounds a caller makes before it gives up.
const ROUNDS: u8 = 2;

const EXCLUSION: &str = "at most one holder, on a quorum";
const ORDER: &str = "no grant while an older live waiter is queued everywhere";
const NO_STALL: &str = "no attempt refused behind an expired head";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Rules {
    Design,
    ClientClock,
    NoHeartbeat,
    HeadNeverExpires,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Entry {
    ticket: u8,
    caller: u8,
    /// Its liveness record is current (not expired).
    live: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Inst {
    /// The holder's value: a caller and its attempt (each attempt of a
    /// caller sends a value of its own).
    lock: Option<(u8, u8)>,
    tickets: u8,
    /// Sorted by (ticket, caller).
    queue: Vec<Entry>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Ticket,
    Enqueue,
    Wait,
    Hold,
    Done,
    Lost,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Life {
    Running,
    Paused,
    Dead,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
enum Reply {
    #[default]
    None,
    /// A grant, with the ticket (a ticket round's fast path).
    Granted(u8),
    Ticket(u8),
    Ack,
    Refused,
    Gone,
}

/// How many more times each of a caller's requests lands on one instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Link {
    ticket: u8,
    enqueue: u8,
    acquire: u8,
    withdraw: u8,
    /// A failed round's clean-up: deletes the lock where it holds `c`.
    release: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Caller {
    phase: Phase,
    life: Life,
    ticket: u8,
    links: [Link; N],
    replies: [Reply; N],
    /// The callers whose enqueue a quorum acknowledged before this one
    /// asked: older than it.
    older: u8,
    rounds: u8,
    /// Its enqueue reached a quorum.
    queued: bool,
    /// Its clock's reading when it asked (`Rules::ClientClock`).
    clock: u8,
    /// Its current attempt (0: the ticket round), whose value it sends.
    attempt: u8,
    /// The attempt whose clean-up (`release`) is on its way.
    release_of: u8,
    /// A key of the current attempt expired: its validity is over, and
    /// the attempt fails whatever else it hears.
    expired: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    inst: [Inst; N],
    callers: Vec<Caller>,
    restarted: bool,
    /// The largest ticket handed out (a clock-based counter restarts above).
    max_ticket: u8,
    /// Starts so far: the callers' real time, for their clocks.
    time: u8,
    order_broken: bool,
    stalled: bool,
    /// Reachability marks (the search is not vacuous).
    skipped_dead: bool,
    told_lost: bool,
    waited_then_held: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// A caller asks; `skew` is its clock's offset (`ClientClock`).
    Start {
        skew: u8,
    },
    LandTicket(usize, usize),
    LandEnqueue(usize, usize),
    LandAcquire(usize, usize),
    LandWithdraw(usize, usize),
    LandRelease(usize, usize),
    Decide(usize),
    Pause(usize),
    Resume(usize),
    Die(usize),
    /// A holder releases (its lock keys vanish whenever they do).
    Release(usize),
    /// Caller `c`'s liveness record expires on instance `i`.
    Expire(usize, usize),
    /// The lock key of instance `i` vanishes.
    Vanish(usize),
    Restart(usize),
    /// The holder the lock started with releases it everywhere.
    OutsiderReleases,
}

struct FairModel {
    rules: Rules,
    callers: usize,
    copies: u8,
    restarts: bool,
    /// Callers may die or pause (else they only run).
    faults: bool,
    /// Lock keys vanish at any time (else a release deletes them at once).
    vanish: bool,
    /// Each round lands on the instances in their order (a subset of the
    /// behaviours, for the searches of counterexamples).
    lockstep: bool,
    /// The lock starts held by a holder outside the callers (so that the
    /// first callers queue), which releases it at some point.
    held: bool,
    focus: &'static [&'static str],
}

impl FairModel {
    fn new(rules: Rules, callers: usize) -> Self {
        FairModel {
            rules,
            callers,
            copies: 2,
            restarts: true,
            faults: true,
            vanish: true,
            lockstep: false,
            held: true,
            focus: &[EXCLUSION, ORDER, NO_STALL],
        }
    }

    /// Every request lands at most once, no restart, no lock key expiring
    /// before its release: room for more callers.
    fn quiet(rules: Rules, callers: usize) -> Self {
        FairModel {
            copies: 1,
            restarts: false,
            vanish: false,
            ..FairModel::new(rules, callers)
        }
    }

    fn start(&self, s: &State, skew: u8) -> Caller {
        let older = s
            .callers
            .iter()
            .enumerate()
            .filter(|(_, c)| c.queued)
            .fold(0u8, |mask, (k, _)| mask | 1 << k);
        let link = Link {
            ticket: self.copies,
            ..Link::default()
        };
        Caller {
            phase: Phase::Ticket,
            life: Life::Running,
            ticket: 0,
            links: [link; N],
            replies: [Reply::None; N],
            older,
            rounds: 0,
            queued: false,
            clock: s.time + skew,
            attempt: 0,
            release_of: 0,
            expired: false,
        }
    }

    /// Removes expired entries, as every script does first.
    fn purge(&self, inst: &mut Inst) {
        match self.rules {
            Rules::NoHeartbeat => {}
            Rules::HeadNeverExpires => {
                let mut first = true;
                inst.queue.retain(|e| std::mem::take(&mut first) || e.live);
            }
            _ => inst.queue.retain(|e| e.live),
        }
    }

    /// An instance grants `c`: the order property is judged here.
    fn grant(s: &mut State, c: usize, i: usize) {
        s.inst[i].lock = Some(mine(s, c));
        let me = &s.callers[c];
        let everywhere = |w: usize| {
            s.inst
                .iter()
                .all(|inst| inst.queue.iter().any(|e| usize::from(e.caller) == w))
        };
        let broken = (0..s.callers.len()).any(|w| {
            let other = &s.callers[w];
            w != c
                && me.older & (1 << w) != 0
                && other.phase == Phase::Wait
                && other.life == Life::Running
                && everywhere(w)
        });
        s.order_broken |= broken;
        let dead_queued = (0..s.callers.len()).any(|w| {
            w != c && s.callers[w].life == Life::Dead && s.callers[w].phase == Phase::Wait
        });
        s.skipped_dead |= dead_queued && s.callers[c].phase == Phase::Wait;
    }

    fn land_ticket(&self, s: &mut State, c: usize, i: usize) -> Reply {
        self.purge(&mut s.inst[i]);
        let me = mine(s, c);
        let inst = &mut s.inst[i];
        // Read only: the join raises the counters.
        let ticket = inst.tickets + 1;
        if inst.queue.is_empty() && inst.lock.is_none() {
            Self::grant(s, c, i);
            return Reply::Granted(0);
        }
        if inst.lock == Some(me) {
            return Reply::Granted(0);
        }
        s.max_ticket = s.max_ticket.max(ticket);
        Reply::Ticket(ticket)
    }

    fn land_enqueue(&self, s: &mut State, c: usize, i: usize) -> Reply {
        self.purge(&mut s.inst[i]);
        let ticket = s.callers[c].ticket;
        let inst = &mut s.inst[i];
        inst.tickets = inst.tickets.max(ticket);
        match inst.queue.iter_mut().find(|e| usize::from(e.caller) == c) {
            Some(entry) => entry.live = true,
            None => {
                inst.queue.push(Entry {
                    ticket,
                    caller: c as u8,
                    live: true,
                });
                inst.queue.sort();
            }
        }
        Reply::Ack
    }

    fn land_acquire(&self, s: &mut State, c: usize, i: usize) -> Reply {
        self.purge(&mut s.inst[i]);
        let me = mine(s, c);
        let inst = &mut s.inst[i];
        if inst.lock == Some(me) {
            return Reply::Granted(0);
        }
        let Some(pos) = inst.queue.iter().position(|e| usize::from(e.caller) == c) else {
            return Reply::Gone;
        };
        inst.queue[pos].live = true;
        if pos == 0 && inst.lock.is_none() {
            inst.queue.remove(0);
            Self::grant(s, c, i);
            return Reply::Granted(0);
        }
        if !inst.queue[0].live {
            s.stalled = true;
        }
        Reply::Refused
    }

    fn count(caller: &Caller, f: impl Fn(Reply) -> bool) -> usize {
        caller.replies.iter().filter(|r| f(**r)).count()
    }

    fn answered(caller: &Caller) -> usize {
        Self::count(caller, |r| r != Reply::None)
    }

    /// The client's decision once a quorum answered its current round.
    fn decide(&self, s: &mut State, c: usize) {
        let copies = self.copies;
        let granted = Self::count(&s.callers[c], |r| matches!(r, Reply::Granted(_)));
        let caller = &mut s.callers[c];
        let replies = std::mem::take(&mut caller.replies);
        if granted > 0 && granted < QUORUM {
            // A failed attempt's clean-up, to every instance.
            caller.links.iter_mut().for_each(|l| l.release = copies);
            caller.release_of = caller.attempt;
        }
        match caller.phase {
            Phase::Ticket if granted >= QUORUM => caller.phase = Phase::Hold,
            Phase::Ticket if Self::tickets(&replies).count() < QUORUM => {
                // Too few tickets (grants carry none): another ticket
                // round, with a value of its own, or give up.
                if caller.attempt < ROUNDS {
                    caller.attempt += 1;
                    caller.expired = false;
                    caller.links.iter_mut().for_each(|l| l.ticket = copies);
                } else {
                    caller.phase = Phase::Done;
                }
            }
            Phase::Ticket => {
                caller.ticket = match self.rules {
                    Rules::ClientClock => caller.clock,
                    _ => Self::tickets(&replies).max().unwrap_or(0),
                };
                caller.phase = Phase::Enqueue;
                caller.links.iter_mut().for_each(|l| l.enqueue = copies);
            }
            Phase::Enqueue => {
                caller.queued = true;
                caller.phase = Phase::Wait;
                caller.attempt += 1;
                caller.expired = false;
                caller.links.iter_mut().for_each(|l| l.acquire = copies);
            }
            Phase::Wait if granted >= QUORUM => {
                caller.phase = Phase::Hold;
                caller.links.iter_mut().for_each(|l| l.withdraw = copies);
                s.waited_then_held = true;
            }
            Phase::Wait if Self::count_in(&replies, Reply::Gone) >= QUORUM => {
                caller.phase = Phase::Lost;
                s.told_lost |= caller.life == Life::Running;
            }
            Phase::Wait if caller.rounds + 1 >= ROUNDS => {
                caller.phase = Phase::Done;
                caller.links.iter_mut().for_each(|l| l.withdraw = copies);
            }
            Phase::Wait => {
                caller.rounds += 1;
                caller.attempt += 1;
                caller.expired = false;
                for (link, reply) in caller.links.iter_mut().zip(replies) {
                    if matches!(reply, Reply::Granted(_) | Reply::Gone) {
                        link.enqueue = copies;
                    }
                    link.acquire = copies;
                }
            }
            Phase::Hold | Phase::Done | Phase::Lost => {}
        }
    }

    fn tickets(replies: &[Reply; N]) -> impl Iterator<Item = u8> + '_ {
        replies.iter().filter_map(|r| match r {
            Reply::Ticket(t) => Some(*t),
            _ => None,
        })
    }

    fn count_in(replies: &[Reply; N], kind: Reply) -> usize {
        replies.iter().filter(|r| **r == kind).count()
    }

    fn heartbeating(caller: &Caller) -> bool {
        let waiting = matches!(caller.phase, Phase::Ticket | Phase::Enqueue | Phase::Wait);
        // Under `NoHeartbeat` there are no records: "expired" is then the
        // moment one would have, which the scripts do not see.
        waiting && caller.life == Life::Running
    }

    fn caller_actions(&self, s: &State, c: usize, actions: &mut Vec<Action>) {
        let caller = &s.callers[c];
        let mut landed = [false; 5];
        for (i, link) in caller.links.iter().enumerate() {
            let lands = [
                (link.ticket, Action::LandTicket(c, i)),
                (link.enqueue, Action::LandEnqueue(c, i)),
                (link.acquire, Action::LandAcquire(c, i)),
                (link.withdraw, Action::LandWithdraw(c, i)),
                (link.release, Action::LandRelease(c, i)),
            ];
            for (k, (n, action)) in lands.into_iter().enumerate() {
                if n > 0 && !(self.lockstep && landed[k]) {
                    actions.push(action);
                    landed[k] = true;
                }
            }
            let queued = s.inst[i]
                .queue
                .iter()
                .any(|e| usize::from(e.caller) == c && e.live);
            if queued && !Self::heartbeating(caller) && (self.faults || !running(caller)) {
                actions.push(Action::Expire(c, i));
            }
        }
        let running = caller.life == Life::Running;
        let deciding = matches!(caller.phase, Phase::Ticket | Phase::Enqueue | Phase::Wait);
        if running && deciding && Self::answered(caller) >= QUORUM {
            actions.push(Action::Decide(c));
        }
        match (caller.phase, caller.life) {
            (Phase::Hold, Life::Running) => actions.push(Action::Release(c)),
            // Pauses are bounded: each resume is a new attempt.
            (Phase::Wait, Life::Running) if self.faults && caller.attempt <= ROUNDS => {
                actions.push(Action::Pause(c))
            }
            (Phase::Wait, Life::Paused) => actions.push(Action::Resume(c)),
            _ => {}
        }
        if deciding && caller.life != Life::Dead && self.faults {
            actions.push(Action::Die(c));
        }
    }

    fn answer(s: &mut State, c: usize, i: usize, reply: Reply, round: Phase) {
        let caller = &mut s.callers[c];
        if caller.phase == round && caller.life == Life::Running && caller.replies[i] == Reply::None
        {
            caller.replies[i] = match reply {
                Reply::Granted(_) if caller.expired => Reply::Refused,
                other => other,
            };
        }
    }
}

impl Model for FairModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let inst = Inst {
            lock: self.held.then_some((OUTSIDER, 0)),
            ..Inst::default()
        };
        vec![State {
            inst: [inst.clone(), inst.clone(), inst],
            callers: Vec::new(),
            restarted: false,
            max_ticket: 0,
            time: 0,
            order_broken: false,
            stalled: false,
            skipped_dead: false,
            told_lost: false,
            waited_then_held: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.callers.len() < self.callers {
            actions.push(Action::Start { skew: 0 });
            if self.rules == Rules::ClientClock {
                actions.push(Action::Start { skew: 2 });
            }
        }
        for c in 0..s.callers.len() {
            self.caller_actions(s, c, actions);
        }
        if s.inst.iter().any(|i| i.lock == Some((OUTSIDER, 0))) {
            actions.push(Action::OutsiderReleases);
        }
        for i in 0..N {
            if s.inst[i].lock.is_some() && self.vanish {
                actions.push(Action::Vanish(i));
            }
            if self.restarts && !s.restarted {
                actions.push(Action::Restart(i));
            }
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        match action {
            Action::Start { skew } => {
                let caller = self.start(&s, skew);
                s.callers.push(caller);
                s.time += 1;
            }
            Action::LandTicket(c, i) => {
                s.callers[c].links[i].ticket -= 1;
                let reply = self.land_ticket(&mut s, c, i);
                Self::answer(&mut s, c, i, reply, Phase::Ticket);
            }
            Action::LandEnqueue(c, i) => {
                s.callers[c].links[i].enqueue -= 1;
                let reply = self.land_enqueue(&mut s, c, i);
                Self::answer(&mut s, c, i, reply, Phase::Enqueue);
            }
            Action::LandAcquire(c, i) => {
                s.callers[c].links[i].acquire -= 1;
                let reply = self.land_acquire(&mut s, c, i);
                Self::answer(&mut s, c, i, reply, Phase::Wait);
            }
            Action::LandWithdraw(c, i) => {
                s.callers[c].links[i].withdraw -= 1;
                self.purge(&mut s.inst[i]);
                s.inst[i].queue.retain(|e| usize::from(e.caller) != c);
            }
            Action::LandRelease(c, i) => {
                s.callers[c].links[i].release -= 1;
                if s.inst[i].lock == Some((c as u8, s.callers[c].release_of)) {
                    s.inst[i].lock = None;
                }
            }
            Action::Decide(c) => self.decide(&mut s, c),
            Action::Pause(c) => s.callers[c].life = Life::Paused,
            Action::Resume(c) => {
                // Its heartbeat is due at once: an attempt round.
                let copies = self.copies;
                let caller = &mut s.callers[c];
                caller.life = Life::Running;
                caller.attempt += 1;
                caller.expired = false;
                caller.replies = [Reply::None; N];
                caller.links.iter_mut().for_each(|l| l.acquire = copies);
            }
            Action::Die(c) => s.callers[c].life = Life::Dead,
            Action::Release(c) => {
                s.callers[c].phase = Phase::Done;
                if !self.vanish {
                    let me = mine(&s, c);
                    for inst in s.inst.iter_mut().filter(|i| i.lock == Some(me)) {
                        inst.lock = None;
                    }
                }
            }
            Action::Expire(c, i) => {
                for e in s.inst[i]
                    .queue
                    .iter_mut()
                    .filter(|e| usize::from(e.caller) == c)
                {
                    e.live = false;
                }
            }
            Action::Vanish(i) => {
                let owner = s.inst[i].lock.take();
                let current = |(c, a): (u8, u8)| {
                    let c = usize::from(c);
                    (c < s.callers.len() && s.callers[c].attempt == a).then_some(c)
                };
                if let Some(c) = owner.and_then(current) {
                    // A key lives longer than the validity counted from
                    // the attempt's start: it ended for a holder, and for
                    // a round still counting grants (it fails, no validity).
                    let copies = self.copies;
                    let caller = &mut s.callers[c];
                    if caller.phase == Phase::Hold {
                        caller.phase = Phase::Done;
                    }
                    caller.expired = true;
                    for reply in caller.replies.iter_mut() {
                        if matches!(reply, Reply::Granted(_)) {
                            *reply = Reply::Refused;
                        }
                    }
                    caller.links.iter_mut().for_each(|l| l.release = copies);
                    caller.release_of = caller.attempt;
                }
            }
            Action::OutsiderReleases => {
                for inst in s.inst.iter_mut().filter(|i| i.lock == Some((OUTSIDER, 0))) {
                    inst.lock = None;
                }
            }
            Action::Restart(i) => {
                s.restarted = true;
                let lock = s.inst[i].lock;
                // A clock-based counter comes back above every ticket.
                let tickets = s.max_ticket;
                s.inst[i] = Inst {
                    lock,
                    tickets,
                    queue: Vec::new(),
                };
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut all = vec![
            Property::<Self>::always(EXCLUSION, |_, s| {
                let holders: Vec<usize> = (0..s.callers.len())
                    .filter(|&c| s.callers[c].phase == Phase::Hold)
                    .collect();
                holders.len() <= 1
                    && holders.iter().all(|&c| {
                        let me = mine(s, c);
                        s.inst.iter().filter(|i| i.lock == Some(me)).count() >= QUORUM
                    })
            }),
            Property::<Self>::always(ORDER, |_, s| !s.order_broken),
            Property::<Self>::always(NO_STALL, |_, s| !s.stalled),
            Property::<Self>::sometimes("a waiter is granted after waiting", |_, s| {
                s.waited_then_held
            }),
            Property::<Self>::sometimes("a waiter is granted past a dead one", |_, s| {
                s.skipped_dead
            }),
            Property::<Self>::sometimes("a resumed waiter is told it lost its place", |_, s| {
                s.told_lost
            }),
        ];
        all.retain(|p| !self.focus_excludes(p.name));
        all
    }
}

impl FairModel {
    /// A counterexample search looks only at the properties it names.
    fn focus_excludes(&self, name: &str) -> bool {
        self.focus.len() < 3 && !self.focus.contains(&name)
    }
}

/// Searches the behaviours of `model`, breadth first, up to `BOUND`
/// generated states (every behaviour up to the depth it reports; not
/// every behaviour when it says "bounded": the space of two callers with
/// every fault is larger than CI can afford), and asserts that no safety
/// property fails among them.
fn bounded(label: &str, model: FairModel) -> impl Checker<FairModel> {
    let checker = model_support::bfs(label, model, BOUND);
    assert_safe(label, &checker);
    checker
}

/// [`bounded`], depth first: long behaviours, not all of the short ones.
fn deep(label: &str, model: FairModel) -> impl Checker<FairModel> {
    let checker = model_support::dfs(label, model, None, Some(BOUND));
    assert_safe(label, &checker);
    checker
}

/// Says whether the search covered the whole space, and asserts that no
/// safety property failed in what it covered.
fn assert_safe(label: &str, checker: &impl Checker<FairModel>) {
    let whole = model_support::exhaustive(checker, Some(BOUND));
    println!("{label}: {}", if whole { "exhaustive" } else { "bounded" });
    for property in [EXCLUSION, ORDER, NO_STALL] {
        checker.assert_no_discovery(property);
    }
}

/// The shortest behaviour (of those searched) that breaks `property`.
fn counterexample(label: &str, model: FairModel, property: &'static str) -> Vec<Action> {
    let focus: &'static [&'static str] = match property {
        EXCLUSION => &[EXCLUSION],
        ORDER => &[ORDER],
        _ => &[NO_STALL],
    };
    let stop = Stop {
        bound: Some(BOUND),
        at_failure: true,
    };
    let (_, path) =
        model_support::counterexample(label, FairModel { focus, ..model }, stop, &[property]);
    path.into_actions()
}

/// Where a bounded search stops, and a safety net on each search's size.
const BOUND: usize = 3_000_000;

#[test]
#[ignore = "long model search (10 s and more): `cargo test --test model_fair -- --ignored`, run by .ci/run"]
fn two_callers_with_every_fault_keep_exclusion_order_and_progress() {
    let model = FairModel {
        copies: 1,
        ..FairModel::new(Rules::Design, 2)
    };
    bounded("two callers", model);
}

/// The same, depth first: whole calls (queued, skipped, granted) with
/// faults among them, where the breadth-first search stops short.
#[test]
#[ignore = "long model search (10 s and more): `cargo test --test model_fair -- --ignored`, run by .ci/run"]
fn two_callers_with_every_fault_deep() {
    let model = FairModel {
        copies: 1,
        ..FairModel::new(Rules::Design, 2)
    };
    let checker = deep("two callers, deep", model);
    checker.assert_any_discovery("a waiter is granted after waiting");
    checker.assert_any_discovery("a resumed waiter is told it lost its place");
}

#[test]
#[ignore = "long model search (10 s and more): `cargo test --test model_fair -- --ignored`, run by .ci/run"]
fn three_callers_keep_order() {
    let model = FairModel {
        faults: false,
        lockstep: true,
        ..FairModel::quiet(Rules::Design, 3)
    };
    let checker = bounded("three callers, quiet", model);
    checker.assert_any_discovery("a waiter is granted after waiting");
}

#[test]
fn tickets_from_the_callers_clocks_break_order() {
    let model = FairModel {
        faults: false,
        lockstep: true,
        ..FairModel::quiet(Rules::ClientClock, 2)
    };
    counterexample("client clock", model, ORDER);
}

#[test]
fn waiters_without_heartbeats_stall_the_queue() {
    let model = FairModel {
        lockstep: true,
        ..FairModel::quiet(Rules::NoHeartbeat, 2)
    };
    counterexample("no heartbeat", model, NO_STALL);
}

#[test]
fn a_head_that_never_expires_stalls_the_queue() {
    let model = FairModel {
        lockstep: true,
        ..FairModel::quiet(Rules::HeadNeverExpires, 2)
    };
    counterexample("head never expires", model, NO_STALL);
}

/// Not finished: still deciding or waiting.
fn running(caller: &Caller) -> bool {
    caller.life == Life::Running
        && matches!(caller.phase, Phase::Ticket | Phase::Enqueue | Phase::Wait)
}

/// Caller `c`'s value in its current attempt.
fn mine(s: &State, c: usize) -> (u8, u8) {
    (c as u8, s.callers[c].attempt)
}
