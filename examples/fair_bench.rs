//! # Fair locks against plain locks
//!
//! ```text
//! cargo run --release --features testing --example fair_bench
//! ```
//!
//! Starts `FAIR_INSTANCES` (default 3) servers of its own and prints:
//!
//! 1. **Uncontended** — one thread, lock + release of distinct resources,
//!    `FAIR_OPS` (default 2000) of each kind per repeat, plain and fair in
//!    alternating batches of 50, `FAIR_REPEATS` (default 5) repeats: the
//!    median of the
//!    lock calls' p50, and the servers' CPU per operation (`INFO cpu`,
//!    every server summed), fair ÷ plain.
//! 2. **Heartbeats** — `W` waiters (4 and 16) queued on one fair lock held
//!    for `FAIR_HOLD_SECS` (default 3 s): the scripts the servers ran per
//!    waiter per instance per second (`INFO commandstats`, `evalsha`).
//! 3. **Hand-over** — 8 waiters each take the fair lock 10 times and hold
//!    it 5 ms: each grant's wait after the previous holder's release (p50,
//!    max), and whether every grant came in ticket order of its round.
//! 4. **At 16 callers** — `FAIR_CALLERS` (default 16) threads, each with
//!    its own client, take one lock `FAIR_ROUNDS` (default 20) times each
//!    and hold it `FAIR_HOLD_MS` (default 2 ms), plain and fair in turn,
//!    `FAIR_REPEATS` repeats: the median of the lock calls' p50 (a call
//!    waits for the callers ahead of it), the servers' CPU per grant, and
//!    the grants per second, fair ÷ plain.

use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redfence::testing::RedisServers;
use redfence::{LockOptions, Redlock};

#[path = "common/bench_support.rs"]
#[allow(dead_code)] // the benches share it; this one needs env_or
mod bench_support;

use bench_support::env_or;

/// Every server's `INFO` section `section`, field `field`, summed.
fn info_sum(servers: &RedisServers, section: &str, field: &str, part: &str) -> f64 {
    servers
        .iter()
        .map(|server| {
            let mut conn = redis::Client::open(server.url())
                .and_then(|c| c.get_connection())
                .expect("connect");
            let info: String = redis::cmd("INFO")
                .arg(section)
                .query(&mut conn)
                .expect("INFO");
            info.lines()
                .filter_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
                .map(|value| {
                    // commandstats: calls=12,usec=...; cpu: a float.
                    let value = value.trim();
                    let value = if part.is_empty() {
                        value
                    } else {
                        value
                            .split(',')
                            .find_map(|kv| kv.strip_prefix(part)?.strip_prefix('='))
                            .unwrap_or("0")
                    };
                    value.parse::<f64>().unwrap_or(0.0)
                })
                .sum::<f64>()
        })
        .sum()
}

