//! Signals: names on the command line, and delivery of the ones `run`
//! forwards to its command.

use std::io;
use std::thread::JoinHandle;

use nix::sys::signal::Signal;
use redfence::crossbeam_channel::{self, Receiver};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::exfiltrator::WithRawSiginfo;
use signal_hook::iterator::{Handle, SignalsInfo};

/// Signals `run` catches and passes on to the command.
pub const FORWARDED: [i32; 6] = [SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2];

/// Parses `TERM`, `SIGTERM`, `term` or `15`.
pub fn parse(text: &str) -> Result<Signal, String> {
    let text = text.trim();
    if let Ok(n) = text.parse::<i32>() {
        return Signal::try_from(n).map_err(|_| format!("{n} is not a signal number"));
    }
    let upper = text.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse::<Signal>()
        .map_err(|_| format!("{text:?} is not a signal name (e.g. TERM, INT, HUP, KILL)"))
}

/// The name without `SIG`, for messages.
pub fn name(signal: i32) -> String {
    Signal::try_from(signal).map_or_else(
        |_| format!("signal {signal}"),
        |s| s.as_str().trim_start_matches("SIG").to_string(),
    )
}

/// Whether a signal received while waiting for the lock ends the wait.
/// USR1 and USR2 only mean something to a running command.
pub fn stops_wait(signal: i32) -> bool {
    matches!(signal, SIGHUP | SIGINT | SIGQUIT | SIGTERM)
}

/// One caught signal.
#[derive(Debug, Clone, Copy)]
pub struct Caught {
    pub signal: i32,
    /// Sent by the kernel rather than by a process: a terminal's Ctrl-C,
    /// Ctrl-\ or hangup, which went to the terminal's whole foreground
    /// process group.
    pub from_terminal: bool,
}

/// Catches [`FORWARDED`] from creation on (their default action, ending
/// the process, no longer applies) and hands them over as a channel.
pub struct Listener {
    rx: Receiver<Caught>,
    handle: Handle,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    pub fn start() -> io::Result<Self> {
        let mut signals = SignalsInfo::<WithRawSiginfo>::new(FORWARDED)?;
        let handle = signals.handle();
        let (tx, rx) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("redfence-signals".to_string())
            .spawn(move || {
                for info in signals.forever() {
                    let caught = Caught {
                        signal: info.si_signo,
                        from_terminal: from_kernel(info.si_code),
                    };
                    if tx.send(caught).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Listener {
            rx,
            handle,
            thread: Some(thread),
        })
    }

    /// Signals in the order they arrived.
    pub fn receiver(&self) -> &Receiver<Caught> {
        &self.rx
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn from_kernel(code: i32) -> bool {
    code == nix::libc::SI_KERNEL
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn from_kernel(_code: i32) -> bool {
    false
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!(parse("TERM"), Ok(Signal::SIGTERM));
        assert_eq!(parse("sigint"), Ok(Signal::SIGINT));
        assert_eq!(parse("9"), Ok(Signal::SIGKILL));
        assert!(parse("NOPE").is_err());
        assert!(parse("999").is_err());
        assert_eq!(name(SIGTERM), "TERM");
    }
}
