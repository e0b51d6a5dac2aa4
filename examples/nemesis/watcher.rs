//! Reads the lock keys straight from every instance (not through the
//! proxies), a few times a second: whose value each holds, for how long,
//! and whether that value's attempt was voided. The checker finds from it
//! lock keys written for nobody: a key of a client that was not locking
//! the resource then, or a key whose attempt's clean-up had already voided
//! it (`lua/release.lua` deletes the key and writes the void key in one
//! step, and `lua/acquire.lua` refuses while the void key lives: the two
//! never coexist). A semaphore's slots are locks of their own keys; a
//! reader-writer lock has a writer key and its readers, a sorted set whose
//! every live entry is read as a key of its own (`lua/rw_acquire.lua`,
//! `lua/rw_release.lua`).

use std::time::{Duration, Instant};

use redfence::crossbeam_channel::{Receiver, RecvTimeoutError};
use redfence::redis::{self, Connection};

use crate::cluster::Cluster;
use crate::history::{History, Sighting};
use crate::workloads::identity;

/// How often the keys are read.
pub const EVERY: Duration = Duration::from_millis(50);
/// A stopped server answers nothing: the read gives up quickly.
pub const READ_TIMEOUT: Duration = Duration::from_millis(300);
/// The library's default key prefix.
const PREFIX: &str = "redfence:";

/// One key the watcher reads, and how the history names its resource.
pub struct Watched {
    pub resource: String,
    pub key: String,
    /// The prefix of its attempts' void keys: `PREFIX void:{R}:VALUE` for
    /// a lock (a set's is named after its first member), with `permit:N:`
    /// or `rw:` before the value for a slot or a reader-writer lock.
    pub void: String,
    /// A sorted set of values scored by their expiry (a reader-writer
    /// lock's readers); a string otherwise.
    pub readers: bool,
}

impl Watched {
    /// A lock's key (of a single lock, a set's member, an election).
    pub fn lock(resource: &str) -> Watched {
        Watched {
            resource: resource.to_string(),
            key: format!("{PREFIX}lock:{{{resource}}}"),
            void: format!("{PREFIX}void:{{{resource}}}:"),
            readers: false,
        }
    }

    /// Slot `slot` of semaphore `name`.
    pub fn permit(name: &str, slot: u32) -> Watched {
        Watched {
            resource: crate::slot_resource(slot),
            key: format!("{PREFIX}permit:{{{name}}}:{slot}"),
            void: format!("{PREFIX}void:{{{name}}}:permit:{slot}:"),
            readers: false,
        }
    }

    /// Reader-writer lock `name`: its writer key and its readers.
    pub fn rw(name: &str) -> [Watched; 2] {
        let void = format!("{PREFIX}void:{{{name}}}:rw:");
        [
            Watched {
                resource: name.to_string(),
                key: format!("{PREFIX}rw:{{{name}}}:writer"),
                void: void.clone(),
                readers: false,
            },
            Watched {
                resource: name.to_string(),
                key: format!("{PREFIX}rw:{{{name}}}:readers"),
                void,
                readers: true,
            },
        ]
    }
}

/// Watches `keys` until `stop` is signalled (or disconnected).
pub fn watch(
    cluster: &Cluster,
    history: &History,
    keys: &[Watched],
    clients: usize,
    stop: &Receiver<()>,
) {
    let mut conns: Vec<Option<Connection>> = (0..cluster.len()).map(|_| None).collect();
    let owners: Vec<String> = (0..clients).map(identity).collect();
    loop {
        match stop.recv_timeout(EVERY) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        for (i, conn) in conns.iter_mut().enumerate() {
            let server = cluster.server(i);
            if server.is_stopped() || !server.is_running() {
                *conn = None;
                continue;
            }
            if conn.is_none() {
                *conn = connect(&server.url());
            }
            let Some(c) = conn.as_mut() else { continue };
            let sent = Instant::now();
            match read(c, keys) {
                Ok(found) => record(history, (i, sent), keys, &owners, found),
                Err(_) => *conn = None,
            }
        }
    }
}

