//! Waking a sleeping thread for an instant so that it migrates to the CPUs
//! it is now allowed on.
//!
//! The kernel admits a SCHED_DEADLINE thread against the root domain of the
//! CPU it last ran on; a thread asleep in another cpuset's CPU keeps that CPU
//! until it wakes. `PTRACE_SEIZE` + `PTRACE_INTERRUPT` make it wake into a
//! trap stop (on an allowed CPU) and `PTRACE_DETACH` resumes it; its
//! interrupted system call restarts as after any stop, as when a debugger
//! attaches. It must never deliver or swallow a signal: one that arrives
//! meanwhile is passed on at detach.

use crate::error::{Error, ErrorKind, Result};
use crate::sched::Tid;

fn ptrace(request: libc::c_uint, tid: Tid, data: usize) -> Result<()> {
    // SAFETY: PTRACE_SEIZE/INTERRUPT/DETACH take no pointers (addr 0, data
    // an integer), so nothing of ours can be written.
    let rc = unsafe { libc::ptrace(request, tid, 0usize, data) };
    if rc == -1 {
        return Err(Error::last_os(format!("ptrace({request}) thread {tid}")));
    }
    Ok(())
}

/// Interrupts thread `tid` and resumes it at once.
pub fn nudge(tid: Tid) -> Result<()> {
    ptrace(libc::PTRACE_SEIZE, tid, 0).map_err(|e| {
        e.with_fix("the thread may be traced by a debugger, or ptrace is restricted (kernel.yama.ptrace_scope); let it wake by itself and attach again")
    })?;
    let result = ptrace(libc::PTRACE_INTERRUPT, tid, 0).and_then(|()| wait_for_stop(tid));
    let signal = match result {
        Ok(signal) => signal,
        Err(e) if e.kind == ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            let _ = ptrace(libc::PTRACE_DETACH, tid, 0);
            return Err(e);
        }
    };
    match ptrace(libc::PTRACE_DETACH, tid, signal as usize) {
        Err(e) if e.kind != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Waits for the tracee's stop; returns the signal to pass on (0 for our trap).
fn wait_for_stop(tid: Tid) -> Result<i32> {
    let mut status = 0;
    // SAFETY: `status` is a writable int; __WALL lets a tracer wait for a
    // thread that is not its child.
    let rc = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
    if rc == -1 {
        return Err(Error::last_os(format!("wait for thread {tid} to stop")));
    }
    if !libc::WIFSTOPPED(status) {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("nudge thread {tid}"),
            "it exited",
            "",
        ));
    }
    let event = status >> 16;
    let signal = libc::WSTOPSIG(status);
    Ok(if event == libc::PTRACE_EVENT_STOP {
        0
    } else {
        signal
    })
}
