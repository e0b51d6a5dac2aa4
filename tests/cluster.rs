//! Redis Cluster positions, end to end on real clusters: three positions
//! of three shard masters each (nine `redis-server --cluster-enabled yes`
//! processes), with shards stopped, slots migrated under held guards and a
//! replica promoted.

mod common;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{eventually, fence_key, lock_key};
use redfence::testing::{key_slot, FencedStore, RedisServer, ShardedCluster};
use redfence::{Error, LockOptions, Position, Redlock, RedlockBuilder};

/// `n` clusters of `shards` masters each, started in parallel.
fn clusters(n: usize, shards: usize) -> Vec<ShardedCluster> {
    std::thread::scope(|s| {
        let started: Vec<_> = (0..n)
            .map(|_| s.spawn(move || ShardedCluster::start(shards)))
            .collect();
        started
            .into_iter()
            .map(|h| h.join().expect("cluster start-up panicked"))
            .collect()
    })
}

/// A client over the clusters, with an instance timeout that two cores
/// busy with dozens of servers do not reach.
fn positions_builder(positions: &[ShardedCluster]) -> RedlockBuilder {
    Redlock::builder(positions.iter().map(|c| Position::cluster(c.seed_urls())))
        .instance_timeout(Duration::from_millis(500))
}

fn positions_client(positions: &[ShardedCluster]) -> Redlock {
    positions_builder(positions).build().expect("client builds")
}

/// The master of `cluster` that owns `resource`'s keys.
fn owner<'a>(cluster: &'a ShardedCluster, resource: &str) -> &'a RedisServer {
    cluster.master(cluster.master_for_key(&lock_key(resource)))
}

/// A resource whose keys live on master `i` of `cluster`.
fn resource_on(cluster: &ShardedCluster, i: usize, prefix: &str) -> String {
    (0..100_000)
        .map(|n| format!("{prefix}{n}"))
        .find(|r| cluster.master_for_key(&lock_key(r)) == i)
        .expect("some name hashes to every master")
}

/// How many positions hold `resource`'s lock key (on the shard that owns
/// it).
fn position_holders(positions: &[ShardedCluster], resource: &str) -> usize {
    positions
        .iter()
        .filter(|c| owner(c, resource).exists(&lock_key(resource)))
        .count()
}

/// Every lock key left on any master of any position.
fn lock_keys_left(positions: &[ShardedCluster]) -> Vec<String> {
    positions
        .iter()
        .flat_map(|c| c.masters())
        .flat_map(|m| m.keys("redfence:lock:*"))
        .collect()
}

#[test]
fn exclusion_and_increasing_tokens_under_contention_with_keys_on_every_shard() {
    let positions = clusters(3, 3);
    let store = FencedStore::new();
    let resources: Vec<String> = (0..12).map(|i| format!("job:{i}")).collect();
    let tokens: Mutex<HashMap<String, Vec<u64>>> = Mutex::new(HashMap::new());
    let in_use: Mutex<HashMap<String, bool>> = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        for t in 0..4 {
            let locks = positions_client(&positions);
            let (store, resources, tokens, in_use) = (&store, &resources, &tokens, &in_use);
            s.spawn(move || {
                for k in 0..30 {
                    let resource = &resources[(t * 7 + k) % resources.len()];
                    let guard = locks
                        .lock_with(resource, LockOptions::new().wait(Duration::from_secs(20)))
                        .expect("every call gets the lock in time");
                    let was = in_use
                        .lock()
                        .unwrap()
                        .insert(resource.clone(), true)
                        .unwrap_or(false);
                    assert!(!was, "{resource} was held twice at once");
                    store
                        .write(resource, guard.token().get(), format!("{t}:{k}"))
                        .expect("a holder's write is never stale");
                    tokens
                        .lock()
                        .unwrap()
                        .entry(resource.clone())
                        .or_default()
                        .push(guard.token().get());
                    in_use.lock().unwrap().insert(resource.clone(), false);
                    guard.release().expect("release");
                }
            });
        }
    });
    assert_eq!(store.rejected_count(), 0);
    for (resource, seq) in tokens.into_inner().unwrap() {
        assert!(
            seq.windows(2).all(|w| w[0] < w[1]),
            "{resource}: tokens {seq:?}"
        );
    }
    // The resources spread over every shard of every position.
    for (p, cluster) in positions.iter().enumerate() {
        for (i, master) in cluster.masters().into_iter().enumerate() {
            assert!(
                !master.keys("redfence:fence:*").is_empty(),
                "position {p}, shard {i} holds no key"
            );
        }
    }
    // Each release is confirmed by a quorum; the third lands just after.
    assert!(eventually(Duration::from_secs(5), || lock_keys_left(
        &positions
    )
    .is_empty()));
}

