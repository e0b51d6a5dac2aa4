//! Pauses between attempts.

use std::time::Duration;

/// A random pause in `[0, max)`, cut short when the holder's lease ends
/// sooner. Randomness keeps competing clients from voting in lockstep and
/// splitting the instances between them again and again.
pub(crate) fn pause(max: Duration, holder_ttl: Option<Duration>) -> Duration {
    let random = uuid::Uuid::new_v4().as_u128() as u64;
    let max_nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX).max(1);
    let jitter = Duration::from_nanos(random % max_nanos);
    match holder_ttl {
        Some(ttl) => jitter.min(ttl + Duration::from_millis(1)),
        None => jitter,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_stay_below_the_bound_and_vary() {
        let max = Duration::from_millis(100);
        let pauses: Vec<_> = (0..200).map(|_| pause(max, None)).collect();
        assert!(pauses.iter().all(|p| *p < max));
        let distinct: std::collections::HashSet<_> = pauses.iter().collect();
        assert!(distinct.len() > 150, "pauses should be random");
        let short = Duration::from_millis(3);
        assert!((0..50).all(|_| pause(max, Some(short)) <= short + Duration::from_millis(1)));
    }
}
