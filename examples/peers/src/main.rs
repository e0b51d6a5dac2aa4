//! Same-run comparison of redfence with the other Rust Redlock crates.
//!
//! ```text
//! cd examples/peers && cargo run --release
//! ```
//!
//! Starts its own five `redis-server` processes (redfence's
//! `testing::RedisCluster`) and measures, in one run so that ratios compare
//! like with like:
//!
//! - **raw**: the network's limit, `SET NX PX` then `DEL` written to all five
//!   plain connections before reading the five replies (one thread);
//! - **redfence** (this repository, sync);
//! - **redlock** (redlock-rs 2.x, sync; opens a new connection per command);
//! - **rslock** (0.10, async on tokio; driven with `Handle::block_on` from
//!   plain threads, and also as 16 tokio tasks for the throughput).
//!
//! Scenarios: one-thread lock + release of distinct resources (p50/p99,
//! median of `PEERS_REPEATS` runs), 16-thread throughput, one-thread
//! latency with one instance of five frozen by SIGSTOP (each run happens in
//! a thread the main thread gives up on after 5 s without progress:
//! reported as "hangs"), and 4 workers contending for one resource with a
//! 1 ms critical section. Every crate uses its default retry settings and a
//! 30 s TTL.
//!
//! Knobs: `PEERS_REPEATS` (3), `PEERS_OPS` (1000), `PEERS_SECS` (2),
//! `PEERS_CONTENTION_SECS` (3), `PEERS_STOPPED_OPS` (500, or 10 s).

use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use redfence::testing::RedisCluster;
use redfence::{LockOptions, Redlock};

#[path = "../../common/bench_support.rs"]
mod bench_support;

use bench_support::{
    contention, env_or, fmt_cpu, fmt_dur, machine_summary, median_by, next_resource, ratio,
    ratio_f64, raw_baseline, redis_version, repeat, single_thread, throughput, with_server_cpu,
    Contention, Hold, Sample, CONTENTION_WORKERS, CRITICAL_SECTION,
};

const TTL: Duration = Duration::from_secs(30);
/// How long a run may go without finishing an op before it counts as hung.
const HANG_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a one-instance-stopped run goes on (a slow peer does fewer ops).
const STOPPED_BUDGET: Duration = Duration::from_secs(10);

/// A lock client under test.
trait Locker: Send + Sync {
    fn name(&self) -> &'static str;
    /// One attempt (with the crate's own retries) and a release.
    fn lock_release(&self, resource: &str) -> Result<(), String>;
    /// Waits for the lock the crate's usual blocking way, holds it for
    /// `hold`, releases it; returns when each of that happened.
    fn contend(&self, resource: &str, hold: Duration) -> Result<Hold, String>;
}

struct Redfence(Redlock);

impl Locker for Redfence {
    fn name(&self) -> &'static str {
        "redfence"
    }

    fn lock_release(&self, resource: &str) -> Result<(), String> {
        let opts = LockOptions::new().auto_extend(false);
        let guard = self
            .0
            .lock_with(resource, opts)
            .map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())
    }

    fn contend(&self, resource: &str, hold: Duration) -> Result<Hold, String> {
        let called = Instant::now();
        let opts = LockOptions::new().auto_extend(false);
        let guard = self
            .0
            .lock_with(resource, opts)
            .map_err(|e| e.to_string())?;
        let acquired = Instant::now();
        thread::sleep(hold);
        guard.release().map_err(|e| e.to_string())?;
        Ok(Hold::released_now(called, acquired))
    }
}

struct RedlockRs(redlock::RedLock);

