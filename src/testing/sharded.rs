//! A real Redis Cluster ([`ShardedCluster`]): N masters sharing the 16384
//! hash slots, optionally with replicas, on free loopback ports.
//!
//! Redlock runs on independent masters ([`RedisServers`](super::RedisServers)),
//! but users point clients at Redis Cluster too, where a key lives on the
//! one master that owns its hash slot and that owner changes while clients
//! run: an operator moves a slot (clients see `ASK`, then `MOVED`), a master
//! fails and its replica takes over. A mock gets exactly those moments
//! wrong, so the harness builds a real cluster with the commands an
//! operator would use, and lets a test move slots and fail masters over at
//! the moment it chooses.
//!
//! The cluster is built by hand rather than with `redis-cli --cluster
//! create`, which refuses fewer than three masters: slots are assigned with
//! `CLUSTER ADDSLOTSRANGE`, nodes introduced with `CLUSTER MEET`, replicas
//! attached with `CLUSTER REPLICATE`, and a start returns only once every
//! node reports `cluster_state:ok` and the same slot map, so a test never
//! races the gossip. Every wait is bounded and fails naming the node that
//! held it up and quoting its log.
//!
//! With [`ServerOptions::tls`] the nodes serve TLS only, share one test CA
//! ([`ShardedCluster::pki`]) and speak TLS among themselves (cluster bus,
//! replication, `MIGRATE`), as managed Redis in cluster mode with TLS does:
//! [`ShardedCluster::seed_urls`] are then `rediss://` URLs, and slot maps
//! and redirects name the TLS ports.

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::pki::TestPki;
use super::server::{RedisServer, ServerOptions};
use super::servers::RedisServers;

/// The number of hash slots of a Redis Cluster; [`key_slot`] is below it.
pub const SLOT_COUNT: u16 = 16384;

/// Bound of the start-up waits: joining, replication, agreement. Gossip
/// settles within a second or two (a fresh master also waits 2 s before it
/// declares its state ok); the rest is headroom for a loaded machine.
const SETUP_DEADLINE: Duration = Duration::from_secs(20);
/// Bound of the waits after a slot migration or a failover.
const CONVERGE_DEADLINE: Duration = Duration::from_secs(20);
/// Bound of moving the keys of one slot.
const MIGRATE_DEADLINE: Duration = Duration::from_secs(30);
/// `MIGRATE`'s own timeout, in milliseconds.
const MIGRATE_TIMEOUT_MS: &str = "5000";
/// Keys moved per `MIGRATE`.
const MIGRATE_BATCH: usize = 100;
const POLL: Duration = Duration::from_millis(20);
/// Lines of a node's log quoted when a wait on it fails.
const LOG_LINES: usize = 20;

/// The hash slot of `key` in a Redis Cluster: CRC16 (XMODEM) of the key
/// modulo 16384, where a key with a hash tag (a `{`, then a `}` with at
/// least one byte between them) hashes only the tag, so that
/// `{user1000}.following` and `{user1000}.followers` share a slot.
///
/// A pure function, the same as the server's `CLUSTER KEYSLOT`.
///
/// The same function the client routes with.
pub fn key_slot(key: impl AsRef<[u8]>) -> u16 {
    crate::protocol::slot::key_slot(key.as_ref())
}

/// A real Redis Cluster of N masters (and, with
/// [`start_with_replicas`](Self::start_with_replicas), replicas of each),
/// each node a [`RedisServer`] started with
/// [`ServerOptions::cluster_enabled`] on `127.0.0.1` and a free port. The
/// masters split the slots evenly in index order (master 0 owns the lowest
/// slots). Dropping it kills every node.
///
/// Master and replica indices name roles, not processes: after
/// [`failover`](Self::failover) of replica `r` of master `i`, `master(i)`
/// is the promoted node and `replica(r)` the old master (which rejoins as a
/// replica of the new one once it runs again). When the cluster promotes a
/// replica by itself (its master silent for longer than the 2 s node
/// timeout), the roles follow as soon as a method asks the cluster who owns
/// a slot ([`master_of_slot`](Self::master_of_slot),
/// [`wait_converged`](Self::wait_converged)).
///
/// All methods take `&self`, so a test can migrate slots or fail masters
/// over from another thread while clients run. Methods that are not `try_`
/// forms panic with a message naming the node and, for a wait that runs
/// out, quoting its log. Nodes that are stopped ([`RedisServer::stop`]) or
/// killed are left out of every wait: they cannot answer.
///
/// ```no_run
/// use redfence::testing::{key_slot, ShardedCluster};
///
/// let cluster = ShardedCluster::start(3);
/// let seeds: Vec<String> = cluster.seed_urls();
/// // Hand `seeds` to a cluster client, then move its key elsewhere:
/// let slot = key_slot("{job}:lock");
/// let to = (cluster.master_of_slot(slot) + 1) % cluster.len();
/// cluster.migrate_slot(slot, to);
/// assert_eq!(cluster.master_for_key("{job}:lock"), to);
/// ```
#[derive(Debug)]
pub struct ShardedCluster {
    /// Every node: the masters as started, then the replicas.
    nodes: Vec<RedisServer>,
    /// Node ids by node index; kept across restarts (in `nodes.conf`).
    ids: Vec<String>,
    /// For replica index `r`: the index of its master.
    replica_master: Vec<usize>,
    roles: Mutex<Roles>,
}

