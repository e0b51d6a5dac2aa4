//! The history as the checker judges it and as `history.jsonl` stores it:
//! every time in seconds since the run started (f64), so that a run's own
//! verdict and `nemesis --check DIR` judge exactly the same numbers (JSON
//! writes each f64 so that it reads back the same). The format is
//! documented in `docs/testing.md` ("history.jsonl"); `.ci/judge.py`
//! reads it too, with none of this code.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::args::Workload;
use crate::history::{EffectKind, FairOutcome, History, KvKind, Mode, UnlockOutcome, UnlockRole};
use crate::nemesis::Nemesis;

/// Bumped when a line's meaning changes; `--check` refuses another.
pub const FORMAT: u64 = 1;

/// What the run was, as far as judging needs.
#[derive(Debug, Clone, Default)]
pub struct Meta {
    pub seed: u64,
    pub instances: usize,
    pub clients: usize,
    /// The semaphore's count.
    pub permits: u32,
    /// The machine's wall clock at the start, in µs since 1970.
    pub epoch_wall_micros: u64,
    pub unfenced: bool,
}

impl Meta {
    /// Instances a grant needs.
    pub fn quorum(&self) -> usize {
        self.instances / 2 + 1
    }
}

#[derive(Debug, Clone)]
pub struct Hold {
    pub client: usize,
    pub workload: Workload,
    pub mode: Mode,
    pub tokens: Vec<(String, u64)>,
    pub start: f64,
    pub granted: f64,
    pub claim_end: f64,
    pub releasing: f64,
    pub end: f64,
    pub key_life: f64,
    pub wait: f64,
    /// When another thread cancelled the call in flight, if it did.
    pub cancelled: Option<f64>,
    /// (when, promised end) of every look at `validity()`.
    pub notes: Vec<(f64, f64)>,
}

