//! # What each script costs the servers
//!
//! ```text
//! cargo run --release --features testing --example script_cost
//! ```
//!
//! Starts five servers (`REDFENCE_TEST_SERVER` picks another kind) and runs,
//! one phase at a time, `BENCH_OPS` (default 5000) of each thing a lock's
//! life sends: acquisitions of distinct resources (the acquire script; the
//! guards are kept), extensions of those leases (the extension script, or
//! `SET … IFEQ … PX` where the server has it), and their releases (the
//! release script, or the server's compare-and-delete, then `PUBLISH`).
//! Around each phase it reads `INFO commandstats` on every server and
//! prints, per command, calls and microseconds per operation (summed over
//! the five servers), and microseconds per call. `EVALSHA`'s time includes
//! the commands its script calls, which are listed too (nested).
//!
//! One thread, no contention: the figures are what the servers spend, not
//! what a client waits. Compare them across changes to the scripts, and
//! against a peer's (rslock's acquire is `SET NX PX`, its release a small
//! script).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use redfence::testing::RedisServers;
use redfence::{LockGuard, LockOptions, Redlock};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Every server's `INFO commandstats`, summed: `name -> (calls, usec)`.
fn costs(cluster: &RedisServers) -> HashMap<String, (u64, u64)> {
    let mut sum: HashMap<String, (u64, u64)> = HashMap::new();
    for server in cluster {
        for (name, (calls, usec)) in server.command_costs() {
            let entry = sum.entry(name).or_default();
            entry.0 += calls;
            entry.1 += usec;
        }
    }
    sum
}

/// What `phase` made the servers run: per command, (calls, usec), for the
/// commands whose calls changed.
fn measure(cluster: &RedisServers, phase: impl FnOnce()) -> BTreeMap<String, (u64, u64)> {
    let before = costs(cluster);
    phase();
    let after = costs(cluster);
    after
        .into_iter()
        .filter_map(|(name, (calls, usec))| {
            let (c0, u0) = before.get(&name).copied().unwrap_or_default();
            (calls > c0).then(|| (name, (calls - c0, usec.saturating_sub(u0))))
        })
        // The measurement's own INFO calls, and new connections' CLIENT
        // SETINFO, are not the phase's.
        .filter(|(name, _)| name != "info" && !name.starts_with("client|"))
        .collect()
}

fn print_phase(title: &str, ops: usize, deltas: &BTreeMap<String, (u64, u64)>) {
    println!("\n### {title} ({ops} operations)\n");
    println!("| command | calls / op | µs / op | µs / call |");
    println!("|---|---:|---:|---:|");
    let ops = ops as f64;
    let mut total = 0.0;
    for (name, (calls, usec)) in deltas {
        let per_call = *usec as f64 / (*calls).max(1) as f64;
        println!(
            "| {name} | {:.2} | {:.1} | {per_call:.1} |",
            *calls as f64 / ops,
            *usec as f64 / ops
        );
        if matches!(name.as_str(), "evalsha" | "publish" | "delifeq" | "delex")
            || (name == "set" && !deltas.contains_key("evalsha"))
        {
            total += *usec as f64 / ops;
        }
    }
    println!("\nTop-level commands (scripts with their nested calls): {total:.1} µs per operation, over five servers.");
}

fn main() {
    let ops = env_or("BENCH_OPS", 5000);
    let cluster = RedisServers::start(5);
    println!(
        "# Script cost: five {} servers, {ops} operations per phase",
        cluster.server(0).server_version()
    );
    let locks = Redlock::builder(cluster.urls())
        .instance_timeout(Duration::from_millis(500))
        .build()
        .expect("client builds");
    let opts = LockOptions::new()
        .auto_extend(false)
        .ttl(Duration::from_secs(60));
    // Connections open and scripts loaded before anything is measured.
    for i in 0..100 {
        let _ = locks
            .lock_with(&format!("warm-{i}"), opts)
            .map(LockGuard::release);
    }
    let mut guards = Vec::with_capacity(ops);
    let acquired = measure(&cluster, || {
        for i in 0..ops {
            guards.push(locks.lock_with(&format!("cost-{i}"), opts).expect("free"));
        }
    });
    print_phase("acquire: the lock of a free resource", ops, &acquired);
    let extended = measure(&cluster, || {
        for guard in &guards {
            guard.extend(Duration::from_secs(60)).expect("held");
        }
    });
    print_phase("extend: one held lease", ops, &extended);
    let released = measure(&cluster, || {
        for guard in guards.drain(..) {
            guard.release().expect("held");
        }
    });
    print_phase("release, with its announcement", ops, &released);
}
