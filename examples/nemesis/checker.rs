//! Judges the history, not the code: what the holders believed, the
//! tokens they were given, what the database accepted, what the instances
//! held. Each check is a guarantee from the README; each violation names
//! the resource, the two events and their times.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::history::{FaultRecord, History, Hold, Mode};
use crate::nemesis::LATE_MAX;
use crate::{slot_resource, MAX_KEY_LIFE, PERMITS, RUN_HOLD};

/// How far two holders' beliefs may touch before it counts: the claims
/// are read a few microseconds after the library computed them.
const ALLOWANCE: Duration = Duration::from_millis(2);
/// How long after its wait a lock call may still return: the attempt in
/// flight at the deadline, its raise round and its clean-up.
const STUCK_AFTER_WAIT: Duration = Duration::from_secs(2);
/// How long after a client stopped locking a resource a key it wrote may
/// still have been written: the watcher's own delay.
const WRITTEN_AFTER: Duration = Duration::from_millis(150);
/// Slack for reading the clock, beyond a raise's bound
/// (`redfence::MAX_CLOCK_OFFSET`), in how far a token may be ahead.
const CLOCK_READ_SLACK: Duration = Duration::from_millis(100);
/// The longest a clock fault moves a clock: keys there live that much
/// longer.
const CLOCK_STEP_MAX: Duration = Duration::from_secs(5);

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
    pub overlaps: u64,
    pub overlaps_excused: u64,
    pub leader_overlaps: u64,
    /// Two permits on one slot at once.
    pub slot_overlaps: u64,
    /// A permit on a slot the semaphore does not have.
    pub slots_out_of_range: u64,
    /// More permits at once than the semaphore's count.
    pub permits_over_count: u64,
    pub permits_over_count_excused: u64,
    /// `overlaps_excused` by workload (the later guard's).
    pub excused_by_workload: BTreeMap<&'static str, u64>,
    /// A write at once with another read or write of the reader-writer
    /// lock.
    pub rw_overlaps: u64,
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
    pub violations: Vec<Violation>,
}

impl Verdict {
    pub fn failed(&self) -> bool {
        !self.violations.is_empty()
    }

    /// Counts an overlap that a fault excuses, `later` the second guard.
    fn excuse(&mut self, later: &Hold) {
        self.overlaps_excused += 1;
        *self
            .excused_by_workload
            .entry(later.workload.name())
            .or_default() += 1;
    }
}

/// What the database holds at the end: each register's counter and its
/// accepted writes in commit order, and the accepted acts.
pub struct Stored {
    pub counters: BTreeMap<String, i64>,
    /// (resource, token, client, value read), in commit order.
    pub writes: Vec<(String, i64, i32, i64)>,
    /// (term, client), in commit order.
    pub acts: Vec<(i64, i32)>,
    /// (resource, token, client, first value, second value) of each read
    /// guard whose two reads were accepted, in commit order.
    pub reads: Vec<(String, i64, i32, i64, i64)>,
}

pub fn check(history: &History, stored: &Stored) -> Verdict {
    let mut v = Verdict::default();
    let holds = history.holds.lock().clone();
    let faults = history.faults.lock().clone();
    for (resource, list) in by_resource(&holds) {
        tokens_near_clocks(history, &resource, &list, &mut v);
        if list
            .iter()
            .any(|(h, _)| matches!(h.mode, Mode::Read | Mode::Write))
        {
            rw_tokens(history, &resource, &list, &mut v);
            rw_exclusion(history, &resource, &list, &faults, &mut v);
        } else {
            // Locks, sets, leaderships, and each slot of the semaphore.
            tokens_increase(history, &resource, &list, |_| true, |_| true, &mut v);
            one_holder(history, &resource, &list, &faults, &mut v);
        }
    }
    permit_count(history, &holds, &faults, &mut v);
    run_once(history, &faults, &mut v);
    orphans(history, &holds, &faults, &mut v);
    voided(history, &mut v);
    calls_end(history, &holds, &mut v);
    database(stored, &mut v);
    v
}

