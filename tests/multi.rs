//! Several resources locked together (`lock_all`): all or nothing, one
//! fencing token per resource from the same sequence as single locks, no
//! deadlock between overlapping sets, the single lock's fault handling, and
//! a raise round that finds a member taken on a majority refuses the set.
//!
//! `child_philosophers` re-runs this binary as a child process; it is
//! `#[ignore]`d and returns at once unless the parent set
//! `REDFENCE_MULTI_CHILD`.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::faults::Proxied;
use common::faults::{
    read_stdin_line, report, report_field, store_connection, urls_from_env, ChildTest,
};
use common::tokens::server_micros;
use common::{builder, client, eventually, fence_key, holders, lock_key, warm};
use redfence::testing::{Fault, RedisServer, RedisServers};
use redfence::{Error, LockOptions, LossReason, MultiGuard, Redlock, MAX_RESOURCES};

const CHILD_ROLE: &str = "REDFENCE_MULTI_CHILD";
const CHILD_URLS: &str = "REDFENCE_MULTI_URLS";
const CHILD_STORE: &str = "REDFENCE_MULTI_STORE";
const FORKS: usize = 5;
const ROUNDS: usize = 6;

fn fork(i: usize) -> String {
    format!("fork:{}", i % FORKS)
}

/// Philosophers' client: several threads and processes share two cores
/// with five servers, so the instance timeout is well above the default.
fn philosopher_client(urls: Vec<String>) -> Redlock {
    Redlock::builder(urls)
        .instance_timeout(Duration::from_millis(250))
        .retry_delay(Duration::from_millis(15))
        .build()
        .expect("client builds")
}

fn philosopher_options() -> LockOptions {
    LockOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(60))
}

/// One meal: both forks' counters in the shared store read, then written
/// back plus one through a fenced write per fork. The read and the write
/// are not atomic, so two holders of a fork at once would lose an update.
/// Returns how many of the two writes the store accepted.
fn eat(store: &mut redis::Connection, guard: &MultiGuard) -> usize {
    let mut accepted = 0;
    let forks: Vec<String> = guard.resources().map(str::to_string).collect();
    let counts: Vec<Option<u64>> = forks
        .iter()
        .map(|f| redis::cmd("GET").arg(f).query(store).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(1));
    for (fork, count) in forks.iter().zip(counts) {
        if guard.ensure_held().is_err() {
            break;
        }
        let token = guard.token(fork).expect("a member has a token");
        let next = count.unwrap_or(0) + 1;
        if redfence::fenced_set(store, fork, token, next).unwrap() {
            accepted += 1;
        }
    }
    accepted
}

/// Child half of [`dining_philosophers_share_forks_without_deadlock`]: two
/// more philosophers (at seats 0 and 2) in another process.
#[test]
#[ignore = "child process of dining_philosophers_share_forks_without_deadlock"]
fn child_philosophers() {
    if std::env::var(CHILD_ROLE).as_deref() != Ok("philosophers") {
        return;
    }
    let urls = urls_from_env(CHILD_URLS);
    let store_url = std::env::var(CHILD_STORE).unwrap();
    let locks = philosopher_client(urls);
    let accepted = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for seat in [0, 2] {
            let (locks, accepted, store_url) = (&locks, &accepted, &store_url);
            s.spawn(move || {
                let mut store = store_connection(store_url);
                for _ in 0..ROUNDS {
                    let forks = [fork(seat), fork(seat + 1)];
                    let forks: Vec<&str> = forks.iter().map(String::as_str).collect();
                    let guard = locks.lock_all_with(&forks, philosopher_options()).unwrap();
                    accepted.fetch_add(eat(&mut store, &guard), Ordering::SeqCst);
                    let _ = guard.release();
                }
            });
        }
    });
    report(&format!("accepted={}", accepted.load(Ordering::SeqCst)));
    // Stay until told, so the parent reads the report first.
    let _ = read_stdin_line();
}

