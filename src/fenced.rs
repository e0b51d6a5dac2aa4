//! The downstream half of fencing, for a store kept in Redis.
//!
//! A fenced store remembers the highest token that wrote to each key and
//! refuses writes that carry a lower one, in one atomic step. For SQL the
//! same check is a conditional update in the writing transaction:
//!
//! ```sql
//! UPDATE invoices SET body = $1, fence = $2
//!  WHERE id = $3 AND fence <= $2;   -- 0 rows: a newer holder wrote first
//! ```
//!
//! See [`crate::sql`] for the forms that stay correct under concurrent
//! transactions, including read-modify-write.

use std::sync::LazyLock;

use redis::{ConnectionLike, RedisResult, Script, ToRedisArgs};

use crate::FencingToken;

static FENCED_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/fenced_write.lua")));

/// Writes `value` to `key` unless a write with a newer token reached `key`
/// first. Returns `Ok(true)` when written, `Ok(false)` when refused as
/// stale. The highest token is kept in `<key>:redfence-token`.
///
/// The same holder may write several times with its token; a holder whose
/// lease ran out is refused as soon as the next holder has written.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use redfence::{fenced_set, Redlock};
///
/// let locks = Redlock::new(["redis://127.0.0.1:7001"])?;
/// let mut store = redis::Client::open("redis://127.0.0.1:6379")?.get_connection()?;
/// let guard = locks.lock("invoice:42")?;
/// if !fenced_set(&mut store, "invoice:42", guard.token(), "paid")? {
///     eprintln!("refused: a newer holder has written invoice:42");
/// }
/// # Ok(()) }
/// ```
pub fn fenced_set<C, V>(conn: &mut C, key: &str, token: FencingToken, value: V) -> RedisResult<bool>
where
    C: ConnectionLike,
    V: ToRedisArgs,
{
    FENCED_WRITE
        .key(format!("{key}:redfence-token"))
        .key(key)
        .arg(token.get())
        .arg(value)
        .invoke(conn)
}
