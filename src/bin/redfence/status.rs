//! `redfence status`: the lock key and the fence counter of one resource,
//! read on each instance over a plain connection of our own.

use std::time::Duration;

use redfence::redis::{self, RedisError};
use serde_json::{json, Value};

use crate::cli::{Common, StatusArgs};
use crate::client;
use crate::exit::{Failure, UNAVAILABLE, USAGE};

/// How much of a lock value without an identity (taken by a client that
/// predates identities) is shown: enough to tell holders apart, far too
/// little to release or extend their lock.
const HOLDER_PREFIX: usize = 6;

/// Longest connection set-up (TLS handshake included), as the library's
/// default `connect_timeout`; commands get `--instance-timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What one instance holds for the resource.
struct Reading {
    /// The lock key's remaining TTL; `None` if it has no expiry.
    lock: Option<Option<Duration>>,
    holder: Option<String>,
    fence: Option<u64>,
}

pub fn status(common: &Common, args: &StatusArgs) -> Result<u8, Failure> {
    if args.resource.is_empty() {
        return Err(Failure::new(USAGE, "the resource name is empty"));
    }
    // Validates the instance list and prefix exactly as `run` would.
    let target = client::Target::from_options(common)?;
    let locks = target.client(common)?;
    let quorum = locks.quorum();
    drop(locks);
    let instances = target.instances()?;
    let lock_key = format!("{}lock:{{{}}}", common.prefix, args.resource);
    let fence_key = format!("{}fence:{{{}}}", common.prefix, args.resource);
    let timeout = common.instance_timeout;
    let readings: Vec<Result<(Reading, Option<String>), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = instances
            .iter()
            .map(|(name, instance)| {
                let (lock_key, fence_key) = (&lock_key, &fence_key);
                scope.spawn(move || read(name, instance, lock_key, fence_key, timeout))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("reader panicked".to_string()))
            })
            .collect()
    });
    // A cluster's row names the shard that answered for the resource.
    let readings: Vec<(String, Result<Reading, String>)> = instances
        .iter()
        .zip(readings)
        .map(|((name, _), reading)| match reading {
            Ok((r, Some(shard))) => (format!("{name} shard {shard}"), Ok(r)),
            Ok((r, None)) => (name.clone(), Ok(r)),
            Err(e) => (name.clone(), Err(e)),
        })
        .collect();
    let answered = readings.iter().filter(|(_, r)| r.is_ok()).count();
    let locked = readings
        .iter()
        .filter(|(_, r)| matches!(r, Ok(Reading { lock: Some(_), .. })))
        .count();
    if args.json {
        let list: Vec<Value> = readings
            .iter()
            .map(|(name, reading)| match reading {
                Ok(r) => json!({
                    "instance": name,
                    "ok": true,
                    "locked": r.lock.is_some(),
                    "ttl_ms": r.lock.flatten().map(|d| d.as_millis() as u64),
                    "holder": r.holder,
                    "fence": r.fence,
                    "error": null,
                }),
                Err(e) => json!({
                    "instance": name,
                    "ok": false,
                    "locked": null,
                    "ttl_ms": null,
                    "holder": null,
                    "fence": null,
                    "error": e,
                }),
            })
            .collect();
        let doc = json!({
            "resource": args.resource,
            "prefix": common.prefix,
            "quorum": quorum,
            "answered": answered,
            "locked": locked,
            "instances": list,
        });
        out!("{doc}");
    } else {
        out!(
            "{lock_key}: locked on {locked} of {} instances, {answered} answered (quorum {quorum})",
            instances.len()
        );
        out!(
            "{:<24} {:<6} {:>9} {:<20} FENCE",
            "INSTANCE",
            "LOCK",
            "TTL",
            "HOLDER"
        );
        for (name, reading) in &readings {
            match reading {
                Ok(r) => {
                    let (state, ttl) = match r.lock {
                        None => ("free", "-".to_string()),
                        Some(None) => ("held", "no expiry".to_string()),
                        Some(Some(d)) => ("held", format!("{:.3}s", d.as_secs_f64())),
                    };
                    let holder = r.holder.as_deref().unwrap_or("-");
                    let fence = r.fence.map_or("-".to_string(), |f| f.to_string());
                    out!("{name:<24} {state:<6} {ttl:>9} {holder:<20} {fence}");
                }
                Err(e) => out!("{name:<24} error: {e}"),
            }
        }
    }
    Ok(if answered >= quorum { 0 } else { UNAVAILABLE })
}

/// PTTL of the lock key, its value, the fence counter.
type Raw = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

fn read(
    name: &str,
    instance: &client::Instance,
    lock_key: &str,
    fence_key: &str,
    timeout: Duration,
) -> Result<(Reading, Option<String>), String> {
    let connect = |client: &redis::Client| -> Result<redis::Connection, RedisError> {
        let con = client.get_connection_with_timeout(CONNECT_TIMEOUT.max(timeout))?;
        con.set_read_timeout(Some(timeout))?;
        con.set_write_timeout(Some(timeout))?;
        Ok(con)
    };
    // On a cluster, the seed names the shard that owns the resource's slot
    // (its MOVED answer), unless it is that shard.
    let mut shard = None;
    let query = |shard: &mut Option<String>| -> Result<Raw, RedisError> {
        let mut con = connect(&instance.seed()?)?;
        if instance.cluster {
            *shard = instance.seed_addr();
            if let Err(e) = redis::cmd("PTTL").arg(lock_key).query::<i64>(&mut con) {
                let Some((addr, _slot)) = e.redirect_node() else {
                    return Err(e);
                };
                let (host, port) = addr
                    .rsplit_once(':')
                    .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
                    .ok_or(e)?;
                con = connect(&instance.node(&host, port)?)?;
                *shard = Some(format!("{host}:{port}"));
            }
        }
        redis::pipe()
            .cmd("PTTL")
            .arg(lock_key)
            .cmd("GET")
            .arg(lock_key)
            .cmd("GET")
            .arg(fence_key)
            .query(&mut con)
    };
    let (pttl, value, fence) = query(&mut shard).map_err(|e| client::describe(name, &e))?;
    let lock = match pttl {
        -2 => None,
        ms if ms < 0 => Some(None),
        ms => Some(Some(Duration::from_millis(ms.unsigned_abs()))),
    };
    // A value is `RANDOM:IDENTITY`: only the identity is shown, never the
    // random part (the holder's secret).
    let holder = value.map(|v| {
        let v = String::from_utf8_lossy(&v);
        match v.split_once(':') {
            Some((_, identity)) => identity.to_string(),
            None => v.chars().take(HOLDER_PREFIX).collect(),
        }
    });
    let fence = match fence {
        None => None,
        Some(raw) => Some(
            std::str::from_utf8(&raw)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| "the fence counter is not an integer".to_string())?,
        ),
    };
    Ok((
        Reading {
            lock,
            holder,
            fence,
        },
        shard,
    ))
}