/// Which node plays which role, as node indices.
#[derive(Debug, Clone)]
struct Roles {
    masters: Vec<usize>,
    replicas: Vec<usize>,
}

/// One entry of `CLUSTER SLOTS`, by port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SlotRange {
    start: u16,
    end: u16,
    master: u16,
    /// Sorted.
    replicas: Vec<u16>,
}

/// Why a wait is not over yet: the node that holds it up, and how.
struct NotYet {
    node: usize,
    why: String,
}

impl ShardedCluster {
    /// Starts a cluster of `masters` masters with default options.
    ///
    /// # Panics
    ///
    /// If `masters` is 0 or the cluster does not come up; the message names
    /// the node and quotes its log.
    pub fn start(masters: usize) -> ShardedCluster {
        Self::start_with(masters, ServerOptions::default())
    }

    /// Starts a cluster of `masters` masters with default options.
    ///
    /// Fails as [`try_start_with_replicas`](Self::try_start_with_replicas).
    pub fn try_start(masters: usize) -> io::Result<ShardedCluster> {
        Self::try_start_with_replicas(masters, 0, ServerOptions::default())
    }

    /// Starts a cluster of `masters` masters, each started with `options`
    /// ([`ServerOptions::cluster_enabled`] forced on).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(masters: usize, options: ServerOptions) -> ShardedCluster {
        Self::start_full(masters, 0, options)
    }

    /// Starts a cluster of `masters` masters with `replicas_per_master`
    /// replicas each, for tests of failover: replica `r` replicates master
    /// `r / replicas_per_master`.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with_replicas(masters: usize, replicas_per_master: usize) -> ShardedCluster {
        Self::start_full(masters, replicas_per_master, ServerOptions::default())
    }

    fn start_full(masters: usize, replicas_per_master: usize, options: ServerOptions) -> Self {
        match Self::try_start_with_replicas(masters, replicas_per_master, options) {
            Ok(cluster) => cluster,
            Err(e) => panic!(
                "could not start a Redis Cluster of {masters} masters with \
                 {replicas_per_master} replicas each: {e}"
            ),
        }
    }

    /// Starts a cluster of `masters` masters with `replicas_per_master`
    /// replicas each, every node started with `options`
    /// ([`ServerOptions::cluster_enabled`] forced on), and waits until every
    /// replica is in sync and every node reports `cluster_state:ok` and the
    /// full slot map.
    ///
    /// With [`ServerOptions::tls`] (and optionally
    /// [`ServerOptions::tls_auth_clients`]) every node serves TLS only with
    /// certificates of one test CA ([`pki`](Self::pki)), talks TLS to the
    /// others on the cluster bus, for replication and for `MIGRATE`, and
    /// announces its TLS port; the harness's own connections use the test
    /// CA and client certificate.
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`] for 0 masters, as
    /// [`RedisServer::try_start_with`] if a node does not start (with
    /// [`io::ErrorKind::Unsupported`] for TLS and a server built without
    /// it), and with
    /// [`io::ErrorKind::TimedOut`] if the cluster does not form within 20 s;
    /// the message names the node and quotes its log.
    pub fn try_start_with_replicas(
        masters: usize,
        replicas_per_master: usize,
        mut options: ServerOptions,
    ) -> io::Result<ShardedCluster> {
        if masters == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a Redis Cluster needs at least one master",
            ));
        }
        options.cluster_enabled = true;
        let total = masters + masters * replicas_per_master;
        let nodes = RedisServers::try_start_with(total, options)?.into_servers();
        let mut cluster = ShardedCluster {
            nodes,
            ids: Vec::new(),
            replica_master: (0..masters * replicas_per_master)
                .map(|r| r / replicas_per_master)
                .collect(),
            roles: Mutex::new(Roles {
                masters: (0..masters).collect(),
                replicas: (masters..total).collect(),
            }),
        };
        cluster.ids = (0..total)
            .map(|n| cluster.node_query::<String>(n, redis::cmd("CLUSTER").arg("MYID")))
            .collect::<io::Result<_>>()?;
        cluster.form(masters, replicas_per_master)?;
        Ok(cluster)
    }

    /// Assigns the slots, joins the nodes, attaches the replicas and waits
    /// until all agree.
    fn form(&self, masters: usize, replicas_per_master: usize) -> io::Result<()> {
        let deadline = Instant::now() + SETUP_DEADLINE;
        let ranges = even_ranges(masters);
        for (m, &(start, end)) in ranges.iter().enumerate() {
            self.node_query::<()>(
                m,
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(start)
                    .arg(end),
            )?;
        }
        for n in 1..self.nodes.len() {
            let node = &self.nodes[n];
            let mut meet = redis::cmd("CLUSTER");
            meet.arg("MEET").arg("127.0.0.1").arg(node.port());
            // The bus is not on port + 10000 (see RedisServer::cluster_port).
            if let Some(bus) = node.cluster_port() {
                meet.arg(bus);
            }
            self.node_query::<()>(0, &meet)?;
        }
        // A replica can only follow a master it has heard of through the
        // gossip MEET started.
        for r in 0..self.replica_master.len() {
            let node = masters + r;
            let master_id = &self.ids[self.replica_master[r]];
            self.wait_until(deadline, "the replicas to attach", || {
                self.node_query::<()>(node, redis::cmd("CLUSTER").arg("REPLICATE").arg(master_id))
                    .map_err(|e| NotYet {
                        node,
                        why: e.to_string(),
                    })
            })?;
        }
        for r in 0..self.replica_master.len() {
            let node = masters + r;
            let master = self.replica_master[r];
            self.wait_until(deadline, "the replicas to sync", || {
                self.check_replica_online(master, node)
            })?;
        }
        let expected: Vec<SlotRange> = ranges
            .iter()
            .enumerate()
            .map(|(m, &(start, end))| {
                let mut replicas: Vec<u16> = (0..replicas_per_master)
                    .map(|j| self.nodes[masters + m * replicas_per_master + j].port())
                    .collect();
                replicas.sort_unstable();
                SlotRange {
                    start,
                    end,
                    master: self.nodes[m].port(),
                    replicas,
                }
            })
            .collect();
        self.wait_until(deadline, "the cluster to form", || {
            self.check_agreement(Some(&expected), true).map(|_| ())
        })
    }

    /// The number of masters.
    pub fn len(&self) -> usize {
        self.roles.lock().masters.len()
    }

    /// Always `false`: a cluster has at least one master.
    pub fn is_empty(&self) -> bool {
        self.roles.lock().masters.is_empty()
    }

    /// Master `i`.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub fn master(&self, i: usize) -> &RedisServer {
        let n = self.roles.lock().masters[i];
        &self.nodes[n]
    }

    /// All masters, in index order.
    pub fn masters(&self) -> Vec<&RedisServer> {
        let roles = self.roles.lock().clone();
        roles.masters.iter().map(|&n| &self.nodes[n]).collect()
    }

    /// Replica `r` (of master [`master_of_replica(r)`](Self::master_of_replica)).
    ///
    /// # Panics
    ///
    /// If there is no replica `r`.
    pub fn replica(&self, r: usize) -> &RedisServer {
        let n = self.roles.lock().replicas[r];
        &self.nodes[n]
    }

    /// All replicas, in index order; empty without
    /// [`start_with_replicas`](Self::start_with_replicas).
    pub fn replicas(&self) -> Vec<&RedisServer> {
        let roles = self.roles.lock().clone();
        roles.replicas.iter().map(|&n| &self.nodes[n]).collect()
    }

    /// The index of the master that replica `r` replicates.
    ///
    /// # Panics
    ///
    /// If there is no replica `r`.
    pub fn master_of_replica(&self, r: usize) -> usize {
        self.replica_master[r]
    }

    /// The masters' URLs (as [`RedisServer::url`] gives them: `rediss://`
    /// with [`ServerOptions::tls`]), in index order: seeds for a cluster
    /// client.
    pub fn seed_urls(&self) -> Vec<String> {
        self.masters().into_iter().map(RedisServer::url).collect()
    }

    /// The certificates all nodes share, with [`ServerOptions::tls`]: one
    /// test CA, whose server certificate names `127.0.0.1` (the address
    /// the nodes announce) and `localhost`.
    pub fn pki(&self) -> Option<&TestPki> {
        self.nodes.first().and_then(RedisServer::pki)
    }

    /// What a client of this TLS cluster needs: the test CA and the client
    /// certificate (required with [`ServerOptions::tls_auth_clients`]).
    /// `None` without [`ServerOptions::tls`].
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn tls_certificates(&self) -> Option<redis::TlsCertificates> {
        self.pki().map(|pki| pki.certificates(true))
    }

    /// The cluster node id of master `i` (`CLUSTER MYID`, read at start-up;
    /// a node keeps its id across restarts).
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub fn node_id(&self, i: usize) -> String {
        let n = self.roles.lock().masters[i];
        self.ids[n].clone()
    }

    /// The cluster node id of replica `r`.
    ///
    /// # Panics
    ///
    /// If there is no replica `r`.
    pub fn replica_node_id(&self, r: usize) -> String {
        let n = self.roles.lock().replicas[r];
        self.ids[n].clone()
    }

    /// The hash slot of `key`: [`key_slot`].
    pub fn slot_of(&self, key: &str) -> u16 {
        key_slot(key)
    }

    /// The index of the master that owns `slot`, by asking a node (the
    /// first master that answers) for its `CLUSTER SLOTS`. While the slot
    /// migrates, that is the source.
    ///
    /// # Panics
    ///
    /// If no node answers, or no master owns the slot.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        self.try_master_of_slot(slot)
            .unwrap_or_else(|e| panic!("who owns slot {slot}: {e}"))
    }

    /// As [`master_of_slot`](Self::master_of_slot), failing instead of
    /// panicking.
    pub fn try_master_of_slot(&self, slot: u16) -> io::Result<usize> {
        let map = self.ask_slot_map()?;
        self.adopt(&map);
        let port = owner(&map, slot).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no node owns slot {slot} in CLUSTER SLOTS"),
            )
        })?;
        self.master_index_of_port(port).ok_or_else(|| {
            io::Error::other(format!(
                "slot {slot} is owned by 127.0.0.1:{port}, which is not a master of this cluster"
            ))
        })
    }

    /// The index of the master that owns `key`'s slot (see
    /// [`master_of_slot`](Self::master_of_slot)).
    ///
    /// # Panics
    ///
    /// As [`master_of_slot`](Self::master_of_slot).
    pub fn master_for_key(&self, key: &str) -> usize {
        self.master_of_slot(key_slot(key))
    }

    /// A key `{prefix}{n}` (the smallest such `n`) whose slot master `i`
    /// owns now, for a test that wants a key on a given master.
    ///
    /// # Panics
    ///
    /// If no node answers, or master `i` owns no slot.
    pub fn key_on(&self, i: usize, prefix: &str) -> String {
        let map = self
            .ask_slot_map()
            .unwrap_or_else(|e| panic!("a key on master {i}: {e}"));
        self.adopt(&map);
        let port = self.master(i).port();
        // 16384 slots: a million candidates miss a slot range only if it is
        // tiny and unlucky; a master owning one slot gets a hash tag instead.
        (0..1_000_000u32)
            .map(|n| format!("{prefix}{n}"))
            .find(|key| owner(&map, key_slot(key)) == Some(port))
            .or_else(|| {
                let slot = map.iter().find(|r| r.master == port)?.start;
                (0..1_000_000u32)
                    .map(|n| format!("{prefix}{{{n}}}"))
                    .find(|key| key_slot(key) == slot)
            })
            .unwrap_or_else(|| panic!("master {i} (127.0.0.1:{port}) owns no slot"))
    }

    /// Freezes master `i` with SIGSTOP ([`RedisServer::stop`]).
    ///
    /// # Panics
    ///
    /// As [`RedisServer::stop`].
    pub fn stop_master(&self, i: usize) {
        self.master(i).stop();
    }

    /// Resumes master `i` with SIGCONT ([`RedisServer::cont`]).
    ///
    /// # Panics
    ///
    /// As [`RedisServer::cont`].
    pub fn cont_master(&self, i: usize) {
        self.master(i).cont();
    }

    /// Kills master `i` with SIGKILL ([`RedisServer::kill`]);
    /// [`RedisServer::restart`] brings it back with the same node id.
    ///
    /// # Panics
    ///
    /// As [`RedisServer::kill`].
    pub fn kill_master(&self, i: usize) {
        self.master(i).kill();
    }

    /// Moves `slot` with its keys (their TTLs too) to master `to`, the way
    /// an operator reshards: `IMPORTING` on the target, `MIGRATING` on the
    /// source, `MIGRATE` of the keys in batches, then `CLUSTER SETSLOT
    /// NODE` on the target, the source and the other masters; returns once
    /// every node's `CLUSTER SLOTS` gives the slot to `to`. Clients may run
    /// meanwhile (they see `ASK` for moved keys, then `MOVED`). Nothing to
    /// do if `to` owns the slot already. For a test that acts in the middle,
    /// see [`begin_migration`](Self::begin_migration).
    ///
    /// # Panics
    ///
    /// If a step fails or the nodes do not agree within 20 s; the message
    /// names the node and quotes its log.
    pub fn migrate_slot(&self, slot: u16, to: usize) {
        if let Err(e) = self.try_migrate_slot(slot, to) {
            panic!("could not migrate slot {slot} to master {to}: {e}");
        }
    }

    /// As [`migrate_slot`](Self::migrate_slot), failing instead of
    /// panicking.
    pub fn try_migrate_slot(&self, slot: u16, to: usize) -> io::Result<()> {
        if self.try_master_of_slot(slot)? == to {
            return Ok(());
        }
        self.try_begin_migration(slot, to)?.try_finish()
    }

    /// Starts moving `slot` to master `to` and stops half-way: the target
    /// is `IMPORTING` and the source `MIGRATING`, no key has moved. The
    /// source still answers for the keys it holds and sends `ASK` for the
    /// others; [`Migration::move_key`] and [`Migration::move_keys`] move
    /// keys, [`Migration::finish`] completes the move. Dropping the
    /// [`Migration`] leaves the slot half-moved.
    ///
    /// # Panics
    ///
    /// If `to` owns the slot already or a command fails.
    pub fn begin_migration(&self, slot: u16, to: usize) -> Migration<'_> {
        self.try_begin_migration(slot, to)
            .unwrap_or_else(|e| panic!("could not begin moving slot {slot} to master {to}: {e}"))
    }

    /// As [`begin_migration`](Self::begin_migration), failing (with
    /// [`io::ErrorKind::InvalidInput`] if `to` owns the slot already)
    /// instead of panicking.
    pub fn try_begin_migration(&self, slot: u16, to: usize) -> io::Result<Migration<'_>> {
        if slot >= SLOT_COUNT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("slot {slot} is not below {SLOT_COUNT}"),
            ));
        }
        let from = self.try_master_of_slot(slot)?;
        if from == to {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("master {to} owns slot {slot} already"),
            ));
        }
        let (src, dst) = {
            let roles = self.roles.lock();
            (roles.masters[from], roles.masters[to])
        };
        self.node_query::<()>(
            dst,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(&self.ids[src]),
        )?;
        self.node_query::<()>(
            src,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(&self.ids[dst]),
        )?;
        Ok(Migration {
            cluster: self,
            slot,
            from,
            to,
            src,
            dst,
        })
    }

    /// Promotes replica `r` with `CLUSTER FAILOVER FORCE`, as an operator
    /// does when its master is down (stop the master first with
    /// [`stop_master`](Self::stop_master) to test that), and waits until
    /// the replica is a master and every node that answers gives it the old
    /// master's slots. Then `master(i)` is the promoted node and
    /// `replica(r)` the old master. The replica needs the votes of a
    /// majority of the masters: with a single master, see
    /// [`takeover`](Self::takeover).
    ///
    /// # Panics
    ///
    /// If the command fails or the failover does not complete within 20 s.
    pub fn failover(&self, r: usize) {
        if let Err(e) = self.try_failover(r) {
            panic!("could not fail over to replica {r}: {e}");
        }
    }

    /// As [`failover`](Self::failover), failing instead of panicking.
    pub fn try_failover(&self, r: usize) -> io::Result<()> {
        self.promote(r, "FORCE")
    }

    /// Promotes replica `r` with `CLUSTER FAILOVER TAKEOVER`: without any
    /// vote (so also when most masters are down), as
    /// [`failover`](Self::failover) otherwise.
    ///
    /// # Panics
    ///
    /// As [`failover`](Self::failover).
    pub fn takeover(&self, r: usize) {
        if let Err(e) = self.try_takeover(r) {
            panic!("could not take over with replica {r}: {e}");
        }
    }

    /// As [`takeover`](Self::takeover), failing instead of panicking.
    pub fn try_takeover(&self, r: usize) -> io::Result<()> {
        self.promote(r, "TAKEOVER")
    }

    fn promote(&self, r: usize, mode: &str) -> io::Result<()> {
        let i = self.replica_master[r];
        let (replica, old_master) = {
            let roles = self.roles.lock();
            (roles.replicas[r], roles.masters[i])
        };
        let old_port = self.nodes[old_master].port();
        let new_port = self.nodes[replica].port();
        let ranges: Vec<(u16, u16)> = self
            .slot_map(replica)?
            .iter()
            .filter(|range| range.master == old_port)
            .map(|range| (range.start, range.end))
            .collect();
        self.node_query::<()>(replica, redis::cmd("CLUSTER").arg("FAILOVER").arg(mode))?;
        let deadline = Instant::now() + CONVERGE_DEADLINE;
        self.wait_until(deadline, "the failover", || {
            let role: Vec<redis::Value> =
                self.node_query(replica, &redis::cmd("ROLE"))
                    .map_err(|e| NotYet {
                        node: replica,
                        why: e.to_string(),
                    })?;
            match role.first() {
                Some(redis::Value::BulkString(b)) if b == b"master" => {}
                other => {
                    return Err(NotYet {
                        node: replica,
                        why: format!("ROLE is still {other:?}"),
                    })
                }
            }
            for n in self.answering() {
                let map = self.slot_map(n).map_err(|e| NotYet {
                    node: n,
                    why: e.to_string(),
                })?;
                for &(start, end) in &ranges {
                    if owner(&map, start) != Some(new_port) || owner(&map, end) != Some(new_port) {
                        return Err(NotYet {
                            node: n,
                            why: format!(
                                "CLUSTER SLOTS does not give slots {start}-{end} to \
                                 127.0.0.1:{new_port} yet"
                            ),
                        });
                    }
                }
            }
            Ok(())
        })?;
        let mut roles = self.roles.lock();
        if roles.replicas[r] == replica {
            roles.replicas[r] = old_master;
            roles.masters[i] = replica;
        }
        Ok(())
    }

    /// Waits until every node that answers (not stopped, not killed)
    /// reports `cluster_state:ok` and the same owner for every slot in
    /// `CLUSTER SLOTS`, and updates the roles if the cluster promoted a
    /// replica by itself.
    ///
    /// # Panics
    ///
    /// If that does not happen within 20 s; the message names the node
    /// that disagrees and quotes its log.
    pub fn wait_converged(&self) {
        if let Err(e) = self.try_wait_converged() {
            panic!("the Redis Cluster did not converge: {e}");
        }
    }

    /// As [`wait_converged`](Self::wait_converged), failing with
    /// [`io::ErrorKind::TimedOut`] instead of panicking.
    pub fn try_wait_converged(&self) -> io::Result<()> {
        let deadline = Instant::now() + CONVERGE_DEADLINE;
        let mut agreed = Vec::new();
        self.wait_until(deadline, "the cluster to converge", || {
            agreed = self.check_agreement(None, false)?;
            Ok(())
        })?;
        self.adopt(&agreed);
        Ok(())
    }

    /// Node indices of the nodes that can answer now.
    fn answering(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&n| !self.nodes[n].is_stopped() && self.nodes[n].is_running())
            .collect()
    }

    /// `Ok(map)` if every answering node reports `cluster_state:ok` and the
    /// same slot map (`expected`, if given), covering every slot.
    fn check_agreement(
        &self,
        expected: Option<&[SlotRange]>,
        with_replicas: bool,
    ) -> Result<Vec<SlotRange>, NotYet> {
        let mut reference: Option<(usize, Vec<SlotRange>)> =
            expected.map(|e| (usize::MAX, e.to_vec()));
        for n in self.answering() {
            let not_yet = |why: String| NotYet { node: n, why };
            let info: String = self
                .node_query(n, redis::cmd("CLUSTER").arg("INFO"))
                .map_err(|e| not_yet(e.to_string()))?;
            let state = info
                .lines()
                .find_map(|l| l.trim().strip_prefix("cluster_state:"))
                .unwrap_or("(none)");
            if state != "ok" {
                return Err(not_yet(format!("CLUSTER INFO says cluster_state:{state}")));
            }
            let mut map = self.slot_map(n).map_err(|e| not_yet(e.to_string()))?;
            if !with_replicas {
                map.iter_mut().for_each(|range| range.replicas.clear());
            }
            if !covers_all(&map) {
                return Err(not_yet(format!(
                    "CLUSTER SLOTS does not cover every slot: {map:?}"
                )));
            }
            match &reference {
                None => reference = Some((n, map)),
                Some((_, want)) if *want == map => {}
                Some((m, want)) => {
                    let whose = match *m {
                        usize::MAX => "the expected one".to_string(),
                        m => format!("that of {}", self.name(m)),
                    };
                    return Err(not_yet(format!(
                        "CLUSTER SLOTS {map:?} differs from {whose} {want:?}"
                    )));
                }
            }
        }
        reference.map(|(_, map)| map).ok_or(NotYet {
            node: 0,
            why: "no node answers".to_string(),
        })
    }

    /// `Ok` once master node `master` reports replica node `replica` online
    /// in `INFO replication`.
    fn check_replica_online(&self, master: usize, replica: usize) -> Result<(), NotYet> {
        let info: String = self
            .node_query(master, redis::cmd("INFO").arg("replication"))
            .map_err(|e| NotYet {
                node: master,
                why: e.to_string(),
            })?;
        let port = format!("port={},", self.nodes[replica].port());
        let online = info.lines().any(|l| {
            let l = l.trim();
            (l.starts_with("slave") || l.starts_with("replica"))
                && l.contains(&port)
                && l.contains("state=online")
        });
        if online {
            Ok(())
        } else {
            Err(NotYet {
                node: replica,
                why: format!(
                    "{} does not list it online in INFO replication:\n{}",
                    self.name(master),
                    info.trim()
                ),
            })
        }
    }

    /// Polls `check` every 20 ms until it holds or `deadline` passes; then
    /// the error names the node that held it up and quotes its log.
    fn wait_until(
        &self,
        deadline: Instant,
        what: &str,
        mut check: impl FnMut() -> Result<(), NotYet>,
    ) -> io::Result<()> {
        loop {
            let not_yet = match check() {
                Ok(()) => return Ok(()),
                Err(not_yet) => not_yet,
            };
            if Instant::now() >= deadline {
                let node = not_yet.node.min(self.nodes.len() - 1);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "timed out waiting for {what}: {}: {}\n--- last {LOG_LINES} lines of \
                         its log ---\n{}",
                        self.name(node),
                        not_yet.why,
                        self.nodes[node].log_tail(LOG_LINES)
                    ),
                ));
            }
            thread::sleep(POLL);
        }
    }

    /// The slot map of the first master that answers (any node if none
    /// does).
    fn ask_slot_map(&self) -> io::Result<Vec<SlotRange>> {
        let masters = self.roles.lock().masters.clone();
        let answering = self.answering();
        let mut order: Vec<usize> = masters
            .iter()
            .copied()
            .filter(|n| answering.contains(n))
            .collect();
        order.extend(answering.iter().filter(|n| !masters.contains(n)));
        let mut last_error = io::Error::other("every node is stopped or killed");
        for n in order {
            match self.slot_map(n) {
                Ok(map) => return Ok(map),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    /// Node `n`'s `CLUSTER SLOTS`, sorted by first slot.
    fn slot_map(&self, n: usize) -> io::Result<Vec<SlotRange>> {
        let reply: Vec<redis::Value> = self.node_query(n, redis::cmd("CLUSTER").arg("SLOTS"))?;
        let mut map = reply
            .iter()
            .map(parse_slot_range)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                io::Error::other(format!(
                    "unexpected CLUSTER SLOTS reply from {}: {reply:?}",
                    self.name(n)
                ))
            })?;
        map.sort_by_key(|range| range.start);
        Ok(map)
    }

    /// Makes the roles follow promotions the cluster made by itself: a
    /// replica that owns slots in `map` swaps places with its master.
    fn adopt(&self, map: &[SlotRange]) {
        let mut roles = self.roles.lock();
        for range in map {
            let Some(r) = roles
                .replicas
                .iter()
                .position(|&n| self.nodes[n].port() == range.master)
            else {
                continue;
            };
            let i = self.replica_master[r];
            let old = roles.masters[i];
            roles.masters[i] = roles.replicas[r];
            roles.replicas[r] = old;
        }
    }

    fn master_index_of_port(&self, port: u16) -> Option<usize> {
        let roles = self.roles.lock();
        roles
            .masters
            .iter()
            .position(|&n| self.nodes[n].port() == port)
    }

    /// Node `n` by its role and address, for messages.
    fn name(&self, n: usize) -> String {
        let roles = self.roles.lock();
        let addr = self.nodes[n].addr();
        if let Some(i) = roles.masters.iter().position(|&m| m == n) {
            format!("master {i} ({addr})")
        } else if let Some(r) = roles.replicas.iter().position(|&m| m == n) {
            format!("replica {r} of master {} ({addr})", self.replica_master[r])
        } else {
            format!("node {n} ({addr})")
        }
    }

    /// Runs `cmd` on node `n` over a new connection.
    fn node_query<T: redis::FromRedisValue>(&self, n: usize, cmd: &redis::Cmd) -> io::Result<T> {
        let name = || {
            let args: Vec<String> = cmd
                .args_iter()
                .take(2)
                .map(|arg| match arg {
                    redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    _ => "?".to_string(),
                })
                .collect();
            args.join(" ")
        };
        self.nodes[n]
            .try_connection()
            .and_then(|mut con| cmd.query(&mut con))
            .map_err(|e| io::Error::other(format!("{} on {}: {e}", name(), self.name(n))))
    }
}

