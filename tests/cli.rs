//! The `redfence` command, run as a user runs it: the built binary, real
//! child processes, real signals (and a pseudo-terminal), real
//! redis-server instances; conditions are polled with a deadline. Exit
//! codes (README "Command line"), what reaches the command, signals and
//! the process group, losses, messages on stderr, `status` and `ping`,
//! TLS, and the coordination flags (`--identity`, `--hold-at-least`, `-q`).

mod common;

use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use common::cli::{
    alive, assert_no_key, code, finish, lines_of, output, process_exists, redfence, redfence_at,
    run, run_cmd, signal, stderr, stderr_lines, stdout, wait_for_line, KillOnPanic, Reap, Scratch,
    RUN_LIMIT, SIGNAL_LIMIT,
};
use common::{builder, client, eventually, fence_key, holders, lock_key};
use redfence::testing::{Fault, FaultProxy, RedisServer, RedisServers, ServerOptions};
use serde_json::Value;

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
    // Each progress line starts with its UTC time, for cron logs.
    let first = err.lines().find(|l| l.contains("granted")).unwrap();
    let (stamp, _) = first.split_once(' ').unwrap();
    assert!(
        stamp.len() == 24 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
        "{first}"
    );
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

// --- Coordination flags: --identity, --hold-at-least, -q -----------------

#[test]
fn status_and_conflicts_show_the_identity_never_the_secret() {
    let cluster = RedisServers::start(5);
    let scratch = Scratch::new("identity");
    let script = format!(
        "touch {started}; while [ ! -e {go} ]; do sleep 0.05; done",
        started = scratch.path("started"),
        go = scratch.path("go")
    );
    let holder = run_cmd(
        &cluster,
        &["--identity", "report-host-1"],
        "report",
        &script,
    )
    .spawn()
    .expect("redfence starts");
    assert!(eventually(Duration::from_secs(10), || {
        std::path::Path::new(&scratch.path("started")).exists()
    }));
    let value = (0..5)
        .find_map(|i| cluster.server(i).get(&lock_key("report")))
        .expect("a lock value");
    let (secret, identity) = value.split_once(':').expect("RANDOM:IDENTITY");
    assert_eq!(identity, "report-host-1");

    let out = output(redfence(&cluster).args(["status", "report"]));
    assert_eq!(code(out.status), 0);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!text.contains(secret), "the secret leaked: {text}");
    assert_eq!(
        text.lines().filter(|l| l.contains("report-host-1")).count(),
        5,
        "{text}"
    );
    let out = output(redfence(&cluster).args(["status", "report", "--json"]));
    assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    for i in doc["instances"].as_array().unwrap() {
        assert_eq!(i["holder"], "report-host-1", "{i}");
    }

    // A conflict names the holder (from the environment variable here).
    let out = output(
        run_cmd(&cluster, &["-n"], "report", "true").env("REDFENCE_IDENTITY", "report-host-2"),
    );
    assert_eq!(code(out.status), 75);
    let err = stderr(&out);
    assert!(err.contains("\"report-host-1\""), "{err}");
    assert!(!err.contains(secret), "{err}");
    // -q: the exit code says it, nothing is printed (cron mails every line).
    let out = output(&mut run_cmd(&cluster, &["-q", "-n"], "report", "true"));
    assert_eq!(code(out.status), 75);
    assert_eq!(stderr(&out), "");

    std::fs::write(scratch.path("go"), "").unwrap();
    let out = finish(holder, RUN_LIMIT);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
}

