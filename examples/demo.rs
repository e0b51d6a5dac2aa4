//! The quickstart: four workers share one job queue item by item, never
//! working on the same item at once, each write carrying its fencing token.
//!
//! ```sh
//! cargo run --features testing --example demo
//! ```
//!
//! With `REDFENCE_URLS` unset, the demo starts five local `redis-server`
//! processes of its own (and stops them at the end). To use your own
//! instances: `REDFENCE_URLS=redis://h1:6379,redis://h2:6379,redis://h3:6379`.

use std::time::{Duration, Instant};

use redfence::testing::{FencedStore, RedisServers};
use redfence::{Error, LockOptions, Redlock};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (urls, _servers) = match std::env::var("REDFENCE_URLS") {
        Ok(list) => (list.split(',').map(str::to_string).collect(), None),
        Err(_) => {
            println!("starting five local redis-server instances…");
            let cluster = RedisServers::try_start_with(5, Default::default())?;
            (cluster.urls(), Some(cluster))
        }
    };
    println!("instances: {}", urls.join(" "));
    let locks = Redlock::new(urls)?;
    let store = FencedStore::new();

    // 1. The basics: lock, read the token, release.
    let guard = locks.lock("invoice:42")?;
    println!(
        "locked {} with token {} ({:?} of validity left)",
        guard.resource(),
        guard.token(),
        guard.validity()
    );
    match locks.try_lock("invoice:42") {
        Err(Error::Contended { .. }) => println!("a second try_lock is refused: held"),
        other => println!("unexpected: {other:?}"),
    }
    guard.release()?;

    // 2. Four workers, twelve jobs, each job done exactly once under its lock.
    let started = Instant::now();
    std::thread::scope(|s| {
        for worker in 0..4 {
            let locks = locks.clone();
            let store = store.clone();
            s.spawn(move || {
                for job in 0..12 {
                    let resource = format!("job:{job}");
                    let opts = LockOptions::new().wait(Duration::ZERO);
                    let Ok(guard) = locks.lock_with(&resource, opts) else {
                        continue; // another worker has it
                    };
                    if store.read(&resource).is_none() && guard.ensure_held().is_ok() {
                        std::thread::sleep(Duration::from_millis(20)); // the work
                        let done = format!("done by worker {worker}");
                        match store.write(&resource, guard.token().get(), done) {
                            Ok(()) => {
                                println!("worker {worker}: {resource} (token {})", guard.token())
                            }
                            Err(stale) => println!("worker {worker}: refused, {stale}"),
                        }
                    }
                }
            });
        }
    });
    let done = (0..12)
        .filter(|j| store.read(&format!("job:{j}")).is_some())
        .count();
    println!(
        "{done} of 12 jobs done once each in {:?}",
        started.elapsed()
    );

    // 3. A lease that runs out: its late write is refused by the token check.
    let opts = LockOptions::new()
        .ttl(Duration::from_millis(300))
        .auto_extend(false);
    let slow = locks.lock_with("report", opts)?;
    let reason = slow.wait_lost(Duration::from_secs(2));
    println!(
        "slow holder's lease ended: {reason:?}; is_held() = {}",
        slow.is_held()
    );
    let fast = locks.lock("report")?;
    store.write("report", fast.token().get(), "fresh")?;
    match store.write("report", slow.token().get(), "stale") {
        Err(stale) => println!("late write refused: {stale}"),
        Ok(()) => println!("BUG: a stale write was accepted"),
    }
    if let Err(e) = slow.release() {
        println!("release of the expired lease: {e}");
    }
    fast.release()?;
    Ok(())
}
