//! Fair (FIFO) locks: a lock whose callers are granted in the order they
//! asked, among those still alive.
//!
//! A fair lock *is* the lock of the same name (same lock key, fence
//! counter, void keys, release channel; granted by `lua/acquire.lua`,
//! kept and released by the same lease machinery), plus a queue on each
//! instance that only decides who may attempt (`lua/fair_gate.lua`, which
//! runs in front of `lua/acquire.lua` in one script). Exclusion and tokens
//! therefore hold for the reasons a lock's do.
//!
//! A call's first round takes a ticket on every instance, and takes the
//! lock at once where nobody queues (the uncontended case costs one
//! round, as a lock's does). Refused, it keeps the *largest* ticket of a
//! quorum, which is above every ticket a quorum already holds, and joins
//! every queue with it (`lua/fair_enqueue.lua`). From then on each attempt
//! is granted only to the first live waiter of the queue, and doubles as
//! the waiter's heartbeat; a waiter whose heartbeat stops for the
//! heartbeat TTL is dropped, and told so ([`Error::Skipped`]) if it comes
//! back. `tests/model_fair.rs` checks these rules; docs/fair.md argues the
//! rest.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Redlock;
use crate::guard::LockGuard;
use crate::lock::acquire::{self, Failure, Grant, Lifetime, QueueNote};
use crate::lock::call::Step;
use crate::lock::shared::Shared;
use crate::protocol::keys::{FairQueue, Kind, Target, FAIR_TAG};
use crate::protocol::scripts;
use crate::transport::notify::Tag;
use crate::transport::outgoing::Outgoing;
use crate::transport::round::all_yes;
use crate::{Error, LockOptions};

/// How long a waiter's heartbeat keeps its place by default.
pub const FAIR_HEARTBEAT: Duration = Duration::from_secs(1);

/// The shortest heartbeat TTL a fair lock accepts: a waiter beats at
/// least every 350 ms with it (a release wait of 250 ms after a skipped
/// wake-up within a fifth of the TTL), with room for a round trip.
pub const MIN_FAIR_HEARTBEAT: Duration = Duration::from_millis(500);

/// How far apart the instances' announcements of one release arrive, at
/// most, for a waiter to count them as one.
const RELEASE_COPIES: Duration = Duration::from_millis(20);

/// Fair releases a waiter remembers to know a copy from a new release: the
/// copies of one release arrive within a round, a few releases apart at
/// most.
const COUNTED_RELEASES: usize = 16;

/// The longest heartbeat TTL a fair lock accepts.
pub const MAX_FAIR_HEARTBEAT: Duration = Duration::from_secs(60);

impl Redlock {
    /// A handle on the fair lock `name`: callers are granted in the order
    /// they asked, among those still alive. Cheap; it checks nothing until
    /// used.
    ///
    /// The fair lock is the lock of the same name, with a queue in front:
    /// its guard is a [`LockGuard`], its tokens are that lock's, and
    /// [`holder`](Redlock::holder) and
    /// [`force_release`](Redlock::force_release) apply to it. A plain
    /// [`lock`](Redlock::lock) call on the same name takes the same lock
    /// without queueing: use one kind of call per name.
    ///
    /// ```no_run
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// let payouts = locks.fair_lock("payouts");
    /// let guard = payouts.lock()?; // in the order callers asked
    /// println!("holding with token {}", guard.token());
    /// guard.release()?;
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn fair_lock(&self, name: &str) -> FairLock {
        FairLock {
            client: self.clone(),
            name: name.to_string(),
            heartbeat: FAIR_HEARTBEAT,
            #[cfg(feature = "testing")]
            observer: None,
        }
    }
}

/// A fair (FIFO) lock over the instances (see [`Redlock::fair_lock`]).
/// Clones share the client.
#[derive(Clone)]
pub struct FairLock {
    client: Redlock,
    name: String,
    heartbeat: Duration,
    /// Told of each call's join (the `testing` feature's hook).
    #[cfg(feature = "testing")]
    observer: Option<JoinObserver>,
}

