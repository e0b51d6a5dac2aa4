//! Client configuration and its validation.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo};

use crate::address::sealed::Invalid;

use crate::client::Redlock;
use crate::lock::config::{Config, MAX_FENCE_IDLE, MAX_TTL};
use crate::lock::shared::Shared;
use crate::position::{Kind, Position};
use crate::protocol::clock::InstanceClock;
use crate::protocol::keys::validate_prefix;
use crate::protocol::native;
use crate::transport::cluster::{ClusterPosition, ShardSettings};
use crate::transport::connection::{open_client, Manager, TlsSettings, Warmup};
use crate::transport::instance::{Instance, InstanceConfig};
use crate::transport::notify::{Notifier, Source};
use crate::transport::round::{Instances, PositionState};
use crate::transport::voter::Voter;
use crate::{Error, LockOptions};

/// Requests queued for one instance before new ones are refused.
const QUEUE_CAPACITY: usize = 64 * 1024;

impl Redlock {
    /// Starts configuring a client for these instances: URLs such as
    /// `"redis://:password@host:6379/0"` (`rediss://` for TLS), or
    /// [`redis::ConnectionInfo`] values; see
    /// [`IntoInstance`](crate::IntoInstance) for every form. A
    /// [`Position`] may also be a Redis Cluster
    /// ([`Position::cluster`](crate::Position::cluster), or a
    /// `redis+cluster://` URL). The addresses are checked by
    /// [`RedlockBuilder::build`].
    pub fn builder<I>(instances: I) -> RedlockBuilder
    where
        I: IntoIterator,
        I::Item: Into<Position>,
    {
        RedlockBuilder::new(instances)
    }

    /// A client with the default settings: `Redlock::builder(instances).build()`.
    pub fn new<I>(instances: I) -> Result<Redlock, Error>
    where
        I: IntoIterator,
        I::Item: Into<Position>,
    {
        Self::builder(instances).build()
    }
}

/// Builds a [`Redlock`] client. Created by [`Redlock::builder`].
///
/// ```no_run
/// use redfence::Redlock;
/// use std::time::Duration;
///
/// let locks = Redlock::builder(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
///     .key_prefix("billing:")
///     .instance_timeout(Duration::from_millis(30))
///     .build()?;
/// # Ok::<(), redfence::Error>(())
/// ```
#[must_use = "a builder does nothing until build() is called"]
pub struct RedlockBuilder {
    instances: Vec<Kind>,
    allow_even: bool,
    config: Config,
    tls: TlsSettings,
}

impl RedlockBuilder {
    fn new<I>(instances: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Position>,
    {
        RedlockBuilder {
            instances: instances.into_iter().map(|p| p.into().kind).collect(),
            allow_even: false,
            config: Config::default(),
            tls: TlsSettings::default(),
        }
    }

    /// Prefix of every key redfence writes (see the key layout in the crate
    /// docs). Must not contain `{` or `}`.
    ///
    /// Defaults to `"redfence:"`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.prefix = prefix.into();
        self
    }

    /// Longest wait for one instance: connect, read and write timeouts, and
    /// how long a lock round waits for instances that have not answered.
    /// Keep it far below the TTL; a lock call never waits for a stopped
    /// instance longer than this, and not at all once a quorum answered.
    ///
    /// Defaults to 50 ms.
    pub fn instance_timeout(mut self, timeout: Duration) -> Self {
        self.config.instance_timeout = timeout;
        self
    }

