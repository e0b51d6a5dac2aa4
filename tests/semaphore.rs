//! Counting semaphores with fenced permits (`Redlock::semaphore`), on real
//! servers: the count holds across clients, each permit has its own slot,
//! tokens increase per slot, waiters are woken by releases, and a caller
//! with another count is refused.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redfence::testing::RedisServers;
use redfence::{Error, LockOptions, MAX_PERMITS};

use common::client;

#[test]
fn no_more_permits_than_the_count_each_on_its_own_slot() {
    let cluster = RedisServers::start(3);
    let (a, b) = (client(&cluster), client(&cluster));
    let jobs = a.semaphore("jobs", 2);
    let first = jobs.try_acquire().unwrap();
    let second = b.semaphore("jobs", 2).try_acquire().unwrap();
    assert_ne!(first.slot(), second.slot());
    assert!(first.slot() < 2 && second.slot() < 2);
    match a.semaphore("jobs", 2).try_acquire() {
        Err(Error::Contended { resource, .. }) => assert_eq!(resource, "jobs"),
        other => panic!("a third permit of two: {other:?}"),
    }
    let freed = first.slot();
    first.release().unwrap();
    let third = b.semaphore("jobs", 2).try_acquire().unwrap();
    assert_eq!(third.slot(), freed, "the only free slot");
}

#[test]
fn tokens_increase_per_slot_across_clients() {
    let cluster = RedisServers::start(3);
    let clients = [client(&cluster), client(&cluster)];
    let mut last: HashMap<u32, redfence::FencingToken> = HashMap::new();
    for round in 0..20 {
        let permit = clients[round % 2].semaphore("tokens", 1).acquire().unwrap();
        assert_eq!(permit.slot(), 0);
        if let Some(before) = last.insert(0, permit.token()) {
            assert!(
                permit.token() > before,
                "{:?} after {before:?}",
                permit.token()
            );
        }
        permit.release().unwrap();
    }
}

/// Several clients hammer a 2-permit semaphore: never more than 2 holders,
/// never 2 on one slot, and each slot's tokens increase in grant order.
#[test]
fn exclusion_and_slot_tokens_under_contention() {
    let cluster = RedisServers::start(3);
    let in_use = AtomicUsize::new(0);
    let on_slot = [AtomicUsize::new(0), AtomicUsize::new(0)];
    let grants: Mutex<HashMap<u32, Vec<redfence::FencingToken>>> = Mutex::new(HashMap::new());
    let clients: Vec<_> = (0..3).map(|_| client(&cluster)).collect();
    thread::scope(|s| {
        for locks in &clients {
            for _ in 0..2 {
                let (in_use, on_slot, grants) = (&in_use, &on_slot, &grants);
                s.spawn(move || {
                    let sem = locks.semaphore("pool", 2);
                    for _ in 0..15 {
                        let permit = sem.try_acquire_for(Duration::from_secs(20)).unwrap();
                        let slot = permit.slot() as usize;
                        grants
                            .lock()
                            .unwrap()
                            .entry(permit.slot())
                            .or_default()
                            .push(permit.token());
                        assert!(in_use.fetch_add(1, Ordering::SeqCst) < 2, "a third holder");
                        assert_eq!(
                            on_slot[slot].fetch_add(1, Ordering::SeqCst),
                            0,
                            "two on slot {slot}"
                        );
                        thread::sleep(Duration::from_millis(2));
                        on_slot[slot].fetch_sub(1, Ordering::SeqCst);
                        in_use.fetch_sub(1, Ordering::SeqCst);
                        permit.ensure_held().unwrap();
                        permit.release().unwrap();
                    }
                });
            }
        }
    });
    let grants = grants.into_inner().unwrap();
    assert_eq!(grants.values().map(Vec::len).sum::<usize>(), 3 * 2 * 15);
    for (slot, tokens) in grants {
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "slot {slot}: {tokens:?}"
        );
    }
}

#[test]
fn a_waiter_gets_the_permit_a_holder_releases() {
    let cluster = RedisServers::start(3);
    let (a, b) = (client(&cluster), client(&cluster));
    let held = a.semaphore("one", 1).acquire().unwrap();
    let waiter = {
        let sem = b.semaphore("one", 1);
        thread::spawn(move || {
            sem.try_acquire_for(Duration::from_secs(20))
                .map(|p| p.token())
        })
    };
    // The waiter is parked on the release channel before the release.
    assert!(common::eventually(Duration::from_secs(5), || {
        common::subscribers_on(&cluster, "redfence:released:{one}:permits") > 0
    }));
    let token = held.token();
    held.release().unwrap();
    let next = waiter.join().unwrap().unwrap();
    assert!(next > token);
}

