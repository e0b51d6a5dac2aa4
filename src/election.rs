//! Leader election with a fenced term, over the lock, its guard and its
//! watchdog: a leader is the holder of the election's lock, its term is
//! that grant's fencing token.
//!
//! The term only grows from one leader to the next, for the same reasons
//! fencing tokens do (see `docs/protocol.md`), including across instance
//! restarts within the fault model: a store that keeps the highest term it
//! has seen refuses a deposed leader's late write.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use parking_lot::Mutex;

use crate::protocol::keys::validate_resource;
use crate::protocol::scripts;
use crate::transport::outgoing::Outgoing;
use crate::transport::round::yes_no;
use crate::{telemetry, Error, FencingToken, LockGuard, LockOptions, LossReason, Redlock};

/// How long one lock call of a campaign waits before the campaign looks at
/// its stop signal again (release wake-ups reach it within the call).
const CAMPAIGN_SLICE: Duration = Duration::from_millis(200);

/// Longest pause between two readings of an observer, whatever the lease.
const MAX_OBSERVE_POLL: Duration = Duration::from_millis(100);

/// A named election among the clients of a set of instances: created by
/// [`Redlock::election`].
///
/// The leader is the client that holds the election's lock (resource
/// `election:NAME`); its lease is the client's default TTL unless set with
/// [`lease`](Self::lease), and the watchdog keeps it while the leader
/// lives. The term ([`Leadership::term`]) is the fencing token of the
/// grant: send it with every write the leader makes.
///
/// ```no_run
/// use redfence::Redlock;
///
/// let locks = Redlock::builder(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
///     .identity("scheduler-a")
///     .build()?;
/// let election = locks.election("billing-scheduler")?;
/// let term = election.campaign()?; // blocks until elected
/// while term.is_leader() {
///     // schedule work, each write carrying term.term()
/// #   break;
/// }
/// term.resign()?; // standbys take over at once
/// # Ok::<(), redfence::Error>(())
/// ```
// Dropping it joins its observer threads.
#[clippy::has_significant_drop]
pub struct Election {
    locks: Redlock,
    name: String,
    resource: String,
    options: LockOptions,
    observers: Mutex<Vec<Observer>>,
}

struct Observer {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Redlock {
    /// An election named `name` among the clients of these instances. The
    /// name is validated as a resource name (1 to 1015 bytes).
    pub fn election(&self, name: &str) -> Result<Election, Error> {
        let resource = format!("election:{name}");
        if name.is_empty() {
            return Err(Error::InvalidResource {
                reason: "the election name is empty".to_string(),
            });
        }
        validate_resource(&resource)?;
        telemetry::election_created(name);
        Ok(Election {
            locks: self.clone(),
            name: name.to_string(),
            resource,
            options: self.shared().cfg.defaults.hold_at_least(Duration::ZERO),
            observers: Mutex::new(Vec::new()),
        })
    }
}

impl Election {
    /// Sets the leader's lease: how long the instances keep a leadership
    /// whose leader stopped answering, and so how long a standby may wait
    /// after a leader dies without resigning. Validated at each campaign
    /// like a lock's TTL.
    ///
    /// Defaults to the client's default TTL (30 s unless set with
    /// [`RedlockBuilder::default_options`](crate::RedlockBuilder::default_options)).
    #[must_use = "a setter returns the changed election, which must be used"]
    pub fn lease(mut self, ttl: Duration) -> Self {
        self.options = self.options.ttl(ttl);
        self
    }

