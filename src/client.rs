//! The client: what a program holds to lock resources.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::error::{InstanceError, NO_ANSWER};
use crate::guard::{ClientCore, KeepAlive, LockGuard, MultiGuard};
use crate::lock::call::{self, Caller, Step};
use crate::lock::lease::Lease;
use crate::lock::shared::Shared;
use crate::lock::watchdog::Watchdog;
use crate::protocol::clock::{self, Reading};
use crate::protocol::keys::Target;
use crate::telemetry;
use crate::transport::instance::{Request, Sink};
use crate::transport::notify::Notifier;
use crate::{Error, LockOptions};

/// A Redlock client over N independent Redis masters.
///
/// Cheap to clone (clones share workers and the watchdog) and safe to use
/// from many threads. The client's threads stop when the last clone and the
/// last [`LockGuard`] are gone.
///
/// ```no_run
/// use redfence::{Redlock, LockOptions};
/// use std::time::Duration;
///
/// let locks = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
/// let guard = locks.lock("invoice:42")?;
/// println!("holding invoice:42 with token {}", guard.token());
/// guard.release()?;
/// # Ok::<(), redfence::Error>(())
/// ```
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

struct Inner {
    // Field order matters: the watchdog stops (and drops its share of
    // `shared`) before the instances' workers are stopped.
    watchdog: Watchdog,
    notifier: Notifier,
    shared: Arc<Shared>,
}

impl ClientCore for Inner {
    fn shared(&self) -> &Shared {
        &self.shared
    }
}

/// Longest time a ping waits past its deadline for the workers' answers.
const PING_GRACE: Duration = Duration::from_millis(50);

