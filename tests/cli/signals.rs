//! Signals and the process group.

use std::process::Command;
use std::time::Duration;

use crate::common::cli::{
    alive, code, finish, lines_of, run_cmd, signal, stderr, stderr_lines, wait_for_line,
    KillOnPanic, Scratch, SIGNAL_LIMIT,
};
use crate::common::{builder, eventually, holders};
use redfence::testing::RedisServers;

/// The command runs in its own process group and signals sent to `run` go
/// to that group: a background process of the command gets them too.
/// (Catches: the group flag inverted, signals sent to the command alone.)
#[test]
fn a_forwarded_signal_reaches_what_the_command_started_in_the_background() {
    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("group");
    // The background process lets go of redfence's stdout and stderr, so a
    // survivor cannot keep the test waiting for their end.
    let script = format!(
        "sleep 300 >/dev/null 2>&1 & echo $! > {bg}; wait",
        bg = scratch.path("bg")
    );
    let child = run_cmd(&cluster, &[], "group", &script)
        .spawn()
        .expect("redfence starts");
    let bg = scratch.wait_line("bg");
    let _cleanup = KillOnPanic(vec![bg.clone()]);
    assert!(alive(&bg), "the background sleep did not start");
    signal(child.id(), "TERM");
    let out = finish(child, SIGNAL_LIMIT);
    // The shell died of the forwarded TERM.
    assert_eq!(code(out.status), 128 + 15, "{}", stderr(&out));
    let gone = eventually(Duration::from_secs(10), || !alive(&bg));
    if !gone {
        let _ = Command::new("kill").args(["-KILL", &bg]).status();
    }
    assert!(
        gone,
        "the command's background process did not get the TERM"
    );
}

/// With `--foreground` the command shares `run`'s process group; a signal
/// that a process (not the terminal) sent to `run` still reaches it.
/// (Catches: `&&` for `||` in `forward`, `from_kernel` always true or
/// inverted: every signal taken for a terminal's, and not forwarded.)
#[test]
fn with_foreground_a_signal_sent_by_a_process_is_forwarded_to_the_command() {
    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("foreground");
    let script = format!(
        "trap 'echo term > {got}; exit 3' TERM; echo $$ > {pid}; while :; do sleep 0.05; done",
        got = scratch.path("got"),
        pid = scratch.path("pid")
    );
    let child = run_cmd(&cluster, &["--foreground"], "fg", &script)
        .spawn()
        .expect("redfence starts");
    // With --foreground the command shares redfence's process group (the
    // test's): it is stopped by its pid.
    let pid = scratch.wait_line("pid");
    let _cleanup = KillOnPanic(vec![pid.clone()]);
    signal(child.id(), "TERM");
    let out = finish(child, SIGNAL_LIMIT);
    assert_eq!(code(out.status), 3, "{}", stderr(&out));
    assert_eq!(scratch.read("got").trim(), "term");
    assert!(!alive(&pid));
    assert!(
        eventually(Duration::from_secs(2), || holders(&cluster, "fg") == 0),
        "the lock was not released"
    );
}

/// A pseudo-terminal: the master side, and the path of the slave side.
fn open_pty() -> (std::fs::File, String) {
    use nix::libc;
    use std::os::fd::FromRawFd;
    // SAFETY: plain libc calls on a descriptor we own; ptsname_r writes at
    // most `buf.len()` bytes.
    unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = std::fs::File::from_raw_fd(fd);
        assert_eq!(libc::grantpt(fd), 0, "grantpt");
        assert_eq!(libc::unlockpt(fd), 0, "unlockpt");
        let mut buf = [0u8; 128];
        assert_eq!(
            libc::ptsname_r(fd, buf.as_mut_ptr().cast(), buf.len()),
            0,
            "ptsname_r"
        );
        let end = buf.iter().position(|&b| b == 0).expect("NUL-terminated");
        let path = String::from_utf8_lossy(&buf[..end]).into_owned();
        (master, path)
    }
}