/// Five philosophers (threads) each take the two forks beside them, many
/// rounds, while two more in a second process take forks too. Nobody holds a
/// fork another holds (checked directly in this process, and through a
/// fenced counter per fork across both: no update is lost), every
/// philosopher eats every round, and the whole dinner ends in bounded time:
/// no deadlock, although every set overlaps two others.
#[test]
fn dining_philosophers_share_forks_without_deadlock() {
    let cluster = RedisServers::start(5);
    let storage = RedisServer::start();
    let urls = cluster.urls();
    let mut child = ChildTest::spawn(
        "child_philosophers",
        &[
            (CHILD_ROLE, "philosophers".to_string()),
            (CHILD_URLS, urls.join(",")),
            (CHILD_STORE, storage.url()),
        ],
    );
    let locks = philosopher_client(urls);
    let holding: Vec<AtomicUsize> = (0..FORKS).map(|_| AtomicUsize::new(0)).collect();
    let overlaps = AtomicUsize::new(0);
    let accepted = AtomicUsize::new(0);
    let meals = AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for seat in 0..FORKS {
            let (locks, holding, overlaps, accepted, meals, storage) =
                (&locks, &holding, &overlaps, &accepted, &meals, &storage);
            s.spawn(move || {
                let mut store = storage.connection();
                for _ in 0..ROUNDS {
                    let forks = [fork(seat), fork(seat + 1)];
                    let forks: Vec<&str> = forks.iter().map(String::as_str).collect();
                    let guard = locks.lock_all_with(&forks, philosopher_options()).unwrap();
                    let mine = [seat % FORKS, (seat + 1) % FORKS];
                    for f in mine {
                        if holding[f].fetch_add(1, Ordering::SeqCst) > 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    accepted.fetch_add(eat(&mut store, &guard), Ordering::SeqCst);
                    for f in mine {
                        holding[f].fetch_sub(1, Ordering::SeqCst);
                    }
                    meals.fetch_add(1, Ordering::SeqCst);
                    let _ = guard.release();
                }
            });
        }
    });
    let line = child.next_report(Duration::from_secs(120));
    child.tell("done");
    let child_accepted: usize = report_field(&line, "accepted").parse().unwrap();
    child.wait_success(Duration::from_secs(30));
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders of a fork");
    assert_eq!(meals.load(Ordering::SeqCst), FORKS * ROUNDS, "everyone ate");
    let total = accepted.load(Ordering::SeqCst) + child_accepted;
    assert_eq!(total, 2 * (FORKS + 2) * ROUNDS, "every write was accepted");
    let mut conn = storage.connection();
    let counted: u64 = (0..FORKS)
        .map(|f| {
            let n: Option<u64> = redis::cmd("GET").arg(fork(f)).query(&mut conn).unwrap();
            n.unwrap_or(0)
        })
        .sum();
    assert_eq!(
        counted as usize, total,
        "an update was lost: forks were shared"
    );
    assert!(started.elapsed() < Duration::from_secs(120));
}

