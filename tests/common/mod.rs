//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use redfence::testing::RedisServers;
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

pub fn lock_key(resource: &str) -> String {
    format!("redfence:lock:{{{resource}}}")
}

pub fn fence_key(resource: &str) -> String {
    format!("redfence:fence:{{{resource}}}")
}

/// How many servers hold the resource's lock key.
pub fn holders(cluster: &RedisServers, resource: &str) -> usize {
    let key = lock_key(resource);
    cluster.iter().filter(|s| s.exists(&key)).count()
}

/// How many servers have a subscriber on the resource's release channel
/// (`PUBSUB NUMSUB`): a waiting lock call listens there for the release.
pub fn subscribers(cluster: &RedisServers, resource: &str) -> usize {
    let channel = format!("redfence:released:{{{resource}}}");
    cluster
        .iter()
        .filter(|s| {
            let reply = s.cmd(&["PUBSUB", "NUMSUB", &channel]);
            matches!(reply, Ok(redis::Value::Array(items))
                if matches!(items.get(1), Some(redis::Value::Int(n)) if *n > 0))
        })
        .count()
}
