//! Local IPC facts the kernel vouches for: the credentials of the peer of a
//! Unix socket (SO_PEERCRED), and advisory whole-file locks (flock).
//!
//! It must never trust what a peer says about itself: identity comes from
//! the kernel only.

use crate::error::{Error, Result};
use std::os::fd::AsRawFd;

/// Who is on the other end of a Unix socket, as the kernel recorded at connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCredentials {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

pub fn peer_credentials(socket: &impl AsRawFd) -> Result<PeerCredentials> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a writable ucred and `len` its size; the fd is a
    // socket owned by the caller for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Err(Error::last_os("read the peer's credentials (SO_PEERCRED)"));
    }
    Ok(PeerCredentials {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// Takes an exclusive flock on `file`, waiting for it; released when the
/// file is closed.
pub fn lock_exclusive(file: &std::fs::File) -> Result<()> {
    // SAFETY: flock on a file descriptor owned by `file`.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    if rc != 0 {
        return Err(Error::last_os("lock the broker's state file"));
    }
    Ok(())
}

/// Takes an exclusive flock without waiting; Ok(false) if another holds it.
pub fn try_lock_exclusive(file: &std::fs::File) -> Result<bool> {
    // SAFETY: as above.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Ok(false);
    }
    Err(Error::from_io("lock the broker's state file", &err))
}