#[test]
fn a_bad_identity_gives_78() {
    let cluster = RedisServers::start(1);
    for bad in ["", "new\nline", &"x".repeat(129)] {
        let out = output(&mut run_cmd(&cluster, &["--identity", bad], "r", "true"));
        assert_eq!(code(out.status), 78, "{bad:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("identity"), "{}", stderr(&out));
    }
}

/// The README's crontab line: five machines start the nightly job 0 to 2 s
/// apart (clocks never agree to the second); the hold keeps the lock after
/// the first one is done, so the job runs exactly once.
#[test]
fn five_runs_started_apart_with_a_hold_run_the_command_once() {
    let cluster = RedisServers::start(5);
    let scratch = Scratch::new("once");
    let script = format!("echo ran >> {}", scratch.path("runs"));
    let mut children = Vec::new();
    for i in 0..5u64 {
        let mut cmd = run_cmd(
            &cluster,
            &["-q", "-n", "--hold-at-least", "10s"],
            "nightly-report",
            &script,
        );
        cmd.env("REDFENCE_IDENTITY", format!("machine-{i}"));
        children.push(cmd.spawn().expect("redfence starts"));
        std::thread::sleep(Duration::from_millis(500)); // the next machine's clock
    }
    let codes: Vec<i32> = children
        .into_iter()
        .map(|c| code(finish(c, RUN_LIMIT).status))
        .collect();
    assert_eq!(scratch.read("runs").lines().count(), 1, "codes {codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 0).count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 75).count(), 4, "{codes:?}");
}

#[test]
fn hold_at_least_is_read_from_the_environment() {
    let cluster = RedisServers::start(3);
    let started = Instant::now();
    let out =
        output(run_cmd(&cluster, &[], "env-hold", "true").env("REDFENCE_HOLD_AT_LEAST", "2s"));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    // Done at once, still held for the rest of the 2 s.
    assert!(cluster.server(0).exists(&lock_key("env-hold")));
    assert!(eventually(Duration::from_secs(4), || !cluster
        .server(0)
        .exists(&lock_key("env-hold"))));
    assert!(started.elapsed() >= Duration::from_millis(1900));
}

// --- Exit codes of foreign keys and losses ---------------------------------

/// Contract (README, exit codes: "78 | bad URL or configuration (even
/// instance count, bad prefix, a foreign value on redfence's keys)";
/// src/bin/redfence/exit.rs: `WrongType` is a configuration error,
/// "another program uses the prefix"). A `run` whose resource's lock key
/// is a hash, or whose fence counter is a string that is not an integer,
/// on every instance, exits 78 without running the command and without
/// waiting out its budget (it is not a conflict: retrying cannot help);
/// so does a `--prefix` with a brace.
///
/// Catches: `WrongType` mapped to 69 (unavailable) or to the
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
/// Catches: no SIGKILL to the group when the command itself
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

// --- Signals and the process group ---------------------------------------

/// The command runs in its own process group and signals sent to `run` go
/// to that group: a background process of the command gets them too.
/// (Catches: the group flag inverted, signals sent to the command alone.)
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
/// (Catches: `&&` for `||` in `forward`, `from_kernel` always true or
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
/// time. (Catches: the `!` dropped in `forward`'s terminal test, and
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
/// (Catches: `stops_wait` always true; `signals::name` empty or constant.)
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
/// `status`. (Catches: the library's invalid-resource error mapped to 69.)
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
/// the wait slice. (Catches: `-` for `+` in the validity margin and in the
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
/// run too short for an extension says nothing about one. (Catches: `info`
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
/// the error); with `-q` only the error line is printed. (Catches: `warn`
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
/// instance timeout (950 ms: a later answer is a timeout). (Catches: `millis` constant, or with `+` or `/` for
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
/// (Catches: PTTL -1 read as a TTL of 1 ms.)
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
/// (Catches: `describe` empty or constant, and its kind tests.)
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

/// `redfence unlock`, as an operator runs it after a holder crashed with a
/// long TTL: it names the holder, deletes the lock on every instance and
/// leaves the fence counter; with a majority down it exits 69.
#[test]
fn unlock_deletes_a_lock_held_elsewhere_and_keeps_the_counter() {
    let cluster = RedisServers::start(3);
    let locks = builder(&cluster).identity("stuck-host:42").build().unwrap();
    let long = redfence::LockOptions::new()
        .ttl(Duration::from_secs(120))
        .auto_extend(false);
    let _stuck = locks.lock_with("report", long).unwrap();
    // The grant landed everywhere (a quorum's replies return it).
    assert!(eventually(Duration::from_secs(5), || holders(
        &cluster, "report"
    ) == 3));
    let out = output(redfence(&cluster).args(["unlock", "report"]));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "report: released (held by stuck-host:42)"
    );
    assert_eq!(holders(&cluster, "report"), 0);
    assert!(cluster.iter().all(|s| s.exists(&fence_key("report"))));

    cluster.server(0).stop();
    cluster.server(1).stop();
    let out = output(redfence(&cluster).args(["--instance-timeout", "200ms", "unlock", "report"]));
    cluster.server(0).cont();
    cluster.server(1).cont();
    assert_eq!(code(out.status), 69, "{}", stderr(&out));
    assert!(stderr(&out).contains("report"), "{}", stderr(&out));
}

/// `redfence unlock --permits N` and `--rw` revoke a crashed holder's
/// permits and a crashed writer, naming each; the plain form on a
/// semaphore's name releases nothing, and says so.
#[test]
fn unlock_frees_permits_and_rw_locks() {
    let cluster = RedisServers::start(3);
    let crashed = builder(&cluster).identity("stuck:7").build().unwrap();
    let long = redfence::LockOptions::new()
        .ttl(Duration::from_secs(120))
        .auto_extend(false);
    std::mem::forget(crashed.semaphore("pool", 2).acquire_with(long).unwrap());
    std::mem::forget(crashed.rw_lock("doc").write_with(long).unwrap());

    let out = output(redfence(&cluster).args(["unlock", "pool"]));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "pool: nothing to release (no holder on a quorum)"
    );
    let out = output(redfence(&cluster).args(["unlock", "--permits", "2", "pool"]));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).trim().starts_with("pool: released slot ")
            && stdout(&out).trim().ends_with("(held by stuck:7)"),
        "{}",
        stdout(&out)
    );
    let out = output(redfence(&cluster).args(["unlock", "--rw", "doc"]));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "doc: released the writer (held by stuck:7)"
    );
    let locks = client(&cluster);
    drop(
        locks
            .semaphore("pool", 2)
            .try_acquire()
            .expect("a permit is free"),
    );
    drop(
        locks
            .rw_lock("doc")
            .try_write()
            .expect("the rw lock is free"),
    );
}

