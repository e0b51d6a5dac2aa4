//! `redfence status`: the lock key and the fence counter of one resource,
//! and the semaphore and reader-writer lock of the same name where they
//! exist, read on each instance over a plain connection of our own.

use std::collections::BTreeMap;
use std::time::Duration;

use redfence::redis::{self, RedisError, Value};
use redfence::MAX_PERMITS;
use serde_json::{json, Value as Json};

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

/// The keys of one name (docs/protocol.md, src/protocol/keys.rs): its
/// lock, its semaphore, its reader-writer lock. They share the hash tag
/// `{R}`, so one cluster shard holds them all.
struct Keys {
    lock: String,
    fence: String,
    /// The semaphore's permit count; each slot's keys come from
    /// [`slot`](Self::slot).
    permits: String,
    writer: String,
    readers: String,
    intent: String,
    rw_fence: String,
    /// A fair lock's queue (`lua/fair_gate.lua`): call ids by ticket.
    queue: String,
    prefix: String,
    resource: String,
}

impl Keys {
    fn new(prefix: &str, resource: &str) -> Self {
        let key = |kind: &str, rest: &str| format!("{prefix}{kind}:{{{resource}}}{rest}");
        Keys {
            lock: key("lock", ""),
            fence: key("fence", ""),
            permits: key("permits", ""),
            writer: key("rw", ":writer"),
            readers: key("rw", ":readers"),
            intent: key("rw", ":intent"),
            rw_fence: key("fence", ":rw"),
            queue: key("fair", ":queue"),
            prefix: prefix.to_string(),
            resource: resource.to_string(),
        }
    }

    /// Slot `i`'s lock key and fence counter.
    fn slot(&self, i: u32) -> (String, String) {
        let (prefix, resource) = (&self.prefix, &self.resource);
        (
            format!("{prefix}permit:{{{resource}}}:{i}"),
            format!("{prefix}fence:{{{resource}}}:permit:{i}"),
        )
    }
}

/// A lock key (the lock's, or a slot's) and its counter on one instance.
#[derive(Default)]
struct Lock {
    /// The key's remaining TTL (`None` inside: no expiry); `None` if the
    /// key is missing.
    ttl: Option<Option<Duration>>,
    holder: Option<String>,
    fence: Option<u64>,
}

impl Lock {
    fn held(&self) -> bool {
        self.ttl.is_some()
    }

    fn json(&self) -> Json {
        json!({
            "locked": self.held(),
            "ttl_ms": self.ttl.flatten().map(millis),
            "holder": self.holder,
            "fence": self.fence,
        })
    }
}

/// The semaphore of that name on one instance.
struct Semaphore {
    /// The count recorded there.
    permits: u32,
    /// Slot 0 first.
    slots: Vec<Lock>,
}

/// A writer's or a reader's hold of the reader-writer lock.
struct Hold {
    ttl: Option<Duration>,
    holder: String,
}

impl Hold {
    fn json(&self) -> Json {
        json!({ "holder": self.holder, "ttl_ms": self.ttl.map(millis) })
    }
}

/// The reader-writer lock of that name on one instance.
struct Rw {
    writer: Option<Hold>,
    /// Live readers, longest-lived last.
    readers: Vec<Hold>,
    /// A writer waits for the readers: new readers queue behind it.
    writer_waiting: bool,
    fence: Option<u64>,
}

