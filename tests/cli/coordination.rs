//! Coordination flags: `--identity`, `--hold-at-least`, `-q`.

use std::time::{Duration, Instant};

use crate::common::cli::{code, finish, output, redfence, run_cmd, stderr, Scratch, RUN_LIMIT};
use crate::common::{eventually, lock_key};
use redfence::testing::RedisServers;
use serde_json::Value;

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
