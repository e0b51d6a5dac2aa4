//! Judges the history, not the code: what the holders believed, the
//! tokens they were given, what the database accepted, what the instances
//! held. Each check is a guarantee from the README; each violation names
//! the resource, the two events and their times.
//!
//! Every pair of guards believed at once is judged (not one pair per
//! guard), and a pair is excused only by a fault that can explain it
//! (`excuse`): the exact rule is in `docs/testing.md` ("What an overlap is
//! excused by").

use std::collections::BTreeMap;

use crate::history::{Mode, UnlockOutcome};
use crate::nemesis::{Nemesis, LATE_MAX};
use crate::record::{Effect, Fault, Hold, Record, Stored, Unlock};
use crate::{slot_resource, MAX_KEY_LIFE, RUN_HOLD};

/// How long after a cancel a cancelled call may still return: the attempt
/// in flight (one instance timeout), its undo (another), and the
/// scheduling of a loaded machine (seconds).
const CANCEL_BOUND: f64 = 1.0;
/// How long after a cancel a call may still return another error than
/// `Cancelled`: its attempt was ending as the cancel came (two instance
/// timeouts).
const CANCEL_RACE: f64 = 2.0 * crate::INSTANCE_TIMEOUT.as_secs_f64();
/// What a clock reading may be off beyond its uncertainty (half the round
/// trips): libfaketime's offsets are whole milliseconds, and the servers
/// read the clock a little before or after answering (seconds).
pub const CLOCK_SLACK: f64 = 0.010;

/// How far two holders' beliefs may touch before it counts: the claims
/// are read a few microseconds after the library computed them (seconds).
const ALLOWANCE: f64 = 0.002;
/// How long after its wait a lock call may still return: the attempt in
/// flight at the deadline, its raise round and its clean-up.
const STUCK_AFTER_WAIT: f64 = 2.0;
/// How long after a client stopped locking a resource a key it wrote may
/// still have been written: the watcher's own delay.
const WRITTEN_AFTER: f64 = 0.150;
/// Slack for reading the clock, beyond a raise's bound
/// (`redfence::MAX_CLOCK_OFFSET`), in how far a token may be ahead.
const CLOCK_READ_SLACK: f64 = 0.100;
/// The longest a clock fault moves a clock: keys there live that much
/// longer.
const CLOCK_STEP_MAX: f64 = 5.0;
/// How long before its recorded time the watcher may have read a key: a
/// sighting is timed when its read returned, which is at most the
/// watcher's read timeout after the read. An effect recorded up to this
/// long before a sighting may have come after the key was read.
const READ_SLACK: f64 = crate::watcher::READ_TIMEOUT.as_secs_f64();
/// How soon after a grant the watcher may not have read a key it wrote
/// yet: one round of reads, each up to the read timeout. An effect within
/// this of the first guard's grant may have met its key unseen.
const UNSEEN: f64 = crate::watcher::EVERY.as_secs_f64() + READ_SLACK;

#[derive(Debug, Clone)]
pub struct Violation {
    pub kind: &'static str,
    pub resource: String,
    pub first: String,
    pub second: String,
    /// Seconds since the run started, of the first and second event.
    pub first_at: f64,
    pub second_at: f64,
}

#[derive(Debug, Default)]
pub struct Verdict {
    pub token_regressions: u64,
    pub tokens_ahead: u64,
    /// Pairs of guards believed at once, by kind: locks and sets,
    /// leaderships, one semaphore slot, a write with another guard of the
    /// reader-writer lock.
    pub overlaps: u64,
    pub leader_overlaps: u64,
    pub slot_overlaps: u64,
    pub rw_overlaps: u64,
    /// Pairs believed at once that a fault explains (`excuse`), of every
    /// kind above.
    pub overlaps_excused: u64,
    /// A permit on a slot the semaphore does not have.
    pub slots_out_of_range: u64,
    /// More permits at once than the semaphore's count.
    pub permits_over_count: u64,
    pub permits_over_count_excused: u64,
    /// Every excused finding (overlaps, permits over the count, run-once
    /// duplicates) by the reason that excused it and its instance.
    pub excused: BTreeMap<(&'static str, usize), u64>,
    /// `overlaps_excused` by workload (the later guard's).
    pub excused_by_workload: BTreeMap<&'static str, u64>,
    /// Two accepted reads of one read guard that saw different values.
    pub torn_reads: u64,
    /// An accepted read that did not see exactly the accepted writes with
    /// lower tokens.
    pub stale_reads: u64,
    /// What the semaphore and rw checks had to judge: permits granted
    /// while every other permit was believed held (the count reached),
    /// reads granted while another read was believed held, and read
    /// guards whose two reads the store accepted.
    pub permits_at_count: u64,
    pub reads_shared: u64,
    pub reads_checked: u64,
    pub run_once_duplicates: u64,
    pub run_once_excused: u64,
    pub orphans: u64,
    pub voided_grants: u64,
    pub stuck_calls: u64,
    pub lost_updates: u64,
    pub stale_writes_accepted: u64,
    /// Pairs believed at once where the first guard's value was revoked by
    /// an operator's unlock before the second grant: by an unlock that
    /// returned the holder, and by one that failed (and may have deleted
    /// it anyway).
    pub unlock_excused: u64,
    pub unlock_failed_excused: u64,
    /// Unlocks that revoked a holder still working (live), and one left
    /// for dead (its guard was gone before the unlock began).
    pub unlocks_of_live: u64,
    pub unlocks_of_dead: u64,
    /// Calls cancelled in flight, those that returned `Cancelled`, and the
    /// violations of the cancel rule.
    pub cancels: u64,
    pub cancelled: u64,
    pub cancel_violations: u64,
    /// The fenced storage server: operations judged, and violations
    /// (lost update, stale write accepted, a stale read, a refusal with
    /// no newer token before it, a final value that is not the last
    /// accepted write's).
    pub kv_ops: u64,
    pub kv_violations: u64,
    /// Clock checks judged, of them those made while a clock was stepped,
    /// and violations (an offset off the step by more than its
    /// uncertainty and `CLOCK_SLACK`, a doctor that did not flag a step
    /// past `MAX_CLOCK_OFFSET`, or flagged an error short of it).
    pub clock_checks: u64,
    pub clock_checks_stepped: u64,
    pub clock_violations: u64,
    /// The fair lock's order (`order.rs`).
    pub fair: crate::order::Order,
    pub violations: Vec<Violation>,
}

impl Verdict {
    pub fn failed(&self) -> bool {
        !self.violations.is_empty()
    }

    fn excused_by(&mut self, reason: &'static str, instance: usize) {
        *self.excused.entry((reason, instance)).or_default() += 1;
    }
}

pub fn check(rec: &Record) -> Verdict {
    let mut v = Verdict::default();
    let ctx = Ctx::new(rec);
    for (resource, list) in by_resource(&rec.holds) {
        tokens_near_clocks(rec, &resource, &list, &mut v);
        let beliefs: Vec<Belief> = list
            .iter()
            .map(|(h, t)| ctx.revoked(Belief::of(h, *t)))
            .collect();
        if list
            .iter()
            .any(|(h, _)| matches!(h.mode, Mode::Read | Mode::Write))
        {
            rw_tokens(&resource, &list, &mut v);
            reads_shared(&beliefs, &mut v);
        } else {
            // Locks, sets, leaderships, and each slot of the semaphore.
            tokens_increase(&resource, &list, |_| true, |_| true, &mut v);
        }
        exclusion(&ctx, &resource, &beliefs, &mut v);
    }
    permit_count(&ctx, &mut v);
    run_once(&ctx, &mut v);
    orphans(rec, &mut v);
    voided(rec, &mut v);
    calls_end(rec, &mut v);
    database(&rec.stored, &mut v);
    unlocks_judged(&ctx, &mut v);
    cancels(rec, &mut v);
    crate::checks::kv(rec, &mut v);
    crate::checks::clocks(rec, &mut v);
    crate::order::fair(rec, &mut v);
    v
}

/// Each resource's holds with its token, by grant time.
fn by_resource(holds: &[Hold]) -> BTreeMap<String, Vec<(&Hold, u64)>> {
    let mut map: BTreeMap<String, Vec<(&Hold, u64)>> = BTreeMap::new();
    for h in holds {
        for (resource, token) in &h.tokens {
            map.entry(resource.clone()).or_default().push((h, *token));
        }
    }
    for list in map.values_mut() {
        list.sort_by(|a, b| a.0.granted.total_cmp(&b.0.granted));
    }
    map
}

fn describe(h: &Hold, token: u64) -> String {
    let what = match h.mode {
        Mode::Exclusive => h.workload.name().to_string(),
        Mode::Permit { slot } => format!("permit on slot {slot}"),
        Mode::Read => "read".to_string(),
        Mode::Write => "write".to_string(),
    };
    format!(
        "client {} ({what}) token {token}, asked at {:.3} s, granted at {:.3} s, believed until {:.3} s",
        h.client,
        h.start,
        h.granted,
        belief_end(h),
    )
}

/// Until when the holder believed it held: its last claim, cut at the
/// moment it began to release (the keys go while the release waits for
/// the slower instances).
fn belief_end(h: &Hold) -> f64 {
    h.claim_end.min(h.releasing)
}

/// A grant or an extension a belief rests on.
#[derive(Debug, Clone, Copy)]
struct Confirmation {
    /// The earliest it can have been sent: its writes on the instances
    /// are no earlier.
    earliest: f64,
    /// When the holder first saw it (its writes are no later).
    seen: f64,
    /// The end it promised.
    until: f64,
}

/// The confirmations behind a hold's belief, read from its notes: each
/// note that promises more than every one before it saw a new grant or
/// extension, sent no earlier than the note before it nor than its
/// promise less the longest TTL the hold asked for (a promise is the
/// request's start + its TTL − the drift allowance).
fn confirmations(h: &Hold) -> Vec<Confirmation> {
    let mut out = Vec::new();
    let (mut prev, mut best) = (h.start, f64::NEG_INFINITY);
    for &(at, until) in &h.notes {
        if until > best {
            let earliest = prev.max(until - h.key_life);
            out.push(Confirmation {
                earliest,
                seen: at,
                until,
            });
            best = until;
        }
        prev = at;
    }
    if out.is_empty() {
        out.push(Confirmation {
            earliest: h.start.max(h.claim_end - h.key_life),
            seen: h.granted,
            until: h.claim_end,
        });
    }
    out
}

/// One guard as the exclusion checks judge it.
struct Belief<'a> {
    hold: &'a Hold,
    token: u64,
    granted: f64,
    /// Until when it excluded others.
    until: f64,
    confirms: Vec<Confirmation>,
}

impl Belief<'_> {
    fn of(hold: &Hold, token: u64) -> Belief<'_> {
        Belief {
            hold,
            token,
            granted: hold.granted,
            until: belief_end(hold),
            confirms: confirmations(hold),
        }
    }
}

/// An effect of a fault on one instance, with the fault's kind.
struct Act {
    instance: usize,
    at: f64,
    effect: Effect,
    nemesis: Nemesis,
}

