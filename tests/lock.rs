//! The core lock against real redis-server processes: lock, release and
//! try_lock, mutual exclusion, quorum and unavailability, scripts reloaded
//! after a flush. Releases: a lease whose validity ran out is reported lost
//! even with its keys in place, a release that cannot tell is
//! `Unavailable`, a release owed to an unreachable instance is delivered
//! once it heals and never sent again once delivered. A grant whose calling
//! thread is stalled (ptrace) past its validity is refused and released.
//!
//! `child_paused_grant` runs in a child process of
//! `a_grant_paused_past_its_validity_is_refused_and_released`; it is
//! `#[ignore]`d.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::faults::{read_stdin_line, report, report_field, ChildTest, Proxied};
#[cfg(target_os = "linux")]
use common::pause;
use common::{builder, client, eventually, holders, lock_key, warm};
use redfence::testing::{Fault, RedisServers};
use redfence::{Error, InstanceErrorKind, LockOptions, LossReason, Redlock};

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

// --- Releases and validity ------------------------------------------------------

/// A client whose leases keep a quarter of their TTL as validity: a 4 s
/// lease is guaranteed for 1 s, while its keys live on the instances for
/// 4 s. Between the two, the validity has run out and the keys are still
/// there to delete.
fn quarter_validity_client(cluster: &RedisServers) -> Redlock {
    let locks = builder(cluster)
        .instance_timeout(Duration::from_millis(300))
        .clock_drift(0.75, Duration::ZERO)
        .build()
        .unwrap();
    warm(&locks);
    locks
}

const STALE_TTL: Duration = Duration::from_secs(4);

/// Polls `validity()` (which reads the deadline and marks nothing) until
/// it is zero, then checks the keys are still on every instance with well
/// over a second to live: the release that follows finds them there.
fn wait_validity_out_keys_in_place(
    cluster: &RedisServers,
    validity: impl Fn() -> Duration,
    resources: &[&str],
) {
    assert!(
        eventually(Duration::from_secs(3), || validity().is_zero()),
        "the validity never ran out"
    );
    for r in resources {
        for (i, s) in cluster.iter().enumerate() {
            let pttl = s.pttl(&lock_key(r));
            assert!(
                pttl > 1000,
                "{r}: instance {i} lost the key too early (PTTL {pttl}): the test needs it there"
            );
        }
    }
}

/// Contract (rustdoc of `LockGuard::release` and `MultiGuard::release`):
/// "Returns `Error::Lost` if the lease was lost before, including when its
/// validity ran out (the work done meanwhile was not protected, even if our
/// keys were still there to delete)". The lease here is never looked at
/// between the grant and the release (no `is_held`, `ensure_held` or
/// `wait_lost`), so nothing marked it lost beforehand, and every instance
/// still holds our keys when `release()` runs; the release must still say
/// `Lost` (reason `Expired`), and still delete the keys.
///
/// Catches: `release()` reporting `Ok` when a quorum deleted
/// the keys, whatever the validity (the "lost before" check moved after
/// the quorum count).
#[test]
fn releasing_after_the_validity_ran_out_is_lost_even_with_the_keys_in_place() {
    let cluster = RedisServers::start(3);
    let locks = quarter_validity_client(&cluster);
    let opts = LockOptions::new().ttl(STALE_TTL).auto_extend(false);

    let guard = locks.lock_with("stale-single", opts).unwrap();
    assert!(guard.validity() <= STALE_TTL / 4);
    wait_validity_out_keys_in_place(&cluster, || guard.validity(), &["stale-single"]);
    match guard.release() {
        Err(Error::Lost {
            reason: LossReason::Expired,
            ..
        }) => {}
        other => {
            panic!("release after the validity ran out: expected Lost(Expired), got {other:?}")
        }
    }
    assert!(
        eventually(Duration::from_secs(2), || holders(&cluster, "stale-single")
            == 0),
        "the keys were not released"
    );

    let set = ["stale-set:a", "stale-set:b"];
    let guard = locks.lock_all_with(&set, opts).unwrap();
    assert!(guard.validity() <= STALE_TTL / 4);
    wait_validity_out_keys_in_place(&cluster, || guard.validity(), &set);
    match guard.release() {
        Err(Error::Lost {
            reason: LossReason::Expired,
            ..
        }) => {}
        other => panic!(
            "release of a set after the validity ran out: expected Lost(Expired), got {other:?}"
        ),
    }
    assert!(
        eventually(Duration::from_secs(2), || set
            .iter()
            .all(|r| holders(&cluster, r) == 0)),
        "the set's keys were not released"
    );
}

/// How long the unreachable instances stay unreachable after the release:
/// the fault itself, far longer than one release round (the instance
/// timeout) and than a worker's retry pause, far shorter than the TTL.
const OUTAGE: Duration = Duration::from_secs(2);

const OWED_TTL: Duration = Duration::from_secs(30);

