//! Waiting for a held lock, against real redis-server processes: a waiter
//! is woken by the holder's release (published on a channel it subscribes
//! to), not by a timer; waiters of one client take turns and hand on a
//! wake-up they cannot use; a call never starts an attempt that cannot end
//! within its wait budget, and a free resource waits for nothing. A
//! cancelled call returns at once, holding nothing.

mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::faults::Proxied;
use common::{builder, client, eventually, hold_as, lock_key, subscribers, warm};
use redfence::testing::{Fault, RedisServers};
use redfence::{Cancel, Error, LockOptions};

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

const WAITERS: usize = 3;

const TURN_ROUNDS: usize = 8;

/// The longest a turn may take: far below the 250 ms after which a waiter
/// that heard nothing tries again on its own, and the 2 s random pause of
/// the waiting client. A turn takes a few milliseconds; one of the 24 may
/// be slower (a busy machine), two or more may not.
const TURN_BOUND: Duration = Duration::from_millis(100);

/// Contract (README "How it works", Waiting: "Within one client, waiters
/// take turns: a release wakes the longest-waiting call, and a new call
/// queues behind those already waiting instead of barging in"; src/transport/notify/:
/// a wake-up the woken call did not use is handed on to the next in line).
/// Three threads of one client wait for a resource that another client
/// holds; when it is released, each of them must get its turn, one after the
/// other, each within a bound far below the fallbacks (the 250 ms re-check
/// of a waiter that heard nothing, the client's 2 s random pause): every
/// turn is started by the release of the one before, not by a timer.
///
/// Catches: a finished call left registered as a waiter (so
/// the next release wakes a call that no longer waits, and the real next
/// waiter only notices on its 250 ms re-check). Not covered, because no
/// real fault makes it matter deterministically: the hand-on of a wake-up
/// that a call leaves unused, which happens only when a release lands
/// during the last attempt of a call whose wait budget then ends.
#[test]
fn waiters_of_one_client_each_get_their_turn_promptly() {
    let cluster = RedisServers::start(3);
    let holder = builder(&cluster)
        .instance_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let waiting = builder(&cluster)
        .instance_timeout(Duration::from_millis(300))
        .retry_delay(Duration::from_secs(2))
        .build()
        .unwrap();
    warm(&holder);
    warm(&waiting);
    let mut turns = Vec::new();
    for round in 0..TURN_ROUNDS {
        let resource = format!("turns-{round}");
        let guard = holder.lock(&resource).unwrap();
        let started = std::sync::atomic::AtomicUsize::new(0);
        let (tx, rx) = std::sync::mpsc::channel();
        let released_at = std::thread::scope(|s| {
            for _ in 0..WAITERS {
                let tx = tx.clone();
                let (waiting, resource, started) = (&waiting, &resource, &started);
                s.spawn(move || {
                    started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let opts = LockOptions::new().wait(Duration::from_secs(20));
                    let g = waiting
                        .lock_with(resource, opts)
                        .expect("waiter gets its turn");
                    let got = Instant::now();
                    let token = g.token();
                    g.release().unwrap();
                    tx.send((got, Instant::now(), token)).unwrap();
                });
            }
            assert!(
                eventually(Duration::from_secs(5), || started
                    .load(std::sync::atomic::Ordering::SeqCst)
                    == WAITERS
                    && subscribers(&cluster, &resource) == 3),
                "round {round}: the waiters never listened for the release"
            );
            guard.release().unwrap();
            Instant::now()
        });
        drop(tx);
        let mut got: Vec<(Instant, Instant, redfence::FencingToken)> = rx.iter().collect();
        assert_eq!(got.len(), WAITERS);
        got.sort_by_key(|g| g.0);
        let mut previous_release = released_at;
        for (k, (granted, released, _)) in got.iter().enumerate() {
            turns.push((
                round,
                k,
                granted.saturating_duration_since(previous_release),
            ));
            previous_release = *released;
        }
        assert!(
            got.windows(2).all(|w| w[0].2 < w[1].2),
            "round {round}: tokens must increase turn by turn"
        );
    }
    let slow: Vec<_> = turns.iter().filter(|t| t.2 >= TURN_BOUND).collect();
    assert!(
        slow.len() <= 1,
        "turns slower than {TURN_BOUND:?} (round, turn, time since the previous release): \
         {slow:?}; all: {turns:?}"
    );
}

