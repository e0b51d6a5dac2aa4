//! The compare-and-delete and compare-and-expire that newer servers have as
//! commands, used instead of a script where a connection's server has
//! them: Valkey 9.0+ `DELIFEQ key value`, Redis 8.4+ `DELEX key IFEQ value`,
//! and Valkey 8.1+ / Redis 8.4+ `SET key value IFEQ value PX ttl`.
//!
//! Each connection finds out what its server runs when it connects, by
//! sending the commands on a key nobody writes ([`probe`]): a server that
//! lacks one, or an ACL user not allowed it, answers with an error and
//! keeps the Lua scripts. Only a single resource's release and extension
//! have a native form; several resources, acquisition, the raise round and
//! a failed attempt's clean-up stay in Lua, which runs everything at once.
//!
//! The native forms do what the scripts do, with two differences the lease
//! accounts for:
//! - `DELIFEQ` cannot write the void key where the key was not ours
//!   (`lua/release.lua`): the worker writes it right after, on the same
//!   connection, when the answer is 0.
//! - `SET … IFEQ … PX` sets the expiry it is given, where `lua/extend.lua`
//!   only moves it later (`GT`). `src/lock/lease.rs` sends it only under the
//!   rules `tests/model_lease.rs` checks.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{RedisResult, Value};

use crate::protocol::keys::{Kind, Target};

/// The native commands a connection's server runs for us.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Commands {
    /// `DELIFEQ key value` (Valkey 9.0+).
    pub delifeq: bool,
    /// `DELEX key IFEQ value` (Redis 8.4+).
    pub delex: bool,
    /// `SET key value IFEQ value PX ttl` (Valkey 8.1+, Redis 8.4+).
    pub set_ifeq: bool,
}

/// What an instance's latest connection runs natively: for the lease to
/// know whether a native form can be sent at all (the worker decides per
/// connection), and for the doctor to tell.
#[derive(Default)]
pub(crate) struct Support(AtomicU8);

const DELIFEQ: u8 = 1;
const DELEX: u8 = 2;
const SET_IFEQ: u8 = 4;

impl Support {
    pub(crate) fn record(&self, commands: Commands) {
        let bit = |on: bool, bit: u8| if on { bit } else { 0 };
        let bits = bit(commands.delifeq, DELIFEQ)
            | bit(commands.delex, DELEX)
            | bit(commands.set_ifeq, SET_IFEQ);
        self.0.store(bits, Ordering::Release);
    }

    pub(crate) fn extends_natively(&self) -> bool {
        self.commands().set_ifeq
    }

    pub(crate) fn releases_natively(&self) -> bool {
        let commands = self.commands();
        commands.delifeq || commands.delex
    }

    pub(crate) fn commands(&self) -> Commands {
        let bits = self.0.load(Ordering::Acquire);
        Commands {
            delifeq: bits & DELIFEQ != 0,
            delex: bits & DELEX != 0,
            set_ifeq: bits & SET_IFEQ != 0,
        }
    }
}

/// A value no lock holds (lock values are `random:identity`), so the probe
/// deletes and sets nothing.
const PROBE_VALUE: &str = "redfence-probe";

/// Asks the server, on a fresh connection, which native commands it runs
/// for this user. `key` lies in the client's key prefix, so an ACL that
/// limits keys allows it; nothing ever writes it.
pub(crate) fn probe(conn: &mut redis::Connection, key: &str) -> RedisResult<Commands> {
    let mut pipe = redis::pipe();
    // An unknown command, a syntax error (SET without IFEQ) or an ACL
    // refusal come back as values: each says "no" for its command only.
    pipe.ignore_errors();
    pipe.cmd("DELIFEQ").arg(key).arg(PROBE_VALUE);
    pipe.cmd("DELEX").arg(key).arg("IFEQ").arg(PROBE_VALUE);
    pipe.cmd("SET")
        .arg(key)
        .arg(PROBE_VALUE)
        .arg("IFEQ")
        .arg(PROBE_VALUE)
        .arg("PX")
        .arg(1);
    let replies: Vec<Value> = pipe.query(conn)?;
    Ok(from_replies(&replies))
}

