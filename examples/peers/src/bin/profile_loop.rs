//! One client in a loop, for a profiler: lock + release of distinct
//! resources on five local Redis instances, one caller, nothing else in the
//! process, so that `perf` samples only that client's threads.
//!
//! ```sh
//! cd examples/peers && cargo build --release --bin profile_loop
//! perf record -g -o redfence.data ./target/release/profile_loop redfence 20000
//! perf report -i redfence.data --sort comm,dso
//! ```
//!
//! The first argument is `redfence` or `rslock` (rslock 0.10 in one tokio
//! task on a multi-thread runtime, its own way); the second the number of
//! lock + release pairs (default 20 000). The five servers start first and
//! the loop prints when it begins and ends, so a profiler attached with
//! `perf record -p` can cover the loop alone.

use std::time::{Duration, Instant};

use redfence::testing::RedisServers;
use redfence::{LockOptions, Redlock};

fn main() {
    let mut args = std::env::args().skip(1);
    let client = args.next().unwrap_or_else(|| "redfence".to_string());
    let ops: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let cluster = RedisServers::start(5);
    let urls = cluster.urls();
    let started = match client.as_str() {
        "redfence" => redfence_loop(&urls, ops),
        "rslock" => rslock_loop(&urls, ops),
        other => {
            eprintln!("profile_loop: unknown client {other:?} (redfence or rslock)");
            std::process::exit(64);
        }
    };
    let per_op = started.elapsed() / ops.max(1) as u32;
    println!("{client}: {ops} lock + release, {per_op:?} per pair");
}

fn redfence_loop(urls: &[String], ops: usize) -> Instant {
    let locks = Redlock::builder(urls.to_vec())
        .build()
        .expect("redfence client");
    let options = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .auto_extend(false);
    let started = Instant::now();
    for i in 0..ops {
        let guard = locks
            .lock_with(&format!("profile-{i}"), options)
            .expect("lock");
        guard.release().expect("release");
    }
    started
}

fn rslock_loop(urls: &[String], ops: usize) -> Instant {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let manager = rslock::LockManager::new(urls.to_vec());
    let started = Instant::now();
    runtime.block_on(async {
        for i in 0..ops {
            let name = format!("profile-{i}");
            let lock = manager
                .lock(name.as_bytes(), Duration::from_secs(10))
                .await
                .expect("lock");
            manager.unlock(&lock).await;
        }
    });
    started
}
