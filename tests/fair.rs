//! Fair (FIFO) locks (`Redlock::fair_lock`) on real servers: grants in
//! the order callers asked, a killed or paused waiter skipped (and a
//! paused one told so when it comes back), a waiter cancelled in the
//! middle of the queue, an instance restarted empty.

mod common;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redfence::testing::RedisServers;
use redfence::{Cancel, Error, LockOptions, Redlock};

use common::faults::ChildTest;
use common::{client, eventually, warm};

/// How long the tests wait for something that should take a moment.
const PATIENCE: Duration = Duration::from_secs(10);

fn queue_key(name: &str) -> String {
    format!("redfence:fair:{{{name}}}:queue")
}

/// How many waiters the queue of each server holds.
fn queued(cluster: &RedisServers, name: &str) -> Vec<usize> {
    cluster
        .iter()
        .map(|server| {
            let mut conn = redis::Client::open(server.url())
                .and_then(|c| c.get_connection())
                .expect("connect");
            redis::cmd("ZCARD")
                .arg(queue_key(name))
                .query(&mut conn)
                .expect("ZCARD")
        })
        .collect()
}

/// Waits until at least a quorum of servers queue `n` waiters.
fn wait_queued(cluster: &RedisServers, name: &str, n: usize) {
    assert!(
        eventually(PATIENCE, || queued(cluster, name)
            .iter()
            .filter(|q| **q >= n)
            .count()
            >= 2),
        "{n} waiters never queued: {:?}",
        queued(cluster, name)
    );
}

fn warm_client(cluster: &RedisServers) -> Redlock {
    let locks = client(cluster);
    warm(&locks);
    locks
}

/// A waiter on its own client and thread: its index goes into `granted`
/// when it gets the lock, which it releases at once.
fn waiter(
    cluster: &RedisServers,
    name: &str,
    index: usize,
    granted: &Arc<Mutex<Vec<(usize, u64)>>>,
    options: LockOptions,
) -> thread::JoinHandle<Result<(), Error>> {
    let (locks, name, granted) = (warm_client(cluster), name.to_string(), Arc::clone(granted));
    thread::Builder::new()
        .name(format!("waiter-{index}"))
        .spawn(move || {
            let guard = locks.fair_lock(&name).lock_with(options)?;
            granted.lock().unwrap().push((index, guard.token().get()));
            guard.release()
        })
        .unwrap()
}

#[test]
fn an_uncontended_fair_lock_is_the_lock_of_its_name() {
    let cluster = RedisServers::start(3);
    let locks = warm_client(&cluster);
    let fair = locks.fair_lock("invoice");
    let guard = fair.try_lock().unwrap();
    let holder = locks.holder("invoice").unwrap().expect("held");
    assert_eq!(holder.identity.as_deref(), Some(locks.identity()));
    assert!(matches!(
        locks.try_lock("invoice"),
        Err(Error::Contended { .. })
    ));
    assert!(matches!(fair.try_lock(), Err(Error::Contended { .. })));
    let first = guard.token();
    guard.extend(Duration::from_secs(10)).unwrap();
    guard.release().unwrap();
    let again = fair.try_lock().unwrap();
    assert!(again.token() > first);
    assert_eq!(queued(&cluster, "invoice"), [0, 0, 0], "nobody queued");
}

#[test]
fn a_bad_heartbeat_is_refused_with_a_reason() {
    let cluster = RedisServers::start(1);
    let locks = warm_client(&cluster);
    let short = locks.fair_lock("x").heartbeat(Duration::from_millis(10));
    match short.try_lock() {
        Err(Error::InvalidOptions { reason }) => assert!(reason.contains("heartbeat"), "{reason}"),
        other => panic!("expected InvalidOptions, got {other:?}"),
    }
    assert!(matches!(
        locks.fair_lock("").try_lock(),
        Err(Error::InvalidResource { .. })
    ));
}

