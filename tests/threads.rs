//! The client's threads: a fixed number, whatever the number of guards, and
//! all of them gone when the client is.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::faults::Proxied;
use common::{client, eventually, lock_key};
use redfence::testing::{Fault, RedisServers};
use redfence::LockOptions;

/// Both tests count this process's threads, so they take turns.
static SERIAL: Mutex<()> = Mutex::new(());

/// Names of this process's threads that belong to redfence's client (the
/// kernel keeps the first 15 bytes of a name).
fn client_threads() -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").expect("procfs") {
        let comm = entry.expect("task").path().join("comm");
        if let Ok(name) = std::fs::read_to_string(comm) {
            let name = name.trim().to_string();
            let ours = [
                "redfence-instan",
                "redfence-watchd",
                "redfence-connec",
                "redfence-subscr",
            ];
            if ours.iter().any(|p| name.starts_with(p)) {
                names.push(name);
            }
        }
    }
    names.sort();
    names
}

#[test]
fn dropping_the_client_stops_every_thread() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = RedisServers::start(3);
    assert!(client_threads().is_empty(), "{:?}", client_threads());
    let locks = client(&cluster);
    let guard = locks.lock("threads").unwrap();
    // A thread names itself once it first runs, which on a loaded machine
    // can be after the lock call returned.
    assert!(
        eventually(Duration::from_secs(5), || client_threads()
            .iter()
            .any(|n| n.starts_with("redfence-watchd"))),
        "{:?}",
        client_threads()
    );
    let names = client_threads();
    assert_eq!(
        names
            .iter()
            .filter(|n| n.starts_with("redfence-instan"))
            .count(),
        3
    );
    let clone = locks.clone();
    drop(locks);
    drop(clone);
    // The guard keeps the client alive: it still needs the workers.
    assert!(guard.is_held());
    assert!(!client_threads().is_empty());
    guard.release().unwrap();
    // The workers, the watchdog and the subscribers are joined before the
    // last handle's drop returns; r2d2's connect threads are told to stop
    // and end on their own.
    let joined = ["redfence-instan", "redfence-watchd", "redfence-subscr"];
    let left: Vec<String> = client_threads()
        .into_iter()
        .filter(|n| joined.iter().any(|j| n.starts_with(j)))
        .collect();
    assert!(left.is_empty(), "still running after the drop: {left:?}");
    assert!(
        eventually(Duration::from_secs(2), || client_threads().is_empty()),
        "threads left behind: {:?}",
        client_threads()
    );
}

#[test]
fn thousands_of_guards_share_the_same_few_threads() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    // Per instance a worker, a subscriber and at most one connect thread;
    // one watchdog.
    let bound = 3 * 3 + 1;
    let opts = LockOptions::new().ttl(Duration::from_millis(1500));
    let guards: Vec<_> = (0..2000)
        .map(|i| locks.lock_with(&format!("many-{i}"), opts).unwrap())
        .collect();
    let threads = client_threads();
    assert!(
        threads.len() <= bound,
        "threads grew with guards: {threads:?}"
    );
    // Every lease is kept alive past its TTL by the one watchdog.
    std::thread::sleep(Duration::from_millis(3000));
    let lost = guards.iter().filter(|g| !g.is_held()).count();
    assert_eq!(lost, 0, "{lost} of 2000 leases lost");
    drop(guards);
    assert!(eventually(Duration::from_secs(5), || cluster
        .server(0)
        .keys("redfence:lock:*")
        .is_empty()));
}

/// Dropping the last handle on a client stops its worker threads *after*
/// they sent what was queued: a program that releases and then drops its
/// client (and exits) has its release delivered to every instance, the
/// slow one included, by the time the drop returns.
#[test]
fn dropping_the_client_delivers_queued_releases_first() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let net = Proxied::start(3);
    let locks = net
        .builder()
        .instance_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || locks
        .ping()
        .iter()
        .all(|(_, r)| r.is_ok())));
    let guard = locks
        .lock_with("last-words", LockOptions::new().auto_extend(false))
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || net
        .cluster
        .iter()
        .all(|s| s.exists(&lock_key("last-words")))));
    // Instance 3 answers 400 ms late: the release returns on the other two.
    net.set(&[2], Fault::Delay(Duration::from_millis(200)));
    guard.release().unwrap();
    drop(locks);
    assert!(
        !net.cluster.server(2).exists(&lock_key("last-words")),
        "the drop returned before the slow instance got the release"
    );
    net.pass_all();
}
