//! Requests that land after the client gave up on them.
//!
//! A request the client gave up on (its instance timeout passed, the
//! connection was replaced) is not gone: bytes already sent keep travelling
//! and are applied later, after what the client sent since on its new
//! connection. [`Fault::DelayOpen`] makes that happen on demand: the
//! connections open when it is set hold their traffic, new ones pass. Each
//! test plays one way this once broke fencing or exclusion, against real
//! servers, and checks the guarantee a user relies on.

mod common;

use std::time::Duration;

use common::faults::{lock_values, Proxied};
use common::tokens::{counter, server_micros};
use common::{eventually, fence_key, lock_key, warm};
use redfence::testing::{Fault, FencedStore, RedisServer};
use redfence::{Error, LockOptions, Redlock, RedlockBuilder};

/// How long a held request stays held: far longer than any instance
/// timeout here, short enough for a test.
const HELD: Duration = Duration::from_secs(3);

fn build(builder: RedlockBuilder) -> Redlock {
    let locks = builder.build().expect("client builds");
    warm(&locks);
    locks
}

/// Waits until every request the proxies held has been passed on, and
/// each server has read it: a command on a connection of its own, sent
/// after the held bytes were written, is answered after them.
fn wait_landed(net: &Proxied) {
    assert!(
        eventually(HELD * 3, || net.proxies.iter().all(|p| p.held() == 0)),
        "held requests never passed on"
    );
    for server in net.cluster.iter() {
        server.cmd(&["PING"]).expect("the server answers");
    }
}

/// A late acquire must not
/// recreate a lost counter from a value the client read before sending it.
///
/// X's acquire is held on its way to A and B while C grants; X gives up.
/// Y then locks on {A, B} (C paused) and gets token y, and stalls past its
/// lease. B loses its data. X's held acquire lands on B. Z locks on {B, C}
/// (A paused) and writes to the fenced store; the stalled Y writes after
/// it. Y's write must be refused: Z's token must be above y. (When the
/// acquire carried the client's clock reading as the seed of a missing
/// counter, B's counter came back from before y, Z's token was below y,
/// and the store took Y's late write over Z's.)
#[test]
fn a_late_acquire_after_a_lost_counter_does_not_send_tokens_backwards() {
    let net = Proxied::start(3);
    let (a, b, c) = (0, 1, 2);
    let x = build(
        net.builder()
            .instance_timeout(Duration::from_millis(100))
            .retry_delay(Duration::from_millis(10)),
    );
    let store = FencedStore::new();
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(1))
        .auto_extend(false);

    net.set(&[a, b], Fault::DelayOpen(HELD));
    match x.lock_with("r", opts.wait(Duration::ZERO)) {
        Err(Error::Unavailable { .. }) | Err(Error::Contended { .. }) => {}
        other => panic!("X's attempt must fail, its acquire held: {other:?}"),
    }
    // Clients built now connect afresh: their traffic passes.
    let y = build(net.builder().instance_timeout(Duration::from_millis(200)));
    let z = build(net.builder().instance_timeout(Duration::from_millis(200)));

    net.cluster.stop(&[c]);
    let y_guard = y
        .lock_with("r", opts.wait(Duration::ZERO))
        .expect("Y locks on A and B");
    y_guard.ensure_held().expect("Y holds the lock");
    let y_token = y_guard.token().get();
    net.cluster.cont(&[c]);

    net.cluster.server(b).cmd(&["FLUSHALL"]).unwrap();
    // X's acquire lands on A and B (with X's clean-up, sent on fresh
    // connections, already there).
    wait_landed(&net);
    // Whatever X's late acquire left on B expires with X's TTL.
    assert!(eventually(Duration::from_secs(5), || !net
        .cluster
        .server(b)
        .exists(&lock_key("r"))));
    if let Some(recreated) = counter(net.cluster.server(b), "r") {
        assert!(
            recreated > y_token,
            "the late acquire recreated B's counter at {recreated}, below Y's token {y_token}"
        );
    }

    net.cluster.stop(&[a]);
    let z_guard = z
        .lock_with("r", opts.wait(Duration::from_secs(5)))
        .expect("Z locks on B and C");
    let z_token = z_guard.token().get();
    net.cluster.cont(&[a]);
    store
        .write("r", z_token, "Z")
        .expect("Z's write is accepted");
    assert!(!y_guard.is_held(), "Y's lease ran out while it stalled");
    let stale = store.write("r", y_token, "Y, late");
    assert!(
        z_token > y_token && stale.is_err(),
        "Y's late write with token {y_token} was not refused after Z's ({z_token})"
    );
    assert_eq!(store.read("r").map(|(_, v)| v).as_deref(), Some("Z"));
}

