//! Messages on stderr.

use std::process::Output;

use crate::common::cli::{code, finish, run, run_cmd, stderr, KillOnPanic, Scratch, RUN_LIMIT};
use redfence::testing::RedisServers;

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