#[derive(Debug, Clone)]
pub struct Call {
    pub client: usize,
    pub workload: Workload,
    pub resources: Vec<String>,
    pub start: f64,
    pub end: f64,
    pub wait: f64,
    pub key_life: f64,
    pub error: String,
    pub cancelled: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct Unlock {
    pub client: usize,
    pub resource: String,
    pub role: UnlockRole,
    pub start: f64,
    pub end: f64,
    pub outcome: UnlockOutcome,
}

#[derive(Debug, Clone)]
pub struct KvOp {
    pub client: usize,
    pub key: String,
    pub token: u64,
    pub op: KvKind,
    pub start: f64,
    pub end: f64,
    pub accepted: Option<bool>,
    pub value: i64,
}

#[derive(Debug, Clone)]
pub struct ClockCheck {
    pub client: usize,
    pub start: f64,
    pub end: f64,
    pub applied_ms: Vec<i64>,
    pub offsets: Vec<Option<(i64, u64)>>,
    pub doctor: Vec<String>,
}

/// A fair lock call (`history::FairCall`), in seconds.
#[derive(Debug, Clone)]
pub struct FairCall {
    pub client: usize,
    pub resource: String,
    pub start: f64,
    pub end: f64,
    /// (ticket, join began, a quorum of queues had it).
    pub join: Option<(u64, f64, f64)>,
    pub outcome: FairOutcome,
    pub token: Option<u64>,
    /// Paused by the client-pause nemesis after its join: from, to.
    pub paused: Option<(f64, f64)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Effect {
    /// Keys lost: all, or those written after `since` (a rollback).
    Loss {
        since: Option<f64>,
    },
    Clock {
        by_ms: i64,
    },
}

#[derive(Debug, Clone)]
pub struct Fault {
    pub nemesis: Nemesis,
    pub instances: Vec<usize>,
    pub start: f64,
    pub end: f64,
    pub detail: String,
    /// (instance, when, what).
    pub effects: Vec<(usize, f64, Effect)>,
}

#[derive(Debug, Clone)]
pub struct Run {
    pub window: u64,
    pub client: usize,
    pub token: u64,
    pub granted: f64,
}

#[derive(Debug, Clone)]
pub struct Sighting {
    pub resource: String,
    pub instance: usize,
    pub client: usize,
    /// When the watcher's reading returned.
    pub at: f64,
    /// When it was sent (`at` in histories that predate it).
    pub sent: f64,
    pub pttl: f64,
    pub voided: bool,
    /// A reader-writer lock's reader entry (blocks writes only).
    pub reader: bool,
}

/// What the database holds at the end: each register's counter and its
/// accepted writes in commit order, and the accepted acts.
#[derive(Debug, Clone, Default)]
pub struct Stored {
    pub counters: BTreeMap<String, i64>,
    /// (resource, token, client, value read), in commit order.
    pub writes: Vec<(String, i64, i32, i64)>,
    /// (term, client), in commit order.
    pub acts: Vec<(i64, i32)>,
    /// (resource, token, client, first value, second value) of each read
    /// guard whose two reads were accepted, in commit order.
    pub reads: Vec<(String, i64, i32, i64, i64)>,
    /// Each key of the fenced storage server (`fenced_set`) and its value
    /// at the end (absent: 0).
    pub kv: BTreeMap<String, i64>,
}

#[derive(Debug, Clone, Default)]
pub struct Record {
    pub meta: Meta,
    pub holds: Vec<Hold>,
    pub calls: Vec<Call>,
    pub faults: Vec<Fault>,
    pub runs: Vec<Run>,
    pub sightings: Vec<Sighting>,
    pub unlocks: Vec<Unlock>,
    pub kv: Vec<KvOp>,
    pub clock_checks: Vec<ClockCheck>,
    pub fair: Vec<FairCall>,
    pub stored: Stored,
}

impl Record {
    /// The run's history, its times made seconds since `history.epoch`.
    pub fn from_history(meta: Meta, history: &History, stored: Stored) -> Record {
        let s = |at: Instant| history.secs(at);
        let holds: Vec<Hold> = history
            .holds
            .lock()
            .iter()
            .map(|h| Hold {
                client: h.client,
                workload: h.workload,
                mode: h.mode,
                tokens: h.tokens.clone(),
                start: s(h.start),
                granted: s(h.granted),
                claim_end: s(h.claim_end),
                releasing: s(h.releasing),
                end: s(h.end),
                key_life: h.key_life.as_secs_f64(),
                wait: h.wait.as_secs_f64(),
                cancelled: h.cancelled.map(s),
                notes: h
                    .notes
                    .iter()
                    .map(|(at, until)| (s(*at), s(*until)))
                    .collect(),
            })
            .collect();
        let calls: Vec<Call> = history
            .calls
            .lock()
            .iter()
            .map(|c| Call {
                client: c.client,
                workload: c.workload,
                resources: c.resources.clone(),
                start: s(c.start),
                end: s(c.end),
                wait: c.wait.as_secs_f64(),
                key_life: c.key_life.as_secs_f64(),
                error: c.error.to_string(),
                cancelled: c.cancelled.map(s),
            })
            .collect();
        let faults: Vec<Fault> = history
            .faults
            .lock()
            .iter()
            .map(|f| Fault {
                nemesis: f.nemesis,
                instances: f.instances.clone(),
                start: s(f.start),
                end: s(f.end),
                detail: f.detail.clone(),
                effects: f
                    .effects
                    .iter()
                    .map(|e| {
                        let kind = match e.kind {
                            EffectKind::Loss { since } => Effect::Loss {
                                since: since.map(s),
                            },
                            EffectKind::Clock { by_ms } => Effect::Clock { by_ms },
                        };
                        (e.instance, s(e.at), kind)
                    })
                    .collect(),
            })
            .collect();
        let runs: Vec<Run> = history
            .runs
            .lock()
            .iter()
            .map(|r| Run {
                window: r.window,
                client: r.client,
                token: r.token,
                granted: s(r.granted),
            })
            .collect();
        let sightings: Vec<Sighting> = history
            .sightings
            .lock()
            .iter()
            .map(|x| Sighting {
                resource: x.resource.clone(),
                instance: x.instance,
                client: x.client,
                at: s(x.at),
                sent: s(x.sent),
                pttl: x.pttl.as_secs_f64(),
                voided: x.voided,
                reader: x.reader,
            })
            .collect();
        let (unlocks, kv, clock_checks) = operations(history);
        let fair = fair_calls(history);
        Record {
            meta,
            holds,
            calls,
            faults,
            runs,
            sightings,
            unlocks,
            kv,
            clock_checks,
            fair,
            stored,
        }
    }

