//! The deployment doctor against real servers, each deliberately
//! misconfigured one way: a replica, the same server behind two positions,
//! an eviction policy, a missing permission. (A clock off the others is in
//! `clock_faults.rs`, which runs servers under libfaketime.)

mod common;

use redfence::testing::{RedisServers, ServerOptions};
use redfence::{acl_rules, DoctorReport, Redlock, Severity};

/// The findings of `check` on the row of `instance`.
fn findings(report: &DoctorReport, instance: &str, check: &str) -> Vec<(Severity, String)> {
    report
        .instances
        .iter()
        .filter(|row| row.instance.starts_with(instance))
        .flat_map(|row| row.findings.iter())
        .filter(|f| f.check == check)
        .map(|f| (f.severity, f.message.clone()))
        .collect()
}

fn name(server: &redfence::testing::RedisServer) -> String {
    server.addr().to_string()
}

#[test]
fn a_sound_deployment_is_healthy_and_each_instance_is_described() {
    let cluster = RedisServers::start(3);
    let report = common::client(&cluster).doctor();
    assert!(report.is_healthy(), "{report:#?}");
    assert_eq!((report.quorum, report.answered), (2, 3));
    for row in &report.instances {
        assert!(row.reachable);
        assert!(row
            .server
            .as_deref()
            .is_some_and(|s| s.starts_with("redis ") || s.starts_with("valkey ")));
        assert!(
            row.findings.iter().any(|f| f.check == "persistence"),
            "{row:?}"
        );
        assert!(row.findings.iter().any(|f| f.check == "clock"), "{row:?}");
        assert!(
            row.findings.iter().all(|f| f.severity < Severity::Error),
            "{row:?}"
        );
    }
}

#[test]
fn a_replica_is_an_error_and_its_master_is_warned() {
    let cluster = RedisServers::start(3);
    let master = cluster.server(0);
    let replica = cluster.server(2);
    replica
        .cmd(&["REPLICAOF", "127.0.0.1", &master.port().to_string()])
        .unwrap();
    assert!(common::eventually(
        std::time::Duration::from_secs(10),
        || {
            master
                .cmd(&["INFO", "replication"])
                .is_ok_and(|v| format!("{v:?}").contains("connected_slaves:1"))
        }
    ));
    let report = common::client(&cluster).doctor();
    assert!(!report.is_healthy());
    let on_replica = findings(&report, &name(replica), "role");
    assert!(
        matches!(on_replica.as_slice(), [(Severity::Error, m)] if m.contains("replica")),
        "{on_replica:?}"
    );
    let on_master = findings(&report, &name(master), "role");
    assert!(
        matches!(on_master.as_slice(), [(Severity::Warning, m)] if m.contains("failover")),
        "{on_master:?}"
    );
}

#[test]
fn the_same_server_behind_two_positions_is_an_error() {
    let cluster = RedisServers::start(2);
    let twice = format!("redis://localhost:{}", cluster.server(0).port());
    let mut urls = cluster.urls();
    urls.push(twice);
    let report = Redlock::new(urls).unwrap().doctor();
    assert!(!report.is_healthy());
    let flagged: Vec<&str> = report
        .instances
        .iter()
        .filter(|row| {
            row.findings
                .iter()
                .any(|f| f.check == "independence" && f.severity == Severity::Error)
        })
        .map(|row| row.instance.as_str())
        .collect();
    assert_eq!(flagged.len(), 2, "{report:#?}");
    assert!(
        flagged.iter().any(|n| n.starts_with("localhost:")),
        "{flagged:?}"
    );
}

#[test]
fn an_eviction_policy_is_an_error() {
    let cluster = RedisServers::start(3);
    let server = cluster.server(1);
    server
        .cmd(&["CONFIG", "SET", "maxmemory", "100mb"])
        .unwrap();
    server
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])
        .unwrap();
    let report = common::client(&cluster).doctor();
    assert!(!report.is_healthy());
    let found = findings(&report, &name(server), "eviction");
    assert!(
        matches!(found.as_slice(), [(Severity::Error, m)] if m.contains("allkeys-lru")),
        "{found:?}"
    );
    for other in [cluster.server(0), cluster.server(2)] {
        assert!(findings(&report, &name(other), "eviction").is_empty());
    }
}

/// A user without a command the lock needs is named as an error; a user
/// without `+info` (the least privilege of `acl_rules`) gets a notice of
/// the checks the doctor could not make, not an error.
#[test]
fn a_missing_permission_is_named_and_a_missing_info_is_a_notice() {
    let rules: Vec<String> = acl_rules("redfence:")
        .into_iter()
        .filter(|r| r != "+evalsha")
        .collect();
    let cluster = RedisServers::start_with(
        3,
        ServerOptions {
            acl_users: vec![format!("app on >s3cret {}", rules.join(" "))],
            ..Default::default()
        },
    );
    let report = Redlock::new(cluster.urls_as("app", "s3cret"))
        .unwrap()
        .doctor();
    assert!(!report.is_healthy());
    // The probe stops at a majority of refusals: a quorum names it.
    let named = cluster
        .iter()
        .filter(|server| {
            findings(&report, &name(server), "permissions")
                .iter()
                .any(|(s, m)| *s == Severity::Error && m.contains("evalsha"))
        })
        .count();
    assert!(named >= report.quorum, "{report:#?}");
    for server in &cluster {
        let info = findings(&report, &name(server), "info");
        assert!(
            matches!(info.as_slice(), [(Severity::Notice, m)] if m.contains("+info")),
            "{info:?}"
        );
    }
    assert!(!format!("{report:?}").contains("s3cret"));
}

/// A cluster position is checked shard by shard: a sound cluster is
/// healthy; once slots go unserved, the shards that see it say so.
#[test]
fn a_cluster_with_unserved_slots_is_an_error() {
    use redfence::testing::ShardedCluster;
    use redfence::Position;

    let shards = ShardedCluster::start(3);
    let locks = Redlock::builder([Position::cluster(shards.seed_urls())])
        .build()
        .unwrap();
    assert!(common::eventually(
        std::time::Duration::from_secs(10),
        || { locks.doctor().is_healthy() }
    ));
    shards
        .master(0)
        .cmd(&["CLUSTER", "DELSLOTSRANGE", "0", "99"])
        .unwrap();
    assert!(
        common::eventually(std::time::Duration::from_secs(10), || {
            let report = locks.doctor();
            report.instances.iter().any(|row| {
                row.findings
                    .iter()
                    .any(|f| f.check == "cluster" && f.severity == Severity::Error)
            })
        }),
        "{:#?}",
        locks.doctor()
    );
}