impl Locker for RedlockRs {
    fn name(&self) -> &'static str {
        "redlock 2.0"
    }

    fn lock_release(&self, resource: &str) -> Result<(), String> {
        match self.0.lock(resource.as_bytes(), TTL.as_millis() as usize) {
            Ok(Some(lock)) => {
                self.0.unlock(&lock);
                Ok(())
            }
            Ok(None) => Err("not acquired".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn contend(&self, resource: &str, hold: Duration) -> Result<Hold, String> {
        let called = Instant::now();
        let guard = self
            .0
            .acquire(resource.as_bytes(), TTL.as_millis() as usize)
            .map_err(|e| e.to_string())?;
        let acquired = Instant::now();
        thread::sleep(hold);
        drop(guard); // unlocks
        Ok(Hold::released_now(called, acquired))
    }
}

struct Rslock {
    manager: rslock::LockManager,
    runtime: tokio::runtime::Handle,
}

impl Locker for Rslock {
    fn name(&self) -> &'static str {
        "rslock 0.10"
    }

    fn lock_release(&self, resource: &str) -> Result<(), String> {
        self.runtime.block_on(async {
            let lock = self
                .manager
                .lock(resource, TTL)
                .await
                .map_err(|e| e.to_string())?;
            self.manager.unlock(&lock).await;
            Ok(())
        })
    }

    fn contend(&self, resource: &str, hold: Duration) -> Result<Hold, String> {
        self.runtime.block_on(async {
            let called = Instant::now();
            let guard = self
                .manager
                .acquire(resource, TTL)
                .await
                .map_err(|e| e.to_string())?;
            let acquired = Instant::now();
            thread::sleep(hold);
            guard.release().await;
            Ok(Hold::released_now(called, acquired))
        })
    }
}

/// rslock's native shape: `tasks` tokio tasks on the runtime.
fn rslock_tasks(
    runtime: &tokio::runtime::Runtime,
    manager: &rslock::LockManager,
    tasks: usize,
    duration: Duration,
) -> Sample {
    runtime.block_on(async {
        let start = Instant::now();
        let end = start + duration;
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                let manager = manager.clone();
                tokio::spawn(async move {
                    let (mut latencies, mut errors) = (Vec::new(), 0usize);
                    while Instant::now() < end {
                        let name = next_resource("task");
                        let t0 = Instant::now();
                        match manager.lock(name.as_str(), TTL).await {
                            Ok(lock) => {
                                manager.unlock(&lock).await;
                                latencies.push(t0.elapsed());
                            }
                            Err(_) => errors += 1,
                        }
                    }
                    (latencies, errors)
                })
            })
            .collect();
        let mut latencies = Vec::new();
        let mut errors = 0;
        for h in handles {
            let (l, e) = h.await.expect("rslock task panicked");
            latencies.extend(l);
            errors += e;
        }
        Sample::new(latencies, start.elapsed(), errors)
    })
}

/// Outcome of a run that may hang.
enum Guarded {
    Done(Sample, usize),
    Hangs { completed: usize },
}

/// Up to `ops` lock + release calls (fewer if `STOPPED_BUDGET` runs out) in
/// a thread of their own; gives up on it (leaving it blocked) if no op
/// finishes within `HANG_TIMEOUT`.
fn single_guarded(locker: Arc<dyn Locker>, ops: usize) -> Guarded {
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    thread::spawn(move || {
        for _ in 0..ops {
            let name = next_resource("stopped");
            let t0 = Instant::now();
            let result = locker.lock_release(&name).map(|()| t0.elapsed());
            if tx.send(result).is_err() {
                return;
            }
        }
    });
    let (mut latencies, mut errors) = (Vec::new(), 0);
    for completed in 0..ops {
        match rx.recv_timeout(HANG_TIMEOUT) {
            Ok(Ok(d)) => latencies.push(d),
            Ok(Err(_)) => errors += 1,
            Err(_) => return Guarded::Hangs { completed },
        }
        if start.elapsed() > STOPPED_BUDGET {
            break; // dropping `rx` stops the thread after its current op
        }
    }
    let done = latencies.len() + errors;
    Guarded::Done(Sample::new(latencies, start.elapsed(), errors), done)
}

