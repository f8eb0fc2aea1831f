//! The speaker: takes mike's packets from its [`Inbox`] — T3, the kernel's
//! receive stamp — reads the clock as each is delivered (T4), keeps the
//! stamps and drops the data. Today its inbox is a socket of its own; the
//! [`Inbox`] trait is where tessera's network service can hand it packets
//! instead.
//!
//! Owns the receive loop and its log. The loop must never allocate or
//! print; its log is sized before the first packet can come.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use super::{read_header, Stream};
use crate::threads::Setup;
use tessera_sys::clock::realtime_ns;
use tessera_sys::net::{enable_receive_timestamps, receive_stamped};

/// Longest wait for a packet before the speaker looks at the time.
const POLL: Duration = Duration::from_millis(20);

/// One packet handed to the speaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// Bytes written into the caller's buffer.
    pub len: usize,
    /// When the packet came off the network (CLOCK_REALTIME ns).
    pub t3_ns: u64,
}

/// Where the speaker's packets come from.
pub trait Inbox {
    /// Waits for the next packet a short while at most (then `WouldBlock`
    /// or `TimedOut`: the speaker looks at the time between two waits) and
    /// copies it into `buf`. Must not allocate.
    fn receive(&mut self, buf: &mut [u8]) -> io::Result<Delivery>;
}

/// A UDP socket of the speaker's own, stamping arrivals.
pub struct SocketInbox(UdpSocket);

impl SocketInbox {
    pub fn bind(address: SocketAddr) -> io::Result<SocketInbox> {
        let socket = UdpSocket::bind(address)?;
        enable_receive_timestamps(&socket)?;
        socket.set_read_timeout(Some(POLL))?;
        Ok(SocketInbox(socket))
    }
}

impl Inbox for SocketInbox {
    fn receive(&mut self, buf: &mut [u8]) -> io::Result<Delivery> {
        let datagram = receive_stamped(&self.0, buf)?;
        // Stamping is switched on asynchronously: the first datagrams after
        // it was asked for may arrive unstamped; they count as arriving
        // when read (a later T3, never an earlier one).
        let t3_ns = datagram.arrival_realtime_ns.unwrap_or_else(realtime_ns);
        Ok(Delivery {
            len: datagram.len,
            t3_ns,
        })
    }
}

/// A packet as the speaker got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arrival {
    pub seq: u64,
    /// T1 as the packet carries it.
    pub t1_ns: u64,
    pub t3_ns: u64,
    pub t4_ns: u64,
}

#[derive(Debug, Default)]
pub(crate) struct SpeakerLog {
    pub arrivals: Vec<Arrival>,
    /// Datagrams that were not a netphone packet, or found the log full.
    pub unexpected: u64,
    pub error: Option<String>,
}

/// Sets the speaker's thread up, opens its inbox at `address`, says so on
/// `ready`, and receives until `packets` came or the wall clock passes
/// `until` (CLOCK_REALTIME ns).
pub(crate) fn run(
    address: SocketAddr,
    stream: Stream,
    packets: u64,
    setup: Setup,
    ready: &mpsc::Sender<Result<(), String>>,
    until: &AtomicU64,
) -> SpeakerLog {
    let opened = setup().and_then(|()| {
        SocketInbox::bind(address).map_err(|e| format!("the speaker's socket at {address}: {e}"))
    });
    let mut inbox = match opened {
        Ok(inbox) => inbox,
        Err(e) => {
            let _ = ready.send(Err(e));
            return SpeakerLog::default();
        }
    };
    let mut log = SpeakerLog {
        arrivals: Vec::with_capacity(packets as usize),
        ..SpeakerLog::default()
    };
    // One byte more than a packet: a longer datagram is not mike's.
    let mut buf = vec![0u8; stream.packet_bytes + 1];
    let _ = ready.send(Ok(()));
    while (log.arrivals.len() as u64) < packets && realtime_ns() < until.load(Ordering::Relaxed) {
        let received = tessera_rtguard::rt_section(|| {
            let received = inbox.receive(&mut buf);
            deliver(received, realtime_ns(), &buf, stream, &mut log)
        });
        if let Err(e) = received {
            log.error = Some(format!("the speaker's receive: {e}"));
            break;
        }
    }
    log
}

/// Logs one receive's outcome, delivered at `t4_ns`; a time-out is none,
/// other errors end the loop.
fn deliver(
    received: io::Result<Delivery>,
    t4_ns: u64,
    buf: &[u8],
    stream: Stream,
    log: &mut SpeakerLog,
) -> io::Result<()> {
    let delivery = match received {
        Ok(delivery) => delivery,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            return Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
        Err(e) => return Err(e),
    };
    let header = read_header(&buf[..delivery.len]);
    match header {
        Some((seq, t1_ns))
            if delivery.len == stream.packet_bytes
                && log.arrivals.len() < log.arrivals.capacity() =>
        {
            log.arrivals.push(Arrival {
                seq,
                t1_ns,
                t3_ns: delivery.t3_ns,
                t4_ns,
            })
        }
        _ => log.unexpected += 1,
    }
    Ok(())
}