/// A wrong password on every instance is a configuration error, not an
/// outage: `run` with an hour to wait exits 78 at once, says what to check,
/// and never shows the password.
#[test]
fn run_exits_78_at_once_when_a_quorum_refuses_the_credentials() {
    let cluster = RedisServers::start_with(
        3,
        ServerOptions {
            acl_users: vec!["worker on >right-pa55 ~* &* +@all".to_string()],
            ..Default::default()
        },
    );
    let urls: Vec<String> = cluster
        .iter()
        .map(|s| s.url_as("worker", "wrong-pa55"))
        .collect();
    let child = redfence_at(&urls)
        .args(["run", "-w", "1h", "job", "--", "true"])
        .spawn()
        .expect("redfence starts");
    let out = finish(child, SIGNAL_LIMIT);
    let err = stderr(&out);
    assert_eq!(code(out.status), 78, "{err}");
    assert!(err.contains("refused") && err.contains("password"), "{err}");
    assert!(
        !err.contains("wrong-pa55") && !stdout(&out).contains("wrong-pa55"),
        "{err}"
    );
}

/// A job that queued and whose wait ran out did not run: it says so on
/// stderr even under `-q`, and exits 75; one attempt (`-n`) stays silent.
#[test]
fn a_wait_that_runs_out_is_said_even_quietly() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let _held = locks.lock("queue").expect("test holds the lock");
    let out = output(&mut run_cmd(
        &cluster,
        &["-q", "-w", "300ms"],
        "queue",
        "true",
    ));
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the job did not run"),
        "{}",
        stderr(&out)
    );
    let out = output(&mut run_cmd(&cluster, &["-q", "-n"], "queue", "true"));
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "one attempt under -q is silent");
}

/// A user allowed everything but `PUBLISH`: `run` takes the lock, runs the
/// command and releases it, exit 0, without a "release not confirmed"
/// warning (the announcement's refusal once failed the whole release).
#[test]
fn run_releases_cleanly_for_a_user_without_publish() {
    let mut rules = redfence::acl_rules("redfence:");
    rules.retain(|r| r != "+publish");
    let cluster = RedisServers::start_with(
        3,
        ServerOptions {
            acl_users: vec![format!("worker on >pw-42 {}", rules.join(" "))],
            ..Default::default()
        },
    );
    let urls: Vec<String> = cluster
        .iter()
        .map(|s| s.url_as("worker", "pw-42"))
        .collect();
    let child = redfence_at(&urls)
        .args(["run", "job", "--", "true"])
        .spawn()
        .expect("redfence starts");
    let out = finish(child, RUN_LIMIT);
    let err = stderr(&out);
    assert_eq!(code(out.status), 0, "{err}");
    assert!(!err.contains("not confirmed"), "{err}");
    assert_eq!(holders(&cluster, "job"), 0, "released");
}

/// `redfence doctor` as an operator runs it: a table, `--json`, and the
/// exit code says whether the deployment holds (0), a precondition is
/// violated (78: here an eviction policy), or a quorum did not answer (69).
#[test]
fn doctor_reports_each_instance_and_exits_by_what_it_found() {
    let cluster = RedisServers::start(3);
    let out = output(redfence(&cluster).arg("doctor"));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let text = stdout(&out);
    for server in &cluster {
        assert!(text.contains(&server.addr().to_string()), "{text}");
    }
    assert!(
        text.contains("every precondition the doctor can see holds"),
        "{text}"
    );

    cluster
        .server(1)
        .cmd(&["CONFIG", "SET", "maxmemory", "100mb"])
        .unwrap();
    cluster
        .server(1)
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])
        .unwrap();
    let out = output(redfence(&cluster).args(["doctor", "--json"]));
    assert_eq!(code(out.status), 78, "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(doc["healthy"], false);
    assert_eq!(doc["answered"], 3);
    let flagged: Vec<&Value> = doc["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| {
            row["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["check"] == "eviction" && f["severity"] == "error")
        })
        .collect();
    assert_eq!(flagged.len(), 1, "{doc}");
    assert_eq!(
        flagged[0]["instance"].as_str().unwrap(),
        format!("{}/0", cluster.server(1).addr())
    );

    cluster.server(0).stop();
    cluster.server(2).stop();
    let out = output(redfence(&cluster).args(["--instance-timeout", "200ms", "doctor"]));
    cluster.server(0).cont();
    cluster.server(2).cont();
    assert_eq!(code(out.status), 69, "{}", stdout(&out));
}