fn main() {
    let repeats: usize = env_or("PEERS_REPEATS", 3usize).max(1);
    let ops: usize = env_or("PEERS_OPS", 1000usize).max(1);
    let secs = Duration::from_secs_f64(env_or("PEERS_SECS", 2.0f64));
    let contention_secs = Duration::from_secs_f64(env_or("PEERS_CONTENTION_SECS", 3.0f64));
    let stopped_ops: usize = env_or("PEERS_STOPPED_OPS", 500usize).max(1);

    println!("# redfence vs peers (same run)\n");
    println!("machine: {}; {}", machine_summary(), redis_version());
    println!(
        "settings: {repeats} repeats (median shown), {ops} single-thread ops, {secs:?} \
         throughput runs, {contention_secs:?} contention, {stopped_ops} ops with one instance \
         stopped (at most {STOPPED_BUDGET:?})\n"
    );

    let cluster = RedisCluster::start(5);
    let urls = cluster.urls();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let rslock_manager = rslock::LockManager::new(urls.clone());
    let lockers: Vec<Arc<dyn Locker>> = vec![
        Arc::new(Redfence(
            Redlock::builder(urls.clone())
                .build()
                .expect("redfence client"),
        )),
        Arc::new(RedlockRs(redlock::RedLock::new(urls.clone()))),
        Arc::new(Rslock {
            manager: rslock_manager.clone(),
            runtime: runtime.handle().clone(),
        }),
    ];

    let _ = raw_baseline(&cluster, 200);
    let raw_sample = repeat(repeats, || {
        with_server_cpu(&cluster, || raw_baseline(&cluster, ops))
    });

    let mut singles = Vec::new();
    let mut many = Vec::new();
    for locker in &lockers {
        let lock_release = |resource: &str| locker.lock_release(resource);
        let _ = single_thread(100, lock_release); // connect, warm up
        singles.push(repeat(repeats, || {
            with_server_cpu(&cluster, || single_thread(ops, lock_release))
        }));
        many.push(repeat(repeats, || {
            with_server_cpu(&cluster, || throughput(16, secs, lock_release))
        }));
    }
    let rslock_tasks_sample = repeat(repeats, || {
        with_server_cpu(&cluster, || {
            rslock_tasks(&runtime, &rslock_manager, 16, secs)
        })
    });

    println!("## Healthy: lock + release of distinct resources\n");
    println!(
        "| client | 1-thread p50 | 1-thread p99 | p50 vs raw | servers' CPU / op, 1 thread | \
         16-thread ops/s | 16-thread p50 | 16-thread p99 | servers' CPU / op, 16 threads | \
         redfence ops/s vs this | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| raw SET NX PX + DEL ×5 | {} | {} | 1.00× | {} | - | - | - | - | - | {} |",
        fmt_dur(raw_sample.p50),
        fmt_dur(raw_sample.p99),
        fmt_cpu(&raw_sample),
        raw_sample.errors
    );
    let redfence_16 = many[0].ops_per_sec;
    let mut rows: Vec<(String, Sample, Option<Sample>)> = lockers
        .iter()
        .zip(singles.iter().zip(&many))
        .map(|(l, (s, m))| (l.name().to_string(), *m, Some(*s)))
        .collect();
    rows.push((
        "rslock 0.10, 16 tokio tasks".into(),
        rslock_tasks_sample,
        None,
    ));
    for (name, m, s) in &rows {
        let (p50, p99, vs_raw, cpu_1, errors) = match s {
            Some(s) => (
                fmt_dur(s.p50),
                fmt_dur(s.p99),
                ratio(s.p50, raw_sample.p50),
                fmt_cpu(s),
                s.errors + m.errors,
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into(), m.errors),
        };
        println!(
            "| {name} | {p50} | {p99} | {vs_raw} | {cpu_1} | {:.0} | {} | {} | {} | {} | {errors} |",
            m.ops_per_sec,
            fmt_dur(m.p50),
            fmt_dur(m.p99),
            fmt_cpu(m),
            ratio_f64(redfence_16, m.ops_per_sec)
        );
    }

    // One instance of five frozen.
    cluster.server(4).stop();
    println!(
        "\n## Instance 5 of 5 SIGSTOPped: one thread, {stopped_ops} lock + release (no warm-up, \
         gives up after {HANG_TIMEOUT:?} without progress)\n"
    );
    println!("| client | ops done | p50 | p99 | p50 vs healthy | ops/s | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (locker, healthy) in lockers.iter().zip(&singles) {
        match single_guarded(Arc::clone(locker), stopped_ops) {
            Guarded::Done(s, done) => println!(
                "| {} | {done} | {} | {} | {} | {:.0} | {} |",
                locker.name(),
                fmt_dur(s.p50),
                fmt_dur(s.p99),
                ratio(s.p50, healthy.p50),
                s.ops_per_sec,
                s.errors
            ),
            Guarded::Hangs { completed } => println!(
                "| {} | {completed} | hangs | hangs | - | - | no op finished in {HANG_TIMEOUT:?} |",
                locker.name()
            ),
        }
    }
    cluster.server(4).cont();
    thread::sleep(Duration::from_millis(500));

    println!(
        "\n## Contention: {CONTENTION_WORKERS} workers, one resource, {} ms critical section, \
         {contention_secs:?} (median of {repeats})\n",
        CRITICAL_SECTION.as_millis()
    );
    println!("| client | acquisitions/s | lock p50 | lock p99 | min share | max share | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for locker in &lockers {
        let runs: Vec<Contention> = (0..repeats)
            .map(|_| {
                contention(contention_secs, |resource, hold| {
                    locker.contend(resource, hold)
                })
            })
            .collect();
        let lock = Sample::median(&runs.iter().map(|r| r.lock).collect::<Vec<_>>());
        println!(
            "| {} | {:.0} | {} | {} | {:.1} % | {:.1} % | {} |",
            locker.name(),
            median_by(&runs, |r| r.acquisitions_per_sec),
            fmt_dur(lock.p50),
            fmt_dur(lock.p99),
            median_by(&runs, |r| r.min_share) * 100.0,
            median_by(&runs, |r| r.max_share) * 100.0,
            lock.errors
        );
    }
    // Kill the servers (exit runs no destructors), then abandon any thread
    // still blocked by a hung peer.
    drop(cluster);
    std::process::exit(0);
}