/// True when this process's thread named `name` is blocked (state `S` in
/// `/proc`), twice in a row a few milliseconds apart.
fn thread_sleeps(name: &str) -> bool {
    let state = || -> Option<char> {
        for task in std::fs::read_dir("/proc/self/task").ok()? {
            let path = task.ok()?.path();
            let comm = std::fs::read_to_string(path.join("comm")).ok()?;
            if comm.trim_end() == name {
                let stat = std::fs::read_to_string(path.join("stat")).ok()?;
                // "pid (comm) S ...": the state follows the last ')'.
                return stat.rsplit(')').next()?.trim_start().chars().next();
            }
        }
        None
    };
    if state() != Some('S') {
        return false;
    }
    std::thread::sleep(Duration::from_millis(5));
    state() == Some('S')
}

/// Contract (README and docs/protocol.md: within one client, waiters take
/// turns and a release wakes the next call in line, not a timer). One call
/// of a client waits for the set {R, S}, a later one for R alone; another
/// client holds both. S stays held and R is released: the release wakes
/// the set's call first (it waited longest), which is refused for S; the
/// release must then reach the call that wants only R, which locks it at
/// once, not at the next fallback re-check (250 ms) or retry pause (2 s).
///
/// Catches: a woken call that cannot use the release keeping
/// it (no hand-on to the next in line).
#[test]
fn a_release_a_set_cannot_use_goes_to_the_next_waiter() {
    let cluster = RedisServers::start(3);
    let holder = builder(&cluster)
        .instance_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let waiting = builder(&cluster)
        .instance_timeout(Duration::from_millis(300))
        .retry_delay(Duration::from_secs(2))
        .build()
        .unwrap();
    warm(&holder);
    warm(&waiting);
    for round in 0..3 {
        let (r, s_name) = (format!("pass-r-{round}"), format!("pass-s-{round}"));
        let r_guard = holder.lock(&r).unwrap();
        let s_guard = holder.lock(&s_name).unwrap();
        let opts = LockOptions::new().wait(Duration::from_secs(10));
        std::thread::scope(|s| {
            let set = s.spawn(|| waiting.lock_all_with(&[r.as_str(), s_name.as_str()], opts));
            assert!(
                eventually(Duration::from_secs(5), || subscribers(&cluster, &r) == 3
                    && subscribers(&cluster, &s_name) == 3),
                "the set's call never listened"
            );
            let single = std::thread::Builder::new()
                .name("single-waiter".into())
                .spawn_scoped(s, || {
                    let guard = waiting
                        .lock_with(&r, opts)
                        .expect("the single call locks R");
                    let got = Instant::now();
                    guard.release().unwrap();
                    got
                })
                .unwrap();
            // The single call queues behind the set's (same client, same
            // channel) and blocks: wait until its thread sleeps.
            assert!(
                eventually(Duration::from_secs(5), || thread_sleeps("single-waiter")),
                "the single call never started waiting"
            );
            // Release right after the single call's periodic re-check (its
            // refused attempt is the only SET the instances run meanwhile:
            // a set's refused attempt sets nothing), so that its next one
            // is a whole 250 ms away and only a hand-on can wake it sooner.
            let sets = || {
                cluster
                    .server(0)
                    .commandstats()
                    .get("set")
                    .copied()
                    .unwrap_or(0)
            };
            let before = sets();
            assert!(
                eventually(Duration::from_secs(5), || sets() > before),
                "the single call never re-checked"
            );
            let released = Instant::now();
            r_guard.release().unwrap();
            let got = single.join().unwrap();
            let took = got.saturating_duration_since(released);
            assert!(
                took < Duration::from_millis(150),
                "round {round}: the call waiting for R alone got it {took:?} after its release"
            );
            s_guard.release().unwrap();
            let set_guard = set
                .join()
                .unwrap()
                .expect("the set's call locks both in the end");
            set_guard.release().unwrap();
        });
    }
}

