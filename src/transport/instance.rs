//! One Redis instance: a long-lived worker thread fed by a channel.
//!
//! Each instance has exactly one worker with one connection. Its requests
//! usually reach the instance in the order they were queued, but nothing
//! relies on it: a connection given up after a timeout may still deliver
//! what was sent on it, after what the next connection sends (a slow
//! network, a paused server reading its socket buffer when it resumes), so
//! every script is written to be safe when it lands late, twice, or never.
//! The worker sends everything that queued up while it was busy as one
//! pipeline (auto-pipelining), and drops requests whose deadline passed
//! before they could be sent.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use redis::{ConnectionLike, Value};

use crate::error::{InstanceError, InstanceErrorKind};
use crate::protocol::clock::{self, InstanceClock};
use crate::protocol::native::Form;
use crate::telemetry;
use crate::transport::connection::{connect_failure, connect_wait, load_scripts, Conn, Manager};

/// Pause before retrying undelivered persistent requests.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// Owed releases sent per retry.
const OWED_CHUNK: usize = 1024;

/// Owed releases kept for an instance that stays unreachable.
const MAX_OWED: usize = 64 * 1024;

/// One instance's replies to one request (one value per command), or why
/// there are none.
pub(crate) type Replies = Result<Vec<Value>, InstanceError>;

/// Where a worker hands the replies to a request: the caller's round (see
/// `round.rs`), which wakes the caller once the outcome is decided, or a
/// ping's row (`client.rs`).
pub(crate) trait Collect: Send + Sync {
    fn deliver(&self, index: usize, replies: Replies);
}

pub(crate) type Sink = Arc<dyn Collect>;

pub(crate) struct Request {
    /// One or more commands, packed once and shared by every instance.
    pub packed: Arc<[u8]>,
    /// The same request in native commands, sent instead of `packed` where
    /// the connection's server runs them (`native.rs`).
    pub native: Option<Arc<Form>>,
    /// How many commands `packed` (and `native`) holds: the replies to
    /// read.
    pub commands: usize,
    pub deadline: Instant,
    pub sink: Option<Sink>,
    /// Must reach the instance: retried after connection failures until
    /// its deadline (releases, so no key outlives a failed attempt).
    pub persistent: bool,
    /// The cluster slot of the request's keys (all of them share it), for
    /// a cluster position to route it; `None` for key-less commands.
    pub slot: Option<u16>,
    /// A request whose keys span several slots, cut into one part per
    /// slot for a cluster position (`split.rs`).
    pub split: Option<Arc<crate::protocol::split::Split>>,
    /// The request as a cluster position sends it, if it differs.
    pub cluster: Option<(Arc<[u8]>, usize)>,
    /// Redirects followed so far (`MOVED`, `ASK`): bounded, so a cluster
    /// in the middle of a change cannot bounce a request for ever.
    pub hops: u8,
    /// Sent after `ASKING`: the slot is being imported by this shard.
    pub asking: bool,
}

/// Redirects a request may follow before its shard's answer stands.
const MAX_HOPS: u8 = 3;

/// Where a shard worker hands a request that its shard redirected (a
/// cluster position's router, `transport/cluster/mod.rs`).
pub(crate) trait Redirect: Send + Sync {
    fn redirect(&self, req: Request, to: Redirection);
    /// The shard did not answer: its slots may have moved (a failover).
    fn unreachable(&self);
    /// A request that must land and could not be delivered by the worker
    /// named `from`: sent to the shard that owns its slot now, if that is
    /// another; given back otherwise.
    fn reroute(&self, req: Request, from: &str) -> Option<Request>;
}

/// A cluster's redirect of one request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Redirection {
    /// The slot lives at `addr` now.
    Moved { slot: u16, addr: String },
    /// The slot is being moved to `addr`: ask there, this once.
    Ask { addr: String },
}

impl Redirection {
    /// The redirect in a shard's replies, if any: `MOVED 3999 host:port`
    /// or `ASK 3999 host:port`.
    fn find(values: &[Value]) -> Option<Redirection> {
        values.iter().find_map(|v| {
            let Value::ServerError(e) = v else {
                return None;
            };
            let (slot, addr) = e.details()?.split_once(' ')?;
            let slot: u16 = slot.parse().ok()?;
            let addr = addr.trim().to_string();
            match e.code() {
                "MOVED" => Some(Redirection::Moved { slot, addr }),
                "ASK" => Some(Redirection::Ask { addr }),
                _ => None,
            }
        })
    }
}

