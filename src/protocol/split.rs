//! Where a request goes on a Redis Cluster position: the one slot all its
//! keys share, or, for a set of resources whose keys lie in several slots
//! (a script may touch one slot only), one part per slot whose answers
//! combine into the answer of the whole.
//!
//! A standalone server always runs the whole request; only a cluster
//! position uses the parts. The position still votes once: a set is
//! granted there only if every part granted, and a part granted while
//! another refused is undone before the vote is counted, so the
//! all-or-nothing contract of `lock_all` holds on the position as a whole.

use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use crate::protocol::keys::Target;

/// How a request reaches a cluster position.
#[derive(Clone, Default)]
pub(crate) struct Route {
    /// The slot of every key of the request, if they share one.
    pub slot: Option<u16>,
    /// Otherwise, the request cut along slots.
    pub split: Option<Arc<Split>>,
    /// The request as a cluster position sends it, where that differs (a
    /// release announces with `SPUBLISH`): packed commands and their count.
    pub cluster: Option<(Arc<[u8]>, usize)>,
}

/// A request cut into one part per slot.
pub(crate) struct Split {
    pub parts: Vec<Part>,
    pub combine: Combine,
}

pub(crate) struct Part {
    pub slot: u16,
    pub packed: Arc<[u8]>,
    pub commands: usize,
    /// The target's members in this part, by their index in the target.
    pub members: Vec<usize>,
}

/// How the parts' replies make the whole request's.
pub(crate) enum Combine {
    /// An acquire: a grant (`{1, token…}` in member order) only if every
    /// part granted; otherwise the first refusal, and the parts that
    /// granted are undone with `undo` (their clean-up, per part, kept
    /// until `undo_deadline`).
    Acquire {
        undo: Vec<Arc<[u8]>>,
        undo_deadline: Instant,
    },
    /// A 1/0 script (release, extension, raise round): the first reply is
    /// 1 only if it is 1 in every part; the other replies (a release's
    /// announcements, more raise scripts) follow, part after part.
    AllYes,
}

impl Route {
    /// The route of requests about `target`: its slot, or, on a client
    /// with a cluster position (`split` true), its parts, each packed by
    /// `pack` for the part's members; `combine` gets the parts' targets.
    pub(crate) fn new(
        target: &Target,
        split: bool,
        combine: impl FnOnce(&[Target]) -> Combine,
        pack: impl Fn(&Target) -> (Arc<[u8]>, usize),
    ) -> Route {
        let slot = target.slot();
        if slot.is_some() || !split {
            return Route {
                slot,
                split: None,
                cluster: None,
            };
        }
        let Some(groups) = target.by_slot() else {
            return Route::default();
        };
        let mut subs = Vec::with_capacity(groups.len());
        let mut parts = Vec::with_capacity(groups.len());
        for (slot, members, sub) in groups {
            let (packed, commands) = pack(&sub);
            parts.push(Part {
                slot,
                packed,
                commands,
                members,
            });
            subs.push(sub);
        }
        Route {
            slot: None,
            split: Some(Arc::new(Split {
                parts,
                combine: combine(&subs),
            })),
            cluster: None,
        }
    }

    /// A route to one slot.
    pub(crate) fn slot(slot: Option<u16>) -> Route {
        Route {
            slot,
            split: None,
            cluster: None,
        }
    }

    /// This route, with the request in the form a cluster position sends
    /// when it goes to one slot whole; packed only on a client with a
    /// cluster position (`cluster` true).
    pub(crate) fn with_cluster_form(
        mut self,
        cluster: bool,
        form: impl FnOnce() -> (Arc<[u8]>, usize),
    ) -> Route {
        if cluster && self.slot.is_some() {
            self.cluster = Some(form());
        }
        self
    }
}

/// What the parts' replies say together.
pub(crate) struct Combined {
    pub values: Vec<Value>,
    /// Parts that applied an acquire the whole did not grant: to undo.
    pub undo: Vec<usize>,
}

impl Combine {
    pub(crate) fn apply(&self, parts: &[Part], replies: Vec<Vec<Value>>) -> Combined {
        // An error reply in any part is the answer of the whole (its vote
        // fails; a failed attempt is cleaned up on every part).
        if let Some(k) = replies
            .iter()
            .position(|r| r.iter().any(|v| matches!(v, Value::ServerError(_))))
        {
            let mut replies = replies;
            return Combined {
                values: std::mem::take(&mut replies[k]),
                undo: Vec::new(),
            };
        }
        match self {
            Combine::Acquire { .. } => combine_acquire(parts, replies),
            Combine::AllYes => combine_all_yes(replies),
        }
    }
}

