//! The lock's safety logic, one test per deliberate bug that the rest of
//! the suite once let through (issue 16). Each test names the bug it guards
//! and was seen to fail with that bug put back; `.ci/mutants.sh` puts them
//! back again, one at a time.
//!
//! Black-box: public API, real redis-server processes, real faults (SIGSTOP,
//! the fault proxy), so they keep their meaning when the lock path is
//! rewritten.

mod common;

use std::time::{Duration, Instant};

use common::faults::{read_stdin_line, report, report_field, ChildTest, Proxied};
use common::fence_key;
#[cfg(target_os = "linux")]
use common::pause;
use common::{builder, client, eventually, holders, lock_key};
use redfence::testing::{Fault, RedisServers};
use redfence::{Error, LockOptions, LossReason, Redlock};

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

/// Guards bug 1 of issue 16: the validity ignoring the clock-drift
/// allowance. The guard must never claim `ttl - (ttl/100 + 2 ms)` or more
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

/// Deletes the lock key on `indices`, or sets it to another holder's value.
fn take_away(cluster: &RedisServers, resource: &str, indices: &[usize], replace: bool) {
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
fn assert_left_alone(cluster: &RedisServers, resource: &str, indices: &[usize], replace: bool) {
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

/// Guards bug 2 of issue 16 through the watchdog: its extension rounds use
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

/// Guards bug 3 of issue 16: the watchdog never marking a lease lost after
/// failed extensions. With a majority frozen, the renewal at a third of a
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

/// Where the child of [`a_grant_paused_past_its_validity_is_refused_and_released`]
/// finds the instances.
const PAUSED_URLS: &str = "REDFENCE_PAUSED_URLS";

/// The lease of the paused grant: 4 s, half of it the drift allowance, so
/// the validity (2 s) ends long before the keys expire on the instances.
fn paused_client(urls: Vec<String>) -> Redlock {
    Redlock::builder(urls)
        .instance_timeout(Duration::from_millis(500))
        .clock_drift(0.5, Duration::ZERO)
        .build()
        .unwrap()
}
const PAUSED_TTL: Duration = Duration::from_secs(4);
const PAUSED_VALIDITY: Duration = Duration::from_secs(2);

/// Child half of [`a_grant_paused_past_its_validity_is_refused_and_released`]:
/// one lock attempt on a thread of its own, whose id the parent pauses.
#[cfg(target_os = "linux")]
#[test]
#[ignore = "child process of a_grant_paused_past_its_validity_is_refused_and_released"]
fn child_paused_grant() {
    let Ok(urls) = std::env::var(PAUSED_URLS) else {
        return;
    };
    let locks = paused_client(urls.split(',').map(str::to_string).collect());
    locks.lock("warm-up").unwrap().release().unwrap();
    assert!(locks.ping().iter().all(|(_, r)| r.is_ok()));
    std::thread::scope(|s| {
        s.spawn(|| {
            report(&format!("ready tid={}", pause::current_tid()));
            assert_eq!(read_stdin_line(), "go");
            let opts = LockOptions::new()
                .ttl(PAUSED_TTL)
                .wait(Duration::ZERO)
                .auto_extend(false);
            let outcome = match locks.lock_with("paused", opts) {
                Ok(guard) => format!(
                    "granted held={} validity_ms={}",
                    guard.is_held(),
                    guard.validity().as_millis()
                ),
                Err(Error::NoValidity { .. }) => "novalidity".to_string(),
                Err(e) => format!("other:{}", format!("{e:?}").replace(' ', "_")),
            };
            report(&format!("outcome={outcome}"));
            assert_eq!(read_stdin_line(), "exit");
        });
    });
}

/// Guards bug 5 of issue 16: the check that a grant still has validity left
/// when its last round is counted. A quorum's answers bound each round by
/// the instance timeout, and the TTL must exceed drift plus two timeouts,
/// so only a stall of the calling thread itself (a GC or VM pause, a
/// starved scheduler) brings a grant past its validity. Here that stall is
/// real: the locking thread of a child process is stopped with ptrace right
/// after its acquisition reached the instances, for longer than the
/// validity, while the client's instance workers go on and queue the
/// granting replies. Resumed, the thread counts a quorum with no validity
/// left: the call must fail with `NoValidity` and release the keys (they
/// would live on for another 2 s otherwise), not hand out a guard.
#[cfg(target_os = "linux")]
#[test]
fn a_grant_paused_past_its_validity_is_refused_and_released() {
    let env = Proxied::start(3);
    let mut child = ChildTest::spawn("child_paused_grant", &[(PAUSED_URLS, env.urls().join(","))]);
    let line = child.next_report(Duration::from_secs(30));
    let tid: i32 = report_field(&line, "tid").parse().unwrap();
    // The acquisition lands after 150 ms, its replies reach the child after
    // 300 ms: the thread is stopped in between, waiting for them.
    env.set(&[0, 1, 2], Fault::Delay(Duration::from_millis(150)));
    child.tell("go");
    assert!(
        eventually(Duration::from_secs(3), || holders(&env.cluster, "paused")
            == 3),
        "the acquisition never landed"
    );
    let landed = Instant::now();
    let paused = pause::ThreadPause::start(tid).expect("ptrace the child's locking thread");
    // The fault itself: a stall longer than the validity.
    std::thread::sleep(PAUSED_VALIDITY + Duration::from_millis(800));
    drop(paused);
    let line = child.next_report(Duration::from_secs(10));
    env.pass_all();
    assert_eq!(
        report_field(&line, "outcome"),
        "novalidity",
        "a grant past its validity was handed out: {line}"
    );
    assert!(
        eventually(Duration::from_secs(1), || holders(&env.cluster, "paused")
            == 0),
        "the keys of the refused grant were not released"
    );
    assert!(
        landed.elapsed() + Duration::from_millis(300) < PAUSED_TTL,
        "too slow to tell a release from the keys' own expiry"
    );
    child.tell("exit");
    child.wait_success(Duration::from_secs(10));
}
