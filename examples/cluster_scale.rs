//! # Does capacity grow with a cluster position's shards?
//!
//! Measures the lock + release cycles per second of one [`Redlock`] over
//! three [`Position::cluster`] positions, each a real Redis Cluster
//! ([`ShardedCluster`]) of S = 1, 2 and 3 shard masters (3, 6 and 9
//! `redis-server` processes), and what a cycle costs the servers' and the
//! client's CPU. A resource's keys share the hash tag `{R}`, so one shard
//! master per position answers for it: with distinct resources spread over
//! the slots, S shards should serve about S times the cycles of one. A row
//! for three standalone servers ([`RedisServers`]) under the same cap gives
//! what a cluster position costs over a plain one at S = 1.
//!
//! ```text
//! cargo run --release --features testing --example cluster_scale
//! ```
//!
//! It needs `redis-server` on `PATH`, root, and the cgroup v1 `cpu`
//! controller mounted at `/sys/fs/cgroup/cpu` (it stops with an error
//! otherwise, rather than measure uncapped servers). A default run takes
//! about two minutes; it prints a markdown table and writes the figures as
//! JSON, which `cd examples/peers && cargo run --release --bin
//! cluster_chart -- ../../target/cluster_scale.json ../../docs/cluster_scale.svg`
//! draws.
//!
//! ## Why the cap
//!
//! On a machine whose few cores the client and every server share, the
//! servers are not what limits throughput: the cores are, and adding shards
//! only adds processes competing for them (uncapped, on 2 cores, S = 3 ran
//! *fewer* cycles/s than S = 1). So every `redis-server` gets a cgroup of
//! its own with the same CPU quota, `cpu.cfs_quota_us` out of a
//! `cpu.cfs_period_us` of 20 ms: each server stands for one machine of a
//! fixed size, as the shards of a real deployment do, and cycles/s measure
//! the servers' capacity. The default, 8 % of a CPU, is small enough that
//! at S = 3 the nine servers (0.72 CPU at most) plus the client (about
//! 0.5 CPU) leave most of a core of 2 idle, and large enough that a run
//! counts thousands of cycles. The `% of cap` column checks it: the busiest
//! server at 100 % of its quota means the servers are the bottleneck, and
//! `client CPUs` (of the 2 cores) shows that the client is not. The cgroups
//! are removed at the end, also after a panic.
//!
//! A capped server runs its quota, then stalls for the rest of the period.
//! The period is 20 ms, not the kernel's usual 100 ms: a lock cycle waits
//! for the second-fastest of three positions, and with 100 ms periods (92 ms
//! stalls at 8 %) most cycles at S = 3 wait out some shard's stall, so the
//! run measures the throttling rather than the servers' capacity (S = 3
//! gave 1.6–2.1× S = 1 that way, against 2.3–3.1× with 20 ms). For the same
//! reason there are 64 client threads: at S = 3 each shard sees a third of
//! the requests, and 32 callers leave its pipelines short. The old
//! setting, for comparison: `CLUSTER_SCALE_PERIOD_US=100000
//! CLUSTER_SCALE_THREADS=32`.
//!
//! A stall can still outlast the client's default 50 ms instance timeout
//! (it did with 100 ms periods): lock calls then fail for want of a quorum,
//! and their clean-up adds work no uncapped server would see. So the
//! client's instance timeout is raised to 500 ms
//! (`CLUSTER_SCALE_TIMEOUT_MS`), for every setup alike.
//!
//! ## What is measured
//!
//! `CLUSTER_SCALE_THREADS` threads each lock and release distinct resources
//! `bench:{thread}:{n % CLUSTER_SCALE_RESOURCES}` in a loop
//! (`lock_with(name, auto_extend(false))`, then `release()`), for a
//! warm-up, then for `CLUSTER_SCALE_SECS` measured seconds. Each setup runs
//! `CLUSTER_SCALE_REPEATS` times, interleaved (standalone, S = 1, 2, 3,
//! then again), all servers started once up front, and the table gives the
//! median run of each (by cycles/s; its CPU figures are that run's):
//!
//! - **cycles/s**: completed lock + release cycles per second;
//! - **server CPU µs/cycle**: the CPU time of every thread of every server
//!   of the setup during the run (`/proc/<pid>/task/*/schedstat`,
//!   nanoseconds), divided by the cycles; **busiest** is the largest single
//!   server's share of it, per cycle;
//! - **% of cap**: the busiest server's CPU over the run as a share of its
//!   quota;
//! - **client CPU µs/cycle**: this process's user + system time
//!   (`getrusage(RUSAGE_SELF)`) per cycle, and **client CPUs** the same
//!   per second of the run.
//!
//! Per run, standard error also gets the share of periods in which
//! the busiest server was throttled, and the servers' commands per cycle
//! (`INFO commandstats`, which counts the commands the scripts call too):
//! the same for every setup, so a cluster position sends no extra work.
//!
//! ## Knobs (environment variables)
//!
//! `CLUSTER_SCALE_CAP_PCT` (CPU quota of each server, % of one CPU, 8),
//! `CLUSTER_SCALE_PERIOD_US` (`cpu.cfs_period_us`, 20000; the kernel
//! wants a quota of at least 1000 µs), `CLUSTER_SCALE_THREADS` (64),
//! `CLUSTER_SCALE_SECS` (5), `CLUSTER_SCALE_WARMUP_SECS` (1),
//! `CLUSTER_SCALE_REPEATS` (3), `CLUSTER_SCALE_RESOURCES` (per thread,
//! 1000), `CLUSTER_SCALE_TIMEOUT_MS` (the client's instance timeout, 500),
//! `CLUSTER_SCALE_JSON` (`target/cluster_scale.json`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