fn servers_cpu(servers: &RedisServers) -> f64 {
    info_sum(servers, "cpu", "used_cpu_user", "") + info_sum(servers, "cpu", "used_cpu_sys", "")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One lock + release of a fresh resource, plain or fair: how long the
/// lock call took, in µs.
fn cycle(locks: &Redlock, fair: bool, name: &str) -> f64 {
    let start = Instant::now();
    let guard = if fair {
        locks.fair_lock(name).try_lock()
    } else {
        locks.try_lock(name)
    }
    .expect("uncontended lock");
    let took = start.elapsed().as_secs_f64() * 1e6;
    guard.release().expect("release");
    took
}

/// `ops` cycles of each kind, in alternating batches of 50 so that the
/// machine's load falls on both alike: each kind's p50 in µs and the
/// servers' CPU per cycle in µs.
fn uncontended(
    locks: &Redlock,
    servers: &RedisServers,
    ops: usize,
    round: usize,
) -> [(f64, f64); 2] {
    let mut took = [Vec::with_capacity(ops), Vec::with_capacity(ops)];
    let mut cpu = [0.0, 0.0];
    for batch in 0..ops.div_ceil(50) {
        for (k, fair) in [false, true].into_iter().enumerate() {
            let before = servers_cpu(servers);
            for i in 0..50 {
                let name = format!(
                    "{}-{round}-{batch}-{i}",
                    if fair { "fair" } else { "plain" }
                );
                took[k].push(cycle(locks, fair, &name));
            }
            cpu[k] += servers_cpu(servers) - before;
        }
    }
    let per_op = |k: usize| cpu[k] * 1e6 / took[k].len() as f64;
    let p50 = |k: usize| median(took[k].clone());
    [(p50(0), per_op(0)), (p50(1), per_op(1))]
}

/// Scripts run per waiter per instance per second while `waiters` wait.
fn heartbeats(servers: &RedisServers, waiters: usize, hold: Duration) -> f64 {
    let urls = servers.urls();
    let holder = Redlock::new(urls.clone()).expect("client");
    let name = format!("beats-{waiters}");
    let guard = holder.fair_lock(&name).lock().expect("holder");
    let handles: Vec<_> = (0..waiters)
        .map(|i| {
            let (urls, name) = (urls.clone(), name.clone());
            thread::Builder::new()
                .name(format!("waiter-{i}"))
                .spawn(move || {
                    let locks = Redlock::new(urls).expect("client");
                    let options = LockOptions::new().wait(Duration::from_secs(60));
                    drop(locks.fair_lock(&name).lock_with(options).expect("waiter"));
                })
                .expect("thread")
        })
        .collect();
    // Let every waiter queue, then count.
    thread::sleep(Duration::from_secs(1));
    let calls = info_sum(servers, "commandstats", "cmdstat_evalsha", "calls");
    let start = Instant::now();
    thread::sleep(hold);
    let counted = info_sum(servers, "commandstats", "cmdstat_evalsha", "calls") - calls;
    let secs = start.elapsed().as_secs_f64();
    drop(guard);
    for h in handles {
        h.join().expect("waiter");
    }
    counted / (waiters as f64 * servers.len() as f64 * secs)
}

/// 8 waiters, 10 grants each, 5 ms holds: each grant's wait after the
/// release before it, in ms (p50, max).
fn hand_over(servers: &RedisServers) -> (f64, f64) {
    let urls = servers.urls();
    let released = Arc::new(Mutex::new(None::<Instant>));
    let waits = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (urls, released, waits) = (urls.clone(), Arc::clone(&released), Arc::clone(&waits));
            thread::Builder::new()
                .name(format!("hand-over-{i}"))
                .spawn(move || {
                    let locks = Redlock::new(urls).expect("client");
                    let fair = locks.fair_lock("hand-over");
                    for _ in 0..10 {
                        let guard =
                            fair.lock_with(LockOptions::new().wait(Duration::from_secs(60)));
                        let guard = guard.expect("grant");
                        if let Some(at) = *released.lock().unwrap() {
                            waits.lock().unwrap().push(at.elapsed().as_secs_f64() * 1e3);
                        }
                        thread::sleep(Duration::from_millis(5));
                        *released.lock().unwrap() = Some(Instant::now());
                        guard.release().expect("release");
                    }
                })
                .expect("thread")
        })
        .collect();
    for h in handles {
        h.join().expect("hand-over thread");
    }
    let waits = waits.lock().unwrap().clone();
    let max = waits.iter().copied().fold(0.0, f64::max);
    (median(waits), max)
}

/// What one contended phase measured.
struct Contended {
    /// The lock calls' p50, in ms.
    p50_ms: f64,
    /// The servers' CPU per grant, in µs.
    cpu_us: f64,
    grants_per_sec: f64,
}

/// `callers` threads, each with its own client, take the lock `name`
/// `rounds` times each (plain or fair, waiting up to a minute) and hold it
/// `hold`: every lock call's time, the servers' CPU and the wall time from
/// the common start to the last release.
fn contended(
    servers: &RedisServers,
    (callers, rounds, hold): (usize, usize, Duration),
    fair: bool,
    name: &str,
) -> Contended {
    let start = Arc::new(Barrier::new(callers + 1));
    let took = Arc::new(Mutex::new(Vec::with_capacity(callers * rounds)));
    let handles: Vec<_> = (0..callers)
        .map(|i| {
            let (urls, name) = (servers.urls(), name.to_string());
            let (start, took) = (Arc::clone(&start), Arc::clone(&took));
            thread::Builder::new()
                .name(format!("caller-{i}"))
                .spawn(move || {
                    let locks = Redlock::new(urls).expect("client");
                    let options = LockOptions::new().wait(Duration::from_secs(60));
                    let queue = locks.fair_lock(&name);
                    start.wait();
                    for _ in 0..rounds {
                        let asked = Instant::now();
                        let guard = if fair {
                            queue.lock_with(options)
                        } else {
                            locks.lock_with(&name, options)
                        }
                        .expect("contended lock");
                        let ms = asked.elapsed().as_secs_f64() * 1e3;
                        took.lock().unwrap().push(ms);
                        thread::sleep(hold);
                        guard.release().expect("release");
                    }
                })
                .expect("thread")
        })
        .collect();
    let cpu = servers_cpu(servers);
    start.wait();
    let began = Instant::now();
    for h in handles {
        h.join().expect("caller");
    }
    let secs = began.elapsed().as_secs_f64();
    let cpu = servers_cpu(servers) - cpu;
    let took = took.lock().unwrap().clone();
    let grants = took.len() as f64;
    Contended {
        p50_ms: median(took),
        cpu_us: cpu * 1e6 / grants,
        grants_per_sec: grants / secs,
    }
}

