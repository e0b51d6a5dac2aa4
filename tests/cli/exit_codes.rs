//! Exit codes.

use crate::common::cli::{code, output, redfence, run, stderr};
use redfence::testing::RedisServers;

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
