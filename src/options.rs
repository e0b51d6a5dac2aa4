//! Per-call lock options.

use std::time::Duration;

use crate::cancel::{Cancel, CancelId};

/// How one lock call behaves: lease length, how long to keep trying, and
/// whether the watchdog keeps the lease alive.
///
/// ```
/// use redfence::LockOptions;
/// use std::time::Duration;
///
/// let opts = LockOptions::new()
///     .ttl(Duration::from_secs(5))
///     .wait(Duration::from_millis(300))
///     .auto_extend(false);
/// assert_eq!(opts.get_ttl(), Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    ttl: Duration,
    wait: Duration,
    auto_extend: bool,
    hold_at_least: Duration,
    /// The handle's id: options stay `Copy`; the call looks the handle up.
    cancel: Option<CancelId>,
}

impl LockOptions {
    /// Default lease length.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
    /// Default wait budget of [`Redlock::lock`](crate::Redlock::lock).
    pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

    /// Options with the defaults: 30 s TTL, 10 s wait, auto-extension on.
    #[must_use]
    pub fn new() -> Self {
        LockOptions {
            ttl: Self::DEFAULT_TTL,
            wait: Self::DEFAULT_WAIT,
            auto_extend: true,
            hold_at_least: Duration::ZERO,
            cancel: None,
        }
    }

    /// Lease length set on the instances at each grant or extension. The
    /// lock is guaranteed for at most this long minus the time the
    /// acquisition took and the clock drift allowance. Must be at least
    /// 1 ms and larger than the drift plus twice the per-instance timeout.
    ///
    /// Defaults to 30 s.
    #[must_use = "LockOptions is Copy: a setter returns new options, and the old ones are unchanged"]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Total time to keep retrying while the lock is held elsewhere or the
    /// instances are unavailable. Zero means exactly one attempt. The call
    /// listens for a release almost to the end, and starts a new attempt
    /// only if it can end before this budget does (judged by the call's
    /// slowest attempt so far, twice over for a possible raise round).
    ///
    /// Defaults to 10 s.
    #[must_use = "LockOptions is Copy: a setter returns new options, and the old ones are unchanged"]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Whether the client's watchdog extends the lease while the guard
    /// lives. Without it the lease ends after its TTL, and the guard reports
    /// it lost from then on.
    ///
    /// Defaults to `true`.
    #[must_use = "LockOptions is Copy: a setter returns new options, and the old ones are unchanged"]
    pub fn auto_extend(mut self, on: bool) -> Self {
        self.auto_extend = on;
        self
    }

    /// Keep the lock at least this long after the grant, even if the guard
    /// is released or dropped sooner: the run-once pattern of scheduled jobs
    /// (ShedLock's `lockAtLeastFor`). A job that every machine starts at
    /// 02:00 runs once, even when the first one is done before the last one
    /// (with a clock a little late) tries.
    ///
    /// A release before the hold is over does not delete the lock: it sets
    /// the lock's expiry to the rest of the hold, on each instance where the
    /// lock still holds our value (compare-and-set of the expiry). After the
    /// hold, a release deletes it as usual. At most 30 days; zero (the
    /// default) turns it off.
    ///
    /// ```no_run
    /// use redfence::LockOptions;
    /// use std::time::Duration;
    /// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
    /// let once = LockOptions::new()
    ///     .wait(Duration::ZERO)
    ///     .hold_at_least(Duration::from_secs(600));
    /// if let Ok(guard) = locks.lock_with("nightly-report", once) {
    ///     // run the report: nobody else does for 10 minutes
    ///     guard.release()?; // held on until 10 minutes after the grant
    /// }
    /// # Ok::<(), redfence::Error>(())
    /// ```
    #[must_use = "LockOptions is Copy: a setter returns new options, and the old ones are unchanged"]
    pub fn hold_at_least(mut self, hold: Duration) -> Self {
        self.hold_at_least = hold;
        self
    }

    /// Lets `cancel` stop the call from another thread: it then returns
    /// [`Error::Cancelled`](crate::Error::Cancelled) within one instance
    /// timeout (see [`Cancel`]).
    #[must_use = "LockOptions is Copy: a setter returns new options, and the old ones are unchanged"]
    pub fn cancel(mut self, cancel: &Cancel) -> Self {
        self.cancel = Some(cancel.id());
        self
    }

    /// The cancel handle, if one was given and a clone of it still lives.
    pub fn get_cancel(&self) -> Option<Cancel> {
        self.cancel.and_then(Cancel::find)
    }

    /// The minimum hold after the grant (zero: none).
    pub fn get_hold_at_least(&self) -> Duration {
        self.hold_at_least
    }

    /// The lease length.
    pub fn get_ttl(&self) -> Duration {
        self.ttl
    }

    /// The wait budget.
    pub fn get_wait(&self) -> Duration {
        self.wait
    }

    /// Whether the watchdog extends the lease.
    pub fn get_auto_extend(&self) -> bool {
        self.auto_extend
    }
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}
