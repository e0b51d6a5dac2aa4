//! Tests of the `redfence` command written for the mutants that
//! `cargo mutants` found surviving `tests/cli.rs` (docs/mutation-testing.md
//! names each one). Like `tests/cli.rs` they run the built binary as a user
//! does: real child processes, real signals, real redis-server instances,
//! and conditions polled with a deadline instead of sleeps.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{builder, eventually, holders, lock_key};
use redfence::crossbeam_channel::{self, Receiver};
use redfence::testing::{Fault, FaultProxy, RedisServer, RedisServers, ServerOptions};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_redfence");
/// Upper bound for any single `redfence` run in these tests.
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// A `redfence` command aimed at `urls`, with none of the caller's
/// REDFENCE_* settings leaking in.
fn redfence_at(urls: &[String]) -> Command {
    let mut cmd = Command::new(BIN);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("REDFENCE_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("REDFENCE_URLS", urls.join(","));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn redfence(cluster: &RedisServers) -> Command {
    redfence_at(&cluster.urls())
}

/// Waits for the process to end within `limit` (killing it and failing
/// the test otherwise) and collects its output. On failure the output is
/// not read: a command that a broken `redfence` left running may hold the
/// pipes open.
fn finish(mut child: Child, limit: Duration) -> Output {
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

fn output(cmd: &mut Command) -> Output {
    finish(cmd.spawn().expect("redfence starts"), RUN_LIMIT)
}

fn code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| panic!("redfence died of a signal: {status:?}"))
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn run_cmd(cluster: &RedisServers, options: &[&str], resource: &str, script: &str) -> Command {
    let mut cmd = redfence(cluster);
    cmd.arg("run")
        .args(options)
        .args([resource, "--", "sh", "-c", script]);
    cmd
}

fn run(cluster: &RedisServers, options: &[&str], resource: &str, script: &str) -> Output {
    output(&mut run_cmd(cluster, options, resource, script))
}

fn signal(pid: u32, name: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill -{name} {pid} failed");
}

/// Upper bound for a run that a signal or a loss should end promptly: a
/// mutant that breaks that fails the test in this time, not after
/// RUN_LIMIT.
const SIGNAL_LIMIT: Duration = Duration::from_secs(10);

/// SIGKILLs processes (`"123"`) and process groups (`"-123"`) when a test
/// fails half-way, so that a command left running by a broken `redfence`
/// does not outlive the test.
struct KillOnPanic(Vec<String>);

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

/// Whether the process runs (a zombie, dead but not yet reaped, does not).
fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// A fresh directory for one test's files, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "redfence-cli-mutants-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    fn path(&self, file: &str) -> String {
        self.0.join(file).to_string_lossy().into_owned()
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.0.join(file)).unwrap_or_default()
    }

    /// Waits until `file` has a non-empty first line, and returns it.
    fn wait_line(&self, file: &str) -> String {
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
fn stderr_lines(child: &mut Child) -> Receiver<String> {
    let pipe = child.stderr.take().expect("stderr piped");
    lines_of(pipe)
}

fn lines_of(pipe: impl std::io::Read + Send + 'static) -> Receiver<String> {
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

fn wait_for_line(lines: &Receiver<String>, needle: &str, limit: Duration) -> String {
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

// --- Signals and the process group ---------------------------------------

/// The command runs in its own process group and signals sent to `run` go
/// to that group: a background process of the command gets them too.
/// (Mutant: the group flag inverted, signals sent to the command alone.)
#[test]
fn a_forwarded_signal_reaches_what_the_command_started_in_the_background() {
    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("group");
    // The background process lets go of redfence's stdout and stderr, so a
    // survivor cannot keep the test waiting for their end.
    let script = format!(
        "sleep 300 >/dev/null 2>&1 & echo $! > {bg}; wait",
        bg = scratch.path("bg")
    );
    let child = run_cmd(&cluster, &[], "group", &script)
        .spawn()
        .expect("redfence starts");
    let bg = scratch.wait_line("bg");
    let _cleanup = KillOnPanic(vec![bg.clone()]);
    assert!(alive(&bg), "the background sleep did not start");
    signal(child.id(), "TERM");
    let out = finish(child, SIGNAL_LIMIT);
    // The shell died of the forwarded TERM.
    assert_eq!(code(out.status), 128 + 15, "{}", stderr(&out));
    let gone = eventually(Duration::from_secs(10), || !alive(&bg));
    if !gone {
        let _ = Command::new("kill").args(["-KILL", &bg]).status();
    }
    assert!(
        gone,
        "the command's background process did not get the TERM"
    );
}

/// With `--foreground` the command shares `run`'s process group; a signal
/// that a process (not the terminal) sent to `run` still reaches it.
/// (Mutants: `&&` for `||` in `forward`, `from_kernel` always true or
/// inverted: every signal taken for a terminal's, and not forwarded.)
#[test]
fn with_foreground_a_signal_sent_by_a_process_is_forwarded_to_the_command() {
    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("foreground");
    let script = format!(
        "trap 'echo term > {got}; exit 3' TERM; echo $$ > {pid}; while :; do sleep 0.05; done",
        got = scratch.path("got"),
        pid = scratch.path("pid")
    );
    let child = run_cmd(&cluster, &["--foreground"], "fg", &script)
        .spawn()
        .expect("redfence starts");
    // With --foreground the command shares redfence's process group (the
    // test's): it is stopped by its pid.
    let pid = scratch.wait_line("pid");
    let _cleanup = KillOnPanic(vec![pid.clone()]);
    signal(child.id(), "TERM");
    let out = finish(child, SIGNAL_LIMIT);
    assert_eq!(code(out.status), 3, "{}", stderr(&out));
    assert_eq!(scratch.read("got").trim(), "term");
    assert!(!alive(&pid));
    assert!(
        eventually(Duration::from_secs(2), || holders(&cluster, "fg") == 0),
        "the lock was not released"
    );
}

/// A pseudo-terminal: the master side, and the path of the slave side.
fn open_pty() -> (std::fs::File, String) {
    use nix::libc;
    use std::os::fd::FromRawFd;
    // SAFETY: plain libc calls on a descriptor we own; ptsname_r writes at
    // most `buf.len()` bytes.
    unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = std::fs::File::from_raw_fd(fd);
        assert_eq!(libc::grantpt(fd), 0, "grantpt");
        assert_eq!(libc::unlockpt(fd), 0, "unlockpt");
        let mut buf = [0u8; 128];
        assert_eq!(
            libc::ptsname_r(fd, buf.as_mut_ptr().cast(), buf.len()),
            0,
            "ptsname_r"
        );
        let end = buf.iter().position(|&b| b == 0).expect("NUL-terminated");
        let path = String::from_utf8_lossy(&buf[..end]).into_owned();
        (master, path)
    }
}

/// With `--foreground`, a Ctrl-C typed on `run`'s terminal reaches the
/// command from the terminal itself; `run` must not pass it on a second
/// time. (Mutants: the `!` dropped in `forward`'s terminal test, and
/// `from_kernel` always false. The oracle is `-v`'s account of what `run`
/// did with the signal: the kernel may merge two INTs into one delivery,
/// so the command cannot reliably count them.)
#[test]
fn with_foreground_a_ctrl_c_from_the_terminal_is_not_forwarded_again() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::process::CommandExt;

    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("tty");
    let (mut master, slave_path) = open_pty();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_NOCTTY)
        .open(&slave_path)
        .expect("slave side opens");
    let script = format!(
        "trap 'echo int >> {ints}' INT; echo $$ > {pid}; while :; do sleep 0.05; done",
        ints = scratch.path("ints"),
        pid = scratch.path("pid")
    );
    let mut cmd = run_cmd(&cluster, &["-v", "--foreground"], "tty", &script);
    cmd.stdin(slave.try_clone().expect("dup"))
        .stdout(slave.try_clone().expect("dup"))
        .stderr(slave);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // A session of its own with the pty as controlling terminal,
            // `run` (and with --foreground the command) its foreground
            // process group: what a shell on a terminal sets up.
            if nix::libc::setsid() < 0 || nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("redfence starts");
    drop(cmd);
    // redfence leads its session and process group; the command is in it.
    let _cleanup = KillOnPanic(vec![format!("-{}", child.id())]);
    let lines = lines_of(master.try_clone().expect("dup"));
    let pid = scratch.wait_line("pid");
    let _cleanup_command = KillOnPanic(vec![pid.clone()]);
    // Ctrl-C: the terminal sends INT to its foreground process group.
    master.write_all(&[0x03]).expect("type Ctrl-C");
    wait_for_line(
        &lines,
        "INT from the terminal reached the command directly",
        Duration::from_secs(10),
    );
    assert!(
        eventually(Duration::from_secs(10), || scratch
            .read("ints")
            .contains("int")),
        "the command did not get the INT"
    );
    // A TERM from a process is forwarded: the command dies of it.
    signal(child.id(), "TERM");
    let out = finish(child, SIGNAL_LIMIT);
    assert_eq!(code(out.status), 128 + 15);
    assert!(!alive(&pid));
}

