//! # A workload to look at: redfence's metrics served for Prometheus
//!
//! ```text
//! cargo run --features testing,metrics --example dashboard_feed -- \
//!     --listen 127.0.0.1:9464 --duration 300
//! ```
//!
//! Starts five local servers and runs a mixed workload on them for
//! `--duration` seconds while serving `/metrics` (the Prometheus text
//! format, from metrics-exporter-prometheus) on `--listen`, loopback by
//! default: workers contending for a few locks (some waits run out), a
//! semaphore of 3 permits, `try_lock`s that find the lock taken, an
//! election whose two campaigners take turns, and `ping()` every 2 s (the
//! clock offset gauges). Faults at fixed points of the run: one instance
//! killed and restarted (instance errors, owed releases), one instance's
//! clock 1.5 s ahead for a while (when the servers run under libfaketime:
//! set `REDFENCE_TEST_SERVER` to a server built with libc malloc, such as
//! Valkey 9.1's, see docs/testing.md), and a majority frozen for 4 s (a lost
//! lease, failed extensions, calls without a quorum). Each fault is logged
//! on stderr with its Unix time.
//!
//! docs/observability.md shows the dashboard (contrib/grafana/redfence.json)
//! drawn from a real Prometheus scraping this example.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use rand::Rng;
use redfence::testing::{RedisServers, ServerOptions};
use redfence::{LockOptions, Redlock};

/// Buckets for the duration histograms, in seconds, with the 1 s bucket
/// the alert on waits that ran out needs.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

struct Args {
    listen: SocketAddr,
    duration: Duration,
}

fn args() -> Result<Args, String> {
    let mut listen: SocketAddr = "127.0.0.1:9464".parse().unwrap();
    let mut duration = Duration::from_secs(300);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = value.parse().map_err(|e| format!("--listen: {e}"))?,
            "--duration" => {
                duration =
                    Duration::from_secs(value.parse().map_err(|e| format!("--duration: {e}"))?)
            }
            other => {
                return Err(format!(
                    "unknown flag {other} (--listen ADDR, --duration SECS)"
                ))
            }
        }
    }
    Ok(Args { listen, duration })
}