/// The doctor's verdicts as an operator meets them: a wrong password and
/// a missing `+evalsha` on two of five exit 78, name each, state the
/// margin and count the answers as `ping` does; a missing `+zadd` (which
/// only reader-writer locks need) is named before `run --read` meets it;
/// one instance down of three is a warning with the margin (exit 0, as
/// `ping`).
#[test]
fn doctor_names_each_unusable_instance_and_the_margin() {
    let rules = redfence::acl_rules("redfence:").join(" ");
    let options = ServerOptions {
        acl_users: vec![format!("app on >app-pa55 {rules}")],
        ..Default::default()
    };
    let cluster = RedisServers::start_with(5, options);
    let urls = cluster.urls_as("app", "app-pa55");
    cluster
        .server(1)
        .cmd(&["ACL", "SETUSER", "app", "resetpass", ">other-pa55"])
        .unwrap();
    cluster
        .server(3)
        .cmd(&["ACL", "SETUSER", "app", "-evalsha"])
        .unwrap();
    cluster
        .server(4)
        .cmd(&["ACL", "SETUSER", "app", "-zadd"])
        .unwrap();
    let out = output(redfence_at(&urls).arg("doctor"));
    let text = stdout(&out);
    assert_eq!(code(out.status), 78, "{text}{}", stderr(&out));
    let line = |i: usize| ping_line(&text, cluster.server(i));
    assert!(line(1).ends_with("refused credentials"), "{text}");
    assert!(
        line(3).ends_with("missing permissions (+evalsha)"),
        "{text}"
    );
    assert!(line(4).ends_with("missing permissions (+zadd)"), "{text}");
    assert_eq!(text.matches("+evalsha").count(), 2, "{text}");
    assert!(
        text.contains("4 of 5 positions answered, 2 usable (quorum 3)")
            && text.contains("no quorum is left"),
        "{text}"
    );
    assert!(!text.contains("pa55"), "{text}");
    let ping = output(redfence_at(&urls).arg("ping"));
    assert!(
        stdout(&ping).contains("4 of 5 instances answered"),
        "{}",
        stdout(&ping)
    );

    let out = output(redfence_at(&urls).args(["doctor", "--json"]));
    assert_eq!(code(out.status), 78);
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(
        (
            &doc["answered"],
            &doc["usable"],
            &doc["margin"],
            &doc["healthy"]
        ),
        (
            &Value::from(4),
            &Value::from(2),
            &Value::Null,
            &Value::from(false)
        )
    );
    let verdicts: Vec<&str> = doc["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts,
        // Without +info, persistence is not read: usable.
        [
            "usable",
            "refused-credentials",
            "usable",
            "missing-permissions",
            "missing-permissions"
        ]
    );
    assert_eq!(
        doc["instances"][4]["missing_rules"],
        serde_json::json!(["+zadd"])
    );

    let cluster = RedisServers::start(3);
    cluster.server(2).kill();
    let out = output(redfence(&cluster).arg("doctor"));
    let text = stdout(&out);
    assert_eq!(code(out.status), 0, "{text}");
    assert!(
        ping_line(&text, cluster.server(2)).ends_with("unreachable"),
        "{text}"
    );
    assert!(
        text.contains("2 of 3 positions answered, 2 usable (quorum 2)")
            && text.contains("margin 0: losing one more position leaves no quorum"),
        "{text}"
    );
    assert_eq!(code(output(redfence(&cluster).arg("ping")).status), 0);
}

// --- Semaphores and reader-writer locks: run --permits/--read/--write, status

/// Starts a `run` with `options` on `resource` whose command writes
/// `$REDFENCE_SLOT $REDFENCE_TOKEN` (the slot `-` when unset) to `file` and
/// then runs until `go` exists; returns it once the command runs, with the
/// line it wrote.
fn start_holding(
    cluster: &RedisServers,
    scratch: &Scratch,
    options: &[&str],
    resource: &str,
    file: &str,
) -> (Child, String) {
    let script = format!(
        "echo \"${{REDFENCE_SLOT:--}} $REDFENCE_TOKEN\" > {file}; \
         while [ ! -e {go} ]; do sleep 0.05; done",
        file = scratch.path(file),
        go = scratch.path("go")
    );
    let child = run_cmd(cluster, options, resource, &script)
        .spawn()
        .expect("redfence starts");
    let line = scratch.wait_line(file);
    (child, line)
}

/// A `slot token` line as `start_holding`'s command writes it.
fn slot_and_token(line: &str) -> (u32, u64) {
    let (slot, token) = line.split_once(' ').expect("slot and token");
    (
        slot.parse().expect("a slot number"),
        token.parse().expect("a decimal token"),
    )
}

fn permit_key(semaphore: &str, slot: u32) -> String {
    format!("redfence:permit:{{{semaphore}}}:{slot}")
}

/// `run --permits N`: the command gets its slot as `REDFENCE_SLOT` and the
/// permit's token as `REDFENCE_TOKEN`, on the slot a library client left
/// free; the permit is released after; a plain run's command gets no
/// `REDFENCE_SLOT`, even one inherited; another count than the recorded one
/// is a usage error (64) and the command does not run.
#[test]
fn run_with_permits_gives_the_command_its_slot_and_token() {
    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("permits");
    let locks = builder(&cluster).identity("library").build().unwrap();
    let taken = locks.semaphore("pool", 2).try_acquire().expect("a permit");
    let free = 1 - taken.slot();
    let mut last = 0u64;
    for _ in 0..2 {
        let out = run(
            &cluster,
            &["--permits", "2", "-n"],
            "pool",
            "echo \"$REDFENCE_SLOT $REDFENCE_TOKEN $REDFENCE_RESOURCE\"",
        );
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
        let text = stdout(&out);
        let words: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(words.len(), 3, "{text}");
        assert_eq!(words[0], free.to_string(), "the slot left free: {text}");
        let token: u64 = words[1].parse().expect("decimal token");
        assert!(
            token > last,
            "the slot's tokens increase: {token} after {last}"
        );
        last = token;
        assert_eq!(words[2], "pool");
        assert!(eventually(Duration::from_secs(2), || cluster
            .iter()
            .all(|s| !s.exists(&permit_key("pool", free)))));
    }
    // The library's permit on the other slot was left alone.
    assert!(cluster
        .iter()
        .all(|s| s.exists(&permit_key("pool", taken.slot()))));
    taken.release().unwrap();

    let out = output(
        run_cmd(&cluster, &[], "plain", "echo \"${REDFENCE_SLOT-unset}\"")
            .env("REDFENCE_SLOT", "7"),
    );
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "unset");

    let ran = scratch.path("ran");
    let out = run(
        &cluster,
        &["--permits", "3"],
        "pool",
        &format!("touch {ran}"),
    );
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("2 permits"), "{}", stderr(&out));
    assert!(!scratch.exists("ran"));
}

