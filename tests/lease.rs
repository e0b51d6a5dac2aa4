//! Leases: the validity a grant promises (the clock-drift allowance left
//! out, zero once lost), extensions by hand (the TTL in milliseconds on
//! every instance, `Unavailable` when the answers cannot tell), and the
//! watchdog, which keeps leases of live guards alive, bounds its retries,
//! never revives a key gone or taken on a majority, and signals loss the
//! moment a lease can no longer be kept.

mod common;

use std::time::{Duration, Instant};

use common::{assert_left_alone, builder, client, eventually, holders, lock_key, take_away, warm};
use redfence::testing::RedisServers;
use redfence::{Error, LockOptions, LossReason, Redlock};

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
    // Back to the old TTL would take the PTTL below 600 ms; a renewal that
    // a loaded machine delays only lets it fall further from 5 s first.
    assert!(lowest > 600, "watchdog went back to the old TTL: {lowest}");
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

// --- Extensions by hand ---------------------------------------------------------

#[test]
fn manual_extend_refreshes_the_lease_on_the_instances() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let opts = LockOptions::new()
        .ttl(Duration::from_millis(800))
        .auto_extend(false);
    let guard = locks.lock_with("extend-me", opts).unwrap();
    guard.extend(Duration::from_secs(20)).unwrap();
    assert!(guard.validity() > Duration::from_secs(19));
    // extend() returns at a quorum; the last instance follows at once.
    assert!(eventually(Duration::from_secs(2), || cluster
        .iter()
        .all(|server| server.pttl(&lock_key("extend-me")) > 18_000)));
    guard.release().unwrap();
}

/// Contract (rustdoc of `extend`: the lease lives at least `ttl` from the
/// round's start on a quorum, never less than before; README "Key layout":
/// the lock key lives "with the lease's TTL"). After `extend(3 s)` of a
/// 1 s lease (single and set), every instance's lock key has a PTTL near
/// 3000 ms: at most 3000, more than 2000 — not 3 s × 1000, not 3 s / 1000.
///
/// Catches: the extension sending the TTL in seconds (and
/// ×1000) instead of milliseconds.
#[test]
fn an_extension_sets_the_ttl_in_milliseconds_on_every_instance() {
    let cluster = RedisServers::start(3);
    let locks = builder(&cluster)
        .instance_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    warm(&locks);
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(1))
        .auto_extend(false);
    let near_3s = |resources: &[&str]| {
        eventually(Duration::from_secs(2), || {
            resources.iter().all(|r| {
                cluster.iter().all(|s| {
                    let pttl = s.pttl(&lock_key(r));
                    pttl > 2000 && pttl <= 3000
                })
            })
        })
    };
    let pttls = |resources: &[&str]| -> Vec<i64> {
        resources
            .iter()
            .flat_map(|r| cluster.iter().map(move |s| s.pttl(&lock_key(r))))
            .collect()
    };

    let guard = locks.lock_with("extend-ms", opts).unwrap();
    guard.extend(Duration::from_secs(3)).unwrap();
    assert!(
        near_3s(&["extend-ms"]),
        "after extend(3 s): PTTLs {:?}",
        pttls(&["extend-ms"])
    );
    guard.release().unwrap();

    let set = ["extend-ms-set:a", "extend-ms-set:b"];
    let guard = locks.lock_all_with(&set, opts).unwrap();
    guard.extend(Duration::from_secs(3)).unwrap();
    assert!(
        near_3s(&set),
        "after extend(3 s) of a set: PTTLs {:?}",
        pttls(&set)
    );
    guard.release().unwrap();
}

/// `LockGuard::extend`: a lease is lost (`NotHeld`) only when a majority
/// says our key is gone; when the answers cannot tell (of five, two lost
/// the key, one is down, two extended) it is `Unavailable`, and the
/// validity the lease had stands.
#[test]
fn an_extension_that_cannot_tell_is_unavailable_not_lost() {
    let cluster = RedisServers::start(5);
    let locks = builder(&cluster)
        .instance_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    warm(&locks);
    let guard = locks
        .lock_with("unsure-extend", LockOptions::new().auto_extend(false))
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || holders(
        &cluster,
        "unsure-extend"
    ) == 5));
    for i in [0, 1] {
        assert!(cluster.server(i).del(&lock_key("unsure-extend")));
    }
    cluster.server(4).kill();
    match guard.extend(Duration::from_secs(30)) {
        Err(Error::Unavailable { granted, .. }) => assert_eq!(granted, 2),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(guard.is_held());
    assert!(guard.validity() > Duration::from_secs(20));
}

