//! The speaker: takes mike's packets from its [`Inbox`] — T3, the kernel's
//! receive stamp — reads the clock as each is delivered (T4), keeps the
//! stamps and drops the data. Its inbox is a socket of its own
//! ([`SocketInbox`]), or a real-time flow of tessera's network service
//! ([`ServiceInbox`]): the service, a process in the speaker's host, owns
//! the socket, reads it on its real-time thread before any bulk work and
//! hands each datagram over with the kernel's stamp (seed 004 §3.4's
//! real-time packets first, on the receiving host).
//!
//! Owns the receive loop and its log. The loop must never allocate or
//! print; its log is sized before the first packet can come. It never
//! starts or stops the service (the caller's hook does; see
//! [`super::Hooks`]).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use super::{read_header, Receive, Stream};
use crate::threads::Setup;
use tessera_services::net::{client, ChannelError, Class, Flow, FlowRequest, FlowStatus};
use tessera_sys::clock::{realtime_ns, realtime_offset_ns};
use tessera_sys::net::{enable_receive_timestamps, receive_stamped};

/// Longest wait for a packet before the speaker looks at the time.
const POLL: Duration = Duration::from_millis(20);
/// The speaker's flow reserves this many times the stream's rate: a little
/// above it, so that the packets behind a late one catch up.
const RESERVATION_FACTOR: f64 = 1.25;
/// And is limited to this many times its reservation. mClock's limit has
/// no burst allowance: limited to the reservation, a packet that came
/// sooner than 0.8 of a period after the one before (right behind a late
/// one) would be held until then; at 4× only one that comes within 0.2 of
/// a period is (the second packet of a late mike's burst).
const LIMIT_FACTOR: u64 = 4;
/// Slots of the flow's channels (a power of two): 0.5 s of the 500 Hz
/// stream.
const SLOTS: usize = 256;

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
    /// copies it into `buf` (a longer packet is cut to `buf`'s length).
    /// Must not allocate, not even for an error.
    fn receive(&mut self, buf: &mut [u8]) -> io::Result<Delivery>;

    /// What ended the last failed receive, in words, if `receive`'s error
    /// (allocation-free, so bare) does not say it all.
    fn failure(&mut self) -> Option<String> {
        None
    }
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

/// A real-time flow of the network service listening at a Unix socket:
/// the service binds the speaker's address (so it must run in the
/// speaker's host), and hands each datagram over with the kernel's receive
/// stamp.
///
/// T3 is that stamp, which the service moved onto CLOCK_MONOTONIC, moved
/// back onto CLOCK_REALTIME by the clocks' offset when the speaker takes
/// the packet. Both clocks are slewed alike, so the round trip's error is
/// only how the two offsets were read; both sides read it as
/// `tessera_sys::clock::realtime_offset_ns` does (the wall clock between
/// two monotonic reads, within half their gap, read again when a stall
/// widened it), so T3 is within a fraction of a microsecond of the socket's
/// own stamp — unless the wall clock is stepped (settimeofday, an NTP step)
/// between the service's read and this one, which moves T3 by the step.
pub struct ServiceInbox {
    flow: Flow,
    /// What ended the last failed receive.
    failed: Option<ChannelError>,
}

impl ServiceInbox {
    /// Opens a flow as `request` asks with the service listening at
    /// `service`; the service's refusal comes back with its reason.
    pub fn open(service: &Path, request: &FlowRequest) -> Result<ServiceInbox, String> {
        client::connect(service)
            .and_then(|socket| Flow::open(socket, request))
            .map(|flow| ServiceInbox { flow, failed: None })
            .map_err(|e| e.to_string())
    }

    /// The speaker's flow for `stream` at `address`: real-time (the
    /// service's real-time thread, before any bulk work), reserving a
    /// little above the stream's rate, limited to [`LIMIT_FACTOR`] times
    /// that, datagrams one byte longer than a packet (a longer one is not
    /// mike's, and shows as such).
    pub fn request(address: SocketAddr, stream: Stream) -> FlowRequest {
        let reservation_bps = (stream.bits_per_second() * RESERVATION_FACTOR).ceil() as u64;
        FlowRequest {
            name: "speaker".into(),
            class: Class::RealTime,
            reservation_bps,
            weight: 1,
            limit_bps: Some(reservation_bps * LIMIT_FACTOR),
            bind: address,
            peer: None,
            max_datagram: stream.packet_bytes + 1,
            slots: SLOTS,
            response_deadline_ns: None,
            multicast: None,
            rtp_clock_rate: None,
        }
    }