    /// Longest time one connection set-up may take: TCP connect, TLS
    /// handshake, authentication and script loading. Connections are set up
    /// in the background, starting at [`build`](Self::build); a new client's
    /// first calls wait for them up to this long after `build()` (less once
    /// enough instances for a quorum are connected, or every instance's
    /// first attempt failed), then calls never wait for set-up again.
    ///
    /// Defaults to 2 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// Certificates for every `rediss://` instance: `root_cert`, the CA to
    /// trust instead of the platform's (or the bundled) roots, and
    /// `client_tls`, a client certificate and key for servers that require
    /// one (mutual TLS). Both are PEM. Without this call `rediss://`
    /// instances are checked against the platform's roots (the bundled
    /// Mozilla roots with the `tls-rustls-webpki-roots` feature).
    ///
    /// Available with the `tls-rustls` feature.
    ///
    /// ```no_run
    /// # fn pem(_: &str) -> Vec<u8> { Vec::new() }
    /// use redfence::{redis, Redlock};
    ///
    /// let certs = redis::TlsCertificates {
    ///     client_tls: Some(redis::ClientTlsConfig {
    ///         client_cert: pem("client.crt"),
    ///         client_key: pem("client.key"),
    ///     }),
    ///     root_cert: Some(pem("ca.crt")),
    /// };
    /// let locks = Redlock::builder(["rediss://redfence:secret@10.0.0.1:6380"])
    ///     .tls_certificates(certs)
    ///     .build()?;
    /// # Ok::<(), redfence::Error>(())
    /// ```
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn tls_certificates(mut self, certificates: redis::TlsCertificates) -> Self {
        self.tls = Some(certificates);
        self
    }

    /// Clock drift allowance subtracted from every lease: `ttl × factor +
    /// floor`. `factor` must be in `0.0..1.0`.
    ///
    /// Defaults to `0.01` and 2 ms.
    pub fn clock_drift(mut self, factor: f64, floor: Duration) -> Self {
        self.config.drift_factor = factor;
        self.config.drift_floor = floor;
        self
    }

