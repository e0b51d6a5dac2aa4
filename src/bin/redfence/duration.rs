//! Durations on the command line: `500ms`, `10s`, `2m`, `1h`, `1.5s`; a
//! bare number counts seconds, as in flock(1) and timeout(1).

use std::time::Duration;

/// Parses a duration argument (used as a clap value parser).
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit.trim() {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: use ms, s, m or h (e.g. 500ms, 10s, 2m)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 500ms, 10s, 2m)"))?;
    // Checked conversion: a huge number is an error, not a panic.
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("{text:?} is out of range"))
}

/// Short human form for messages: `1.5s`, `250ms`.
pub fn show(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        let s = d.as_secs_f64();
        if s.fract() == 0.0 {
            format!("{s}s")
        } else {
            format!("{s:.1}s")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any argument parses or is refused with a reason: never a panic.
        #[test]
        fn any_text_parses_or_is_refused(text in "[ -~]{0,24}") {
            let _ = parse(&text);
        }

        /// A whole number of a unit is exactly that many.
        #[test]
        fn whole_numbers_of_each_unit_are_exact(n in 0u64..1_000_000, unit in 0usize..4) {
            let (suffix, scale) = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)][unit];
            let got = parse(&format!("{n}{suffix}")).map_err(proptest::test_runner::TestCaseError::fail)?;
            proptest::prop_assert_eq!(got, Duration::from_millis(n * scale));
        }
    }

    #[test]
    fn units() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("3"), Ok(Duration::from_secs(3)));
        assert!(parse("").is_err());
        assert!(parse("10x").is_err());
        assert!(parse("-1s").is_err());
        assert!(parse("1e999s").is_err());
        assert!(parse("99999999999999999999999h").is_err());
        assert_eq!(show(Duration::from_millis(250)), "250ms");
        assert_eq!(show(Duration::from_millis(1500)), "1.5s");
        assert_eq!(show(Duration::from_secs(30)), "30s");
        assert_eq!(show(Duration::from_millis(999)), "999ms");
        assert_eq!(show(Duration::from_secs(1)), "1s");
    }
}