#[test]
fn a_stopped_shard_takes_out_only_its_slots_on_its_position() {
    let positions = clusters(3, 3);
    let locks = positions_builder(&positions)
        .instance_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let down = resource_on(&positions[0], 0, "down-");
    let up = resource_on(&positions[0], 1, "up-");
    locks.lock(&up).unwrap().release().unwrap();
    positions[0].master(0).stop();
    // Both are granted: the other positions carry the quorum for `down`.
    let wait = LockOptions::new().wait(Duration::from_secs(5));
    let g_down = locks
        .lock_with(&down, wait)
        .expect("two positions of three answer");
    let g_up = locks.lock_with(&up, wait).expect("every position answers");
    // Position 0 cannot grant `down`: both others did.
    assert_eq!(position_holders(&positions[1..], &down), 2);
    assert!(eventually(Duration::from_secs(5), || owner(
        &positions[0],
        &up
    )
    .exists(&lock_key(&up))));
    // Ping names the frozen shard, and only it.
    let report = locks.ping();
    let port = positions[0].master(0).port();
    let failed: Vec<&String> = report
        .iter()
        .filter(|(_, r)| r.is_err())
        .map(|(n, _)| n)
        .collect();
    assert_eq!(report.len(), 9, "{report:?}");
    assert_eq!(failed.len(), 1, "{report:?}");
    assert!(
        failed[0].starts_with("cluster #0 shard") && failed[0].ends_with(&format!(":{port}")),
        "{failed:?}"
    );
    positions[0].master(0).cont();
    g_down.release().unwrap();
    g_up.release().unwrap();
}

#[test]
fn a_slot_migrated_under_a_held_guard_keeps_extend_release_and_tokens() {
    let positions = clusters(3, 3);
    let locks = positions_client(&positions);
    let resource = "migrating";
    let opts = LockOptions::new().ttl(Duration::from_millis(1500));
    let guard = locks.lock_with(resource, opts).unwrap();
    let first = guard.token();
    // Move the slot on two positions while the guard is held.
    let slot = key_slot(lock_key(resource));
    for cluster in &positions[..2] {
        let from = cluster.master_of_slot(slot);
        cluster.migrate_slot(slot, (from + 1) % cluster.len());
    }
    for cluster in &positions {
        let at = owner(cluster, resource);
        assert!(
            at.exists(&lock_key(resource)),
            "the lock moved with its slot"
        );
        assert!(
            at.exists(&fence_key(resource)),
            "the counter moved with its lock"
        );
    }
    // The watchdog keeps it past several TTLs, through the redirects.
    std::thread::sleep(Duration::from_millis(3500));
    assert!(guard.is_held(), "{:?}", guard.ensure_held());
    guard
        .extend(Duration::from_secs(5))
        .expect("extend after the move");
    guard.release().expect("release after the move");
    // Decided at a quorum; the last position's release may still be on
    // its way.
    assert!(eventually(Duration::from_secs(5), || position_holders(
        &positions, resource
    ) == 0));
    let next = locks.try_lock(resource).unwrap();
    assert!(next.token() > first);
}

