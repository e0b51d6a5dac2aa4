//! Fencing in PostgreSQL: the database, not the lock, has the last word on
//! whether a write is still allowed.
//!
//! ```sh
//! cargo run --features testing --example postgres_fencing
//! ```
//!
//! Starts three redis-server instances for the lock and a PostgreSQL server
//! (initdb into a temporary directory, a free port; all removed at the end).
//! Holder A takes the lock with a 300 ms lease and no watchdog, writes, and
//! is then paused (think GC pause or stopped VM) until holder B, after A's
//! lease ran out, has taken the lock and written. A resumes and writes
//! without checking its lease: the fence table refuses it. Exits 0 only if
//! all of that happened.
//!
//! Every write is one transaction whose first statement is
//! [`redfence::sql::ADVANCE_FENCE`]; see the [`redfence::sql`] docs for why
//! that is correct under concurrent transactions.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use redfence::testing::{PostgresServer, RedisServers};
use redfence::{sql, LockGuard, LockOptions, Redlock};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ACCOUNT: &str = "account:7";

fn main() -> ExitCode {
    match run() {
        Ok(true) => {
            println!("OK: the database refused the paused holder's late write");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("FAILED: see above");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Adds `amount` to the balance in one fenced transaction: `Ok(None)` when
/// the database refused the token, else the new balance.
fn fenced_add(db: &mut Client, guard: &LockGuard, amount: i64) -> Result<Option<i64>, BoxError> {
    let token = i64::try_from(guard.token().get())?;
    let mut tx = db.transaction()?;
    // First statement: raise the fence or be refused. It also locks the
    // fence row, so the read below cannot be overtaken by another holder.
    if tx
        .query_opt(sql::ADVANCE_FENCE, &[&ACCOUNT, &token])?
        .is_none()
    {
        // A newer holder exists: roll back (dropping `tx` does) and stop.
        return Ok(None);
    }
    let balance: i64 = tx
        .query_one("SELECT balance FROM accounts WHERE id = 7", &[])?
        .get(0);
    tx.execute(
        "UPDATE accounts SET balance = $1 WHERE id = 7",
        &[&(balance + amount)],
    )?;
    tx.commit()?;
    Ok(Some(balance + amount))
}

fn run() -> Result<bool, BoxError> {
    let lock_servers = RedisServers::try_start_with(3, Default::default())?;
    let pg = PostgresServer::try_start()?;
    println!(
        "lock: 3 redis-servers; storage: PostgreSQL at 127.0.0.1:{}",
        pg.port()
    );
    let mut db = Client::connect(&pg.url(), NoTls)?;
    db.batch_execute(sql::CREATE_FENCE_TABLE)?;
    db.batch_execute(
        "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
         INSERT INTO accounts VALUES (7, 100);",
    )?;

    let a = Redlock::new(lock_servers.urls())?;
    let b = Redlock::new(lock_servers.urls())?;
    let lease = LockOptions::new()
        .ttl(Duration::from_millis(300))
        .auto_extend(false);

    let first = a.lock_with(ACCOUNT, lease)?;
    println!(
        "A holds {ACCOUNT} with token {}, lease valid for {:?}",
        first.token(),
        first.validity()
    );
    let Some(balance) = fenced_add(&mut db, &first, 20)? else {
        println!("A's first write was refused");
        return Ok(false);
    };
    println!("A adds 20: accepted, balance {balance}");

    println!("A pauses…");
    let paused = Instant::now();
    let url = pg.url();
    let b_wrote = std::thread::scope(|s| {
        // A stays paused until B is done: B waits for A's lease to run
        // out, takes the lock and writes.
        s.spawn(|| -> Result<_, BoxError> {
            let second = b.lock_with(ACCOUNT, lease.wait(Duration::from_secs(10)))?;
            let mut db = Client::connect(&url, NoTls)?;
            let written = fenced_add(&mut db, &second, -50)?;
            println!(
                "B holds {ACCOUNT} with token {} and subtracts 50: {}",
                second.token(),
                match written {
                    Some(balance) => format!("accepted, balance {balance}"),
                    None => "refused".to_string(),
                }
            );
            let token = second.token();
            second.release()?;
            Ok((token, written))
        })
        .join()
        .map_err(|_| BoxError::from("B's thread panicked"))?
    })?;
    let (b_token, b_balance) = b_wrote;
    println!(
        "A resumes after {:?}; its lease is {}",
        paused.elapsed(),
        if first.is_held() {
            "still held"
        } else {
            "gone"
        }
    );

    // A careful holder would stop here (`first.ensure_held()` fails). This
    // one writes anyway, and the database refuses.
    let late = fenced_add(&mut db, &first, 20)?;
    println!(
        "A adds 20 with token {}: {}",
        first.token(),
        match late {
            Some(_) => "accepted (wrong!)",
            None => "refused: a newer holder has written; A stops",
        }
    );
    let stored: i64 = db
        .query_one("SELECT balance FROM accounts WHERE id = 7", &[])?
        .get(0);
    let fence: i64 = db
        .query_one(
            "SELECT token FROM redfence_fences WHERE resource = $1",
            &[&ACCOUNT],
        )?
        .get(0);
    println!("stored balance {stored}, fence token {fence}");

    Ok(b_token > first.token()
        && !first.is_held()
        && b_balance == Some(70)
        && late.is_none()
        && stored == 70
        && u64::try_from(fence).ok() == Some(b_token.get()))
}
