//! A request cut along slots (`split.rs`) on a cluster position: its
//! parts' answers gathered into the answer of the whole, and a partial
//! grant undone before that answer is counted.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use redis::Value;

use super::Router;
use crate::protocol::split::{Combine, Split};
use crate::transport::instance::{Collect, Replies, Request, Sink};

/// The answers to the parts of one request cut along slots.
pub(super) struct Gather {
    pub(super) router: Weak<Router>,
    pub(super) index: usize,
    pub(super) split: Arc<Split>,
    pub(super) state: Mutex<Gathering>,
}

pub(super) struct Gathering {
    pub(super) replies: Vec<Option<Replies>>,
    pub(super) left: usize,
    /// Where the whole request's answer goes.
    pub(super) sink: Option<Sink>,
}

/// One part's answer.
pub(super) struct PartSink {
    pub(super) gather: Arc<Gather>,
    pub(super) part: usize,
}

impl Collect for PartSink {
    fn deliver(&self, _position: usize, replies: Replies) {
        self.gather.part_done(self.part, replies);
    }
}

impl Gather {
    fn part_done(&self, part: usize, replies: Replies) {
        let mut st = self.state.lock();
        match st.replies.get_mut(part) {
            Some(slot @ None) => *slot = Some(replies),
            _ => return,
        }
        st.left -= 1;
        if st.left > 0 {
            return;
        }
        let sink = st.sink.take();
        let all: Vec<Replies> = st.replies.iter_mut().filter_map(Option::take).collect();
        drop(st);
        // A part that could not be answered fails the whole: the position
        // gave no answer (a failed attempt is cleaned up on every part).
        let values = match all.into_iter().collect::<Result<Vec<_>, _>>() {
            Err(e) => {
                if let Some(sink) = sink {
                    sink.deliver(self.index, Err(e));
                }
                return;
            }
            Ok(values) => values,
        };
        let combined = self.split.combine.apply(&self.split.parts, values);
        let mut answer = Answer {
            index: self.index,
            sink,
            values: Some(combined.values),
            left: combined.undo.len(),
        };
        if combined.undo.is_empty() {
            answer.send();
            return;
        }
        // The position's "no" is counted once its partial grant is gone
        // (or the undo's first try ended): the caller's call must not
        // return while part of the set is still held here.
        let answer = Arc::new(Mutex::new(answer));
        self.undo(&combined.undo, &answer);
    }

    /// Cleans up the parts of an acquire that granted while another
    /// refused; `answer` goes out when each has been tried once (the
    /// clean-up itself goes on until its deadline).
    fn undo(&self, parts: &[usize], answer: &Arc<Mutex<Answer>>) {
        let Combine::Acquire {
            undo,
            undo_deadline,
        } = &self.split.combine
        else {
            answer.lock().send();
            return;
        };
        let Some(router) = self.router.upgrade() else {
            answer.lock().send();
            return;
        };
        for &k in parts {
            let (Some(part), Some(packed)) = (self.split.parts.get(k), undo.get(k)) else {
                answer.lock().one_done();
                continue;
            };
            let sink: Sink = Arc::new(UndoSink(Arc::clone(answer)));
            let undo = Request::plain(Arc::clone(packed), 1, *undo_deadline, Some(sink));
            router.route(undo.at_slot(part.slot).persistent(true));
        }
    }
}

/// A split request's answer, held back until its undo was tried.
struct Answer {
    index: usize,
    sink: Option<Sink>,
    values: Option<Vec<Value>>,
    left: usize,
}

impl Answer {
    fn one_done(&mut self) {
        self.left = self.left.saturating_sub(1);
        if self.left == 0 {
            self.send();
        }
    }

    fn send(&mut self) {
        if let (Some(sink), Some(values)) = (self.sink.take(), self.values.take()) {
            sink.deliver(self.index, Ok(values));
        }
    }
}

struct UndoSink(Arc<Mutex<Answer>>);

impl Collect for UndoSink {
    fn deliver(&self, _position: usize, _replies: Replies) {
        self.0.lock().one_done();
    }
}
