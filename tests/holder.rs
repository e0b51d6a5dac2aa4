//! Holder identity and hold-at-least, on real servers: who holds a lock is
//! named in `Contended` and by `holder()`, never with the secret part of
//! the value, and only when a majority of the answers name the same holder
//! (a lock held by a majority is `Contended` though the rest failed); a
//! lock released early under `hold_at_least` stays held until the hold is
//! over.

mod common;

use std::time::{Duration, Instant};

use common::faults::Proxied;
use common::{builder, eventually, hold_as, holders, lock_key, warm};
use redfence::testing::{Fault, RedisServers};
use redfence::{Error, LockOptions, Redlock};

/// A named client: a stopped instance costs it 200 ms.
fn named(cluster: &RedisServers, identity: &str) -> Redlock {
    named_waiting(cluster, identity, Duration::from_millis(200))
}

/// A named client whose instance timeout is `timeout`: a second where a
/// test counts who answered, so that on a loaded machine every live
/// instance does (a request still queued when its timeout ran out is
/// never sent).
fn named_waiting(cluster: &RedisServers, identity: &str, timeout: Duration) -> Redlock {
    builder(cluster)
        .identity(identity)
        .instance_timeout(timeout)
        .build()
        .expect("client builds")
}

#[test]
fn contended_and_holder_name_the_identity_never_the_secret() {
    let cluster = RedisServers::start(5);
    let first = named_waiting(&cluster, "billing-worker-3", Duration::from_secs(1));
    let second = named_waiting(&cluster, "billing-worker-4", Duration::from_secs(1));
    assert_eq!(first.identity(), "billing-worker-3");
    assert_eq!(second.holder("invoice:7").expect("reads"), None);

    let guard = first.lock("invoice:7").expect("locks");
    let value = cluster
        .server(0)
        .get(&lock_key("invoice:7"))
        .expect("a value");
    let (secret, identity) = value.split_once(':').expect("RANDOM:IDENTITY");
    assert_eq!(identity, "billing-worker-3");
    assert_eq!(secret.len(), 32);

    let err = second.try_lock("invoice:7").expect_err("held");
    match &err {
        Error::Contended {
            holder, attempts, ..
        } => {
            assert_eq!(holder.as_deref(), Some("billing-worker-3"));
            assert_eq!(*attempts, 1);
        }
        other => panic!("expected Contended, got {other:?}"),
    }
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("billing-worker-3"), "{shown}");
    assert!(!shown.contains(secret), "the secret leaked: {shown}");

    // The grant returned after a quorum; the other writes land soon after.
    assert!(eventually(Duration::from_secs(5), || holders(
        &cluster,
        "invoice:7"
    ) == 5));
    let holder = second.holder("invoice:7").expect("reads").expect("held");
    assert_eq!(holder.identity.as_deref(), Some("billing-worker-3"));
    assert_eq!(holder.instances, [0, 1, 2, 3, 4]);
    assert!(
        holder.ttl > Duration::from_secs(20) && holder.ttl <= Duration::from_secs(30),
        "{holder:?}"
    );
    assert!(!format!("{holder:?}").contains(secret));

    // Two of five frozen: a quorum still answers and agrees.
    cluster.stop(&[3, 4]);
    let holder = second.holder("invoice:7").expect("reads").expect("held");
    assert_eq!(holder.instances, [0, 1, 2]);
    // Three frozen: no quorum answers.
    cluster.stop(&[2]);
    assert!(matches!(
        second.holder("invoice:7"),
        Err(Error::Unavailable { .. })
    ));
    cluster.cont(&[2, 3, 4]);

    guard.release().expect("released");
    assert!(eventually(Duration::from_secs(2), || second
        .holder("invoice:7")
        .expect("reads")
        .is_none()));
}

#[test]
fn the_default_identity_is_hostname_and_pid() {
    let cluster = RedisServers::start(3);
    let locks = builder(&cluster).build().expect("client builds");
    let pid = format!(":{}", std::process::id());
    assert!(locks.identity().ends_with(&pid), "{}", locks.identity());
    let _guard = locks.lock("default-id").expect("locks");
    let holder = locks.holder("default-id").expect("reads").expect("held");
    assert_eq!(holder.identity.as_deref(), Some(locks.identity()));
}