/// Two `run --permits 1 -n` at once: the second finds the only permit
/// held, exits 75 without running its command (silently with `-q`); once
/// the first is done, a third gets the permit.
#[test]
fn a_second_run_on_a_one_permit_semaphore_exits_75() {
    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("one-permit");
    let (first, line) = start_holding(
        &cluster,
        &scratch,
        &["--permits", "1", "-n", "--identity", "first-host"],
        "single",
        "first",
    );
    assert_eq!(slot_and_token(&line).0, 0);
    let ran = scratch.path("ran");
    let out = run(
        &cluster,
        &["--permits", "1", "-n"],
        "single",
        &format!("touch {ran}"),
    );
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    let err = stderr(&out);
    // (The library names no holder when its first round found no slot
    // free; `status` shows them.)
    assert!(
        err.contains("the only permit of \"single\" is held"),
        "{err}"
    );
    let out = run(
        &cluster,
        &["-q", "--permits", "1", "-n"],
        "single",
        &format!("touch {ran}"),
    );
    assert_eq!(code(out.status), 75);
    assert_eq!(stderr(&out), "");
    assert!(!scratch.exists("ran"), "the command ran without a permit");

    // A run that waits gets the permit once the first gives it back.
    let waiter = run_cmd(
        &cluster,
        &["--permits", "1", "-w", "20s"],
        "single",
        &format!("touch {}", scratch.path("waited")),
    )
    .spawn()
    .expect("redfence starts");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !scratch.exists("waited"),
        "the waiter ran beside the holder"
    );
    std::fs::write(scratch.path("go"), "").unwrap();
    let out = finish(first, RUN_LIMIT);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let out = finish(waiter, RUN_LIMIT);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(scratch.exists("waited"));
    let out = run(
        &cluster,
        &["--permits", "1", "-n"],
        "single",
        &format!("touch {ran}"),
    );
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(scratch.exists("ran"));
}

/// Permit counts out of range, and flags that cannot go together, are bad
/// arguments (64), from the command line or the environment; the command
/// does not run.
#[test]
fn zero_permits_or_a_hold_on_a_semaphore_give_64() {
    let cluster = RedisServers::start(1);
    let scratch = Scratch::new("bad-permits");
    let script = format!("touch {}", scratch.path("ran"));
    let cases: &[&[&str]] = &[
        &["--permits", "0"],
        &["--permits", "1025"],
        &["--permits", "many"],
        &["--permits", "2", "--hold-at-least", "1m"],
        &["--permits", "2", "--read"],
        &["--read", "--write"],
        &["--read", "--hold-at-least", "1m"],
        &["--write", "--hold-at-least", "1m"],
    ];
    for options in cases {
        let out = run(&cluster, options, "r", &script);
        assert_eq!(code(out.status), 64, "{options:?}: {}", stderr(&out));
    }
    let out = output(run_cmd(&cluster, &[], "r", &script).env("REDFENCE_PERMITS", "0"));
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
    let out = output(
        run_cmd(&cluster, &["--permits", "2"], "r", &script).env("REDFENCE_HOLD_AT_LEAST", "1m"),
    );
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("--hold-at-least"), "{}", stderr(&out));
    assert!(!scratch.exists("ran"));
}

/// `redfence unlock --permits N --recount` revokes a crashed holder's
/// permits and makes N the count, which callers of the old count are then
/// refused and callers of N use; `status` says "1 permit", not "1 permits".
#[test]
fn unlock_permits_recount_changes_the_count() {
    let cluster = RedisServers::start(3);
    let crashed = builder(&cluster).identity("stuck:8").build().unwrap();
    let long = redfence::LockOptions::new()
        .ttl(Duration::from_secs(120))
        .auto_extend(false);
    std::mem::forget(crashed.semaphore("pool", 2).acquire_with(long).unwrap());
    let args = ["unlock", "--permits", "2", "--recount", "pool"];
    let out = output(redfence(&cluster).args(args));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("(held by stuck:8)"), "{text}");
    assert!(
        text.trim_end().ends_with("pool: 2 permits recorded"),
        "{text}"
    );
    let out = output(redfence(&cluster).args(["unlock", "--permits", "1", "--recount", "pool"]));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("pool: 1 permit recorded"),
        "{}",
        stdout(&out)
    );
    let locks = client(&cluster);
    assert!(matches!(
        locks.semaphore("pool", 2).try_acquire(),
        Err(redfence::Error::InvalidOptions { .. })
    ));
    let permit = locks
        .semaphore("pool", 1)
        .try_acquire()
        .expect("the new count");
    let out = output(redfence(&cluster).args(["status", "pool"]));
    assert!(
        stdout(&out).contains("1 permit on 3 of 3 instances"),
        "{}",
        stdout(&out)
    );
    drop(permit);
    // Three permits of a larger count, all held: revoking the slot below
    // the new count leaves two held, and the count cannot change.
    for _ in 0..3 {
        std::mem::forget(crashed.semaphore("wide", 3).acquire_with(long).unwrap());
    }
    let args = ["unlock", "--permits", "1", "--recount", "wide"];
    let out = output(redfence(&cluster).args(args));
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("wide: released slot 0"),
        "{}",
        stdout(&out)
    );
    let out = output(redfence(&cluster).args(["unlock", "--recount", "pool"]));
    assert_eq!(
        code(out.status),
        64,
        "--recount needs --permits: {}",
        stderr(&out)
    );
}