    /// The history as JSON lines: the run first, then every event.
    pub fn to_jsonl(&self) -> String {
        let mut out = String::new();
        let mut line = |v: Value| {
            let _ = writeln!(out, "{v}");
        };
        let m = &self.meta;
        line(json!({
            "type": "run", "format": FORMAT, "seed": m.seed, "instances": m.instances,
            "quorum": m.quorum(), "clients": m.clients, "permits": m.permits,
            "epoch_wall_micros": m.epoch_wall_micros, "unfenced": m.unfenced,
        }));
        self.holds.iter().for_each(|h| line(hold_json(h)));
        self.calls.iter().for_each(|c| line(call_json(c)));
        self.faults.iter().for_each(|f| line(fault_json(f)));
        for r in &self.runs {
            line(json!({
                "type": "run_once", "window": r.window, "client": r.client,
                "token": r.token, "granted": r.granted,
            }));
        }
        for x in &self.sightings {
            line(json!({
                "type": "sighting", "resource": x.resource, "instance": x.instance,
                "client": x.client, "at": x.at, "sent": x.sent, "pttl": x.pttl, "voided": x.voided,
                "reader": x.reader,
            }));
        }
        self.operation_lines(&mut line);
        self.stored_lines(&mut line);
        out
    }

    fn operation_lines(&self, line: &mut impl FnMut(Value)) {
        for u in &self.unlocks {
            let (result, holder) = match u.outcome {
                UnlockOutcome::Revoked { holder } => ("revoked", Some(holder)),
                UnlockOutcome::RevokedUnknown => ("revoked", None),
                UnlockOutcome::Free => ("free", None),
                UnlockOutcome::Failed => ("failed", None),
            };
            line(json!({
                "type": "unlock", "client": u.client, "resource": u.resource,
                "role": u.role.name(), "start": u.start, "end": u.end, "result": result, "holder": holder,
            }));
        }
        for k in &self.kv {
            line(json!({
                "type": "kv", "client": k.client, "key": k.key, "token": k.token,
                "op": k.op.name(), "start": k.start, "end": k.end,
                "accepted": k.accepted, "value": k.value,
            }));
        }
        for c in &self.clock_checks {
            let offsets: Vec<Value> = c
                .offsets
                .iter()
                .map(|o| o.map_or(Value::Null, |(m, u)| json!([m, u])))
                .collect();
            line(json!({
                "type": "clock_check", "client": c.client, "start": c.start, "end": c.end,
                "applied_ms": c.applied_ms, "offsets": offsets, "doctor": c.doctor,
            }));
        }
        for f in &self.fair {
            line(fair_json(f));
        }
    }

    fn stored_lines(&self, line: &mut impl FnMut(Value)) {
        let st = &self.stored;
        for (seq, (resource, token, client, read)) in st.writes.iter().enumerate() {
            line(json!({
                "type": "write", "seq": seq, "resource": resource, "token": token,
                "client": client, "read": read,
            }));
        }
        for (resource, value) in &st.counters {
            line(json!({"type": "counter", "resource": resource, "value": value}));
        }
        for (seq, (term, client)) in st.acts.iter().enumerate() {
            line(json!({"type": "act", "seq": seq, "term": term, "client": client}));
        }
        for (seq, (resource, token, client, first, second)) in st.reads.iter().enumerate() {
            line(json!({
                "type": "read", "seq": seq, "resource": resource, "token": token,
                "client": client, "first": first, "second": second,
            }));
        }
        for (key, value) in &st.kv {
            line(json!({"type": "kv_final", "key": key, "value": value}));
        }
    }

    /// Reads what [`to_jsonl`](Self::to_jsonl) wrote. An error names the
    /// line and what is wrong with it.
    pub fn from_jsonl(text: &str) -> Result<Record, String> {
        let mut rec = Record::default();
        let mut seen_run = false;
        for (n, raw) in text.lines().enumerate() {
            if raw.trim().is_empty() {
                continue;
            }
            let v: Value =
                serde_json::from_str(raw).map_err(|e| format!("line {}: not JSON: {e}", n + 1))?;
            let o = v
                .as_object()
                .ok_or_else(|| format!("line {}: not a JSON object", n + 1))?;
            let kind = text_of(o, "type").map_err(|e| format!("line {}: {e}", n + 1))?;
            if !seen_run && kind != "run" {
                return Err(format!("line {}: the first event must be \"run\"", n + 1));
            }
            seen_run = true;
            rec.add(&kind, o)
                .map_err(|e| format!("line {} ({kind}): {e}", n + 1))?;
        }
        if !seen_run {
            return Err("no events (an empty file)".into());
        }
        Ok(rec)
    }

