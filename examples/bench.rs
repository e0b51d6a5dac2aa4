//! # redfence benchmark
//!
//! One command, no setup beyond `redis-server` on `PATH`:
//!
//! ```text
//! cargo run --release --features testing --example bench
//! ```
//!
//! A smoke run (every table, figures meaningless) takes a few seconds once
//! built:
//!
//! ```text
//! BENCH_REPEATS=1 BENCH_OPS=100 BENCH_SECS=0.3 BENCH_CONTENTION_SECS=0.3 \
//!   BENCH_CYCLES=2000 BENCH_WARMUP=20 \
//!   cargo run --release --features testing --example bench
//! ```
//!
//! It starts its own five `redis-server` processes
//! ([`RedisServers::start(5)`](redfence::testing::RedisServers::start)),
//! runs every scenario `BENCH_REPEATS` times (default 3) and prints, as
//! markdown tables, the median across repeats of each figure (the repeats
//! of scenarios 1, 1b and 2 are interleaved, so that their ratios compare
//! like with like). A default run takes about three minutes.
//!
//! ## Scenarios
//!
//! 1. **Raw baseline** — the network's limit. One thread with plain
//!    `redis::Connection`s writes `SET key val NX PX 30000` to all five
//!    connections, then reads the five replies, then does the same with
//!    `DEL`. The latency is that of the SET + DEL pair, distinct keys. It
//!    waits for all five replies, where a Redlock client may go on with a
//!    quorum of three, so a client can come in under it.
//!    **1b. Raw redfence commands** — the same, but with what redfence
//!    sends per lock + release: its acquire script by `EVALSHA`, then its
//!    release script by `EVALSHA` followed by a native `PUBLISH`: what
//!    these commands cost the servers, without any of the client's threads.
//! 2. **redfence, one thread** — `lock_with(name, auto_extend(false))` then
//!    `release()` of distinct resources, the latency of the pair.
//! 3. **Throughput** — 1, 4 and 16 threads doing the same lock + release of
//!    distinct resources for `BENCH_SECS` seconds (default 2): ops/s, and
//!    the per-op latency.
//! 4. **Faults** — scenario 2 and the 16-thread throughput again with one
//!    instance of five broken: frozen with SIGSTOP (connects succeed,
//!    replies never come), behind a [`FaultProxy`] that black-holes all
//!    traffic, and behind one that delays every chunk by 20 ms (≥ 40 ms per
//!    round trip). Each fault scenario starts with a short unmeasured warm-up
//!    after the fault is set; its slowest call is shown as a note.
//! 5. **Contention** — 4 threads contend for one resource for
//!    `BENCH_CONTENTION_SECS` (default 3), each holding it for 1 ms:
//!    acquisitions/s, latency of the lock call, handoff time (from one
//!    holder's `release()` returning to the next holder's `lock()` returning,
//!    zero if the next grant came first) and fairness (each worker's share of
//!    the acquisitions, min and max; 25 % each is perfectly fair).
//! 6. **Memory** — `BENCH_CYCLES` (default 200 000) lock + release cycles on
//!    16 threads, after all other scenarios: the process's RSS (`VmRSS`) and thread count at start,
//!    midway and end, and the `redfence:lock:*` keys left on the instances
//!    afterwards (must be 0).
//! 7. **A network** — scenarios 1 and 2 again with every instance behind a
//!    [`FaultProxy`] holding each chunk 250 µs in each direction (a round
//!    trip of ≥ 0.5 ms, like a datacenter network rather than loopback),
//!    with a tenth of the ops. It shows how the gap to the raw baseline
//!    changes once the round trip, not the servers' CPU, dominates (target:
//!    p50 within 1.05× raw). The proxies run in this process, so their
//!    threads are in both rows' client CPU alike.
//!    `cd examples/peers && cargo run --release` runs the same network for
//!    rslock and redlock-rs, and draws the latency chart.
//!
//! The notes give the share of grants that needed a **raise round** (their
//! instances' answers disagreed). It is counted with `INFO commandstats`:
//! a lock + release sends `EVALSHA` (the acquire script) once, and
//! `EVALSHA` (the release script) with a `PUBLISH`, to every instance; a
//! raise round sends `EVALSHA` (the raise script) alone. So per instance
//! `EVALSHA − 2 × PUBLISH` is the raise rounds that reached it; the
//! busiest instance's count is the number of rounds. A failed attempt
//! would count too; the counted runs have none (errors 0).
//!
//! The latency table gives two CPU columns, each a run's CPU time divided
//! by its successful ops:
//!
//! - **client CPU / op**: user + system time of this whole process, every
//!   thread including those that exited before the run ended
//!   (`getrusage(RUSAGE_SELF)`, microseconds; `/proc/self/stat` has the
//!   same in 10 ms ticks). When the servers are on other machines, this is
//!   what bounds a client's throughput.
//! - **servers' CPU / op**: the time on the CPU of every thread of the five
//!   `redis-server` processes (`/proc/<pid>/task/*/schedstat`). On a
//!   machine where client and servers share the cores, it is what caps
//!   throughput, and it is the capacity of a shared lock service.
//!
//! ## Knobs (environment variables)
//!
//! `BENCH_REPEATS` (3), `BENCH_OPS` (single-thread ops per repeat, 3000),
//! `BENCH_SECS` (throughput seconds, 2), `BENCH_CONTENTION_SECS` (3),
//! `BENCH_CYCLES` (200000), `BENCH_WARMUP` (ops before each scenario, 300).

