//! What every operation shares: the settings and the instances. It sits
//! below the operations (client, acquire, lease, watchdog), so a lock call
//! walks down the floors without climbing back.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::lock::config::Config;
use crate::transport::connection::Warmup;
use crate::transport::round::Instances;

/// Settings and the instances' workers, shared by the client's clones, its
/// guards and its watchdog.
pub(crate) struct Shared {
    pub cfg: Config,
    pub instances: Instances,
    /// The first connections of a new client, which its first calls wait for.
    pub warmup: Arc<Warmup>,
    /// The slots this client's permits hold, or its calls are taking, per
    /// semaphore (a slot once per permit or call): a permit call guesses a
    /// slot outside them and takes it in one round.
    pub permits_held: Mutex<HashMap<String, Vec<u32>>>,
}

impl Shared {
    pub(crate) fn new(cfg: Config, instances: Instances, warmup: Arc<Warmup>) -> Self {
        Shared {
            cfg,
            instances,
            warmup,
            permits_held: Mutex::new(HashMap::new()),
        }
    }

    /// A permit of this client took `slot` of `semaphore`.
    pub(crate) fn permit_taken(&self, semaphore: &str, slot: u32) {
        let mut held = self.permits_held.lock();
        held.entry(semaphore.to_string()).or_default().push(slot);
    }

    /// A permit of this client on `slot` of `semaphore` is gone.
    pub(crate) fn permit_gone(&self, semaphore: &str, slot: u32) {
        let mut held = self.permits_held.lock();
        if let Some(slots) = held.get_mut(semaphore) {
            if let Some(at) = slots.iter().position(|s| *s == slot) {
                slots.swap_remove(at);
            }
            if slots.is_empty() {
                held.remove(semaphore);
            }
        }
    }

    /// Claims for a call the first of `slots` that no permit or call of
    /// this client holds, if any; [`permit_gone`](Self::permit_gone) gives
    /// it back.
    pub(crate) fn claim_slot(
        &self,
        semaphore: &str,
        mut slots: impl Iterator<Item = u32>,
    ) -> Option<u32> {
        let mut held = self.permits_held.lock();
        let taken = held.entry(semaphore.to_string()).or_default();
        let slot = slots.find(|slot| !taken.contains(slot));
        taken.extend(slot);
        if taken.is_empty() {
            held.remove(semaphore);
        }
        slot
    }

    /// Deadline of one round of requests started now.
    pub(crate) fn round_deadline(&self) -> Instant {
        Instant::now() + self.cfg.instance_timeout
    }
}
