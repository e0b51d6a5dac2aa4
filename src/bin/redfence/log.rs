//! Messages on stderr: errors always, warnings unless `-q`, progress with `-v`.

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

    /// Progress, with `-v` only.
    pub fn info(&self, message: &str) {
        if self.verbose && !self.quiet {
            line(&format!("redfence: {message}"));
        }
    }
}

/// One line on stderr; a closed or broken stderr is no reason to panic.
fn line(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}