fn from_replies(replies: &[Value]) -> Commands {
    let int = |v: Option<&Value>| matches!(v, Some(Value::Int(_)));
    Commands {
        delifeq: int(replies.first()),
        delex: int(replies.get(1)),
        // Nil: the key did not hold the compared value, nothing was set.
        set_ifeq: matches!(replies.get(2), Some(Value::Nil | Value::Okay)),
    }
}

/// The native form of a request, for servers that run it. It sends as many
/// commands as the Lua form it stands in for, and its replies are read as
/// that form's ([`Form::normalize`]).
pub(crate) enum Form {
    /// A holder's release of one resource: compare-and-delete, then the
    /// same `PUBLISH` as the Lua form.
    Release {
        delifeq: Arc<[u8]>,
        delex: Arc<[u8]>,
        /// `SET void 1 PX ttl`, written where the key was not ours.
        void: Arc<[u8]>,
    },
    /// An extension of one resource.
    Extend(Arc<[u8]>),
}

impl Form {
    /// The bytes to send to a server that runs `commands`, if it runs this
    /// form.
    pub(crate) fn pick(&self, commands: Commands) -> Option<&Arc<[u8]>> {
        match self {
            Form::Release { delifeq, .. } if commands.delifeq => Some(delifeq),
            Form::Release { delex, .. } if commands.delex => Some(delex),
            Form::Extend(packed) if commands.set_ifeq => Some(packed),
            Form::Release { .. } | Form::Extend(_) => None,
        }
    }

    /// Makes the replies read like the Lua form's: `1` when our key was
    /// deleted or extended, `0` when it was not ours.
    pub(crate) fn normalize(&self, values: &mut [Value]) {
        if let (Form::Extend(_), Some(first)) = (self, values.first_mut()) {
            match first {
                Value::Okay => *first = Value::Int(1),
                Value::Nil => *first = Value::Int(0),
                _ => {}
            }
        }
    }

    /// What must follow the replies on the same connection: the void key
    /// of a release that found the key not ours.
    pub(crate) fn follow_up(&self, values: &[Value]) -> Option<&Arc<[u8]>> {
        match (self, values.first()) {
            (Form::Release { void, .. }, Some(Value::Int(0))) => Some(void),
            _ => None,
        }
    }

    /// True when the server refused the native command itself (unknown to
    /// it, or not allowed to this user): the request goes again in Lua, and
    /// the connection stops using native commands.
    pub(crate) fn refused(values: &[Value]) -> bool {
        matches!(values.first(), Some(Value::ServerError(e))
            if e.code() == "NOPERM" || (e.code() == "ERR" && unknown(e.details())))
    }
}

/// An `ERR` that says the server does not know the command (or, for
/// `SET … IFEQ`, the option).
fn unknown(details: Option<&str>) -> bool {
    let details = details.unwrap_or("").to_ascii_lowercase();
    details.contains("unknown command") || details.contains("syntax error")
}

/// The native form of a holder's release, for a single resource (`None`
/// for a set). `ttl` is how long the void key stays, as in the Lua form.
pub(crate) fn release(
    target: &Target,
    value: &str,
    ttl: Duration,
    announcement: &[u8],
) -> Option<Arc<Form>> {
    let [member] = target.members.as_slice() else {
        return None;
    };
    // A reader-writer lock has more than one key to clear: its script.
    if matches!(target.kind, Kind::Rw(_)) {
        return None;
    }
    let keys = &member.keys;
    let with_publish = |cmd: redis::Cmd| -> Arc<[u8]> {
        let mut bytes = cmd.get_packed_command();
        bytes.extend(
            redis::cmd("PUBLISH")
                .arg(&keys.channel)
                .arg(announcement)
                .get_packed_command(),
        );
        bytes.into()
    };
    let mut delifeq = redis::cmd("DELIFEQ");
    delifeq.arg(&keys.lock).arg(value);
    let mut delex = redis::cmd("DELEX");
    delex.arg(&keys.lock).arg("IFEQ").arg(value);
    let void = redis::cmd("SET")
        .arg(target.void_key(value))
        .arg("1")
        .arg("PX")
        .arg(ttl.as_millis().max(1) as u64)
        .get_packed_command();
    Some(Arc::new(Form::Release {
        delifeq: with_publish(delifeq),
        delex: with_publish(delex),
        void: void.into(),
    }))
}