/// Contract (README "How it works": "Releases are retried until the lease
/// would have expired anyway …, so an attempt that failed (or whose replies
/// were lost) leaves no key behind once the instance is back"; rustdoc of
/// `release`: "the release is still retried in the background until the
/// lease would have expired anyway"). A holder releases (and another drops
/// its guard) while two of five instances are black-holed; once they are
/// reachable again, their keys go within seconds, long before the 30 s TTL
/// would have removed them.
///
/// Catches: a holder's release not kept for retry
/// (non-persistent delivery), and an owed release given up after one round
/// (its retry deadline set to the instance timeout instead of the TTL).
#[test]
fn a_release_owed_to_an_unreachable_instance_is_delivered_once_it_heals() {
    let env = Proxied::start(5);
    let locks = env
        .builder()
        .instance_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    warm(&locks);
    let opts = LockOptions::new().ttl(OWED_TTL);
    let released = locks.lock_with("owed-release", opts).unwrap();
    let dropped = locks
        .lock_all_with(&["owed-drop:a", "owed-drop:b"], opts)
        .unwrap();
    let resources = ["owed-release", "owed-drop:a", "owed-drop:b"];
    assert!(eventually(Duration::from_secs(3), || resources
        .iter()
        .all(|r| holders(&env.cluster, r) == 5)));

    env.set(&[3, 4], Fault::BlackHole);
    released.release().expect("a quorum confirms the release");
    drop(dropped);
    let since = Instant::now();
    // The reachable instances lose the keys at once.
    assert!(eventually(Duration::from_secs(2), || resources
        .iter()
        .all(|r| holders(&env.cluster, r) == 2)));
    // The fault: the two instances stay out of reach for a while.
    std::thread::sleep(OUTAGE);
    for r in resources {
        for i in [3, 4] {
            let pttl = env.cluster.server(i).pttl(&lock_key(r));
            assert!(
                pttl > 20_000,
                "{r}: instance {i} should still hold the key it could not be told about \
                 (PTTL {pttl})"
            );
        }
    }
    env.pass_all();
    assert!(
        eventually(Duration::from_secs(5), || resources
            .iter()
            .all(|r| holders(&env.cluster, r) == 0)),
        "the owed releases were not delivered after healing: {:?}",
        resources
            .iter()
            .map(|r| (r, holders(&env.cluster, r)))
            .collect::<Vec<_>>()
    );
    assert!(
        since.elapsed() < OWED_TTL / 2,
        "too slow to tell a delivered release from the keys' own expiry"
    );
}

/// `LockGuard::release`: "Returns `Error::Lost` if the lease was lost
/// before". Here the keys vanished from a majority (as after a flush, or a
/// restart without persistence) while the client still believed the lease
/// valid: the release finds them gone and says so, with `NotHeld`.
#[test]
fn a_release_that_finds_a_majority_of_keys_gone_reports_the_lease_lost() {
    let cluster = RedisServers::start(3);
    let locks = builder(&cluster).build().unwrap();
    warm(&locks);
    let guard = locks
        .lock_with("vanished", LockOptions::new().auto_extend(false))
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || holders(
        &cluster, "vanished"
    ) == 3));
    for i in [0, 1] {
        assert!(cluster.server(i).del(&lock_key("vanished")));
    }
    assert!(guard.is_held(), "nothing told the client yet");
    match guard.release() {
        Err(Error::Lost { reason, .. }) => assert_eq!(reason, LossReason::NotHeld),
        other => panic!("expected Lost(NotHeld), got {other:?}"),
    }
}

/// `LockGuard::release`: `Error::Unavailable` "if too few instances
/// answered" — not `Lost` while the lease may still stand. Of five, two
/// no longer hold our key, one is down and two confirm: the one down may
/// still hold it, so nobody can say the lease was lost.
#[test]
fn a_release_that_cannot_tell_is_unavailable_not_lost() {
    let cluster = RedisServers::start(5);
    let locks = builder(&cluster)
        .instance_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    warm(&locks);
    let guard = locks
        .lock_with("unsure", LockOptions::new().auto_extend(false))
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || holders(
        &cluster, "unsure"
    ) == 5));
    for i in [0, 1] {
        assert!(cluster.server(i).del(&lock_key("unsure")));
    }
    cluster.server(4).kill();
    match guard.release() {
        Err(Error::Unavailable { granted, .. }) => assert_eq!(granted, 2),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// docs/protocol.md, "Inside the client": a release is retried only until
/// it is delivered. Once every instance answered it, nothing is sent again:
/// the scripts' call counts stay put.
#[test]
fn a_delivered_release_is_not_sent_again() {
    let cluster = RedisServers::start(3);
    let locks = builder(&cluster).build().unwrap();
    warm(&locks);
    let scripts = |i: usize| {
        let stats = cluster.server(i).commandstats();
        ["evalsha", "delifeq", "delex"]
            .iter()
            .map(|c| stats.get(*c).copied().unwrap_or(0))
            .sum::<u64>()
    };
    let guard = locks
        .lock_with("once", LockOptions::new().auto_extend(false))
        .unwrap();
    guard.release().unwrap();
    // Every instance ran the acquire and the release (on a loaded machine
    // an acquire may land after the grant was decided without it) and
    // holds no key.
    assert!(eventually(Duration::from_secs(5), || (0..3).all(
        |i| scripts(i) >= 2 && !cluster.server(i).exists(&lock_key("once"))
    )));
    let after: Vec<u64> = (0..3).map(scripts).collect();
    // Waiting for something not to happen: several retry pauses (20 ms).
    std::thread::sleep(Duration::from_millis(300));
    let later: Vec<u64> = (0..3).map(scripts).collect();
    assert_eq!(later, after, "the release was sent again");
}

// --- A grant paused past its validity -------------------------------------------

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

/// The check that a grant still has validity left when its last round is
/// counted. A quorum's answers bound each round by
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
