//! `results.json` (the run's counts and every violation),
//! `history.jsonl` (every event, for `--check` and `.ci/judge.py`) and
//! `timeline.svg` (one lane per client and per instance: holds as bars,
//! faults shaded, violations marked).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use plotters::prelude::*;
use serde_json::{json, Value};

use crate::checker::Verdict;
use crate::history::{Counters, History, Mode};
use crate::record::Record;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the run was, for the report's header.
pub struct RunInfo<'a> {
    pub seed: u64,
    pub duration_s: f64,
    pub server: &'a str,
    pub workloads: Vec<&'static str>,
    pub nemeses: Vec<&'static str>,
    pub unfenced: bool,
    pub instances: usize,
    pub clients: usize,
}

pub fn results(info: &RunInfo<'_>, history: &History, verdict: &Verdict) -> Value {
    let counters: Counters = history.ops.lock().clone();
    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    for f in history.faults.lock().iter() {
        *faults.entry(f.nemesis.name()).or_default() += 1;
    }
    let per_workload = per_workload(info, history, &counters, verdict);
    let fault_log: Vec<Value> = history
        .faults
        .lock()
        .iter()
        .map(|f| {
            json!({
                "nemesis": f.nemesis.name(), "instances": f.instances,
                "start_s": round3(history.secs(f.start)), "end_s": round3(history.secs(f.end)),
                "detail": f.detail,
            })
        })
        .collect();
    let mut out = json!({
        "seed": info.seed,
        "duration_s": round3(info.duration_s),
        "server": info.server,
        "workloads": info.workloads,
        "nemeses": info.nemeses,
        "unfenced": info.unfenced,
        "instances": info.instances,
        "clients": info.clients,
        "ops": counters.ops,
        "grants": counters.grants,
        "contended": counters.contended,
        "unavailable": counters.unavailable,
        "other_errors": counters.other_errors,
        "extends": counters.extends,
        "stalls": counters.stalls,
        "waiter_pauses": counters.waiter_pauses,
        "writes_refused": counters.writes_refused,
        "reads_refused": counters.reads_refused,
        "lost_before_write": counters.lost_before_write,
        "database_errors": counters.database_errors,
        "unlocks": {
            "revoked": counters.unlocks_revoked,
            "free": counters.unlocks_free,
            "failed": counters.unlocks_failed,
        },
        "kv_refused": counters.kv_refused,
        "clock_checks_skipped": counters.clock_checks_skipped,
        "probes": counters.probes,
        "faults": faults,
    });
    let checks = verdict_json(verdict);
    let more = json!({"per_workload": per_workload, "fault_log": fault_log});
    for part in [checks, more] {
        if let (Some(all), Value::Object(part)) = (out.as_object_mut(), part) {
            all.extend(part);
        }
    }
    out
}

/// The checker's counts, its excuses by reason and instance (`{"restart":
/// {"2": 3}}`), and every violation.
pub fn verdict_json(verdict: &Verdict) -> Value {
    let mut out = counts_json(verdict);
    let fair = &verdict.fair;
    let order = json!({
        "fair_grants": fair.grants,
        "fair_contested": fair.contested,
        "fair_out_of_order": fair.out_of_order,
        "fair_out_of_order_excused": fair.out_of_order_excused,
        "fair_in_order_share": fair.in_order_share(),
        "fair_dead_waiters": fair.dead_waiters,
        "fair_dead_heads": fair.dead_heads,
        "fair_longest_dead_wait_ms": fair.longest_dead_wait_ms.map(round3),
    });
    if let (Some(all), Value::Object(order)) = (out.as_object_mut(), order) {
        all.extend(order);
    }
    out
}