/// USR1 and USR2 only mean something to a running command: while `run`
/// waits for the lock they neither end the wait nor get lost in an error,
/// and the signals that do end it are named in the message.
/// (Mutants: `stops_wait` always true; `signals::name` empty or constant.)
#[test]
fn usr1_while_waiting_does_not_end_the_wait_and_term_is_named_when_it_does() {
    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("usr1");
    // The test's own client, patient with a slow machine.
    let locks = builder(&cluster)
        .instance_timeout(Duration::from_secs(1))
        .build()
        .expect("client builds");
    let held = locks.lock("usr1").expect("test holds the lock");
    let mut child = run_cmd(
        &cluster,
        &["-v", "-w", "60s"],
        "usr1",
        &format!("touch {}", scratch.path("ran")),
    )
    .spawn()
    .expect("redfence starts");
    let _cleanup = KillOnPanic(vec![child.id().to_string()]);
    let lines = stderr_lines(&mut child);
    wait_for_line(&lines, "waiting", Duration::from_secs(10));
    signal(child.id(), "USR1");
    wait_for_line(&lines, "USR1 ignored", Duration::from_secs(10));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "USR1 ended the wait"
    );
    signal(child.id(), "TERM");
    let error = wait_for_line(&lines, "received while waiting", Duration::from_secs(10));
    assert!(
        error.contains("TERM received while waiting"),
        "the message does not name TERM: {error}"
    );
    let out = finish(child, SIGNAL_LIMIT);
    assert_eq!(code(out.status), 128 + 15);
    assert!(std::fs::metadata(scratch.path("ran")).is_err());
    // Its 30 s lease outlasts the test; whether the release is confirmed
    // does not matter here.
    let _ = held.release();
}