    /// Upper bound of the random pause between two attempts of a waiting
    /// lock call while instances are unavailable (shortened when the
    /// holder's lease ends sooner). After a split vote the pause is drawn
    /// from a few attempt durations instead, and a contended call waits for
    /// the release to be announced.
    ///
    /// Defaults to 100 ms.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.config.retry_delay = delay;
        self
    }

    /// How long a resource's fencing counter survives without being used.
    /// A counter that expired restarts from the instance clock, so tokens
    /// stay increasing; shorter times keep memory low for services that
    /// lock millions of distinct resources. At least one second.
    ///
    /// Defaults to 24 hours.
    pub fn fence_idle_expiry(mut self, idle: Duration) -> Self {
        self.config.fence_idle = idle;
        self
    }

    /// Options used by [`Redlock::lock`] and, with a zero wait, by
    /// [`Redlock::try_lock`].
    ///
    /// Defaults to [`LockOptions::new()`].
    pub fn default_options(mut self, options: LockOptions) -> Self {
        self.config.defaults = options;
        self
    }

    /// Accept an even number of instances. An even count tolerates no more
    /// failures than the odd count below it, so it is refused unless asked
    /// for.
    ///
    /// Defaults to `false`.
    pub fn allow_even_instances(mut self, allow: bool) -> Self {
        self.allow_even = allow;
        self
    }

    /// How many times the watchdog retries a failed extension round (while
    /// validity remains) before it marks the lease lost.
    ///
    /// Defaults to 3.
    pub fn extend_retries(mut self, retries: u32) -> Self {
        self.config.extend_retries = retries;
        self
    }

    /// Cap on how many times the watchdog extends one lease; after that the
    /// lease runs out and the guard reports it lost. `None` means no cap.
    ///
    /// Defaults to `None`.
    pub fn max_extensions(mut self, max: Option<u32>) -> Self {
        self.config.max_extensions = max;
        self
    }

    /// Cap on how long the watchdog keeps one lease alive, counted from its
    /// acquisition; after that the lease runs out. `None` means no cap.
    ///
    /// Defaults to `None`.
    pub fn max_lease_lifetime(mut self, max: Option<Duration>) -> Self {
        self.config.max_lease_lifetime = max;
        self
    }

    /// Most requests a worker sends to its instance as one pipeline. Workers
    /// batch whatever queued up while they waited for the previous reply
    /// (auto-pipelining), which raises throughput under many threads without
    /// delaying a lone request. 1 turns batching off.
    ///
    /// Defaults to 256.
    pub fn max_pipeline(mut self, max: usize) -> Self {
        self.config.max_pipeline = max;
        self
    }

    /// Whether to release and extend a single resource with the server's
    /// own commands where it has them: `DELIFEQ` (Valkey 9.0+) or `DELEX …
    /// IFEQ` (Redis 8.4+) for a release, `SET … IFEQ … PX` (Valkey 8.1+,
    /// Redis 8.4+) for an extension. Each connection finds out what its
    /// server runs, and what its ACL user may run, when it connects; the
    /// Lua scripts stand in everywhere else. With `false`, every instance
    /// gets the scripts.
    ///
    /// The guarantees are the same either way (`docs/protocol.md`). One
    /// difference shows: after a native extension, a manual
    /// [`extend`](crate::LockGuard::extend) longer than the lock's TTL is
    /// counted in [`validity`](crate::LockGuard::validity) only up to that
    /// TTL (the instances keep the longer one).
    ///
    /// Defaults to `true`.
    pub fn native_commands(mut self, on: bool) -> Self {
        self.config.native_commands = on;
        self
    }

    /// The name this client shows to others: in
    /// [`Error::Contended`](crate::Error::Contended), in
    /// [`Redlock::holder`](crate::Redlock::holder), in election events and
    /// in `redfence status`. It travels inside the lock value, next to the
    /// random part that stays secret, so it costs no key and no command.
    /// 1 to 128 bytes of printable ASCII; anything else makes
    /// [`build`](Self::build) fail with [`Error::InvalidConfig`].
    ///
    /// Defaults to `hostname:pid`.
    ///
    /// ```no_run
    /// let locks = redfence::Redlock::builder(["redis://10.0.0.1"])
    ///     .identity("billing-worker-3")
    ///     .build()?;
    /// # Ok::<(), redfence::Error>(())
    /// ```
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.config.identity = identity.into();
        self
    }

    /// Validates the configuration, starts the client's workers and
    /// watchdog, and starts connecting in the background. Does not fail
    /// for instances that are down: they are unavailable until they come
    /// back.
    pub fn build(self) -> Result<Redlock, Error> {
        let positions = self.validate()?;
        let clients = self.open_clients(&positions)?;
        let start = VoterStart::new(&self.config, &self.tls, positions.len());
        let mut list = Vec::with_capacity(positions.len());
        for (index, (position, client)) in positions.into_iter().zip(&clients).enumerate() {
            let clock = Arc::new(InstanceClock::default());
            let support = Arc::new(native::Support::default());
            let voter = start.voter(index, position, client.clone(), &clock, &support)?;
            list.push(PositionState {
                voter,
                clock,
                support,
            });
        }
        let sources = list
            .iter()
            .zip(clients)
            .map(|(position, client)| match &position.voter {
                Voter::Standalone(_) => Source::Server(client),
                Voter::Cluster(cluster) => Source::Cluster(cluster.shards()),
            })
            .collect();
        let warmup = start.warmup;
        let cfg = self.config;
        let notifier = Notifier::start(sources, cfg.connect_timeout, cfg.instance_timeout)
            .map_err(|e| Error::invalid_config(format!("cannot start a subscriber thread: {e}")))?;
        let shared = Shared::new(cfg, Instances::new(list), warmup);
        Redlock::start(shared, notifier)
    }

    /// One client per position: its release notifications (a standalone
    /// server's) and its worker. Every seed of a cluster is checked too.
    fn open_clients(&self, positions: &[Checked]) -> Result<Vec<redis::Client>, Error> {
        let open = |index: usize, info: &ConnectionInfo| {
            open_client(info.clone(), &self.tls).map_err(|e| {
                Error::invalid_config(format!("instance #{index} ({}): {e}", instance_name(info)))
            })
        };
        let mut clients = Vec::with_capacity(positions.len());
        for (index, position) in positions.iter().enumerate() {
            for info in position.all() {
                open(index, info)?;
            }
            clients.push(open(index, position.first())?);
        }
        Ok(clients)
    }

    fn validate(&self) -> Result<Vec<Checked>, Error> {
        let positions = self.check_positions()?;
        self.check_tls(&positions)?;
        check_settings(&self.config)?;
        Ok(positions)
    }

    /// Each position's addresses parsed and checked: no server listed
    /// twice, an odd number of positions unless even ones are allowed.
    fn check_positions(&self) -> Result<Vec<Checked>, Error> {
        if self.instances.is_empty() {
            return Err(Error::invalid_config("no instances given"));
        }
        let mut positions = Vec::with_capacity(self.instances.len());
        let mut seen = HashSet::new();
        for (index, position) in self.instances.iter().enumerate() {
            let checked = check_position(index, position)?;
            for info in checked.all() {
                if matches!(info.addr(), ConnectionAddr::TcpTls { .. })
                    && !cfg!(feature = "tls-rustls")
                {
                    // Another crate may have switched on redis-rs's TLS;
                    // without ours, `tls_certificates` does not exist and
                    // the crypto provider is not chosen.
                    return Err(tls_feature_missing(index));
                }
                let name = instance_name(info);
                if !seen.insert(name.clone()) {
                    return Err(Error::invalid_config(format!(
                        "instance #{index} ({name}) is listed twice; each instance must be \
                         independent"
                    )));
                }
            }
            positions.push(checked);
        }
        if positions.len() % 2 == 0 && !self.allow_even {
            let n = positions.len();
            let tolerated = n - (n / 2 + 1);
            return Err(Error::invalid_config(format!(
                "{n} instances is an even number: a quorum of them survives {tolerated} \
                 failure(s), no more than {} instances would; use an odd number, or \
                 allow_even_instances(true)",
                n - 1
            )));
        }
        Ok(positions)
    }

    /// Certificates that parse, and only where some instance uses TLS.
    #[cfg(feature = "tls-rustls")]
    fn check_tls(&self, positions: &[Checked]) -> Result<(), Error> {
        let Some(certs) = &self.tls else {
            return Ok(());
        };
        crate::transport::tls::check_certificates(certs).map_err(Error::invalid_config)?;
        let any_tls = positions
            .iter()
            .flat_map(Checked::all)
            .any(|i| matches!(i.addr(), ConnectionAddr::TcpTls { .. }));
        if !any_tls {
            return Err(Error::invalid_config(
                "tls_certificates was given but no instance is a rediss:// URL: the certificates \
                 would not be used and the connections would not be encrypted",
            ));
        }
        Ok(())
    }

    #[cfg(not(feature = "tls-rustls"))]
    fn check_tls(&self, _positions: &[Checked]) -> Result<(), Error> {
        Ok(())
    }
}

