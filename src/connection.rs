//! Connections to one instance: an r2d2 manager that sets timeouts,
//! preloads the scripts and reads the instance's clock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use redis::{ConnectionInfo, ConnectionLike, ErrorKind, RedisError, Value};

use crate::clock::InstanceClock;

/// A connection plus what we learnt about its health. A connection on which
/// a command timed out or failed mid-way is never reused: a late reply would
/// otherwise be read as the answer to the next command.
pub(crate) struct Conn {
    pub inner: redis::Connection,
    pub broken: bool,
    /// When the instance's clock was last read on this connection.
    pub clock_read: Instant,
}

pub(crate) struct Manager {
    client: redis::Client,
    timeout: Duration,
    /// Why the last connection attempt failed: r2d2 only passes on a
    /// message, and the worker wants to tell a refused password from a
    /// refused connection.
    last_error: Arc<Mutex<Option<RedisError>>>,
    clock: Arc<InstanceClock>,
}

impl Manager {
    pub fn new(
        info: ConnectionInfo,
        timeout: Duration,
        clock: Arc<InstanceClock>,
    ) -> Result<Self, RedisError> {
        Ok(Manager {
            client: redis::Client::open(info)?,
            timeout,
            last_error: Arc::default(),
            clock,
        })
    }

    pub fn last_error(&self) -> Arc<Mutex<Option<RedisError>>> {
        Arc::clone(&self.last_error)
    }

    fn try_connect(&self) -> Result<Conn, RedisError> {
        let inner = self.client.get_connection_with_timeout(self.timeout)?;
        inner.set_read_timeout(Some(self.timeout))?;
        inner.set_write_timeout(Some(self.timeout))?;
        let mut conn = Conn {
            inner,
            broken: false,
            clock_read: Instant::now(),
        };
        load_scripts(&mut conn)?;
        // No connection is used before its instance's clock is known: the
        // seed of new fencing counters comes from it.
        let sent = Instant::now();
        let time: Value = redis::cmd("TIME").query(&mut conn.inner)?;
        if !self.clock.record(&time, sent) {
            return Err(RedisError::from((
                ErrorKind::Client,
                "unexpected reply to TIME",
                format!("{time:?}"),
            )));
        }
        conn.clock_read = sent;
        Ok(conn)
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = RedisError;

    fn connect(&self) -> Result<Conn, RedisError> {
        let result = self.try_connect();
        *self.last_error.lock() = result.as_ref().err().cloned();
        result
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), RedisError> {
        redis::cmd("PING")
            .query::<String>(&mut conn.inner)
            .map(drop)
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || !conn.inner.is_open()
    }
}

/// Loads every script so EVALSHA finds it; called on connect and whenever
/// an instance answers NOSCRIPT (restart, SCRIPT FLUSH).
pub(crate) fn load_scripts(conn: &mut Conn) -> Result<(), RedisError> {
    let mut pipe = redis::pipe();
    for source in crate::scripts::ALL_SOURCES {
        pipe.cmd("SCRIPT").arg("LOAD").arg(source);
    }
    let result = pipe.query::<Vec<String>>(&mut conn.inner).map(drop);
    if result.is_err() {
        conn.broken = true;
    }
    result
}