// --- Exit codes -------------------------------------------------------------

/// An empty resource name is a bad argument: 64, for `run` as for
/// `status`. (Mutant: the library's invalid-resource error mapped to 69.)
#[test]
fn an_empty_resource_name_gives_64() {
    let cluster = RedisServers::start(1);
    let out = output(redfence(&cluster).args(["run", "", "--", "true"]));
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("empty"), "{}", stderr(&out));
    let out = output(redfence(&cluster).args(["status", ""]));
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
}

/// Settings at the edge of their ranges still work: `--kill-after 0` (the
/// SIGKILL right after the signal) and an instance timeout longer than
/// the wait slice. (Mutants: `-` for `+` in the validity margin and in the
/// wait slice, both of which underflow and panic.)
#[test]
fn kill_after_zero_and_a_long_instance_timeout_are_accepted() {
    let cluster = RedisServers::start(3);
    for options in [
        &["-k", "0"][..],
        &["--instance-timeout", "500ms"],
        &["--instance-timeout", "500ms", "-w", "1s", "-k", "0"],
    ] {
        let out = run(&cluster, options, "edge", "exit 5");
        assert_eq!(code(out.status), 5, "{options:?}: {}", stderr(&out));
    }
}

// --- Messages on stderr -----------------------------------------------------

