//! The server's own compare-and-delete and compare-and-expire, where it has
//! them (Valkey 9.0+ `DELIFEQ`, Redis 8.4+ `DELEX … IFEQ`, Valkey 8.1+ and
//! Redis 8.4+ `SET … IFEQ … PX`), and the Lua scripts elsewhere: checked
//! through `INFO commandstats` of real servers. The tests run on whichever
//! server the harness starts (`REDFENCE_TEST_SERVER`, see `docs/testing.md`)
//! and expect what that server's version has; CI runs them on Redis 7.0,
//! Valkey 8.1 and 9.1 and Redis 8.2.

mod common;

use std::time::Duration;

use common::{eventually, lock_key};
use redfence::testing::{RedisServer, RedisServers, ServerOptions};
use redfence::{acl_rules, LockGuard, LockOptions, Redlock};

const PATIENCE: Duration = Duration::from_secs(10);

/// What a server of this version runs, from its release notes: not from
/// the library's own probe.
#[derive(Debug, Clone, Copy)]
struct Has {
    /// `DELIFEQ` or `DELEX … IFEQ`: a native release.
    compare_and_delete: bool,
    /// `SET … IFEQ … PX`: a native extension.
    compare_and_expire: bool,
}

fn has(server: &RedisServer) -> Has {
    let version = server.server_version();
    let (name, number) = version.split_once(' ').expect("name and version");
    let mut parts = number.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let major_minor = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    match name {
        "valkey" => Has {
            compare_and_delete: major_minor >= (9, 0),
            compare_and_expire: major_minor >= (8, 1),
        },
        _ => Has {
            compare_and_delete: major_minor >= (8, 4),
            compare_and_expire: major_minor >= (8, 4),
        },
    }
}

/// The calls of each command, per server.
fn calls(cluster: &RedisServers, command: &str) -> Vec<u64> {
    cluster
        .iter()
        .map(|s| s.commandstats().get(command).copied().unwrap_or(0))
        .collect()
}

/// Native releases, whichever command the server has.
fn native_releases(cluster: &RedisServers) -> Vec<u64> {
    let delifeq = calls(cluster, "delifeq");
    let delex = calls(cluster, "delex");
    delifeq.iter().zip(delex).map(|(a, b)| a + b).collect()
}

fn added(before: &[u64], after: &[u64]) -> Vec<u64> {
    before.iter().zip(after).map(|(b, a)| a - b).collect()
}

/// Every server answered every request sent so far (a call returns at a
/// quorum): `command` reached `want` calls more than `before` on each.
fn all_reach(cluster: &RedisServers, command: &str, before: &[u64], want: u64) -> bool {
    eventually(PATIENCE, || {
        let now = if command == "native-release" {
            native_releases(cluster)
        } else {
            calls(cluster, command)
        };
        added(before, &now).iter().all(|&n| n >= want)
    })
}

fn ready(locks: &Redlock) {
    assert!(eventually(PATIENCE, || locks
        .ping()
        .iter()
        .all(|(_, r)| r.is_ok())));
}

/// Three servers, what their version has, and a client that reached them.
fn three() -> (RedisServers, Has, Redlock) {
    let cluster = RedisServers::start(3);
    let has = has(cluster.server(0));
    let locks = Redlock::new(cluster.urls()).unwrap();
    ready(&locks);
    (cluster, has, locks)
}

/// A lock the watchdog leaves alone.
fn held(locks: &Redlock, resource: &str, ttl: Duration) -> LockGuard {
    locks
        .lock_with(resource, LockOptions::new().ttl(ttl).auto_extend(false))
        .unwrap()
}

/// The native release command of the harness's server, if it has one.
fn native_release_command() -> Option<&'static str> {
    let probe = RedisServer::start();
    if !has(&probe).compare_and_delete {
        return None;
    }
    Some(if probe.server_version().starts_with("valkey") {
        "delifeq"
    } else {
        "delex"
    })
}

