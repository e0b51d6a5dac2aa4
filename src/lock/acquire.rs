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

use crate::lock::moment::Moment;
use crate::lock::shared::Shared;
use crate::protocol::keys::{Keys, Kind, Target};
use crate::protocol::majority::Quorum;
use crate::protocol::scripts;
use crate::protocol::split::Combine;
use crate::telemetry;
use crate::transport::outgoing::Outgoing;
use crate::transport::round::{all_yes, error_reply, unexpected, Tally, Vote};
use crate::{Error, FencingToken, InstanceError};

/// A granted lock, before it becomes a guard.
pub(crate) struct Grant {
    pub value: String,
    /// One per member, in the target's order.
    pub tokens: Vec<FencingToken>,
    /// On the lease clock (`moment.rs`).
    pub valid_until: Moment,
    /// How long the keys were set to live where the acquire landed.
    pub keys_ttl: Duration,
}

/// How long one attempt asks the keys to live: the lease's TTL, which is
/// what the holder believes (its validity), and how long the keys live on
/// an instance from the grant, longer with a hold
/// ([`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lifetime {
    pub ttl: Duration,
    pub keys: Duration,
}

impl Lifetime {
    /// A hold is kept by the keys themselves, from the grant on: they live
    /// the TTL, plus the hold, plus the drift allowance over the hold. The
    /// grant returns within the TTL of the attempt's start (or fails for
    /// validity), and the keys were set after that start, so they outlive
    /// `hold` after the guard was returned, whether the holder's release
    /// lands or not (a crash, a lost or late release: `tests/model_lease.rs`).
    /// The release before the hold's end brings them down to the hold's
    /// end (`lua/release_hold.lua`), never below.
    pub(crate) fn of(ttl: Duration, hold: Duration, drift: impl Fn(Duration) -> Duration) -> Self {
        let keys = if hold.is_zero() {
            ttl
        } else {
            ttl.saturating_add(hold).saturating_add(drift(hold))
        };
        Lifetime { ttl, keys }
    }
}

/// A failed attempt, with what the retry loop needs to know.
pub(crate) struct Failure {
    pub error: Error,
    /// Instances that granted before the attempt failed.
    pub granted: usize,
    /// What a fair lock's queue said, one note per instance that answered
    /// (`lua/fair_gate.lua`); empty for any other lock.
    pub queue: Vec<(usize, QueueNote)>,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure {
            error,
            granted: 0,
            queue: Vec::new(),
        }
    }
}

/// What a fair lock's queue on one instance said about the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueNote {
    /// The ticket round's ticket.
    Ticket(u64),
    /// Refused, with this many live waiters ahead (0: it is the head).
    Ahead(u64),
    /// It has no entry there: dropped for a late heartbeat, or lost.
    Gone,
}

/// An instance's refusal: the holder it named, and a fair lock's note.
pub(crate) struct Refused {
    holder: Option<String>,
    queue: Option<QueueNote>,
}

/// One attempt to acquire `target`: a vote of every instance, the choice
/// of each member's token, a raise round where the answers disagree, and
/// the validity check; anything short of a grant is undone.
pub(crate) fn attempt(shared: &Shared, target: &Target, life: Lifetime) -> Result<Grant, Failure> {
    let attempt = Attempt::new(shared, target, life);
    let tally = attempt.vote();
    if !attempt.quorum.reached(tally.yes.len()) {
        attempt.release(|i| tally.refused(i));
        return Err(attempt.refusal(tally));
    }
    let (tokens, agreed) = attempt.tokens(&tally)?;
    if !agreed {
        attempt.raise(&tokens)?;
    }
    attempt.grant(tokens)
}

/// What the steps of one attempt share.
struct Attempt<'a> {
    shared: &'a Shared,
    target: &'a Target,
    ttl: Duration,
    /// How long the keys live where the acquire lands (see [`Lifetime`]).
    keys_ttl: Duration,
    /// This attempt's lock value: the secret, then the identity.
    value: String,
    quorum: Quorum,
    /// For the network's deadlines.
    start: Instant,
    /// The same start on the lease clock, which the validity counts from.
    began: Moment,
}

/// Each instance's vote on an acquire: its tokens, or the holder it named.
type AcquireTally = Tally<Vec<u64>, Refused>;

impl<'a> Attempt<'a> {
    fn new(shared: &'a Shared, target: &'a Target, life: Lifetime) -> Self {
        Attempt {
            shared,
            target,
            ttl: life.ttl,
            keys_ttl: life.keys,
            value: crate::protocol::value::lock_value(&shared.cfg.identity),
            quorum: shared.instances.quorum(),
            start: Instant::now(),
            began: Moment::now(),
        }
    }

