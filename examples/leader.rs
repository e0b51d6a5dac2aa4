//! A scheduler that runs on several machines and leads on one: it
//! campaigns, schedules while it leads (each write carrying its term to a
//! store that keeps the highest term), and hands over on SIGTERM so a
//! standby takes over at once.
//!
//! Against your own instances (run it in two terminals, then SIGTERM the
//! leader: the other one leads within milliseconds):
//!
//! ```sh
//! REDFENCE_SERVERS=redis://10.0.0.1,redis://10.0.0.2,redis://10.0.0.3 \
//! STORE=redis://10.0.0.9 cargo run --features testing,cli --example leader -- scheduler-a
//! ```
//!
//! Without `REDFENCE_SERVERS` it starts three local `redis-server`s and a
//! store, leads, starts a standby in a thread, and sends itself SIGTERM
//! after a couple of seconds to show the handover; it fails unless the
//! standby then led and wrote. A leader that loses its term goes back to
//! standby (`run` campaigns again); only SIGTERM ends it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redfence::crossbeam_channel::{bounded, select, tick, Receiver, Sender};
use redfence::testing::{RedisServer, RedisServers};
use redfence::{fenced_set, redis, Redlock};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let identity = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "scheduler-a".to_string());
    // Local servers when none are given (kept alive until the end).
    let mut local: Option<(RedisServers, RedisServer)> = None;
    let (urls, store_url) = match std::env::var("REDFENCE_SERVERS") {
        Ok(list) => (
            list.split(',').map(str::to_string).collect::<Vec<_>>(),
            std::env::var("STORE")?,
        ),
        Err(_) => {
            let cluster = RedisServers::start(3);
            let store = RedisServer::start();
            let urls = (cluster.urls(), store.url());
            local = Some((cluster, store));
            urls
        }
    };

    // SIGTERM (and SIGINT) stop the scheduler: dropping `stop_tx` is the
    // stop signal every clone of `stop` sees.
    let term_flag = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&term_flag))?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&term_flag))?;
    let (stop_tx, stop) = bounded::<()>(0);
    let watcher = std::thread::Builder::new()
        .name("sigterm-watcher".to_string())
        .spawn(move || {
            while !term_flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
            drop(stop_tx);
        })?;

    // Dropped when this scheduler first leads: the demo's standby and its
    // SIGTERM wait for that, so the handover is shown on every run.
    let (led_tx, led) = bounded::<()>(0);
    let standby = local.as_ref().map(|_| {
        let (urls, store_url) = (urls.clone(), store_url.clone());
        let (standby_stop_tx, standby_stop) = bounded::<()>(0);
        let led = led.clone();
        let handle = std::thread::Builder::new()
            .name("standby".to_string())
            .spawn(move || {
                let _ = led.recv();
                scheduler("scheduler-b", &urls, &store_url, &standby_stop, None)
            })
            .expect("standby thread");
        (standby_stop_tx, handle)
    });
    if local.is_some() {
        // The demo: SIGTERM ourselves once we have led a while.
        let pid = std::process::id();
        std::thread::Builder::new()
            .name("demo-sigterm".to_string())
            .spawn(move || {
                let _ = led.recv();
                std::thread::sleep(Duration::from_secs(2));
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
            })?;
    }

    scheduler(&identity, &urls, &store_url, &stop, Some(led_tx)).map_err(|e| e.to_string())?;
    let _ = watcher.join();
    if let Some((standby_stop_tx, handle)) = standby {
        let mut store = redis::Client::open(store_url.as_str())?.get_connection()?;
        let mut last = || -> Option<String> {
            redis::cmd("GET")
                .arg("schedule:last")
                .query(&mut store)
                .ok()
        };
        // The standby takes over within milliseconds; give it a few runs.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut took_over = false;
        while !took_over && std::time::Instant::now() < deadline {
            took_over = last().is_some_and(|job| job.ends_with("by scheduler-b"));
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(standby_stop_tx);
        handle
            .join()
            .expect("standby thread")
            .map_err(|e| e.to_string())?;
        if !took_over {
            return Err("the standby never took over after the handover".into());
        }
        println!("handover shown: the standby led and wrote with its term");
    }
    drop(local);
    Ok(())
}

/// Leads while it can until `stop`: every 100 ms, one job run, written with
/// the term to a store that refuses older terms.
fn scheduler(
    identity: &str,
    urls: &[String],
    store_url: &str,
    stop: &Receiver<()>,
    mut led: Option<Sender<()>>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let locks = Redlock::builder(urls.iter().map(String::as_str))
        .identity(identity)
        .build()?;
    let mut store = redis::Client::open(store_url)?.get_connection()?;
    let election = locks
        .election("nightly-scheduler")?
        .lease(Duration::from_secs(5));
    let events = election.observe();
    let mut runs = 0u32;
    type BoxError = Box<dyn std::error::Error + Send + Sync>;
    let result = election.run::<BoxError, _>(stop, |term| {
        println!("{identity}: leading with term {}", term.term());
        drop(led.take()); // tells the demo we lead
        let lost = term.loss_signal();
        let ticker = tick(Duration::from_millis(100));
        loop {
            select! {
                recv(lost) -> _ => { println!("{identity}: lost the leadership"); return Ok(()) }
                recv(stop) -> _ => { println!("{identity}: stopping, handing over"); return Ok(()) }
                recv(ticker) -> _ => {}
            }
            if term.ensure_leader().is_err() {
                // Back to standby: `run` campaigns again.
                println!("{identity}: lost the leadership");
                return Ok(());
            }
            runs += 1;
            let job = format!("run {runs} by {identity}");
            if !fenced_set(&mut store, "schedule:last", term.term(), &job)? {
                println!("{identity}: a newer leader has written: stepping down");
                return Ok(());
            }
        }
    });
    for event in events.try_iter() {
        println!("{identity} saw: {event:?}");
    }
    result
}
