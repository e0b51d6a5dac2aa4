//! What every operation shares: the settings and the instances. It sits
//! below the operations (client, acquire, lease, watchdog), so a lock call
//! walks down the floors without climbing back.

use std::sync::Arc;
use std::time::Instant;

use crate::lock::config::Config;
use crate::transport::connection::Warmup;
use crate::transport::quorum::Instances;

/// Settings and the instances' workers, shared by the client's clones, its
/// guards and its watchdog.
pub(crate) struct Shared {
    pub cfg: Config,
    pub instances: Instances,
    /// The first connections of a new client, which its first calls wait for.
    pub warmup: Arc<Warmup>,
}

impl Shared {
    pub fn new(cfg: Config, instances: Instances, warmup: Arc<Warmup>) -> Self {
        Shared {
            cfg,
            instances,
            warmup,
        }
    }

    /// Deadline of one round of requests started now.
    pub fn round_deadline(&self) -> Instant {
        Instant::now() + self.cfg.instance_timeout
    }
}