/// With `--foreground`, a Ctrl-C typed on `run`'s terminal reaches the
/// command from the terminal itself; `run` must not pass it on a second
/// time. (Catches: the `!` dropped in `forward`'s terminal test, and
/// `from_kernel` always false. The oracle is `-v`'s account of what `run`
/// did with the signal: the kernel may merge two INTs into one delivery,
/// so the command cannot reliably count them.)
#[test]
fn with_foreground_a_ctrl_c_from_the_terminal_is_not_forwarded_again() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::process::CommandExt;

    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("tty");
    let (mut master, slave_path) = open_pty();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_NOCTTY)
        .open(&slave_path)
        .expect("slave side opens");
    let script = format!(
        "trap 'echo int >> {ints}' INT; echo $$ > {pid}; while :; do sleep 0.05; done",
        ints = scratch.path("ints"),
        pid = scratch.path("pid")
    );
    let mut cmd = run_cmd(&cluster, &["-v", "--foreground"], "tty", &script);
    cmd.stdin(slave.try_clone().expect("dup"))
        .stdout(slave.try_clone().expect("dup"))
        .stderr(slave);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // A session of its own with the pty as controlling terminal,
            // `run` (and with --foreground the command) its foreground
            // process group: what a shell on a terminal sets up.
            if nix::libc::setsid() < 0 || nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("redfence starts");
    drop(cmd);
    // redfence leads its session and process group; the command is in it.
    let _cleanup = KillOnPanic(vec![format!("-{}", child.id())]);
    let lines = lines_of(master.try_clone().expect("dup"));
    let pid = scratch.wait_line("pid");
    let _cleanup_command = KillOnPanic(vec![pid.clone()]);
    // Ctrl-C: the terminal sends INT to its foreground process group.
    master.write_all(&[0x03]).expect("type Ctrl-C");
    wait_for_line(
        &lines,
        "INT from the terminal reached the command directly",
        Duration::from_secs(10),
    );
    assert!(
        eventually(Duration::from_secs(10), || scratch
            .read("ints")
            .contains("int")),
        "the command did not get the INT"
    );
    // A TERM from a process is forwarded: the command dies of it.
    signal(child.id(), "TERM");
    let out = finish(child, SIGNAL_LIMIT);
    assert_eq!(code(out.status), 128 + 15);
    assert!(!alive(&pid));
}

/// USR1 and USR2 only mean something to a running command: while `run`
/// waits for the lock they neither end the wait nor get lost in an error,
/// and the signals that do end it are named in the message.
/// (Catches: `stops_wait` always true; `signals::name` empty or constant.)
#[test]
fn usr1_while_waiting_does_not_end_the_wait_and_term_is_named_when_it_does() {
    let cluster = RedisServers::start(3);
    let scratch = Scratch::new("usr1");
    // The test's own client, patient with a slow machine.
    let locks = builder(&cluster)
        .instance_timeout(Duration::from_secs(1))
        .build()
        .expect("client builds");
    let held = locks.lock("usr1").expect("test holds the lock");
    let mut child = run_cmd(
        &cluster,
        &["-v", "-w", "60s"],
        "usr1",
        &format!("touch {}", scratch.path("ran")),
    )
    .spawn()
    .expect("redfence starts");
    let _cleanup = KillOnPanic(vec![child.id().to_string()]);
    let lines = stderr_lines(&mut child);
    wait_for_line(&lines, "waiting", Duration::from_secs(10));
    signal(child.id(), "USR1");
    wait_for_line(&lines, "USR1 ignored", Duration::from_secs(10));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "USR1 ended the wait"
    );
    signal(child.id(), "TERM");
    let error = wait_for_line(&lines, "received while waiting", Duration::from_secs(10));
    assert!(
        error.contains("TERM received while waiting"),
        "the message does not name TERM: {error}"
    );
    let out = finish(child, SIGNAL_LIMIT);
    assert_eq!(code(out.status), 128 + 15);
    assert!(std::fs::metadata(scratch.path("ran")).is_err());
    // Its 30 s lease outlasts the test; whether the release is confirmed
    // does not matter here.
    let _ = held.release();
}
