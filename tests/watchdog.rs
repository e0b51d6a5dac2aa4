//! The watchdog keeps leases of live guards alive, bounds its retries, and
//! signals loss the moment a lease can no longer be kept.

mod common;

use std::time::{Duration, Instant};

use common::{builder, client, eventually, holders, lock_key};
use redfence::testing::RedisServers;
use redfence::{Error, LockOptions, LossReason};

fn short(ttl_ms: u64) -> LockOptions {
    LockOptions::new().ttl(Duration::from_millis(ttl_ms))
}

/// Calls that touch a lease on server `i`: scripts, and the native
/// commands of servers that have them. An extension adds one (EVALSHA, or
/// SET … IFEQ), a release one (EVALSHA, DELIFEQ or DELEX); an acquisition
/// adds three (the script and its two SETs, which the server counts too).
fn lease_calls(cluster: &RedisServers, i: usize) -> u64 {
    let stats = cluster.server(i).commandstats();
    ["evalsha", "set", "delifeq", "delex"]
        .iter()
        .map(|c| stats.get(*c).copied().unwrap_or(0))
        .sum()
}

#[test]
fn a_held_guard_outlives_its_ttl() {
    let cluster = RedisServers::start(5);
    let locks = client(&cluster);
    let rival = client(&cluster);
    let guard = locks.lock_with("long-job", short(1000)).unwrap();
    assert!(eventually(Duration::from_secs(1), || holders(
        &cluster, "long-job"
    ) == 5));
    let end = Instant::now() + Duration::from_millis(3500);
    // A PTTL sample well above the one before it is a renewal: without
    // one the key's PTTL only declines, and is gone after 1 s.
    let mut refreshes = 0;
    let mut last_pttl: Option<i64> = None;
    while Instant::now() < end {
        assert!(
            guard.is_held(),
            "lease lost while the watchdog should keep it"
        );
        assert!(matches!(
            rival.try_lock("long-job"),
            Err(Error::Contended { .. })
        ));
        let pttl = cluster.server(0).pttl(&lock_key("long-job"));
        assert!(pttl > 0, "key expired on the instance: {pttl}");
        if last_pttl.is_some_and(|last| pttl > last + 50) {
            refreshes += 1;
        }
        last_pttl = Some(pttl);
        std::thread::sleep(Duration::from_millis(100));
    }
    // Renewals come every third of the TTL, about ten in 3.5 s.
    assert!(refreshes >= 3, "PTTL refreshed only {refreshes} times");
    assert!(cluster.server(0).exists(&lock_key("long-job")));
    guard.ensure_held().unwrap();
    guard.release().unwrap();
}

#[test]
fn a_stopped_majority_marks_the_guard_lost_before_its_validity_ends() {
    let cluster = RedisServers::start(5);
    let locks = client(&cluster);
    let guard = locks.lock_with("fragile", short(1500)).unwrap();
    let signal = guard.loss_signal();
    cluster.stop(&[0, 1, 2]);
    let stopped_at = Instant::now();
    // The validity at this point is the latest moment the lease may end.
    let deadline = stopped_at + guard.validity();
    let reason = guard
        .wait_lost(Duration::from_secs(5))
        .expect("loss signalled");
    let lost_at = Instant::now();
    // The renewal at 500 ms and its three retries (75 ms apart, 50 ms
    // timeout each) fail by about 950 ms: the watchdog gives up then,
    // some 500 ms before the lease would simply run out (`Expired`).
    assert_eq!(reason, LossReason::ExtensionFailed);
    assert!(
        lost_at + Duration::from_millis(200) <= deadline,
        "signalled only {:?} before the validity ended",
        deadline.saturating_duration_since(lost_at)
    );
    assert!(!guard.is_held());
    assert!(matches!(guard.ensure_held(), Err(Error::Lost { .. })));
    assert_eq!(signal.recv_timeout(Duration::from_secs(1)), Ok(reason));
    let calls_before = lease_calls(&cluster, 3);
    cluster.cont(&[0, 1, 2]);
    // Nothing re-extends the lease: it expires everywhere and stays gone.
    assert!(
        eventually(Duration::from_secs(3), || holders(&cluster, "fragile") == 0),
        "a lost lease was kept alive"
    );
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(holders(&cluster, "fragile"), 0);
    assert_eq!(
        lease_calls(&cluster, 3),
        calls_before,
        "extension after loss"
    );
    assert!(matches!(guard.release(), Err(Error::Lost { .. })));
}

