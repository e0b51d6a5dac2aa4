//! # redfence
//!
//! A distributed lock for programs without async: the Redlock algorithm over
//! N independent Redis masters, with fencing tokens that increase strictly
//! with each grant of a resource.
//!
//! ```no_run
//! use redfence::{Error, LockOptions, Redlock};
//! use std::time::Duration;
//!
//! let locks = Redlock::builder([
//!     "redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003",
//!     "redis://127.0.0.1:7004", "redis://127.0.0.1:7005",
//! ])
//! .build()?;
//!
//! // Blocks, retrying until the wait budget (10 s by default) is spent.
//! let guard = locks.lock("invoice:42")?;
//! let token: u64 = guard.token().get(); // send it with every write
//! assert!(guard.is_held());
//! guard.release()?; // or just drop it
//!
//! // Exactly one attempt.
//! match locks.try_lock("invoice:42") {
//!     Ok(_guard) => { /* work */ }
//!     Err(Error::Contended { .. }) => { /* someone else holds it */ }
//!     Err(e) => return Err(e),
//! }
//!
//! let opts = LockOptions::new().ttl(Duration::from_secs(5)).wait(Duration::from_millis(300));
//! let _guard = locks.lock_with("invoice:42", opts)?;
//! # let _ = token;
//! # Ok::<(), Error>(())
//! ```
//!
//! ## How it works
//!
//! Each lock call sends one script to every instance at once, through one
//! long-lived worker thread per instance: it sets the lock (`NX`, with the
//! TTL) and gives the resource its next fencing token, computed there from
//! the instance's counter and clock. The call returns as soon as the
//! outcome is decided: a quorum of N/2 + 1 granted, or too many refused or
//! failed. The lock is valid for `ttl − elapsed − drift`, drift being
//! `ttl × 0.01 + 2 ms`. A failed attempt releases on every instance and
//! retries after a random pause, or when the holder's release is announced,
//! until the wait budget ends.
//!
//! The fencing token is the quorum-th smallest answer among the granting
//! instances (one that a quorum of them does not exceed: an instance whose
//! clock runs ahead cannot push it up alone). If fewer than a quorum
//! answered at least it, a second round raises the counter to at least the
//! token on a quorum before the grant stands, so the next grant, whose
//! quorum overlaps this one, counts above it. Every token is at least the
//! instance's clock in microseconds, so a counter that was lost or came
//! back older (a restart, a snapshot, a promoted replica) cannot repeat one.
//! Any request may land late, twice or never; nothing it carries can create
//! or lower a counter, an extension never shortens a lease, and a clean-up
//! that overtakes its acquire voids it. `docs/protocol.md` has the
//! argument, `tests/model_fencing.rs` the model check.
//!
//! [`Redlock::lock_all`] holds several resources together, all or nothing,
//! with a token per resource; no call ever holds part of a set, so
//! overlapping sets cannot deadlock.
//!
//! While a guard lives, the client's watchdog thread extends its lease once
//! a third of the TTL has passed. If extensions fail a few times in a row, or
//! a quorum no longer holds the lease, the guard is marked lost.
//!
//! ## Losing a lease
//!
//! A lease can end while its holder still works: a majority of instances
//! stop answering, or the process is paused past its validity. The guard
//! tells, in the form that suits the program:
//!
//! ```no_run
//! use crossbeam_channel::select;
//! use std::time::Duration;
//!
//! # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
//! let guard = locks.lock("migration:orders")?;
//! let lost = guard.loss_signal();
//! let ticker = crossbeam_channel::tick(Duration::from_millis(100));
//! for batch in 0..1000 {
//!     select! {
//!         recv(lost) -> reason => { eprintln!("stopping at batch {batch}: {reason:?}"); break }
//!         recv(ticker) -> _ => {}
//!     }
//!     guard.ensure_held()?;          // the cheap check right before a write
//!     // write(batch, guard.token())?;
//! }
//! # Ok::<(), redfence::Error>(())
//! ```
//!
//! `is_held()` turns false no later than the moment the lease may have
//! expired (it compares the validity deadline with the monotonic clock on
//! every call), and the watchdog marks the lease lost as soon as a quorum
//! says it is not ours or its extension retries are spent;
//! [`LockGuard::wait_lost`] blocks until then.
//!
//! ## Key layout
//!
//! With the default prefix `redfence:`, resource `R` uses, on each instance,
//! `redfence:lock:{R}` (the lock: a random value, then `:` and the holder's
//! identity, with the lease's TTL),
//! `redfence:fence:{R}` (the fencing counter; expires after 24 h unused),
//! the pub/sub channel `redfence:released:{R}`, and, for a failed attempt
//! with value `V` whose clean-up arrived before its acquire,
//! `redfence:void:{R}:V` (expires with the TTL); an election also uses
//! `redfence:term:{R}` (its leader's term, see `docs/coordination.md`).
//!
//! ## Redis Cluster positions
//!
//! Any position may be a Redis Cluster ([`Position::cluster`], or a
//! `redis+cluster://` URL) that votes once per lock: each resource's keys
//! share the hash tag `{R}`, so one shard answers for it, and capacity
//! grows with the shards. `docs/cluster.md` has the routing, the failure
//! model and the topology to use.
//!
//! ## Coordination
//!
//! [`RedlockBuilder::identity`] names a client to others ([`Error::Contended`]
//! and [`Redlock::holder`] report it), [`LockOptions::hold_at_least`] runs a
//! scheduled job once across machines, and [`Redlock::election`] elects a
//! leader whose term is a fencing token. `docs/coordination.md` has all
//! three.
//!
//! ## Observability
//!
//! Feature `metrics` records lock health through the `metrics` facade
//! (`redfence_acquire_total{outcome}`, `redfence_lease_lost_total{reason}`,
//! `redfence_instance_errors_total{instance, kind}`, …; see
//! `describe_metrics`), feature `tracing` gives each lock call a span and
//! warns of lost leases, failed extensions and failing instances. The
//! README lists every series and event, with suggested alerts.
//!
//! ## What the user must still do
//!
//! A lease can end while its holder still works (a pause longer than the
//! validity, a majority of instances lost). Check
//! [`LockGuard::ensure_held`] before each protected write and send
//! [`LockGuard::token`] with it, to a store that refuses lower tokens: see
//! [`fenced_set`] for a Redis store and [`sql`] for PostgreSQL.
// One `unsafe` call in all: reading CLOCK_BOOTTIME (src/lock/moment.rs).
#![deny(unsafe_code)]
#![deny(missing_docs)]
#![deny(unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acl;
mod address;
mod builder;
mod cancel;
mod client;
mod doctor;
mod election;
mod error;
mod fair;
mod fenced;
mod guard;
mod holder;
mod lock;
mod options;
mod position;
mod protocol;
mod rwlock;
mod semaphore;
pub mod sql;
mod sync;
mod telemetry;
#[cfg(feature = "tls-rustls")]
mod tls_error;
mod token;
mod transport;

