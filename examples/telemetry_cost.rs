//! # What metrics and tracing cost the lock path
//!
//! ```text
//! cargo run --release --features testing,metrics,tracing --example telemetry_cost
//! cargo run --release --features testing --example telemetry_cost   # the features off
//! ```
//!
//! Starts five `redis-server` processes and runs the benchmark's one-thread
//! scenario (`lock_with(name, auto_extend(false))` then `release()` of
//! distinct resources, the latency of the pair), `BENCH_REPEATS` times
//! (default 5) of `BENCH_OPS` ops (default 2000), interleaving in each repeat:
//!
//! - **nothing installed**: the features as compiled, no recorder and no
//!   subscriber (compare this row between the two commands above for the
//!   cost of the features themselves);
//! - **metrics recorder** (built with `metrics`): the recorder of
//!   `metrics-exporter-prometheus`, as an application would install it;
//! - **tracing subscriber** (built with `tracing`): `tracing-subscriber`'s
//!   formatter at `DEBUG` (every event formatted), writing to a sink.
//!
//! The recorder and the subscriber are installed for the measuring thread
//! only (`metrics::with_local_recorder`, `tracing::subscriber::with_default`),
//! so the rows can alternate in one process. That covers everything this
//! scenario records: on healthy instances the workers and the watchdog
//! record nothing. Once a subscriber has existed, `tracing` checks for one at
//! each event instead of skipping at once, so the later "nothing" rows pay
//! that check: the comparison errs against telemetry.
//!
//! It prints the median across repeats of each row: the latency of the
//! pair, and this process's CPU time per pair (all its threads, from
//! `/proc/self/task/*/schedstat`), which other load on the machine disturbs
//! less than the latency.

#[path = "common/bench_support.rs"]
#[allow(dead_code)]
mod bench_support;

use std::time::Duration;

use bench_support::{env_or, fmt_dur, machine_summary, median_by, ratio, single_thread, Sample};
use redfence::testing::RedisServers;
use redfence::{Error, LockOptions, Redlock};

fn lock_release(locks: &Redlock, resource: &str) -> Result<(), Error> {
    locks
        .lock_with(resource, LockOptions::new().auto_extend(false))?
        .release()
}

/// Runs the scenario for this many ops on this client.
type Run = Box<dyn Fn(&Redlock, usize) -> Sample>;

/// One way of running the scenario, and its samples across repeats.
struct Row {
    name: &'static str,
    run: Run,
    samples: Vec<Sample>,
    /// This process's CPU time per op in each repeat.
    cpu: Vec<Duration>,
}

/// CPU time used so far by every thread of this process (the caller, the
/// workers, the watchdog): where telemetry costs, less disturbed than wall
/// time by whatever else the machine runs. Zero where `/proc` cannot be read.
fn process_cpu() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let nanos: u64 = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}

fn rows() -> Vec<Row> {
    #[allow(unused_mut)] // nothing is added without the features
    let mut rows = vec![Row {
        name: "nothing installed",
        run: Box::new(|locks, ops| single_thread(ops, |r| lock_release(locks, r))),
        samples: Vec::new(),
        cpu: Vec::new(),
    }];
    #[cfg(feature = "metrics")]
    {
        let recorder = std::sync::Arc::new(
            metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
        );
        rows.push(Row {
            name: "metrics recorder (prometheus)",
            run: Box::new(move |locks, ops| {
                metrics::with_local_recorder(&*recorder, || {
                    redfence::describe_metrics();
                    single_thread(ops, |r| lock_release(locks, r))
                })
            }),
            samples: Vec::new(),
            cpu: Vec::new(),
        });
    }
    #[cfg(feature = "tracing")]
    rows.push(Row {
        name: "tracing subscriber (fmt, DEBUG)",
        run: Box::new(|locks, ops| {
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::DEBUG)
                .with_writer(std::io::sink)
                .finish();
            tracing::subscriber::with_default(subscriber, || {
                single_thread(ops, |r| lock_release(locks, r))
            })
        }),
        samples: Vec::new(),
        cpu: Vec::new(),
    });
    rows
}

fn main() {
    let repeats = env_or("BENCH_REPEATS", 5usize).max(1);
    let ops = env_or("BENCH_OPS", 2000usize).max(1);
    let warmup = env_or("BENCH_WARMUP", 300usize);
    let features: Vec<&str> = [
        cfg!(feature = "metrics").then_some("metrics"),
        cfg!(feature = "tracing").then_some("tracing"),
    ]
    .into_iter()
    .flatten()
    .collect();
    println!("# redfence telemetry cost\n");
    println!("{}", machine_summary());
    println!(
        "features: {}; {repeats} repeats of {ops} lock + release ops, one thread, 5 instances\n",
        if features.is_empty() {
            "none".to_string()
        } else {
            features.join(", ")
        }
    );

    let cluster = RedisServers::start(5);
    let locks = Redlock::builder(cluster.urls())
        .build()
        .expect("building the redfence client");
    let mut rows = rows();
    for row in &rows {
        // Warms each path (connections, scripts, the recorder's registry).
        let _ = (row.run)(&locks, warmup.max(1));
    }
    for _ in 0..repeats {
        for row in &mut rows {
            let before = process_cpu();
            let sample = (row.run)(&locks, ops);
            let spent = process_cpu().saturating_sub(before);
            row.cpu.push(spent / sample.ops.max(1) as u32);
            row.samples.push(sample);
        }
    }

    let base = Sample::median(&rows[0].samples);
    let base_cpu = median_by(&rows[0].cpu, |d| *d);
    println!("| scenario | p50 | p99 | ops/s | p50 vs nothing installed | client CPU / op | vs nothing installed | errors |");
    println!("|---|---|---|---|---|---|---|---|");
    for row in &rows {
        let m = Sample::median(&row.samples);
        let cpu = median_by(&row.cpu, |d| *d);
        println!(
            "| {} | {} | {} | {:.0} | {} | {} | {} | {} |",
            row.name,
            fmt_dur(m.p50),
            fmt_dur(m.p99),
            m.ops_per_sec,
            ratio(m.p50, base.p50),
            fmt_dur(cpu),
            ratio(cpu, base_cpu),
            m.errors
        );
    }
    let spread: Vec<String> = rows[0].samples.iter().map(|s| fmt_dur(s.p50)).collect();
    println!(
        "\nnothing installed, p50 of each repeat: {} (the run-to-run noise)",
        spread.join(", ")
    );
}
