//! The checks of the operations around locks (`ops.rs`): the fenced
//! storage server's history, and the clock readings against the clock
//! faults. The exact rules are in `docs/testing.md` ("The operations
//! around locks"); `.ci/judge.py` judges the same rules, written apart.

use std::collections::BTreeMap;

use crate::checker::{Verdict, Violation};
use crate::history::KvKind;
use crate::record::{ClockCheck, KvOp, Record};

/// Per key of the storage server, with `fenced_get` (read-modify-write),
/// `fenced_set`, and `fenced_get_shared` (a reader-writer lock's readers;
/// its writers use the other two):
///
/// 1. the accepted writes wrote 1, 2, ... in turn, each once (a value
///    written twice: two writers computed it from one read, a lost update;
///    with writes whose answer was lost, values may be missing), and
///    their tokens rise strictly in that order (one write per guard: a
///    lower or equal token accepted after a higher one is stale);
/// 2. an accepted read (`fenced_get` or `fenced_get_shared`) with token
///    `t` saw the number of accepted writes with tokens below `t` (none
///    above can have come first, none below after);
/// 3. a refused `fenced_get` or `fenced_set` with token `t` comes after an
///    accepted operation of any kind with a higher token began; a refused
///    `fenced_get_shared` after an accepted `fenced_get` or `fenced_set`
///    (a writer's) with a higher token began: readers never refuse each
///    other (`kv-reader-refused` when only a newer reader came first,
///    `kv-refused-wrongly` when nothing newer did);
/// 4. the key's final value is the last accepted write's (0 without).
pub fn kv(rec: &Record, v: &mut Verdict) {
    let mut keys: BTreeMap<&str, Vec<&KvOp>> = BTreeMap::new();
    for op in &rec.kv {
        keys.entry(op.key.as_str()).or_default().push(op);
    }
    v.kv_ops = rec.kv.len() as u64;
    for (key, ops) in keys {
        let mut found = Vec::new();
        kv_writes(&ops, &mut found);
        kv_reads(&ops, &mut found);
        kv_refusals(&ops, &mut found);
        kv_final(rec, key, &ops, &mut found);
        for (kind, first, second, at) in found {
            v.kv_violations += 1;
            if v.violations.len() < 200 {
                v.violations.push(Violation {
                    kind,
                    resource: key.to_string(),
                    first,
                    second,
                    first_at: at,
                    second_at: at,
                });
            }
        }
    }
}

type Found = Vec<(&'static str, String, String, f64)>;

fn describe(op: &KvOp) -> String {
    let verb = match op.op {
        KvKind::Set => "wrote",
        KvKind::Get => "read",
        KvKind::GetShared => "read (shared)",
    };
    format!(
        "client {} {verb} {} with token {} at {:.3} s",
        op.client, op.value, op.token, op.start
    )
}

/// The accepted writes, by the value written (their order on the key).
fn accepted_writes<'a>(ops: &[&'a KvOp]) -> Vec<&'a KvOp> {
    let mut writes: Vec<&KvOp> = ops
        .iter()
        .copied()
        .filter(|o| o.op == KvKind::Set && o.accepted == Some(true))
        .collect();
    writes.sort_by_key(|o| o.value);
    writes
}

fn unknown_writes(ops: &[&KvOp]) -> usize {
    ops.iter()
        .filter(|o| o.op == KvKind::Set && o.accepted.is_none())
        .count()
}

fn kv_writes(ops: &[&KvOp], found: &mut Found) {
    let writes = accepted_writes(ops);
    let gaps_allowed = unknown_writes(ops) as i64;
    let mut expected = 1;
    for pair in writes.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.value == b.value {
            found.push(("kv-lost-update", describe(a), describe(b), b.start));
        } else if b.token <= a.token {
            found.push(("kv-stale-write", describe(a), describe(b), b.start));
        }
    }
    for w in &writes {
        if w.value < expected || w.value > expected + gaps_allowed {
            let note = format!("the write before it wrote {}", expected - 1);
            found.push(("kv-lost-update", note, describe(w), w.start));
        }
        expected = w.value + 1;
    }
}

fn kv_reads(ops: &[&KvOp], found: &mut Found) {
    let writes = accepted_writes(ops);
    let unknown: Vec<u64> = ops
        .iter()
        .filter(|o| o.op == KvKind::Set && o.accepted.is_none())
        .map(|o| o.token)
        .collect();
    for r in ops
        .iter()
        .filter(|o| o.op != KvKind::Set && o.accepted == Some(true))
    {
        let below = writes.iter().filter(|w| w.token < r.token).count() as i64;
        let maybe = unknown.iter().filter(|t| **t < r.token).count() as i64;
        if r.value < below || r.value > below + maybe {
            let note = format!("{below} accepted writes had lower tokens");
            found.push(("kv-stale-read", note, describe(r), r.start));
        }
    }
}