/// `LockOptions::wait`: "A new attempt starts only if it can end before
/// this budget does." An attempt may take two instance timeouts (the vote
/// and a raise round): with 1 s timeouts, an attempt that took its full
/// timeout leaves too little of a 2.5 s budget for another.
#[test]
fn no_attempt_starts_that_cannot_end_within_the_wait() {
    let p = Proxied::start(5);
    let locks = p
        .builder()
        .instance_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    warm(&locks);
    // Held on two, free on one, two never answer: each attempt is decided
    // only when the two time out, as Contended.
    for i in [0, 1] {
        hold_as(p.cluster.server(i), "budget", "alice");
    }
    p.set(&[3, 4], Fault::BlackHole);
    let start = Instant::now();
    let result = locks.lock_with(
        "budget",
        LockOptions::new().wait(Duration::from_millis(2500)),
    );
    let elapsed = start.elapsed();
    p.pass_all();
    match result {
        Err(Error::Contended { attempts, .. }) => assert_eq!(attempts, 1, "after {elapsed:?}"),
        other => panic!("expected Contended, got {other:?}"),
    }
    assert!(elapsed < Duration::from_millis(2500), "{elapsed:?}");
}

/// A lock call on a free resource does not wait for anything: the default
/// wait budget is for retries, and no other call of this client waits for
/// these resources. Ten lock + release pairs take a small fraction of one
/// retry pause (250 ms) each.
#[test]
fn locking_a_free_resource_waits_for_nothing() {
    let cluster = RedisServers::start(3);
    let locks = builder(&cluster).build().unwrap();
    warm(&locks);
    let start = Instant::now();
    for i in 0..10 {
        locks.lock(&format!("free-{i}")).unwrap().release().unwrap();
    }
    let elapsed = start.elapsed();
    assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
}