use std::thread;
use std::time::{Duration, Instant};

use redfence::testing::{Fault, FaultProxy, RedisServers};
use redfence::{Error, LockOptions, Redlock};

#[path = "common/bench_support.rs"]
mod bench_support;

use bench_support::{
    contention, env_or, fmt_client_cpu, fmt_dur, fmt_server_cpu, machine_summary, median_by,
    next_resource, ratio, raw_baseline, raw_baseline_on, redis_version, single_thread, throughput,
    uuid_like, with_cpu, Contention, DelayedNetwork, Hold, Sample, CONTENTION_WORKERS,
    CRITICAL_SECTION,
};

/// Threads used by the throughput scenarios.
const THREAD_COUNTS: [usize; 3] = [1, 4, 16];
/// Per-direction delay of the simulated network (scenario 7).
const NETWORK_DELAY: Duration = Duration::from_micros(250);
/// Threads of the memory scenario.
const MEMORY_THREADS: usize = 16;

/// Run settings, from the environment.
struct Settings {
    repeats: usize,
    ops: usize,
    secs: Duration,
    contention_secs: Duration,
    cycles: usize,
    warmup: usize,
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            repeats: env_or("BENCH_REPEATS", 3usize).max(1),
            ops: env_or("BENCH_OPS", 3000usize).max(1),
            secs: Duration::from_secs_f64(env_or("BENCH_SECS", 2.0f64)),
            contention_secs: Duration::from_secs_f64(env_or("BENCH_CONTENTION_SECS", 3.0f64)),
            cycles: env_or("BENCH_CYCLES", 200_000usize).max(2),
            warmup: env_or("BENCH_WARMUP", 300usize),
        }
    }
}

/// `run` done `settings.repeats` times; the median of its samples.
fn repeat(settings: &Settings, run: impl FnMut() -> Sample) -> Sample {
    bench_support::repeat(settings.repeats, run)
}

/// Options of every measured lock call: no watchdog, default 30 s TTL.
fn opts() -> LockOptions {
    LockOptions::new().auto_extend(false)
}

fn lock_release(locks: &Redlock, resource: &str) -> Result<(), Error> {
    locks.lock_with(resource, opts())?.release()
}

/// `1.23× / 1.45× of {what}`: `sample`'s p50 and p99 against `reference`'s.
fn p50_p99_vs(sample: &Sample, reference: &Sample, what: &str) -> String {
    format!(
        "{} / {} of {what}",
        ratio(sample.p50, reference.p50),
        ratio(sample.p99, reference.p99)
    )
}