/// Progress is for `-v` only: a plain successful run says nothing, and a
/// run too short for an extension says nothing about one. (Mutants: `info`
/// printing without `-v`; an extension reported when the validity
/// shrinks.)
#[test]
fn a_plain_run_is_silent_and_no_extension_is_reported_before_one_happens() {
    let cluster = RedisServers::start(3);
    // A generous instance timeout, so that a slow machine does not make
    // the release unconfirmed (a warning).
    let out = run(&cluster, &["--instance-timeout", "2s"], "quiet", "exit 0");
    assert_eq!(code(out.status), 0);
    assert_eq!(stderr(&out), "", "a plain run printed progress");
    // The first extension comes a third of the TTL (30 s) in; the
    // supervision looks at the validity every 250 ms meanwhile.
    let out = run(&cluster, &["-v"], "quiet", "sleep 1");
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("granted"), "{err}");
    assert!(
        !err.contains("extended"),
        "an extension was reported: {err}"
    );
}

/// Without `-q` a loss is announced as it happens (the signal sent, then
/// the error); with `-q` only the error line is printed. (Mutants: `warn`
/// silent, or printing only with `-q`.)
#[test]
fn a_loss_is_announced_as_a_warning_unless_quiet() {
    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("warn");
    let mut children = Vec::new();
    for (name, quiet) in [("loud", false), ("quiet", true)] {
        let mut options = vec!["--ttl", "3s", "-k", "300ms"];
        if quiet {
            options.push("-q");
        }
        let script = format!(
            "echo $$ > {pid}; while :; do sleep 0.05; done",
            pid = scratch.path(name)
        );
        let child = run_cmd(&cluster, &options, name, &script)
            .spawn()
            .expect("redfence starts");
        children.push((quiet, child));
    }
    // Each command leads its own process group.
    let _cleanup = KillOnPanic(vec![
        format!("-{}", scratch.wait_line("loud")),
        format!("-{}", scratch.wait_line("quiet")),
    ]);
    cluster.stop(&[0, 1]);
    let outs: Vec<(bool, Output)> = children
        .into_iter()
        .map(|(quiet, child)| (quiet, finish(child, RUN_LIMIT)))
        .collect();
    cluster.cont(&[0, 1]);
    for (quiet, out) in outs {
        assert_eq!(code(out.status), 124, "{}", stderr(&out));
        let err = stderr(&out);
        let lines: Vec<&str> = err.lines().collect();
        assert!(
            lines
                .last()
                .is_some_and(|l| l.contains("error") && l.contains("lost")),
            "{err}"
        );
        if quiet {
            assert_eq!(lines.len(), 1, "-q printed more than the error: {err}");
        } else {
            assert!(
                lines
                    .iter()
                    .any(|l| !l.contains("error") && l.contains("sending TERM")),
                "no warning naming the signal: {err}"
            );
        }
    }
}

// --- ping and status --------------------------------------------------------

