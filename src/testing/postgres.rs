//! One real PostgreSQL server per [`PostgresServer`]: `initdb` into a
//! temporary directory, `postgres` on a free loopback port, both removed on
//! drop.
//!
//! The harness only spawns processes and reads files: it needs no SQL
//! client, so the `testing` feature adds no dependency. Tests talk to the
//! server with the client of their choice through [`PostgresServer::url`].

use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::server::{free_port, kill_and_reap, make_temp_dir, signal};

/// What to tell a user whose machine lacks the server: a failing test says
/// how to fix it instead of "No such file".
const NOT_FOUND: &str = "PostgreSQL server binaries (initdb, postgres) not found in \
     `pg_config --bindir`, /usr/lib/postgresql/*/bin or PATH: install them with \
     `bash .ci/setup` (in redfence's repository) or `sudo apt-get install -y postgresql` \
     (Debian/Ubuntu)";

/// The superuser that `initdb` creates and [`PostgresServer::url`] logs in
/// as, whatever the operating-system user running the server is called.
const SUPERUSER: &str = "postgres";
/// `initdb` of a fresh cluster takes a second or two; a loaded CI machine
/// may need much longer, a broken one must still fail rather than hang.
const INITDB_DEADLINE: Duration = Duration::from_secs(120);
/// Crash recovery is not needed on a fresh cluster, so start-up is quick;
/// the slack is for a loaded machine.
const READY_DEADLINE: Duration = Duration::from_secs(30);
/// An immediate shutdown (SIGQUIT) takes milliseconds; past this the
/// postmaster is killed outright.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);
/// Another process can take the probed port before the postmaster binds it.
const START_ATTEMPTS: usize = 5;
const POLL: Duration = Duration::from_millis(20);
const LOG_LINES_IN_ERRORS: usize = 30;

/// A real PostgreSQL server on `127.0.0.1` and a free port, with its own
/// temporary data directory, shut down and deleted on drop (also when the
/// test panics).
///
/// The cluster is made by `initdb` with trust authentication for the
/// superuser `postgres`, so [`url`](Self::url) needs no password. Durability
/// is off (`fsync=off`, `synchronous_commit=off`): a test server never
/// survives a crash, and this keeps commits cheap. Transaction semantics,
/// locking and isolation are PostgreSQL's own.
///
/// PostgreSQL refuses to run as root, so when the tests run as root the
/// server runs as the `postgres` system user (which Debian's package
/// creates) or, failing that, as `nobody`; the temporary directory, which
/// also holds the server's Unix socket, belongs to that user.
///
/// The binaries are looked up in `pg_config --bindir`, then in
/// `/usr/lib/postgresql/<version>/bin` (where Debian puts them, not on
/// `PATH`; the newest version wins), then on `PATH`.
///
/// ```no_run
/// use redfence::testing::PostgresServer;
///
/// let pg = PostgresServer::start();
/// // With the `postgres` crate:
/// // let mut db = postgres::Client::connect(&pg.url(), postgres::NoTls)?;
/// assert!(pg.url().starts_with("postgresql://postgres@127.0.0.1:"));
/// // Dropping `pg` stops the server and deletes its data.
/// ```
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    os_user: Option<String>,
}

impl PostgresServer {
    /// Creates a cluster and starts a server on it, waiting until it
    /// accepts connections.
    ///
    /// # Panics
    ///
    /// If PostgreSQL is not installed (the message says how to install it),
    /// or the server does not come up; the message quotes its log.
    pub fn start() -> PostgresServer {
        match Self::try_start() {
            Ok(server) => server,
            Err(e) => panic!("could not start PostgreSQL: {e}"),
        }
    }