    /// Lets `cancel` stop a campaign from another thread:
    /// [`campaign`](Self::campaign) (and [`run`](Self::run) while it
    /// campaigns) then return [`Error::Cancelled`] within one instance
    /// timeout. A leadership already won is not affected: resign it.
    #[must_use = "a setter returns the changed election, which must be used"]
    pub fn cancel(mut self, cancel: &crate::Cancel) -> Self {
        self.options = self.options.cancel(cancel);
        self
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// One lock call of a campaign: the slice, plus the two instance
    /// timeouts a lock call keeps free at the end of its budget (without
    /// them a slow client's call would make one attempt and return, and
    /// the campaign would spin).
    fn slice(&self) -> Duration {
        CAMPAIGN_SLICE + self.locks.shared().cfg.instance_timeout * 2
    }

    /// Campaigns until elected: blocks while another client leads, and is
    /// woken at once when it resigns. Returns early only on an error that
    /// waiting cannot fix (a foreign value on the keys, bad options).
    pub fn campaign(&self) -> Result<Leadership, Error> {
        loop {
            match self.campaign_for(self.slice()) {
                Err(e) if e.is_retryable() => continue,
                other => return other,
            }
        }
    }

    /// One attempt: [`Error::Contended`] naming the leader
    /// (`holder`) if another client leads.
    pub fn try_campaign(&self) -> Result<Leadership, Error> {
        self.campaign_for(Duration::ZERO)
    }

    /// Campaigns for at most `wait`; [`Error::Contended`] when the time
    /// runs out while another client leads.
    pub fn campaign_for(&self, wait: Duration) -> Result<Leadership, Error> {
        let guard = self
            .locks
            .lock_with(&self.resource, self.options.wait(wait))?;
        self.record_term(&guard);
        telemetry::leader_elected(&self.name, guard.token());
        // From now on a loss of the lease, when it is noticed (by the
        // watchdog, or by a check), is recorded as a loss of leadership.
        let _ = guard.lease().election.set(self.name.clone());
        Ok(Leadership {
            guard: Some(guard),
            election: self.name.clone(),
            identity: self.locks.identity().to_string(),
        })
    }

    /// Records the term next to the lock for observers, and waits (one
    /// instance timeout at most) until a quorum has it. Only observers
    /// depend on it: the leadership stands whatever the answer.
    fn record_term(&self, guard: &LockGuard) {
        let shared = self.locks.shared();
        let lease = guard.lease();
        let keys = &lease.target.members[0].keys;
        let (value, term, idle) = (&lease.value, guard.token().get(), shared.cfg.fence_idle);
        // Then announced on the release channel: observers read at once.
        // (Standbys waiting there try once more and wait again.)
        let pack = |sharded| scripts::term_and_announce(keys, value, term, idle, sharded);
        let on_cluster = || pack(true);
        let out = Outgoing::to_slot(keys.slot, pack(false)).on_cluster(&on_cluster);
        let deadline = shared.round_deadline();
        let _ = shared
            .instances
            .round(&out, deadline, yes_no)
            .wait(deadline);
    }

    /// Who leads now, as a quorum of the instances sees it: `None` while
    /// nobody does. Anyone may ask, leader or not.
    pub fn leader(&self) -> Result<Option<LeaderInfo>, Error> {
        Ok(self.locks.holder(&self.resource)?.map(|h| LeaderInfo {
            identity: h.identity,
            validity: h.ttl,
            term: h.counter.map(FencingToken::new),
        }))
    }

    /// A stream of leadership changes: [`LeaderEvent::Elected`] for each new
    /// term seen, [`LeaderEvent::Vacant`] when a term seen elected has
    /// ended and nobody leads yet. The first event describes the current
    /// leader, if any; a Vacant is never sent for a term that was not seen
    /// elected. Pushed: the observer reads the instances when a release or
    /// an election is announced on the election's channel, and every poll
    /// (a tenth of the lease, at most 100 ms) in case an announcement was
    /// missed or a leader died without one.
    ///
    /// One named thread reads the instances for each receiver; it stops
    /// when the receiver is dropped (at the next change) or the election
    /// is dropped (at once, joined).
    pub fn observe(&self) -> Receiver<LeaderEvent> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let poll = (self.options.get_ttl() / 10).clamp(Duration::from_millis(10), MAX_OBSERVE_POLL);
        let locks = self.locks.clone();
        let resource = self.resource.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("redfence-observe-{}", self.name))
            .spawn(move || observe(&locks, &resource, poll, &tx, &stop_rx));
        let mut observers = self.observers.lock();
        // Threads whose receiver is gone have ended: join them.
        let (done, live): (Vec<Observer>, Vec<Observer>) =
            observers.drain(..).partition(|o| o.thread.is_finished());
        for o in done {
            let _ = o.thread.join();
        }
        *observers = live;
        match spawned {
            Ok(thread) => observers.push(Observer {
                stop: stop_tx,
                thread,
            }),
            Err(e) => {
                telemetry::observer_failed(&self.name, &e);
                // The sender went with the closure: the receiver is
                // disconnected at once.
            }
        }
        rx
    }

