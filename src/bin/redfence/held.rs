//! What `run` takes and holds while the command runs: the lock, one
//! permit of a semaphore (`--permits N`), or a read or a write of a
//! reader-writer lock (`--read`, `--write`). Each is held, kept alive and
//! released the same way; only how it is taken and what the command is
//! told differ.

use std::time::Duration;

use redfence::crossbeam_channel::Receiver;
use redfence::{
    Error, FencingToken, LockGuard, LockOptions, LossReason, Permit, ReadGuard, Redlock, WriteGuard,
};

use crate::cli::RunArgs;
use crate::exit::{Failure, USAGE};

/// The variable that tells the command which slot of the semaphore it
/// holds; removed from the command's environment when it holds none.
pub const SLOT_ENV: &str = "REDFENCE_SLOT";

/// What `run` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Lock,
    /// The lock, waiting in line (`Redlock::fair_lock`).
    Fair,
    /// A permit of a semaphore with this many permits.
    Permit(u32),
    Read,
    Write,
}

impl Kind {
    /// The kind the flags ask for; combinations that cannot work are
    /// refused before anything is sent.
    pub fn of(args: &RunArgs) -> Result<Kind, Failure> {
        let kind = match (args.permits, args.read, args.write, args.fair) {
            (None, false, false, false) => Kind::Lock,
            (None, false, false, true) => Kind::Fair,
            (Some(n), false, false, false) => Kind::Permit(n),
            (None, true, false, false) => Kind::Read,
            (None, false, true, false) => Kind::Write,
            _ => {
                return Err(Failure::new(
                    USAGE,
                    "--fair, --permits, --read and --write exclude each other",
                ))
            }
        };
        if !matches!(kind, Kind::Lock | Kind::Fair) && args.hold_at_least.is_some() {
            return Err(Failure::new(
                USAGE,
                format!(
                    "--hold-at-least applies to locks, not to {}",
                    match kind {
                        Kind::Permit(_) => "semaphores (--permits)",
                        _ => "reader-writer locks (--read, --write)",
                    }
                ),
            ));
        }
        Ok(kind)
    }

    /// One lock call for `resource`.
    pub fn take(
        self,
        locks: &Redlock,
        resource: &str,
        options: LockOptions,
    ) -> Result<Held, Error> {
        Ok(match self {
            Kind::Lock => Held::Lock(locks.lock_with(resource, options)?),
            Kind::Fair => Held::Lock(locks.fair_lock(resource).lock_with(options)?),
            Kind::Permit(n) => Held::Permit(locks.semaphore(resource, n).acquire_with(options)?),
            Kind::Read => Held::Read(locks.rw_lock(resource).read_with(options)?),
            Kind::Write => Held::Write(locks.rw_lock(resource).write_with(options)?),
        })
    }

    /// A refusal in this kind's terms: the library speaks of a lock held
    /// by someone, which is not how a full semaphore or a queued reader
    /// reads.
    pub fn conflict(self, resource: &str, err: &Error) -> Option<String> {
        let Error::Contended {
            attempts, holder, ..
        } = err
        else {
            return None;
        };
        let attempts = format!("({attempts} attempt(s))");
        let one = |h: &String| format!(" (one holder: {h:?})");
        Some(match (self, holder) {
            (Kind::Lock, _) => return None,
            (Kind::Fair, holder) => format!(
                "fair lock {resource:?} is held{}, or others wait for it {attempts}",
                holder
                    .as_ref()
                    .map_or(String::new(), |h| format!(" by {h:?}"))
            ),
            (Kind::Permit(1), holder) => format!(
                "the only permit of {resource:?} is held{} {attempts}",
                holder
                    .as_ref()
                    .map_or(String::new(), |h| format!(" by {h:?}"))
            ),
            (Kind::Permit(n), holder) => format!(
                "all {n} permits of {resource:?} are held{} {attempts}",
                holder.as_ref().map_or(String::new(), one)
            ),
            (Kind::Read, Some(h)) => {
                format!("reader-writer lock {resource:?} is written by {h:?} {attempts}")
            }
            (Kind::Read, None) => format!(
                "reader-writer lock {resource:?} is written, or a writer waits for it {attempts}"
            ),
            (Kind::Write, holder) => format!(
                "reader-writer lock {resource:?} is read or written{} {attempts}",
                holder.as_ref().map_or(String::new(), one)
            ),
        })
    }
}

/// A granted lock, permit, read or write.
pub enum Held {
    Lock(LockGuard),
    Permit(Permit),
    Read(ReadGuard),
    Write(WriteGuard),
}

/// `$body` with `$guard` bound to the guard, whichever it is: the guards
/// share these methods, not a trait.
macro_rules! each {
    ($held:expr, $guard:ident => $body:expr) => {
        match $held {
            Held::Lock($guard) => $body,
            Held::Permit($guard) => $body,
            Held::Read($guard) => $body,
            Held::Write($guard) => $body,
        }
    };
}

