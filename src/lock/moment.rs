//! The clock that a lease's validity, its hold and the watchdog's schedule
//! run on. On Linux it is `CLOCK_BOOTTIME`, which keeps counting while the
//! host or VM is suspended: after a resume, a lease whose keys expired
//! meanwhile is past its validity at once, and `is_held()` says so.
//! `Instant` (`CLOCK_MONOTONIC` on Linux) stops during a suspend, so a
//! validity measured on it would still be running. Elsewhere this is
//! `Instant`, with whatever the platform's monotonic clock does in a
//! suspend (README, "Guarantees").
//!
//! Network deadlines (how long to wait for a reply) stay on `Instant`: a
//! suspend only makes those waits end early.

use std::ops::Add;
use std::time::Duration;

/// A point in time on the lease clock, as a duration since its origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Moment(Duration);

impl Moment {
    pub(crate) fn now() -> Moment {
        Moment(since_origin())
    }

    /// How long after `earlier` this is (zero if it is not after).
    pub(crate) fn saturating_duration_since(self, earlier: Moment) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// How long ago this was.
    pub(crate) fn elapsed(self) -> Duration {
        Moment::now().saturating_duration_since(self)
    }

    pub(crate) fn checked_add(self, d: Duration) -> Option<Moment> {
        self.0.checked_add(d).map(Moment)
    }

    pub(crate) fn checked_sub(self, d: Duration) -> Option<Moment> {
        self.0.checked_sub(d).map(Moment)
    }
}

impl Add<Duration> for Moment {
    type Output = Moment;

    /// Saturates: a moment past the end of time is never reached.
    fn add(self, d: Duration) -> Moment {
        Moment(self.0.saturating_add(d))
    }
}

/// `CLOCK_BOOTTIME` (since boot). A failed reading, which Linux never
/// gives for this clock (2.6.39 and later), reads as the end of time: every
/// validity is then over, the safe way to be wrong.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn since_origin() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec` that lives across the
    // call; `clock_gettime` writes nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).ok();
    let nanos = u32::try_from(ts.tv_nsec)
        .ok()
        .filter(|n| *n < 1_000_000_000);
    match (rc, secs, nanos) {
        (0, Some(secs), Some(nanos)) => Duration::new(secs, nanos),
        _ => Duration::MAX,
    }
}

/// `Instant`, since the first reading in this process.
#[cfg(not(target_os = "linux"))]
fn since_origin() -> Duration {
    use std::sync::LazyLock;
    use std::time::Instant;
    static ORIGIN: LazyLock<Instant> = LazyLock::new(Instant::now);
    ORIGIN.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_move_forward_and_add_up() {
        let a = Moment::now();
        std::thread::sleep(Duration::from_millis(5));
        let b = Moment::now();
        assert!(b > a);
        assert!(b.saturating_duration_since(a) >= Duration::from_millis(5));
        assert_eq!(a.saturating_duration_since(b), Duration::ZERO);
        assert_eq!(
            a + Duration::from_secs(1),
            a.checked_add(Duration::from_secs(1)).unwrap()
        );
        assert!(Moment(Duration::MAX) + Duration::from_secs(1) > b);
        assert_eq!(
            Moment(Duration::ZERO).checked_sub(Duration::from_nanos(1)),
            None
        );
    }

    /// The lease clock is the boot clock, not the monotonic one: run under
    /// `unshare --time --boottime N` (CI does), where the two differ by
    /// N seconds, this fails for a monotonic clock. `/proc/uptime` is the
    /// boot clock as the process's time namespace sees it.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_lease_clock_is_the_boot_clock() {
        let uptime = std::fs::read_to_string("/proc/uptime").expect("/proc/uptime reads");
        let secs: f64 = uptime
            .split_whitespace()
            .next()
            .and_then(|s| s.parse().ok())
            .expect("uptime in seconds");
        let now = Moment::now().0.as_secs_f64();
        assert!(
            (now - secs).abs() < 1.0,
            "lease clock {now} s, boot clock {secs} s"
        );
    }
}