/// `validity()`: "zero once it may have expired or was lost". The watchdog
/// finds the keys gone from a majority and marks the lease lost
/// (`NotHeld`) well before its validity would have run out: from then on
/// the guard promises no time at all.
#[test]
fn validity_is_zero_once_the_lease_is_lost() {
    let cluster = RedisServers::start(3);
    let locks = builder(&cluster).build().unwrap();
    warm(&locks);
    let guard = locks
        .lock_with("no-time", LockOptions::new().ttl(Duration::from_secs(6)))
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || holders(
        &cluster, "no-time"
    ) == 3));
    for i in [0, 1] {
        assert!(cluster.server(i).del(&lock_key("no-time")));
    }
    assert_eq!(
        guard.wait_lost(Duration::from_secs(5)),
        Some(LossReason::NotHeld)
    );
    assert_eq!(guard.validity(), Duration::ZERO);
}

// --- Validity and loss ----------------------------------------------------------

/// A client whose connections are open and whose instance timeout leaves
/// room for two busy cores: these tests are about the lock's logic, and a
/// request dropped for a 50 ms deadline would only blur them.
fn steady_client(cluster: &RedisServers, retries: u32) -> Redlock {
    let locks = builder(cluster)
        .instance_timeout(Duration::from_millis(300))
        .extend_retries(retries)
        .build()
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || locks
        .ping()
        .iter()
        .all(|(_, r)| r.is_ok())));
    locks
}

/// A grant's validity, read right after it and after an explicit extend,
/// is the TTL minus the drift allowance minus at most the time the call
/// took: never more, never much less.
fn assert_validity_leaves_out(locks: &Redlock, resource: &str, ttl: Duration, drift: Duration) {
    let opts = LockOptions::new().ttl(ttl).auto_extend(false);
    let before = Instant::now();
    let guard = locks.lock_with(resource, opts).unwrap();
    let validity = guard.validity();
    let took = before.elapsed();
    assert!(
        validity <= ttl - drift,
        "{resource}: validity {validity:?} after the grant claims the drift allowance {drift:?} \
         of the {ttl:?} TTL"
    );
    assert!(
        validity + took >= ttl - drift,
        "{resource}: validity {validity:?} shortened by more than the {took:?} the grant took"
    );

    let before = Instant::now();
    guard.extend(ttl).unwrap();
    let validity = guard.validity();
    let took = before.elapsed();
    assert!(
        validity <= ttl - drift,
        "{resource}: validity {validity:?} after an extend claims the drift allowance {drift:?}"
    );
    assert!(validity + took >= ttl - drift, "{resource}: {validity:?}");
    guard.release().unwrap();
}

/// Catches the validity ignoring the clock-drift allowance. The guard must never claim `ttl - (ttl/100 + 2 ms)` or more
/// (the default allowance), nor more than the TTL minus a custom
/// allowance set with `clock_drift`: an instance whose clock runs fast
/// expires the key that much earlier.
#[test]
fn validity_after_a_grant_leaves_out_the_drift_allowance() {
    let cluster = RedisServers::start(3);
    let ttl = Duration::from_secs(10);
    let default_drift = ttl / 100 + Duration::from_millis(2);
    assert_validity_leaves_out(&client(&cluster), "drift-default", ttl, default_drift);

    let custom = builder(&cluster)
        .clock_drift(0.1, Duration::from_millis(300))
        .build()
        .unwrap();
    let custom_drift = ttl / 10 + Duration::from_millis(300);
    assert_validity_leaves_out(&custom, "drift-custom", ttl, custom_drift);
}

