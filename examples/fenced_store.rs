//! Fencing in a downstream Redis store: the storage, not the lock, has the
//! last word on whether a write is still allowed.
//!
//! ```sh
//! cargo run --features testing --example fenced_store
//! ```
//!
//! A holder is paused past its lease (here: a lease of 300 ms without the
//! watchdog, and a sleep). Meanwhile a second client takes the lock with a
//! higher token and writes. When the first one wakes up and writes, the
//! store refuses it: `fenced_set` keeps the highest token per key and
//! compares atomically, in Lua.

use std::time::Duration;

use redfence::testing::{RedisServer, RedisServers};
use redfence::{fenced_set, LockOptions, Redlock};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let lock_servers = RedisServers::try_start_with(3, Default::default())?;
    let storage = RedisServer::start();
    let mut store = storage.connection();

    let a = Redlock::new(lock_servers.urls())?;
    let b = Redlock::new(lock_servers.urls())?;

    let opts = LockOptions::new()
        .ttl(Duration::from_millis(300))
        .auto_extend(false);
    let first = a.lock_with("account:7", opts)?;
    println!("A holds account:7 with token {}", first.token());
    assert!(fenced_set(
        &mut store,
        "account:7",
        first.token(),
        "A: balance=100"
    )?);

    println!("A pauses (GC, swap, stopped VM)…");
    std::thread::sleep(Duration::from_millis(500));

    let second = b.lock("account:7")?;
    println!("B holds account:7 with token {}", second.token());
    assert!(fenced_set(
        &mut store,
        "account:7",
        second.token(),
        "B: balance=80"
    )?);

    // A wakes up. A careful A checks first…
    if let Err(e) = first.ensure_held() {
        println!("A's check before writing: {e}");
    }
    // …but even a careless A cannot overwrite B's data.
    let accepted = fenced_set(&mut store, "account:7", first.token(), "A: balance=120")?;
    println!("A's late write accepted: {accepted}");
    let value: String = redis::cmd("GET").arg("account:7").query(&mut store)?;
    println!("stored value: {value}");
    assert!(!accepted && value == "B: balance=80");
    second.release()?;
    Ok(())
}
