//! The doctor's permission check: every command a client sends, directly
//! or from its scripts, probed on each instance under the client's own
//! user, on keys and a channel of the doctor's resource.
//!
//! Redis checks a script's calls against the caller's ACL when they run,
//! with the same rules as the commands sent directly, and `EVALSHA`'s
//! declared keys against its key patterns. So each command of
//! [`ACL_COMMANDS`](crate::ACL_COMMANDS) sent directly, on keys of each
//! kind the scripts touch, answers for every path of every script, where
//! running the scripts would answer only for the path a probe takes.
//! `ACL DRYRUN` would need `+acl|dryrun`, which the least privilege does
//! not grant, and does not look inside scripts. The subscriber's
//! commands are not sent: they would change the state of the connection
//! that carries the locks.

use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use crate::protocol::keys::{Keys, RwKeys, Target};
use crate::protocol::scripts;
use crate::transport::instance::{Collect, Replies, Request};
use crate::Redlock;

/// The value the probes write under: no lock ever has it.
const PROBE_VALUE: &str = "doctor-probe";

/// How long the probes' keys may live (they are deleted at once).
const PROBE_PX: &str = "5000";

/// One probed command: its ACL name, the key it names (if any), and the
/// command itself.
pub(super) struct Probe {
    command: &'static str,
    key: Option<String>,
    cmd: redis::Cmd,
}

/// A probe of `command`, sent as `cmd` (its name a literal here, so the
/// request registry's scan reads it) with `args`.
fn probe(command: &'static str, key: Option<&str>, mut cmd: redis::Cmd, args: &[&str]) -> Probe {
    for arg in args {
        cmd.arg(*arg);
    }
    Probe {
        command,
        key: key.map(str::to_string),
        cmd,
    }
}

/// `SCRIPT LOAD`, its script to come.
fn script_load() -> redis::Cmd {
    redis::cmd("SCRIPT").arg("LOAD").clone()
}

/// The probes without keys, sent to every server (each cluster shard
/// master too).
pub(super) fn keyless() -> Vec<Probe> {
    let source = scripts::holder_source();
    vec![
        probe("ping", None, redis::cmd("PING"), &[]),
        probe("time", None, redis::cmd("TIME"), &[]),
        probe("script|load", None, script_load(), &[source]),
    ]
}

/// The probes on keys and the release channel of `resource`, each
/// command on a key of the kind the scripts use it on. Nothing they write
/// outlives the round: a void key no attempt uses, deleted at once, and a
/// reader scored as long expired, removed at once.
pub(super) fn on_keys(prefix: &str, resource: &str) -> Vec<Probe> {
    let keys = Keys::new(prefix, resource);
    let readers = RwKeys::new(prefix, resource).readers;
    let void = Target::one(prefix, resource)
        .map(|t| t.void_key(PROBE_VALUE))
        .unwrap_or_default();
    let (lock, fence, r, v) = (&keys.lock, &keys.fence, &readers, &void);
    let holder = Probe {
        command: "evalsha",
        key: Some(lock.clone()),
        cmd: scripts::holder_cmd(&keys),
    };
    vec![
        holder,
        probe("get", Some(lock), redis::cmd("GET"), &[lock]),
        probe("exists", Some(fence), redis::cmd("EXISTS"), &[fence]),
        probe("type", Some(lock), redis::cmd("TYPE"), &[lock]),
        probe("pttl", Some(lock), redis::cmd("PTTL"), &[lock]),
        probe(
            "set",
            Some(v),
            redis::cmd("SET"),
            &[v, "1", "NX", "PX", PROBE_PX],
        ),
        probe("pexpire", Some(v), redis::cmd("PEXPIRE"), &[v, PROBE_PX]),
        probe("del", Some(v), redis::cmd("DEL"), &[v]),
        probe(
            "zadd",
            Some(r),
            redis::cmd("ZADD"),
            &[r, "NX", "0", PROBE_VALUE],
        ),
        probe("zscore", Some(r), redis::cmd("ZSCORE"), &[r, PROBE_VALUE]),
        probe("zrange", Some(r), redis::cmd("ZRANGE"), &[r, "0", "0"]),
        probe("zrem", Some(r), redis::cmd("ZREM"), &[r, PROBE_VALUE]),
        probe(
            "zremrangebyscore",
            Some(r),
            redis::cmd("ZREMRANGEBYSCORE"),
            &[r, "0", "0"],
        ),
        probe("publish", None, redis::cmd("PUBLISH"), &[&keys.channel, ""]),
    ]
}

/// The probes as one pipeline.
pub(super) fn packed(probes: &[Probe]) -> Vec<u8> {
    probes
        .iter()
        .flat_map(|p| p.cmd.get_packed_command())
        .collect()
}

/// What a refusal asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Missing {
    /// The ACL rule that allows it: `+zadd`, `~redfence:*`,
    /// `&redfence:released:*`.
    pub rule: String,
    /// What it refuses, for the message.
    pub what: String,
}

