//! Metrics and tracing, observed the way an application observes them: a
//! real `metrics` recorder (metrics-util's debugging recorder) and a real
//! `tracing` subscriber, both installed process-wide, since the watchdog and
//! the instance workers record from their own threads; the tests take turns.
//!
//! With `metrics`: every series registered at zero, grants, contention and
//! instance errors counted; `redfence_lease_lost_total` counts each loss
//! once under its `reason` label (README "Observability": `expired`,
//! `not_held`, `extension_failed`, `extension_limit`) and never a release;
//! raise rounds, cluster shards' errors, owed releases and the metrics'
//! help texts; an election's gauge and leader changes. With `tracing`:
//! spans and events of the same operations.
//!
//! Run with `cargo test --features testing,metrics,tracing --test telemetry`
//! (either feature alone works too; without both the file is empty).
#![cfg(any(feature = "metrics", feature = "tracing"))]

mod common;

use std::time::Duration;

#[cfg(feature = "metrics")]
use common::faults::Proxied;
#[cfg(feature = "metrics")]
use common::holders;
#[cfg(feature = "tracing")]
use common::telemetry::captured;
#[cfg(feature = "metrics")]
use common::telemetry::recorded;
use common::telemetry::{instance_name, patient, turn};
use common::{builder, eventually, lock_key};
#[cfg(feature = "metrics")]
use metrics_util::debugging::{DebugValue, Snapshotter};
#[cfg(feature = "metrics")]
use redfence::testing::Fault;
use redfence::testing::RedisServers;
#[cfg(feature = "metrics")]
use redfence::Redlock;
use redfence::{Error, LockOptions, LossReason};

#[test]
fn a_granted_lock_is_counted_once_and_traced_with_its_token() {
    let _turn = turn();
    let cluster = RedisServers::start(3);
    let locks = patient(&cluster);
    let guard = locks.lock("t-granted").expect("granted");
    let token = guard.token().get();
    let value = cluster
        .server(0)
        .get(&lock_key("t-granted"))
        .expect("lock key set");

    #[cfg(feature = "metrics")]
    {
        let m = recorded::take();
        let total = |o: &str| recorded::sum(&m, "redfence_acquire_total", &[("outcome", o)]);
        assert_eq!(total("granted"), 1.0, "{m:?}");
        assert_eq!(recorded::sum(&m, "redfence_acquire_total", &[]), 1.0);
        assert_eq!(
            recorded::sum(&m, "redfence_acquire_attempts_total", &[]),
            1.0
        );
        assert_eq!(
            recorded::sum(
                &m,
                "redfence_acquire_duration_seconds",
                &[("outcome", "granted")]
            ),
            1.0
        );
        assert_eq!(recorded::sum(&m, "redfence_held_locks", &[]), 1.0);
        assert_eq!(
            recorded::sum(&m, "redfence_hold_duration_seconds", &[]),
            0.0
        );
        assert_eq!(
            recorded::sum(&m, "redfence_instance_errors_total", &[]),
            0.0
        );
        recorded::assert_no_resource_label(&m, "t-granted");
    }

    guard.release().expect("released");

    #[cfg(feature = "metrics")]
    {
        let m = recorded::take();
        assert_eq!(recorded::sum(&m, "redfence_held_locks", &[]), -1.0);
        assert_eq!(
            recorded::sum(&m, "redfence_hold_duration_seconds", &[]),
            1.0
        );
        assert_eq!(recorded::sum(&m, "redfence_lease_lost_total", &[]), 0.0);
    }

    #[cfg(feature = "tracing")]
    {
        use tracing::Level;
        let t = captured::take();
        let spans = captured::lock_spans(&t, "t-granted");
        assert_eq!(spans.len(), 1, "{t:#?}");
        let span = spans[0];
        assert_eq!(span.field("outcome"), Some("granted"));
        assert_eq!(span.field("attempts"), Some("1"));
        assert_eq!(span.field("token"), Some(token.to_string().as_str()));
        assert!(span.field("wait").is_some());
        let attempts = captured::events(&t, Level::DEBUG, "attempt granted");
        assert_eq!(attempts.len(), 1, "{t:#?}");
        assert!(
            matches!(attempts[0], captured::Record::Event { spans, target, .. }
                if spans == &["lock".to_string()] && target == "redfence::lock"),
            "the attempt event is inside the lock span: {:?}",
            attempts[0]
        );
        assert!(
            !t.iter().any(
                |r| matches!(r, captured::Record::Event { level, .. } if *level <= Level::WARN)
            ),
            "no warning for a healthy grant: {t:#?}"
        );
        captured::assert_never_mentioned(&t, &value);
    }
    let _ = (token, value);
}