/// (client, instance) -> (at, pttl, a reader entry) of a resource's keys
/// seen there, by time.
type SeenOn = BTreeMap<(usize, usize), Vec<(f64, f64, bool)>>;

/// What the exclusion checks look things up in.
struct Ctx<'a> {
    rec: &'a Record,
    /// Every fault's effects, by time.
    acts: Vec<Act>,
    /// resource -> (client, instance) -> (at, pttl) of its keys seen
    /// there, by time.
    seen: BTreeMap<&'a str, SeenOn>,
    /// (client, resource) -> every activity (see `activity`).
    activity: BTreeMap<(usize, String), Vec<Span>>,
    /// The holds an unlock revoked, or may have (see `revocations`).
    revocations: Vec<Revocation>,
}

impl<'a> Ctx<'a> {
    fn new(rec: &'a Record) -> Ctx<'a> {
        let mut acts: Vec<Act> = rec
            .faults
            .iter()
            .flat_map(|f: &Fault| {
                f.effects.iter().map(|&(instance, at, effect)| Act {
                    instance,
                    at,
                    effect,
                    nemesis: f.nemesis,
                })
            })
            .collect();
        acts.sort_by(|a, b| a.at.total_cmp(&b.at));
        let mut seen: BTreeMap<&str, SeenOn> = BTreeMap::new();
        for s in &rec.sightings {
            seen.entry(s.resource.as_str())
                .or_default()
                .entry((s.client, s.instance))
                .or_default()
                .push((s.at, s.pttl, s.reader));
        }
        for list in seen.values_mut().flat_map(|m| m.values_mut()) {
            list.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        Ctx {
            rec,
            acts,
            seen,
            activity: activity(rec),
            revocations: revocations(rec),
        }
    }

    /// The belief of a hold an unlock revoked ends at the unlock's return:
    /// from then no quorum holds its value, whatever its holder believes.
    fn revoked<'h>(&self, mut b: Belief<'h>) -> Belief<'h> {
        for r in self.revocations_of(b.hold).filter(|r| !r.failed) {
            b.until = b.until.min(r.to);
        }
        b
    }

    fn revocations_of<'s>(&'s self, h: &'s Hold) -> impl Iterator<Item = &'s Revocation> + 's {
        self.revocations
            .iter()
            .filter(move |r| std::ptr::eq(r.hold, h))
    }

    /// Whether an unlock explains guard `b` granted while `a` was
    /// believed: `a`'s value was revoked (or, by a failed unlock, may have
    /// been) after the unlock began and before `b`'s grant. `Some(failed)`.
    fn unlocked(&self, a: &Hold, b: &Hold) -> Option<bool> {
        self.revocations_of(a)
            .filter(|r| b.granted >= r.from)
            .map(|r| r.failed)
            .min()
    }

    /// The keys of `client` on `resource` seen on `instance` from `from`
    /// to `to`.
    fn sightings(
        &self,
        client: usize,
        resource: &str,
        instance: usize,
        from: f64,
        to: f64,
    ) -> &[(f64, f64, bool)] {
        let found = self.seen.get(resource);
        let Some(list) = found.and_then(|m| m.get(&(client, instance))) else {
            return &[];
        };
        let lo = list.partition_point(|s| s.0 < from);
        let hi = list.partition_point(|s| s.0 <= to);
        &list[lo..hi.max(lo)]
    }

    /// The instances where the watcher saw a key of `client` on
    /// `resource` that blocks `mode`, seen between `from` and `at`, that
    /// was to live past `at` with no effect on that instance between: they
    /// held it at `at`. A reader entry blocks only a write.
    fn holding(&self, client: usize, resource: &str, mode: Mode, from: f64, at: f64) -> Vec<usize> {
        (0..self.rec.meta.instances)
            .filter(|&i| {
                self.sightings(client, resource, i, from, at)
                    .iter()
                    .any(|&(s, pttl, reader)| {
                        (!reader || mode == Mode::Write)
                            && s + pttl > at + ALLOWANCE
                            && !self.touched(i, s, at)
                    })
            })
            .collect()
    }

    /// Whether guard `a`'s client did nothing else on `resource` from
    /// `a`'s call until `to` (another guard or call, and the keys it may
    /// have left): then its keys there after `a`'s grant are `a`'s, which
    /// only `a`'s release deletes.
    fn alone(&self, a: &Hold, resource: &str, to: f64) -> bool {
        let spans = self.activity.get(&(a.client, resource.to_string()));
        spans.is_none_or(|list| {
            list.iter()
                .all(|&(start, end, life)| start == a.start || start > to || end + life < a.start)
        })
    }

    /// Whether a loss or a forward clock step may have hit `instance`
    /// after a key was read there at `seen` (see `READ_SLACK`), by `to`.
    fn touched(&self, instance: usize, seen: f64, to: f64) -> bool {
        self.acts.iter().any(|a| {
            a.instance == instance && seen - READ_SLACK <= a.at && a.at <= to && reason(a).is_some()
        })
    }
}

/// The reason an effect may excuse an overlap, if any: keys lost, or a
/// clock stepped forward (it expires keys early). A step back only keeps
/// keys longer: never.
fn reason(a: &Act) -> Option<&'static str> {
    match a.effect {
        Effect::Loss { .. } => Some(a.nemesis.name()),
        Effect::Clock { by_ms } if by_ms > 0 => Some("clock-forward"),
        Effect::Clock { .. } => None,
    }
}

/// Whether a fault explains guard `b` granted while guard `a` (granted
/// first) was believed, on `resource`: `Ok((reason, instance))`, or
/// `Err(why not)`. The rule, in `docs/testing.md`:
///
/// 1. No instance count can explain it when the watcher saw `a`'s key on
///    a quorum of instances after `a`'s grant, alive past `b`'s grant with
///    nothing lost there in between: `b` had no quorum free of it (a
///    reader entry counts only against a write). Asked only when `a`'s
///    client did nothing else on the resource meanwhile (`Ctx::alone`):
///    the watcher cannot tell its keys apart, and another guard's keys
///    may go with that guard's release.
/// 2. Otherwise an effect excuses it if it lost keys, or stepped a clock
///    forward, on an instance where the watcher saw `a`'s key before the
///    effect (so `a`'s grant could rest on it; a sighting is timed when
///    its read returned, `READ_SLACK`), or, seen or not, within `UNSEEN`
///    of `a`'s grant (too soon for the watcher to have read the key: the
///    benefit of the doubt, where the watcher had no chance to look), no
///    later than `b`'s grant;
/// 3. and `a` had a grant or an extension sent before the effect (the part
///    it promised may be lost); what later extensions added is not
///    excused: `a` and `b` must not be believed at once past it;
/// 4. and the instance no longer protected `a` at `b`'s grant: a rollback
///    brings back what `a` had confirmed before its snapshot, a forward
///    step only shortens `a`'s keys there by the step.
///
/// The same client's two guards (two threads) share its identity, so the
/// watcher cannot tell their keys apart: rules 1 and 2's sightings are
/// then not asked for.
fn excuse(
    ctx: &Ctx<'_>,
    resource: &str,
    a: &Belief<'_>,
    b: &Belief<'_>,
) -> Result<(&'static str, usize), String> {
    let (ca, gb) = (a.hold.client, b.granted);
    let same = ca == b.hold.client;
    if !same && ctx.alone(a.hold, resource, gb) {
        let held = ctx.holding(ca, resource, b.hold.mode, a.granted, gb);
        if held.len() >= ctx.rec.meta.quorum() {
            return Err(format!(
                "client {ca}'s key was alive on instances {held:?}, a quorum, at the second grant"
            ));
        }
    }
    let mut why = "no fault lost keys or stepped a clock forward on an instance holding \
                   the first guard's key"
        .to_string();
    for act in ctx.acts.iter().take_while(|x| x.at <= gb) {
        let Some(reason) = reason(act) else { continue };
        let (i, t) = (act.instance, act.at);
        // A's own kind of key: a read's reader entry, anything else's key.
        let read_before = ctx.sightings(ca, resource, i, a.hold.start, t + READ_SLACK);
        let own = |x: &&(f64, f64, bool)| x.2 == (a.hold.mode == Mode::Read);
        let too_soon_to_see = a.hold.start <= t && t < a.granted + UNSEEN;
        if !same && !too_soon_to_see && !read_before.iter().any(|x| own(&x)) {
            continue;
        }
        let rested = a
            .confirms
            .iter()
            .filter(|c| c.earliest < t)
            .map(|c| c.until)
            .fold(f64::NEG_INFINITY, f64::max);
        if rested == f64::NEG_INFINITY {
            continue;
        }
        let kept = match act.effect {
            Effect::Loss { since: None } => f64::NEG_INFINITY,
            Effect::Loss {
                since: Some(snapshot),
            } => a
                .confirms
                .iter()
                .filter(|c| c.seen <= snapshot)
                .map(|c| c.until)
                .fold(f64::NEG_INFINITY, f64::max),
            Effect::Clock { by_ms } => rested - by_ms as f64 / 1000.0,
        };
        if gb + ALLOWANCE < kept {
            why = format!(
                "instance {i} still held the first guard's key after the {reason} at {t:.3} s"
            );
            continue;
        }
        if a.until.min(b.until) > gb.max(rested) + ALLOWANCE {
            why = format!(
                "the first guard's belief past {rested:.3} s rests on an extension sent after \
                 the {reason} on instance {i} at {t:.3} s"
            );
            continue;
        }
        return Ok((reason, i));
    }
    Err(why)
}

/// Whether two guards of one resource may not be believed at once: one
/// holder per lock, set member, leadership or semaphore slot; on a
/// reader-writer lock, a write excludes everything, reads share.
fn conflict(a: Mode, b: Mode) -> bool {
    match (a, b) {
        (Mode::Read, Mode::Read) => false,
        (Mode::Read | Mode::Write, _) | (_, Mode::Read | Mode::Write) => {
            a == Mode::Write || b == Mode::Write
        }
        _ => true,
    }
}

/// Every pair of conflicting guards believed at once: each guard against
/// every earlier one still believed at its grant.
fn exclusion(ctx: &Ctx<'_>, resource: &str, list: &[Belief<'_>], v: &mut Verdict) {
    for (n, b) in list.iter().enumerate() {
        for a in &list[..n] {
            if !conflict(a.hold.mode, b.hold.mode) || b.granted + ALLOWANCE >= a.until {
                continue;
            }
            match ctx.unlocked(a.hold, b.hold) {
                Some(false) => v.unlock_excused += 1,
                Some(true) => v.unlock_failed_excused += 1,
                None => {}
            }
            if ctx.unlocked(a.hold, b.hold).is_some() {
                continue;
            }
            match excuse(ctx, resource, a, b) {
                Ok((reason, instance)) => {
                    v.overlaps_excused += 1;
                    v.excused_by(reason, instance);
                    *v.excused_by_workload
                        .entry(b.hold.workload.name())
                        .or_default() += 1;
                }
                Err(why) => overlap(resource, a, b, &why, v),
            }
        }
    }
}

