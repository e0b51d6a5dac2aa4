//! The least privilege a redfence client needs on each instance, as Redis
//! ACL rules: the one place that lists the commands, so the README, the
//! tests and operators' scripts agree.

/// Every command a redfence client sends, directly or from its Lua scripts
/// (Redis checks a script's calls against the caller's ACL too).
///
/// - Sent directly: `publish` (a release's announcement), `time` (the
///   instance's clock, read on connect and every few seconds), `ping`
///   ([`Redlock::ping`](crate::Redlock::ping)), `evalsha` and
///   `script|load` (the scripts), `subscribe`, `unsubscribe` and
///   `punsubscribe` (release notifications; redis-rs sends the last one
///   when a subscriber connection is put down).
/// - Called by the scripts: `exists`, `type`, `get`, `set`, `time`
///   (acquisition), `get`, `pexpire`, `time` (raise round and extension),
///   `get`, `del`, `set` (release), `get`, `pexpire`, `set` (a release
///   within [`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least)),
///   `get`, `pttl`, `get` ([`Redlock::holder`](crate::Redlock::holder));
///   `get`, `set`, `exists` (a semaphore's count and free slots); `zadd`,
///   `zrem`, `zscore`, `zrange`, `zremrangebyscore`, `pttl`, `pexpire` (a
///   reader-writer lock's readers).
///
/// redis-rs also sends `CLIENT SETINFO` when it connects and ignores the
/// answer, so it need not be allowed.
pub const ACL_COMMANDS: &[&str] = &[
    "ping",
    "time",
    "get",
    "set",
    "del",
    "exists",
    "pexpire",
    "publish",
    "subscribe",
    "unsubscribe",
    // redis-rs sends it (with UNSUBSCRIBE) when a subscriber connection is
    // put down; refused, it would only fill the ACL log.
    "punsubscribe",
    "evalsha",
    "script|load",
    "type",
    // Redlock::holder and elections: the lock's remaining time.
    "pttl",
    // Reader-writer locks: the readers, a sorted set.
    "zadd",
    "zrem",
    "zscore",
    "zrange",
    "zremrangebyscore",
];

/// The commands a Redis Cluster position needs on top of
/// [`ACL_COMMANDS`]: `cluster|slots` (the slot map), `asking` (a slot being
/// moved), and sharded pub/sub for release notifications (`spublish`,
/// `ssubscribe`, `sunsubscribe`). The subscriber speaks RESP3 (`HELLO 3`,
/// which every user may send).
pub const ACL_CLUSTER_COMMANDS: &[&str] = &[
    "cluster|slots",
    "asking",
    "spublish",
    "ssubscribe",
    "sunsubscribe",
];

/// [`acl_rules`] for the nodes of a Redis Cluster position: the same keys
/// and channels, [`ACL_COMMANDS`] and [`ACL_CLUSTER_COMMANDS`].
///
/// ```
/// let rules = redfence::acl_cluster_rules("redfence:").join(" ");
/// assert!(rules.ends_with("+cluster|slots +asking +spublish +ssubscribe +sunsubscribe"));
/// ```
pub fn acl_cluster_rules(prefix: &str) -> Vec<String> {
    let mut rules = acl_rules(prefix);
    rules.extend(ACL_CLUSTER_COMMANDS.iter().map(|c| format!("+{c}")));
    rules
}

/// The ACL rules (for `ACL SETUSER name on >password RULES…`) that allow
/// exactly what a client with this key prefix needs: its keys, its release
/// channels and [`ACL_COMMANDS`], nothing else.
///
/// ```
/// let rules = redfence::acl_rules("redfence:").join(" ");
/// assert!(rules.starts_with("resetkeys ~redfence:* resetchannels &redfence:released:* -@all +ping"));
/// println!("ACL SETUSER redfence on >secret {rules}");
/// ```
///
/// Glob characters in the prefix are escaped. A prefix with spaces needs
/// each rule quoted when pasted into `redis-cli`.
pub fn acl_rules(prefix: &str) -> Vec<String> {
    let prefix = escape_glob(prefix);
    let mut rules = vec![
        "resetkeys".to_string(),
        format!("~{prefix}*"),
        "resetchannels".to_string(),
        format!("&{prefix}released:*"),
        "-@all".to_string(),
    ];
    rules.extend(ACL_COMMANDS.iter().map(|c| format!("+{c}")));
    rules
}

fn escape_glob(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_and_the_docs_show_the_rules() {
        let line = format!(
            "ACL SETUSER redfence on >secret {}",
            acl_rules("redfence:").join(" ")
        );
        assert!(include_str!("../README.md").contains(&line), "{line}");
        assert!(
            include_str!("../docs/tls-and-acls.md").contains(&line),
            "{line}"
        );
        let cluster = format!(
            "ACL SETUSER redfence on >secret {}",
            acl_cluster_rules("redfence:").join(" ")
        );
        assert!(
            include_str!("../docs/cluster.md").contains(&cluster),
            "{cluster}"
        );
    }

    #[test]
    fn rules_escape_glob_characters_of_the_prefix() {
        let rules = acl_rules("a*b:");
        assert_eq!(rules[1], "~a\\*b:*");
        assert_eq!(rules[3], "&a\\*b:released:*");
        assert!(rules.contains(&"+script|load".to_string()));
    }
}
