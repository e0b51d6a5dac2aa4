//! The core lock against five real redis-server processes.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{builder, client, eventually, holders, lock_key, subscribers};
use redfence::testing::RedisServers;
use redfence::{Error, InstanceErrorKind, LockOptions, LossReason};

#[test]
fn lock_release_try_lock_round_trip() {
    let cluster = RedisServers::start(5);
    let locks = client(&cluster);
    let guard = locks.lock("invoice:42").unwrap();
    assert!(guard.is_held());
    assert_eq!(guard.resource(), "invoice:42");
    assert!(guard.validity() > Duration::from_secs(29));
    assert!(guard.validity() <= Duration::from_secs(30));
    assert!(guard.token().get() > 0);
    // The call returns at a quorum; the last instances follow at once.
    assert!(eventually(Duration::from_secs(2), || holders(
        &cluster,
        "invoice:42"
    ) == 5));

    match locks.try_lock("invoice:42") {
        Err(Error::Contended {
            resource, attempts, ..
        }) => {
            assert_eq!(resource, "invoice:42");
            assert_eq!(attempts, 1);
        }
        other => panic!("expected Contended, got {other:?}"),
    }
    guard.release().unwrap();
    let again = locks.try_lock("invoice:42").expect("free after release");
    drop(again);
}

#[test]
fn release_frees_the_lock_on_every_instance() {
    let cluster = RedisServers::start(5);
    let locks = client(&cluster);
    let guard = locks.lock("job:nightly").unwrap();
    assert!(eventually(Duration::from_secs(2), || holders(
        &cluster,
        "job:nightly"
    ) == 5));
    guard.release().unwrap();
    assert!(
        eventually(Duration::from_secs(2), || holders(&cluster, "job:nightly")
            == 0),
        "lock keys left behind after release"
    );
}

#[test]
fn dropping_the_guard_releases_it() {
    let cluster = RedisServers::start(5);
    let locks = client(&cluster);
    let other = client(&cluster);
    {
        let _guard = locks.lock("drop-me").unwrap();
        match other.try_lock("drop-me") {
            Err(Error::Contended { .. }) => {}
            other => panic!("expected Contended while the guard lives, got {other:?}"),
        }
    }
    assert!(eventually(Duration::from_secs(2), || holders(
        &cluster, "drop-me"
    ) == 0));
    let _again = other.try_lock("drop-me").expect("free after drop");
}

#[test]
fn lock_waits_for_the_holder_and_respects_its_budget() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let held = locks.lock("busy").unwrap();
    let start = Instant::now();
    let opts = LockOptions::new().wait(Duration::from_millis(400));
    match locks.lock_with("busy", opts) {
        Err(Error::Contended { attempts, .. }) => assert!(attempts > 1, "it should retry"),
        other => panic!("expected Contended, got {other:?}"),
    }
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(200),
        "gave up early: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(1500),
        "overran its budget: {elapsed:?}"
    );

    // Released from another thread while we wait: we get it. The first
    // call's subscription is dropped lazily; wait until it is gone, so
    // that the one seen next is the waiter's.
    assert!(eventually(Duration::from_secs(2), || subscribers(
        &cluster, "busy"
    ) == 0));
    let waiter = std::thread::spawn({
        let locks = locks.clone();
        move || locks.lock_with("busy", LockOptions::new().wait(Duration::from_secs(5)))
    });
    assert!(
        eventually(Duration::from_secs(3), || subscribers(&cluster, "busy")
            == 3),
        "the waiter never listened for the release"
    );
    let first_token = held.token();
    held.release().unwrap();
    let guard = waiter
        .join()
        .unwrap()
        .expect("waiter acquires after release");
    assert!(guard.token() > first_token);
}

#[test]
fn mutual_exclusion_under_many_threads() {
    let cluster = RedisServers::start(5);
    let locks = client(&cluster);
    let inside = AtomicUsize::new(0);
    let max_inside = AtomicUsize::new(0);
    let tokens = Mutex::new(Vec::new());
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(30));
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..15 {
                    let guard = locks.lock_with("counter", opts).expect("lock");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now, Ordering::SeqCst);
                    tokens.lock().unwrap().push(guard.token().get());
                    std::thread::sleep(Duration::from_micros(300));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().expect("release");
                }
            });
        }
    });
    assert_eq!(max_inside.load(Ordering::SeqCst), 1, "two holders at once");
    let tokens = tokens.into_inner().unwrap();
    assert_eq!(tokens.len(), 120);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing in grant order: {tokens:?}"
    );
}