/// A hold survives a release that never lands. A once-only job locks with
/// a 500 ms TTL and a 4 s hold, finishes at once, and releases while every
/// instance is black-holed for it: the release is lost (the holder might
/// as well have crashed). Well past the TTL and until the hold's end, a
/// rival is refused; after it, the lock frees by itself. (When only the
/// release kept the keys to the hold's end, they expired at the TTL and
/// the job ran again 500 ms in.)
#[test]
fn a_hold_survives_a_release_that_never_lands() {
    let net = Proxied::start(3);
    let holder = build(net.builder().instance_timeout(Duration::from_millis(100)));
    let rival = build(common::builder(&net.cluster));
    let (ttl, hold) = (Duration::from_millis(500), Duration::from_secs(4));
    let options = LockOptions::new()
        .ttl(ttl)
        .hold_at_least(hold)
        .wait(Duration::ZERO);
    let guard = holder.lock_with("once", options).expect("locks");
    let granted = std::time::Instant::now();
    net.set(&[0, 1, 2], Fault::BlackHole);
    assert!(guard.release().is_err(), "the release cannot be confirmed");
    let mut refused_past_ttl = 0;
    while granted.elapsed() < hold - Duration::from_millis(300) {
        match rival.try_lock("once") {
            Err(Error::Contended { .. }) => {
                refused_past_ttl += usize::from(granted.elapsed() > ttl * 2)
            }
            other => panic!(
                "granted {:?} into a {hold:?} hold: {other:?}",
                granted.elapsed()
            ),
        }
        // The pace of the rival's tries, not a wait for a condition.
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(refused_past_ttl > 10, "too few tries past the TTL");
    assert!(
        eventually(Duration::from_secs(4), || rival.try_lock("once").is_ok()),
        "the lock never freed after the hold"
    );
    net.pass_all();
}

/// A hold is never cut short by an extension that lands late. A guard with
/// a 2 s TTL and a 10 s hold asks for an extension with its own TTL (on
/// Valkey 8.1+ and Redis 8.4+ the form that could be sent natively, `SET …
/// IFEQ … PX`, which sets the expiry it is given); the request is held, the
/// call gives up, and the guard is released: the release sets the keys to
/// live to the hold's end. The held extension then lands. The keys must
/// still live to the hold's end, and a rival must be refused until then.
/// (When the extension went out natively, it set the keys back to 2 s and
/// the once-only job could run again seconds into its hold.)
#[test]
fn a_late_extension_does_not_cut_a_hold_short() {
    let net = Proxied::start(3);
    let holder = build(net.builder().instance_timeout(Duration::from_millis(100)));
    let ttl = Duration::from_secs(2);
    let hold = Duration::from_secs(10);
    let guard = holder
        .lock_with(
            "nightly",
            LockOptions::new()
                .ttl(ttl)
                .hold_at_least(hold)
                .auto_extend(false)
                .wait(Duration::ZERO),
        )
        .expect("locks");
    let hold_ends = std::time::Instant::now() + hold;
    assert!(
        eventually(Duration::from_secs(2), || lock_values(
            &net.cluster,
            "nightly"
        )
        .iter()
        .all(|v| v.is_some())),
        "the grant never reached all three instances"
    );

    net.set(&[0, 1, 2], Fault::DelayOpen(HELD));
    assert!(
        guard.extend(ttl).is_err(),
        "the held extension cannot be confirmed in time"
    );
    // The workers have replaced their held connections (a ping goes the
    // same way): under load, reconnecting can take longer than the
    // 100 ms instance timeout the release would otherwise spend on it.
    assert!(
        eventually(HELD, || holder.ping().iter().all(|(_, r)| r.is_ok())),
        "the holder never reconnected"
    );
    guard
        .release()
        .expect("the release gets through on fresh connections");
    let rival = build(net.builder());

    wait_landed(&net);
    let rest = hold_ends.saturating_duration_since(std::time::Instant::now());
    assert!(rest > Duration::from_secs(4), "the test ran too slowly");
    let pttls: Vec<i64> = net
        .cluster
        .iter()
        .map(|server| server.pttl(&lock_key("nightly")))
        .collect();
    assert!(
        pttls
            .iter()
            .all(|&pttl| pttl >= rest.as_millis() as i64 - 1_000),
        "a late extension cut the hold short: {pttls:?} ms left of {rest:?}"
    );
    match rival.try_lock("nightly") {
        Err(Error::Contended { .. }) => {}
        other => panic!("a rival must be refused during the hold: {other:?}"),
    }
}

/// An extension that timed out may still
/// land after a later one. A guard asks for 600 ms, the request is held,
/// the call fails; it then asks for 10 s and gets it. The held 600 ms
/// extension lands: it must not cut the keys short while the guard
/// believes it holds the lock for seconds more. A rival is refused.
#[test]
fn a_late_shorter_extension_does_not_cut_a_longer_lease() {
    let net = Proxied::start(3);
    let holder = build(net.builder().instance_timeout(Duration::from_millis(100)));
    let guard = holder
        .lock_with(
            "lease",
            LockOptions::new()
                .ttl(Duration::from_secs(3))
                .auto_extend(false)
                .wait(Duration::ZERO),
        )
        .expect("locks");
    // The call returned at a quorum of two; the third acquire may still be
    // on its way. Held by the fault below, it would land after the 10 s
    // extension and set a fresh 3 s lease there: not what this test is
    // about. Wait until all three hold the lock.
    assert!(
        eventually(Duration::from_secs(2), || lock_values(
            &net.cluster,
            "lease"
        )
        .iter()
        .all(|v| v.is_some())),
        "the grant never reached all three instances"
    );

    net.set(&[0, 1, 2], Fault::DelayOpen(Duration::from_secs(1)));
    assert!(
        guard.extend(Duration::from_millis(600)).is_err(),
        "the held extension cannot be confirmed in time"
    );
    guard
        .extend(Duration::from_secs(10))
        .expect("the next extension gets through on fresh connections");
    assert!(guard.validity() > Duration::from_secs(8));
    // Connects afresh: its traffic passes.
    let rival = build(net.builder());

    wait_landed(&net);
    // A quorum confirmed the 10 s extension; the third instance may have
    // missed it (on a loaded machine its request can miss its deadline)
    // and keeps the first lease, under 3 s. A late 600 ms extension
    // applied anywhere would leave at most 600 ms there.
    let pttls: Vec<i64> = net
        .cluster
        .iter()
        .map(|server| server.pttl(&lock_key("lease")))
        .collect();
    assert!(
        pttls.iter().all(|&pttl| pttl > 1_000),
        "the late 600 ms extension cut the lease: {pttls:?} ms left"
    );
    assert!(
        pttls.iter().filter(|&&pttl| pttl > 8_000).count() >= 2,
        "no quorum keeps the 10 s extension: {pttls:?} ms left"
    );
    assert!(guard.is_held());
    match rival.try_lock("lease") {
        Err(Error::Contended { .. }) => {}
        other => panic!("a rival got the lock the guard still holds: {other:?}"),
    }
    guard.release().expect("released");
}

/// A failed attempt's clean-up can reach an
/// instance before the attempt's own acquire, which then lands and would
/// leave a lock nobody owns for the whole TTL. The clean-up voids the
/// acquire instead: once everything has landed, no instance holds a key and
/// the next client locks at once.
#[test]
fn a_clean_up_that_overtakes_its_acquire_leaves_no_orphan_lock() {
    let net = Proxied::start(3);
    let failing = build(net.builder().instance_timeout(Duration::from_millis(100)));

    net.set(&[0, 1, 2], Fault::DelayOpen(Duration::from_secs(1)));
    match failing.lock_with(
        "orphan",
        LockOptions::new()
            .ttl(Duration::from_secs(30))
            .wait(Duration::ZERO),
    ) {
        Err(Error::Unavailable { .. }) => {}
        other => panic!("the attempt must fail, its acquire held: {other:?}"),
    }
    // Connects afresh: its traffic passes.
    let next = build(net.builder());
    // Clean-up first, on fresh connections, then the held acquire.
    wait_landed(&net);
    for server in net.cluster.iter() {
        assert!(
            !server.exists(&lock_key("orphan")),
            "the late acquire left a lock nobody owns on {}",
            server.addr()
        );
    }
    let guard = next
        .try_lock("orphan")
        .expect("nothing holds the resource: the next client locks at once");
    guard.release().unwrap();
}

/// A failed attempt's acquire was applied, its reply lost, and sent again
/// (a resend after a reset); the clean-up lands between the two copies and
/// deletes the first one's lock. The second copy must then refuse, not
/// take the lock back for nobody: the clean-up voids the attempt even
/// where the lock was ours (`tests/model_lease.rs` found this case).
#[test]
fn a_resend_landing_after_the_clean_up_deleted_its_first_copy_is_refused() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let first = acquire_script(&mut conn, &["resent"], "ours", 0);
    assert_eq!(first[0], 1, "the first copy is granted");
    let cleaned: i64 = redis::Script::new(include_str!("../lua/release.lua"))
        .key(lock_key("resent"))
        .key("redfence:void:{resent}:ours")
        .arg("ours")
        .arg(30_000)
        .arg("1")
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(cleaned, 1, "the clean-up deleted our lock");
    assert!(!server.exists(&lock_key("resent")));
    let resend = acquire_script(&mut conn, &["resent"], "ours", 0);
    assert_eq!(resend, [0], "the resend is refused");
    assert!(!server.exists(&lock_key("resent")), "a lock nobody owns");
}

