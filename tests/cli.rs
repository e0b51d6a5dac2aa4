//! The `redfence` command, run as a user runs it: the built binary, real
//! child processes, real signals, real redis-server instances.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{client, eventually, holders, lock_key};
use redfence::crossbeam_channel::{self, Receiver};
use redfence::testing::{RedisServers, ServerOptions};
use serde_json::Value;

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
    cmd.env("REDFENCE_SERVERS", cluster.urls().join(","));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Waits for the process to end within `limit` (killing it and failing
/// the test otherwise) and collects its output.
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

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A `run` of `script` (as `sh -c`) under `resource`, with extra options.
fn run(cluster: &RedisServers, options: &[&str], resource: &str, script: &str) -> Output {
    output(&mut run_cmd(cluster, options, resource, script))
}

fn run_cmd(cluster: &RedisServers, options: &[&str], resource: &str, script: &str) -> Command {
    let mut cmd = redfence(cluster);
    cmd.arg("run")
        .args(options)
        .args([resource, "--", "sh", "-c", script]);
    cmd
}

/// No instance holds the resource's lock key. Releases are confirmed by a
/// quorum; the last instances may apply theirs a moment later.
fn assert_no_key(cluster: &RedisServers, resource: &str) {
    assert!(
        eventually(Duration::from_secs(2), || holders(cluster, resource) == 0),
        "{} instance(s) still hold the lock key of {resource:?}",
        holders(cluster, resource)
    );
}

fn signal(pid: u32, name: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill -{name} {pid} failed");
}

fn process_exists(pid: &str) -> bool {
    Command::new("kill")
        .args(["-0", pid])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A fresh directory for one test's files, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "redfence-cli-{name}-{}-{}",
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
        Path::new(&self.path(file)).exists()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The lines a process writes on stderr, as they come.
fn stderr_lines(child: &mut Child) -> Receiver<String> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let pipe = child.stderr.take().expect("stderr piped");
    std::thread::Builder::new()
        .name("stderr-reader".to_string())
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
    panic!("no stderr line with {needle:?} within {limit:?}; saw {seen:?}");
}

#[test]
fn exit_codes_pass_through_and_the_lock_is_released() {
    let cluster = RedisServers::start(5);
    assert_eq!(code(run(&cluster, &[], "codes", "exit 0").status), 0);
    assert_no_key(&cluster, "codes");
    assert_eq!(code(run(&cluster, &[], "codes", "exit 7").status), 7);
    assert_no_key(&cluster, "codes");
    // Died of SIGKILL (9): the shell's 128 + 9.
    assert_eq!(
        code(run(&cluster, &[], "codes", "kill -KILL $$").status),
        137
    );
    assert_no_key(&cluster, "codes");
}

#[test]
fn verbose_progress_and_quiet_silence() {
    let cluster = RedisServers::start(5);
    let out = run(&cluster, &["-v", "--ttl", "1s"], "progress", "sleep 1.5");
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let err = stderr(&out);
    for needle in ["granted", "token", "extended", "released"] {
        assert!(err.contains(needle), "no {needle:?} in {err}");
    }
    let out = run(&cluster, &["-q"], "progress", "exit 0");
    assert_eq!(code(out.status), 0);
    assert_eq!(stderr(&out), "");
}

#[test]
fn a_command_that_cannot_run_gives_127_or_126_and_releases() {
    let cluster = RedisServers::start(5);
    let scratch = Scratch::new("exec");
    let out = output(redfence(&cluster).args(["run", "nocmd", "--", "/nonexistent/redfence-cmd"]));
    assert_eq!(code(out.status), 127, "{}", stderr(&out));
    assert!(stderr(&out).contains("/nonexistent/redfence-cmd"));
    assert_no_key(&cluster, "nocmd");

    let file = scratch.path("not-executable");
    std::fs::write(&file, "#!/bin/sh\nexit 0\n").unwrap();
    let out = output(redfence(&cluster).args(["run", "nocmd", "--", &file]));
    assert_eq!(code(out.status), 126, "{}", stderr(&out));
    assert_no_key(&cluster, "nocmd");
}

#[test]
fn concurrent_runs_never_overlap_and_tokens_increase() {
    let cluster = RedisServers::start(5);
    let scratch = Scratch::new("overlap");
    let log = scratch.path("log");
    let script = format!(
        "echo \"$REDFENCE_TOKEN start $(date +%s%N)\" >> {log}; sleep 0.3; \
         echo \"$REDFENCE_TOKEN end $(date +%s%N)\" >> {log}"
    );
    let children: Vec<Child> = (0..3)
        .map(|_| {
            run_cmd(&cluster, &["-w", "20s"], "overlap", &script)
                .spawn()
                .expect("redfence starts")
        })
        .collect();
    for child in children {
        let out = finish(child, RUN_LIMIT);
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
    }
    // (token, start, end) of each run, in the order they started.
    let mut runs: Vec<(u64, u128, u128)> = Vec::new();
    for line in scratch.read("log").lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let token: u64 = parts[0].parse().expect("token is decimal");
        let at: u128 = parts[2].parse().expect("timestamp");
        match parts[1] {
            "start" => runs.push((token, at, 0)),
            _ => {
                let run = runs.iter_mut().find(|r| r.0 == token).expect("start first");
                run.2 = at;
            }
        }
    }
    assert_eq!(runs.len(), 3, "{}", scratch.read("log"));
    runs.sort_by_key(|r| r.1);
    for pair in runs.windows(2) {
        assert!(pair[0].2 > 0 && pair[0].2 <= pair[1].1, "overlap: {runs:?}");
        assert!(pair[0].0 < pair[1].0, "tokens must increase: {runs:?}");
    }
    assert_no_key(&cluster, "overlap");
}

