//! The algorithm: the settings a client runs with and what every operation
//! shares, one lock call's retry loop (`call.rs`), an attempt to acquire
//! (one resource or a set), the lease and its
//! extension and release, the watchdog that keeps leases alive, and the
//! pauses between attempts. Uses `transport` and `protocol` below it, and
//! nothing of the public API above (see docs/architecture.md).

pub(crate) mod acquire;
pub(crate) mod call;
pub(crate) mod config;
pub(crate) mod lease;
pub(crate) mod moment;
pub(crate) mod retry;
pub(crate) mod shared;
pub(crate) mod watchdog;
