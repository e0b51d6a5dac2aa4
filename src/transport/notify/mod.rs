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
//! A lock's release announces `1`: one release frees one lock, so it wakes
//! the longest-waiting call only, which takes turns with the others. A
//! permit's release announces a tag of its own (`slot:token`), since the
//! releases of several slots free several permits: each new tag wakes a
//! call that is not already busy with an earlier one, and the copies of a
//! tag (one per instance) wake that same call again (see
//! [`Registry::wake`]).
//!
//! A Redis Cluster position announces with sharded pub/sub instead
//! (`SPUBLISH` on the shard that owns the resource's slot, where a classic
//! `PUBLISH` would be sent to every node): its subscriber thread keeps a
//! connection to each shard master that owns a wanted channel
//! (`sharded.rs`).

#[cfg(all(test, loom))]
mod loom_checks;
mod sharded;

pub(crate) use sharded::Shards;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex};

/// How often a subscriber with active subscriptions looks for new waiters
/// while no message arrives.
const POLL: Duration = Duration::from_millis(2);

/// Pause before reconnecting to an instance that failed.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// The announcement of a release that frees one lock (every lock's): it
/// carries no tag.
pub(crate) const UNTAGGED: &[u8] = b"1";

/// Tags remembered per channel, to know a copy from another instance and
/// the call the tag went to: a copy is delivered within a release's round,
/// a few distinct releases later at most; one that comes later still wakes
/// a call for nothing, which tries once and waits again.
const TAGS_KEPT: usize = 64;

/// The tags delivered lately on one channel, each with the call it went
/// to, newest last.
type Delivered = VecDeque<(Box<[u8]>, u64)>;

/// Wake-ups queued on one call at most: a call busy with one release may
/// be handed more while every other call is busy too.
const WAKE_QUEUE: usize = 16;

/// A permit's release announcement (`slot:token`).
pub(crate) type Tag = Arc<[u8]>;

/// A wake-up: a tagged release seen for the first time (a permit freed,
/// distinct from every other), or `None` for a lock's release or a copy.
type Wake = Option<Tag>;

struct Waiter {
    id: u64,
    wake: Sender<Wake>,
    subscribed: Sender<()>,
    /// Handed a tagged release it has not finished with (its attempt, or
    /// its grant): the next tag goes to another call.
    busy: Arc<AtomicBool>,
    /// An observer (an election's `observe()`) is woken by every message
    /// and takes no turn: lock calls neither queue behind it nor lose a
    /// wake-up to it.
    observer: bool,
}

#[derive(Default)]
struct Registry {
    channels: Mutex<HashMap<String, Vec<Waiter>>>,
    /// The tags delivered lately per channel and the call each went to,
    /// newest last (locked after `channels`, never alone).
    delivered: Mutex<HashMap<String, Delivered>>,
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
    pub(crate) fn start(
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
    pub(crate) fn has_waiters(&self, channels: &[&str]) -> bool {
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
    pub(crate) fn watch(&self, channels: &[&str]) -> Watch<'_> {
        self.register(channels, false)
    }

    /// Registers an observer of `channels`: woken by every message on them,
    /// without taking a turn from the lock calls that wait there.
    pub(crate) fn observe(&self, channels: &[&str]) -> Watch<'_> {
        self.register(channels, true)
    }

    fn register(&self, channels: &[&str], observer: bool) -> Watch<'_> {
        let (wake_tx, wake) = crossbeam_channel::bounded(WAKE_QUEUE);
        let busy = Arc::new(AtomicBool::new(false));
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
                        busy: Arc::clone(&busy),
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
            busy,
            observer,
            held: Mutex::new(Vec::new()),
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
    wake: Receiver<Wake>,
    subscribed: Receiver<()>,
    busy: Arc<AtomicBool>,
    observer: bool,
    /// Tags received and not yet taken by an attempt.
    held: Mutex<Vec<Tag>>,
}