#[test]
fn a_stopped_minority_does_not_cost_the_lease() {
    let cluster = RedisServers::start(5);
    let locks = client(&cluster);
    let guard = locks.lock_with("sturdy", short(1000)).unwrap();
    cluster.stop(&[3, 4]);
    let stopped_calls = lease_calls(&cluster, 0);
    assert_eq!(guard.wait_lost(Duration::from_millis(3000)), None);
    assert!(guard.is_held());
    assert!(
        lease_calls(&cluster, 0) >= stopped_calls + 3,
        "extensions kept going"
    );
    assert!(cluster.server(0).pttl(&lock_key("sturdy")) > 0);
    cluster.cont(&[3, 4]);
    guard.release().unwrap();
}

#[test]
fn a_key_deleted_behind_our_back_is_detected_and_the_new_holder_spared() {
    let cluster = RedisServers::start(5);
    let locks = client(&cluster);
    let rival = client(&cluster);
    let guard = locks.lock_with("stolen", short(1500)).unwrap();
    assert!(eventually(Duration::from_secs(1), || holders(
        &cluster, "stolen"
    ) == 5));
    // Stands in for a clock jump: the key vanishes on a majority.
    for i in [0, 1, 2] {
        assert!(cluster.server(i).del(&lock_key("stolen")));
    }
    let thief = rival.try_lock("stolen").expect("a majority is free");
    let thief_value = cluster.server(0).get(&lock_key("stolen"));
    assert!(thief.token() > guard.token());
    let reason = guard
        .wait_lost(Duration::from_secs(3))
        .expect("loss detected");
    assert_eq!(reason, LossReason::NotHeld);
    for i in [0, 1, 2] {
        assert_eq!(cluster.server(i).get(&lock_key("stolen")), thief_value);
    }
    assert!(matches!(guard.release(), Err(Error::Lost { .. })));
    assert_eq!(cluster.server(0).get(&lock_key("stolen")), thief_value);
    assert!(thief.is_held());
}

#[test]
fn release_and_drop_stop_the_extensions() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let ttl = Duration::from_millis(600);
    for how in ["release", "drop"] {
        let guard = locks.lock_with(how, LockOptions::new().ttl(ttl)).unwrap();
        assert!(eventually(Duration::from_secs(1), || cluster
            .server(0)
            .exists(&lock_key(how))));
        let granted = lease_calls(&cluster, 0);
        assert!(
            eventually(Duration::from_secs(3), || lease_calls(&cluster, 0)
                >= granted + 2),
            "{how}: no extensions"
        );
        let extended = lease_calls(&cluster, 0);
        if how == "release" {
            guard.release().unwrap();
        } else {
            drop(guard);
        }
        assert!(eventually(Duration::from_secs(1), || holders(
            &cluster, how
        ) == 0));
        let after_release = lease_calls(&cluster, 0);
        assert!(after_release > extended, "release itself is one call");
        // Waiting for something not to happen: two renewal periods and
        // more pass without a call.
        std::thread::sleep(ttl * 2);
        assert_eq!(
            lease_calls(&cluster, 0),
            after_release,
            "{how}: extended after release"
        );
    }
}

#[test]
fn without_auto_extend_the_lease_simply_runs_out() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let ttl = Duration::from_millis(700);
    let start = Instant::now();
    let guard = locks
        .lock_with("fixed", LockOptions::new().ttl(ttl).auto_extend(false))
        .unwrap();
    let signal = guard.loss_signal();
    assert!(guard.is_held());
    assert_eq!(
        signal.recv_timeout(Duration::from_secs(3)),
        Ok(LossReason::Expired),
        "the watchdog signals the end of a fixed lease"
    );
    assert!(
        start.elapsed() <= ttl + Duration::from_millis(50),
        "not before the TTL passed"
    );
    assert!(start.elapsed() >= ttl - ttl / 10, "{:?}", start.elapsed());
    assert!(!guard.is_held());
    assert!(eventually(Duration::from_secs(2), || holders(
        &cluster, "fixed"
    ) == 0));
}

