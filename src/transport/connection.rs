//! Connections to one instance: the one way every connection is opened
//! (TLS included), an r2d2 manager that sets timeouts, preloads the
//! scripts and reads the instance's clock, and the warm-up that lets a new
//! client's first calls wait for connections being set up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use redis::{ConnectionInfo, ConnectionLike, ErrorKind, RedisError, RedisResult, Value};

use crate::protocol::clock::InstanceClock;
use crate::protocol::majority::Quorum;
use crate::protocol::native;

use crate::error::{InstanceError, InstanceErrorKind};

/// TLS settings of a client: the certificates for its `rediss://`
/// instances, if the builder was given any.
#[cfg(feature = "tls-rustls")]
pub(crate) type TlsSettings = Option<redis::TlsCertificates>;
/// Without a TLS feature there is nothing to configure.
#[cfg(not(feature = "tls-rustls"))]
pub(crate) type TlsSettings = ();

/// A copy of the TLS settings, for a cluster's shards (nothing to copy
/// without a TLS feature).
#[allow(clippy::clone_on_copy)]
pub(crate) fn copy_tls(tls: &TlsSettings) -> TlsSettings {
    tls.clone()
}

/// A client for one instance, the only place where one is made, so worker
/// and subscriber connections share the TLS set-up.
pub(crate) fn open_client(info: ConnectionInfo, tls: &TlsSettings) -> RedisResult<redis::Client> {
    #[cfg(feature = "tls-rustls")]
    return crate::transport::tls::open_client(info, tls.as_ref());
    #[cfg(not(feature = "tls-rustls"))]
    {
        let () = tls;
        redis::Client::open(info)
    }
}

/// Opens a connection; `timeout` bounds the TCP connect, the TLS handshake
/// and authentication together. The connection comes back without read or
/// write timeouts: callers set their own.
pub(crate) fn connect(client: &redis::Client, timeout: Duration) -> RedisResult<redis::Connection> {
    #[cfg(feature = "tls-rustls")]
    crate::transport::tls::ensure_crypto_provider();
    client.get_connection_with_timeout(timeout)
}

/// A connection plus what we learnt about its health. A connection on which
/// a command timed out or failed mid-way is never reused: a late reply would
/// otherwise be read as the answer to the next command.
pub(crate) struct Conn {
    pub inner: redis::Connection,
    pub broken: bool,
    /// When the instance's clock was last read on this connection.
    pub clock_read: Instant,
    /// The native commands this connection's server runs for us.
    pub native: native::Commands,
}

pub(crate) struct Manager {
    client: redis::Client,
    connect_timeout: Duration,
    timeout: Duration,
    /// Why the last connection attempt failed: r2d2 only passes on a
    /// message, and the worker wants to tell a refused password or
    /// certificate from a refused connection.
    last_error: Arc<Mutex<Option<RedisError>>>,
    warmup: Arc<Warmup>,
    reported: AtomicBool,
    clock: Arc<InstanceClock>,
    /// The key the native-command probe names (in the client's prefix);
    /// no probe, and no native commands, without one.
    probe_key: Option<String>,
    /// Where the probe's finding is published.
    support: Arc<native::Support>,
}

impl Manager {
    /// `connect_timeout` bounds a whole connection set-up (handshake,
    /// authentication, script loading, the native-command probe on
    /// `probe_key`); `timeout` every command after it.
    pub(crate) fn new(
        client: redis::Client,
        connect_timeout: Duration,
        timeout: Duration,
        warmup: Arc<Warmup>,
        clock: Arc<InstanceClock>,
        probe_key: Option<String>,
        support: Arc<native::Support>,
    ) -> Self {
        Manager {
            client,
            connect_timeout,
            timeout,
            last_error: Arc::default(),
            warmup,
            reported: AtomicBool::new(false),
            clock,
            probe_key,
            support,
        }
    }

    pub(crate) fn last_error(&self) -> Arc<Mutex<Option<RedisError>>> {
        Arc::clone(&self.last_error)
    }

