//! `redfence run`: wait for the lock (or a permit, a read, a write: see
//! `held`), run the command while the lease is kept, release after the
//! command was reaped.

use std::time::{Duration, Instant};

use redfence::crossbeam_channel::{self, Receiver};
use redfence::{Cancel, LockOptions, Redlock};

use crate::child::{self, Supervision};
use crate::cli::{Common, RunArgs};
use crate::client;
use crate::duration::show;
use crate::exit::{Failure, OSERR, USAGE};
use crate::held::{Held, Kind};
use crate::log::Log;
use crate::signals::{self, Listener};

/// Longest default time between the loss signal and SIGKILL.
const MAX_DEFAULT_KILL_AFTER: Duration = Duration::from_secs(5);

pub fn run(common: &Common, args: RunArgs, log: &Log) -> Result<u8, Failure> {
    let kill_after = kill_after(&args)?;
    let kind = Kind::of(&args)?;
    // Caught from here on, so a TERM during the wait cannot leave a key
    // behind by killing us halfway through an attempt.
    let listener = Listener::start()
        .map_err(|e| Failure::new(OSERR, format!("cannot install signal handlers: {e}")))?;
    let locks =
        client::Target::from_options(common)?.client_as(common, args.identity.as_deref())?;
    let guard = acquire(&locks, kind, &args, &listener, log)?;
    log.info(&format!(
        "granted {} with token {}, valid for {}",
        guard.describe(&args.resource),
        guard.token(),
        show(guard.validity())
    ));
    let supervision = Supervision {
        guard: &guard,
        signals: listener.receiver(),
        loss_signal: args.signal,
        kill_after,
        foreground: args.foreground,
        log,
    };
    let outcome = child::run(&args, supervision);
    finish(guard, outcome, &args, log)
}

/// The explicit or default time between the loss signal and SIGKILL.
fn kill_after(args: &RunArgs) -> Result<Duration, Failure> {
    let ttl = args.ttl;
    match args.kill_after {
        None => Ok(MAX_DEFAULT_KILL_AFTER.min(ttl / 4)),
        // Extension failures start once a third of the TTL has passed; the
        // signal, the grace time and the SIGKILL must fit in what is left.
        Some(k) if k > ttl / 2 => Err(Failure::new(
            USAGE,
            format!(
                "--kill-after {} cannot fit in the lease: it must be at most half the TTL ({})",
                show(k),
                show(ttl / 2)
            ),
        )),
        Some(k) => Ok(k),
    }
}

/// Waits for the lock (permit, read, write) in one library call, so that
/// the wait keeps its place among the waiters (and a writer its mark ahead
/// of new readers); a signal that ends the wait cancels the call from a
/// watcher thread, within one instance timeout.
fn acquire(
    locks: &Redlock,
    kind: Kind,
    args: &RunArgs,
    listener: &Listener,
    log: &Log,
) -> Result<Held, Failure> {
    let wait = if args.nonblock {
        Duration::ZERO
    } else {
        args.wait
    };
    if Instant::now().checked_add(wait).is_none() {
        return Err(Failure::new(
            USAGE,
            format!("--wait {} is too long", show(wait)),
        ));
    }
    let cancel = Cancel::new();
    let mut options = LockOptions::new().ttl(args.ttl).wait(wait).cancel(&cancel);
    if let Some(hold) = args.hold_at_least {
        options = options.hold_at_least(hold);
    }
    if let Some(signal) = stop_signal(listener, Duration::ZERO, log) {
        return Err(Failure::interrupted(signal, &signals::name(signal)));
    }
    let (done, finished) = crossbeam_channel::bounded::<()>(0);
    let (result, stopped) = std::thread::scope(|s| {
        let watcher = std::thread::Builder::new()
            .name("redfence-wait-signals".to_string())
            .spawn_scoped(s, || watch_signals(listener, &finished, &cancel, log));
        // One attempt first, to say why we wait (scripts and operators
        // read that line), then the wait itself.
        let result = match kind.take(locks, &args.resource, options.wait(Duration::ZERO)) {
            Err(e) if e.is_retryable() && wait > Duration::ZERO => {
                log.info(&format!("waiting for {:?}: {e}", args.resource));
                kind.take(locks, &args.resource, options)
            }
            first => first,
        };
        drop(done);
        let stopped = watcher.ok().and_then(|w| w.join().ok()).flatten();
        (result, stopped)
    });
    if let Some(signal) = stopped {
        if let Ok(guard) = result {
            let _ = guard.release();
        }
        return Err(Failure::interrupted(signal, &signals::name(signal)));
    }
    result.map_err(|e| {
        let mut failure =
            Failure::from_lock_error(&e, args.conflict_exit_code, args.lost_exit_code);
        if let Some(message) = kind.conflict(&args.resource, &e) {
            failure.message = message;
        }
        if !matches!(e, redfence::Error::Contended { .. }) {
            return failure;
        }
        // -q: the conflict of one attempt (-n) is the expected outcome of a
        // job that runs on one machine only, said by the exit code alone
        // (cron mails every line printed). A wait that ran out is not: the
        // job did not run though it queued for it, so it is said even then.
        if wait.is_zero() {
            return failure.expected();
        }
        failure.message = format!(
            "{} after waiting {}: the job did not run (raise --wait to queue longer: \
             docs/cli.md, \"Sizing the wait\")",
            failure.message,
            show(wait)
        );
        failure
    })
}