#[test]
fn token_and_resource_reach_the_command_and_tokens_increase_run_to_run() {
    let cluster = RedisServers::start(5);
    let mut last = 0u64;
    for _ in 0..3 {
        let out = run(
            &cluster,
            &[],
            "job:42",
            "echo \"$REDFENCE_TOKEN $REDFENCE_RESOURCE\"",
        );
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
        let text = stdout(&out);
        let (token, resource) = text.trim().split_once(' ').expect("two words");
        let token: u64 = token.parse().expect("decimal token");
        assert_eq!(resource, "job:42");
        assert!(token > last, "{token} after {last}");
        last = token;
    }
}

#[test]
fn a_held_lock_gives_the_conflict_code_and_the_command_does_not_run() {
    let cluster = RedisServers::start(5);
    let scratch = Scratch::new("conflict");
    let marker = scratch.path("ran");
    let script = format!("touch {marker}");
    let locks = client(&cluster);
    let held = locks.lock("busy").expect("test holds the lock");

    let out = run(&cluster, &["-n"], "busy", &script);
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("held by {:?}", locks.identity())),
        "{}",
        stderr(&out)
    );
    let out = run(&cluster, &["-n", "-E", "3"], "busy", &script);
    assert_eq!(code(out.status), 3);
    // From the environment, and flags win over it.
    let mut cmd = run_cmd(&cluster, &["-n"], "busy", &script);
    assert_eq!(
        code(output(cmd.env("REDFENCE_CONFLICT_EXIT_CODE", "9")).status),
        9
    );
    let mut cmd = run_cmd(&cluster, &["-n", "-E", "4"], "busy", &script);
    assert_eq!(
        code(output(cmd.env("REDFENCE_CONFLICT_EXIT_CODE", "9")).status),
        4
    );
    // Switches from the environment: 1 is on.
    let mut cmd = run_cmd(&cluster, &[], "busy", &script);
    cmd.env("REDFENCE_NONBLOCK", "1")
        .env("REDFENCE_WAIT", "20s");
    let out = finish(
        cmd.spawn().expect("redfence starts"),
        Duration::from_secs(10),
    );
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    // A wait that runs out ends the same way, after waiting.
    let started = Instant::now();
    let out = run(&cluster, &["-w", "400ms"], "busy", &script);
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert!(!scratch.exists("ran"), "the command ran without the lock");

    // The second run waits for the first and then runs.
    let waiter = run_cmd(&cluster, &["-w", "20s"], "busy", &script)
        .spawn()
        .expect("redfence starts");
    held.release().expect("release");
    let out = finish(waiter, RUN_LIMIT);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(scratch.exists("ran"));
}

