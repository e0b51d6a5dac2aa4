//! Fencing tokens.

use std::fmt;

/// A fencing token: a number that increases strictly with each successive
/// grant of the same resource.
///
/// Pass it with every write to the storage the lock protects; the storage
/// keeps the highest token it has seen per resource and refuses writes that
/// carry a lower one. That is what makes a holder whose lease ran out (a long
/// GC pause, a stopped VM, a slow network) harmless.
///
/// ```
/// # use redfence::FencingToken;
/// fn accept(highest_seen: u64, token: FencingToken) -> bool {
///     token.get() >= highest_seen
/// }
/// # let _ = accept;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    pub(crate) fn new(value: u64) -> Self {
        FencingToken(value)
    }

    /// The token as a number (below 2^53, so it also fits a double).
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> u64 {
        token.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reads_the_same_every_way() {
        let token = FencingToken::new(1_795_577_022_252_353);
        assert_eq!(token.get(), 1_795_577_022_252_353);
        assert_eq!(u64::from(token), 1_795_577_022_252_353);
        assert_eq!(token.to_string(), "1795577022252353");
    }
}
