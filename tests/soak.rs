//! A long randomised run: several clients contend for a few resources
//! through a fenced store while a fault thread keeps breaking a minority of
//! the five instances (SIGSTOP, latency, jitter, partitions, resets, lost
//! replies, requests held for seconds and landing after later ones,
//! crashes restarted after the TTL).
//!
//! ```text
//! cargo test --features testing --release --test soak -- --ignored --nocapture
//! REDFENCE_SOAK_SEED=1234 REDFENCE_SOAK_SECS=120 cargo test ...   # replay / longer
//! ```
//!
//! The fault schedule is drawn from the printed seed; thread timing is not
//! reproducible, so a replay repeats the faults, not the exact interleaving.
//!
//! What must hold, whatever the faults (within the model: no clock jumps,
//! crashed instances stay down longer than the TTL):
//! - no two holders whose leases were both valid (`is_held()` still true
//!   after the write) were inside the critical section at the same time,
//!   and their fencing tokens increase in the order they entered;
//! - the fenced store never loses an update: its counter equals the number
//!   of increments it accepted, although the increment is a plain read
//!   followed by a fenced write;
//! - a holder paused past its validity (simulated: auto-extension off and
//!   a sleep) has its late write refused whenever a newer holder wrote.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::faults::{Proxied, XorShift};
use redfence::testing::{Fault, FencedStore};
use redfence::{Error, LockOptions, Redlock};

const RESOURCES: [&str; 3] = ["soak:a", "soak:b", "soak:c"];
const TTL: Duration = Duration::from_millis(1000);
/// A holder starts its read-modify-write only with this much validity
/// left, so that being descheduled on a busy machine between the check and
/// the write does not outlast the lease (that pause is what fencing is for,
/// and the staller below exercises it on purpose).
const MIN_VALIDITY: Duration = Duration::from_millis(300);

/// One pass through the critical section by a non-stalling holder.
#[derive(Debug, Clone)]
struct Visit {
    resource: usize,
    token: u64,
    entry: Instant,
    exit: Instant,
    /// `is_held()` after `exit`: the lease was valid for the whole visit.
    held: bool,
}

#[derive(Default)]
struct Counts {
    operations: AtomicU64,
    grants: AtomicU64,
    contended: AtomicU64,
    unavailable: AtomicU64,
    no_validity: AtomicU64,
    other_errors: AtomicU64,
    lost_before_write: AtomicU64,
    accepted: [AtomicU64; 3],
    rejected_in_time: AtomicU64,
    stalls: AtomicU64,
    stale_accepted: AtomicU64,
    stale_rejected: AtomicU64,
    releases_unconfirmed: AtomicU64,
    /// Time each successful lock call took.
    lock_latency: Mutex<Vec<Duration>>,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}"))
    })
}

fn counter_value(store: &FencedStore, resource: &str) -> u64 {
    store
        .read(resource)
        .map_or(0, |(_, v)| v.parse().expect("counter value"))
}

