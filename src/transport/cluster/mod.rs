//! A Redis Cluster as one position of the quorum: a router that sends each
//! request to the shard master owning its slot, with one worker
//! (`instance.rs`: ordering, auto-pipelining, owed releases, timeouts) per
//! shard master.
//!
//! Every key of a request shares the resource's hash tag, so one slot, and
//! one shard, answers it: the position votes once, like a standalone
//! server. The slot map comes from `CLUSTER SLOTS`, read by a background
//! thread from the known masters or the seeds: at start, after a `MOVED`,
//! and every [`REFRESH_EVERY`]. A redirect is followed at once, by the
//! worker that got it, within the request's own deadline and at most a few
//! times (`instance.rs`): redis-rs's cluster client, which waits seconds
//! between retries, is not used on the lock path. A slot whose shard is
//! unknown or down answers "no answer" for this position, like a dead
//! standalone server; the other positions carry the quorum.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::{Mutex, RwLock};
use redis::ConnectionInfo;

use crate::error::{InstanceError, InstanceErrorKind};
use crate::protocol::clock::InstanceClock;
use crate::protocol::slot::SLOTS;
use crate::protocol::split::Split;
use crate::transport::connection::{open_client, Manager, TlsSettings, Warmup};
use crate::transport::instance::Sink;
use crate::transport::instance::{Instance, InstanceConfig, Redirect, Redirection, Request};
use crate::transport::notify::Shards;

mod gather;
mod nodes;

use gather::{Gather, Gathering, PartSink};
use nodes::{node_info, read_slots};

/// How often the slot map is read again when nothing asked for it.
const REFRESH_EVERY: Duration = Duration::from_secs(15);

/// Shortest time between two readings of the slot map: a burst of `MOVED`
/// answers (a resharding) asks for one reading, not one per request.
const MIN_REFRESH_GAP: Duration = Duration::from_millis(100);

/// Pause before reading the slot map again after a failed reading.
const FAILED_REFRESH_PAUSE: Duration = Duration::from_millis(250);

/// No shard for a slot.
const NO_SHARD: u16 = u16::MAX;

/// What starting a shard's worker needs, shared by every shard of the
/// position.
pub(crate) struct ShardSettings {
    /// The first seed: credentials, TLS and protocol for every node.
    pub template: ConnectionInfo,
    pub tls: TlsSettings,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    pub queue_capacity: usize,
    pub max_batch: usize,
    pub thread_pool: Arc<scheduled_thread_pool::ScheduledThreadPool>,
    /// One clock reading for the position: its shards' clocks all serve
    /// the proposal of new tokens (`clock.rs`).
    pub clock: Arc<InstanceClock>,
}

/// One cluster position: its router and the thread that reads the slot
/// map.
pub(crate) struct ClusterPosition {
    router: Arc<Router>,
    refresher: Option<JoinHandle<()>>,
}

struct Router {
    index: usize,
    name: String,
    seeds: Vec<ConnectionInfo>,
    settings: ShardSettings,
    topology: RwLock<Topology>,
    /// Asks the refresher for a new reading of the slot map; closed on
    /// drop, which stops it.
    refresh: Mutex<Option<Sender<()>>>,
    /// Readings of the slot map so far, to vary the node asked first.
    turn: std::sync::atomic::AtomicUsize,
    me: Weak<Router>,
}

#[derive(Default)]
struct Topology {
    /// Slot → index in `shards`, or [`NO_SHARD`].
    slots: Vec<u16>,
    /// Every shard master seen so far, kept while the client lives: a
    /// shard that left the map may still owe releases.
    shards: Vec<Shard>,
}

struct Shard {
    /// `host:port`, as the cluster announces it.
    addr: String,
    worker: Instance,
    /// Its first connection.
    warmup: Arc<Warmup>,
}