/// Starts a `run` whose command traps TERM with `on_term`, and returns it
/// once the command runs, with the command's shell pid.
fn start_trapping(
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

#[test]
fn a_lost_lease_kills_a_command_that_ignores_term_before_the_validity_ends() {
    let cluster = RedisServers::start(5);
    let scratch = Scratch::new("lost");
    let trapped = scratch.path("trapped");
    let ttl = Duration::from_secs(4);
    let (child, pid) = start_trapping(
        &cluster,
        &scratch,
        &["--ttl", "4s", "-k", "500ms"],
        &format!("echo term >> {trapped}"),
    );
    // The last extension happened before this, so the lease's validity
    // ends within one TTL from now.
    let stopped_at = Instant::now();
    cluster.stop(&[0, 1, 2]);
    let out = finish(child, RUN_LIMIT);
    let took = stopped_at.elapsed();
    cluster.cont(&[0, 1, 2]);
    assert_eq!(code(out.status), 124, "{}", stderr(&out));
    assert!(took < ttl, "the command outlived the lease: {took:?}");
    assert!(
        scratch.read("trapped").contains("term"),
        "TERM was not sent first"
    );
    assert!(!process_exists(&pid), "the command survived");
    assert!(stderr(&out).contains("lost"), "{}", stderr(&out));
}

#[test]
fn a_lost_lease_is_never_exit_0_even_if_the_command_exits_0() {
    let cluster = RedisServers::start(5);
    let scratch = Scratch::new("lost0");
    let (child, _pid) = start_trapping(&cluster, &scratch, &["--ttl", "3s"], "exit 0");
    cluster.stop(&[2, 3, 4]);
    let out = finish(child, RUN_LIMIT);
    cluster.cont(&[2, 3, 4]);
    assert_eq!(code(out.status), 124, "{}", stderr(&out));
    // --lost-exit-code changes it.
    let scratch = Scratch::new("lost9");
    let (child, _pid) = start_trapping(
        &cluster,
        &scratch,
        &["--ttl", "3s", "--lost-exit-code", "9"],
        "exit 0",
    );
    cluster.stop(&[0, 1, 2]);
    let out = finish(child, RUN_LIMIT);
    cluster.cont(&[0, 1, 2]);
    assert_eq!(code(out.status), 9, "{}", stderr(&out));
}

#[test]
fn term_sent_to_run_reaches_the_command_and_the_lock_is_released_after() {
    let cluster = RedisServers::start(5);
    let scratch = Scratch::new("term");
    let got = scratch.path("got");
    let (child, pid) = start_trapping(
        &cluster,
        &scratch,
        &[],
        &format!("echo term > {got}; exit 3"),
    );
    signal(child.id(), "TERM");
    let out = finish(child, RUN_LIMIT);
    assert_eq!(code(out.status), 3, "{}", stderr(&out));
    assert_eq!(scratch.read("got").trim(), "term");
    assert!(!process_exists(&pid));
    assert_no_key(&cluster, "lease");
}

#[test]
fn term_or_int_while_waiting_ends_the_wait_at_once_without_leaving_a_key() {
    let cluster = RedisServers::start(5);
    let scratch = Scratch::new("wait");
    let locks = client(&cluster);
    let held = locks.lock("queue").expect("test holds the lock");
    for (name, number) in [("TERM", 15), ("INT", 2)] {
        let mut child = run_cmd(
            &cluster,
            &["-v", "-w", "60s"],
            "queue",
            &format!("touch {}", scratch.path("ran")),
        )
        .spawn()
        .expect("redfence starts");
        let lines = stderr_lines(&mut child);
        wait_for_line(&lines, "waiting", Duration::from_secs(10));
        let sent = Instant::now();
        signal(child.id(), name);
        let out = finish(child, RUN_LIMIT);
        let took = sent.elapsed();
        assert_eq!(code(out.status), 128 + number, "{name}");
        assert!(
            took < Duration::from_secs(1),
            "{name}: the wait took {took:?} to end"
        );
        assert!(!scratch.exists("ran"));
    }
    held.release().expect("release");
    // Only the test's own key was there; with it gone, nothing is left.
    assert_no_key(&cluster, "queue");
}

#[test]
fn bad_urls_give_78_and_say_what_is_wrong_without_credentials() {
    let cluster = RedisServers::start(1);
    let cases = [
        ("redis://admin:hunter2secret@127.0.0.1:notaport", "bad port"),
        ("redis://admin:hunter2secret@127.0.0.1:99999", "bad port"),
        (
            "http://admin:hunter2secret@127.0.0.1:6379",
            "unknown scheme \"http\"",
        ),
        (
            "redis://:hunter2secret@127.0.0.1:6379/first",
            "bad database number",
        ),
        ("hunter2secret", "no scheme"),
        ("127.0.0.1:6379", "no scheme"),
    ];
    for (url, words) in cases {
        for command in [&["run", "r", "--", "true"][..], &["status", "r"], &["ping"]] {
            let out = output(redfence(&cluster).args(["--servers", url]).args(command));
            let err = stderr(&out);
            assert_eq!(code(out.status), 78, "{url} {command:?}: {err}");
            assert!(err.contains("instance #0"), "{url}: {err}");
            assert!(err.contains(words), "{url}: {err}");
            assert!(!err.contains("hunter2secret"), "{url}: {err}");
            assert!(!err.contains("did not parse"), "{url}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }
}

/// The `redfence ping` line of one instance.
fn ping_line(text: &str, server: &redfence::testing::RedisServer) -> String {
    text.lines()
        .find(|l| l.starts_with(&server.addr().to_string()))
        .unwrap_or_else(|| panic!("no line for {}: {text}", server.addr()))
        .to_string()
}

#[test]
fn no_quorum_gives_69_and_names_the_instances() {
    let cluster = RedisServers::start(3);
    cluster.server(1).kill();
    cluster.server(2).kill();
    let out = run(&cluster, &["-w", "300ms"], "r", "exit 0");
    assert_eq!(code(out.status), 69, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&cluster.server(1).addr().to_string()), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // A closed port reads the same in every command: refused, not timed out.
    assert!(err.contains("(Connect): connection refused"), "{err}");
    assert!(!err.contains("Timeout"), "{err}");
    for command in [&["ping"][..], &["status", "r"]] {
        for _ in 0..3 {
            let out = output(redfence(&cluster).args(command));
            assert_eq!(code(out.status), 69, "{}", stdout(&out));
            let text = stdout(&out);
            for i in [1, 2] {
                let line = ping_line(&text, cluster.server(i));
                assert!(
                    line.ends_with("error: Connect: connection refused"),
                    "{command:?}: {line}"
                );
            }
        }
    }
}

#[test]
fn bad_arguments_give_64_and_help_gives_0() {
    let cluster = RedisServers::start(1);
    let cases: &[&[&str]] = &[
        &["run", "r"],                                              // no command
        &["run", "-w", "soon", "r", "--", "true"],                  // bad duration
        &["run", "-E", "256", "r", "--", "true"],                   // code out of range
        &["run", "-s", "NOPE", "r", "--", "true"],                  // bad signal
        &["run", "--ttl", "2s", "-k", "1500ms", "r", "--", "true"], // kill-after > ttl/2
        &["frobnicate"],
        &[],
    ];
    for args in cases {
        let out = output(redfence(&cluster).args(*args));
        assert_eq!(code(out.status), 64, "{args:?}: {}", stderr(&out));
    }
    let out = output(
        redfence(&cluster)
            .env_remove("REDFENCE_SERVERS")
            .args(["run", "r", "--", "true"]),
    );
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
    for args in [&["--help"][..], &["run", "--help"], &["--version"]] {
        let out = output(redfence(&cluster).args(args));
        assert_eq!(code(out.status), 0, "{args:?}");
        assert!(!stdout(&out).is_empty());
    }
}

#[test]
fn status_and_ping_show_each_instance() {
    let cluster = RedisServers::start(5);
    let scratch = Scratch::new("status");
    let script = format!(
        "echo $REDFENCE_TOKEN > {token}; while [ ! -e {go} ]; do sleep 0.05; done",
        token = scratch.path("token"),
        go = scratch.path("go")
    );
    let holder = run_cmd(&cluster, &[], "report", &script)
        .spawn()
        .expect("redfence starts");
    assert!(eventually(Duration::from_secs(10), || {
        !scratch.read("token").trim().is_empty()
    }));
    let token: u64 = scratch.read("token").trim().parse().unwrap();
    let value = (0..5)
        .find_map(|i| cluster.server(i).get(&lock_key("report")))
        .expect("a lock value");

    let out = output(redfence(&cluster).args(["status", "report"]));
    assert_eq!(code(out.status), 0);
    let text = stdout(&out);
    assert!(!text.contains(&value), "the lock value leaked: {text}");
    for server in &cluster {
        let line = text
            .lines()
            .find(|l| l.starts_with(&server.addr().to_string()))
            .unwrap_or_else(|| panic!("no line for {}: {text}", server.addr()));
        assert!(line.contains("held"), "{line}");
    }

    let out = output(redfence(&cluster).args(["status", "report", "--json"]));
    assert_eq!(code(out.status), 0);
    assert!(!stdout(&out).contains(&value));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    assert_eq!(doc["resource"], "report");
    assert_eq!(doc["quorum"], 3);
    assert_eq!(doc["answered"], 5);
    let instances = doc["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 5);
    // A quorum's counters reached the token (late instances may count
    // higher: the next grant's token goes above them).
    let reached = instances
        .iter()
        .filter(|i| i["fence"].as_u64().is_some_and(|f| f >= token))
        .count();
    assert!(reached >= 3, "{doc}");
    for i in instances {
        assert_eq!(i["ok"], true);
        assert_eq!(i["locked"], true);
        let ttl = i["ttl_ms"].as_u64().expect("ttl_ms");
        assert!(ttl > 0 && ttl <= 30_000, "{i}");
        // The identity (hostname:pid by default), never the secret part.
        let (secret, identity) = value.split_once(':').expect("RANDOM:IDENTITY");
        assert_eq!(i["holder"], identity, "{i}");
        assert!(!i.to_string().contains(secret), "{i}");
    }

    let out = output(redfence(&cluster).arg("ping"));
    assert_eq!(code(out.status), 0);
    assert_eq!(
        stdout(&out).lines().filter(|l| l.contains(" ok ")).count(),
        5
    );
    cluster.stop(&[3, 4]);
    let out = output(redfence(&cluster).args(["ping", "--json"]));
    assert_eq!(
        code(out.status),
        0,
        "two of five down still leaves a quorum"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("ping --json parses");
    assert_eq!(doc["answered"], 3);
    assert_eq!(doc["quorum"], 3);
    let instances = doc["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 5);
    for (i, entry) in instances.iter().enumerate() {
        assert_eq!(entry["instance"], format!("{}/0", cluster.server(i).addr()));
        assert_eq!(entry["ok"], i < 3, "{entry}");
        assert_eq!(entry["rtt_ms"].is_f64(), i < 3, "{entry}");
        assert_eq!(entry["error"].is_string(), i >= 3, "{entry}");
    }
    let out = output(redfence(&cluster).args(["status", "report", "--json"]));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    assert_eq!(doc["answered"], 3);
    assert_eq!(code(out.status), 0);
    cluster.cont(&[3, 4]);

    std::fs::write(scratch.path("go"), "").unwrap();
    let out = finish(holder, RUN_LIMIT);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let out = output(redfence(&cluster).args(["status", "report", "--json"]));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["locked"], 0);
}

#[test]
fn servers_come_from_redfence_servers_or_its_alias_redfence_urls() {
    let cluster = RedisServers::start(1);
    let urls = cluster.urls().join(",");
    let closed = "redis://127.0.0.1:1";
    let ping = |env: &[(&str, &str)], args: &[&str]| {
        let mut cmd = redfence(&cluster);
        cmd.env_remove("REDFENCE_SERVERS");
        for (key, value) in env {
            cmd.env(key, value);
        }
        output(cmd.arg("ping").args(args))
    };
    // The variable of --servers, and its older name when it is unset.
    let out = ping(&[("REDFENCE_SERVERS", &urls)], &[]);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let out = ping(&[("REDFENCE_URLS", &urls)], &[]);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    // REDFENCE_SERVERS wins over the alias, --servers over both.
    let out = ping(
        &[("REDFENCE_SERVERS", &urls), ("REDFENCE_URLS", closed)],
        &[],
    );
    assert_eq!(code(out.status), 0, "{}", stdout(&out));
    let out = ping(
        &[("REDFENCE_SERVERS", closed), ("REDFENCE_URLS", &urls)],
        &[],
    );
    assert_eq!(code(out.status), 69, "{}", stdout(&out));
    let out = ping(
        &[("REDFENCE_SERVERS", closed), ("REDFENCE_URLS", closed)],
        &["--servers", &urls],
    );
    assert_eq!(code(out.status), 0, "{}", stdout(&out));
    // Neither: the message names the variable to set.
    let out = ping(&[], &[]);
    assert_eq!(code(out.status), 64);
    assert!(
        stderr(&out).contains("REDFENCE_SERVERS"),
        "{}",
        stderr(&out)
    );

    // Help names both variables, and never shows their values: URLs carry
    // passwords.
    let out = output(
        redfence(&cluster)
            .env("REDFENCE_SERVERS", "redis://:hunter2secret@127.0.0.1:1")
            .args(["ping", "--help"]),
    );
    let help = stdout(&out);
    assert!(help.contains("REDFENCE_SERVERS"), "{help}");
    assert!(help.contains("REDFENCE_URLS"), "{help}");
    assert!(!help.contains("hunter2secret"), "{help}");
}

#[test]
fn help_lists_the_exit_codes() {
    let cluster = RedisServers::start(1);
    for flag in ["--help", "-h"] {
        let out = output(redfence(&cluster).args(["run", flag]));
        assert_eq!(code(out.status), 0);
        let help = stdout(&out);
        assert!(help.contains("Exit codes:"), "{help}");
        for (code, words) in [
            ("64", "bad arguments"),
            ("69", "too few instances"),
            ("71", "system"),
            ("75", "held elsewhere"),
            ("78", "bad URL"),
            ("124", "lease was lost"),
            ("126", "could not be executed"),
            ("127", "not found"),
            ("128+n", "signal n"),
        ] {
            let line = help
                .lines()
                .find(|l| l.trim_start().starts_with(code))
                .unwrap_or_else(|| panic!("no line for {code}: {help}"));
            assert!(line.contains(words), "{line}");
        }
    }
    for command in ["status", "ping"] {
        let out = output(redfence(&cluster).args([command, "--help"]));
        let help = stdout(&out);
        assert!(help.contains("Exit codes:"), "{help}");
        assert!(help.contains("69 "), "{help}");
    }
    let out = output(redfence(&cluster).arg("--help"));
    assert!(stdout(&out).contains("Exit codes"), "{}", stdout(&out));
}

#[test]
fn an_even_instance_count_names_the_flag_that_allows_it() {
    let cluster = RedisServers::start(2);
    let out = run(&cluster, &[], "even", "exit 0");
    assert_eq!(code(out.status), 78, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("--allow-even-instances"), "{err}");
    assert!(!err.contains("allow_even_instances"), "{err}");
    let out = run(&cluster, &["--allow-even-instances"], "even", "exit 3");
    assert_eq!(code(out.status), 3, "{}", stderr(&out));
    let out = output(
        redfence(&cluster)
            .env("REDFENCE_ALLOW_EVEN_INSTANCES", "1")
            .arg("ping"),
    );
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let out = output(
        redfence(&cluster)
            .env("REDFENCE_ALLOW_EVEN_INSTANCES", "no")
            .args(["status", "even"]),
    );
    assert_eq!(code(out.status), 78, "{}", stderr(&out));
}

/// A 3-server TLS cluster that requires client certificates, and its test
/// PKI's files: `ca.crt`, `client.crt`, `client.key`.
fn mtls_cluster(name: &str) -> (RedisServers, Scratch) {
    let cluster = RedisServers::start_with(
        3,
        ServerOptions {
            tls: true,
            tls_auth_clients: true,
            ..Default::default()
        },
    );
    let scratch = Scratch::new(name);
    let pki = cluster.pki().expect("a TLS cluster has a PKI");
    std::fs::write(scratch.path("ca.crt"), pki.ca_pem()).unwrap();
    std::fs::write(scratch.path("client.crt"), pki.client_cert_pem()).unwrap();
    std::fs::write(scratch.path("client.key"), pki.client_key_pem()).unwrap();
    (cluster, scratch)
}

#[test]
fn run_status_and_ping_reach_tls_servers_that_require_a_client_certificate() {
    let (cluster, files) = mtls_cluster("mtls");
    assert!(cluster.urls().iter().all(|u| u.starts_with("rediss://")));
    let flags = [
        "--tls-ca-file",
        &files.path("ca.crt"),
        "--tls-cert-file",
        &files.path("client.crt"),
        "--tls-key-file",
        &files.path("client.key"),
    ];
    let out = run(&cluster, &flags, "tls-job", "echo token=$REDFENCE_TOKEN");
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(stdout(&out).starts_with("token="), "{}", stdout(&out));
    assert_no_key(&cluster, "tls-job");

    // Global flags: before the subcommand too.
    let out = output(redfence(&cluster).args(flags).args(["status", "tls-job"]));
    assert_eq!(code(out.status), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("locked on 0 of 3 instances, 3 answered"),
        "{}",
        stdout(&out)
    );

    // The same from the environment. Every instance answers once its
    // handshake is through: time enough for that on a loaded machine.
    let out = output(
        redfence(&cluster)
            .env("REDFENCE_INSTANCE_TIMEOUT", "2s")
            .env("REDFENCE_TLS_CA_FILE", files.path("ca.crt"))
            .env("REDFENCE_TLS_CERT_FILE", files.path("client.crt"))
            .env("REDFENCE_TLS_KEY_FILE", files.path("client.key"))
            .arg("ping"),
    );
    assert_eq!(code(out.status), 0, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        stdout(&out).lines().filter(|l| l.contains(" ok ")).count(),
        3,
        "{}",
        stdout(&out)
    );
}

/// Every instance line of a `ping` or `status` report, and the error of a
/// `run`, that reports a TLS failure carries `advice` and no library call;
/// every instance reports one. A handshake slowed past its time limit on a
/// loaded machine reads as a timeout instead: such a run is tried again, a
/// few times at most.
fn assert_tls_advice(cluster: &RedisServers, flags: &[&str], advice: &str) {
    const TRIES: usize = 5;
    let check_tls = |what: &str, text: &str| {
        assert!(text.contains(advice), "{what}: {text}");
        assert!(!text.contains("tls_certificates"), "{what}: {text}");
    };
    let flags = &[&["--instance-timeout", "1s"][..], flags].concat();
    for command in [&["ping"][..], &["status", "r"]] {
        let mut advised = vec![false; cluster.len()];
        for _ in 0..TRIES {
            let out = output(redfence(cluster).args(flags).args(command));
            let text = stdout(&out);
            assert_eq!(code(out.status), 69, "{command:?}: {text}{}", stderr(&out));
            for (i, server) in cluster.iter().enumerate() {
                let line = ping_line(&text, server);
                if line.contains("error: Tls: TLS: ") {
                    check_tls(&format!("{command:?}"), &line);
                    advised[i] = true;
                } else {
                    assert!(line.contains("error: Timeout: "), "{command:?}: {line}");
                }
            }
            if advised.iter().all(|a| *a) {
                break;
            }
        }
        assert!(advised.iter().all(|a| *a), "{command:?}: {advised:?}");
    }
    let args = [&["-w", "300ms"][..], flags].concat();
    let advised = (0..TRIES).any(|_| {
        let out = run(cluster, &args, "r", "exit 0");
        let err = stderr(&out);
        assert_eq!(code(out.status), 69, "{err}");
        assert!(!err.contains("tls_certificates"), "{err}");
        let tls = err.contains("(Tls): TLS: ");
        if tls {
            check_tls("run", &err);
        }
        tls
    });
    assert!(advised, "run never reported the TLS failure");
}

#[test]
fn tls_failures_give_advice_in_flag_terms() {
    let (cluster, files) = mtls_cluster("tls-advice");
    let (ca, cert, key) = (
        files.path("ca.crt"),
        files.path("client.crt"),
        files.path("client.key"),
    );
    // No CA: the system's roots do not know the test CA.
    assert_tls_advice(
        &cluster,
        &["--tls-cert-file", &cert, "--tls-key-file", &key],
        "--tls-ca-file",
    );
    // No client certificate for servers that require one.
    assert_tls_advice(
        &cluster,
        &["--tls-ca-file", &ca],
        "--tls-cert-file and --tls-key-file",
    );

    // Configuration mistakes: 78, naming the flags.
    std::fs::write(
        files.path("broken.key"),
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let broken = files.path("broken.key");
    let cases: [(&[&str], &str); 7] = [
        (
            &["--tls-cert-file", &cert, "--tls-key-file", &broken],
            "(--tls-cert-file, --tls-key-file) cannot be used",
        ),
        (
            &["--tls-cert-file", &cert, "--tls-key-file", &cert],
            "the client key (--tls-key-file)",
        ),
        (
            &["--tls-ca-file", &key],
            "the CA certificate (--tls-ca-file)",
        ),
        (
            &["--tls-cert-file", &cert],
            "--tls-cert-file needs --tls-key-file",
        ),
        (
            &["--tls-key-file", &key],
            "--tls-key-file needs --tls-cert-file",
        ),
        (
            &["--tls-ca-file", "/nonexistent/ca.crt"],
            "--tls-ca-file /nonexistent/ca.crt",
        ),
        (
            &["--tls-cert-file", "/dev/null", "--tls-key-file", &key],
            "--tls-cert-file /dev/null: not a PEM file",
        ),
    ];
    let key_pem = files.read("client.key");
    let key_line = key_pem.lines().nth(1).expect("a key body line");
    for (flags, words) in cases {
        for command in [&["run", "r", "--", "true"][..], &["status", "r"], &["ping"]] {
            let out = output(redfence(&cluster).args(flags).args(command));
            let err = stderr(&out);
            assert_eq!(code(out.status), 78, "{flags:?} {command:?}: {err}");
            assert!(err.contains(words), "{flags:?}: {err}");
            assert!(!err.contains(key_line), "{flags:?}: {err}");
        }
    }
    // TLS files for plain redis:// instances.
    let plain = RedisServers::start(1);
    let out = output(redfence(&plain).args(["--tls-ca-file", &ca, "ping"]));
    assert_eq!(code(out.status), 78, "{}", stderr(&out));
    assert!(stderr(&out).contains("rediss://"), "{}", stderr(&out));
}