fn granted(reply: &[Value]) -> Option<&[Value]> {
    match reply {
        [Value::Array(items)] => match items.split_first() {
            Some((Value::Int(1), tokens)) => Some(tokens),
            _ => None,
        },
        _ => None,
    }
}

fn combine_acquire(parts: &[Part], mut replies: Vec<Vec<Value>>) -> Combined {
    let total: usize = parts.iter().map(|p| p.members.len()).sum();
    if replies.iter().all(|r| granted(r).is_some()) {
        let mut tokens = vec![Value::Nil; total];
        for (part, reply) in parts.iter().zip(&replies) {
            let got = granted(reply).unwrap_or_default();
            for (member, token) in part.members.iter().zip(got) {
                if let Some(slot) = tokens.get_mut(*member) {
                    *slot = token.clone();
                }
            }
        }
        let mut items = Vec::with_capacity(total + 1);
        items.push(Value::Int(1));
        items.extend(tokens);
        return Combined {
            values: vec![Value::Array(items)],
            undo: Vec::new(),
        };
    }
    let undo = (0..replies.len())
        .filter(|k| granted(&replies[*k]).is_some())
        .collect();
    let refusal = replies
        .iter()
        .position(|r| granted(r).is_none())
        .map(|k| std::mem::take(&mut replies[k]))
        .unwrap_or_default();
    Combined {
        values: refusal,
        undo,
    }
}

fn combine_all_yes(replies: Vec<Vec<Value>>) -> Combined {
    let all = replies
        .iter()
        .all(|r| matches!(r.first(), Some(Value::Int(1))));
    let odd = replies
        .iter()
        .any(|r| !matches!(r.first(), Some(Value::Int(0 | 1))));
    let mut values = Vec::new();
    values.push(match (odd, replies.first().and_then(|r| r.first())) {
        (true, Some(first)) => first.clone(),
        (true, None) => Value::Nil,
        (false, _) => Value::Int(i64::from(all)),
    });
    for reply in replies {
        values.extend(reply.into_iter().skip(1));
    }
    Combined {
        values,
        undo: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(members: &[usize]) -> Part {
        Part {
            slot: 0,
            packed: Arc::from(&b""[..]),
            commands: 1,
            members: members.to_vec(),
        }
    }

    fn grant(tokens: &[i64]) -> Vec<Value> {
        let mut items = vec![Value::Int(1)];
        items.extend(tokens.iter().map(|t| Value::Int(*t)));
        vec![Value::Array(items)]
    }

    #[test]
    fn a_set_is_granted_in_member_order_only_when_every_part_granted() {
        let parts = [part(&[1]), part(&[0, 2])];
        let all = combine_acquire(&parts, vec![grant(&[20]), grant(&[10, 30])]);
        assert_eq!(all.values, grant(&[10, 20, 30]));
        assert!(all.undo.is_empty());

        let refusal = vec![Value::Array(vec![
            Value::Int(0),
            Value::BulkString(b"other".to_vec()),
        ])];
        let some = combine_acquire(&parts, vec![grant(&[20]), refusal.clone()]);
        assert_eq!(some.values, refusal);
        assert_eq!(some.undo, [0]);
    }

    #[test]
    fn yes_only_when_every_part_said_yes() {
        let both = combine_all_yes(vec![
            vec![Value::Int(1), Value::Int(3)],
            vec![Value::Int(1), Value::Int(4)],
        ]);
        assert_eq!(both.values, [Value::Int(1), Value::Int(3), Value::Int(4)]);
        let one = combine_all_yes(vec![vec![Value::Int(1)], vec![Value::Int(0)]]);
        assert_eq!(one.values, [Value::Int(0)]);
        let odd = combine_all_yes(vec![vec![Value::Nil], vec![Value::Int(1)]]);
        assert_eq!(odd.values, [Value::Nil]);
    }

    #[test]
    fn an_error_in_any_part_is_the_answer() {
        let err = redis::parse_redis_value(b"-CLUSTERDOWN The cluster is down\r\n")
            .expect("an error reply parses");
        let parts = [part(&[0]), part(&[1])];
        let combined = Combine::AllYes.apply(&parts, vec![vec![Value::Int(1)], vec![err.clone()]]);
        assert_eq!(combined.values, [err]);
    }
}
