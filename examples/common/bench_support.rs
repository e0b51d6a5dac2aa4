//! Code shared by the two benchmark programs: `examples/bench.rs` (redfence
//! on its own, `cargo run --release --features testing --example bench`) and
//! `examples/peers/src/main.rs` (redfence against the other Rust Redlock
//! crates, a crate of its own in `examples/peers`).
//!
//! Both include this file as a module,
//! `#[path = "common/bench_support.rs"] mod bench_support;` from the first and
//! `#[path = "../../common/bench_support.rs"] mod bench_support;` from the
//! second, so that they measure and report the same way: latency samples
//! (p50, p99 and the quantiles a chart draws) and their median across
//! repeats, the CPU an op costs the client process and the servers, the raw
//! `SET NX PX` + `DEL` baseline, the one-thread, throughput and contention
//! loops (over any lock client, given as a closure), duration formatting and
//! the machine line.
//!
//! It lives in `examples/common/`, a folder without `main.rs`, so that cargo
//! does not take it for an example of its own. Each program prints its own
//! tables; this module prints nothing.

use std::process::Command;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use redfence::testing::{Fault, FaultProxy, RedisServers};

/// Threads of the contention scenario.
pub const CONTENTION_WORKERS: usize = 4;
/// What a contention worker does while holding the lock.
pub const CRITICAL_SECTION: Duration = Duration::from_millis(1);

/// Source of distinct resource names across the whole run.
static NEXT_RESOURCE: AtomicU64 = AtomicU64::new(0);

/// A resource name no other call of this run returns: `bench:{tag}:{n}`.
pub fn next_resource(tag: &str) -> String {
    format!(
        "bench:{tag}:{}",
        NEXT_RESOURCE.fetch_add(1, Ordering::Relaxed)
    )
}

/// The environment variable `name` parsed as a `T`, or `default` if it is
/// not set. Panics on a value that does not parse, rather than quietly
/// running with the default.
pub fn env_or<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value")),
        Err(_) => default,
    }
}

/// Quantile points kept per sample, for drawing a latency distribution.
pub const QUANTILES: usize = 41;

/// The level of quantile point `k` (of [`QUANTILES`]): evenly spaced in
/// `-log10(1 - q)`, from the minimum (`q = 0`) through 90 %, 99 % to 99.9 %,
/// so that a chart's x-axis gives the tail as much room as the body.
pub fn quantile_level(k: usize) -> f64 {
    1.0 - 10f64.powf(-3.0 * k as f64 / (QUANTILES - 1) as f64)
}

/// One repeat's figures.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub p50: Duration,
    pub p99: Duration,
    pub ops_per_sec: f64,
    pub errors: usize,
    /// Successful ops.
    pub ops: usize,
    /// The latency at each [`quantile_level`], for charts.
    pub quantiles: [Duration; QUANTILES],
    /// CPU time (user + system) this whole process spent per successful op,
    /// when measured ([`with_cpu`]).
    pub client_cpu: Option<Duration>,
    /// CPU time the instances' processes spent per successful op, when
    /// measured ([`with_cpu`]).
    pub server_cpu: Option<Duration>,
    /// What each successful op cost in the operating system's and the
    /// allocator's currency, when measured ([`with_cpu`]).
    pub counts: Option<Counts>,
}

/// Per successful op: context switches of this process (every thread) and
/// of the instances' processes, and this process's allocations.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// The client's threads going to sleep (each is followed by a
    /// wake-up): `ru_nvcsw` of `getrusage(RUSAGE_SELF)`.
    pub client_waits: f64,
    /// The client's threads preempted (`ru_nivcsw`).
    pub client_preempted: f64,
    /// The instances' threads going to sleep and being preempted
    /// (`voluntary_ctxt_switches` + `nonvoluntary_ctxt_switches` of
    /// `/proc/<pid>/task/*/status`).
    pub server_switches: f64,
    /// Heap allocations of this process, when its global allocator is
    /// [`CountingAlloc`] (`None` otherwise).
    pub allocations: Option<f64>,
}

/// The system allocator, counting allocations: a program that installs it
/// (`#[global_allocator] static A: CountingAlloc = CountingAlloc;`) gets
/// an allocation count per op in [`with_cpu`]'s samples.
#[allow(dead_code)] // the peers comparison uses it
pub struct CountingAlloc;