impl Request {
    /// A request of one form to one connection: no native form, no cluster
    /// route yet (a key-less command, or a part already routed to its
    /// shard: see [`at_slot`](Self::at_slot)).
    pub(crate) fn plain(
        packed: Arc<[u8]>,
        commands: usize,
        deadline: Instant,
        sink: Option<Sink>,
    ) -> Self {
        Request {
            packed,
            native: None,
            commands,
            deadline,
            sink,
            persistent: false,
            slot: None,
            split: None,
            cluster: None,
            hops: 0,
            asking: false,
        }
    }

    /// This request, for keys in `slot`.
    pub(crate) fn at_slot(mut self, slot: u16) -> Self {
        self.slot = Some(slot);
        self
    }

    /// This request, to be delivered even after its caller stopped
    /// waiting (see [`persistent`](Self::persistent)).
    pub(crate) fn persistent(mut self, persistent: bool) -> Self {
        self.persistent = persistent;
        self
    }

    /// What to send on `conn`: the native form where its server runs it.
    fn form(&self, conn: &Conn) -> (&[u8], Option<&Form>) {
        match self.native.as_deref() {
            Some(form) => match form.pick(conn.native) {
                Some(packed) => (packed, Some(form)),
                None => (&self.packed, None),
            },
            None => (&self.packed, None),
        }
    }

    pub(crate) fn answer(&mut self, index: usize, replies: Replies) {
        if let Some(sink) = self.sink.take() {
            sink.deliver(index, replies);
        }
    }
}

pub(crate) struct Instance {
    name: String,
    index: usize,
    tx: Option<Sender<Request>>,
    worker: Option<JoinHandle<()>>,
}

pub(crate) struct InstanceConfig {
    pub index: usize,
    pub name: String,
    pub manager: Manager,
    pub timeout: Duration,
    pub queue_capacity: usize,
    pub max_batch: usize,
    pub thread_pool: Arc<scheduled_thread_pool::ScheduledThreadPool>,
    pub clock: Arc<InstanceClock>,
    /// A shard's router, which takes the requests its shard redirects.
    pub redirect: Option<Weak<dyn Redirect>>,
    /// The worker thread's name.
    pub thread_name: String,
}