/// Until `finished` disconnects: cancels the wait at the first signal that
/// ends it (and returns that signal), and notes the others.
fn watch_signals(
    listener: &Listener,
    finished: &Receiver<()>,
    cancel: &Cancel,
    log: &Log,
) -> Option<i32> {
    loop {
        crossbeam_channel::select! {
            recv(listener.receiver()) -> caught => {
                let signal = caught.ok()?.signal;
                if signals::stops_wait(signal) {
                    cancel.cancel();
                    return Some(signal);
                }
                log.info(&format!(
                    "{} ignored: the command has not started",
                    signals::name(signal)
                ));
            }
            recv(finished) -> _ => return None,
        }
    }
}

/// The first signal that ends the wait, received within `timeout`.
fn stop_signal(listener: &Listener, timeout: Duration, log: &Log) -> Option<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        let signal = listener.receiver().recv_deadline(deadline).ok()?.signal;
        if signals::stops_wait(signal) {
            return Some(signal);
        }
        log.info(&format!(
            "{} ignored: the command has not started",
            signals::name(signal)
        ));
    }
}

/// Releases the lock after the command was reaped, and picks the exit code.
fn finish(
    guard: Held,
    outcome: Result<child::Outcome, Failure>,
    args: &RunArgs,
    log: &Log,
) -> Result<u8, Failure> {
    let lost = args.lost_exit_code;
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(failure) => {
            // The command never ran: give the lock back before reporting.
            if let Err(e) = guard.release() {
                log.warn(&format!("release not confirmed: {e}"));
            }
            return Err(failure);
        }
    };
    match outcome {
        child::Outcome::Lost { reason } => {
            // Whatever is left of our keys goes; the lease itself is gone.
            let _ = guard.release();
            Err(Failure::new(
                lost,
                format!(
                    "lease on {:?} lost while the command ran ({reason}); the command was stopped",
                    args.resource
                ),
            ))
        }
        child::Outcome::Exited { code } => match guard.release() {
            Ok(()) => {
                log.info(&format!("released {:?}", args.resource));
                Ok(code)
            }
            Err(e @ redfence::Error::Lost { .. }) => Err(Failure::new(
                lost,
                format!("the command ended (exit {code}) but {e}: its work was not protected to the end"),
            )),
            Err(e) => {
                // The lease held until the command ended; only the early
                // release is in doubt, and the lease expires on its own.
                log.warn(&format!("release not confirmed: {e}"));
                Ok(code)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn run_args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["redfence", "run"];
        argv.extend_from_slice(extra);
        argv.extend_from_slice(&["r", "--", "true"]);
        match Cli::try_parse_from(argv).expect("parses").command {
            Command::Run(args) => args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn kill_after_defaults_to_a_quarter_of_the_ttl_up_to_5s_and_fits_in_half() {
        let secs = Duration::from_secs;
        assert_eq!(kill_after(&run_args(&[])).unwrap(), secs(5));
        assert_eq!(kill_after(&run_args(&["--ttl", "8s"])).unwrap(), secs(2));
        assert_eq!(
            kill_after(&run_args(&["--ttl", "8s", "-k", "4s"])).unwrap(),
            secs(4)
        );
        let refused = kill_after(&run_args(&["--ttl", "8s", "-k", "4001ms"])).unwrap_err();
        assert_eq!(refused.code, USAGE);
        assert!(
            refused.message.contains("half the TTL"),
            "{}",
            refused.message
        );
    }
}
