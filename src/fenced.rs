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
//! transactions, including read-modify-write. For Redis, a read-modify-write
//! reads with [`fenced_get`] and writes with [`fenced_set`]; the readers of
//! a reader-writer lock read with [`fenced_get_shared`], which they share.

use std::sync::LazyLock;

use redis::{ConnectionLike, RedisResult, Script, ToRedisArgs};

use crate::FencingToken;

static FENCED_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/fenced_write.lua")));
static FENCED_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/fenced_read.lua")));
static FENCED_SHARED_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/fenced_shared_read.lua")));

/// Where a key's fence (the highest token that read or wrote it) is kept.
fn fence_key(key: &str) -> String {
    format!("{key}:redfence-token")
}

/// Where a key's read fence (the highest token that read it as a reader of
/// a reader-writer lock, [`fenced_get_shared`]) is kept.
fn read_fence_key(key: &str) -> String {
    format!("{key}:redfence-read-token")
}

/// Writes `value` to `key` unless a newer token read ([`fenced_get`],
/// [`fenced_get_shared`]) or wrote `key` first. Returns `Ok(true)` when written, `Ok(false)` when
/// refused as stale. The highest token is kept in `<key>:redfence-token`.
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
        .key(fence_key(key))
        .key(key)
        .key(read_fence_key(key))
        .arg(token.get())
        .arg(value)
        .invoke(conn)
}

/// Reads `key` for a read-modify-write and raises its fence to `token`, in
/// one script: from then on a write with an older token (a holder whose
/// lease ran out after its own read) is refused by [`fenced_set`], so two
/// holders can never both write a value computed from the same read.
///
/// Returns the value (`None` when the key is absent). A token older than
/// the key's fence is an error (code `STALE`): a newer holder has read or
/// written the key, and this one must stop.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use redfence::{fenced_get, fenced_set, Redlock};
///
/// let locks = Redlock::new(["redis://127.0.0.1:7001"])?;
/// let mut store = redis::Client::open("redis://127.0.0.1:6379")?.get_connection()?;
/// let guard = locks.lock("counter")?;
/// let seen: u64 = fenced_get(&mut store, "counter", guard.token())?
///     .map_or(Ok(0), |v| v.parse())?;
/// if !fenced_set(&mut store, "counter", guard.token(), seen + 1)? {
///     eprintln!("refused: a newer holder has read or written the counter");
/// }
/// # Ok(()) }
/// ```
pub fn fenced_get<C: ConnectionLike>(
    conn: &mut C,
    key: &str,
    token: FencingToken,
) -> RedisResult<Option<String>> {
    FENCED_READ
        .key(fence_key(key))
        .key(key)
        .key(read_fence_key(key))
        .arg(token.get())
        .invoke(conn)
}

/// Reads `key` under a read of a reader-writer lock
/// ([`RwLock::read`](crate::RwLock::read)): readers holding the lock
/// together all read, whatever their tokens' order, and a writer with an
/// older token (one whose lease ran out) is refused by [`fenced_set`] from
/// then on. A reader whose lease ran out is refused once a newer writer has
/// read or written the key: error code `STALE`, stop. The read fence is
/// kept in `<key>:redfence-read-token`.
///
/// Writers of the same lock read with [`fenced_get`] and write with
/// [`fenced_set`], as for a lock.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use redfence::{fenced_get_shared, Redlock};
///
/// let locks = Redlock::new(["redis://127.0.0.1:7001"])?;
/// let mut store = redis::Client::open("redis://127.0.0.1:6379")?.get_connection()?;
/// let read = locks.rw_lock("catalog").read()?;
/// let price = fenced_get_shared(&mut store, "catalog:price", read.token())?;
/// println!("price {price:?}");
/// # Ok(()) }
/// ```
pub fn fenced_get_shared<C: ConnectionLike>(
    conn: &mut C,
    key: &str,
    token: FencingToken,
) -> RedisResult<Option<String>> {
    FENCED_SHARED_READ
        .key(fence_key(key))
        .key(key)
        .key(read_fence_key(key))
        .arg(token.get())
        .invoke(conn)
}