/// Raise rounds run so far, as `INFO commandstats` counts them. A lock +
/// release of a fresh resource sends, to every instance, the acquire script
/// and the release script (always followed by a native `PUBLISH` in the
/// same request); a raise round sends its script alone. So on each
/// instance, EVALSHA − 2 × PUBLISH is the number of raise rounds that
/// reached it, and the busiest instance's count is the number of rounds.
/// Scenario 1b's raw requests send the same and cancel out; a failed
/// attempt would count, but the runs counted here have none (their errors
/// column is 0).
fn raise_rounds(cluster: &RedisServers) -> u64 {
    cluster
        .iter()
        .map(|s| {
            let stats = s.commandstats();
            let count = |name: &str| stats.get(name).copied().unwrap_or(0);
            count("evalsha").saturating_sub(2 * count("publish"))
        })
        .max()
        .unwrap_or(0)
}

/// The share of the grants in `samples` that needed a raise round, given
/// the count of rounds before they ran.
fn raise_share(cluster: &RedisServers, rounds_before: u64, samples: &[Sample]) -> f64 {
    let grants: usize = samples.iter().map(|s| s.ops).sum();
    raise_rounds(cluster).saturating_sub(rounds_before) as f64 / grants.max(1) as f64
}

/// Scenario 7: every instance behind a proxy that holds each chunk `delay`
/// in each direction, standing in for a network round trip of at least
/// twice that: the raw baseline and redfence, one thread, through the same
/// five proxies.
fn network_rows(settings: &Settings, cluster: &RedisServers, delay: Duration) -> Vec<Row> {
    let network = DelayedNetwork::start(cluster, delay);
    let urls = network.urls.clone();
    let connect = || network.connect();
    // A round trip costs a millisecond or more here: a tenth of the ops.
    let ops = (settings.ops / 10).max(1);
    let _ = raw_baseline_on(connect(), (settings.warmup / 10).max(1));
    let raw = repeat(settings, || {
        with_cpu(cluster, || raw_baseline_on(connect(), ops))
    });
    let locks = client(urls.clone());
    warm_up(&locks, (settings.warmup / 10).max(1));
    let single = repeat(settings, || with_cpu(cluster, || single_run(&locks, ops)));
    let label = format!("all 5 behind Delay({delay:?}) proxies");
    vec![
        Row {
            scenario: format!("{label}: raw SET NX PX + DEL ×5, 1 thread"),
            sample: raw,
            vs: "reference".into(),
            note: "a slower network; client CPU includes the 5 proxies".into(),
        },
        Row {
            scenario: format!("{label}: redfence, 1 thread"),
            sample: single,
            vs: p50_p99_vs(&single, &raw, "raw"),
            note: "target p50 ≤ 1.05× raw; client CPU includes the 5 proxies".into(),
        },
    ]
}

/// Scenario 1b: what redfence sends for one lock + release (the acquire
/// script by EVALSHA, then the release script by EVALSHA and its native
/// `PUBLISH`), written to five plain connections from one thread, pipelined
/// across instances.
/// The gap between this and scenario 2 is the client's own cost; the gap
/// between this and scenario 1 is what fencing and compare-and-delete cost.
fn raw_scripts_baseline(cluster: &RedisServers, ops: usize) -> Sample {
    let acquire = redis::Script::new(include_str!("../lua/acquire.lua"));
    let release = redis::Script::new(include_str!("../lua/release.lua"));
    let mut conns: Vec<redis::Connection> = cluster.iter().map(|s| s.connection()).collect();
    for conn in &mut conns {
        for script in [&acquire, &release] {
            let _: () = script
                .prepare_invoke()
                .load(conn)
                .map(drop)
                .expect("load a script");
        }
    }
    let value = uuid_like();
    let mut latencies = Vec::with_capacity(ops);
    let mut errors = 0;
    let start = Instant::now();
    for _ in 0..ops {
        let name = next_resource("rawlua");
        let (lock, fence, void) = (
            format!("raw:lock:{{{name}}}"),
            format!("raw:fence:{{{name}}}"),
            format!("raw:void:{{{name}}}:{value}"),
        );
        let t0 = Instant::now();
        let acq = redis::pipe()
            .cmd("EVALSHA")
            .arg(acquire.get_hash())
            .arg(3)
            .arg(&lock)
            .arg(&fence)
            .arg(&void)
            .arg(&value)
            .arg(30_000)
            .arg(60_000)
            .arg(0)
            .get_packed_pipeline();
        let rel = redis::pipe()
            .cmd("EVALSHA")
            .arg(release.get_hash())
            .arg(2)
            .arg(&lock)
            .arg(&void)
            .arg(&value)
            .arg(30_000)
            .cmd("PUBLISH")
            .arg("raw:released")
            .arg("1")
            .get_packed_pipeline();
        errors += send_pipelines_to_all(&mut conns, [(&acq, 1), (&rel, 2)]);
        latencies.push(t0.elapsed());
    }
    Sample::new(latencies, start.elapsed(), errors)
}

