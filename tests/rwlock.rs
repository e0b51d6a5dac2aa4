//! Reader-writer locks (`Redlock::rw_lock`) on real servers: readers share,
//! a writer is alone, a writer's token exceeds every earlier grant's, and
//! a waiting writer is not starved by new readers.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use redfence::testing::RedisServers;
use redfence::{Error, FencingToken, LockOptions};

use common::client;

#[test]
fn readers_share_and_a_writer_is_alone() {
    let cluster = RedisServers::start(3);
    let (a, b) = (client(&cluster), client(&cluster));
    let first = a.rw_lock("doc").try_read().unwrap();
    let second = b.rw_lock("doc").try_read().unwrap();
    assert!(matches!(
        a.rw_lock("doc").try_write(),
        Err(Error::Contended { .. })
    ));
    first.release().unwrap();
    second.release().unwrap();
    let writing = a.rw_lock("doc").try_write().unwrap();
    assert!(matches!(
        b.rw_lock("doc").try_read(),
        Err(Error::Contended { .. })
    ));
    assert!(matches!(
        b.rw_lock("doc").try_write(),
        Err(Error::Contended { .. })
    ));
    writing.release().unwrap();
    b.rw_lock("doc").try_read().unwrap().release().unwrap();
}

#[test]
fn a_write_token_exceeds_every_earlier_grant() {
    let cluster = RedisServers::start(3);
    let (a, b) = (client(&cluster), client(&cluster));
    let r1 = a.rw_lock("t").read().unwrap();
    let r2 = b.rw_lock("t").read().unwrap();
    let highest = r1.token().max(r2.token());
    drop((r1, r2));
    let w = a.rw_lock("t").write().unwrap();
    assert!(w.token() > highest, "{} after {highest}", w.token());
    let before = w.token();
    w.release().unwrap();
    let r3 = b.rw_lock("t").read().unwrap();
    assert!(r3.token() > before);
}

#[test]
fn new_readers_queue_behind_a_waiting_writer() {
    let cluster = RedisServers::start(3);
    let (a, b, c) = (client(&cluster), client(&cluster), client(&cluster));
    let reading = a.rw_lock("q").read().unwrap();
    let writer = {
        let lock = b.rw_lock("q");
        thread::spawn(move || {
            lock.try_write_for(Duration::from_secs(20))
                .map(|w| w.token())
        })
    };
    // The writer's refused attempt recorded its wait on a quorum.
    assert!(common::eventually(Duration::from_secs(5), || {
        cluster
            .iter()
            .filter(|s| s.exists("redfence:rw:{q}:intent"))
            .count()
            >= 2
    }));
    match c.rw_lock("q").try_read() {
        Err(Error::Contended { .. }) => {}
        other => panic!("a reader overtook the waiting writer: {other:?}"),
    }
    let read_token = reading.token();
    reading.release().unwrap();
    let write_token = writer.join().unwrap().unwrap();
    assert!(write_token > read_token);
}

/// A waiting writer that is cancelled takes back its wait at once: a new
/// reader is granted right after the call returns, not a TTL later. (The
/// writer's mark stayed for the rest of its wait, up to a TTL, and kept
/// every new reader out.)
#[test]
fn a_cancelled_writer_leaves_readers_free_at_once() {
    let cluster = RedisServers::start(3);
    let (a, b, c) = (client(&cluster), client(&cluster), client(&cluster));
    let reading = a.rw_lock("q").read().unwrap();
    let shutdown = redfence::Cancel::new();
    let writer = {
        let lock = b.rw_lock("q");
        let options = LockOptions::new()
            .wait(Duration::from_secs(60))
            .cancel(&shutdown);
        thread::spawn(move || lock.write_with(options).map(|w| w.token()))
    };
    let marked = || {
        cluster
            .iter()
            .filter(|s| s.exists("redfence:rw:{q}:intent"))
            .count()
    };
    assert!(common::eventually(Duration::from_secs(5), || marked() >= 2));
    assert!(matches!(
        c.rw_lock("q").try_read(),
        Err(Error::Contended { .. })
    ));
    shutdown.cancel();
    let result = writer.join().unwrap();
    assert!(matches!(result, Err(Error::Cancelled { .. })), "{result:?}");
    assert!(
        common::eventually(Duration::from_secs(2), || marked() == 0),
        "the cancelled writer's mark stayed"
    );
    let second = c.rw_lock("q").try_read().expect("a new reader gets in");
    drop((second, reading));
}