/// Each resource's holds with its token, by grant time.
fn by_resource(holds: &[Hold]) -> BTreeMap<String, Vec<(Hold, u64)>> {
    let mut map: BTreeMap<String, Vec<(Hold, u64)>> = BTreeMap::new();
    for h in holds {
        for (resource, token) in &h.tokens {
            map.entry(resource.clone())
                .or_default()
                .push((h.clone(), *token));
        }
    }
    for list in map.values_mut() {
        list.sort_by_key(|(h, _)| h.granted);
    }
    map
}

fn describe(history: &History, h: &Hold, token: u64) -> String {
    let what = match h.mode {
        Mode::Exclusive => h.workload.name().to_string(),
        Mode::Permit { slot } => format!("permit on slot {slot}"),
        Mode::Read => "read".to_string(),
        Mode::Write => "write".to_string(),
    };
    format!(
        "client {} ({what}) token {token}, asked at {:.3} s, granted at {:.3} s, believed until {:.3} s",
        h.client,
        history.secs(h.start),
        history.secs(h.granted),
        history.secs(belief_end(h)),
    )
}

/// Until when the holder believed it held: its last claim, cut at the
/// moment it began to release (the keys go while the release waits for
/// the slower instances).
fn belief_end(h: &Hold) -> Instant {
    h.claim_end.min(h.releasing)
}

/// A grant whose attempt started after another grant returned has a
/// higher token: prefix maxima over the grants in grant order. Only the
/// grants `checked` says are judged, against those `earlier` says count.
fn tokens_increase(
    history: &History,
    resource: &str,
    list: &[(Hold, u64)],
    earlier: impl Fn(&Hold) -> bool,
    checked: impl Fn(&Hold) -> bool,
    v: &mut Verdict,
) {
    let mut best: Option<usize> = None;
    let mut next = 0;
    let mut by_start: Vec<usize> = (0..list.len()).collect();
    by_start.sort_by_key(|&i| list[i].0.start);
    for &b in &by_start {
        while next < list.len() && list[next].0.granted < list[b].0.start {
            let counts = earlier(&list[next].0);
            if counts && best.is_none_or(|m| list[next].1 > list[m].1) {
                best = Some(next);
            }
            next += 1;
        }
        if !checked(&list[b].0) {
            continue;
        }
        let Some(a) = best else { continue };
        if list[b].1 <= list[a].1 {
            v.token_regressions += 1;
            v.violations.push(Violation {
                kind: "token-regression",
                resource: resource.to_string(),
                first: describe(history, &list[a].0, list[a].1),
                second: describe(history, &list[b].0, list[b].1),
                first_at: history.secs(list[a].0.granted),
                second_at: history.secs(list[b].0.granted),
            });
        }
    }
}

/// No token is further ahead of the majority's clocks (the machine's
/// clock: faults move only a minority's) than a raise may take a counter
/// (`MAX_CLOCK_OFFSET`, 1 s), plus the grant's own time: what lets tokens
/// keep increasing through lost counters.
fn tokens_near_clocks(history: &History, resource: &str, list: &[(Hold, u64)], v: &mut Verdict) {
    for (h, token) in list {
        let ahead = redfence::MAX_CLOCK_OFFSET + CLOCK_READ_SLACK;
        let bound = history.wall_micros(h.granted) + ahead.as_micros() as u64;
        if *token > bound {
            v.tokens_ahead += 1;
            if v.tokens_ahead <= 20 {
                v.violations.push(Violation {
                    kind: "token-ahead",
                    resource: resource.to_string(),
                    first: format!(
                        "the clock read {} µs at the grant",
                        history.wall_micros(h.granted)
                    ),
                    second: describe(history, h, *token),
                    first_at: history.secs(h.granted),
                    second_at: history.secs(h.granted),
                });
            }
        }
    }
}

