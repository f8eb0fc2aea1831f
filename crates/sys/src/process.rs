//! Ending processes tessera started: external load generators (stress-ng
//! forks its workers) run in a group of their own, and stopping them must
//! reach every member, not only the parent a `Child::kill` would hit; a
//! server such as jackd is asked to exit (SIGTERM) so it can clean up.
//!
//! It must never signal anything the caller did not start: a group id of 0
//! or 1 (the caller's own group, init) is refused.

use crate::error::{Error, ErrorKind, Result};
use crate::proc::Pid;

/// Sends SIGTERM (`force`: SIGKILL) to every process of group `pgid`.
pub fn signal_group(pgid: Pid, force: bool) -> Result<()> {
    if pgid <= 1 {
        return Err(Error::new(
            ErrorKind::Invalid,
            format!("signal process group {pgid}"),
            "refused: not a group created for a load generator",
            "start the generator in its own process group",
        ));
    }
    let signal = if force { libc::SIGKILL } else { libc::SIGTERM };
    // SAFETY: kill(2) takes no pointers; a negative pid addresses the group.
    let rc = unsafe { libc::kill(-pgid, signal) };
    if rc == -1 {
        let err = std::io::Error::last_os_error();
        // The group already ended: nothing left to stop.
        if err.raw_os_error() == Some(libc::ESRCH) {
            return Ok(());
        }
        return Err(Error::from_io(format!("signal process group {pgid}"), &err));
    }
    Ok(())
}

/// Asks child process `pid` to exit (SIGTERM). The caller must not have
/// reaped it yet, so that the PID cannot have been reused.
pub fn terminate(pid: Pid) -> Result<()> {
    if pid <= 1 {
        return Err(Error::new(
            ErrorKind::Invalid,
            format!("terminate process {pid}"),
            "refused: not a child process",
            "pass the PID of a child you started",
        ));
    }
    // SAFETY: kill(2) takes no pointers.
    if unsafe { libc::kill(pid, libc::SIGTERM) } == -1 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            return Err(Error::from_io(format!("terminate process {pid}"), &err));
        }
    }
    Ok(())
}