fn counts_json(verdict: &Verdict) -> Value {
    let violations: Vec<Value> = verdict
        .violations
        .iter()
        .map(|v| {
            json!({
                "kind": v.kind, "resource": v.resource,
                "first": v.first, "second": v.second,
                "first_at_s": round3(v.first_at), "second_at_s": round3(v.second_at),
            })
        })
        .collect();
    let mut excused_by: BTreeMap<&str, BTreeMap<String, u64>> = BTreeMap::new();
    for ((reason, instance), n) in &verdict.excused {
        excused_by
            .entry(reason)
            .or_default()
            .insert(instance.to_string(), *n);
    }
    json!({
        "lost_updates": verdict.lost_updates,
        "stale_writes_accepted": verdict.stale_writes_accepted,
        "token_regressions": verdict.token_regressions,
        "tokens_ahead": verdict.tokens_ahead,
        "overlaps": verdict.overlaps,
        "overlaps_excused": verdict.overlaps_excused,
        "run_once_duplicates": verdict.run_once_duplicates,
        "run_once_excused": verdict.run_once_excused,
        "leader_overlaps": verdict.leader_overlaps,
        "slot_overlaps": verdict.slot_overlaps,
        "slots_out_of_range": verdict.slots_out_of_range,
        "permits_over_count": verdict.permits_over_count,
        "permits_over_count_excused": verdict.permits_over_count_excused,
        "rw_overlaps": verdict.rw_overlaps,
        "torn_reads": verdict.torn_reads,
        "stale_reads": verdict.stale_reads,
        "permits_at_count": verdict.permits_at_count,
        "reads_shared": verdict.reads_shared,
        "reads_checked": verdict.reads_checked,
        "orphan_locks": verdict.orphans,
        "voided_grants": verdict.voided_grants,
        "stuck_calls": verdict.stuck_calls,
        "unlock_excused": {
            "revoked": verdict.unlock_excused,
            "failed": verdict.unlock_failed_excused,
        },
        "unlocks_of": {"live": verdict.unlocks_of_live, "dead": verdict.unlocks_of_dead},
        "cancels": verdict.cancels,
        "cancelled": verdict.cancelled,
        "cancel_violations": verdict.cancel_violations,
        "kv_ops": verdict.kv_ops,
        "kv_violations": verdict.kv_violations,
        "clock_checks": verdict.clock_checks,
        "clock_checks_stepped": verdict.clock_checks_stepped,
        "clock_violations": verdict.clock_violations,
        "excused_by": excused_by,
        "violations": violations,
    })
}

/// Per workload: operations begun, guards granted (for `rw`, reads and
/// writes apart), lock calls that failed (by error), the longest any call
/// took past its wait (in ms: liveness, judged by `stuck_calls`), and the
/// overlaps a fault excused.
fn per_workload(
    info: &RunInfo<'_>,
    history: &History,
    counters: &Counters,
    verdict: &Verdict,
) -> Value {
    let holds = history.holds.lock();
    let calls = history.calls.lock();
    let mut out = serde_json::Map::new();
    let mut names = info.workloads.clone();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let mine = || holds.iter().filter(move |h| h.workload.name() == name);
        let failed = || calls.iter().filter(move |c| c.workload.name() == name);
        let failed_by = |error: &str| failed().filter(|c| c.error == error).count();
        let past_wait = mine()
            .map(|h| h.granted.duration_since(h.start).saturating_sub(h.wait))
            .chain(failed().map(|c| c.end.duration_since(c.start).saturating_sub(c.wait)))
            .max()
            .unwrap_or_default();
        let mut entry = json!({
            "ops": counters.ops_by_workload.get(name).copied().unwrap_or(0),
            "grants": mine().count(),
            "failed_calls": failed().count(),
            "contended": failed_by("contended"),
            "unavailable": failed_by("unavailable"),
            "other_errors": failed_by("other"),
            "longest_past_wait_ms": past_wait.as_millis() as u64,
            "overlaps_excused": verdict.excused_by_workload.get(name).copied().unwrap_or(0),
        });
        if mine().any(|h| matches!(h.mode, Mode::Read | Mode::Write)) {
            entry["reads"] = json!(mine().filter(|h| h.mode == Mode::Read).count());
            entry["writes"] = json!(mine().filter(|h| h.mode == Mode::Write).count());
        }
        out.insert(name.to_string(), entry);
    }
    Value::Object(out)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub fn write(
    dir: &Path,
    results: &Value,
    record: &Record,
    history: &History,
    verdict: &Verdict,
    lanes: (usize, usize),
) -> Result<(), BoxError> {
    fs::create_dir_all(dir)?;
    fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(results)? + "\n",
    )?;
    fs::write(dir.join("history.jsonl"), record.to_jsonl())?;
    timeline(&dir.join("timeline.svg"), history, verdict, lanes)
}

