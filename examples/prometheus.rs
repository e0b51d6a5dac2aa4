//! # redfence metrics in the Prometheus text format
//!
//! ```text
//! cargo run --features testing,metrics --example prometheus
//! ```
//!
//! Installs `metrics-exporter-prometheus` as the global recorder (without
//! its HTTP listener: the application would serve `handle.render()` on its
//! own `/metrics` endpoint), starts five `redis-server` processes, and
//! drives every series: grants and releases, an explicit extension, a
//! contended `try_lock`, a grant whose instances' fencing counters disagree
//! (a raise round), and a lease lost by freezing a majority of instances
//! (SIGSTOP), whose release is then owed to them. It prints the exposition
//! text and exits non-zero if a series is missing or implausible, or if a
//! series was not there at 0 as soon as the client was built.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusBuilder;
use redfence::testing::{RedisServer, RedisServers};
use redfence::{redis, Error, LockOptions, Redlock};

/// Buckets for the duration histograms, in seconds: from a loopback grant
/// (well under a millisecond) to a long hold.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("prometheus example failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let recorder = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(|e| format!("buckets: {e}"))?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| format!("recorder: {e}"))?;

    let cluster = RedisServers::start(5);
    // Built after the recorder is installed, so the help texts reach it.
    let locks = Redlock::builder(cluster.urls())
        .instance_timeout(Duration::from_millis(50))
        .build()
        .map_err(|e| e.to_string())?;
    // Every series whose labels are known is there from the start, at 0,
    // so `increase(redfence_lease_lost_total[5m]) > 0` sees the first loss.
    let at_start = handle.render();
    for reason in ["expired", "not_held", "extension_failed", "extension_limit"] {
        let series = format!("redfence_lease_lost_total{{reason=\"{reason}\"}}");
        let values = series_values(&at_start, &series);
        if values != [0.0] {
            return Err(format!("{series} after build(): {values:?}, expected [0]"));
        }
    }
    let rival = Redlock::new(cluster.urls()).map_err(|e| e.to_string())?;

    // Grants and releases; one lease extended by hand.
    for i in 0..5 {
        let guard = locks
            .lock(&format!("invoice:{i}"))
            .map_err(|e| e.to_string())?;
        if i == 0 {
            guard
                .extend(Duration::from_secs(20))
                .map_err(|e| e.to_string())?;
        }
        guard.release().map_err(|e| e.to_string())?;
    }

    // A contended try_lock.
    let held = locks.lock("report:daily").map_err(|e| e.to_string())?;
    match rival.try_lock("report:daily") {
        Err(Error::Contended { .. }) => {}
        other => return Err(format!("expected contention, got {other:?}")),
    }
    held.release().map_err(|e| e.to_string())?;

    // Fencing counters that disagree (as after a partition: two instances
    // half a second ahead of the others, within what a raise may adopt),
    // and a third instance frozen: whichever instances grant, fewer than a
    // quorum hold the chosen token, and the grant needs a raise round.
    let now = instance_micros(cluster.server(4))?;
    for i in 0..2 {
        let ahead = (now + 500_000 + 100_000 * i as u64).to_string();
        cluster
            .server(i)
            .cmd(&["SET", "redfence:fence:{ledger}", &ahead])
            .map_err(|e| e.to_string())?;
    }
    cluster.server(2).stop();
    let ledger = locks.lock("ledger").and_then(|g| g.release());
    cluster.server(2).cont();
    ledger.map_err(|e| e.to_string())?;

    // A lease lost to a frozen majority; its release is owed to them.
    let fragile = locks
        .lock_with(
            "nightly-import",
            LockOptions::new().ttl(Duration::from_millis(600)),
        )
        .map_err(|e| e.to_string())?;
    cluster.stop(&[0, 1, 2]);
    let reason = fragile.wait_lost(Duration::from_secs(5));
    if reason.is_none() {
        cluster.cont(&[0, 1, 2]);
        return Err("the lease was not reported lost".into());
    }
    drop(fragile);
    let owed = poll(Duration::from_secs(5), || {
        series_values(&handle.render(), "redfence_owed_releases")
            .into_iter()
            .sum::<f64>()
            > 0.0
    });
    cluster.cont(&[0, 1, 2]);
    if !owed {
        return Err("the release owed to the frozen instances was not counted".into());
    }
    // Once the instances answer again, the owed releases are delivered.
    if !poll(Duration::from_secs(5), || {
        series_values(&handle.render(), "redfence_owed_releases")
            .into_iter()
            .sum::<f64>()
            == 0.0
    }) {
        return Err("owed releases were not delivered after the instances came back".into());
    }

    // One guard still alive while the exposition is taken.
    let _live = locks.lock("invoice:live").map_err(|e| e.to_string())?;
    handle.run_upkeep();
    let text = handle.render();
    println!("{text}");
    check(&text)
}