/// No two holders believe they hold at once.
fn one_holder(
    history: &History,
    resource: &str,
    list: &[(Hold, u64)],
    faults: &[FaultRecord],
    v: &mut Verdict,
) {
    let mut longest: Option<usize> = None;
    for b in 0..list.len() {
        if let Some(a) = longest {
            let (ha, hb) = (&list[a].0, &list[b].0);
            if hb.granted + ALLOWANCE < belief_end(ha) {
                let excused = excused_pair(faults, ha.granted, belief_end(ha), hb.granted);
                if excused {
                    v.excuse(hb);
                } else {
                    let leader = resource.starts_with("election:");
                    let slot = matches!(hb.mode, Mode::Permit { .. });
                    let kind = if leader {
                        v.leader_overlaps += 1;
                        "leader-overlap"
                    } else if slot {
                        v.slot_overlaps += 1;
                        "slot-overlap"
                    } else {
                        v.overlaps += 1;
                        "overlap"
                    };
                    v.violations.push(Violation {
                        kind,
                        resource: resource.to_string(),
                        first: describe(history, ha, list[a].1),
                        second: describe(history, hb, list[b].1),
                        first_at: history.secs(ha.granted),
                        second_at: history.secs(hb.granted),
                    });
                }
            }
        }
        if longest.is_none_or(|a| belief_end(&list[b].0) > belief_end(&list[a].0)) {
            longest = Some(b);
        }
    }
}

/// A reader-writer lock's tokens: a write's is above the token of every
/// guard, read or write, granted before its call began; a read's is above
/// every write's granted before it (what lets the store refuse a stale
/// writer after a read, and a stale reader after a write).
fn rw_tokens(history: &History, resource: &str, list: &[(Hold, u64)], v: &mut Verdict) {
    let write = |h: &Hold| h.mode == Mode::Write;
    tokens_increase(history, resource, list, |_| true, write, v);
    tokens_increase(history, resource, list, write, |h| h.mode == Mode::Read, v);
}

/// No write believes it holds while another guard, read or write, does:
/// each write against the earlier guard believed longest, each read
/// against the earlier write believed longest.
fn rw_exclusion(
    history: &History,
    resource: &str,
    list: &[(Hold, u64)],
    faults: &[FaultRecord],
    v: &mut Verdict,
) {
    let mut longest_any: Option<usize> = None;
    let mut longest_write: Option<usize> = None;
    let mut longest_read: Option<usize> = None;
    let later = |b: usize, a: Option<usize>| {
        a.is_none_or(|a| belief_end(&list[b].0) > belief_end(&list[a].0))
    };
    for b in 0..list.len() {
        let hb = &list[b].0;
        let against = if hb.mode == Mode::Write {
            longest_any
        } else {
            longest_write
        };
        if let (Mode::Read, Some(a)) = (hb.mode, longest_read) {
            if hb.granted + ALLOWANCE < belief_end(&list[a].0) {
                v.reads_shared += 1;
            }
        }
        if let Some(a) = against {
            let ha = &list[a].0;
            if hb.granted + ALLOWANCE < belief_end(ha) {
                if excused_pair(faults, ha.granted, belief_end(ha), hb.granted) {
                    v.excuse(hb);
                } else {
                    v.rw_overlaps += 1;
                    v.violations.push(Violation {
                        kind: "rw-overlap",
                        resource: resource.to_string(),
                        first: describe(history, ha, list[a].1),
                        second: describe(history, hb, list[b].1),
                        first_at: history.secs(ha.granted),
                        second_at: history.secs(hb.granted),
                    });
                }
            }
        }
        if later(b, longest_any) {
            longest_any = Some(b);
        }
        if hb.mode == Mode::Write && later(b, longest_write) {
            longest_write = Some(b);
        }
        if hb.mode == Mode::Read && later(b, longest_read) {
            longest_read = Some(b);
        }
    }
}