#[test]
fn a_half_moved_slot_is_followed_with_asking() {
    let positions = clusters(3, 2);
    let locks = positions_client(&positions);
    let resource = "asked";
    let guard = locks
        .lock_with(resource, LockOptions::new().ttl(Duration::from_secs(5)))
        .unwrap();
    let slot = key_slot(lock_key(resource));
    // On every position the slot goes half-way to the other master, and
    // the resource's keys move: the source answers ASK for them now.
    let migrations: Vec<_> = positions
        .iter()
        .map(|c| {
            let m = c.begin_migration(slot, (c.master_of_slot(slot) + 1) % 2);
            assert!(m.move_keys() >= 2, "the lock and its counter move");
            m
        })
        .collect();
    for (cluster, m) in positions.iter().zip(&migrations) {
        assert!(asking_pttl(cluster.master(m.to()), &lock_key(resource)) > 0);
    }
    // Extension follows the ASK to the importing master.
    guard
        .extend(Duration::from_secs(20))
        .expect("extended through ASKING");
    for (cluster, m) in positions.iter().zip(&migrations) {
        assert!(eventually(Duration::from_secs(5), || asking_pttl(
            cluster.master(m.to()),
            &lock_key(resource)
        ) > 15_000));
    }
    // A release writes a key that has not arrived (its void key), which a
    // half-moved slot refuses with TRYAGAIN; it is sent again until the
    // move is over.
    let _ = guard.release();
    // The move lasts a while, as a real resharding does: the release keeps
    // being refused meanwhile and must still be there to land after it.
    std::thread::sleep(Duration::from_millis(300));
    for m in migrations {
        m.finish();
    }
    assert!(
        eventually(Duration::from_secs(5), || lock_keys_left(&positions)
            .is_empty()),
        "the release never landed: {:?}",
        lock_keys_left(&positions)
    );
    let again = locks.try_lock(resource).unwrap();
    assert!(eventually(Duration::from_secs(5), || position_holders(
        &positions, resource
    ) == 3));
    drop(again);
}

/// `PTTL` of `key` on an importing master, which answers only after
/// `ASKING`.
fn asking_pttl(server: &RedisServer, key: &str) -> i64 {
    let mut con = server.connection();
    let (_, pttl): ((), i64) = redis::pipe()
        .cmd("ASKING")
        .cmd("PTTL")
        .arg(key)
        .query(&mut con)
        .expect("PTTL after ASKING");
    pttl
}

#[test]
fn a_half_moved_slot_on_one_position_leaves_the_quorum_to_the_others() {
    let positions = clusters(3, 2);
    let locks = positions_client(&positions);
    let resource = "half-moved";
    let slot = key_slot(lock_key(resource));
    let from = positions[0].master_of_slot(slot);
    let _migration = positions[0].begin_migration(slot, (from + 1) % 2);
    let guard = locks
        .try_lock(resource)
        .expect("two positions of three grant");
    assert_eq!(position_holders(&positions[1..], resource), 2);
    guard.release().unwrap();
}

#[test]
fn a_waiter_is_woken_by_the_release_on_cluster_positions() {
    let positions = clusters(3, 2);
    let holder = positions_builder(&positions)
        .retry_delay(Duration::from_secs(3))
        .build()
        .unwrap();
    let waiter = positions_builder(&positions)
        .retry_delay(Duration::from_secs(3))
        .build()
        .unwrap();
    let mut handoffs = Vec::new();
    for round in 0..7 {
        let resource = format!("handoff-{round}");
        let guard = holder.lock(&resource).unwrap();
        let released_at = Mutex::new(None);
        std::thread::scope(|s| {
            let waiting = s.spawn(|| {
                let g = waiter.lock(&resource).expect("the waiter gets the lock");
                (Instant::now(), g.token())
            });
            let channel = format!("redfence:released:{{{resource}}}");
            assert!(
                eventually(Duration::from_secs(5), || positions
                    .iter()
                    .all(|c| listening(c, &channel))),
                "round {round}: the waiter never listened"
            );
            let token = guard.token();
            guard.release().unwrap();
            *released_at.lock().unwrap() = Some(Instant::now());
            let (acquired_at, next) = waiting.join().unwrap();
            assert!(next > token);
            handoffs
                .push(acquired_at.saturating_duration_since(released_at.lock().unwrap().unwrap()));
        });
    }
    handoffs.sort();
    // A waiter that slept instead would take its 3 s retry pause.
    // A waiter that missed the announcement would find the lock free at
    // its next check, up to 250 ms later.
    assert!(handoffs[3] < Duration::from_millis(60), "{handoffs:?}");
    // Announced on the channel's shard only, never broadcast to every node.
    for cluster in &positions {
        assert!(calls(cluster, "spublish") >= 7);
        assert_eq!(calls(cluster, "publish"), 0);
    }
}

