//! What a lock call does between attempts: wait for a release announced
//! on the resource's channels, or pause a random while.

use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::lock::shared::Shared;
use crate::transport::notify::{Notifier, Tag, Watch};
use crate::{Cancel, Error};

/// Longest wait for a release notification before trying again anyway: a
/// holder that dies without releasing is not announced, and a notification
/// may be missed (a subscriber reconnecting).
const MAX_NOTIFY_WAIT: Duration = Duration::from_millis(250);

/// A lock call's waiting between attempts, on the release channels of its
/// resources.
pub(crate) struct Waiting<'a> {
    shared: &'a Shared,
    notifier: &'a Notifier,
    channels: Vec<&'a str>,
    /// Listening for releases, once the lock was found held.
    watch: Option<Watch<'a>>,
    /// The last wait ended with a release announced for this call.
    woken: bool,
    /// The permits' releases this call was handed for its next attempt.
    tags: Vec<Tag>,
    /// The end of the wait budget.
    deadline: Instant,
    /// The longest attempt of this call so far: what the next one may take.
    slowest_attempt: Option<Duration>,
    /// Ends every wait at once when cancelled.
    cancel: Option<Cancel>,
    /// Its waits observe every release (see
    /// [`observe_releases`](Self::observe_releases)).
    observe: bool,
}

impl<'a> Waiting<'a> {
    pub(crate) fn new(
        shared: &'a Shared,
        notifier: &'a Notifier,
        channels: Vec<&'a str>,
        deadline: Instant,
        cancel: Option<Cancel>,
    ) -> Self {
        Waiting {
            shared,
            notifier,
            channels,
            watch: None,
            woken: false,
            tags: Vec::new(),
            deadline,
            slowest_attempt: None,
            cancel,
            observe: false,
        }
    }

    /// No attempt may start later than this (`None`: no time for any
    /// retry), so that it can still end by the deadline: an attempt is a
    /// vote and maybe a raise round, each as long as this call's slowest
    /// attempt so far (two instance timeouts at most, and before any was
    /// measured). Until then the call keeps listening for a release.
    fn latest_start(&self) -> Option<Instant> {
        let worst = self.shared.cfg.instance_timeout * 2;
        let bound = self.slowest_attempt.map_or(worst, |slowest| {
            (slowest * 2).clamp(Duration::from_millis(1), worst)
        });
        self.deadline.checked_sub(bound)
    }

    /// Whether the last wait ended with a release announced for this call.
    pub(crate) fn woken(&self) -> bool {
        self.woken
    }

