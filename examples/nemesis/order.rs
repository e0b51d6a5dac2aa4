//! The fair lock's order (the `fair` workload): grants go in ticket order
//! among live waiters, and a dead waiter holds the line up for a
//! heartbeat TTL at most. The exact rules are in `docs/fair.md` ("What the
//! nemesis bench checks"); `.ci/judge.py` judges the same rule, written
//! apart.
//!
//! A waiter `w` is *ahead of* a grant `g` when `w` joined the queues (a
//! quorum had its entry) before `g`'s call could have taken its place:
//! before `g`'s join began, with a lower ticket, or, for a call granted in
//! its first round (no ticket), before that call began. `w` is *live*
//! from its join until its call returned, unless the client-pause nemesis
//! paused it (dead from the pause on: its heartbeats stopped). A grant
//! with a live waiter ahead of it is out of order; a fault (other than a
//! client pause) active between the waiter's join and the grant, or
//! healed less than `EXCUSE_AFTER` before the join, explains it.

use std::collections::BTreeMap;

use crate::checker::{Verdict, Violation};
use crate::history::FairOutcome;
use crate::nemesis::Nemesis;
use crate::record::{FairCall, Fault, Hold, Record};

/// How long after a fault heals it may still explain a grant out of
/// order: the queues' entries it kept from being refreshed expire within
/// a heartbeat TTL, and the waiter's next heartbeat comes within a fifth
/// of it (seconds).
pub const EXCUSE_AFTER: f64 = redfence::FAIR_HEARTBEAT.as_secs_f64() + 1.0;

/// What the order check found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Order {
    /// Fair calls that returned a guard.
    pub grants: u64,
    /// Grants made while another live waiter waited (any ticket): those
    /// where the order was at stake.
    pub contested: u64,
    /// Grants with a live waiter ahead, unexplained and explained.
    pub out_of_order: u64,
    pub out_of_order_excused: u64,
    /// Waiters the client-pause nemesis paused, and of them those that
    /// were at the head with live waiters behind when the lock was free.
    pub dead_waiters: u64,
    pub dead_heads: u64,
    /// The longest time from a dead head's death (or the lock's release,
    /// if later) to the next grant, in milliseconds.
    pub longest_dead_wait_ms: Option<f64>,
}

impl Order {
    /// The share of grants with no live waiter ahead of them.
    pub fn in_order_share(&self) -> Option<f64> {
        let in_order = self.grants - self.out_of_order - self.out_of_order_excused;
        (self.grants > 0).then(|| in_order as f64 / self.grants as f64)
    }
}

/// Judges every fair call of the history into `v`.
pub fn fair(rec: &Record, v: &mut Verdict) {
    let mut by_resource: BTreeMap<&str, Vec<&FairCall>> = BTreeMap::new();
    for call in &rec.fair {
        by_resource.entry(&call.resource).or_default().push(call);
    }
    let mut order = Order::default();
    for (resource, calls) in by_resource {
        grants_in_order(rec, resource, &calls, &mut order, v);
        dead_waits(rec, resource, &calls, &mut order);
    }
    v.fair = order;
}

/// When `w` stops being a live waiter: its call's return, or its pause.
fn live_end(w: &FairCall) -> f64 {
    w.paused.map_or(w.end, |(from, _)| from.min(w.end))
}

/// Whether `w` is a live waiter at `at`.
fn waiting_at(w: &FairCall, at: f64) -> bool {
    w.join.is_some_and(|(_, _, joined)| joined <= at) && at < live_end(w)
}

/// Whether waiter `w` is ahead of the call `g` (see the module's docs).
fn ahead_of(w: &FairCall, g: &FairCall) -> bool {
    let Some((ticket, _, joined)) = w.join else {
        return false;
    };
    match g.join {
        Some((g_ticket, g_began, _)) => ticket < g_ticket && joined < g_began,
        None => joined < g.start,
    }
}

fn grants_in_order(
    rec: &Record,
    resource: &str,
    calls: &[&FairCall],
    order: &mut Order,
    v: &mut Verdict,
) {
    for g in calls.iter().filter(|c| c.outcome == FairOutcome::Granted) {
        order.grants += 1;
        let at = g.end;
        let others = || {
            calls
                .iter()
                .filter(move |w| !std::ptr::eq(**w, *g) && waiting_at(w, at))
        };
        if others().next().is_some() {
            order.contested += 1;
        }
        let ahead: Vec<&&FairCall> = others().filter(|w| ahead_of(w, g)).collect();
        if ahead.is_empty() {
            continue;
        }
        match ahead.iter().find(|w| !explained(&rec.faults, w, at)) {
            None => order.out_of_order_excused += 1,
            Some(w) => {
                order.out_of_order += 1;
                out_of_order(resource, w, g, v);
            }
        }
    }
}

