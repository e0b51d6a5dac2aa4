//! One acquisition attempt: the Redlock vote plus the fencing token.
//!
//! Each instance gets one pipeline of native commands, no script:
//!
//! 1. `SET fence S NX PX idle`: a missing counter starts at the seed `S`,
//!    the latest instance clock reading (see `clock.rs`);
//! 2. `SET lock value NX PX ttl GET`: the lock itself; the reply is nil when
//!    granted, the holder's value when not, and WRONGTYPE for a foreign key;
//! 3. `INCR fence`: the instance's fencing counter for this grant;
//! 4. `PEXPIRE fence idle`: the counter expires only after `idle` unused.
//!
//! The pipeline is not a transaction: `INCR` also runs where the lock was
//! refused (counters only go up, so that is harmless), and another client's
//! FLUSHALL can run between its commands. A counter below
//! [`SEED_FLOOR`](crate::clock::SEED_FLOOR) is one that no seed reached; it
//! counts as the current clock reading plus its value, and the raise round
//! lifts it. `tests/model_fencing.rs` checks that tokens still strictly
//! increase, and that they do not without that rule.
//!
//! A set of resources (`lock_all`) needs all its locks set or none on each
//! instance, which takes a script: `lua/acquire_all.lua` does the same per
//! member, atomically, after checking every key. Everything after the vote
//! (tokens per member, raise rounds, validity, clean-up) is shared.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::clock::SEED_FLOOR;
use crate::keys::{Keys, Target};
use crate::quorum::{all_yes, error_reply, unexpected, Vote};
use crate::scripts::{self, ACQUIRE_ALL, FENCE_RAISE};
use crate::shared::Shared;
use crate::telemetry;
use crate::{Error, FencingToken};

/// Commands in one acquire request.
const ACQUIRE_COMMANDS: usize = 4;

/// A granted lock, before it becomes a guard.
pub(crate) struct Grant {
    pub value: String,
    /// One per member, in the target's order.
    pub tokens: Vec<FencingToken>,
    pub valid_until: Instant,
}

/// A failed attempt, with what the retry loop needs to know.
pub(crate) struct Failure {
    pub error: Error,
    /// Instances that granted before the attempt failed.
    pub granted: usize,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure { error, granted: 0 }
    }
}

pub(crate) fn attempt(shared: &Shared, target: &Target, ttl: Duration) -> Result<Grant, Failure> {
    let cfg = &shared.cfg;
    let instances = &shared.instances;
    let value = uuid::Uuid::new_v4().simple().to_string();
    let seed = instances.clock_seed();
    let start = Instant::now();
    let deadline = start + cfg.instance_timeout;
    let round = if target.is_set() {
        let cmd = pack_acquire_all(target, &value, ttl, cfg.fence_idle, seed);
        instances.round(&cmd, 1, deadline, classify_acquire_all)
    } else {
        let cmd = pack_acquire(&target.members[0].keys, &value, ttl, cfg.fence_idle, seed);
        instances.round(&cmd, ACQUIRE_COMMANDS, deadline, classify_acquire)
    };
    let tally = round.wait(deadline);

    // Sent to every instance that did not refuse, answered or not: a grant
    // whose reply was lost must not linger. Useless once the lease would
    // have expired anyway.
    let release_all = |refused: &dyn Fn(usize) -> bool| {
        let cmd = scripts::release(target, &value);
        instances.deliver(&cmd, 1, start + ttl, None, |i| !refused(i));
    };
    let unavailable = |granted: usize, errors| Error::Unavailable {
        resource: target.name.clone(),
        quorum: instances.quorum(),
        granted,
        errors,
    };

    let quorum = instances.quorum();
    if tally.yes.len() < quorum {
        release_all(&|i| tally.refused(i));
        let granted = tally.yes.len();
        let error = if tally.has_wrong_type() {
            Error::WrongType {
                resource: target.name.clone(),
                errors: tally.failed,
            }
        } else if tally.failed.len() > instances.len() - quorum {
            unavailable(granted, tally.failed)
        } else {
            Error::Contended {
                resource: target.name.clone(),
                attempts: 1,
            }
        };
        return Err(Failure { error, granted });
    }

    // Every instance that answered had its clock read when it connected, so
    // this is not 0 here; a counter no seed reached counts from it.
    let now = instances.clock_seed().max(seed);
    let effective = |c: u64| if c < SEED_FLOOR { now + c } else { c };
    let mut tokens = Vec::with_capacity(target.members.len());
    let mut lagging = Vec::new();
    for (m, member) in target.members.iter().enumerate() {
        let counters = tally.yes.iter().filter_map(|(_, c)| c.get(m).copied());
        let token = counters.clone().map(effective).max().unwrap_or(0);
        if token < SEED_FLOOR {
            release_all(&|_| false);
            return Err(Failure::from(unavailable(0, Vec::new())));
        }
        if counters.clone().count() != tally.yes.len() || counters.into_iter().any(|c| c != token) {
            lagging.push((&member.keys, token));
        }
        tokens.push(FencingToken::new(token));
    }
    if !lagging.is_empty() {
        // The granting counters of these members disagree: make a quorum
        // hold at least each token before handing it out, so the next
        // grant's quorum, which overlaps this one, counts above it.
        let cmd = pack_raise(&lagging, &value, cfg.fence_idle);
        let deadline = shared.round_deadline();
        let raised = instances
            .round(&cmd, lagging.len(), deadline, all_yes)
            .wait(deadline);
        telemetry::fence_raise_round(raised.yes.len() >= quorum, lagging.len());
        if raised.yes.len() < quorum {
            release_all(&|_| false);
            return Err(Failure::from(unavailable(raised.yes.len(), raised.failed)));
        }
    }

    let valid_until = ttl
        .checked_sub(cfg.drift(ttl))
        .and_then(|validity| start.checked_add(validity));
    match valid_until {
        Some(valid_until) if Instant::now() < valid_until => Ok(Grant {
            value,
            tokens,
            valid_until,
        }),
        _ => {
            release_all(&|_| false);
            Err(Failure::from(Error::NoValidity {
                resource: target.name.clone(),
                elapsed: start.elapsed(),
                ttl,
            }))
        }
    }
}

