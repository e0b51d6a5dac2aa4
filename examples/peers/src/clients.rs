//! The lock clients under test behind one trait, so that every scenario
//! drives them through the same loop: redfence (this repository, sync),
//! rslock (async on tokio, driven with `Handle::block_on` from plain
//! threads) and redlock-rs (sync; opens a new connection per command).

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use plotters::style::RGBColor;
use redfence::{LockOptions, Redlock};

use crate::bench_support::{next_resource, Hold, Sample};

/// Every crate's lease: long enough that none expires during a run.
pub const TTL: Duration = Duration::from_secs(30);

/// A lock client under test.
pub trait Locker: Send + Sync {
    fn name(&self) -> &'static str;
    /// Its line's colour in the chart.
    fn color(&self) -> RGBColor;
    /// One attempt (with the crate's own retries) and a release.
    fn lock_release(&self, resource: &str) -> Result<(), String>;
    /// Waits for the lock the crate's usual blocking way, holds it for
    /// `hold`, releases it; returns when each of that happened.
    fn contend(&self, resource: &str, hold: Duration) -> Result<Hold, String>;
}

/// The three clients, each with its default settings, on the instances at
/// `urls`, in the order the tables list them; and rslock's manager, for
/// driving it as tokio tasks too.
pub fn lockers(
    urls: &[String],
    runtime: &tokio::runtime::Runtime,
) -> (Vec<Arc<dyn Locker>>, rslock::LockManager) {
    let manager = rslock::LockManager::new(urls.to_vec());
    let lockers: Vec<Arc<dyn Locker>> = vec![
        Arc::new(Redfence(
            Redlock::builder(urls.to_vec())
                .build()
                .expect("redfence client"),
        )),
        Arc::new(Rslock {
            manager: manager.clone(),
            runtime: runtime.handle().clone(),
        }),
        Arc::new(RedlockRs(redlock::RedLock::new(urls.to_vec()))),
    ];
    (lockers, manager)
}

struct Redfence(Redlock);

impl Locker for Redfence {
    fn name(&self) -> &'static str {
        "redfence"
    }

    fn color(&self) -> RGBColor {
        RGBColor(214, 39, 40)
    }

    fn lock_release(&self, resource: &str) -> Result<(), String> {
        let opts = LockOptions::new().auto_extend(false);
        let guard = self
            .0
            .lock_with(resource, opts)
            .map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())
    }

    fn contend(&self, resource: &str, hold: Duration) -> Result<Hold, String> {
        let called = Instant::now();
        let opts = LockOptions::new().auto_extend(false);
        let guard = self
            .0
            .lock_with(resource, opts)
            .map_err(|e| e.to_string())?;
        let acquired = Instant::now();
        thread::sleep(hold);
        guard.release().map_err(|e| e.to_string())?;
        Ok(Hold::released_now(called, acquired))
    }
}

struct RedlockRs(redlock::RedLock);

impl Locker for RedlockRs {
    fn name(&self) -> &'static str {
        "redlock-rs 2.0"
    }

    fn color(&self) -> RGBColor {
        RGBColor(44, 160, 44)
    }

    fn lock_release(&self, resource: &str) -> Result<(), String> {
        match self.0.lock(resource.as_bytes(), TTL.as_millis() as usize) {
            Ok(Some(lock)) => {
                self.0.unlock(&lock);
                Ok(())
            }
            Ok(None) => Err("not acquired".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn contend(&self, resource: &str, hold: Duration) -> Result<Hold, String> {
        let called = Instant::now();
        let guard = self
            .0
            .acquire(resource.as_bytes(), TTL.as_millis() as usize)
            .map_err(|e| e.to_string())?;
        let acquired = Instant::now();
        thread::sleep(hold);
        drop(guard); // unlocks
        Ok(Hold::released_now(called, acquired))
    }
}

struct Rslock {
    manager: rslock::LockManager,
    runtime: tokio::runtime::Handle,
}

impl Locker for Rslock {
    fn name(&self) -> &'static str {
        "rslock 0.10"
    }

    fn color(&self) -> RGBColor {
        RGBColor(31, 119, 180)
    }

    fn lock_release(&self, resource: &str) -> Result<(), String> {
        self.runtime.block_on(async {
            let lock = self
                .manager
                .lock(resource, TTL)
                .await
                .map_err(|e| e.to_string())?;
            self.manager.unlock(&lock).await;
            Ok(())
        })
    }

    fn contend(&self, resource: &str, hold: Duration) -> Result<Hold, String> {
        self.runtime.block_on(async {
            let called = Instant::now();
            let guard = self
                .manager
                .acquire(resource, TTL)
                .await
                .map_err(|e| e.to_string())?;
            let acquired = Instant::now();
            thread::sleep(hold);
            guard.release().await;
            Ok(Hold::released_now(called, acquired))
        })
    }
}

/// rslock's native shape for one caller: one tokio task doing `ops` lock +
/// release in turn, each op's latency measured inside the task; an op that
/// takes longer than `give_up` ends the run (`Err` with the ops done), and
/// so does `budget` running out.
pub fn rslock_task_single(
    runtime: &tokio::runtime::Runtime,
    manager: &rslock::LockManager,
    ops: usize,
    give_up: Duration,
    budget: Duration,
) -> Result<Sample, usize> {
    let manager = manager.clone();
    let task = runtime.spawn(async move {
        let (mut latencies, mut errors) = (Vec::with_capacity(ops), 0usize);
        let start = Instant::now();
        for done in 0..ops {
            let name = next_resource("task1");
            let t0 = Instant::now();
            let op = async {
                let lock = manager.lock(name.as_str(), TTL).await?;
                manager.unlock(&lock).await;
                Ok::<(), rslock::LockError>(())
            };
            match tokio::time::timeout(give_up, op).await {
                Ok(Ok(())) => latencies.push(t0.elapsed()),
                Ok(Err(_)) => errors += 1,
                Err(_) => return Err(done),
            }
            if start.elapsed() > budget {
                break;
            }
        }
        Ok(Sample::new(latencies, start.elapsed(), errors))
    });
    runtime.block_on(task).expect("rslock task panicked")
}

/// rslock's native shape: `tasks` tokio tasks on the runtime.
pub fn rslock_tasks(
    runtime: &tokio::runtime::Runtime,
    manager: &rslock::LockManager,
    tasks: usize,
    duration: Duration,
) -> Sample {
    runtime.block_on(async {
        let start = Instant::now();
        let end = start + duration;
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                let manager = manager.clone();
                tokio::spawn(async move {
                    let (mut latencies, mut errors) = (Vec::new(), 0usize);
                    while Instant::now() < end {
                        let name = next_resource("task");
                        let t0 = Instant::now();
                        match manager.lock(name.as_str(), TTL).await {
                            Ok(lock) => {
                                manager.unlock(&lock).await;
                                latencies.push(t0.elapsed());
                            }
                            Err(_) => errors += 1,
                        }
                    }
                    (latencies, errors)
                })
            })
            .collect();
        let mut latencies = Vec::new();
        let mut errors = 0;
        for h in handles {
            let (l, e) = h.await.expect("rslock task panicked");
            latencies.extend(l);
            errors += e;
        }
        Sample::new(latencies, start.elapsed(), errors)
    })
}
