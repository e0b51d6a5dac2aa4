//! # What the servers' own commands save them
//!
//! ```text
//! REDFENCE_TEST_SERVER=~/.cache/redfence-servers/valkey-9.1.2/valkey-server \
//!   cargo run --release --features testing --example native_cost
//! ```
//!
//! Starts five servers of the kind `REDFENCE_TEST_SERVER` names (Valkey 9.1
//! has `DELIFEQ` and `SET … IFEQ`; `.ci/setup` fetches it) and runs, on the
//! same servers, two clients that differ only in
//! [`native_commands`](redfence::RedlockBuilder::native_commands): on, a
//! single resource's release is `DELIFEQ` + `PUBLISH`; off, it is the
//! release script by `EVALSHA` + `PUBLISH`. Each repeat runs, interleaved:
//!
//! - **lock + release**, one thread (`BENCH_OPS` pairs, default 3000) and 16
//!   threads (`BENCH_SECS` seconds, default 2): the lock call is the acquire
//!   script either way, so the difference is the release's;
//! - **extend**, one thread (`BENCH_OPS` extensions of one held lock):
//!   `SET … IFEQ … PX` against the extension script.
//!
//! It prints the median across `BENCH_REPEATS` (default 5) of the servers'
//! CPU per operation (every thread of the five server processes, from
//! `/proc/<pid>/task/*/schedstat`), the client's CPU per operation, the
//! latency and the throughput. On a server without the commands both
//! clients send the scripts, and the rows agree.

#[path = "common/bench_support.rs"]
#[allow(dead_code)]
mod bench_support;

use std::time::{Duration, Instant};

use bench_support::{
    env_or, fmt_client_cpu, fmt_dur, fmt_server_cpu, machine_summary, ratio, single_thread,
    throughput, with_cpu, Sample,
};
use redfence::testing::RedisServers;
use redfence::{Error, LockOptions, Redlock};

fn opts() -> LockOptions {
    LockOptions::new().auto_extend(false)
}

fn lock_release(locks: &Redlock, resource: &str) -> Result<(), Error> {
    locks.lock_with(resource, opts())?.release()
}

/// `ops` extensions of one held lock, the latency of each.
fn extensions(locks: &Redlock, ops: usize) -> Sample {
    let ttl = Duration::from_secs(30);
    let guard = locks
        .lock_with("native-cost-extend", opts().ttl(ttl))
        .expect("the lock is free");
    let start = Instant::now();
    let mut latencies = Vec::with_capacity(ops);
    let mut errors = 0;
    for _ in 0..ops {
        let t0 = Instant::now();
        errors += usize::from(guard.extend(ttl).is_err());
        latencies.push(t0.elapsed());
    }
    let sample = Sample::new(latencies, start.elapsed(), errors);
    let _ = guard.release();
    sample
}

struct Row {
    what: &'static str,
    native: Sample,
    scripts: Sample,
}

fn per_op(sample: &Sample) -> Option<Duration> {
    sample.server_cpu
}

fn main() {
    let repeats: usize = env_or("BENCH_REPEATS", 5);
    let ops: usize = env_or("BENCH_OPS", 3000);
    let secs = Duration::from_secs_f64(env_or("BENCH_SECS", 2.0));
    let cluster = RedisServers::start(5);
    let version = cluster.server(0).server_version();
    println!("# Native commands against Lua ({version})\n");
    println!("machine: {}", machine_summary());
    println!("settings: {repeats} repeats (median shown), {ops} one-thread ops, {secs:?} runs\n");

    let client = |native: bool| {
        Redlock::builder(cluster.urls())
            .native_commands(native)
            .build()
            .expect("client builds")
    };
    let (native, scripts) = (client(true), client(false));
    for locks in [&native, &scripts] {
        for i in 0..300 {
            let _ = lock_release(locks, &format!("native-cost-warm-{i}"));
        }
    }
    let mut samples: [[Vec<Sample>; 2]; 3] = Default::default();
    for _ in 0..repeats.max(1) {
        for (k, locks) in [&native, &scripts].into_iter().enumerate() {
            samples[0][k].push(with_cpu(&cluster, || {
                single_thread(ops, |r| lock_release(locks, r))
            }));
            samples[1][k].push(with_cpu(&cluster, || {
                throughput(16, secs, |r| lock_release(locks, r))
            }));
            samples[2][k].push(with_cpu(&cluster, || extensions(locks, ops)));
        }
    }
    let rows: Vec<Row> = [
        "lock + release, 1 thread",
        "lock + release, 16 threads",
        "extend, 1 thread",
    ]
    .into_iter()
    .zip(samples.iter())
    .map(|(what, [n, s])| Row {
        what,
        native: Sample::median(n),
        scripts: Sample::median(s),
    })
    .collect();

    println!(
        "| operation | client | servers' CPU / op | vs scripts | client CPU / op | p50 | ops/s | errors |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for row in &rows {
        for (label, sample) in [("native", &row.native), ("scripts", &row.scripts)] {
            let vs = match (per_op(sample), per_op(&row.scripts)) {
                (Some(a), Some(b)) => ratio(a, b),
                _ => "-".to_string(),
            };
            println!(
                "| {} | {label} | {} | {vs} | {} | {} | {:.0} | {} |",
                row.what,
                fmt_server_cpu(sample),
                fmt_client_cpu(sample),
                fmt_dur(sample.p50),
                sample.ops_per_sec,
                sample.errors
            );
        }
    }
    let stats = cluster.server(0).commandstats();
    let count = |c: &str| stats.get(c).copied().unwrap_or(0);
    println!(
        "\ninstance 1 ran DELIFEQ {} times, DELEX {}, EVALSHA {} (both clients' requests)",
        count("delifeq"),
        count("delex"),
        count("evalsha")
    );
}