    /// Creates a cluster and starts a server on it, waiting until it
    /// accepts connections.
    ///
    /// Fails with [`io::ErrorKind::NotFound`] if the PostgreSQL server
    /// binaries are not installed, with an error quoting the log if
    /// `initdb` or the server fails or takes too long.
    pub fn try_start() -> io::Result<PostgresServer> {
        let bindir = find_bindir()?;
        let os_user = run_as_user()?;
        let dir = make_temp_dir("redfence-pg")?;
        match start_in(&bindir, &dir, os_user.as_ref()) {
            Ok((port, child)) => Ok(PostgresServer {
                port,
                dir,
                child: Some(child),
                os_user: os_user.map(|u| u.name),
            }),
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// The TCP port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's address, `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The connection string for database `postgres` as superuser
    /// `postgres` without password:
    /// `postgresql://postgres@127.0.0.1:P/postgres`. The `postgres` crate's
    /// `Client::connect` and libpq tools (`psql URL`) take it as it is.
    pub fn url(&self) -> String {
        format!("postgresql://{SUPERUSER}@127.0.0.1:{}/postgres", self.port)
    }

    /// The process id of the postmaster.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The operating-system user the server runs as when the tests run as
    /// root (`postgres` or `nobody`); `None` when it runs as the current
    /// user.
    pub fn os_user(&self) -> Option<&str> {
        self.os_user.as_deref()
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.dir.join("postgres.log"), lines)
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // Runs during unwinding too: it must neither panic nor hang.
        if let Some(mut child) = self.child.take() {
            shut_down(&mut child);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// An unprivileged user to run the server as.
struct OsUser {
    name: String,
    uid: u32,
    gid: u32,
}

/// `None` unless we are root, which PostgreSQL refuses to run as.
fn run_as_user() -> io::Result<Option<OsUser>> {
    if id(&["-u"])? != 0 {
        return Ok(None);
    }
    for name in ["postgres", "nobody"] {
        if let (Ok(uid), Ok(gid)) = (id(&["-u", name]), id(&["-g", name])) {
            return Ok(Some(OsUser {
                name: name.to_string(),
                uid,
                gid,
            }));
        }
    }
    Err(io::Error::other(
        "running as root, and neither a `postgres` nor a `nobody` user exists to run \
         PostgreSQL as (it refuses to run as root)",
    ))
}

/// A number printed by `id` (the standard library does not expose getuid).
fn id(args: &[&str]) -> io::Result<u32> {
    let out = Command::new("id")
        .args(args)
        .stderr(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!("`id {}` failed", args.join(" "))));
    }
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| io::Error::other(format!("`id {}` printed no number", args.join(" "))))
}

fn has_server(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

fn find_bindir() -> io::Result<PathBuf> {
    find_bindir_in(
        "pg_config",
        Path::new("/usr/lib/postgresql"),
        std::env::var_os("PATH"),
    )
}

fn find_bindir_in(
    pg_config: &str,
    debian_root: &Path,
    path: Option<std::ffi::OsString>,
) -> io::Result<PathBuf> {
    // pg_config may come from libpq-dev alone, so its answer must hold the
    // server binaries to count.
    if let Ok(out) = Command::new(pg_config)
        .arg("--bindir")
        .stderr(Stdio::null())
        .output()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_server(&dir) {
            return Ok(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(debian_root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            has_server(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    path.iter()
        .flat_map(std::env::split_paths)
        .find(|dir| has_server(dir))
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, NOT_FOUND))
}

/// A command for one of the server binaries, run as `user` if given, with
/// its working directory in `dir` (the unprivileged user may not be able to
/// read the caller's).
fn server_command(bindir: &Path, name: &str, dir: &Path, user: Option<&OsUser>) -> Command {
    let mut cmd = Command::new(bindir.join(name));
    cmd.current_dir(dir)
        .env("LC_ALL", "C")
        .env("HOME", dir)
        .stdin(Stdio::null());
    if let Some(user) = user {
        // Set in the child before exec (std drops root's supplementary
        // groups too). Unlike `runuser`/`su`, which stay as the parent, the
        // child we hold is the postmaster itself, so signals reach it.
        cmd.uid(user.uid).gid(user.gid);
    }
    cmd
}

fn start_in(bindir: &Path, dir: &Path, user: Option<&OsUser>) -> io::Result<(u16, Child)> {
    if let Some(user) = user {
        std::os::unix::fs::chown(dir, Some(user.uid), Some(user.gid))?;
    }
    // PostgreSQL insists that only its user can read the data directory.
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    initdb(bindir, dir, user)?;
    let mut last_error = None;
    for _ in 0..START_ATTEMPTS {
        let port = free_port()?;
        match spawn_ready(bindir, dir, user, port) {
            Ok(child) => return Ok((port, child)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::other("no start attempt was made")))
}

fn initdb(bindir: &Path, dir: &Path, user: Option<&OsUser>) -> io::Result<()> {
    let log_path = dir.join("initdb.log");
    let log = fs::File::create(&log_path)?;
    let mut child = server_command(bindir, "initdb", dir, user)
        .arg("--pgdata")
        .arg(dir.join("data"))
        .args(["--username", SUPERUSER, "--auth", "trust"])
        .args(["--encoding", "UTF8", "--no-locale", "--no-sync"])
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .map_err(|e| spawn_error("initdb", e, dir, user))?;
    let deadline = Instant::now() + INITDB_DEADLINE;
    loop {
        if let Some(status) = child.try_wait()? {
            if status.success() {
                return Ok(());
            }
            let log = log_tail(&log_path, LOG_LINES_IN_ERRORS);
            let hint = if log.contains("Permission denied") {
                reach_hint(dir, user)
            } else {
                String::new()
            };
            return Err(io::Error::other(format!(
                "initdb exited with {status}{hint}\n--- {} ---\n{log}",
                log_path.display(),
            )));
        }
        if Instant::now() >= deadline {
            let _ = kill_and_reap(&mut child);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "initdb did not finish within {INITDB_DEADLINE:?}\n{}",
                    log_tail(&log_path, LOG_LINES_IN_ERRORS)
                ),
            ));
        }
        thread::sleep(POLL);
    }
}

fn spawn_error(what: &str, e: io::Error, dir: &Path, user: Option<&OsUser>) -> io::Error {
    match e.kind() {
        io::ErrorKind::NotFound => io::Error::new(io::ErrorKind::NotFound, NOT_FOUND),
        io::ErrorKind::PermissionDenied => io::Error::new(
            e.kind(),
            format!("could not run {what}: {e}{}", reach_hint(dir, user)),
        ),
        _ => io::Error::new(e.kind(), format!("could not run {what}: {e}")),
    }
}

/// Why an unprivileged server user may be denied its own directory: a
/// TMPDIR under a private home, say.
fn reach_hint(dir: &Path, user: Option<&OsUser>) -> String {
    match user {
        Some(user) => format!(
            " (the server runs as `{}`, which must be able to reach {}: point TMPDIR at a \
             directory every user can traverse, such as /tmp)",
            user.name,
            dir.display()
        ),
        None => String::new(),
    }
}

/// Starts the postmaster on `port` and waits until it reports itself ready.
/// A port lost to another process is reported as `AddrInUse`, to be retried
/// on another port.
fn spawn_ready(bindir: &Path, dir: &Path, user: Option<&OsUser>, port: u16) -> io::Result<Child> {
    let log_path = dir.join("postgres.log");
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)?;
    let mut child = server_command(bindir, "postgres", dir, user)
        .arg("-D")
        .arg(dir.join("data"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .arg("-k")
        .arg(dir)
        .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
        .args(["-c", "full_page_writes=off", "-c", "shared_buffers=16MB"])
        .args(["-c", "max_connections=60", "-c", "logging_collector=off"])
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .map_err(|e| spawn_error("postgres", e, dir, user))?;
    let pid_file = dir.join("data").join("postmaster.pid");
    let deadline = Instant::now() + READY_DEADLINE;
    loop {
        if let Some(status) = child.try_wait()? {
            let log = log_tail(&log_path, LOG_LINES_IN_ERRORS);
            let kind = if log.contains("could not bind") || log.contains("already in use") {
                io::ErrorKind::AddrInUse
            } else {
                io::ErrorKind::Other
            };
            return Err(io::Error::new(
                kind,
                format!("postgres on port {port} exited with {status} during start-up\n{log}"),
            ));
        }
        if is_ready(&pid_file, child.id()) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            shut_down(&mut child);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "postgres on port {port} was not ready within {READY_DEADLINE:?}\n{}",
                    log_tail(&log_path, LOG_LINES_IN_ERRORS)
                ),
            ));
        }
        thread::sleep(POLL);
    }
}

