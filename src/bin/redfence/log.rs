//! Messages on stderr: errors always, warnings unless `-q`, progress with `-v`
//! (each progress line stamped with the UTC time, for cron logs).

use std::io::Write;

/// Where and how much to say.
#[derive(Debug, Clone, Copy)]
pub struct Log {
    verbose: bool,
    quiet: bool,
}

impl Log {
    pub fn new(verbose: bool, quiet: bool) -> Self {
        Log { verbose, quiet }
    }

    /// One line, whatever the verbosity.
    pub fn error(&self, message: &str) {
        line(&format!("redfence: error: {message}"));
    }

    /// Something the user should know that is not (yet) a failure.
    pub fn warn(&self, message: &str) {
        if !self.quiet {
            line(&format!("redfence: {message}"));
        }
    }

    /// Progress, with `-v` only, after the time it happened.
    pub fn info(&self, message: &str) {
        if self.verbose && !self.quiet {
            line(&format!("{} redfence: {message}", utc_now()));
        }
    }
}

/// One line on stderr; a closed or broken stderr is no reason to panic.
fn line(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// Now, as `2026-11-27T04:20:31.123Z`.
fn utc_now() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    utc(since.as_secs(), since.subsec_millis())
}

/// `secs` since 1970 as a UTC date and time (the civil calendar from a day
/// count, as in Howard Hinnant's `civil_from_days`).
fn utc(secs: u64, millis: u32) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_dates() {
        assert_eq!(utc(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400, 7), "2000-02-29T00:00:00.007Z");
        assert_eq!(utc(1_795_753_231, 123), "2026-11-27T04:20:31.123Z");
        assert_eq!(utc(4_107_542_399, 999), "2100-02-28T23:59:59.999Z");
    }
}