/// The semaphore's count: every permit's slot is one of its `PERMITS`,
/// and no permit is granted while `PERMITS` others are believed held
/// (unless a fault that excuses overlaps came between it and one of them).
/// Two on one slot are `one_holder`'s.
fn permit_count(history: &History, holds: &[Hold], faults: &[FaultRecord], v: &mut Verdict) {
    let mut list: Vec<(&Hold, u32)> = holds
        .iter()
        .filter_map(|h| match h.mode {
            Mode::Permit { slot } => Some((h, slot)),
            _ => None,
        })
        .collect();
    list.sort_by_key(|(h, _)| h.granted);
    let token = |h: &Hold| h.tokens.first().map_or(0, |t| t.1);
    let mut believed: Vec<&Hold> = Vec::new();
    for (hb, slot) in list {
        if slot >= PERMITS {
            v.slots_out_of_range += 1;
            v.violations.push(Violation {
                kind: "slot-out-of-range",
                resource: slot_resource(slot),
                first: format!(
                    "the semaphore has {PERMITS} permits, slots 0 to {}",
                    PERMITS - 1
                ),
                second: describe(history, hb, token(hb)),
                first_at: history.secs(hb.granted),
                second_at: history.secs(hb.granted),
            });
        }
        believed.retain(|ha| hb.granted + ALLOWANCE < belief_end(ha));
        if believed.len() + 1 == PERMITS as usize {
            v.permits_at_count += 1;
        }
        if believed.len() >= PERMITS as usize {
            let excused = believed
                .iter()
                .any(|ha| excused_pair(faults, ha.granted, belief_end(ha), hb.granted));
            if excused {
                v.permits_over_count_excused += 1;
            } else {
                v.permits_over_count += 1;
                let others: Vec<String> = believed
                    .iter()
                    .map(|ha| describe(history, ha, token(ha)))
                    .collect();
                v.violations.push(Violation {
                    kind: "permits-over-count",
                    resource: crate::SEMAPHORE.to_string(),
                    first: others.join("; "),
                    second: describe(history, hb, token(hb)),
                    first_at: believed
                        .iter()
                        .map(|ha| history.secs(ha.granted))
                        .fold(f64::MAX, f64::min),
                    second_at: history.secs(hb.granted),
                });
            }
        }
        believed.push(hb);
    }
}

/// Whether a fault that the guarantees do not cover for exclusion (see
/// `Nemesis::excuses_overlaps`) came between two grants: the first was
/// granted before it ended and still held when it began, the second
/// granted after it began. Its keys may have gone with the instance's data
/// or clock.
fn excused_pair(
    faults: &[FaultRecord],
    first: Instant,
    first_until: Instant,
    second: Instant,
) -> bool {
    faults.iter().any(|f| {
        f.nemesis.excuses_overlaps()
            && first <= f.end
            && first_until >= f.start
            && second >= f.start
    })
}

/// Whether `at` falls in the fault or within `after` of its end.
fn covers(f: &FaultRecord, at: Instant, after: Duration) -> bool {
    f.start <= at && at <= f.end + after
}

/// Each window's job ran once.
fn run_once(history: &History, faults: &[FaultRecord], v: &mut Verdict) {
    let mut windows: BTreeMap<u64, Vec<_>> = BTreeMap::new();
    for run in history.runs.lock().iter() {
        windows.entry(run.window).or_default().push(run.clone());
    }
    for (window, runs) in windows {
        for pair in runs.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let excused = excused_pair(faults, a.granted, a.granted + RUN_HOLD, b.granted);
            if excused {
                v.run_once_excused += 1;
                continue;
            }
            v.run_once_duplicates += 1;
            v.violations.push(Violation {
                kind: "run-once-duplicate",
                resource: format!("{} window {window}", crate::RUN_JOB),
                first: format!(
                    "client {} token {} at {:.3} s",
                    a.client,
                    a.token,
                    history.secs(a.granted)
                ),
                second: format!(
                    "client {} token {} at {:.3} s",
                    b.client,
                    b.token,
                    history.secs(b.granted)
                ),
                first_at: history.secs(a.granted),
                second_at: history.secs(b.granted),
            });
        }
    }
}

/// A client's activity on a resource: from the lock call to the release's
/// return, and how long a key it wrote may live after.
type Span = (Instant, Instant, Duration);

