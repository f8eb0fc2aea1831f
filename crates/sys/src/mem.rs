//! Memory locking for real-time threads: page faults on the cycle path are
//! latency no reservation can pay for.
//!
//! It owns mlockall/munlockall; it must never allocate or touch pages itself.

use crate::error::{Error, ErrorKind, Result};

/// Locks all current and future pages of the process in RAM.
pub fn lock_all_memory() -> Result<()> {
    // SAFETY: mlockall only changes the process's paging state.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if rc == 0 {
        return Ok(());
    }
    let err = Error::last_os("mlockall(MCL_CURRENT | MCL_FUTURE)");
    Err(match err.kind {
        ErrorKind::Permission | ErrorKind::Io => err.with_fix(
            "raise the memlock limit (`ulimit -l unlimited`, or `memlock` in \
             /etc/security/limits.d/) or run as root",
        ),
        _ => err,
    })
}

/// Whether [`lock_all_memory`] can hold for the life of the process: root
/// (CAP_IPC_LOCK) or an unlimited RLIMIT_MEMLOCK. Under a finite limit
/// MCL_FUTURE makes every later mapping past it fail — a library loaded
/// afterwards (PipeWire's libjack loads its modules when a client opens)
/// fails to load — so a program under one should run unlocked instead.
pub fn can_lock_all_memory() -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    crate::caps::is_root() || (rc == 0 && limit.rlim_cur == libc::RLIM_INFINITY)
}

/// Unlocks all pages (for tests that must leave the process as they found it).
pub fn unlock_all_memory() -> Result<()> {
    // SAFETY: munlockall only changes the process's paging state.
    let rc = unsafe { libc::munlockall() };
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::last_os("munlockall"))
    }
}