    /// Sends the acquire to every instance and counts the votes until the
    /// outcome is decided (one instance timeout at most).
    fn vote(&self) -> AcquireTally {
        let (cfg, value, keys_ttl) = (&self.shared.cfg, &self.value, self.keys_ttl);
        let proposal = self.shared.instances.clock_proposal();
        let pack = |t: &Target| {
            let acquire = scripts::acquire(t, value, keys_ttl, cfg.fence_idle, proposal);
            (acquire, 1)
        };
        let combine = |subs: &[Target]| Combine::Acquire {
            undo: subs
                .iter()
                .map(|sub| scripts::release(sub, value, keys_ttl))
                .collect(),
            undo_deadline: self.start + keys_ttl,
        };
        let out = Outgoing::about(self.target, pack(self.target), &pack).combined(&combine);
        let deadline = self.start + cfg.instance_timeout;
        let classify = match &self.target.kind {
            Kind::Fair(_) => classify_fair,
            Kind::Lock | Kind::Set | Kind::Permit { .. } | Kind::Rw(_) => classify_acquire,
        };
        self.shared
            .instances
            .round(&out, deadline, classify)
            .wait(deadline)
    }

    /// Undoes the attempt on every instance but those `refused` says did
    /// not apply it, answered or not: a grant whose reply was lost must not
    /// linger. Its void key lives as long as the acquire's keys would (the
    /// TTL, plus a hold), so the acquire landing later within that is
    /// refused (`tests/model_grants.rs`: a void key shorter than the keys'
    /// life leaves an orphan). Useless once the keys would have expired
    /// anyway.
    fn release(&self, refused: impl Fn(usize) -> bool) {
        let pack = |t: &Target| (scripts::release(t, &self.value, self.keys_ttl), 1);
        let out = Outgoing::about(self.target, pack(self.target), &pack);
        let until = self.start + self.keys_ttl;
        self.shared
            .instances
            .send_persistent(&out, until, None, |i| !refused(i));
    }

    /// Why a vote without a quorum failed: a key of another type, too many
    /// instances failing, or the lock held by someone else.
    fn refusal(&self, tally: AcquireTally) -> Failure {
        let granted = tally.yes.len();
        let queue = self.queue_notes(&tally);
        let resource = self.target.name.clone();
        let error = if tally.has_wrong_type() {
            Error::WrongType {
                resource,
                errors: tally.failed,
            }
        } else if self.quorum.ruled_out(tally.failed.len()) {
            Error::unavailable(resource, self.quorum.size(), granted, tally.failed)
        } else {
            let answered = tally.yes.len() + tally.no.len() + tally.failed.len();
            let named = tally.no.iter().filter_map(|(_, r)| r.holder.as_deref());
            Error::Contended {
                resource,
                attempts: 1,
                holder: crate::protocol::value::agreed(named, answered),
            }
        };
        Failure {
            error,
            granted,
            queue,
        }
    }

    /// A fair lock's notes from every answer: a grant's ticket (the
    /// ticket round's, after the token), a refusal's note.
    fn queue_notes(&self, tally: &AcquireTally) -> Vec<(usize, QueueNote)> {
        if !matches!(self.target.kind, Kind::Fair(_)) {
            return Vec::new();
        }
        let members = self.target.members.len();
        let granted = tally.yes.iter().filter_map(|(i, answer)| {
            let ticket = answer.get(members)?;
            Some((*i, QueueNote::Ticket(*ticket)))
        });
        let refused = tally.no.iter().filter_map(|(i, r)| Some((*i, r.queue?)));
        granted.chain(refused).collect()
    }

    /// Each member's token from the granting answers ([`choose_token`]),
    /// and whether a quorum already holds every one of them.
    fn tokens(&self, tally: &AcquireTally) -> Result<(Vec<FencingToken>, bool), Failure> {
        let mut tokens = Vec::with_capacity(self.target.members.len());
        let mut agreed = true;
        for m in 0..self.target.members.len() {
            let answers: Vec<u64> = tally
                .yes
                .iter()
                .filter_map(|(_, c)| c.get(m).copied())
                .collect();
            let Some((token, held)) = choose_token(answers, self.quorum) else {
                return Err(self.fail(0, Vec::new()));
            };
            agreed &= held;
            tokens.push(FencingToken::new(token));
        }
        Ok((tokens, agreed))
    }

    /// Fewer than a quorum answered at least some token: makes a quorum
    /// hold at least each token before handing it out, so the next grant's
    /// quorum, which overlaps this one, counts above it. Every member of a
    /// set goes in the round, not only those that disagree: an instance
    /// counts only if it still holds the whole set, or the round could
    /// stand on instances that lost a member since the vote.
    fn raise(&self, tokens: &[FencingToken]) -> Result<(), Failure> {
        let (target, value, idle) = (self.target, &self.value, self.shared.cfg.fence_idle);
        let token_of = |resource: &str| {
            let i = target.members.iter().position(|t| t.resource == resource)?;
            tokens.get(i).map(|t| t.get())
        };
        let pack = |t: &Target| {
            let lagging: Vec<(&Keys, u64)> = t
                .members
                .iter()
                .filter_map(|m| Some((&m.keys, token_of(&m.resource)?)))
                .collect();
            (
                scripts::raise(&t.kind, &lagging, value, idle),
                lagging.len(),
            )
        };
        let out = Outgoing::about(target, pack(target), &pack);
        let deadline = self.shared.round_deadline();
        let raised = self
            .shared
            .instances
            .round(&out, deadline, all_yes)
            .wait(deadline);
        let held = self.quorum.reached(raised.yes.len());
        telemetry::fence_raise_round(held, target.members.len());
        if !held {
            return Err(self.fail(raised.yes.len(), raised.failed));
        }
        Ok(())
    }

