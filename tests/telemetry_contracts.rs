//! The `reason` label of `redfence_lease_lost_total` (README
//! "Observability", Metrics: "`redfence_lease_lost_total` | counter |
//! `reason`: `expired`, `not_held`, `extension_failed`, `extension_limit` |
//! leases lost while held"), one test per reason, each creating that loss
//! for real and checking that exactly one loss was counted, under that
//! label and no other; and that a release is never counted as a loss.
//!
//! Observed as an application observes it: metrics-util's debugging
//! recorder, installed process-wide (the watchdog records from its own
//! thread), so the tests take turns.
//!
//! Needs the `metrics` feature:
//! `cargo test --features metrics --test telemetry_contracts`
//! (without it the file is empty).
#![cfg(feature = "metrics")]

mod common;

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use common::faults::Proxied;
use common::{builder, eventually, holders, lock_key};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redfence::testing::{Fault, RedisServers};
use redfence::{Error, LockOptions, LossReason, Redlock};

const LOST: &str = "redfence_lease_lost_total";
const REASONS: [&str; 4] = ["expired", "not_held", "extension_failed", "extension_limit"];

static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();

/// The recorder is global: the tests take turns, and each one looks only
/// at what was counted during its turn.
fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this binary");
        snapshotter
    });
    let guard = TURN.lock().unwrap_or_else(|e| e.into_inner());
    lost_counts();
    guard
}

/// Increases of `redfence_lease_lost_total` since the last look, by
/// `reason` label (the debugging recorder resets counters when read).
fn lost_counts() -> Vec<(String, u64)> {
    let snapshotter = SNAPSHOTTER.get().expect("recorder installed");
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, _, _, _)| key.key().name() == LOST)
        .filter_map(|(key, _, _, value)| {
            let reason = key
                .key()
                .labels()
                .find(|l| l.key() == "reason")
                .map(|l| l.value().to_string())
                .unwrap_or_default();
            match value {
                DebugValue::Counter(n) if n > 0 => Some((reason, n)),
                _ => None,
            }
        })
        .collect()
}

/// Exactly one loss counted since the turn began, under `reason`.
fn assert_one_loss(reason: &str) {
    let counts = lost_counts();
    assert_eq!(
        counts,
        vec![(reason.to_string(), 1)],
        "expected one {LOST}{{reason=\"{reason}\"}} and nothing else"
    );
    assert!(REASONS.contains(&reason));
}

fn client(
    cluster: &RedisServers,
    configure: impl FnOnce(redfence::RedlockBuilder) -> redfence::RedlockBuilder,
) -> Redlock {
    let locks = configure(builder(cluster).instance_timeout(Duration::from_millis(300)))
        .build()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || locks
        .ping()
        .iter()
        .all(|(_, r)| r.is_ok())));
    locks
}

/// A lease without auto-extension runs out: `reason="expired"`.
/// Bug seen to fail it: `LossReason::Expired` labelled `not_held`.
#[test]
fn an_expired_lease_is_counted_as_expired() {
    let _turn = turn();
    let cluster = RedisServers::start(3);
    let locks = client(&cluster, |b| b);
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(1))
        .auto_extend(false);
    let guard = locks.lock_with("tc-expired", opts).unwrap();
    assert_eq!(
        guard.wait_lost(Duration::from_secs(3)),
        Some(LossReason::Expired)
    );
    // Releasing the lost guard reports the loss again, but counts nothing.
    assert!(matches!(guard.release(), Err(Error::Lost { .. })));
    assert_one_loss("expired");
}

/// The lease's keys are deleted on a majority behind our back; the next
/// extension finds them gone: `reason="not_held"`.
/// Bug seen to fail it: `LossReason::NotHeld` labelled `expired`.
#[test]
fn a_lease_taken_away_is_counted_as_not_held() {
    let _turn = turn();
    let cluster = RedisServers::start(3);
    let locks = client(&cluster, |b| b);
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .auto_extend(false);
    let guard = locks.lock_with("tc-not-held", opts).unwrap();
    assert!(eventually(Duration::from_secs(2), || holders(
        &cluster,
        "tc-not-held"
    ) == 3));
    for i in [0, 1] {
        assert!(cluster.server(i).del(&lock_key("tc-not-held")));
    }
    match guard.extend(Duration::from_secs(10)) {
        Err(Error::Lost {
            reason: LossReason::NotHeld,
            ..
        }) => {}
        other => panic!("expected Lost(NotHeld), got {other:?}"),
    }
    drop(guard);
    assert_one_loss("not_held");
}