    fn add(&mut self, kind: &str, o: &Map<String, Value>) -> Result<(), String> {
        match kind {
            "run" => {
                let format = uint(o, "format")?;
                if format != FORMAT {
                    return Err(format!("format {format}; this checker reads {FORMAT}"));
                }
                self.meta = Meta {
                    seed: uint(o, "seed")?,
                    instances: uint(o, "instances")? as usize,
                    clients: uint(o, "clients")? as usize,
                    permits: uint(o, "permits")? as u32,
                    epoch_wall_micros: uint(o, "epoch_wall_micros")?,
                    unfenced: o.get("unfenced").and_then(Value::as_bool).unwrap_or(false),
                };
            }
            "hold" => self.holds.push(parse_hold(o)?),
            "call" => self.calls.push(parse_call(o)?),
            "fault" => self.faults.push(parse_fault(o)?),
            "run_once" => self.runs.push(Run {
                window: uint(o, "window")?,
                client: uint(o, "client")? as usize,
                token: uint(o, "token")?,
                granted: secs(o, "granted")?,
            }),
            "sighting" => self.sightings.push(Sighting {
                resource: text_of(o, "resource")?,
                instance: uint(o, "instance")? as usize,
                client: uint(o, "client")? as usize,
                at: secs(o, "at")?,
                sent: secs(o, "sent").or_else(|_| secs(o, "at"))?,
                pttl: secs(o, "pttl")?,
                voided: o.get("voided").and_then(Value::as_bool).unwrap_or(false),
                reader: o.get("reader").and_then(Value::as_bool).unwrap_or(false),
            }),
            "unlock" => self.unlocks.push(parse_unlock(o)?),
            "kv" => self.kv.push(parse_kv(o)?),
            "clock_check" => self.clock_checks.push(parse_clock_check(o)?),
            "fair_call" => self.fair.push(parse_fair(o)?),
            _ => self.add_stored(kind, o)?,
        }
        Ok(())
    }

