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
//! Linux only. std links the C library, so `ptrace` and `waitpid` are
//! declared here rather than pulling in a crate for two calls.
#![allow(dead_code)]

use std::ffi::{c_int, c_long, c_void};
use std::io;
use std::ptr::null_mut;

extern "C" {
    fn ptrace(request: c_int, ...) -> c_long;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
}

const PTRACE_DETACH: c_int = 17;
const PTRACE_SEIZE: c_int = 0x4206;
const PTRACE_INTERRUPT: c_int = 0x4207;
/// Wait for any child, clone or traced thread alike.
const WALL: c_int = 0x4000_0000;

/// One thread of another process, stopped until this is dropped. Must be
/// dropped on the thread that created it (ptrace ties a tracee to the
/// tracing thread).
pub struct ThreadPause {
    tid: c_int,
}

impl ThreadPause {
    /// Stops thread `tid` and waits until it is stopped.
    pub fn start(tid: i32) -> io::Result<ThreadPause> {
        // SAFETY: plain system calls with null pointers or a pointer to a
        // live local; no memory of this process is handed over.
        unsafe {
            if ptrace(
                PTRACE_SEIZE,
                tid,
                null_mut::<c_void>(),
                null_mut::<c_void>(),
            ) == -1
            {
                return Err(io::Error::last_os_error());
            }
            let pause = ThreadPause { tid };
            if ptrace(
                PTRACE_INTERRUPT,
                tid,
                null_mut::<c_void>(),
                null_mut::<c_void>(),
            ) == -1
            {
                return Err(io::Error::last_os_error());
            }
            let mut status: c_int = 0;
            if waitpid(tid, &mut status, WALL) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(pause)
        }
    }
}

impl Drop for ThreadPause {
    fn drop(&mut self) {
        // SAFETY: as above. Detaching resumes the thread.
        unsafe {
            ptrace(
                PTRACE_DETACH,
                self.tid,
                null_mut::<c_void>(),
                null_mut::<c_void>(),
            );
        }
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
