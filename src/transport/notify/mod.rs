//! Release notifications: waiters learn that a lock was released instead of
//! sleeping a random delay.
//!
//! The release script publishes on the resource's channel on every instance
//! where it deleted the lock. Each client keeps one subscriber connection per
//! instance, in one thread per instance, shared by all its waiting calls:
//! a waiter registers the channel, the subscriber threads subscribe to it
//! and acknowledge, and the first message for the channel wakes the waiter.
//! Subscriber threads hold no connection while nobody waits.
//!
//! A Redis Cluster position announces with sharded pub/sub instead
//! (`SPUBLISH` on the shard that owns the resource's slot, where a classic
//! `PUBLISH` would be sent to every node): its subscriber thread keeps a
//! connection to each shard master that owns a wanted channel
//! (`sharded.rs`).

mod sharded;

pub(crate) use sharded::Shards;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use parking_lot::Mutex;

/// How often a subscriber with active subscriptions looks for new waiters
/// while no message arrives.
const POLL: Duration = Duration::from_millis(2);

/// Pause before reconnecting to an instance that failed.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

struct Waiter {
    id: u64,
    wake: Sender<()>,
    subscribed: Sender<()>,
    /// An observer (an election's `observe()`) is woken by every message
    /// and takes no turn: lock calls neither queue behind it nor lose a
    /// wake-up to it.
    observer: bool,
}

#[derive(Default)]
struct Registry {
    channels: Mutex<HashMap<String, Vec<Waiter>>>,
    next_id: AtomicU64,
    /// Bumped on every change of `channels`, so subscribers only look at
    /// the registry when something changed.
    version: AtomicU64,
    /// Registered watches, so the lock path can skip the mutex when nobody
    /// waits (the common, uncontended case).
    waiting: AtomicUsize,
}

/// Where a position's release announcements are heard.
// One per position, once per client.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Source {
    /// A standalone server: `SUBSCRIBE` there.
    Server(redis::Client),
    /// A Redis Cluster: `SSUBSCRIBE` on the shard of each channel.
    Cluster(std::sync::Arc<dyn Shards>),
}

pub(crate) struct Notifier {
    registry: Arc<Registry>,
    kicks: Vec<Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl Notifier {
    /// One subscriber thread per instance client; `connect_timeout` bounds
    /// a connection set-up, `timeout` every command after it.
    pub fn start(
        sources: Vec<Source>,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> std::io::Result<Self> {
        let registry = Arc::new(Registry::default());
        let mut kicks = Vec::new();
        let mut threads = Vec::new();
        for (index, source) in sources.into_iter().enumerate() {
            let (kick_tx, kick_rx) = crossbeam_channel::bounded(1);
            let registry = Arc::clone(&registry);
            let builder = std::thread::Builder::new().name(format!("redfence-subscriber-{index}"));
            let handle = match source {
                Source::Server(client) => {
                    let subscriber = Subscriber {
                        client,
                        connect_timeout,
                        timeout,
                        registry,
                        kicks: kick_rx,
                        acked: HashSet::new(),
                    };
                    builder.spawn(move || subscriber.run())?
                }
                Source::Cluster(shards) => {
                    let subscriber = sharded::ShardedSubscriber::new(
                        shards,
                        connect_timeout,
                        timeout,
                        registry,
                        kick_rx,
                    );
                    builder.spawn(move || subscriber.run())?
                }
            };
            kicks.push(kick_tx);
            threads.push(handle);
        }
        Ok(Notifier {
            registry,
            kicks,
            threads,
        })
    }

    /// True when calls of this client already wait for `channel`.
    pub fn has_waiters(&self, channels: &[&str]) -> bool {
        if self.registry.waiting.load(Ordering::Acquire) == 0 {
            return false;
        }
        let registered = self.registry.channels.lock();
        channels.iter().any(|c| {
            registered
                .get(*c)
                .is_some_and(|waiters| waiters.iter().any(|w| !w.observer))
        })
    }

    /// Registers interest in `channels` (a release on any of them wakes the
    /// call) until the returned watch is dropped.
    pub fn watch(&self, channels: &[&str]) -> Watch<'_> {
        self.register(channels, false)
    }

    /// Registers an observer of `channels`: woken by every message on them,
    /// without taking a turn from the lock calls that wait there.
    pub fn observe(&self, channels: &[&str]) -> Watch<'_> {
        self.register(channels, true)
    }

    fn register(&self, channels: &[&str], observer: bool) -> Watch<'_> {
        let (wake_tx, wake) = crossbeam_channel::bounded(1);
        let (sub_tx, subscribed) = crossbeam_channel::bounded(self.kicks.len());
        let id = self.registry.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut registered = self.registry.channels.lock();
            for channel in channels {
                // One waiter under several channels: subscribers acknowledge
                // it once per instance, and any of its channels wakes it.
                registered
                    .entry(channel.to_string())
                    .or_default()
                    .push(Waiter {
                        id,
                        wake: wake_tx.clone(),
                        subscribed: sub_tx.clone(),
                        observer,
                    });
            }
        }
        self.registry.waiting.fetch_add(1, Ordering::Release);
        self.registry.version.fetch_add(1, Ordering::Release);
        for kick in &self.kicks {
            let _ = kick.try_send(());
        }
        Watch {
            registry: &self.registry,
            channels: channels.iter().map(|c| c.to_string()).collect(),
            id,
            wake,
            subscribed,
            observer,
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        // Disconnected kick channels are the stop signal.
        self.kicks.clear();
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}

