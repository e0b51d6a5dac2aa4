//! `redfence doctor`: checks each instance against the deployment the
//! guarantees assume, and says per instance what holds, and how many more
//! instances can fail before no quorum is left.

use redfence::{DoctorReport, Severity, Verdict};
use serde_json::json;

use crate::cli::{Common, DoctorArgs};
use crate::client;
use crate::exit::{Failure, CONFIG, UNAVAILABLE};

pub fn doctor(common: &Common, args: &DoctorArgs) -> Result<u8, Failure> {
    let locks = client::Target::from_options(common)?.client(common)?;
    let report = locks.doctor();
    if args.json {
        out!("{}", to_json(&report));
    } else {
        print_table(&report);
    }
    Ok(exit_code(&report))
}

/// 69 when fewer than a quorum could be reached (an outage), else 78 when
/// any instance is unusable for a configuration reason (whatever the
/// count), else 0 (warnings included: an unreachable minority).
fn exit_code(report: &DoctorReport) -> u8 {
    if report.is_outage() {
        UNAVAILABLE
    } else if report.is_healthy() {
        0
    } else if report.worst() == Some(Severity::Error) {
        CONFIG
    } else {
        UNAVAILABLE
    }
}

fn print_table(report: &DoctorReport) {
    for row in &report.instances {
        let server = row.server.as_deref().unwrap_or("unknown server");
        out!("{} ({server}): {}", row.instance, row.verdict);
        for f in &row.findings {
            out!("  {:<7} {:<12} {}", f.severity, f.check, f.message);
        }
    }
    let verdict = if report.is_outage() {
        "fewer than a quorum answered: an outage".to_string()
    } else if report.worst() == Some(Severity::Error) {
        format!(
            "a precondition of the guarantees is violated; {}",
            margin(report)
        )
    } else {
        format!(
            "every precondition the doctor can see holds; {}",
            margin(report)
        )
    };
    out!(
        "{} of {} positions answered, {} usable (quorum {}): {verdict}",
        report.answered,
        positions(report),
        report.usable,
        report.quorum
    );
}

/// How many more positions can fail, in words.
fn margin(report: &DoctorReport) -> String {
    match report.margin {
        None => format!(
            "no quorum is left: {} more usable position(s) needed",
            report.quorum - report.usable.min(report.quorum)
        ),
        Some(0) => "margin 0: losing one more position leaves no quorum".to_string(),
        Some(n) => format!("margin {n}: {n} more position(s) can fail before no quorum is left"),
    }
}

/// The positions the client was given (a cluster position's shards share
/// one).
fn positions(report: &DoctorReport) -> usize {
    report
        .instances
        .iter()
        .map(|row| row.position + 1)
        .max()
        .unwrap_or(0)
}

fn to_json(report: &DoctorReport) -> serde_json::Value {
    let instances: Vec<_> = report
        .instances
        .iter()
        .map(|row| {
            let findings: Vec<_> = row
                .findings
                .iter()
                .map(|f| json!({"check": f.check, "severity": f.severity.to_string(), "message": f.message}))
                .collect();
            let missing = match &row.verdict {
                Verdict::MissingPermissions { rules } => rules.clone(),
                _ => Vec::new(),
            };
            json!({
                "instance": row.instance,
                "position": row.position,
                "reachable": row.reachable,
                "server": row.server,
                "verdict": row.verdict.name(),
                "usable": row.verdict.is_usable(),
                "missing_rules": missing,
                "findings": findings,
            })
        })
        .collect();
    json!({
        "quorum": report.quorum,
        "answered": report.answered,
        "reachable": report.reachable,
        "usable": report.usable,
        "margin": report.margin,
        "healthy": report.is_healthy(),
        "instances": instances,
    })
}