/// A lock key nobody owns: one written (its time to live says when, at
/// the latest) after its client had stopped locking the resource. Faults
/// that keep releases from arriving, or that move an instance's clock,
/// excuse keys on their instances while such keys may live.
fn orphans(history: &History, holds: &[Hold], faults: &[FaultRecord], v: &mut Verdict) {
    let calls = history.calls.lock().clone();
    // (client, resource) -> (start, end, key life) of every activity.
    let mut activity: BTreeMap<(usize, String), Vec<Span>> = BTreeMap::new();
    for h in holds {
        for (r, _) in &h.tokens {
            activity
                .entry((h.client, r.clone()))
                .or_default()
                .push((h.start, h.end, h.key_life));
        }
        // A permit's call may try every slot before the one it got.
        if let Mode::Permit { .. } = h.mode {
            for slot in 0..PERMITS {
                activity
                    .entry((h.client, slot_resource(slot)))
                    .or_default()
                    .push((h.start, h.granted, h.key_life));
            }
        }
    }
    for c in &calls {
        for r in &c.resources {
            activity
                .entry((c.client, r.clone()))
                .or_default()
                .push((c.start, c.end, c.key_life));
        }
    }
    let excuse = MAX_KEY_LIFE + CLOCK_STEP_MAX + Duration::from_secs(1);
    for s in history.sightings.lock().iter() {
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
        // longest delay after the activity.
        let late = if s.resource == crate::RUN_JOB {
            LATE_MAX
        } else {
            Duration::ZERO
        };
        let expiry = (s.at + s.pttl).checked_sub(late).unwrap_or(s.at);
        let written_after = earlier
            .iter()
            .map(|(_, end, life)| expiry.saturating_duration_since(*end + *life + WRITTEN_AFTER))
            .min()
            .or(Some(s.pttl.max(Duration::from_millis(1))));
        let Some(late_by) = written_after.filter(|d| !d.is_zero()) else {
            continue;
        };
        let excused = faults.iter().any(|f| {
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
                    history.secs(s.at),
                    late_by.as_millis()
                ),
                first_at: earlier
                    .iter()
                    .map(|a| history.secs(a.1))
                    .fold(0.0, f64::max),
                second_at: history.secs(s.at),
            });
        }
    }
}

/// No instance holds a lock key for an attempt whose clean-up voided it:
/// the clean-up deletes the key and writes the void key in one step, and
/// the acquire refuses while the void key lives.
fn voided(history: &History, v: &mut Verdict) {
    for s in history.sightings.lock().iter().filter(|s| s.voided) {
        v.voided_grants += 1;
        if v.voided_grants <= 20 {
            v.violations.push(Violation {
                kind: "voided-grant",
                resource: s.resource.clone(),
                first: format!("client {}'s attempt was voided by its clean-up", s.client),
                second: format!(
                    "instance {} holds the lock for it at {:.3} s",
                    s.instance,
                    history.secs(s.at)
                ),
                first_at: history.secs(s.at),
                second_at: history.secs(s.at),
            });
        }
    }
}

/// Every lock call ends within its wait (no deadlock, no hang).
fn calls_end(history: &History, holds: &[Hold], v: &mut Verdict) {
    let mut late = Vec::new();
    for h in holds {
        if h.granted.duration_since(h.start) > h.wait + STUCK_AFTER_WAIT {
            late.push((
                h.tokens.first().map(|t| t.0.clone()).unwrap_or_default(),
                h.client,
                h.start,
                h.granted,
            ));
        }
    }
    for c in history.calls.lock().iter() {
        if c.end.duration_since(c.start) > c.wait + STUCK_AFTER_WAIT {
            late.push((c.resources.join(","), c.client, c.start, c.end));
        }
    }
    for (resource, client, start, end) in late {
        v.stuck_calls += 1;
        v.violations.push(Violation {
            kind: "stuck-call",
            resource,
            first: format!("client {client} called at {:.3} s", history.secs(start)),
            second: format!("returned at {:.3} s, past its wait", history.secs(end)),
            first_at: history.secs(start),
            second_at: history.secs(end),
        });
    }
}

/// No lost update (each accepted write read the value the previous one
/// wrote), no stale write or act accepted (a token below one the database
/// already accepted); each read guard's two accepted reads saw one value,
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
        if *token < prev_token {
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