impl Redlock {
    pub(crate) fn start(shared: Shared, notifier: Notifier) -> Result<Redlock, Error> {
        let shared = Arc::new(shared);
        // A cluster position's series are its shards', named when each is
        // found (`instance_started`), not the position's.
        let standalone = shared.instances.voters().filter(|v| !v.is_cluster());
        telemetry::client_built(standalone.map(|v| v.name()));
        let watchdog = Watchdog::start(Arc::clone(&shared))
            .map_err(|e| Error::invalid_config(format!("cannot start the watchdog thread: {e}")))?;
        Ok(Redlock {
            inner: Arc::new(Inner {
                watchdog,
                notifier,
                shared,
            }),
        })
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    pub(crate) fn notifier(&self) -> &Notifier {
        &self.inner.notifier
    }

    /// Locks `resource`, retrying until the default wait budget (10 s unless
    /// set with [`RedlockBuilder::default_options`](crate::RedlockBuilder::default_options)) is spent.
    pub fn lock(&self, resource: &str) -> Result<LockGuard, Error> {
        self.lock_with(resource, self.shared().cfg.defaults)
    }

    /// Makes exactly one attempt to lock `resource`. Fails with
    /// [`Error::Contended`] if another client holds it.
    pub fn try_lock(&self, resource: &str) -> Result<LockGuard, Error> {
        self.lock_with(resource, self.shared().cfg.defaults.wait(Duration::ZERO))
    }

    /// Locks `resource`, trying for at most `wait` (the default options
    /// otherwise): `lock_with(resource, default_options.wait(wait))`.
    pub fn try_lock_for(&self, resource: &str, wait: Duration) -> Result<LockGuard, Error> {
        self.lock_with(resource, self.shared().cfg.defaults.wait(wait))
    }

    /// Locks `resource`, trying until `deadline` at the latest (one attempt
    /// if it has passed).
    pub fn try_lock_until(&self, resource: &str, deadline: Instant) -> Result<LockGuard, Error> {
        self.try_lock_for(resource, deadline.saturating_duration_since(Instant::now()))
    }

    /// Locks `resource` with these options.
    ///
    /// While the lock is held elsewhere, the call waits for the holder's
    /// release (announced on the instances) or for the holder's lease to run
    /// out, whichever comes first; after a split vote or while instances are
    /// unavailable it pauses a random time instead. It starts no attempt that
    /// could not end within `options.wait`.
    pub fn lock_with(&self, resource: &str, options: LockOptions) -> Result<LockGuard, Error> {
        let target = Target::one(&self.shared().cfg.prefix, resource);
        let lease = self.acquire(resource, target, options)?;
        Ok(LockGuard::new(lease, self.keep_alive()))
    }

    /// Locks every resource in `resources` together, all or nothing,
    /// waiting like [`lock`](Self::lock). One lease covers the set; each
    /// member gets its own fencing token.
    ///
    /// No call ever holds part of a set, so sets that overlap cannot
    /// deadlock: a call that finds any member held elsewhere holds nothing
    /// and waits for a release of any member it wants. Fails with
    /// [`Error::InvalidResource`] for an empty list, a name listed twice, an
    /// invalid name, or more than [`MAX_RESOURCES`](crate::MAX_RESOURCES)
    /// names.
    ///
    /// Each resource keeps its own keys (and hash tag). On a Redis Cluster
    /// position the set is cut into one script per slot, and the position
    /// grants only if every part did (a part granted while another refused
    /// is undone), so the set is all or none there too (docs/cluster.md).
    pub fn lock_all(&self, resources: &[&str]) -> Result<MultiGuard, Error> {
        self.lock_all_with(resources, self.shared().cfg.defaults)
    }

    /// Makes exactly one attempt to lock every resource in `resources`
    /// together. Fails with [`Error::Contended`] if any is held elsewhere.
    pub fn try_lock_all(&self, resources: &[&str]) -> Result<MultiGuard, Error> {
        self.lock_all_with(resources, self.shared().cfg.defaults.wait(Duration::ZERO))
    }

    /// Locks every resource in `resources` together, trying for at most
    /// `wait` (the default options otherwise).
    pub fn try_lock_all_for(
        &self,
        resources: &[&str],
        wait: Duration,
    ) -> Result<MultiGuard, Error> {
        self.lock_all_with(resources, self.shared().cfg.defaults.wait(wait))
    }

    /// Locks every resource in `resources` together, trying until
    /// `deadline` at the latest (one attempt if it has passed).
    pub fn try_lock_all_until(
        &self,
        resources: &[&str],
        deadline: Instant,
    ) -> Result<MultiGuard, Error> {
        self.try_lock_all_for(
            resources,
            deadline.saturating_duration_since(Instant::now()),
        )
    }

    /// [`lock_all`](Self::lock_all) with these options.
    pub fn lock_all_with(
        &self,
        resources: &[&str],
        options: LockOptions,
    ) -> Result<MultiGuard, Error> {
        let target = Target::all(&self.shared().cfg.prefix, resources);
        let lease = self.acquire(&resources.join(", "), target, options)?;
        Ok(MultiGuard::new(lease, self.keep_alive()))
    }

    pub(crate) fn keep_alive(&self) -> KeepAlive {
        self.inner.clone()
    }

    /// Every lock call, as one telemetry span and count, whether its input
    /// was valid or not.
    fn acquire(
        &self,
        name: &str,
        target: Result<Target, Error>,
        options: LockOptions,
    ) -> Result<Arc<Lease>, Error> {
        self.acquire_by(name, target, options)
    }

    /// [`acquire`](Self::acquire) for any kind of attempt (a lock, or a
    /// semaphore's permit, or a fair lock's): the retry loop of
    /// `lock/call.rs`.
    pub(crate) fn acquire_by<S: Step>(
        &self,
        name: &str,
        step: Result<S, Error>,
        options: LockOptions,
    ) -> Result<Arc<Lease>, Error> {
        let caller = Caller {
            shared: &self.inner.shared,
            notifier: &self.inner.notifier,
            watchdog: &self.inner.watchdog,
        };
        call::acquire_by(&caller, name, step, options)
    }

    /// Who holds `resource`, read on every instance: the identity a quorum
    /// of instances holds the lock for, the remaining TTL a quorum agrees
    /// on, and the positions of the instances that hold it. `Ok(None)` when
    /// no identity holds it on a quorum (free, expiring, or being taken).
    /// Fails with [`Error::Unavailable`] when fewer than a quorum answered.
    ///
    /// ```no_run
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// match locks.holder("nightly-report")? {
    ///     Some(h) => println!("held by {:?} for {:?}", h.identity, h.ttl),
    ///     None => println!("free"),
    /// }
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn holder(&self, resource: &str) -> Result<Option<crate::Holder>, Error> {
        let target = Target::one(&self.shared().cfg.prefix, resource)?;
        crate::holder::read(self.shared(), resource, &target.members[0].keys)
    }

    /// Revokes the holder of `resource` and wakes its waiters: for an
    /// operator, after a holder crashed with a long TTL or a hold
    /// ([`LockOptions::hold_at_least`]) must end early. Reads the holder as
    /// [`holder`](Self::holder) does, then deletes that holder's lock value
    /// on every instance where it is still there, and nothing else: a
    /// delete held up on its way that lands after a new holder took the
    /// lock finds another value and leaves it (`tests/model_grants.rs`).
    /// The fence counters stay, so the next grant's token is higher than
    /// the revoked holder's and a fenced store refuses its late writes.
    ///
    /// Returns the holder it revoked once a quorum of instances confirmed
    /// the delete; `Ok(None)`, having deleted nothing, when no value is held
    /// on a quorum (free, expiring, or being taken). Fails with
    /// [`Error::Unavailable`] when fewer than a quorum answered the reading
    /// (nothing was deleted) or the delete.
    ///
    /// Not for a holder that is still working: it believes it holds the
    /// lock until its next extension fails, so two holders may run at
    /// once, and only fencing protects the storage then. A call being
    /// granted at the very moment of the reading is such a holder, and is
    /// revoked with it.
    ///
    /// ```no_run
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// if let Some(was) = locks.force_release("nightly-report")? {
    ///     println!("released the lock held by {:?}", was.identity);
    /// }
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn force_release(&self, resource: &str) -> Result<Option<crate::Holder>, Error> {
        let target = Target::one(&self.shared().cfg.prefix, resource)?;
        crate::holder::force_release(self.shared(), resource, &target.members[0].keys)
    }

    /// This client's identity, as others see it
    /// ([`RedlockBuilder::identity`](crate::RedlockBuilder::identity)).
    pub fn identity(&self) -> &str {
        &self.shared().cfg.identity
    }

    /// Number of instances.
    pub fn instance_count(&self) -> usize {
        self.shared().instances.len()
    }

    /// Instances that must agree for a grant: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.shared().instances.quorum().size()
    }