impl ClusterPosition {
    /// Starts the router of position `index`; the slot map is read in the
    /// background, and `warmup` is told once it is known and its shards'
    /// first connections were tried.
    pub(crate) fn start(
        index: usize,
        seeds: Vec<ConnectionInfo>,
        settings: ShardSettings,
        warmup: Arc<Warmup>,
    ) -> std::io::Result<Self> {
        let name = cluster_name(index, &seeds);
        let (tx, rx) = crossbeam_channel::bounded(1);
        let router = Arc::new_cyclic(|me| Router {
            index,
            name,
            seeds,
            settings,
            topology: RwLock::new(Topology {
                slots: vec![NO_SHARD; usize::from(SLOTS)],
                shards: Vec::new(),
            }),
            refresh: Mutex::new(Some(tx)),
            turn: std::sync::atomic::AtomicUsize::new(0),
            me: me.clone(),
        });
        let worker = Arc::clone(&router);
        let refresher = std::thread::Builder::new()
            .name(format!("redfence-cluster-{index}"))
            .spawn(move || worker.run(&rx, &warmup))?;
        Ok(ClusterPosition {
            router,
            refresher: Some(refresher),
        })
    }

    /// Where the position's release channels live, for its subscriber.
    pub(crate) fn shards(&self) -> Arc<dyn Shards> {
        Arc::clone(&self.router) as Arc<dyn Shards>
    }

    /// `cluster #i (seed, …)`: how the position is named where no shard is
    /// meant.
    pub(crate) fn name(&self) -> &str {
        &self.router.name
    }

    /// Queues a request on the shard that owns its slot; never blocks.
    pub(crate) fn send(&self, req: Request) {
        self.router.route(req);
    }

    /// Sends `make()` to every shard master known now, for `ping`: each
    /// shard's name and whether a request was queued.
    pub(crate) fn each_shard(&self, mut make: impl FnMut(&str) -> Request) -> Vec<String> {
        let topology = self.router.topology.read();
        let mut names = Vec::new();
        for (k, shard) in topology.shards.iter().enumerate() {
            // Masters that still own slots only.
            if !topology.slots.contains(&(k as u16)) {
                continue;
            }
            let req = make(shard.worker.name());
            shard.worker.send(req);
            names.push(shard.worker.name().to_string());
        }
        names
    }
}

impl Drop for ClusterPosition {
    fn drop(&mut self) {
        self.router.refresh.lock().take();
        if let Some(handle) = self.refresher.take() {
            let _ = handle.join();
        }
        // Outside the lock: each worker sends what it still holds (owed
        // releases) before it exits, and a redirect it follows meanwhile
        // takes the lock to find no shard.
        let shards = std::mem::take(&mut self.router.topology.write().shards);
        drop(shards);
    }
}

impl Router {
    fn route(&self, mut req: Request) {
        if req.slot.is_none() {
            if let Some(split) = req.split.take() {
                return self.route_parts(req, split);
            }
        }
        if let Some((packed, commands)) = req.cluster.take() {
            req.packed = packed;
            req.commands = commands;
        }
        let topology = self.topology.read();
        let shard = req
            .slot
            .and_then(|slot| topology.slots.get(usize::from(slot)))
            .filter(|k| **k != NO_SHARD)
            .and_then(|k| topology.shards.get(usize::from(*k)));
        match shard {
            Some(shard) => shard.worker.send(req),
            None => {
                drop(topology);
                let detail = match req.slot {
                    Some(slot) => {
                        self.ask_refresh();
                        format!(
                            "no shard master known for slot {slot} (the slot map is being read)"
                        )
                    }
                    None => "a request without a slot cannot be routed".to_string(),
                };
                req.answer(
                    self.index,
                    Err(InstanceError::new(
                        &self.name,
                        InstanceErrorKind::Connect,
                        detail,
                    )),
                );
            }
        }
    }