    /// Leads while it can, until `stop` fires (a message, or every sender
    /// dropped: prefer dropping, which every clone of the receiver sees).
    ///
    /// Campaigns; once elected, calls `lead` with the leadership, once per
    /// term. `lead` should work while [`Leadership::is_leader`] holds (or
    /// until its [`loss_signal`](Leadership::loss_signal) or `stop` fires)
    /// and then return; `run` resigns the term if it is still held, and
    /// campaigns again after a random pause, unless `stop` fired. Nothing is
    /// called after a campaign that did not win. An error from `lead` ends
    /// `run` and is returned (the term is resigned first); so is a lock
    /// error that waiting cannot fix.
    ///
    /// ```no_run
    /// use redfence::crossbeam_channel::{bounded, select};
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// let election = locks.election("billing-scheduler")?;
    /// let (stop_tx, stop) = bounded::<()>(0); // drop stop_tx to stop (e.g. on SIGTERM)
    /// # drop(stop_tx);
    /// election.run(&stop, |term| {
    ///     let lost = term.loss_signal();
    ///     select! {
    ///         recv(lost) -> _ => {}          // deposed: run campaigns again
    ///         recv(stop) -> _ => {}          // shutting down: run resigns
    ///     }
    ///     Ok::<(), redfence::Error>(())
    /// })?;
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn run<E, F>(&self, stop: &Receiver<()>, mut lead: F) -> Result<(), E>
    where
        F: FnMut(&Leadership) -> Result<(), E>,
        E: From<Error>,
    {
        let retry_delay = self.locks.shared().cfg.retry_delay;
        loop {
            let term = loop {
                if stopped(stop) {
                    return Ok(());
                }
                match self.campaign_for(self.slice()) {
                    Ok(term) => break term,
                    Err(e) if e.is_retryable() => {}
                    Err(e) => return Err(e.into()),
                }
            };
            let result = lead(&term);
            if term.is_leader() {
                // Given up by choice (or on stop): standbys take over now.
                let _ = term.resign();
            } else {
                drop(term);
            }
            result?;
            if stopped(stop) {
                return Ok(());
            }
            // Jitter, so that clients deposed together do not collide.
            let pause = crate::lock::retry::pause(retry_delay);
            match stop.recv_timeout(pause) {
                Ok(()) | Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Ok(()),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            }
        }
    }
}

fn stopped(stop: &Receiver<()>) -> bool {
    matches!(stop.try_recv(), Ok(()) | Err(TryRecvError::Disconnected))
}

impl Drop for Election {
    fn drop(&mut self) {
        for o in self.observers.get_mut().drain(..) {
            drop(o.stop); // disconnects: the thread's stop signal
            let _ = o.thread.join();
        }
    }
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("lease", &self.options.get_ttl())
            .finish()
    }
}

/// The observer thread: reads the leader every `poll` and reports changes.
fn observe(
    locks: &Redlock,
    resource: &str,
    poll: Duration,
    events: &Sender<LeaderEvent>,
    stop: &Receiver<()>,
) {
    let Ok(target) = crate::protocol::keys::Target::one(&locks.shared().cfg.prefix, resource)
    else {
        return; // validated when the election was created
    };
    let announced = locks.notifier().observe(&[&target.members[0].keys.channel]);
    // The term last reported elected, if any.
    let mut current: Option<(Option<String>, Option<u64>)> = None;
    loop {
        let started = Instant::now();
        // A leader whose term is not recorded yet is reported once it is.
        let reading = locks
            .holder(resource)
            .map(|h| h.filter(|h| h.counter.is_some()));
        if let Ok(holder) = reading {
            let event = match (holder, &current) {
                (Some(h), Some((identity, term)))
                    if h.identity == *identity && h.counter == *term =>
                {
                    None
                }
                (Some(h), _) => {
                    current = Some((h.identity.clone(), h.counter));
                    Some(LeaderEvent::Elected {
                        identity: h.identity,
                        term: h.counter.map(FencingToken::new),
                    })
                }
                (None, Some(_)) => {
                    current = None;
                    Some(LeaderEvent::Vacant)
                }
                (None, None) => None,
            };
            if let Some(event) = event {
                if events.send(event).is_err() {
                    return; // the receiver is gone
                }
            }
        }
        let wait = poll.saturating_sub(started.elapsed());
        crossbeam_channel::select! {
            recv(stop) -> _ => return,
            recv(announced.wake_signal()) -> _ => {}
            default(wait) => {}
        }
    }
}