/// A call of a fair lock joined the queues: its ticket, when its join
/// began and when a quorum of queues had it. Reported, with the
/// `testing` feature, to the observer [`FairLock::observed`] sets, so that
/// a test or a bench can judge the order of grants against the tickets.
#[cfg(feature = "testing")]
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FairJoin {
    /// The call's place: below every ticket of a call that joins after.
    pub ticket: u64,
    /// Its first join round began.
    pub started: Instant,
    /// A quorum of queues had it.
    pub joined: Instant,
}

/// What [`FairLock::observed`] calls: on the calling thread, inside the
/// lock call, right after the join and before the first queued attempt
/// (an observer that sleeps is a waiter whose process paused there).
#[cfg(feature = "testing")]
#[doc(hidden)]
pub type JoinObserver = Arc<dyn Fn(FairJoin) + Send + Sync>;

impl std::fmt::Debug for FairLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.name)
            .field("heartbeat", &self.heartbeat)
            .finish()
    }
}

impl FairLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This handle with another heartbeat TTL (default 1 s): a waiter
    /// whose heartbeat stops for this long is dropped from the queue, and
    /// the waiters behind it go ahead. Waiters beat several times per TTL;
    /// a shorter TTL skips the dead sooner and costs more commands. Calls
    /// fail with [`Error::InvalidOptions`] outside
    /// [`MIN_FAIR_HEARTBEAT`]..=[`MAX_FAIR_HEARTBEAT`].
    ///
    /// ```no_run
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// use std::time::Duration;
    /// let queue = locks.fair_lock("payouts").heartbeat(Duration::from_secs(2));
    /// let guard = queue.lock()?;
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn heartbeat(mut self, ttl: Duration) -> FairLock {
        self.heartbeat = ttl;
        self
    }

    /// This handle with `observer` told of each call's join (its ticket
    /// and times), with the `testing` feature: the nemesis bench judges
    /// the order of grants by it. Not part of the stable API.
    ///
    /// ```no_run
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// use std::sync::Arc;
    /// let queue = locks
    ///     .fair_lock("payouts")
    ///     .observed(Arc::new(|join: redfence::FairJoin| println!("ticket {}", join.ticket)));
    /// # Ok::<(), redfence::Error>(())
    /// ```
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn observed(mut self, observer: JoinObserver) -> FairLock {
        self.observer = Some(observer);
        self
    }

    /// Locks, waiting in line (up to the client's default wait).
    pub fn lock(&self) -> Result<LockGuard, Error> {
        self.lock_with(self.client.shared().cfg.defaults)
    }

    /// Locks if nobody holds the lock or waits for it;
    /// [`Error::Contended`] otherwise.
    pub fn try_lock(&self) -> Result<LockGuard, Error> {
        self.lock_with(self.client.shared().cfg.defaults.wait(Duration::ZERO))
    }

    /// Locks, waiting in line at most `wait`.
    pub fn try_lock_for(&self, wait: Duration) -> Result<LockGuard, Error> {
        self.lock_with(self.client.shared().cfg.defaults.wait(wait))
    }

    /// Locks, waiting in line at most until `deadline`.
    pub fn try_lock_until(&self, deadline: Instant) -> Result<LockGuard, Error> {
        self.try_lock_for(deadline.saturating_duration_since(Instant::now()))
    }

    /// Locks with these options (TTL, wait, watchdog, cancellation, hold),
    /// as [`Redlock::lock_with`] does, waiting in line. A call that ends
    /// without the lock (its wait spent, cancelled) leaves the queue; one
    /// dropped from the queue for a late heartbeat fails with
    /// [`Error::Skipped`].
    pub fn lock_with(&self, options: LockOptions) -> Result<LockGuard, Error> {
        let step = self.step().map(|mut step| {
            step.patient = options.get_wait() > Duration::ZERO;
            step
        });
        let queue = step
            .as_ref()
            .ok()
            .map(|s| (s.queue(), Arc::clone(&s.queued)));
        let lease = self.client.acquire_by(&self.name, step, options);
        if let Some((queue, queued)) = queue {
            // Granted, its entry is gone where the grant ran; elsewhere,
            // and after a call that ended without the lock, it leaves.
            if queued.load(Ordering::Relaxed) {
                self.leave(&queue);
            }
        }
        Ok(LockGuard::new(lease?, self.client.keep_alive()))
    }

    /// Revokes the holder of the lock, as [`Redlock::force_release`] does
    /// (the same lock). The queue stays: the first live waiter goes next.
    ///
    /// ```no_run
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// locks.fair_lock("payouts").force_release()?;
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn force_release(&self) -> Result<Option<crate::Holder>, Error> {
        self.client.force_release(&self.name)
    }

    fn step(&self) -> Result<FairStep, Error> {
        if !(MIN_FAIR_HEARTBEAT..=MAX_FAIR_HEARTBEAT).contains(&self.heartbeat) {
            return Err(Error::InvalidOptions {
                reason: format!(
                    "fair lock {:?}: heartbeat TTL {:?}, the range is {MIN_FAIR_HEARTBEAT:?} to \
                     {MAX_FAIR_HEARTBEAT:?}",
                    self.name, self.heartbeat
                ),
            });
        }
        let shared = self.client.shared();
        let mut queue = FairQueue::new(&shared.cfg.prefix, &self.name, self.heartbeat);
        queue.call = format!("{}:{}", queue.call, shared.cfg.identity);
        let target = Target::fair(&shared.cfg.prefix, &self.name, queue)?;
        Ok(FairStep {
            target,
            ticket: None,
            joining: None,
            ahead: None,
            last_beat: Instant::now(),
            last_release: None,
            counted: std::collections::VecDeque::new(),
            tagged_wake: false,
            queued: Arc::new(AtomicBool::new(false)),
            patient: true,
            join_started: None,
            #[cfg(feature = "testing")]
            observer: self.observer.clone(),
        })
    }

    /// Takes the call's entry out of every queue, without waiting: an
    /// entry whose removal is lost expires within a heartbeat TTL.
    fn leave(&self, queue: &FairQueue) {
        let shared = self.client.shared();
        let packed = scripts::fair_enqueue(queue, 0, shared.cfg.fence_idle);
        let slot = crate::protocol::keys::Keys::new(&shared.cfg.prefix, &self.name).slot;
        let out = Outgoing::to_slot(slot, (packed, 1));
        shared
            .instances
            .send_persistent(&out, Instant::now() + queue.beat, None, |_| true);
    }
}

