//! Signals: names on the command line, and delivery of the ones `run`
//! forwards to its command.

use std::io;
use std::thread::JoinHandle;

use nix::sys::signal::Signal;
use redfence::crossbeam_channel::{self, Receiver};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::{Handle, Signals};

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

/// Catches [`FORWARDED`] from creation on (their default action, ending
/// the process, no longer applies) and hands them over as a channel.
pub struct Listener {
    rx: Receiver<i32>,
    handle: Handle,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    pub fn start() -> io::Result<Self> {
        let mut signals = Signals::new(FORWARDED)?;
        let handle = signals.handle();
        let (tx, rx) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("redfence-signals".to_string())
            .spawn(move || {
                for signal in signals.forever() {
                    if tx.send(signal).is_err() {
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
    pub fn receiver(&self) -> &Receiver<i32> {
        &self.rx
    }
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
