//! Schedule exploration of the waiter hand-on (`--cfg loom`, src/sync.rs):
//! the subscriber threads announce releases while the waiting calls
//! register, give up and go back to waiting, each on its own thread.
//!
//! A subscriber thread is a thread calling [`Registry::wake`] (its Redis
//! side is not modelled); a waiting call only ever takes its wake-ups
//! without blocking (`try_iter`), since a blocking receive on a
//! crossbeam channel would hang the model.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Notifier, Tag, Watch, UNTAGGED};
use crate::sync::{explore, thread, AtomicBool};

const CHANNEL: &str = "released:{r}";

/// A notifier for threads that outlive the check's stack frame: leaked,
/// a few hundred bytes per explored schedule.
fn leaked_notifier() -> &'static Notifier {
    let notifier = Notifier::start(Vec::new(), Duration::from_secs(1), Duration::from_secs(1));
    Box::leak(Box::new(notifier.expect("no subscriber thread to start")))
}

/// The wake-ups queued on `watch`: `None` for a lock's release or a copy,
/// a tag for a permit's release.
fn wake_ups(watch: &Watch<'_>) -> Vec<Option<Tag>> {
    watch.wake_signal().try_iter().collect()
}

/// A release announced while the longest-waiting call leaves (its wait
/// ran out) is not lost: either it reaches that call, which hands it on
/// as it leaves, or it finds the next call already first in line.
#[test]
fn loom_checks_a_release_announced_as_the_first_waiter_leaves_wakes_the_next() {
    explore(|| {
        let notifier = leaked_notifier();
        let first = notifier.watch(&[CHANNEL]);
        let second = notifier.watch(&[CHANNEL]);
        let announcer = thread::spawn(move || notifier.registry.wake(CHANNEL, UNTAGGED));
        drop(first);
        announcer.join().expect("announcer");
        assert_eq!(
            wake_ups(&second),
            [None],
            "the release that freed the lock must wake the call left waiting, once"
        );
    });
}

/// Two calls register while a release is announced: a call registered
/// before the announcement began is woken, and one release wakes one
/// call, never both.
#[test]
fn loom_checks_one_lock_release_wakes_exactly_one_of_the_calls_registered_before_it() {
    explore(|| {
        let notifier = leaked_notifier();
        let registered = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let calls: Vec<_> = (0..2)
            .map(|i| {
                let registered = Arc::clone(&registered);
                thread::spawn(move || {
                    let watch = notifier.watch(&[CHANNEL]);
                    registered[i].store(true, SeqCst);
                    watch
                })
            })
            .collect();
        let seen = Arc::clone(&registered);
        let announcer = thread::spawn(move || {
            let before = seen.iter().any(|r| r.load(SeqCst));
            notifier.registry.wake(CHANNEL, UNTAGGED);
            before
        });
        let registered_before = announcer.join().expect("announcer");
        let watches: Vec<_> = calls.into_iter().map(|c| c.join().expect("call")).collect();
        let woken: usize = watches.iter().map(|w| wake_ups(w).len()).sum();
        assert!(woken <= 1, "one release woke {woken} calls");
        if registered_before {
            assert_eq!(
                woken, 1,
                "a call registered before the release was not woken"
            );
        }
    });
}

/// Two subscriber threads (two instances) each deliver the releases of
/// two permits, in opposite orders: each permit wakes a call of its own,
/// and the copy from the other instance wakes that same call again, never
/// the other one.
#[test]
fn loom_checks_each_permit_release_wakes_a_call_of_its_own_and_its_copies_follow_it() {
    explore(|| {
        let notifier = leaked_notifier();
        let channel = "released:{s}:permits";
        let first = notifier.watch(&[channel]);
        let second = notifier.watch(&[channel]);
        let instances: Vec<_> = [[&b"0:7"[..], b"1:3"], [b"1:3", b"0:7"]]
            .into_iter()
            .map(|order| {
                thread::spawn(move || {
                    for tag in order {
                        notifier.registry.wake(channel, tag);
                    }
                })
            })
            .collect();
        for instance in instances {
            instance.join().expect("subscriber");
        }
        let tags_of = |watch: &Watch<'_>| -> Vec<Tag> {
            let wakes = wake_ups(watch);
            assert_eq!(wakes.len(), 2, "a release and its copy: {wakes:?}");
            wakes.into_iter().flatten().collect()
        };
        let (one, other) = (tags_of(&first), tags_of(&second));
        assert_eq!(one.len(), 1, "the first call got {one:?}");
        assert_eq!(other.len(), 1, "the second call got {other:?}");
        assert_ne!(one, other, "both permits went to one call");
    });
}

/// A call handed a permit's release goes back to waiting (so it is no
/// longer busy), takes it, is granted and leaves, while another permit's
/// release is announced: the new release reaches the call still waiting,
/// whether it went to the first call (which hands it on when granted or
/// as it leaves) or straight to the other.
#[test]
fn loom_checks_a_permit_release_reaches_a_waiting_call_while_a_granted_one_leaves() {
    explore(|| {
        let notifier = leaked_notifier();
        let channel = "released:{s}:permits";
        let first = notifier.watch(&[channel]);
        let waiting = notifier.watch(&[channel]);
        notifier.registry.wake(channel, b"0:7");
        let announcer = thread::spawn(move || notifier.registry.wake(channel, b"1:3"));
        assert!(first.wait_released(Instant::now(), None), "handed 0:7");
        let used = Tag::from(&b"0:7"[..]);
        let unused = first.take_tags().into_iter().filter(|t| *t != used);
        first.granted(unused.collect());
        drop(first);
        announcer.join().expect("announcer");
        let tags: Vec<Tag> = wake_ups(&waiting).into_iter().flatten().collect();
        assert_eq!(
            tags,
            [Tag::from(&b"1:3"[..])],
            "the second permit's release must reach the call still waiting"
        );
    });
}