/// One position's addresses, parsed when given, checked: a cluster needs
/// seed nodes, over TCP, on database 0.
fn check_position(index: usize, position: &Kind) -> Result<Checked, Error> {
    let bad = |e: &Invalid| match e {
        Invalid::TlsUnsupported => tls_feature_missing(index),
        Invalid::Bad(reason) => Error::invalid_config(format!(
            "instance #{index} is not a valid Redis address: {reason}"
        )),
    };
    let seeds = match position {
        Kind::Standalone(parsed) => {
            return Ok(Checked::Standalone(parsed.as_ref().map_err(bad)?.clone()))
        }
        Kind::Cluster(parsed) => parsed.as_ref().map_err(bad)?,
    };
    if seeds.is_empty() {
        return Err(Error::invalid_config(format!(
            "instance #{index} is a cluster without seed nodes: give at least one"
        )));
    }
    for seed in seeds {
        if matches!(seed.addr(), ConnectionAddr::Unix(_)) {
            return Err(Error::invalid_config(format!(
                "instance #{index}: a cluster's seed nodes are reached over TCP, not a Unix socket"
            )));
        }
        if seed.redis_settings().db() != 0 {
            return Err(Error::invalid_config(format!(
                "instance #{index}: a cluster has only database 0"
            )));
        }
    }
    Ok(Checked::Cluster(seeds.clone()))
}

