//! Same-run comparison of redfence with the other Rust Redlock crates.
//!
//! ```text
//! cd examples/peers && cargo run --release
//! ```
//!
//! takes about two minutes with the defaults and writes `latency.svg` in
//! `examples/peers`. A smoke run (every table and the chart, figures meaningless) takes
//! under a minute:
//!
//! ```text
//! cd examples/peers && PEERS_REPEATS=1 PEERS_OPS=100 PEERS_SECS=0.5 \
//!   PEERS_CONTENTION_SECS=0.5 PEERS_STOPPED_OPS=50 PEERS_SVG=/tmp/latency.svg \
//!   cargo run --release
//! ```
//!
//! Starts its own five `redis-server` processes (redfence's
//! `testing::RedisServers`) and measures, in one run so that ratios compare
//! like with like:
//!
//! - **raw**: the network's limit, `SET NX PX` then `DEL` written to all five
//!   plain connections before reading the five replies (one thread; it
//!   waits for all five, where a client may go on with a quorum of three);
//! - **redfence** (this repository, sync);
//! - **rslock** (0.10, async on tokio; driven with `Handle::block_on` from
//!   plain threads, and also as tokio tasks, its own way, in every
//!   scenario: one task for the one-caller ones, 16 for the throughput);
//! - **redlock-rs** (2.0, sync; opens a new connection per command, which is
//!   its real cost and is kept).
//!
//! Every crate uses its default retry settings and a 30 s TTL.
//!
//! ## Scenarios
//!
//! 1. **Healthy, one thread**: lock + release of distinct resources,
//!    `PEERS_OPS` per run, p50/p99 (median of `PEERS_REPEATS` runs).
//! 2. **Healthy, 16 threads**: the same for `PEERS_SECS` from 16 threads
//!    (and rslock also as 16 tokio tasks): ops/s and latency.
//! 3. **Instance 5 of 5 frozen by SIGSTOP**: one thread, `PEERS_STOPPED_OPS`
//!    lock + release, no warm-up. Each client runs in a thread the main
//!    thread gives up on after 5 s without progress ("hangs"). The raw line
//!    here writes to the four live instances only: the floor for a client
//!    that needs no reply from the frozen one.
//! 4. **Contention**: 4 workers contend for one resource for
//!    `PEERS_CONTENTION_SECS`, each holding it 1 ms.
//! 5. **A network**: all five instances behind redfence's
//!    `testing::FaultProxy` with `Fault::Delay(250 µs)` (each chunk held
//!    250 µs in each direction, a round trip of ≥ 0.5 ms), one thread,
//!    a tenth of `PEERS_OPS`: p50/p99 and their ratios to raw through the
//!    same proxies. Each client is built anew on the proxies' addresses.
//!    The proxy polls for new connections every 5 ms, so a client that
//!    connects per command (redlock-rs) also pays up to 5 ms per connection
//!    that a real network would not add (a real connect costs one round
//!    trip); a second raw row has redlock-rs's shape (a new connection per
//!    command, instances in turn) to compare it with.
//!
//! Scenarios 1 and 2 give two CPU columns, each a run's CPU time divided by
//! its successful ops: **client CPU / op**, user + system time of this
//! whole process (`getrusage(RUSAGE_SELF)`, every thread including exited
//! ones, so tokio's and each client's background threads count, and the
//! other clients idle meanwhile), and **servers' CPU / op**, the time on
//! the CPU of the five `redis-server` processes
//! (`/proc/<pid>/task/*/schedstat`); and three counts per op: the client's
//! sleeps and preemptions (`ru_nvcsw`, `ru_nivcsw`), the servers' context
//! switches (`/proc/<pid>/task/*/status`) and the process's allocations
//! (a counting global allocator). The run opens with the cost of one
//! wake-up on the machine. A summary gives redfence's figures as
//! multiples of rslock's, from threads and as tasks, and the worse of the
//! two, against the targets.
//!
//! ## The chart
//!
//! After scenario 3 the run writes an SVG (to `PEERS_SVG`, default
//! `latency.svg` in the current directory; the repository keeps one as
//! `examples/peers/latency.svg`): the latency distribution of one-thread
//! lock + release, latency on a log axis against percentile (labelled min,
//! p50, p90, p99, p99.9; evenly spaced in `-log10(1 - q)`, so the tail gets
//! as much room as the body), one line per client and one for raw, in two
//! panels: healthy (scenario 1) and instance 5 stopped (scenario 3, raw to
//! the four live instances; a client that hung is listed in the legend as
//! such, with no line). Each line joins 41 quantile points; in the healthy
//! panel each point is the median across repeats. plotters draws it with
//! its SVG backend alone (text as SVG `<text>`, no font libraries); to look
//! at it as an image, `rsvg-convert latency.svg -o latency.png` (Debian's
//! `librsvg2-bin`).
//!
//! ## Knobs (environment variables)
//!
//! `PEERS_REPEATS` (3), `PEERS_OPS` (1000), `PEERS_SECS` (2),
//! `PEERS_CONTENTION_SECS` (3), `PEERS_STOPPED_OPS` (500, or 10 s),
//! `PEERS_SVG` (`latency.svg`).