/// Whether `postmaster.pid` names our process and says "ready": the
/// postmaster writes that once it accepts connections (it is what
/// `pg_ctl start --wait` looks for), so no SQL client is needed.
fn is_ready(pid_file: &Path, pid: u32) -> bool {
    let Ok(text) = fs::read_to_string(pid_file) else {
        return false;
    };
    let lines: Vec<&str> = text.lines().collect();
    lines.first().and_then(|l| l.trim().parse::<u32>().ok()) == Some(pid)
        && lines.get(7).map(|l| l.trim()) == Some("ready")
}

/// Immediate shutdown (SIGQUIT): the postmaster ends its backends and
/// removes its shared memory. SIGKILL only if that does not happen in time,
/// since it would leave the backends to notice on their own.
fn shut_down(child: &mut Child) {
    if matches!(child.try_wait(), Ok(None)) && signal(child.id(), "-QUIT").is_ok() {
        let deadline = Instant::now() + SHUTDOWN_DEADLINE;
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
    let _ = kill_and_reap(child);
}

fn log_tail(path: &Path, lines: usize) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(could not read {}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process_exists(pid: u32) -> bool {
        signal(pid, "-0").is_ok()
    }

    #[test]
    fn starts_ready_and_drop_removes_everything() {
        let server = PostgresServer::start();
        let pid = server.pid().unwrap();
        let dir = server.dir.clone();
        assert!(process_exists(pid));
        assert!(std::net::TcpStream::connect(server.addr()).is_ok());
        assert!(dir.join(format!(".s.PGSQL.{}", server.port())).exists());
        assert!(server.log_tail(50).contains("ready to accept connections"));
        if id(&["-u"]).unwrap() == 0 {
            assert!(server.os_user().is_some());
        }
        drop(server);
        assert!(!process_exists(pid));
        assert!(!dir.exists());
    }

    #[test]
    fn a_panicking_test_still_stops_and_removes_its_server() {
        let started = std::sync::Mutex::new(None);
        let result = std::panic::catch_unwind(|| {
            let server = PostgresServer::start();
            *started.lock().unwrap() = Some((server.pid().unwrap(), server.dir.clone()));
            panic!("the test fails while its server runs");
        });
        assert!(result.is_err());
        let (pid, dir) = started.into_inner().unwrap().unwrap();
        assert!(!process_exists(pid));
        assert!(!dir.exists());
    }

    #[test]
    fn missing_binaries_say_how_to_install_them() {
        let empty = make_temp_dir("redfence-pg-test").unwrap();
        let err = find_bindir_in(
            "redfence-no-such-pg_config",
            &empty,
            Some(empty.clone().into_os_string()),
        )
        .unwrap_err();
        fs::remove_dir_all(&empty).unwrap();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let msg = err.to_string();
        assert!(msg.contains("bash .ci/setup"), "{msg}");
        assert!(msg.contains("apt-get install -y postgresql"), "{msg}");
    }

    #[test]
    fn debian_layout_is_found_off_path_newest_version_first() {
        let root = make_temp_dir("redfence-pg-test").unwrap();
        for version in ["9", "13", "16"] {
            let bin = root.join(version).join("bin");
            fs::create_dir_all(&bin).unwrap();
            fs::write(bin.join("initdb"), "").unwrap();
            if version != "16" {
                fs::write(bin.join("postgres"), "").unwrap();
            }
        }
        let found = find_bindir_in("redfence-no-such-pg_config", &root, None);
        let expected = root.join("13").join("bin");
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(found.unwrap(), expected);
    }

    #[test]
    fn two_servers_get_two_ports() {
        let a = PostgresServer::start();
        let b = PostgresServer::start();
        assert_ne!(a.port(), b.port());
        assert_ne!(a.url(), b.url());
    }
}