/// One raise script per lagging member, in one request.
fn pack_raise(lagging: &[(&Keys, u64)], value: &str, idle: Duration) -> Arc<[u8]> {
    let idle_ms = idle.as_millis().to_string();
    let mut bytes = Vec::new();
    for (keys, token) in lagging {
        let token = token.to_string();
        bytes.extend_from_slice(&scripts::packed(
            &FENCE_RAISE,
            &[&keys.lock, &keys.fence],
            &[value.as_bytes(), token.as_bytes(), idle_ms.as_bytes()],
        ));
    }
    bytes.into()
}

/// The acquire script of a set: lock and fence keys in pairs.
fn pack_acquire_all(
    target: &Target,
    value: &str,
    ttl: Duration,
    idle: Duration,
    seed: u64,
) -> Arc<[u8]> {
    let keys: Vec<&str> = target
        .members
        .iter()
        .flat_map(|m| [m.keys.lock.as_str(), m.keys.fence.as_str()])
        .collect();
    let (ttl_ms, idle_ms, seed) = (
        ttl.as_millis().to_string(),
        idle.as_millis().to_string(),
        seed.to_string(),
    );
    scripts::packed(
        &ACQUIRE_ALL,
        &keys,
        &[
            value.as_bytes(),
            ttl_ms.as_bytes(),
            idle_ms.as_bytes(),
            seed.as_bytes(),
        ],
    )
}

/// The four commands of an acquire request, packed once for all instances.
fn pack_acquire(keys: &Keys, value: &str, ttl: Duration, idle: Duration, seed: u64) -> Arc<[u8]> {
    let ttl_ms = ttl.as_millis() as u64;
    let idle_ms = idle.as_millis() as u64;
    let mut pipe = redis::pipe();
    pipe.cmd("SET")
        .arg(&keys.fence)
        .arg(seed)
        .arg("NX")
        .arg("PX")
        .arg(idle_ms)
        .cmd("SET")
        .arg(&keys.lock)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .arg("GET")
        .cmd("INCR")
        .arg(&keys.fence)
        .cmd("PEXPIRE")
        .arg(&keys.fence)
        .arg(idle_ms);
    pipe.get_packed_pipeline().into()
}

/// Granted with the instance's counter, or refused (held elsewhere).
fn classify_acquire(values: &[Value]) -> Vote<Vec<u64>, ()> {
    // The seed's and the expiry's replies matter only as errors (an ACL
    // refusal, say), which `error_reply` below finds among all four.
    let [_, lock, counter, _] = values else {
        return unexpected("acquire", values);
    };
    match lock {
        Value::Nil => {}
        Value::BulkString(_) | Value::SimpleString(_) => return Vote::No(()),
        other => {
            return error_reply(std::slice::from_ref(other))
                .unwrap_or_else(|| unexpected("acquire", values))
        }
    }
    if let Value::ServerError(e) = counter {
        if e.code() == "ERR" && e.details().is_some_and(|d| d.contains("not an integer")) {
            return Vote::Failed(crate::InstanceError::new(
                "",
                crate::InstanceErrorKind::WrongType,
                "redfence: the fence key holds a value that is not a counter",
            ));
        }
    }
    if let Some(vote) = error_reply(values) {
        return vote;
    }
    match counter {
        Value::Int(c) if *c > 0 => Vote::Yes(vec![*c as u64]),
        _ => unexpected("acquire", values),
    }
}

/// `{1, counter...}` is a grant of the whole set, `{0}` a refusal.
fn classify_acquire_all(values: &[Value]) -> Vote<Vec<u64>, ()> {
    if let Some(vote) = error_reply(values) {
        return vote;
    }
    if let [Value::Array(items)] = values {
        match items.split_first() {
            Some((Value::Int(0), [])) => return Vote::No(()),
            Some((Value::Int(1), counters)) => {
                let counters: Option<Vec<u64>> = counters
                    .iter()
                    .map(|c| match c {
                        Value::Int(c) if *c > 0 => Some(*c as u64),
                        _ => None,
                    })
                    .collect();
                if let Some(counters) = counters {
                    return Vote::Yes(counters);
                }
            }
            _ => {}
        }
    }
    unexpected("acquire_all", values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_classify_as_votes() {
        let ok = || Value::Okay;
        let granted = [ok(), Value::Nil, Value::Int(7), Value::Int(1)];
        assert!(matches!(classify_acquire(&granted), Vote::Yes(c) if c == [7]));
        let held = [
            Value::Nil,
            Value::BulkString(b"secret".to_vec()),
            Value::Int(8),
            Value::Int(1),
        ];
        assert!(matches!(classify_acquire(&held), Vote::No(())));
        let short = [Value::Nil];
        let Vote::Failed(e) = classify_acquire(&short) else {
            panic!("short reply")
        };
        assert!(!e.detail().contains("secret"));
    }
}
