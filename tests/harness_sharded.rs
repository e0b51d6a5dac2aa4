//! The harness's real Redis Cluster ([`ShardedCluster`]): slots where it
//! says, migrations that keep TTLs and redirect clients, failover.

use std::time::Duration;

use redfence::testing::{key_slot, ShardedCluster};

/// The error code of a reply, e.g. `"MOVED"`, if the command failed.
fn set_error(con: &mut redis::Connection, key: &str) -> Option<String> {
    let result: redis::RedisResult<()> = redis::cmd("SET").arg(key).arg("v").query(con);
    result.err().map(|e| {
        e.code()
            .map(str::to_string)
            .unwrap_or_else(|| e.to_string())
    })
}

#[test]
fn keys_land_where_the_harness_says() {
    let cluster = ShardedCluster::start(3);
    assert_eq!(cluster.len(), 3);
    assert_eq!(cluster.seed_urls().len(), 3);
    assert!(cluster.replicas().is_empty());
    let mut ids: Vec<String> = (0..3).map(|i| cluster.node_id(i)).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3);

    for key in ["foo", "bar", "{user1000}.following", "123456789", "k:17"] {
        let server_slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut cluster.master(0).connection())
            .unwrap();
        assert_eq!(cluster.slot_of(key), server_slot, "slot of {key:?}");
        let owner = cluster.master_for_key(key);
        for (i, master) in cluster.masters().into_iter().enumerate() {
            let mut con = master.connection();
            let error = set_error(&mut con, key);
            if i == owner {
                assert_eq!(error, None, "SET {key:?} on its owner {i}");
            } else {
                assert_eq!(error.as_deref(), Some("MOVED"), "SET {key:?} on {i}");
            }
        }
        assert_eq!(cluster.master(owner).get(key).as_deref(), Some("v"));
    }
    for i in 0..3 {
        let key = cluster.key_on(i, "on:");
        assert_eq!(cluster.master_for_key(&key), i);
    }
}

#[test]
fn one_and_two_masters_work() {
    for n in [1, 2] {
        let cluster = ShardedCluster::start(n);
        assert_eq!(cluster.len(), n);
        for key in ["a", "b", "c", "d"] {
            let owner = cluster.master_for_key(key);
            assert!(owner < n);
            assert_eq!(
                set_error(&mut cluster.master(owner).connection(), key),
                None
            );
        }
        assert_eq!(cluster.master_of_slot(0), 0);
        assert_eq!(cluster.master_of_slot(16383), n - 1);
        cluster.wait_converged();
    }
}

#[test]
fn a_migrated_slot_keeps_keys_and_ttls_and_redirects() {
    let cluster = ShardedCluster::start(3);
    let key = cluster.key_on(0, "ttl:");
    let slot = key_slot(&key);
    let from = cluster.master(0);
    from.cmd(&["SET", &key, "v", "PX", "60000"]).unwrap();

    let migration = cluster.begin_migration(slot, 2);
    assert_eq!(
        (migration.from(), migration.to(), migration.slot()),
        (0, 2, slot)
    );
    // Half-way: the source still serves the key it holds, and sends ASK
    // for one it does not.
    let absent = (0..100_000)
        .map(|n| format!("{{{key}}}:{n}"))
        .find(|k| key_slot(k) == slot)
        .unwrap();
    let mut con = from.connection();
    let _: () = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
    let err = redis::cmd("GET")
        .arg(&absent)
        .query::<Option<String>>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("ASK"), "{err}");
    migration.move_key(&key);
    let err = redis::cmd("GET")
        .arg(&key)
        .query::<Option<String>>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("ASK"), "a moved key: {err}");
    migration.finish();

    assert_eq!(cluster.master_of_slot(slot), 2);
    let to = cluster.master(2);
    assert_eq!(to.get(&key).as_deref(), Some("v"));
    let ttl = to.pttl(&key);
    assert!(ttl > 50_000 && ttl <= 60_000, "TTL {ttl} ms after the move");
    let left = from
        .cmd(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()])
        .unwrap();
    assert_eq!(left, redis::Value::Int(0));
    assert_eq!(
        set_error(&mut from.connection(), &key).as_deref(),
        Some("MOVED")
    );
    assert_eq!(set_error(&mut to.connection(), &key), None);

    // And back in one call, with a few more keys in the slot.
    let keys: Vec<String> = (0..250)
        .map(|n| format!("{{{key}}}:{n}"))
        .filter(|k| key_slot(k) == slot)
        .collect();
    for k in &keys {
        to.cmd(&["SET", k, "x", "EX", "100"]).unwrap();
    }
    cluster.migrate_slot(slot, 1);
    assert_eq!(cluster.master_for_key(&key), 1);
    let one = cluster.master(1);
    assert!(keys.iter().all(|k| one.exists(k)));
    assert!(one.pttl(&keys[0]) > 90_000);
    // (The SET above dropped its TTL.)
    assert_eq!(one.pttl(&key), -1);
    cluster.migrate_slot(slot, 1); // nothing to do
}

#[test]
fn a_replica_takes_over_a_stopped_master() {
    let cluster = ShardedCluster::start_with_replicas(3, 1);
    assert_eq!(cluster.replicas().len(), 3);
    assert_eq!(cluster.master_of_replica(1), 1);
    let key = cluster.key_on(1, "fo:");
    cluster.master(1).cmd(&["SET", &key, "v"]).unwrap();
    let old_master = cluster.master(1).port();
    let replica = cluster.replica(1).port();
    // Replication is asynchronous: wait until the replica has the key.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while cluster.replica(1).cmd(&["DBSIZE"]).unwrap() != redis::Value::Int(1) {
        assert!(
            std::time::Instant::now() < deadline,
            "the key never replicated"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    cluster.stop_master(1);
    cluster.failover(1);
    assert_eq!(cluster.master(1).port(), replica);
    assert_eq!(cluster.replica(1).port(), old_master);
    assert_eq!(cluster.master_for_key(&key), 1);
    assert_eq!(cluster.master(1).get(&key).as_deref(), Some("v"));
    assert_eq!(set_error(&mut cluster.master(1).connection(), &key), None);

    // The old master comes back as a replica of the new one.
    cluster.replica(1).cont();
    cluster.wait_converged();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let role = cluster.replica(1).cmd(&["ROLE"]).unwrap();
        let redis::Value::Array(fields) = role else {
            panic!("ROLE: {role:?}")
        };
        if fields.first() == Some(&redis::Value::BulkString(b"slave".to_vec())) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still {fields:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_single_master_fails_over_with_takeover() {
    let cluster = ShardedCluster::start_with_replicas(1, 1);
    let replica = cluster.replica(0).port();
    cluster.stop_master(0);
    cluster.takeover(0);
    assert_eq!(cluster.master(0).port(), replica);
    assert_eq!(cluster.master_of_slot(0), 0);
    assert_eq!(set_error(&mut cluster.master(0).connection(), "x"), None);
}
