//! The downstream half of fencing for a SQL database: statements that let
//! PostgreSQL refuse a write from a holder whose lease ran out.
//!
//! The lock alone cannot protect data from a holder that is paused (GC,
//! swap, a stopped VM) past its lease and then writes: only the storage can
//! refuse that write. The storage keeps the highest fencing token seen per
//! resource, next to the data, and each write is a compare-and-set on it,
//! in the same transaction as the write. This module holds the statements,
//! tested against a real PostgreSQL server (`tests/postgres.rs`,
//! `examples/postgres_fencing.rs`); they are plain strings, so any client
//! library can run them.
//!
//! # Why these forms are correct at READ COMMITTED
//!
//! READ COMMITTED is PostgreSQL's default isolation level. There an
//! `UPDATE` (and the `DO UPDATE` of an `INSERT … ON CONFLICT`) that finds
//! its row locked by a concurrent transaction waits for that transaction to
//! end, then evaluates its `WHERE` again on the row's newest committed
//! version, and keeps the row locked until its own transaction ends. So in
//! `… WHERE fence <= $token` the check always sees the latest token, and no
//! other fenced write of that row can come between the check and the write,
//! nor until `COMMIT`. A plain `SELECT` followed by an `UPDATE` has neither
//! property and is not a fencing check.
//!
//! `<=`, not `<`: the same holder may write several times with its token.
//!
//! # Form 1: a fence column on the protected row
//!
//! ```sql
//! ALTER TABLE accounts ADD COLUMN fence bigint NOT NULL DEFAULT 0;
//!
//! UPDATE accounts SET balance = $1, fence = $2
//!  WHERE id = $3 AND fence <= $2;   -- 1 row: written; 0 rows: refused
//! ```
//!
//! One statement, atomic on its own. It is enough when the new value does
//! not depend on an earlier read (a blind write) or is computed in the
//! statement itself (`SET balance = balance + $1`).
//!
//! # Read-modify-write: claim the fence before reading
//!
//! A holder that reads, then computes, then writes with the check above can
//! still lose an update: old holder A reads, its lease runs out, new holder
//! B reads the same value, A's write passes the check (B has not written
//! yet), then B's write, computed from the value before A's, overwrites it.
//! Every write passed the check and one is lost anyway. The cure is to
//! raise the fence *when reading*, in the transaction that will write:
//!
//! ```sql
//! BEGIN;
//! UPDATE accounts SET fence = $2 WHERE id = $1 AND fence <= $2
//!  RETURNING balance;               -- 0 rows: refused, ROLLBACK and stop
//! -- compute the new balance from the one returned
//! UPDATE accounts SET balance = $3 WHERE id = $1;
//! COMMIT;
//! ```
//!
//! Now B's read raises the fence to B's token, so A's late write is refused;
//! and if A got there first, B waits for A's commit and reads A's result.
//! `SELECT … FOR UPDATE` followed by a fenced `UPDATE` in the same
//! transaction is equally correct; the form above does it in one round
//! trip.
//!
//! # Form 2: a fence table, for writes to several rows or tables
//!
//! One row per resource in [`CREATE_FENCE_TABLE`]; the first statement of
//! every transaction that touches the resource's data is
//! [`ADVANCE_FENCE`]:
//!
//! ```sql
//! BEGIN;
//! INSERT INTO redfence_fences (resource, token) VALUES ($1, $2)
//!   ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
//!   WHERE redfence_fences.token <= EXCLUDED.token
//! RETURNING token;                  -- 0 rows: refused, ROLLBACK and stop
//! -- reads and writes of the protected rows, in any tables
//! COMMIT;
//! ```
//!
//! The statement inserts the fence row for a new resource or raises it, and
//! either way locks it until the transaction ends: every other fenced
//! transaction on the resource waits at its own first statement, then
//! checks against our token. Reads after it see the latest committed data,
//! so read-modify-write is safe. Every writer of the protected data must go
//! through the fence; a write that bypasses it is not protected.
//!
//! # When a write is refused
//!
//! A newer holder has taken the lock and written (or is writing). Roll the
//! transaction back and stop working on the resource: the lease is gone,
//! and a retry with the same token can never pass again. If the work must
//! still be done, take the lock again (a new, higher token) and start over
//! from a fresh read.
//!
//! # Tokens and time limits
//!
//! Tokens are below 2^53 ([`FencingToken::get`](crate::FencingToken::get)),
//! so they fit PostgreSQL's `bigint`: pass
//! `i64::try_from(guard.token().get())`.
//!
//! A holder paused *inside* its transaction keeps the fence row locked, so
//! the next holder waits rather than writes: that costs time, not
//! correctness, and when the paused one resumes and commits, its write is
//! ordered before the next holder's read. Bound the wait with
//! `SET idle_in_transaction_session_timeout` on the writers' sessions (the
//! server rolls back a stalled transaction) and `lock_timeout` or
//! `statement_timeout` on the waiting side.
//!
//! At REPEATABLE READ or SERIALIZABLE the same statements stay correct, but
//! a concurrent change makes them fail with a serialization error (SQLSTATE
//! 40001) instead of waiting; retry that transaction (with the same token:
//! it was not refused).
//!
//! # Example
//!
//! With the `postgres` crate (any client works the same way):
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use redfence::{sql, Redlock};
//!
//! let locks = Redlock::new(["redis://127.0.0.1:7001"])?;
//! let mut db = postgres::Client::connect("postgresql://app@127.0.0.1/app", postgres::NoTls)?;
//! db.batch_execute(sql::CREATE_FENCE_TABLE)?;
//! // The protected data (form 2 leaves its tables as they are).
//! db.batch_execute(
//!     "CREATE TABLE IF NOT EXISTS accounts (id bigint PRIMARY KEY, balance bigint NOT NULL);
//!      INSERT INTO accounts (id, balance) VALUES (7, 100) ON CONFLICT (id) DO NOTHING;",
//! )?;
//!
//! let guard = locks.lock("account:7")?;
//! let token = i64::try_from(guard.token().get())?;
//! let mut tx = db.transaction()?;
//! if tx.query_opt(sql::ADVANCE_FENCE, &[&"account:7", &token])?.is_none() {
//!     // Refused: a newer holder exists. Dropping `tx` rolls back.
//!     return Ok(());
//! }
//! let row = tx.query_one("SELECT balance FROM accounts WHERE id = 7", &[])?;
//! let balance: i64 = row.get(0);
//! tx.execute("UPDATE accounts SET balance = $1 WHERE id = 7", &[&(balance - 20)])?;
//! tx.commit()?;
//! # Ok(()) }
//! ```

/// Creates the fence table of [form 2](self#form-2-a-fence-table-for-writes-to-several-rows-or-tables),
/// `redfence_fences (resource text PRIMARY KEY, token bigint NOT NULL)`, if
/// it does not exist.
pub const CREATE_FENCE_TABLE: &str = "CREATE TABLE IF NOT EXISTS redfence_fences (\
     resource text PRIMARY KEY, \
     token bigint NOT NULL)";

/// Raises the resource's fence to the token, or refuses: `$1` is the
/// resource name (text), `$2` the token (bigint). Returns one row (the
/// token) when the write may go ahead, no row when a higher token was
/// already stored. Run it as the first statement of the transaction that
/// writes; it locks the fence row until that transaction ends.
pub const ADVANCE_FENCE: &str = "INSERT INTO redfence_fences (resource, token) VALUES ($1, $2) \
     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token \
     WHERE redfence_fences.token <= EXCLUDED.token \
     RETURNING token";