#[test]
fn a_caller_with_another_count_is_refused_and_changes_nothing() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let permit = locks.semaphore("counted", 2).acquire().unwrap();
    match locks.semaphore("counted", 3).try_acquire() {
        Err(Error::InvalidOptions { reason }) => {
            assert!(reason.contains("has 2 permits"), "{reason}");
            assert!(reason.contains("asked for 3"), "{reason}");
        }
        other => panic!("another count: {other:?}"),
    }
    for server in cluster.iter() {
        let record = server.cmd(&["GET", "redfence:permits:{counted}"]).unwrap();
        assert_eq!(record, redis::Value::BulkString(b"2".to_vec()));
    }
    permit.release().unwrap();
}

#[test]
fn bad_counts_and_names_are_clear_errors() {
    let cluster = RedisServers::start(1);
    let locks = client(&cluster);
    for permits in [0, MAX_PERMITS + 1] {
        assert!(matches!(
            locks.semaphore("x", permits).try_acquire(),
            Err(Error::InvalidOptions { .. })
        ));
    }
    assert!(matches!(
        locks.semaphore("", 2).try_acquire(),
        Err(Error::InvalidResource { .. })
    ));
    assert!(cluster.server(0).keys("*").is_empty(), "nothing written");
}

#[test]
fn permits_are_taken_with_one_instance_stopped() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    common::warm(&locks);
    cluster.server(2).stop();
    let sem = locks.semaphore("degraded", 2);
    let opts = LockOptions::new().wait(Duration::from_secs(10));
    let a = sem.acquire_with(opts).unwrap();
    let b = sem.acquire_with(opts).unwrap();
    assert_ne!(a.slot(), b.slot());
    assert!(matches!(sem.try_acquire(), Err(Error::Contended { .. })));
    drop(a);
    let start = Instant::now();
    let c = sem.acquire_with(opts).unwrap();
    assert!(start.elapsed() < Duration::from_secs(10));
    cluster.server(2).cont();
    drop((b, c));
}

#[test]
fn a_lost_permit_frees_its_slot_for_the_next_caller() {
    let cluster = RedisServers::start(3);
    let (a, b) = (client(&cluster), client(&cluster));
    let short = LockOptions::new()
        .ttl(Duration::from_millis(300))
        .auto_extend(false);
    let held = a.semaphore("leased", 1).acquire_with(short).unwrap();
    let lost = held.wait_lost(Duration::from_secs(5));
    assert!(lost.is_some(), "the lease runs out");
    let next = b
        .semaphore("leased", 1)
        .try_acquire_for(Duration::from_secs(5))
        .unwrap();
    assert!(next.token() > held.token());
    assert!(matches!(held.release(), Err(Error::Lost { .. })));
    next.release().unwrap();
}

/// An operator's unlock frees the permits of a holder that crashed with a
/// long TTL: both slots are revoked and named, a new caller gets a permit
/// at once, with a token above the revoked one's on its slot.
#[test]
fn force_release_frees_the_permits_of_a_crashed_holder() {
    let cluster = RedisServers::start(3);
    let crashed = common::builder(&cluster)
        .identity("crashed-worker")
        .build()
        .unwrap();
    let long = LockOptions::new()
        .ttl(Duration::from_secs(120))
        .auto_extend(false);
    let pool = crashed.semaphore("pool", 2);
    let mut tokens = HashMap::new();
    for _ in 0..2 {
        let permit = pool.acquire_with(long).unwrap();
        tokens.insert(permit.slot(), permit.token());
        std::mem::forget(permit);
    }
    let operator = client(&cluster).semaphore("pool", 2);
    assert!(matches!(
        operator.try_acquire(),
        Err(Error::Contended { .. })
    ));
    let revoked = operator.force_release().expect("a quorum answers");
    let slots: Vec<u32> = revoked.iter().map(|(slot, _)| *slot).collect();
    assert_eq!(slots, [0, 1]);
    assert!(revoked
        .iter()
        .all(|(_, h)| h.identity.as_deref() == Some("crashed-worker")));
    let permit = operator.try_acquire().expect("a permit is free at once");
    assert!(permit.token() > tokens[&permit.slot()]);
    assert!(
        operator.force_release().unwrap().len() == 1,
        "only the new one"
    );
}