#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

/// Compiles the README's examples, so the front door never rots.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// Compiles the coordination guide's examples too.
#[cfg(doctest)]
#[doc = include_str!("../docs/coordination.md")]
struct CoordinationDoctests;

/// And the Redis Cluster guide's.
#[cfg(doctest)]
#[doc = include_str!("../docs/cluster.md")]
struct ClusterDoctests;

/// The channel crate of [`LockGuard::loss_signal`], re-exported so that
/// `select!` works without matching versions by hand.
pub use crossbeam_channel;
/// The Redis client crate, re-exported for [`fenced_set`] and for
/// connection URLs.
pub use redis;

pub use acl::{acl_cluster_rules, acl_rules, ACL_CLUSTER_COMMANDS, ACL_COMMANDS};
pub use address::IntoInstance;
pub use builder::RedlockBuilder;
pub use cancel::Cancel;
pub use client::Redlock;
pub use doctor::{DoctorReport, Finding, InstanceReport, Severity, Verdict};
pub use election::{Election, LeaderEvent, LeaderInfo, Leadership};
pub use error::{Error, InstanceError, InstanceErrorKind, LossReason};
#[cfg(feature = "testing")]
#[doc(hidden)]
pub use fair::{FairJoin, JoinObserver};
pub use fair::{FairLock, FAIR_HEARTBEAT, MAX_FAIR_HEARTBEAT, MIN_FAIR_HEARTBEAT};
pub use fenced::{fenced_get, fenced_get_shared, fenced_set};
pub use guard::{LockGuard, MultiGuard, Permit, ReadGuard, WriteGuard};
pub use holder::{Holder, RwHolders};
pub use lock::config::MAX_TTL;
pub use options::LockOptions;
pub use position::Position;
pub use protocol::clock::{ClockOffset, MAX_CLOCK_OFFSET};
pub use protocol::keys::{MAX_RESOURCES, MAX_RESOURCE_LEN};
pub use protocol::value::MAX_IDENTITY_LEN;
pub use rwlock::RwLock;
pub use semaphore::{Semaphore, MAX_PERMITS};
pub use token::FencingToken;

#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use telemetry::describe_metrics;

/// Random server replies for the property tests of what decodes them.
#[cfg(test)]
pub(crate) mod arbitrary {
    use proptest::prelude::*;
    use redis::Value;

    /// Any reply shape: integers, strings (bulk and status), nil, OK, and
    /// arrays of them, nested a few levels.
    pub(crate) fn reply() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Nil),
            Just(Value::Okay),
            any::<i64>().prop_map(Value::Int),
            proptest::collection::vec(any::<u8>(), 0..24).prop_map(Value::BulkString),
            "[ -~]{0,12}".prop_map(Value::SimpleString),
            // Digits, as TIME, counters and scores come.
            "[0-9]{0,20}".prop_map(|s| Value::BulkString(s.into_bytes())),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            proptest::collection::vec(inner, 0..6).prop_map(Value::Array)
        })
    }

    /// A request's replies: one to three of them.
    pub(crate) fn replies() -> impl Strategy<Value = Vec<Value>> {
        proptest::collection::vec(reply(), 0..3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}
    fn clone<T: Clone>() {}

    #[test]
    fn public_types_can_cross_threads() {
        send_sync::<Redlock>();
        clone::<Redlock>();
        send_sync::<LockGuard>();
        send_sync::<MultiGuard>();
        send_sync::<Error>();
        send_sync::<InstanceError>();
        send_sync::<FencingToken>();
        send_sync::<LockOptions>();
        send_sync::<Election>();
        send_sync::<Leadership>();
        send_sync::<Holder>();
        send_sync::<LeaderInfo>();
        send_sync::<LeaderEvent>();
    }
}
