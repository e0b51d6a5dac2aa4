//! One acquisition attempt: the Redlock vote plus the fencing token.
//!
//! Each instance runs `lua/acquire.lua` once, for a single lock and for a
//! set alike: it takes every lock or none and answers a token per member,
//! computed there from the instance's own counter and clock when the script
//! runs. Any request may land late (after the client gave up on it, after
//! later requests, after a restart), twice, or never, so the client sends no
//! value that could create or lower a counter: only a proposal `P` (its
//! reading of the instances' clocks, see `clock.rs`), which instances take
//! when it lies within a few milliseconds ahead of their own clock, so that
//! their answers agree. The token is the quorum-th smallest answer of the
//! granting instances ([`choose_token`]); if fewer than a quorum answered
//! at least it, a raise round (`lua/fence_raise.lua`) makes a quorum hold
//! at least the token before it is handed out, so the next grant's quorum,
//! which overlaps this one, counts above it. No counter adopts a token
//! further ahead of its own clock than a bound, so an instance clock that
//! runs ahead cannot leave its tokens in the others' counters.
//! `tests/model_fencing.rs` checks that tokens strictly increase with every
//! request delivered late, out of order, twice or never, and counters lost
//! or rolled back.
//!
//! A failed attempt cleans up on every instance that did not refuse; the
//! clean-up also voids the attempt's acquire where it has not landed yet
//! (`lua/release.lua`).

use std::time::{Duration, Instant};

use redis::Value;