#[allow(clippy::too_many_lines)]
fn contend(
    locks: &Redlock,
    store: &FencedStore,
    counts: &Counts,
    visits: &Mutex<Vec<Visit>>,
    stop: &AtomicBool,
    seed: u64,
) {
    let mut rng = XorShift::new(seed);
    while !stop.load(Ordering::SeqCst) {
        counts.operations.fetch_add(1, Ordering::Relaxed);
        let r = rng.below(RESOURCES.len() as u64) as usize;
        let resource = RESOURCES[r];
        // A stalling holder stands for a process paused with its watchdog:
        // no auto-extension, and a pause past its validity before writing.
        let stall = rng.chance(4);
        let opts = LockOptions::new()
            .ttl(TTL)
            .wait(Duration::from_secs(2))
            .auto_extend(!stall);
        let start = Instant::now();
        let guard = match locks.lock_with(resource, opts) {
            Ok(guard) => {
                counts.lock_latency.lock().unwrap().push(start.elapsed());
                guard
            }
            Err(Error::Contended { .. }) => {
                counts.contended.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(Error::Unavailable { .. }) => {
                counts.unavailable.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(Error::NoValidity { .. }) => {
                counts.no_validity.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(e) => {
                counts.other_errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("soak: unexpected lock error: {e}");
                continue;
            }
        };
        counts.grants.fetch_add(1, Ordering::Relaxed);
        let token = guard.token().get();
        if guard.ensure_held().is_err() || guard.validity() < MIN_VALIDITY {
            counts.lost_before_write.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if stall {
            counts.stalls.fetch_add(1, Ordering::Relaxed);
            let before = store.read(resource).map(|(_, v)| v);
            std::thread::sleep(guard.validity() + rng.millis(20, 300));
            // The late write re-writes what was read before the pause; it
            // must be refused if a newer holder wrote since.
            let value = before.unwrap_or_else(|| "0".to_string());
            match store.write(resource, token, value) {
                Ok(()) => counts.stale_accepted.fetch_add(1, Ordering::Relaxed),
                Err(_) => counts.stale_rejected.fetch_add(1, Ordering::Relaxed),
            };
            let _ = guard.release();
            continue;
        }
        let entry = Instant::now();
        let current = counter_value(store, resource);
        // Mostly short visits; some long ones (the watchdog keeps the lease)
        // give faults time to strike while a holder is inside.
        if rng.chance(10) {
            std::thread::sleep(rng.millis(100, 500));
        } else if rng.chance(30) {
            std::thread::sleep(rng.millis(1, 5));
        }
        // Check before the write, as a user must.
        if guard.ensure_held().is_err() || guard.validity() < MIN_VALIDITY {
            counts.lost_before_write.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        match store.write(resource, token, (current + 1).to_string()) {
            Ok(()) => counts.accepted[r].fetch_add(1, Ordering::Relaxed),
            Err(_) => counts.rejected_in_time.fetch_add(1, Ordering::Relaxed),
        };
        let exit = Instant::now();
        let held = guard.is_held();
        visits.lock().unwrap().push(Visit {
            resource: r,
            token,
            entry,
            exit,
            held,
        });
        if guard.release().is_err() {
            counts.releases_unconfirmed.fetch_add(1, Ordering::Relaxed);
        }
        // Think time: Redlock has no queue, so a thread that re-locks at
        // once keeps winning against waiters sleeping between attempts.
        std::thread::sleep(rng.millis(1, 20));
    }
}

/// Breaks a random minority every ~300 ms until `stop`, healing the last
/// fault first. Returns how many faults of each kind it injected.
fn inject_faults(env: &Proxied, stop: &AtomicBool, seed: u64) -> HashMap<&'static str, u64> {
    let mut rng = XorShift::new(seed);
    let mut injected: HashMap<&'static str, u64> = HashMap::new();
    let n = env.cluster.len();
    while !stop.load(Ordering::SeqCst) {
        let k = 1 + rng.below(((n - 1) / 2) as u64) as usize;
        let victims = rng.pick(n, k);
        let kind = match rng.below(8) {
            0 => {
                env.cluster.stop(&victims);
                "stop"
            }
            1 => {
                env.set(&victims, Fault::Delay(rng.millis(10, 250)));
                "delay"
            }
            2 => {
                env.set(
                    &victims,
                    Fault::Jitter {
                        min: Duration::ZERO,
                        max: rng.millis(20, 200),
                    },
                );
                "jitter"
            }
            3 => {
                env.set(&victims, Fault::BlackHole);
                "black-hole"
            }
            4 => {
                env.set(&victims, Fault::Reset);
                "reset"
            }
            5 => {
                env.set(&victims, Fault::DropReplies);
                "drop-replies"
            }
            6 => {
                // What was in flight lands seconds later, after what the
                // clients sent since on fresh connections; often cut
                // short by a reset that follows.
                env.set(&victims, Fault::DelayOpen(rng.millis(1000, 3000)));
                if rng.chance(50) {
                    std::thread::sleep(rng.millis(50, 150));
                    env.set(&victims, Fault::Reset);
                }
                "late"
            }
            _ => {
                // Down for longer than any lease: the delayed restart that
                // keeps Redlock safe without persistence.
                let down = TTL + rng.millis(200, 600);
                std::thread::scope(|s| {
                    for &i in &victims {
                        let server = env.cluster.server(i);
                        s.spawn(move || server.restart_after(down));
                    }
                });
                "restart"
            }
        };
        *injected.entry(kind).or_default() += victims.len() as u64;
        std::thread::sleep(rng.millis(200, 400));
        env.cluster.cont(&victims);
        env.pass_all();
    }
    injected
}

/// The most visits of one resource that overlap in time, among `visits`.
fn max_overlap(visits: &[&Visit]) -> usize {
    let mut events: Vec<(Instant, i32)> = Vec::new();
    for v in visits {
        events.push((v.entry, 1));
        events.push((v.exit, -1));
    }
    // Exits before entries at the same instant: touching is not overlapping.
    events.sort();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, delta) in events {
        now += delta;
        max = max.max(now);
    }
    max as usize
}

#[test]
#[ignore = "soak test: cargo test --features testing --release --test soak -- --ignored --nocapture"]
fn random_faults_on_a_minority_keep_valid_holders_apart() {
    let seed = env_u64("REDFENCE_SOAK_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    let secs = env_u64("REDFENCE_SOAK_SECS").unwrap_or(45);
    println!("soak: REDFENCE_SOAK_SEED={seed} REDFENCE_SOAK_SECS={secs}");

    let env = Proxied::start(5);
    let clients: Vec<Redlock> = (0..3)
        .map(|_| {
            env.builder()
                .instance_timeout(Duration::from_millis(100))
                .retry_delay(Duration::from_millis(30))
                .build()
                .unwrap()
        })
        .collect();
    let store = FencedStore::new();
    let counts = Counts::default();
    let visits = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    let faults_stop = AtomicBool::new(false);

    let injected = std::thread::scope(|s| {
        let faults = s.spawn(|| inject_faults(&env, &faults_stop, seed));
        let mut workers = Vec::new();
        for (c, locks) in clients.iter().enumerate() {
            for t in 0..2 {
                let thread_seed = seed.wrapping_add(1 + (c * 2 + t) as u64);
                let (store, counts, visits, stop) = (&store, &counts, &visits, &stop);
                workers.push(s.spawn(move || {
                    contend(locks, store, counts, visits, stop, thread_seed);
                }));
            }
        }
        std::thread::sleep(Duration::from_secs(secs));
        stop.store(true, Ordering::SeqCst);
        for w in workers {
            w.join().expect("worker panicked");
        }
        faults_stop.store(true, Ordering::SeqCst);
        faults.join().expect("fault thread panicked")
    });

    let visits = visits.into_inner().unwrap();
    let mut max_valid_overlap = 0;
    let mut max_any_overlap = 0;
    let mut order_violations = Vec::new();
    for (r, resource) in RESOURCES.iter().enumerate() {
        let all: Vec<&Visit> = visits.iter().filter(|v| v.resource == r).collect();
        let mut valid: Vec<&Visit> = all.iter().copied().filter(|v| v.held).collect();
        max_any_overlap = max_any_overlap.max(max_overlap(&all));
        max_valid_overlap = max_valid_overlap.max(max_overlap(&valid));
        valid.sort_by_key(|v| v.entry);
        for w in valid.windows(2) {
            if w[0].token >= w[1].token {
                order_violations.push(((*resource).to_string(), w[0].clone(), w[1].clone()));
            }
        }
    }
    let accepted: Vec<u64> = counts
        .accepted
        .iter()
        .map(|a| a.load(Ordering::SeqCst))
        .collect();
    let values: Vec<u64> = RESOURCES.iter().map(|r| counter_value(&store, r)).collect();
    let load = |a: &AtomicU64| a.load(Ordering::SeqCst);
    let mut latency = std::mem::take(&mut *counts.lock_latency.lock().unwrap());
    latency.sort();
    let pct = |p: usize| {
        latency
            .get(latency.len() * p / 100)
            .copied()
            .unwrap_or_default()
    };
    let mut injected: Vec<_> = injected.into_iter().collect();
    injected.sort();
    println!(
        "soak summary (seed {seed}, {secs} s):\n  operations {}  grants {}  contended {}  unavailable {}  \
         no-validity {}  other errors {}  lost before write {}\n  accepted writes {:?} (total {})  \
         counter values {:?}  rejected in-time writes {}\n  stalled holders {}  stale writes \
         rejected {}  stale writes accepted (no newer write yet) {}\n  releases unconfirmed {}  \
         visits {} ({} with a valid lease throughout)\n  max simultaneous valid holders {}  \
         max simultaneous holders incl. expired {}\n  lock latency p50 {:?} p99 {:?} max {:?}\n  \
         faults injected {:?} (total {})",
        load(&counts.operations),
        load(&counts.grants),
        load(&counts.contended),
        load(&counts.unavailable),
        load(&counts.no_validity),
        load(&counts.other_errors),
        load(&counts.lost_before_write),
        accepted,
        accepted.iter().sum::<u64>(),
        values,
        load(&counts.rejected_in_time),
        load(&counts.stalls),
        load(&counts.stale_rejected),
        load(&counts.stale_accepted),
        load(&counts.releases_unconfirmed),
        visits.len(),
        visits.iter().filter(|v| v.held).count(),
        max_valid_overlap,
        max_any_overlap,
        pct(50),
        pct(99),
        latency.last().copied().unwrap_or_default(),
        injected,
        injected.iter().map(|(_, n)| n).sum::<u64>(),
    );

    assert!(max_valid_overlap <= 1, "two valid holders at once");
    assert!(
        order_violations.is_empty(),
        "tokens out of order between successive valid holders: {order_violations:?}"
    );
    assert_eq!(
        values, accepted,
        "lost update: counter != accepted increments"
    );
    // The fenced store itself never went backwards per resource.
    for resource in RESOURCES {
        let tokens: Vec<u64> = store
            .accepted()
            .into_iter()
            .filter(|w| w.resource == resource)
            .map(|w| w.token)
            .collect();
        assert!(tokens.windows(2).all(|w| w[0] <= w[1]), "{resource}");
    }
    assert!(
        load(&counts.grants) > 0 && accepted.iter().sum::<u64>() > 0,
        "no progress at all under a faulty minority"
    );
}
