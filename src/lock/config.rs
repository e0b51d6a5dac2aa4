//! The settings a client runs with, after validation: the floor below every
//! operation, next to the instances (see `shared.rs`).

use std::time::Duration;

use crate::{Error, LockOptions};

/// Longest TTL accepted, so deadlines never overflow and a forgotten lease
/// does not outlive a month.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Longest fencing counter idle time accepted.
pub(crate) const MAX_FENCE_IDLE: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Default bound of one connection set-up: TCP connect, TLS handshake,
/// authentication and script loading. Generous, because set-up runs in the
/// background and only a new client's first calls wait for it; a TLS
/// handshake on a loaded machine takes far longer than a lock request.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The settings a client runs with, after validation.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub prefix: String,
    pub instance_timeout: Duration,
    pub connect_timeout: Duration,
    pub drift_factor: f64,
    pub drift_floor: Duration,
    pub retry_delay: Duration,
    pub fence_idle: Duration,
    pub defaults: LockOptions,
    pub extend_retries: u32,
    pub max_extensions: Option<u32>,
    pub max_lease_lifetime: Option<Duration>,
    pub max_pipeline: usize,
    /// Use the servers' own compare-and-delete and compare-and-expire where
    /// they have them (`native.rs`).
    pub native_commands: bool,
    /// Shown to other clients inside our lock values (see `holder.rs`).
    pub identity: String,
}

impl Config {
    /// The clock drift allowance for a TTL: ttl × factor + floor.
    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.drift_factor) + self.drift_floor
    }

    /// Checks one call's options against this client's timeouts.
    pub(crate) fn validate(&self, opts: &LockOptions) -> Result<(), Error> {
        let ttl = opts.get_ttl();
        if ttl < Duration::from_millis(1) {
            return Err(Error::invalid_options(format!(
                "ttl {ttl:?} is below 1 ms, the smallest lease Redis can keep"
            )));
        }
        if ttl > MAX_TTL {
            return Err(Error::invalid_options(format!(
                "ttl {ttl:?} is longer than the 30 day limit"
            )));
        }
        let floor = self.drift(ttl) + self.instance_timeout * 2;
        if ttl <= floor {
            return Err(Error::invalid_options(format!(
                "ttl {ttl:?} leaves no validity: it must exceed clock drift ({:?}) plus twice the \
                 per-instance timeout ({:?}), {floor:?} in all",
                self.drift(ttl),
                self.instance_timeout
            )));
        }
        if opts.get_hold_at_least() > MAX_TTL {
            return Err(Error::invalid_options(format!(
                "hold_at_least {:?} is longer than the 30 day limit",
                opts.get_hold_at_least()
            )));
        }
        if std::time::Instant::now()
            .checked_add(opts.get_wait())
            .is_none()
        {
            return Err(Error::invalid_options(format!(
                "wait {:?} is too large to compute a deadline",
                opts.get_wait()
            )));
        }
        Ok(())
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            prefix: "redfence:".to_string(),
            instance_timeout: Duration::from_millis(50),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            drift_factor: 0.01,
            drift_floor: Duration::from_millis(2),
            retry_delay: Duration::from_millis(100),
            fence_idle: Duration::from_secs(24 * 3600),
            defaults: LockOptions::new(),
            extend_retries: 3,
            max_extensions: None,
            max_lease_lifetime: None,
            max_pipeline: 256,
            native_commands: true,
            identity: crate::protocol::value::default_identity(),
        }
    }
}