    /// The grant, if its validity (the TTL less the drift, from the start
    /// of the attempt) has not run out meanwhile.
    fn grant(self, tokens: Vec<FencingToken>) -> Result<Grant, Failure> {
        let ttl = self.ttl;
        let valid_until = ttl
            .checked_sub(self.shared.cfg.drift(ttl))
            .and_then(|validity| self.began.checked_add(validity));
        match valid_until {
            Some(valid_until) if Moment::now() < valid_until => Ok(Grant {
                value: self.value,
                tokens,
                valid_until,
                keys_ttl: self.keys_ttl,
            }),
            _ => {
                self.release(|_| false);
                Err(Failure::from(Error::NoValidity {
                    resource: self.target.name.clone(),
                    elapsed: self.start.elapsed(),
                    ttl,
                }))
            }
        }
    }

    /// Undoes the attempt everywhere and reports too few instances.
    fn fail(&self, granted: usize, errors: Vec<InstanceError>) -> Failure {
        self.release(|_| false);
        let error = Error::unavailable(&self.target.name, self.quorum.size(), granted, errors);
        Failure::from(error)
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
fn classify_acquire(values: &[Value]) -> Vote<Vec<u64>, Refused> {
    if let Some(vote) = error_reply(values) {
        return vote;
    }
    let refused = |holder| Refused {
        holder,
        queue: None,
    };
    if let [Value::Array(items)] = values {
        match items.split_first() {
            Some((Value::Int(0), [])) => return Vote::No(refused(None)),
            Some((Value::Int(0), [Value::BulkString(identity)])) => {
                let identity = String::from_utf8_lossy(identity).into_owned();
                return Vote::No(refused(Some(identity)));
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

/// `lua/fair_gate.lua`'s replies: a grant as [`classify_acquire`]'s (with
/// the ticket after the token in the ticket round); `{0, holder or nil,
/// ticket}` the ticket round's refusal, `{2, holder or nil, ahead}` an
/// attempt's, with the live waiters ahead; `{-1}` gone.
fn classify_fair(values: &[Value]) -> Vote<Vec<u64>, Refused> {
    if let [Value::Array(items)] = values {
        let note = |n: &Value| match n {
            Value::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        match items.as_slice() {
            [Value::Int(-1)] => {
                return Vote::No(Refused {
                    holder: None,
                    queue: Some(QueueNote::Gone),
                })
            }
            [Value::Int(kind @ (0 | 2)), holder, n] => {
                if let Some(n) = note(n) {
                    let holder = match holder {
                        Value::BulkString(h) => Some(String::from_utf8_lossy(h).into_owned()),
                        _ => None,
                    };
                    let queue = match kind {
                        0 => QueueNote::Ticket(n),
                        _ => QueueNote::Ahead(n),
                    };
                    return Vote::No(Refused {
                        holder,
                        queue: Some(queue),
                    });
                }
            }
            _ => {}
        }
    }
    classify_acquire(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::any;

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

    proptest::proptest! {
        /// Any reply, however malformed, is a vote or a failure: never a
        /// panic.
        #[test]
        fn any_reply_classifies(values in crate::arbitrary::replies()) {
            let _ = classify_acquire(&values);
            let _ = classify_fair(&values);
        }

        /// The token is the quorum-th smallest answer, and held when a
        /// quorum answered at least it.
        #[test]
        fn the_token_is_one_a_quorum_does_not_exceed(
            answers in proptest::collection::vec(any::<u64>(), 0..8),
            voters in 1usize..8,
        ) {
            let quorum = Quorum::of(voters);
            match choose_token(answers.clone(), quorum) {
                None => proptest::prop_assert!(answers.len() < quorum.size()),
                Some((token, held)) => {
                    let at_most = answers.iter().filter(|a| **a <= token).count();
                    proptest::prop_assert!(at_most >= quorum.size());
                    let at_least = answers.iter().filter(|a| **a >= token).count();
                    proptest::prop_assert_eq!(held, quorum.reached(at_least));
                }
            }
        }
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
        assert!(matches!(
            classify_acquire(&refused),
            Vote::No(Refused { holder: None, .. })
        ));
        let named = [Value::Array(vec![
            Value::Int(0),
            Value::BulkString(b"worker:1".to_vec()),
        ])];
        assert!(
            matches!(classify_acquire(&named), Vote::No(Refused { holder: Some(h), .. }) if h == "worker:1")
        );
        let odd = [Value::BulkString(b"secret".to_vec())];
        let Vote::Failed(e) = classify_acquire(&odd) else {
            panic!("unexpected reply")
        };
        assert!(!e.detail().contains("secret"));
        let zero = [Value::Array(vec![Value::Int(1), Value::Int(0)])];
        assert!(matches!(classify_acquire(&zero), Vote::Failed(_)));
    }
}