/// The attempts of one fair lock call.
struct FairStep {
    /// The lock, with the call's queue entry (its kind is `Fair`).
    target: Target,
    /// Its ticket, once it joined the queues.
    ticket: Option<u64>,
    /// The ticket of a join that has not reached a quorum yet.
    joining: Option<u64>,
    /// Live waiters ahead of it, as a quorum last said (0: the head).
    ahead: Option<u64>,
    /// When its last attempt (its heartbeat) was sent.
    last_beat: Instant,
    /// When it last counted an untagged release (see [`Step::released`]).
    last_release: Option<Instant>,
    /// The fair releases (`fair:TOKEN`) counted lately, newest last: each
    /// instance announces a release, and the copies count once.
    counted: std::collections::VecDeque<Tag>,
    /// The last wake-up brought fair releases (counted by tag, not time).
    tagged_wake: bool,
    /// It joined the queues (so it must leave them).
    queued: Arc<AtomicBool>,
    /// The call may wait (a `try_lock` takes the lock or nothing, and
    /// does not queue).
    patient: bool,
    /// When its first join round began (what an observer is told).
    join_started: Option<Instant>,
    #[cfg(feature = "testing")]
    observer: Option<JoinObserver>,
}

impl FairStep {
    fn queue(&self) -> FairQueue {
        // Set by `FairLock::step`, the only maker of a fair step.
        let Kind::Fair(queue) = &self.target.kind else {
            return FairQueue::new("", "", FAIR_HEARTBEAT);
        };
        queue.clone()
    }

