//! The subscriber of a Redis Cluster position: `SSUBSCRIBE` to each wanted
//! channel on the shard master that owns its slot, one connection per such
//! shard, all served by the position's one subscriber thread.
//!
//! redis-rs's blocking pub/sub has no sharded form, so this speaks the
//! three commands itself over plain connections, in RESP3: there every
//! subscription message is a push, which redis-rs hands over even after a
//! read timed out (in RESP2 it would take the next message for the late
//! reply and drop it). A shard that gives up a
//! slot (resharding, failover) unsubscribes its clients from the slot's
//! channels; the channel is then subscribed again where the slot map says
//! it lives now.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};
use redis::{PushKind, Value};

use super::{subscriber_life, Registry, Stop};
use crate::protocol::slot::key_slot;

/// Where a cluster position's channels live.
pub(crate) trait Shards: Send + Sync {
    /// The shard master that owns `slot` now: its `host:port` and a client
    /// for it that speaks RESP3.
    fn owner(&self, slot: u16) -> Option<(String, redis::Client)>;
    /// A shard refused a channel as not its own: the slot map is stale.
    fn stale(&self);
}

/// How long one connection is listened to per turn while several are.
const TURN: Duration = Duration::from_millis(1);

pub(super) struct ShardedSubscriber {
    shards: Arc<dyn Shards>,
    connect_timeout: Duration,
    timeout: Duration,
    registry: Arc<Registry>,
    kicks: Receiver<()>,
    acked: HashSet<u64>,
}

/// One shard's subscriber connection and the channels subscribed on it.
struct Link {
    conn: redis::Connection,
    channels: HashSet<String>,
}

/// What a message on a subscriber connection says.
enum Event {
    /// A release announced on a channel, with its payload.
    Message(String, Vec<u8>),
    Subscribed(String),
    Unsubscribed(String),
    Refused,
    Other,
}

impl ShardedSubscriber {
    pub(crate) fn new(
        shards: Arc<dyn Shards>,
        connect_timeout: Duration,
        timeout: Duration,
        registry: Arc<Registry>,
        kicks: Receiver<()>,
    ) -> Self {
        ShardedSubscriber {
            shards,
            connect_timeout,
            timeout,
            registry,
            kicks,
            acked: HashSet::new(),
        }
    }

    pub(crate) fn run(mut self) {
        let (registry, kicks) = (Arc::clone(&self.registry), self.kicks.clone());
        let shards = Arc::clone(&self.shards);
        // Refused as not its own (`MOVED` comes back as an error here), or
        // gone: either way the slot map may be stale (a reshard, a
        // failover).
        subscriber_life(&registry, &kicks, || self.serve(), || shards.stale());
    }

    /// Runs the shard connections until nobody waits, one fails, or the
    /// client stops.
    fn serve(&mut self) -> Stop {
        let mut links: HashMap<String, Link> = HashMap::new();
        let mut seen_version = None;
        self.acked.clear();
        loop {
            match self.kicks.try_recv() {
                Ok(()) | Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => return Stop::Shutdown,
            }
            if let Some((wanted, version)) = self.registry.wanted_since(seen_version) {
                if wanted.is_empty() {
                    return Stop::Idle;
                }
                if let Err(stop) = self.place(&mut links, &wanted) {
                    return stop;
                }
                self.registry.acknowledge(&mut self.acked);
                seen_version = Some(version);
            }
            let turn = if links.len() > 1 { TURN } else { super::POLL };
            for link in links.values_mut() {
                if link.conn.set_read_timeout(Some(turn)).is_err() {
                    return Stop::Failed;
                }
                match link.conn.recv_response() {
                    Ok(value) => match event(&value) {
                        Event::Message(channel, payload) => self.registry.wake(&channel, &payload),
                        Event::Unsubscribed(channel) => {
                            // The shard gave the slot away: subscribe again
                            // where it went.
                            link.channels.remove(&channel);
                            seen_version = None;
                        }
                        _ => {}
                    },
                    Err(e) if e.is_timeout() => {}
                    Err(_) => return Stop::Failed,
                }
            }
        }
    }

    /// Subscribes each wanted channel on its shard and unsubscribes the
    /// others, then waits until every subscription is confirmed.
    fn place(
        &self,
        links: &mut HashMap<String, Link>,
        wanted: &HashSet<String>,
    ) -> Result<(), Stop> {
        let placement = self.placement(wanted)?;
        unsubscribe_elsewhere(links, &placement.channels)?;
        let mut pending = 0;
        for (addr, channels) in &placement.channels {
            let link = self.link_to(links, addr, placement.clients.get(addr))?;
            pending += subscribe_missing(link, channels)?;
        }
        self.confirm(links, pending)
    }

