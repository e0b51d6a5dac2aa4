//! An in-process downstream store that checks fencing tokens, the way a
//! real store behind a lock should.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;

/// A thread-safe in-memory store that refuses writes carrying a fencing
/// token lower than the highest it has accepted for the same resource.
///
/// A write with a token equal to the highest is accepted: the same holder
/// may write several times under one grant. The check and the write happen
/// under one lock, as they must in a real store (one SQL statement, one Lua
/// script), or two writers could both pass the check.
///
/// Clones share the same data. Every accepted write is kept in a log, so a
/// test can check afterwards that the tokens each resource saw never went
/// backwards, and that no update was lost.
#[derive(Debug, Clone, Default)]
pub struct FencedStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Per resource: the highest accepted token and the value written with it.
    latest: HashMap<String, (u64, String)>,
    log: Vec<AcceptedWrite>,
    rejected: u64,
}

/// One write that a [`FencedStore`] accepted, as returned by
/// [`FencedStore::accepted`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedWrite {
    /// The resource written.
    pub resource: String,
    /// The fencing token the write carried.
    pub token: u64,
    /// The value written.
    pub value: String,
    /// Position in the store's log of accepted writes, from 0, across all
    /// resources.
    pub seq: u64,
}

/// The error of [`FencedStore::write`]: the token is lower than one the
/// store already accepted for that resource, so the writer's lock has been
/// granted to someone else since.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleToken {
    /// The resource written.
    pub resource: String,
    /// The refused token.
    pub token: u64,
    /// The highest token accepted for the resource.
    pub highest: u64,
}

impl fmt::Display for StaleToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stale fencing token {} for {:?}: token {} was already accepted",
            self.token, self.resource, self.highest
        )
    }
}

impl std::error::Error for StaleToken {}

impl FencedStore {
    /// An empty store.
    pub fn new() -> FencedStore {
        FencedStore::default()
    }

    /// Writes `value` to `resource` if `token` is at least the highest token
    /// accepted for it so far.
    pub fn write(
        &self,
        resource: &str,
        token: u64,
        value: impl Into<String>,
    ) -> Result<(), StaleToken> {
        let mut inner = self.inner.lock();
        if let Some(&(highest, _)) = inner.latest.get(resource) {
            if token < highest {
                inner.rejected += 1;
                return Err(StaleToken {
                    resource: resource.to_owned(),
                    token,
                    highest,
                });
            }
        }
        let value = value.into();
        let seq = inner.log.len() as u64;
        inner.log.push(AcceptedWrite {
            resource: resource.to_owned(),
            token,
            value: value.clone(),
            seq,
        });
        inner.latest.insert(resource.to_owned(), (token, value));
        Ok(())
    }

    /// The token and value of the last accepted write to `resource`.
    pub fn read(&self, resource: &str) -> Option<(u64, String)> {
        self.inner.lock().latest.get(resource).cloned()
    }

    /// The highest token accepted for `resource`.
    pub fn highest(&self, resource: &str) -> Option<u64> {
        self.inner
            .lock()
            .latest
            .get(resource)
            .map(|(token, _)| *token)
    }

    /// Every accepted write so far, in the order accepted.
    pub fn accepted(&self) -> Vec<AcceptedWrite> {
        self.inner.lock().log.clone()
    }

    /// How many writes were refused.
    pub fn rejected_count(&self) -> u64 {
        self.inner.lock().rejected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_equal_and_higher_rejects_lower() {
        let store = FencedStore::new();
        assert_eq!(store.read("r"), None);
        store.write("r", 5, "a").unwrap();
        store.write("r", 5, "b").unwrap();
        store.write("r", 7, "c").unwrap();
        let err = store.clone().write("r", 6, "late").unwrap_err();
        assert_eq!(
            err,
            StaleToken {
                resource: "r".into(),
                token: 6,
                highest: 7
            }
        );
        assert!(err.to_string().contains("stale fencing token 6"));
        // Tokens are per resource.
        store.write("other", 1, "x").unwrap();

        assert_eq!(store.read("r"), Some((7, "c".into())));
        assert_eq!(store.highest("r"), Some(7));
        assert_eq!(store.highest("other"), Some(1));
        assert_eq!(store.rejected_count(), 1);
        let log = store.accepted();
        let tokens: Vec<(u64, u64)> = log.iter().map(|w| (w.seq, w.token)).collect();
        assert_eq!(tokens, vec![(0, 5), (1, 5), (2, 7), (3, 1)]);
    }
}