impl Instance {
    pub(crate) fn start(cfg: InstanceConfig) -> std::io::Result<Self> {
        let connect_error = cfg.manager.last_error();
        let pool = r2d2::Pool::builder()
            .max_size(1)
            // Connects at once, in the background: a new client's first
            // calls wait for it (see connection::Warmup).
            .min_idle(Some(1))
            .test_on_check_out(false)
            .idle_timeout(None)
            .max_lifetime(None)
            .connection_timeout(cfg.timeout)
            .thread_pool(cfg.thread_pool)
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(cfg.manager);
        let (tx, rx) = crossbeam_channel::bounded(cfg.queue_capacity);
        let worker = Worker {
            connect_error,
            max_batch: cfg.max_batch,
            index: cfg.index,
            name: cfg.name.clone(),
            health: telemetry::InstanceHealth::new(&cfg.name),
            pool,
            timeout: cfg.timeout,
            clock: cfg.clock,
            redirect: cfg.redirect,
        };
        let handle = std::thread::Builder::new()
            .name(cfg.thread_name)
            .spawn(move || worker.run(rx))?;
        Ok(Instance {
            name: cfg.name,
            index: cfg.index,
            tx: Some(tx),
            worker: Some(handle),
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Queues a request; never blocks. A full queue answers at once.
    pub(crate) fn send(&self, mut req: Request) {
        let Some(tx) = &self.tx else { return };
        match tx.try_send(req) {
            Ok(()) => {}
            Err(TrySendError::Full(r)) | Err(TrySendError::Disconnected(r)) => {
                req = r;
                telemetry::instance_overloaded(&self.name);
                let err = InstanceError::new(
                    &self.name,
                    InstanceErrorKind::Overloaded,
                    "request queue is full",
                );
                req.answer(self.index, Err(err));
            }
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // Closing the channel is the stop signal; the worker still sends
        // what is queued (releases, mostly) before it exits, each bounded by
        // its own deadline.
        drop(self.tx.take());
        if let Some(handle) = self.worker.take() {
            let _ = handle.join();
        }
    }
}

struct Worker {
    max_batch: usize,
    connect_error: Arc<parking_lot::Mutex<Option<redis::RedisError>>>,
    index: usize,
    name: String,
    health: telemetry::InstanceHealth,
    pool: r2d2::Pool<Manager>,
    timeout: Duration,
    clock: Arc<InstanceClock>,
    redirect: Option<Weak<dyn Redirect>>,
}

/// `TIME`, packed once.
static TIME: std::sync::LazyLock<Vec<u8>> =
    std::sync::LazyLock::new(|| redis::cmd("TIME").get_packed_command());

/// `ASKING`, packed once.
static ASKING: std::sync::LazyLock<Vec<u8>> =
    std::sync::LazyLock::new(|| redis::cmd("ASKING").get_packed_command());

impl Worker {
    fn run(self, rx: Receiver<Request>) {
        let mut batch: Vec<Request> = Vec::with_capacity(self.max_batch);
        // Persistent requests (releases) not delivered yet, oldest first.
        // Their order against newer requests does not matter: a release
        // that lands before its own acquire voids it (`lua/release.lua`).
        let mut owed: VecDeque<Request> = VecDeque::new();
        loop {
            let next = if owed.is_empty() {
                rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                rx.recv_timeout(RETRY_PAUSE)
            };
            let stopping = matches!(next, Err(RecvTimeoutError::Disconnected));
            // Owed releases go first, a bounded number at a time, so a long
            // outage never turns into one huge pipeline.
            let chunk = owed.len().min(self.max_batch.max(OWED_CHUNK));
            batch.extend(owed.drain(..chunk));
            if let Ok(first) = next {
                batch.push(first);
                let room = self.max_batch.saturating_sub(batch.len());
                batch.extend(rx.try_iter().take(room));
            }
            self.serve(&mut batch);
            if stopping {
                // One last try (above) for what is still owed.
                return;
            }
            owed.extend(batch.drain(..));
            // Past this many, the oldest are given up: their keys expire
            // with their TTL, as with any release that cannot be sent.
            let excess = owed.len().saturating_sub(MAX_OWED);
            owed.drain(..excess);
            self.health.owed(owed.len(), excess);
        }
    }

    /// Sends the batch and answers every request. Persistent requests that
    /// failed for lack of a connection stay in `batch` for a later retry;
    /// everything else is removed.
    fn serve(&self, batch: &mut Vec<Request>) {
        self.drop_expired(batch, Instant::now());
        let Some(latest) = batch.iter().map(|r| r.deadline).max() else {
            return;
        };
        let Some(results) = self.run_batch(batch, latest) else {
            return;
        };
        self.health.observe(&results);
        let unreachable = results
            .iter()
            .any(|r| matches!(r, Err(e) if e.kind() != InstanceErrorKind::Server));
        if let Some(router) = self.redirect.as_ref().and_then(Weak::upgrade) {
            if unreachable {
                router.unreachable();
            }
        }
        *batch = self.answer(batch, results);
    }

    /// Runs the batch on a pooled connection, waiting for one at most
    /// until the latest deadline (or the timeout); `None` when every
    /// request's deadline passed meanwhile.
    fn run_batch(&self, batch: &mut Vec<Request>, latest: Instant) -> Option<Vec<Replies>> {
        let wait = latest
            .saturating_duration_since(Instant::now())
            .min(self.timeout);
        let wait = connect_wait(wait, &self.connect_error);
        let mut conn = match self.pool.get_timeout(wait) {
            Ok(conn) => conn,
            Err(e) => {
                let err = connect_failure(&self.name, &e, &self.connect_error);
                return Some(vec![Err(err); batch.len()]);
            }
        };
        // Waiting for the connection may have taken a deadline: such a
        // request would only arrive late.
        self.drop_expired(batch, Instant::now());
        if batch.is_empty() {
            return None;
        }
        let results = self.execute(&mut conn, batch);
        if !found_dead(&results) {
            return Some(results);
        }
        // A pooled connection to a process that since exited (a restart)
        // fails at once: send the batch again, once, on a fresh connection.
        // Should the first one have been applied after all, the scripts
        // take it twice: an acquire finds its own value and grants again.
        drop(conn);
        let wait = latest
            .saturating_duration_since(Instant::now())
            .min(self.timeout);
        Some(match self.pool.get_timeout(wait) {
            Ok(mut fresh) => self.execute(&mut fresh, batch),
            Err(_) => results,
        })
    }

    /// Answers each request with its replies (or hands it to the cluster's
    /// router when its shard redirected it), and returns the releases that
    /// must be tried again.
    fn answer(&self, batch: &mut Vec<Request>, results: Vec<Replies>) -> Vec<Request> {
        let mut retry = Vec::new();
        for (req, result) in batch.drain(..).zip(results) {
            let Some(mut req) = self.follow_redirect(req, &result) else {
                continue;
            };
            let unreachable = matches!(&result, Err(e) if e.kind() != InstanceErrorKind::Server);
            let undelivered = unreachable || is_try_again(&result);
            req.answer(self.index, result);
            if req.persistent && undelivered {
                // A shard's release that found no connection goes where
                // its slot lives now (a failover moved it off this dead
                // master); one refused with TRYAGAIN waits here for the
                // move under way to end.
                let router = self.redirect.as_ref().and_then(Weak::upgrade);
                let kept = match router {
                    Some(router) if unreachable => router.reroute(req, &self.name),
                    _ => Some(req),
                };
                retry.extend(kept);
            }
        }
        retry
    }

    /// Hands a request its shard redirected to the cluster's router, which
    /// sends it on (within the request's own deadline); gives it back to be
    /// answered otherwise, the redirect included once the hops are spent.
    fn follow_redirect(&self, mut req: Request, result: &Replies) -> Option<Request> {
        let Ok(values) = result else {
            return Some(req);
        };
        let Some(to) = Redirection::find(values) else {
            return Some(req);
        };
        if req.hops >= MAX_HOPS {
            return Some(req);
        }
        let Some(router) = self.redirect.as_ref().and_then(Weak::upgrade) else {
            return Some(req);
        };
        req.hops += 1;
        router.redirect(req, to);
        None
    }

    /// Answers and removes the requests whose deadline has passed.
    fn drop_expired(&self, batch: &mut Vec<Request>, now: Instant) {
        batch.retain_mut(|req| {
            if req.deadline > now {
                return true;
            }
            let err = InstanceError::new(
                &self.name,
                InstanceErrorKind::Timeout,
                "deadline passed before the request could be sent",
            );
            req.answer(self.index, Err(err));
            false
        });
    }

    /// Sends the batch as one pipeline and reads the replies in order. The
    /// first I/O error or timeout fails the rest of the batch at once and
    /// retires the connection.
    /// It also reads the instance's clock again, in the same pipeline, once
    /// the last reading is older than `clock::REFRESH` or was rough.
    fn execute(&self, conn: &mut Conn, batch: &[Request]) -> Vec<Replies> {
        let refresh = conn.clock_read.elapsed() >= clock::REFRESH || self.clock.is_rough();
        let mut bytes =
            Vec::with_capacity(batch.iter().map(|r| r.packed.len()).sum::<usize>() + 16);
        if refresh {
            bytes.extend_from_slice(&TIME);
        }
        // Chosen once: the connection's native commands only change below,
        // after every reply has been read.
        let forms: Vec<Option<&Form>> = batch
            .iter()
            .map(|req| {
                if req.asking {
                    bytes.extend_from_slice(&ASKING);
                }
                let (packed, form) = req.form(conn);
                bytes.extend_from_slice(packed);
                form
            })
            .collect();
        let sent = Instant::now();
        let failed = |conn: &mut Conn, e: redis::RedisError| {
            conn.broken = true;
            Err(InstanceError::from_redis(&self.name, &e))
        };
        if let Err(e) = conn.inner.send_packed_command(&bytes) {
            return vec![failed(conn, e); batch.len()];
        }
        if refresh {
            match conn.inner.recv_response() {
                Ok(value) => {
                    if self.clock.record(&value, sent, Instant::now()) {
                        conn.clock_read = sent;
                    }
                }
                Err(e) => return vec![failed(conn, e); batch.len()],
            }
        }
        let mut results = self.read_replies(conn, batch);
        self.finish_native(conn, batch, &forms, &mut results);
        self.retry_noscript(conn, batch, &mut results);
        results
    }

    /// Reads each request's replies in order; the first I/O error or
    /// timeout fails the rest of the batch and retires the connection.
    fn read_replies(&self, conn: &mut Conn, batch: &[Request]) -> Vec<Replies> {
        let mut results = Vec::with_capacity(batch.len());
        for req in batch {
            let mut values = Vec::with_capacity(req.commands + 1);
            for _ in 0..req.commands + usize::from(req.asking) {
                match conn.inner.recv_response() {
                    Ok(value) => values.push(value),
                    Err(e) => {
                        conn.broken = true;
                        let err = Err(InstanceError::from_redis(&self.name, &e));
                        results.resize(batch.len(), err);
                        return results;
                    }
                }
            }
            if req.asking {
                // ASKING's own OK (or its error, which the command's reply
                // then repeats).
                values.remove(0);
            }
            results.push(Ok(values));
        }
        results
    }

    /// What native forms need once their replies are in: replies read as
    /// the Lua form's, the void keys of releases that found the key not
    /// ours (written now, on this connection, before anything else is
    /// sent), and the Lua form for requests whose native command the
    /// server refused (then this connection stops using native commands;
    /// a new one probes again).
    fn finish_native(
        &self,
        conn: &mut Conn,
        batch: &[Request],
        forms: &[Option<&Form>],
        results: &mut [Replies],
    ) {
        let mut follow_ups: Vec<u8> = Vec::new();
        let mut count = 0;
        let mut refused = Vec::new();
        for (k, (form, result)) in forms.iter().zip(results.iter_mut()).enumerate() {
            let (Some(form), Ok(values)) = (form, result) else {
                continue;
            };
            if Form::refused(values) {
                refused.push(k);
                continue;
            }
            form.normalize(values);
            if let Some(void) = form.follow_up(values) {
                follow_ups.extend_from_slice(void);
                count += 1;
            }
        }
        if count > 0 {
            // Only the write matters, not its answer; a failure retires the
            // connection like any other.
            if conn
                .inner
                .req_packed_commands(&follow_ups, 0, count)
                .is_err()
            {
                conn.broken = true;
            }
        }
        if refused.is_empty() {
            return;
        }
        conn.native = crate::protocol::native::Commands::default();
        for k in refused {
            results[k] = conn
                .inner
                .req_packed_commands(&batch[k].packed, 0, batch[k].commands)
                .map_err(|e| {
                    conn.broken = true;
                    InstanceError::from_redis(&self.name, &e)
                });
        }
    }

    /// An instance that restarted or ran SCRIPT FLUSH answers NOSCRIPT:
    /// reload the scripts and send those requests again, in their order.
    /// (A request's other commands run again too; the only one that comes
    /// with a script, a release's PUBLISH, is harmless twice.)
    fn retry_noscript(&self, conn: &mut Conn, batch: &[Request], results: &mut [Replies]) {
        let is_noscript = |r: &Replies| matches!(r, Ok(values) if values.iter().any(|v| matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT")));
        if !results.iter().any(is_noscript) {
            return;
        }
        if let Err(e) = load_scripts(conn) {
            let err = InstanceError::from_redis(&self.name, &e);
            for r in results.iter_mut().filter(|r| is_noscript(r)) {
                *r = Err(err.clone());
            }
            return;
        }
        let mut failure: Option<InstanceError> = None;
        for (req, r) in batch.iter().zip(results.iter_mut()) {
            if !is_noscript(r) {
                continue;
            }
            if let Some(err) = &failure {
                *r = Err(err.clone());
                continue;
            }
            *r = conn
                .inner
                .req_packed_commands(&req.packed, 0, req.commands)
                .map_err(|e| {
                    conn.broken = true;
                    let err = InstanceError::from_redis(&self.name, &e);
                    failure = Some(err.clone());
                    err
                });
        }
    }
}

/// A cluster shard's `TRYAGAIN`: a request of several keys while their
/// slot is being moved and only some of them have arrived. A release is
/// sent again (it must land) until the move is over or its deadline.
fn is_try_again(result: &Replies) -> bool {
    matches!(result, Ok(values) if values.iter().any(|v| matches!(v, Value::ServerError(e) if e.code() == "TRYAGAIN")))
}

/// True when the connection was found closed by the peer before any reply
/// came: every request failed with an I/O error that is not a timeout.
fn found_dead(results: &[Replies]) -> bool {
    !results.is_empty()
        && results
            .iter()
            .all(|r| matches!(r, Err(e) if e.kind() == InstanceErrorKind::Io))
}