#[path = "common/bench_support.rs"]
#[allow(dead_code)]
mod bench_support;

use bench_support::{client_cpu_time, env_or, process_cpu_time};
use redfence::testing::{key_slot, RedisServer, RedisServers, ShardedCluster};
use redfence::{LockOptions, Position, Redlock};

/// Where the cgroup v1 `cpu` controller is mounted.
const CGROUP_CPU: &str = "/sys/fs/cgroup/cpu";
/// Prefix of the cgroups this example creates (one per server, named by its
/// pid).
const CGROUP_PREFIX: &str = "redfence-bench-";
/// Shard counts measured.
const SHARDS: [usize; 3] = [1, 2, 3];
/// Quorum positions.
const POSITIONS: usize = 3;

/// Run settings, from the environment.
#[derive(Debug, Clone)]
struct Settings {
    cap_pct: f64,
    period_us: u64,
    threads: usize,
    secs: Duration,
    warmup: Duration,
    repeats: usize,
    resources: usize,
    timeout: Duration,
    json: PathBuf,
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            cap_pct: env_or("CLUSTER_SCALE_CAP_PCT", 8.0f64),
            period_us: env_or("CLUSTER_SCALE_PERIOD_US", 20_000u64).max(1000),
            threads: env_or("CLUSTER_SCALE_THREADS", 64usize).max(1),
            secs: Duration::from_secs_f64(env_or("CLUSTER_SCALE_SECS", 5.0f64)),
            warmup: Duration::from_secs_f64(env_or("CLUSTER_SCALE_WARMUP_SECS", 1.0f64)),
            repeats: env_or("CLUSTER_SCALE_REPEATS", 3usize).max(1),
            resources: env_or("CLUSTER_SCALE_RESOURCES", 1000usize).max(1),
            timeout: Duration::from_millis(env_or("CLUSTER_SCALE_TIMEOUT_MS", 500u64)),
            json: PathBuf::from(env_or(
                "CLUSTER_SCALE_JSON",
                "target/cluster_scale.json".to_string(),
            )),
        }
    }

    fn quota_us(&self) -> u64 {
        (self.period_us as f64 * self.cap_pct / 100.0).round() as u64
    }
}

/// One server's cgroup in the `cpu` controller, with a CPU quota. Dropping
/// it moves whatever runs in it back to the root cgroup and removes it, so
/// no cgroup outlives the run, also when it panics.
struct CpuCap {
    dir: PathBuf,
    pid: u32,
}

