//! Marking a socket's packets for the queueing disciplines on their way:
//! the kernel's packet priority (`SO_PRIORITY`, which `prio`/`pfifo_fast`
//! bands follow) and the IP header's DSCP (`IP_TOS`, which switches and the
//! far host's qdiscs can follow).
//!
//! It owns these two options and nothing else; it must never decide which
//! flow deserves which mark (the network service's policy does).

use crate::error::{Error, Result};
use std::os::fd::AsRawFd;

/// The packet priority of real-time traffic: `TC_PRIO_INTERACTIVE`, which
/// the default priomap of `prio` and `pfifo_fast` puts in band 0.
pub const PRIORITY_REAL_TIME: u32 = 6;
/// The DSCP "expedited forwarding" (46) as the TOS byte carries it.
pub const TOS_EXPEDITED: u8 = 46 << 2;

/// Gives every packet `socket` sends the kernel priority `priority` (0–6
/// without CAP_NET_ADMIN) and the TOS byte `tos` (DSCP << 2).
pub fn mark(socket: &impl AsRawFd, priority: u32, tos: u8) -> Result<()> {
    // The TOS first: setting it also sets the packet priority, to the TOS's
    // own (EF gives 4, band 1), which the priority asked for then replaces.
    set(socket, libc::IPPROTO_IP, libc::IP_TOS, tos as libc::c_int)?;
    set(
        socket,
        libc::SOL_SOCKET,
        libc::SO_PRIORITY,
        priority as libc::c_int,
    )
    .map_err(|e| e.with_fix("priorities above 6 need CAP_NET_ADMIN"))
}

fn set(
    socket: &impl AsRawFd,
    level: libc::c_int,
    option: libc::c_int,
    value: libc::c_int,
) -> Result<()> {
    // SAFETY: `value` is a readable c_int on this frame and its size is
    // passed; the fd is a socket the caller owns for the call.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(Error::last_os(format!(
            "mark a socket's packets (setsockopt {level}/{option} = {value})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_udp_socket_takes_the_real_time_marks() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        mark(&socket, PRIORITY_REAL_TIME, TOS_EXPEDITED).unwrap();
        let priority = crate::net::socket_int_option(&socket, libc::SO_PRIORITY).unwrap();
        assert_eq!(priority, 6);
    }
}
