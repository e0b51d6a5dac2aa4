//! Running a command under the lock: exit codes passed through, what reaches the command, conflicts, losses and waiting.

use std::process::Child;
use std::time::{Duration, Instant};

use crate::common::cli::{
    assert_no_key, code, finish, output, process_exists, redfence, run, run_cmd, signal,
    start_trapping, stderr, stderr_lines, stdout, wait_for_line, Scratch, RUN_LIMIT,
};
use crate::common::client;
use redfence::testing::RedisServers;

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