#[test]
fn a_stopped_minority_does_not_slow_locking_down() {
    let cluster = RedisServers::start(5);
    // A long per-instance timeout: any wait for a stopped instance shows.
    let locks = builder(&cluster)
        .instance_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    locks.lock("warm-up").unwrap().release().unwrap();
    cluster.stop(&[1, 3]);
    let opts = LockOptions::new().ttl(Duration::from_secs(10));
    for i in 0..10 {
        let start = Instant::now();
        let guard = locks.lock_with(&format!("minority-{i}"), opts).unwrap();
        guard.release().unwrap();
        let elapsed = start.elapsed();
        assert!(
            elapsed < Duration::from_millis(1000),
            "lock+release waited for a stopped instance: {elapsed:?}"
        );
    }
    cluster.cont(&[1, 3]);
}

#[test]
fn a_stopped_majority_gives_unavailable_within_a_bound() {
    let cluster = RedisServers::start(5);
    let locks = client(&cluster);
    locks.lock("warm-up").unwrap().release().unwrap();
    cluster.stop(&[0, 2, 4]);
    let start = Instant::now();
    let opts = LockOptions::new().wait(Duration::from_millis(500));
    let err = locks.lock_with("majority", opts).unwrap_err();
    let elapsed = start.elapsed();
    cluster.cont(&[0, 2, 4]);
    match &err {
        Error::Unavailable {
            quorum,
            granted,
            errors,
            ..
        } => {
            assert_eq!(*quorum, 3);
            assert!(*granted <= 2);
            assert_eq!(errors.len(), 3, "one error per stopped instance: {err}");
            for e in errors {
                assert!(
                    matches!(
                        e.kind(),
                        InstanceErrorKind::Timeout | InstanceErrorKind::Connect
                    ),
                    "{e}"
                );
            }
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    // No keys left behind once the instances are back.
    assert!(eventually(Duration::from_secs(3), || holders(
        &cluster, "majority"
    ) == 0));
}

#[test]
fn releasing_an_expired_lease_is_lost_and_spares_the_new_holder() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let other = client(&cluster);
    let opts = LockOptions::new()
        .ttl(Duration::from_millis(300))
        .auto_extend(false);
    let stale = locks.lock_with("lease", opts).unwrap();
    assert_eq!(
        stale.wait_lost(Duration::from_secs(2)),
        Some(LossReason::Expired)
    );
    assert!(!stale.is_held());
    assert_eq!(stale.validity(), Duration::ZERO);
    let fresh = eventually(Duration::from_secs(2), || holders(&cluster, "lease") == 0)
        .then(|| other.lock("lease").unwrap())
        .expect("old lease expires on the instances");
    assert!(eventually(Duration::from_secs(2), || holders(
        &cluster, "lease"
    ) == 3));
    let value_of_new_holder = cluster.server(0).get(&lock_key("lease"));
    assert!(matches!(
        stale.extend(Duration::from_secs(1)),
        Err(Error::Lost { .. })
    ));
    assert!(matches!(stale.release(), Err(Error::Lost { .. })));
    // A ping goes through each instance's queue behind the release: once
    // every instance answered it, every instance has seen the release.
    assert!(locks.ping().iter().all(|(_, r)| r.is_ok()));
    assert_eq!(
        holders(&cluster, "lease"),
        3,
        "the new holder's keys must stay"
    );
    assert_eq!(
        cluster.server(0).get(&lock_key("lease")),
        value_of_new_holder
    );
    assert!(fresh.is_held());
}

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

#[test]
fn scripts_are_reloaded_after_script_flush() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    locks.lock("flush").unwrap().release().unwrap();
    for server in cluster.iter() {
        server.cmd(&["SCRIPT", "FLUSH"]).unwrap();
    }
    let guard = locks.lock("flush").expect("NOSCRIPT is handled");
    guard.release().unwrap();
}

