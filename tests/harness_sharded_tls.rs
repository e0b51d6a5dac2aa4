//! The harness's real Redis Cluster over TLS ([`ShardedCluster`] with
//! `ServerOptions::tls`), as managed Redis in cluster mode with TLS runs:
//! TLS-only nodes sharing one test CA, TLS on the cluster bus, for
//! replication and for `MIGRATE`, and redirects naming the TLS ports.
//! Needs the `tls-rustls` feature and a server built with TLS (Debian's
//! redis-server is); skipped, saying why, with a server built without.

#![cfg(feature = "tls-rustls")]

use std::io;
use std::time::{Duration, Instant};

use redfence::testing::{key_slot, RedisServer, ServerOptions, ShardedCluster};

/// A TLS cluster, or `None` (the test is skipped, saying why) when the
/// server program is a build without TLS.
fn tls_cluster(
    masters: usize,
    replicas_per_master: usize,
    tls_auth_clients: bool,
) -> Option<ShardedCluster> {
    let options = ServerOptions {
        tls: true,
        tls_auth_clients,
        ..Default::default()
    };
    match ShardedCluster::try_start_with_replicas(masters, replicas_per_master, options) {
        Ok(cluster) => Some(cluster),
        Err(e) if e.kind() == io::ErrorKind::Unsupported => {
            let message = e.to_string();
            eprintln!("skipped: {}", message.lines().next().unwrap_or_default());
            None
        }
        Err(e) => panic!("could not start a TLS Redis Cluster: {e}"),
    }
}

/// A connection of a plain client, as a user's would be: built from the
/// node's `rediss://` URL and the cluster's certificates.
fn client_connection(cluster: &ShardedCluster, node: &RedisServer) -> redis::Connection {
    let certs = cluster
        .tls_certificates()
        .expect("a TLS cluster has certificates");
    let client = redis::Client::build_with_tls(node.url(), certs)
        .unwrap_or_else(|e| panic!("a client for {}: {e}", node.url()));
    let con = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("could not connect to {}: {e}", node.url()));
    con.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    con
}

/// `Ok` for a SET its node serves, else the redirect: `("MOVED",
/// "127.0.0.1:port")`.
fn set(con: &mut redis::Connection, key: &str) -> Result<(), (String, String)> {
    let result: redis::RedisResult<()> = redis::cmd("SET").arg(key).arg("v").query(con);
    result.map_err(|e| {
        let code = e
            .code()
            .map(str::to_string)
            .unwrap_or_else(|| e.to_string());
        let addr = e
            .redirect_node()
            .map(|(addr, _)| addr.to_string())
            .unwrap_or_default();
        (code, addr)
    })
}

#[test]
fn a_tls_cluster_serves_and_redirects_to_tls_ports() {
    let Some(cluster) = tls_cluster(3, 0, false) else {
        return;
    };
    assert_eq!(cluster.len(), 3);
    let seeds = cluster.seed_urls();
    assert_eq!(seeds.len(), 3);
    for (i, seed) in seeds.iter().enumerate() {
        let want = format!("rediss://127.0.0.1:{}/", cluster.master(i).port());
        assert_eq!(seed, &want);
    }
    // One CA for all nodes.
    let pki = cluster.pki().expect("a TLS cluster has a PKI");
    for master in cluster.masters() {
        assert_eq!(master.pki().unwrap().ca_pem(), pki.ca_pem());
        assert!(master.cluster_port().is_some());
    }

    for key in ["foo", "bar", "{user1000}.following", "k:17"] {
        let owner = cluster.master_for_key(key);
        let owner_addr = format!("127.0.0.1:{}", cluster.master(owner).port());
        for (i, master) in cluster.masters().into_iter().enumerate() {
            let mut con = client_connection(&cluster, master);
            match set(&mut con, key) {
                Ok(()) => assert_eq!(i, owner, "SET {key:?} served by {i}, not its owner"),
                Err((code, addr)) => {
                    assert_ne!(i, owner, "SET {key:?} on its owner: {code}");
                    assert_eq!(code, "MOVED", "SET {key:?} on {i}");
                    assert_eq!(addr, owner_addr, "MOVED names the owner's TLS port");
                }
            }
        }
        assert_eq!(cluster.master(owner).get(key).as_deref(), Some("v"));
    }

    // A plain-text client gets nowhere: the nodes serve TLS only.
    let plain = format!("redis://127.0.0.1:{}/", cluster.master(0).port());
    let refused = redis::Client::open(plain.as_str())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(1))
        .and_then(|mut con| {
            con.set_read_timeout(Some(Duration::from_secs(1)))?;
            redis::cmd("PING").query::<String>(&mut con)
        });
    assert!(refused.is_err(), "a plain-text PING was answered");
}

