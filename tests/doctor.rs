//! The deployment doctor against real servers, each deliberately
//! misconfigured one way: a replica, the same server behind two positions,
//! an eviction policy, a missing permission. (A clock off the others is in
//! `clock_faults.rs`, which runs servers under libfaketime.)

mod common;

use redfence::testing::{RedisServers, ServerOptions};
use redfence::{acl_rules, DoctorReport, Redlock, Severity, Verdict};

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

// --- Verdicts and the margin, each against real misconfigured servers.

const USER: &str = "app";
const PASSWORD: &str = "s3cret-pa55";

/// `n` servers whose user `app` has the documented least privilege.
fn least_privilege(n: usize) -> RedisServers {
    let rules = acl_rules("redfence:").join(" ");
    RedisServers::start_with(
        n,
        ServerOptions {
            acl_users: vec![format!("{USER} on >{PASSWORD} {rules}")],
            ..Default::default()
        },
    )
}

/// Changes user `app` on one server (as its operator would, by mistake).
fn setuser(server: &redfence::testing::RedisServer, rules: &[&str]) {
    let mut args = vec!["ACL", "SETUSER", USER];
    args.extend_from_slice(rules);
    server.cmd(&args).unwrap();
}

fn as_app(cluster: &RedisServers) -> Redlock {
    Redlock::new(cluster.urls_as(USER, PASSWORD)).unwrap()
}

/// The verdict of the row of `server`.
fn verdict(report: &DoctorReport, server: &redfence::testing::RedisServer) -> Verdict {
    let name = name(server);
    report
        .instances
        .iter()
        .find(|row| row.instance.starts_with(&name))
        .unwrap_or_else(|| panic!("no row for {name}: {report:#?}"))
        .verdict
        .clone()
}

fn missing_rules(verdict: &Verdict) -> Vec<String> {
    match verdict {
        Verdict::MissingPermissions { rules } => rules.clone(),
        other => panic!("expected missing permissions, got {other:?}"),
    }
}

/// A wrong password and a missing `+evalsha` on two of five: each named,
/// the other three usable, the margin 0 (one more loss leaves no quorum),
/// and `ping` and the doctor agree that four answered.
#[test]
fn a_minority_refused_or_missing_permissions_is_named_with_the_margin() {
    let cluster = least_privilege(5);
    setuser(cluster.server(1), &["resetpass", ">another-pa55"]);
    setuser(cluster.server(3), &["-evalsha"]);
    let locks = as_app(&cluster);
    let report = locks.doctor();
    assert!(!report.is_healthy(), "{report:#?}");
    assert!(!report.is_outage());
    assert_eq!(
        verdict(&report, cluster.server(1)),
        Verdict::RefusedCredentials
    );
    assert_eq!(
        missing_rules(&verdict(&report, cluster.server(3))),
        ["+evalsha"]
    );
    for i in [0, 2, 4] {
        assert!(
            verdict(&report, cluster.server(i)).is_usable(),
            "{report:#?}"
        );
    }
    assert_eq!((report.usable, report.margin), (3, Some(0)));
    let pinged = locks.ping().iter().filter(|(_, r)| r.is_ok()).count();
    assert_eq!((report.answered, pinged), (4, 4), "{report:#?}");
    assert_eq!(report.reachable, 5);
    let text = format!("{report:?}");
    assert!(!text.contains(PASSWORD) && !text.contains("another-pa55"));
    // Each rule is named once, with what it is for.
    let permissions = findings(&report, &name(cluster.server(3)), "permissions");
    assert_eq!(permissions.len(), 1, "{permissions:?}");
    assert_eq!(
        permissions[0].1.matches("+evalsha").count(),
        1,
        "{permissions:?}"
    );
    assert!(
        permissions[0].1.contains("every primitive"),
        "{permissions:?}"
    );
}

/// The same on a majority: no quorum is usable, and it is a configuration
/// error, not an outage.
#[test]
fn a_majority_refused_or_missing_permissions_leaves_no_margin() {
    let cluster = least_privilege(3);
    setuser(cluster.server(0), &["resetpass", ">another-pa55"]);
    setuser(cluster.server(1), &["-zadd"]);
    let report = as_app(&cluster).doctor();
    assert!(!report.is_healthy() && !report.is_outage(), "{report:#?}");
    assert_eq!((report.usable, report.margin), (1, None));
    assert_eq!(
        verdict(&report, cluster.server(0)),
        Verdict::RefusedCredentials
    );
    assert_eq!(
        missing_rules(&verdict(&report, cluster.server(1))),
        ["+zadd"]
    );
    let zadd = findings(&report, &name(cluster.server(1)), "permissions");
    assert!(zadd[0].1.contains("reader-writer locks"), "{zadd:?}");

    let cluster = least_privilege(3);
    for server in &cluster {
        setuser(server, &["resetpass", ">another-pa55"]);
    }
    let report = as_app(&cluster).doctor();
    assert!(!report.is_outage(), "a refusal is an answer: {report:#?}");
    assert_eq!(
        (report.answered, report.usable, report.margin),
        (0, 0, None)
    );
    assert!(report
        .instances
        .iter()
        .all(|row| row.verdict == Verdict::RefusedCredentials));
}