#[test]
fn bad_identities_are_refused_with_a_reason() {
    let cluster = RedisServers::start(1);
    for bad in ["", "tab\there", "line\nbreak", " padded", "naïve"] {
        match builder(&cluster).identity(bad).build() {
            Err(Error::InvalidConfig { reason }) => {
                assert!(reason.contains("identity"), "{reason}")
            }
            other => panic!("{bad:?} accepted: {other:?}"),
        }
    }
    let long = "x".repeat(redfence::MAX_IDENTITY_LEN + 1);
    match builder(&cluster).identity(long).build() {
        Err(Error::InvalidConfig { reason }) => assert!(reason.contains("129 bytes"), "{reason}"),
        other => panic!("a 129-byte identity was accepted: {other:?}"),
    }
    let longest = "x".repeat(redfence::MAX_IDENTITY_LEN);
    assert!(builder(&cluster).identity(longest).build().is_ok());
}

/// A job done in 1 s under a 5 s hold keeps the lock until about 5 s after
/// the grant; meanwhile another client is refused and told who holds it.
#[test]
fn a_release_within_the_hold_keeps_the_lock_until_the_hold_is_over() {
    let cluster = RedisServers::start(5);
    let job = named(&cluster, "nightly-1");
    let other = named(&cluster, "nightly-2");
    let hold = Duration::from_secs(5);
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(2))
        .hold_at_least(hold);
    let granted = Instant::now();
    let guard = job.lock_with("report", opts).expect("locks");
    std::thread::sleep(Duration::from_secs(1)); // the job's work
    guard.release().expect("released");

    // Held through the rest of the hold (well past the 2 s TTL).
    while granted.elapsed() < hold - Duration::from_millis(500) {
        match other.try_lock("report") {
            Err(Error::Contended { holder, .. }) => {
                assert_eq!(holder.as_deref(), Some("nightly-1"))
            }
            // A loaded machine: no answer in time says nothing either way.
            Err(Error::Unavailable { .. }) => {}
            other => panic!(
                "free {:?} after the grant, within the hold: {other:?}",
                granted.elapsed()
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Then gone, without anyone releasing it again.
    assert!(
        eventually(Duration::from_secs(3), || holders(&cluster, "report") == 0),
        "still held {:?} after the grant",
        granted.elapsed()
    );
    assert!(granted.elapsed() >= hold - Duration::from_millis(100));
    drop(other.try_lock("report").expect("free after the hold"));
}

/// After the hold, a release deletes the lock as usual, and a dropped
/// guard within the hold keeps it too.
#[test]
fn the_hold_counts_from_the_grant_and_applies_to_drop() {
    let cluster = RedisServers::start(3);
    let locks = named(&cluster, "holder-a");
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(1))
        .hold_at_least(Duration::from_millis(300));
    let guard = locks.lock_with("short-hold", opts).expect("locks");
    std::thread::sleep(Duration::from_millis(400));
    guard.release().expect("released");
    assert!(eventually(Duration::from_millis(500), || holders(
        &cluster,
        "short-hold"
    ) == 0));

    let opts = opts.hold_at_least(Duration::from_secs(3));
    let granted = Instant::now();
    drop(locks.lock_with("dropped", opts).expect("locks"));
    // The drop's request is on its way; then the key lives on, past the
    // 1 s TTL, until about 3 s.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(holders(&cluster, "dropped") >= 2, "released at the drop");
    assert!(eventually(Duration::from_secs(3), || holders(
        &cluster, "dropped"
    ) == 0));
    assert!(granted.elapsed() >= Duration::from_millis(2900));
}

#[test]
fn a_hold_longer_than_30_days_is_refused() {
    let cluster = RedisServers::start(1);
    let locks = builder(&cluster).build().expect("client builds");
    let opts = LockOptions::new().hold_at_least(Duration::from_secs(31 * 24 * 3600));
    assert!(matches!(
        locks.lock_with("x", opts),
        Err(Error::InvalidOptions { .. })
    ));
}

/// A least-privilege ACL user (`acl_rules`) can use every coordination
/// pattern: holder(), a release within the hold, an election with its
/// recorded term and announcement.
#[test]
fn the_acl_rules_allow_the_coordination_scripts() {
    use redfence::testing::ServerOptions;
    let rules = redfence::acl_rules("redfence:").join(" ");
    let cluster = RedisServers::start_with(
        3,
        ServerOptions {
            acl_users: vec![format!("worker on >pw-123 {rules}")],
            ..Default::default()
        },
    );
    let locks = Redlock::builder(cluster.urls_as("worker", "pw-123"))
        .identity("acl-worker")
        .instance_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let opts = LockOptions::new().hold_at_least(Duration::from_secs(2));
    let guard = locks.lock_with("acl-job", opts).expect("locks");
    let holder = locks.holder("acl-job").expect("reads").expect("held");
    assert_eq!(holder.identity.as_deref(), Some("acl-worker"));
    guard
        .release()
        .expect("the hold release runs under the ACL");
    assert!(holders(&cluster, "acl-job") >= 2, "kept for the hold");

    let election = locks.election("acl-election").unwrap();
    let term = election.campaign().expect("campaigns");
    let info = election.leader().expect("reads").expect("a leader");
    assert_eq!(info.term, Some(term.term()), "the term was recorded");
    term.resign().expect("resigns");
}

// --- Who a refusal names --------------------------------------------------------

/// `Error::Contended { holder }` (rustdoc): the holder's identity "where
/// more than half of the answers the last attempt had when it was decided
/// (failures included) named the same one; `None` otherwise". One holder
/// each on two of three instances, the third slow to answer: the attempt
/// is decided on the two refusals, which name nobody by a majority.
#[test]
fn the_holder_is_named_only_by_a_majority_of_the_answers() {
    let p = Proxied::start(3);
    let locks = p
        .builder()
        .instance_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    warm(&locks);
    hold_as(p.cluster.server(0), "named", "alice");
    hold_as(p.cluster.server(1), "named", "bob");
    p.set(&[2], Fault::Delay(Duration::from_millis(150)));
    match locks.try_lock("named") {
        Err(Error::Contended { holder, .. }) => assert_eq!(holder, None),
        other => panic!("expected Contended without a holder, got {other:?}"),
    }
    // Both refusals name alice: more than half of the answers.
    hold_as(p.cluster.server(1), "named", "alice");
    match locks.try_lock("named") {
        Err(Error::Contended { holder, .. }) => assert_eq!(holder.as_deref(), Some("alice")),
        other => panic!("expected Contended by alice, got {other:?}"),
    }
    p.pass_all();
}

/// `Error::Contended`: "Another client holds the lock on enough instances
/// that no quorum is possible", which holds when three of five hold it,
/// though the other two failed (and failed first: their servers are gone,
/// the holders answer through a slow network): not `Unavailable`, which is
/// for "too few instances answered for a quorum to be reached or ruled
/// out".
#[test]
fn a_lock_held_by_a_majority_is_contended_though_the_rest_failed() {
    let p = Proxied::start(5);
    // Three through proxies, two direct: a killed server refuses at once.
    let mut urls = p.urls()[..3].to_vec();
    urls.extend([p.cluster.server(3).url(), p.cluster.server(4).url()]);
    let locks = Redlock::builder(urls)
        .instance_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    warm(&locks);
    for i in 0..3 {
        hold_as(p.cluster.server(i), "majority", "alice");
    }
    p.cluster.server(3).kill();
    p.cluster.server(4).kill();
    // Once the workers know the two refuse connections, they answer at once.
    assert!(eventually(Duration::from_secs(10), || {
        let start = Instant::now();
        let down = locks.ping().iter().filter(|(_, r)| r.is_err()).count();
        down == 2 && start.elapsed() < Duration::from_millis(100)
    }));
    p.set(&[0, 1, 2], Fault::Delay(Duration::from_millis(100)));
    let result = locks.try_lock("majority");
    p.pass_all();
    // Decided on the two failures and the first refusal: one answer of
    // three names alice, not more than half.
    match result {
        Err(Error::Contended { holder, .. }) => assert_eq!(holder, None),
        other => panic!("expected Contended, got {other:?}"),
    }
}

/// The same contract with every instance answering: one holder each on
/// two of three instances, the third free, names nobody.
#[test]
fn two_holders_of_one_instance_each_name_nobody() {
    let cluster = RedisServers::start(3);
    let locks = builder(&cluster).build().unwrap();
    warm(&locks);
    hold_as(cluster.server(0), "split", "alice");
    hold_as(cluster.server(1), "split", "bob");
    match locks.try_lock("split") {
        Err(Error::Contended { holder, .. }) => assert_eq!(holder, None),
        other => panic!("expected Contended without a holder, got {other:?}"),
    }
    // Nothing of the failed attempt stays on the free instance.
    assert!(eventually(Duration::from_secs(5), || !cluster
        .server(2)
        .exists(&lock_key("split"))));
}

/// An operator's unlock: the holder's lock goes on every instance,
/// its waiters are woken at once, the fence counter stays (the next token
/// is higher), and the old holder finds out at its next extension.
#[test]
fn force_release_revokes_the_holder_and_keeps_the_counter() {
    let cluster = RedisServers::start(3);
    let holder = builder(&cluster).identity("crashed-job").build().unwrap();
    let operator = builder(&cluster).identity("operator").build().unwrap();
    let long = LockOptions::new()
        .ttl(Duration::from_secs(120))
        .auto_extend(false);
    let old = holder.lock_with("nightly", long).unwrap();
    let waiter = std::thread::spawn({
        let waiter = builder(&cluster).identity("next-job").build().unwrap();
        move || {
            let wait = LockOptions::new().wait(Duration::from_secs(30));
            waiter.lock_with("nightly", wait).map(|g| g.token())
        }
    });
    assert!(eventually(Duration::from_secs(5), || common::subscribers(
        &cluster, "nightly"
    ) >= 2));
    let was = operator
        .force_release("nightly")
        .unwrap()
        .expect("a holder");
    assert_eq!(was.identity.as_deref(), Some("crashed-job"));
    // Woken by the unlock, long before the 120 s lease could run out.
    let next = waiter.join().unwrap().expect("the waiter gets the lock");
    assert!(
        next > old.token(),
        "the counter stayed: {next} > {}",
        old.token()
    );
    assert!(matches!(
        old.extend(Duration::from_secs(120)),
        Err(Error::Lost { .. })
    ));
}

/// An unlock needs a quorum: without one answering the reading it knows no
/// holder, and deletes nothing. A key of another type under the lock's
/// name is someone else's data and is left alone.
#[test]
fn force_release_needs_a_quorum_and_leaves_foreign_keys_alone() {
    let net = Proxied::start(3);
    // Every request lands, even on a loaded machine (see `named_waiting`).
    let locks = net
        .builder()
        .instance_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let _held = locks.lock("report").unwrap();
    // The grant has landed everywhere (a quorum's replies return it).
    assert!(eventually(Duration::from_secs(5), || holders(
        &net.cluster,
        "report"
    ) == 3));
    net.set(&[0, 1], Fault::BlackHole);
    assert!(matches!(
        locks.force_release("report"),
        Err(Error::Unavailable { .. })
    ));
    net.pass_all();
    assert_eq!(
        holders(&net.cluster, "report"),
        3,
        "an unlock that read no holder deletes nothing"
    );

    let cluster = RedisServers::start(3);
    for server in &cluster {
        server
            .cmd(&["HSET", &lock_key("foreign"), "f", "v"])
            .unwrap();
    }
    let locks = builder(&cluster).build().unwrap();
    assert!(matches!(
        locks.force_release("foreign"),
        Err(Error::WrongType { .. })
    ));
    assert_eq!(holders(&cluster, "foreign"), 3);
}
