//! The watchdog: one thread per client that extends live leases before they
//! run low, and marks a lease lost the moment it can no longer be kept.
//!
//! Leases wait in a timer heap keyed by when they next need attention, so a
//! tick touches only the leases that are due, whatever the number of live
//! guards. The extension rounds of all due leases are sent at once and then
//! counted, so many leases cost one round trip, not one each.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::lock::lease::{try_begin_extend, Lease, Renewal};
use crate::lock::shared::Shared;
use crate::LossReason;

/// Longest sleep when nothing is due; the stop signal wakes it earlier.
const IDLE: Duration = Duration::from_secs(60);

pub(crate) struct Watchdog {
    tx: Option<Sender<Weak<Lease>>>,
    handle: Option<JoinHandle<()>>,
}

impl Watchdog {
    pub fn start(shared: Arc<Shared>) -> std::io::Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let handle = std::thread::Builder::new()
            .name("redfence-watchdog".to_string())
            .spawn(move || Runner::new(shared).run(rx))?;
        Ok(Watchdog {
            tx: Some(tx),
            handle: Some(handle),
        })
    }

    /// Starts watching a new lease.
    pub fn watch(&self, lease: &Arc<Lease>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Arc::downgrade(lease));
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Disconnecting the channel is the stop signal.
        drop(self.tx.take());
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

struct Due {
    at: Instant,
    seq: u64,
    lease: Weak<Lease>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct Runner {
    shared: Arc<Shared>,
    heap: BinaryHeap<Reverse<Due>>,
    seq: u64,
}

impl Runner {
    fn new(shared: Arc<Shared>) -> Self {
        Runner {
            shared,
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }

    fn run(mut self, rx: Receiver<Weak<Lease>>) {
        loop {
            let timeout = self.heap.peek().map_or(IDLE, |Reverse(d)| {
                d.at.saturating_duration_since(Instant::now())
            });
            match rx.recv_timeout(timeout) {
                Ok(lease) => {
                    self.schedule_next(lease);
                    for lease in rx.try_iter() {
                        self.schedule_next(lease);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            self.tick();
        }
    }

    fn schedule(&mut self, at: Instant, lease: Weak<Lease>) {
        self.seq += 1;
        self.heap.push(Reverse(Due {
            at,
            seq: self.seq,
            lease,
        }));
    }

    /// Decides when a lease next needs attention: its renewal time if the
    /// watchdog extends it, else the end of its validity (to signal loss).
    fn schedule_next(&mut self, weak: Weak<Lease>) {
        let Some(lease) = weak.upgrade() else { return };
        let Some(r) = lease.renewal() else { return };
        let may_extend = self.may_extend(&lease, r.extensions);
        if lease.auto_extend && !may_extend {
            lease.stop_extending();
        }
        let at = if lease.auto_extend && may_extend {
            self.renewal_time(&r)
        } else {
            r.valid_until
        };
        self.schedule(at, weak);
    }

    /// When to send a lease's next extension round.
    fn renewal_time(&self, r: &Renewal) -> Instant {
        if r.failed_rounds > 0 {
            return Instant::now() + self.retry_interval(r.ttl);
        }
        // Renew once a third of the believed TTL has passed since the last
        // grant or extension: of what the validity rests on, not of what
        // the last round asked for, or a round believed for less than it
        // asked would be due at once, forever.
        let validity = r.believed.saturating_sub(self.shared.cfg.drift(r.believed));
        let renewed = r.valid_until.checked_sub(validity).unwrap_or(r.valid_until);
        (renewed + r.believed / 3).min(r.valid_until)
    }

    fn may_extend(&self, lease: &Lease, extensions: u32) -> bool {
        let cfg = &self.shared.cfg;
        cfg.max_extensions.is_none_or(|max| extensions < max)
            && cfg
                .max_lease_lifetime
                .is_none_or(|max| lease.acquired_at.elapsed() < max)
    }

    fn retry_interval(&self, ttl: Duration) -> Duration {
        (ttl / 20).max(self.shared.cfg.instance_timeout)
    }

    fn tick(&mut self) {
        let now = Instant::now();
        let mut due = Vec::new();
        while self.heap.peek().is_some_and(|Reverse(d)| d.at <= now) {
            if let Some(Reverse(d)) = self.heap.pop() {
                if let Some(lease) = d.lease.upgrade() {
                    due.push(lease);
                }
            }
        }
        if due.is_empty() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let mut pending = Vec::new();
        for lease in &due {
            let capped = lease.auto_extend
                && lease
                    .renewal()
                    .is_some_and(|r| !self.may_extend(lease, r.extensions));
            if capped {
                lease.stop_extending();
            }
            // Marks the lease lost if its validity is over.
            if lease.refresh_loss().is_some() || !lease.auto_extend || capped {
                continue;
            }
            let Some(r) = lease.renewal() else { continue };
            // An explicit extend in progress makes this round unnecessary.
            if let Ok(Some(p)) = try_begin_extend(&shared, lease, r.ttl) {
                pending.push((lease, p));
            }
        }
        for (lease, p) in pending {
            if p.finish(&shared).is_err() {
                self.after_failure(lease);
            }
        }
        for lease in due {
            self.schedule_next(Arc::downgrade(&lease));
        }
    }

    /// Gives up on a lease once its retries are spent or the next retry
    /// could not finish within its validity.
    /// Decided on one reading of the lease: a manual `extend()` that
    /// succeeds meanwhile resets its failed rounds and its validity.
    fn after_failure(&self, lease: &Lease) {
        let cfg = &self.shared.cfg;
        let now = Instant::now();
        lease.mark_lost_if(LossReason::ExtensionFailed, |r| {
            let out_of_retries = r.failed_rounds > cfg.extend_retries;
            let next_retry_end = now + self.retry_interval(r.ttl) + cfg.instance_timeout;
            out_of_retries || next_retry_end >= r.valid_until
        });
    }
}