/// `status` of a semaphore: its permits record, and on each instance each
/// slot's holder (its identity, never the secret), TTL and counter; in
/// `--json`, a `semaphore` section beside the lock's unchanged fields. A
/// plain lock's status has neither section.
#[test]
fn status_shows_a_semaphores_holders_by_slot() {
    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("status-permits");
    let (holder, line) = start_holding(
        &cluster,
        &scratch,
        &["--permits", "3", "--identity", "worker-a"],
        "jobs",
        "info",
    );
    let (slot, token) = slot_and_token(&line);
    let values: Vec<String> = cluster
        .iter()
        .filter_map(|s| s.get(&permit_key("jobs", slot)))
        .collect();
    assert!(!values.is_empty());
    let secrets: Vec<&str> = values
        .iter()
        .map(|v| v.split_once(':').expect("RANDOM:IDENTITY").0)
        .collect();

    let out = output(redfence(&cluster).args(["status", "jobs"]));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let text = stdout(&out);
    for secret in &secrets {
        assert!(!text.contains(secret), "the secret leaked: {text}");
    }
    assert!(
        text.contains(&format!(
            "redfence:permits:{{jobs}}: 3 permits on 3 of 3 instances; held on a quorum: slot {slot}"
        )),
        "{text}"
    );
    // Only the semaphore exists under that name: no lock table.
    assert!(!text.contains("redfence:lock:{jobs}"), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("worker-a")).collect();
    assert_eq!(rows.len(), 3, "{text}");
    for row in rows {
        let words: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(&words[1..3], [slot.to_string().as_str(), "held"], "{row}");
    }
    assert!(!text.contains("redfence:rw:"), "{text}");

    let out = output(redfence(&cluster).args(["status", "jobs", "--json"]));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    for secret in &secrets {
        assert!(!stdout(&out).contains(secret), "{}", stdout(&out));
    }
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    // The lock's fields as before: nothing holds the lock itself.
    assert_eq!(doc["locked"], 0, "{doc}");
    assert_eq!(doc["instances"].as_array().unwrap().len(), 3);
    assert!(doc["rw"].is_null(), "{doc}");
    let semaphore = &doc["semaphore"];
    assert_eq!(semaphore["key"], "redfence:permits:{jobs}");
    assert_eq!(semaphore["permits"], 3);
    assert_eq!(semaphore["held"], serde_json::json!([slot]));
    let instances = semaphore["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 3);
    let mut reached = 0;
    for i in instances {
        assert_eq!(i["ok"], true, "{i}");
        assert_eq!(i["permits"], 3, "{i}");
        let slots = i["slots"].as_array().unwrap();
        assert_eq!(slots.len(), 3, "{i}");
        let held = &slots[slot as usize];
        assert_eq!(held["slot"], slot, "{i}");
        assert_eq!(held["locked"], true, "{i}");
        assert_eq!(held["holder"], "worker-a", "{i}");
        let ttl = held["ttl_ms"].as_u64().expect("ttl_ms");
        assert!(ttl > 0 && ttl <= 30_000, "{i}");
        reached += usize::from(held["fence"].as_u64().is_some_and(|f| f >= token));
        for other in slots.iter().filter(|s| s["slot"] != slot) {
            assert_eq!(other["locked"], false, "{i}");
            assert!(other["holder"].is_null(), "{i}");
        }
    }
    assert!(
        reached >= 2,
        "a quorum's slot counters reached the token: {doc}"
    );
    // The lock of the same name is another lock: both tables show.
    let locks = client(&cluster);
    let lock = locks.lock("jobs").expect("the lock is free");
    let text = stdout(&output(redfence(&cluster).args(["status", "jobs"])));
    assert!(
        text.contains("redfence:lock:{jobs}: locked on 3 of 3"),
        "{text}"
    );
    assert!(
        text.contains("redfence:permits:{jobs}: 3 permits"),
        "{text}"
    );
    lock.release().unwrap();

    std::fs::write(scratch.path("go"), "").unwrap();
    let out = finish(holder, RUN_LIMIT);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    // Released: the record stays, no slot is held.
    assert!(eventually(Duration::from_secs(2), || {
        let out = output(redfence(&cluster).args(["status", "jobs", "--json"]));
        let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
        doc["semaphore"]["held"] == serde_json::json!([])
    }));

    // A plain lock shows as before: no semaphore or rw section.
    let _held = locks.lock("plain").unwrap();
    let out = output(redfence(&cluster).args(["status", "plain"]));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 5, "{text}");
    let out = output(redfence(&cluster).args(["status", "plain", "--json"]));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    assert_eq!(doc["locked"], 3, "{doc}");
    assert!(doc["semaphore"].is_null() && doc["rw"].is_null(), "{doc}");
}