#[test]
fn a_contended_try_lock_counts_as_contended_with_one_attempt() {
    let _turn = turn();
    let cluster = RedisServers::start(3);
    let holder = patient(&cluster);
    let rival = patient(&cluster);
    let guard = holder.lock("t-contended").expect("granted");
    match rival.try_lock("t-contended") {
        Err(Error::Contended { attempts: 1, .. }) => {}
        other => panic!("expected contention, got {other:?}"),
    }

    #[cfg(feature = "metrics")]
    {
        let m = recorded::take();
        let total = |o: &str| recorded::sum(&m, "redfence_acquire_total", &[("outcome", o)]);
        assert_eq!(total("granted"), 1.0, "{m:?}");
        assert_eq!(total("contended"), 1.0, "{m:?}");
        assert_eq!(
            recorded::sum(&m, "redfence_acquire_attempts_total", &[]),
            2.0
        );
        assert_eq!(
            recorded::sum(
                &m,
                "redfence_acquire_duration_seconds",
                &[("outcome", "contended")]
            ),
            1.0
        );
        // Only the holder's guard exists.
        assert_eq!(recorded::sum(&m, "redfence_held_locks", &[]), 1.0);
        recorded::assert_no_resource_label(&m, "t-contended");
    }

    #[cfg(feature = "tracing")]
    {
        use tracing::Level;
        let t = captured::take();
        let spans = captured::lock_spans(&t, "t-contended");
        assert_eq!(spans.len(), 2, "{t:#?}");
        let contended: Vec<_> = spans
            .iter()
            .filter(|s| s.field("outcome") == Some("contended"))
            .collect();
        assert_eq!(contended.len(), 1, "{spans:#?}");
        assert_eq!(contended[0].field("attempts"), Some("1"));
        assert_eq!(contended[0].field("token"), None);
        let failed = captured::events(&t, Level::DEBUG, "attempt failed");
        assert_eq!(failed.len(), 1, "{t:#?}");
        assert_eq!(failed[0].field("outcome"), Some("contended"));
    }

    guard.release().expect("released");
}

