//! Holder identity: the name a client shows to others, carried inside its
//! lock values, and [`Redlock::holder`](crate::Redlock::holder), which reads
//! it back.
//!
//! A lock value is `RANDOM:IDENTITY`: the random part (a UUID, 32 hex
//! digits) is the holder's secret, which releases and extends compare
//! against; the identity after the first `:` is public. The scripts that
//! report a holder (`lua/acquire.lua` on a refusal, `lua/holder.lua`) send
//! back the identity only, so the secret never leaves the instance. The
//! identity costs no key and no command: it travels in the value that is
//! written anyway.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::Value;

use crate::error::{InstanceError, InstanceErrorKind};
use crate::lock::shared::Shared;
use crate::protocol::scripts;
use crate::protocol::split::Route;
use crate::transport::quorum::{error_reply, unexpected, Vote};
use crate::Error;

/// Longest identity accepted, in bytes.
pub const MAX_IDENTITY_LEN: usize = 128;

/// Who holds a lock, as a quorum of the instances sees it: returned by
/// [`Redlock::holder`](crate::Redlock::holder).
///
/// ```no_run
/// # let locks = redfence::Redlock::new(["redis://127.0.0.1:7001"])?;
/// if let Some(holder) = locks.holder("nightly-report")? {
///     println!(
///         "held by {} for {:?} more, on instances {:?}",
///         holder.identity.as_deref().unwrap_or("(unknown)"),
///         holder.ttl,
///         holder.instances
///     );
/// }
/// # Ok::<(), redfence::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's identity ([`RedlockBuilder::identity`](crate::RedlockBuilder::identity));
    /// `None` for a lock taken by a client that predates identities.
    pub identity: Option<String>,
    /// The remaining time to live a quorum of instances agrees on: at least
    /// this long on at least a quorum of them, as of the reading (less the
    /// time the reading took).
    pub ttl: Duration,
    /// The positions (in the order the instances were given to the
    /// builder) of the instances where this identity holds the lock.
    pub instances: Vec<usize>,
    /// The term an election's leader recorded for this holding, as the
    /// highest among those instances (see `lua/term.lua`).
    pub(crate) counter: Option<u64>,
}

/// The identity of this process when none is set: `hostname:pid`.
pub(crate) fn default_identity() -> String {
    let host = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .or_else(|| std::env::var("HOSTNAME").ok());
    identity_of(host.as_deref(), std::process::id())
}

/// `host:pid`, the host name trimmed, made printable ASCII and cut short
/// enough to leave room for any pid; `localhost` when there is none.
fn identity_of(host: Option<&str>, pid: u32) -> String {
    let host = host.map(str::trim).filter(|h| !h.is_empty());
    let host: String = host
        .unwrap_or("localhost")
        .chars()
        .map(|c| if is_printable(c) { c } else { '?' })
        // ':' and the longest pid (u32) take 11 bytes.
        .take(MAX_IDENTITY_LEN - 12)
        .collect();
    format!("{host}:{pid}")
}

fn is_printable(c: char) -> bool {
    c == ' ' || c.is_ascii_graphic()
}

/// Checks an identity: 1 to 128 bytes of printable ASCII (letters, digits,
/// punctuation, spaces), not starting or ending with a space.
pub(crate) fn validate_identity(identity: &str) -> Result<(), Error> {
    let reason = if identity.is_empty() {
        "it is empty".to_string()
    } else if identity.len() > MAX_IDENTITY_LEN {
        format!(
            "it is {} bytes long, the limit is {MAX_IDENTITY_LEN}",
            identity.len()
        )
    } else if let Some(c) = identity.chars().find(|c| !is_printable(*c)) {
        format!(
            "it contains {c:?}: only printable ASCII (letters, digits, punctuation, spaces) \
             is allowed"
        )
    } else if identity.starts_with(' ') || identity.ends_with(' ') {
        "it starts or ends with a space".to_string()
    } else {
        return Ok(());
    };
    Err(Error::invalid_config(format!(
        "identity {identity:?}: {reason}"
    )))
}

/// A fresh lock value: the secret random part, then the public identity.
pub(crate) fn lock_value(identity: &str) -> String {
    format!("{}:{identity}", uuid::Uuid::new_v4().simple())
}

/// The identity most of the answering instances named, if more than half
/// of them named the same one.
pub(crate) fn agreed<'a>(named: impl Iterator<Item = &'a str>, answered: usize) -> Option<String> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for identity in named {
        *counts.entry(identity).or_default() += 1;
    }
    counts
        .into_iter()
        .find(|(_, n)| *n > answered / 2)
        .map(|(identity, _)| identity.to_string())
}

/// One instance's answer to `lua/holder.lua`.
enum Reading {
    Free,
    Held {
        pttl: Option<Duration>,
        identity: String,
        counter: Option<u64>,
        /// The value's SHA1: answers are counted together only when they
        /// name one value, not merely one identity (see `lua/holder.lua`).
        tag: Vec<u8>,
    },
}

fn classify(values: &[Value]) -> Vote<Reading, ()> {
    if let Some(vote) = error_reply(values) {
        return vote;
    }
    if let [Value::Array(items)] = values {
        match items.as_slice() {
            [Value::Int(0)] => return Vote::Yes(Reading::Free),
            [Value::Int(1), Value::Int(pttl), Value::BulkString(identity), Value::BulkString(counter), Value::BulkString(tag)] =>
            {
                let pttl = u64::try_from(*pttl).ok().map(Duration::from_millis);
                return Vote::Yes(Reading::Held {
                    pttl,
                    identity: String::from_utf8_lossy(identity).into_owned(),
                    counter: std::str::from_utf8(counter)
                        .ok()
                        .and_then(|c| c.parse().ok()),
                    tag: tag.clone(),
                });
            }
            _ => {}
        }
    }
    unexpected("holder", values)
}