#[test]
fn a_waiter_follows_its_channel_when_the_slot_moves() {
    let positions = clusters(3, 2);
    let slow = |c: &[ShardedCluster]| {
        positions_builder(c)
            .retry_delay(Duration::from_secs(4))
            .build()
    };
    let (holder, waiter) = (slow(&positions).unwrap(), slow(&positions).unwrap());
    let resource = "moving-waiter";
    let channel = format!("redfence:released:{{{resource}}}");
    let guard = holder.lock(resource).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let g = waiter.lock(resource).expect("the waiter gets the lock");
            (Instant::now(), g.token())
        });
        assert!(eventually(Duration::from_secs(5), || positions
            .iter()
            .all(|c| listening(c, &channel))));
        // The slot moves on every position while the call waits: each old
        // shard drops the subscription, the new one must get it.
        let slot = key_slot(&channel);
        for c in &positions {
            c.migrate_slot(slot, (c.master_of_slot(slot) + 1) % 2);
        }
        assert!(
            eventually(Duration::from_secs(5), || positions
                .iter()
                .all(|c| listening(c, &channel))),
            "the waiter did not subscribe again where the slot went"
        );
        let token = guard.token();
        guard.release().unwrap();
        let released = Instant::now();
        let (acquired, next) = waiting.join().unwrap();
        assert!(next > token);
        assert!(
            acquired.saturating_duration_since(released) < Duration::from_millis(150),
            "woken {:?} after the release",
            acquired.saturating_duration_since(released)
        );
    });
}

#[test]
fn an_election_on_cluster_positions_is_observed() {
    let positions = clusters(3, 2);
    let (a, b, watcher) = (
        positions_client(&positions),
        positions_client(&positions),
        positions_client(&positions),
    );
    let (ea, eb, ew) = (
        a.election("leader").unwrap(),
        b.election("leader").unwrap(),
        watcher.election("leader").unwrap(),
    );
    let events = ew.observe();
    let mut terms = Vec::new();
    for e in [&ea, &eb, &ea] {
        let lead = e.campaign().unwrap();
        let term = lead.term();
        let seen = loop {
            match events.recv_timeout(Duration::from_secs(5)) {
                Ok(redfence::LeaderEvent::Elected { term: Some(t), .. }) if t == term => break t,
                Ok(_) => continue,
                Err(e) => panic!("the observer missed term {term}: {e}"),
            }
        };
        terms.push(seen);
        lead.resign().unwrap();
    }
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
}

/// Whether the shard that owns `channel` has a sharded subscriber on it.
fn listening(cluster: &ShardedCluster, channel: &str) -> bool {
    let shard = cluster.master(cluster.master_for_key(channel));
    matches!(shard.cmd(&["PUBSUB", "SHARDNUMSUB", channel]),
        Ok(redis::Value::Array(items))
            if matches!(items.get(1), Some(redis::Value::Int(n)) if *n > 0))
}

/// Calls of `command` on every master of the cluster.
fn calls(cluster: &ShardedCluster, command: &str) -> u64 {
    cluster
        .masters()
        .iter()
        .map(|m| m.commandstats().get(command).copied().unwrap_or(0))
        .sum()
}

#[test]
fn lock_all_across_shards_is_all_or_nothing_on_each_position() {
    let positions = clusters(3, 3);
    let locks = positions_client(&positions);
    let other = positions_client(&positions);
    // Members on every shard of the first position.
    let set: Vec<String> = (0..3)
        .map(|i| resource_on(&positions[0], i, "set-"))
        .collect();
    let set: Vec<&str> = set.iter().map(String::as_str).collect();
    let held = other.lock(set[1]).unwrap();
    match locks.try_lock_all(&set) {
        Err(Error::Contended { .. }) => {}
        other => panic!("expected Contended, got {other:?}"),
    }
    // Members granted on some shard are undone there (before the vote is
    // counted, on the positions the decision waited for): only the other
    // client's keys are left, long before any TTL. (It holds `set[1]` on a
    // quorum, and maybe on the third position too.)
    assert!(
        eventually(Duration::from_secs(5), || position_holders(
            &positions, set[0]
        ) == 0
            && position_holders(&positions, set[2]) == 0),
        "{:?}",
        lock_keys_left(&positions)
    );
    assert!(position_holders(&positions, set[1]) >= 2);
    let first = held.token();
    held.release().unwrap();
    // Released on a quorum; wait for the third position too, or the set
    // is (rightly) refused and undone there.
    assert!(eventually(Duration::from_secs(5), || position_holders(
        &positions, set[1]
    ) == 0));
    let all = locks.try_lock_all(&set).expect("granted once free");
    for r in &set {
        assert!(
            eventually(Duration::from_secs(5), || position_holders(&positions, r)
                == 3),
            "{r}"
        );
    }
    assert!(all.token(set[1]).unwrap() > first);
    all.extend(Duration::from_secs(10))
        .expect("extended on every shard");
    for cluster in &positions {
        assert!(eventually(Duration::from_secs(5), || owner(
            cluster, set[2]
        )
        .pttl(&lock_key(set[2]))
            > 8000));
    }
    all.release().expect("released on every shard");
    assert!(eventually(Duration::from_secs(5), || lock_keys_left(
        &positions
    )
    .is_empty()));
}