impl CpuCap {
    /// Puts process `pid` (every thread of it) in a new cgroup of its own
    /// with `quota_us` of CPU time per `period_us`.
    fn new(pid: u32, period_us: u64, quota_us: u64) -> io::Result<CpuCap> {
        let dir = Path::new(CGROUP_CPU).join(format!("{CGROUP_PREFIX}{pid}"));
        fs::create_dir(&dir).map_err(|e| annotate(e, &dir))?;
        // From here on the guard removes the directory, whatever fails.
        let cap = CpuCap { dir, pid };
        cap.write("cpu.cfs_period_us", &period_us.to_string())?;
        cap.write("cpu.cfs_quota_us", &quota_us.to_string())?;
        cap.write("cgroup.procs", &pid.to_string())?;
        Ok(cap)
    }

    fn write(&self, file: &str, value: &str) -> io::Result<()> {
        let path = self.dir.join(file);
        fs::write(&path, value).map_err(|e| annotate(e, &path))
    }

    /// `(nr_periods, nr_throttled)` from the cgroup's `cpu.stat`.
    fn throttling(&self) -> (u64, u64) {
        let stat = fs::read_to_string(self.dir.join("cpu.stat")).unwrap_or_default();
        let field = |name: &str| {
            stat.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        (field("nr_periods "), field("nr_throttled "))
    }
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        let root = Path::new(CGROUP_CPU).join("cgroup.procs");
        let procs = fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.split_whitespace() {
            // Fails only for a process that already exited.
            let _ = fs::write(&root, pid);
        }
        // A process that is exiting may linger a moment.
        for _ in 0..50 {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
        eprintln!(
            "could not remove cgroup {} (server pid {}); remove it with `rmdir {}`",
            self.dir.display(),
            self.pid,
            self.dir.display()
        );
    }
}

fn annotate(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Whether cgroups with a CPU quota can be made here: creates and removes a
/// probe cgroup.
fn check_cgroups() -> io::Result<()> {
    let root = Path::new(CGROUP_CPU);
    if !root.join("cpu.cfs_quota_us").is_file() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no cgroup v1 `cpu` controller at {CGROUP_CPU} (no cpu.cfs_quota_us)"),
        ));
    }
    let probe = root.join(format!("{CGROUP_PREFIX}probe-{}", std::process::id()));
    fs::create_dir(&probe).map_err(|e| annotate(e, &probe))?;
    let quota = fs::write(probe.join("cpu.cfs_quota_us"), "10000");
    let removed = fs::remove_dir(&probe);
    quota.map_err(|e| annotate(e, &probe))?;
    removed.map_err(|e| annotate(e, &probe))
}

/// The servers of one setup, kept alive as long as it.
enum Servers {
    Clusters(Vec<ShardedCluster>),
    Standalone(RedisServers),
}

/// One measured setup: three positions, their servers capped, a client.
struct Setup {
    label: String,
    /// Shards per position; 0 for standalone servers.
    shards: usize,
    // Dropped in this order: the client, then the cgroups, then the servers.
    locks: Redlock,
    caps: Vec<CpuCap>,
    /// Every server process, in the order of `caps`.
    pids: Vec<u32>,
    servers: Servers,
}