/// A majority frozen (SIGSTOP): the watchdog's renewal fails and, with no
/// retry allowed, the lease is given up long before its validity ends:
/// `reason="extension_failed"`.
/// Bug seen to fail it: `LossReason::ExtensionFailed` labelled `expired`.
#[test]
fn failed_extensions_are_counted_as_extension_failed() {
    let _turn = turn();
    let cluster = RedisServers::start(5);
    let locks = client(&cluster, |b| b.extend_retries(0));
    let guard = locks
        .lock_with(
            "tc-ext-failed",
            LockOptions::new().ttl(Duration::from_secs(6)),
        )
        .unwrap();
    assert!(eventually(Duration::from_secs(2), || holders(
        &cluster,
        "tc-ext-failed"
    ) == 5));
    cluster.stop(&[0, 1, 2]);
    let reason = guard.wait_lost(Duration::from_secs(8));
    cluster.cont(&[0, 1, 2]);
    assert_eq!(reason, Some(LossReason::ExtensionFailed));
    drop(guard);
    assert_one_loss("extension_failed");
}

/// The watchdog may extend a lease once (`max_extensions(Some(1))`); after
/// that it runs out: `reason="extension_limit"`.
/// Bug seen to fail it: `LossReason::ExtensionLimit` labelled `expired`.
#[test]
fn a_lease_at_its_extension_cap_is_counted_as_extension_limit() {
    let _turn = turn();
    let cluster = RedisServers::start(3);
    let locks = client(&cluster, |b| b.max_extensions(Some(1)));
    let guard = locks
        .lock_with(
            "tc-ext-limit",
            LockOptions::new().ttl(Duration::from_millis(1500)),
        )
        .unwrap();
    assert_eq!(
        guard.wait_lost(Duration::from_secs(5)),
        Some(LossReason::ExtensionLimit)
    );
    drop(guard);
    assert_one_loss("extension_limit");
}

/// Releases (explicit, by drop, of a single lock and of a set) are not
/// losses: nothing is counted under any reason, `released` included.
/// Bug seen to fail it: a release counted as a loss with `reason="released"`.
#[test]
fn releases_are_not_counted_as_losses() {
    let _turn = turn();
    let cluster = RedisServers::start(3);
    let locks = client(&cluster, |b| b);
    locks.lock("tc-released").unwrap().release().unwrap();
    drop(locks.lock("tc-dropped").unwrap());
    locks
        .lock_all(&["tc-set:a", "tc-set:b"])
        .unwrap()
        .release()
        .unwrap();
    // A ping queues behind the dropped guard's release on every instance.
    assert!(locks.ping().iter().all(|(_, r)| r.is_ok()));
    assert_eq!(lost_counts(), Vec::<(String, u64)>::new());
}

