//! Where a resource's lock, fencing counter and release channel live.
//!
//! For resource `R` and prefix `P` (default `redfence:`):
//! - `P lock:{R}`: the lock, a string holding the holder's random value,
//!   with the lease's TTL;
//! - `P fence:{R}`: the last fencing counter, an integer string that expires
//!   after the counter idle time;
//! - `P released:{R}`: the pub/sub channel a release is announced on.
//!
//! The two prefixes differ, so no resource name can collide with another's
//! counter, and `{R}` is a hash tag that keeps both keys on the same slot if
//! an instance is a cluster node.

use crate::Error;

/// Longest accepted resource name, in bytes.
pub const MAX_RESOURCE_LEN: usize = 1024;

#[derive(Debug)]
pub(crate) struct Keys {
    pub lock: String,
    pub fence: String,
    pub channel: String,
}

impl Keys {
    pub fn new(prefix: &str, resource: &str) -> Self {
        Keys {
            lock: format!("{prefix}lock:{{{resource}}}"),
            fence: format!("{prefix}fence:{{{resource}}}"),
            channel: format!("{prefix}released:{{{resource}}}"),
        }
    }
}

pub(crate) fn validate_resource(resource: &str) -> Result<(), Error> {
    let reason = if resource.is_empty() {
        "the name is empty".to_string()
    } else if resource.len() > MAX_RESOURCE_LEN {
        format!(
            "the name is {} bytes long, the limit is {MAX_RESOURCE_LEN}",
            resource.len()
        )
    } else {
        return Ok(());
    };
    Err(Error::InvalidResource { reason })
}

pub(crate) fn validate_prefix(prefix: &str) -> Result<(), Error> {
    if prefix.contains(['{', '}']) {
        return Err(Error::invalid_config(format!(
            "key prefix {prefix:?} contains '{{' or '}}', which would break the hash tag of every key"
        )));
    }
    if prefix.len() > MAX_RESOURCE_LEN {
        return Err(Error::invalid_config(
            "key prefix is longer than 1024 bytes",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_documented_keys() {
        let k = Keys::new("redfence:", "invoice:42");
        assert_eq!(k.lock, "redfence:lock:{invoice:42}");
        assert_eq!(k.fence, "redfence:fence:{invoice:42}");
        assert_eq!(k.channel, "redfence:released:{invoice:42}");
    }

    #[test]
    fn bad_names_are_refused_with_a_reason() {
        assert!(matches!(
            validate_resource(""),
            Err(Error::InvalidResource { .. })
        ));
        let long = "x".repeat(MAX_RESOURCE_LEN + 1);
        let err = validate_resource(&long).unwrap_err().to_string();
        assert!(err.contains("1025 bytes"), "{err}");
        assert!(validate_resource(&"x".repeat(MAX_RESOURCE_LEN)).is_ok());
        assert!(validate_prefix("app{").is_err());
        assert!(validate_prefix("").is_ok());
    }
}
