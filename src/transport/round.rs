//! Fan-out to every instance and the quorum count of their answers.
//!
//! A caller queues one request per instance and waits on a [`Round`]. The
//! workers classify each instance's replies as they arrive and count them
//! there; the caller is woken once, when the outcome is decided (a quorum
//! agreed, or so many refused or failed that no quorum is possible), not once
//! per reply. A slow or dead instance therefore never delays a decision that
//! the others already made.

use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use crate::error::{InstanceError, InstanceErrorKind};
use crate::protocol::clock::{self, InstanceClock};
use crate::protocol::majority::Quorum;
use crate::protocol::native::Support;
use crate::sync::{Condvar, Mutex};
use crate::transport::instance::{Collect, Replies, Request, Sink};
use crate::transport::outgoing::Outgoing;
use crate::transport::voter::Voter;

/// The set of instances a client locks on.
pub(crate) struct Instances {
    list: Vec<PositionState>,
    /// Their names, shared with every round (for its errors).
    names: Arc<[String]>,
    /// Some position is a Redis Cluster: requests get their cluster forms.
    has_cluster: bool,
}

/// What the client keeps of one position: its voter, and what it learns of
/// the position as it goes.
pub(crate) struct PositionState {
    pub voter: Voter,
    /// Its clock, read with the requests (`clock.rs`).
    pub clock: Arc<InstanceClock>,
    /// What its latest connection runs natively (`native.rs`).
    pub support: Arc<Support>,
}

/// How one instance voted.
pub(crate) enum Vote<Y, N> {
    Yes(Y),
    No(N),
    Failed(InstanceError),
}

/// Turns one instance's replies to a request into its vote.
pub(crate) type Classify<Y, N> = fn(&[Value]) -> Vote<Y, N>;

/// The answers gathered until the outcome was decided.
pub(crate) struct Tally<Y, N> {
    /// Granting instances, with what they said.
    pub yes: Vec<(usize, Y)>,
    pub no: Vec<(usize, N)>,
    pub failed: Vec<InstanceError>,
}

impl<Y, N> Tally<Y, N> {
    pub(crate) fn has_wrong_type(&self) -> bool {
        self.failed
            .iter()
            .any(|e| e.kind() == InstanceErrorKind::WrongType)
    }

    /// True for an instance that answered "no" (it did not apply our
    /// request, so nothing there needs undoing).
    pub(crate) fn refused(&self, index: usize) -> bool {
        self.no.iter().any(|(i, _)| *i == index)
    }
}

