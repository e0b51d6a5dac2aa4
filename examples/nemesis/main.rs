//! The nemesis bench: many clients doing real work through every
//! capability (fenced read-modify-writes on single locks, on sets, on a
//! semaphore's slots and under a reader-writer lock, elections, once-only
//! jobs), a seeded schedule of real faults (servers
//! stopped, killed, restarted from snapshots, links cut, requests held and
//! delivered late, clocks moved, holders stalled), a recorded history, and
//! a checker that judges the history.
//!
//! ```sh
//! cargo run --release --features testing --example nemesis -- \
//!   --workload register --nemesis pause,kill,late,clock --duration 60 \
//!   --seed 7 --report target/nemesis
//! ```
//!
//! See `docs/testing.md` ("The nemesis bench") for the flags, what each
//! check proves and what it cannot, and how to read the report. Exit 0: no
//! violation; 1: a violation; 2: the run could not be set up.
//!
//! `--report DIR` writes the whole history to `DIR/history.jsonl`;
//! `nemesis --check DIR` judges it again (exit 2: missing or unreadable),
//! and `.ci/judge.py` judges it independently.

mod args;
mod checker;
mod checks;
mod cluster;
mod history;
mod nemesis;
mod ops;
mod order;
mod record;
mod report;
mod watcher;
mod workloads;

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use redfence::crossbeam_channel;
use redfence::sql;
use redfence::testing::{PostgresServer, RedisServer, ServerOptions};

use args::{Args, Workload};
use cluster::Cluster;
use history::History;
use nemesis::{Clocks, Nemesis, Schedule, Stalls};
use record::{Meta, Record, Stored};
use watcher::Watched;

/// The registers' lease, and how long a lock call waits.
pub const TTL: Duration = Duration::from_millis(1000);
pub const WAIT: Duration = Duration::from_secs(2);
/// The longest manual extension a holder asks for.
pub const EXTEND_MAX: Duration = Duration::from_secs(3);
pub const INSTANCE_TIMEOUT: Duration = Duration::from_millis(150);
pub const REGISTERS: [&str; 3] = ["reg-0", "reg-1", "reg-2"];
pub const ELECTION: &str = "leader";
pub const ELECTION_LEASE: Duration = Duration::from_millis(1000);
/// The once-only job: a window per run, clients that start anywhere in
/// its first second (clocks and cron daemons differ), a hold that covers
/// that, a short lease.
pub const RUN_JOB: &str = "nightly-job";
pub const RUN_WINDOW: Duration = Duration::from_secs(2);
pub const RUN_HOLD: Duration = Duration::from_millis(1500);
pub const RUN_TTL: Duration = Duration::from_millis(500);
pub const RUN_JITTER: Duration = Duration::from_millis(1000);
/// How long the once-only job's keys live from its acquire, as the library
/// sets them: the TTL, the hold, and the drift allowance over the hold (the
/// default 1 % and 2 ms). A lost release leaves them that long.
pub const RUN_KEY_LIFE: Duration =
    Duration::from_millis((RUN_TTL.as_millis() + RUN_HOLD.as_millis() * 101 / 100 + 2) as u64);
/// The semaphore of the `semaphore` workload and its count: fewer than
/// its callers (`THREADS` per client), so that they queue for permits.
pub const SEMAPHORE: &str = "pool";
pub const PERMITS: u32 = 2;
/// The reader-writer lock of the `rw` workload.
pub const RW_LOCK: &str = "doc";
/// Threads per `semaphore` or `rw` client, on the client's one `Redlock`.
pub const THREADS: usize = 2;
/// The longest any lock key lives past its last write: every TTL, manual
/// extension and hold above is at most this.
pub const MAX_KEY_LIFE: Duration = Duration::from_secs(3);

/// How the history names slot `slot` of the semaphore (as the library's
/// errors do).
pub fn slot_resource(slot: u32) -> String {
    format!("{SEMAPHORE}#{slot}")
}

