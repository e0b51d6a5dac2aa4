//! Pauses between attempts.

use std::time::Duration;

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