#[test]
fn release_and_extension_use_the_servers_own_commands_where_it_has_them() {
    let (cluster, has, locks) = three();
    let ttl = Duration::from_secs(5);
    let guard = held(&locks, "native", ttl);
    // The acquire is a script on every server.
    assert!(all_reach(&cluster, "evalsha", &[0, 0, 0], 1));
    let evalsha = calls(&cluster, "evalsha");

    let set = calls(&cluster, "set");
    guard.extend(ttl).unwrap();
    if has.compare_and_expire {
        assert!(all_reach(&cluster, "set", &set, 1), "no SET … IFEQ");
        assert_eq!(calls(&cluster, "evalsha"), evalsha, "extended in Lua");
    } else {
        assert!(all_reach(&cluster, "evalsha", &evalsha, 1), "no extension");
    }

    let evalsha = calls(&cluster, "evalsha");
    let native = native_releases(&cluster);
    let token = guard.token();
    guard.release().unwrap();
    if has.compare_and_delete {
        assert!(
            all_reach(&cluster, "native-release", &native, 1),
            "no DELIFEQ"
        );
        assert_eq!(calls(&cluster, "evalsha"), evalsha, "released in Lua");
    } else {
        assert!(all_reach(&cluster, "evalsha", &evalsha, 1), "no release");
        assert_eq!(native_releases(&cluster), native);
    }
    for server in cluster.iter() {
        assert!(!server.exists(&lock_key("native")));
    }
    // The next holder gets the lock at once, with a higher token.
    let next = locks.try_lock("native").unwrap();
    assert!(next.token() > token);
}

#[test]
fn the_watchdog_keeps_a_lease_with_the_native_extension() {
    let (cluster, has, locks) = three();
    let guard = locks
        .lock_with(
            "watched",
            LockOptions::new().ttl(Duration::from_millis(600)),
        )
        .unwrap();
    assert!(all_reach(&cluster, "evalsha", &[0, 0, 0], 1));
    let evalsha = calls(&cluster, "evalsha");
    let set = calls(&cluster, "set");
    // Three extensions at least: well past the first TTL.
    let command = if has.compare_and_expire {
        "set"
    } else {
        "evalsha"
    };
    let before = if has.compare_and_expire {
        &set
    } else {
        &evalsha
    };
    assert!(
        all_reach(&cluster, command, before, 3),
        "too few extensions"
    );
    assert!(guard.is_held());
    if has.compare_and_expire {
        assert_eq!(calls(&cluster, "evalsha"), evalsha, "extended in Lua");
    }
    guard.release().unwrap();
}

#[test]
fn a_release_that_finds_its_key_gone_still_voids_the_attempt() {
    let (cluster, _, locks) = three();
    let guard = locks.lock("gone").unwrap();
    assert!(eventually(PATIENCE, || cluster
        .iter()
        .all(|s| s.exists(&lock_key("gone")))));
    // As if the key had expired there: a copy of our acquire still on its
    // way must not take the lock back when it lands.
    assert!(cluster.server(0).del(&lock_key("gone")));
    guard.release().unwrap();
    assert!(eventually(PATIENCE, || !cluster
        .server(0)
        .keys("redfence:void:*")
        .is_empty()));
    for i in 1..3 {
        assert!(!cluster.server(i).exists(&lock_key("gone")));
        assert!(cluster.server(i).keys("redfence:void:*").is_empty());
    }
}

const USER: &str = "redfence";
const PASSWORD: &str = "native-pa55word";

fn with_user(rules: &[String]) -> RedisServers {
    RedisServers::start_with(
        3,
        ServerOptions {
            acl_users: vec![format!("{USER} on >{PASSWORD} {}", rules.join(" "))],
            ..Default::default()
        },
    )
}

#[test]
fn an_acl_user_without_the_native_commands_keeps_the_scripts() {
    // The documented rules: no DELIFEQ or DELEX (Redis 7 does not know
    // them), so releases stay in Lua, on every server.
    let cluster = with_user(&acl_rules("redfence:"));
    let locks = Redlock::new(cluster.urls_as(USER, PASSWORD)).unwrap();
    ready(&locks);
    let guard = locks.lock("acl").unwrap();
    assert!(all_reach(&cluster, "evalsha", &[0, 0, 0], 1));
    let evalsha = calls(&cluster, "evalsha");
    guard.release().unwrap();
    assert!(all_reach(&cluster, "evalsha", &evalsha, 1), "no release");
    assert_eq!(native_releases(&cluster), vec![0, 0, 0]);
    assert!(cluster.iter().all(|s| !s.exists(&lock_key("acl"))));
}

