//! One acquisition attempt: the Redlock vote plus the fencing token.

use std::time::{Duration, Instant};

use redis::Value;

use crate::keys::Keys;
use crate::quorum::{unexpected, yes_no, Vote};
use crate::scripts::{self, ACQUIRE, FENCE_RAISE};
use crate::shared::Shared;
use crate::telemetry;
use crate::{Error, FencingToken};

/// A granted lock, before it becomes a guard.
pub(crate) struct Grant {
    pub value: String,
    pub token: FencingToken,
    pub valid_until: Instant,
}

/// A failed attempt, with what the retry loop needs to know.
pub(crate) struct Failure {
    pub error: Error,
    /// Shortest remaining lease of the holder among refusing instances.
    pub holder_ttl: Option<Duration>,
    /// Instances that granted before the attempt failed.
    pub granted: usize,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure {
            error,
            holder_ttl: None,
            granted: 0,
        }
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
    let ttl_ms = ttl.as_millis().to_string();
    let idle_ms = cfg.fence_idle.as_millis().to_string();
    let start = Instant::now();
    let deadline = start + cfg.instance_timeout;
    let cmd = scripts::packed(
        &ACQUIRE,
        &[&keys.lock, &keys.fence],
        &[value.as_bytes(), ttl_ms.as_bytes(), idle_ms.as_bytes()],
    );
    let rx = instances.broadcast(&cmd, deadline);
    let tally = instances.collect(&rx, deadline, classify_acquire);

    let release_all = || {
        let cmd = scripts::release(keys, &value);
        // Sent to every instance, answered or not: a grant whose reply was
        // lost must not linger. Useless once the lease would have expired.
        instances.deliver(&cmd, start + ttl, false);
    };

    let quorum = instances.quorum();
    if tally.yes.len() < quorum {
        release_all();
        let holder_ttl = tally.no.iter().flatten().min().copied();
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
            holder_ttl,
            granted: tally.yes.len(),
        });
    }

    let token = tally.yes.iter().copied().max().unwrap_or(0);
    if tally.yes.iter().any(|t| *t != token) {
        // The granting counters disagree: make a quorum hold at least this
        // token before handing it out, so the next grant's quorum, which
        // overlaps this one, counts above it.
        let token_arg = token.to_string();
        let cmd = scripts::packed(
            &FENCE_RAISE,
            &[&keys.lock, &keys.fence],
            &[value.as_bytes(), token_arg.as_bytes(), idle_ms.as_bytes()],
        );
        let deadline = shared.round_deadline();
        let rx = instances.broadcast(&cmd, deadline);
        let raised = instances.collect(&rx, deadline, yes_no("fence raise"));
        telemetry::fence_raise_round(raised.yes.len() >= quorum, token);
        if raised.yes.len() < quorum {
            release_all();
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
            release_all();
            Err(Failure::from(Error::NoValidity {
                resource: resource.to_string(),
                elapsed: start.elapsed(),
                ttl,
            }))
        }
    }
}

/// `{1, token}` is a grant; `{0, pttl}` a refusal with the holder's
/// remaining lease (negative when it has none).
fn classify_acquire(value: Value) -> Vote<u64, Option<Duration>> {
    if let Value::Array(items) = &value {
        match items.as_slice() {
            [Value::Int(1), Value::Int(token)] if *token > 0 => {
                return Vote::Yes(*token as u64);
            }
            [Value::Int(0), Value::Int(pttl)] => {
                let ttl = u64::try_from(*pttl).ok().map(Duration::from_millis);
                return Vote::No(ttl);
            }
            _ => {}
        }
    }
    unexpected("acquire", &value)
}
