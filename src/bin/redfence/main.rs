//! `redfence`: run a command under a Redlock distributed lock, with its
//! fencing token in the environment, stopped before its lease can run out;
//! inspect locks (`status`) and instances (`ping`), check the deployment
//! (`doctor`); delete a lock whose holder is gone (`unlock`).
//!
//! Built with `--features cli`. The README's "Command line" section is the
//! user's manual: exit codes, environment, what happens on loss.

/// `println!` that ignores a closed stdout (`redfence status | head -1`)
/// instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod child;
mod cli;
mod client;
mod doctor;
mod duration;
mod exit;
mod held;
mod log;
mod ping;
mod run;
mod signals;
mod status;
mod unlock;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;

use crate::cli::{Cli, Command};
use crate::log::Log;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help and version are answers; every other parse error is a
            // usage error, EX_USAGE rather than clap's 2.
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => exit::USAGE,
            };
            return ExitCode::from(code);
        }
    };
    let log = Log::new(cli.common.verbose, cli.common.quiet);
    let result = match cli.command {
        Command::Run(args) => run::run(&cli.common, args, &log),
        Command::Status(args) => status::status(&cli.common, &args),
        Command::Ping(args) => ping::ping(&cli.common, &args),
        Command::Unlock(args) => unlock::unlock(&cli.common, &args),
        Command::Doctor(args) => doctor::doctor(&cli.common, &args),
    };
    ExitCode::from(match result {
        Ok(code) => code,
        Err(failure) => {
            // -q: an expected outcome (a conflict) is said by the exit
            // code alone; cron mails every line printed.
            if !(failure.expected && cli.common.quiet) {
                log.error(&failure.message);
            }
            failure.code
        }
    })
}