#[test]
fn the_extension_cap_ends_the_lease() {
    let cluster = RedisServers::start(3);
    let locks = builder(&cluster).max_extensions(Some(2)).build().unwrap();
    let guard = locks.lock_with("capped", short(600)).unwrap();
    let start = Instant::now();
    let reason = guard.wait_lost(Duration::from_secs(5)).expect("runs out");
    assert_eq!(reason, LossReason::ExtensionLimit);
    // Two extensions at a third of the TTL each, then the full TTL.
    let lived = start.elapsed();
    assert!(lived >= Duration::from_millis(700), "{lived:?}");
    assert!(lived < Duration::from_millis(2500), "{lived:?}");
}

#[test]
fn manual_extend_with_the_watchdog_keeps_the_new_ttl() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let guard = locks.lock_with("switch", short(600)).unwrap();
    guard.extend(Duration::from_secs(5)).unwrap();
    // extend() returns at a quorum; the last instance follows at once.
    let key = lock_key("switch");
    assert!(eventually(Duration::from_secs(1), || cluster
        .server(0)
        .pttl(&key)
        > 4000));
    // Watch the key until the watchdog renews it (a third of 5 s after the
    // extend): the PTTL declines from 5 s, then jumps back up. Going back
    // to the old 600 ms TTL would show as a PTTL below 600.
    let mut last = cluster.server(0).pttl(&key);
    let mut lowest = last;
    let renewed = eventually(Duration::from_secs(4), || {
        let pttl = cluster.server(0).pttl(&key);
        let jumped = pttl > last + 500;
        lowest = lowest.min(pttl);
        last = pttl;
        jumped
    });
    assert!(renewed, "no renewal seen; lowest PTTL {lowest}");
    assert!(lowest > 3000, "watchdog went back to the old TTL: {lowest}");
    assert!(last > 4000, "renewed with another TTL: {last}");
    assert!(guard.validity() > Duration::from_millis(3000));
}

#[test]
fn the_lifetime_cap_ends_the_lease() {
    let cluster = RedisServers::start(3);
    let locks = builder(&cluster)
        .max_lease_lifetime(Some(Duration::from_millis(1000)))
        .build()
        .unwrap();
    let start = Instant::now();
    let guard = locks.lock_with("lifetime", short(600)).unwrap();
    let reason = guard.wait_lost(Duration::from_secs(5)).expect("runs out");
    assert_eq!(reason, LossReason::ExtensionLimit);
    // Extended while younger than 1 s, then left to run out its last TTL.
    let lived = start.elapsed();
    assert!(lived >= Duration::from_millis(1000), "{lived:?}");
    assert!(lived < Duration::from_millis(2500), "{lived:?}");
    assert!(eventually(Duration::from_secs(2), || holders(
        &cluster, "lifetime"
    ) == 0));
}

/// One watchdog serves every lease of a client, each on its own schedule:
/// a short lease taken after a long one is extended in time, not when the
/// long one falls due.
#[test]
fn leases_with_different_ttls_are_each_extended_in_time() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let long = locks.lock_with("long-ttl", short(30_000)).unwrap();
    let brief = locks.lock_with("short-ttl", short(900)).unwrap();
    let medium = locks.lock_with("medium-ttl", short(5_000)).unwrap();
    assert_eq!(brief.wait_lost(Duration::from_millis(3000)), None);
    assert!(brief.is_held() && long.is_held() && medium.is_held());
    brief.release().unwrap();
    medium.release().unwrap();
    long.release().unwrap();
}

/// `RedlockBuilder::max_extensions(n)`: the watchdog extends a lease at
/// most n times, then reports it lost (`ExtensionLimit`) when its validity
/// ends. Counted on a server: the grant, then exactly two extensions.
#[test]
fn max_extensions_is_the_exact_number_of_extensions() {
    let cluster = RedisServers::start(3);
    let locks = builder(&cluster).max_extensions(Some(2)).build().unwrap();
    assert!(eventually(Duration::from_secs(10), || locks
        .ping()
        .iter()
        .all(|(_, r)| r.is_ok())));
    let before = lease_calls(&cluster, 0);
    let guard = locks.lock_with("capped", short(600)).unwrap();
    assert_eq!(
        guard.wait_lost(Duration::from_secs(5)),
        Some(LossReason::ExtensionLimit)
    );
    // Waiting for something not to happen: no third extension.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(lease_calls(&cluster, 0) - before, 3 + 2);
}
