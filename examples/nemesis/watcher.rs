//! Reads the lock keys straight from every instance (not through the
//! proxies), a few times a second: whose value each holds, for how long,
//! and whether that value's attempt was voided. The checker finds from it
//! lock keys written for nobody: a key of a client that was not locking
//! the resource then, or a key whose attempt's clean-up had already voided
//! it (`lua/release.lua` deletes the key and writes the void key in one
//! step, and `lua/acquire.lua` refuses while the void key lives: the two
//! never coexist).

use std::time::{Duration, Instant};

use redfence::crossbeam_channel::{Receiver, RecvTimeoutError};
use redfence::redis::{self, Connection};

use crate::cluster::Cluster;
use crate::history::{History, Sighting};
use crate::workloads::identity;

/// How often the keys are read.
const EVERY: Duration = Duration::from_millis(50);
/// A stopped server answers nothing: the read gives up quickly.
const READ_TIMEOUT: Duration = Duration::from_millis(300);
const KEY_PREFIX: &str = "redfence:lock:";
/// A failed attempt's void key: `redfence:void:{R}:VALUE`, where `R` is
/// the first member of the attempt's resources.
const VOID_PREFIX: &str = "redfence:void:";

/// Watches `resources` until `stop` is signalled (or disconnected).
pub fn watch(
    cluster: &Cluster,
    history: &History,
    resources: &[&str],
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
            match read(c, resources) {
                Ok(found) => record(history, i, resources, &owners, found),
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

/// Each lock key's value, its time to live, and whether a void key names
/// its value, read in one atomic step (a clean-up deletes the key and
/// writes the void key in one step: read apart, they could seem to
/// coexist).
const READ: &str = r"
local out = {}
for i, key in ipairs(KEYS) do
  local value = redis.call('GET', key)
  local pttl, voided = -2, 0
  if value then
    pttl = redis.call('PTTL', key)
    for _, prefix in ipairs(ARGV) do
      voided = voided + redis.call('EXISTS', prefix .. value)
    end
  end
  out[#out + 1] = value or ''
  out[#out + 1] = pttl
  out[#out + 1] = voided
end
return out";

fn read(
    conn: &mut Connection,
    resources: &[&str],
) -> redis::RedisResult<Vec<(Option<String>, i64, bool)>> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(READ).arg(resources.len());
    for r in resources {
        cmd.arg(format!("{KEY_PREFIX}{{{r}}}"));
    }
    for r in resources {
        // A set's void key is named after its first member.
        cmd.arg(format!("{VOID_PREFIX}{{{r}}}:"));
    }
    let flat: Vec<redis::Value> = cmd.query(conn)?;
    let mut out = Vec::with_capacity(resources.len());
    for triple in flat.chunks(3) {
        let value: String = redis::from_redis_value(triple[0].clone())?;
        let pttl: i64 = redis::from_redis_value(triple[1].clone())?;
        let voided: i64 = redis::from_redis_value(triple[2].clone())?;
        out.push(((!value.is_empty()).then_some(value), pttl, voided > 0));
    }
    Ok(out)
}

fn record(
    history: &History,
    instance: usize,
    resources: &[&str],
    owners: &[String],
    found: Vec<(Option<String>, i64, bool)>,
) {
    let at = Instant::now();
    let mut sightings = history.sightings.lock();
    for (resource, (value, pttl, voided)) in resources.iter().zip(found) {
        let Some(value) = value else { continue };
        // The value is `random:identity`; only the identity is looked at.
        let owner = value.split_once(':').map(|(_, id)| id);
        if let Some(client) = owners.iter().position(|o| Some(o.as_str()) == owner) {
            sightings.push(Sighting {
                resource: resource.to_string(),
                instance,
                client,
                at,
                pttl: Duration::from_millis(pttl.max(0) as u64),
                voided,
            });
        }
    }
}