impl Setup {
    fn clusters(shards: usize, settings: &Settings) -> io::Result<Setup> {
        let clusters: Vec<ShardedCluster> = thread::scope(|s| {
            let handles: Vec<_> = (0..POSITIONS)
                .map(|_| s.spawn(move || ShardedCluster::start(shards)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("cluster start-up panicked"))
                .collect()
        });
        let locks = Redlock::builder(
            clusters
                .iter()
                .map(|c| Position::cluster(c.seed_urls()))
                .collect::<Vec<_>>(),
        )
        .instance_timeout(settings.timeout)
        .build()
        .map_err(io::Error::other)?;
        let servers: Vec<&RedisServer> = clusters.iter().flat_map(|c| c.masters()).collect();
        let (caps, pids) = cap_all(&servers, settings)?;
        drop(servers);
        Ok(Setup {
            label: format!("S={shards}"),
            shards,
            locks,
            caps,
            pids,
            servers: Servers::Clusters(clusters),
        })
    }

    fn standalone(settings: &Settings) -> io::Result<Setup> {
        let servers = RedisServers::start(POSITIONS);
        let locks = Redlock::builder(servers.urls())
            .instance_timeout(settings.timeout)
            .build()
            .map_err(io::Error::other)?;
        let (caps, pids) = cap_all(&servers.iter().collect::<Vec<_>>(), settings)?;
        Ok(Setup {
            label: "standalone".to_string(),
            shards: 0,
            locks,
            caps,
            pids,
            servers: Servers::Standalone(servers),
        })
    }

    /// Every server, in the order of `caps` and `pids`.
    fn servers(&self) -> Vec<&RedisServer> {
        match &self.servers {
            Servers::Clusters(clusters) => clusters.iter().flat_map(|c| c.masters()).collect(),
            Servers::Standalone(servers) => servers.iter().collect(),
        }
    }

    /// Commands the servers have run so far (`INFO commandstats`, less the
    /// `INFO` calls that read it).
    fn commands(&self) -> u64 {
        self.servers()
            .iter()
            .map(|s| {
                s.commandstats()
                    .iter()
                    .filter(|(name, _)| name.as_str() != "info")
                    .map(|(_, calls)| calls)
                    .sum::<u64>()
            })
            .sum()
    }

    /// How many of the run's resources each shard master of the first
    /// position owns (the other positions split the slots alike).
    fn resources_per_shard(&self, settings: &Settings) -> Vec<usize> {
        let Servers::Clusters(clusters) = &self.servers else {
            return vec![settings.threads * settings.resources];
        };
        let cluster = &clusters[0];
        let owners = slot_owners(cluster);
        let mut counts = vec![0; cluster.len()];
        for t in 0..settings.threads {
            for n in 0..settings.resources {
                let slot = key_slot(format!("{{{}}}", resource(t, n)));
                if let Some(m) = owners[usize::from(slot)] {
                    counts[m] += 1;
                }
            }
        }
        counts
    }
}

/// The master index owning each slot, from `CLUSTER SLOTS` of master 0.
fn slot_owners(cluster: &ShardedCluster) -> Vec<Option<usize>> {
    use redis::Value;
    let ports: Vec<u16> = cluster.masters().iter().map(|m| m.port()).collect();
    let mut owners = vec![None; usize::from(redfence::testing::SLOT_COUNT)];
    let Ok(Value::Array(ranges)) = cluster.master(0).cmd(&["CLUSTER", "SLOTS"]) else {
        return owners;
    };
    let int = |v: &Value| match v {
        Value::Int(i) => Some(*i),
        _ => None,
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(start), Some(end), Some(Value::Array(node))) = (
            fields.first().and_then(int),
            fields.get(1).and_then(int),
            fields.get(2),
        ) else {
            continue;
        };
        let Some(port) = node.get(1).and_then(int) else {
            continue;
        };
        let master = ports.iter().position(|&p| i64::from(p) == port);
        for slot in start..=end {
            if let Some(owner) = owners.get_mut(slot as usize) {
                *owner = master;
            }
        }
    }
    owners
}

/// Puts every server in a capped cgroup of its own.
fn cap_all(servers: &[&RedisServer], settings: &Settings) -> io::Result<(Vec<CpuCap>, Vec<u32>)> {
    let mut caps = Vec::new();
    let mut pids = Vec::new();
    for server in servers {
        let pid = server
            .pid()
            .ok_or_else(|| io::Error::other(format!("server {} is not running", server.port())))?;
        caps.push(CpuCap::new(pid, settings.period_us, settings.quota_us())?);
        pids.push(pid);
    }
    Ok((caps, pids))
}

/// The resource of thread `t`'s `n`-th cycle.
fn resource(t: usize, n: usize) -> String {
    format!("bench:{t}:{n}")
}

/// Counters and CPU readings at one moment of a run.
struct Snapshot {
    at: Instant,
    cycles: u64,
    errors: u64,
    servers: Vec<Duration>,
    client: Duration,
    throttling: Vec<(u64, u64)>,
    commands: u64,
}