    /// Which shard master owns each wanted channel now, per the slot map
    /// (marked stale, and a failure, if a slot has no owner).
    fn placement<'w>(&self, wanted: &'w HashSet<String>) -> Result<Placement<'w>, Stop> {
        let mut placement = Placement {
            channels: HashMap::new(),
            clients: HashMap::new(),
        };
        for channel in wanted {
            let Some((addr, client)) = self.shards.owner(key_slot(channel.as_bytes())) else {
                self.shards.stale();
                return Err(Stop::Failed);
            };
            placement
                .channels
                .entry(addr.clone())
                .or_default()
                .push(channel);
            placement.clients.entry(addr).or_insert(client);
        }
        Ok(placement)
    }

    /// The link to the shard at `addr`, connected first if there is none.
    fn link_to<'l>(
        &self,
        links: &'l mut HashMap<String, Link>,
        addr: &str,
        client: Option<&redis::Client>,
    ) -> Result<&'l mut Link, Stop> {
        if !links.contains_key(addr) {
            let Some(client) = client else {
                return Err(Stop::Failed);
            };
            let conn = crate::transport::connection::connect(client, self.connect_timeout)
                .map_err(|_| Stop::Failed)?;
            conn.set_write_timeout(Some(self.timeout))
                .map_err(|_| Stop::Failed)?;
            links.insert(
                addr.to_string(),
                Link {
                    conn,
                    channels: HashSet::new(),
                },
            );
        }
        links.get_mut(addr).ok_or(Stop::Failed)
    }

    /// Reads the links until `pending` subscriptions are confirmed (waking
    /// calls for messages that arrive meanwhile), within the timeout.
    fn confirm(&self, links: &mut HashMap<String, Link>, mut pending: usize) -> Result<(), Stop> {
        let deadline = Instant::now() + self.timeout.max(Duration::from_millis(100));
        while pending > 0 {
            if Instant::now() >= deadline {
                return Err(Stop::Failed);
            }
            for link in links.values_mut() {
                link.conn
                    .set_read_timeout(Some(TURN))
                    .map_err(|_| Stop::Failed)?;
                match link.conn.recv_response() {
                    Ok(value) => match event(&value) {
                        Event::Subscribed(channel) => {
                            link.channels.insert(channel);
                            pending = pending.saturating_sub(1);
                        }
                        Event::Message(channel, payload) => self.registry.wake(&channel, &payload),
                        Event::Refused => {
                            // MOVED: the slot map is stale. Try again after
                            // it was read.
                            self.shards.stale();
                            return Err(Stop::Failed);
                        }
                        Event::Unsubscribed(_) | Event::Other => {}
                    },
                    Err(e) if e.is_timeout() => {}
                    Err(_) => return Err(Stop::Failed),
                }
            }
        }
        Ok(())
    }
}

/// The wanted channels grouped by the shard master that owns each (its
/// `host:port`), and a client for each such master.
struct Placement<'w> {
    channels: HashMap<String, Vec<&'w String>>,
    clients: HashMap<String, redis::Client>,
}

/// Unsubscribes, on every link, the channels no longer placed on its
/// shard (nobody waits for them, or their slot moved), and drops the links
/// left with nothing to do.
fn unsubscribe_elsewhere(
    links: &mut HashMap<String, Link>,
    place: &HashMap<String, Vec<&String>>,
) -> Result<(), Stop> {
    for (addr, link) in links.iter_mut() {
        let keep: HashSet<&String> = place.get(addr).into_iter().flatten().copied().collect();
        let gone: Vec<String> = link
            .channels
            .iter()
            .filter(|c| !keep.contains(c))
            .cloned()
            .collect();
        for channel in gone {
            let cmd = redis::cmd("SUNSUBSCRIBE")
                .arg(&channel)
                .get_packed_command();
            if link.conn.send_packed_command(&cmd).is_err() {
                return Err(Stop::Failed);
            }
            link.channels.remove(&channel);
        }
    }
    links.retain(|addr, link| place.contains_key(addr) || !link.channels.is_empty());
    Ok(())
}

/// Sends `SSUBSCRIBE` on `link` for each of `channels` not subscribed
/// there yet; the number sent, each to be confirmed.
fn subscribe_missing(link: &mut Link, channels: &[&String]) -> Result<usize, Stop> {
    let mut sent = 0;
    for channel in channels {
        if link.channels.contains(*channel) {
            continue;
        }
        let cmd = redis::cmd("SSUBSCRIBE").arg(*channel).get_packed_command();
        if link.conn.send_packed_command(&cmd).is_err() {
            return Err(Stop::Failed);
        }
        sent += 1;
    }
    Ok(sent)
}

/// Reads a subscriber connection's message, in RESP2 or RESP3 form.
fn event(value: &Value) -> Event {
    let text = |v: Option<&Value>| match v {
        Some(Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        Some(Value::SimpleString(s)) => Some(s.clone()),
        _ => None,
    };
    let payload = |v: Option<&Value>| match v {
        Some(Value::BulkString(b)) => b.clone(),
        _ => super::UNTAGGED.to_vec(),
    };
    match value {
        Value::ServerError(_) => Event::Refused,
        Value::Push { kind, data } => {
            let Some(channel) = text(data.first()) else {
                return Event::Other;
            };
            match kind {
                PushKind::SMessage => Event::Message(channel, payload(data.get(1))),
                PushKind::SSubscribe => Event::Subscribed(channel),
                PushKind::SUnsubscribe => Event::Unsubscribed(channel),
                _ => Event::Other,
            }
        }
        Value::Array(items) => {
            let (Some(kind), Some(channel)) = (text(items.first()), text(items.get(1))) else {
                return Event::Other;
            };
            match kind.as_str() {
                "smessage" => Event::Message(channel, payload(items.get(2))),
                "ssubscribe" => Event::Subscribed(channel),
                "sunsubscribe" => Event::Unsubscribed(channel),
                _ => Event::Other,
            }
        }
        _ => Event::Other,
    }
}