    fn beat(&self) -> Duration {
        let Kind::Fair(queue) = &self.target.kind else {
            return FAIR_HEARTBEAT;
        };
        queue.beat
    }

    /// Whether this wake-up is worth a round: the head attempts at once;
    /// the others only when their heartbeat is due.
    fn due(&self) -> bool {
        let head = self.ahead.is_none_or(|ahead| ahead == 0);
        head || self.last_beat.elapsed() >= (self.beat() / 5).min(Duration::from_millis(200))
    }

    /// The first round: a ticket, or the lock where nobody queues. Refused
    /// by a quorum, the call joins the queues with the largest ticket of a
    /// quorum, and attempts at once.
    fn ticket_round(&mut self, shared: &Shared, life: Lifetime) -> Result<Grant, Failure> {
        if let Some(ticket) = self.joining {
            // A join short of a quorum: again with the same ticket, so
            // that the instances it reached keep one order.
            self.join(shared, ticket)?;
            return self.queued_attempt(shared, life);
        }
        let failure = match acquire::attempt(shared, &self.target, life) {
            Ok(grant) => return Ok(grant),
            Err(failure) => failure,
        };
        let tickets: Vec<u64> = failure
            .queue
            .iter()
            .filter_map(|(_, note)| match note {
                QueueNote::Ticket(t) => Some(*t),
                _ => None,
            })
            .collect();
        let quorum = shared.instances.quorum();
        let Some(ticket) = tickets.iter().copied().max() else {
            return Err(failure);
        };
        if !quorum.reached(tickets.len()) || !self.patient {
            return Err(failure);
        }
        self.join(shared, ticket)?;
        self.queued_attempt(shared, life)
    }

    /// Joins every queue with `ticket`, waiting for a quorum.
    fn join(&mut self, shared: &Shared, ticket: u64) -> Result<(), Failure> {
        let queue = self.queue();
        let packed = scripts::fair_enqueue(&queue, ticket, shared.cfg.fence_idle);
        let out = Outgoing::to_slot(self.target.members[0].keys.slot, (packed, 1));
        let deadline = shared.round_deadline();
        self.queued.store(true, Ordering::Relaxed);
        self.joining = Some(ticket);
        let started = *self.join_started.get_or_insert_with(Instant::now);
        let tally = shared
            .instances
            .round(&out, deadline, all_yes)
            .wait(deadline);
        let quorum = shared.instances.quorum();
        if !quorum.reached(tally.yes.len()) {
            let (size, joined) = (quorum.size(), tally.yes.len());
            let error = Error::unavailable(&self.target.name, size, joined, tally.failed);
            return Err(Failure::from(error));
        }
        self.ticket = Some(ticket);
        self.joining = None;
        if let Kind::Fair(queue) = &mut self.target.kind {
            queue.ticket_round = false;
        }
        self.joined(ticket, started);
        Ok(())
    }

    /// Tells the observer, if any, of the join (the `testing` feature).
    #[cfg(feature = "testing")]
    fn joined(&self, ticket: u64, started: Instant) {
        if let Some(observer) = &self.observer {
            let joined = Instant::now();
            observer(FairJoin {
                ticket,
                started,
                joined,
            });
        }
    }

    #[cfg(not(feature = "testing"))]
    fn joined(&self, _ticket: u64, _started: Instant) {}

