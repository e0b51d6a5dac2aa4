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

/// What each command of [`ACL_COMMANDS`] is needed for: a user without
/// it cannot use these (the doctor names them next to the missing rule).
/// The one place that ties a command to the primitives sending it or
/// calling it from their scripts; a unit test checks it against the
/// scripts' calls.
pub(crate) fn needed_for(command: &str) -> &'static str {
    match command {
        "ping" => "ping and readiness checks",
        "time" => "every connection (the instance clock is read on connect)",
        "evalsha" | "script|load" | "get" | "set" => "every primitive",
        "del" => "releases, unlock and reader-writer locks",
        "exists" => "locks, sets, semaphores, elections and reader-writer locks",
        "type" => "locks, sets, semaphores and elections",
        "pexpire" => "locks (fence raises), extensions, holds and reader-writer locks",
        "publish" => "releases (the announcement that wakes waiters)",
        "subscribe" | "unsubscribe" | "punsubscribe" => "waiting for a release",
        "pttl" => "holder reads (holder, status), elections and reader-writer locks",
        "zadd" | "zrem" | "zscore" | "zrange" | "zremrangebyscore" => {
            "reader-writer locks (reads, writes, their holders and unlock)"
        }
        _ => "redfence",
    }
}

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

    /// Every command a script calls is listed, and said to be needed by
    /// the primitives that run that script.
    #[test]
    fn each_script_call_is_a_listed_command_needed_by_its_primitives() {
        let scripts: &[(&str, &str, &str)] = &[
            ("acquire", include_str!("../lua/acquire.lua"), "locks"),
            ("extend", include_str!("../lua/extend.lua"), "extensions"),
            (
                "fence_raise",
                include_str!("../lua/fence_raise.lua"),
                "locks",
            ),
            (
                "force_release",
                include_str!("../lua/force_release.lua"),
                "unlock",
            ),
            ("holder", include_str!("../lua/holder.lua"), "holder reads"),
            ("release", include_str!("../lua/release.lua"), "releases"),
            (
                "release_hold",
                include_str!("../lua/release_hold.lua"),
                "holds",
            ),
            (
                "rw_acquire",
                include_str!("../lua/rw_acquire.lua"),
                "reader-writer",
            ),
            (
                "rw_extend",
                include_str!("../lua/rw_extend.lua"),
                "reader-writer",
            ),
            (
                "rw_force_release",
                include_str!("../lua/rw_force_release.lua"),
                "unlock",
            ),
            (
                "rw_holders",
                include_str!("../lua/rw_holders.lua"),
                "holder",
            ),
            (
                "rw_release",
                include_str!("../lua/rw_release.lua"),
                "reader-writer",
            ),
            (
                "rw_withdraw",
                include_str!("../lua/rw_withdraw.lua"),
                "reader-writer",
            ),
            (
                "semaphore_slots",
                include_str!("../lua/semaphore_slots.lua"),
                "semaphores",
            ),
            ("term", include_str!("../lua/term.lua"), "elections"),
        ];
        for (name, source, primitive) in scripts {
            for call in source.split("redis.call('").skip(1) {
                let command = call.split('\'').next().unwrap_or("").to_ascii_lowercase();
                assert!(
                    ACL_COMMANDS.contains(&command.as_str()),
                    "{name}: {command}"
                );
                let needed = needed_for(&command);
                let listed = needed.contains(primitive)
                    || needed.starts_with("every")
                    || (command == "zscore" && *name == "fence_raise");
                assert!(listed, "{name} calls {command}, needed for {needed:?}");
            }
        }
        for command in ACL_COMMANDS {
            assert_ne!(needed_for(command), "redfence", "{command}");
        }
    }

    #[test]
    fn rules_escape_glob_characters_of_the_prefix() {
        let rules = acl_rules("a*b:");
        assert_eq!(rules[1], "~a\\*b:*");
        assert_eq!(rules[3], "&a\\*b:released:*");
        assert!(rules.contains(&"+script|load".to_string()));
    }
}