/// Writes each pipeline to every connection, then reads its replies from
/// every connection; counts error replies.
fn send_pipelines_to_all(conns: &mut [redis::Connection], pipelines: [(&[u8], usize); 2]) -> usize {
    let mut errors = 0;
    for (packed, replies) in pipelines {
        for conn in conns.iter_mut() {
            conn.send_packed_command(packed).expect("raw send");
        }
        for conn in conns.iter_mut() {
            for _ in 0..replies {
                match conn.recv_response() {
                    Ok(redis::Value::ServerError(_)) | Err(_) => errors += 1,
                    Ok(_) => {}
                }
            }
        }
    }
    errors
}

/// Unmeasured lock + release calls; returns the slowest.
fn warm_up(locks: &Redlock, ops: usize) -> Duration {
    let mut slowest = Duration::ZERO;
    for _ in 0..ops {
        let t0 = Instant::now();
        let _ = lock_release(locks, &next_resource("warm"));
        slowest = slowest.max(t0.elapsed());
    }
    slowest
}

/// Scenario 2: lock + release of distinct resources on one thread.
fn single_run(locks: &Redlock, ops: usize) -> Sample {
    single_thread(ops, |resource| lock_release(locks, resource))
}

/// Scenario 3: `threads` threads doing lock + release of distinct resources
/// for `duration`.
fn throughput_run(locks: &Redlock, threads: usize, duration: Duration) -> Sample {
    throughput(threads, duration, |resource| lock_release(locks, resource))
}

/// Scenario 5: `CONTENTION_WORKERS` threads, one resource, `CRITICAL_SECTION` held.
fn contention_run(locks: &Redlock, duration: Duration) -> Contention {
    contention(duration, |resource, hold| -> Result<Hold, Error> {
        let called = Instant::now();
        let guard = locks.lock_with(resource, opts())?;
        let acquired = Instant::now();
        thread::sleep(hold);
        guard.release()?;
        Ok(Hold::released_now(called, acquired))
    })
}

/// `VmRSS` and `Threads` of this process, from `/proc/self/status`.
fn process_status() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("Threads:"))
}

