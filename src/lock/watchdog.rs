//! The watchdog: one thread per client that extends live leases before they
//! run low, and marks a lease lost the moment it can no longer be kept.
//!
//! Leases wait in a timer map keyed by when they next need attention, so a
//! tick touches only the leases that are due, whatever the number of live
//! guards. The extension rounds of all due leases are sent at once and then
//! counted, so many leases cost one round trip, not one each.
//!
//! A new lease is filed by the thread that took it, under the map's lock;
//! the watchdog thread is woken only when the new lease is due before
//! everything it already sleeps for. Waking it for every lease cost a
//! tenth of a one-thread client's CPU per lock + release (see
//! docs/performance.md).

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::lock::lease::{try_begin_extend, Lease, Renewal};
use crate::lock::moment::Moment;
use crate::lock::shared::Shared;
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Condvar, Mutex};
use crate::LossReason;

/// Longest sleep when nothing is due; the stop signal wakes it earlier.
const IDLE: Duration = Duration::from_secs(60);

pub(crate) struct Watchdog {
    core: Arc<Core>,
    handle: Option<JoinHandle<()>>,
}

impl Watchdog {
    pub(crate) fn start(shared: Arc<Shared>) -> std::io::Result<Self> {
        let core = Arc::new(Core {
            shared,
            timers: TimerMap::new(),
        });
        let runner = Runner {
            core: Arc::clone(&core),
        };
        let handle = thread::Builder::new()
            .name("redfence-watchdog".to_string())
            .spawn(move || runner.run())?;
        Ok(Watchdog {
            core,
            handle: Some(handle),
        })
    }