#[test]
fn mixed_standalone_and_cluster_positions_and_the_url_form() {
    let sharded = clusters(2, 2);
    let standalone = RedisServer::start();
    let url = {
        let seeds = sharded[1].seed_urls();
        let second = seeds[1].trim_start_matches("redis://").to_string();
        format!(
            "redis+cluster://{}?addr={second}",
            seeds[0].trim_start_matches("redis://")
        )
    };
    let locks = Redlock::builder([
        Position::cluster(sharded[0].seed_urls()),
        Position::from(url.as_str()),
        Position::from(standalone.url()),
    ])
    .instance_timeout(Duration::from_millis(500))
    .build()
    .unwrap();
    let guard = locks.try_lock("mixed").unwrap();
    assert!(eventually(Duration::from_secs(5), || {
        owner(&sharded[0], "mixed").exists(&lock_key("mixed"))
            && owner(&sharded[1], "mixed").exists(&lock_key("mixed"))
            && standalone.exists(&lock_key("mixed"))
    }));
    let report = locks.ping();
    assert_eq!(report.len(), 5, "{report:?}");
    assert!(report.iter().all(|(_, r)| r.is_ok()), "{report:?}");
    assert!(report[4].0.ends_with(&format!(":{}/0", standalone.port())));
    assert_eq!(
        locks.holder("mixed").unwrap().map(|h| h.instances.len()),
        Some(3)
    );
    guard.release().unwrap();
}

/// Whether a replica holds `key` (read after `READONLY`).
fn replica_has(server: &RedisServer, key: &str) -> bool {
    let mut con = server.connection();
    let (_, n): ((), i64) = redis::pipe()
        .cmd("READONLY")
        .cmd("EXISTS")
        .arg(key)
        .query(&mut con)
        .expect("EXISTS after READONLY");
    n == 1
}

#[test]
fn a_promoted_replica_never_repeats_a_token() {
    let mut positions = clusters(2, 2);
    // Three masters, so that two still vote for the failover.
    positions.insert(0, ShardedCluster::start_with_replicas(3, 1));
    let locks = positions_client(&positions);
    let resource = resource_on(&positions[0], 0, "failover-");
    let first = locks.lock(&resource).unwrap();
    let t1 = first.token();
    first.release().unwrap();
    // Another lock on the same master, replicated before the master
    // freezes, is released while it is frozen: the release must follow
    // its slot to the promoted replica.
    let replica = (0..positions[0].replicas().len())
        .find(|r| positions[0].master_of_replica(*r) == 0)
        .expect("master 0 has a replica");
    let held_name = resource_on(&positions[0], 0, "held-");
    let held = locks.lock(&held_name).unwrap();
    assert!(eventually(Duration::from_secs(5), || replica_has(
        positions[0].replica(replica),
        &lock_key(&held_name)
    )));
    // The master owning the resources freezes; its replica takes over.
    let old = positions[0].master(0);
    old.stop();
    drop(held);
    positions[0].failover(replica);
    let promoted = positions[0].master(0);
    assert!(!std::ptr::eq(old, promoted));
    assert!(
        eventually(Duration::from_secs(10), || !promoted
            .exists(&lock_key(&held_name))),
        "the release stayed with the frozen master"
    );
    // Every grant's token exceeds the last; the position follows the
    // failover (a frozen shard makes it read the slot map again), so the
    // promoted replica soon holds the lock there.
    let mut last = t1;
    let followed = eventually(Duration::from_secs(10), || {
        let guard = locks
            .lock_with(&resource, LockOptions::new().wait(Duration::from_secs(5)))
            .unwrap();
        assert!(guard.token() > last, "{} after {}", guard.token(), last);
        last = guard.token();
        let there = promoted.exists(&lock_key(&resource));
        guard.release().unwrap();
        there
    });
    assert!(
        followed,
        "the first position never used the promoted replica"
    );
    old.cont();
}

