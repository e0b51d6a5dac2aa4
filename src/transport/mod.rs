//! How requests reach the instances: one connection per instance (TLS and
//! the native-command probe included), a worker thread per instance that
//! batches requests, the fan-out of one request to every voter and the
//! count of their answers, Redis Cluster routing, and the release
//! notifications waiters listen to. Uses `protocol` below it, nothing
//! above (see docs/architecture.md).

pub(crate) mod cluster;
pub(crate) mod connection;
pub(crate) mod instance;
pub(crate) mod notify;
pub(crate) mod outgoing;
pub(crate) mod round;
#[cfg(feature = "tls-rustls")]
pub(crate) mod tls;
pub(crate) mod voter;