    /// Starts watching a new lease.
    pub(crate) fn watch(&self, lease: &Arc<Lease>) {
        self.core.schedule_next(lease);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.core.timers.stop();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// The leases by when they next need attention, and the watchdog thread's
/// sleep until the first is due: filed by any thread, taken by the
/// watchdog's. Generic over what it files so that the loom checks below
/// run it without a client.
struct TimerMap<T> {
    timers: Mutex<Timers<T>>,
    /// Signalled when an entry is due before everything else, or on stop.
    changed: Condvar,
}

impl<T> TimerMap<T> {
    fn new() -> Self {
        TimerMap {
            timers: Mutex::new(Timers {
                due: BTreeMap::new(),
                seq: 0,
                stopping: false,
            }),
            changed: Condvar::new(),
        }
    }

    /// Files `entry` for `at`; wakes the watchdog thread only if it is
    /// due before everything the thread already sleeps for.
    fn file(&self, at: Moment, entry: Weak<T>) {
        let mut timers = self.timers.lock();
        let first = timers.next_due().is_none_or(|next| at < next);
        timers.seq += 1;
        let seq = timers.seq;
        timers.due.insert((at, seq), entry);
        drop(timers);
        if first {
            self.changed.notify_one();
        }
    }

    /// Ends [`run`](Self::run), whether it sleeps or ticks.
    fn stop(&self) {
        self.timers.lock().stopping = true;
        self.changed.notify_all();
    }

    /// Until stopped: hands the entries due (those still alive) to `tick`,
    /// without the lock, and sleeps until the next is due or one is filed
    /// before it.
    fn run(&self, mut tick: impl FnMut(Vec<Arc<T>>)) {
        let mut timers = self.timers.lock();
        while !timers.stopping {
            let now = Moment::now();
            let due = timers.take_due(now);
            if due.is_empty() {
                let until = timers.next_due().unwrap_or(now + IDLE);
                self.changed
                    .wait_for(&mut timers, until.saturating_duration_since(now));
                continue;
            }
            drop(timers);
            tick(due);
            timers = self.timers.lock();
        }
    }
}

/// The entries by when they next need attention (a sequence number keeps
/// equal times apart).
struct Timers<T> {
    due: BTreeMap<(Moment, u64), Weak<T>>,
    seq: u64,
    stopping: bool,
}

impl<T> Timers<T> {
    /// Takes out every entry due by `now` that is still alive.
    fn take_due(&mut self, now: Moment) -> Vec<Arc<T>> {
        let later = self.due.split_off(&(now, u64::MAX));
        let due = std::mem::replace(&mut self.due, later);
        due.into_values().filter_map(|w| w.upgrade()).collect()
    }

    fn next_due(&self) -> Option<Moment> {
        self.due.keys().next().map(|(at, _)| *at)
    }
}

/// What the client's threads and the watchdog thread share.
struct Core {
    shared: Arc<Shared>,
    timers: TimerMap<Lease>,
}

impl Core {
    /// Decides when a lease next needs attention: its renewal time if the
    /// watchdog extends it, else the end of its validity (to signal loss).
    fn schedule_next(&self, lease: &Arc<Lease>) {
        let Some(r) = lease.renewal() else { return };
        let may_extend = self.may_extend(lease, r.extensions);
        if lease.auto_extend && !may_extend {
            lease.stop_extending();
        }
        let at = if lease.auto_extend && may_extend {
            self.renewal_time(&r)
        } else {
            r.valid_until
        };
        self.timers.file(at, Arc::downgrade(lease));
    }

    /// When to send a lease's next extension round.
    fn renewal_time(&self, r: &Renewal) -> Moment {
        if r.failed_rounds > 0 {
            return Moment::now() + self.retry_interval(r.ttl);
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

    /// Extends the due leases (or marks them lost), then files each
    /// for its next turn.
    fn tick(&self, due: Vec<Arc<Lease>>) {
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
        for lease in &due {
            self.schedule_next(lease);
        }
    }

    /// Gives up on a lease once its retries are spent or the next retry
    /// could not finish within its validity.
    /// Decided on one reading of the lease: a manual `extend()` that
    /// succeeds meanwhile resets its failed rounds and its validity.
    fn after_failure(&self, lease: &Lease) {
        let cfg = &self.shared.cfg;
        let now = Moment::now();
        lease.mark_lost_if(LossReason::ExtensionFailed, |r| {
            let out_of_retries = r.failed_rounds > cfg.extend_retries;
            let next_retry_end = now + self.retry_interval(r.ttl) + cfg.instance_timeout;
            out_of_retries || next_retry_end >= r.valid_until
        });
    }
}

struct Runner {
    core: Arc<Core>,
}

impl Runner {
    fn run(self) {
        let core = &self.core;
        core.timers.run(|due| core.tick(due));
    }
}

/// Schedule exploration of the timer map (`--cfg loom`, src/sync.rs):
/// client threads file entries while the watchdog thread takes and
/// sleeps. What the watchdog does with a due lease (extend it, or mark it
/// lost) is the lease tests' (`tests/lease.rs`), on real servers.
#[cfg(all(test, loom))]
mod loom_checks {
    use super::*;
    use crate::sync::explore;

    /// What the watchdog thread ticked, and a signal for each tick.
    #[derive(Default)]
    struct Ticked {
        entries: Mutex<Vec<u32>>,
        grew: Condvar,
    }

    /// The watchdog thread over `map`, recording each entry it ticks.
    fn start(map: &Arc<TimerMap<u32>>, ticked: &Arc<Ticked>) -> JoinHandle<()> {
        let (map, ticked) = (Arc::clone(map), Arc::clone(ticked));
        thread::Builder::new()
            .name("redfence-watchdog".to_string())
            .spawn(move || {
                map.run(|due| {
                    ticked.entries.lock().extend(due.iter().map(|e| **e));
                    ticked.grew.notify_all();
                })
            })
            .expect("a loom thread")
    }

    /// Two client threads each file an entry due at once, while the
    /// watchdog thread sleeps, takes or ticks: both are ticked (loom
    /// reports a deadlock if the thread sleeps on with one filed).
    #[test]
    fn loom_checks_every_entry_filed_due_is_ticked_whoever_files_it() {
        explore(|| {
            let map = Arc::new(TimerMap::new());
            let ticked = Arc::new(Ticked::default());
            let watchdog = start(&map, &ticked);
            let entries: Vec<Arc<u32>> = vec![Arc::new(1), Arc::new(2)];
            let clients: Vec<_> = entries
                .iter()
                .map(|entry| {
                    let (map, entry) = (Arc::clone(&map), Arc::downgrade(entry));
                    thread::spawn(move || map.file(Moment::now(), entry))
                })
                .collect();
            for client in clients {
                client.join().expect("client");
            }
            let mut seen = ticked.entries.lock();
            while seen.len() < entries.len() {
                ticked.grew.wait_for(&mut seen, IDLE);
            }
            seen.sort_unstable();
            assert_eq!(*seen, [1, 2], "each entry ticked once");
            drop(seen);
            map.stop();
            watchdog.join().expect("watchdog");
        });
    }

    /// Stopping ends the watchdog thread whether it sleeps, takes or
    /// ticks when the stop comes, while a client files an entry.
    #[test]
    fn loom_checks_stop_ends_the_thread_whatever_it_is_doing() {
        explore(|| {
            let map = Arc::new(TimerMap::new());
            let ticked = Arc::new(Ticked::default());
            let watchdog = start(&map, &ticked);
            let entry = Arc::new(7);
            let client = {
                let (map, entry) = (Arc::clone(&map), Arc::downgrade(&entry));
                thread::spawn(move || map.file(Moment::now(), entry))
            };
            map.stop();
            watchdog.join().expect("watchdog");
            client.join().expect("client");
            assert!(ticked.entries.lock().len() <= 1);
        });
    }
}