use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use plotters::style::RGBColor;
use redfence::testing::RedisServers;

#[path = "../../common/bench_support.rs"]
mod bench_support;
mod chart;
mod clients;

use bench_support::{
    contention, env_or, fmt_allocations, fmt_client_cpu, fmt_client_switches, fmt_dur,
    fmt_server_cpu, fmt_server_switches, machine_summary, median_by, next_resource, ratio,
    ratio_f64, raw_baseline, raw_baseline_on, redis_version, single_thread, throughput, with_cpu,
    Contention, DelayedNetwork, Sample, CONTENTION_WORKERS, CRITICAL_SECTION,
};
use chart::{Line, Panel};
use clients::{lockers, rslock_task_single, rslock_tasks, Locker};

/// Every allocation of the process is counted, for the allocations per op.
#[global_allocator]
static ALLOCATOR: bench_support::CountingAlloc = bench_support::CountingAlloc;

/// How long a run may go without finishing an op before it counts as hung.
const HANG_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a one-instance-stopped run goes on (a slow peer does fewer ops).
const STOPPED_BUDGET: Duration = Duration::from_secs(10);
/// Per-direction delay of the simulated network (scenario 5).
const NETWORK_DELAY: Duration = Duration::from_micros(250);
/// Threads of the throughput scenario.
const THREADS: usize = 16;
/// The raw baseline's line in the chart.
const RAW_COLOR: RGBColor = RGBColor(0, 0, 0);

/// Run settings, from the environment.
struct Settings {
    repeats: usize,
    ops: usize,
    secs: Duration,
    contention_secs: Duration,
    stopped_ops: usize,
    svg: PathBuf,
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            repeats: env_or("PEERS_REPEATS", 3usize).max(1),
            ops: env_or("PEERS_OPS", 1000usize).max(1),
            secs: Duration::from_secs_f64(env_or("PEERS_SECS", 2.0f64)),
            contention_secs: Duration::from_secs_f64(env_or("PEERS_CONTENTION_SECS", 3.0f64)),
            stopped_ops: env_or("PEERS_STOPPED_OPS", 500usize).max(1),
            svg: PathBuf::from(env_or("PEERS_SVG", "latency.svg".to_string())),
        }
    }
}

/// One client's healthy figures.
struct Healthy {
    name: &'static str,
    color: RGBColor,
    single: Sample,
    many: Sample,
}

/// Outcome of a run that may hang.
enum Guarded {
    Done(Box<Sample>, usize),
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
    Guarded::Done(
        Box::new(Sample::new(latencies, start.elapsed(), errors)),
        done,
    )
}

/// rslock driven its own way, as tokio tasks: one task for the one-caller
/// figures, `THREADS` tasks for the throughput.
struct AsTasks {
    single: Sample,
    many: Sample,
}