/// Catches `extend.lua` re-creating a key that has expired (or taking
/// over someone else's). An explicit extend of a lease
/// whose key is gone, or belongs to another holder, on a majority must
/// report the lease lost and leave those instances as they are.
#[test]
fn extending_a_lease_gone_or_taken_on_a_majority_fails_and_writes_nothing() {
    let cluster = RedisServers::start(5);
    let locks = steady_client(&cluster, 3);
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .auto_extend(false);
    for (resource, replace) in [("extend-gone", false), ("extend-taken", true)] {
        let guard = locks.lock_with(resource, opts).unwrap();
        assert!(eventually(Duration::from_secs(2), || holders(
            &cluster, resource
        ) == 5));
        take_away(&cluster, resource, &[0, 1, 2], replace);
        match guard.extend(Duration::from_secs(10)) {
            Err(Error::Lost {
                reason: LossReason::NotHeld,
                ..
            }) => {}
            other => panic!("{resource}: expected Lost(NotHeld), got {other:?}"),
        }
        assert!(!guard.is_held());
        // A ping queues behind the extension on each instance: once all
        // answered, every instance has run the extend script.
        assert!(locks.ping().iter().all(|(_, r)| r.is_ok()));
        assert_left_alone(&cluster, resource, &[0, 1, 2], replace);
    }
}

/// The same through the watchdog: its extension rounds use
/// the same script, and must not bring back a lease whose key vanished on a
/// majority (a clock jump, a restart without persistence) nor take over a
/// newer holder's key. The lease is reported lost instead.
#[test]
fn the_watchdog_does_not_revive_a_lease_gone_or_taken_on_a_majority() {
    let cluster = RedisServers::start(5);
    let locks = steady_client(&cluster, 3);
    let opts = LockOptions::new().ttl(Duration::from_millis(1500));
    for (resource, replace) in [("watched-gone", false), ("watched-taken", true)] {
        let guard = locks.lock_with(resource, opts).unwrap();
        assert!(eventually(Duration::from_secs(2), || holders(
            &cluster, resource
        ) == 5));
        take_away(&cluster, resource, &[0, 1, 2], replace);
        // The first renewal comes a third of the TTL after the grant.
        assert_eq!(
            guard.wait_lost(Duration::from_secs(3)),
            Some(LossReason::NotHeld),
            "{resource}"
        );
        assert!(locks.ping().iter().all(|(_, r)| r.is_ok()));
        assert_left_alone(&cluster, resource, &[0, 1, 2], replace);
        assert!(matches!(guard.release(), Err(Error::Lost { .. })));
    }
}

/// Catches the watchdog never marking a lease lost after failed
/// extensions. With a majority frozen, the renewal at a third of a
/// 9 s TTL fails, so does its one retry, and the guard must say
/// `ExtensionFailed` then, about 4 s after the grant, not 9 s later when
/// the lease would simply have run out (`Expired`).
#[test]
fn failed_extensions_mark_the_lease_lost_long_before_it_expires() {
    let cluster = RedisServers::start(5);
    let locks = steady_client(&cluster, 1);
    let ttl = Duration::from_secs(9);
    let guard = locks
        .lock_with("cut-off", LockOptions::new().ttl(ttl))
        .unwrap();
    let granted = Instant::now();
    let valid_end = granted + guard.validity();
    assert!(eventually(Duration::from_secs(2), || holders(
        &cluster, "cut-off"
    ) == 5));
    cluster.stop(&[0, 1, 2]);
    let reason = guard.wait_lost(ttl + Duration::from_secs(2));
    let lost_at = Instant::now();
    cluster.cont(&[0, 1, 2]);
    assert_eq!(reason, Some(LossReason::ExtensionFailed));
    assert!(
        lost_at + Duration::from_secs(3) <= valid_end,
        "lost only {:?} after the grant, {:?} before the validity ended",
        lost_at - granted,
        valid_end.saturating_duration_since(lost_at)
    );
    // Not before the first renewal was due and had failed.
    assert!(lost_at - granted >= ttl / 3, "{:?}", lost_at - granted);
    assert!(!guard.is_held());
}