/// Reads the holder of `resource` on every instance (see
/// [`Redlock::holder`](crate::Redlock::holder)).
pub(crate) fn read(
    shared: &Shared,
    name: &str,
    keys: &crate::protocol::keys::Keys,
) -> Result<Option<Holder>, Error> {
    shared.warmup.wait();
    let start = Instant::now();
    let deadline = shared.round_deadline();
    let cmd = scripts::packed(&scripts::HOLDER, &[&keys.lock, &keys.term], &[]);
    let rx = shared
        .instances
        .broadcast(&cmd, &Route::slot(keys.slot), deadline);
    let n = shared.instances.len();
    let quorum = shared.instances.quorum();
    let names: Vec<&str> = shared.instances.names().collect();
    let mut answered = vec![false; n];
    let mut readings: Vec<(usize, Reading)> = Vec::with_capacity(n);
    let mut errors = Vec::new();
    for _ in 0..n {
        let Ok((index, result)) = rx.recv_deadline(deadline) else {
            break;
        };
        answered[index] = true;
        let vote = match result {
            Ok(values) => classify(&values),
            Err(e) => Vote::Failed(e),
        };
        match vote {
            Vote::Yes(reading) => readings.push((index, reading)),
            Vote::No(()) => {}
            Vote::Failed(e) => errors.push(InstanceError::new(names[index], e.kind(), e.detail())),
        }
    }
    if errors
        .iter()
        .any(|e| e.kind() == InstanceErrorKind::WrongType)
    {
        return Err(Error::WrongType {
            resource: name.to_string(),
            errors,
        });
    }
    if readings.len() < quorum {
        for (i, done) in answered.iter().enumerate() {
            if !done {
                errors.push(InstanceError::new(
                    names[i],
                    InstanceErrorKind::Timeout,
                    "no answer within the per-instance timeout",
                ));
            }
        }
        return Err(Error::Unavailable {
            resource: name.to_string(),
            quorum,
            granted: readings.len(),
            errors,
        });
    }
    let elapsed = start.elapsed();
    type Seen = (usize, Option<Duration>, Option<u64>);
    // By value, not identity: a client that holds the lock again may have
    // left its earlier value (and that value's term) on an instance.
    let mut by_value: HashMap<&[u8], (&str, Vec<Seen>)> = HashMap::new();
    for (index, reading) in &readings {
        if let Reading::Held {
            pttl,
            identity,
            counter,
            tag,
        } = reading
        {
            by_value
                .entry(tag.as_slice())
                .or_insert_with(|| (identity.as_str(), Vec::new()))
                .1
                .push((*index, *pttl, *counter));
        }
    }
    let Some((identity, mut held)) = by_value.into_values().find(|(_, h)| h.len() >= quorum) else {
        return Ok(None);
    };
    held.sort_by_key(|(index, _, _)| *index);
    let mut ttls: Vec<Duration> = held
        .iter()
        .map(|(_, ttl, _)| ttl.unwrap_or(Duration::MAX))
        .collect();
    let counter = held.iter().filter_map(|(_, _, c)| *c).max();
    // Descending: the quorum-th longest is what a quorum agrees on.
    ttls.sort_by(|a, b| b.cmp(a));
    let ttl = ttls[quorum - 1].saturating_sub(elapsed);
    Ok(Some(Holder {
        identity: (!identity.is_empty()).then(|| identity.to_string()),
        ttl,
        instances: held.into_iter().map(|(index, _, _)| index).collect(),
        counter,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_printable_and_short() {
        assert!(validate_identity("billing-worker-3").is_ok());
        assert!(validate_identity("host.example:1234").is_ok());
        assert!(validate_identity("a b").is_ok());
        assert!(validate_identity(&"x".repeat(MAX_IDENTITY_LEN)).is_ok());
        for bad in ["", " x", "x ", "tab\there", "new\nline", "é"] {
            let err = validate_identity(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidConfig { .. }), "{bad:?}");
        }
        let long = validate_identity(&"x".repeat(MAX_IDENTITY_LEN + 1)).unwrap_err();
        assert!(long.to_string().contains("129 bytes"), "{long}");
        assert!(validate_identity(&default_identity()).is_ok());
        assert_eq!(identity_of(Some(" web-1\n"), 42), "web-1:42");
        assert_eq!(identity_of(Some("  "), 42), "localhost:42");
        assert_eq!(identity_of(None, 42), "localhost:42");
        assert_eq!(identity_of(Some("wéb"), 7), "w?b:7");
        let long = identity_of(Some(&"h".repeat(1000)), u32::MAX);
        assert!(validate_identity(&long).is_ok(), "{} bytes", long.len());
        assert!(long.ends_with(&format!(":{}", u32::MAX)));
        assert!(default_identity().ends_with(&format!(":{}", std::process::id())));
    }

    #[test]
    fn a_value_is_the_secret_then_the_identity() {
        let value = lock_value("worker:7");
        let (secret, identity) = value.split_once(':').unwrap();
        assert_eq!(secret.len(), 32);
        assert_eq!(identity, "worker:7");
    }

    #[test]
    fn agreement_needs_more_than_half_of_the_answers() {
        assert_eq!(agreed(["a", "a", "b"].into_iter(), 3).as_deref(), Some("a"));
        assert_eq!(agreed(["a", "b"].into_iter(), 3), None);
        assert_eq!(agreed(["a", "a"].into_iter(), 5), None);
        assert_eq!(agreed(["a", "a", "a"].into_iter(), 5).as_deref(), Some("a"));
    }
}
