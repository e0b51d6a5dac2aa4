//! The instances' clocks, as the client reads them: the proposal for new
//! fencing tokens that an acquire carries.
//!
//! Every token is computed on the instance, from its own counter and its
//! own clock when the acquire script runs (`lua/acquire.lua`): nothing read
//! here can make a token repeat or go backwards, whatever it says. What it
//! buys is agreement. Instances take the proposal when it lies within
//! [`PROPOSAL_WINDOW_MICROS`](crate::protocol::scripts::PROPOSAL_WINDOW_MICROS) ahead of their clock, so the tokens of the
//! granting instances agree and the raise round is skipped. The proposal is
//! the latest instance clock the client knows plus a lead of 3 ms: each
//! worker reads its instance's `TIME` when it connects, and again every
//! [`REFRESH`] while it has work (with its next batch, while the last
//! reading took long), and carries the reading forward on the client's
//! monotonic clock. A reading that is wrong (a stale one, a host
//! suspend, an instance clock stepped) only costs raise rounds until the
//! next refresh.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use crate::protocol::scripts::PROPOSAL_LEAD_MICROS;

use redis::Value;

/// How often a busy worker reads its instance's clock again, so that a
/// stepped instance clock or a slowly drifting monotonic clock is followed.
pub(crate) const REFRESH: Duration = Duration::from_secs(10);

/// The process's reference point for monotonic microseconds.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

const UNKNOWN: i64 = i64::MIN;

/// A reading whose round trip took longer than this, and twice the
/// shortest seen, is rough: the worker reads the clock again with its next
/// batch.
const ROUGH_ROUND_TRIP: Duration = Duration::from_millis(1);

/// One instance's clock: its `TIME` minus the client's monotonic clock, in
/// microseconds, and the round trip of the reading it came from.
pub(crate) struct InstanceClock {
    offset: AtomicI64,
    round_trip_micros: AtomicI64,
    shortest_round_trip_micros: AtomicI64,
}

impl Default for InstanceClock {
    fn default() -> Self {
        InstanceClock {
            offset: AtomicI64::new(UNKNOWN),
            round_trip_micros: AtomicI64::new(i64::MAX),
            shortest_round_trip_micros: AtomicI64::new(i64::MAX),
        }
    }
}

impl InstanceClock {
    /// Records a `TIME` reply to a request sent at `sent` and answered at
    /// `received`. The instance read its clock somewhere in between: the
    /// middle is off by at most half the round trip, either way.
    pub(crate) fn record(&self, reply: &Value, sent: Instant, received: Instant) -> bool {
        let Some(micros) = time_micros(reply) else {
            return false;
        };
        let round_trip = received.saturating_duration_since(sent);
        let middle = sent + round_trip / 2;
        let offset = i64::try_from(micros).unwrap_or(i64::MAX) - monotonic_micros(middle);
        let round_trip = i64::try_from(round_trip.as_micros()).unwrap_or(i64::MAX);
        self.offset.store(offset, Ordering::Relaxed);
        self.round_trip_micros.store(round_trip, Ordering::Relaxed);
        self.shortest_round_trip_micros
            .fetch_min(round_trip, Ordering::Relaxed);
        true
    }

    /// True when the last reading's round trip was long for this instance
    /// (or there is none): worth reading again soon.
    pub(crate) fn is_rough(&self) -> bool {
        let round_trip = self.round_trip_micros.load(Ordering::Relaxed);
        if round_trip == i64::MAX {
            return true;
        }
        let shortest = self.shortest_round_trip_micros.load(Ordering::Relaxed);
        let floor = i64::try_from(ROUGH_ROUND_TRIP.as_micros()).unwrap_or(i64::MAX);
        round_trip > floor.max(shortest.saturating_mul(2))
    }

    /// The instance's clock now, in microseconds since 1970, if read.
    pub(crate) fn now_micros(&self) -> Option<u64> {
        u64::try_from(self.micros_at(Instant::now())?).ok()
    }

    /// The instance's clock at `at`, in microseconds since 1970, if read.
    fn micros_at(&self, at: Instant) -> Option<i64> {
        let offset = self.offset.load(Ordering::Relaxed);
        if offset == UNKNOWN {
            return None;
        }
        Some(offset.saturating_add(monotonic_micros(at)))
    }
}

/// How far instance clocks may be apart for the guarantees as stated: a
/// raise round never takes a counter further ahead of its instance's clock
/// (`lua/fence_raise.lua`), so a token lies within this of the clock of
/// every instance of its quorum. [`Redlock::clock_offsets`] measures each
/// instance against the others, and warns past this bound.
///
/// [`Redlock::clock_offsets`]: crate::Redlock::clock_offsets
///
/// ```
/// assert_eq!(redfence::MAX_CLOCK_OFFSET.as_secs(), 1);
/// ```
pub const MAX_CLOCK_OFFSET: Duration =
    Duration::from_micros(crate::protocol::scripts::MAX_AHEAD_MICROS);