use crate::lock::shared::Shared;
use crate::protocol::keys::{Keys, Target};
use crate::protocol::majority::Quorum;
use crate::protocol::scripts;
use crate::protocol::split::Combine;
use crate::telemetry;
use crate::transport::outgoing::Outgoing;
use crate::transport::quorum::{all_yes, error_reply, unexpected, Vote};
use crate::{Error, FencingToken};

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
    let value = crate::protocol::value::lock_value(&cfg.identity);
    let proposal = instances.clock_proposal();
    let start = Instant::now();
    let deadline = start + cfg.instance_timeout;
    let pack = |t: &Target| {
        (
            scripts::acquire(t, &value, ttl, cfg.fence_idle, proposal),
            1,
        )
    };
    let combine = |subs: &[Target]| Combine::Acquire {
        undo: subs
            .iter()
            .map(|sub| scripts::release(sub, &value, ttl))
            .collect(),
        undo_deadline: start + ttl,
    };
    let out = Outgoing::about(target, pack(target), &pack).combined(&combine);
    let tally = instances
        .round(&out, deadline, classify_acquire)
        .wait(deadline);

    // Sent to every instance that did not refuse, answered or not: a grant
    // whose reply was lost must not linger. Useless once the lease would
    // have expired anyway.
    let release_all = |refused: &dyn Fn(usize) -> bool| {
        let pack = |t: &Target| (scripts::release(t, &value, ttl), 1);
        let out = Outgoing::about(target, pack(target), &pack);
        instances.deliver(&out, start + ttl, None, |i| !refused(i));
    };
    let quorum = instances.quorum();
    let unavailable =
        |granted: usize, errors| Error::unavailable(&target.name, quorum.size(), granted, errors);

    if !quorum.reached(tally.yes.len()) {
        release_all(&|i| tally.refused(i));
        let granted = tally.yes.len();
        let error = if tally.has_wrong_type() {
            Error::WrongType {
                resource: target.name.clone(),
                errors: tally.failed,
            }
        } else if quorum.ruled_out(tally.failed.len()) {
            unavailable(granted, tally.failed)
        } else {
            let answered = tally.yes.len() + tally.no.len() + tally.failed.len();
            let named = tally.no.iter().filter_map(|(_, h)| h.as_deref());
            Error::Contended {
                resource: target.name.clone(),
                attempts: 1,
                holder: crate::protocol::value::agreed(named, answered),
            }
        };
        return Err(Failure { error, granted });
    }

    let mut tokens = Vec::with_capacity(target.members.len());
    let mut disagree = false;
    for m in 0..target.members.len() {
        let answers: Vec<u64> = tally
            .yes
            .iter()
            .filter_map(|(_, c)| c.get(m).copied())
            .collect();
        let Some((token, held)) = choose_token(answers, quorum) else {
            release_all(&|_| false);
            return Err(Failure::from(unavailable(0, Vec::new())));
        };
        disagree |= !held;
        tokens.push(FencingToken::new(token));
    }
    if disagree {
        // Fewer than a quorum answered at least the token: make a quorum
        // hold at least each token before handing it out, so the next
        // grant's quorum, which overlaps this one, counts above it. Every
        // member of a set goes in the round, not only those that disagree:
        // an instance counts only if it still holds the whole set, or the
        // round could stand on instances that lost a member since the vote.
        let lagging: Vec<(&Keys, u64)> = target
            .members
            .iter()
            .zip(&tokens)
            .map(|(member, token)| (&member.keys, token.get()))
            .collect();
        let part = |sub: &Target| {
            let lagging: Vec<(&Keys, u64)> = sub
                .members
                .iter()
                .filter_map(|m| {
                    let i = target
                        .members
                        .iter()
                        .position(|t| t.resource == m.resource)?;
                    Some((&m.keys, tokens.get(i)?.get()))
                })
                .collect();
            (
                scripts::raise(&lagging, &value, cfg.fence_idle),
                lagging.len(),
            )
        };
        let whole = (
            scripts::raise(&lagging, &value, cfg.fence_idle),
            lagging.len(),
        );
        let out = Outgoing::about(target, whole, &part);
        let deadline = shared.round_deadline();
        let raised = instances.round(&out, deadline, all_yes).wait(deadline);
        telemetry::fence_raise_round(quorum.reached(raised.yes.len()), lagging.len());
        if !quorum.reached(raised.yes.len()) {
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

/// The token of one member from the granting instances' answers: the
/// smallest value that a quorum of the answers does not exceed (the
/// quorum-th smallest), and whether a quorum already holds it (answered at
/// least it), so that no raise round is needed. `None` with fewer answers
/// than a quorum.
///
/// Above every answer of some quorum, it is above every token handed out
/// before (that quorum overlaps the one that held the earlier token). Not
/// the highest answer: one instance whose clock runs ahead answers tokens
/// from the future, and a token taken from it alone could only be held by
/// raising the others' counters that far ahead of their clocks, which
/// `lua/fence_raise.lua` refuses (`tests/model_fencing.rs`).
fn choose_token(mut answers: Vec<u64>, quorum: Quorum) -> Option<(u64, bool)> {
    answers.sort_unstable();
    let token = *answers.get(quorum.size() - 1)?;
    let held = quorum.reached(answers.iter().filter(|&&a| a >= token).count());
    Some((token, held))
}

/// `{1, token...}` is a grant (of every member), `{0}` a refusal, `{0,
/// identity}` a refusal naming the holder.
fn classify_acquire(values: &[Value]) -> Vote<Vec<u64>, Option<String>> {
    if let Some(vote) = error_reply(values) {
        return vote;
    }
    if let [Value::Array(items)] = values {
        match items.split_first() {
            Some((Value::Int(0), [])) => return Vote::No(None),
            Some((Value::Int(0), [Value::BulkString(identity)])) => {
                return Vote::No(Some(String::from_utf8_lossy(identity).into_owned()))
            }
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
    unexpected("acquire", values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_the_quorum_th_smallest_answer() {
        // Agreeing answers: held at once.
        assert_eq!(choose_token(vec![7, 7], Quorum::of(3)), Some((7, true)));
        // One instance ahead: the others' value, already held by a quorum.
        assert_eq!(
            choose_token(vec![900, 7, 7], Quorum::of(3)),
            Some((7, true))
        );
        assert_eq!(
            choose_token(vec![900, 7, 8], Quorum::of(3)),
            Some((8, true))
        );
        assert_eq!(
            choose_token(vec![900, 7, 8, 6, 5], Quorum::of(5)),
            Some((7, true))
        );
        assert_eq!(
            choose_token(vec![900, 7, 8], Quorum::of(5)),
            Some((900, false))
        );
        // Only two of three granted, one ahead: its value, to be raised.
        assert_eq!(
            choose_token(vec![900, 7], Quorum::of(3)),
            Some((900, false))
        );
        assert_eq!(
            choose_token(vec![3, 1, 2, 5, 4], Quorum::of(5)),
            Some((3, true))
        );
        assert_eq!(choose_token(vec![7], Quorum::of(3)), None);
        assert_eq!(choose_token(vec![], Quorum::of(0)), None);
    }

    #[test]
    fn replies_classify_as_votes() {
        let granted = [Value::Array(vec![
            Value::Int(1),
            Value::Int(7),
            Value::Int(9),
        ])];
        assert!(matches!(classify_acquire(&granted), Vote::Yes(c) if c == [7, 9]));
        let refused = [Value::Array(vec![Value::Int(0)])];
        assert!(matches!(classify_acquire(&refused), Vote::No(None)));
        let named = [Value::Array(vec![
            Value::Int(0),
            Value::BulkString(b"worker:1".to_vec()),
        ])];
        assert!(matches!(classify_acquire(&named), Vote::No(Some(h)) if h == "worker:1"));
        let odd = [Value::BulkString(b"secret".to_vec())];
        let Vote::Failed(e) = classify_acquire(&odd) else {
            panic!("unexpected reply")
        };
        assert!(!e.detail().contains("secret"));
        let zero = [Value::Array(vec![Value::Int(1), Value::Int(0)])];
        assert!(matches!(classify_acquire(&zero), Vote::Failed(_)));
    }
}
