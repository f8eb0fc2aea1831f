//! Networking calls std does not offer: the socket receive buffer's size
//! and the kernel's receive time of each datagram, which the network
//! service needs; the kernel's transmit time of each datagram (the
//! socket's error queue), which the netphone measures; and the network
//! namespaces an emulated LAN's hosts live in, joined by a thread or by a
//! child process.
//!
//! It must never decide how large a buffer should be, nor what a namespace
//! holds; the callers do.

use crate::clock;
use crate::error::{Error, Result};
use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

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

/// Makes `command` start inside the network namespace `namespace`: the
/// child joins it (setns) between fork and exec, so the program's sockets
/// and interfaces are the namespace's; the caller's threads stay where they
/// are. The command keeps its own handle on the namespace until it is
/// dropped. Needs CAP_SYS_ADMIN, checked when the command is spawned: a
/// refusal is the spawn's error.
pub fn command_in_namespace(command: &mut Command, namespace: &File) -> Result<()> {
    let handle = namespace
        .try_clone()
        .map_err(|e| Error::from_io("hold a network namespace for a child process", &e))?;
    let join = move || {
        // SAFETY: setns takes an open namespace descriptor, owned by this
        // closure, and flags only.
        match unsafe { libc::setns(handle.as_raw_fd(), libc::CLONE_NEWNET) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    };
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe calls are allowed: it makes one system call and
    // neither allocates nor locks (last_os_error reads errno).
    unsafe { command.pre_exec(join) };
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

/// A UDP socket bound to `address` with `SO_REUSEADDR` set first, so that
/// other programs on this host (another receiver of the same multicast
/// group and port: PipeWire, a second tessera flow) may bind it too, as
/// every multicast receiver must let them.
pub fn bind_udp_shared(address: SocketAddrV4) -> io::Result<UdpSocket> {
    // SAFETY: socket takes constants only; the returned fd is owned at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket no one else owns.
    let socket = unsafe { <UdpSocket as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    if !set_int_option(&socket, libc::SO_REUSEADDR, 1) {
        return Err(io::Error::last_os_error());
    }
    let raw = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: address.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*address.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `raw` is a valid sockaddr_in on this frame and its size is
    // passed; the fd is the socket owned above.
    let rc = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            (&raw as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    match rc {
        0 => Ok(socket),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Makes `socket` send multicast out of the interface whose address is
/// `interface` (`IP_MULTICAST_IF`, which std does not offer): without it
/// the routing table picks, and a host with no route for the group cannot
/// send at all.
pub fn set_multicast_interface(socket: &UdpSocket, interface: Ipv4Addr) -> io::Result<()> {
    let address = libc::in_addr {
        s_addr: u32::from(interface).to_be(),
    };
    // SAFETY: `address` is a readable in_addr on this frame and its size
    // is passed; the fd is a socket the caller owns for the call.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_IF,
            (&address as *const libc::in_addr).cast(),
            std::mem::size_of::<libc::in_addr>() as libc::socklen_t,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
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

/// `SO_RXQ_OVFL` (asm-generic/socket.h; the same on x86 and arm), which
/// the libc crate does not export for every target.
const SO_RXQ_OVFL: libc::c_int = 40;

/// Asks the kernel to tell, with every datagram `socket` receives, how many
/// it has dropped so far for want of room in its receive buffer
/// (`SO_RXQ_OVFL`), for [`receive_stamped`] to read.
pub fn enable_drop_counts(socket: &impl AsRawFd) -> io::Result<()> {
    match set_int_option(socket, SO_RXQ_OVFL, 1) {
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
    /// The same instant as the kernel stamped it, on `CLOCK_REALTIME`, for
    /// comparing with other kernel stamps (a sender's [`TransmitStamp`]).
    pub arrival_realtime_ns: Option<u64>,
    /// Datagrams the socket had dropped (its buffer full) by the time this
    /// one was queued; `None` unless [`enable_drop_counts`] was called (and
    /// until the first drop, which is when the kernel starts telling).
    pub dropped_before: Option<u32>,
}

/// Control-message room: a `struct timespec` (CMSG_SPACE(16) = 32), or
/// three of them and an extended error with its offender's address
/// (CMSG_SPACE(48) + CMSG_SPACE(32) = 112); aligned as a `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; 128]);

/// Receives one datagram into `buf` (`recvmsg`): its length, its sender and
/// the kernel's receive time moved onto the monotonic clock. Errors are
/// returned as they come (`WouldBlock` on a non-blocking or timed-out
/// socket). Never allocates.
pub fn receive_stamped(socket: &UdpSocket, buf: &mut [u8]) -> io::Result<Datagram> {
    // SAFETY: all-zero is a valid sockaddr_storage, msghdr and buffer.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut control = Control([0; 128]);
    let (len, message) = receive_message(socket, buf, &mut from, &mut control, 0)?;
    let from = socket_addr(&from)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a sender of unknown family"))?;
    let mut arrival_realtime_ns = None;
    let mut dropped_before = None;
    let visit = |level, kind, data: *const u8| match (level, kind) {
        (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
            // SAFETY: an SCM_TIMESTAMPNS message carries a timespec; the
            // data may be unaligned, hence read_unaligned.
            let at: libc::timespec = unsafe { std::ptr::read_unaligned(data.cast()) };
            arrival_realtime_ns = Some(timespec_ns(&at));
        }
        (libc::SOL_SOCKET, SO_RXQ_OVFL) => {
            // SAFETY: an SO_RXQ_OVFL message carries a u32.
            dropped_before = Some(unsafe { std::ptr::read_unaligned(data.cast::<u32>()) });
        }
        _ => {}
    };
    // SAFETY: `message` was just filled by recvmsg into `control`.
    unsafe { each_control_message(&message, visit) };
    Ok(Datagram {
        len,
        from,
        arrival_ns: arrival_realtime_ns.map(realtime_to_monotonic),
        arrival_realtime_ns,
        dropped_before,
    })
}

/// One `recvmsg` on `socket` with `flags`: the data into `buf`, the
/// sender into `from`, control messages into `control`. Returns the data's
/// length and the message header, whose pointers point into the arguments
/// (read its control messages before they go).
fn receive_message(
    socket: &impl AsRawFd,
    buf: &mut [u8],
    from: &mut libc::sockaddr_storage,
    control: &mut Control,
    flags: libc::c_int,
) -> io::Result<(usize, libc::msghdr)> {
    let mut data = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: all-zero is a valid msghdr.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_name = (from as *mut libc::sockaddr_storage).cast();
    message.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    message.msg_iov = &mut data;
    message.msg_iovlen = 1;
    message.msg_control = control.0.as_mut_ptr().cast();
    message.msg_controllen = control.0.len();
    // SAFETY: every pointer in `message` points at a live local or at the
    // caller's buffers, with their true lengths; the kernel writes within
    // those lengths.
    let len = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut message, flags) };
    if len < 0 {
        return Err(io::Error::last_os_error());
    }
    // The iovec is gone when this returns: nobody may follow it.
    message.msg_iov = std::ptr::null_mut();
    message.msg_iovlen = 0;
    Ok((len as usize, message))
}

/// Calls `visit(level, type, data)` for each control message of `message`.
///
/// # Safety
/// `message` must have been filled by `recvmsg`, and its control buffer
/// must still be alive.
unsafe fn each_control_message(
    message: &libc::msghdr,
    mut visit: impl FnMut(libc::c_int, libc::c_int, *const u8),
) {
    // SAFETY: the caller's contract; CMSG_* walk only what recvmsg wrote.
    let mut header = unsafe { libc::CMSG_FIRSTHDR(message) };
    while !header.is_null() {
        // SAFETY: a non-null header from CMSG_FIRSTHDR/NXTHDR is in bounds.
        let cmsg = unsafe { &*header };
        // SAFETY: as above; the data follows its header.
        visit(cmsg.cmsg_level, cmsg.cmsg_type, unsafe {
            libc::CMSG_DATA(header)
        });
        // SAFETY: as above.
        header = unsafe { libc::CMSG_NXTHDR(message, header) };
    }
}

fn timespec_ns(at: &libc::timespec) -> u64 {
    at.tv_sec as u64 * 1_000_000_000 + at.tv_nsec as u64
}

/// Asks the kernel to stamp every datagram `socket` sends with the time it
/// left for the device (`SO_TIMESTAMPING`: software transmit stamps, each
/// numbered in the order of the sends from 0, without the payload), for
/// [`take_transmit_stamp`] to read from the socket's error queue. The stamp
/// is taken when the driver takes the packet, after the queueing
/// discipline: a packet waiting in a shaped link's queue is stamped when it
/// leaves it.
pub fn enable_transmit_timestamps(socket: &impl AsRawFd) -> io::Result<()> {
    let flags = libc::SOF_TIMESTAMPING_TX_SOFTWARE
        | libc::SOF_TIMESTAMPING_SOFTWARE
        | libc::SOF_TIMESTAMPING_OPT_ID
        | libc::SOF_TIMESTAMPING_OPT_TSONLY;
    match set_int_option(socket, libc::SO_TIMESTAMPING, flags as libc::c_int) {
        true => Ok(()),
        false => Err(io::Error::last_os_error()),
    }
}

/// When one sent datagram left for the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransmitStamp {
    /// The datagram's number: the count of datagrams sent on the socket
    /// before it since [`enable_transmit_timestamps`].
    pub id: u32,
    /// On `CLOCK_REALTIME`, as the kernel stamps.
    pub realtime_ns: u64,
}

/// Takes the next transmit stamp from `socket`'s error queue without
/// waiting: `Ok(None)` when there is none (yet). Never allocates.
pub fn take_transmit_stamp(socket: &UdpSocket) -> io::Result<Option<TransmitStamp>> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut control = Control([0; 128]);
    // With OPT_TSONLY no payload comes back; room for one in case.
    let mut payload = [0u8; 64];
    let flags = libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT;
    let message = match receive_message(socket, &mut payload, &mut from, &mut control, flags) {
        Ok((_, message)) => message,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
        Err(e) => return Err(e),
    };
    let (mut stamp_ns, mut id) = (None, None);
    let visit = |level, kind, data: *const u8| match (level, kind) {
        (libc::SOL_SOCKET, libc::SCM_TIMESTAMPING) => {
            // SAFETY: SCM_TIMESTAMPING carries three timespecs, the first
            // the software stamp; possibly unaligned.
            let at: libc::timespec = unsafe { std::ptr::read_unaligned(data.cast()) };
            stamp_ns = Some(timespec_ns(&at));
        }
        (libc::SOL_IP, libc::IP_RECVERR) | (libc::SOL_IPV6, libc::IPV6_RECVERR) => {
            // SAFETY: a RECVERR message carries a sock_extended_err.
            let error: libc::sock_extended_err = unsafe { std::ptr::read_unaligned(data.cast()) };
            let is_send_stamp = error.ee_errno == libc::ENOMSG as u32
                && error.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                && error.ee_info == SCM_TSTAMP_SND;
            if is_send_stamp {
                id = Some(error.ee_data);
            }
        }
        _ => {}
    };
    // SAFETY: `message` was just filled by recvmsg into `control`.
    unsafe { each_control_message(&message, visit) };
    match (id, stamp_ns) {
        (Some(id), Some(realtime_ns)) => Ok(Some(TransmitStamp { id, realtime_ns })),
        // Something other than a transmit stamp (a kind without a message:
        // a message would allocate).
        _ => Err(io::ErrorKind::InvalidData.into()),
    }
}

/// The stamp taken when the driver took the packet (linux/errqueue.h).
const SCM_TSTAMP_SND: u32 = 0;

/// A CLOCK_REALTIME instant on CLOCK_MONOTONIC, by the clocks' offset now.
fn realtime_to_monotonic(realtime_ns: u64) -> u64 {
    (realtime_ns as i128 - clock::realtime_offset_ns()).max(0) as u64
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
    fn two_shared_sockets_bind_one_port_and_an_unshared_one_cannot() {
        let first = bind_udp_shared(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
        let SocketAddr::V4(at) = first.local_addr().unwrap() else {
            panic!("an IPv4 socket")
        };
        assert!(bind_udp_shared(at).is_ok());
        assert!(UdpSocket::bind(at).is_err());
    }

    #[test]
    fn a_larger_receive_buffer_is_granted_or_capped_but_never_smaller_than_before() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = int_option(&socket, libc::SO_RCVBUF).unwrap();
        let after = set_receive_buffer(&socket, 4 << 20).unwrap();
        assert!(after >= before, "{after} < {before}");
    }

    #[test]
    fn a_full_sockets_drops_are_counted_with_the_next_datagram() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver.set_nonblocking(true).unwrap();
        enable_drop_counts(&receiver).unwrap();
        // The smallest buffer the kernel grants holds a few datagrams only.
        let _ = set_int_option(&receiver, libc::SO_RCVBUF, 0);
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = receiver.local_addr().unwrap();
        for _ in 0..200 {
            let _ = sender.send_to(&[0u8; 1400], to);
        }
        let mut buf = [0u8; 1500];
        let mut dropped = None;
        while let Ok(datagram) = receive_stamped(&receiver, &mut buf) {
            dropped = datagram.dropped_before.or(dropped);
        }
        sender.send_to(b"after", to).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        if let Ok(datagram) = receive_stamped(&receiver, &mut buf) {
            dropped = datagram.dropped_before.or(dropped);
        }
        let dropped = dropped.expect("the kernel counted the overflow");
        assert!(dropped > 0 && dropped < 200, "{dropped}");
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
    fn each_sent_datagram_is_stamped_once_in_order_between_send_and_return() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_transmit_timestamps(&sender).unwrap();
        assert_eq!(
            take_transmit_stamp(&sender).unwrap(),
            None,
            "nothing sent yet"
        );
        let mut window = Vec::new();
        for _ in 0..3 {
            let before = clock::realtime_ns();
            sender
                .send_to(b"netphone", receiver.local_addr().unwrap())
                .unwrap();
            window.push((before, clock::realtime_ns()));
        }
        // Loopback transmits within the send call.
        let stamps: Vec<TransmitStamp> = (0..3)
            .map(|_| take_transmit_stamp(&sender).unwrap().expect("a stamp"))
            .collect();
        assert_eq!(
            take_transmit_stamp(&sender).unwrap(),
            None,
            "one per datagram"
        );
        for (i, (stamp, (before, after))) in stamps.iter().zip(&window).enumerate() {
            assert_eq!(stamp.id, i as u32);
            assert!(
                *before <= stamp.realtime_ns && stamp.realtime_ns <= *after,
                "{before} ≤ {} ≤ {after}",
                stamp.realtime_ns
            );
        }
        let mut buf = [0u8; 16];
        let datagram = receive_stamped(&receiver, &mut buf).unwrap();
        assert_eq!(
            datagram.arrival_realtime_ns, None,
            "receive stamps not asked"
        );
    }

    #[test]
    fn a_receive_stamp_on_the_wall_clock_follows_the_transmit_stamp() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_receive_timestamps(&receiver).unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_transmit_timestamps(&sender).unwrap();
        // As above: the kernel may turn receive stamping on late; the first
        // datagrams may be stamped when read.
        let mut buf = [0u8; 16];
        for _ in 0..20 {
            sender
                .send_to(b"x", receiver.local_addr().unwrap())
                .unwrap();
            let sent = take_transmit_stamp(&sender).unwrap().expect("a stamp");
            let datagram = receive_stamped(&receiver, &mut buf).unwrap();
            let read = clock::realtime_ns();
            let arrived = datagram.arrival_realtime_ns.expect("a receive stamp");
            assert!(
                sent.realtime_ns <= arrived && arrived <= read,
                "{} ≤ {arrived} ≤ {read}",
                sent.realtime_ns
            );
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