/// Whether a fault other than a client pause was active between `w`'s
/// join and the grant at `at`, or healed within `EXCUSE_AFTER` of it.
fn explained(faults: &[Fault], w: &FairCall, at: f64) -> bool {
    let joined = w.join.map_or(w.start, |(_, _, joined)| joined);
    faults
        .iter()
        .filter(|f| f.nemesis != Nemesis::ClientPause)
        .any(|f| f.start <= at && joined <= f.end + EXCUSE_AFTER)
}

fn describe(c: &FairCall) -> String {
    let place = match c.join {
        Some((ticket, _, joined)) => format!("ticket {ticket}, joined at {joined:.3} s"),
        None => "no ticket (its first round)".to_string(),
    };
    format!(
        "client {}'s fair call from {:.3} s ({place})",
        c.client, c.start
    )
}

fn out_of_order(resource: &str, w: &FairCall, g: &FairCall, v: &mut Verdict) {
    if v.violations.len() >= 200 {
        return;
    }
    v.violations.push(Violation {
        kind: "fair-out-of-order",
        resource: resource.to_string(),
        first: format!("{} waited, live, until {:.3} s", describe(w), live_end(w)),
        second: format!("{} was granted at {:.3} s", describe(g), g.end),
        first_at: w.join.map_or(w.start, |(_, _, joined)| joined),
        second_at: g.end,
    });
}

/// When the lock became free before the grant at `at`: the release (or
/// the end of the believed lease, if earlier) of the last hold of
/// `resource` granted before it.
fn free_before(holds: &[Hold], resource: &str, at: f64) -> Option<f64> {
    holds
        .iter()
        .filter(|h| h.granted < at && h.tokens.iter().any(|(r, _)| r == resource))
        .max_by(|a, b| a.granted.total_cmp(&b.granted))
        .map(|h| h.end.min(h.claim_end.max(h.granted)))
}

