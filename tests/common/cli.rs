//! Running the `redfence` command as a user runs it: the built binary with
//! none of the caller's `REDFENCE_*` settings, its output collected within
//! a deadline, signals, and the files and processes a test leaves behind.

use std::fmt::Display;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redfence::crossbeam_channel::{self, Receiver};
use redfence::testing::RedisServers;

use super::{eventually, holders};

pub const BIN: &str = env!("CARGO_BIN_EXE_redfence");
/// Upper bound for any single `redfence` run in these tests.
pub const RUN_LIMIT: Duration = Duration::from_secs(30);
/// Upper bound for a run that a signal or a loss should end promptly: a
/// broken signal path fails the test in this time, not after `RUN_LIMIT`.
pub const SIGNAL_LIMIT: Duration = Duration::from_secs(10);

/// A `redfence` command aimed at `urls` (through `REDFENCE_SERVERS`), with
/// none of the caller's `REDFENCE_*` settings leaking in.
pub fn redfence_at(urls: &[String]) -> Command {
    let mut cmd = Command::new(BIN);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("REDFENCE_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("REDFENCE_SERVERS", urls.join(","));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A `redfence` command aimed at the cluster.
pub fn redfence(cluster: &RedisServers) -> Command {
    redfence_at(&cluster.urls())
}

/// Waits for the process to end within `limit` (killing it and failing
/// the test otherwise) and collects its output. On failure the output is
/// not read: a command that a broken `redfence` left running may hold the
/// pipes open.
pub fn finish(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("redfence did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn output(cmd: &mut Command) -> Output {
    finish(cmd.spawn().expect("redfence starts"), RUN_LIMIT)
}

pub fn code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| panic!("redfence died of a signal: {status:?}"))
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A `run` of `script` (as `sh -c`) under `resource`, with extra options.
pub fn run(cluster: &RedisServers, options: &[&str], resource: &str, script: &str) -> Output {
    output(&mut run_cmd(cluster, options, resource, script))
}

pub fn run_cmd(cluster: &RedisServers, options: &[&str], resource: &str, script: &str) -> Command {
    let mut cmd = redfence(cluster);
    cmd.arg("run")
        .args(options)
        .args([resource, "--", "sh", "-c", script]);
    cmd
}

/// The `redfence ping` line of one instance.
pub fn ping_line(text: &str, server: &redfence::testing::RedisServer) -> String {
    text.lines()
        .find(|l| l.starts_with(&server.addr().to_string()))
        .unwrap_or_else(|| panic!("no line for {}: {text}", server.addr()))
        .to_string()
}

/// Starts a `run` whose command traps TERM with `on_term`, and returns it
/// once the command runs, with the command's shell pid.
pub fn start_trapping(
    cluster: &RedisServers,
    scratch: &Scratch,
    options: &[&str],
    on_term: &str,
) -> (Child, String) {
    let script = format!(
        "trap '{on_term}' TERM; echo $$ > {pid}; while :; do sleep 0.05; done",
        pid = scratch.path("pid")
    );
    let child = run_cmd(cluster, options, "lease", &script)
        .spawn()
        .expect("redfence starts");
    assert!(
        eventually(Duration::from_secs(10), || !scratch
            .read("pid")
            .trim()
            .is_empty()),
        "the command did not start"
    );
    let pid = scratch.read("pid").trim().to_string();
    (child, pid)
}

/// No instance holds the resource's lock key. Releases are confirmed by a
/// quorum; the last instances may apply theirs a moment later.
pub fn assert_no_key(cluster: &RedisServers, resource: &str) {
    assert!(
        eventually(Duration::from_secs(2), || holders(cluster, resource) == 0),
        "{} instance(s) still hold the lock key of {resource:?}",
        holders(cluster, resource)
    );
}

/// Sends signal `name` (`TERM`, `STOP`…) to process `pid`, as `kill` does.
pub fn signal(pid: u32, name: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill -{name} {pid} failed");
}

/// Whether a process with this id exists (a zombie too).
pub fn process_exists(pid: &str) -> bool {
    Command::new("kill")
        .args(["-0", pid])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether process `pid` still runs: it exists and is not a zombie (a
/// killed orphan may wait a moment for its new parent to reap it).
pub fn alive(pid: impl Display) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// SIGKILLs processes (`"123"`) and process groups (`"-123"`) when a test
/// fails half-way, so that a command left running by a broken `redfence`
/// does not outlive the test.
pub struct KillOnPanic(pub Vec<String>);

impl Drop for KillOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for target in &self.0 {
                let _ = Command::new("kill")
                    .args(["-KILL", "--", target])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

/// Kills a process this test started (through its command) if it is still
/// there, so a failing test leaves nothing behind.
pub struct Reap(pub u32);

impl Drop for Reap {
    fn drop(&mut self) {
        if alive(self.0) {
            let _ = Command::new("kill")
                .args(["-KILL", &self.0.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A fresh directory for one test's files, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "redfence-cli-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    pub fn path(&self, file: &str) -> String {
        self.0.join(file).to_string_lossy().into_owned()
    }

    pub fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.0.join(file)).unwrap_or_default()
    }

    pub fn exists(&self, file: &str) -> bool {
        self.0.join(file).exists()
    }

    /// Waits until `file` has a non-empty first line, and returns it.
    pub fn wait_line(&self, file: &str) -> String {
        assert!(
            eventually(Duration::from_secs(10), || self.read(file).ends_with('\n')),
            "{file} was not written"
        );
        self.read(file).lines().next().unwrap_or("").to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The lines a process writes on stderr, as they come.
pub fn stderr_lines(child: &mut Child) -> Receiver<String> {
    let pipe = child.stderr.take().expect("stderr piped");
    lines_of(pipe)
}

/// The lines read from `pipe`, as they come.
pub fn lines_of(pipe: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("line-reader".to_string())
        .spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        })
        .expect("reader thread");
    rx
}

/// The first line that contains `needle`, waiting at most `limit`.
pub fn wait_for_line(lines: &Receiver<String>, needle: &str, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    let mut seen = Vec::new();
    while let Ok(line) = lines.recv_deadline(deadline) {
        if line.contains(needle) {
            return line;
        }
        seen.push(line);
    }
    panic!("no line with {needle:?} within {limit:?}; saw {seen:?}");
}
