//! Fencing tokens and the counters they come from.

use redfence::testing::RedisServer;
use redfence::{LockOptions, Redlock};

use super::fence_key;

/// The token of one grant of `resource` with the client's default options,
/// released at once.
pub fn token_of(locks: &Redlock, resource: &str) -> u64 {
    let guard = locks.lock(resource).expect("lock");
    let token = guard.token().get();
    guard.release().expect("release");
    token
}

/// The token of one grant of `resource` with `options`, released at once.
pub fn token_with(locks: &Redlock, resource: &str, options: LockOptions) -> u64 {
    let guard = locks.lock_with(resource, options).expect("lock");
    let token = guard.token().get();
    guard.release().expect("release");
    token
}

pub fn strictly_increasing(tokens: &[u64]) -> bool {
    tokens.windows(2).all(|w| w[0] < w[1])
}

/// The resource's fencing counter on `server`, if it has one.
pub fn counter(server: &RedisServer, resource: &str) -> Option<u64> {
    server
        .get(&fence_key(resource))
        .map(|c| c.parse().expect("a counter"))
}

/// A server's clock (`TIME`) in microseconds since 1970: the unit of
/// fencing counters seeded from the clock.
pub fn server_micros(server: &RedisServer) -> u64 {
    let mut conn = server.connection();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    secs * 1_000_000 + micros
}