/// Two warmed, patient clients (a holder and a waiter): on a loaded
/// machine a 50 ms instance timeout turns attempts into `Unavailable`,
/// retried after a short random pause, which is not the pacing the
/// tests below are about.
fn patient_pair(cluster: &RedisServers) -> (redfence::Redlock, redfence::Redlock) {
    let patient = || {
        builder(cluster)
            .instance_timeout(Duration::from_millis(1000))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (patient(), patient());
    warm(&holder);
    warm(&waiter);
    (holder, waiter)
}

/// docs/protocol.md, "Inside the client": a call waiting for a held lock
/// tries again when the holder's release is announced, and otherwise
/// re-checks every 250 ms at most (for a holder that dies without
/// releasing): waiting one second costs a handful of attempts, not a
/// stream of them.
#[test]
fn a_waiting_call_does_not_hammer_the_instances() {
    let cluster = RedisServers::start(3);
    let (holder, waiter) = patient_pair(&cluster);
    let _held = holder.lock("busy").unwrap();
    let result = waiter.lock_with("busy", LockOptions::new().wait(Duration::from_secs(1)));
    match result {
        Err(Error::Contended { attempts, .. }) => {
            assert!((2..=12).contains(&attempts), "{attempts} attempts in 1 s")
        }
        other => panic!("expected Contended, got {other:?}"),
    }
}

/// The same when an instance lacks the holder's key (lost, or its write
/// never landed): that instance grants each attempt, most answers still
/// name the holder, and the call waits for the holder's release as above
/// instead of retrying at once as after a split vote (which made 16 to
/// 22 attempts a second, now and then, in the test above).
#[test]
fn a_waiting_call_does_not_hammer_a_lock_held_on_a_bare_quorum() {
    let cluster = RedisServers::start(3);
    let (holder, waiter) = patient_pair(&cluster);
    let _held = holder.lock("bare").unwrap();
    // The grant returns once a quorum granted: the third write may land
    // a moment later. Deleted once it did.
    let key = lock_key("bare");
    assert!(
        eventually(Duration::from_secs(3), || matches!(
            cluster.server(2).cmd(&["DEL", &key]),
            Ok(redis::Value::Int(1))
        )),
        "the holder's key never reached instance 2"
    );
    let result = waiter.lock_with("bare", LockOptions::new().wait(Duration::from_secs(1)));
    match result {
        Err(Error::Contended {
            attempts, holder, ..
        }) => {
            assert!(holder.is_some(), "most answers name the holder");
            // One at once, one after subscribing, one per 250 ms re-check:
            // 6 here; without waiting for the release, 10 to 26.
            assert!((2..=8).contains(&attempts), "{attempts} attempts in 1 s")
        }
        other => panic!("expected Contended, got {other:?}"),
    }
}

/// Release wake-ups survive broken subscriber connections: a waiting call's
/// subscriptions are made again once the instances can be reached, so the
/// holder's release still wakes it at once.
#[test]
fn waiters_subscribe_again_after_their_connections_were_cut() {
    let p = Proxied::start(3);
    let holder = p.builder().build().unwrap();
    let waiter = p.builder().build().unwrap();
    warm(&holder);
    warm(&waiter);
    let guard = holder.lock("resubscribe").unwrap();
    let subscribed = || {
        p.cluster
            .iter()
            .filter(|s| {
                let reply = s.cmd(&["PUBSUB", "NUMSUB", "redfence:released:{resubscribe}"]);
                matches!(reply, Ok(redis::Value::Array(items))
                    if matches!(items.get(1), Some(redis::Value::Int(n)) if *n > 0))
            })
            .count()
    };
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter.lock_with(
                "resubscribe",
                LockOptions::new().wait(Duration::from_secs(20)),
            )
        });
        assert!(eventually(Duration::from_secs(5), || subscribed() == 3));
        // Every connection of both clients is cut, then the network heals.
        p.set(&[0, 1, 2], Fault::Reset);
        assert!(eventually(Duration::from_secs(5), || subscribed() == 0));
        p.pass_all();
        assert!(
            eventually(Duration::from_secs(10), || subscribed() == 3),
            "the waiter never subscribed again"
        );
        guard.release().unwrap();
        let got = waiting.join().unwrap().expect("the waiter gets the lock");
        got.release().unwrap();
    });
}

/// Runs `call` on its own thread; its result, once it returns.
fn spawn_call<T: Send + 'static>(
    call: impl FnOnce() -> T + Send + 'static,
) -> crossbeam_channel::Receiver<T> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(call());
    });
    rx
}

/// A call waiting (an hour's budget) for a lock held elsewhere returns
/// `Cancelled` as soon as its handle is cancelled from another thread, and
/// holds nothing; a call given a cancelled handle makes no attempt.
#[test]
fn a_cancelled_wait_returns_at_once_and_holds_nothing() {
    let cluster = RedisServers::start(3);
    let holder = client(&cluster);
    let _held = holder
        .lock_with("job", LockOptions::new().ttl(Duration::from_secs(120)))
        .unwrap();
    let shutdown = Cancel::new();
    let waiting = spawn_call({
        let (locks, shutdown) = (client(&cluster), shutdown.clone());
        move || {
            let hour = LockOptions::new().wait(Duration::from_secs(3600));
            locks
                .lock_with("job", hour.cancel(&shutdown))
                .map(|g| g.token())
        }
    });
    assert!(eventually(Duration::from_secs(5), || subscribers(
        &cluster, "job"
    ) >= 2));
    shutdown.cancel();
    let result = waiting
        .recv_timeout(Duration::from_secs(10))
        .expect("the cancelled call returns long before its budget");
    assert!(
        matches!(result, Err(Error::Cancelled { ref resource }) if resource == "job"),
        "{result:?}"
    );

    let free = client(&cluster);
    assert!(matches!(
        free.lock_with("other", LockOptions::new().cancel(&shutdown)),
        Err(Error::Cancelled { .. })
    ));
    assert_eq!(common::holders(&cluster, "other"), 0, "no attempt was made");
}

