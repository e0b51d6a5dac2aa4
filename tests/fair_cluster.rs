//! Fair locks on Redis Cluster positions: the queue's keys share the
//! lock's `{name}` hash tag, so one shard of each position holds them
//! all, and waiters are granted in the order they asked.

mod common;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::{eventually, lock_key};
use redfence::testing::ShardedCluster;
use redfence::{LockOptions, Position, Redlock};

fn positions_client(positions: &[ShardedCluster]) -> Redlock {
    Redlock::builder(positions.iter().map(|c| Position::cluster(c.seed_urls())))
        .instance_timeout(Duration::from_millis(500))
        .build()
        .expect("client builds")
}

/// Waiters queued on each position's shard that owns the lock key.
fn queued(positions: &[ShardedCluster], name: &str) -> Vec<i64> {
    let queue = format!("redfence:fair:{{{name}}}:queue");
    positions
        .iter()
        .map(|c| {
            let owner = c.master(c.master_for_key(&lock_key(name)));
            let mut conn = owner.connection();
            redis::cmd("ZCARD")
                .arg(&queue)
                .query(&mut conn)
                .unwrap_or(0)
        })
        .collect()
}

#[test]
fn waiters_on_cluster_positions_are_granted_in_order() {
    let positions: Vec<ShardedCluster> = (0..3).map(|_| ShardedCluster::start(2)).collect();
    let locks = positions_client(&positions);
    let holder = locks.fair_lock("sharded").lock().unwrap();
    let granted = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let (locks, granted) = (positions_client(&positions), Arc::clone(&granted));
        waiters.push(
            thread::Builder::new()
                .name(format!("cluster-waiter-{i}"))
                .spawn(move || {
                    let options = LockOptions::new().wait(Duration::from_secs(30));
                    let guard = locks.fair_lock("sharded").lock_with(options).unwrap();
                    granted.lock().unwrap().push(i);
                    guard.release().unwrap();
                })
                .unwrap(),
        );
        assert!(
            eventually(Duration::from_secs(10), || queued(&positions, "sharded")
                .iter()
                .filter(|q| **q > i as i64)
                .count()
                >= 2),
            "waiter {i} never queued: {:?}",
            queued(&positions, "sharded")
        );
    }
    holder.release().unwrap();
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(*granted.lock().unwrap(), [0, 1, 2]);
}