/// Single and multi locks on overlapping resources exclude each other, and
/// each resource's tokens strictly increase across both kinds of grant.
#[test]
fn single_and_multi_locks_exclude_each_other_and_share_token_sequences() {
    let cluster = RedisServers::start(5);
    let locks = builder(&cluster)
        .instance_timeout(Duration::from_millis(250))
        .build()
        .unwrap();
    let holding: HashMap<&str, AtomicUsize> = ["a", "b", "c"]
        .into_iter()
        .map(|r| (r, AtomicUsize::new(0)))
        .collect();
    let overlaps = AtomicUsize::new(0);
    let tokens: Mutex<Vec<(Instant, &str, u64)>> = Mutex::new(Vec::new());
    let opts = LockOptions::new().wait(Duration::from_secs(30));
    let sets: [&[&str]; 5] = [&["a"], &["a", "b"], &["b", "c"], &["c"], &["c", "a"]];
    std::thread::scope(|s| {
        for set in sets {
            let (locks, holding, overlaps, tokens) = (&locks, &holding, &overlaps, &tokens);
            s.spawn(move || {
                for _ in 0..8 {
                    let (granted, got): (Instant, Vec<(&str, u64)>);
                    let release: Box<dyn FnOnce()>;
                    if let [one] = set {
                        let guard = locks.lock_with(one, opts).unwrap();
                        granted = Instant::now();
                        got = vec![(*one, guard.token().get())];
                        release = Box::new(move || drop(guard.release()));
                    } else {
                        let guard = locks.lock_all_with(set, opts).unwrap();
                        granted = Instant::now();
                        got = set
                            .iter()
                            .map(|r| (*r, guard.token(r).unwrap().get()))
                            .collect();
                        release = Box::new(move || drop(guard.release()));
                    }
                    for (r, _) in &got {
                        if holding[r].fetch_add(1, Ordering::SeqCst) > 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    tokens
                        .lock()
                        .unwrap()
                        .extend(got.iter().map(|(r, t)| (granted, *r, *t)));
                    std::thread::sleep(Duration::from_millis(1));
                    for (r, _) in &got {
                        holding[r].fetch_sub(1, Ordering::SeqCst);
                    }
                    release();
                }
            });
        }
    });
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "a resource held twice");
    let mut tokens = tokens.into_inner().unwrap();
    tokens.sort();
    for r in ["a", "b", "c"] {
        let seq: Vec<u64> = tokens.iter().filter(|t| t.1 == r).map(|t| t.2).collect();
        assert_eq!(
            seq.len(),
            8 * sets.iter().filter(|s| s.contains(&r)).count()
        );
        assert!(seq.windows(2).all(|w| w[0] < w[1]), "{r}: {seq:?}");
    }
}

/// A member held elsewhere makes the whole set `Contended`, and the
/// attempt leaves no key of the other members behind on any instance.
#[test]
fn a_held_member_refuses_the_set_and_leaves_nothing_behind() {
    let cluster = RedisServers::start(5);
    let locks = client(&cluster);
    let other = client(&cluster);
    let held = other.lock("y").unwrap();
    // Every instance has the holder's key (a ping queues behind the grant).
    assert!(other.ping().iter().all(|(_, r)| r.is_ok()));
    match locks.try_lock_all(&["x", "y", "z"]) {
        Err(Error::Contended { resource, .. }) => assert_eq!(resource, "[x, y, z]"),
        other => panic!("expected Contended, got {other:?}"),
    }
    locks.ping();
    for server in cluster.iter() {
        assert!(!server.exists(&lock_key("x")));
        assert!(!server.exists(&lock_key("z")));
    }
    // The holder's key is untouched.
    assert!(cluster.iter().all(|s| s.exists(&lock_key("y"))));
    held.release().unwrap();
    let guard = locks.try_lock_all(&["x", "y", "z"]).unwrap();
    assert_eq!(guard.resources().collect::<Vec<_>>(), ["x", "y", "z"]);
    assert!(guard.token("w").is_none());
    guard.release().unwrap();
    locks.ping();
    assert!(cluster.iter().all(|s| s.keys("redfence:lock:*").is_empty()));
}

/// A single `lock("a")` after a `lock_all(["a", "b"])` gets a higher token
/// for "a", and the other way round.
#[test]
fn tokens_continue_across_single_and_set_grants() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let single = |r: &str| {
        let g = locks.lock(r).unwrap();
        let t = g.token().get();
        g.release().unwrap();
        t
    };
    let set = |rs: &[&str]| {
        let g = locks.lock_all(rs).unwrap();
        let t: Vec<u64> = rs.iter().map(|r| g.token(r).unwrap().get()).collect();
        g.release().unwrap();
        t
    };
    let a1 = single("a");
    let ab = set(&["a", "b"]);
    let a2 = single("a");
    let b2 = single("b");
    let ba = set(&["b", "a"]);
    assert!(
        a1 < ab[0] && ab[0] < a2 && a2 < ba[1],
        "{a1} {ab:?} {a2} {ba:?}"
    );
    assert!(ab[1] < b2 && b2 < ba[0], "{ab:?} {b2} {ba:?}");
}