impl Watch<'_> {
    /// The channel a notification arrives on, for `select!`.
    pub(crate) fn wake_signal(&self) -> &Receiver<Wake> {
        &self.wake
    }

    /// Waits until `count` instances subscribed to the channel, the
    /// deadline, or `stop` disconnecting (a cancel). After that, a release
    /// on those instances cannot go unseen.
    pub(crate) fn wait_subscribed(
        &self,
        count: usize,
        deadline: Instant,
        stop: Option<&Receiver<()>>,
    ) {
        for _ in 0..count {
            if receive_until(&self.subscribed, deadline, stop).is_none() {
                return;
            }
        }
    }

    /// Waits for a release notification until `deadline`, or `stop`
    /// disconnecting (a cancel); true if one came.
    /// Waiting again, the call is no longer busy with a tagged release
    /// it was handed.
    pub(crate) fn wait_released(&self, deadline: Instant, stop: Option<&Receiver<()>>) -> bool {
        self.busy.store(false, Ordering::Release);
        match receive_until(&self.wake, deadline, stop) {
            Some(wake) => {
                let mut held = self.held.lock();
                held.extend(wake);
                // An observer that never attempts (an election's) keeps
                // only the latest tags.
                let extra = held.len().saturating_sub(TAGS_KEPT);
                held.drain(..extra);
                true
            }
            None => false,
        }
    }

    /// Hands a release this call was woken for, and could not use, to the
    /// next call in line after it on each of its channels (none goes back
    /// to an earlier one, so a release travels down the line once). A set
    /// refused for another member's sake leaves the released one free for
    /// a call that wants only that.
    pub(crate) fn pass_on(&self) {
        let channels = self.registry.channels.lock();
        for channel in &self.channels {
            let Some(waiters) = channels.get(channel) else {
                continue;
            };
            if let Some(next) = waiters.iter().skip_while(|w| w.id != self.id).nth(1) {
                let _ = next.wake.try_send(None);
            }
        }
    }

    /// Takes the notifications that arrived before now; true if there
    /// was one. Tags among them are kept for [`take_tags`](Self::take_tags).
    pub(crate) fn clear(&self) -> bool {
        let mut any = false;
        let mut held = self.held.lock();
        for wake in self.wake.try_iter() {
            any = true;
            held.extend(wake);
        }
        any
    }

    /// The permits' releases received since the last call.
    pub(crate) fn take_tags(&self) -> Vec<Tag> {
        std::mem::take(&mut *self.held.lock())
    }

    /// After a grant: forgets the late copies of the release that woke this
    /// call, and hands `unused` and every tag received meanwhile (other
    /// permits freed while this call was busy) each to another call, which
    /// may take it.
    pub(crate) fn granted(&self, unused: Vec<Tag>) {
        let _ = self.clear();
        if self.observer {
            // What an observer saw took nobody's turn: nothing to hand on.
            self.held.lock().clear();
            return;
        }
        let mut tags = unused;
        tags.append(&mut self.held.lock());
        if tags.is_empty() {
            return;
        }
        let channels = self.registry.channels.lock();
        for channel in &self.channels {
            let Some(waiters) = channels.get(channel) else {
                continue;
            };
            for tag in &tags {
                self.registry
                    .hand_on(channel, waiters, self.id, Arc::clone(tag));
            }
        }
    }
}

/// The call a tagged release goes to among `waiters` (never the call
/// `except`): the longest-waiting one not busy with another, else the
/// longest-waiting one (it sees the release when its attempt fails, or
/// hands it on when granted).
fn pick_for_tag<'w>(
    waiters: impl Iterator<Item = &'w Waiter> + Clone,
    except: u64,
) -> Option<&'w Waiter> {
    let mut calls = waiters.filter(move |w| !w.observer && w.id != except);
    let free = calls.clone().find(|w| !w.busy.load(Ordering::Acquire));
    free.or_else(|| calls.next())
}

/// Hands a tagged release to `waiter`, busy with it until it waits again.
fn hand_tag(waiter: &Waiter, tag: Tag) {
    waiter.busy.store(true, Ordering::Release);
    let _ = waiter.wake.try_send(Some(tag));
}

