//! The command line: every flag can also be set from the environment as
//! `REDFENCE_<FLAG>` (`--servers` as `REDFENCE_SERVERS`, or its older name
//! `REDFENCE_URLS`); flags win. Switches read from the environment are off
//! when empty, `0`, `false`, `no`, `off` or `n`, on otherwise.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::FalseyValueParser;
use clap::{Args, Parser, Subcommand};
use nix::sys::signal::Signal;
use redfence::MAX_PERMITS;

use crate::{duration, exit, signals};

/// Run a command under a Redlock distributed lock, with a fencing token, and
/// inspect locks.
#[derive(Debug, Parser)]
#[command(
    name = "redfence",
    version,
    propagate_version = true,
    after_help = "Exit codes: see `redfence run --help` (and `status --help`, `ping --help`)."
)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes.
#[derive(Debug, Args)]
pub struct Common {
    /// Redis instances, comma-separated URLs (redis://[:password@]host[:port][/db],
    /// rediss://... for TLS). Also read from REDFENCE_URLS when REDFENCE_SERVERS is unset.
    #[arg(
        long,
        env = SERVERS_ENV,
        // `--help` would show the variable's value: URLs carry passwords.
        hide_env_values = true,
        value_delimiter = ',',
        value_name = "URL,...",
        global = true
    )]
    pub servers: Vec<String>,

    /// PEM file of the CA that signed the servers' certificates (rediss:// URLs), instead
    /// of the system's trusted roots.
    #[arg(
        long,
        env = "REDFENCE_TLS_CA_FILE",
        value_name = "FILE",
        global = true,
        help_heading = "TLS (rediss:// URLs)"
    )]
    pub tls_ca_file: Option<PathBuf>,

    /// PEM file of the client certificate, for servers that require one
    /// (with --tls-key-file).
    #[arg(
        long,
        env = "REDFENCE_TLS_CERT_FILE",
        value_name = "FILE",
        global = true,
        help_heading = "TLS (rediss:// URLs)"
    )]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM file of the client certificate's private key (with --tls-cert-file).
    #[arg(
        long,
        env = "REDFENCE_TLS_KEY_FILE",
        value_name = "FILE",
        global = true,
        help_heading = "TLS (rediss:// URLs)"
    )]
    pub tls_key_file: Option<PathBuf>,

    /// Accept an even number of instances (it tolerates no more failures than one fewer).
    #[arg(long, env = "REDFENCE_ALLOW_EVEN_INSTANCES", value_parser = FalseyValueParser::new(), global = true)]
    pub allow_even_instances: bool,

    /// Prefix of the lock's keys; must match the library clients that share the lock.
    #[arg(
        long,
        env = "REDFENCE_PREFIX",
        default_value = "redfence:",
        global = true
    )]
    pub prefix: String,

    /// Longest wait for one instance's answer.
    #[arg(
        long,
        env = "REDFENCE_INSTANCE_TIMEOUT",
        default_value = "50ms",
        value_parser = duration::parse,
        value_name = "DURATION",
        global = true
    )]
    pub instance_timeout: Duration,

    /// Progress on stderr: waiting, granted (with the token), extended, lost.
    #[arg(short, long, env = "REDFENCE_VERBOSE", value_parser = FalseyValueParser::new(), global = true)]
    pub verbose: bool,

    /// Nothing on stderr but errors.
    #[arg(short, long, env = "REDFENCE_QUIET", value_parser = FalseyValueParser::new(), global = true)]
    pub quiet: bool,
}