/// An acquire the server applied but whose reply was lost is sent again.
/// The second run finds the lock holding its own value: it is a grant (the
/// same tokens, counters not bumped twice), not "held by someone else",
/// so the client counts it and its clean-up does not skip it.
#[test]
fn an_acquire_applied_twice_is_granted_twice_with_the_same_tokens() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    // One resource, and a set (the script's other path).
    for resources in [&["twice"][..], &["twice-a", "twice-b"]] {
        let first = acquire_script(&mut conn, resources, "ours", 0);
        assert_eq!(first[0], 1, "{resources:?}: granted");
        let again = acquire_script(&mut conn, resources, "ours", 0);
        assert_eq!(again, first, "{resources:?}: a resend is the same grant");
        for (resource, token) in resources.iter().zip(&first[1..]) {
            assert_eq!(counter(&server, resource), Some(*token));
        }
        let other = acquire_script(&mut conn, resources, "theirs", 0);
        assert_eq!(other, [0], "{resources:?}: another value is refused");
    }
}

/// An instance restarted from an RDB
/// snapshot (Redis's default persistence) comes back with an older
/// counter, not a missing one. Here every instance does, as after a power
/// cut: the next grant must still be above every token handed out before.
#[test]
fn counters_restored_from_older_snapshots_do_not_repeat_tokens() {
    let net = Proxied::start(3);
    let locks = build(net.builder().instance_timeout(Duration::from_millis(300)));
    let opts = LockOptions::new().auto_extend(false);
    let token = || {
        let guard = locks
            .lock_with("snap", opts.wait(Duration::from_secs(5)))
            .expect("locks");
        let token = guard.token().get();
        guard.release().expect("released");
        token
    };
    let mut tokens = vec![token()];
    // Taken once every instance has the release too: a snapshot with the
    // lock in it would bring the lock back as well.
    assert!(eventually(Duration::from_secs(5), || net
        .cluster
        .iter()
        .all(|s| !s.exists(&lock_key("snap")))));
    for server in net.cluster.iter() {
        server.cmd(&["SAVE"]).unwrap();
    }
    for _ in 0..3 {
        tokens.push(token());
    }
    for server in net.cluster.iter() {
        server.kill();
        server.restart();
        assert!(
            counter(server, "snap").is_some_and(|t| t < tokens[3]),
            "the restart brought back the older counter"
        );
    }
    tokens.push(token());
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens repeat or go back after the restore: {tokens:?}"
    );
}