/// A slot half-way to another master, from
/// [`ShardedCluster::begin_migration`]: the target is `IMPORTING`, the
/// source `MIGRATING`. Clients that ask the source for a key that has moved
/// (or never existed) get `-ASK` and must send `ASKING` to the target.
/// Dropping it leaves the slot so.
#[derive(Debug)]
pub struct Migration<'a> {
    cluster: &'a ShardedCluster,
    slot: u16,
    from: usize,
    to: usize,
    /// Node indices of the source and the target.
    src: usize,
    dst: usize,
}

impl Migration<'_> {
    /// The slot being moved.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The index the source master had when the migration began.
    pub fn from(&self) -> usize {
        self.from
    }

    /// The index the target master had when the migration began.
    pub fn to(&self) -> usize {
        self.to
    }

    /// Moves one key (with its TTL) from the source to the target with
    /// `MIGRATE`; nothing if the source does not hold it.
    ///
    /// # Panics
    ///
    /// If `MIGRATE` fails, e.g. the key is in another slot.
    pub fn move_key(&self, key: &str) {
        if let Err(e) = self.try_move_key(key) {
            panic!("could not move {key:?} in slot {}: {e}", self.slot);
        }
    }

    /// As [`move_key`](Self::move_key), failing instead of panicking.
    pub fn try_move_key(&self, key: &str) -> io::Result<()> {
        if key_slot(key) != self.slot {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{key:?} is in slot {}, not in slot {}",
                    key_slot(key),
                    self.slot
                ),
            ));
        }
        self.migrate(&[key.as_bytes().to_vec()])
    }

    /// Moves every key the source holds in the slot to the target, in
    /// batches of 100 (`CLUSTER GETKEYSINSLOT`, then `MIGRATE`, which keeps
    /// TTLs), until none is left; returns how many moved. Keys clients
    /// write meanwhile land on the target (through `ASK`).
    ///
    /// # Panics
    ///
    /// If a command fails or keys remain after 30 s.
    pub fn move_keys(&self) -> usize {
        self.try_move_keys()
            .unwrap_or_else(|e| panic!("could not move the keys of slot {}: {e}", self.slot))
    }

    /// As [`move_keys`](Self::move_keys), failing instead of panicking.
    pub fn try_move_keys(&self) -> io::Result<usize> {
        let cluster = self.cluster;
        let deadline = Instant::now() + MIGRATE_DEADLINE;
        let mut moved = 0;
        loop {
            let keys: Vec<Vec<u8>> = cluster.node_query(
                self.src,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(self.slot)
                    .arg(MIGRATE_BATCH),
            )?;
            if keys.is_empty() {
                return Ok(moved);
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} still holds keys of slot {} after {MIGRATE_DEADLINE:?}, e.g. {:?}",
                        cluster.name(self.src),
                        self.slot,
                        String::from_utf8_lossy(&keys[0])
                    ),
                ));
            }
            self.migrate(&keys)?;
            moved += keys.len();
        }
    }

    /// `MIGRATE` of `keys` from the source to the target.
    fn migrate(&self, keys: &[Vec<u8>]) -> io::Result<()> {
        let cluster = self.cluster;
        let source = &cluster.nodes[self.src];
        let mut cmd = redis::cmd("MIGRATE");
        cmd.arg("127.0.0.1")
            .arg(cluster.nodes[self.dst].port())
            .arg("")
            .arg(0)
            .arg(MIGRATE_TIMEOUT_MS);
        if let Some(pw) = &source.options().password {
            cmd.arg("AUTH").arg(pw);
        }
        cmd.arg("KEYS").arg(keys);
        // OK, or NOKEY when none of the keys exists any more (expired or
        // deleted since).
        cluster.node_query::<redis::Value>(self.src, &cmd)?;
        Ok(())
    }

    /// Moves the remaining keys ([`move_keys`](Self::move_keys)), gives the
    /// slot to the target with `CLUSTER SETSLOT slot NODE` on the target,
    /// the source and the other masters that answer, and waits until every
    /// node that answers says so in `CLUSTER SLOTS`.
    ///
    /// # Panics
    ///
    /// If a command fails or the nodes do not agree within 20 s.
    pub fn finish(self) {
        let slot = self.slot;
        if let Err(e) = self.try_finish() {
            panic!("could not finish moving slot {slot}: {e}");
        }
    }

    /// As [`finish`](Self::finish), failing instead of panicking.
    pub fn try_finish(self) -> io::Result<()> {
        let cluster = self.cluster;
        self.try_move_keys()?;
        let answering = cluster.answering();
        let masters = cluster.roles.lock().masters.clone();
        let others = masters
            .iter()
            .copied()
            .filter(|&n| n != self.src && n != self.dst && answering.contains(&n));
        let dst_id = &cluster.ids[self.dst];
        for n in [self.dst, self.src].into_iter().chain(others) {
            cluster.node_query::<()>(
                n,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(self.slot)
                    .arg("NODE")
                    .arg(dst_id),
            )?;
        }
        let port = cluster.nodes[self.dst].port();
        let deadline = Instant::now() + CONVERGE_DEADLINE;
        cluster.wait_until(deadline, "the slot's new owner to be known", || {
            for n in cluster.answering() {
                let map = cluster.slot_map(n).map_err(|e| NotYet {
                    node: n,
                    why: e.to_string(),
                })?;
                let seen = owner(&map, self.slot);
                if seen != Some(port) {
                    return Err(NotYet {
                        node: n,
                        why: format!(
                            "CLUSTER SLOTS gives slot {} to {seen:?}, not to port {port}",
                            self.slot
                        ),
                    });
                }
            }
            Ok(())
        })
    }
}