fn main() -> Result<(), String> {
    let args = args()?;
    let recorder = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(|e| format!("buckets: {e}"))?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| format!("recorder: {e}"))?;

    let listener = TcpListener::bind(args.listen).map_err(|e| format!("{}: {e}", args.listen))?;
    {
        let handle = handle.clone();
        thread::spawn(move || serve(listener, handle));
    }
    eprintln!("serving http://{}/metrics", args.listen);

    // Under libfaketime when the server allows it, so that one clock can
    // be moved; plain servers otherwise.
    let (cluster, fake_clock) = match RedisServers::try_start_with(
        5,
        ServerOptions {
            fake_clock: true,
            ..Default::default()
        },
    ) {
        Ok(cluster) => (cluster, true),
        Err(e) => {
            eprintln!("no fake clocks ({e}): the clock fault is skipped");
            (RedisServers::start(5), false)
        }
    };
    let locks = Redlock::builder(cluster.urls())
        .instance_timeout(Duration::from_millis(100))
        .build()
        .map_err(|e| e.to_string())?;

    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    let mut spawn = |name: &str, work: Box<dyn Fn() + Send>| {
        let stop = stop.clone();
        let thread = thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    work();
                }
            })
            .expect("thread starts");
        threads.push(thread);
    };

    // Orders: three workers on two locks, short holds, patient waits.
    for i in 0..3 {
        let locks = locks.clone();
        spawn(
            &format!("orders-{i}"),
            Box::new(move || {
                let mut rng = rand::rng();
                let resource = format!("orders:{}", rng.random_range(0..2));
                let options = LockOptions::new()
                    .ttl(Duration::from_secs(2))
                    .wait(Duration::from_millis(1500));
                if let Ok(guard) = locks.lock_with(&resource, options) {
                    pause(rng.random_range(50..400));
                    let _ = guard.release();
                }
                pause(rng.random_range(20..200));
            }),
        );
    }
    // The daily report: one long holder, two impatient callers whose
    // waits often run out.
    {
        let locks = locks.clone();
        spawn(
            "report-holder",
            Box::new(move || {
                let options = LockOptions::new()
                    .ttl(Duration::from_secs(2))
                    .wait(Duration::from_secs(5));
                if let Ok(guard) = locks.lock_with("report:daily", options) {
                    pause(3000);
                    let _ = guard.release();
                }
                pause(1000);
            }),
        );
    }
    for i in 0..2 {
        let locks = locks.clone();
        spawn(
            &format!("report-{i}"),
            Box::new(move || {
                let options = LockOptions::new()
                    .ttl(Duration::from_secs(2))
                    .wait(Duration::from_millis(1200));
                if let Ok(guard) = locks.lock_with("report:daily", options) {
                    pause(300);
                    let _ = guard.release();
                }
                pause(rand::rng().random_range(200..800));
            }),
        );
    }
    // A long job: 8 s under a lock with a 2 s TTL, kept by the watchdog
    // (its lease is lost when a majority freezes).
    {
        let locks = locks.clone();
        spawn(
            "ledger",
            Box::new(move || {
                let options = LockOptions::new()
                    .ttl(Duration::from_secs(2))
                    .wait(Duration::from_secs(5));
                if let Ok(guard) = locks.lock_with("ledger", options) {
                    let until = Instant::now() + Duration::from_secs(8);
                    while Instant::now() < until && guard.is_held() {
                        pause(100);
                    }
                    let _ = guard.release();
                }
                pause(200);
            }),
        );
    }
    // A cron-like job: one attempt, the lock taken half the time.
    for i in 0..2 {
        let locks = locks.clone();
        spawn(
            &format!("nightly-{i}"),
            Box::new(move || {
                if let Ok(guard) = locks.try_lock("nightly") {
                    pause(700);
                    let _ = guard.release();
                }
                pause(rand::rng().random_range(300..700));
            }),
        );
    }
    // A pool of 3 permits, 4 users.
    for i in 0..4 {
        let pool = locks.semaphore("exports", 3);
        spawn(
            &format!("exports-{i}"),
            Box::new(move || {
                let options = LockOptions::new()
                    .ttl(Duration::from_secs(2))
                    .wait(Duration::from_secs(2));
                if let Ok(permit) = pool.acquire_with(options) {
                    pause(rand::rng().random_range(200..900));
                    let _ = permit.release();
                }
                pause(rand::rng().random_range(50..300));
            }),
        );
    }
    // Two campaigners take turns leading for 15 s.
    for i in 0..2 {
        let election = locks
            .election("scheduler")
            .map_err(|e| e.to_string())?
            .lease(Duration::from_secs(2));
        let stop = stop.clone();
        spawn(
            &format!("scheduler-{i}"),
            Box::new(move || {
                if let Ok(leadership) = election.campaign_for(Duration::from_secs(1)) {
                    let until = Instant::now() + Duration::from_secs(15);
                    while Instant::now() < until
                        && leadership.is_leader()
                        && !stop.load(Ordering::Relaxed)
                    {
                        pause(100);
                    }
                    let _ = leadership.resign();
                    pause(500);
                }
            }),
        );
    }
    // The clock offset gauges are set by ping().
    {
        let locks = locks.clone();
        spawn(
            "ping",
            Box::new(move || {
                let _ = locks.ping();
                pause(2000);
            }),
        );
    }

    // The faults, at fixed points of the run.
    let started = Instant::now();
    let at = |fraction: f64| started + args.duration.mul_f64(fraction);
    let log = |what: &str| {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        eprintln!(
            "{:>5.0} s (unix {unix}): {what}",
            started.elapsed().as_secs_f64()
        );
    };
    let until = |when: Instant| {
        if let Some(left) = when.checked_duration_since(Instant::now()) {
            thread::sleep(left);
        }
    };
    until(at(0.2));
    log("instance 4 killed");
    cluster.server(4).kill();
    until(at(0.35));
    cluster.server(4).restart();
    log("instance 4 restarted");
    if fake_clock {
        until(at(0.45));
        cluster
            .server(3)
            .jump_clock_forward(Duration::from_millis(1500));
        log("instance 3's clock 1.5 s ahead");
        until(at(0.6));
        cluster
            .server(3)
            .jump_clock_back(Duration::from_millis(1500));
        log("instance 3's clock back");
    }
    until(at(0.75));
    log("instances 0, 1, 2 frozen for 4 s");
    cluster.stop(&[0, 1, 2]);
    thread::sleep(Duration::from_secs(4));
    cluster.cont(&[0, 1, 2]);
    log("instances 0, 1, 2 thawed");
    until(at(1.0));

    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    log("done");
    Ok(())
}

fn pause(ms: u64) {
    thread::sleep(Duration::from_millis(ms));
}

/// Answers every request with the exposition text: enough for Prometheus.
fn serve(listener: TcpListener, handle: PrometheusHandle) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        handle.run_upkeep();
        let body = handle.render();
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}