fn main() -> ExitCode {
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("nemesis: {e}\n\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    if let Some(dir) = &args.check {
        return check_stored(dir);
    }
    match run(&args) {
        Ok(false) => ExitCode::SUCCESS,
        Ok(true) => ExitCode::from(1),
        Err(e) => {
            eprintln!("nemesis: could not set up the run: {e}");
            ExitCode::from(2)
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `Ok(true)` when the checker found a violation.
fn run(args: &Args) -> Result<bool, BoxError> {
    println!("seed {}", args.seed);
    let (cluster, nemeses) = start_cluster(args)?;
    let pg = PostgresServer::try_start()?;
    prepare_database(&pg.url())?;
    // The `fenced_get`/`fenced_set` store: a server of its own, no proxy,
    // no fault (the lock instances are what is under test).
    let store = RedisServer::try_start_with(ServerOptions {
        program: args.server.clone(),
        ..Default::default()
    })?;
    let workloads = assign(args);
    println!(
        "{} instances ({}), {} clients ({}), nemeses: {}, {} s{}",
        cluster.len(),
        cluster.version(),
        args.clients,
        names(workloads.iter().map(|w| w.name())),
        names(nemeses.iter().map(|n| n.name())),
        args.duration.as_secs(),
        if args.unfenced {
            ", UNFENCED control"
        } else {
            ""
        },
    );
    let epoch = Instant::now();
    let history = History::new(epoch);
    let until = epoch + args.duration;
    exercise(
        args,
        &cluster,
        (&pg.url(), &store.url()),
        &history,
        &nemeses,
        &workloads,
        until,
    );
    let mut stored = read_database(&pg.url())?;
    stored.kv = read_store(&store)?;
    let meta = Meta {
        seed: args.seed,
        instances: cluster.len(),
        clients: args.clients,
        permits: PERMITS,
        epoch_wall_micros: history.epoch_wall_micros,
        unfenced: args.unfenced,
    };
    // The verdict is the stored history's: `--check` reads the same
    // numbers back and must agree.
    let record = Record::from_history(meta, &history, stored);
    let verdict = checker::check(&record);
    let info = report::RunInfo {
        seed: args.seed,
        duration_s: epoch.elapsed().as_secs_f64(),
        server: &cluster.version(),
        workloads: workloads.iter().map(|w| w.name()).collect(),
        nemeses: nemeses.iter().map(|n| n.name()).collect(),
        unfenced: args.unfenced,
        instances: cluster.len(),
        clients: args.clients,
    };
    let results = report::results(&info, &history, &verdict);
    summarise(&results);
    if let Some(dir) = &args.report {
        report::write(
            dir,
            &results,
            &record,
            &history,
            &verdict,
            (args.clients, cluster.len()),
        )?;
        println!("report: {}", dir.display());
    }
    Ok(verdict.failed())
}

/// `--check DIR`: judges `DIR/history.jsonl` again. Exit 0: clean; 1: a
/// violation; 2: missing, unreadable or malformed.
fn check_stored(dir: &Path) -> ExitCode {
    let path = dir.join("history.jsonl");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("nemesis --check: cannot read {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let record = match Record::from_jsonl(&text) {
        Ok(record) => record,
        Err(e) => {
            eprintln!("nemesis --check: {} is malformed: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let verdict = checker::check(&record);
    println!(
        "{}: {} holds, {} faults",
        path.display(),
        record.holds.len(),
        record.faults.len()
    );
    summarise(&report::verdict_json(&verdict));
    if verdict.failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn names<'a>(it: impl Iterator<Item = &'a str>) -> String {
    let mut v: Vec<&str> = it.collect();
    v.sort_unstable();
    v.dedup();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(",")
    }
}

/// Starts the instances, under libfaketime when the clock nemesis is
/// asked for (an error if the server cannot run there) or, by default,
/// when the server can (the clock nemesis is left out otherwise).
fn start_cluster(args: &Args) -> Result<(Cluster, Vec<Nemesis>), BoxError> {
    let program = args.server.clone();
    match &args.nemeses {
        Some(list) => {
            let clock = list.contains(&Nemesis::Clock);
            let cluster = Cluster::start(args.instances, program, clock)
                .map_err(|e| clock_error(clock, e))?;
            Ok((cluster, list.clone()))
        }
        None => match Cluster::start(args.instances, program.clone(), true) {
            Ok(cluster) => Ok((cluster, Nemesis::ALL.to_vec())),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Unsupported | io::ErrorKind::NotFound
                ) =>
            {
                println!("clock: this server does not run under libfaketime; left out");
                let cluster = Cluster::start(args.instances, program, false)?;
                let list = Nemesis::ALL
                    .into_iter()
                    .filter(|n| *n != Nemesis::Clock)
                    .collect();
                Ok((cluster, list))
            }
            Err(e) => Err(e.into()),
        },
    }
}

fn clock_error(clock: bool, e: io::Error) -> BoxError {
    if clock
        && matches!(
            e.kind(),
            io::ErrorKind::Unsupported | io::ErrorKind::NotFound
        )
    {
        format!("--nemesis clock needs a server that runs under libfaketime (Valkey from .ci/setup) and the faketime package: {e}").into()
    } else {
        e.into()
    }
}

/// Which workload each client runs: round robin over those asked for.
fn assign(args: &Args) -> Vec<Workload> {
    (0..args.clients)
        .map(|i| args.workloads[i % args.workloads.len()])
        .collect()
}

fn prepare_database(url: &str) -> Result<(), BoxError> {
    let mut db = Client::connect(url, NoTls)?;
    db.batch_execute(sql::CREATE_FENCE_TABLE)?;
    db.batch_execute(workloads::SCHEMA)?;
    let slots = (0..PERMITS).map(slot_resource);
    let counters = REGISTERS.iter().map(|r| r.to_string()).chain(slots);
    for r in counters.chain([RW_LOCK.to_string()]) {
        db.execute(
            "INSERT INTO counters (resource, value) VALUES ($1, 0)",
            &[&r],
        )?;
    }
    db.execute(
        "INSERT INTO rw_fences (resource, seen, written) VALUES ($1, 0, 0)",
        &[&RW_LOCK],
    )?;
    Ok(())
}

/// Runs the clients, the nemesis and the key watcher until the end, and
/// returns once every fault is healed and every client stopped.
fn exercise(
    args: &Args,
    cluster: &Cluster,
    (pg_url, store_url): (&str, &str),
    history: &History,
    nemeses: &[Nemesis],
    workloads: &[Workload],
    until: Instant,
) {
    let stalls = std::sync::Arc::new(Stalls::default());
    let clocks = Clocks::new(cluster.len());
    let ctx = workloads::Ctx {
        history,
        stalls: std::sync::Arc::clone(&stalls),
        urls: cluster.urls(),
        pg_url: pg_url.to_string(),
        unfenced: args.unfenced,
        until,
        clocks: &clocks,
        store_url: store_url.to_string(),
    };
    let (stop_watching, stopped) = crossbeam_channel::bounded::<()>(0);
    let mut watched: Vec<Watched> = REGISTERS.iter().map(|r| Watched::lock(r)).collect();
    watched.push(Watched::lock(RUN_JOB));
    watched.push(Watched::lock(ops::OP_LOCK));
    watched.extend(ops::KV_KEYS.iter().map(|k| Watched::lock(k)));
    watched.push(Watched::lock(&format!("election:{ELECTION}")));
    watched.extend((0..PERMITS).map(|slot| Watched::permit(SEMAPHORE, slot)));
    watched.extend(Watched::rw(RW_LOCK));
    thread::scope(|s| {
        let (watched, stopped) = (&watched, &stopped);
        let watcher = thread::Builder::new()
            .name("nemesis-watcher".into())
            .spawn_scoped(s, || {
                watcher::watch(cluster, history, watched, args.clients, stopped)
            });
        let mut clients = Vec::new();
        for (id, workload) in workloads.iter().enumerate() {
            let ctx = &ctx;
            let spawned = thread::Builder::new()
                .name(format!("nemesis-client-{id}"))
                .spawn_scoped(s, move || workloads::run(ctx, id, *workload, args.seed));
            clients.push(spawned);
        }
        let schedule = Schedule::new(
            cluster,
            history,
            &stalls,
            &clocks,
            nemeses.to_vec(),
            args.seed,
            until,
        );
        schedule.run();
        for (id, client) in clients.into_iter().enumerate() {
            match client.map(|h| h.join()) {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => eprintln!("client {id} could not start: {e}"),
                Ok(Err(_)) => eprintln!("client {id} panicked"),
                Err(e) => eprintln!("client {id}: no thread: {e}"),
            }
        }
        drop(stop_watching);
        if let Ok(w) = watcher {
            let _ = w.join();
        }
    });
}

fn read_database(url: &str) -> Result<Stored, BoxError> {
    let mut db = Client::connect(url, NoTls)?;
    let counters: BTreeMap<String, i64> = db
        .query("SELECT resource, value FROM counters", &[])?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let writes = db
        .query(
            "SELECT resource, token, client, read FROM writes ORDER BY id",
            &[],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let acts = db
        .query("SELECT term, client FROM acts ORDER BY id", &[])?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let reads = db
        .query(
            "SELECT resource, token, client, first, second FROM reads ORDER BY id",
            &[],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    Ok(Stored {
        counters,
        writes,
        acts,
        reads,
        kv: BTreeMap::new(),
    })
}

/// Each storage key `fenced_set` wrote (`ops::OP_LOCK`, `ops::KV_KEYS`,
/// `RW_LOCK`'s) and its value at the end (absent: 0).
fn read_store(store: &RedisServer) -> Result<BTreeMap<String, i64>, BoxError> {
    let mut conn = store.try_connection()?;
    let mut out = BTreeMap::new();
    for key in ops::KV_KEYS.iter().chain([&ops::OP_LOCK, &RW_LOCK]) {
        let value: Option<i64> = redfence::redis::cmd("GET").arg(key).query(&mut conn)?;
        out.insert(key.to_string(), value.unwrap_or(0));
    }
    Ok(out)
}

fn summarise(results: &serde_json::Value) {
    let keys = [
        "ops",
        "grants",
        "contended",
        "unavailable",
        "writes_refused",
        "reads_refused",
        "stalls",
        "waiter_pauses",
        "faults",
        "lost_updates",
        "stale_writes_accepted",
        "token_regressions",
        "tokens_ahead",
        "overlaps",
        "overlaps_excused",
        "excused_by",
        "run_once_duplicates",
        "leader_overlaps",
        "slot_overlaps",
        "slots_out_of_range",
        "permits_over_count",
        "permits_over_count_excused",
        "rw_overlaps",
        "torn_reads",
        "stale_reads",
        "permits_at_count",
        "reads_shared",
        "reads_checked",
        "orphan_locks",
        "voided_grants",
        "stuck_calls",
        "cancels",
        "cancelled",
        "cancel_violations",
        "unlocks",
        "unlocks_of",
        "unlock_excused",
        "kv_ops",
        "kv_refused",
        "kv_violations",
        "clock_checks",
        "clock_checks_skipped",
        "clock_checks_stepped",
        "clock_violations",
        "fair_grants",
        "fair_contested",
        "fair_out_of_order",
        "fair_out_of_order_excused",
        "fair_in_order_share",
        "fair_dead_waiters",
        "fair_dead_heads",
        "fair_longest_dead_wait_ms",
        "probes",
    ];
    for k in keys.iter().filter(|k| !results[**k].is_null()) {
        println!("{k}: {}", results[*k]);
    }
    if let Some(per) = results["per_workload"].as_object() {
        for (name, counts) in per {
            println!("workload {name}: {counts}");
        }
    }
    if let Some(list) = results["violations"].as_array() {
        for v in list.iter().take(10) {
            println!("VIOLATION {}", v);
        }
        println!("violations: {}", list.len());
    }
}