/// Allocations made through [`CountingAlloc`] so far.
pub static ALLOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; the count
// is a relaxed atomic add, which neither allocates nor blocks.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

/// The counters [`Counts`] is made of, read at one moment.
#[derive(Debug, Clone, Copy)]
struct Counters {
    client_waits: u64,
    client_preempted: u64,
    server_switches: u64,
    allocations: u64,
}

impl Counters {
    fn read(cluster: &RedisServers) -> Counters {
        use nix::sys::resource::{getrusage, UsageWho};
        let usage = getrusage(UsageWho::RUSAGE_SELF).ok();
        Counters {
            client_waits: usage.map_or(0, |u| u.voluntary_context_switches().max(0) as u64),
            client_preempted: usage.map_or(0, |u| u.involuntary_context_switches().max(0) as u64),
            server_switches: cluster
                .iter()
                .filter_map(|s| s.pid())
                .map(process_switches)
                .sum(),
            allocations: ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// What happened since `before`, per op.
    fn per_op(&self, before: &Counters, ops: usize) -> Counts {
        let per = |after: u64, before: u64| after.saturating_sub(before) as f64 / ops as f64;
        Counts {
            client_waits: per(self.client_waits, before.client_waits),
            client_preempted: per(self.client_preempted, before.client_preempted),
            server_switches: per(self.server_switches, before.server_switches),
            allocations: (self.allocations > 0).then(|| per(self.allocations, before.allocations)),
        }
    }
}

/// Context switches so far of every thread of process `pid`, voluntary and
/// not (`/proc/<pid>/task/*/status`). Zero where `/proc` cannot be read.
pub fn process_switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .map(|task| {
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

impl Default for Sample {
    /// No ops (the standard library has no `Default` for arrays this long).
    fn default() -> Sample {
        Sample::new(Vec::new(), Duration::from_secs(1), 0)
    }
}

impl Sample {
    /// The figures of `latencies` (one per successful op, any order)
    /// measured over `elapsed`.
    pub fn new(mut latencies: Vec<Duration>, elapsed: Duration, errors: usize) -> Sample {
        latencies.sort_unstable();
        Sample {
            p50: percentile(&latencies, 0.50),
            p99: percentile(&latencies, 0.99),
            ops_per_sec: latencies.len() as f64 / elapsed.as_secs_f64(),
            errors,
            ops: latencies.len(),
            quantiles: std::array::from_fn(|k| percentile(&latencies, quantile_level(k))),
            client_cpu: None,
            server_cpu: None,
            counts: None,
        }
    }

    /// The median of each figure (each quantile point on its own) across
    /// repeats; errors are summed.
    pub fn median(samples: &[Sample]) -> Sample {
        let median_of =
            |values: Vec<Duration>| (!values.is_empty()).then(|| median_by(&values, |d| *d));
        Sample {
            p50: median_by(samples, |s| s.p50),
            p99: median_by(samples, |s| s.p99),
            ops_per_sec: median_by(samples, |s| s.ops_per_sec),
            errors: samples.iter().map(|s| s.errors).sum(),
            ops: median_by(samples, |s| s.ops),
            quantiles: std::array::from_fn(|k| median_by(samples, |s| s.quantiles[k])),
            client_cpu: median_of(samples.iter().filter_map(|s| s.client_cpu).collect()),
            server_cpu: median_of(samples.iter().filter_map(|s| s.server_cpu).collect()),
            counts: Counts::median(samples),
        }
    }
}

/// CPU time (user + system) used so far by this process: every thread,
/// including those that have exited (a throughput run's workers are gone
/// by the time it is read), but not child processes such as the
/// redis-servers. From `getrusage(RUSAGE_SELF)`, which counts in
/// microseconds where `/proc/self/stat` counts in 10 ms clock ticks (too
/// coarse for a short one-thread run). Zero if the call fails.
pub fn client_cpu_time() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else {
        return Duration::ZERO;
    };
    let micros = |tv: nix::sys::time::TimeVal| {
        tv.tv_sec().max(0) as u64 * 1_000_000 + tv.tv_usec().max(0) as u64
    };
    Duration::from_micros(micros(usage.user_time()) + micros(usage.system_time()))
}

/// CPU time used so far by every thread of every instance of `cluster`
/// (`/proc/<pid>/task/*/schedstat`, nanoseconds on the CPU; a
/// redis-server's threads live as long as it does). Zero where `/proc`
/// cannot be read.
pub fn server_cpu_time(cluster: &RedisServers) -> Duration {
    cluster
        .iter()
        .filter_map(|s| s.pid())
        .map(process_cpu_time)
        .sum()
}

/// CPU time used so far by every thread of process `pid`
/// (`/proc/<pid>/task/*/schedstat`, nanoseconds on the CPU). Zero where
/// `/proc` cannot be read.
pub fn process_cpu_time(pid: u32) -> Duration {
    let mut nanos: u64 = 0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            nanos += stat
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(nanos)
}

/// `run`'s sample, with the CPU time this process (the client, whoever it
/// is) and the instances spent during it, each divided by its successful
/// ops: what one op costs the client and the servers. The client's figure
/// counts every thread of the process, so it includes whatever else runs
/// in it at the time (idle clients cost nothing; in-process proxies do).
pub fn with_cpu(cluster: &RedisServers, run: impl FnOnce() -> Sample) -> Sample {
    let counters_before = Counters::read(cluster);
    let (client_before, servers_before) = (client_cpu_time(), server_cpu_time(cluster));
    let mut sample = run();
    let client = client_cpu_time().saturating_sub(client_before);
    let servers = server_cpu_time(cluster).saturating_sub(servers_before);
    let counters = Counters::read(cluster);
    if sample.ops > 0 {
        let per_op = |spent: Duration| (!spent.is_zero()).then(|| spent / sample.ops as u32);
        sample.client_cpu = per_op(client);
        sample.server_cpu = per_op(servers);
        sample.counts = Some(counters.per_op(&counters_before, sample.ops));
    }
    sample
}

impl Counts {
    /// The median of each count across the repeats that measured them.
    fn median(samples: &[Sample]) -> Option<Counts> {
        let counted: Vec<Counts> = samples.iter().filter_map(|s| s.counts).collect();
        if counted.is_empty() {
            return None;
        }
        let allocations: Vec<f64> = counted.iter().filter_map(|c| c.allocations).collect();
        Some(Counts {
            client_waits: median_by(&counted, |c| c.client_waits),
            client_preempted: median_by(&counted, |c| c.client_preempted),
            server_switches: median_by(&counted, |c| c.server_switches),
            allocations: (!allocations.is_empty()).then(|| median_by(&allocations, |a| *a)),
        })
    }
}

/// The client's context switches per op (sleeps + preemptions), or `-`.
#[allow(dead_code)] // the peers comparison uses it
pub fn fmt_client_switches(sample: &Sample) -> String {
    sample.counts.map_or_else(
        || "-".to_string(),
        |c| format!("{:.1} + {:.1}", c.client_waits, c.client_preempted),
    )
}

/// The servers' context switches per op, or `-`.
#[allow(dead_code)] // the peers comparison uses it
pub fn fmt_server_switches(sample: &Sample) -> String {
    sample
        .counts
        .map_or_else(|| "-".to_string(), |c| format!("{:.1}", c.server_switches))
}

/// The client's allocations per op, or `-` where not counted.
#[allow(dead_code)] // the peers comparison uses it
pub fn fmt_allocations(sample: &Sample) -> String {
    sample
        .counts
        .and_then(|c| c.allocations)
        .map_or_else(|| "-".to_string(), |a| format!("{a:.0}"))
}

/// The client's CPU per op, or `-` when not measured.
pub fn fmt_client_cpu(sample: &Sample) -> String {
    sample.client_cpu.map_or_else(|| "-".to_string(), fmt_dur)
}

/// The servers' CPU per op, or `-` when not measured.
pub fn fmt_server_cpu(sample: &Sample) -> String {
    sample.server_cpu.map_or_else(|| "-".to_string(), fmt_dur)
}

/// The value at quantile `q` of an ascending slice (nearest rank).
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// The median (upper median for an even count) of `key` over `items`.
pub fn median_by<T: Copy + PartialOrd, U>(items: &[U], key: impl Fn(&U) -> T) -> T {
    let mut values: Vec<T> = items.iter().map(key).collect();
    values.sort_by(|a, b| a.partial_cmp(b).expect("no NaN in measurements"));
    values[values.len() / 2]
}

/// `run` done `times` times (at least once); the median of its samples.
#[allow(dead_code)] // the peers comparison interleaves its repeats by hand
pub fn repeat(times: usize, mut run: impl FnMut() -> Sample) -> Sample {
    let samples: Vec<Sample> = (0..times.max(1)).map(|_| run()).collect();
    Sample::median(&samples)
}

/// `812 µs`, `12.3 ms` from 10 ms up, `1.23 s` from 1 s up, `8.4 µs`
/// below 100 µs (a CPU cost per op).
pub fn fmt_dur(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1_000_000.0 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else if us >= 100.0 {
        format!("{us:.0} µs")
    } else {
        format!("{us:.1} µs")
    }
}

/// `a / b` as `1.23×`, or `-` if `b` is zero.
pub fn ratio(a: Duration, b: Duration) -> String {
    ratio_f64(a.as_secs_f64(), b.as_secs_f64())
}

/// `a / b` as `1.23×`, or `-` if `b` is zero.
pub fn ratio_f64(a: f64, b: f64) -> String {
    if b == 0.0 {
        "-".to_string()
    } else {
        format!("{:.2}×", a / b)
    }
}

/// A lock value of the same length as a UUID, for the raw baselines.
pub fn uuid_like() -> String {
    "0f8a3c1e-5b7d-4e2a-9c6f-1d2b3a4c5d6e".to_string()
}

/// Writes each packed command in turn to every connection, then reads every
/// connection's reply to it (pipelined across instances, as a Redlock client
/// would). Returns how many replies were errors or not `accepted`.
pub fn send_to_all(
    conns: &mut [redis::Connection],
    commands: [&[u8]; 2],
    accepted: impl Fn(&redis::Value) -> bool,
) -> usize {
    let mut errors = 0;
    for packed in commands {
        for conn in conns.iter_mut() {
            conn.send_packed_command(packed).expect("raw send");
        }
        for conn in conns.iter_mut() {
            match conn.recv_response() {
                Ok(reply) if accepted(&reply) => {}
                Ok(_) | Err(_) => errors += 1,
            }
        }
    }
    errors
}

/// The network's limit: `SET key val NX PX 30000` then `DEL key` of
/// distinct keys on plain connections to every instance of `cluster`, from
/// one thread, pipelined across instances; the latency is that of the pair.
pub fn raw_baseline(cluster: &RedisServers, ops: usize) -> Sample {
    let conns: Vec<redis::Connection> = cluster.iter().map(|s| s.connection()).collect();
    raw_baseline_on(conns, ops)
}

/// [`raw_baseline`] over the given connections (to proxies, for instance).
pub fn raw_baseline_on(mut conns: Vec<redis::Connection>, ops: usize) -> Sample {
    let value = uuid_like();
    let mut latencies = Vec::with_capacity(ops);
    let mut errors = 0;
    let start = Instant::now();
    for _ in 0..ops {
        let key = next_resource("raw");
        let t0 = Instant::now();
        let set = redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .get_packed_command();
        let del = redis::cmd("DEL").arg(&key).get_packed_command();
        errors += send_to_all(&mut conns, [&set, &del], |reply| {
            matches!(reply, redis::Value::Okay | redis::Value::Int(1))
        });
        latencies.push(t0.elapsed());
    }
    Sample::new(latencies, start.elapsed(), errors)
}

/// `ops` calls of `lock_release` (lock + release of a distinct resource) on
/// this thread; the latency of each successful call.
pub fn single_thread<E>(ops: usize, mut lock_release: impl FnMut(&str) -> Result<(), E>) -> Sample {
    let mut latencies = Vec::with_capacity(ops);
    let mut errors = 0;
    let start = Instant::now();
    for _ in 0..ops {
        let name = next_resource("one");
        let t0 = Instant::now();
        match lock_release(&name) {
            Ok(()) => latencies.push(t0.elapsed()),
            Err(_) => errors += 1,
        }
    }
    Sample::new(latencies, start.elapsed(), errors)
}

/// `threads` threads calling `lock_release` on distinct resources for
/// `duration`; ops/s over all of them, and the per-call latency.
pub fn throughput<E>(
    threads: usize,
    duration: Duration,
    lock_release: impl Fn(&str) -> Result<(), E> + Sync,
) -> Sample {
    let barrier = Barrier::new(threads + 1);
    let (results, elapsed) = thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (barrier, lock_release) = (&barrier, &lock_release);
                scope.spawn(move || {
                    let mut latencies = Vec::new();
                    let mut errors = 0;
                    barrier.wait();
                    let end = Instant::now() + duration;
                    while Instant::now() < end {
                        let name = next_resource("tp");
                        let t0 = Instant::now();
                        match lock_release(&name) {
                            Ok(()) => latencies.push(t0.elapsed()),
                            Err(_) => errors += 1,
                        }
                    }
                    (latencies, errors)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<(Vec<Duration>, usize)> = handles
            .into_iter()
            .map(|h| h.join().expect("throughput worker panicked"))
            .collect();
        (results, start.elapsed())
    });
    let errors = results.iter().map(|r| r.1).sum();
    let latencies = results.into_iter().flat_map(|r| r.0).collect();
    Sample::new(latencies, elapsed, errors)
}

/// One hold of the contended lock.
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    /// When the lock call was made.
    pub called: Instant,
    /// When it returned with the lock.
    pub acquired: Instant,
    /// When the release returned, after `CRITICAL_SECTION` of holding.
    pub released: Instant,
}

impl Hold {
    /// A hold whose release has just returned.
    pub fn released_now(called: Instant, acquired: Instant) -> Hold {
        Hold {
            called,
            acquired,
            released: Instant::now(),
        }
    }
}

/// The contention scenario's figures for one repeat.
#[derive(Debug, Clone, Copy, Default)]
pub struct Contention {
    pub acquisitions_per_sec: f64,
    /// Latency of the lock call.
    pub lock: Sample,
    /// From one holder's release returning to the next holder's lock call
    /// returning, zero if the next grant came first.
    #[allow(dead_code)] // reported by bench only
    pub handoff_p50: Duration,
    #[allow(dead_code)] // reported by bench only
    pub handoff_p99: Duration,
    /// Each worker's share of the acquisitions, smallest and largest.
    pub min_share: f64,
    pub max_share: f64,
}

/// `CONTENTION_WORKERS` threads contending for one resource for `duration`
/// with `hold_once`, which waits for the lock, holds it for
/// `CRITICAL_SECTION`, releases it and tells when each of that happened.
pub fn contention<E>(
    duration: Duration,
    hold_once: impl Fn(&str, Duration) -> Result<Hold, E> + Sync,
) -> Contention {
    let resource = next_resource("contended");
    let barrier = Barrier::new(CONTENTION_WORKERS + 1);
    // Per worker: its holds and errors.
    type WorkerLog = (Vec<Hold>, usize);
    let (logs, elapsed) = thread::scope(|scope| {
        let handles: Vec<_> = (0..CONTENTION_WORKERS)
            .map(|_| {
                let (barrier, resource, hold_once) = (&barrier, &resource, &hold_once);
                scope.spawn(move || -> WorkerLog {
                    let mut holds = Vec::new();
                    let mut errors = 0;
                    barrier.wait();
                    let end = Instant::now() + duration;
                    while Instant::now() < end {
                        match hold_once(resource, CRITICAL_SECTION) {
                            Ok(hold) => holds.push(hold),
                            Err(_) => errors += 1,
                        }
                    }
                    (holds, errors)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let logs: Vec<WorkerLog> = handles
            .into_iter()
            .map(|h| h.join().expect("contention worker panicked"))
            .collect();
        (logs, start.elapsed())
    });

    let counts: Vec<usize> = logs.iter().map(|l| l.0.len()).collect();
    let total: usize = counts.iter().sum();
    let share = |n: usize| n as f64 / total.max(1) as f64;
    let errors = logs.iter().map(|l| l.1).sum();
    let mut holds: Vec<Hold> = logs.into_iter().flat_map(|l| l.0).collect();
    let latencies: Vec<Duration> = holds.iter().map(|h| h.acquired - h.called).collect();
    holds.sort_unstable_by_key(|h| h.acquired);
    let mut handoffs: Vec<Duration> = holds
        .windows(2)
        .map(|w| w[1].acquired.saturating_duration_since(w[0].released))
        .collect();
    handoffs.sort_unstable();
    Contention {
        acquisitions_per_sec: total as f64 / elapsed.as_secs_f64(),
        lock: Sample::new(latencies, elapsed, errors),
        handoff_p50: percentile(&handoffs, 0.50),
        handoff_p99: percentile(&handoffs, 0.99),
        min_share: counts.iter().map(|&n| share(n)).fold(1.0, f64::min),
        max_share: counts.iter().map(|&n| share(n)).fold(0.0, f64::max),
    }
}

/// The trimmed standard output of `program args`, or `?` if it cannot run
/// or prints nothing.
pub fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "?".to_string())
}

/// `nproc N, kernel K`, for the head of a report.
pub fn machine_summary() -> String {
    format!(
        "nproc {}, kernel {}",
        command_output("nproc", &[]),
        command_output("uname", &["-r"])
    )
}

/// What `redis-server --version` says (of the server the harness runs:
/// `REDFENCE_TEST_SERVER`, if set).
pub fn redis_version() -> String {
    let program = redfence::testing::server_program();
    command_output(&program.to_string_lossy(), &["--version"])
}

/// Every instance of a cluster behind a proxy that holds each chunk a fixed
/// delay in each direction: a network round trip of at least twice that.
/// The proxies run in this process and stop when this is dropped.
pub struct DelayedNetwork {
    _proxies: Vec<FaultProxy>,
    /// The proxies' URLs, one per instance.
    pub urls: Vec<String>,
}

impl DelayedNetwork {
    pub fn start(cluster: &RedisServers, delay: Duration) -> DelayedNetwork {
        let proxies: Vec<FaultProxy> = cluster
            .iter()
            .map(|s| FaultProxy::start(s.addr()).expect("starting a delay proxy"))
            .collect();
        for p in &proxies {
            p.set_fault(Fault::Delay(delay));
        }
        let urls = proxies.iter().map(FaultProxy::url).collect();
        DelayedNetwork {
            _proxies: proxies,
            urls,
        }
    }

    /// Plain connections through the proxies, for the raw baseline.
    pub fn connect(&self) -> Vec<redis::Connection> {
        self.urls
            .iter()
            .map(|u| {
                redis::Client::open(u.as_str())
                    .and_then(|c| c.get_connection())
                    .expect("raw connection through the proxy")
            })
            .collect()
    }
}

/// What one thread waking another costs on this machine: `rounds` round
/// trips between two threads, each side sleeping until the other wakes it
/// (`std::thread::park` / `unpark`, a futex each way, as a parked worker
/// or caller is woken). Returns the median round trip and the CPU time of
/// the process per round trip, each round trip being two wake-ups.
#[allow(dead_code)] // the peers comparison reports it
pub fn wake_up_cost(rounds: usize) -> (Duration, Duration) {
    let turn = std::sync::Arc::new(AtomicU64::new(0));
    let main = std::thread::current();
    let other_turn = std::sync::Arc::clone(&turn);
    let partner = std::thread::spawn(move || {
        let mut seen = 0;
        let main = main;
        while seen < rounds as u64 {
            // Odd: the partner's turn; it answers by making the count even.
            while other_turn.load(Ordering::Acquire).is_multiple_of(2) {
                std::thread::park();
            }
            seen = other_turn.fetch_add(1, Ordering::AcqRel) / 2 + 1;
            main.unpark();
        }
    });
    let partner_handle = partner.thread().clone();
    let cpu_before = client_cpu_time();
    let mut trips = Vec::with_capacity(rounds);
    for k in 0..rounds as u64 {
        let t0 = Instant::now();
        turn.store(2 * k + 1, Ordering::Release);
        partner_handle.unpark();
        while turn.load(Ordering::Acquire) != 2 * k + 2 {
            std::thread::park();
        }
        trips.push(t0.elapsed());
    }
    let cpu = client_cpu_time().saturating_sub(cpu_before);
    let _ = partner.join();
    trips.sort_unstable();
    (trips[trips.len() / 2], cpu / rounds.max(1) as u32)
}