    /// Sends each part of a request cut along slots to its shard; the
    /// parts' answers make the request's once all are in (`Gather`).
    fn route_parts(&self, mut req: Request, split: Arc<Split>) {
        let gather = Arc::new(Gather {
            router: self.me.clone(),
            index: self.index,
            state: Mutex::new(Gathering {
                replies: vec![None; split.parts.len()],
                left: split.parts.len(),
                sink: req.sink.take(),
            }),
            split,
        });
        for (k, part) in gather.split.parts.iter().enumerate() {
            let sink: Sink = Arc::new(PartSink {
                gather: Arc::clone(&gather),
                part: k,
            });
            let sent = Request::plain(
                Arc::clone(&part.packed),
                part.commands,
                req.deadline,
                Some(sink),
            );
            self.route(sent.at_slot(part.slot).persistent(req.persistent));
        }
    }

    fn ask_refresh(&self) {
        if let Some(tx) = &*self.refresh.lock() {
            // A reading already asked for covers this one too.
            let _ = tx.try_send(());
        }
    }

    /// The shard at `addr`, started if it is new.
    fn shard_index(&self, topology: &mut Topology, addr: &str) -> Option<u16> {
        if let Some(k) = topology.shards.iter().position(|s| s.addr == addr) {
            return u16::try_from(k).ok();
        }
        let k = u16::try_from(topology.shards.len())
            .ok()
            .filter(|k| *k != NO_SHARD)?;
        let warmup = Warmup::new(1, self.settings.connect_timeout);
        let worker = self.start_shard(addr, &warmup).ok()?;
        topology.shards.push(Shard {
            addr: addr.to_string(),
            worker,
            warmup,
        });
        Some(k)
    }

    fn start_shard(&self, addr: &str, warmup: &Arc<Warmup>) -> std::io::Result<Instance> {
        let s = &self.settings;
        let info = node_info(&s.template, addr).ok_or_else(|| {
            std::io::Error::other("the cluster announced an address without a port")
        })?;
        let client = open_client(info, &s.tls).map_err(std::io::Error::other)?;
        let name = format!("cluster #{} shard {addr}", self.index);
        crate::telemetry::instance_started(&name);
        // Native commands are not probed on shards: the probe key lives in
        // one slot, which most shards would answer with MOVED.
        let manager = Manager::new(
            client,
            s.connect_timeout,
            s.timeout,
            Arc::clone(warmup),
            Arc::clone(&s.clock),
            None,
            Arc::default(),
        );
        let me: Weak<dyn Redirect> = self.me.clone();
        Instance::start(InstanceConfig {
            index: self.index,
            name,
            manager,
            timeout: s.timeout,
            queue_capacity: s.queue_capacity,
            max_batch: s.max_batch,
            thread_pool: Arc::clone(&s.thread_pool),
            clock: Arc::clone(&s.clock),
            redirect: Some(me),
            thread_name: format!("redfence-shard-{}", self.index),
        })
    }