    /// Whether the call was cancelled.
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(Cancel::is_cancelled)
    }

    fn stop(&self) -> Option<&Receiver<()>> {
        self.cancel.as_ref().map(Cancel::signal)
    }

    /// When calls of this client already wait for this lock, queues
    /// behind them rather than barge in and split the vote with the one
    /// that the next release wakes.
    pub(crate) fn queue_behind_others(&mut self) {
        if !self.notifier.has_waiters(&self.channels) {
            return;
        }
        let queued = self.notifier.watch(&self.channels);
        let until = self
            .latest_start()
            .map_or(Instant::now(), |t| t.min(Instant::now() + MAX_NOTIFY_WAIT));
        self.woken = queued.wait_released(until, self.stop());
        self.watch = Some(queued);
    }

    /// Before an attempt: a release announced since the last wait is seen
    /// by this attempt, and passed on after it if it cannot use it. Returns
    /// the permits' releases handed to this call, for the attempt to try
    /// their slots first.
    pub(crate) fn before_attempt(&mut self) -> &[Tag] {
        if let Some(watch) = &self.watch {
            self.woken |= watch.clear();
            self.tags = watch.take_tags();
        }
        &self.tags
    }

    /// Whether this call's waits observe every release on its channels,
    /// tags included, instead of taking turns with the client's other
    /// calls: a fair lock's waiters each count every release, since each
    /// moves the whole line up (`fair.rs`).
    pub(crate) fn observe_releases(&mut self, observe: bool) {
        self.observe = observe;
    }

    /// After a grant: late copies of the release that woke us (one per
    /// instance) must not be passed on as a new release, but another
    /// permit's release is (`Watch::granted`). Returns whether
    /// the call was cancelled meanwhile.
    pub(crate) fn granted(mut self, used: impl Fn(&[u8]) -> bool) -> bool {
        if let Some(watch) = &self.watch {
            let mut unused = std::mem::take(&mut self.tags);
            unused.retain(|tag| !used(tag));
            watch.granted(unused);
        }
        self.cancelled()
    }

    /// After a failed attempt that started at `attempt_start` and that
    /// `granted` instances granted: `Err` when the call must give up with
    /// `error`, else waits for a release or pauses, until the next attempt.
    pub(crate) fn before_retry(
        &mut self,
        error: Error,
        granted: usize,
        attempt_start: Instant,
    ) -> Result<(), Error> {
        let took = attempt_start.elapsed();
        self.slowest_attempt = Some(self.slowest_attempt.map_or(took, |s| s.max(took)));
        let now = Instant::now();
        let latest_start = match self.latest_start() {
            Some(t) if error.is_retryable() && now < t => t,
            _ => return Err(error),
        };
        let contended = matches!(error, Error::Contended { .. });
        // Refused by most answers for one holder: it holds the lock (an
        // instance that granted us lacks its key, lost or never written),
        // so the next chance is its release, not a split vote to retry.
        let held = matches!(
            error,
            Error::Contended {
                holder: Some(_),
                ..
            }
        );
        match &self.watch {
            None if contended => {
                // Subscribe, then try again at once: a release that came
                // before the subscription would otherwise go unseen.
                let subscribed = if self.observe {
                    self.notifier.observe(&self.channels)
                } else {
                    self.notifier.watch(&self.channels)
                };
                let until = (now + self.shared.cfg.instance_timeout).min(latest_start);
                subscribed.wait_subscribed(
                    self.shared.instances.quorum().size(),
                    until,
                    self.stop(),
                );
                self.watch = Some(subscribed);
                self.woken = false;
            }
            Some(watch) if contended && (granted == 0 || held) => {
                if self.woken && self.channels.len() > 1 {
                    // Woken for one member, refused for another: the
                    // released one may be free for the next in line.
                    watch.pass_on();
                }
                // A holder that dies without releasing is not announced:
                // try again now and then, in case its lease ran out.
                let until = (now + MAX_NOTIFY_WAIT).min(latest_start);
                self.woken = watch.wait_released(until, self.stop());
            }
            _ => {
                let window = self.pause_window(contended, attempt_start);
                let pause = pause(window).min(latest_start - now);
                match self.stop() {
                    // Disconnects at once when cancelled; never carries a message.
                    Some(stop) => {
                        let _ = stop.recv_timeout(pause);
                    }
                    None => std::thread::sleep(pause),
                }
                self.woken = false;
            }
        }
        Ok(())
    }

    /// A random pause keeps competing clients from colliding again. After
    /// a split vote the lock is free, so a window of a few attempt
    /// durations spreads the contenders out; unavailable instances get the
    /// full retry delay.
    fn pause_window(&self, contended: bool, attempt_start: Instant) -> Duration {
        let retry_delay = self.shared.cfg.retry_delay;
        if contended {
            (attempt_start.elapsed() * 4)
                .max(Duration::from_millis(1))
                .min(retry_delay)
        } else {
            retry_delay
        }
    }
}

/// A random pause in `[0, max)`. Randomness keeps competing clients from
/// voting in lockstep and splitting the instances between them again and
/// again.
pub(crate) fn pause(max: Duration) -> Duration {
    let random = uuid::Uuid::new_v4().as_u128() as u64;
    let max_nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX).max(1);
    Duration::from_nanos(random % max_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_stay_below_the_bound_and_vary() {
        let max = Duration::from_millis(100);
        let pauses: Vec<_> = (0..200).map(|_| pause(max)).collect();
        assert!(pauses.iter().all(|p| *p < max));
        let distinct: std::collections::HashSet<_> = pauses.iter().collect();
        assert!(distinct.len() > 150, "pauses should be random");
    }
}