/// A condition on a sample's value.
type Check = Box<dyn Fn(f64) -> bool>;

/// Fails unless every series of the contract is there with a plausible
/// value.
fn check(text: &str) -> Result<(), String> {
    let at_least = |n: f64| move |v: f64| v >= n;
    let checks: Vec<(&str, Check, &str)> = vec![
        (
            "redfence_acquire_total{outcome=\"granted\"}",
            Box::new(at_least(9.0)),
            ">= 9",
        ),
        (
            "redfence_acquire_total{outcome=\"contended\"}",
            Box::new(at_least(1.0)),
            ">= 1",
        ),
        (
            "redfence_acquire_attempts_total",
            Box::new(at_least(10.0)),
            ">= 10",
        ),
        (
            "redfence_acquire_duration_seconds_count{outcome=\"granted\"}",
            Box::new(at_least(9.0)),
            ">= 9",
        ),
        (
            "redfence_acquire_duration_seconds_bucket{outcome=\"granted\",le=\"+Inf\"}",
            Box::new(at_least(9.0)),
            ">= 9",
        ),
        (
            "redfence_hold_duration_seconds_count",
            Box::new(at_least(8.0)),
            ">= 8 (every ended lease)",
        ),
        (
            "redfence_extend_total{outcome=\"ok\"}",
            Box::new(at_least(1.0)),
            ">= 1",
        ),
        (
            "redfence_extend_total{outcome=\"failed\"}",
            Box::new(at_least(1.0)),
            ">= 1",
        ),
        (
            "redfence_fence_raise_total",
            Box::new(at_least(1.0)),
            ">= 1",
        ),
        (
            "redfence_instance_errors_total{kind=\"timeout\"}",
            Box::new(at_least(1.0)),
            ">= 1 on a frozen instance",
        ),
        (
            "redfence_held_locks",
            Box::new(|v| v == 1.0),
            "1 (one live guard)",
        ),
        (
            "redfence_owed_releases",
            Box::new(|v| v == 0.0),
            "0 once delivered",
        ),
    ];
    let mut problems = Vec::new();
    for (series, ok, what) in &checks {
        let values = series_values(text, series);
        if values.is_empty() {
            problems.push(format!("{series}: missing"));
        } else if !values.iter().any(|v| ok(*v)) {
            problems.push(format!("{series}: {values:?}, expected {what}"));
        }
    }
    let lost: f64 = ["expired", "extension_failed"]
        .iter()
        .flat_map(|r| {
            series_values(
                text,
                &format!("redfence_lease_lost_total{{reason=\"{r}\"}}"),
            )
        })
        .sum();
    if lost < 1.0 {
        problems.push("redfence_lease_lost_total: no lost lease counted".into());
    }
    for help in ["redfence_acquire_total", "redfence_held_locks"] {
        if !text.contains(&format!("# HELP {help} ")) {
            problems.push(format!("{help}: no help text"));
        }
    }
    if problems.is_empty() {
        eprintln!("all redfence series present");
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The values of the samples whose name and labels start with `series`
/// (`name` alone matches every label set of that name).
fn series_values(text: &str, series: &str) -> Vec<f64> {
    let (name, labels) = match series.find('{') {
        Some(i) => (&series[..i], Some(&series[i + 1..series.len() - 1])),
        None => (series, None),
    };
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            let (key_name, key_labels) = match key.find('{') {
                Some(i) => (&key[..i], &key[i + 1..key.len() - 1]),
                None => (key, ""),
            };
            if key_name != name {
                return None;
            }
            if let Some(labels) = labels {
                if !labels
                    .split(',')
                    .all(|l| key_labels.split(',').any(|k| k == l))
                {
                    return None;
                }
            }
            value.parse().ok()
        })
        .collect()
}

fn poll(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The instance's clock (`TIME`), in microseconds since 1970.
fn instance_micros(server: &RedisServer) -> Result<u64, String> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query(&mut server.connection())
        .map_err(|e| e.to_string())?;
    Ok(secs * 1_000_000 + micros)
}
