//! The lock's safety logic, one test per deliberate bug that the rest of
//! the suite once let through (issue 16). Each test names the bug it guards
//! and was seen to fail with that bug put back; `.ci/mutants.sh` puts them
//! back again, one at a time.
//!
//! Black-box: public API, real redis-server processes, real faults (SIGSTOP,
//! the fault proxy), so they keep their meaning when the lock path is
//! rewritten.

mod common;
#[path = "common/faults.rs"]
mod faults_common;

use std::time::{Duration, Instant};

use common::{builder, client, eventually, holders, lock_key};
use faults_common::{fence_key, Proxied};
use redfence::testing::{Fault, RedisCluster};
use redfence::{Error, LockOptions, LossReason, Redlock};

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

/// Guards bug 1 of issue 16: the validity ignoring the clock-drift
/// allowance. The guard must never claim `ttl - (ttl/100 + 2 ms)` or more
/// (the default allowance), nor more than the TTL minus a custom
/// allowance set with `clock_drift`: an instance whose clock runs fast
/// expires the key that much earlier.
#[test]
fn validity_after_a_grant_leaves_out_the_drift_allowance() {
    let cluster = RedisCluster::start(3);
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

/// Deletes the lock key on `indices`, or sets it to another holder's value.
fn take_away(cluster: &RedisCluster, resource: &str, indices: &[usize], replace: bool) {
    let key = lock_key(resource);
    for &i in indices {
        if replace {
            cluster
                .server(i)
                .cmd(&["SET", &key, "someone-else", "PX", "20000"])
                .unwrap();
        } else {
            assert!(cluster.server(i).del(&key), "instance {i} had no key");
        }
    }
}

/// After the keys were taken away on a majority: those instances still
/// hold exactly what the test left there (nothing, or the other holder's
/// value with its own TTL), whatever our client sent them since.
fn assert_left_alone(cluster: &RedisCluster, resource: &str, indices: &[usize], replace: bool) {
    let key = lock_key(resource);
    for &i in indices {
        let server = cluster.server(i);
        if replace {
            assert_eq!(
                server.get(&key).as_deref(),
                Some("someone-else"),
                "instance {i}: the other holder's key was overwritten"
            );
            let pttl = server.pttl(&key);
            assert!(
                pttl > 0 && pttl <= 20_000,
                "instance {i}: the other holder's TTL was changed: {pttl}"
            );
        } else {
            assert!(
                !server.exists(&key),
                "instance {i}: an expired lease was brought back: {:?}",
                server.get(&key)
            );
        }
    }
}

/// Guards bug 2 of issue 16: `extend.lua` re-creating a key that has
/// expired (or taking over someone else's). An explicit extend of a lease
/// whose key is gone, or belongs to another holder, on a majority must
/// report the lease lost and leave those instances as they are.
#[test]
fn extending_a_lease_gone_or_taken_on_a_majority_fails_and_writes_nothing() {
    let cluster = RedisCluster::start(5);
    let locks = client(&cluster);
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

/// Guards bug 2 of issue 16 through the watchdog: its extension rounds use
/// the same script, and must not bring back a lease whose key vanished on a
/// majority (a clock jump, a restart without persistence) nor take over a
/// newer holder's key. The lease is reported lost instead.
#[test]
fn the_watchdog_does_not_revive_a_lease_gone_or_taken_on_a_majority() {
    let cluster = RedisCluster::start(5);
    let locks = client(&cluster);
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

/// Guards bug 3 of issue 16: the watchdog never marking a lease lost after
/// failed extensions. With a majority frozen, the renewal at a third of a
/// 9 s TTL fails, so does its one retry, and the guard must say
/// `ExtensionFailed` then, about 3.5 s after the grant, not 9 s later when
/// the lease would simply have run out (`Expired`).
#[test]
fn failed_extensions_mark_the_lease_lost_long_before_it_expires() {
    let cluster = RedisCluster::start(5);
    let locks = builder(&cluster).extend_retries(1).build().unwrap();
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

/// Sets the resource's fencing counter to a different value on every
/// instance (counters only go up in real life: `base` grows per round), so
/// that whichever quorum grants disagrees and a raise round follows.
fn diverge_counters(env: &Proxied, resource: &str, base: u64) {
    let key = fence_key(resource);
    for (i, server) in env.cluster.iter().enumerate() {
        let value = base + 1000 * i as u64;
        server.cmd(&["SET", &key, &value.to_string()]).unwrap();
    }
}

/// Guards bug 4 of issue 16: `fence_raise.lua` reporting the lock as ours
/// without checking. The raise round is the grant's last word: if the lock
/// keys were deleted, or taken by someone else, on a majority between the
/// acquisition and the raise, the grant must not stand.
///
/// The window is opened by a 150 ms delay each way on every instance: the
/// acquisition lands at about 150 ms, its replies reach the client at about
/// 300 ms, the raise lands at about 450 ms. The test takes the keys away as
/// soon as every instance holds one.
#[test]
fn a_grant_whose_keys_vanish_before_the_raise_round_does_not_stand() {
    let env = Proxied::start(5);
    let locks = env
        .builder()
        .instance_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    locks.lock("warm-up").unwrap().release().unwrap();
    assert!(locks.ping().iter().all(|(_, r)| r.is_ok()));
    for (round, (resource, replace)) in [("raise-gone", false), ("raise-taken", true)]
        .into_iter()
        .enumerate()
    {
        diverge_counters(&env, resource, 1_000_000 * (round as u64 + 1));
        env.set(&[0, 1, 2, 3, 4], Fault::Delay(Duration::from_millis(150)));
        let result = std::thread::scope(|s| {
            let attempt = s.spawn(|| locks.try_lock(resource));
            assert!(
                eventually(Duration::from_secs(2), || holders(&env.cluster, resource)
                    == 5),
                "{resource}: the acquisition never landed everywhere"
            );
            // All of them when deleting, so no raise can find our value;
            // a majority when replacing, the rest keep ours until released.
            let indices: &[usize] = if replace {
                &[0, 1, 2]
            } else {
                &[0, 1, 2, 3, 4]
            };
            take_away(&env.cluster, resource, indices, replace);
            attempt.join().unwrap()
        });
        env.pass_all();
        match &result {
            Err(Error::Unavailable { .. }) => {}
            other => panic!("{resource}: the grant stood without its keys: {other:?}"),
        }
        drop(result);
        assert!(locks.ping().iter().all(|(_, r)| r.is_ok()));
        if replace {
            assert_left_alone(&env.cluster, resource, &[0, 1, 2], true);
            assert!(
                eventually(Duration::from_secs(2), || holders(&env.cluster, resource)
                    == 3),
                "our keys on the other instances were not released"
            );
        } else {
            assert_eq!(holders(&env.cluster, resource), 0);
        }
    }
}