    fn add_stored(&mut self, kind: &str, o: &Map<String, Value>) -> Result<(), String> {
        let st = &mut self.stored;
        match kind {
            "write" => st.writes.push((
                text_of(o, "resource")?,
                int(o, "token")?,
                int(o, "client")? as i32,
                int(o, "read")?,
            )),
            "counter" => {
                st.counters
                    .insert(text_of(o, "resource")?, int(o, "value")?);
            }
            "act" => st.acts.push((int(o, "term")?, int(o, "client")? as i32)),
            "read" => st.reads.push((
                text_of(o, "resource")?,
                int(o, "token")?,
                int(o, "client")? as i32,
                int(o, "first")?,
                int(o, "second")?,
            )),
            "kv_final" => {
                st.kv.insert(text_of(o, "key")?, int(o, "value")?);
            }
            other => return Err(format!("unknown event type {other:?}")),
        }
        Ok(())
    }
}

fn mode_json(mode: Mode) -> (&'static str, Option<u32>) {
    match mode {
        Mode::Exclusive => ("exclusive", None),
        Mode::Permit { slot } => ("permit", Some(slot)),
        Mode::Read => ("read", None),
        Mode::Write => ("write", None),
    }
}

fn hold_json(h: &Hold) -> Value {
    let (mode, slot) = mode_json(h.mode);
    let tokens: Vec<Value> = h
        .tokens
        .iter()
        .map(|(r, t)| json!({"resource": r, "token": t}))
        .collect();
    json!({
        "type": "hold", "client": h.client, "workload": h.workload.name(),
        "mode": mode, "slot": slot, "tokens": tokens,
        "start": h.start, "granted": h.granted, "claim_end": h.claim_end,
        "releasing": h.releasing, "end": h.end, "key_life": h.key_life,
        "wait": h.wait, "cancelled": h.cancelled, "notes": h.notes,
    })
}

fn call_json(c: &Call) -> Value {
    json!({
        "type": "call", "client": c.client, "workload": c.workload.name(),
        "resources": c.resources, "start": c.start, "end": c.end, "wait": c.wait,
        "key_life": c.key_life, "error": c.error, "cancelled": c.cancelled,
    })
}

fn fault_json(f: &Fault) -> Value {
    let effects: Vec<Value> = f
        .effects
        .iter()
        .map(|(instance, at, e)| match e {
            Effect::Loss { since } => {
                json!({"instance": instance, "at": at, "kind": "loss", "since": since})
            }
            Effect::Clock { by_ms } => {
                json!({"instance": instance, "at": at, "kind": "clock", "by_ms": by_ms})
            }
        })
        .collect();
    json!({
        "type": "fault", "nemesis": f.nemesis.name(), "instances": f.instances,
        "start": f.start, "end": f.end, "detail": f.detail, "effects": effects,
    })
}

fn parse_hold(o: &Map<String, Value>) -> Result<Hold, String> {
    let mode = match text_of(o, "mode")?.as_str() {
        "exclusive" => Mode::Exclusive,
        "permit" => Mode::Permit {
            slot: uint(o, "slot")? as u32,
        },
        "read" => Mode::Read,
        "write" => Mode::Write,
        other => return Err(format!("unknown mode {other:?}")),
    };
    let mut tokens = Vec::new();
    for t in list(o, "tokens")? {
        let t = t.as_object().ok_or("a token is not an object")?;
        tokens.push((text_of(t, "resource")?, uint(t, "token")?));
    }
    let mut notes = Vec::new();
    for n in list(o, "notes")? {
        let pair = n.as_array().filter(|p| p.len() == 2);
        let pair = pair.ok_or("a note is not [at, until]")?;
        let num = |v: &Value| v.as_f64().ok_or("a note's time is not a number");
        notes.push((num(&pair[0])?, num(&pair[1])?));
    }
    Ok(Hold {
        client: uint(o, "client")? as usize,
        workload: workload(o)?,
        mode,
        tokens,
        start: secs(o, "start")?,
        granted: secs(o, "granted")?,
        claim_end: secs(o, "claim_end")?,
        releasing: secs(o, "releasing")?,
        end: secs(o, "end")?,
        key_life: secs(o, "key_life")?,
        wait: secs(o, "wait")?,
        cancelled: optional_secs(o, "cancelled")?,
        notes,
    })
}

fn parse_call(o: &Map<String, Value>) -> Result<Call, String> {
    let mut resources = Vec::new();
    for r in list(o, "resources")? {
        resources.push(r.as_str().ok_or("a resource is not a string")?.to_string());
    }
    Ok(Call {
        client: uint(o, "client")? as usize,
        workload: workload(o)?,
        resources,
        start: secs(o, "start")?,
        end: secs(o, "end")?,
        wait: secs(o, "wait")?,
        key_life: secs(o, "key_life")?,
        error: text_of(o, "error")?,
        cancelled: optional_secs(o, "cancelled")?,
    })
}

fn parse_fault(o: &Map<String, Value>) -> Result<Fault, String> {
    let name = text_of(o, "nemesis")?;
    let nemesis = Nemesis::ALL
        .into_iter()
        .find(|n| n.name() == name)
        .ok_or_else(|| format!("unknown nemesis {name:?}"))?;
    let mut instances = Vec::new();
    for i in list(o, "instances")? {
        instances.push(i.as_u64().ok_or("an instance is not a number")? as usize);
    }
    let mut effects = Vec::new();
    for e in list(o, "effects")? {
        let e = e.as_object().ok_or("an effect is not an object")?;
        let kind = match text_of(e, "kind")?.as_str() {
            "loss" => Effect::Loss {
                since: e.get("since").and_then(Value::as_f64),
            },
            "clock" => Effect::Clock {
                by_ms: int(e, "by_ms")?,
            },
            other => return Err(format!("unknown effect {other:?}")),
        };
        effects.push((uint(e, "instance")? as usize, secs(e, "at")?, kind));
    }
    Ok(Fault {
        nemesis,
        instances,
        start: secs(o, "start")?,
        end: secs(o, "end")?,
        detail: o
            .get("detail")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        effects,
    })
}

fn workload(o: &Map<String, Value>) -> Result<Workload, String> {
    let name = text_of(o, "workload")?;
    Workload::ALL
        .into_iter()
        .find(|w| w.name() == name)
        .ok_or_else(|| format!("unknown workload {name:?}"))
}

fn field<'a>(o: &'a Map<String, Value>, key: &str) -> Result<&'a Value, String> {
    o.get(key).ok_or_else(|| format!("no {key:?}"))
}

