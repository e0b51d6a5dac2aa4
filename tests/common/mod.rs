//! Helpers shared by the integration tests: clients over the harness's
//! servers, the names of redfence's keys, what the servers hold, and
//! polling with a deadline. One submodule per further concern: the fault
//! proxy and child processes (`faults`), pausing one thread (`pause`), and
//! fencing tokens and counters (`tokens`). Each test binary uses part of
//! them.
#![allow(dead_code)]

pub mod cli;
pub mod faults;
#[cfg(target_os = "linux")]
pub mod pause;
#[cfg(any(feature = "metrics", feature = "tracing"))]
pub mod telemetry;
pub mod tokens;

use std::time::{Duration, Instant};

use redfence::testing::{RedisServer, RedisServers};
use redfence::{Redlock, RedlockBuilder};

/// A builder for a client over every server of the cluster.
pub fn builder(cluster: &RedisServers) -> RedlockBuilder {
    Redlock::builder(cluster.urls())
}

/// A client with default settings over the cluster.
pub fn client(cluster: &RedisServers) -> Redlock {
    builder(cluster).build().expect("client builds")
}

/// Polls `cond` until it holds or `timeout` passes; returns whether it held.
pub fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until every instance answers through the client's own workers,
/// so the first lock call of a test meets open connections.
pub fn warm(locks: &Redlock) {
    assert!(
        eventually(Duration::from_secs(10), || locks
            .ping()
            .iter()
            .all(|(_, r)| r.is_ok())),
        "the client never reached every instance: {:?}",
        locks.ping()
    );
}

/// The per-instance errors of an `Unavailable` error.
pub fn unavailable(
    result: Result<redfence::LockGuard, redfence::Error>,
) -> Vec<redfence::InstanceError> {
    match result {
        Err(redfence::Error::Unavailable { errors, .. }) => errors,
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// The resource's lock key (default prefix).
pub fn lock_key(resource: &str) -> String {
    format!("redfence:lock:{{{resource}}}")
}

/// The resource's fencing counter key (default prefix).
pub fn fence_key(resource: &str) -> String {
    format!("redfence:fence:{{{resource}}}")
}

/// Writes a lock value as another client would hold it: `random:identity`.
pub fn hold_as(server: &RedisServer, resource: &str, identity: &str) {
    server
        .cmd(&[
            "SET",
            &lock_key(resource),
            &format!("0123456789abcdef:{identity}"),
            "PX",
            "30000",
        ])
        .unwrap();
}

/// How many servers hold the resource's lock key.
pub fn holders(cluster: &RedisServers, resource: &str) -> usize {
    let key = lock_key(resource);
    cluster.iter().filter(|s| s.exists(&key)).count()
}

/// Deletes the lock key on `indices`, or sets it to another holder's value.
pub fn take_away(cluster: &RedisServers, resource: &str, indices: &[usize], replace: bool) {
    let key = lock_key(resource);
    for &i in indices {
        if replace {
            cluster
                .server(i)
                .cmd(&["SET", &key, "someone-else", "PX", "20000"])
                .unwrap();
        } else {
            assert!(cluster.server(i).del(&key), "instance {i} had no key");
        }
    }
}

/// After the keys were taken away on a majority: those instances still
/// hold exactly what the test left there (nothing, or the other holder's
/// value with its own TTL), whatever our client sent them since.
pub fn assert_left_alone(cluster: &RedisServers, resource: &str, indices: &[usize], replace: bool) {
    let key = lock_key(resource);
    for &i in indices {
        let server = cluster.server(i);
        if replace {
            assert_eq!(
                server.get(&key).as_deref(),
                Some("someone-else"),
                "instance {i}: the other holder's key was overwritten"
            );
            let pttl = server.pttl(&key);
            assert!(
                pttl > 0 && pttl <= 20_000,
                "instance {i}: the other holder's TTL was changed: {pttl}"
            );
        } else {
            assert!(
                !server.exists(&key),
                "instance {i}: an expired lease was brought back: {:?}",
                server.get(&key)
            );
        }
    }
}

/// How many servers have a subscriber on the resource's release channel
/// (`PUBSUB NUMSUB`): a waiting lock call listens there for the release.
pub fn subscribers(cluster: &RedisServers, resource: &str) -> usize {
    subscribers_on(cluster, &format!("redfence:released:{{{resource}}}"))
}

/// How many servers have a subscriber on `channel`.
pub fn subscribers_on(cluster: &RedisServers, channel: &str) -> usize {
    cluster
        .iter()
        .filter(|s| {
            let reply = s.cmd(&["PUBSUB", "NUMSUB", channel]);
            matches!(reply, Ok(redis::Value::Array(items))
                if matches!(items.get(1), Some(redis::Value::Int(n)) if *n > 0))
        })
        .count()
}
