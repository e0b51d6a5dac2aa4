//! Semaphores and reader-writer locks: `run --permits/--read/--write`, `status`.

use std::process::Child;
use std::time::Duration;

use crate::common::cli::{
    code, finish, output, process_exists, redfence, redfence_at, run, run_cmd, start_trapping,
    stderr, stdout, KillOnPanic, Scratch, RUN_LIMIT,
};
use crate::common::{builder, client, eventually};
use redfence::testing::RedisServers;
use serde_json::Value;

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
