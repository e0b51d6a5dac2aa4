//! The election's series, with the `metrics` feature: they exist at zero
//! from `election()` on, the gauge says who leads, the counter counts each
//! change.
#![cfg(feature = "metrics")]

mod common;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redfence::testing::RedisServers;

/// Series of `name` for election `election` since the last look: the
/// recorder resets counters and gauges when read.
fn series(snap: &Snapshotter, name: &str, election: &str) -> Vec<(Vec<String>, f64)> {
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

#[test]
fn leader_gauge_and_changes_are_recorded() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    recorder
        .install()
        .expect("no other recorder in this binary");
    let cluster = RedisServers::start(3);
    let locks = common::client(&cluster);
    let election = locks.election("metered").unwrap();

    let changes = |snap: &Snapshotter| {
        let mut s = series(snap, "redfence_leader_changes_total", "metered");
        s.sort_by(|a, b| a.0.cmp(&b.0));
        s
    };
    let gauge = series(&snap, "redfence_leader", "metered");
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
    let after = changes(&snap);
    let resigned = after
        .iter()
        .find(|(labels, _)| labels.iter().any(|l| l == "change=resigned"))
        .map(|(_, v)| *v);
    assert_eq!(resigned, Some(1.0), "{after:?}");
    assert_eq!(
        series(&snap, "redfence_leader", "metered")
            .first()
            .map(|s| s.1),
        Some(0.0)
    );

    // A loss is recorded when the watchdog notices it, before the
    // leadership is dropped.
    let election = election.lease(std::time::Duration::from_secs(1));
    let term = election.campaign().unwrap();
    let _ = changes(&snap);
    for server in &cluster {
        server.del("redfence:lock:{election:metered}");
    }
    let lost = term.loss_signal();
    lost.recv_timeout(std::time::Duration::from_secs(3))
        .expect("the watchdog notices");
    let after = changes(&snap);
    let lost = after
        .iter()
        .find(|(labels, _)| labels.iter().any(|l| l == "change=lost"))
        .map(|(_, v)| *v);
    assert_eq!(lost, Some(1.0), "{after:?}");
    drop(term);
    let after = changes(&snap);
    assert!(
        after.iter().all(|(_, v)| *v == 0.0),
        "counted twice: {after:?}"
    );
}