/// Instances that do not answer make a call pause between attempts; a
/// cancel ends the pause at once.
#[test]
fn a_cancel_ends_the_pause_between_attempts() {
    let net = Proxied::start(3);
    let locks = net
        .builder()
        .instance_timeout(Duration::from_millis(100))
        .retry_delay(Duration::from_secs(3600))
        .build()
        .unwrap();
    warm(&locks);
    net.set(&[0, 1], Fault::BlackHole);
    let shutdown = Cancel::new();
    let waiting = spawn_call({
        let shutdown = shutdown.clone();
        move || {
            let hour = LockOptions::new().wait(Duration::from_secs(3600));
            locks
                .lock_with("job", hour.cancel(&shutdown))
                .map(|g| g.token())
        }
    });
    // The first attempt failed and was cleaned up (its void key is on the
    // instance that answered): the call now pauses, for up to an hour.
    let reachable = net.cluster.server(2);
    assert!(eventually(Duration::from_secs(5), || !reachable
        .keys("redfence:void:*")
        .is_empty()));
    shutdown.cancel();
    let result = waiting
        .recv_timeout(Duration::from_secs(10))
        .expect("the cancel ends an hour's pause");
    assert!(matches!(result, Err(Error::Cancelled { .. })), "{result:?}");
    net.pass_all();
}

/// A cancel that arrives while an attempt is on its way: the attempt
/// finishes, its grant is undone on every instance, and the call returns
/// `Cancelled`.
#[test]
fn a_grant_that_arrives_after_the_cancel_is_released() {
    grant_after_cancel_is_undone(LockOptions::new());
}

/// The same with a one-minute hold: nobody runs the job the hold protects,
/// so the grant is undone as a failed attempt is, not kept for the hold.
/// (It once went through the release that keeps a hold, and the lock stayed
/// held by nobody for the whole minute.)
#[test]
fn a_cancelled_grant_with_a_hold_is_undone_not_held() {
    grant_after_cancel_is_undone(LockOptions::new().hold_at_least(Duration::from_secs(60)));
}

fn grant_after_cancel_is_undone(options: LockOptions) {
    let net = Proxied::start(3);
    let locks = net
        .builder()
        .instance_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    warm(&locks);
    net.set(&[0, 1, 2], Fault::Delay(Duration::from_millis(300)));
    let shutdown = Cancel::new();
    let waiting = spawn_call({
        let shutdown = shutdown.clone();
        move || {
            let result = locks.lock_with("job", options.cancel(&shutdown));
            result.map(|g| g.token())
        }
    });
    // The acquire has landed; its replies are still on their way back.
    assert!(eventually(Duration::from_secs(5), || common::holders(
        &net.cluster,
        "job"
    ) >= 2));
    shutdown.cancel();
    let result = waiting
        .recv_timeout(Duration::from_secs(10))
        .expect("the call returns");
    assert!(matches!(result, Err(Error::Cancelled { .. })), "{result:?}");
    assert!(
        eventually(Duration::from_secs(5), || common::holders(
            &net.cluster,
            "job"
        ) == 0),
        "the grant was released"
    );
    net.pass_all();
}

/// A release near the end of the wait is not missed: the call listens
/// almost to its deadline (until its measured attempt time would no longer
/// fit), not two instance timeouts before it.
#[test]
fn a_release_late_in_the_wait_is_taken() {
    let cluster = RedisServers::start(3);
    let holder = client(&cluster);
    let waiter = builder(&cluster)
        .instance_timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    warm(&waiter);
    let held = holder.lock("late").unwrap();
    let start = Instant::now();
    let release = std::thread::spawn(move || {
        // Past the old cut-off (the budget less two instance timeouts:
        // 300 ms), well before the end of the 600 ms budget.
        std::thread::sleep(Duration::from_millis(450).saturating_sub(start.elapsed()));
        held.release().unwrap();
    });
    let got = waiter.try_lock_for("late", Duration::from_millis(600));
    release.join().unwrap();
    assert!(got.is_ok(), "gave up at {:?}: {got:?}", start.elapsed());
}