/// Waits for a message on `rx` until `deadline` or until `stop`
/// disconnects; true if a message came.
fn receive_until<T>(rx: &Receiver<T>, deadline: Instant, stop: Option<&Receiver<()>>) -> Option<T> {
    let Some(stop) = stop else {
        return rx.recv_deadline(deadline).ok();
    };
    let timeout = deadline.saturating_duration_since(Instant::now());
    crossbeam_channel::select! {
        recv(rx) -> message => message.ok(),
        recv(stop) -> _ => None,
        default(timeout) => None,
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut channels = self.registry.channels.lock();
        // A wake-up this call did not use goes to the next in line (of each
        // of its channels: it cannot tell which one announced it).
        // (An observer's wake-ups are its own: the turn went elsewhere.)
        // Each tagged one, a permit freed, goes to a call of its own.
        let mut tags = std::mem::take(&mut *self.held.lock());
        let mut lock_release = false;
        if !self.observer {
            for wake in self.wake.try_iter() {
                match wake {
                    Some(tag) => tags.push(tag),
                    None => lock_release = true,
                }
            }
        }
        if self.observer {
            // The tags an observer saw took nobody's turn.
            tags.clear();
        }
        for channel in &self.channels {
            if let Some(waiters) = channels.get_mut(channel) {
                waiters.retain(|w| w.id != self.id);
                if lock_release {
                    if let Some(next) = waiters.iter().find(|w| !w.observer) {
                        let _ = next.wake.try_send(None);
                    }
                }
                for tag in &tags {
                    self.registry
                        .hand_on(channel, waiters, self.id, Arc::clone(tag));
                }
                if waiters.is_empty() {
                    channels.remove(channel);
                    self.registry.delivered.lock().remove(channel);
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
                Ok(msg) => self.wake(msg.get_channel_name(), msg.get_payload_bytes()),
                Err(e) if e.is_timeout() => {}
                Err(_) => return Stop::Failed,
            }
        }
    }

    fn acknowledge(&mut self) {
        self.registry.acknowledge(&mut self.acked);
    }

    fn wake(&self, channel: &str, payload: &[u8]) {
        self.registry.wake(channel, payload);
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

    /// Wakes one call for a release announced on `channel` with
    /// `payload`. A lock's release ([`UNTAGGED`]) wakes the longest-waiting
    /// call only: the calls of one client then take turns instead of all
    /// rushing at the lock and splitting the vote among themselves. A
    /// tagged release (a permit's) seen for the first time wakes the
    /// longest-waiting call not busy with another one, so that releases of
    /// several permits wake as many calls. Its copies from the other
    /// instances wake that call again, as a lock's do: the first copy may
    /// come before the slot is free on a quorum, and the call that tried
    /// too early tries again. Observers are all woken.
    fn wake(&self, channel: &str, payload: &[u8]) {
        let channels = self.channels.lock();
        let Some(waiters) = channels.get(channel) else {
            return;
        };
        if payload == UNTAGGED {
            if let Some(first) = waiters.iter().find(|w| !w.observer) {
                let _ = first.wake.try_send(None);
            }
        } else {
            let earlier = self.delivered_to(channel, payload);
            match earlier.and_then(|id| waiters.iter().find(|w| w.id == id)) {
                Some(call) => {
                    let _ = call.wake.try_send(None);
                }
                // New, or its call is gone (granted, or gave up, handing
                // on what it held): this copy may be the one that finds
                // the slot free on a quorum.
                None => self.hand_on(channel, waiters, u64::MAX, payload.into()),
            }
        }
        // Observers see every copy, with its tag: a fair lock's waiters
        // count each release by its tag, once whatever the copies.
        let tag: Option<Tag> = (payload != UNTAGGED).then(|| payload.into());
        for observer in waiters.iter().filter(|w| w.observer) {
            let _ = observer.wake.try_send(tag.clone());
        }
    }

    /// Hands `tag` to the call [`pick_for_tag`] picks among `waiters`
    /// (never `except`), and remembers it went there.
    fn hand_on(&self, channel: &str, waiters: &[Waiter], except: u64, tag: Tag) {
        if let Some(next) = pick_for_tag(waiters.iter(), except) {
            self.record_delivery(channel, &tag, next.id);
            hand_tag(next, tag);
        }
    }

    /// The call `tag` was delivered to on `channel`, if it was.
    fn delivered_to(&self, channel: &str, tag: &[u8]) -> Option<u64> {
        let delivered = self.delivered.lock();
        let tags = delivered.get(channel)?;
        tags.iter().find(|(t, _)| **t == *tag).map(|(_, id)| *id)
    }

    fn record_delivery(&self, channel: &str, tag: &[u8], id: u64) {
        let mut delivered = self.delivered.lock();
        let tags = delivered.entry(channel.to_string()).or_default();
        tags.retain(|(t, _)| **t != *tag);
        if tags.len() == TAGS_KEPT {
            tags.pop_front();
        }
        tags.push_back((tag.into(), id));
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
        notifier.registry.wake("released:{r}", UNTAGGED);
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
        notifier.registry.wake("released:{r}", UNTAGGED);
        assert!(first.wake_signal().try_recv().is_ok());
        drop(first);
        assert!(second.wake_signal().try_recv().is_err());
    }

    /// Releases of two permits wake two calls, though the first call is
    /// still busy with its own; the copies of a release (one per instance)
    /// wake the call it went to, nobody else.
    #[test]
    fn each_permit_released_wakes_a_call_of_its_own() {
        let notifier = notifier();
        let channel = "released:{s}:permits";
        let first = notifier.watch(&[channel]);
        let second = notifier.watch(&[channel]);
        notifier.registry.wake(channel, b"0:7");
        notifier.registry.wake(channel, b"0:7");
        assert!(first.clear(), "the first release wakes the first call");
        assert_eq!(first.take_tags(), [Tag::from(&b"0:7"[..])], "once, tagged");
        assert!(
            second.wake_signal().try_recv().is_err(),
            "a copy is no release"
        );
        notifier.registry.wake(channel, b"1:3");
        assert!(first.wake_signal().try_recv().is_err());
        assert!(second.clear(), "another permit freed wakes the next call");
        assert_eq!(second.take_tags(), [Tag::from(&b"1:3"[..])]);
    }

    /// A call granted while holding another permit's release hands it to
    /// the next call, which would otherwise sit out its fallback re-check
    /// while the permit is free.
    #[test]
    fn a_permit_release_queued_on_a_granted_call_is_handed_on() {
        let notifier = notifier();
        let channel = "released:{s}:permits";
        let first = notifier.watch(&[channel]);
        let second = notifier.watch(&[channel]);
        notifier.registry.wake(channel, b"0:7");
        // Both busy: the next release queues on the longest waiting.
        notifier.registry.wake(channel, b"1:3");
        notifier.registry.wake(channel, b"2:5");
        assert!(first.clear() && second.clear());
        assert_eq!(second.take_tags(), [Tag::from(&b"1:3"[..])]);
        let tags = first.take_tags();
        assert_eq!(tags.len(), 2, "{tags:?}");
        first.granted(tags[1..].to_vec());
        assert!(second.clear());
        assert_eq!(second.take_tags(), [Tag::from(&b"2:5"[..])]);
    }
}