    fn try_connect(&self) -> Result<Conn, RedisError> {
        let start = Instant::now();
        let inner = connect(&self.client, self.connect_timeout)?;
        // Script loading is part of the set-up: it gets what is left of the
        // connect budget, not the short per-command timeout.
        let left = self
            .connect_timeout
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(1));
        inner.set_read_timeout(Some(left))?;
        inner.set_write_timeout(Some(left))?;
        let mut conn = Conn {
            inner,
            broken: false,
            clock_read: Instant::now(),
            native: native::Commands::default(),
        };
        load_scripts(&mut conn)?;
        if let Some(key) = &self.probe_key {
            conn.native = native::probe(&mut conn.inner, key)?;
        }
        self.support.record(conn.native);
        // The instance's clock, for the proposal of new tokens (see
        // clock.rs): a connection whose clock is not known would only make
        // the instances' answers disagree.
        let sent = Instant::now();
        let time: Value = redis::cmd("TIME").query(&mut conn.inner)?;
        if !self.clock.record(&time, sent, Instant::now()) {
            return Err(RedisError::from((
                ErrorKind::Client,
                "unexpected reply to TIME",
                format!("{time:?}"),
            )));
        }
        conn.clock_read = sent;
        conn.inner.set_read_timeout(Some(self.timeout))?;
        conn.inner.set_write_timeout(Some(self.timeout))?;
        Ok(conn)
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = RedisError;

    fn connect(&self) -> Result<Conn, RedisError> {
        let result = self.try_connect();
        *self.last_error.lock() = result.as_ref().err().cloned();
        if !self.reported.swap(true, Ordering::AcqRel) {
            self.warmup.report(result.is_ok());
        }
        result
    }

    /// Never called: the pool does not test connections on check-out (a
    /// PING per request would double the round trips); a broken one is
    /// found by the request itself and retired (`has_broken`).
    fn is_valid(&self, _conn: &mut Conn) -> Result<(), RedisError> {
        Ok(())
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || !conn.inner.is_open()
    }
}

/// The error for a request that got no connection: why the last attempt
/// failed (refused, timed out, a refused password or certificate, …), in
/// the words [`InstanceError::from_redis`] uses for the same failure
/// anywhere else; or, while the first attempt is still under way, a
/// timeout.
pub(crate) fn connect_failure(
    instance: &str,
    _pool_error: &r2d2::Error,
    last_error: &Mutex<Option<RedisError>>,
) -> InstanceError {
    match &*last_error.lock() {
        Some(cause) => {
            let err = InstanceError::from_redis(instance, cause);
            if err.kind() == InstanceErrorKind::Timeout {
                // The set-up has its own, longer budget.
                InstanceError::new(
                    instance,
                    InstanceErrorKind::Timeout,
                    "no connection: the last attempt timed out",
                )
            } else {
                err
            }
        }
        None => InstanceError::new(
            instance,
            InstanceErrorKind::Timeout,
            "no connection within the per-instance timeout (still connecting)",
        ),
    }
}

/// How long a request may wait for a connection.
///
/// Nothing when the last attempt was refused: the port is closed, or the
/// credentials, ACL or certificates are refused. None of that heals within
/// a request, so the worker answers at once with the reason instead of
/// holding later requests (a `ping`, say) behind a wait that cannot
/// succeed, and the caller gets that reason rather than a timeout;
/// connecting goes on in the background, and the first request after it
/// succeeds gets the connection.
///
/// Otherwise `wait`, less a small margin: a connection attempt that fails
/// meanwhile does not end the wait, and the answer given when it ends
/// (the attempt's error) must reach the caller before its own deadline
/// does, or the caller would report a timeout instead.
pub(crate) fn connect_wait(wait: Duration, last_error: &Mutex<Option<RedisError>>) -> Duration {
    let refused = last_error.lock().as_ref().is_some_and(|cause| {
        matches!(
            InstanceError::from_redis("", cause).kind(),
            InstanceErrorKind::Auth | InstanceErrorKind::Tls | InstanceErrorKind::Connect
        )
    });
    if refused {
        Duration::ZERO
    } else {
        wait.saturating_sub((wait / 10).min(ANSWER_MARGIN))
    }
}