/// One instance's clock against the others' (the median of their readings),
/// as [`Redlock::clock_offsets`](crate::Redlock::clock_offsets) measures it:
/// each instance's `TIME`, read in one round at the moment of the call,
/// taken as of the middle of its round trip and carried to one instant on
/// the client's monotonic clock. The client's own wall clock plays no part.
/// A reading is off by at most half its round trip either way, so the
/// offset is known to within [`uncertainty`](Self::uncertainty): half the
/// instance's round trip plus half the median's.
///
/// ```
/// use std::time::Duration;
/// use redfence::ClockOffset;
///
/// let ahead = ClockOffset::from_micros(1_500_000);
/// assert_eq!(ahead.micros(), 1_500_000);
/// assert_eq!(ahead.magnitude(), Duration::from_millis(1500));
/// assert!(!ahead.is_within(redfence::MAX_CLOCK_OFFSET));
/// assert!(ClockOffset::from_micros(-2_000).is_within(redfence::MAX_CLOCK_OFFSET));
/// let read = ahead.with_uncertainty(Duration::from_micros(300));
/// assert_eq!(read.uncertainty(), Duration::from_micros(300));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClockOffset {
    micros: i64,
    uncertainty_micros: u64,
}

impl ClockOffset {
    /// An offset of `micros` microseconds (positive: ahead of the others),
    /// known exactly.
    pub fn from_micros(micros: i64) -> Self {
        ClockOffset {
            micros,
            uncertainty_micros: 0,
        }
    }

    /// The same offset, known to within `uncertainty` either way.
    pub fn with_uncertainty(self, uncertainty: Duration) -> Self {
        let uncertainty_micros = u64::try_from(uncertainty.as_micros()).unwrap_or(u64::MAX);
        ClockOffset {
            uncertainty_micros,
            ..self
        }
    }

    /// Microseconds ahead of the others (negative: behind).
    pub fn micros(self) -> i64 {
        self.micros
    }

    /// Seconds ahead of the others (negative: behind).
    pub fn as_secs_f64(self) -> f64 {
        self.micros as f64 / 1e6
    }

    /// How far off, either way.
    pub fn magnitude(self) -> Duration {
        Duration::from_micros(self.micros.unsigned_abs())
    }

    /// How far the true offset may lie from [`micros`](Self::micros),
    /// either way: half the round trips of the readings it comes from.
    pub fn uncertainty(self) -> Duration {
        Duration::from_micros(self.uncertainty_micros)
    }

    /// Whether it is no further off than `bound`, either way.
    pub fn is_within(self, bound: Duration) -> bool {
        self.magnitude() <= bound
    }
}

/// One instance's `TIME`, read in a round of its own: its value, the
/// instant it stands for (the middle of the round trip) and how far off
/// that may be (half the round trip).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reading {
    micros: u64,
    middle: Instant,
    half_round_trip: Duration,
}

impl Reading {
    /// The reading a `TIME` reply gives, sent at `sent`, in at `received`.
    pub(crate) fn from_reply(reply: &Value, sent: Instant, received: Instant) -> Option<Reading> {
        let half_round_trip = received.saturating_duration_since(sent) / 2;
        Some(Reading {
            micros: time_micros(reply)?,
            middle: sent + half_round_trip,
            half_round_trip,
        })
    }

    /// Whether this reading is known more closely than `other` (a shorter
    /// round trip): of a cluster's shards, the sharper one stands for it.
    pub(crate) fn is_sharper_than(&self, other: &Reading) -> bool {
        self.half_round_trip < other.half_round_trip
    }
}

/// Each reading's offset from the median reading (the lower median for an
/// even count), all carried to one instant, with its uncertainty; `None`
/// where there is no reading.
pub(crate) fn fresh_offsets(readings: &[Option<Reading>]) -> Vec<Option<ClockOffset>> {
    let Some(at) = readings.iter().flatten().map(|r| r.middle).max() else {
        return vec![None; readings.len()];
    };
    let carried = |r: &Reading| {
        let since = at.saturating_duration_since(r.middle).as_micros();
        i64::try_from(u128::from(r.micros) + since).unwrap_or(i64::MAX)
    };
    let mut known: Vec<(i64, Duration)> = readings
        .iter()
        .flatten()
        .map(|r| (carried(r), r.half_round_trip))
        .collect();
    known.sort_unstable();
    let Some(&(median, median_half)) = known.get(known.len().saturating_sub(1) / 2) else {
        return vec![None; readings.len()];
    };
    readings
        .iter()
        .map(|r| {
            let r = r.as_ref()?;
            let offset = ClockOffset::from_micros(carried(r).saturating_sub(median));
            Some(offset.with_uncertainty(r.half_round_trip + median_half))
        })
        .collect()
}

/// The proposal for new tokens: the latest clock reading among `clocks`
/// plus [`PROPOSAL_LEAD_MICROS`], or 0 when none was read yet (instances
/// then use their own clocks).
pub(crate) fn proposal<'a>(clocks: impl Iterator<Item = &'a InstanceClock>) -> u64 {
    clocks
        .filter_map(InstanceClock::now_micros)
        .max()
        .map_or(0, |latest| latest.saturating_add(PROPOSAL_LEAD_MICROS))
}