#[test]
fn ping_reports_each_instance() {
    let cluster = RedisServers::start(3);
    // Room for a busy machine: only the stopped instance may time out.
    let locks = builder(&cluster)
        .instance_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    assert_eq!(locks.instance_count(), 3);
    assert_eq!(locks.quorum(), 2);
    assert!(locks.ping().iter().all(|(_, r)| r.is_ok()));
    cluster.stop(&[1]);
    let report = locks.ping();
    cluster.cont(&[1]);
    assert!(report[0].1.is_ok() && report[2].1.is_ok());
    assert!(report[1].1.is_err(), "{report:?}");
    assert!(report[1]
        .0
        .ends_with(&format!(":{}/0", cluster.server(1).port())));
}

#[test]
fn a_waiter_is_woken_by_the_release_not_by_a_timer() {
    let cluster = RedisServers::start(3);
    // A long random pause: a waiter that slept instead of listening would
    // take hundreds of milliseconds to notice each release.
    let holder = builder(&cluster)
        .retry_delay(Duration::from_secs(2))
        .build()
        .unwrap();
    let waiter = holder.clone();
    let mut handoffs = Vec::new();
    for round in 0..8 {
        let resource = format!("handoff-{round}");
        let guard = holder.lock(&resource).unwrap();
        let released_at = Mutex::new(None);
        std::thread::scope(|s| {
            let waiting = s.spawn(|| {
                let g = waiter.lock(&resource).expect("waiter gets the lock");
                (Instant::now(), g.token())
            });
            // Released only once the waiter listens on every instance: a
            // release before that would be found by its retry, not heard.
            assert!(
                eventually(Duration::from_secs(3), || subscribers(&cluster, &resource)
                    == 3),
                "round {round}: the waiter never listened for the release"
            );
            let token = guard.token();
            guard.release().unwrap();
            *released_at.lock().unwrap() = Some(Instant::now());
            let (acquired_at, next_token) = waiting.join().unwrap();
            assert!(next_token > token);
            let released_at = released_at.lock().unwrap().unwrap();
            handoffs.push(acquired_at.saturating_duration_since(released_at));
        });
    }
    handoffs.sort();
    let median = handoffs[handoffs.len() / 2];
    assert!(median < Duration::from_millis(60), "handoffs: {handoffs:?}");
}

#[test]
fn any_resource_name_is_a_distinct_lock() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let long = "x".repeat(1024);
    let names = ["a}b{c", "{x}", "ünïcødé\n\t", " ", &long];
    let guards: Vec<_> = names.iter().map(|n| locks.try_lock(n).unwrap()).collect();
    for (guard, name) in guards.iter().zip(names) {
        assert_eq!(guard.resource(), name);
        assert!(eventually(Duration::from_secs(2), || holders(
            &cluster, name
        ) == 3));
    }
    // Each is its own lock: holding one does not block the others' names.
    assert!(locks.try_lock("a}b").is_ok());
}

#[test]
fn waiters_of_one_client_take_turns() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let end = Instant::now() + Duration::from_millis(1500);
    let counts: Vec<usize> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut got = 0;
                    while Instant::now() < end {
                        let guard = locks.lock("shared-printer").unwrap();
                        std::thread::sleep(Duration::from_millis(1));
                        guard.release().unwrap();
                        got += 1;
                    }
                    got
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let total: usize = counts.iter().sum();
    assert!(total > 40, "{counts:?}");
    for c in &counts {
        assert!(*c * 100 >= total * 15, "a worker was starved: {counts:?}");
    }
}

#[test]
fn try_lock_for_and_until_bound_the_wait() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let _held = locks.lock("bounded").unwrap();
    let start = Instant::now();
    assert!(matches!(
        locks.try_lock_for("bounded", Duration::from_millis(300)),
        Err(Error::Contended { .. })
    ));
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_millis(1500),
        "{waited:?}"
    );
    let start = Instant::now();
    let past = Instant::now() - Duration::from_secs(1);
    match locks.try_lock_until("bounded", past) {
        Err(Error::Contended { attempts, .. }) => assert_eq!(attempts, 1),
        other => panic!("expected one attempt, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_millis(500));
}