/// One waiting call's registration.
pub(crate) struct Watch<'a> {
    registry: &'a Registry,
    channels: Vec<String>,
    id: u64,
    wake: Receiver<()>,
    subscribed: Receiver<()>,
    observer: bool,
}

impl Watch<'_> {
    /// The channel a notification arrives on, for `select!`.
    pub fn wake_signal(&self) -> &Receiver<()> {
        &self.wake
    }

    /// Waits until `count` instances subscribed to the channel, the
    /// deadline, or `stop` disconnecting (a cancel). After that, a release
    /// on those instances cannot go unseen.
    pub fn wait_subscribed(&self, count: usize, deadline: Instant, stop: Option<&Receiver<()>>) {
        for _ in 0..count {
            if !receive_until(&self.subscribed, deadline, stop) {
                return;
            }
        }
    }

    /// Waits for a release notification until `deadline`, or `stop`
    /// disconnecting (a cancel); true if one came.
    pub fn wait_released(&self, deadline: Instant, stop: Option<&Receiver<()>>) -> bool {
        receive_until(&self.wake, deadline, stop)
    }

    /// Hands a release this call was woken for, and could not use, to the
    /// next call in line after it on each of its channels (none goes back
    /// to an earlier one, so a release travels down the line once). A set
    /// refused for another member's sake leaves the released one free for
    /// a call that wants only that.
    pub fn pass_on(&self) {
        let channels = self.registry.channels.lock();
        for channel in &self.channels {
            let Some(waiters) = channels.get(channel) else {
                continue;
            };
            if let Some(next) = waiters.iter().skip_while(|w| w.id != self.id).nth(1) {
                let _ = next.wake.try_send(());
            }
        }
    }

    /// Forgets notifications that arrived before now; true if there was
    /// one.
    pub fn clear(&self) -> bool {
        let mut any = false;
        while self.wake.try_recv().is_ok() {
            any = true;
        }
        any
    }
}

/// Waits for a message on `rx` until `deadline` or until `stop`
/// disconnects; true if a message came.
fn receive_until(rx: &Receiver<()>, deadline: Instant, stop: Option<&Receiver<()>>) -> bool {
    let Some(stop) = stop else {
        return rx.recv_deadline(deadline).is_ok();
    };
    let timeout = deadline.saturating_duration_since(Instant::now());
    crossbeam_channel::select! {
        recv(rx) -> message => message.is_ok(),
        recv(stop) -> _ => false,
        default(timeout) => false,
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut channels = self.registry.channels.lock();
        // A wake-up this call did not use goes to the next in line (of each
        // of its channels: it cannot tell which one announced it).
        // (An observer's wake-ups are its own: the turn went elsewhere.)
        let unused = !self.observer && self.wake.try_recv().is_ok();
        for channel in &self.channels {
            if let Some(waiters) = channels.get_mut(channel) {
                waiters.retain(|w| w.id != self.id);
                if unused {
                    if let Some(next) = waiters.iter().find(|w| !w.observer) {
                        let _ = next.wake.try_send(());
                    }
                }
                if waiters.is_empty() {
                    channels.remove(channel);
                }
            }
        }
        self.registry.waiting.fetch_sub(1, Ordering::Release);
        self.registry.version.fetch_add(1, Ordering::Release);
        // Subscriber threads unsubscribe lazily, at their next poll.
    }
}

struct Subscriber {
    client: redis::Client,
    connect_timeout: Duration,
    timeout: Duration,
    registry: Arc<Registry>,
    kicks: Receiver<()>,
    /// Waiters this instance already confirmed its subscription to.
    acked: HashSet<u64>,
}

/// The life of a subscriber thread: no connection while nobody waits,
/// `serve` while somebody does, a pause after it failed (`failed` is told
/// first), until the client stops.
fn subscriber_life(
    registry: &Registry,
    kicks: &Receiver<()>,
    mut serve: impl FnMut() -> Stop,
    failed: impl Fn(),
) {
    loop {
        while registry.channels.lock().is_empty() {
            if kicks.recv().is_err() {
                return;
            }
        }
        match serve() {
            Stop::Shutdown => return,
            Stop::Idle => {}
            Stop::Failed => {
                failed();
                if let Err(crossbeam_channel::RecvTimeoutError::Disconnected) =
                    kicks.recv_timeout(RECONNECT_PAUSE)
                {
                    return;
                }
            }
        }
    }
}

