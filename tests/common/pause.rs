//! Pausing one thread of a child process, the way a stop-the-world pause,
//! a debugger or an overloaded scheduler stalls a caller while its other
//! threads (the client's instance workers) keep running.
//!
//! SIGSTOP cannot do this: it freezes every thread of the process. ptrace
//! stops one thread: `PTRACE_SEIZE` then `PTRACE_INTERRUPT` on its thread
//! id, `PTRACE_DETACH` to let it go on. A parent may trace its children
//! (also under Yama's default `ptrace_scope` 1), so the paused thread must
//! live in a child process of the test.
//!
//! Linux only; through `nix`'s safe wrappers (a dev-dependency).

use std::io;

use nix::sys::ptrace;
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// One thread of another process, stopped until this is dropped. Must be
/// dropped on the thread that created it (ptrace ties a tracee to the
/// tracing thread).
pub struct ThreadPause {
    tid: Pid,
}

impl ThreadPause {
    /// Stops thread `tid` and waits until it is stopped.
    pub fn start(tid: i32) -> io::Result<ThreadPause> {
        let tid = Pid::from_raw(tid);
        ptrace::seize(tid, ptrace::Options::empty())?;
        let pause = ThreadPause { tid };
        ptrace::interrupt(tid)?;
        // __WALL: wait for a traced thread as for any child.
        waitpid(tid, Some(WaitPidFlag::__WALL))?;
        Ok(pause)
    }
}

impl Drop for ThreadPause {
    fn drop(&mut self) {
        // Detaching resumes the thread.
        let _ = ptrace::detach(self.tid, None);
    }
}

/// The calling thread's id (not the process id), for [`ThreadPause`].
pub fn current_tid() -> i32 {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected /proc/thread-self: {}", link.display()))
}
