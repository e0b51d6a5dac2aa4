//! Contracts of the `redfence` command (README "Command line": the exit
//! code table and "On loss"; src/bin/redfence/exit.rs) that the rest of the
//! suite let slip. Each test names the promise it checks and was seen to
//! fail with a hand-made bug that breaks it.
//!
//! The built binary, run as a user runs it: real child processes, real
//! signals, real redis-server instances.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{eventually, fence_key, holders, lock_key};
use redfence::testing::RedisServers;

const BIN: &str = env!("CARGO_BIN_EXE_redfence");
/// Upper bound for any single `redfence` run in these tests.
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// A `redfence` command aimed at the cluster, with none of the caller's
/// REDFENCE_* settings leaking in.
fn redfence(cluster: &RedisServers) -> Command {
    let mut cmd = Command::new(BIN);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("REDFENCE_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("REDFENCE_URLS", cluster.urls().join(","));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Waits for the process to end within `limit` (killing it and failing the
/// test otherwise) and collects its output.
fn finish(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "redfence did not end within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
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

/// A fresh directory for one test's files, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "redfence-cli-contracts-{name}-{}-{}",
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

    fn exists(&self, file: &str) -> bool {
        self.0.join(file).exists()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether process `pid` still runs: it exists and is not a zombie (a
/// killed orphan may wait a moment for its new parent to reap it).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Kills a process this test started (through its command) if it is still
/// there, so a failing test leaves nothing behind.
struct Reap(u32);

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

/// Contract (README, exit codes: "78 | bad URL or configuration (even
/// instance count, bad prefix, a foreign value on redfence's keys)";
/// src/bin/redfence/exit.rs: `WrongType` is a configuration error,
/// "another program uses the prefix"). A `run` whose resource's lock key
/// is a hash, or whose fence counter is a string that is not an integer,
/// on every instance, exits 78 without running the command and without
/// waiting out its budget (it is not a conflict: retrying cannot help);
/// so does a `--prefix` with a brace.
///
/// Bugs seen to fail it: `WrongType` mapped to 69 (unavailable) or to the
/// conflict code.
#[test]
fn a_foreign_value_on_redfences_keys_or_a_bad_prefix_exits_78() {
    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("foreign");
    let script = format!("touch {}", scratch.path("ran"));

    for server in cluster.iter() {
        server
            .cmd(&["HSET", &lock_key("foreign-lock"), "owner", "someone"])
            .unwrap();
        server
            .cmd(&["SET", &fence_key("foreign-fence"), "not-a-counter"])
            .unwrap();
    }
    for resource in ["foreign-lock", "foreign-fence"] {
        let started = Instant::now();
        let out = output(&mut run_cmd(&cluster, &["-w", "5s"], resource, &script));
        assert_eq!(
            code(out.status),
            78,
            "{resource}: a foreign value on redfence's keys: {}",
            stderr(&out)
        );
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{resource}: waited {:?} as if the lock were held",
            started.elapsed()
        );
        assert!(!scratch.exists("ran"), "{resource}: the command ran");
    }
    // The foreign values are left as they were, and no lock key of ours
    // stays behind.
    for server in cluster.iter() {
        assert_eq!(
            server.get(&fence_key("foreign-fence")).as_deref(),
            Some("not-a-counter")
        );
        let kind = server.cmd(&["TYPE", &lock_key("foreign-lock")]).unwrap();
        assert_eq!(kind, redis::Value::SimpleString("hash".into()));
    }
    assert!(eventually(Duration::from_secs(2), || holders(
        &cluster,
        "foreign-fence"
    ) == 0));

    for prefix in ["app{", "app}"] {
        let out = output(&mut run_cmd(
            &cluster,
            &["--prefix", prefix],
            "prefixed",
            &script,
        ));
        assert_eq!(code(out.status), 78, "--prefix {prefix}: {}", stderr(&out));
        assert!(!scratch.exists("ran"), "--prefix {prefix}: the command ran");
    }
}

/// Contract (README "On loss": "`run` sends `--signal` to the command's
/// process group, waits `--kill-after`, sends SIGKILL (also to what the
/// command left running in its group), reaps it and exits with the lost
/// code"). The command is a shell that starts a grandchild in its group
/// which ignores TERM, and then waits: on loss, the shell dies of TERM at
/// once, and the grandchild must still be killed, well before its own end,
/// and `run` exits 124.
///
/// The lease is lost for real: three of five instances are frozen
/// (SIGSTOP), so the renewals fail.
///
/// Bug seen to fail it: no SIGKILL to the group when the command itself
/// ended within `--kill-after`.
#[test]
fn a_lost_lease_kills_what_the_command_left_running_in_its_group() {
    let cluster = RedisServers::start(5);
    let scratch = Scratch::new("group");
    let pid_file = scratch.path("grandchild");
    // The subshell ignores TERM and execs sleep, which keeps the ignored
    // disposition; the shell itself dies of TERM while waiting. The
    // grandchild lets go of the output pipes, so a survivor cannot hold up
    // the collection of `run`'s output.
    let script = format!(
        "(trap '' TERM; exec sleep 300) </dev/null >/dev/null 2>&1 & echo $! > {pid_file}; wait"
    );
    let child = run_cmd(&cluster, &["--ttl", "3s", "-k", "1s"], "group", &script)
        .spawn()
        .expect("redfence starts");
    assert!(
        eventually(Duration::from_secs(10), || !scratch
            .read("grandchild")
            .trim()
            .is_empty()),
        "the command did not start its grandchild"
    );
    let grandchild: u32 = scratch.read("grandchild").trim().parse().unwrap();
    let _reap = Reap(grandchild);
    assert!(alive(grandchild));

    let stopped_at = Instant::now();
    cluster.stop(&[0, 1, 2]);
    let out = finish(child, RUN_LIMIT);
    let took = stopped_at.elapsed();
    cluster.cont(&[0, 1, 2]);
    assert_eq!(code(out.status), 124, "{}", stderr(&out));
    assert!(
        took < Duration::from_secs(3),
        "the lease outlived its TTL: {took:?}"
    );
    assert!(
        eventually(Duration::from_secs(2), || !alive(grandchild)),
        "the grandchild {grandchild} (TERM ignored, same process group) survived the lost \
         lease; stderr: {}",
        stderr(&out)
    );
}