impl Held {
    pub fn token(&self) -> FencingToken {
        each!(self, g => g.token())
    }

    pub fn validity(&self) -> Duration {
        each!(self, g => g.validity())
    }

    pub fn ensure_held(&self) -> Result<(), Error> {
        each!(self, g => g.ensure_held())
    }

    pub fn loss_signal(&self) -> Receiver<LossReason> {
        each!(self, g => g.loss_signal())
    }

    pub fn release(self) -> Result<(), Error> {
        each!(self, g => g.release())
    }

    /// The semaphore slot held, for a permit.
    pub fn slot(&self) -> Option<u32> {
        match self {
            Held::Permit(permit) => Some(permit.slot()),
            _ => None,
        }
    }

    /// What was granted, for progress messages: `"jobs"`, `slot 1 of
    /// "jobs"`, `a read of "doc"`.
    pub fn describe(&self, resource: &str) -> String {
        match self {
            Held::Lock(_) => format!("{resource:?}"),
            Held::Permit(p) => format!("slot {} of {resource:?}", p.slot()),
            Held::Read(_) => format!("a read of {resource:?}"),
            Held::Write(_) => format!("a write of {resource:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn kind(extra: &[&str]) -> Result<Kind, Failure> {
        let mut argv = vec!["redfence", "run"];
        argv.extend_from_slice(extra);
        argv.extend_from_slice(&["r", "--", "true"]);
        match Cli::try_parse_from(argv).expect("parses").command {
            Command::Run(args) => Kind::of(&args),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn flags_pick_one_kind_and_holds_are_for_locks() {
        assert_eq!(kind(&[]).unwrap(), Kind::Lock);
        assert_eq!(kind(&["--permits", "3"]).unwrap(), Kind::Permit(3));
        assert_eq!(kind(&["--read"]).unwrap(), Kind::Read);
        assert_eq!(kind(&["--fair"]).unwrap(), Kind::Fair);
        assert!(kind(&["--fair", "--read"]).is_err());
        assert_eq!(kind(&["--write"]).unwrap(), Kind::Write);
        assert_eq!(
            kind(&["--hold-at-least", "1m"]).unwrap(),
            Kind::Lock,
            "a lock may be held"
        );
        for refused in [
            &["--read", "--write"][..],
            &["--permits", "2", "--read"],
            &["--permits", "2", "--write"],
            &["--permits", "2", "--hold-at-least", "1m"],
            &["--read", "--hold-at-least", "1m"],
            &["--write", "--hold-at-least", "1m"],
        ] {
            let failure = kind(refused).unwrap_err();
            assert_eq!(failure.code, USAGE, "{refused:?}");
        }
        let held = kind(&["--permits", "2", "--hold-at-least", "1m"]).unwrap_err();
        assert!(held.message.contains("semaphores"), "{}", held.message);
    }

    #[test]
    fn permit_counts_outside_1_to_max_do_not_parse() {
        for bad in ["0", "-1", "1025", "two"] {
            let argv = ["redfence", "run", "--permits", bad, "r", "--", "true"];
            assert!(Cli::try_parse_from(argv).is_err(), "{bad}");
        }
        let max = redfence::MAX_PERMITS.to_string();
        let argv = [
            "redfence",
            "run",
            "--permits",
            max.as_str(),
            "r",
            "--",
            "true",
        ];
        assert!(Cli::try_parse_from(argv).is_ok());
    }

    #[test]
    fn conflicts_speak_of_permits_reads_and_writes() {
        let contended = Error::Contended {
            resource: "jobs".to_string(),
            attempts: 2,
            holder: Some("web-1".to_string()),
        };
        assert_eq!(Kind::Lock.conflict("jobs", &contended), None);
        let said = |kind: Kind| kind.conflict("jobs", &contended).unwrap();
        assert_eq!(
            said(Kind::Permit(2)),
            "all 2 permits of \"jobs\" are held (one holder: \"web-1\") (2 attempt(s))"
        );
        assert_eq!(
            said(Kind::Permit(1)),
            "the only permit of \"jobs\" is held by \"web-1\" (2 attempt(s))"
        );
        assert_eq!(
            said(Kind::Read),
            "reader-writer lock \"jobs\" is written by \"web-1\" (2 attempt(s))"
        );
        assert_eq!(
            said(Kind::Write),
            "reader-writer lock \"jobs\" is read or written (one holder: \"web-1\") (2 attempt(s))"
        );
        let anonymous = Error::Contended {
            resource: "jobs".to_string(),
            attempts: 1,
            holder: None,
        };
        assert_eq!(
            Kind::Permit(3).conflict("jobs", &anonymous).unwrap(),
            "all 3 permits of \"jobs\" are held (1 attempt(s))"
        );
        assert!(Kind::Read
            .conflict("jobs", &anonymous)
            .unwrap()
            .contains("or a writer waits for it"));
        let other = Error::InvalidOptions {
            reason: "x".to_string(),
        };
        assert_eq!(Kind::Permit(2).conflict("jobs", &other), None);
    }
}
