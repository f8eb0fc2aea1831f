//! Local IPC facts the kernel vouches for: the credentials of the peer of a
//! Unix socket (SO_PEERCRED) and a pidfd for it (SO_PEERPIDFD), descriptors
//! passed over a Unix socket (SCM_RIGHTS), and advisory whole-file locks
//! (flock).
//!
//! It must never trust what a peer says about itself: identity comes from
//! the kernel only. Passing a descriptor never decides what it is for.

use crate::error::{Error, ErrorKind, Result};
use crate::net::socket_int_option;
use crate::pidfd::PidFd;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

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

/// SO_PEERPIDFD (Linux 6.5), the asm-generic value these architectures use;
/// the libc crate does not name it yet.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64"
))]
const SO_PEERPIDFD: Option<libc::c_int> = Some(77);
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64"
)))]
const SO_PEERPIDFD: Option<libc::c_int> = None;

/// A pidfd for the process on the other end of a Unix socket (the one that
/// connected, or created the pair). From the kernel (SO_PEERPIDFD) where it
/// can give one, so it names the peer even if its PID has been reused since;
/// before Linux 6.5 it is opened from SO_PEERCRED's PID, which leaves a
/// window: should the peer exit and its PID be reused before this call, the
/// pidfd would watch the newcomer.
pub fn peer_pidfd(socket: &impl AsRawFd) -> Result<PidFd> {
    let pid = peer_credentials(socket)?.pid;
    let Some(option) = SO_PEERPIDFD else {
        return PidFd::open(pid);
    };
    match socket_int_option(socket, option) {
        // SAFETY: the kernel just installed this pidfd; nothing else owns it.
        Ok(fd) => Ok(PidFd::from_owned(unsafe { OwnedFd::from_raw_fd(fd) }, pid)),
        Err(e) if e.errno == Some(libc::ENOPROTOOPT) => PidFd::open(pid),
        Err(e) => Err(Error {
            action: "read the peer's pidfd (SO_PEERPIDFD)".into(),
            ..e
        }),
    }
}

/// Room for the control message of one descriptor, in u64s so that it is
/// aligned for a `cmsghdr`.
type OneFdControl = [u64; 4];

/// How many descriptors a received message may carry before the receiver
/// calls it broken; the extra ones are closed, never leaked.
const MAX_RECEIVED_FDS: usize = 8;

/// Sends `bytes` with a copy of `fd` attached (SCM_RIGHTS): the receiver
/// gets a descriptor of its own for the same open file. Returns how many
/// bytes went (the descriptor went with the first); the caller writes the
/// rest, if any, without a descriptor.
pub fn send_with_fd(socket: &impl AsRawFd, bytes: &[u8], fd: BorrowedFd<'_>) -> Result<usize> {
    let action = "send a descriptor over a Unix socket (SCM_RIGHTS)";
    let mut control: OneFdControl = [0; 4];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain old data, valid all zero (null pointers, zero
    // lengths); the fields that matter are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as _;
    // SAFETY: `msg_control` points to `control`, aligned for a cmsghdr and
    // larger than CMSG_SPACE(one int), so CMSG_FIRSTHDR is non-null and the
    // header and its one-int payload lie inside `control`.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd.as_raw_fd());
    }
    loop {
        // SAFETY: `msg` points to `iov` (the caller's bytes, read only) and
        // `control`, both alive for the call.
        let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return Ok(sent as usize);
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(Error::from_io(action, &err)
                .with_fix("check that the peer is still connected to the socket"));
        }
    }
}

/// Receives into `buf` and takes the descriptor that came with the bytes,
/// if any (close-on-exec). `(0, None)` is the end of the stream. A message
/// with more than one descriptor is an error, its descriptors closed.
pub fn receive_with_fd(socket: &impl AsRawFd, buf: &mut [u8]) -> Result<(usize, Option<OwnedFd>)> {
    let action = "receive a descriptor over a Unix socket (SCM_RIGHTS)";
    let mut control = [0u64; MAX_RECEIVED_FDS / 2 + 2];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as in `send_with_fd`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    let received = loop {
        // SAFETY: `msg` points to `iov` (the caller's writable buffer) and
        // `control`, both alive for the call.
        let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(Error::from_io(action, &err));
        }
    };
    let mut fds = received_fds(&msg);
    if fds.len() > 1 || msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(Error::new(
            ErrorKind::Invalid,
            action,
            format!(
                "the peer sent {} or more descriptors where one was expected",
                fds.len()
            ),
            "the peer must send one descriptor per message",
        ));
    }
    Ok((received, fds.pop()))
}

/// Takes ownership of every descriptor in `msg`'s SCM_RIGHTS messages.
fn received_fds(msg: &libc::msghdr) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    // SAFETY: `msg` was filled by recvmsg: CMSG_FIRSTHDR/CMSG_NXTHDR walk
    // only inside its `msg_controllen` bytes, and each SCM_RIGHTS payload
    // holds descriptors the kernel has just installed in this process, which
    // nothing else owns.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let payload = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..payload / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    fds
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_descriptor_crosses_a_socket_with_its_bytes() {
        let (a, b) = UnixStream::pair().unwrap();
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(send_with_fd(&a, b"hello", file.as_fd()).unwrap(), 5);
        let mut buf = [0u8; 16];
        let (n, fd) = receive_with_fd(&b, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        let received = std::fs::File::from(fd.expect("a descriptor"));
        assert!(received.metadata().is_ok());
    }

    #[test]
    fn bytes_without_a_descriptor_come_alone() {
        let (a, b) = UnixStream::pair().unwrap();
        std::io::Write::write_all(&mut &a, b"plain").unwrap();
        let mut buf = [0u8; 16];
        let (n, fd) = receive_with_fd(&b, &mut buf).unwrap();
        assert_eq!((n, fd.is_none()), (5, true));
    }

    #[test]
    fn the_peer_of_a_pair_is_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let pidfd = peer_pidfd(&a).unwrap();
        assert_eq!(pidfd.pid(), std::process::id() as i32);
        assert!(!pidfd.has_exited());
    }
}