    /// An attempt of a queued waiter, its heartbeat too. Gone from a
    /// quorum of queues, the call lost its place; gone from fewer (a grant
    /// short of a quorum removed the entry, or an instance lost it), it
    /// joins those again with its ticket.
    fn queued_attempt(&mut self, shared: &Shared, life: Lifetime) -> Result<Grant, Failure> {
        self.last_beat = Instant::now();
        let failure = match acquire::attempt(shared, &self.target, life) {
            Ok(grant) => return Ok(grant),
            Err(failure) => failure,
        };
        let quorum = shared.instances.quorum();
        let gone = failure.queue.iter().filter(|(_, n)| *n == QueueNote::Gone);
        if quorum.reached(gone.count()) {
            let resource = self.target.name.clone();
            return Err(Failure::from(Error::Skipped { resource }));
        }
        let mut ahead: Vec<u64> = failure
            .queue
            .iter()
            .filter_map(|(_, n)| match n {
                QueueNote::Ahead(a) => Some(*a),
                _ => None,
            })
            .collect();
        ahead.sort_unstable();
        self.ahead = ahead.get(quorum.size() - 1).copied().or(self.ahead);
        let rejoin = failure.granted > 0 || failure.queue.len() > ahead.len();
        if let (true, Some(ticket)) = (rejoin, self.ticket) {
            let queue = self.queue();
            let packed = scripts::fair_enqueue(&queue, ticket, shared.cfg.fence_idle);
            let out = Outgoing::to_slot(self.target.members[0].keys.slot, (packed, 1));
            let until = Instant::now() + queue.beat;
            shared
                .instances
                .send_persistent(&out, until, None, |_| true);
        }
        Err(failure)
    }
}

impl Step for FairStep {
    fn name(&self) -> &str {
        &self.target.name
    }

    fn channels(&self) -> Vec<String> {
        vec![self.target.members[0].keys.channel.clone()]
    }

    fn attempt(&mut self, shared: &Shared, life: Lifetime) -> Result<Grant, Failure> {
        if self.ticket.is_none() {
            return self.ticket_round(shared, life);
        }
        if !self.due() {
            // Woken for a release the head takes: nothing to send yet.
            return Err(Failure::from(Error::Contended {
                resource: self.target.name.clone(),
                attempts: 0,
                holder: None,
            }));
        }
        self.queued_attempt(shared, life)
    }

    fn into_target(self) -> Target {
        self.target
    }

    fn queues_on_instances(&self) -> bool {
        true
    }

    /// Every fair waiter of the client observes every release itself:
    /// none takes a turn from another (each counts the line moving up).
    fn observes_releases(&self) -> bool {
        true
    }

    /// A fair lock's release announces `fair:TOKEN` on every instance:
    /// each new token is one release, whatever the copies and however
    /// close two releases come (see [`released`](Self::released)).
    fn woken_by(&mut self, tags: &[Tag]) {
        self.tagged_wake = false;
        for tag in tags.iter().filter(|t| t.starts_with(FAIR_TAG)) {
            self.tagged_wake = true;
            if self.counted.contains(tag) {
                continue;
            }
            if self.counted.len() == COUNTED_RELEASES {
                self.counted.pop_front();
            }
            self.counted.push_back(Arc::clone(tag));
            self.ahead = self.ahead.map(|ahead| ahead.saturating_sub(1));
        }
    }

    /// A release moves the line up by one: the waiter one behind the head
    /// it was told of is now the head, without waiting for its heartbeat
    /// to say so. A fair release was counted by its tag already; an
    /// untagged one (a plain lock call's, or an operator's unlock, on the
    /// same name) counts once for copies within `RELEASE_COPIES`. A count
    /// too high costs one refused attempt (whose reply sets the place
    /// right), too low a heartbeat's delay.
    fn released(&mut self) {
        if self.tagged_wake {
            return;
        }
        let now = Instant::now();
        if self.last_release.is_none_or(|at| now - at > RELEASE_COPIES) {
            self.ahead = self.ahead.map(|ahead| ahead.saturating_sub(1));
            self.last_release = Some(now);
        }
    }
}