fn text_of(o: &Map<String, Value>, key: &str) -> Result<String, String> {
    let v = field(o, key)?;
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{key:?} is not a string"))
}

fn uint(o: &Map<String, Value>, key: &str) -> Result<u64, String> {
    let v = field(o, key)?;
    v.as_u64()
        .ok_or_else(|| format!("{key:?} is not a whole number ≥ 0"))
}

fn int(o: &Map<String, Value>, key: &str) -> Result<i64, String> {
    let v = field(o, key)?;
    v.as_i64()
        .ok_or_else(|| format!("{key:?} is not a whole number"))
}

/// A time or a length in seconds: a finite number.
fn secs(o: &Map<String, Value>, key: &str) -> Result<f64, String> {
    let v = field(o, key)?;
    v.as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("{key:?} is not a number of seconds"))
}

/// A time that may be absent or null (older histories lack it).
fn optional_secs(o: &Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => secs(o, key).map(Some),
    }
}

fn list<'a>(o: &'a Map<String, Value>, key: &str) -> Result<&'a Vec<Value>, String> {
    let v = field(o, key)?;
    v.as_array().ok_or_else(|| format!("{key:?} is not a list"))
}

/// The unlocks, storage operations and clock checks of the run, in
/// seconds since its start.
fn operations(history: &History) -> (Vec<Unlock>, Vec<KvOp>, Vec<ClockCheck>) {
    let s = |at: Instant| history.secs(at);
    let unlocks = history
        .unlocks
        .lock()
        .iter()
        .map(|u| Unlock {
            client: u.client,
            resource: u.resource.clone(),
            role: u.role,
            start: s(u.start),
            end: s(u.end),
            outcome: u.outcome,
        })
        .collect();
    let kv = history
        .kv
        .lock()
        .iter()
        .map(|k| KvOp {
            client: k.client,
            key: k.key.clone(),
            token: k.token,
            op: k.op,
            start: s(k.start),
            end: s(k.end),
            accepted: k.accepted,
            value: k.value,
        })
        .collect();
    let checks = history
        .clock_checks
        .lock()
        .iter()
        .map(|c| ClockCheck {
            client: c.client,
            start: s(c.start),
            end: s(c.end),
            applied_ms: c.applied_ms.clone(),
            offsets: c.offsets.clone(),
            doctor: c.doctor.clone(),
        })
        .collect();
    (unlocks, kv, checks)
}

fn parse_unlock(o: &Map<String, Value>) -> Result<Unlock, String> {
    let holder = o.get("holder").and_then(Value::as_u64);
    let outcome = match (text_of(o, "result")?.as_str(), holder) {
        ("revoked", Some(h)) => UnlockOutcome::Revoked { holder: h as usize },
        ("revoked", None) => UnlockOutcome::RevokedUnknown,
        ("free", _) => UnlockOutcome::Free,
        ("failed", _) => UnlockOutcome::Failed,
        (other, _) => return Err(format!("unknown unlock result {other:?}")),
    };
    // Histories from before semaphores and reader-writer locks were
    // unlocked have no role: every unlock was a lock's.
    let role = match o.get("role") {
        None => UnlockRole::Lock,
        Some(_) => {
            let name = text_of(o, "role")?;
            UnlockRole::ALL
                .into_iter()
                .find(|r| r.name() == name)
                .ok_or_else(|| format!("unknown unlock role {name:?}"))?
        }
    };
    Ok(Unlock {
        client: uint(o, "client")? as usize,
        resource: text_of(o, "resource")?,
        role,
        start: secs(o, "start")?,
        end: secs(o, "end")?,
        outcome,
    })
}