/// Runs `lua/acquire.lua` directly: `members` resources, one lock value, a
/// proposal. Returns the reply: `[1, token…]` or `[0]`.
fn acquire_script(
    conn: &mut redis::Connection,
    members: &[&str],
    value: &str,
    proposal: u64,
) -> Vec<u64> {
    let script = redis::Script::new(include_str!("../lua/acquire.lua"));
    let mut invocation = script.prepare_invoke();
    for m in members {
        invocation.key(lock_key(m)).key(fence_key(m));
    }
    invocation
        .key(format!("redfence:void:{{{}}}:{value}", members[0]))
        .arg(value)
        .arg(30_000)
        .arg(60_000)
        .arg(proposal)
        .invoke(conn)
        .unwrap()
}

/// The client's proposal only makes instances agree: one far ahead of an
/// instance's clock is not taken (tokens would run ahead of every clock,
/// and a counter lost later would be recreated below them), and one far
/// behind is not either (a stale proposal would recreate a lost counter
/// from the past).
#[test]
fn a_proposal_outside_the_window_is_not_taken() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let before = server_micros(&server);
    let ahead = acquire_script(&mut conn, &["far"], "v1", before + 3_600_000_000);
    let after = server_micros(&server);
    assert_eq!(ahead[0], 1);
    assert!(
        (before..=after + 5_000).contains(&ahead[1]),
        "a proposal an hour ahead was taken: {} (clock {before}..{after})",
        ahead[1]
    );
    let behind = acquire_script(&mut conn, &["past"], "v2", 1);
    assert!(
        behind[1] >= before,
        "a proposal from the past was taken: {}",
        behind[1]
    );
    // Within the window, it is taken as it is: that is what makes the
    // granting instances agree. (The script must run within 4.9 ms of the
    // clock reading; a few tries cover a descheduled test thread.)
    let taken = (0..5).any(|i| {
        let proposal = server_micros(&server) + 4_900;
        let within = acquire_script(&mut conn, &[&format!("near-{i}")], "v3", proposal);
        within[1] == proposal
    });
    assert!(taken, "a proposal within the window was never taken");
}