/// `n` lock + release cycles spread over `MEMORY_THREADS` threads; returns
/// the number of errors and the first one.
fn cycles(locks: &Redlock, n: usize) -> (usize, Option<Error>) {
    thread::scope(|scope| {
        let handles: Vec<_> = (0..MEMORY_THREADS)
            .map(|w| {
                let mine = n / MEMORY_THREADS + usize::from(w < n % MEMORY_THREADS);
                scope.spawn(move || {
                    let mut errors = (0, None);
                    for _ in 0..mine {
                        if let Err(e) = lock_release(locks, &next_resource("mem")) {
                            errors.0 += 1;
                            errors.1.get_or_insert(e);
                        }
                    }
                    errors
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("memory worker panicked"))
            .fold((0, None), |acc, e| (acc.0 + e.0, acc.1.or(e.1)))
    })
}

/// This process's threads, counted by name (digits dropped), for spotting
/// threads that outlive their client.
fn thread_names() -> String {
    let mut names = std::collections::BTreeMap::<String, usize>::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            let name: String = comm
                .trim()
                .chars()
                .filter(|c| !c.is_ascii_digit())
                .collect();
            *names.entry(name).or_default() += 1;
        }
    }
    names
        .iter()
        .map(|(name, n)| format!("{name}×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn count_keys(cluster: &RedisServers, pattern: &str) -> usize {
    cluster.iter().map(|s| s.keys(pattern).len()).sum()
}

fn client(urls: Vec<String>) -> Redlock {
    Redlock::builder(urls)
        .build()
        .expect("building the redfence client")
}

struct Row {
    scenario: String,
    sample: Sample,
    vs: String,
    note: String,
}

fn print_rows(rows: &[Row]) {
    println!(
        "| scenario | p50 | p99 | ops/s | client CPU / op | servers' CPU / op | errors | \
         p50 / p99 vs reference | note |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} |",
            r.scenario,
            fmt_dur(r.sample.p50),
            fmt_dur(r.sample.p99),
            r.sample.ops_per_sec,
            fmt_client_cpu(&r.sample),
            fmt_server_cpu(&r.sample),
            r.sample.errors,
            r.vs,
            r.note
        );
    }
}

fn print_machine(settings: &Settings) {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "?".to_string());
    println!("# redfence benchmark\n");
    println!("machine: {}, cpu {cpu}", machine_summary());
    println!("redis: {}", redis_version());
    println!(
        "settings: {} repeats (median shown), {} single-thread ops, {:?} per throughput run, \
         {:?} contention, {} memory cycles, {} warm-up ops\n",
        settings.repeats,
        settings.ops,
        settings.secs,
        settings.contention_secs,
        settings.cycles,
        settings.warmup
    );
}

/// Single-thread and 16-thread rows with one instance of five already broken
/// under `locks`.
fn fault_rows(
    settings: &Settings,
    cluster: &RedisServers,
    label: &str,
    locks: &Redlock,
    healthy: &Sample,
    healthy_16: &Sample,
) -> Vec<Row> {
    let slowest = warm_up(locks, settings.warmup);
    let one = repeat(settings, || {
        with_cpu(cluster, || single_run(locks, settings.ops))
    });
    let many = repeat(settings, || {
        with_cpu(cluster, || throughput_run(locks, 16, settings.secs))
    });
    vec![
        Row {
            scenario: format!("{label}, 1 thread"),
            sample: one,
            vs: p50_p99_vs(&one, healthy, "healthy"),
            note: format!("slowest warm-up call {}", fmt_dur(slowest)),
        },
        Row {
            scenario: format!("{label}, 16 threads"),
            sample: many,
            vs: format!(
                "{:.2}× healthy ops/s",
                many.ops_per_sec / healthy_16.ops_per_sec
            ),
            note: String::new(),
        },
    ]
}

fn proxy_rows(
    settings: &Settings,
    cluster: &RedisServers,
    fault: Fault,
    label: &str,
    healthy: &Sample,
    healthy_16: &Sample,
) -> Vec<Row> {
    let proxy = FaultProxy::start(cluster.server(4).addr()).expect("starting the fault proxy");
    let mut urls = cluster.urls();
    urls[4] = proxy.url();
    let locks = client(urls);
    // Connect through the proxy while it still passes traffic.
    warm_up(&locks, 50);
    proxy.set_fault(fault);
    let rows = fault_rows(settings, cluster, label, &locks, healthy, healthy_16);
    proxy.set_fault(Fault::Pass);
    drop(locks);
    drop(proxy);
    rows
}

fn main() {
    let settings = Settings::from_env();
    print_machine(&settings);
    let run_start = Instant::now();

    let cluster = RedisServers::start(5);
    let locks = client(cluster.urls());

    // 1 and 2: raw baseline, raw scripts and redfence, one thread. Their
    // repeats are interleaved, so that a disturbance on this shared machine
    // hits all three rather than skewing the ratios between them.
    let _ = raw_baseline(&cluster, settings.warmup.max(1));
    let _ = raw_scripts_baseline(&cluster, settings.warmup.max(1));
    warm_up(&locks, settings.warmup);
    let (mut raws, mut scripted, mut singles) = (Vec::new(), Vec::new(), Vec::new());
    // The raw requests' EVALSHA and PUBLISH cancel out in the count.
    let raises_before = raise_rounds(&cluster);
    for _ in 0..settings.repeats.max(1) {
        raws.push(with_cpu(&cluster, || raw_baseline(&cluster, settings.ops)));
        scripted.push(with_cpu(&cluster, || {
            raw_scripts_baseline(&cluster, settings.ops)
        }));
        singles.push(with_cpu(&cluster, || single_run(&locks, settings.ops)));
    }
    let single_raises = raise_share(&cluster, raises_before, &singles);
    let (raw, raw_scripts, single) = (
        Sample::median(&raws),
        Sample::median(&scripted),
        Sample::median(&singles),
    );
    let mut rows = vec![
        Row {
            scenario: "raw SET NX PX + DEL ×5 (plain redis), 1 thread".into(),
            sample: raw,
            vs: "reference".into(),
            note: "network's limit".into(),
        },
        Row {
            scenario: "raw acquire pipeline + EVALSHA release + PUBLISH ×5 (redfence's \
                       commands), 1 thread"
                .into(),
            sample: raw_scripts,
            vs: p50_p99_vs(&raw_scripts, &raw, "raw"),
            note: "the commands' cost on the servers".into(),
        },
        Row {
            scenario: "redfence lock + release, 1 thread".into(),
            sample: single,
            vs: p50_p99_vs(&single, &raw, "raw"),
            note: format!(
                "target p50 ≤ 1.3× raw; {} of raw scripts; raise round on {:.0} % of grants",
                ratio(single.p50, raw_scripts.p50),
                single_raises * 100.0
            ),
        },
    ];

    // 3: throughput.
    let mut by_threads = Vec::new();
    for threads in THREAD_COUNTS {
        let raises_before = raise_rounds(&cluster);
        let samples: Vec<Sample> = (0..settings.repeats.max(1))
            .map(|_| with_cpu(&cluster, || throughput_run(&locks, threads, settings.secs)))
            .collect();
        let raises = raise_share(&cluster, raises_before, &samples);
        let sample = Sample::median(&samples);
        by_threads.push(sample);
        rows.push(Row {
            scenario: format!("redfence throughput, {threads} thread(s)"),
            sample,
            vs: format!(
                "{:.2}× 1-thread ops/s",
                sample.ops_per_sec / by_threads[0].ops_per_sec
            ),
            note: format!("raise round on {:.0} % of grants", raises * 100.0),
        });
    }
    let healthy_16 = by_threads[THREAD_COUNTS.len() - 1];
    // Does auto-pipelining pay? The same 16 threads with batching off.
    let unbatched = Redlock::builder(cluster.urls())
        .max_pipeline(1)
        .build()
        .expect("client without pipelining");
    let sample = repeat(&settings, || {
        with_cpu(&cluster, || throughput_run(&unbatched, 16, settings.secs))
    });
    rows.push(Row {
        scenario: "redfence throughput, 16 threads, auto-pipelining off".into(),
        sample,
        vs: format!(
            "{:.2}× ops/s with pipelining",
            healthy_16.ops_per_sec / sample.ops_per_sec
        ),
        note: "max_pipeline(1)".into(),
    });
    drop(unbatched);

    // 4: one instance of five broken.
    cluster.server(4).stop();
    rows.extend(fault_rows(
        &settings,
        &cluster,
        "instance 5 SIGSTOPped",
        &locks,
        &single,
        &healthy_16,
    ));
    cluster.server(4).cont();
    let left_after_stop = {
        thread::sleep(Duration::from_millis(300));
        count_keys(&cluster, "redfence:lock:*")
    };
    rows.extend(proxy_rows(
        &settings,
        &cluster,
        Fault::BlackHole,
        "instance 5 behind BlackHole proxy",
        &single,
        &healthy_16,
    ));
    rows.extend(proxy_rows(
        &settings,
        &cluster,
        Fault::Delay(Duration::from_millis(20)),
        "instance 5 behind Delay(20 ms) proxy",
        &single,
        &healthy_16,
    ));
    // 7: a network between client and instances.
    rows.extend(network_rows(&settings, &cluster, NETWORK_DELAY));

    println!("## Latency and throughput (lock + release of distinct resources)\n");
    print_rows(&rows);
    println!(
        "\n`redfence:lock:*` keys left 300 ms after SIGCONT of instance 5: {left_after_stop} \
         (leases whose release never reached it; they expire with their 30 s TTL)\n"
    );

    // 5: contention.
    let runs: Vec<Contention> = (0..settings.repeats)
        .map(|_| contention_run(&locks, settings.contention_secs))
        .collect();
    let lock = Sample::median(&runs.iter().map(|r| r.lock).collect::<Vec<_>>());
    let handoff_p50 = median_by(&runs, |r| r.handoff_p50);
    let handoff_p99 = median_by(&runs, |r| r.handoff_p99);
    println!(
        "## Contention: {CONTENTION_WORKERS} workers, one resource, {} ms critical section\n",
        CRITICAL_SECTION.as_millis()
    );
    println!(
        "| acquisitions/s | lock call p50 | lock call p99 | handoff p50 | handoff p99 | \
         handoff p50 vs raw p50 | min share | max share | errors |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {:.0} | {} | {} | {} | {} | {} | {:.1} % | {:.1} % | {} |\n",
        median_by(&runs, |r| r.acquisitions_per_sec),
        fmt_dur(lock.p50),
        fmt_dur(lock.p99),
        fmt_dur(handoff_p50),
        fmt_dur(handoff_p99),
        ratio(handoff_p50, raw.p50),
        median_by(&runs, |r| r.min_share) * 100.0,
        median_by(&runs, |r| r.max_share) * 100.0,
        lock.errors
    );
    println!(
        "(ideal: ~{:.0} acquisitions/s if each handoff took the raw p50; targets: handoff p50 < \
         3× raw, p99 < 20 ms)\n",
        1.0 / (CRITICAL_SECTION + raw.p50).as_secs_f64()
    );

    // 6: memory. Start from empty instances so leftovers are this phase's.
    cluster.flushall_all();
    warm_up(&locks, settings.warmup);
    let (rss_start, threads_start) = process_status();
    let t0 = Instant::now();
    let half = settings.cycles / 2;
    let (first_errors, first_error) = cycles(&locks, half);
    let (rss_mid, threads_mid) = process_status();
    let (second_errors, second_error) = cycles(&locks, settings.cycles - half);
    let errors = first_errors + second_errors;
    let elapsed = t0.elapsed();
    let (rss_end, threads_end) = process_status();
    thread::sleep(Duration::from_millis(300));
    let leftover = count_keys(&cluster, "redfence:lock:*");
    let fences = count_keys(&cluster, "redfence:fence:*");
    println!(
        "## Memory: {} lock + release cycles on {MEMORY_THREADS} threads\n",
        settings.cycles
    );
    println!(
        "| RSS start | RSS mid | RSS end | threads start/mid/end | ops/s | errors | \
         `redfence:lock:*` left | `redfence:fence:*` kept |"
    );
    println!("|---:|---:|---:|---|---:|---:|---:|---:|");
    println!(
        "| {rss_start} kB | {rss_mid} kB | {rss_end} kB | {threads_start}/{threads_mid}/{threads_end} \
         | {:.0} | {errors} | {leftover} | {fences} |\n",
        settings.cycles as f64 / elapsed.as_secs_f64()
    );
    println!("threads at the end: {}\n", thread_names());
    if let Some(e) = first_error.or(second_error) {
        println!("first error: {e}\n");
    }
    println!(
        "(fencing counters are kept by design, one per resource per instance, until their idle \
         expiry)\n"
    );
    println!("total run time: {:.0} s", run_start.elapsed().as_secs_f64());
}
