//! Exit codes (sysexits.h where one fits) and the failure that carries one.

use redfence::Error;

/// Bad arguments (EX_USAGE).
pub const USAGE: u8 = 64;
/// Too few instances answered (EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
/// The system refused something we need: threads, signal handlers (EX_OSERR).
pub const OSERR: u8 = 71;
/// Bad URL or configuration (EX_CONFIG).
pub const CONFIG: u8 = 78;
/// The command was found but could not be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND: u8 = 127;

/// Why the program stops early: an exit code and one line for stderr.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
    /// An outcome the caller expects (a conflict): not printed with `-q`.
    pub expected: bool,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            expected: false,
        }
    }

    /// Marks an outcome the caller expects, which `-q` keeps quiet.
    pub fn expected(mut self) -> Self {
        self.expected = true;
        self
    }

    /// A library error, with the exit code its situation calls for.
    /// `conflict` is the code for a lock held elsewhere.
    pub fn from_lock_error(err: &Error, conflict: u8, lost: u8) -> Self {
        let code = match err {
            Error::Contended { .. } => conflict,
            Error::Unavailable { .. } | Error::NoValidity { .. } => UNAVAILABLE,
            Error::Lost { .. } => lost,
            Error::InvalidResource { .. } | Error::InvalidOptions { .. } => USAGE,
            // Foreign values in our keys: another program uses the prefix.
            Error::WrongType { .. } | Error::InvalidConfig { .. } => CONFIG,
            _ => UNAVAILABLE,
        };
        // The library's messages name instances as host:port/db, never
        // with credentials.
        Failure::new(code, err.to_string())
    }

    /// The wait for the lock was ended by signal `signal`.
    pub fn interrupted(signal: i32, name: &str) -> Self {
        Failure::new(
            signal_code(signal),
            format!("{name} received while waiting for the lock; the command was not run"),
        )
    }
}

/// 128 + n, the shell's code for "ended by signal n".
pub fn signal_code(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(255)
}