/// A set is granted all or none: a member that already holds this
/// attempt's value next to one that is free is not a resend (a resend
/// finds every member ours) but a set that lost a member; it is refused,
/// and the client's clean-up removes what is ours.
#[test]
fn a_set_with_only_some_members_ours_is_refused() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    server.cmd(&["SET", &lock_key("m1"), "ours"]).unwrap();
    let reply = acquire_script(&mut conn, &["m1", "m2"], "ours", 0);
    assert_eq!(reply, [0], "a set granted with a member it did not take");
    assert!(!server.exists(&lock_key("m2")));
}

/// The same for a semaphore's slot and for a read and a write of an rw
/// lock: a failed attempt whose clean-up overtakes its held acquire leaves
/// no permit, reader or writer that nobody owns, and nothing blocks the
/// next caller.
#[test]
fn late_acquires_of_permits_reads_and_writes_leave_no_orphan() {
    let net = Proxied::start(3);
    let once = LockOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Duration::ZERO);
    // Only connections open when the fault is set hold their traffic: a
    // client per call, connected before.
    let failing: Vec<Redlock> = (0..3)
        .map(|_| build(net.builder().instance_timeout(Duration::from_millis(100))))
        .collect();
    net.set(&[0, 1, 2], Fault::DelayOpen(Duration::from_secs(1)));
    assert!(failing[0]
        .semaphore("late-pool", 1)
        .acquire_with(once)
        .is_err());
    assert!(failing[1].rw_lock("late-rw").read_with(once).is_err());
    assert!(failing[2].rw_lock("late-rw").write_with(once).is_err());
    let next = build(net.builder());
    wait_landed(&net);
    for server in net.cluster.iter() {
        assert!(server.keys("redfence:permit:{late-pool}:*").is_empty());
        assert!(!server.exists("redfence:rw:{late-rw}:writer"));
        let readers = server
            .cmd(&["ZCARD", "redfence:rw:{late-rw}:readers"])
            .unwrap();
        assert_eq!(readers, redis::Value::Int(0), "{}", server.addr());
    }
    next.semaphore("late-pool", 1)
        .try_acquire()
        .expect("free")
        .release()
        .unwrap();
    next.rw_lock("late-rw")
        .try_write()
        .expect("free")
        .release()
        .unwrap();
}

