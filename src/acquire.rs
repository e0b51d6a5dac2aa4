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

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::clock::SEED_FLOOR;
use crate::keys::Keys;
use crate::quorum::{error_reply, unexpected, yes_no, Vote};
use crate::scripts::{self, FENCE_RAISE};
use crate::shared::Shared;
use crate::{Error, FencingToken};

/// Commands in one acquire request.
const ACQUIRE_COMMANDS: usize = 4;

/// A granted lock, before it becomes a guard.
pub(crate) struct Grant {
    pub value: String,
    pub token: FencingToken,
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

pub(crate) fn attempt(
    shared: &Shared,
    resource: &str,
    keys: &Keys,
    ttl: Duration,
) -> Result<Grant, Failure> {
    let cfg = &shared.cfg;
    let instances = &shared.instances;
    let value = uuid::Uuid::new_v4().simple().to_string();
    let seed = instances.clock_seed();
    let start = Instant::now();
    let deadline = start + cfg.instance_timeout;
    let cmd = pack_acquire(keys, &value, ttl, cfg.fence_idle, seed);
    let tally = instances
        .round(&cmd, ACQUIRE_COMMANDS, deadline, classify_acquire)
        .wait(deadline);

    // Sent to every instance that did not refuse, answered or not: a grant
    // whose reply was lost must not linger. Useless once the lease would
    // have expired anyway.
    let release_all = |refused: &dyn Fn(usize) -> bool| {
        let cmd = scripts::release(keys, &value);
        instances.deliver(&cmd, 1, start + ttl, None, |i| !refused(i));
    };

    let quorum = instances.quorum();
    if tally.yes.len() < quorum {
        release_all(&|i| tally.refused(i));
        let error = if tally.has_wrong_type() {
            Error::WrongType {
                resource: resource.to_string(),
                errors: tally.failed,
            }
        } else if tally.failed.len() > instances.len() - quorum {
            Error::Unavailable {
                resource: resource.to_string(),
                quorum,
                granted: tally.yes.len(),
                errors: tally.failed,
            }
        } else {
            Error::Contended {
                resource: resource.to_string(),
                attempts: 1,
            }
        };
        return Err(Failure {
            error,
            granted: tally.yes.len(),
        });
    }

    // Every instance that answered was read its clock when it connected, so
    // this is never 0 here; a counter no seed reached counts from it.
    let now = instances.clock_seed().max(seed);
    let effective = |c: u64| if c < SEED_FLOOR { now + c } else { c };
    let token = tally
        .yes
        .iter()
        .map(|(_, c)| effective(*c))
        .max()
        .unwrap_or(0);
    if token < SEED_FLOOR {
        release_all(&|_| false);
        return Err(Failure::from(Error::Unavailable {
            resource: resource.to_string(),
            quorum,
            granted: 0,
            errors: Vec::new(),
        }));
    }
    if tally.yes.iter().any(|(_, c)| *c != token) {
        // The granting counters disagree: make a quorum hold at least this
        // token before handing it out, so the next grant's quorum, which
        // overlaps this one, counts above it.
        let token_arg = token.to_string();
        let idle_ms = cfg.fence_idle.as_millis().to_string();
        let cmd = scripts::packed(
            &FENCE_RAISE,
            &[&keys.lock, &keys.fence],
            &[value.as_bytes(), token_arg.as_bytes(), idle_ms.as_bytes()],
        );
        let deadline = shared.round_deadline();
        let raised = instances.round(&cmd, 1, deadline, yes_no).wait(deadline);
        if raised.yes.len() < quorum {
            release_all(&|_| false);
            return Err(Failure::from(Error::Unavailable {
                resource: resource.to_string(),
                quorum,
                granted: raised.yes.len(),
                errors: raised.failed,
            }));
        }
    }

    let valid_until = ttl
        .checked_sub(cfg.drift(ttl))
        .and_then(|validity| start.checked_add(validity));
    match valid_until {
        Some(valid_until) if Instant::now() < valid_until => Ok(Grant {
            value,
            token: FencingToken::new(token),
            valid_until,
        }),
        _ => {
            release_all(&|_| false);
            Err(Failure::from(Error::NoValidity {
                resource: resource.to_string(),
                elapsed: start.elapsed(),
                ttl,
            }))
        }
    }
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
fn classify_acquire(values: &[Value]) -> Vote<u64, ()> {
    let [seeded, lock, counter, expiry] = values else {
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
    let _ = (seeded, expiry);
    match counter {
        Value::Int(c) if *c > 0 => Vote::Yes(*c as u64),
        _ => unexpected("acquire", values),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_classify_as_votes() {
        let ok = || Value::Okay;
        let granted = [ok(), Value::Nil, Value::Int(7), Value::Int(1)];
        assert!(matches!(classify_acquire(&granted), Vote::Yes(7)));
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
