//! Watching another process's life through a pidfd: a descriptor bound to
//! one process (never to a later process that reuses its PID) that becomes
//! readable when the process exits.
//!
//! It owns pidfd_open and the exit check, which never blocks. It must never
//! signal, wait for or reap the process: watching is all it does.

use crate::error::{Error, Result};
use crate::proc::Pid;
use crate::process::readable_within;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A pidfd and the PID it was opened for (for messages).
#[derive(Debug)]
pub struct PidFd {
    fd: OwnedFd,
    pid: Pid,
}

impl PidFd {
    /// A pidfd for process `pid` (close-on-exec, as every pidfd).
    pub fn open(pid: Pid) -> Result<PidFd> {
        // SAFETY: pidfd_open takes a PID and flags, no pointers.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(Error::last_os(format!("pidfd_open({pid})"))
                .with_fix("check that the process still exists; pidfds need Linux 5.3 or later"));
        }
        // SAFETY: the kernel just returned this descriptor; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
        Ok(PidFd { fd, pid })
    }

    /// A pidfd the kernel handed over in another way (SO_PEERPIDFD).
    pub(crate) fn from_owned(fd: OwnedFd, pid: Pid) -> PidFd {
        PidFd { fd, pid }
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Whether the process has exited (a zombie not yet reaped counts).
    /// One poll(2) with a zero timeout: it never blocks.
    pub fn has_exited(&self) -> bool {
        readable_within(self.fd.as_raw_fd(), 0)
    }
}

impl AsFd for PidFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_live_process_has_not_exited() {
        let own = PidFd::open(std::process::id() as Pid).unwrap();
        assert!(!own.has_exited());
    }

    #[test]
    fn an_exited_child_is_seen_before_it_is_reaped() {
        let mut child = Command::new("true").spawn().unwrap();
        let pidfd = PidFd::open(child.id() as Pid).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !pidfd.has_exited() {
            assert!(std::time::Instant::now() < deadline, "`true` did not exit");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        child.wait().unwrap();
    }
}