/// Each command a primitive needs is probed on every instance, the
/// scripts' calls included: a user missing one names it. (Without
/// `+time` no connection is set up, so nothing else is probed there.)
#[test]
fn every_command_of_every_primitive_is_probed() {
    let cluster = least_privilege(5);
    let commands = [
        "zrange",
        "pttl",
        "exists",
        "del",
        "publish",
        "zremrangebyscore",
    ];
    for (i, command) in commands.iter().enumerate() {
        setuser(cluster.server(i % 3), &[&format!("-{command}")]);
    }
    setuser(cluster.server(3), &["-time"]);
    let report = as_app(&cluster).doctor();
    for i in 0..3 {
        let mut wanted: Vec<String> = commands
            .iter()
            .skip(i)
            .step_by(3)
            .map(|c| format!("+{c}"))
            .collect();
        let mut found = missing_rules(&verdict(&report, cluster.server(i)));
        wanted.sort();
        found.sort();
        assert_eq!(found, wanted, "{report:#?}");
    }
    assert_eq!(
        missing_rules(&verdict(&report, cluster.server(3))),
        ["+time"]
    );
}

/// Keys outside the user's pattern: the rule that allows them is named,
/// with a key that was refused.
#[test]
fn a_key_pattern_that_misses_the_prefix_is_named() {
    let cluster = least_privilege(3);
    let locks = Redlock::builder(cluster.urls_as(USER, PASSWORD))
        .key_prefix("other:")
        .build()
        .unwrap();
    let report = locks.doctor();
    assert!(!report.is_healthy());
    for server in &cluster {
        let rules = missing_rules(&verdict(&report, server));
        assert!(rules.contains(&"~other:*".to_string()), "{rules:?}");
        let found = findings(&report, &name(server), "permissions");
        assert!(
            found
                .iter()
                .any(|(_, m)| m.contains("other:") && m.contains("refused")),
            "{found:?}"
        );
    }
}

/// Without an append-only file every instance is usable with a warning
/// that says what a restart costs and the rule; with one, usable.
#[test]
fn no_persistence_is_a_warning_with_the_restart_rule() {
    let cluster = RedisServers::start(3);
    let report = common::client(&cluster).doctor();
    assert!(report.is_healthy(), "{report:#?}");
    for server in &cluster {
        assert_eq!(verdict(&report, server), Verdict::Persistence);
        let found = findings(&report, &name(server), "persistence");
        assert!(
            matches!(found.as_slice(), [(Severity::Warning, m)]
                if m.contains("snapshots off") && m.contains("longest TTL")
                    && m.contains("appendonly yes") && !m.contains("last snapshot")),
            "{found:?}"
        );
    }
    let durable = RedisServers::start_with(
        3,
        ServerOptions {
            aof_fsync_always: true,
            ..Default::default()
        },
    );
    let report = common::client(&durable).doctor();
    assert!(report
        .instances
        .iter()
        .all(|row| row.verdict == Verdict::Usable));
    assert_eq!(report.margin, Some(1));
}

/// One of three down is an outage of one, with the margin; two of three
/// leave no quorum.
#[test]
fn an_instance_down_is_an_outage_not_a_configuration_error() {
    let cluster = RedisServers::start(3);
    let locks = common::client(&cluster);
    common::warm(&locks);
    cluster.server(2).kill();
    let report = locks.doctor();
    assert_eq!(verdict(&report, cluster.server(2)), Verdict::Unreachable);
    assert!(report.is_healthy() && !report.is_outage(), "{report:#?}");
    assert_eq!(
        (report.answered, report.usable, report.margin),
        (2, 2, Some(0))
    );
    let down = findings(&report, &name(cluster.server(2)), "reachable");
    assert!(
        matches!(down.as_slice(), [(Severity::Warning, m)] if m.contains("outage")),
        "{down:?}"
    );
    cluster.server(1).kill();
    let report = locks.doctor();
    assert!(report.is_outage() && !report.is_healthy(), "{report:#?}");
    assert_eq!(report.margin, None);
}

/// The verdicts of a replica, one server twice, and an eviction policy.
#[test]
fn a_replica_the_same_server_twice_and_eviction_each_get_their_verdict() {
    let cluster = RedisServers::start(4);
    let replica = cluster.server(3);
    replica
        .cmd(&[
            "REPLICAOF",
            "127.0.0.1",
            &cluster.server(0).port().to_string(),
        ])
        .unwrap();
    cluster
        .server(1)
        .cmd(&["CONFIG", "SET", "maxmemory", "100mb"])
        .unwrap();
    cluster
        .server(1)
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"])
        .unwrap();
    let mut urls = cluster.urls();
    urls.push(format!("redis://localhost:{}", cluster.server(2).port()));
    let report = Redlock::new(urls).unwrap().doctor();
    assert!(!report.is_healthy() && !report.is_outage(), "{report:#?}");
    assert_eq!(verdict(&report, replica), Verdict::WrongRole);
    assert_eq!(verdict(&report, cluster.server(1)), Verdict::Eviction);
    let twice: Vec<&Verdict> = report
        .instances
        .iter()
        .filter(|row| row.verdict == Verdict::SameServer)
        .map(|row| &row.verdict)
        .collect();
    assert_eq!(twice.len(), 2, "{report:#?}");
    assert_eq!((report.usable, report.margin), (1, None));
}

/// A clock 3 s off the others (a server under libfaketime; skipped where
/// there is none, as in `clock_faults.rs`).
#[test]
fn a_skewed_clock_gets_its_verdict() {
    let options = ServerOptions {
        fake_clock: true,
        ..Default::default()
    };
    let cluster = match RedisServers::try_start_with(3, options) {
        Ok(cluster) => cluster,
        Err(e) => {
            eprintln!("skipped: no server with a fake clock here: {e}");
            return;
        }
    };
    let locks = common::client(&cluster);
    common::warm(&locks);
    cluster
        .server(0)
        .jump_clock_forward(std::time::Duration::from_secs(3));
    let report = locks.doctor();
    assert_eq!(
        verdict(&report, cluster.server(0)),
        Verdict::Clock,
        "{report:#?}"
    );
    assert!(!report.is_healthy());
    assert_eq!(report.margin, Some(0));
}