fn connect(url: &str) -> Option<Connection> {
    let client = redis::Client::open(url).ok()?;
    let conn = client.get_connection_with_timeout(READ_TIMEOUT).ok()?;
    conn.set_read_timeout(Some(READ_TIMEOUT)).ok()?;
    conn.set_write_timeout(Some(READ_TIMEOUT)).ok()?;
    Some(conn)
}

/// Each key's values (a string's one, a sorted set's live entries), the
/// time each has to live, and whether a void key names it, read in one
/// atomic step (a clean-up deletes the key and writes the void key in one
/// step: read apart, they could seem to coexist). `ARGV`: `z` or `s` per
/// key, then every void prefix. The reply: per key, how many values, then
/// value, time to live in ms, voided (0 or more) for each.
const READ: &str = r"
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local function voided(value)
  local n = 0
  for i = #KEYS + 1, #ARGV do
    n = n + redis.call('EXISTS', ARGV[i] .. value)
  end
  return n
end
local out = {}
for i, key in ipairs(KEYS) do
  local found = {}
  if ARGV[i] == 'z' then
    local list = redis.call('ZRANGEBYSCORE', key, '(' .. ms, '+inf', 'WITHSCORES')
    for j = 1, #list, 2 do
      found[#found + 1] = {list[j], tonumber(list[j + 1]) - ms}
    end
  else
    local value = redis.call('GET', key)
    if value then
      found[1] = {value, redis.call('PTTL', key)}
    end
  end
  out[#out + 1] = #found
  for _, f in ipairs(found) do
    out[#out + 1] = f[1]
    out[#out + 1] = f[2]
    out[#out + 1] = voided(f[1])
  end
end
return out";

/// Per watched key, each value found: (value, time to live in ms, voided).
type Found = Vec<Vec<(String, i64, bool)>>;

fn read(conn: &mut Connection, keys: &[Watched]) -> redis::RedisResult<Found> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(READ).arg(keys.len());
    for w in keys {
        cmd.arg(&w.key);
    }
    for w in keys {
        cmd.arg(if w.readers { "z" } else { "s" });
    }
    let mut voids: Vec<&str> = keys.iter().map(|w| w.void.as_str()).collect();
    voids.sort_unstable();
    voids.dedup();
    // Every value is checked against every void prefix: a set's void key
    // is named after its first member, whichever key the value is in.
    for v in voids {
        cmd.arg(v);
    }
    let flat: Vec<redis::Value> = cmd.query(conn)?;
    let mut it = flat.into_iter();
    let mut out = Vec::with_capacity(keys.len());
    for _ in keys {
        let n: usize = match it.next() {
            Some(v) => redis::from_redis_value(v)?,
            None => 0,
        };
        let mut values = Vec::with_capacity(n);
        for _ in 0..n {
            let mut next = || it.next().unwrap_or(redis::Value::Nil);
            let value: String = redis::from_redis_value(next())?;
            let pttl: i64 = redis::from_redis_value(next())?;
            let voided: i64 = redis::from_redis_value(next())?;
            values.push((value, pttl, voided > 0));
        }
        out.push(values);
    }
    Ok(out)
}

/// Files a reading of `instance` sent at `sent`.
fn record(
    history: &History,
    (instance, sent): (usize, Instant),
    keys: &[Watched],
    owners: &[String],
    found: Found,
) {
    let at = Instant::now();
    let mut sightings = history.sightings.lock();
    for (w, values) in keys.iter().zip(found) {
        for (value, pttl, voided) in values {
            // The value is `random:identity`; only the identity is looked at.
            let owner = value.split_once(':').map(|(_, id)| id);
            if let Some(client) = owners.iter().position(|o| Some(o.as_str()) == owner) {
                sightings.push(Sighting {
                    resource: w.resource.clone(),
                    instance,
                    client,
                    at,
                    sent,
                    pttl: Duration::from_millis(pttl.max(0) as u64),
                    voided,
                    reader: w.readers,
                });
            }
        }
    }
}