#[test]
fn cluster_positions_are_checked_when_built() {
    let err = |b: RedlockBuilder| match b.build() {
        Err(Error::InvalidConfig { reason }) => reason,
        other => panic!("expected InvalidConfig, got {other:?}"),
    };
    let none: [&str; 0] = [];
    assert!(err(Redlock::builder([Position::cluster(none)])).contains("without seed nodes"));
    let why = err(Redlock::builder([Position::from(
        "redis+cluster://:s3cret@h:1?addr=h2:x",
    )]));
    assert!(
        why.contains("instance #0") && why.contains("bad port"),
        "{why}"
    );
    assert!(!why.contains("s3cret"));
    let why = err(Redlock::builder([Position::cluster(["redis://h:1/3"])]));
    assert!(why.contains("database 0"), "{why}");
    let why = err(Redlock::builder([
        Position::cluster(["redis://h:1"]),
        Position::from("redis://h:1"),
        Position::from("redis://h:2"),
    ]));
    assert!(why.contains("listed twice"), "{why}");
}

#[test]
fn a_cluster_that_cannot_be_reached_fails_its_calls_in_time() {
    let positions = clusters(2, 1);
    // A port nothing listens on, as the third position's only seed.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let locks = Redlock::builder([
        Position::cluster(positions[0].seed_urls()),
        Position::cluster(positions[1].seed_urls()),
        Position::cluster([format!("redis://127.0.0.1:{dead}")]),
    ])
    .connect_timeout(Duration::from_millis(500))
    .build()
    .unwrap();
    let start = Instant::now();
    let guard = locks.try_lock("reachable").expect("two positions of three");
    assert!(start.elapsed() < Duration::from_secs(3));
    let report = locks.ping();
    assert!(report.last().unwrap().1.is_err(), "{report:?}");
    assert!(
        report.last().unwrap().0.starts_with("cluster #2"),
        "{report:?}"
    );
    guard.release().unwrap();
}

#[test]
fn a_least_privilege_user_can_lock_on_a_cluster() {
    // Every node gets the user the cluster rules describe, and nothing else.
    let rules = redfence::acl_cluster_rules("redfence:");
    let positions = clusters(3, 2);
    for node in positions.iter().flat_map(|c| c.masters()) {
        let mut args = vec!["ACL", "SETUSER", "locker", "on", ">s3cret"];
        args.extend(rules.iter().map(String::as_str));
        node.cmd(&args).expect("ACL SETUSER");
    }
    let as_user = |c: &ShardedCluster| {
        Position::cluster(
            c.seed_urls()
                .iter()
                .map(|u| u.replace("redis://", "redis://locker:s3cret@")),
        )
    };
    let locks = Redlock::builder(positions.iter().map(as_user))
        .instance_timeout(Duration::from_millis(500))
        .retry_delay(Duration::from_secs(3))
        .build()
        .unwrap();
    let other = positions_client(&positions);
    let set = ["acl-a", "acl-b", "acl-c"];
    let guard = locks.try_lock_all(&set).expect("granted under the ACL");
    guard
        .extend(Duration::from_secs(10))
        .expect("extended under the ACL");
    // A waiter under the ACL is woken through sharded pub/sub.
    let held = other.lock("acl-wait").unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| locks.lock("acl-wait").map(|g| g.token()));
        let channel = "redfence:released:{acl-wait}";
        assert!(eventually(Duration::from_secs(5), || positions
            .iter()
            .all(|c| listening(c, channel))));
        let token = held.token();
        held.release().unwrap();
        assert!(waiting.join().unwrap().expect("the waiter gets it") > token);
    });
    guard.release().expect("released under the ACL");
    // redis-rs's own `CLIENT SETINFO` on connect is refused and ignored.
    let refused: Vec<String> = positions
        .iter()
        .flat_map(|c| c.masters())
        .flat_map(acl_refusals)
        .filter(|object| object != "client|setinfo")
        .collect();
    assert!(refused.is_empty(), "the ACL refused {refused:?}");
}

