//! The `redfence` command, run as a user runs it: the built binary, real
//! child processes, real signals (and a pseudo-terminal), real
//! redis-server instances; conditions are polled with a deadline. Exit
//! codes (README "Command line"), what reaches the command, signals and
//! the process group, losses, messages on stderr, `status` and `ping`,
//! TLS, and the coordination flags (`--identity`, `--hold-at-least`, `-q`).
//!
//! One test binary (link time): one module per concern.

#[path = "../common/mod.rs"]
mod common;

mod arguments;
mod coordination;
mod exit_codes;
mod fair;
mod foreign_keys;
mod messages;
mod permits;
mod run;
mod signals;
mod status;
mod tls;