#[test]
fn a_lease_lost_to_a_stopped_majority_is_counted_and_warned_once() {
    let _turn = turn();
    let cluster = RedisServers::start(5);
    // Timeouts short against the TTL, so that the loss comes quickly, yet
    // long enough that the running instances do not time out under load.
    let locks = builder(&cluster)
        .instance_timeout(Duration::from_millis(200))
        .build()
        .expect("client builds");
    let guard = locks
        .lock_with(
            "t-lost",
            LockOptions::new().ttl(Duration::from_millis(3000)),
        )
        .expect("granted");
    let token = guard.token().get();
    cluster.stop(&[0, 1, 2]);
    let reason = guard.wait_lost(Duration::from_secs(10)).expect("lost");
    assert!(
        matches!(reason, LossReason::ExtensionFailed | LossReason::Expired),
        "{reason:?}"
    );
    let label = match reason {
        LossReason::Expired => "expired",
        _ => "extension_failed",
    };
    // Dropped while the majority is stopped: its release is owed to them.
    drop(guard);
    let stopped: Vec<String> = (0..3).map(|i| instance_name(&cluster, i)).collect();

    #[cfg(feature = "metrics")]
    let during = {
        let mut seen = Vec::new();
        let owed_everywhere = eventually(Duration::from_secs(5), || {
            seen.extend(recorded::take());
            stopped
                .iter()
                .all(|i| recorded::sum(&seen, "redfence_owed_releases", &[("instance", i)]) >= 1.0)
        });
        assert!(owed_everywhere, "owed releases not counted: {seen:?}");
        seen
    };

    cluster.cont(&[0, 1, 2]);

    #[cfg(feature = "metrics")]
    {
        let mut m = during;
        let delivered = eventually(Duration::from_secs(5), || {
            m.extend(recorded::take());
            recorded::sum(&m, "redfence_owed_releases", &[]) == 0.0
        });
        assert!(delivered, "owed releases never delivered: {m:?}");
        assert_eq!(
            recorded::sum(&m, "redfence_lease_lost_total", &[("reason", label)]),
            1.0,
            "{m:?}"
        );
        assert_eq!(recorded::sum(&m, "redfence_lease_lost_total", &[]), 1.0);
        // Recorded at the loss, not again at the drop.
        assert_eq!(
            recorded::sum(&m, "redfence_hold_duration_seconds", &[]),
            1.0
        );
        assert!(recorded::sum(&m, "redfence_extend_total", &[("outcome", "failed")]) >= 1.0);
        assert_eq!(recorded::sum(&m, "redfence_held_locks", &[]), 0.0);
        for i in &stopped {
            assert!(
                recorded::sum(&m, "redfence_instance_errors_total", &[("instance", i)]) >= 1.0,
                "no error counted for {i}: {m:?}"
            );
        }
        for i in 3..5 {
            let name = instance_name(&cluster, i);
            assert_eq!(
                recorded::sum(&m, "redfence_owed_releases", &[("instance", &name)]),
                0.0
            );
        }
        recorded::assert_no_resource_label(&m, "t-lost");
    }

    #[cfg(feature = "tracing")]
    {
        use tracing::Level;
        let mut t = captured::take();
        // The workers notice the instances' return when they next answer.
        let answering = eventually(Duration::from_secs(5), || {
            t.extend(captured::take());
            let back = captured::events(&t, Level::INFO, "instance answering again");
            stopped
                .iter()
                .all(|i| back.iter().any(|r| r.field("instance") == Some(i.as_str())))
        });
        assert!(answering, "{t:#?}");
        let lost = captured::events(&t, Level::WARN, "lease lost");
        assert_eq!(lost.len(), 1, "{t:#?}");
        assert_eq!(lost[0].field("resource"), Some("t-lost"));
        assert_eq!(lost[0].field("reason"), Some(label));
        assert_eq!(lost[0].field("token"), Some(token.to_string().as_str()));
        assert!(!captured::events(&t, Level::WARN, "lease extension round failed").is_empty());
        // Many requests failed on each stopped instance (extension rounds,
        // owed releases retried): one warning each.
        let failing = captured::events(&t, Level::WARN, "instance failing");
        for i in &stopped {
            let n = failing
                .iter()
                .filter(|r| r.field("instance") == Some(i.as_str()))
                .count();
            assert_eq!(n, 1, "warnings for {i}: {failing:#?}");
        }
    }
    let _ = (token, label);
}

#[test]
fn an_instance_stopped_during_locks_is_counted_and_warned_once() {
    let _turn = turn();
    let cluster = RedisServers::start(5);
    let locks = patient(&cluster);
    let frozen = instance_name(&cluster, 4);
    // Connected first, so that the freeze hits a live connection.
    locks
        .lock("t-minority-warm-up")
        .and_then(|g| g.release())
        .expect("granted");
    #[cfg(feature = "metrics")]
    recorded::take();
    #[cfg(feature = "tracing")]
    captured::take();
    cluster.stop(&[4]);
    // A quorum of four still answers: every call is granted while the
    // frozen instance's worker times out, again and again.
    for i in 0..5 {
        let guard = locks
            .lock(&format!("t-minority-{i}"))
            .expect("granted without the frozen instance");
        guard.release().expect("released by a quorum");
    }

    #[cfg(feature = "metrics")]
    {
        let mut m = Vec::new();
        let counted = eventually(Duration::from_secs(5), || {
            m.extend(recorded::take());
            recorded::sum(
                &m,
                "redfence_instance_errors_total",
                &[("instance", &frozen)],
            ) >= 1.0
        });
        assert!(counted, "{m:?}");
        assert_eq!(
            recorded::sum(&m, "redfence_acquire_total", &[("outcome", "granted")]),
            5.0
        );
        for i in 0..4 {
            let name = instance_name(&cluster, i);
            assert_eq!(
                recorded::sum(&m, "redfence_instance_errors_total", &[("instance", &name)]),
                0.0,
                "healthy {name}: {m:?}"
            );
        }
    }

    #[cfg(feature = "tracing")]
    {
        use tracing::Level;
        let mut t = Vec::new();
        let warned = eventually(Duration::from_secs(5), || {
            t.extend(captured::take());
            !captured::events(&t, Level::WARN, "instance failing").is_empty()
        });
        assert!(warned, "{t:#?}");
        let failing = captured::events(&t, Level::WARN, "instance failing");
        assert_eq!(failing.len(), 1, "{failing:#?}");
        assert_eq!(failing[0].field("instance"), Some(frozen.as_str()));
        // Its reads time out; reconnecting then fails too (connects
        // succeed, the handshake gets no answer).
        assert!(
            matches!(failing[0].field("kind"), Some("timeout" | "connect")),
            "{failing:#?}"
        );
        let granted = t
            .iter()
            .filter(|r| matches!(r, captured::Record::SpanClosed { .. }))
            .filter(|r| r.field("outcome") == Some("granted"))
            .count();
        assert_eq!(granted, 5, "{t:#?}");
    }

    // More calls while it stays frozen: more errors, no more warnings.
    for i in 5..8 {
        let guard = locks.lock(&format!("t-minority-{i}")).expect("granted");
        drop(guard);
    }
    cluster.cont(&[4]);

    #[cfg(feature = "tracing")]
    {
        use tracing::Level;
        let mut t = captured::take();
        let answering = eventually(Duration::from_secs(5), || {
            // A ping queues behind everything sent so far.
            let _ = locks.ping();
            t.extend(captured::take());
            !captured::events(&t, Level::INFO, "instance answering again").is_empty()
        });
        assert!(answering, "{t:#?}");
        let failing = captured::events(&t, Level::WARN, "instance failing");
        assert!(
            failing.is_empty(),
            "warned again during one run: {failing:#?}"
        );
        let back = captured::events(&t, Level::INFO, "instance answering again");
        assert_eq!(back.len(), 1, "{back:#?}");
        assert_eq!(back[0].field("instance"), Some(frozen.as_str()));
    }
    let _ = frozen;
}