/// `run --read` and `run --write` on a reader-writer lock, and `status`
/// showing its readers (identity and remaining time) or its writer: two
/// readers share it and a writer is refused (75), then a writer holds it
/// alone with a token above the readers', and a reader is refused.
#[test]
fn status_shows_a_rw_locks_readers_and_writer() {
    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("status-rw");
    let (reader, line) = start_holding(
        &cluster,
        &scratch,
        &["--read", "--identity", "reader-a"],
        "doc",
        "reader",
    );
    let (slot, read_token) = line.split_once(' ').unwrap();
    assert_eq!(slot, "-", "a read has no slot");
    let read_token: u64 = read_token.parse().unwrap();
    let locks = builder(&cluster).identity("reader-b").build().unwrap();
    let second = locks.rw_lock("doc").try_read().expect("readers share");

    let ran = scratch.path("ran");
    let out = run(&cluster, &["--write", "-n"], "doc", &format!("touch {ran}"));
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    assert!(!scratch.exists("ran"), "a writer ran beside readers");

    let out = output(redfence(&cluster).args(["status", "doc"]));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("redfence:rw:{doc}: written on 0 of 3 instances, read on 3"),
        "{text}"
    );
    for identity in ["reader-a", "reader-b"] {
        let rows: Vec<&str> = text.lines().filter(|l| l.contains(identity)).collect();
        assert_eq!(rows.len(), 3, "{identity}: {text}");
        assert!(
            rows.iter()
                .all(|r| r.split_whitespace().nth(1) == Some("reader")),
            "{text}"
        );
    }
    assert!(!text.contains("redfence:permits:"), "{text}");

    let out = output(redfence(&cluster).args(["status", "doc", "--json"]));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    assert!(doc["semaphore"].is_null(), "{doc}");
    let rw = &doc["rw"];
    assert_eq!(rw["writer_key"], "redfence:rw:{doc}:writer");
    assert_eq!(rw["readers_key"], "redfence:rw:{doc}:readers");
    assert_eq!(rw["read"], 3, "{doc}");
    assert_eq!(rw["written"], 0, "{doc}");
    for i in rw["instances"].as_array().unwrap() {
        assert!(i["writer"].is_null(), "{i}");
        let mut readers: Vec<&str> = i["readers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let ttl = r["ttl_ms"].as_u64().expect("ttl_ms");
                assert!(ttl > 0 && ttl <= 30_000, "{i}");
                r["holder"].as_str().unwrap()
            })
            .collect();
        readers.sort_unstable();
        assert_eq!(readers, ["reader-a", "reader-b"], "{i}");
        assert!(i["fence"].as_u64().is_some(), "{i}");
    }
    // The readers' values (secret:identity) never show.
    for server in &cluster {
        let members = server
            .cmd(&["ZRANGE", "redfence:rw:{doc}:readers", "0", "-1"])
            .unwrap();
        let redis::Value::Array(members) = members else {
            panic!("{members:?}")
        };
        for member in members {
            let redis::Value::BulkString(value) = member else {
                panic!("{member:?}")
            };
            let value = String::from_utf8(value).unwrap();
            let (secret, _) = value.split_once(':').unwrap();
            assert!(!stdout(&out).contains(secret), "{}", stdout(&out));
            assert!(!text.contains(secret), "{text}");
        }
    }

    second.release().unwrap();
    std::fs::write(scratch.path("go"), "").unwrap();
    let out = finish(reader, RUN_LIMIT);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    std::fs::remove_file(scratch.path("go")).unwrap();

    let (writer, line) = start_holding(
        &cluster,
        &scratch,
        &["--write", "--identity", "writer-a"],
        "doc",
        "writer",
    );
    let write_token: u64 = line.split_once(' ').unwrap().1.parse().unwrap();
    assert!(write_token > read_token, "{write_token} after {read_token}");
    let out = run(&cluster, &["--read", "-n"], "doc", &format!("touch {ran}"));
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("written by \"writer-a\""),
        "{}",
        stderr(&out)
    );
    assert!(!scratch.exists("ran"), "a reader ran beside a writer");

    let out = output(redfence(&cluster).args(["status", "doc"]));
    let text = stdout(&out);
    assert!(
        text.contains("redfence:rw:{doc}: written on 3 of 3 instances, read on 0"),
        "{text}"
    );
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("writer-a")).collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(
        rows.iter()
            .all(|r| r.split_whitespace().nth(1) == Some("writer")),
        "{text}"
    );
    let out = output(redfence(&cluster).args(["status", "doc", "--json"]));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status --json parses");
    assert_eq!(doc["rw"]["written"], 3, "{doc}");
    let value = cluster
        .server(0)
        .get("redfence:rw:{doc}:writer")
        .expect("a writer");
    let (secret, _) = value.split_once(':').unwrap();
    assert!(!stdout(&out).contains(secret) && !text.contains(secret));
    let mut reached = 0;
    for i in doc["rw"]["instances"].as_array().unwrap() {
        assert_eq!(i["writer"]["holder"], "writer-a", "{i}");
        let ttl = i["writer"]["ttl_ms"].as_u64().expect("ttl_ms");
        assert!(ttl > 0 && ttl <= 30_000, "{i}");
        assert_eq!(i["readers"], serde_json::json!([]), "{i}");
        reached += usize::from(i["fence"].as_u64().is_some_and(|f| f >= write_token));
    }
    assert!(
        reached >= 2,
        "a quorum's counters reached the write's token: {doc}"
    );

    std::fs::write(scratch.path("go"), "").unwrap();
    let out = finish(writer, RUN_LIMIT);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
}