/// Releases of several permits close together each wake a waiter of the
/// client that waits for them, as a lock's release does: the four waiters
/// of one client are granted soon after four permits are released, not at
/// their fallback re-check (250 ms after their last attempt). Each round
/// is judged against a bound far above a hand-over's cost and below the
/// re-check; one slow round in five is forgiven (a loaded machine). With
/// the wake-ups lost, three waiters a round wait for their re-check.
#[test]
fn every_release_of_a_permit_wakes_a_waiter() {
    const PERMITS: u32 = 4;
    const ROUNDS: usize = 5;
    const BOUND: Duration = Duration::from_millis(120);
    let cluster = RedisServers::start(3);
    let (holder, waiters) = (client(&cluster), client(&cluster));
    common::warm(&holder);
    common::warm(&waiters);
    let channel = "redfence:released:{wakes}:permits";
    let sem = holder.semaphore("wakes", PERMITS);
    let mut held: Vec<_> = (0..PERMITS).map(|_| sem.acquire().unwrap()).collect();
    let mut slow_rounds = Vec::new();
    for round in 0..ROUNDS {
        let released = Mutex::new(None::<Instant>);
        // Each keeps its permit until all are granted: a release of theirs
        // would wake the next waiter and hide a lost wake-up.
        let all_granted = Barrier::new(PERMITS as usize);
        let delays = thread::scope(|s| {
            let threads: Vec<_> = (0..PERMITS)
                .map(|_| {
                    let sem = waiters.semaphore("wakes", PERMITS);
                    let (released, all_granted) = (&released, &all_granted);
                    s.spawn(move || {
                        let permit = sem.try_acquire_for(Duration::from_secs(20)).unwrap();
                        let at = released.lock().unwrap().expect("granted after a release");
                        let delay = at.elapsed();
                        all_granted.wait();
                        permit.release().unwrap();
                        delay
                    })
                })
                .collect();
            assert!(common::eventually(Duration::from_secs(10), || {
                common::subscribers_on(&cluster, channel) == cluster.len()
            }));
            *released.lock().unwrap() = Some(Instant::now());
            for permit in held.drain(..) {
                permit.release().unwrap();
            }
            let delays: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            delays
        });
        if delays.iter().any(|d| *d > BOUND) {
            slow_rounds.push((round, delays));
        }
        let wait = Duration::from_secs(20);
        held = (0..PERMITS)
            .map(|_| sem.try_acquire_for(wait).unwrap())
            .collect();
    }
    assert!(
        slow_rounds.len() <= 1,
        "waiters granted later than {BOUND:?} after the releases: {slow_rounds:?}"
    );
}

/// How many times each instance ran `command`, scripts' calls included.
fn calls(cluster: &RedisServers, command: &str) -> Vec<u64> {
    let count = |s: &redfence::testing::RedisServer| s.commandstats().get(command).copied();
    cluster.iter().map(|s| count(s).unwrap_or(0)).collect()
}

/// A free permit costs one round, as a lock does: each instance runs one
/// script for it, the acquire that checks the count, and no listing of
/// free slots. Counted by `EXISTS`: the acquire calls it once (its void
/// key), a listing once per slot (here eight), a raise round of the
/// counters never. A guess refused (the slot held elsewhere) falls back to
/// the listing round and still gets the free slot, and a full semaphore
/// names a holder.
#[test]
fn a_free_permit_takes_one_round() {
    let cluster = RedisServers::start(3);
    let (a, b) = (client(&cluster), client(&cluster));
    common::warm(&a);
    common::warm(&b);
    let sem = a.semaphore("rounds", 8);
    let before = calls(&cluster, "exists");
    let mine: Vec<_> = (0..4).map(|_| sem.try_acquire().unwrap()).collect();
    let ran = || -> Vec<u64> {
        let after = calls(&cluster, "exists");
        after.iter().zip(&before).map(|(a, b)| a - b).collect()
    };
    // A quorum answered; the third instance's acquires may still be on
    // their way.
    common::eventually(Duration::from_secs(5), || ran().iter().all(|n| *n >= 4));
    assert_eq!(ran(), [4, 4, 4], "one acquire per permit, no listing");
    let mut slots: Vec<u32> = mine.iter().map(|p| p.slot()).collect();
    slots.sort();
    slots.dedup();
    assert_eq!(slots.len(), 4, "a client does not guess its own slots");
    // Another client knows nothing of them: its guesses may be refused,
    // and the listing round finds what is free.
    let others: Vec<_> = (0..4)
        .map(|_| b.semaphore("rounds", 8).try_acquire().unwrap())
        .collect();
    let mut slots: Vec<u32> = mine.iter().chain(&others).map(|p| p.slot()).collect();
    slots.sort();
    assert_eq!(slots, [0, 1, 2, 3, 4, 5, 6, 7]);
    match b.semaphore("rounds", 8).try_acquire() {
        Err(Error::Contended { holder, .. }) => {
            assert!(holder.is_some(), "a full semaphore names a holder")
        }
        other => panic!("a ninth permit of eight: {other:?}"),
    }
}