#[test]
fn a_slot_migrates_between_tls_nodes_with_client_certificates() {
    let Some(cluster) = tls_cluster(3, 0, true) else {
        return;
    };
    let key = cluster.key_on(0, "ttl:");
    let slot = key_slot(&key);
    cluster
        .master(0)
        .cmd(&["SET", &key, "v", "PX", "60000"])
        .unwrap();

    // Half-way, the source sends ASK naming the target's TLS port.
    let migration = cluster.begin_migration(slot, 2);
    migration.move_key(&key);
    let mut con = client_connection(&cluster, cluster.master(0));
    let err = redis::cmd("GET")
        .arg(&key)
        .query::<Option<String>>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("ASK"), "{err}");
    let target = format!("127.0.0.1:{}", cluster.master(2).port());
    assert_eq!(err.redirect_node().map(|(addr, _)| addr), Some(&*target));
    migration.finish();

    assert_eq!(cluster.master_of_slot(slot), 2);
    let to = cluster.master(2);
    assert_eq!(to.get(&key).as_deref(), Some("v"));
    let ttl = to.pttl(&key);
    assert!(ttl > 50_000 && ttl <= 60_000, "TTL {ttl} ms after the move");
    assert_eq!(
        set(&mut client_connection(&cluster, cluster.master(0)), &key),
        Err(("MOVED".to_string(), target))
    );
    assert_eq!(set(&mut client_connection(&cluster, to), &key), Ok(()));

    // And on in one call, with more keys (MIGRATE in batches over TLS).
    let keys: Vec<String> = (0..250)
        .map(|n| format!("{{{key}}}:{n}"))
        .filter(|k| key_slot(k) == slot)
        .collect();
    // One connection: a TLS handshake per key would take seconds in a
    // debug build.
    let mut pipe = redis::pipe();
    for k in &keys {
        pipe.cmd("SET").arg(k).arg("x").arg("EX").arg(100).ignore();
    }
    pipe.exec(&mut to.connection()).unwrap();
    cluster.migrate_slot(slot, 1);
    assert_eq!(cluster.master_for_key(&key), 1);
    let one = cluster.master(1);
    let present: usize = redis::cmd("EXISTS")
        .arg(&keys)
        .query(&mut one.connection())
        .unwrap();
    assert_eq!(present, keys.len());
    let ttl = one.pttl(&keys[0]);
    assert!(ttl > 90_000, "TTL {ttl} ms of {:?} after the move", keys[0]);
}

#[test]
fn a_tls_replica_takes_over_a_stopped_master() {
    let Some(cluster) = tls_cluster(3, 1, true) else {
        return;
    };
    assert_eq!(cluster.replicas().len(), 3);
    let key = cluster.key_on(1, "fo:");
    cluster.master(1).cmd(&["SET", &key, "v"]).unwrap();
    let old_master = cluster.master(1).port();
    let replica = cluster.replica(1).port();
    // Replication (over TLS) is asynchronous: wait until the replica has
    // the key.
    let deadline = Instant::now() + Duration::from_secs(5);
    while cluster.replica(1).cmd(&["DBSIZE"]).unwrap() != redis::Value::Int(1) {
        assert!(
            Instant::now() < deadline,
            "the key never replicated to {}:\n{}",
            cluster.replica(1).addr(),
            cluster.replica(1).log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    cluster.stop_master(1);
    cluster.failover(1);
    assert_eq!(cluster.master(1).port(), replica);
    assert_eq!(cluster.replica(1).port(), old_master);
    assert_eq!(cluster.master_for_key(&key), 1);
    let mut con = client_connection(&cluster, cluster.master(1));
    assert_eq!(set(&mut con, &key), Ok(()));
    let other = cluster.master(0);
    assert_eq!(
        set(&mut client_connection(&cluster, other), &key),
        Err(("MOVED".to_string(), format!("127.0.0.1:{replica}")))
    );

    // The old master comes back as a replica of the new one, over TLS.
    cluster.replica(1).cont();
    cluster.wait_converged();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let role = cluster.replica(1).cmd(&["ROLE"]).unwrap();
        let redis::Value::Array(fields) = role else {
            panic!("ROLE: {role:?}")
        };
        if fields.first() == Some(&redis::Value::BulkString(b"slave".to_vec())) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} is still {fields:?}:\n{}",
            cluster.replica(1).addr(),
            cluster.replica(1).log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