/// A lost permit, read or write ends the command as a lost lock does:
/// TERM to its group, then the lost code (124), never its own 0.
#[test]
fn a_lost_permit_read_or_write_stops_the_command_with_124() {
    let cluster = RedisServers::start(5);
    for options in [
        &["--permits", "2", "--ttl", "3s"][..],
        &["--read", "--ttl", "3s"],
        &["--write", "--ttl", "3s"],
    ] {
        let scratch = Scratch::new("lost-kinds");
        let (child, pid) = start_trapping(&cluster, &scratch, options, "exit 0");
        let _reap = KillOnPanic(vec![pid.clone()]);
        cluster.stop(&[0, 1, 2]);
        let out = finish(child, RUN_LIMIT);
        cluster.cont(&[0, 1, 2]);
        assert_eq!(code(out.status), 124, "{options:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("lost"),
            "{options:?}: {}",
            stderr(&out)
        );
        assert!(!process_exists(&pid), "{options:?}: the command survived");
    }
}

/// `status` of a semaphore and a reader-writer lock on a Redis Cluster
/// position: their keys share the name's hash tag, so the shard that owns
/// the name (reached through the seed's `MOVED`) answers for all of them.
#[test]
fn status_reads_permits_and_readers_on_the_owning_shard_of_a_cluster_position() {
    let sharded = redfence::testing::ShardedCluster::start(3);
    let standalone = RedisServers::start(2);
    // The seed is a shard that does not own the name: `status` must
    // follow its `MOVED`.
    let owner = sharded.master_of_slot(sharded.slot_of("redfence:permits:{pool}"));
    let seed = sharded.master((owner + 1) % 3);
    let seeds = sharded.seed_urls();
    let mut urls = vec![format!("redis+cluster://{}", seed.addr())];
    urls.extend(standalone.urls());
    let scratch = Scratch::new("cluster-status");
    let mut holder = redfence_at(&urls);
    holder.args(["--instance-timeout", "500ms", "run", "--permits", "2"]);
    holder.args(["--identity", "sharded-worker", "pool", "--", "sh", "-c"]);
    holder.arg(format!(
        "echo $REDFENCE_SLOT > {slot}; while [ ! -e {go} ]; do sleep 0.05; done",
        slot = scratch.path("slot"),
        go = scratch.path("go")
    ));
    let holder = holder.spawn().expect("redfence starts");
    let slot: u64 = scratch.wait_line("slot").parse().expect("a slot");
    let locks = redfence::Redlock::builder([
        redfence::Position::cluster(seeds.clone()),
        redfence::Position::from(standalone.urls()[0].as_str()),
        redfence::Position::from(standalone.urls()[1].as_str()),
    ])
    .instance_timeout(Duration::from_millis(500))
    .identity("sharded-reader")
    .build()
    .unwrap();
    let read = locks
        .rw_lock("pool")
        .try_read_for(Duration::from_secs(10))
        .expect("a read");

    let status = || {
        let out = output(redfence_at(&urls).args([
            "status",
            "pool",
            "--json",
            "--instance-timeout",
            "500ms",
        ]));
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).expect("status --json parses")
    };
    // A quorum granted; the last position may answer a moment later.
    let everywhere = |doc: &Value| {
        let holders = doc["semaphore"]["instances"].as_array().unwrap();
        let readers = doc["rw"]["instances"].as_array().unwrap();
        holders
            .iter()
            .all(|i| i["slots"][slot as usize]["holder"] == "sharded-worker")
            && readers
                .iter()
                .all(|i| i["readers"][0]["holder"] == "sharded-reader")
    };
    let mut doc = status();
    assert!(
        eventually(Duration::from_secs(5), || {
            doc = status();
            everywhere(&doc)
        }),
        "{doc}"
    );
    assert_eq!(doc["semaphore"]["held"], serde_json::json!([slot]), "{doc}");
    assert_eq!(
        doc["semaphore"]["instances"][0]["instance"],
        format!("cluster #0 shard {}", sharded.master(owner).addr()),
        "{doc}"
    );
    assert_eq!(doc["rw"]["read"], 3, "{doc}");

    read.release().unwrap();
    std::fs::write(scratch.path("go"), "").unwrap();
    let out = finish(holder, RUN_LIMIT);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
}