/// The wait each paused waiter caused: from its death (or the lock's
/// release, or the first live waiter's join behind it, whichever came
/// last) to the next grant, when it was the head then.
fn dead_waits(rec: &Record, resource: &str, calls: &[&FairCall], order: &mut Order) {
    for w in calls.iter().filter(|c| c.paused.is_some()) {
        order.dead_waiters += 1;
        let (Some((ticket, _, _)), Some((died, _))) = (w.join, w.paused) else {
            continue;
        };
        let next = calls
            .iter()
            .filter(|g| g.outcome == FairOutcome::Granted && g.end > died)
            .min_by(|a, b| a.end.total_cmp(&b.end));
        let Some(next) = next else { continue };
        // The waiters behind it that the next grant found still waiting
        // (or took): nobody else waited for the dead head.
        let behind = calls
            .iter()
            .filter(|o| !std::ptr::eq(**o, *w))
            .filter(|o| std::ptr::eq(**o, *next) || waiting_at(o, next.end))
            .filter_map(|o| o.join.map(|(_, _, joined)| joined))
            .min_by(f64::total_cmp);
        let Some(first_behind) = behind else { continue };
        let free = free_before(&rec.holds, resource, next.end).unwrap_or(died);
        let from = died.max(free).max(first_behind);
        let older_live = calls
            .iter()
            .any(|o| o.join.is_some_and(|(t, _, _)| t < ticket) && waiting_at(o, from));
        if older_live || next.end <= from {
            continue;
        }
        order.dead_heads += 1;
        let wait_ms = (next.end - from) * 1000.0;
        let longest = order.longest_dead_wait_ms.get_or_insert(wait_ms);
        *longest = longest.max(wait_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Workload;
    use crate::history::Mode;

    fn call(client: usize, start: f64, join: Option<(u64, f64)>, end: f64) -> FairCall {
        FairCall {
            client,
            resource: "reg-0".into(),
            start,
            end,
            join: join.map(|(ticket, joined)| (ticket, start + 0.001, joined)),
            outcome: FairOutcome::Granted,
            token: Some(client as u64),
            paused: None,
        }
    }

    fn hold(rec: &mut Record, granted: f64, end: f64) {
        rec.holds.push(Hold {
            client: 0,
            workload: Workload::Fair,
            mode: Mode::Exclusive,
            tokens: vec![("reg-0".into(), 1)],
            start: granted,
            granted,
            claim_end: end,
            releasing: end,
            end,
            key_life: 1.0,
            wait: 2.0,
            cancelled: None,
            notes: Vec::new(),
        });
    }

    fn judged(rec: &Record) -> Verdict {
        let mut v = Verdict::default();
        fair(rec, &mut v);
        v
    }

    /// Ticket 1 joins at 0.1 and waits, live, until its grant at 2.0;
    /// ticket 2 joins at 0.3 and is granted at 1.0: out of order.
    fn skipped_ahead() -> Record {
        let mut rec = Record::default();
        rec.fair.push(call(1, 0.0, Some((1, 0.1)), 2.0));
        rec.fair.push(call(2, 0.2, Some((2, 0.3)), 1.0));
        rec
    }

    #[test]
    fn a_grant_past_a_live_older_waiter_is_reported() {
        let v = judged(&skipped_ahead());
        assert_eq!(v.fair.out_of_order, 1);
        assert_eq!(v.fair.grants, 2);
        assert_eq!(v.fair.in_order_share(), Some(0.5));
        assert_eq!(v.violations[0].kind, "fair-out-of-order");
        assert!(v.failed());
    }

    #[test]
    fn grants_in_ticket_order_pass() {
        let mut rec = Record::default();
        rec.fair.push(call(1, 0.0, Some((1, 0.1)), 1.0));
        rec.fair.push(call(2, 0.2, Some((2, 0.3)), 2.0));
        // A first-round grant before anyone joined, and one after the
        // line emptied.
        rec.fair.push(call(3, 0.0, None, 0.05));
        rec.fair.push(call(4, 2.5, None, 2.6));
        let v = judged(&rec);
        assert_eq!((v.fair.out_of_order, v.fair.out_of_order_excused), (0, 0));
        assert_eq!(v.fair.contested, 1);
        assert_eq!(v.fair.in_order_share(), Some(1.0));
        assert!(!v.failed());
    }

    #[test]
    fn a_first_round_grant_past_a_live_waiter_is_reported() {
        let mut rec = Record::default();
        rec.fair.push(call(1, 0.0, Some((1, 0.1)), 2.0));
        rec.fair.push(call(2, 0.5, None, 0.6));
        assert_eq!(judged(&rec).fair.out_of_order, 1);
    }

    #[test]
    fn a_paused_waiter_is_not_ahead_and_its_wait_is_measured() {
        let mut rec = skipped_ahead();
        rec.fair[0].outcome = FairOutcome::Skipped;
        rec.fair[0].paused = Some((0.1, 1.6));
        hold(&mut rec, 0.0, 0.05);
        let v = judged(&rec);
        assert_eq!(v.fair.out_of_order, 0);
        assert_eq!((v.fair.dead_waiters, v.fair.dead_heads), (1, 1));
        let wait = v.fair.longest_dead_wait_ms.unwrap_or_default();
        assert!((wait - 700.0).abs() < 1e-6, "{wait}");
    }

    #[test]
    fn a_fault_between_the_join_and_the_grant_explains_it() {
        let mut rec = skipped_ahead();
        rec.faults.push(Fault {
            nemesis: Nemesis::Pause,
            instances: vec![0, 1],
            start: 0.4,
            end: 0.8,
            detail: String::new(),
            effects: Vec::new(),
        });
        let v = judged(&rec);
        assert_eq!((v.fair.out_of_order, v.fair.out_of_order_excused), (0, 1));
        assert!(!v.failed());
        // A client pause (a holder's stall) explains nothing.
        rec.faults[0].nemesis = Nemesis::ClientPause;
        assert_eq!(judged(&rec).fair.out_of_order, 1);
    }

    #[test]
    fn fair_calls_read_back_the_same() {
        let mut rec = skipped_ahead();
        rec.fair[0].paused = Some((0.1, 1.6));
        rec.fair[1].join = None;
        rec.fair[1].outcome = FairOutcome::Contended;
        let back = Record::from_jsonl(&rec.to_jsonl()).map(|r| judged(&r).fair);
        assert_eq!(back, Ok(judged(&rec).fair));
    }
}