/// One measured run of a setup.
#[derive(Debug, Clone)]
struct Run {
    cycles_per_s: f64,
    errors: u64,
    /// Every server's CPU per cycle, µs, in the order of the setup's `pids`.
    server_us: Vec<f64>,
    client_us: f64,
    /// The busiest server's CPU over the run, % of its quota.
    busiest_of_cap: f64,
    /// The busiest server's periods that ended throttled, %.
    busiest_throttled: f64,
    /// The client's CPU over the run, in CPUs.
    client_cpus: f64,
    /// Commands the servers ran per cycle (all positions).
    commands_per_cycle: f64,
    /// The first failed cycle's error, if any (warm-up included).
    first_error: Option<String>,
}

impl Run {
    fn total_us(&self) -> f64 {
        self.server_us.iter().sum()
    }

    fn busiest_us(&self) -> f64 {
        self.server_us.iter().copied().fold(0.0, f64::max)
    }
}

fn snapshot(setup: &Setup, cycles: &[AtomicU64], errors: &[AtomicU64]) -> Snapshot {
    let sum = |counters: &[AtomicU64]| counters.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    Snapshot {
        at: Instant::now(),
        cycles: sum(cycles),
        errors: sum(errors),
        servers: setup
            .pids
            .iter()
            .map(|&pid| process_cpu_time(pid))
            .collect(),
        client: client_cpu_time(),
        throttling: setup.caps.iter().map(CpuCap::throttling).collect(),
        commands: setup.commands(),
    }
}