#[test]
fn an_acl_user_allowed_the_native_commands_uses_them() {
    let Some(command) = native_release_command() else {
        // Nothing to allow: the server does not know the commands (an ACL
        // rule naming one would be refused).
        return;
    };
    let mut rules = acl_rules("redfence:");
    rules.push(format!("+{command}"));
    let cluster = with_user(&rules);
    let locks = Redlock::new(cluster.urls_as(USER, PASSWORD)).unwrap();
    ready(&locks);
    let guard = locks.lock("acl").unwrap();
    assert!(all_reach(&cluster, "evalsha", &[0, 0, 0], 1));
    let evalsha = calls(&cluster, "evalsha");
    guard.release().unwrap();
    assert!(all_reach(&cluster, "native-release", &[0, 0, 0], 1));
    assert_eq!(calls(&cluster, "evalsha"), evalsha);
}

#[test]
fn a_longer_extension_after_a_native_one_counts_only_the_leases_ttl() {
    let (cluster, has, locks) = three();
    let ttl = Duration::from_secs(3);
    let guard = held(&locks, "longer", ttl);
    guard.extend(ttl).unwrap();
    guard.extend(Duration::from_secs(30)).unwrap();
    // The instances keep the keys for the longer TTL either way.
    assert!(eventually(PATIENCE, || cluster
        .iter()
        .all(|s| s.pttl(&lock_key("longer")) > 20_000)));
    if has.compare_and_expire {
        // The native extension of 3 s may still land late and set 3 s from
        // then: the client counts no more than that.
        assert!(guard.validity() <= ttl, "{:?}", guard.validity());
    } else {
        assert!(guard.validity() > Duration::from_secs(20));
    }
}

#[test]
fn native_commands_off_keeps_the_scripts_everywhere() {
    let cluster = RedisServers::start(3);
    let locks = common::builder(&cluster)
        .native_commands(false)
        .build()
        .unwrap();
    ready(&locks);
    let ttl = Duration::from_secs(5);
    let guard = held(&locks, "scripts", ttl);
    assert!(all_reach(&cluster, "evalsha", &[0, 0, 0], 1));
    let evalsha = calls(&cluster, "evalsha");
    guard.extend(ttl).unwrap();
    assert!(all_reach(&cluster, "evalsha", &evalsha, 1), "no extension");
    let evalsha = calls(&cluster, "evalsha");
    guard.release().unwrap();
    assert!(all_reach(&cluster, "evalsha", &evalsha, 1), "no release");
    assert_eq!(native_releases(&cluster), vec![0, 0, 0]);
}

#[test]
fn an_extension_never_shortens_the_keys_natively_or_not() {
    let cluster = RedisServers::start(3);
    let locks = Redlock::new(cluster.urls()).unwrap();
    ready(&locks);
    let ttl = Duration::from_secs(3);
    let guard = held(&locks, "shorter", ttl);
    guard.extend(Duration::from_secs(30)).unwrap();
    // The lease's own TTL again, while the keys have 30 s: a SET … PX here
    // would cut them to 3 s.
    guard.extend(ttl).unwrap();
    assert!(eventually(PATIENCE, || cluster
        .iter()
        .all(|s| s.pttl(&lock_key("shorter")) > 20_000)));
    let pttl: Vec<i64> = cluster
        .iter()
        .map(|s| s.pttl(&lock_key("shorter")))
        .collect();
    assert!(pttl.iter().all(|&ms| ms > 20_000), "{pttl:?}");
}

#[test]
fn a_native_command_refused_after_connecting_falls_back_to_the_script() {
    let Some(command) = native_release_command() else {
        // The server has no native release to refuse.
        return;
    };
    let mut rules = acl_rules("redfence:");
    rules.push(format!("+{command}"));
    let cluster = with_user(&rules);
    let locks = Redlock::new(cluster.urls_as(USER, PASSWORD)).unwrap();
    ready(&locks);
    // The connections found the command allowed; now it is not.
    for server in cluster.iter() {
        server
            .cmd(&["ACL", "SETUSER", USER, &format!("-{command}")])
            .unwrap();
    }
    let guard = locks.lock("revoked").unwrap();
    assert!(all_reach(&cluster, "evalsha", &[0, 0, 0], 1));
    guard.release().unwrap();
    assert!(eventually(PATIENCE, || cluster
        .iter()
        .all(|s| !s.exists(&lock_key("revoked")))));
    // The next release goes straight to the script.
    let again = locks.lock("revoked").unwrap();
    again.release().unwrap();
}