/// Clients mix reads and writes on one lock: a writer never overlaps
/// another guard, and each write's token exceeds every token granted
/// before it.
#[test]
fn exclusion_and_tokens_under_contention() {
    let cluster = RedisServers::start(3);
    let readers = AtomicUsize::new(0);
    let writers = AtomicUsize::new(0);
    let granted: Mutex<Vec<FencingToken>> = Mutex::new(Vec::new());
    let clients: Vec<_> = (0..3).map(|_| client(&cluster)).collect();
    let wait = Duration::from_secs(30);
    thread::scope(|s| {
        for (c, locks) in clients.iter().enumerate() {
            for t in 0..2 {
                let (readers, writers, granted) = (&readers, &writers, &granted);
                s.spawn(move || {
                    let lock = locks.rw_lock("mixed");
                    for i in 0..12 {
                        if (c + t + i) % 3 == 0 {
                            let w = lock.try_write_for(wait).unwrap();
                            let mut seen = granted.lock().unwrap();
                            assert!(seen.iter().all(|t| *t < w.token()), "write token not above");
                            seen.push(w.token());
                            drop(seen);
                            assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                            assert_eq!(readers.load(Ordering::SeqCst), 0, "a reader with a writer");
                            thread::sleep(Duration::from_millis(2));
                            writers.fetch_sub(1, Ordering::SeqCst);
                            w.release().unwrap();
                        } else {
                            let r = lock.try_read_for(wait).unwrap();
                            granted.lock().unwrap().push(r.token());
                            readers.fetch_add(1, Ordering::SeqCst);
                            assert_eq!(writers.load(Ordering::SeqCst), 0, "a writer with a reader");
                            thread::sleep(Duration::from_millis(2));
                            readers.fetch_sub(1, Ordering::SeqCst);
                            r.release().unwrap();
                        }
                    }
                });
            }
        }
    });
    assert_eq!(granted.into_inner().unwrap().len(), 3 * 2 * 12);
}

#[test]
fn an_expired_reader_lets_the_writer_in() {
    let cluster = RedisServers::start(3);
    let (a, b) = (client(&cluster), client(&cluster));
    let short = LockOptions::new()
        .ttl(Duration::from_millis(300))
        .auto_extend(false);
    let reading = a.rw_lock("lease").read_with(short).unwrap();
    assert!(reading.wait_lost(Duration::from_secs(5)).is_some());
    let w = b
        .rw_lock("lease")
        .try_write_for(Duration::from_secs(5))
        .unwrap();
    assert!(w.token() > reading.token());
    assert!(matches!(reading.release(), Err(Error::Lost { .. })));
}

#[test]
fn the_watchdog_keeps_a_read_alive() {
    let cluster = RedisServers::start(3);
    let (a, b) = (client(&cluster), client(&cluster));
    let opts = LockOptions::new().ttl(Duration::from_millis(400));
    let reading = a.rw_lock("kept").read_with(opts).unwrap();
    // Several TTLs later the read still holds, and keeps writers out.
    assert!(reading.wait_lost(Duration::from_millis(1500)).is_none());
    assert!(matches!(
        b.rw_lock("kept").try_write(),
        Err(Error::Contended { .. })
    ));
    reading.extend(Duration::from_secs(5)).unwrap();
    reading.release().unwrap();
    b.rw_lock("kept").try_write().unwrap().release().unwrap();
}

#[test]
fn reads_and_writes_with_one_instance_stopped() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    common::warm(&locks);
    cluster.server(2).stop();
    let lock = locks.rw_lock("degraded");
    let opts = LockOptions::new().wait(Duration::from_secs(10));
    let r = lock.read_with(opts).unwrap();
    r.release().unwrap();
    let w = lock.write_with(opts).unwrap();
    w.release().unwrap();
    cluster.server(2).cont();
}

#[test]
fn bad_input_is_a_clear_error_and_writes_nothing() {
    let cluster = RedisServers::start(1);
    let locks = client(&cluster);
    assert!(matches!(
        locks.rw_lock("").try_read(),
        Err(Error::InvalidResource { .. })
    ));
    let hold = LockOptions::new().hold_at_least(Duration::from_secs(1));
    assert!(matches!(
        locks.rw_lock("x").write_with(hold),
        Err(Error::InvalidOptions { .. })
    ));
    assert!(cluster.server(0).keys("*").is_empty());
}

/// An operator's unlock of an rw lock revokes a crashed writer, then
/// crashed readers, naming each; a new grant follows at once, its token
/// above theirs.
#[test]
fn force_release_revokes_the_writer_and_the_readers() {
    let cluster = RedisServers::start(3);
    let crashed = common::builder(&cluster)
        .identity("crashed")
        .build()
        .unwrap();
    let long = LockOptions::new()
        .ttl(Duration::from_secs(120))
        .auto_extend(false);
    let lock = crashed.rw_lock("doc");
    let writer = lock.write_with(long).unwrap();
    let written = writer.token();
    std::mem::forget(writer);
    let operator = client(&cluster).rw_lock("doc");
    assert!(matches!(operator.try_read(), Err(Error::Contended { .. })));
    let revoked = operator.force_release().expect("a quorum answers");
    let writer = revoked.writer.expect("the writer is named");
    assert_eq!(writer.identity.as_deref(), Some("crashed"));
    assert!(revoked.readers.is_empty());

    let readers: Vec<FencingToken> = (0..2)
        .map(|_| {
            let read = lock.read_with(long).unwrap();
            let token = read.token();
            std::mem::forget(read);
            token
        })
        .collect();
    assert!(readers.iter().all(|t| *t > written));
    assert!(matches!(operator.try_write(), Err(Error::Contended { .. })));
    let revoked = operator.force_release().expect("a quorum answers");
    assert!(revoked.writer.is_none());
    assert_eq!(revoked.readers.len(), 2);
    let write = operator.try_write().expect("the lock is free at once");
    assert!(readers.iter().all(|t| write.token() > *t));
}