    /// The refresher thread: reads the slot map at start, when asked, and
    /// every [`REFRESH_EVERY`], until the position is dropped.
    fn run(&self, rx: &Receiver<()>, warmup: &Warmup) {
        let mut known = self.refresh_map();
        self.wait_for_shards();
        warmup.report(known);
        let mut last = Instant::now();
        loop {
            let pause = if known {
                REFRESH_EVERY
            } else {
                FAILED_REFRESH_PAUSE
            };
            match rx.recv_timeout(pause) {
                Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            let since = last.elapsed();
            if since < MIN_REFRESH_GAP {
                // Wait out the gap, still stoppable.
                if let Err(RecvTimeoutError::Disconnected) =
                    rx.recv_timeout(MIN_REFRESH_GAP - since)
                {
                    return;
                }
            }
            known = self.refresh_map();
            last = Instant::now();
        }
    }

    /// Until the first connection of each shard was tried (or the connect
    /// timeout passed), so a new client's first calls find them up.
    fn wait_for_shards(&self) {
        let warmups: Vec<Arc<Warmup>> = self
            .topology
            .read()
            .shards
            .iter()
            .map(|s| Arc::clone(&s.warmup))
            .collect();
        // Each ends by its own deadline, the connect timeout after the
        // shard was started.
        for warmup in warmups {
            warmup.wait();
        }
    }

    /// Reads the slot map from the first node that answers: the masters
    /// known, then the seeds. False if none did.
    fn refresh_map(&self) -> bool {
        let known: Vec<String> = self
            .topology
            .read()
            .shards
            .iter()
            .map(|s| s.addr.clone())
            .collect();
        let mut candidates: Vec<ConnectionInfo> = known
            .iter()
            .filter_map(|addr| node_info(&self.settings.template, addr))
            .chain(self.seeds.iter().cloned())
            .collect();
        // Each reading starts at another node, so a frozen one (which
        // costs a whole connect timeout) is not always asked first.
        let turn = self.turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if !candidates.is_empty() {
            let by = turn % candidates.len();
            candidates.rotate_left(by);
        }
        for info in candidates {
            let Ok(ranges) = read_slots(info, &self.settings) else {
                continue;
            };
            if ranges.is_empty() {
                continue;
            }
            let mut topology = self.topology.write();
            let mut slots = vec![NO_SHARD; usize::from(SLOTS)];
            for (start, end, addr) in ranges {
                let Some(k) = self.shard_index(&mut topology, &addr) else {
                    continue;
                };
                let end = end.min(SLOTS - 1);
                for slot in start..=end {
                    slots[usize::from(slot)] = k;
                }
            }
            topology.slots = slots;
            return true;
        }
        false
    }
}

impl Shards for Router {
    fn owner(&self, slot: u16) -> Option<(String, redis::Client)> {
        let addr = {
            let topology = self.topology.read();
            let k = *topology.slots.get(usize::from(slot))?;
            topology.shards.get(usize::from(k))?.addr.clone()
        };
        let info = node_info(&self.settings.template, &addr)?;
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let client = open_client(info.set_redis_settings(resp3), &self.settings.tls).ok()?;
        Some((addr, client))
    }

    fn stale(&self) {
        self.ask_refresh();
    }
}

impl Redirect for Router {
    fn unreachable(&self) {
        self.ask_refresh();
    }

    fn reroute(&self, req: Request, from: &str) -> Option<Request> {
        let moved = {
            let topology = self.topology.read();
            req.slot
                .and_then(|slot| topology.slots.get(usize::from(slot)))
                .and_then(|k| topology.shards.get(usize::from(*k)))
                .is_some_and(|shard| shard.worker.name() != from)
        };
        if !moved {
            return Some(req);
        }
        let mut req = req;
        req.asking = false;
        self.route(req);
        None
    }

    fn redirect(&self, mut req: Request, to: Redirection) {
        match to {
            Redirection::Moved { slot, addr } => {
                {
                    let mut topology = self.topology.write();
                    if let Some(k) = self.shard_index(&mut topology, &addr) {
                        if let Some(entry) = topology.slots.get_mut(usize::from(slot)) {
                            *entry = k;
                        }
                    }
                }
                // Other slots may have moved with it.
                self.ask_refresh();
                req.asking = false;
                self.route(req);
            }
            Redirection::Ask { addr } => {
                let topology = &mut *self.topology.write();
                match self.shard_index(topology, &addr) {
                    Some(k) => {
                        req.asking = true;
                        topology.shards[usize::from(k)].worker.send(req);
                    }
                    None => req.answer(
                        self.index,
                        Err(InstanceError::new(
                            &self.name,
                            InstanceErrorKind::Connect,
                            "redirected (ASK) to a node that could not be reached",
                        )),
                    ),
                }
            }
        }
    }
}

/// `cluster #i (seed, …)`, never with credentials.
fn cluster_name(index: usize, seeds: &[ConnectionInfo]) -> String {
    let seeds: Vec<String> = seeds.iter().map(|s| s.addr().to_string()).collect();
    format!("cluster #{index} ({})", seeds.join(", "))
}