/// What one instance holds for the name.
struct Reading {
    lock: Lock,
    /// `None` without a permits record.
    semaphore: Option<Semaphore>,
    /// `None` if none of its keys exists.
    rw: Option<Rw>,
    /// A fair lock's waiters, in line: ticket, call id.
    queue: Vec<(u64, String)>,
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
    let keys = Keys::new(&common.prefix, &args.resource);
    let timeout = common.instance_timeout;
    let readings: Vec<Result<(Reading, Option<String>), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = instances
            .iter()
            .map(|(name, instance)| {
                let keys = &keys;
                scope.spawn(move || read(name, instance, keys, timeout))
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
        .filter(|(_, r)| r.as_ref().is_ok_and(|r| r.lock.held()))
        .count();
    let semaphore = readings
        .iter()
        .any(|(_, r)| r.as_ref().is_ok_and(|r| r.semaphore.is_some()))
        .then(|| SemaphoreSummary::of(&readings, quorum));
    let rw = readings
        .iter()
        .any(|(_, r)| r.as_ref().is_ok_and(|r| r.rw.is_some()))
        .then(|| RwSummary::of(&readings));
    if args.json {
        let list: Vec<Json> = readings
            .iter()
            .map(|(name, reading)| match reading {
                Ok(r) => json!({
                    "instance": name,
                    "ok": true,
                    "locked": r.lock.held(),
                    "ttl_ms": r.lock.ttl.flatten().map(millis),
                    "holder": r.lock.holder,
                    "fence": r.lock.fence,
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
            "semaphore": semaphore.map(|s| s.json(&keys, &readings)),
            "rw": rw.map(|s| s.json(&keys, &readings)),
            "queue": fair_queue(&readings)
                .iter()
                .map(|(ticket, waiter, age, on)| json!({
                    "ticket": ticket,
                    "waiter": waiter,
                    "age_ms": millis(*age),
                    "instances": on,
                }))
                .collect::<Vec<Json>>(),
        });
        out!("{doc}");
    } else {
        // The lock's table, unless the name is only a semaphore's or a
        // reader-writer lock's (no lock key or counter anywhere).
        let lock_used = readings.iter().any(|(_, r)| {
            r.as_ref()
                .is_ok_and(|r| r.lock.held() || r.lock.fence.is_some())
        });
        let mut gap = false;
        if lock_used || (semaphore.is_none() && rw.is_none()) {
            out!(
                "{}: locked on {locked} of {} instances, {answered} answered (quorum {quorum})",
                keys.lock,
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
                    Ok(r) => row(name, "", &r.lock),
                    Err(e) => out!("{name:<24} error: {e}"),
                }
            }
            gap = true;
        }
        if let Some(summary) = semaphore {
            if gap {
                out!("");
            }
            summary.print(&keys, &readings, answered, quorum);
            gap = true;
        }
        if let Some(summary) = rw {
            if gap {
                out!("");
            }
            summary.print(&keys, &readings, answered, quorum);
            gap = true;
        }
        let queue = fair_queue(&readings);
        if !queue.is_empty() {
            if gap {
                out!("");
            }
            print_queue(&keys, &queue, answered);
        }
    }
    Ok(if answered >= quorum { 0 } else { UNAVAILABLE })
}

type Readings = [(String, Result<Reading, String>)];

/// The semaphore over every instance.
struct SemaphoreSummary {
    /// Each recorded count, with how many instances record it, most
    /// common first.
    counts: Vec<(u32, usize)>,
    /// The slots held on a quorum.
    held: Vec<u32>,
}

impl SemaphoreSummary {
    fn of(readings: &Readings, quorum: usize) -> Self {
        let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
        let mut holding: BTreeMap<u32, usize> = BTreeMap::new();
        for s in semaphores(readings) {
            *counts.entry(s.permits).or_default() += 1;
            for (i, slot) in (0..).zip(&s.slots) {
                if slot.held() {
                    *holding.entry(i).or_default() += 1;
                }
            }
        }
        let mut counts: Vec<(u32, usize)> = counts.into_iter().collect();
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let held = holding
            .into_iter()
            .filter(|(_, n)| *n >= quorum)
            .map(|(slot, _)| slot)
            .collect();
        SemaphoreSummary { counts, held }
    }

    fn json(&self, keys: &Keys, readings: &Readings) -> Json {
        let list: Vec<Json> = readings
            .iter()
            .map(|(name, reading)| match reading {
                Ok(r) => {
                    let s = r.semaphore.as_ref();
                    let slots: Vec<Json> = s
                        .map(|s| &s.slots[..])
                        .unwrap_or_default()
                        .iter()
                        .zip(0u32..)
                        .map(|(lock, i)| {
                            let mut entry = lock.json();
                            entry["slot"] = json!(i);
                            entry
                        })
                        .collect();
                    json!({
                        "instance": name,
                        "ok": true,
                        "permits": s.map(|s| s.permits),
                        "slots": slots,
                        "error": null,
                    })
                }
                Err(e) => json!({
                    "instance": name,
                    "ok": false,
                    "permits": null,
                    "slots": null,
                    "error": e,
                }),
            })
            .collect();
        json!({
            "key": keys.permits,
            "permits": self.counts.first().map(|(n, _)| n),
            "held": self.held,
            "instances": list,
        })
    }

    fn print(&self, keys: &Keys, readings: &Readings, answered: usize, quorum: usize) {
        let counts: Vec<String> = self
            .counts
            .iter()
            .enumerate()
            .map(|(i, (permits, on))| {
                let of = if i == 0 {
                    format!(" of {}", readings.len())
                } else {
                    String::new()
                };
                let plural = if *permits == 1 { "" } else { "s" };
                format!("{permits} permit{plural} on {on}{of} instances")
            })
            .collect();
        let held = match self.held.as_slice() {
            [] => "no slot held on a quorum".to_string(),
            slots => format!(
                "held on a quorum: slot {}",
                slots
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        out!(
            "{}: {}; {held}; {answered} answered (quorum {quorum})",
            keys.permits,
            counts.join(", ")
        );
        out!(
            "{:<24} {:>5} {:<6} {:>9} {:<20} FENCE",
            "INSTANCE",
            "SLOT",
            "LOCK",
            "TTL",
            "HOLDER"
        );
        for (name, reading) in readings {
            let semaphore = match reading {
                Ok(r) => r.semaphore.as_ref(),
                Err(e) => {
                    out!("{name:<24} error: {e}");
                    continue;
                }
            };
            let Some(s) = semaphore else {
                out!("{name:<24} no permits record");
                continue;
            };
            // Slots never used (no key, no counter) are left out.
            let mut shown = false;
            for (slot, i) in s.slots.iter().zip(0u32..) {
                if slot.held() || slot.fence.is_some() {
                    row(name, &format!("{i:>5} "), slot);
                    shown = true;
                }
            }
            if !shown {
                out!("{name:<24} {:>5} free", "-");
            }
        }
    }
}

fn semaphores(readings: &Readings) -> impl Iterator<Item = &Semaphore> {
    readings
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok()?.semaphore.as_ref())
}

/// The reader-writer lock over every instance.
struct RwSummary {
    /// Instances with a writer.
    written: usize,
    /// Instances with at least one live reader.
    read: usize,
}

impl RwSummary {
    fn of(readings: &Readings) -> Self {
        let rws = || {
            readings
                .iter()
                .filter_map(|(_, r)| r.as_ref().ok()?.rw.as_ref())
        };
        RwSummary {
            written: rws().filter(|rw| rw.writer.is_some()).count(),
            read: rws().filter(|rw| !rw.readers.is_empty()).count(),
        }
    }

    fn json(&self, keys: &Keys, readings: &Readings) -> Json {
        let list: Vec<Json> = readings
            .iter()
            .map(|(name, reading)| match reading {
                Ok(r) => {
                    let rw = r.rw.as_ref();
                    json!({
                        "instance": name,
                        "ok": true,
                        "writer": rw.and_then(|rw| rw.writer.as_ref()).map(Hold::json),
                        "readers": rw.map_or(vec![], |rw| rw.readers.iter().map(Hold::json).collect()),
                        "writer_waiting": rw.is_some_and(|rw| rw.writer_waiting),
                        "fence": rw.and_then(|rw| rw.fence),
                        "error": null,
                    })
                }
                Err(e) => json!({
                    "instance": name,
                    "ok": false,
                    "writer": null,
                    "readers": null,
                    "writer_waiting": null,
                    "fence": null,
                    "error": e,
                }),
            })
            .collect();
        json!({
            "writer_key": keys.writer,
            "readers_key": keys.readers,
            "written": self.written,
            "read": self.read,
            "instances": list,
        })
    }

    fn print(&self, keys: &Keys, readings: &Readings, answered: usize, quorum: usize) {
        out!(
            "{}: written on {} of {} instances, read on {}, {answered} answered (quorum {quorum})",
            keys.writer.strip_suffix(":writer").unwrap_or(&keys.writer),
            self.written,
            readings.len(),
            self.read
        );
        out!(
            "{:<24} {:<7} {:>9} {:<20} FENCE",
            "INSTANCE",
            "ROLE",
            "TTL",
            "HOLDER"
        );
        for (name, reading) in readings {
            let rw = match reading {
                Ok(r) => r.rw.as_ref(),
                Err(e) => {
                    out!("{name:<24} error: {e}");
                    continue;
                }
            };
            let fence = rw
                .and_then(|rw| rw.fence)
                .map_or("-".to_string(), |f| f.to_string());
            let line = |role: &str, ttl: &str, holder: &str| {
                out!("{name:<24} {role:<7} {ttl:>9} {holder:<20} {fence}");
            };
            let Some(rw) = rw else {
                line("free", "-", "-");
                continue;
            };
            let holds = rw
                .writer
                .iter()
                .map(|w| ("writer", w))
                .chain(rw.readers.iter().map(|r| ("reader", r)));
            let mut shown = false;
            for (role, hold) in holds {
                line(role, &ttl_text(Some(hold.ttl)), &hold.holder);
                shown = true;
            }
            if rw.writer_waiting {
                line("waiting", "-", "(a writer)");
            } else if !shown {
                line("free", "-", "-");
            }
        }
    }
}

/// One row of a lock key's table: instance, `extra` columns, state, TTL,
/// holder, counter.
fn row(name: &str, extra: &str, lock: &Lock) {
    let state = if lock.held() { "held" } else { "free" };
    let ttl = ttl_text(lock.ttl);
    let holder = lock.holder.as_deref().unwrap_or("-");
    let fence = lock.fence.map_or("-".to_string(), |f| f.to_string());
    out!("{name:<24} {extra}{state:<6} {ttl:>9} {holder:<20} {fence}");
}

fn ttl_text(ttl: Option<Option<Duration>>) -> String {
    match ttl {
        None => "-".to_string(),
        Some(None) => "no expiry".to_string(),
        Some(Some(d)) => format!("{:.3}s", d.as_secs_f64()),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A lock key's PTTL and value, and its fence counter.
type LockRaw = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// The lock key's PTTL and value, the fence counter; the permits record;
/// the writer's PTTL and value, the readers with their scores, whether a
/// writer waits, the rw counter; the instance's clock (`TIME`).
type Raw = (
    i64,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    i64,
    Option<Vec<u8>>,
    Value,
    bool,
    Option<Vec<u8>>,
    (u64, u64),
);

fn read(
    name: &str,
    instance: &client::Instance,
    keys: &Keys,
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
    let open = |shard: &mut Option<String>| -> Result<redis::Connection, RedisError> {
        let mut con = connect(&instance.seed()?)?;
        if instance.cluster {
            *shard = instance.seed_addr();
            if let Err(e) = redis::cmd("PTTL").arg(&keys.lock).query::<i64>(&mut con) {
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
        Ok(con)
    };
    let failed = |e: RedisError| client::describe(name, &e);
    let mut con = open(&mut shard).map_err(failed)?;
    let raw: Raw = redis::pipe()
        .cmd("PTTL")
        .arg(&keys.lock)
        .cmd("GET")
        .arg(&keys.lock)
        .cmd("GET")
        .arg(&keys.fence)
        .cmd("GET")
        .arg(&keys.permits)
        .cmd("PTTL")
        .arg(&keys.writer)
        .cmd("GET")
        .arg(&keys.writer)
        .cmd("ZRANGE")
        .arg(&keys.readers)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .cmd("EXISTS")
        .arg(&keys.intent)
        .cmd("GET")
        .arg(&keys.rw_fence)
        .cmd("TIME")
        .query(&mut con)
        .map_err(failed)?;
    let (pttl, value, fence, permits, writer_pttl, writer, readers, intent, rw_fence, time) = raw;
    let lock = Lock {
        ttl: ttl(pttl),
        holder: value.map(holder),
        fence: counter(fence, "the fence counter")?,
    };
    let semaphore = match permits {
        None => None,
        Some(raw) => Some(read_slots(name, &mut con, keys, &raw)?),
    };
    let now_ms = time.0.saturating_mul(1000) + time.1 / 1000;
    let readers = live_readers(readers, now_ms)?;
    let rw_fence = counter(rw_fence, "the reader-writer lock's fence counter")?;
    let rw =
        (writer.is_some() || !readers.is_empty() || intent || rw_fence.is_some()).then(|| Rw {
            writer: writer.map(|v| Hold {
                ttl: ttl(writer_pttl).flatten(),
                holder: holder(v),
            }),
            readers,
            writer_waiting: intent,
            fence: rw_fence,
        });
    let queue = read_queue(&mut con, keys).map_err(failed)?;
    Ok((
        Reading {
            lock,
            semaphore,
            rw,
            queue,
        },
        shard,
    ))
}

/// A fair lock's waiters on one instance, in line.
fn read_queue(con: &mut redis::Connection, keys: &Keys) -> Result<Vec<(u64, String)>, RedisError> {
    let entries: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
        .arg(&keys.queue)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(con)?;
    Ok(entries
        .into_iter()
        .map(|(call, ticket)| (ticket as u64, String::from_utf8_lossy(&call).into_owned()))
        .collect())
}

/// Every waiter queued on some instance, in ticket order: its ticket, its
/// identity (the call id after the first `:`), how long ago it asked (a
/// ticket is an instance clock reading in µs) and on how many instances.
fn fair_queue(readings: &Readings) -> Vec<(u64, String, Duration, usize)> {
    let mut waiters: Vec<(u64, String, usize)> = Vec::new();
    for (_, reading) in readings {
        let Ok(r) = reading else { continue };
        for (ticket, call) in &r.queue {
            match waiters.iter_mut().find(|(_, c, _)| c == call) {
                Some(w) => w.2 += 1,
                None => waiters.push((*ticket, call.clone(), 1)),
            }
        }
    }
    waiters.sort();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    waiters
        .into_iter()
        .map(|(ticket, call, on)| {
            let age = now.saturating_sub(Duration::from_micros(ticket));
            let identity = call.split_once(':').map_or(call.as_str(), |(_, i)| i);
            (ticket, identity.to_string(), age, on)
        })
        .collect()
}

/// The fair lock's queue, one waiter a row.
fn print_queue(keys: &Keys, queue: &[(u64, String, Duration, usize)], answered: usize) {
    out!("{}: {} waiter(s) in line", keys.queue, queue.len());
    out!("{:<20} {:<32} {:>8} QUEUED ON", "TICKET", "WAITER", "AGE");
    for (ticket, identity, age, on) in queue {
        out!(
            "{ticket:<20} {identity:<32} {:>7.1}s {on}/{answered}",
            age.as_secs_f64()
        );
    }
}

/// The semaphore whose permits record reads `raw`: each slot's lock key
/// and counter.
fn read_slots(
    name: &str,
    con: &mut redis::Connection,
    keys: &Keys,
    raw: &[u8],
) -> Result<Semaphore, String> {
    let permits = std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|n| (1..=MAX_PERMITS).contains(n))
        .ok_or_else(|| format!("{} is not a permit count", keys.permits))?;
    let mut pipe = redis::pipe();
    for i in 0..permits {
        let (lock, fence) = keys.slot(i);
        pipe.cmd("PTTL")
            .arg(&lock)
            .cmd("GET")
            .arg(&lock)
            .cmd("GET")
            .arg(&fence);
    }
    let failed = |e: RedisError| client::describe(name, &e);
    let replies: Vec<LockRaw> = pipe
        .query::<Vec<Value>>(con)
        .map_err(failed)?
        .chunks(3)
        .map(|chunk| redis::from_redis_value_ref(&Value::Array(chunk.to_vec())))
        .collect::<Result<_, _>>()
        .map_err(|e| failed(e.into()))?;
    let slots = replies
        .into_iter()
        .zip(0u32..)
        .map(|((pttl, value, fence), i)| {
            Ok(Lock {
                ttl: ttl(pttl),
                holder: value.map(holder),
                fence: counter(fence, &format!("slot {i}'s fence counter"))?,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(Semaphore { permits, slots })
}

/// A PTTL answer: `None` for a missing key, `Some(None)` for a key
/// without expiry.
fn ttl(pttl: i64) -> Option<Option<Duration>> {
    match pttl {
        -2 => None,
        ms if ms < 0 => Some(None),
        ms => Some(Some(Duration::from_millis(ms.unsigned_abs()))),
    }
}

/// A value is `RANDOM:IDENTITY`: only the identity is shown, never the
/// random part (the holder's secret).
fn holder(value: Vec<u8>) -> String {
    let v = String::from_utf8_lossy(&value);
    match v.split_once(':') {
        Some((_, identity)) => identity.to_string(),
        None => v.chars().take(HOLDER_PREFIX).collect(),
    }
}

fn counter(raw: Option<Vec<u8>>, what: &str) -> Result<Option<u64>, String> {
    raw.map(|raw| {
        std::str::from_utf8(&raw)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| format!("{what} is not an integer"))
    })
    .transpose()
}

/// The readers whose expiry (their score, in ms of the instance's clock)
/// is after `now_ms`, from `ZRANGE … WITHSCORES` (RESP2's flat list or
/// RESP3's pairs), soonest expiry first.
fn live_readers(reply: Value, now_ms: u64) -> Result<Vec<Hold>, String> {
    let bad = || "the reader-writer lock's readers are not a sorted set of expiries".to_string();
    let items = match reply {
        Value::Array(items) => items,
        Value::Nil => Vec::new(),
        _ => return Err(bad()),
    };
    let pairs: Vec<(Value, Value)> = if items.iter().all(|v| matches!(v, Value::Array(_))) {
        items
            .into_iter()
            .map(|pair| match pair {
                Value::Array(pair) if pair.len() == 2 => {
                    let mut pair = pair.into_iter();
                    Ok((
                        pair.next().unwrap_or(Value::Nil),
                        pair.next().unwrap_or(Value::Nil),
                    ))
                }
                _ => Err(bad()),
            })
            .collect::<Result<_, _>>()?
    } else {
        if items.len() % 2 != 0 {
            return Err(bad());
        }
        let mut items = items.into_iter();
        std::iter::from_fn(|| Some((items.next()?, items.next()?))).collect()
    };
    let mut readers = Vec::new();
    for (member, score) in pairs {
        let value: Vec<u8> = redis::from_redis_value(member).map_err(|_| bad())?;
        let expiry: f64 = redis::from_redis_value(score).map_err(|_| bad())?;
        let left = expiry - now_ms as f64;
        if left > 0.0 {
            readers.push(Hold {
                ttl: Some(Duration::from_millis(left as u64)),
                holder: holder(value),
            });
        }
    }
    Ok(readers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn keys_follow_the_library_layout() {
        let k = Keys::new("p:", "jobs");
        assert_eq!(k.lock, "p:lock:{jobs}");
        assert_eq!(k.fence, "p:fence:{jobs}");
        assert_eq!(k.permits, "p:permits:{jobs}");
        assert_eq!(
            k.slot(3),
            (
                "p:permit:{jobs}:3".to_string(),
                "p:fence:{jobs}:permit:3".to_string()
            )
        );
        assert_eq!(k.writer, "p:rw:{jobs}:writer");
        assert_eq!(k.readers, "p:rw:{jobs}:readers");
        assert_eq!(k.intent, "p:rw:{jobs}:intent");
        assert_eq!(k.rw_fence, "p:fence:{jobs}:rw");
    }

    #[test]
    fn holders_show_the_identity_never_the_secret() {
        assert_eq!(holder(b"0123456789abcdef:web-1:42".to_vec()), "web-1:42");
        assert_eq!(holder(b"0123456789abcdef".to_vec()), "012345");
    }

    #[test]
    fn readers_are_read_from_either_protocol_and_expired_ones_left_out() {
        let flat = Value::Array(vec![
            bulk("s1:gone"),
            bulk("900"),
            bulk("s2:reader-a"),
            bulk("1500"),
            bulk("s3:reader-b"),
            bulk("3000"),
        ]);
        let readers = live_readers(flat, 1000).unwrap();
        let shown: Vec<(&str, Option<Duration>)> =
            readers.iter().map(|r| (r.holder.as_str(), r.ttl)).collect();
        let ms = |n| Some(Duration::from_millis(n));
        assert_eq!(shown, [("reader-a", ms(500)), ("reader-b", ms(2000))]);
        let pairs = Value::Array(vec![Value::Array(vec![bulk("s:r"), Value::Double(1250.0)])]);
        let readers = live_readers(pairs, 1000).unwrap();
        assert_eq!(readers[0].holder, "r");
        assert_eq!(readers[0].ttl, ms(250));
        assert!(live_readers(Value::Array(vec![]), 0).unwrap().is_empty());
        assert!(live_readers(Value::Array(vec![bulk("odd")]), 0).is_err());
        assert!(live_readers(Value::Int(3), 0).is_err());
    }

    #[test]
    fn counters_must_be_integers() {
        assert_eq!(counter(None, "x"), Ok(None));
        assert_eq!(counter(Some(b"42".to_vec()), "x"), Ok(Some(42)));
        assert_eq!(
            counter(Some(b"nope".to_vec()), "slot 1's fence counter"),
            Err("slot 1's fence counter is not an integer".to_string())
        );
    }
}