/// Every series whose labels are known when a client is built is there
/// from `build()` on, at zero: `increase(redfence_lease_lost_total[5m]) > 0`
/// sees the first lost lease of a process, which a series first seen at 1
/// would hide. Recorded on a recorder of this thread alone, so that what
/// other clients of the process registered cannot count.
#[cfg(feature = "metrics")]
#[test]
fn every_known_series_is_registered_at_zero_when_a_client_is_built() {
    use std::collections::HashMap;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let _turn = turn();
    let cluster = RedisServers::start(3);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let locks = metrics::with_local_recorder(&recorder, || patient(&cluster));
    let series: HashMap<(String, Vec<(String, String)>), DebugValue> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let mut labels: Vec<(String, String)> = key
                .key()
                .labels()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect();
            labels.sort();
            ((key.key().name().to_string(), labels), value)
        })
        .collect();
    let at_zero = |name: &str, labels: &[(&str, &str)]| {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        labels.sort();
        let value = series.get(&(name.to_string(), labels.clone()));
        let zero = match value {
            Some(DebugValue::Counter(n)) => *n == 0,
            Some(DebugValue::Gauge(g)) => g.into_inner() == 0.0,
            Some(DebugValue::Histogram(values)) => values.is_empty(),
            None => false,
        };
        assert!(
            zero,
            "{name}{labels:?}: {value:?}; registered: {:?}",
            series.keys()
        );
    };
    for outcome in [
        "granted",
        "contended",
        "unavailable",
        "no_validity",
        "wrong_type",
        "invalid",
        "cancelled",
        "access_denied",
        "skipped",
    ] {
        at_zero("redfence_acquire_total", &[("outcome", outcome)]);
        at_zero("redfence_acquire_duration_seconds", &[("outcome", outcome)]);
    }
    at_zero("redfence_acquire_attempts_total", &[]);
    at_zero("redfence_hold_duration_seconds", &[]);
    for outcome in ["ok", "failed"] {
        at_zero("redfence_extend_total", &[("outcome", outcome)]);
    }
    for reason in ["expired", "not_held", "extension_failed", "extension_limit"] {
        at_zero("redfence_lease_lost_total", &[("reason", reason)]);
    }
    at_zero("redfence_fence_raise_total", &[]);
    at_zero("redfence_held_locks", &[]);
    for i in 0..3 {
        let instance = instance_name(&cluster, i);
        for kind in [
            "timeout",
            "connect",
            "auth",
            "tls",
            "wrong_type",
            "io",
            "server",
            "protocol",
            "overloaded",
        ] {
            at_zero(
                "redfence_instance_errors_total",
                &[("instance", &instance), ("kind", kind)],
            );
        }
        at_zero("redfence_owed_releases", &[("instance", &instance)]);
        at_zero(
            "redfence_owed_releases_dropped_total",
            &[("instance", &instance)],
        );
    }
    // Nothing else: no series is invented at build time.
    assert_eq!(
        series.len(),
        9 * 2 + 2 + 2 + 4 + 2 + 3 * (9 + 2),
        "{:?}",
        series.keys()
    );
    drop(locks);
}