/// Waiters that asked one after another are granted in that order, each
/// with a larger token than the one before.
#[test]
fn waiters_are_granted_in_the_order_they_asked() {
    let cluster = RedisServers::start(3);
    let locks = warm_client(&cluster);
    let holder = locks.fair_lock("order").lock().unwrap();
    let granted = Arc::new(Mutex::new(Vec::new()));
    let waiters: Vec<_> = (0..5)
        .map(|i| {
            let w = waiter(&cluster, "order", i, &granted, LockOptions::new());
            wait_queued(&cluster, "order", i + 1);
            w
        })
        .collect();
    holder.release().unwrap();
    for w in waiters {
        w.join().unwrap().unwrap();
    }
    let granted = granted.lock().unwrap();
    let order: Vec<usize> = granted.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [0, 1, 2, 3, 4], "grants out of ticket order");
    assert!(granted.windows(2).all(|w| w[0].1 < w[1].1), "{granted:?}");
    assert!(eventually(PATIENCE, || queued(&cluster, "order") == [0, 0, 0]));
}

/// Each release wakes the next in line: eight waiters, each on a client of
/// its own, release at once, so releases come a few milliseconds apart
/// (closer than the instances' copies of one release may be). Each
/// hand-over takes a round, not a heartbeat: counted by the release's
/// tag, no release is taken for a copy of the one before, which left the
/// next head waiting for its heartbeat (every 200 ms) to learn its turn.
#[test]
fn each_release_hands_the_lock_to_the_next_waiter_at_once() {
    const WAITERS: usize = 8;
    let cluster = RedisServers::start(3);
    let locks = warm_client(&cluster);
    let holder = locks.fair_lock("hand-over").lock().unwrap();
    let granted = Arc::new(Mutex::new(Vec::new()));
    let waiters: Vec<_> = (0..WAITERS)
        .map(|i| {
            let (locks, granted) = (warm_client(&cluster), Arc::clone(&granted));
            let w = thread::Builder::new()
                .name(format!("hand-over-{i}"))
                .spawn(move || {
                    let guard = locks.fair_lock("hand-over").lock()?;
                    granted.lock().unwrap().push(Instant::now());
                    guard.release()
                })
                .unwrap();
            wait_queued(&cluster, "hand-over", i + 1);
            w
        })
        .collect();
    let released = Instant::now();
    holder.release().unwrap();
    for w in waiters {
        w.join().unwrap().unwrap();
    }
    let mut at = granted.lock().unwrap().clone();
    at.sort();
    let mut gaps: Vec<Duration> = std::iter::once(at[0] - released)
        .chain(at.windows(2).map(|w| w[1] - w[0]))
        .collect();
    gaps.sort();
    // A hand-over is a release and a grant round: a few milliseconds
    // here, tens on a loaded machine; a heartbeat's is up to 200 ms.
    let median = gaps[WAITERS / 2];
    assert!(
        median < Duration::from_millis(50),
        "hand-overs {gaps:?}: the median waited for a heartbeat"
    );
}

/// A waiter cancelled in the middle of the queue leaves it: the others
/// keep their order.
#[test]
fn a_waiter_cancelled_in_the_middle_leaves_the_queue() {
    let cluster = RedisServers::start(3);
    let locks = warm_client(&cluster);
    let holder = locks.fair_lock("cancel").lock().unwrap();
    let granted = Arc::new(Mutex::new(Vec::new()));
    let cancel = Cancel::new();
    let mut waiters = Vec::new();
    for i in 0..3 {
        let options = match i {
            1 => LockOptions::new().cancel(&cancel),
            _ => LockOptions::new(),
        };
        waiters.push(waiter(&cluster, "cancel", i, &granted, options));
        wait_queued(&cluster, "cancel", i + 1);
    }
    cancel.cancel();
    let middle = waiters.remove(1);
    assert!(matches!(
        middle.join().unwrap(),
        Err(Error::Cancelled { .. })
    ));
    assert!(
        eventually(PATIENCE, || queued(&cluster, "cancel") == [2, 2, 2]),
        "the cancelled waiter stayed queued: {:?}",
        queued(&cluster, "cancel")
    );
    holder.release().unwrap();
    for w in waiters {
        w.join().unwrap().unwrap();
    }
    let order: Vec<usize> = granted.lock().unwrap().iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [0, 2]);
}