/// `settings.threads` threads locking and releasing for the warm-up, then
/// for the measured seconds.
fn run(setup: &Setup, settings: &Settings) -> Run {
    let stop = AtomicBool::new(false);
    let first_error: Mutex<Option<String>> = Mutex::new(None);
    let cycles: Vec<AtomicU64> = (0..settings.threads).map(|_| AtomicU64::new(0)).collect();
    let errors: Vec<AtomicU64> = (0..settings.threads).map(|_| AtomicU64::new(0)).collect();
    let (start, end) = thread::scope(|s| {
        for t in 0..settings.threads {
            let (stop, cycles, errors) = (&stop, &cycles[t], &errors[t]);
            let (locks, first_error) = (&setup.locks, &first_error);
            s.spawn(move || {
                let options = LockOptions::new().auto_extend(false);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let name = resource(t, n % settings.resources);
                    n += 1;
                    match locks
                        .lock_with(&name, options)
                        .and_then(|guard| guard.release())
                    {
                        Ok(()) => cycles.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            first_error
                                .lock()
                                .unwrap()
                                .get_or_insert_with(|| e.to_string());
                            errors.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            });
        }
        thread::sleep(settings.warmup);
        let start = snapshot(setup, &cycles, &errors);
        thread::sleep(settings.secs);
        let end = snapshot(setup, &cycles, &errors);
        stop.store(true, Ordering::Relaxed);
        (start, end)
    });
    let elapsed = end.at.duration_since(start.at).as_secs_f64();
    let done = end.cycles - start.cycles;
    let per_cycle = |spent: Duration| spent.as_secs_f64() * 1e6 / done.max(1) as f64;
    let server_cpu: Vec<Duration> = end
        .servers
        .iter()
        .zip(&start.servers)
        .map(|(e, s)| e.saturating_sub(*s))
        .collect();
    let busiest = server_cpu.iter().copied().max().unwrap_or_default();
    let busiest_index = server_cpu.iter().position(|&c| c == busiest).unwrap_or(0);
    let (periods, throttled) = {
        let (e, s) = (
            end.throttling[busiest_index],
            start.throttling[busiest_index],
        );
        (e.0.saturating_sub(s.0), e.1.saturating_sub(s.1))
    };
    let client = end.client.saturating_sub(start.client);
    Run {
        cycles_per_s: done as f64 / elapsed,
        errors: end.errors - start.errors,
        server_us: server_cpu.iter().map(|&c| per_cycle(c)).collect(),
        client_us: per_cycle(client),
        busiest_of_cap: busiest.as_secs_f64() / elapsed / (settings.cap_pct / 100.0) * 100.0,
        busiest_throttled: throttled as f64 * 100.0 / periods.max(1) as f64,
        client_cpus: client.as_secs_f64() / elapsed,
        commands_per_cycle: (end.commands - start.commands) as f64 / done.max(1) as f64,
        first_error: first_error.into_inner().unwrap(),
    }
}

/// The run with the median cycles/s (the upper one of an even count).
fn median(runs: &[Run]) -> Run {
    let mut sorted = runs.to_vec();
    sorted.sort_by(|a, b| a.cycles_per_s.total_cmp(&b.cycles_per_s));
    sorted[sorted.len() / 2].clone()
}

/// One line of the report: a setup's median run and its spread.
struct Row {
    label: String,
    shards: usize,
    median: Run,
    runs: Vec<Run>,
    resources_per_shard: Vec<usize>,
}

fn command_output(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".to_string())
}

fn main() {
    let settings = Settings::from_env();
    if let Err(e) = check_cgroups() {
        eprintln!(
            "cluster_scale needs to cap each redis-server's CPU with the cgroup v1 `cpu` \
             controller at {CGROUP_CPU} (as root), and cannot: {e}\n\
             Uncapped servers on a shared machine measure the machine's cores, not the \
             servers, so it does not run without the cap."
        );
        std::process::exit(2);
    }
    let machine = format!(
        "nproc {}, kernel {}, {}",
        command_output("nproc", &[]),
        command_output("uname", &["-r"]),
        command_output(
            &redfence::testing::server_program().to_string_lossy(),
            &["--version"]
        )
    );
    let settings_line = format!(
        "cap {:.1} % of a CPU per redis-server (cfs_quota_us {} / cfs_period_us {}), \
         {} client threads, {} resources per thread, warm-up {:.1} s, {:.1} s per run, \
         {} repeats (interleaved), median run shown",
        settings.cap_pct,
        settings.quota_us(),
        settings.period_us,
        settings.threads,
        settings.resources,
        settings.warmup.as_secs_f64(),
        settings.secs.as_secs_f64(),
        settings.repeats,
    );
    println!("# cluster_scale\n\n{machine}\n\n{settings_line}\n");

    let mut setups = Vec::new();
    match Setup::standalone(&settings) {
        Ok(setup) => setups.push(setup),
        Err(e) => panic!("standalone servers: {e}"),
    }
    for shards in SHARDS {
        match Setup::clusters(shards, &settings) {
            Ok(setup) => setups.push(setup),
            Err(e) => panic!("clusters of {shards} shards: {e}"),
        }
    }

    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); setups.len()];
    for repeat in 0..settings.repeats {
        for (i, setup) in setups.iter().enumerate() {
            let r = run(setup, &settings);
            eprintln!(
                "repeat {}/{} {:>10}: {:>8.0} cycles/s, errors {}, servers {:.1} µs/cycle \
                 (busiest {:.1}, {:.0} % of cap, throttled {:.0} % of periods), client {:.1} \
                 µs/cycle ({:.2} CPUs), {:.2} commands/cycle",
                repeat + 1,
                settings.repeats,
                setup.label,
                r.cycles_per_s,
                r.errors,
                r.total_us(),
                r.busiest_us(),
                r.busiest_of_cap,
                r.busiest_throttled,
                r.client_us,
                r.client_cpus,
                r.commands_per_cycle
            );
            if let Some(e) = &r.first_error {
                eprintln!("  first error: {e}");
            }
            runs[i].push(r);
        }
    }

    let rows: Vec<Row> = setups
        .iter()
        .zip(runs)
        .map(|(setup, runs)| Row {
            label: setup.label.clone(),
            shards: setup.shards,
            median: median(&runs),
            resources_per_shard: setup.resources_per_shard(&settings),
            runs,
        })
        .collect();
    drop(setups);

    print_table(&rows);
    if let Err(e) = write_json(&settings.json, &machine, &settings_line, &settings, &rows) {
        eprintln!("cannot write {}: {e}", settings.json.display());
        std::process::exit(1);
    }
    println!("\nfigures written to {}", settings.json.display());
}

