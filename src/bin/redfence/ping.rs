//! `redfence ping`: each instance's round trip or error.

use std::time::Duration;

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
    if args.json {
        let list: Vec<Value> = results
            .iter()
            .map(|(name, result)| match result {
                Ok(rtt) => json!({
                    "instance": name,
                    "ok": true,
                    "rtt_ms": millis(*rtt),
                    "error": null,
                }),
                Err(e) => json!({
                    "instance": name,
                    "ok": false,
                    "rtt_ms": null,
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
            match result {
                Ok(rtt) => out!("{name:<24} ok {:.3} ms", millis(*rtt)),
                Err(e) => out!("{name:<24} error: {}", client::show_error(e)),
            }
        }
        out!(
            "{answered} of {} instances answered (quorum {quorum})",
            positions.len()
        );
    }
    Ok(if answered >= quorum { 0 } else { UNAVAILABLE })
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
