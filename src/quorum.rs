//! Fan-out to every instance and the quorum count of their answers.
//!
//! A caller queues one request per instance and then reads answers as they
//! come, stopping as soon as the outcome is decided: a quorum agreed, or so
//! many refused or failed that no quorum is possible. A slow or dead
//! instance therefore never delays a decision that the others already made.

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Receiver;
use redis::Value;

use crate::error::{InstanceError, InstanceErrorKind};
use crate::instance::{Instance, Reply, Request};

/// The set of instances a client locks on.
pub(crate) struct Instances {
    list: Vec<Instance>,
}

/// How one instance voted.
pub(crate) enum Vote<Y, N> {
    Yes(Y),
    No(N),
    Failed(InstanceError),
}

/// The answers gathered until the outcome was decided.
pub(crate) struct Tally<Y, N> {
    pub yes: Vec<Y>,
    pub no: Vec<N>,
    pub failed: Vec<InstanceError>,
}

impl<Y, N> Tally<Y, N> {
    pub fn has_wrong_type(&self) -> bool {
        self.failed
            .iter()
            .any(|e| e.kind() == InstanceErrorKind::WrongType)
    }
}

impl Instances {
    pub fn new(list: Vec<Instance>) -> Self {
        Instances { list }
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn quorum(&self) -> usize {
        self.list.len() / 2 + 1
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.list.iter().map(Instance::name)
    }

    /// Queues the command on every instance; answers arrive on the returned
    /// channel, tagged with the instance's index.
    pub fn broadcast(&self, packed: &Arc<[u8]>, deadline: Instant) -> Receiver<Reply> {
        let (tx, rx) = crossbeam_channel::bounded(self.list.len());
        self.send_all(packed, deadline, Some(tx), false);
        rx
    }

    /// Queues a command that must reach every instance (a release): a
    /// worker that cannot deliver it keeps retrying until `deadline`, even
    /// after the caller stopped waiting. Answers are returned if `wait`.
    pub fn deliver(
        &self,
        packed: &Arc<[u8]>,
        deadline: Instant,
        wait: bool,
    ) -> Option<Receiver<Reply>> {
        if wait {
            let (tx, rx) = crossbeam_channel::bounded(self.list.len());
            self.send_all(packed, deadline, Some(tx), true);
            Some(rx)
        } else {
            self.send_all(packed, deadline, None, true);
            None
        }
    }

    fn send_all(
        &self,
        packed: &Arc<[u8]>,
        deadline: Instant,
        reply: Option<crossbeam_channel::Sender<Reply>>,
        persistent: bool,
    ) {
        for instance in &self.list {
            instance.send(Request {
                packed: Arc::clone(packed),
                deadline,
                reply: reply.clone(),
                persistent,
            });
        }
    }

    /// Reads answers until the outcome is decided or the deadline passes.
    /// Instances that did not answer by then are listed as timed out.
    pub fn collect<Y, N>(
        &self,
        rx: &Receiver<Reply>,
        deadline: Instant,
        mut classify: impl FnMut(Value) -> Vote<Y, N>,
    ) -> Tally<Y, N> {
        let n = self.list.len();
        let quorum = self.quorum();
        let mut answered = vec![false; n];
        let mut tally = Tally {
            yes: Vec::with_capacity(n),
            no: Vec::new(),
            failed: Vec::new(),
        };
        while tally.yes.len() < quorum && tally.no.len() + tally.failed.len() <= n - quorum {
            let Ok((index, result)) = rx.recv_deadline(deadline) else {
                break;
            };
            answered[index] = true;
            let vote = match result {
                Ok(Value::ServerError(e)) => {
                    let kind = InstanceErrorKind::from_code(e.code());
                    let detail = e
                        .details()
                        .map_or_else(|| e.code().to_string(), |d| format!("{} {d}", e.code()));
                    Vote::Failed(InstanceError::new(self.list[index].name(), kind, detail))
                }
                Ok(value) => match classify(value) {
                    Vote::Failed(e) => Vote::Failed(InstanceError::new(
                        self.list[index].name(),
                        e.kind(),
                        e.detail(),
                    )),
                    vote => vote,
                },
                Err(e) => Vote::Failed(e),
            };
            match vote {
                Vote::Yes(y) => tally.yes.push(y),
                Vote::No(n) => tally.no.push(n),
                Vote::Failed(e) => tally.failed.push(e),
            }
        }
        let decided = tally.yes.len() >= quorum || tally.no.len() + tally.failed.len() > n - quorum;
        if !decided {
            for (i, done) in answered.iter().enumerate() {
                if !done {
                    tally.failed.push(InstanceError::new(
                        self.list[i].name(),
                        InstanceErrorKind::Timeout,
                        "no answer within the per-instance timeout",
                    ));
                }
            }
        }
        tally
    }
}

/// A classifier's verdict on a reply it did not expect.
pub(crate) fn unexpected<Y, N>(what: &str, value: &Value) -> Vote<Y, N> {
    Vote::Failed(InstanceError::new(
        "",
        InstanceErrorKind::Protocol,
        format!("unexpected reply to {what}: {value:?}"),
    ))
}

/// Classifies the 1/0 answers of the release, extend and raise scripts.
pub(crate) fn yes_no(what: &'static str) -> impl FnMut(Value) -> Vote<(), ()> {
    move |value| match value {
        Value::Int(1) => Vote::Yes(()),
        Value::Int(0) => Vote::No(()),
        other => unexpected(what, &other),
    }
}