/// A client over proxies of its own in front of the servers, each proxy
/// with `faults[i]`: what that client's links look like.
fn linked(
    net: &Proxied,
    faults: [Fault; 3],
    timeout: Duration,
) -> (Redlock, Vec<redfence::testing::FaultProxy>) {
    let proxies: Vec<_> = net
        .cluster
        .iter()
        .zip(faults)
        .map(|(server, fault)| {
            let proxy = redfence::testing::FaultProxy::start(server.addr()).expect("proxy starts");
            proxy.set_fault(fault);
            proxy
        })
        .collect();
    let urls: Vec<String> = proxies.iter().map(|p| p.url()).collect();
    let locks = Redlock::builder(urls)
        .instance_timeout(timeout)
        .build()
        .expect("client builds");
    (locks, proxies)
}

/// An operator's unlock whose delete to one instance is held up must not
/// land on a later holder's key. Holder O takes `job` on A and B (C out of
/// its reach) and crashes. The operator's unlock reaches A and B at once;
/// its link to C takes 1.5 s each way. H2 locks on B and C (A out of its
/// reach) while the delete is on its way to C, where it then lands. A
/// third client must still be refused: H2 holds B and C. (When the unlock
/// sent a plain `DEL`, it deleted H2's key on C and the third client was
/// granted on A and C while H2's guard had most of its minute left.)
#[test]
fn a_late_unlock_does_not_delete_a_later_holders_key() {
    let net = Proxied::start(3);
    let (a, c) = (0, 2);
    let short = Duration::from_millis(300);
    let minute = LockOptions::new()
        .ttl(Duration::from_secs(60))
        .auto_extend(false)
        .wait(Duration::from_secs(5));
    let (o, _o_links) = linked(&net, [Fault::Pass, Fault::Pass, Fault::BlackHole], short);
    std::mem::forget(o.lock_with("job", minute).expect("O locks on A and B"));

    let slow = Fault::Delay(Duration::from_millis(1500));
    let (operator, operator_links) = linked(&net, [Fault::Pass; 3], HELD * 3);
    warm(&operator);
    operator_links[c].set_fault(slow);
    let unlock = std::thread::spawn(move || operator.force_release("job"));
    // The delete has reached A: it is on its way to C.
    assert!(
        eventually(HELD * 3, || lock_values(&net.cluster, "job")[a].is_none()),
        "the unlock never reached A"
    );
    let (h2, _h2_links) = linked(&net, [Fault::BlackHole, Fault::Pass, Fault::Pass], short);
    let h2_guard = h2.lock_with("job", minute).expect("H2 locks on B and C");
    let revoked = unlock.join().expect("the unlock returns");
    assert!(
        revoked.expect("a quorum confirms").is_some(),
        "the unlock names O"
    );
    assert!(
        lock_values(&net.cluster, "job")[c].is_some(),
        "the late delete took H2's key on C"
    );
    let h3 = build(common::builder(&net.cluster));
    match h3.try_lock("job") {
        Err(Error::Contended { .. }) => {}
        other => panic!(
            "granted while H2 holds ({:?} left): {other:?}",
            h2_guard.validity()
        ),
    }
}