const LANE: u32 = 22;
const CAPTION: &str = "holds: register blue, multi green, election purple, run-once orange, \
     permit teal, read light brown, write dark brown, operator magenta, cancel olive, \
     fenced-kv indigo (fenced-rw: reads and writes); \
     faults: pause grey, kill/restart/rollback black, partition orange, late yellow, \
     clock light blue, client-pause pink (on client lanes); violations: red lines";

/// Lanes: clients first (holds as bars, coloured by workload), then
/// instances (faults shaded); violations as red lines across every lane.
fn timeline(
    path: &Path,
    history: &History,
    verdict: &Verdict,
    (clients, instances): (usize, usize),
) -> Result<(), BoxError> {
    let lanes = (clients + instances) as f64;
    let end = history
        .faults
        .lock()
        .iter()
        .map(|f| history.secs(f.end))
        .fold(1.0, f64::max);
    let end = history
        .holds
        .lock()
        .iter()
        .map(|h| history.secs(h.end))
        .fold(end, f64::max);
    let height = 80 + LANE * (clients + instances) as u32;
    let root = SVGBackend::new(path, (1400, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(CAPTION, ("sans-serif", 13))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..end, -0.5..lanes - 0.5)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(clients + instances + 1)
        .y_label_formatter(&|y| lane_name(*y, clients))
        .x_desc("seconds")
        .draw()?;
    let holds = history.holds.lock().clone();
    chart.draw_series(holds.iter().map(|h| {
        let y = h.client as f64;
        let x0 = history.secs(h.granted);
        let x1 = history.secs(h.claim_end.min(h.releasing)).max(x0 + 0.01);
        Rectangle::new(
            [(x0, y + 0.15), (x1, y + 0.85)],
            hold_colour(h.workload, h.mode).filled(),
        )
    }))?;
    let faults = history.faults.lock().clone();
    chart.draw_series(faults.iter().flat_map(|f| {
        let (x0, x1) = (history.secs(f.start), history.secs(f.end));
        let lanes: Vec<f64> = if f.instances.is_empty() {
            (0..clients).map(|c| c as f64).collect()
        } else {
            f.instances.iter().map(|&i| (clients + i) as f64).collect()
        };
        let colour = fault_colour(f.nemesis.name());
        lanes
            .into_iter()
            .map(move |y| Rectangle::new([(x0, y - 0.4), (x1, y + 0.4)], colour.mix(0.6).filled()))
    }))?;
    chart.draw_series(
        verdict
            .violations
            .iter()
            .filter(|v| v.second_at > 0.0)
            .map(|v| {
                PathElement::new(
                    vec![(v.second_at, 0.0), (v.second_at, lanes)],
                    RED.stroke_width(2),
                )
            }),
    )?;
    root.present()?;
    Ok(())
}

fn lane_name(y: f64, clients: usize) -> String {
    if (y - y.round()).abs() > 0.01 || y < 0.0 {
        return String::new();
    }
    let lane = y.round() as usize;
    if lane < clients {
        format!("client {lane}")
    } else {
        format!("instance {}", lane - clients)
    }
}

fn hold_colour(w: crate::args::Workload, mode: Mode) -> RGBColor {
    use crate::args::Workload::*;
    match (w, mode) {
        (_, Mode::Read) => RGBColor(205, 170, 125),
        (_, Mode::Write) => RGBColor(120, 70, 30),
        (Register, _) => RGBColor(70, 130, 180),
        (Multi, _) => RGBColor(60, 160, 90),
        (Election, _) => RGBColor(150, 90, 170),
        (RunOnce, _) => RGBColor(200, 140, 40),
        (Semaphore | Rw, _) => RGBColor(40, 160, 160),
        (Operator, _) => RGBColor(200, 60, 120),
        (Cancel, _) => RGBColor(150, 150, 60),
        (FencedKv | FencedRw | Clocks, _) => RGBColor(90, 90, 200),
        (Fair, _) => RGBColor(110, 180, 60),
    }
}

fn fault_colour(name: &str) -> RGBColor {
    match name {
        "pause" => RGBColor(120, 120, 120),
        "kill" | "restart" | "rollback" => RGBColor(40, 40, 40),
        "partition" => RGBColor(230, 120, 50),
        "late" => RGBColor(240, 200, 60),
        "clock" => RGBColor(90, 170, 220),
        _ => RGBColor(200, 100, 200),
    }
}
