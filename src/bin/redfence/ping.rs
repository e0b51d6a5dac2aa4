//! `redfence ping`: each instance's round trip or error, and its clock's
//! offset from the others'.

use std::time::Duration;

use redfence::{ClockOffset, MAX_CLOCK_OFFSET};
use serde_json::{json, Value};

use crate::cli::{Common, PingArgs};
use crate::client;
use crate::exit::{Failure, UNAVAILABLE};

pub fn ping(common: &Common, args: &PingArgs) -> Result<u8, Failure> {
    let locks = client::Target::from_options(common)?.client(common)?;
    // The first round opens the connections; the second measures the
    // round trip alone.
    let _ = locks.ping();
    let results = locks.ping();
    let clocks = locks.clock_offsets();
    let quorum = locks.quorum();
    // A cluster position answers when every shard master it knows did;
    // the exit status counts positions, as the quorum does.
    let mut positions: Vec<(String, bool)> = Vec::new();
    for (row, (name, result)) in results.iter().enumerate() {
        let position = client::ping_position(row, name);
        match positions.iter_mut().find(|(p, _)| *p == position) {
            Some((_, ok)) => *ok &= result.is_ok(),
            None => positions.push((position, result.is_ok())),
        }
    }
    let answered = positions.iter().filter(|(_, ok)| *ok).count();
    let offset_of = |name: &str| clock_offset(&clocks, name).map(|o| o.micros() as f64 / 1000.0);
    let uncertainty_of = |name: &str| clock_offset(&clocks, name).map(|o| millis(o.uncertainty()));
    if args.json {
        let list: Vec<Value> = results
            .iter()
            .map(|(name, result)| match result {
                Ok(rtt) => json!({
                    "instance": name,
                    "ok": true,
                    "rtt_ms": millis(*rtt),
                    "clock_offset_ms": offset_of(name),
                    "clock_uncertainty_ms": uncertainty_of(name),
                    "error": null,
                }),
                Err(e) => json!({
                    "instance": name,
                    "ok": false,
                    "rtt_ms": null,
                    "clock_offset_ms": offset_of(name),
                    "clock_uncertainty_ms": uncertainty_of(name),
                    "error": client::show_error(e),
                }),
            })
            .collect();
        let doc = json!({
            "quorum": quorum,
            "answered": answered,
            "instances": list,
        });
        out!("{doc}");
    } else {
        for (name, result) in &results {
            let clock = match (offset_of(name), uncertainty_of(name)) {
                (Some(ms), Some(within)) => format!(", clock {ms:+.1} ms (± {within:.1})"),
                _ => String::new(),
            };
            match result {
                Ok(rtt) => out!("{name:<24} ok {:.3} ms{clock}", millis(*rtt)),
                Err(e) => out!("{name:<24} error: {}", client::show_error(e)),
            }
        }
        for (name, offset) in &clocks {
            if let Some(offset) = offset.filter(|o| !o.is_within(MAX_CLOCK_OFFSET)) {
                out!(
                    "warning: {name}'s clock is {:+.3} s off the others' (fencing tokens assume at \
                     most {} s)",
                    offset.as_secs_f64(),
                    MAX_CLOCK_OFFSET.as_secs_f64()
                );
            }
        }
        out!(
            "{answered} of {} instances answered (quorum {quorum})",
            positions.len()
        );
    }
    Ok(if answered >= quorum { 0 } else { UNAVAILABLE })
}

/// The clock offset of a ping row's instance, in milliseconds: the row of
/// a standalone instance has its name; `cluster #i shard …` rows share
/// their position's clock.
fn clock_offset(clocks: &[(String, Option<ClockOffset>)], row: &str) -> Option<ClockOffset> {
    let position = match row.strip_prefix("cluster #") {
        Some(rest) => rest.split(' ').next()?.parse::<usize>().ok()?,
        None => clocks.iter().position(|(name, _)| name == row)?,
    };
    clocks.get(position)?.1
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