/// What `ACL LOG` says was refused on `server`: each entry's object.
fn acl_refusals(server: &RedisServer) -> Vec<String> {
    let Ok(redis::Value::Array(entries)) = server.cmd(&["ACL", "LOG"]) else {
        return vec!["ACL LOG failed".to_string()];
    };
    entries
        .iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            fields.chunks(2).find_map(|kv| match kv {
                [redis::Value::BulkString(k), redis::Value::BulkString(v)] if k == b"object" => {
                    Some(String::from_utf8_lossy(v).into_owned())
                }
                _ => None,
            })
        })
        .collect()
}

/// The `redfence` command over cluster positions, as a user runs it.
#[test]
fn the_command_runs_checks_and_pings_cluster_positions() {
    let positions = clusters(2, 2);
    let standalone = RedisServer::start();
    let as_url = |c: &ShardedCluster| {
        let seeds = c.seed_urls();
        format!(
            "redis+cluster://{}?addr={}",
            seeds[0].trim_start_matches("redis://"),
            seeds[1].trim_start_matches("redis://")
        )
    };
    let servers = format!(
        "{},{},{}",
        as_url(&positions[0]),
        as_url(&positions[1]),
        standalone.url()
    );
    let redfence = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_redfence"))
            .args(args)
            .env("REDFENCE_SERVERS", &servers)
            .output()
            .expect("the command starts")
    };
    // `run` holds the lock on every position while the command runs, and
    // `status`, run from inside it, sees it on the owning shard of each.
    let inner = format!(
        "echo token=$REDFENCE_TOKEN; {} status --json --instance-timeout 500ms cron-job",
        env!("CARGO_BIN_EXE_redfence")
    );
    let out = redfence(&[
        "run",
        "-n",
        "--instance-timeout",
        "500ms",
        "cron-job",
        "--",
        "sh",
        "-c",
        &inner,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("token="))
        .and_then(|t| t.trim().parse().ok())
        .expect("the command got its token");
    let status: serde_json::Value = serde_json::from_str(
        stdout
            .lines()
            .find(|l| l.starts_with('{'))
            .expect("status JSON"),
    )
    .unwrap();
    // A quorum at least (the third acquire may still be on its way).
    assert!(status["locked"].as_u64().unwrap_or(0) >= 2, "{status}");
    let rows = status["instances"].as_array().unwrap();
    for (p, cluster) in positions.iter().enumerate() {
        let shard = owner(cluster, "cron-job").port();
        let name = rows[p]["instance"].as_str().unwrap();
        assert_eq!(
            name,
            format!("cluster #{p} shard 127.0.0.1:{shard}"),
            "{status}"
        );
    }
    // A quorum holds the token's counter (a position that answered after
    // the decision may have counted higher on its own).
    let at_least = rows
        .iter()
        .filter(|r| r["fence"].as_u64().unwrap_or(0) >= token)
        .count();
    assert!(at_least >= 2, "token {token}: {status}");
    assert!(
        eventually(Duration::from_secs(5), || lock_keys_left(&positions)
            .is_empty()),
        "released when the command ended"
    );
    // `ping` lists every shard, and exits 69 once a position is out.
    let out = redfence(&["ping", "--json", "--instance-timeout", "500ms"]);
    let ping: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(out.status.success(), "{ping}");
    assert_eq!(ping["instances"].as_array().unwrap().len(), 5, "{ping}");
    assert_eq!(ping["answered"], 3, "{ping}");
    positions[0].master(1).stop();
    standalone.stop();
    let out = redfence(&["ping", "--json", "--instance-timeout", "500ms"]);
    positions[0].master(1).cont();
    standalone.cont();
    let ping: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(69), "{ping}");
    assert_eq!(ping["answered"], 1, "{ping}");
    let text = ping.to_string();
    assert!(!text.contains("s3cret"));
}