/// `ping` reports the round trip in milliseconds: through a proxy that
/// holds each chunk 30 ms each way, at least 60 ms, and no more than the
/// instance timeout (950 ms: a later answer is a timeout). (Mutants: `millis` constant, or with `+` or `/` for
/// `*`.)
#[test]
fn ping_reports_the_round_trip_in_milliseconds() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).expect("proxy starts");
    proxy.set_fault(Fault::Delay(Duration::from_millis(30)));
    let out =
        output(redfence_at(&[proxy.url()]).args(["ping", "--json", "--instance-timeout", "950ms"]));
    assert_eq!(code(out.status), 0, "{}", stdout(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("ping --json parses");
    let rtt = doc["instances"][0]["rtt_ms"].as_f64().expect("rtt_ms");
    assert!((60.0..1000.0).contains(&rtt), "rtt_ms {rtt}: {doc}");
    let out = output(redfence_at(&[proxy.url()]).args(["ping", "--instance-timeout", "950ms"]));
    let text = stdout(&out);
    let shown: f64 = text
        .split_whitespace()
        .skip_while(|w| *w != "ok")
        .nth(1)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no round trip in {text}"));
    assert!((60.0..1000.0).contains(&shown), "{text}");
}

/// A lock key without expiry (written by something else than redfence) is
/// shown as held with no TTL: `ttl_ms` null, "no expiry" in the table.
/// (Mutant: PTTL -1 read as a TTL of 1 ms.)
#[test]
fn status_shows_a_lock_key_without_expiry() {
    let cluster = RedisServers::start(3);
    for server in &cluster {
        server
            .cmd(&["SET", &lock_key("forever"), "abcdefghij"])
            .expect("SET");
    }
    // A generous instance timeout: every instance must answer.
    let status = |extra: &[&str]| {
        output(
            redfence(&cluster)
                .args(["status", "forever", "--instance-timeout", "2s"])
                .args(extra),
        )
    };
    let out = status(&["--json"]);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    assert_eq!(doc["locked"], 3, "{doc}");
    for i in doc["instances"].as_array().expect("instances") {
        assert_eq!(i["locked"], true, "{i}");
        assert!(i["ttl_ms"].is_null(), "{i}");
        assert_eq!(i["holder"], "abcdef", "{i}");
    }
    let out = status(&[]);
    let text = stdout(&out);
    assert_eq!(
        text.lines().filter(|l| l.contains("no expiry")).count(),
        3,
        "{text}"
    );
}

/// `status` names the kind of each instance's failure, as `ping` does:
/// refused, unanswered, cut, and a wrong password.
/// (Mutants: `describe` empty or constant, and its kind tests.)
#[test]
fn status_names_the_kind_of_each_instance_error() {
    let cluster = RedisServers::start(3);
    let secured = RedisServer::start_with(ServerOptions {
        password: Some("s3cret".to_string()),
        ..ServerOptions::default()
    });
    let reset = FaultProxy::start(cluster.server(2).addr()).expect("proxy starts");
    reset.set_fault(Fault::Reset);
    cluster.server(0).kill();
    cluster.stop(&[1]);
    let port = secured.addr().port();
    let urls = vec![
        cluster.server(0).url(),
        cluster.server(1).url(),
        reset.url(),
        cluster.server(2).url(),
        format!("redis://:wrong@127.0.0.1:{port}/"),
    ];
    let out =
        output(redfence_at(&urls).args(["status", "r", "--json", "--instance-timeout", "1s"]));
    cluster.cont(&[1]);
    assert_eq!(code(out.status), 69, "{}", stdout(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    let errors: Vec<&str> = doc["instances"]
        .as_array()
        .expect("instances")
        .iter()
        .map(|i| i["error"].as_str().unwrap_or(""))
        .collect();
    let kinds = ["Connect: ", "Timeout: ", "Io: ", "", "Auth: "];
    assert_eq!(doc["answered"], 1, "{doc}");
    assert!(doc["instances"][3]["error"].is_null(), "{doc}");
    for (error, kind) in errors.iter().zip(kinds) {
        assert!(error.starts_with(kind), "{kind:?} expected: {errors:?}");
        assert!(kind.is_empty() || error.len() > kind.len(), "{errors:?}");
    }
}
