//! The command under the lock: started in its own process group, signals
//! forwarded to it, stopped before the lease can run out.

use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use redfence::crossbeam_channel::{self, select, Receiver};

use crate::cli::RunArgs;
use crate::duration::show;
use crate::exit::{signal_code, Failure, CANNOT_EXECUTE, NOT_FOUND, OSERR};
use crate::held::{Held, SLOT_ENV};
use crate::log::Log;
use crate::signals::{self, Caught};

/// Longest sleep of the supervision loop, so extensions are noticed (and
/// logged) and the validity is checked even if no event comes.
const POLL: Duration = Duration::from_millis(250);
/// How long to wait for the kernel to reap a SIGKILLed command. Only a
/// process stuck in an uninterruptible state takes longer.
const REAP_AFTER_KILL: Duration = Duration::from_secs(10);

/// What `run` hands over to the supervision.
pub struct Supervision<'a> {
    pub guard: &'a Held,
    pub signals: &'a Receiver<Caught>,
    pub loss_signal: Signal,
    pub kill_after: Duration,
    pub foreground: bool,
    pub log: &'a Log,
}

/// How the command's run ended.
#[derive(Debug)]
pub enum Outcome {
    /// It ended on its own (or of a forwarded signal): its exit code, or
    /// 128 + n for signal n.
    Exited { code: u8 },
    /// The lease was lost (or about to run out); the command was stopped.
    Lost { reason: String },
}

/// Starts the command and supervises it until it was reaped.
pub fn run(args: &RunArgs, sup: Supervision<'_>) -> Result<Outcome, Failure> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::new(crate::exit::USAGE, "no command given after --"))?;
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("REDFENCE_TOKEN", sup.guard.token().get().to_string())
        .env("REDFENCE_RESOURCE", &args.resource);
    // An outer run's slot would not go with this run's token.
    match sup.guard.slot() {
        Some(slot) => command.env(SLOT_ENV, slot.to_string()),
        None => command.env_remove(SLOT_ENV),
    };
    if !sup.foreground {
        // Its own group, so a signal reaches its descendants too.
        command.process_group(0);
    }
    let mut child = command.spawn().map_err(|e| {
        let code = if e.kind() == io::ErrorKind::NotFound {
            NOT_FOUND
        } else {
            CANNOT_EXECUTE
        };
        Failure::new(
            code,
            format!("cannot run {}: {e}", program.to_string_lossy()),
        )
    })?;
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let target = Target {
        pid,
        group: !sup.foreground,
    };
    let (exit_tx, exit_rx) = crossbeam_channel::bounded(1);
    let reaper = std::thread::Builder::new()
        .name("redfence-reaper".to_string())
        .spawn(move || {
            let _ = exit_tx.send(child.wait());
        });
    if let Err(e) = reaper {
        // Without the reaper nobody would notice the end: stop the command.
        target.send(Signal::SIGKILL);
        return Err(Failure::new(OSERR, format!("cannot start a thread: {e}")));
    }
    sup.log.info(&format!("started the command, pid {pid}"));
    Ok(supervise(&sup, target, &exit_rx))
}

/// Where signals for the command go: its process group, or with
/// `--foreground` the command alone.
#[derive(Debug, Clone, Copy)]
struct Target {
    pid: Pid,
    group: bool,
}

impl Target {
    fn send(self, signal: Signal) {
        // ESRCH (already gone) is the only expected failure, and harmless.
        let _ = if self.group {
            killpg(self.pid, signal)
        } else {
            kill(self.pid, signal)
        };
    }
}