/// The native form of an extension of a single resource (`None` for a
/// set).
pub(crate) fn extend(target: &Target, value: &str, ttl: Duration) -> Option<Arc<Form>> {
    let [member] = target.members.as_slice() else {
        return None;
    };
    // A permit's extension keeps its count record alive too: its script.
    let scripted = matches!(
        target.kind,
        Kind::Rw(_) | Kind::Permit { count: Some(_), .. }
    );
    if scripted {
        return None;
    }
    let packed = redis::cmd("SET")
        .arg(&member.keys.lock)
        .arg(value)
        .arg("IFEQ")
        .arg(value)
        .arg("PX")
        .arg(ttl.as_millis().max(1) as u64)
        .get_packed_command();
    Some(Arc::new(Form::Extend(packed.into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: &str, details: &str) -> Value {
        let reply = format!("-{code} {details}\r\n");
        redis::parse_redis_value(reply.as_bytes()).expect("an error reply")
    }

    #[test]
    fn the_probe_reads_each_answer_on_its_own() {
        let valkey9 = [
            Value::Int(0),
            err("ERR", "unknown command 'DELEX'"),
            Value::Nil,
        ];
        assert_eq!(
            from_replies(&valkey9),
            Commands {
                delifeq: true,
                delex: false,
                set_ifeq: true
            }
        );
        let redis7 = [
            err("ERR", "unknown command 'DELIFEQ'"),
            err("ERR", "unknown command 'DELEX'"),
            err("ERR", "syntax error"),
        ];
        assert_eq!(from_replies(&redis7), Commands::default());
        let acl = [
            err(
                "NOPERM",
                "User u has no permissions to run the 'delifeq' command",
            ),
            err("ERR", "unknown command 'DELEX'"),
            Value::Nil,
        ];
        assert!(!from_replies(&acl).delifeq && from_replies(&acl).set_ifeq);
    }

    #[test]
    fn extension_replies_read_like_the_script() {
        let target = Target::one("p:", "r").expect("a valid name");
        let form = extend(&target, "v", Duration::from_secs(1)).expect("one resource");
        let mut ok = [Value::Okay];
        form.normalize(&mut ok);
        assert_eq!(ok, [Value::Int(1)]);
        let mut gone = [Value::Nil];
        form.normalize(&mut gone);
        assert_eq!(gone, [Value::Int(0)]);
        assert!(form.follow_up(&gone).is_none());
        let all = Commands {
            delifeq: true,
            delex: true,
            set_ifeq: true,
        };
        assert!(form.pick(all).is_some());
        assert!(form.pick(Commands::default()).is_none());
    }

    #[test]
    fn a_release_that_found_the_key_not_ours_writes_the_void_key_after() {
        let target = Target::one("p:", "r").expect("a valid name");
        let form = release(&target, "v", Duration::from_secs(1), b"1").expect("one resource");
        assert!(form.follow_up(&[Value::Int(1), Value::Int(0)]).is_none());
        let void = form
            .follow_up(&[Value::Int(0), Value::Int(0)])
            .expect("a void write");
        let text = String::from_utf8_lossy(void);
        assert!(text.contains(&target.void_key("v")), "{text}");
        let delex_only = Commands {
            delex: true,
            ..Commands::default()
        };
        let picked = form.pick(delex_only).expect("DELEX");
        assert!(String::from_utf8_lossy(picked).contains("DELEX"));
        let sets = Target::all("p:", &["a", "b"]).expect("valid names");
        assert!(release(&sets, "v", Duration::from_secs(1), b"1").is_none());
        assert!(extend(&sets, "v", Duration::from_secs(1)).is_none());
    }

    #[test]
    fn only_a_refused_command_falls_back_to_the_script() {
        assert!(Form::refused(&[err(
            "ERR",
            "unknown command 'DELIFEQ', with args"
        )]));
        assert!(Form::refused(&[err(
            "NOPERM",
            "User u has no permissions to run the 'delifeq' command"
        )]));
        assert!(!Form::refused(&[err(
            "WRONGTYPE",
            "Operation against a key"
        )]));
        assert!(Form::refused(&[err("ERR", "syntax error")]));
        assert!(!Form::refused(&[err(
            "ERR",
            "max number of clients reached"
        )]));
        assert!(!Form::refused(&[Value::Int(0)]));
    }
}
