//! Networking calls std does not offer: the socket receive buffer's size
//! and the kernel's receive time of each datagram, which the network
//! service needs, and the per-thread network namespaces an emulated LAN
//! device lives in.
//!
//! It must never decide how large a buffer should be, nor what a namespace
//! holds; the callers do.

use crate::clock;
use crate::error::{Error, Result};
use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
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
    socket_int_option(socket, option).map(|value| value.max(0) as usize)
}

/// An int-valued SOL_SOCKET option, as the kernel gives it.
pub(crate) fn socket_int_option(socket: &impl AsRawFd, option: libc::c_int) -> Result<libc::c_int> {
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
    Ok(value)
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

/// Asks the kernel to stamp every datagram `socket` receives with the time
/// it arrived (`SO_TIMESTAMPNS`), for [`receive_stamped`] to read.
pub fn enable_receive_timestamps(socket: &impl AsRawFd) -> io::Result<()> {
    match set_int_option(socket, libc::SO_TIMESTAMPNS, 1) {
        true => Ok(()),
        false => Err(io::Error::last_os_error()),
    }
}

/// One datagram taken by [`receive_stamped`].
#[derive(Debug, Clone, Copy)]
pub struct Datagram {
    pub len: usize,
    pub from: SocketAddr,
    /// When the kernel received it, on `CLOCK_MONOTONIC`; `None` unless
    /// [`enable_receive_timestamps`] was called.
    pub arrival_ns: Option<u64>,
}

/// Control-message room for one `struct timespec` (CMSG_SPACE(16) = 32),
/// aligned as a `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; 64]);

/// Receives one datagram into `buf` (`recvmsg`): its length, its sender and
/// the kernel's receive time moved onto the monotonic clock. Errors are
/// returned as they come (`WouldBlock` on a non-blocking or timed-out
/// socket). Never allocates.
pub fn receive_stamped(socket: &UdpSocket, buf: &mut [u8]) -> io::Result<Datagram> {
    // SAFETY: all-zero is a valid sockaddr_storage, msghdr and buffer.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut control = Control([0; 64]);
    let mut data = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as above.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_name = (&mut from as *mut libc::sockaddr_storage).cast();
    message.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    message.msg_iov = &mut data;
    message.msg_iovlen = 1;
    message.msg_control = control.0.as_mut_ptr().cast();
    message.msg_controllen = control.0.len();
    // SAFETY: every pointer in `message` points at a live local or at
    // `buf`, with its true length; the kernel writes within those lengths.
    let len = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut message, 0) };
    if len < 0 {
        return Err(io::Error::last_os_error());
    }
    let from = socket_addr(&from)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a sender of unknown family"))?;
    // SAFETY: `message` was filled by recvmsg: its control length covers
    // only the messages the kernel wrote into `control`.
    let arrival_ns = unsafe { arrival_stamp(&message) }.map(realtime_to_monotonic);
    Ok(Datagram {
        len: len as usize,
        from,
        arrival_ns,
    })
}

/// The SCM_TIMESTAMPNS stamp among `message`'s control messages, in
/// CLOCK_REALTIME nanoseconds.
///
/// # Safety
/// `message` must have been filled by `recvmsg`.
unsafe fn arrival_stamp(message: &libc::msghdr) -> Option<u64> {
    // SAFETY: the caller's contract; CMSG_* walk only what recvmsg wrote.
    let mut header = unsafe { libc::CMSG_FIRSTHDR(message) };
    while !header.is_null() {
        // SAFETY: a non-null header from CMSG_FIRSTHDR/NXTHDR is in bounds.
        let cmsg = unsafe { &*header };
        if cmsg.cmsg_level == libc::SOL_SOCKET && cmsg.cmsg_type == libc::SCM_TIMESTAMPNS {
            // SAFETY: an SCM_TIMESTAMPNS message carries a timespec; the
            // data may be unaligned, hence read_unaligned.
            let at: libc::timespec =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(header).cast()) };
            return Some(at.tv_sec as u64 * 1_000_000_000 + at.tv_nsec as u64);
        }
        // SAFETY: as above.
        header = unsafe { libc::CMSG_NXTHDR(message, header) };
    }
    None
}

/// A CLOCK_REALTIME instant of the recent past on CLOCK_MONOTONIC: how long
/// ago it was on the wall clock, before now on the monotonic one.
fn realtime_to_monotonic(realtime_ns: u64) -> u64 {
    let (now_mono, now_real) = (clock::monotonic_ns(), clock::realtime_ns());
    now_mono.saturating_sub(now_real.saturating_sub(realtime_ns))
}

fn socket_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddrV4::new(ip, u16::from_be(a.sin_port)).into())
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(
                SocketAddrV6::new(
                    ip,
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                )
                .into(),
            )
        }
        _ => None,
    }
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

    #[test]
    fn a_stamped_datagram_arrived_before_it_was_read_and_after_it_was_sent() {
        for local in ["127.0.0.1:0", "[::1]:0"] {
            let receiver = match UdpSocket::bind(local) {
                Ok(socket) => socket,
                Err(e) if local.starts_with('[') => {
                    println!("IPv6 loopback unavailable here ({e}): checked IPv4 only");
                    continue;
                }
                Err(e) => panic!("bind {local}: {e}"),
            };
            enable_receive_timestamps(&receiver).unwrap();
            let sender = UdpSocket::bind(local).unwrap();
            // The kernel turns arrival stamping on from a work item; until
            // it ran, a datagram is stamped when it is read. Each try reads
            // 5 ms after sending, so a stamp 4 ms before the read is the
            // kernel's arrival (the wall clock is slewed by ppm, not ms).
            let early = (0..100).any(|_| {
                let sent_ns = clock::monotonic_ns();
                sender
                    .send_to(b"package", receiver.local_addr().unwrap())
                    .unwrap();
                std::thread::sleep(std::time::Duration::from_millis(5));
                let mut buf = [0u8; 16];
                let datagram = receive_stamped(&receiver, &mut buf).unwrap();
                let read_ns = clock::monotonic_ns();
                assert_eq!(
                    (&buf[..datagram.len], datagram.from),
                    (&b"package"[..], sender.local_addr().unwrap())
                );
                let arrival = datagram.arrival_ns.expect("a kernel stamp");
                // The slack: a vCPU stalled between the conversion's two
                // clock reads moves the stamp earlier by the stall.
                assert!(
                    sent_ns <= arrival + 2_000_000 && arrival <= read_ns,
                    "sent {sent_ns}, arrived {arrival}, read {read_ns}"
                );
                arrival + 4_000_000 <= read_ns
            });
            assert!(early, "no datagram was stamped at its arrival");
        }
    }

    #[test]
    fn without_timestamps_there_is_no_stamp_and_errors_pass_through() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender
            .send_to(b"x", receiver.local_addr().unwrap())
            .unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(
            receive_stamped(&receiver, &mut buf).unwrap().arrival_ns,
            None
        );
        receiver.set_nonblocking(true).unwrap();
        let error = receive_stamped(&receiver, &mut buf).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
    }
}