/// An instance restarted empty loses its queue: the order stands on the
/// others (a quorum).
#[test]
fn an_instance_restarted_empty_keeps_the_order() {
    let cluster = RedisServers::start(3);
    let locks = warm_client(&cluster);
    let holder = locks.fair_lock("restart").lock().unwrap();
    let granted = Arc::new(Mutex::new(Vec::new()));
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let w = waiter(&cluster, "restart", i, &granted, LockOptions::new());
            wait_queued(&cluster, "restart", i + 1);
            w
        })
        .collect();
    cluster.server(2).restart();
    holder.release().unwrap();
    for w in waiters {
        w.join().unwrap().unwrap();
    }
    let order: Vec<usize> = granted.lock().unwrap().iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [0, 1, 2]);
}

const CHILD_URLS: &str = "REDFENCE_FAIR_CHILD_URLS";

/// A waiter in a process of its own, for the tests that kill or stop it:
/// reports how its wait ended.
#[test]
#[ignore = "run as a child process by the tests below"]
fn child_fair_waiter() {
    let Ok(urls) = std::env::var(CHILD_URLS) else {
        return;
    };
    let locks = Redlock::new(urls.split(',')).unwrap();
    let outcome = match locks
        .fair_lock("dead")
        .try_lock_for(Duration::from_secs(60))
    {
        Ok(guard) => {
            drop(guard);
            "granted".to_string()
        }
        Err(Error::Skipped { .. }) => "skipped".to_string(),
        Err(other) => format!("error {other}"),
    };
    println!("{}outcome={outcome}", common::faults::REPORT);
}

/// A waiter killed at the head of the queue is skipped within about a
/// heartbeat TTL (1 s) of its death, not a lease's TTL or minutes.
#[test]
fn a_killed_waiter_at_the_head_is_skipped() {
    let cluster = RedisServers::start(3);
    let locks = warm_client(&cluster);
    let holder = locks.fair_lock("dead").lock().unwrap();
    let child = ChildTest::spawn(
        "child_fair_waiter",
        &[(CHILD_URLS, cluster.urls().join(","))],
    );
    wait_queued(&cluster, "dead", 1);
    let granted = Arc::new(Mutex::new(Vec::new()));
    let next = waiter(&cluster, "dead", 1, &granted, LockOptions::new());
    wait_queued(&cluster, "dead", 2);
    drop(child);
    let killed = Instant::now();
    holder.release().unwrap();
    next.join().unwrap().unwrap();
    println!("granted {:?} after the head was killed", killed.elapsed());
    assert_eq!(granted.lock().unwrap().len(), 1);
}

/// A waiter paused (SIGSTOP) at the head is skipped; resumed, it is told
/// it lost its place.
#[test]
fn a_paused_waiter_is_skipped_and_told_when_it_comes_back() {
    let cluster = RedisServers::start(3);
    let locks = warm_client(&cluster);
    let holder = locks.fair_lock("dead").lock().unwrap();
    let mut child = ChildTest::spawn(
        "child_fair_waiter",
        &[(CHILD_URLS, cluster.urls().join(","))],
    );
    wait_queued(&cluster, "dead", 1);
    child.sigstop();
    let granted = Arc::new(Mutex::new(Vec::new()));
    let next = waiter(&cluster, "dead", 1, &granted, LockOptions::new());
    wait_queued(&cluster, "dead", 2);
    holder.release().unwrap();
    next.join().unwrap().unwrap();
    assert_eq!(
        granted.lock().unwrap().len(),
        1,
        "the paused head blocked the queue"
    );
    child.sigcont();
    let line = child.next_report(PATIENCE);
    assert!(line.contains("outcome=skipped"), "{line}");
    child.wait_success(PATIENCE);
}