fn monotonic_micros(at: Instant) -> i64 {
    let since = at.saturating_duration_since(*EPOCH);
    i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
}

/// `TIME` answers `[seconds, microseconds]` as two bulk strings.
fn time_micros(reply: &Value) -> Option<u64> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let number = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
        _ => None,
    };
    match parts.as_slice() {
        [secs, micros] => number(secs)?
            .checked_mul(1_000_000)?
            .checked_add(number(micros)?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any reply read as TIME is a reading or nothing: never a panic,
        /// and the offsets of any readings are computed.
        #[test]
        fn any_time_reply_reads(reply in crate::arbitrary::reply(), rtt in 0u64..5_000_000) {
            let sent = Instant::now();
            let reading = Reading::from_reply(&reply, sent, sent + Duration::from_micros(rtt));
            let _ = fresh_offsets(&[reading, None, reading]);
            let clock = InstanceClock::default();
            let _ = clock.record(&reply, sent, sent);
        }
    }

    fn time(secs: u64, micros: u64) -> Value {
        Value::Array(vec![
            Value::BulkString(secs.to_string().into_bytes()),
            Value::BulkString(micros.to_string().into_bytes()),
        ])
    }

    #[test]
    fn a_reading_is_carried_forward_and_never_runs_behind() {
        let clock = InstanceClock::default();
        assert_eq!(clock.now_micros(), None);
        assert_eq!(proposal([&clock].into_iter()), 0);
        let sent = Instant::now();
        assert!(clock.record(&time(1_700_000_000, 250_000), sent, sent));
        assert!(!clock.is_rough());
        let first = clock.now_micros().expect("recorded");
        assert!(first >= 1_700_000_000_250_000);
        std::thread::sleep(Duration::from_millis(5));
        let later = clock.now_micros().expect("recorded");
        assert!(later >= first + 5_000, "{later} vs {first}");
    }

    #[test]
    fn the_proposal_is_the_latest_clock_plus_the_lead() {
        let (slow, fast) = (InstanceClock::default(), InstanceClock::default());
        let sent = Instant::now();
        slow.record(&time(1_000_000, 0), sent, sent);
        fast.record(&time(2_000_000, 0), sent, sent);
        let p = proposal([&slow, &fast, &InstanceClock::default()].into_iter());
        let lead = PROPOSAL_LEAD_MICROS;
        assert!(
            (2_000_000_000_000 + lead..2_000_001_000_000).contains(&p),
            "{p}"
        );
    }

    #[test]
    fn fresh_readings_are_carried_to_one_instant_with_their_uncertainty() {
        let sent = Instant::now();
        let at = |ms: u64| sent + Duration::from_millis(ms);
        // Instance 1 answers 10 ms after instance 0 and reads 10 ms more:
        // the same clock. Instance 2 reads 3 s ahead.
        let readings = [
            Reading::from_reply(&time(1_000, 0), sent, at(2)),
            Reading::from_reply(&time(1_000, 10_000), at(10), at(12)),
            Reading::from_reply(&time(1_003, 0), sent, at(4)),
            None,
        ];
        let got = fresh_offsets(&readings);
        let micros: Vec<Option<i64>> = got.iter().map(|o| o.map(ClockOffset::micros)).collect();
        assert_eq!(micros, [Some(0), Some(0), Some(2_999_000), None]);
        // Half its round trip plus half the median's (instance 1, 1 ms).
        assert_eq!(
            got[2].map(ClockOffset::uncertainty),
            Some(Duration::from_millis(3))
        );
        assert_eq!(fresh_offsets(&[None]), [None]);
        assert!(Reading::from_reply(&Value::Nil, sent, sent).is_none());
    }

    #[test]
    fn malformed_replies_are_not_recorded() {
        let clock = InstanceClock::default();
        let now = Instant::now();
        assert!(!clock.record(&Value::Nil, now, now));
        assert!(!clock.record(
            &Value::Array(vec![Value::BulkString(b"x".to_vec())]),
            now,
            now
        ));
        assert!(clock.is_rough(), "no reading yet");
        assert_eq!(clock.now_micros(), None);
    }

    #[test]
    fn a_slow_reading_is_rough_for_its_instance_only() {
        let clock = InstanceClock::default();
        let sent = Instant::now();
        let reply = time(1_700_000_000, 0);
        clock.record(&reply, sent, sent + Duration::from_micros(300));
        assert!(!clock.is_rough());
        clock.record(&reply, sent, sent + Duration::from_millis(5));
        assert!(clock.is_rough(), "5 ms against 0.3 ms");
        // A far instance: 4 ms is its usual round trip, 6 ms is not rough.
        let far = InstanceClock::default();
        far.record(&reply, sent, sent + Duration::from_millis(4));
        far.record(&reply, sent, sent + Duration::from_millis(6));
        assert!(!far.is_rough());
        far.record(&reply, sent, sent + Duration::from_millis(9));
        assert!(far.is_rough());
    }
}