impl Subscriber {
    fn run(mut self) {
        let (registry, kicks) = (Arc::clone(&self.registry), self.kicks.clone());
        subscriber_life(&registry, &kicks, || self.serve(), || {});
    }

    /// Runs one subscriber connection until nobody waits, it fails, or the
    /// client stops.
    fn serve(&mut self) -> Stop {
        let Ok(mut conn) =
            crate::transport::connection::connect(&self.client, self.connect_timeout)
        else {
            return Stop::Failed;
        };
        if conn.set_write_timeout(Some(self.timeout)).is_err() {
            return Stop::Failed;
        }
        let mut pubsub = conn.as_pubsub();
        let mut subscribed: HashSet<String> = HashSet::new();
        let mut seen_version = None;
        self.acked.clear();
        loop {
            match self.kicks.try_recv() {
                Ok(()) | Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => return Stop::Shutdown,
            }
            if let Some((wanted, version)) = self.registry.wanted_since(seen_version) {
                if wanted.is_empty() {
                    return Stop::Idle;
                }
                if pubsub.set_read_timeout(Some(self.timeout)).is_err() {
                    return Stop::Failed;
                }
                for channel in wanted.difference(&subscribed) {
                    if pubsub.subscribe(channel).is_err() {
                        return Stop::Failed;
                    }
                }
                for channel in subscribed.difference(&wanted) {
                    if pubsub.unsubscribe(channel).is_err() {
                        return Stop::Failed;
                    }
                }
                subscribed = wanted;
                self.acknowledge();
                if pubsub.set_read_timeout(Some(POLL)).is_err() {
                    return Stop::Failed;
                }
                seen_version = Some(version);
            }
            match pubsub.get_message() {
                Ok(msg) => self.wake(msg.get_channel_name()),
                Err(e) if e.is_timeout() => {}
                Err(_) => return Stop::Failed,
            }
        }
    }

    fn acknowledge(&mut self) {
        self.registry.acknowledge(&mut self.acked);
    }

    fn wake(&self, channel: &str) {
        self.registry.wake(channel);
    }
}

impl Registry {
    /// Tells new waiters that this instance now watches their channel;
    /// `acked` holds the waiters it told before.
    fn acknowledge(&self, acked: &mut HashSet<u64>) {
        let channels = self.channels.lock();
        let mut live = HashSet::new();
        for waiter in channels.values().flatten() {
            live.insert(waiter.id);
            if acked.insert(waiter.id) {
                let _ = waiter.subscribed.try_send(());
            }
        }
        acked.retain(|id| live.contains(id));
    }

    /// Wakes the longest-waiting call for the channel only: the calls of
    /// one client then take turns instead of all rushing at the lock and
    /// splitting the vote among themselves.
    /// Observers are all woken.
    fn wake(&self, channel: &str) {
        let channels = self.channels.lock();
        let Some(waiters) = channels.get(channel) else {
            return;
        };
        if let Some(first) = waiters.iter().find(|w| !w.observer) {
            let _ = first.wake.try_send(());
        }
        for observer in waiters.iter().filter(|w| w.observer) {
            let _ = observer.wake.try_send(());
        }
    }

    /// The channels some call waits for and the registry's version they
    /// belong to, if the version is not `seen` (a subscriber polls this
    /// every few milliseconds: the set is read only when it changed).
    fn wanted_since(&self, seen: Option<u64>) -> Option<(HashSet<String>, u64)> {
        let version = self.version.load(Ordering::Acquire);
        if seen == Some(version) {
            return None;
        }
        let wanted = self.channels.lock().keys().cloned().collect();
        Some((wanted, version))
    }
}

enum Stop {
    Shutdown,
    Idle,
    Failed,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notifier() -> Notifier {
        Notifier::start(Vec::new(), Duration::from_secs(1), Duration::from_secs(1))
            .expect("no subscriber thread to start")
    }

    /// A call whose wait ends while it holds a wake-up it did not use
    /// passes it to the next in line, who would otherwise sit out the
    /// fallback poll although the lock is free.
    #[test]
    fn an_unused_wake_up_goes_to_the_next_waiter() {
        let notifier = notifier();
        let first = notifier.watch(&["released:{r}"]);
        let second = notifier.watch(&["released:{r}"]);
        notifier.registry.wake("released:{r}");
        assert!(
            second.wake_signal().try_recv().is_err(),
            "only the longest-waiting call is woken"
        );
        drop(first);
        assert!(
            second.wake_signal().try_recv().is_ok(),
            "the wake-up the first call left unused was not passed on"
        );
    }

    /// A wake-up the call used is its own: the next in line is not woken
    /// for a release that was already taken.
    #[test]
    fn a_used_wake_up_is_not_passed_on() {
        let notifier = notifier();
        let first = notifier.watch(&["released:{r}"]);
        let second = notifier.watch(&["released:{r}"]);
        notifier.registry.wake("released:{r}");
        assert!(first.wake_signal().try_recv().is_ok());
        drop(first);
        assert!(second.wake_signal().try_recv().is_err());
    }
}