/// Scenarios 1 and 2: the raw baseline and every client, healthy, and
/// rslock as tokio tasks. The repeats of the one-thread runs are
/// interleaved across clients (and so are the 16-thread runs), so that a
/// disturbance on a shared machine hits them all rather than skewing their
/// ratios.
fn healthy_runs(
    settings: &Settings,
    cluster: &RedisServers,
    lockers: &[Arc<dyn Locker>],
    rslock: (&tokio::runtime::Runtime, &rslock::LockManager),
) -> (Sample, Vec<Healthy>, AsTasks) {
    let (runtime, manager) = rslock;
    let as_task = || {
        rslock_task_single(runtime, manager, settings.ops, HANG_TIMEOUT, STOPPED_BUDGET)
            .unwrap_or_default()
    };
    let _ = raw_baseline(cluster, 200);
    for locker in lockers {
        let _ = single_thread(100, |resource: &str| locker.lock_release(resource));
        // connect
    }
    let mut raws = Vec::new();
    let (mut singles, mut many) = (
        vec![Vec::new(); lockers.len()],
        vec![Vec::new(); lockers.len()],
    );
    let (mut task_singles, mut task_many) = (Vec::new(), Vec::new());
    for _ in 0..settings.repeats {
        raws.push(with_cpu(cluster, || raw_baseline(cluster, settings.ops)));
        for (locker, samples) in lockers.iter().zip(&mut singles) {
            samples.push(with_cpu(cluster, || {
                single_thread(settings.ops, |resource: &str| locker.lock_release(resource))
            }));
        }
        task_singles.push(with_cpu(cluster, as_task));
    }
    for _ in 0..settings.repeats {
        for (locker, samples) in lockers.iter().zip(&mut many) {
            samples.push(with_cpu(cluster, || {
                throughput(THREADS, settings.secs, |resource: &str| {
                    locker.lock_release(resource)
                })
            }));
        }
        task_many.push(with_cpu(cluster, || {
            rslock_tasks(runtime, manager, THREADS, settings.secs)
        }));
    }
    let runs = lockers
        .iter()
        .zip(singles.iter().zip(&many))
        .map(|(locker, (single, many))| Healthy {
            name: locker.name(),
            color: locker.color(),
            single: Sample::median(single),
            many: Sample::median(many),
        })
        .collect();
    let tasks = AsTasks {
        single: Sample::median(&task_singles),
        many: Sample::median(&task_many),
    };
    (Sample::median(&raws), runs, tasks)
}

fn print_healthy(settings: &Settings, raw: &Sample, runs: &[Healthy], tasks: &AsTasks) {
    println!(
        "## Healthy, one thread: lock + release of distinct resources ({} ops, median of {})\n",
        settings.ops, settings.repeats
    );
    println!(
        "| client | p50 | p99 | p50 vs raw | p99 vs raw | client CPU / op | servers' CPU / op | \
         client sleeps + preemptions / op | servers' switches / op | allocations / op | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let row = |name: &str, s: &Sample| {
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            fmt_dur(s.p50),
            fmt_dur(s.p99),
            ratio(s.p50, raw.p50),
            ratio(s.p99, raw.p99),
            fmt_client_cpu(s),
            fmt_server_cpu(s),
            fmt_client_switches(s),
            fmt_server_switches(s),
            fmt_allocations(s),
            s.errors
        );
    };
    row("raw SET NX PX + DEL ×5", raw);
    for r in runs {
        row(r.name, &r.single);
    }
    row("rslock 0.10, one tokio task", &tasks.single);

    println!(
        "\n## Healthy, {THREADS} threads: lock + release of distinct resources ({:?} per run, \
         median of {})\n",
        settings.secs, settings.repeats
    );
    println!(
        "| client | ops/s | p50 | p99 | client CPU / op | servers' CPU / op | client sleeps + \
         preemptions / op | servers' switches / op | allocations / op | redfence ops/s vs this | \
         errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let redfence = runs.iter().find(|r| r.name == "redfence");
    let redfence_ops = redfence.map_or(0.0, |r| r.many.ops_per_sec);
    let many_rows = runs
        .iter()
        .map(|r| (r.name.to_string(), &r.many))
        .chain([(format!("rslock 0.10, {THREADS} tokio tasks"), &tasks.many)]);
    for (name, s) in many_rows {
        println!(
            "| {name} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s.ops_per_sec,
            fmt_dur(s.p50),
            fmt_dur(s.p99),
            fmt_client_cpu(s),
            fmt_server_cpu(s),
            fmt_client_switches(s),
            fmt_server_switches(s),
            fmt_allocations(s),
            ratio_f64(redfence_ops, s.ops_per_sec),
            s.errors
        );
    }
    let rslock = runs.iter().find(|r| r.name == "rslock 0.10");
    if let (Some(f), Some(r)) = (redfence, rslock) {
        print_summary(f, r, tasks, raw);
    }
}