/// Increases of the counter `name` since the last look, all labels.
fn counted(name: &str) -> u64 {
    let snapshotter = SNAPSHOTTER.get().expect("recorder installed");
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, _, _, _)| key.key().name() == name)
        .map(|(_, _, _, value)| match value {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum()
}

/// docs/observability.md: `redfence_fence_raise_total` counts "fence raise
/// rounds that reached a quorum". Counters made to disagree (two instances
/// far ahead, each by another amount, so any two answers differ) force one;
/// it is counted once.
#[test]
fn a_raise_round_that_reaches_a_quorum_is_counted() {
    let _turn = turn();
    let cluster = RedisServers::start(3);
    let locks = client(&cluster, |b| b);
    counted("redfence_fence_raise_total");
    let ahead = 1u64 << 52;
    for (i, counter) in [(0, ahead), (1, ahead / 2)] {
        cluster
            .server(i)
            .cmd(&["SET", "redfence:fence:{raised}", &counter.to_string()])
            .unwrap();
    }
    // Whichever two answer first, their answers disagree, so a raise round
    // runs before the grant.
    let guard = locks.lock("raised").unwrap();
    let token = guard.token().get();
    guard.release().unwrap();
    assert!(token > ahead / 2, "{token}");
    assert_eq!(counted("redfence_fence_raise_total"), 1);
}

/// A cluster position's shard errors are counted under the shard's name
/// (`cluster #i shard host:port`), so a dashboard tells which shard of
/// which position fails.
#[test]
fn a_cluster_shards_errors_are_counted_under_its_name() {
    use redfence::testing::ShardedCluster;
    use redfence::Position;
    let _turn = turn();
    let positions: Vec<ShardedCluster> = (0..3).map(|_| ShardedCluster::start(2)).collect();
    let locks = Redlock::builder(positions.iter().map(|c| Position::cluster(c.seed_urls())))
        .instance_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let frozen = positions[0].master(1);
    let resource = (0..10_000)
        .map(|n| format!("shard-{n}"))
        .find(|r| positions[0].master_for_key(&lock_key(r)) == 1)
        .unwrap();
    locks.lock(&resource).unwrap().release().unwrap();
    let name = format!("cluster #0 shard 127.0.0.1:{}", frozen.port());
    let errors_of = |instance: &str| -> u64 {
        let snapshotter = SNAPSHOTTER.get().expect("recorder installed");
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, _, _, _)| {
                key.key().name() == "redfence_instance_errors_total"
                    && key
                        .key()
                        .labels()
                        .any(|l| l.key() == "instance" && l.value() == instance)
            })
            .map(|(_, _, _, value)| match value {
                DebugValue::Counter(n) => n,
                _ => 0,
            })
            .sum()
    };
    errors_of(&name);
    frozen.stop();
    let guard = locks
        .lock_with(&resource, LockOptions::new().wait(Duration::from_secs(5)))
        .expect("two positions of three");
    // Counted when the frozen shard's request times out, after the grant
    // (the recorder resets a counter when it is read: add up the looks).
    let mut seen = 0;
    let counted = eventually(Duration::from_secs(3), || {
        seen += errors_of(&name);
        seen >= 1
    });
    frozen.cont();
    guard.release().unwrap();
    assert!(counted, "no error counted for {name}");
}

/// Every series as the snapshot has it: name, description, value.
fn series() -> Vec<(String, Option<String>, DebugValue)> {
    let snapshotter = SNAPSHOTTER.get().expect("recorder installed");
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, description, value)| {
            (
                key.key().name().to_string(),
                description.map(|d| d.to_string()),
                value,
            )
        })
        .collect()
}

/// `redfence::describe_metrics()` (docs/observability.md): every series
/// gets its description, which exporters show as help text.
#[test]
fn described_metrics_carry_their_help_text() {
    let _turn = turn();
    redfence::describe_metrics();
    let cluster = RedisServers::start(3);
    let _locks = client(&cluster, |b| b);
    let described: Vec<(String, Option<String>)> = series()
        .into_iter()
        .filter(|(name, _, _)| name.starts_with("redfence_"))
        .map(|(name, description, _)| (name, description))
        .collect();
    assert!(!described.is_empty());
    for (name, description) in &described {
        assert!(
            description.as_deref().is_some_and(|d| !d.is_empty()),
            "{name} has no description"
        );
    }
}

/// `redfence_owed_releases` (docs/observability.md): releases an instance
/// is still owed. When the client goes, nothing is retried any more, and
/// the gauge gives back what that client owed.
#[test]
fn owed_releases_are_given_back_when_the_client_goes() {
    let _turn = turn();
    let net = Proxied::start(3);
    let owed = || {
        series()
            .into_iter()
            .filter(|(name, _, _)| name == "redfence_owed_releases")
            .map(|(_, _, v)| match v {
                DebugValue::Gauge(g) => g.into_inner(),
                _ => 0.0,
            })
            .sum::<f64>()
    };
    let locks = net
        .builder()
        .instance_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || locks
        .ping()
        .iter()
        .all(|(_, r)| r.is_ok())));
    // The recorder hands out changes since the last look: keep the level.
    let mut level = owed();
    let before = level;
    let guard = locks.lock("owed").unwrap();
    net.set(&[2], Fault::BlackHole);
    guard.release().unwrap();
    assert!(
        eventually(Duration::from_secs(5), || {
            level += owed();
            level >= before + 1.0
        }),
        "no release owed: {level}"
    );
    drop(locks);
    level += owed();
    assert_eq!(level, before, "the gauge kept what the dropped client owed");
    net.pass_all();
}
