//! Messages on stderr: errors always, warnings unless `-q`, progress with `-v`.

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
        eprintln!("redfence: error: {message}");
    }

    /// Something the user should know that is not (yet) a failure.
    pub fn warn(&self, message: &str) {
        if !self.quiet {
            eprintln!("redfence: {message}");
        }
    }

    /// Progress, with `-v` only.
    pub fn info(&self, message: &str) {
        if self.verbose && !self.quiet {
            eprintln!("redfence: {message}");
        }
    }
}