/// The count record expires once the semaphore went unused for the
/// counter idle time, and then a caller with another count may use it.
#[test]
fn the_count_record_expires_when_idle() {
    let cluster = RedisServers::start(3);
    let locks = common::builder(&cluster)
        .fence_idle_expiry(Duration::from_secs(1))
        .build()
        .unwrap();
    let short = LockOptions::new().ttl(Duration::from_millis(500));
    locks
        .semaphore("idle", 2)
        .acquire_with(short)
        .unwrap()
        .release()
        .unwrap();
    for server in cluster.iter() {
        let pttl = server.cmd(&["PTTL", "redfence:permits:{idle}"]).unwrap();
        assert!(
            matches!(pttl, redis::Value::Int(ms) if ms > 0 && ms <= 1000),
            "{pttl:?}"
        );
    }
    assert!(matches!(
        locks.semaphore("idle", 3).try_acquire(),
        Err(Error::InvalidOptions { .. })
    ));
    assert!(common::eventually(Duration::from_secs(10), || {
        cluster
            .iter()
            .all(|s| s.keys("redfence:permits:*").is_empty())
    }));
    let permit = locks.semaphore("idle", 3).try_acquire().unwrap();
    permit.release().unwrap();
}

/// Records split by callers that raced with different counts (every call
/// fails) are repaired by a recount; a recount is refused while a permit
/// is held, and takes once it is released.
#[test]
fn a_recount_repairs_split_records_and_waits_for_holders() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    for (server, count) in cluster.iter().zip(["2", "3", "4"]) {
        server
            .cmd(&["SET", "redfence:permits:{split}", count])
            .unwrap();
    }
    for permits in [2, 3, 4] {
        assert!(matches!(
            locks.semaphore("split", permits).try_acquire(),
            Err(Error::InvalidOptions { .. })
        ));
    }
    locks.semaphore("split", 3).recount().unwrap();
    let held = locks.semaphore("split", 3).try_acquire().unwrap();
    assert!(matches!(
        locks.semaphore("split", 2).try_acquire(),
        Err(Error::InvalidOptions { .. })
    ));
    match locks.semaphore("split", 2).recount() {
        Err(Error::Contended { resource, .. }) => {
            assert_eq!(resource, format!("split#{}", held.slot()))
        }
        other => panic!("a recount beside a held permit: {other:?}"),
    }
    held.release().unwrap();
    locks.semaphore("split", 2).recount().unwrap();
    let permit = locks.semaphore("split", 2).try_acquire().unwrap();
    assert!(permit.slot() < 2);
}

/// A permit held longer than the counter idle time keeps its count
/// record: each extension moves the record's expiry as far as the lock's,
/// so a caller with another count stays refused while the permit lives.
/// On every instance where the permit's key lives, so does the record (an
/// extension that missed an instance on a loaded machine lets both expire
/// there; the permit lives on the quorum).
#[test]
fn a_permit_held_past_the_idle_time_keeps_its_count() {
    let cluster = RedisServers::start(3);
    let locks = common::builder(&cluster)
        .fence_idle_expiry(Duration::from_secs(1))
        .build()
        .unwrap();
    let extended = LockOptions::new().ttl(Duration::from_millis(900));
    let permit = locks.semaphore("long", 2).acquire_with(extended).unwrap();
    let slot_key = format!("redfence:permit:{{long}}:{}", permit.slot());
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        permit.ensure_held().unwrap();
        // The record is read first: a record gone while the slot's key,
        // read after it, still lives is a record that expired too early.
        let live: Vec<(bool, bool)> = cluster
            .iter()
            .map(|s| {
                let record = !s.keys("redfence:permits:{long}").is_empty();
                (record, !s.keys(&slot_key).is_empty())
            })
            .collect();
        assert!(
            live.iter().all(|&(record, slot)| record || !slot),
            "the record expired under a held permit: {live:?}"
        );
        let records = live.iter().filter(|&&(record, _)| record).count();
        assert!(records >= 2, "no quorum keeps the record: {live:?}");
        thread::sleep(Duration::from_millis(50));
    }
    assert!(matches!(
        locks.semaphore("long", 3).try_acquire(),
        Err(Error::InvalidOptions { .. })
    ));
    permit.release().unwrap();
}