fn kv_refusals(ops: &[&KvOp], found: &mut Found) {
    for r in ops.iter().filter(|o| o.accepted == Some(false)) {
        let newer = |kinds: &[KvKind]| {
            ops.iter().any(|o| {
                o.accepted == Some(true)
                    && kinds.contains(&o.op)
                    && o.token > r.token
                    && o.start <= r.end
            })
        };
        // A reader is refused only by a writer; a writer by anyone.
        let refusers: &[KvKind] = match r.op {
            KvKind::GetShared => &[KvKind::Get, KvKind::Set],
            _ => &KvKind::ALL,
        };
        if newer(refusers) {
            continue;
        }
        if r.op == KvKind::GetShared && newer(&[KvKind::GetShared]) {
            let note = "only readers with newer tokens began before it".to_string();
            found.push(("kv-reader-refused", note, describe(r), r.start));
        } else {
            let note = "no operation with a newer token that may refuse it began before it";
            found.push(("kv-refused-wrongly", note.to_string(), describe(r), r.start));
        }
    }
}

fn kv_final(rec: &Record, key: &str, ops: &[&KvOp], found: &mut Found) {
    let Some(&value) = rec.stored.kv.get(key) else {
        return;
    };
    let last = accepted_writes(ops).last().map_or(0, |w| w.value);
    let unknown = ops
        .iter()
        .any(|o| o.op == KvKind::Set && o.accepted.is_none() && o.value == value);
    if value != last && !unknown {
        let note = format!("the last accepted write wrote {last}");
        found.push(("kv-final", note, format!("the key holds {value}"), 0.0));
    }
}

/// Each clock check made while every instance's clock offset was known:
///
/// - `clock_offsets()`: each answering instance's offset is its applied
///   offset less the lower median of the answering instances' (the
///   library's reference), within its uncertainty plus `CLOCK_SLACK`;
/// - `doctor()`: an instance whose offset so computed (over the
///   instances with a clock finding) is past `MAX_CLOCK_OFFSET` by more
///   than `CLOCK_SLACK` has a `clock` finding of warning or error; one
///   short of it by more than `CLOCK_SLACK` has no error.
pub fn clocks(rec: &Record, v: &mut Verdict) {
    for c in &rec.clock_checks {
        v.clock_checks += 1;
        if c.applied_ms.iter().any(|ms| *ms != 0) {
            v.clock_checks_stepped += 1;
        }
        let mut found = Vec::new();
        offsets_match(c, &mut found);
        doctor_flags(c, &mut found);
        for (instance, first, second) in found {
            v.clock_violations += 1;
            if v.violations.len() < 200 {
                v.violations.push(Violation {
                    kind: "clock-check",
                    resource: format!("instance {instance}"),
                    first,
                    second,
                    first_at: c.start,
                    second_at: c.end,
                });
            }
        }
    }
}

/// The lower median of the applied offsets of the instances `known` says
/// answered, in milliseconds.
fn reference(applied: &[i64], known: impl Fn(usize) -> bool) -> Option<i64> {
    let mut list: Vec<i64> = (0..applied.len())
        .filter(|&i| known(i))
        .map(|i| applied[i])
        .collect();
    list.sort_unstable();
    list.get(list.len().checked_sub(1)? / 2).copied()
}

fn offsets_match(c: &ClockCheck, found: &mut Vec<(usize, String, String)>) {
    let answered = |i: usize| matches!(c.offsets.get(i), Some(Some(_)));
    let Some(median) = reference(&c.applied_ms, answered) else {
        return;
    };
    let slack = CLOCK_SLACK_MICROS;
    for (i, reading) in c.offsets.iter().enumerate() {
        let (Some((micros, uncertainty)), Some(applied)) = (reading, c.applied_ms.get(i)) else {
            continue;
        };
        let expected = (applied - median) * 1000;
        if micros.abs_diff(expected) > uncertainty + slack {
            found.push((
                i,
                format!("its clock was {expected} µs off the others' median"),
                format!("clock_offsets() read {micros} µs ± {uncertainty} µs"),
            ));
        }
    }
}

const CLOCK_SLACK_MICROS: u64 = (crate::checker::CLOCK_SLACK * 1e6) as u64;

fn doctor_flags(c: &ClockCheck, found: &mut Vec<(usize, String, String)>) {
    let flagged = |i: usize| c.doctor.get(i).is_some_and(|s| s != "none");
    let Some(median) = reference(&c.applied_ms, flagged) else {
        return;
    };
    let bound = redfence::MAX_CLOCK_OFFSET.as_secs_f64();
    let slack = crate::checker::CLOCK_SLACK;
    for (i, severity) in c.doctor.iter().enumerate() {
        let Some(applied) = c.applied_ms.get(i).filter(|_| flagged(i)) else {
            continue;
        };
        let off = (applied - median) as f64 / 1000.0;
        let wrong = if off.abs() > bound + slack {
            !matches!(severity.as_str(), "warning" | "error")
        } else {
            off.abs() + slack < bound && severity == "error"
        };
        if wrong {
            found.push((
                i,
                format!("its clock was {off:+.3} s off the others' median"),
                format!("the doctor's clock finding was {severity}"),
            ));
        }
    }
}