/// The client-wide settings, each within its bounds.
fn check_settings(cfg: &Config) -> Result<(), Error> {
    validate_prefix(&cfg.prefix)?;
    crate::protocol::value::validate_identity(&cfg.identity)?;
    let within = |d: Duration, min: Duration, max: Duration| (min..=max).contains(&d);
    let ms = Duration::from_millis(1);
    if !within(cfg.connect_timeout, ms, Duration::from_secs(3600)) {
        return Err(Error::invalid_config(
            "connect_timeout must be between 1 ms and 1 hour",
        ));
    }
    if !within(cfg.instance_timeout, ms, MAX_TTL) {
        return Err(Error::invalid_config(
            "instance_timeout must be between 1 ms and 30 days (and far below the TTL)",
        ));
    }
    if !(cfg.drift_factor.is_finite() && (0.0..1.0).contains(&cfg.drift_factor)) {
        return Err(Error::invalid_config(format!(
            "clock drift factor {} must be a number in 0.0..1.0",
            cfg.drift_factor
        )));
    }
    if cfg.drift_floor > MAX_TTL {
        return Err(Error::invalid_config(
            "clock drift floor is longer than 30 days",
        ));
    }
    if !within(cfg.retry_delay, ms, MAX_TTL) {
        return Err(Error::invalid_config(
            "retry_delay must be between 1 ms and 30 days",
        ));
    }
    if cfg.max_pipeline == 0 {
        return Err(Error::invalid_config("max_pipeline must be at least 1"));
    }
    if !within(cfg.fence_idle, Duration::from_secs(1), MAX_FENCE_IDLE) {
        return Err(Error::invalid_config(
            "fence_idle_expiry must be between 1 s and 10 years",
        ));
    }
    cfg.validate(&cfg.defaults).map_err(|e| match e {
        Error::InvalidOptions { reason } => {
            Error::invalid_config(format!("default options: {reason}"))
        }
        other => other,
    })
}

/// What starting each position's worker needs.
struct VoterStart<'a> {
    cfg: &'a Config,
    tls: &'a TlsSettings,
    warmup: Arc<Warmup>,
    /// r2d2 (re)connects in these threads, one per instance so a hung
    /// instance does not hold up reconnecting to the others.
    pool_threads: Arc<scheduled_thread_pool::ScheduledThreadPool>,
}

impl<'a> VoterStart<'a> {
    fn new(cfg: &'a Config, tls: &'a TlsSettings, positions: usize) -> Self {
        VoterStart {
            cfg,
            tls,
            warmup: Warmup::new(positions, cfg.connect_timeout),
            pool_threads: Arc::new(
                scheduled_thread_pool::ScheduledThreadPool::builder()
                    .num_threads(positions)
                    .thread_name_pattern("redfence-connect-{}")
                    .build(),
            ),
        }
    }

    /// Starts the worker of position `index` (a cluster position's router
    /// and shard workers), reading the instance's clock into `clock` and
    /// what it runs natively into `native`.
    fn voter(
        &self,
        index: usize,
        position: Checked,
        client: redis::Client,
        clock: &Arc<InstanceClock>,
        native: &Arc<native::Support>,
    ) -> Result<Voter, Error> {
        let cfg = self.cfg;
        let thread_failed =
            |e: std::io::Error| Error::invalid_config(format!("cannot start a worker thread: {e}"));
        match position {
            Checked::Standalone(info) => {
                let manager = Manager::new(
                    client,
                    cfg.connect_timeout,
                    cfg.instance_timeout,
                    Arc::clone(&self.warmup),
                    Arc::clone(clock),
                    cfg.native_commands.then(|| format!("{}probe", cfg.prefix)),
                    Arc::clone(native),
                );
                let instance = Instance::start(InstanceConfig {
                    index,
                    name: instance_name(&info),
                    manager,
                    timeout: cfg.instance_timeout,
                    queue_capacity: QUEUE_CAPACITY,
                    max_batch: cfg.max_pipeline,
                    thread_pool: Arc::clone(&self.pool_threads),
                    clock: Arc::clone(clock),
                    redirect: None,
                    thread_name: format!("redfence-instance-{index}"),
                });
                Ok(Voter::Standalone(instance.map_err(thread_failed)?))
            }
            Checked::Cluster(seeds) => {
                let settings = ShardSettings {
                    template: seeds[0].clone(),
                    tls: crate::transport::connection::copy_tls(self.tls),
                    connect_timeout: cfg.connect_timeout,
                    timeout: cfg.instance_timeout,
                    queue_capacity: QUEUE_CAPACITY,
                    max_batch: cfg.max_pipeline,
                    thread_pool: Arc::clone(&self.pool_threads),
                    clock: Arc::clone(clock),
                };
                let cluster =
                    ClusterPosition::start(index, seeds, settings, Arc::clone(&self.warmup));
                Ok(Voter::Cluster(cluster.map_err(thread_failed)?))
            }
        }
    }
}