fn parse_kv(o: &Map<String, Value>) -> Result<KvOp, String> {
    let name = text_of(o, "op")?;
    let op = KvKind::ALL
        .into_iter()
        .find(|k| k.name() == name)
        .ok_or_else(|| format!("unknown kv op {name:?}"))?;
    let accepted = match field(o, "accepted")? {
        Value::Null => None,
        Value::Bool(b) => Some(*b),
        _ => return Err("\"accepted\" is not true, false or null".into()),
    };
    Ok(KvOp {
        client: uint(o, "client")? as usize,
        key: text_of(o, "key")?,
        token: uint(o, "token")?,
        op,
        start: secs(o, "start")?,
        end: secs(o, "end")?,
        accepted,
        value: int(o, "value")?,
    })
}

fn parse_clock_check(o: &Map<String, Value>) -> Result<ClockCheck, String> {
    let mut applied_ms = Vec::new();
    for v in list(o, "applied_ms")? {
        applied_ms.push(v.as_i64().ok_or("an applied offset is not a number")?);
    }
    let mut offsets = Vec::new();
    for v in list(o, "offsets")? {
        let pair = v.as_array().filter(|p| p.len() == 2);
        offsets.push(match (v, pair) {
            (Value::Null, _) => None,
            (_, Some(p)) => Some((
                p[0].as_i64().ok_or("an offset is not a number")?,
                p[1].as_u64().ok_or("an uncertainty is not a number")?,
            )),
            _ => return Err("an offset is not [micros, uncertainty] or null".into()),
        });
    }
    let mut doctor = Vec::new();
    for v in list(o, "doctor")? {
        doctor.push(
            v.as_str()
                .ok_or("a doctor severity is not a string")?
                .to_string(),
        );
    }
    Ok(ClockCheck {
        client: uint(o, "client")? as usize,
        start: secs(o, "start")?,
        end: secs(o, "end")?,
        applied_ms,
        offsets,
        doctor,
    })
}

fn fair_calls(history: &History) -> Vec<FairCall> {
    let s = |at: Instant| history.secs(at);
    history
        .fair
        .lock()
        .iter()
        .map(|f| FairCall {
            client: f.client,
            resource: f.resource.clone(),
            start: s(f.start),
            end: s(f.end),
            join: f.join.map(|(t, began, joined)| (t, s(began), s(joined))),
            outcome: f.outcome,
            token: f.token,
            paused: f.paused.map(|(from, to)| (s(from), s(to))),
        })
        .collect()
}

fn fair_json(f: &FairCall) -> Value {
    json!({
        "type": "fair_call", "client": f.client, "resource": f.resource,
        "start": f.start, "end": f.end,
        "ticket": f.join.map(|j| j.0), "join_start": f.join.map(|j| j.1),
        "joined": f.join.map(|j| j.2), "outcome": f.outcome.name(), "token": f.token,
        "paused": f.paused.map(|(from, to)| json!([from, to])),
    })
}

fn parse_fair(o: &Map<String, Value>) -> Result<FairCall, String> {
    let join = match o.get("ticket").filter(|t| !t.is_null()) {
        None => None,
        Some(_) => Some((
            uint(o, "ticket")?,
            secs(o, "join_start")?,
            secs(o, "joined")?,
        )),
    };
    let outcome = text_of(o, "outcome")?;
    let outcome = FairOutcome::ALL
        .into_iter()
        .find(|k| k.name() == outcome)
        .ok_or_else(|| format!("unknown outcome {outcome:?}"))?;
    let paused = match o.get("paused").filter(|p| !p.is_null()) {
        None => None,
        Some(p) => match p.as_array().map(Vec::as_slice) {
            Some([from, to]) => match (from.as_f64(), to.as_f64()) {
                (Some(from), Some(to)) => Some((from, to)),
                _ => return Err("\"paused\" is not two times".into()),
            },
            _ => return Err("\"paused\" is not two times".into()),
        },
    };
    Ok(FairCall {
        client: uint(o, "client")? as usize,
        resource: text_of(o, "resource")?,
        start: secs(o, "start")?,
        end: secs(o, "end")?,
        join,
        outcome,
        token: o.get("token").and_then(Value::as_u64),
        paused,
    })
}