    /// Each instance's clock against the others', in the order the
    /// instances were given (a Redis Cluster position is one row: the
    /// sharpest reading among its shards), or `None` for an instance that
    /// did not answer. Reads every instance's `TIME` in a round of its own,
    /// at the moment of the call, so a clock stepped a moment ago shows at
    /// once; each offset is from the median of the readings (one instance
    /// whose clock is wrong shows as that one) and carries its
    /// [`uncertainty`](crate::ClockOffset::uncertainty), half the round
    /// trips it comes from. Fencing tokens assume no clock is more than
    /// [`MAX_CLOCK_OFFSET`](crate::MAX_CLOCK_OFFSET) from the others
    /// (README, "Guarantees"): each call sets the
    /// `redfence_instance_clock_offset_seconds` gauge (feature `metrics`)
    /// and logs a warning (feature `tracing`) for an instance past it;
    /// so does every [`ping`](Self::ping).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redfence::Error> {
    /// let locks = redfence::Redlock::new(["redis://a:6379", "redis://b:6379", "redis://c:6379"])?;
    /// for (instance, offset) in locks.clock_offsets() {
    ///     match offset {
    ///         Some(o) if !o.is_within(redfence::MAX_CLOCK_OFFSET) => eprintln!(
    ///             "{instance}: clock {:+.3} s (± {:?}) off the others",
    ///             o.as_secs_f64(),
    ///             o.uncertainty()
    ///         ),
    ///         Some(_) => {}
    ///         None => eprintln!("{instance}: no answer"),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn clock_offsets(&self) -> Vec<(String, Option<crate::ClockOffset>)> {
        let sent = Instant::now();
        let packed: Arc<[u8]> = redis::cmd("TIME").get_packed_command().into();
        let answers = self.ask_each_server(packed, 1);
        let times = answers.iter().map(|(position, _, answer, arrived)| {
            let reply = answer.as_deref().ok().and_then(<[Value]>::first);
            (*position, reply, *arrived)
        });
        self.offsets_of(sent, times)
    }

    /// The offsets of one round's `TIME` replies (position, reply, when it
    /// arrived), each position's sharpest reading also recorded for the
    /// proposal of new tokens; sets the gauges.
    fn offsets_of<'a>(
        &self,
        sent: Instant,
        times: impl Iterator<Item = (usize, Option<&'a Value>, Instant)>,
    ) -> Vec<(String, Option<crate::ClockOffset>)> {
        let instances = &self.shared().instances;
        // Per position, its sharpest reading (a cluster's shards answer
        // one each) and the reply it came from.
        let mut best: Vec<Option<(Reading, &Value, Instant)>> = vec![None; instances.len()];
        for (position, reply, arrived) in times {
            let Some(reply) = reply else { continue };
            let Some(reading) = Reading::from_reply(reply, sent, arrived) else {
                continue;
            };
            if let Some(slot) = best.get_mut(position) {
                if slot.is_none_or(|(held, _, _)| reading.is_sharper_than(&held)) {
                    *slot = Some((reading, reply, arrived));
                }
            }
        }
        for (position, entry) in best.iter().enumerate() {
            if let Some((_, reply, arrived)) = entry {
                instances.record_clock(position, reply, sent, *arrived);
            }
        }
        let readings: Vec<Option<Reading>> = best.iter().map(|e| e.map(|(r, _, _)| r)).collect();
        let rows: Vec<(String, Option<crate::ClockOffset>)> = instances
            .names()
            .map(str::to_string)
            .zip(clock::fresh_offsets(&readings))
            .collect();
        for (instance, offset) in &rows {
            if let Some(offset) = offset {
                let bound = crate::MAX_CLOCK_OFFSET;
                let past = (!offset.is_within(bound)).then_some(bound);
                crate::telemetry::clock_offset(instance, offset.as_secs_f64(), past);
            }
        }
        rows
    }

    /// Pings every instance through its worker and reports each one's round
    /// trip or error, in the order the instances were given; a Redis
    /// Cluster position gives one row per shard master it knows (named
    /// `cluster #i shard host:port`), or one row with its error while its
    /// slot map is unknown. Useful for readiness checks: it tells which
    /// instance is down or rejects our credentials. Each ping queues behind
    /// what this client already sent that instance, so a successful ping
    /// also means those requests (a dropped guard's release, say) were
    /// processed there.
    pub fn ping(&self) -> Vec<(String, Result<Duration, InstanceError>)> {
        let start = Instant::now();
        // The clocks are read in the same round: readiness checks keep the
        // clock offset gauges current.
        let mut pipe = redis::pipe();
        pipe.cmd("PING").cmd("TIME");
        let answers = self.ask_each_server(pipe.get_packed_pipeline().into(), 2);
        let times = answers.iter().map(|(position, _, answer, arrived)| {
            let reply = answer.as_deref().ok().and_then(|r| r.get(1));
            (*position, reply, *arrived)
        });
        self.offsets_of(start, times);
        answers
            .into_iter()
            .map(|(_, name, answer, arrived)| {
                let result = match answer.as_deref() {
                    Ok([Value::SimpleString(s), ..]) if s == "PONG" => {
                        Ok(arrived.saturating_duration_since(start))
                    }
                    Ok(other) => Err(InstanceError::new(
                        &name,
                        crate::InstanceErrorKind::Protocol,
                        format!("unexpected reply to PING: {other:?}"),
                    )),
                    Err(e) => Err(e.clone()),
                };
                (name, result)
            })
            .collect()
    }

    /// Sends `packed` (`commands` replies) to every server behind every
    /// position, each cluster shard master included, and collects each
    /// one's replies or error, with its position's index and its name; a
    /// cluster position with no shard master known is one row with that
    /// error.
    pub(crate) fn ask_each_server(&self, packed: Arc<[u8]>, commands: usize) -> Vec<ServerAnswer> {
        let shared = self.shared();
        shared.warmup.wait();
        let deadline = shared.round_deadline();
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut out: Vec<ServerAnswer> = Vec::new();
        for (position, voter) in shared.instances.voters().enumerate() {
            let first = out.len();
            let names = voter.each_server(|_| {
                let row = out.len();
                out.push((position, String::new(), Ok(Vec::new()), deadline));
                let sink: Sink = Arc::new(Row(row, tx.clone()));
                Request::plain(Arc::clone(&packed), commands, deadline, Some(sink))
            });
            for (k, name) in names.into_iter().enumerate() {
                let err = InstanceError::new(&name, crate::InstanceErrorKind::Timeout, NO_ANSWER);
                out[first + k] = (position, name, Err(err), deadline);
            }
            if voter.is_cluster() && out.len() == first {
                let err = InstanceError::new(
                    voter.name(),
                    crate::InstanceErrorKind::Connect,
                    "no shard master known: the cluster's slot map could not be read",
                );
                out.push((position, voter.name().to_string(), Err(err), deadline));
            }
        }
        drop(tx);
        // A worker answers by the deadline (with the reason it could not
        // send, say a refused connection): a moment more lets that answer
        // arrive, so an instance is not reported as timed out when the
        // cause is known.
        let answers_by = deadline + (shared.cfg.instance_timeout / 2).min(PING_GRACE);
        for _ in 0..out.len() {
            let Ok((row, result, arrived)) = rx.recv_deadline(answers_by) else {
                break;
            };
            if let Some(entry) = out.get_mut(row) {
                entry.2 = result;
                entry.3 = arrived;
            }
        }
        out
    }
}

/// One server's answer to [`Redlock::ask_each_server`]: its position's
/// index, its name, its replies or error, and when they arrived.
pub(crate) type ServerAnswer = (usize, String, Result<Vec<Value>, InstanceError>, Instant);

/// Where one server's answer goes: its row of the report.
struct Row(
    usize,
    crossbeam_channel::Sender<(usize, crate::transport::instance::Replies, Instant)>,
);

impl crate::transport::instance::Collect for Row {
    fn deliver(&self, _position: usize, replies: crate::transport::instance::Replies) {
        // Stamped as it arrives, for the clock readings' round trips. The
        // caller may have stopped waiting; that is fine.
        let _ = self.1.send((self.0, replies, Instant::now()));
    }
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field(
                "instances",
                &self.shared().instances.names().collect::<Vec<_>>(),
            )
            .field("prefix", &self.shared().cfg.prefix)
            .finish()
    }
}