/// A minority stopped still locks a set; a majority stopped is
/// `Unavailable`, and once the instances are back no key of the set is
/// left (released, not expired: the TTL is 30 s).
#[test]
fn minority_and_majority_stopped() {
    let cluster = RedisServers::start(5);
    let locks = builder(&cluster)
        .instance_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    locks.ping();
    cluster.stop(&[3, 4]);
    let guard = locks.try_lock_all(&["m1", "m2"]).unwrap();
    guard.release().unwrap();
    cluster.cont(&[3, 4]);
    cluster.stop(&[0, 1, 2]);
    let opts = LockOptions::new().wait(Duration::from_millis(600));
    match locks.lock_all_with(&["m1", "m2"], opts) {
        Err(Error::Unavailable { quorum, .. }) => assert_eq!(quorum, 3),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    cluster.cont(&[0, 1, 2]);
    let clean = eventually(Duration::from_secs(5), || {
        cluster.iter().all(|s| s.keys("redfence:lock:*").is_empty())
    });
    assert!(clean, "keys left behind after the instances came back");
}

/// The watchdog keeps a set alive past its TTL, and reports it lost when a
/// majority stops, before its validity ends.
#[test]
fn the_watchdog_keeps_a_set_and_reports_its_loss() {
    let cluster = RedisServers::start(5);
    let locks = builder(&cluster)
        .instance_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let ttl = Duration::from_millis(900);
    let guard = locks
        .lock_all_with(&["w1", "w2"], LockOptions::new().ttl(ttl))
        .unwrap();
    let until = Instant::now() + ttl * 3;
    while Instant::now() < until {
        assert!(guard.is_held(), "set lost while every instance is up");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(cluster
        .iter()
        .all(|s| s.exists(&lock_key("w1")) && s.exists(&lock_key("w2"))));
    cluster.stop(&[0, 1, 2]);
    let stopped = Instant::now();
    let validity = guard.validity();
    let reason = guard.wait_lost(ttl * 2);
    cluster.cont(&[0, 1, 2]);
    assert!(
        matches!(
            reason,
            Some(LossReason::ExtensionFailed | LossReason::Expired)
        ),
        "{reason:?}"
    );
    assert!(stopped.elapsed() <= validity + Duration::from_millis(50));
}

/// A member's key deleted behind our back on a majority makes the set
/// lost at its next extension: the set counts as lost as soon as any member
/// may be.
#[test]
fn a_member_deleted_on_a_majority_loses_the_set() {
    let cluster = RedisServers::start(5);
    let locks = client(&cluster);
    let ttl = Duration::from_millis(600);
    let guard = locks
        .lock_all_with(&["d1", "d2"], LockOptions::new().ttl(ttl))
        .unwrap();
    // Every instance has answered the grant (a ping queues behind it).
    assert!(locks.ping().iter().all(|(_, r)| r.is_ok()));
    for i in 0..3 {
        assert!(cluster.server(i).del(&lock_key("d2")));
    }
    assert_eq!(guard.wait_lost(ttl * 2), Some(LossReason::NotHeld));
    assert!(matches!(guard.ensure_held(), Err(Error::Lost { .. })));
    // The extension touched nothing: d1 expires with its own TTL.
    assert!(cluster
        .iter()
        .all(|s| s.pttl(&lock_key("d1")) <= ttl.as_millis() as i64));
}

#[test]
fn bad_sets_are_refused_with_a_reason() {
    let cluster = RedisServers::start(1);
    let locks = client(&cluster);
    let reason = |r: Result<MultiGuard, Error>| match r {
        Err(Error::InvalidResource { reason }) => reason,
        other => panic!("expected InvalidResource, got {other:?}"),
    };
    assert!(reason(locks.try_lock_all(&[])).contains("empty"));
    assert!(reason(locks.try_lock_all(&["a", "a"])).contains("twice"));
    assert!(reason(locks.try_lock_all(&["a", ""])).contains("empty"));
    let long = "x".repeat(redfence::MAX_RESOURCE_LEN + 1);
    assert!(reason(locks.try_lock_all(&["a", &long])).contains("bytes"));
    let names: Vec<String> = (0..=MAX_RESOURCES).map(|i| format!("r{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert!(reason(locks.try_lock_all(&names)).contains("limit"));
    // Exactly the maximum works.
    let guard = locks.try_lock_all(&names[..MAX_RESOURCES]).unwrap();
    assert_eq!(guard.resources().len(), MAX_RESOURCES);
    guard.release().unwrap();
}

// --- A set's raise round --------------------------------------------------------

/// One way each way through every proxy: the set's acquisition lands about
/// `DELAY` after the call, its replies reach the client at about 2 × `DELAY`,
/// and the raise round lands at about 3 × `DELAY`. The test changes the
/// instances in between.
const RAISE_DELAY: Duration = Duration::from_millis(250);

/// Locks the set `members` with one attempt while the proxies delay every
/// exchange, after setting the fencing counter of each member in `lagging`
/// to a different value on every instance, above the clock (so that
/// whichever quorum grants, its counters for that member disagree and a
/// raise round follows), by less than the 1 s ahead of its clock that an
/// instance's counter may be raised. As soon as the acquisition holds every member on
/// every instance, member `taken` is given to another holder on instances
/// 0, 1 and 2 (a majority), before the raise lands.
fn lock_set_while_a_member_is_taken(
    env: &Proxied,
    locks: &Redlock,
    members: &[String],
    lagging: &[usize],
    taken: usize,
) -> Result<redfence::MultiGuard, Error> {
    let names: Vec<&str> = members.iter().map(String::as_str).collect();
    // Above the clock when the acquisition lands (about 250 ms from now),
    // within 1 s of it when the raise lands (about 750 ms).
    let high = server_micros(env.cluster.server(0)) + 800_000;
    for &m in lagging {
        for (i, server) in env.cluster.iter().enumerate() {
            let value = (high + 1000 * i as u64).to_string();
            server
                .cmd(&["SET", &fence_key(&members[m]), &value])
                .unwrap();
        }
    }
    env.set(&[0, 1, 2, 3, 4], Fault::Delay(RAISE_DELAY));
    let result = std::thread::scope(|s| {
        let attempt = s.spawn(|| locks.try_lock_all(&names));
        let landed = eventually(Duration::from_secs(5), || {
            members.iter().all(|m| holders(&env.cluster, m) == 5)
        });
        if landed {
            let key = lock_key(&members[taken]);
            for i in [0, 1, 2] {
                env.cluster
                    .server(i)
                    .cmd(&["SET", &key, "someone-else", "PX", "20000"])
                    .unwrap();
            }
        }
        let result = attempt.join().unwrap();
        assert!(landed, "the set's acquisition never landed everywhere");
        result
    });
    env.pass_all();
    // The premise: a raise round ran for every lagging member. The
    // counters were all different (the acquisition adds 1 to each); the
    // raise lifts those below the token to the token, so a quorum of them
    // now agree.
    for &m in lagging {
        let key = fence_key(&members[m]);
        let counters: Vec<Option<String>> = env.cluster.iter().map(|s| s.get(&key)).collect();
        let most_alike = counters
            .iter()
            .map(|c| counters.iter().filter(|d| *d == c).count())
            .max()
            .unwrap_or(0);
        assert!(
            most_alike >= locks.quorum(),
            "{}: no raise round lifted the counters of {}: {counters:?}",
            members.join(","),
            members[m]
        );
    }
    result
}

/// Contract (README "Locking several resources", rustdoc of `lock_all` and
/// `MultiGuard`): a set is held all or nothing — "no call ever holds part of
/// a set" — with "the same guarantees as a single lock", including the raise
/// round, which for a single lock is the grant's last word: a grant whose
/// keys changed hands before the raise lands does not stand
/// (`tests/fencing.rs`). So a set whose raise round finds a member no longer
/// ours on a majority is not granted; if it were granted anyway, it would
/// have to hold every member on a quorum.
///
/// Both members' counters disagree, so the raise round carries one script
/// per member, and the instances where one member was taken must not count
/// as holding the set. Catches: the raise round counting an
/// instance where only some of the members' scripts said "ours"
/// (`all_yes` accepting any yes).
#[test]
fn a_set_whose_member_is_taken_before_the_raise_round_is_not_granted() {
    let env = Proxied::start(5);
    let locks = env
        .builder()
        .instance_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    warm(&locks);
    let members = ["raise-set:a".to_string(), "raise-set:b".to_string()];
    let result = lock_set_while_a_member_is_taken(&env, &locks, &members, &[0, 1], 1);
    assert_set_not_granted_without_its_members(&env, &locks, &members, 1, result);
}

/// Checks the outcome of [`lock_set_while_a_member_is_taken`]: not granted
/// (or, if granted, every member ours on a quorum), the other holder's keys
/// untouched, ours released.
fn assert_set_not_granted_without_its_members(
    env: &Proxied,
    locks: &Redlock,
    members: &[String],
    taken: usize,
    result: Result<redfence::MultiGuard, Error>,
) {
    let quorum = locks.quorum();
    match result {
        Err(e) if e.is_retryable() => {}
        Err(e) => panic!("unexpected error: {e:?}"),
        Ok(guard) => {
            // Our value: the one on instance 4, where nothing was taken.
            let ours = env.cluster.server(4).get(&lock_key(&members[0]));
            for m in members {
                let held = env
                    .cluster
                    .iter()
                    .filter(|s| s.get(&lock_key(m)) == ours)
                    .count();
                assert!(
                    held >= quorum,
                    "the set {members:?} was granted (tokens {:?}) while {m} is ours on only \
                     {held} of 5 instances: part of a set was handed out",
                    members.iter().map(|m| guard.token(m)).collect::<Vec<_>>()
                );
            }
            guard.release().unwrap();
            return;
        }
    }
    // A ping queues behind the clean-up on each instance.
    assert!(locks.ping().iter().all(|(_, r)| r.is_ok()));
    let taken_key = lock_key(&members[taken]);
    for i in [0, 1, 2] {
        assert_eq!(
            env.cluster.server(i).get(&taken_key).as_deref(),
            Some("someone-else"),
            "instance {i}: the other holder's key was touched"
        );
    }
    for (m, member) in members.iter().enumerate() {
        let ours_left = |s: &RedisServer| {
            s.get(&lock_key(member))
                .is_some_and(|v| !(m == taken && v == "someone-else"))
        };
        assert!(
            eventually(Duration::from_secs(3), || !env
                .cluster
                .iter()
                .any(ours_left)),
            "{member}: the refused set's keys were not released"
        );
    }
}

/// Contract as for
/// [`a_set_whose_member_is_taken_before_the_raise_round_is_not_granted`],
/// when only one member's counters disagree: the raise round then runs for
/// that member only, while the other member's key changes hands on a
/// majority before the raise lands. "No call ever holds part of a set":
/// the set must not be granted holding member `b` on a minority only.
///
/// Catches a raise round sent for the lagging members only: that script
/// checks only its own member's lock key, so an instance where `a` is ours
/// and `b` is not would count as holding the set, and the set would be
/// granted with `b` ours on 2 of 5 instances. The client raises every
/// member of a set whose grant needs a raise round (harmless: counters only
/// go up).
#[test]
fn a_set_whose_other_member_is_taken_before_the_raise_round_is_not_granted() {
    let env = Proxied::start(5);
    let locks = env
        .builder()
        .instance_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    warm(&locks);
    let members = ["raise-other:a".to_string(), "raise-other:b".to_string()];
    let result = lock_set_while_a_member_is_taken(&env, &locks, &members, &[0], 1);
    assert_set_not_granted_without_its_members(&env, &locks, &members, 1, result);
}

/// `try_lock_all_for` waits for a held member's release within its budget,
/// and `try_lock_all_until` with a passed deadline makes one attempt.
#[test]
fn a_set_waits_within_its_budget() {
    let cluster = RedisServers::start(3);
    let locks = client(&cluster);
    let held = client(&cluster).lock("b").unwrap();
    let past = std::time::Instant::now();
    assert!(matches!(
        locks.try_lock_all_until(&["a", "b"], past),
        Err(Error::Contended { .. })
    ));
    let release = std::thread::spawn(move || held.release());
    let guard = locks
        .try_lock_all_for(&["a", "b"], std::time::Duration::from_secs(10))
        .expect("granted once the member is released");
    release.join().unwrap().unwrap();
    guard.release().unwrap();
}