/// A position whose addresses were checked.
// Built once per position when a client is built: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Checked {
    Standalone(ConnectionInfo),
    /// Its seed nodes, at least one.
    Cluster(Vec<ConnectionInfo>),
}

impl Checked {
    /// The server, or the first seed.
    fn first(&self) -> &ConnectionInfo {
        match self {
            Checked::Standalone(info) => info,
            Checked::Cluster(seeds) => &seeds[0],
        }
    }

    fn all(&self) -> &[ConnectionInfo] {
        match self {
            Checked::Standalone(info) => std::slice::from_ref(info),
            Checked::Cluster(seeds) => seeds,
        }
    }
}

fn tls_feature_missing(index: usize) -> Error {
    Error::invalid_config(format!(
        "instance #{index} is a rediss:// (TLS) URL, but redfence was built without TLS: \
         enable its `tls-rustls` feature (or `tls-rustls-webpki-roots`)"
    ))
}

/// `host:port/db`, never with credentials: it appears in errors and logs.
fn instance_name(info: &ConnectionInfo) -> String {
    format!("{}/{}", info.addr(), info.redis_settings().db())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> RedlockBuilder {
        Redlock::builder([
            "redis://127.0.0.1:7001",
            "redis://127.0.0.1:7002",
            "redis://127.0.0.1:7003",
        ])
    }

    const MS: Duration = Duration::from_millis(1);

    /// Every documented range includes its ends and nothing past them.
    /// (The upper ends of `instance_timeout` and the drift floor, 30 days,
    /// cannot be reached alone: the default TTL must exceed both.)
    #[test]
    fn limits_include_their_ends() {
        let ok = |b: RedlockBuilder| b.validate().map(drop);
        let hour = Duration::from_secs(3600);
        let ten_years = Duration::from_secs(10 * 365 * 24 * 3600);
        let thirty_days = Duration::from_secs(30 * 24 * 3600);
        assert_eq!(MAX_TTL, thirty_days, "the documented 30 day limit");
        for (name, edge, past) in [
            (
                "connect_timeout low",
                ok(three().connect_timeout(MS)),
                ok(three().connect_timeout(MS - Duration::from_nanos(1))),
            ),
            (
                "connect_timeout high",
                ok(three().connect_timeout(hour)),
                ok(three().connect_timeout(hour + MS)),
            ),
            (
                "instance_timeout low",
                ok(three().instance_timeout(MS)),
                ok(three().instance_timeout(MS - Duration::from_nanos(1))),
            ),
            (
                "retry_delay low",
                ok(three().retry_delay(MS)),
                ok(three().retry_delay(MS - Duration::from_nanos(1))),
            ),
            (
                "retry_delay high",
                ok(three().retry_delay(MAX_TTL)),
                ok(three().retry_delay(MAX_TTL + MS)),
            ),
            (
                "fence_idle_expiry low",
                ok(three().fence_idle_expiry(Duration::from_secs(1))),
                ok(three().fence_idle_expiry(Duration::from_millis(999))),
            ),
            (
                "fence_idle_expiry high (10 years)",
                ok(three().fence_idle_expiry(ten_years)),
                ok(three().fence_idle_expiry(ten_years + Duration::from_secs(1))),
            ),
            (
                "hold_at_least high (30 days)",
                ok(three().default_options(LockOptions::new().hold_at_least(thirty_days))),
                ok(three().default_options(LockOptions::new().hold_at_least(thirty_days + MS))),
            ),
            (
                "ttl high (30 days)",
                ok(three().default_options(LockOptions::new().ttl(thirty_days))),
                ok(three().default_options(LockOptions::new().ttl(thirty_days + MS))),
            ),
        ] {
            assert!(edge.is_ok(), "{name}: the end itself is refused: {edge:?}");
            assert!(past.is_err(), "{name}: past the end is accepted");
        }
    }
}