/// The masters' shares of the slots: as even as can be, in index order.
fn even_ranges(masters: usize) -> Vec<(u16, u16)> {
    let total = usize::from(SLOT_COUNT);
    (0..masters)
        .map(|m| {
            let start = m * total / masters;
            let end = (m + 1) * total / masters - 1;
            (start as u16, end as u16)
        })
        .collect()
}

/// The port of the master that owns `slot` in `map`.
fn owner(map: &[SlotRange], slot: u16) -> Option<u16> {
    map.iter()
        .find(|range| range.start <= slot && slot <= range.end)
        .map(|range| range.master)
}

/// Whether the ranges of a sorted `map` cover every slot once.
fn covers_all(map: &[SlotRange]) -> bool {
    let mut next: u32 = 0;
    for range in map {
        if u32::from(range.start) != next || range.end < range.start {
            return false;
        }
        next = u32::from(range.end) + 1;
    }
    next == u32::from(SLOT_COUNT)
}

/// One `CLUSTER SLOTS` entry: `[start, end, [ip, port, id, ...], replicas...]`.
fn parse_slot_range(value: &redis::Value) -> Option<SlotRange> {
    let redis::Value::Array(fields) = value else {
        return None;
    };
    let int = |v: &redis::Value| match v {
        redis::Value::Int(i) => u16::try_from(*i).ok(),
        _ => None,
    };
    let port = |v: &redis::Value| match v {
        redis::Value::Array(node) => node.get(1).and_then(int),
        _ => None,
    };
    let start = int(fields.first()?)?;
    let end = int(fields.get(1)?)?;
    let master = port(fields.get(2)?)?;
    let mut replicas = fields[3..].iter().map(port).collect::<Option<Vec<_>>>()?;
    replicas.sort_unstable();
    Some(SlotRange {
        start,
        end,
        master,
        replicas,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_shared_evenly() {
        assert_eq!(even_ranges(1), vec![(0, 16383)]);
        assert_eq!(even_ranges(2), vec![(0, 8191), (8192, 16383)]);
        assert_eq!(
            even_ranges(3),
            vec![(0, 5460), (5461, 10921), (10922, 16383)]
        );
        let range = |start, end| SlotRange {
            start,
            end,
            master: 1,
            replicas: Vec::new(),
        };
        assert!(covers_all(&[range(0, 100), range(101, 16383)]));
        assert!(!covers_all(&[range(0, 100), range(102, 16383)]));
        assert!(!covers_all(&[range(0, 100)]));
        assert!(!covers_all(&[]));
    }

    #[test]
    fn zero_masters_is_an_error() {
        let err = ShardedCluster::try_start(0).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