// --- redfence_lease_lost_total by reason, and other counted events ---------

#[cfg(feature = "metrics")]
const LOST: &str = "redfence_lease_lost_total";

#[cfg(feature = "metrics")]
const REASONS: [&str; 4] = ["expired", "not_held", "extension_failed", "extension_limit"];

#[cfg(feature = "metrics")]
/// Increases of `redfence_lease_lost_total` since the last look, by
/// `reason` label (the debugging recorder resets counters when read).
fn lost_counts() -> Vec<(String, u64)> {
    let snapshotter = recorded::snapshotter();
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

#[cfg(feature = "metrics")]
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

#[cfg(feature = "metrics")]
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

#[cfg(feature = "metrics")]
/// A lease without auto-extension runs out: `reason="expired"`.
/// Catches: `LossReason::Expired` labelled `not_held`.
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

#[cfg(feature = "metrics")]
/// The lease's keys are deleted on a majority behind our back; the next
/// extension finds them gone: `reason="not_held"`.
/// Catches: `LossReason::NotHeld` labelled `expired`.
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

#[cfg(feature = "metrics")]
/// A majority frozen (SIGSTOP): the watchdog's renewal fails and, with no
/// retry allowed, the lease is given up long before its validity ends:
/// `reason="extension_failed"`.
/// Catches: `LossReason::ExtensionFailed` labelled `expired`.
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

#[cfg(feature = "metrics")]
/// The watchdog may extend a lease once (`max_extensions(Some(1))`); after
/// that it runs out: `reason="extension_limit"`.
/// Catches: `LossReason::ExtensionLimit` labelled `expired`.
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

#[cfg(feature = "metrics")]
/// Releases (explicit, by drop, of a single lock and of a set) are not
/// losses: nothing is counted under any reason, `released` included.
/// Catches: a release counted as a loss with `reason="released"`.
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

#[cfg(feature = "metrics")]
/// Increases of the counter `name` since the last look, all labels.
fn counted(name: &str) -> u64 {
    let snapshotter = recorded::snapshotter();
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

#[cfg(feature = "metrics")]
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

#[cfg(feature = "metrics")]
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
        let snapshotter = recorded::snapshotter();
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

#[cfg(feature = "metrics")]
/// Every series as the snapshot has it: name, description, value.
fn series() -> Vec<(String, Option<String>, DebugValue)> {
    let snapshotter = recorded::snapshotter();
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

#[cfg(feature = "metrics")]
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

#[cfg(feature = "metrics")]
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

// --- The election's series -----------------------------------------------

#[cfg(feature = "metrics")]
/// Series of `name` for election `election` since the last look: the
/// recorder resets counters and gauges when read.
fn election_series(snap: &Snapshotter, name: &str, election: &str) -> Vec<(Vec<String>, f64)> {
    snap.snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == name)
        .filter(|(key, ..)| {
            key.key()
                .labels()
                .any(|l| l.key() == "election" && l.value() == election)
        })
        .map(|(key, _, _, value)| {
            let labels = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let value = match value {
                DebugValue::Counter(c) => c as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(h) => h.len() as f64,
            };
            (labels, value)
        })
        .collect()
}

#[cfg(feature = "metrics")]
#[test]
fn leader_gauge_and_changes_are_recorded() {
    let _turn = turn();
    let snap = recorded::snapshotter();
    let cluster = RedisServers::start(3);
    let locks = common::client(&cluster);
    let election = locks.election("metered").unwrap();

    let changes = |snap: &Snapshotter| {
        let mut s = election_series(snap, "redfence_leader_changes_total", "metered");
        s.sort_by(|a, b| a.0.cmp(&b.0));
        s
    };
    let gauge = election_series(snap, "redfence_leader", "metered");
    assert_eq!(gauge, [(vec!["election=metered".to_string()], 0.0)]);

    let term = election.campaign().unwrap();
    let all: Vec<_> = snap.snapshot().into_vec();
    let leader: Vec<f64> = all
        .iter()
        .filter(|(k, ..)| k.key().name() == "redfence_leader")
        .filter_map(|(_, _, _, v)| match v {
            DebugValue::Gauge(g) => Some(g.into_inner()),
            _ => None,
        })
        .collect();
    assert_eq!(leader, [1.0]);
    let elected = all.iter().any(|(k, _, _, v)| {
        k.key().name() == "redfence_leader_changes_total"
            && k.key().labels().any(|l| l.value() == "elected")
            && matches!(v, DebugValue::Counter(1))
    });
    assert!(elected, "{all:?}");

    term.resign().unwrap();
    let after = changes(snap);
    let resigned = after
        .iter()
        .find(|(labels, _)| labels.iter().any(|l| l == "change=resigned"))
        .map(|(_, v)| *v);
    assert_eq!(resigned, Some(1.0), "{after:?}");
    assert_eq!(
        election_series(snap, "redfence_leader", "metered")
            .first()
            .map(|s| s.1),
        Some(0.0)
    );

    // A loss is recorded when the watchdog notices it, before the
    // leadership is dropped.
    let election = election.lease(std::time::Duration::from_secs(1));
    let term = election.campaign().unwrap();
    let _ = changes(snap);
    for server in &cluster {
        server.del("redfence:lock:{election:metered}");
    }
    let lost = term.loss_signal();
    lost.recv_timeout(std::time::Duration::from_secs(3))
        .expect("the watchdog notices");
    let after = changes(snap);
    let lost = after
        .iter()
        .find(|(labels, _)| labels.iter().any(|l| l == "change=lost"))
        .map(|(_, v)| *v);
    assert_eq!(lost, Some(1.0), "{after:?}");
    drop(term);
    let after = changes(snap);
    assert!(
        after.iter().all(|(_, v)| *v == 0.0),
        "counted twice: {after:?}"
    );
}

#[cfg(feature = "metrics")]
/// docs/observability.md: a Redis Cluster position's series are its
/// shards', one name per shard master, at zero once the position found
/// it; nothing is registered under the position's own name.
#[test]
fn a_cluster_position_has_one_name_per_shard() {
    use redfence::testing::ShardedCluster;
    use redfence::Position;

    let _turn = turn();
    let shards = ShardedCluster::start(3);
    let locks = Redlock::builder([Position::cluster(shards.seed_urls())])
        .instance_timeout(Duration::from_millis(1000))
        .build()
        .expect("client builds");
    assert!(common::eventually(Duration::from_secs(10), || locks
        .ping()
        .iter()
        .filter(|(_, r)| r.is_ok())
        .count()
        == 3));
    // Every series the recorder has, at zero or not (other turns' series
    // included: only this position's names are looked at).
    let names: std::collections::BTreeSet<String> = recorded::snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "redfence_instance_errors_total")
        .filter_map(|(key, ..)| {
            let instance = key.key().labels().find(|l| l.key() == "instance")?;
            Some(instance.value().to_string())
        })
        .filter(|name| name.starts_with("cluster #0"))
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with("cluster #0 (")),
        "series under the position's name: {names:?}"
    );
    let ports: Vec<String> = shards
        .masters()
        .iter()
        .map(|m| format!(":{}", m.port()))
        .collect();
    let names: std::collections::BTreeSet<String> = names
        .into_iter()
        .filter(|n| ports.iter().any(|p| n.ends_with(p)))
        .collect();
    let expected: std::collections::BTreeSet<String> = shards
        .masters()
        .iter()
        .map(|m| format!("cluster #0 shard 127.0.0.1:{}", m.port()))
        .collect();
    assert_eq!(names, expected);
}

/// Permits held, by semaphore: up at each grant, down at each release or
/// drop; each permit also counts as a held guard.
#[test]
fn permits_held_are_counted_by_semaphore() {
    let _turn = turn();
    let cluster = RedisServers::start(3);
    let locks = patient(&cluster);
    let pool = locks.semaphore("t-pool", 3);
    let first = pool.acquire().expect("a permit");
    let second = pool.acquire().expect("a second permit");

    #[cfg(feature = "metrics")]
    {
        let m = recorded::take();
        let held = recorded::sum(&m, "redfence_held_permits", &[("semaphore", "t-pool")]);
        assert_eq!(held, 2.0, "{m:?}");
        assert_eq!(recorded::sum(&m, "redfence_held_locks", &[]), 2.0);
    }

    first.release().expect("released");
    drop(second);

    #[cfg(feature = "metrics")]
    {
        let m = recorded::take();
        let held = recorded::sum(&m, "redfence_held_permits", &[("semaphore", "t-pool")]);
        assert_eq!(held, -2.0, "{m:?}");
        assert_eq!(recorded::sum(&m, "redfence_held_locks", &[]), -2.0);
    }
}