fn supervise(
    sup: &Supervision<'_>,
    target: Target,
    exit_rx: &Receiver<io::Result<ExitStatus>>,
) -> Outcome {
    let guard = sup.guard;
    let lost = guard.loss_signal();
    let mut lost_open = true;
    let ttl_margin = margin(guard.validity());
    let mut last_validity = guard.validity();
    loop {
        let validity = guard.validity();
        // Without an extension the validity only shrinks.
        if validity > last_validity {
            sup.log
                .info(&format!("lease extended, valid for {}", show(validity)));
        }
        last_validity = validity;
        // The command must be gone before the validity ends: the signal,
        // the grace time and the SIGKILL go out at the latest now.
        let left = validity.saturating_sub(sup.kill_after + ttl_margin);
        if left.is_zero() {
            let reason = guard
                .ensure_held()
                .err()
                .map_or("its validity is running out".to_string(), |e| e.to_string());
            return stop(sup, target, exit_rx, reason);
        }
        let never = crossbeam_channel::never();
        select! {
            recv(exit_rx) -> status => return Outcome::Exited { code: exit_code(status) },
            recv(if lost_open { &lost } else { &never }) -> reason => match reason {
                Ok(reason) => return stop(sup, target, exit_rx, reason.to_string()),
                // Disconnected: only a release does that, and we hold the guard.
                Err(_) => lost_open = false,
            },
            recv(sup.signals) -> caught => {
                if let Ok(caught) = caught {
                    forward(sup, target, caught);
                }
            },
            default(left.min(POLL)) => {},
        }
    }
}

/// The safety margin kept between the SIGKILL and the end of the validity:
/// a fiftieth of the lease, within 10 ms and 1 s.
fn margin(validity: Duration) -> Duration {
    (validity / 50).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

fn forward(sup: &Supervision<'_>, target: Target, caught: Caught) {
    let name = signals::name(caught.signal);
    if !target.group && caught.from_terminal {
        // The terminal sent it to its foreground group, the command
        // included: passing it on would deliver it twice.
        sup.log.info(&format!(
            "{name} from the terminal reached the command directly"
        ));
        return;
    }
    match Signal::try_from(caught.signal) {
        Ok(signal) => {
            sup.log.info(&format!("forwarding {name} to the command"));
            target.send(signal);
        }
        Err(_) => sup.log.warn(&format!("cannot forward {name}")),
    }
}

/// The lease is lost: signal, grace time, SIGKILL, reap.
fn stop(
    sup: &Supervision<'_>,
    target: Target,
    exit_rx: &Receiver<io::Result<ExitStatus>>,
    reason: String,
) -> Outcome {
    sup.log.warn(&format!(
        "lease lost ({reason}): sending {} to the command, SIGKILL after {}",
        signals::name(sup.loss_signal as i32),
        show(sup.kill_after)
    ));
    target.send(sup.loss_signal);
    if exit_rx.recv_timeout(sup.kill_after).is_err() {
        sup.log.info("the command is still running: SIGKILL");
        target.send(Signal::SIGKILL);
        if exit_rx.recv_timeout(REAP_AFTER_KILL).is_err() {
            sup.log.error(&format!(
                "the command (pid {}) did not end within {} of SIGKILL",
                target.pid,
                show(REAP_AFTER_KILL)
            ));
        }
    } else if target.group {
        // The command is gone; what it left running in its group goes too.
        target.send(Signal::SIGKILL);
    }
    Outcome::Lost { reason }
}

/// The shell's view of how the command ended.
fn exit_code(status: Result<io::Result<ExitStatus>, crossbeam_channel::RecvError>) -> u8 {
    match status {
        Ok(Ok(status)) => match (status.code(), status.signal()) {
            (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(255),
            (None, Some(signal)) => signal_code(signal),
            _ => 255,
        },
        _ => 255,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_is_a_fiftieth_of_the_lease_within_10ms_and_1s() {
        let ms = Duration::from_millis;
        assert_eq!(margin(Duration::from_secs(5)), ms(100));
        assert_eq!(margin(Duration::from_secs(30)), ms(600));
        assert_eq!(margin(ms(200)), ms(10));
        assert_eq!(margin(Duration::ZERO), ms(10));
        assert_eq!(margin(Duration::from_secs(500)), Duration::from_secs(1));
    }
}