/// redfence ÷ rslock for each target, against rslock from threads and as
/// tokio tasks, and the worse of the two (the issue's targets in brackets).
fn print_summary(f: &Healthy, threads: &Healthy, tasks: &AsTasks, raw: &Sample) {
    let both = |a: f64, b: f64, higher_is_better: bool| {
        let worse = if higher_is_better { a.min(b) } else { a.max(b) };
        format!("{a:.2}× / {b:.2}× (worse {worse:.2}×)")
    };
    let d = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-12);
    let cpu = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
        (Some(a), Some(b)) => d(a, b),
        _ => f64::NAN,
    };
    println!("\nredfence ÷ rslock, from threads / as tokio tasks (targets in brackets):");
    println!(
        "- 1-thread p50: {} [≤ 1.0]; ÷ raw fan-out {} [≤ 1.35]",
        both(
            d(f.single.p50, threads.single.p50),
            d(f.single.p50, tasks.single.p50),
            false
        ),
        ratio(f.single.p50, raw.p50)
    );
    println!(
        "- {THREADS} callers, ops/s: {} [≥ 1.15 / ≥ 1.0]",
        both(
            f.many.ops_per_sec / threads.many.ops_per_sec,
            f.many.ops_per_sec / tasks.many.ops_per_sec,
            true
        )
    );
    for (label, mine, theirs, theirs_tasks, target) in [
        (
            "client CPU / op, 1 thread",
            f.single.client_cpu,
            threads.single.client_cpu,
            tasks.single.client_cpu,
            "≤ 0.8",
        ),
        (
            "client CPU / op, 16",
            f.many.client_cpu,
            threads.many.client_cpu,
            tasks.many.client_cpu,
            "≤ 0.8",
        ),
        (
            "servers' CPU / op, 1 thread",
            f.single.server_cpu,
            threads.single.server_cpu,
            tasks.single.server_cpu,
            "≤ 1.8",
        ),
        (
            "servers' CPU / op, 16",
            f.many.server_cpu,
            threads.many.server_cpu,
            tasks.many.server_cpu,
            "≤ 1.8",
        ),
    ] {
        println!(
            "- {label}: {} [{target}]",
            both(cpu(mine, theirs), cpu(mine, theirs_tasks), false)
        );
    }
}

