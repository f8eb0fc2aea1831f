//! Networking calls std does not offer: the socket receive buffer's size
//! the network service needs, and the per-thread network namespaces an
//! emulated LAN device lives in.
//!
//! It must never decide how large a buffer should be, nor what a namespace
//! holds; the callers do.

use crate::error::{Error, Result};
use std::fs::File;
use std::os::fd::AsRawFd;

/// Moves the calling thread (only it) into a new, empty network namespace
/// and returns a handle that keeps the namespace alive after the thread
/// ends. Sockets the thread opens from then on, and the threads and
/// processes it starts, are in it. Needs CAP_SYS_ADMIN.
pub fn enter_new_net_namespace() -> Result<File> {
    // SAFETY: unshare takes flags only; CLONE_NEWNET affects the calling
    // thread alone and is allowed in a multi-threaded process.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(Error::last_os("create a network namespace (unshare)")
            .with_fix("run as root (it needs CAP_SYS_ADMIN)"));
    }
    File::open("/proc/thread-self/ns/net")
        .map_err(|e| Error::from_io("hold the new network namespace", &e))
}

/// Moves the calling thread into the network namespace `namespace` (a
/// handle from [`enter_new_net_namespace`] or /proc/…/ns/net).
pub fn join_net_namespace(namespace: &File) -> Result<()> {
    // SAFETY: the fd is an open namespace file owned by the caller for the
    // call; setns only reads it.
    if unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(Error::last_os("join a network namespace (setns)")
            .with_fix("run as root (it needs CAP_SYS_ADMIN)"));
    }
    Ok(())
}

fn set_int_option(socket: &impl AsRawFd, option: libc::c_int, value: libc::c_int) -> bool {
    // SAFETY: `value` is a readable c_int on this frame and its size is
    // passed; the fd is a socket the caller owns for the call.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

fn int_option(socket: &impl AsRawFd, option: libc::c_int) -> Result<usize> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` is a writable c_int and `len` its size.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(Error::last_os(format!("getsockopt({option})")));
    }
    Ok(value.max(0) as usize)
}

/// Asks for a receive buffer of `bytes` and returns what the kernel gave
/// (it doubles the request for its bookkeeping). With CAP_NET_ADMIN the
/// request may pass `net.core.rmem_max` (SO_RCVBUFFORCE); without, the
/// kernel caps it there silently, so compare the result.
pub fn set_receive_buffer(socket: &impl AsRawFd, bytes: usize) -> Result<usize> {
    let value = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    if !set_int_option(socket, libc::SO_RCVBUFFORCE, value)
        && !set_int_option(socket, libc::SO_RCVBUF, value)
    {
        return Err(Error::last_os(format!(
            "set the socket's receive buffer to {bytes} bytes (SO_RCVBUF)"
        )));
    }
    int_option(socket, libc::SO_RCVBUF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_larger_receive_buffer_is_granted_or_capped_but_never_smaller_than_before() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = int_option(&socket, libc::SO_RCVBUF).unwrap();
        let after = set_receive_buffer(&socket, 4 << 20).unwrap();
        assert!(after >= before, "{after} < {before}");
    }
}