/// Plain and fair in turn, `repeats` times: each figure's median.
fn at_callers(servers: &RedisServers, shape: (usize, usize, Duration), repeats: usize) {
    let mut runs: [Vec<Contended>; 2] = [Vec::new(), Vec::new()];
    for round in 0..repeats {
        for (k, fair) in [false, true].into_iter().enumerate() {
            let kind = if fair { "fair" } else { "plain" };
            let name = format!("callers-{kind}-{round}");
            runs[k].push(contended(servers, shape, fair, &name));
        }
    }
    let med = |k: usize, f: fn(&Contended) -> f64| median(runs[k].iter().map(f).collect());
    let (callers, rounds, hold) = shape;
    println!(
        "{callers} callers, {rounds} grants each, hold {} ms, x {repeats}:",
        hold.as_millis()
    );
    type Figure = (&'static str, &'static str, fn(&Contended) -> f64);
    let figures: [Figure; 3] = [
        ("lock p50       ", "ms", |c| c.p50_ms),
        ("servers' CPU/op", "us", |c| c.cpu_us),
        ("grants/s       ", "  ", |c| c.grants_per_sec),
    ];
    for (what, unit, f) in figures {
        let (plain, fair) = (med(0, f), med(1, f));
        println!(
            "  {what} plain {plain:7.1} {unit}   fair {fair:7.1} {unit}   fair/plain {:.3}",
            fair / plain
        );
    }
}

fn main() {
    let instances = env_or("FAIR_INSTANCES", 3usize);
    let ops = env_or("FAIR_OPS", 2000usize);
    let repeats = env_or("FAIR_REPEATS", 5usize);
    let hold = Duration::from_secs(env_or("FAIR_HOLD_SECS", 3u64));
    let servers = RedisServers::start(instances);
    let locks = Redlock::new(servers.urls()).expect("client");
    uncontended(&locks, &servers, 100, 99);
    let (mut p50s, mut cpus) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    for round in 0..repeats {
        let [plain, fair] = uncontended(&locks, &servers, ops, round);
        p50s.0.push(plain.0);
        cpus.0.push(plain.1);
        p50s.1.push(fair.0);
        cpus.1.push(fair.1);
    }
    let (plain_p50, fair_p50) = (median(p50s.0), median(p50s.1));
    let (plain_cpu, fair_cpu) = (median(cpus.0), median(cpus.1));
    println!("uncontended, {instances} instances, {ops} ops x {repeats}:");
    println!(
        "  lock p50        plain {plain_p50:7.1} us   fair {fair_p50:7.1} us   fair/plain {:.3}",
        fair_p50 / plain_p50
    );
    println!(
        "  servers' CPU/op plain {plain_cpu:7.1} us   fair {fair_cpu:7.1} us   fair/plain {:.3}",
        fair_cpu / plain_cpu
    );
    for waiters in [4, 16] {
        let rate = heartbeats(&servers, waiters, hold);
        println!(
            "heartbeats: {waiters} waiters: {rate:.2} scripts per waiter per instance per second"
        );
    }
    let (p50, max) = hand_over(&servers);
    println!("hand-over, 8 waiters: wait after the release p50 {p50:.2} ms, max {max:.2} ms");
    let callers = env_or("FAIR_CALLERS", 16usize);
    let rounds = env_or("FAIR_ROUNDS", 20usize);
    let hold = Duration::from_millis(env_or("FAIR_HOLD_MS", 2u64));
    at_callers(&servers, (callers, rounds, hold), repeats);
}