/// Scenario 3: instance 5 frozen with SIGSTOP for the whole scenario; prints
/// its table and returns the chart's lines.
fn stopped_runs(
    settings: &Settings,
    cluster: &RedisServers,
    lockers: &[Arc<dyn Locker>],
    healthy: &[Healthy],
    raw_healthy: &Sample,
    rslock: (&tokio::runtime::Runtime, &rslock::LockManager, &Sample),
) -> Vec<Line> {
    let live: Vec<redis::Connection> = cluster.iter().take(4).map(|s| s.connection()).collect();
    let ops = settings.stopped_ops;
    cluster.server(4).stop();
    println!(
        "\n## Instance 5 of 5 SIGSTOPped: one thread, {ops} lock + release (no warm-up, gives \
         up after {HANG_TIMEOUT:?} without progress)\n"
    );
    println!("| client | ops done | p50 | p99 | p50 vs healthy | ops/s | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let raw = raw_baseline_on(live, ops);
    println!(
        "| raw SET NX PX + DEL to the 4 live instances | {} | {} | {} | {} | {:.0} | {} |",
        raw.ops,
        fmt_dur(raw.p50),
        fmt_dur(raw.p99),
        ratio(raw.p50, raw_healthy.p50),
        raw.ops_per_sec,
        raw.errors
    );
    let mut lines = vec![Line {
        label: "raw, 4 live instances".into(),
        sample: Some(raw),
        color: RAW_COLOR,
    }];
    for (locker, healthy) in lockers.iter().zip(healthy) {
        let sample = match single_guarded(Arc::clone(locker), ops) {
            Guarded::Done(s, done) => {
                println!(
                    "| {} | {done} | {} | {} | {} | {:.0} | {} |",
                    locker.name(),
                    fmt_dur(s.p50),
                    fmt_dur(s.p99),
                    ratio(s.p50, healthy.single.p50),
                    s.ops_per_sec,
                    s.errors
                );
                Some(*s)
            }
            Guarded::Hangs { completed } => {
                println!(
                    "| {} | {completed} | hangs | hangs | - | - | no op finished in \
                     {HANG_TIMEOUT:?} |",
                    locker.name()
                );
                None
            }
        };
        lines.push(Line {
            label: locker.name().into(),
            sample,
            color: locker.color(),
        });
    }
    let (runtime, manager, healthy_task) = rslock;
    match rslock_task_single(runtime, manager, ops, HANG_TIMEOUT, STOPPED_BUDGET) {
        Ok(s) => println!(
            "| rslock 0.10, one tokio task | {} | {} | {} | {} | {:.0} | {} |",
            s.ops + s.errors,
            fmt_dur(s.p50),
            fmt_dur(s.p99),
            ratio(s.p50, healthy_task.p50),
            s.ops_per_sec,
            s.errors
        ),
        Err(completed) => println!(
            "| rslock 0.10, one tokio task | {completed} | hangs | hangs | - | - | no op finished \
             in {HANG_TIMEOUT:?} |"
        ),
    }
    cluster.server(4).cont();
    // Let the threads given up on finish the op they were in, so that they
    // do not compete with the next scenario's first measurements.
    thread::sleep(Duration::from_millis(500));
    lines
}

/// Scenario 4: `CONTENTION_WORKERS` workers, one resource, per client.
fn contention_table(settings: &Settings, lockers: &[Arc<dyn Locker>]) {
    println!(
        "\n## Contention: {CONTENTION_WORKERS} workers, one resource, {} ms critical section, \
         {:?} (median of {})\n",
        CRITICAL_SECTION.as_millis(),
        settings.contention_secs,
        settings.repeats
    );
    println!("| client | acquisitions/s | lock p50 | lock p99 | min share | max share | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for locker in lockers {
        let runs: Vec<Contention> = (0..settings.repeats)
            .map(|_| {
                contention(settings.contention_secs, |resource, hold| {
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
}

/// redlock-rs's shape with none of its work: for each instance in turn, a
/// new connection and `SET NX PX`, then for each in turn a new connection
/// and `DEL`; the latency is that of the pair. What connecting per command,
/// one instance after another, costs on this network.
fn raw_connect_per_command(urls: &[String], ops: usize) -> Sample {
    let clients: Vec<redis::Client> = urls
        .iter()
        .map(|u| redis::Client::open(u.as_str()).expect("a client for the proxy"))
        .collect();
    let value = bench_support::uuid_like();
    let mut latencies = Vec::with_capacity(ops);
    let mut errors = 0;
    let start = Instant::now();
    for _ in 0..ops {
        let key = next_resource("rawconn");
        let set = redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .arg("NX")
            .arg("PX")
            .arg(clients::TTL.as_millis() as u64)
            .clone();
        let del = redis::cmd("DEL").arg(&key).clone();
        let t0 = Instant::now();
        for cmd in [&set, &del] {
            for client in &clients {
                let reply: redis::RedisResult<redis::Value> =
                    client.get_connection().and_then(|mut c| cmd.query(&mut c));
                if reply.is_err() {
                    errors += 1;
                }
            }
        }
        latencies.push(t0.elapsed());
    }
    Sample::new(latencies, start.elapsed(), errors)
}

/// Scenario 5: every instance behind a proxy holding each chunk
/// `NETWORK_DELAY` each way; the raw baseline and each client (built anew
/// on the proxies' addresses), one thread, repeats interleaved.
fn network_table(settings: &Settings, cluster: &RedisServers, runtime: &tokio::runtime::Runtime) {
    let network = DelayedNetwork::start(cluster, NETWORK_DELAY);
    let urls = network.urls.clone();
    let connect = || network.connect();
    // A round trip costs a millisecond or more here: a tenth of the ops.
    let ops = (settings.ops / 10).max(1);
    let warm_up = (ops / 5).max(5);
    let (lockers, manager) = lockers(&urls, runtime);
    let as_task = |ops| {
        rslock_task_single(runtime, &manager, ops, HANG_TIMEOUT, STOPPED_BUDGET).unwrap_or_default()
    };
    let _ = as_task(warm_up);
    let _ = raw_baseline_on(connect(), warm_up);
    for locker in &lockers {
        let _ = single_thread(warm_up, |resource: &str| locker.lock_release(resource));
    }
    let _ = raw_connect_per_command(&urls, warm_up);
    let (mut raws, mut raws_connecting) = (Vec::new(), Vec::new());
    let mut samples = vec![Vec::new(); lockers.len()];
    let mut task_samples = Vec::new();
    for _ in 0..settings.repeats {
        task_samples.push(as_task(ops));
        raws.push(raw_baseline_on(connect(), ops));
        raws_connecting.push(raw_connect_per_command(&urls, ops));
        for (locker, samples) in lockers.iter().zip(&mut samples) {
            samples.push(single_thread(ops, |resource: &str| {
                locker.lock_release(resource)
            }));
        }
    }
    let raw = Sample::median(&raws);
    println!(
        "\n## A network: all 5 instances behind Delay({NETWORK_DELAY:?}) proxies, one thread, \
         {ops} lock + release (median of {})\n",
        settings.repeats
    );
    println!("| client | p50 | p99 | p50 vs raw | p99 vs raw | errors |");
    println!("|---|---:|---:|---:|---:|---:|");
    println!(
        "| raw SET NX PX + DEL ×5 | {} | {} | 1.00× | 1.00× | {} |",
        fmt_dur(raw.p50),
        fmt_dur(raw.p99),
        raw.errors
    );
    let rows = [(
        "raw, a new connection per command, instances in turn (redlock-rs's shape)",
        Sample::median(&raws_connecting),
    )]
    .into_iter()
    .chain(
        lockers
            .iter()
            .zip(&samples)
            .map(|(locker, samples)| (locker.name(), Sample::median(samples))),
    )
    .chain([("rslock 0.10, one tokio task", Sample::median(&task_samples))]);
    for (name, s) in rows {
        println!(
            "| {name} | {} | {} | {} | {} | {} |",
            fmt_dur(s.p50),
            fmt_dur(s.p99),
            ratio(s.p50, raw.p50),
            ratio(s.p99, raw.p99),
            s.errors
        );
    }
    println!(
        "\n(targets: redfence p50 ≤ 1.05× raw and below rslock's. The proxies look for new \
         connections every 5 ms, so a new connection costs up to 5 ms more here than a real \
         network's one round trip: compare redlock-rs with the raw row of its shape)"
    );
    drop(lockers); // before the proxies they connect through
}

fn main() {
    let settings = Settings::from_env();
    println!("# redfence vs peers (same run)\n");
    println!("machine: {}; {}", machine_summary(), redis_version());
    println!(
        "settings: {} repeats (median shown), {} single-thread ops, {:?} throughput runs, {:?} \
         contention, {} ops with one instance stopped (at most {STOPPED_BUDGET:?})\n",
        settings.repeats,
        settings.ops,
        settings.secs,
        settings.contention_secs,
        settings.stopped_ops
    );

    let (trip, trip_cpu) = bench_support::wake_up_cost(20_000);
    println!(
        "a wake-up on this machine (two threads waking each other, `park`/`unpark`): {} round \
         trip, {} of CPU per round trip (each round trip is two wake-ups)\n",
        fmt_dur(trip),
        fmt_dur(trip_cpu)
    );
    let cluster = RedisServers::start(5);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (lockers, rslock_manager) = lockers(&cluster.urls(), &runtime);

    let (raw, healthy, tasks) =
        healthy_runs(&settings, &cluster, &lockers, (&runtime, &rslock_manager));
    print_healthy(&settings, &raw, &healthy, &tasks);

    let stopped = stopped_runs(
        &settings,
        &cluster,
        &lockers,
        &healthy,
        &raw,
        (&runtime, &rslock_manager, &tasks.single),
    );
    let healthy_lines = std::iter::once(Line {
        label: "raw SET NX PX + DEL ×5".into(),
        sample: Some(raw),
        color: RAW_COLOR,
    })
    .chain(healthy.iter().map(|h| Line {
        label: h.name.into(),
        sample: Some(h.single),
        color: h.color,
    }))
    .collect();
    let panels = [
        Panel {
            title: "healthy".into(),
            lines: healthy_lines,
        },
        Panel {
            title: "instance 5 of 5 stopped (SIGSTOP)".into(),
            lines: stopped,
        },
    ];
    let caption = format!(
        "lock + release latency, one thread, 5 local redis-servers (healthy: {} ops × {} \
         repeats, median per point; stopped: up to {} ops)",
        settings.ops, settings.repeats, settings.stopped_ops
    );
    let chart_written = match chart::write_svg(&settings.svg, &caption, &panels) {
        Ok(()) => {
            println!("\nchart written to {}", settings.svg.display());
            true
        }
        Err(e) => {
            eprintln!("cannot write the chart to {}: {e}", settings.svg.display());
            false
        }
    };

    contention_table(&settings, &lockers);
    network_table(&settings, &cluster, &runtime);

    // Kill the servers (exit runs no destructors), then abandon any thread
    // still blocked by a hung peer.
    drop(cluster);
    std::process::exit(if chart_written { 0 } else { 1 });
}