impl Instances {
    pub(crate) fn new(list: Vec<PositionState>) -> Self {
        let names = list.iter().map(|p| p.voter.name().to_string()).collect();
        Instances {
            has_cluster: list.iter().any(|p| p.voter.is_cluster()),
            list,
            names,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    pub(crate) fn quorum(&self) -> Quorum {
        Quorum::of(self.list.len())
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// The voters, in position order, for requests that go to each server
    /// behind them (ping).
    pub(crate) fn voters(&self) -> impl ExactSizeIterator<Item = &Voter> {
        self.list.iter().map(|p| &p.voter)
    }

    /// The voter at position `index`.
    pub(crate) fn voter(&self, index: usize) -> Option<&Voter> {
        self.list.get(index).map(|p| &p.voter)
    }

    /// The proposal for new tokens sent with an acquire (see `clock.rs`).
    pub(crate) fn clock_proposal(&self) -> u64 {
        clock::proposal(self.list.iter().map(|p| p.clock.as_ref()))
    }

    /// Records a `TIME` reply of position `index`, read in a round of its
    /// own, for the proposal of new tokens.
    pub(crate) fn record_clock(
        &self,
        index: usize,
        reply: &Value,
        sent: Instant,
        received: Instant,
    ) {
        if let Some(clock) = self.list.get(index).map(|p| &p.clock) {
            clock.record(reply, sent, received);
        }
    }

    /// What position `index`'s latest connection runs natively (nothing
    /// for a cluster position: its shards are not probed).
    pub(crate) fn native_commands(
        &self,
        index: usize,
    ) -> Option<crate::protocol::native::Commands> {
        self.list.get(index).map(|p| p.support.commands())
    }

    /// Whether some instance's connection extends natively, so that an
    /// extension's native form may be sent.
    pub(crate) fn extends_natively(&self) -> bool {
        self.list.iter().any(|p| p.support.extends_natively())
    }

    /// Whether some instance's connection releases natively, so that a
    /// release's native form is worth packing (most releases go to servers
    /// without one: packing it anyway cost a third of a lock + release's
    /// allocations).
    pub(crate) fn releases_natively(&self) -> bool {
        self.list.iter().any(|p| p.support.releases_natively())
    }

    /// Queues `out` on every instance and returns the round that counts
    /// the answers.
    pub(crate) fn round<Y: Send + 'static, N: Send + 'static>(
        &self,
        out: &Outgoing<'_>,
        deadline: Instant,
        classify: Classify<Y, N>,
    ) -> Arc<Round<Y, N>> {
        let round = Round::new_for(self, classify);
        let sink: Sink = round.clone();
        self.send(out, deadline, Some(&sink), false, |_| true);
        round
    }

    /// Queues a request that must reach its instances (a release): a
    /// worker that cannot deliver it keeps retrying until `deadline`, even
    /// after the caller stopped waiting. `to` picks the instances.
    pub(crate) fn send_persistent(
        &self,
        out: &Outgoing<'_>,
        deadline: Instant,
        sink: Option<&Sink>,
        to: impl Fn(usize) -> bool,
    ) {
        self.send(out, deadline, sink, true, to);
    }

    fn send(
        &self,
        out: &Outgoing<'_>,
        deadline: Instant,
        sink: Option<&Sink>,
        persistent: bool,
        to: impl Fn(usize) -> bool,
    ) {
        let route = out.route(self.has_cluster);
        let chosen = self.list.iter().enumerate().filter(|(i, _)| to(*i));
        for (
            _,
            PositionState {
                voter: instance, ..
            },
        ) in chosen
        {
            let mut req = Request::plain(
                Arc::clone(out.packed()),
                out.commands(),
                deadline,
                sink.cloned(),
            )
            .persistent(persistent);
            req.native = out.native().cloned();
            req.slot = route.slot;
            req.split = route.split.clone();
            req.cluster = route.cluster.clone();
            instance.send(req);
        }
    }
}

/// One round of requests: the votes so far, and the caller waiting for the
/// outcome.
pub(crate) struct Round<Y, N> {
    names: Arc<[String]>,
    quorum: Quorum,
    classify: Classify<Y, N>,
    state: Mutex<Counting<Y, N>>,
    decided: Condvar,
}

struct Counting<Y, N> {
    tally: Tally<Y, N>,
    answered: Vec<bool>,
    /// The caller has taken the tally; later answers are dropped.
    closed: bool,
}

impl<Y, N> Round<Y, N> {
    /// A round over these instances, before anything is sent.
    pub(crate) fn new_for(instances: &Instances, classify: Classify<Y, N>) -> Arc<Self> {
        Arc::new(Round::new(
            Arc::clone(&instances.names),
            instances.quorum(),
            classify,
        ))
    }

    fn new(names: Arc<[String]>, quorum: Quorum, classify: Classify<Y, N>) -> Self {
        let n = names.len();
        Round {
            quorum,
            classify,
            state: Mutex::new(Counting {
                tally: Tally {
                    yes: Vec::with_capacity(n),
                    no: Vec::new(),
                    failed: Vec::new(),
                },
                answered: vec![false; n],
                closed: false,
            }),
            decided: Condvar::new(),
            names,
        }
    }

    fn is_decided(&self, tally: &Tally<Y, N>) -> bool {
        self.quorum
            .decided(tally.yes.len(), tally.no.len() + tally.failed.len())
    }

    /// Waits until the outcome is decided or the deadline passes, and takes
    /// the tally. Instances that did not answer by then (and were needed)
    /// are listed as timed out.
    pub(crate) fn wait(&self, deadline: Instant) -> Tally<Y, N> {
        self.take(deadline, |round, st| round.is_decided(&st.tally))
    }

    /// Waits until every instance answered or the deadline passes (for a
    /// read that needs every answer, not only the decision), and takes the
    /// tally. Instances that did not answer by then are listed as timed out.
    pub(crate) fn wait_all(&self, deadline: Instant) -> Tally<Y, N> {
        self.take(deadline, |_, st| st.answered.iter().all(|a| *a))
    }

    fn take(
        &self,
        deadline: Instant,
        done: impl Fn(&Self, &Counting<Y, N>) -> bool,
    ) -> Tally<Y, N> {
        let mut st = self.state.lock();
        while !done(self, &st) {
            if self.decided.wait_until(&mut st, deadline).timed_out() {
                break;
            }
        }
        let finished = done(self, &st);
        st.closed = true;
        let mut tally = std::mem::replace(
            &mut st.tally,
            Tally {
                yes: Vec::new(),
                no: Vec::new(),
                failed: Vec::new(),
            },
        );
        if !finished {
            for (i, done) in st.answered.iter().enumerate() {
                if !done {
                    tally.failed.push(InstanceError::new(
                        &self.names[i],
                        InstanceErrorKind::Timeout,
                        "no answer within the per-instance timeout",
                    ));
                }
            }
        }
        tally
    }
}

impl<Y: Send, N: Send> Collect for Round<Y, N> {
    fn deliver(&self, index: usize, replies: Replies) {
        // Classified outside the lock: callers and other workers wait on it.
        let vote = match replies {
            Ok(values) => match (self.classify)(&values) {
                Vote::Failed(e) => {
                    Vote::Failed(InstanceError::new(&self.names[index], e.kind(), e.detail()))
                }
                vote => vote,
            },
            Err(e) => Vote::Failed(e),
        };
        let mut st = self.state.lock();
        if st.closed || st.answered[index] {
            return;
        }
        st.answered[index] = true;
        let was_decided = self.is_decided(&st.tally);
        match vote {
            Vote::Yes(y) => st.tally.yes.push((index, y)),
            Vote::No(n) => st.tally.no.push((index, n)),
            Vote::Failed(e) => st.tally.failed.push(e),
        }
        let everyone = st.answered.iter().all(|a| *a);
        if everyone || (!was_decided && self.is_decided(&st.tally)) {
            self.decided.notify_one();
        }
    }
}

/// The vote of an instance that answered a command with an error reply, if
/// any of `values` is one.
pub(crate) fn error_reply<Y, N>(values: &[Value]) -> Option<Vote<Y, N>> {
    values.iter().find_map(|v| match v {
        Value::ServerError(e) => {
            let kind = InstanceErrorKind::from_code(e.code());
            let detail = e
                .details()
                .map_or_else(|| e.code().to_string(), |d| format!("{} {d}", e.code()));
            Some(Vote::Failed(InstanceError::new("", kind, detail)))
        }
        _ => None,
    })
}

/// A classifier's verdict on replies it did not expect. It names their
/// types only: a reply may hold another client's lock value.
pub(crate) fn unexpected<Y, N>(what: &str, values: &[Value]) -> Vote<Y, N> {
    let kinds: Vec<&str> = values
        .iter()
        .map(|v| match v {
            Value::Nil => "nil",
            Value::Int(_) => "integer",
            Value::BulkString(_) => "bulk string",
            Value::SimpleString(_) => "status",
            Value::Okay => "OK",
            Value::Array(_) => "array",
            _ => "other",
        })
        .collect();
    Vote::Failed(InstanceError::new(
        "",
        InstanceErrorKind::Protocol,
        format!("unexpected reply to {what}: [{}]", kinds.join(", ")),
    ))
}

/// Classifies the 1/0 answer of the release and extend scripts (the first
/// reply of the request; a release's PUBLISH follows it).
pub(crate) fn yes_no(values: &[Value]) -> Vote<(), ()> {
    if let Some(vote) = error_reply(values) {
        return vote;
    }
    match values.first() {
        Some(Value::Int(1)) => Vote::Yes(()),
        Some(Value::Int(0)) => Vote::No(()),
        _ => unexpected("a script", values),
    }
}

/// Classifies a request of several 1/0 scripts (raise rounds, one per
/// member): yes only if every one said yes.
pub(crate) fn all_yes(values: &[Value]) -> Vote<(), ()> {
    if let Some(vote) = error_reply(values) {
        return vote;
    }
    if values.is_empty() || !values.iter().all(|v| matches!(v, Value::Int(0 | 1))) {
        return unexpected("a script", values);
    }
    if values.iter().all(|v| matches!(v, Value::Int(1))) {
        Vote::Yes(())
    } else {
        Vote::No(())
    }
}

/// Schedule exploration of the count (`--cfg loom`, src/sync.rs): the
/// workers deliver on their own threads while the caller waits.
#[cfg(all(test, loom))]
mod loom_checks {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::sync::{explore, thread};

    /// A round over three instances, counting 1/0 answers.
    fn round_of_three() -> Arc<Round<(), ()>> {
        let names: Arc<[String]> = ["a", "b", "c"].map(String::from).into();
        Arc::new(Round::new(names, Quorum::of(3), yes_no))
    }

    /// Each instance in `answers` answers from a worker thread of its own.
    fn deliver_concurrently(
        round: &Arc<Round<(), ()>>,
        answers: &[(usize, i64)],
    ) -> Vec<thread::JoinHandle<()>> {
        answers
            .iter()
            .map(|&(index, answer)| {
                let round = Arc::clone(round);
                thread::spawn(move || round.deliver(index, Ok(vec![Value::Int(answer)])))
            })
            .collect()
    }

    /// Loom never times a wait out: a caller not woken is a deadlock.
    fn far_deadline() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    /// Two of three instances grant and the third never answers: the
    /// caller is woken by the decision, whenever it starts waiting.
    #[test]
    fn loom_checks_the_caller_is_woken_when_a_quorum_grants_though_one_instance_never_answers() {
        explore(|| {
            let round = round_of_three();
            let workers = deliver_concurrently(&round, &[(0, 1), (2, 1)]);
            let tally = round.wait(far_deadline());
            assert_eq!(tally.yes.len(), 2, "woken before the decision");
            assert!(tally.failed.is_empty(), "nobody timed out");
            for worker in workers {
                worker.join().expect("worker");
            }
        });
    }

    /// One grants and two refuse: the caller is woken once no quorum can
    /// grant; a third answer after it took the tally is dropped.
    #[test]
    fn loom_checks_the_caller_is_woken_when_no_quorum_can_grant_and_late_answers_are_dropped() {
        explore(|| {
            let round = round_of_three();
            let workers = deliver_concurrently(&round, &[(0, 0), (1, 1), (2, 0)]);
            let tally = round.wait(far_deadline());
            assert!(tally.failed.is_empty(), "nobody timed out");
            assert!(tally.no.len() <= 2 && tally.yes.len() <= 1);
            assert!(
                round.quorum.decided(tally.yes.len(), tally.no.len()),
                "woken before the decision: {} yes, {} no",
                tally.yes.len(),
                tally.no.len()
            );
            for worker in workers {
                worker.join().expect("worker");
            }
            let st = round.state.lock();
            assert!(
                st.tally.yes.is_empty() && st.tally.no.is_empty(),
                "an answer after the tally was taken was kept"
            );
        });
    }

    /// A read that needs every answer waits for the last one, though the
    /// decision came earlier.
    #[test]
    fn loom_checks_a_wait_for_every_answer_is_woken_by_the_last() {
        explore(|| {
            let round = round_of_three();
            let workers = deliver_concurrently(&round, &[(0, 1), (1, 1), (2, 0)]);
            let tally = round.wait_all(far_deadline());
            assert_eq!((tally.yes.len(), tally.no.len()), (2, 1));
            for worker in workers {
                worker.join().expect("worker");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply nobody expected is reported by its types only: a reply may
    /// hold another client's lock value.
    #[test]
    fn unexpected_replies_are_named_by_type_never_by_content() {
        let values = [
            Value::Nil,
            Value::Int(7),
            Value::BulkString(b"secret-lock-value".to_vec()),
            Value::SimpleString("secret-status".into()),
            Value::Okay,
            Value::Array(vec![]),
            Value::Double(1.5),
        ];
        let Vote::<(), ()>::Failed(e) = unexpected("a script", &values) else {
            panic!("not a failure");
        };
        assert_eq!(e.kind(), InstanceErrorKind::Protocol);
        assert_eq!(
            e.detail(),
            "unexpected reply to a script: [nil, integer, bulk string, status, OK, array, other]"
        );
    }
}
