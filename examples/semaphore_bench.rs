//! # Semaphores against locks
//!
//! ```text
//! cargo run --release --features testing --example semaphore_bench
//! REDFENCE_TEST_SERVER=/path/to/valkey-server cargo run --release ...
//! ```
//!
//! Starts `SEM_INSTANCES` (default 5) servers of its own and prints two
//! tables, each figure the median of `SEM_REPEATS` (default 3) runs:
//!
//! 1. **Hand-over** — `3 × permits` threads each take a permit (or the lock)
//!    `SEM_HOLDS` times (default 20) and hold it 30 ms, all on one client:
//!    the run time against the ideal (every permit always in use), the
//!    utilisation (the time permits were held ÷ permits × run time) and the
//!    longest and median wait of one acquisition. A release that wakes no
//!    waiter shows as a wait near the 250 ms fallback re-check.
//! 2. **Throughput** — 1 and 8 threads, for `SEM_SECS` (default 2) each:
//!    lock + release of distinct resources, and permit + release on one
//!    semaphore with twice as many permits as threads (a permit is always
//!    free), ops/s and the ratio permit ÷ lock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use redfence::testing::RedisServers;
use redfence::{Error, LockOptions, Redlock};

const HOLD: Duration = Duration::from_millis(30);
const THREAD_COUNTS: [usize; 2] = [1, 8];

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value")),
        Err(_) => default,
    }
}

/// What the hand-over threads contend for.
#[derive(Clone, Copy)]
enum Kind {
    Lock,
    Permits(u32),
}

impl Kind {
    fn permits(self) -> u32 {
        match self {
            Kind::Lock => 1,
            Kind::Permits(n) => n,
        }
    }

    fn label(self) -> String {
        match self {
            Kind::Lock => "lock".to_string(),
            Kind::Permits(n) => format!("semaphore, {n} permit{}", if n == 1 { "" } else { "s" }),
        }
    }

    /// Takes it, holds it, gives it back; how long the taking took.
    fn cycle(self, locks: &Redlock, name: &str) -> Result<Duration, Error> {
        let opts = LockOptions::new()
            .auto_extend(false)
            .wait(Duration::from_secs(30));
        let start = Instant::now();
        match self {
            Kind::Lock => {
                let guard = locks.lock_with(name, opts)?;
                let waited = start.elapsed();
                thread::sleep(HOLD);
                guard.release()?;
                Ok(waited)
            }
            Kind::Permits(n) => {
                let permit = locks.semaphore(name, n).acquire_with(opts)?;
                let waited = start.elapsed();
                thread::sleep(HOLD);
                permit.release()?;
                Ok(waited)
            }
        }
    }
}

struct HandOver {
    run: Duration,
    ideal: Duration,
    utilisation: f64,
    max_wait: Duration,
    p50_wait: Duration,
    /// Calls that failed (a loaded machine's timeouts): reported, not
    /// counted as held.
    errors: usize,
}