/// Managed Redis in cluster mode is reached over TLS: three TLS clusters
/// (each its own CA, all given to the client), every node TLS-only, the
/// cluster bus and redirects on TLS ports.
#[test]
fn tls_cluster_positions_lock_wait_and_lock_all() {
    let options = redfence::testing::ServerOptions {
        tls: true,
        ..Default::default()
    };
    let started: Vec<std::io::Result<ShardedCluster>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let options = options.clone();
                s.spawn(move || ShardedCluster::try_start_with_replicas(2, 0, options))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let positions = match started.into_iter().collect::<std::io::Result<Vec<_>>>() {
        Ok(positions) => positions,
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
            eprintln!("skipped: this server has no TLS ({e})");
            return;
        }
        Err(e) => panic!("TLS clusters did not start: {e}"),
    };
    let roots: Vec<u8> = positions
        .iter()
        .flat_map(|c| c.pki().expect("a TLS cluster has a CA").ca_pem().to_vec())
        .collect();
    let locks = || {
        positions_builder(&positions)
            .tls_certificates(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(roots.clone()),
            })
            .retry_delay(Duration::from_secs(3))
            .build()
            .expect("client builds")
    };
    let (holder, waiter) = (locks(), locks());
    assert!(positions[0].seed_urls()[0].starts_with("rediss://"));
    let guard = holder.lock("tls-job").unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| waiter.lock("tls-job").map(|g| g.token()));
        assert!(eventually(Duration::from_secs(5), || positions
            .iter()
            .all(|c| listening(c, "redfence:released:{tls-job}"))));
        let token = guard.token();
        guard.release().unwrap();
        assert!(waiting.join().unwrap().expect("woken over TLS") > token);
    });
    let set: Vec<String> = (0..2)
        .map(|i| resource_on(&positions[0], i, "tls-set-"))
        .collect();
    let set: Vec<&str> = set.iter().map(String::as_str).collect();
    let all = holder.try_lock_all(&set).expect("a set across TLS shards");
    all.extend(Duration::from_secs(10)).unwrap();
    all.release().unwrap();
    let report = holder.ping();
    assert_eq!(report.len(), 6, "{report:?}");
    assert!(report.iter().all(|(_, r)| r.is_ok()), "{report:?}");
}

/// A semaphore and a reader-writer lock on cluster positions: each keeps
/// all its keys on one shard (its name is their hash tag), the count and
/// the exclusion hold, and waiters are woken through sharded pub/sub.
#[test]
fn semaphores_and_rw_locks_on_cluster_positions() {
    let positions = clusters(3, 2);
    let (a, b) = (positions_client(&positions), positions_client(&positions));
    let pool = a.semaphore("pool", 2);
    let first = pool.acquire().unwrap();
    let second = b.semaphore("pool", 2).acquire().unwrap();
    assert_ne!(first.slot(), second.slot());
    assert!(matches!(pool.try_acquire(), Err(Error::Contended { .. })));
    for cluster in &positions {
        let tagged: Vec<usize> = (0..cluster.masters().len())
            .filter(|i| !cluster.master(*i).keys("redfence:*{pool}*").is_empty())
            .collect();
        assert_eq!(tagged.len(), 1, "one shard holds the semaphore: {tagged:?}");
    }
    let waiting = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            b.semaphore("pool", 2)
                .try_acquire_for(Duration::from_secs(20))
                .map(|p| p.slot())
        });
        let channel = "redfence:released:{pool}:permits";
        assert!(eventually(Duration::from_secs(5), || positions
            .iter()
            .all(|c| listening(c, channel))));
        let freed = first.slot();
        drop(first);
        (waiter.join().unwrap().unwrap(), freed)
    });
    assert_eq!(waiting.0, waiting.1, "the waiter takes the freed slot");
    drop(second);

    let config = a.rw_lock("config");
    let reading = config.read().unwrap();
    let also = b.rw_lock("config").try_read().unwrap();
    assert!(matches!(
        b.rw_lock("config").try_write(),
        Err(Error::Contended { .. })
    ));
    let highest = reading.token().max(also.token());
    drop((reading, also));
    let writing = b
        .rw_lock("config")
        .try_write_for(Duration::from_secs(5))
        .unwrap();
    assert!(writing.token() > highest);
    assert!(matches!(
        a.rw_lock("config").try_read(),
        Err(Error::Contended { .. })
    ));
    writing.release().unwrap();
}