/// Longest part of a connection wait given up so that the answer arrives
/// before the caller's deadline.
const ANSWER_MARGIN: Duration = Duration::from_millis(5);

/// Loads every script so EVALSHA finds it; called on connect and whenever
/// an instance answers NOSCRIPT (restart, SCRIPT FLUSH).
pub(crate) fn load_scripts(conn: &mut Conn) -> Result<(), RedisError> {
    let mut pipe = redis::pipe();
    // Error replies come back as values, so the first one is reported with
    // its code (a pipeline error has none): NOPERM must read as an ACL
    // refusal naming `script|load`.
    pipe.ignore_errors();
    for source in crate::protocol::scripts::ALL_SOURCES {
        pipe.cmd("SCRIPT").arg("LOAD").arg(source);
    }
    let result = pipe
        .query::<Vec<redis::Value>>(&mut conn.inner)
        .and_then(|replies| {
            match replies.into_iter().find_map(|v| match v {
                redis::Value::ServerError(e) => Some(e),
                _ => None,
            }) {
                Some(e) => Err(RedisError::from(e)),
                None => Ok(()),
            }
        });
    if result.is_err() {
        conn.broken = true;
    }
    result
}

/// The first connection attempt of every instance of a new client, started
/// at `build()`. A TLS handshake does not fit in the short per-instance
/// timeout, so the first calls wait here, until enough connections are up
/// for a quorum, every instance's first attempt ended, or the connect
/// timeout since `build()` passed; from then on calls never wait here.
pub(crate) struct Warmup {
    open: AtomicBool,
    counts: Mutex<Counts>,
    changed: Condvar,
    total: usize,
    quorum: usize,
    deadline: Instant,
}

#[derive(Default)]
struct Counts {
    up: usize,
    done: usize,
}

impl Warmup {
    pub(crate) fn new(total: usize, connect_timeout: Duration) -> Arc<Self> {
        Arc::new(Warmup {
            open: AtomicBool::new(false),
            counts: Mutex::default(),
            changed: Condvar::new(),
            total,
            quorum: Quorum::of(total).size(),
            deadline: Instant::now() + connect_timeout,
        })
    }

    pub(crate) fn report(&self, up: bool) {
        let mut counts = self.counts.lock();
        counts.done += 1;
        counts.up += usize::from(up);
        self.changed.notify_all();
    }

    /// Waits, at most until the connect timeout since `build()` passed, for
    /// the first connections.
    pub(crate) fn wait(&self) {
        if self.open.load(Ordering::Acquire) {
            return;
        }
        let mut counts = self.counts.lock();
        while counts.up < self.quorum && counts.done < self.total {
            if self
                .changed
                .wait_until(&mut counts, self.deadline)
                .timed_out()
            {
                break;
            }
        }
        self.open.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_opens_at_quorum_and_at_its_deadline() {
        let warm = Warmup::new(3, Duration::from_secs(60));
        warm.report(true);
        warm.report(true);
        let start = Instant::now();
        warm.wait();
        assert!(start.elapsed() < Duration::from_secs(30));

        let cold = Warmup::new(3, Duration::from_millis(20));
        cold.report(true);
        cold.wait();
        assert!(Instant::now() >= cold.deadline);
        assert!(cold.open.load(Ordering::Acquire));
    }

    #[test]
    fn warmup_opens_when_every_attempt_ended() {
        let down = Warmup::new(3, Duration::from_secs(60));
        for _ in 0..3 {
            down.report(false);
        }
        let start = Instant::now();
        down.wait();
        assert!(start.elapsed() < Duration::from_secs(30));
    }
}
