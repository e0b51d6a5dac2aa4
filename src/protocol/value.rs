//! A lock value and the holder's identity inside it.
//!
//! A lock value is `RANDOM:IDENTITY`: the random part (a UUID, 32 hex
//! digits) is the holder's secret, which releases and extends compare
//! against; the identity after the first `:` is public, the name a client
//! shows to others. The scripts that report a holder (`lua/acquire.lua` on
//! a refusal, `lua/holder.lua`) send back the identity only, so the secret
//! never leaves the instance. The identity costs no key and no command: it
//! travels in the value that is written anyway.

use std::collections::HashMap;

use crate::Error;

/// Longest identity accepted, in bytes.
pub const MAX_IDENTITY_LEN: usize = 128;

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