fn hand_over(locks: &Redlock, kind: Kind, holds: usize, round: usize) -> HandOver {
    let threads = 3 * kind.permits() as usize;
    let name = format!("handover-{}-{round}", kind.permits());
    let waits = Mutex::new(Vec::new());
    let errors = AtomicUsize::new(0);
    let start = Instant::now();
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..holds {
                    match kind.cycle(locks, &name) {
                        Ok(w) => waits.lock().expect("no panics").push(w),
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let run = start.elapsed();
    let mut waits = waits.into_inner().expect("no panics");
    waits.sort();
    let held = HOLD * waits.len() as u32;
    HandOver {
        run,
        ideal: HOLD * (threads * holds) as u32 / kind.permits(),
        utilisation: held.as_secs_f64() / (run.as_secs_f64() * f64::from(kind.permits())),
        max_wait: waits.last().copied().unwrap_or_default(),
        p50_wait: waits.get(waits.len() / 2).copied().unwrap_or_default(),
        errors: errors.into_inner(),
    }
}

fn median<T: Copy>(mut xs: Vec<T>, key: impl Fn(&T) -> f64) -> T {
    xs.sort_by(|a, b| key(a).total_cmp(&key(b)));
    xs[xs.len() / 2]
}

/// Ops/s of `op` on `threads` threads for `secs`.
fn throughput(threads: usize, secs: Duration, op: impl Fn(usize) + Sync) -> f64 {
    let ops = AtomicUsize::new(0);
    let start = Instant::now();
    thread::scope(|s| {
        for t in 0..threads {
            let (ops, op) = (&ops, &op);
            s.spawn(move || {
                while start.elapsed() < secs {
                    op(t);
                    ops.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    ops.into_inner() as f64 / start.elapsed().as_secs_f64()
}

fn lock_ops(locks: &Redlock, threads: usize, secs: Duration, round: usize) -> f64 {
    let opts = LockOptions::new().auto_extend(false);
    let next = AtomicUsize::new(0);
    throughput(threads, secs, |_| {
        let n = next.fetch_add(1, Ordering::Relaxed);
        let resource = format!("tp-lock-{round}-{n}");
        let guard = locks.lock_with(&resource, opts).expect("a free lock");
        guard.release().expect("released");
    })
}

fn permit_ops(locks: &Redlock, threads: usize, secs: Duration, round: usize) -> f64 {
    let opts = LockOptions::new().auto_extend(false);
    let sem = locks.semaphore(&format!("tp-sem-{threads}-{round}"), 2 * threads as u32);
    throughput(threads, secs, |_| {
        let permit = sem.acquire_with(opts).expect("a free permit");
        permit.release().expect("released");
    })
}

fn main() {
    let repeats = env_or("SEM_REPEATS", 3usize).max(1);
    let holds = env_or("SEM_HOLDS", 20usize).max(1);
    let secs = Duration::from_secs_f64(env_or("SEM_SECS", 2.0f64));
    let cluster = RedisServers::start(env_or("SEM_INSTANCES", 5usize));
    let locks = Redlock::builder(cluster.urls())
        .build()
        .expect("building the client");
    let server = std::env::var("REDFENCE_TEST_SERVER").unwrap_or("redis-server".into());
    println!("{} instances of {server}\n", cluster.len());

    println!("### Hand-over: 3 threads per permit, {holds} holds of {HOLD:?} each, one client (median of {repeats})\n");
    println!("| | run | ideal | utilisation | max wait | p50 wait | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for kind in [Kind::Lock, Kind::Permits(1), Kind::Permits(4)] {
        let runs = (0..repeats)
            .map(|r| hand_over(&locks, kind, holds, r))
            .collect::<Vec<_>>();
        let m = |f: fn(&HandOver) -> f64| median(runs.iter().map(f).collect(), |x| *x);
        println!(
            "| {} | {:.2} s | {:.2} s | {:.0} % | {:.0} ms | {:.0} ms | {} |",
            kind.label(),
            m(|h| h.run.as_secs_f64()),
            runs[0].ideal.as_secs_f64(),
            100.0 * m(|h| h.utilisation),
            1e3 * m(|h| h.max_wait.as_secs_f64()),
            1e3 * m(|h| h.p50_wait.as_secs_f64()),
            runs.iter().map(|h| h.errors).sum::<usize>(),
        );
    }

    println!("\n### Throughput, uncontended: ops/s (median of {repeats}, {secs:?} each)\n");
    println!("| threads | lock + release | permit + release | permit ÷ lock |");
    println!("|---:|---:|---:|---:|");
    for threads in THREAD_COUNTS {
        let mut lock = Vec::new();
        let mut permit = Vec::new();
        // Interleaved, so that both see the same machine.
        for r in 0..repeats {
            lock.push(lock_ops(&locks, threads, secs, r));
            permit.push(permit_ops(&locks, threads, secs, r));
        }
        let (lock, permit) = (median(lock, |x| *x), median(permit, |x| *x));
        println!(
            "| {threads} | {lock:.0} | {permit:.0} | {:.2}× |",
            permit / lock
        );
    }
}
