//! Reads the lock keys straight from every instance (not through the
//! proxies), a few times a second: whose value each holds and for how
//! long. The checker finds from it lock keys written for nobody: a key of
//! a client that was not locking the resource then.

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

/// Each key's value and time to live, in one round trip.
fn read(
    conn: &mut Connection,
    resources: &[&str],
) -> redis::RedisResult<Vec<(Option<String>, i64)>> {
    let mut pipe = redis::pipe();
    for r in resources {
        let key = format!("{KEY_PREFIX}{{{r}}}");
        pipe.cmd("GET").arg(&key).cmd("PTTL").arg(&key);
    }
    let flat: Vec<redis::Value> = pipe.query(conn)?;
    let mut out = Vec::with_capacity(resources.len());
    for pair in flat.chunks(2) {
        let value: Option<String> = redis::from_redis_value(pair[0].clone())?;
        let pttl: i64 = redis::from_redis_value(pair[1].clone())?;
        out.push((value, pttl));
    }
    Ok(out)
}

fn record(
    history: &History,
    instance: usize,
    resources: &[&str],
    owners: &[String],
    found: Vec<(Option<String>, i64)>,
) {
    let at = Instant::now();
    let mut sightings = history.sightings.lock();
    for (resource, (value, pttl)) in resources.iter().zip(found) {
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
            });
        }
    }
}