/// Errors each server counted (`INFO stats`, `total_error_replies`), read
/// on connections opened beforehand: a new connection's set-up (redis-rs's
/// `CLIENT SETINFO`, which Redis 7.0 does not know) counts errors too.
fn error_replies(conns: &mut [redis::Connection]) -> Vec<u64> {
    conns
        .iter_mut()
        .map(|conn| {
            let info: String = redis::cmd("INFO").arg("stats").query(conn).unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("total_error_replies:"))
                .and_then(|n| n.trim().parse().ok())
                .expect("total_error_replies in INFO stats")
        })
        .collect()
}

/// Once connected (the probe's refusals are counted then), the lock path
/// sends nothing the server refuses: no native command a server lacks,
/// on any server.
#[test]
fn the_lock_path_sends_nothing_the_server_refuses() {
    let (cluster, _, locks) = three();
    let mut conns: Vec<redis::Connection> = cluster.iter().map(|s| s.connection()).collect();
    let before = error_replies(&mut conns);
    let ttl = Duration::from_secs(5);
    for round in 0..3 {
        let guard = held(&locks, &format!("clean-{round}"), ttl);
        guard.extend(ttl).unwrap();
        guard.release().unwrap();
        let set = locks
            .lock_all(&[&format!("clean-a-{round}"), &format!("clean-b-{round}")])
            .unwrap();
        set.release().unwrap();
    }
    assert!(eventually(PATIENCE, || conns.iter_mut().all(|c| {
        let keys: Vec<String> = redis::cmd("KEYS").arg("redfence:lock:*").query(c).unwrap();
        keys.is_empty()
    })));
    assert_eq!(error_replies(&mut conns), before);
}

/// The watchdog renews a lease once a third of its TTL has passed, whatever
/// `extend()` asked for. After a native extension, a longer `extend()` is
/// believed only up to the lease's own TTL; the next renewal is then due a
/// third of *that* after the round, not of the longer TTL (which put it in
/// the past, and the watchdog sent thousands of rounds a second).
#[test]
fn the_watchdog_renews_once_a_third_of_the_ttl_after_a_longer_extend() {
    let (cluster, has, locks) = three();
    let ttl = Duration::from_millis(900);
    let guard = locks
        .lock_with("cadence", LockOptions::new().ttl(ttl))
        .unwrap();
    let extensions = |cluster: &RedisServers| -> Vec<u64> {
        let set = calls(cluster, "set");
        let eval = calls(cluster, "evalsha");
        set.iter().zip(eval).map(|(a, b)| a + b).collect()
    };
    if has.compare_and_expire {
        // The watchdog's first renewal goes out natively.
        let before = calls(&cluster, "set");
        assert!(all_reach(&cluster, "set", &before, 1), "no native renewal");
    }
    guard.extend(ttl * 10).unwrap();
    let before = extensions(&cluster);
    let window = Duration::from_secs(2);
    std::thread::sleep(window);
    let rounds = added(&before, &extensions(&cluster));
    assert!(guard.is_held(), "the watchdog kept the lease");
    // One renewal per 300 ms: about 7 in the window, some slack for a
    // round that was due as the window opened.
    let most = (window.as_millis() / (ttl / 3).as_millis()) as u64 + 2;
    assert!(
        rounds.iter().all(|&n| n <= most),
        "{rounds:?} extension rounds in {window:?} (at most {most} expected)"
    );
    // Believed for 900 ms after a native extension, the lease must be
    // renewed within the window; believed for 9 s elsewhere, it need not.
    let least = if has.compare_and_expire { 2 } else { 0 };
    assert!(
        rounds.iter().all(|&n| n >= least),
        "{rounds:?}: the watchdog stopped"
    );
}