fn print_table(rows: &[Row]) {
    let base = rows
        .iter()
        .find(|r| r.shards == 1)
        .map(|r| r.median.cycles_per_s)
        .unwrap_or(f64::NAN);
    println!(
        "| S | cycles/s (median) | × S=1 | server CPU µs/cycle, total | busiest shard µs/cycle \
         | busiest server, % of cap | client CPU µs/cycle | client CPUs | errors | runs (cycles/s) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let ordered = rows
        .iter()
        .filter(|r| r.shards > 0)
        .chain(rows.iter().filter(|r| r.shards == 0));
    for row in ordered {
        let m = &row.median;
        let name = if row.shards == 0 {
            "1, standalone (baseline)".to_string()
        } else {
            row.shards.to_string()
        };
        let spread: Vec<String> = row
            .runs
            .iter()
            .map(|r| format!("{:.0}", r.cycles_per_s))
            .collect();
        println!(
            "| {name} | {:.0} | {:.2} | {:.1} | {:.1} | {:.0} | {:.1} | {:.2} | {} | {} |",
            m.cycles_per_s,
            m.cycles_per_s / base,
            m.total_us(),
            m.busiest_us(),
            m.busiest_of_cap,
            m.client_us,
            m.client_cpus,
            row.runs.iter().map(|r| r.errors).sum::<u64>(),
            spread.join(", ")
        );
    }
    println!();
    if let (Some(cluster), Some(standalone)) = (
        rows.iter().find(|r| r.shards == 1),
        rows.iter().find(|r| r.shards == 0),
    ) {
        println!(
            "At S=1 a cluster position costs the servers {:.2}× the CPU per cycle of a \
             standalone one (total {:.1} vs {:.1} µs/cycle; goal ≤ 1.2×).",
            cluster.median.total_us() / standalone.median.total_us(),
            cluster.median.total_us(),
            standalone.median.total_us()
        );
    }
    if let Some(s3) = rows.iter().find(|r| r.shards == 3) {
        println!(
            "S=3 serves {:.2}× the cycles/s of S=1 (goal ≥ 2.5×).",
            s3.median.cycles_per_s / base
        );
    }
    for row in rows.iter().filter(|r| r.shards > 1) {
        println!(
            "Resources per shard at {} (of each position): {:?}.",
            row.label, row.resources_per_shard
        );
    }
}

fn write_json(
    path: &Path,
    machine: &str,
    settings_line: &str,
    settings: &Settings,
    rows: &[Row],
) -> io::Result<()> {
    use serde_json::json;
    let run_json = |r: &Run| {
        json!({
            "cycles_per_s": r.cycles_per_s,
            "errors": r.errors,
            "server_cpu_us_per_cycle_total": r.total_us(),
            "server_cpu_us_per_cycle_busiest": r.busiest_us(),
            "server_cpu_us_per_cycle_each": r.server_us,
            "busiest_server_pct_of_cap": r.busiest_of_cap,
            "busiest_server_throttled_pct": r.busiest_throttled,
            "client_cpu_us_per_cycle": r.client_us,
            "client_cpus": r.client_cpus,
            "commands_per_cycle": r.commands_per_cycle,
        })
    };
    let row_json = |row: &Row| {
        json!({
            "label": row.label,
            "shards": row.shards,
            "median": run_json(&row.median),
            "runs": row.runs.iter().map(run_json).collect::<Vec<_>>(),
            "resources_per_shard": row.resources_per_shard,
        })
    };
    let doc = json!({
        "machine": machine,
        "settings_line": settings_line,
        "settings": {
            "cap_pct": settings.cap_pct,
            "cfs_period_us": settings.period_us,
            "cfs_quota_us": settings.quota_us(),
            "threads": settings.threads,
            "secs": settings.secs.as_secs_f64(),
            "warmup_secs": settings.warmup.as_secs_f64(),
            "repeats": settings.repeats,
            "resources_per_thread": settings.resources,
        },
        "cluster": rows.iter().filter(|r| r.shards > 0).map(row_json).collect::<Vec<_>>(),
        "standalone": rows.iter().find(|r| r.shards == 0).map(row_json),
    });
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    fs::write(
        path,
        serde_json::to_string_pretty(&doc).map_err(io::Error::other)? + "\n",
    )
}
