//! `redfence doctor`: checks each instance against the deployment the
//! guarantees assume, and says per instance what holds.

use redfence::{DoctorReport, Severity};
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
    Ok(if !report.quorum_answered() {
        UNAVAILABLE
    } else if report.is_healthy() {
        0
    } else {
        CONFIG
    })
}

fn print_table(report: &DoctorReport) {
    for row in &report.instances {
        let server = row.server.as_deref().unwrap_or("unknown server");
        out!("{} ({server})", row.instance);
        if row.findings.is_empty() {
            out!("  ok");
        }
        for f in &row.findings {
            out!("  {:<7} {:<12} {}", f.severity, f.check, f.message);
        }
    }
    let verdict = match report.worst() {
        _ if !report.quorum_answered() => "fewer than a quorum answered",
        Some(Severity::Error) => "a precondition of the guarantees is violated",
        _ => "every precondition the doctor can see holds",
    };
    out!(
        "{} of {} positions answered (quorum {}): {verdict}",
        report.answered,
        report.instances.len(),
        report.quorum
    );
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
            json!({
                "instance": row.instance,
                "reachable": row.reachable,
                "server": row.server,
                "findings": findings,
            })
        })
        .collect();
    json!({
        "quorum": report.quorum,
        "answered": report.answered,
        "healthy": report.is_healthy(),
        "instances": instances,
    })
}
