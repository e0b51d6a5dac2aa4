//! The command line with fair locks: `redfence run --fair` waits in line
//! and runs its command under the lock; `redfence status` shows the queue
//! (ticket, waiter, age).

use std::time::Duration;

use crate::common::cli::{code, finish, redfence, run, run_cmd, stderr, stdout, RUN_LIMIT};
use crate::common::{client, eventually};
use redfence::testing::RedisServers;

fn status(cluster: &RedisServers, resource: &str, json: bool) -> String {
    let mut cmd = redfence(cluster);
    cmd.arg("status").arg(resource);
    if json {
        cmd.arg("--json");
    }
    let out = crate::common::cli::output(&mut cmd);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    stdout(&out)
}

#[test]
fn run_fair_runs_the_command_under_the_lock() {
    let cluster = RedisServers::start(3);
    let out = run(
        &cluster,
        &["--fair"],
        "fair-job",
        "echo token=$REDFENCE_TOKEN",
    );
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("token="), "{}", stdout(&out));
    let refused = run(&cluster, &["--fair", "--read"], "fair-job", "true");
    assert_ne!(code(refused.status), 0);
    assert!(
        stderr(&refused).contains("exclude each other"),
        "{}",
        stderr(&refused)
    );
}

/// A waiting `run --fair` shows in `status` with its identity; released,
/// it runs.
#[test]
fn status_shows_the_queue_and_the_waiter_runs_after_the_release() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let held = locks.fair_lock("queued-job").lock().unwrap();
    let waiter = run_cmd(
        &cluster,
        &["--fair", "--identity", "waiter-7", "--wait", "30s"],
        "queued-job",
        "echo ran",
    )
    .spawn()
    .expect("redfence starts");
    assert!(
        eventually(Duration::from_secs(10), || status(
            &cluster,
            "queued-job",
            false
        )
        .contains("waiter-7")),
        "the waiter never showed: {}",
        status(&cluster, "queued-job", false)
    );
    let table = status(&cluster, "queued-job", false);
    assert!(table.contains("1 waiter(s) in line"), "{table}");
    assert!(table.contains("3/3"), "{table}");
    let doc: serde_json::Value =
        serde_json::from_str(&status(&cluster, "queued-job", true)).unwrap();
    assert_eq!(doc["queue"][0]["waiter"], "waiter-7", "{doc}");
    assert!(doc["queue"][0]["ticket"].as_u64().is_some(), "{doc}");
    held.release().unwrap();
    let out = finish(waiter, RUN_LIMIT);
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("ran"));
    assert!(eventually(Duration::from_secs(5), || !status(
        &cluster,
        "queued-job",
        false
    )
    .contains("waiter-7")));
}