/// Leadership of an [`Election`], won by a campaign: valid while
/// [`is_leader`](Self::is_leader) says so. Dropping it resigns without
/// waiting; [`resign`](Self::resign) waits and reports.
///
/// ```no_run
/// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
/// # let election = locks.election("e")?;
/// let term = election.campaign()?;
/// term.ensure_leader()?;                   // right before each write…
/// let t: u64 = term.term().get();          // …which carries the term
/// # let _ = t;
/// term.resign()?;
/// # Ok::<(), redfence::Error>(())
/// ```
#[must_use = "if unused the leadership is resigned immediately"]
#[clippy::has_significant_drop]
pub struct Leadership {
    guard: Option<LockGuard>,
    election: String,
    identity: String,
}

impl Leadership {
    fn guard(&self) -> &LockGuard {
        // Taken out only by resign(self) and drop.
        self.guard
            .as_ref()
            .expect("a live Leadership holds its guard")
    }

    /// The term: the fencing token of this leadership, higher than every
    /// earlier leader's. Send it with every write, to a store that refuses
    /// terms below the highest it has seen.
    pub fn term(&self) -> FencingToken {
        self.guard().token()
    }

    /// True while this client is guaranteed to lead; turns false no later
    /// than the moment its lease may have expired on the instances, as
    /// [`LockGuard::is_held`].
    pub fn is_leader(&self) -> bool {
        self.guard().is_held()
    }

    /// `Ok(())` while leading, [`Error::Lost`] once not. Call it before
    /// each write the leader makes.
    pub fn ensure_leader(&self) -> Result<(), Error> {
        self.guard().ensure_held()
    }

    /// Time left during which the leadership is guaranteed.
    pub fn validity(&self) -> Duration {
        self.guard().validity()
    }

    /// A channel that receives one message when the leadership is lost
    /// (for `select!`), as [`LockGuard::loss_signal`].
    pub fn loss_signal(&self) -> Receiver<LossReason> {
        self.guard().loss_signal()
    }

    /// The election's name.
    pub fn election(&self) -> &str {
        &self.election
    }

    /// This leader's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Steps down: releases the leadership and announces it, so standbys
    /// take over at once. [`Error::Lost`] if it was already lost.
    pub fn resign(mut self) -> Result<(), Error> {
        let term = self.term();
        let result = match self.guard.take() {
            Some(guard) => guard.release(),
            None => Ok(()),
        };
        // A loss is recorded where it is noticed (see `Lease::election`);
        // release() reports one noticed before it.
        if !matches!(result, Err(Error::Lost { .. })) {
            telemetry::leader_ended(&self.election, term, "resigned");
        }
        result
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            // A loss is recorded where it is noticed (see `Lease::election`).
            let lost = !guard.is_held();
            let term = guard.token();
            drop(guard);
            if !lost {
                telemetry::leader_ended(&self.election, term, "resigned");
            }
        }
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Leadership");
        d.field("election", &self.election)
            .field("identity", &self.identity);
        if let Some(guard) = &self.guard {
            d.field("term", &guard.token())
                .field("validity", &guard.validity());
        }
        d.finish()
    }
}

/// Who leads an election, from [`Election::leader`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The leader's identity (`None` for a client that predates identities).
    pub identity: Option<String>,
    /// How long a quorum of instances keeps the leadership without a word
    /// from the leader.
    pub validity: Duration,
    /// The leader's term, as the instances' fencing counters show it.
    pub term: Option<FencingToken>,
}

/// A change of leadership, from [`Election::observe`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderEvent {
    /// A leader was elected (or was leading when the observation began).
    Elected {
        /// Its identity (`None` for a client that predates identities).
        identity: Option<String>,
        /// Its term, as the instances' fencing counters show it.
        term: Option<FencingToken>,
    },
    /// The term last reported elected has ended and nobody leads yet.
    Vacant,
}