/// The refusals among `replies` (one per probe, in order), each rule
/// once; `rules` are the key and channel rules of the client's prefix.
pub(super) fn refusals(probes: &[Probe], replies: &[Value], rules: &Rules) -> Vec<Missing> {
    let mut missing: Vec<Missing> = Vec::new();
    for (probe, reply) in probes.iter().zip(replies) {
        let Value::ServerError(e) = reply else {
            continue;
        };
        let detail = format!("{} {}", e.code(), e.details().unwrap_or_default());
        if let Some(found) = refusal(&detail, Some(probe.command), probe.key.as_deref(), rules) {
            if !missing.iter().any(|m| m.rule == found.rule) {
                missing.push(found);
            }
        }
    }
    missing
}

/// The key and channel rules of the client's prefix (`acl_rules`).
pub(super) struct Rules {
    pub keys: String,
    pub channels: String,
}

impl Rules {
    pub(crate) fn of(prefix: &str) -> Rules {
        let rules = crate::acl_rules(prefix);
        Rules {
            keys: rules.get(1).cloned().unwrap_or_default(),
            channels: rules.get(3).cloned().unwrap_or_default(),
        }
    }
}

/// What one refusal (`NOPERM …`, or Redis 7.0's refusal inside a script)
/// asks for; `None` for an error that is no refusal. A command the server
/// names is that command's rule; otherwise a key or a channel.
pub(super) fn refusal(
    detail: &str,
    command: Option<&str>,
    key: Option<&str>,
    rules: &Rules,
) -> Option<Missing> {
    let refused = detail.starts_with("NOPERM") || detail.contains("can't run this command");
    if !refused {
        return None;
    }
    if let Some(named) = named_command(detail) {
        let what = crate::acl::needed_for(&named).to_string();
        return Some(Missing {
            rule: format!("+{named}"),
            what,
        });
    }
    let lower = detail.to_ascii_lowercase();
    if lower.contains("channel") {
        return Some(Missing {
            rule: rules.channels.clone(),
            what: "release announcements on the client's channels".to_string(),
        });
    }
    if lower.contains("key") {
        let tried = key.map_or(String::new(), |k| format!(" ({k} was refused)"));
        return Some(Missing {
            rule: rules.keys.clone(),
            what: format!("the client's keys{tried}"),
        });
    }
    Some(match command {
        Some(command) => Missing {
            rule: format!("+{command}"),
            what: crate::acl::needed_for(command).to_string(),
        },
        None => Missing {
            rule: "redfence::acl_rules".to_string(),
            what: format!("a command redfence sends: {detail}"),
        },
    })
}

/// The command a refusal names: `… the 'zadd' command` gives `zadd`.
fn named_command(detail: &str) -> Option<String> {
    let (_, rest) = detail.split_once('\'')?;
    let (command, after) = rest.split_once('\'')?;
    let valid = !command.is_empty()
        && command
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '|' || c == '-' || c == '_');
    (valid && after.trim_start().starts_with("command")).then(|| command.to_ascii_lowercase())
}

/// Where one server's answer to the key probes goes.
struct Row(usize, crossbeam_channel::Sender<(usize, Replies)>);

impl Collect for Row {
    fn deliver(&self, _index: usize, replies: Replies) {
        // The doctor may have stopped waiting; that is fine.
        let _ = self.1.send((self.0, replies));
    }
}

/// How long past the round's deadline the doctor waits for answers whose
/// cause is known (a refused connection).
const GRACE: std::time::Duration = std::time::Duration::from_millis(50);

impl Redlock {
    /// Sends `packed` (`commands` commands) to each standalone position
    /// and returns, by position, the replies of those that answered in
    /// time. Cluster positions are left out: keys route to one shard.
    pub(super) fn ask_standalone(
        &self,
        packed: Arc<[u8]>,
        commands: usize,
    ) -> Vec<(usize, Replies)> {
        let shared = self.shared();
        let deadline = shared.round_deadline();
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut sent = 0;
        for (position, voter) in shared.instances.voters().enumerate() {
            if voter.is_cluster() {
                continue;
            }
            let sink: crate::transport::instance::Sink = Arc::new(Row(position, tx.clone()));
            voter.send(Request::plain(
                Arc::clone(&packed),
                commands,
                deadline,
                Some(sink),
            ));
            sent += 1;
        }
        drop(tx);
        let by = deadline + GRACE;
        let mut out = Vec::with_capacity(sent);
        while out.len() < sent {
            match rx.recv_deadline(by.max(Instant::now())) {
                Ok(answer) => out.push(answer),
                Err(_) => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_its_rule() {
        let rules = Rules::of("app:");
        let command = refusal(
            "NOPERM User app has no permissions to run the 'zadd' command",
            Some("zadd"),
            Some("app:rw:{x}:readers"),
            &rules,
        )
        .unwrap();
        assert_eq!(command.rule, "+zadd");
        assert!(command.what.contains("reader-writer"), "{command:?}");
        let key = refusal(
            "NOPERM this user has no permissions to access one of the keys used as arguments",
            Some("get"),
            Some("app:lock:{x}"),
            &rules,
        )
        .unwrap();
        assert_eq!(key.rule, "~app:*");
        assert!(key.what.contains("app:lock:{x}"), "{key:?}");
        let channel = refusal(
            "NOPERM No permissions to access a channel",
            Some("publish"),
            None,
            &rules,
        )
        .unwrap();
        assert_eq!(channel.rule, "&app:released:*");
        assert!(refusal("WRONGTYPE Operation", Some("get"), None, &rules).is_none());
    }
}