fn overlap(resource: &str, a: &Belief<'_>, b: &Belief<'_>, why: &str, v: &mut Verdict) {
    let kind = if resource.starts_with("election:") {
        v.leader_overlaps += 1;
        "leader-overlap"
    } else if matches!(b.hold.mode, Mode::Permit { .. }) {
        v.slot_overlaps += 1;
        "slot-overlap"
    } else if matches!(b.hold.mode, Mode::Read | Mode::Write) {
        v.rw_overlaps += 1;
        "rw-overlap"
    } else {
        v.overlaps += 1;
        "overlap"
    };
    v.violations.push(Violation {
        kind,
        resource: resource.to_string(),
        first: describe(a.hold, a.token),
        second: format!("{} (not excused: {why})", describe(b.hold, b.token)),
        first_at: a.granted,
        second_at: b.granted,
    });
}

/// Reads granted while another read was believed held: what shows the
/// rw check had sharing to judge.
fn reads_shared(list: &[Belief<'_>], v: &mut Verdict) {
    for (n, b) in list.iter().enumerate() {
        let shared = list[..n]
            .iter()
            .any(|a| a.hold.mode == Mode::Read && b.granted + ALLOWANCE < a.until);
        if b.hold.mode == Mode::Read && shared {
            v.reads_shared += 1;
        }
    }
}

/// A grant whose attempt started after another grant returned has a
/// higher token: prefix maxima over the grants in grant order. Only the
/// grants `checked` says are judged, against those `earlier` says count.
fn tokens_increase(
    resource: &str,
    list: &[(&Hold, u64)],
    earlier: impl Fn(&Hold) -> bool,
    checked: impl Fn(&Hold) -> bool,
    v: &mut Verdict,
) {
    let mut best: Option<usize> = None;
    let mut next = 0;
    let mut by_start: Vec<usize> = (0..list.len()).collect();
    by_start.sort_by(|&x, &y| list[x].0.start.total_cmp(&list[y].0.start));
    for &b in &by_start {
        while next < list.len() && list[next].0.granted < list[b].0.start {
            let counts = earlier(list[next].0);
            if counts && best.is_none_or(|m| list[next].1 > list[m].1) {
                best = Some(next);
            }
            next += 1;
        }
        if !checked(list[b].0) {
            continue;
        }
        let Some(a) = best else { continue };
        if list[b].1 <= list[a].1 {
            v.token_regressions += 1;
            v.violations.push(Violation {
                kind: "token-regression",
                resource: resource.to_string(),
                first: describe(list[a].0, list[a].1),
                second: describe(list[b].0, list[b].1),
                first_at: list[a].0.granted,
                second_at: list[b].0.granted,
            });
        }
    }
}

/// No token is further ahead of the majority's clocks (the machine's
/// clock: faults move only a minority's) than a raise may take a counter
/// (`MAX_CLOCK_OFFSET`, 1 s), plus the grant's own time: what lets tokens
/// keep increasing through lost counters.
fn tokens_near_clocks(rec: &Record, resource: &str, list: &[(&Hold, u64)], v: &mut Verdict) {
    let ahead = redfence::MAX_CLOCK_OFFSET.as_secs_f64() + CLOCK_READ_SLACK;
    for (h, token) in list {
        let wall = rec.meta.epoch_wall_micros as f64 + h.granted * 1e6;
        if *token as f64 > wall + ahead * 1e6 {
            v.tokens_ahead += 1;
            if v.tokens_ahead <= 20 {
                v.violations.push(Violation {
                    kind: "token-ahead",
                    resource: resource.to_string(),
                    first: format!("the clock read {} µs at the grant", wall as u64),
                    second: describe(h, *token),
                    first_at: h.granted,
                    second_at: h.granted,
                });
            }
        }
    }
}

/// A reader-writer lock's tokens: a write's is above the token of every
/// guard, read or write, granted before its call began; a read's is above
/// every write's granted before it (what lets the store refuse a stale
/// writer after a read, and a stale reader after a write).
fn rw_tokens(resource: &str, list: &[(&Hold, u64)], v: &mut Verdict) {
    let write = |h: &Hold| h.mode == Mode::Write;
    tokens_increase(resource, list, |_| true, write, v);
    tokens_increase(resource, list, write, |h| h.mode == Mode::Read, v);
}

/// The semaphore's count: every permit's slot is one of its count, and no
/// permit is granted while the count of others is believed held. Two
/// permits on one slot are `exclusion`'s; a count passed only through
/// such pairs is excused when every one of them is, and never when the
/// permits at once are on more slots than the count.
fn permit_count(ctx: &Ctx<'_>, v: &mut Verdict) {
    let permits = ctx.rec.meta.permits;
    let mut list: Vec<(Belief<'_>, u32)> = ctx
        .rec
        .holds
        .iter()
        .filter_map(|h| match h.mode {
            Mode::Permit { slot } => {
                let token = h.tokens.first().map_or(0, |t| t.1);
                Some((ctx.revoked(Belief::of(h, token)), slot))
            }
            _ => None,
        })
        .collect();
    list.sort_by(|a, b| a.0.granted.total_cmp(&b.0.granted));
    for n in 0..list.len() {
        let (b, slot) = (&list[n].0, list[n].1);
        if slot >= permits {
            out_of_range(b, slot, permits, v);
        }
        let believed: Vec<&(Belief<'_>, u32)> = list[..n]
            .iter()
            .filter(|(a, _)| b.granted + ALLOWANCE < a.until)
            .collect();
        if believed.len() + 1 == permits as usize {
            v.permits_at_count += 1;
        }
        if believed.len() < permits as usize {
            continue;
        }
        let mut at_once: Vec<&(Belief<'_>, u32)> = believed.clone();
        at_once.push(&list[n]);
        match count_excuse(ctx, &at_once, permits) {
            Ok(fault) => {
                v.permits_over_count_excused += 1;
                if let Some((reason, instance)) = fault {
                    v.excused_by(reason, instance);
                }
            }
            Err(why) => over_count(&believed, b, &why, v),
        }
    }
}

/// Whether the permits believed at once past the count are excused: on
/// no more slots than the count (all in range), and every two on one slot
/// a pair an unlock of the first explains (`Ctx::unlocked`) or `excuse`
/// excuses (the first such fault is the reason; `None`: unlocks only).
fn count_excuse(
    ctx: &Ctx<'_>,
    at_once: &[&(Belief<'_>, u32)],
    permits: u32,
) -> Result<Option<(&'static str, usize)>, String> {
    let mut slots: Vec<u32> = at_once.iter().map(|(_, s)| *s).collect();
    slots.sort_unstable();
    slots.dedup();
    if slots.len() > permits as usize || slots.iter().any(|s| *s >= permits) {
        return Err(format!("on slots {slots:?}"));
    }
    let (mut first, mut pairs) = (None, 0);
    for (n, (b, sb)) in at_once.iter().map(|x| (&x.0, x.1)).enumerate() {
        for (a, sa) in at_once[..n].iter().map(|x| (&x.0, x.1)) {
            if sa != sb {
                continue;
            }
            pairs += 1;
            if ctx.unlocked(a.hold, b.hold).is_none() {
                let r = excuse(ctx, &slot_resource(sa), a, b)?;
                first.get_or_insert(r);
            }
        }
    }
    if pairs == 0 {
        return Err("no two on one slot".to_string());
    }
    Ok(first)
}

fn out_of_range(b: &Belief<'_>, slot: u32, permits: u32, v: &mut Verdict) {
    v.slots_out_of_range += 1;
    v.violations.push(Violation {
        kind: "slot-out-of-range",
        resource: slot_resource(slot),
        first: format!(
            "the semaphore has {permits} permits, slots 0 to {}",
            permits.saturating_sub(1)
        ),
        second: describe(b.hold, b.token),
        first_at: b.granted,
        second_at: b.granted,
    });
}

fn over_count(believed: &[&(Belief<'_>, u32)], b: &Belief<'_>, why: &str, v: &mut Verdict) {
    v.permits_over_count += 1;
    let others: Vec<String> = believed
        .iter()
        .map(|(a, _)| describe(a.hold, a.token))
        .collect();
    v.violations.push(Violation {
        kind: "permits-over-count",
        resource: crate::SEMAPHORE.to_string(),
        first: others.join("; "),
        second: format!("{} (not excused: {why})", describe(b.hold, b.token)),
        first_at: believed
            .iter()
            .map(|(a, _)| a.granted)
            .fold(f64::MAX, f64::min),
        second_at: b.granted,
    });
}

/// Each window's job ran once. Two runs of one window are excused only as
/// an overlap is: the second granted while the first's hold (its keys
/// live to the hold's end) was in force, and a fault explains it.
fn run_once(ctx: &Ctx<'_>, v: &mut Verdict) {
    let mut windows: BTreeMap<u64, Vec<&crate::record::Run>> = BTreeMap::new();
    for run in &ctx.rec.runs {
        windows.entry(run.window).or_default().push(run);
    }
    let hold = RUN_HOLD.as_secs_f64();
    for (window, mut runs) in windows {
        runs.sort_by(|a, b| a.granted.total_cmp(&b.granted));
        let beliefs: Vec<Option<Belief<'_>>> = runs.iter().map(|r| job(ctx, r, hold)).collect();
        for (n, b) in runs.iter().enumerate() {
            for (m, a) in runs[..n].iter().enumerate() {
                let judged = match (&beliefs[m], &beliefs[n]) {
                    (Some(x), Some(y)) if y.granted + ALLOWANCE < x.until => {
                        excuse(ctx, crate::RUN_JOB, x, y)
                    }
                    (Some(_), Some(_)) => Err("after the first run's hold".to_string()),
                    _ => Err("a run without its hold in the history".to_string()),
                };
                match judged {
                    Ok((reason, instance)) => {
                        v.run_once_excused += 1;
                        v.excused_by(reason, instance);
                    }
                    Err(why) => duplicate(window, a, b, &why, v),
                }
            }
        }
    }
}

/// A run's hold, as believed until the hold's end, resting on its grant.
fn job<'a>(ctx: &Ctx<'a>, run: &crate::record::Run, hold: f64) -> Option<Belief<'a>> {
    let h = ctx.rec.holds.iter().find(|h| {
        h.client == run.client
            && h.tokens
                .iter()
                .any(|(r, t)| r == crate::RUN_JOB && *t == run.token)
    })?;
    Some(Belief {
        hold: h,
        token: run.token,
        granted: run.granted,
        until: run.granted + hold,
        confirms: vec![Confirmation {
            earliest: h.start,
            seen: run.granted,
            until: run.granted + hold,
        }],
    })
}

fn duplicate(
    window: u64,
    a: &crate::record::Run,
    b: &crate::record::Run,
    why: &str,
    v: &mut Verdict,
) {
    v.run_once_duplicates += 1;
    v.violations.push(Violation {
        kind: "run-once-duplicate",
        resource: format!("{} window {window}", crate::RUN_JOB),
        first: format!(
            "client {} token {} at {:.3} s",
            a.client, a.token, a.granted
        ),
        second: format!(
            "client {} token {} at {:.3} s (not excused: {why})",
            b.client, b.token, b.granted
        ),
        first_at: a.granted,
        second_at: b.granted,
    });
}

/// A hold an operator's unlock revoked from `from` (the unlock's call)
/// to `to` (its return), or, `failed`, may have revoked in that time (a
/// failed unlock's, or another guard of the client a successful one named).
struct Revocation {
    hold: *const Hold,
    from: f64,
    to: f64,
    failed: bool,
}

impl Revocation {
    fn of(hold: &Hold, u: &Unlock, failed: bool) -> Revocation {
        Revocation {
            hold,
            from: u.start,
            to: u.end,
            failed,
        }
    }
}

/// The holds each unlock record revoked. Each speaks of the guards of
/// its resource its role covers (a lock's, one semaphore slot's, a
/// reader-writer lock's writer, a reader, or either). One that returned
/// holder `c` revoked one of `c`'s such guards (`revoked_by`). One that
/// failed may have deleted the values it read anyway (its deletes may land
/// late): every such guard granted by its return and believed at its
/// start may have been revoked.
fn revocations(rec: &Record) -> Vec<Revocation> {
    let mut out = Vec::new();
    for u in &rec.unlocks {
        let on = |h: &&Hold| u.role.covers(h.mode) && h.tokens.iter().any(|t| t.0 == u.resource);
        match u.outcome {
            UnlockOutcome::Revoked { holder } => {
                let definite = revoked_by(rec, u, holder, &out);
                // The unlock names a client, not a guard: any other guard
                // of that client believed while it ran may be the value it
                // read (a slow reading can come after the guard the rule
                // picks was released, and meet the client's next one).
                // Those pairs are excused, their beliefs not cut.
                let maybe = rec.holds.iter().filter(on).filter(|h| {
                    h.client == holder
                        && definite.is_none_or(|d| !std::ptr::eq(*h, d))
                        && h.granted <= u.end
                        && belief_end(h) > u.start
                });
                out.extend(maybe.map(|h| Revocation::of(h, u, true)));
                if let Some(h) = definite {
                    out.push(Revocation::of(h, u, false));
                }
            }
            UnlockOutcome::Failed => {
                let believed = rec
                    .holds
                    .iter()
                    .filter(on)
                    .filter(|h| h.granted <= u.end && belief_end(h) > u.start);
                out.extend(believed.map(|h| Revocation::of(h, u, true)));
            }
            UnlockOutcome::Free | UnlockOutcome::RevokedUnknown => {}
        }
    }
    out
}

/// The guard of `holder` an unlock record revoked: of those its role
/// covers on its resource, granted by the unlock's return, the earliest
/// granted still believed after its start (on a lock or a slot, a later
/// guard of the holder's other thread granted while that one was
/// believed took what the unlock freed; several readers of one client
/// named by one call are its earliest such reads, each once); else, the
/// latest granted whose keys may still have lived at its start (a guard
/// left for dead); else `holder`'s call in flight at the return (a call
/// being granted as the unlock read is revoked with it).
fn revoked_by<'a>(
    rec: &'a Record,
    u: &Unlock,
    holder: usize,
    taken: &[Revocation],
) -> Option<&'a Hold> {
    let again = |h: &Hold| {
        taken
            .iter()
            .any(|r| !r.failed && std::ptr::eq(r.hold, h) && r.from == u.start && r.to == u.end)
    };
    let mine = || {
        rec.holds.iter().filter(move |h| {
            h.client == holder
                && u.role.covers(h.mode)
                && h.tokens.iter().any(|t| t.0 == u.resource)
                && !again(h)
        })
    };
    // Live guards: believed after the unlock began.
    let believed = mine()
        .filter(|h| h.granted <= u.end && belief_end(h) > u.start)
        .min_by(|a, b| a.granted.total_cmp(&b.granted));
    let dead = || {
        mine()
            .filter(|h| h.granted <= u.end && h.end + h.key_life >= u.start)
            .max_by(|a, b| a.granted.total_cmp(&b.granted))
    };
    believed.or_else(dead).or_else(|| {
        mine()
            .filter(|h| h.start <= u.end && h.granted > u.end)
            .min_by(|a, b| a.start.total_cmp(&b.start))
    })
}

/// Counts the revoked holders that were still working (their guard alive
/// when the unlock began) and those left for dead.
fn unlocks_judged(ctx: &Ctx<'_>, v: &mut Verdict) {
    for r in ctx.revocations.iter().filter(|r| !r.failed) {
        let Some(h) = ctx.rec.holds.iter().find(|h| std::ptr::eq(*h, r.hold)) else {
            continue;
        };
        if h.releasing < r.from {
            v.unlocks_of_dead += 1;
        } else {
            v.unlocks_of_live += 1;
        }
    }
}

/// A call cancelled in flight returns within `CANCEL_BOUND` of the
/// cancel, with `Cancelled` or a guard (granted before the cancel could
/// stop it); another error only within `CANCEL_RACE` (its attempt was
/// ending as the cancel came). That a cancelled call leaves no key past
/// the TTL and its hold is the orphan check's: such calls are recorded
/// with that as their keys' life.
fn cancels(rec: &Record, v: &mut Verdict) {
    let mut late = Vec::new();
    for c in &rec.calls {
        let Some(at) = c.cancelled else { continue };
        v.cancels += 1;
        v.cancelled += u64::from(c.error == "cancelled");
        let resource = c.resources.join(",");
        if c.end > at + CANCEL_BOUND {
            late.push((
                "cancel-late",
                resource,
                c.client,
                at,
                c.end,
                c.error.clone(),
            ));
        } else if c.error != "cancelled" && c.end > at + CANCEL_RACE {
            late.push((
                "cancel-ignored",
                resource,
                c.client,
                at,
                c.end,
                c.error.clone(),
            ));
        }
    }
    for h in &rec.holds {
        let Some(at) = h.cancelled else { continue };
        v.cancels += 1;
        if h.granted > at + CANCEL_BOUND {
            let resource = h.tokens.iter().map(|t| t.0.as_str()).collect::<Vec<_>>();
            let what = "a guard".to_string();
            late.push((
                "cancel-late",
                resource.join(","),
                h.client,
                at,
                h.granted,
                what,
            ));
        }
    }
    for (kind, resource, client, at, end, what) in late {
        v.cancel_violations += 1;
        v.violations.push(Violation {
            kind,
            resource,
            first: format!("client {client}'s call was cancelled at {at:.3} s"),
            second: format!("it returned {what} at {end:.3} s"),
            first_at: at,
            second_at: end,
        });
    }
}

/// Whether `at` falls in the fault or within `after` of its end.
fn covers(f: &Fault, at: f64, after: f64) -> bool {
    f.start <= at && at <= f.end + after
}

/// A client's activity on a resource: from the lock call to the release's
/// return, and how long a key it wrote may live after (seconds).
type Span = (f64, f64, f64);

/// A lock key nobody owns: one written (its time to live says when, at
/// the latest) after its client had stopped locking the resource. Faults
/// that keep releases from arriving, or that move an instance's clock,
/// excuse keys on their instances while such keys may live.
fn orphans(rec: &Record, v: &mut Verdict) {
    let activity = activity(rec);
    let excuse = MAX_KEY_LIFE.as_secs_f64() + CLOCK_STEP_MAX + 1.0;
    for s in &rec.sightings {
        let spans = activity.get(&(s.client, s.resource.clone()));
        let earlier: Vec<&Span> = spans
            .map(|list| list.iter().filter(|(start, _, _)| *start <= s.at).collect())
            .unwrap_or_default();
        if earlier.iter().any(|(_, end, _)| s.at <= *end) {
            continue;
        }
        // The key was written no earlier than its expiry less the longest
        // TTL its writer asked for: legitimate if some activity could
        // have written it then. A hold's keys outlive its release on
        // purpose, and a late extension or hold release landing after it
        // still finds them ours and sets them again: those land up to the
        // longest delay after the activity. So does a failed call's
        // acquire held past its void key, which lives only the job's TTL
        // (shorter than that delay): the documented lock nobody owns, for
        // the TTL and the hold. (Not clamped at the sighting: a key seen
        // late in its life was still written by then.)
        let late = if s.resource == crate::RUN_JOB {
            LATE_MAX.as_secs_f64()
        } else {
            0.0
        };
        // The earliest the key can expire: its time to live was read at
        // some moment between the reading's send and its return, and a
        // loaded machine can put hundreds of milliseconds between them.
        let expiry = s.sent + s.pttl;
        let written_after = earlier
            .iter()
            .map(|(_, end, life)| (expiry - (end + life + WRITTEN_AFTER + late)).max(0.0))
            .reduce(f64::min)
            .unwrap_or(s.pttl.max(0.001));
        if written_after <= 0.0 {
            continue;
        }
        let excused = rec.faults.iter().any(|f| {
            f.nemesis.excuses_orphans()
                && f.instances.contains(&s.instance)
                && covers(f, s.at, excuse)
        });
        if excused {
            continue;
        }
        v.orphans += 1;
        if v.orphans <= 20 {
            v.violations.push(Violation {
                kind: "orphan-lock",
                resource: s.resource.clone(),
                first: format!("client {} stopped locking it (or never did)", s.client),
                second: format!(
                    "instance {} holds its key at {:.3} s, written at least {} ms after that",
                    s.instance,
                    s.at,
                    (written_after * 1000.0) as u64
                ),
                first_at: earlier.iter().map(|a| a.1).fold(0.0, f64::max),
                second_at: s.at,
            });
        }
    }
}

/// (client, resource) -> every activity: holds, failed calls, and a
/// permit call's tries of every slot before the one it got.
fn activity(rec: &Record) -> BTreeMap<(usize, String), Vec<Span>> {
    let mut activity: BTreeMap<(usize, String), Vec<Span>> = BTreeMap::new();
    for h in &rec.holds {
        for (r, _) in &h.tokens {
            activity
                .entry((h.client, r.clone()))
                .or_default()
                .push((h.start, h.end, h.key_life));
        }
        if let Mode::Permit { .. } = h.mode {
            for slot in 0..rec.meta.permits {
                activity
                    .entry((h.client, slot_resource(slot)))
                    .or_default()
                    .push((h.start, h.granted, h.key_life));
            }
        }
    }
    for c in &rec.calls {
        for r in &c.resources {
            activity
                .entry((c.client, r.clone()))
                .or_default()
                .push((c.start, c.end, c.key_life));
        }
    }
    activity
}

/// No instance holds a lock key for an attempt whose clean-up voided it:
/// the clean-up deletes the key and writes the void key in one step, and
/// the acquire refuses while the void key lives.
fn voided(rec: &Record, v: &mut Verdict) {
    for s in rec.sightings.iter().filter(|s| s.voided) {
        v.voided_grants += 1;
        if v.voided_grants <= 20 {
            v.violations.push(Violation {
                kind: "voided-grant",
                resource: s.resource.clone(),
                first: format!("client {}'s attempt was voided by its clean-up", s.client),
                second: format!(
                    "instance {} holds the lock for it at {:.3} s",
                    s.instance, s.at
                ),
                first_at: s.at,
                second_at: s.at,
            });
        }
    }
}

/// Every lock call ends within its wait (no deadlock, no hang).
fn calls_end(rec: &Record, v: &mut Verdict) {
    let mut late = Vec::new();
    for h in &rec.holds {
        if h.granted - h.start > h.wait + STUCK_AFTER_WAIT {
            let resource = h.tokens.first().map(|t| t.0.clone()).unwrap_or_default();
            late.push((resource, h.client, h.start, h.granted));
        }
    }
    for c in &rec.calls {
        if c.end - c.start > c.wait + STUCK_AFTER_WAIT {
            late.push((c.resources.join(","), c.client, c.start, c.end));
        }
    }
    for (resource, client, start, end) in late {
        v.stuck_calls += 1;
        v.violations.push(Violation {
            kind: "stuck-call",
            resource,
            first: format!("client {client} called at {start:.3} s"),
            second: format!("returned at {end:.3} s, past its wait"),
            first_at: start,
            second_at: end,
        });
    }
}
/// No lost update (each accepted write read the value the previous one
/// wrote), no stale write accepted (a resource's accepted writes have
/// strictly increasing tokens: one write per guard, one guard per token)
/// nor a stale act (a term below one already accepted); each read guard's two accepted reads saw one value,
/// that of exactly the accepted writes with lower tokens.
fn database(stored: &Stored, v: &mut Verdict) {
    let mut last: BTreeMap<&str, (i64, i64, i32)> = BTreeMap::new();
    for (resource, token, client, read) in &stored.writes {
        let before = last.get(resource.as_str()).copied();
        let (prev_read, prev_token, prev_client) = before.unwrap_or((-1, i64::MIN, -1));
        let expected = prev_read + 1;
        if *read != expected {
            v.lost_updates += 1;
            push_db(
                v,
                "lost-update",
                resource,
                (prev_token, prev_client),
                (*token, *client),
                format!("read {read}, the value was {expected}"),
            );
        }
        if *token <= prev_token {
            v.stale_writes_accepted += 1;
            push_db(
                v,
                "stale-write",
                resource,
                (prev_token, prev_client),
                (*token, *client),
                String::new(),
            );
        }
        let top = prev_token.max(*token);
        last.insert(resource, (*read, top, *client));
    }
    for (resource, counter) in &stored.counters {
        let accepted = stored.writes.iter().filter(|w| &w.0 == resource).count() as i64;
        if *counter != accepted && v.lost_updates == 0 {
            v.lost_updates += accepted.abs_diff(*counter);
            push_db(
                v,
                "lost-update",
                resource,
                (0, -1),
                (0, -1),
                format!("counter {counter}, {accepted} writes accepted"),
            );
        }
    }
    v.reads_checked = stored.reads.len() as u64;
    for (resource, token, client, first, second) in &stored.reads {
        let read = format!("read with token {token} by client {client}");
        if first != second {
            v.torn_reads += 1;
            push_read(
                v,
                "torn-read",
                resource,
                &read,
                format!("saw {first}, then {second}"),
            );
        }
        let below = stored
            .writes
            .iter()
            .filter(|w| &w.0 == resource && w.1 < *token)
            .count() as i64;
        if *first != below {
            v.stale_reads += 1;
            let note = format!("saw {first}; {below} writes with lower tokens were accepted");
            push_read(v, "stale-read", resource, &read, note);
        }
    }
    let mut top = i64::MIN;
    for (term, client) in &stored.acts {
        if *term < top {
            v.stale_writes_accepted += 1;
            push_db(
                v,
                "stale-act",
                "leader acts",
                (top, -1),
                (*term, *client),
                String::new(),
            );
        }
        top = top.max(*term);
    }
}

fn push_db(
    v: &mut Verdict,
    kind: &'static str,
    resource: &str,
    a: (i64, i32),
    b: (i64, i32),
    note: String,
) {
    if v.violations.len() >= 200 {
        return;
    }
    v.violations.push(Violation {
        kind,
        resource: resource.to_string(),
        first: format!("write with token {} by client {}", a.0, a.1),
        second: format!("write with token {} by client {} {note}", b.0, b.1),
        first_at: 0.0,
        second_at: 0.0,
    });
}

fn push_read(v: &mut Verdict, kind: &'static str, resource: &str, read: &str, note: String) {
    if v.violations.len() >= 200 {
        return;
    }
    v.violations.push(Violation {
        kind,
        resource: resource.to_string(),
        first: read.to_string(),
        second: note,
        first_at: 0.0,
        second_at: 0.0,
    });
}

#[cfg(test)]
mod tests {
    //! Synthetic histories with overlaps that appear only next to a fault:
    //! the rule this checker had before (each guard against the earlier
    //! one believed longest; any restart, rollback or clock fault between
    //! excuses) hides them, the strict rule reports them.

    use super::*;
    use crate::args::Workload;
    use crate::history::KvKind::{self, Get, GetShared, Set};
    use crate::history::{UnlockOutcome, UnlockRole};
    use crate::record::{Meta, Sighting};

    const R: &str = "reg-0";

    fn record() -> Record {
        Record {
            meta: Meta {
                instances: 5,
                clients: 4,
                permits: 2,
                epoch_wall_micros: 1_700_000_000_000_000,
                ..Meta::default()
            },
            ..Record::default()
        }
    }

    /// A guard granted at `from`, believed until `until` on one grant
    /// whose lease covers it all, its key seen on `on` just after.
    fn hold(rec: &mut Record, client: usize, mode: Mode, token: u64, from: f64, until: f64) {
        let resource = match mode {
            Mode::Permit { slot } => slot_resource(slot),
            _ => R.to_string(),
        };
        rec.holds.push(Hold {
            client,
            workload: Workload::Register,
            mode,
            tokens: vec![(resource, token)],
            start: from - 0.01,
            granted: from,
            claim_end: until,
            releasing: until,
            end: until + 0.01,
            key_life: until - from,
            wait: 2.0,
            cancelled: None,
            notes: vec![(from, until)],
        });
    }

    fn seen(rec: &mut Record, client: usize, resource: &str, on: &[usize], at: f64, pttl: f64) {
        for &instance in on {
            rec.sightings.push(Sighting {
                resource: resource.to_string(),
                instance,
                client,
                at,
                sent: at,
                pttl,
                voided: false,
                reader: false,
            });
        }
    }

    fn fault(rec: &mut Record, nemesis: Nemesis, instance: usize, at: f64, effect: Effect) {
        rec.faults.push(crate::record::Fault {
            nemesis,
            instances: vec![instance],
            start: at,
            end: at + 0.1,
            detail: String::new(),
            effects: vec![(instance, at, effect)],
        });
    }

    const RESTART: Effect = Effect::Loss { since: None };

    /// The rule before: each guard against the earlier one believed
    /// longest, excused by any restart, rollback or clock fault that came
    /// between. (overlaps, excused) on one resource.
    fn old_rule(rec: &Record, resource: &str) -> (u64, u64) {
        let mut list: Vec<&Hold> = rec
            .holds
            .iter()
            .filter(|h| h.tokens.iter().any(|t| t.0 == resource))
            .collect();
        list.sort_by(|a, b| a.granted.total_cmp(&b.granted));
        let (mut overlaps, mut excused) = (0, 0);
        let mut longest: Option<&Hold> = None;
        for hb in list {
            if let Some(ha) = longest {
                if hb.granted + ALLOWANCE < belief_end(ha) {
                    let any = rec.faults.iter().any(|f| {
                        matches!(
                            f.nemesis,
                            Nemesis::Restart | Nemesis::Rollback | Nemesis::Clock
                        ) && ha.granted <= f.end
                            && belief_end(ha) >= f.start
                            && hb.granted >= f.start
                    });
                    if any {
                        excused += 1;
                    } else {
                        overlaps += 1;
                    }
                }
            }
            if longest.is_none_or(|a| belief_end(hb) > belief_end(a)) {
                longest = Some(hb);
            }
        }
        (overlaps, excused)
    }

    /// A (0–3 s, its key on instances 0–2, instance 2 restarted at 0.5 s),
    /// B (1.0–2.5 s) and C (1.5–2.8 s).
    fn abc() -> Record {
        let mut rec = record();
        hold(&mut rec, 0, Mode::Exclusive, 1, 0.0, 3.0);
        seen(&mut rec, 0, R, &[0, 1, 2], 0.2, 2.8);
        fault(&mut rec, Nemesis::Restart, 2, 0.5, RESTART);
        hold(&mut rec, 1, Mode::Exclusive, 2, 1.0, 2.5);
        seen(&mut rec, 1, R, &[2, 3, 4], 1.1, 1.4);
        hold(&mut rec, 2, Mode::Exclusive, 3, 1.5, 2.8);
        rec
    }

    #[test]
    fn every_pair_is_judged() {
        let rec = abc();
        assert_eq!(old_rule(&rec, R), (0, 2), "the old rule hid B/C");
        let v = check(&rec);
        assert_eq!(
            (v.overlaps, v.overlaps_excused),
            (1, 2),
            "{:#?}",
            v.violations
        );
        assert!(v.violations[0].first.starts_with("client 1 "));
        assert!(v.violations[0].second.starts_with("client 2 "));
        assert_eq!(v.excused.get(&("restart", 2)), Some(&2));
        // Without A, B/C was always reported.
        let mut without = abc();
        without.holds.remove(0);
        assert_eq!(old_rule(&without, R), (1, 0));
    }

    /// A forward step as long as A's lease excuses (the control for the
    /// next test); a step back never does.
    #[test]
    fn a_clock_step_back_excuses_nothing() {
        let build = |by_ms: i64| {
            let mut rec = record();
            hold(&mut rec, 0, Mode::Exclusive, 1, 0.0, 3.0);
            seen(&mut rec, 0, R, &[0, 1, 2], 0.2, 2.8);
            fault(&mut rec, Nemesis::Clock, 2, 0.5, Effect::Clock { by_ms });
            hold(&mut rec, 1, Mode::Exclusive, 2, 1.0, 2.0);
            rec
        };
        let forward = check(&build(3000));
        assert_eq!((forward.overlaps, forward.overlaps_excused), (0, 1));
        assert_eq!(forward.excused.get(&("clock-forward", 2)), Some(&1));
        let back = build(-3000);
        assert_eq!(old_rule(&back, R), (0, 1));
        let v = check(&back);
        assert_eq!((v.overlaps, v.overlaps_excused), (1, 0));
        // A forward step too short to expire A's key before B's grant
        // does not excuse either.
        assert_eq!(check(&build(500)).overlaps, 1);
    }

    #[test]
    fn a_fault_outside_the_first_holders_quorum_excuses_nothing() {
        let mut rec = record();
        hold(&mut rec, 0, Mode::Exclusive, 1, 0.0, 3.0);
        seen(&mut rec, 0, R, &[0, 1, 2], 0.2, 2.8);
        fault(&mut rec, Nemesis::Restart, 4, 0.5, RESTART);
        hold(&mut rec, 1, Mode::Exclusive, 2, 1.0, 2.0);
        assert_eq!(old_rule(&rec, R), (0, 1));
        let v = check(&rec);
        assert_eq!((v.overlaps, v.overlaps_excused), (1, 0));
    }

    /// A sighting is timed when its read returned: one timed just after
    /// the restart was read before it.
    #[test]
    fn a_read_timed_after_the_fault_may_precede_it() {
        let mut rec = record();
        hold(&mut rec, 0, Mode::Exclusive, 1, 0.0, 3.0);
        seen(&mut rec, 0, R, &[0, 1], 0.2, 2.8);
        seen(&mut rec, 0, R, &[2], 0.501, 2.49);
        fault(&mut rec, Nemesis::Restart, 2, 0.5, RESTART);
        hold(&mut rec, 1, Mode::Exclusive, 2, 1.0, 2.0);
        let v = check(&rec);
        assert_eq!(
            (v.overlaps, v.overlaps_excused),
            (0, 1),
            "{:#?}",
            v.violations
        );
    }

    #[test]
    fn a_key_alive_on_a_quorum_excuses_nothing() {
        let mut rec = record();
        hold(&mut rec, 0, Mode::Exclusive, 1, 0.0, 3.0);
        seen(&mut rec, 0, R, &[0, 1, 2, 3], 0.2, 2.8);
        fault(&mut rec, Nemesis::Restart, 2, 0.5, RESTART);
        hold(&mut rec, 1, Mode::Exclusive, 2, 1.0, 2.0);
        let v = check(&rec);
        assert_eq!((v.overlaps, v.overlaps_excused), (1, 0));
        assert!(
            v.violations[0].second.contains("a quorum"),
            "{:?}",
            v.violations
        );
    }

    /// A granted at 0 for 1 s; instance 2 restarted at 0.5 s; A extends at
    /// 0.8 s to 2.8 s (that extension found no key on instance 2, so rests
    /// on the others); B granted at 0.7 s.
    fn extended(b_until: f64) -> Record {
        let mut rec = record();
        hold(&mut rec, 0, Mode::Exclusive, 1, 0.0, 1.0);
        let a = &mut rec.holds[0];
        a.key_life = 2.0;
        a.claim_end = 2.8;
        a.releasing = 2.8;
        a.end = 2.9;
        a.notes = vec![(0.0, 1.0), (0.8, 1.0), (0.9, 2.8)];
        seen(&mut rec, 0, R, &[0, 1, 2], 0.2, 0.8);
        fault(&mut rec, Nemesis::Restart, 2, 0.5, RESTART);
        hold(&mut rec, 1, Mode::Exclusive, 2, 0.7, b_until);
        rec
    }

    #[test]
    fn an_extension_after_the_loss_is_not_excused() {
        let rec = extended(2.0);
        assert_eq!(old_rule(&rec, R), (0, 1));
        let v = check(&rec);
        assert_eq!((v.overlaps, v.overlaps_excused), (1, 0));
        assert!(
            v.violations[0].second.contains("extension"),
            "{:?}",
            v.violations
        );
        // B gone before the extended part: what the grant promised is
        // excused.
        let v = check(&extended(0.95));
        assert_eq!((v.overlaps, v.overlaps_excused), (0, 1));
    }

    /// A granted on a bare quorum a few milliseconds before a restart of
    /// one of its instances, too soon for the watcher to have read its key
    /// there: the overlap is excused. Long after the grant, an instance the
    /// watcher never saw A's key on excuses nothing.
    #[test]
    fn a_fault_too_soon_after_the_grant_for_the_watcher_may_excuse() {
        let build = |fault_at: f64| {
            let mut rec = record();
            hold(&mut rec, 0, Mode::Exclusive, 1, 0.0, 3.0);
            seen(&mut rec, 0, R, &[0, 1], 0.6, 2.4);
            fault(&mut rec, Nemesis::Restart, 2, fault_at, RESTART);
            hold(&mut rec, 1, Mode::Exclusive, 2, 1.0, 2.5);
            rec
        };
        let v = check(&build(0.005));
        assert_eq!((v.overlaps, v.overlaps_excused), (0, 1));
        let v = check(&build(0.5));
        assert_eq!((v.overlaps, v.overlaps_excused), (1, 0));
    }

    #[test]
    fn a_rollback_excuses_only_what_its_snapshot_lost() {
        let build = |b_from: f64| {
            let mut rec = record();
            hold(&mut rec, 0, Mode::Exclusive, 1, 0.0, 3.0);
            rec.holds[0].notes = vec![(0.0, 1.5), (1.0, 3.0)];
            seen(&mut rec, 0, R, &[0, 1, 2], 0.2, 1.3);
            let since = Some(0.5);
            fault(&mut rec, Nemesis::Rollback, 2, 1.2, Effect::Loss { since });
            hold(&mut rec, 1, Mode::Exclusive, 2, b_from, 2.5);
            rec
        };
        // The snapshot had A's grant (to 1.5 s): instance 2 still refused
        // B at 1.3 s; at 1.6 s it no longer did.
        assert_eq!(check(&build(1.3)).overlaps, 1);
        let v = check(&build(1.6));
        assert_eq!((v.overlaps, v.overlaps_excused), (0, 1));
        assert_eq!(v.excused.get(&("rollback", 2)), Some(&1));
    }

    #[test]
    fn a_faulted_slot_excuses_no_other_slot() {
        let mut rec = record();
        let slot = |slot| Mode::Permit { slot };
        hold(&mut rec, 0, slot(0), 1, 0.0, 3.0);
        seen(&mut rec, 0, &slot_resource(0), &[0, 1, 2], 0.1, 2.9);
        hold(&mut rec, 2, slot(1), 1, 0.2, 3.0);
        seen(&mut rec, 2, &slot_resource(1), &[0, 1, 3], 0.3, 2.7);
        fault(&mut rec, Nemesis::Restart, 2, 0.5, RESTART);
        hold(&mut rec, 1, slot(0), 2, 1.0, 2.0);
        hold(&mut rec, 3, slot(1), 2, 1.2, 2.0);
        assert_eq!(old_rule(&rec, &slot_resource(1)), (0, 1));
        let v = check(&rec);
        assert_eq!(v.slot_overlaps, 1, "{:#?}", v.violations);
        assert_eq!(v.overlaps_excused, 1);
        assert_eq!(v.violations[0].resource, slot_resource(1));
        // The third permit at 1.0 s is excused by slot 0's restart, the
        // fourth at 1.2 s is not (slot 1's pair is not).
        assert_eq!((v.permits_over_count, v.permits_over_count_excused), (1, 1));
    }

    #[test]
    fn a_permit_on_a_third_slot_is_never_excused() {
        let mut rec = record();
        let slot = |slot| Mode::Permit { slot };
        hold(&mut rec, 0, slot(0), 1, 0.0, 3.0);
        hold(&mut rec, 1, slot(1), 1, 0.1, 3.0);
        fault(&mut rec, Nemesis::Restart, 2, 0.5, RESTART);
        hold(&mut rec, 2, slot(2), 1, 1.0, 2.0);
        let v = check(&rec);
        assert_eq!((v.slots_out_of_range, v.permits_over_count), (1, 1));
    }

    #[test]
    fn rw_judges_a_write_against_every_read() {
        let mut rec = record();
        hold(&mut rec, 0, Mode::Read, 1, 0.0, 3.0);
        seen(&mut rec, 0, R, &[0, 1, 2], 0.1, 2.9);
        rec.sightings.iter_mut().for_each(|s| s.reader = true);
        fault(&mut rec, Nemesis::Restart, 2, 0.5, RESTART);
        hold(&mut rec, 1, Mode::Read, 1, 0.6, 3.0);
        hold(&mut rec, 2, Mode::Write, 5, 1.0, 2.0);
        let v = check(&rec);
        // Write vs the first read: excused; vs the second: not.
        assert_eq!(
            (v.rw_overlaps, v.overlaps_excused),
            (1, 1),
            "{:#?}",
            v.violations
        );
        assert_eq!(v.reads_shared, 1);
    }

    /// A writer's client also has reader entries (its other thread's read
    /// attempt) on a quorum: they block writes, not a read, so they do
    /// not keep a restart from excusing a read granted during the write.
    #[test]
    fn reader_entries_do_not_block_a_read() {
        let build = |b_mode: Mode| {
            let mut rec = record();
            hold(&mut rec, 0, Mode::Write, 1, 0.0, 3.0);
            seen(&mut rec, 0, R, &[1, 2, 3], 0.2, 2.8);
            let from = rec.sightings.len();
            seen(&mut rec, 0, R, &[0, 3, 4], 0.9, 0.95);
            rec.sightings[from..]
                .iter_mut()
                .for_each(|s| s.reader = true);
            fault(&mut rec, Nemesis::Restart, 3, 0.5, RESTART);
            hold(&mut rec, 1, b_mode, 2, 1.0, 2.0);
            check(&rec)
        };
        let read = build(Mode::Read);
        assert_eq!(
            (read.rw_overlaps, read.overlaps_excused),
            (0, 1),
            "{:#?}",
            read.violations
        );
        let write = build(Mode::Write);
        assert_eq!((write.rw_overlaps, write.overlaps_excused), (1, 0));
    }

    #[test]
    fn the_stored_history_is_judged_the_same() {
        let mut rec = abc();
        rec.stored.writes.push((R.to_string(), 1, 0, 0));
        rec.stored.writes.push((R.to_string(), 1, 1, 1));
        rec.stored.counters.insert(R.to_string(), 2);
        let text = rec.to_jsonl();
        let back = Record::from_jsonl(&text).expect("reads back");
        let (a, b) = (check(&rec), check(&back));
        assert_eq!(a.violations.len(), b.violations.len());
        assert_eq!((b.overlaps, b.overlaps_excused), (1, 2));
        assert_eq!(b.stale_writes_accepted, 1, "an equal token is stale");
        assert_eq!(back.to_jsonl(), text);
    }

    fn unlock(rec: &mut Record, start: f64, end: f64, outcome: UnlockOutcome) {
        unlock_of(rec, (R, UnlockRole::Lock), start, end, outcome);
    }

    fn unlock_of(
        rec: &mut Record,
        (resource, role): (&str, UnlockRole),
        start: f64,
        end: f64,
        outcome: UnlockOutcome,
    ) {
        rec.unlocks.push(crate::record::Unlock {
            client: 3,
            resource: resource.to_string(),
            role,
            start,
            end,
            outcome,
        });
    }

    /// A (client 0) believes 0–3 s on its key on a quorum; an operator
    /// revokes it at 1.0–1.1 s; B is granted at 1.2 s, after the unlock
    /// returned: excused (A's belief ends at the return). C, granted at
    /// 0.5 s while A was believed and nothing revoked it yet, is still an
    /// overlap, and so is B against C.
    #[test]
    fn an_unlock_ends_only_the_revoked_hold() {
        let build = |outcome| {
            let mut rec = record();
            hold(&mut rec, 0, Mode::Exclusive, 1, 0.0, 3.0);
            seen(&mut rec, 0, R, &[0, 1, 2], 0.2, 2.8);
            unlock(&mut rec, 1.0, 1.1, outcome);
            hold(&mut rec, 1, Mode::Exclusive, 2, 1.2, 2.0);
            rec
        };
        let v = check(&build(UnlockOutcome::Revoked { holder: 0 }));
        assert_eq!(v.overlaps, 0, "{:#?}", v.violations);
        assert_eq!(v.unlocks_of_live, 1);
        // The same history, the unlock naming someone else or nothing:
        // the pair is judged as before, and reported.
        for other in [UnlockOutcome::Revoked { holder: 2 }, UnlockOutcome::Free] {
            assert_eq!(check(&build(other)).overlaps, 1);
        }
        let mut rec = build(UnlockOutcome::Revoked { holder: 0 });
        hold(&mut rec, 2, Mode::Exclusive, 3, 0.5, 1.5);
        let v = check(&rec);
        assert_eq!(v.overlaps, 2, "{:#?}", v.violations);
        assert!(v
            .violations
            .iter()
            .all(|x| x.second.starts_with("client 2 ") || x.second.starts_with("client 1 ")));
        assert!(v
            .violations
            .iter()
            .any(|x| x.first.starts_with("client 0 ")));
        // A grant between the unlock's start and its return may follow
        // the delete: excused, and counted.
        let mut rec = build(UnlockOutcome::Revoked { holder: 0 });
        rec.holds[1].granted = 1.05;
        let v = check(&rec);
        assert_eq!((v.overlaps, v.unlock_excused), (0, 1));
    }

    /// A slow unlock (1.0–1.6 s) names client 0, whose guard A1 was
    /// released at 1.05 s and whose next guard A2 was granted at 1.1 s:
    /// the reading may have met either, so B, granted at 1.7 s against A2,
    /// is excused. Naming another client, it is reported.
    #[test]
    fn an_unlock_naming_a_client_may_have_revoked_any_of_its_guards_meanwhile() {
        let build = |holder| {
            let mut rec = record();
            hold(&mut rec, 0, Mode::Exclusive, 1, 0.0, 1.05);
            hold(&mut rec, 0, Mode::Exclusive, 2, 1.1, 3.0);
            seen(&mut rec, 0, R, &[0, 1, 2], 1.2, 1.8);
            unlock(&mut rec, 1.0, 1.6, UnlockOutcome::Revoked { holder });
            hold(&mut rec, 1, Mode::Exclusive, 3, 1.7, 2.5);
            rec
        };
        let v = check(&build(0));
        assert_eq!(v.overlaps, 0, "{:#?}", v.violations);
        assert_eq!(v.unlock_failed_excused, 1);
        assert_eq!(check(&build(2)).overlaps, 1);
    }

    /// A dead holder (its guard gone at 0.3 s, its key alive) is the one
    /// revoked; the same client's next hold, granted after the unlock,
    /// is not capped: an overlap with it is still reported.
    #[test]
    fn an_unlock_of_a_dead_holder_spares_its_next_hold() {
        let mut rec = record();
        hold(&mut rec, 0, Mode::Exclusive, 1, 0.0, 0.3);
        rec.holds[0].key_life = 3.0;
        unlock(&mut rec, 1.0, 1.1, UnlockOutcome::Revoked { holder: 0 });
        hold(&mut rec, 0, Mode::Exclusive, 2, 1.2, 3.0);
        rec.holds[1].start = 0.9;
        hold(&mut rec, 1, Mode::Exclusive, 3, 1.5, 2.0);
        let v = check(&rec);
        assert_eq!((v.unlocks_of_dead, v.unlocks_of_live), (1, 0));
        assert_eq!(v.overlaps, 1, "{:#?}", v.violations);
    }

    /// A (client 0) holds slot 0 0–3 s, its key on a quorum; an operator's
    /// `Semaphore::force_release` revokes it at 1.0–1.1 s; B (client 1)
    /// takes slot 0 at 1.2 s: excused. C (client 2) took slot 0 at 0.5 s,
    /// before any unlock: an overlap with A, and B with C, still reported.
    /// An unlock of slot 1, or one that failed on slot 1, excuses nothing
    /// on slot 0.
    #[test]
    fn a_revoked_permit_is_excused_and_only_it() {
        let slot0 = slot_resource(0);
        let build = |resource: &str, outcome| {
            let mut rec = record();
            hold(&mut rec, 0, Mode::Permit { slot: 0 }, 1, 0.0, 3.0);
            seen(&mut rec, 0, &slot0, &[0, 1, 2], 0.2, 2.8);
            unlock_of(&mut rec, (resource, UnlockRole::Permit), 1.0, 1.1, outcome);
            hold(&mut rec, 1, Mode::Permit { slot: 0 }, 4, 1.2, 2.0);
            rec
        };
        let v = check(&build(&slot0, UnlockOutcome::Revoked { holder: 0 }));
        assert_eq!(
            (v.slot_overlaps, v.permits_over_count),
            (0, 0),
            "{:#?}",
            v.violations
        );
        assert_eq!(v.unlocks_of_live, 1);
        let slot1 = slot_resource(1);
        for (resource, outcome) in [
            (&slot1, UnlockOutcome::Revoked { holder: 0 }),
            (&slot1, UnlockOutcome::Failed),
            (&slot0, UnlockOutcome::Free),
        ] {
            assert_eq!(check(&build(resource, outcome)).slot_overlaps, 1);
        }
        // A failed unlock of slot 0 may have deleted A's value: excused.
        let v = check(&build(&slot0, UnlockOutcome::Failed));
        assert_eq!((v.slot_overlaps, v.unlock_failed_excused), (0, 1));
        let mut rec = build(&slot0, UnlockOutcome::Revoked { holder: 0 });
        hold(&mut rec, 2, Mode::Permit { slot: 0 }, 3, 0.5, 1.5);
        let v = check(&rec);
        assert_eq!(v.slot_overlaps, 2, "{:#?}", v.violations);
        assert!(v
            .violations
            .iter()
            .filter(|x| x.kind == "slot-overlap")
            .all(|x| x.second.starts_with("client 2 ") || x.first.starts_with("client 2 ")));
        // A third permit while A (revoked, its belief cut at 1.1 s) and C
        // are believed: over the count only before the unlock returned.
        assert_eq!(v.permits_over_count, 0, "{:#?}", v.violations);
    }

    /// Readers A (client 0) and A2 (client 1) 0–3 s; an operator's
    /// `RwLock::force_release` revokes A's read at 1.0–1.1 s; a write W
    /// (client 2) at 1.2 s: W with A excused, W with A2 still an
    /// rw-overlap. A writer revoked is excused against a later read; a
    /// reader record does not revoke a write.
    #[test]
    fn a_revoked_reader_or_writer_is_excused_and_only_it() {
        let mut rec = record();
        hold(&mut rec, 0, Mode::Read, 1, 0.0, 3.0);
        hold(&mut rec, 1, Mode::Read, 1, 0.2, 3.0);
        unlock_of(
            &mut rec,
            (R, UnlockRole::Reader),
            1.0,
            1.1,
            UnlockOutcome::Revoked { holder: 0 },
        );
        hold(&mut rec, 2, Mode::Write, 2, 1.2, 2.0);
        let v = check(&rec);
        assert_eq!(v.rw_overlaps, 1, "{:#?}", v.violations);
        assert!(v.violations[0].first.starts_with("client 1 "));
        assert_eq!(v.unlocks_of_live, 1);
        // The second reader revoked by the same call too: clean.
        unlock_of(
            &mut rec,
            (R, UnlockRole::Reader),
            1.0,
            1.1,
            UnlockOutcome::Revoked { holder: 1 },
        );
        assert_eq!(check(&rec).rw_overlaps, 0);

        let build = |role| {
            let mut rec = record();
            hold(&mut rec, 0, Mode::Write, 1, 0.0, 3.0);
            unlock_of(
                &mut rec,
                (R, role),
                1.0,
                1.1,
                UnlockOutcome::Revoked { holder: 0 },
            );
            hold(&mut rec, 1, Mode::Read, 2, 1.2, 2.0);
            check(&rec)
        };
        assert_eq!(build(UnlockRole::Writer).rw_overlaps, 0);
        assert_eq!(build(UnlockRole::Reader).rw_overlaps, 1);
    }

    /// Client 0's thread 1 holds slot 0 from 0 s; the unlock (1.0–1.5 s)
    /// revokes it, and its thread 2 takes slot 0 at 1.2 s, before the
    /// unlock returned: the guard revoked is the first, not the latest
    /// granted (seed 7 on Redis 7.0 showed it).
    #[test]
    fn a_grant_during_the_unlock_is_not_the_one_revoked() {
        let mut rec = record();
        let slot0 = slot_resource(0);
        hold(&mut rec, 0, Mode::Permit { slot: 0 }, 1, 0.0, 3.0);
        let revoked = UnlockOutcome::Revoked { holder: 0 };
        unlock_of(&mut rec, (&slot0, UnlockRole::Permit), 1.0, 1.5, revoked);
        hold(&mut rec, 0, Mode::Permit { slot: 0 }, 2, 1.2, 1.3);
        hold(&mut rec, 1, Mode::Permit { slot: 0 }, 3, 1.6, 2.0);
        let v = check(&rec);
        assert_eq!(v.slot_overlaps, 0, "{:#?}", v.violations);
        assert_eq!(v.unlock_excused, 1);
    }

    /// The unlock (1.0–1.5 s) began just before client 0's guard G3 was
    /// granted (1.05 s; its other guard G2 released at 0.98 s) and revoked
    /// it; its other thread's G4 took the slot at 1.3 s, while G3 was
    /// believed: G3 is the one revoked (seed 7 on Valkey 9.1 showed it).
    #[test]
    fn the_earliest_believed_guard_is_the_one_revoked() {
        let mut rec = record();
        let slot0 = slot_resource(0);
        let permit = Mode::Permit { slot: 0 };
        hold(&mut rec, 0, permit, 1, 0.0, 0.98);
        hold(&mut rec, 0, permit, 2, 1.05, 2.0);
        let revoked = UnlockOutcome::Revoked { holder: 0 };
        unlock_of(&mut rec, (&slot0, UnlockRole::Permit), 1.0, 1.5, revoked);
        hold(&mut rec, 0, permit, 3, 1.3, 2.5);
        let v = check(&rec);
        assert_eq!(v.slot_overlaps, 0, "{:#?}", v.violations);
        assert_eq!(v.unlock_excused, 1);
        // Without the unlock, G4 overlaps G3.
        rec.unlocks.clear();
        assert_eq!(check(&rec).slot_overlaps, 1);
    }

    /// Two reads of one client (its two threads): the unlock names the
    /// client once; the read it revoked is the one still believed at its
    /// start (R1), not the later one already released (R2).
    #[test]
    fn an_unlock_revokes_the_reader_still_believed() {
        let mut rec = record();
        hold(&mut rec, 0, Mode::Read, 1, 0.0, 3.0);
        hold(&mut rec, 0, Mode::Read, 1, 0.5, 0.8);
        unlock_of(
            &mut rec,
            (R, UnlockRole::Reader),
            1.0,
            1.1,
            UnlockOutcome::Revoked { holder: 0 },
        );
        hold(&mut rec, 2, Mode::Write, 2, 1.2, 2.0);
        let v = check(&rec);
        assert_eq!(v.rw_overlaps, 0, "{:#?}", v.violations);
        // Without the unlock, the write overlaps R1.
        rec.unlocks.clear();
        assert_eq!(check(&rec).rw_overlaps, 1);
    }

    fn cancelled_call(rec: &mut Record, end: f64, error: &str, at: f64) {
        rec.calls.push(crate::record::Call {
            client: 0,
            workload: Workload::Cancel,
            resources: vec![R.to_string()],
            start: 0.0,
            end,
            wait: 4.0,
            key_life: 1.0,
            error: error.to_string(),
            cancelled: Some(at),
        });
    }

    #[test]
    fn a_cancelled_call_returns_cancelled_at_once() {
        let mut rec = record();
        cancelled_call(&mut rec, 0.6, "cancelled", 0.5);
        cancelled_call(&mut rec, 0.55, "unavailable", 0.5);
        assert_eq!(check(&rec).cancel_violations, 0);
        cancelled_call(&mut rec, 2.0, "cancelled", 0.5);
        cancelled_call(&mut rec, 1.2, "contended", 0.5);
        let v = check(&rec);
        assert_eq!((v.cancels, v.cancelled, v.cancel_violations), (4, 2, 2));
        let kinds: Vec<&str> = v.violations.iter().map(|x| x.kind).collect();
        assert_eq!(kinds, ["cancel-late", "cancel-ignored"]);
    }

    fn kv(rec: &mut Record, op: KvKind, token: u64, accepted: Option<bool>, value: i64, at: f64) {
        rec.kv.push(crate::record::KvOp {
            client: 0,
            key: "kv-0".to_string(),
            token,
            op,
            start: at,
            end: at + 0.01,
            accepted,
            value,
        });
    }

    #[test]
    fn the_fenced_store_loses_no_update() {
        let clean = || {
            let mut rec = record();
            kv(&mut rec, Get, 10, Some(true), 0, 0.0);
            kv(&mut rec, Set, 10, Some(true), 1, 0.1);
            kv(&mut rec, Get, 20, Some(true), 1, 0.2);
            kv(&mut rec, Set, 9, Some(false), 1, 0.3);
            kv(&mut rec, Set, 20, Some(true), 2, 0.4);
            rec.stored.kv.insert("kv-0".to_string(), 2);
            rec
        };
        assert_eq!(check(&clean()).kv_violations, 0);
        let planted: [(&str, fn(&mut Record)); 4] = [
            ("kv-lost-update", |r| kv(r, Set, 30, Some(true), 2, 0.5)),
            ("kv-stale-read", |r| kv(r, Get, 30, Some(true), 1, 0.5)),
            ("kv-refused-wrongly", |r| {
                kv(r, Set, 40, Some(false), 3, 0.5)
            }),
            ("kv-final", |r| {
                r.stored.kv.insert("kv-0".to_string(), 5);
            }),
        ];
        for (kind, plant) in planted {
            let mut rec = clean();
            plant(&mut rec);
            let v = check(&rec);
            assert!(
                v.violations.iter().any(|x| x.kind == kind),
                "{kind}: {:#?}",
                v.violations
            );
        }
        let mut stale = clean();
        kv(&mut stale, Set, 15, Some(true), 3, 0.5);
        stale.stored.kv.insert("kv-0".to_string(), 3);
        assert!(check(&stale)
            .violations
            .iter()
            .any(|x| x.kind == "kv-stale-write"));
    }

    /// `fenced_get_shared` readers (tokens 5 and 6) share the key; a writer
    /// (7) reads and writes; a reader with token 5 is refused after it.
    #[test]
    fn shared_reads_are_judged_with_the_writers() {
        let clean = || {
            let mut rec = record();
            kv(&mut rec, GetShared, 5, Some(true), 0, 0.0);
            kv(&mut rec, GetShared, 6, Some(true), 0, 0.05);
            kv(&mut rec, Get, 7, Some(true), 0, 0.1);
            kv(&mut rec, Set, 7, Some(true), 1, 0.15);
            kv(&mut rec, GetShared, 5, Some(false), 0, 0.2);
            kv(&mut rec, GetShared, 8, Some(true), 1, 0.3);
            kv(&mut rec, Set, 7, Some(false), 2, 0.4);
            rec.stored.kv.insert("kv-0".to_string(), 1);
            rec
        };
        assert_eq!(
            check(&clean()).kv_violations,
            0,
            "{:#?}",
            check(&clean()).violations
        );
        let planted: [(&str, fn(&mut Record)); 3] = [
            // Refused while only a newer reader (6) had begun.
            ("kv-reader-refused", |r| {
                kv(r, GetShared, 4, Some(false), 0, 0.05)
            }),
            ("kv-refused-wrongly", |r| {
                kv(r, GetShared, 9, Some(false), 1, 0.5)
            }),
            ("kv-stale-read", |r| kv(r, GetShared, 9, Some(true), 0, 0.5)),
        ];
        for (kind, plant) in planted {
            let mut rec = clean();
            plant(&mut rec);
            let v = check(&rec);
            assert!(
                v.violations.iter().any(|x| x.kind == kind),
                "{kind}: {:#?}",
                v.violations
            );
        }
    }

    #[test]
    fn roles_and_shared_reads_read_back() {
        let mut rec = record();
        kv(&mut rec, GetShared, 5, Some(true), 0, 0.0);
        unlock_of(
            &mut rec,
            (R, UnlockRole::Reader),
            1.0,
            1.1,
            UnlockOutcome::Revoked { holder: 0 },
        );
        let text = rec.to_jsonl();
        let back = Record::from_jsonl(&text).expect("reads back");
        assert_eq!(back.kv[0].op, GetShared);
        assert_eq!(back.unlocks[0].role, UnlockRole::Reader);
        assert_eq!(back.to_jsonl(), text);
        // A history from before roles: a lock's unlock.
        let old = text.replace("\"role\":\"reader\",", "");
        assert_eq!(
            Record::from_jsonl(&old).expect("reads").unlocks[0].role,
            UnlockRole::Lock
        );
    }

    fn clock_check(applied: &[i64], offsets: &[Option<(i64, u64)>], doctor: &[&str]) -> Record {
        let mut rec = record();
        rec.clock_checks.push(crate::record::ClockCheck {
            client: 0,
            start: 1.0,
            end: 1.1,
            applied_ms: applied.to_vec(),
            offsets: offsets.to_vec(),
            doctor: doctor.iter().map(|s| s.to_string()).collect(),
        });
        rec
    }

    #[test]
    fn clock_offsets_match_the_step_within_their_uncertainty() {
        let steps = [0, 2000, 0, 2000, 0];
        let read = |second: i64| {
            [
                Some((300, 500)),
                Some((second, 500)),
                Some((-200, 500)),
                Some((1_999_000, 500)),
                None,
            ]
        };
        let v = check(&clock_check(&steps, &read(2_000_400), &[]));
        assert_eq!(
            (v.clock_checks, v.clock_checks_stepped, v.clock_violations),
            (1, 1, 0)
        );
        // 1 s off: past 500 µs and the slack.
        let v = check(&clock_check(&steps, &read(1_000_000), &[]));
        assert_eq!(v.clock_violations, 1, "{:#?}", v.violations);
        assert_eq!(v.violations[0].resource, "instance 1");
    }

    #[test]
    fn the_doctor_flags_a_step_past_the_bound_and_only_that() {
        let applied = [0, -3000, 0, 0, 900];
        let good = ["notice", "error", "notice", "none", "notice"];
        assert_eq!(
            check(&clock_check(&applied, &[], &good)).clock_violations,
            0
        );
        let missed = ["notice", "notice", "notice", "none", "notice"];
        assert_eq!(
            check(&clock_check(&applied, &[], &missed)).clock_violations,
            1
        );
        let false_alarm = ["notice", "warning", "notice", "none", "error"];
        assert_eq!(
            check(&clock_check(&applied, &[], &false_alarm)).clock_violations,
            1
        );
    }

    /// A run-once call that failed at 1.0 s, whose acquire was held by a
    /// late fault and landed after its void key (0.5 s) had gone: its key
    /// lives the TTL and the hold from there, and is seen late in its life
    /// (seed 7 reported it). A key written well past the longest delay is
    /// still an orphan.
    #[test]
    fn a_late_acquire_of_a_failed_job_call_is_no_orphan() {
        let build = |pttl: f64| {
            let mut rec = record();
            rec.calls.push(crate::record::Call {
                client: 0,
                workload: Workload::RunOnce,
                resources: vec![crate::RUN_JOB.to_string()],
                start: 0.85,
                end: 1.0,
                wait: 0.0,
                key_life: 2.017,
                error: "unavailable".to_string(),
                cancelled: None,
            });
            seen(&mut rec, 0, crate::RUN_JOB, &[2], 3.3, pttl);
            check(&rec).orphans
        };
        assert_eq!(build(0.4), 0, "written at 1.68 s: the acquire landing late");
        assert_eq!(build(1.5), 1, "written at 2.78 s: nobody's");
    }

    /// A reading that took long to return (a loaded machine: 36 ms and
    /// more were seen) read its time to live when it was sent, or a little
    /// after: the key's expiry is counted from the send. Counted from the
    /// return, the same key looked written after its client had stopped.
    #[test]
    fn a_slow_reading_counts_the_expiry_from_its_send() {
        let build = |sent: f64| {
            let mut rec = record();
            rec.calls.push(crate::record::Call {
                client: 0,
                workload: Workload::Register,
                resources: vec!["r".to_string()],
                start: 0.5,
                end: 1.0,
                wait: 1.0,
                key_life: 1.0,
                error: "contended".to_string(),
                cancelled: None,
            });
            seen(&mut rec, 0, "r", &[2], 1.5, 0.8);
            rec.sightings.last_mut().expect("one sighting").sent = sent;
            check(&rec).orphans
        };
        assert_eq!(build(1.3), 0, "expiry at least 2.10 s: written from 1.10 s");
        assert_eq!(
            build(1.5),
            1,
            "expiry 2.30 s: written from 1.30 s, past the call"
        );
    }

    #[test]
    fn a_malformed_history_is_an_error() {
        let text = abc().to_jsonl();
        assert!(Record::from_jsonl("").is_err());
        assert!(Record::from_jsonl("{\"type\":\"hold\"}").is_err());
        let cut = &text[..text.len() / 2];
        let err = Record::from_jsonl(cut).expect_err("half a line");
        assert!(err.starts_with("line "), "{err}");
        let wrong = text.replacen("\"granted\":1.0", "\"granted\":\"soon\"", 1);
        assert!(Record::from_jsonl(&wrong).is_err());
    }
}
