//! Exit codes of foreign keys and losses.

use std::time::{Duration, Instant};

use crate::common::cli::{alive, code, finish, output, run_cmd, stderr, Reap, Scratch, RUN_LIMIT};
use crate::common::{eventually, fence_key, holders, lock_key};
use redfence::testing::RedisServers;

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
