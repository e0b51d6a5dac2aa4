//! Exit codes (sysexits.h where one fits) and the failure that carries one.

use redfence::Error;

/// Bad arguments (EX_USAGE).
pub const USAGE: u8 = 64;
/// Too few instances answered (EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
/// The system refused something we need: threads, signal handlers (EX_OSERR).
pub const OSERR: u8 = 71;
/// The lock stayed held elsewhere, by default (EX_TEMPFAIL;
/// `--conflict-exit-code`).
pub const CONFLICT: u8 = 75;
/// Bad URL or configuration (EX_CONFIG).
pub const CONFIG: u8 = 78;
/// The lease was lost while the command ran, by default (as timeout(1);
/// `--lost-exit-code`).
pub const LOST: u8 = 124;
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
            // Wrong credentials or a missing permission on a quorum.
            Error::AccessDenied { .. } => CONFIG,
            _ => UNAVAILABLE,
        };
        // The library's messages name instances as host:port/db, never
        // with credentials.
        Failure::new(code, cli_terms(&err.to_string()))
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

/// The exit codes of `run`, for its `--help`.
pub fn run_table() -> String {
    format!(
        "Exit codes:
  N      the command's own exit code, once it ended with the lease held
         (128+n if signal n ended it)
  {USAGE:<6} bad arguments, or a --permits count other than the semaphore's (EX_USAGE)
  {UNAVAILABLE:<6} too few instances answered, or no validity was left (EX_UNAVAILABLE)
  {OSERR:<6} the system refused a thread or a signal handler (EX_OSERR)
  {CONFLICT:<6} the lock (with --permits: every permit) stayed held elsewhere
         (EX_TEMPFAIL; --conflict-exit-code)
  {CONFIG:<6} bad URL, TLS file or setting; credentials or ACL refused by a quorum;
         foreign values in the lock's keys (EX_CONFIG)
  {LOST:<6} the lease was lost while the command ran: it was stopped (--lost-exit-code)
  {CANNOT_EXECUTE:<6} the command was found but could not be executed
  {NOT_FOUND:<6} the command was not found
  128+n  signal n arrived while waiting for the lock (the command was not run)"
    )
}

/// The exit codes of `status` and `ping`, for their `--help`.
pub fn inspect_table() -> String {
    format!(
        "Exit codes:
  0      a quorum of instances answered
  {USAGE:<6} bad arguments (EX_USAGE)
  {UNAVAILABLE:<6} fewer than a quorum of instances answered (EX_UNAVAILABLE)
  {CONFIG:<6} bad URL, TLS file or setting (EX_CONFIG)"
    )
}

/// The exit codes of `doctor`, for its `--help`.
pub fn doctor_table() -> String {
    format!(
        "Exit codes:
  0      every precondition the doctor can see holds (notices and warnings allowed)
  {USAGE:<6} bad arguments (EX_USAGE)
  {UNAVAILABLE:<6} fewer than a quorum of instances answered (EX_UNAVAILABLE)
  {CONFIG:<6} a precondition is violated, or a bad URL, TLS file or setting (EX_CONFIG)"
    )
}

/// The exit codes of `unlock`, for its `--help`.
pub fn unlock_table() -> String {
    format!(
        "Exit codes:
  0      a quorum of instances confirmed the delete
  {USAGE:<6} bad arguments (EX_USAGE)
  {UNAVAILABLE:<6} fewer than a quorum of instances confirmed it (EX_UNAVAILABLE)
  {CONFIG:<6} bad URL, TLS file or setting; foreign values in the lock's key (EX_CONFIG)"
    )
}

/// A library message in the command line's terms: the flags to use
/// instead of the builder calls it names.
pub fn cli_terms(message: &str) -> String {
    const TERMS: [(&str, &str); 10] = [
        (
            "the client certificate and key given to tls_certificates (client_tls)",
            "the client certificate and key (--tls-cert-file, --tls-key-file)",
        ),
        (
            "the client certificate given to tls_certificates (client_tls)",
            "the client certificate (--tls-cert-file)",
        ),
        (
            "the client key given to tls_certificates (client_tls)",
            "the client key (--tls-key-file)",
        ),
        (
            "the CA certificate given to tls_certificates (root_cert)",
            "the CA certificate (--tls-ca-file)",
        ),
        (
            "tls_certificates (root_cert), or install it in the trust store",
            "--tls-ca-file (REDFENCE_TLS_CA_FILE)",
        ),
        (
            "tls_certificates (root_cert)",
            "--tls-ca-file (REDFENCE_TLS_CA_FILE)",
        ),
        (
            "tls_certificates (client_tls)",
            "--tls-cert-file and --tls-key-file",
        ),
        (
            "tls_certificates",
            "--tls-ca-file, --tls-cert-file or --tls-key-file",
        ),
        ("allow_even_instances(true)", "--allow-even-instances"),
        ("instance_timeout", "--instance-timeout"),
    ];
    TERMS
        .iter()
        .fold(message.to_string(), |text, (library, cli)| {
            text.replace(library, cli)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_calls_become_flags() {
        let untrusted = "TLS: the server's certificate is not trusted (unknown issuer): give the \
             CA that signed it to tls_certificates (root_cert), or install it in the trust store";
        let text = cli_terms(untrusted);
        assert!(
            text.contains("give the CA that signed it to --tls-ca-file"),
            "{text}"
        );
        assert!(!text.contains("tls_certificates"), "{text}");
        let client = cli_terms("give one to tls_certificates (client_tls), signed by a CA");
        assert!(
            client.contains("--tls-cert-file and --tls-key-file"),
            "{client}"
        );
        let key =
            cli_terms("the client key given to tls_certificates (client_tls) is not valid PEM");
        assert_eq!(key, "the client key (--tls-key-file) is not valid PEM");
        let even = cli_terms("use an odd number, or allow_even_instances(true)");
        assert!(even.ends_with("--allow-even-instances"), "{even}");
    }

    #[test]
    fn tables_list_every_code() {
        let run = run_table();
        for code in [
            USAGE,
            UNAVAILABLE,
            OSERR,
            CONFLICT,
            CONFIG,
            LOST,
            CANNOT_EXECUTE,
            NOT_FOUND,
        ] {
            assert!(run.contains(&format!("  {code} ")), "{code}: {run}");
        }
        assert!(inspect_table().contains(&format!("  {UNAVAILABLE} ")));
    }
}