/// The environment variable of `--servers`.
pub const SERVERS_ENV: &str = "REDFENCE_SERVERS";
/// Its older name, read when `REDFENCE_SERVERS` is unset.
pub const SERVERS_ENV_ALIAS: &str = "REDFENCE_URLS";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Wait for the lock (or a semaphore's permit, or a read or write of a
    /// reader-writer lock), run the command while holding it, release it.
    #[command(after_help = exit::run_table())]
    Run(RunArgs),
    /// Show the lock and fence counter of a resource on each instance, and
    /// the holders of the semaphore or reader-writer lock of that name.
    #[command(after_help = exit::inspect_table())]
    Status(StatusArgs),
    /// Show each instance's round trip or error.
    #[command(after_help = exit::inspect_table())]
    Ping(PingArgs),
    /// Check each instance against the deployment the guarantees assume.
    #[command(after_help = exit::doctor_table())]
    Doctor(DoctorArgs),
    /// Delete a resource's lock on every instance, whoever holds it; its
    /// fence counter stays. Only for a holder that is gone.
    #[command(after_help = exit::unlock_table())]
    Unlock(UnlockArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// How long to wait for the lock.
    #[arg(short, long, env = "REDFENCE_WAIT", default_value = "10s", value_parser = duration::parse, value_name = "DURATION")]
    pub wait: Duration,

    /// Make exactly one attempt (overrides --wait).
    #[arg(short, long, env = "REDFENCE_NONBLOCK", value_parser = FalseyValueParser::new())]
    pub nonblock: bool,

    /// Lease length; extended while the command runs.
    #[arg(long, env = "REDFENCE_TTL", default_value = "30s", value_parser = duration::parse, value_name = "DURATION")]
    pub ttl: Duration,

    /// Exit code when the lock stayed held elsewhere (EX_TEMPFAIL by default).
    #[arg(
        short = 'E',
        long,
        env = "REDFENCE_CONFLICT_EXIT_CODE",
        default_value_t = exit::CONFLICT,
        value_name = "N"
    )]
    pub conflict_exit_code: u8,

    /// Signal sent to the command's process group when the lease is lost.
    #[arg(short, long, env = "REDFENCE_SIGNAL", default_value = "TERM", value_parser = signals::parse, value_name = "SIG")]
    pub signal: Signal,

    /// Time between that signal and SIGKILL [default: 5s or TTL/4, whichever is shorter; at most TTL/2].
    #[arg(short, long, env = "REDFENCE_KILL_AFTER", value_parser = duration::parse, value_name = "DURATION")]
    pub kill_after: Option<Duration>,

    /// Exit code when the lease was lost while the command ran.
    #[arg(
        long,
        env = "REDFENCE_LOST_EXIT_CODE",
        default_value_t = exit::LOST,
        value_name = "N"
    )]
    pub lost_exit_code: u8,

    /// Keep the command in redfence's process group (for interactive programs);
    /// signals then go to the command alone, not to its descendants.
    #[arg(long, env = "REDFENCE_FOREGROUND", value_parser = FalseyValueParser::new())]
    pub foreground: bool,

    /// Keep the lock at least this long after the grant, even when the command
    /// ends sooner: a job started on several machines runs once. Locks only.
    #[arg(long, env = "REDFENCE_HOLD_AT_LEAST", value_parser = duration::parse, value_name = "DURATION")]
    pub hold_at_least: Option<Duration>,

    /// The name other clients see as the holder (status, conflicts) [default: hostname:pid].
    #[arg(long, env = "REDFENCE_IDENTITY", value_name = "NAME")]
    pub identity: Option<String>,

    /// Take one of N permits of the semaphore RESOURCE instead of the lock
    /// (the command gets its slot, 0 to N-1, as REDFENCE_SLOT). Every caller
    /// of a semaphore must give the same N.
    #[arg(
        long,
        env = "REDFENCE_PERMITS",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PERMITS))
    )]
    pub permits: Option<u32>,

    /// Wait for the lock in line: callers are granted in the order they
    /// asked, a waiter that dies is skipped within a heartbeat (1 s).
    #[arg(long, env = "REDFENCE_FAIR", value_parser = FalseyValueParser::new())]
    pub fair: bool,

    /// Read under the reader-writer lock RESOURCE instead of the lock: shared
    /// with other readers, never with a writer.
    #[arg(long, env = "REDFENCE_READ", value_parser = FalseyValueParser::new())]
    pub read: bool,

    /// Write under the reader-writer lock RESOURCE instead of the lock: alone,
    /// after the readers; readers that come meanwhile wait behind it.
    #[arg(long, env = "REDFENCE_WRITE", value_parser = FalseyValueParser::new())]
    pub write: bool,

    /// The resource to lock (the semaphore with --permits, the reader-writer
    /// lock with --read or --write: three separate names).
    pub resource: String,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The resource to inspect (its lock, and its semaphore and reader-writer
    /// lock where they exist).
    pub resource: String,

    /// Print JSON on stdout.
    #[arg(long, env = "REDFENCE_JSON", value_parser = FalseyValueParser::new())]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print JSON on stdout.
    #[arg(long, env = "REDFENCE_JSON", value_parser = FalseyValueParser::new())]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct UnlockArgs {
    /// Unlock the semaphore RESOURCE of N permits instead of the lock:
    /// every slot held on a quorum.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PERMITS))
    )]
    pub permits: Option<u32>,

    /// Unlock the reader-writer lock RESOURCE instead of the lock: its
    /// writer and every reader.
    #[arg(long, conflicts_with = "permits")]
    pub rw: bool,

    /// With --permits N: then make N the semaphore's count, on every
    /// instance where no slot is held (a changed count, or records split
    /// by callers that raced with different counts).
    #[arg(long, requires = "permits")]
    pub recount: bool,

    /// The resource whose holder to revoke (the semaphore with --permits,
    /// the reader-writer lock with --rw).
    pub resource: String,
}

#[derive(Debug, Args)]
pub struct PingArgs {
    /// Print JSON on stdout.
    #[arg(long, env = "REDFENCE_JSON", value_parser = FalseyValueParser::new())]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