    /// The service's counters of this flow.
    pub fn counters(&self) -> Result<FlowStatus, String> {
        let status = self.flow.status().map_err(|e| e.to_string())?;
        status
            .flows
            .into_iter()
            .find(|f| f.id == self.flow.id())
            .ok_or_else(|| "the service lists no such flow".to_string())
    }
}

impl Inbox for ServiceInbox {
    fn receive(&mut self, buf: &mut [u8]) -> io::Result<Delivery> {
        let (received, bytes) = match self.flow.receive(POLL) {
            Ok(datagram) => datagram,
            Err(ChannelError::TimedOut) => return Err(io::ErrorKind::TimedOut.into()),
            Err(e) => {
                self.failed = Some(e);
                return Err(io::ErrorKind::Other.into());
            }
        };
        let len = bytes.len().min(buf.len());
        buf[..len].copy_from_slice(&bytes[..len]);
        // The service stamps what the kernel left unstamped when it reads
        // it; a stamp of 0 (none) counts as arriving now.
        let t3_ns = match received.arrival_ns {
            0 => realtime_ns(),
            at => monotonic_to_realtime(at),
        };
        Ok(Delivery { len, t3_ns })
    }

    fn failure(&mut self) -> Option<String> {
        self.failed
            .take()
            .map(|e| format!("the network service's flow: {e}"))
    }
}

/// A CLOCK_MONOTONIC instant on CLOCK_REALTIME, by the clocks' offset now
/// (read as [`realtime_offset_ns`] says). Allocation-free.
fn monotonic_to_realtime(monotonic: u64) -> u64 {
    (monotonic as i128 + realtime_offset_ns()).max(0) as u64
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
    /// The service's counters of the speaker's flow, read after the last
    /// receive (None: no service).
    pub service: Option<Result<FlowStatus, String>>,
}

/// Sets the speaker's thread up, opens its inbox at `address` as `receive`
/// says, says so on `ready`, and receives until `packets` came or the wall
/// clock passes `until` (CLOCK_REALTIME ns).
pub(crate) fn run(
    address: SocketAddr,
    stream: Stream,
    packets: u64,
    receive: &Receive,
    setup: Setup,
    ready: &mpsc::Sender<Result<(), String>>,
    until: &AtomicU64,
) -> SpeakerLog {
    if let Err(e) = setup() {
        let _ = ready.send(Err(e));
        return SpeakerLog::default();
    }
    let refused = |e: String| {
        let _ = ready.send(Err(e));
        SpeakerLog::default()
    };
    match receive {
        Receive::Socket => match SocketInbox::bind(address) {
            Ok(mut inbox) => listen(&mut inbox, stream, packets, ready, until),
            Err(e) => refused(format!("the speaker's socket at {address}: {e}")),
        },
        Receive::Service { socket } => {
            let request = ServiceInbox::request(address, stream);
            match ServiceInbox::open(socket, &request) {
                Ok(mut inbox) => {
                    let mut log = listen(&mut inbox, stream, packets, ready, until);
                    log.service = Some(inbox.counters());
                    log
                }
                Err(e) => refused(format!(
                    "the speaker's flow at {address} through the network service at {}: {e}",
                    socket.display()
                )),
            }
        }
    }
}

/// Says the speaker is ready on `ready`, then takes packets from `inbox`
/// until `packets` came or the wall clock passes `until`.
fn listen(
    inbox: &mut impl Inbox,
    stream: Stream,
    packets: u64,
    ready: &mpsc::Sender<Result<(), String>>,
    until: &AtomicU64,
) -> SpeakerLog {
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
            let why = inbox.failure().unwrap_or_else(|| e.to_string());
            log.error = Some(format!("the speaker's receive: {why}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_speakers_flow_is_real_time_a_little_above_the_stream() {
        let address: SocketAddr = "10.1.2.3:5004".parse().unwrap();
        let request = ServiceInbox::request(address, Stream::AUDIO);
        assert_eq!(request.class, Class::RealTime);
        assert_eq!(request.reservation_bps, 1_500_000);
        assert_eq!(request.limit_bps, Some(6_000_000));
        assert_eq!((request.bind, request.max_datagram), (address, 1501));
        assert!(request.slots.is_power_of_two());
    }
}
