//! What the network service and its clients say to each other: control
//! frames on the client's Unix socket (a flow asked for, granted or refused,
//! counters), and the fixed header before each datagram in a flow's two
//! channels.
//!
//! A control frame is a little-endian u32 length and that many bytes of
//! JSON: the hand-over records of `tessera-channel` follow a grant on the
//! same socket, so a frame must be read exactly, never through a buffer
//! that could swallow them. It owns the formats; it must never trust a
//! length or an address a peer sent without checking it.

pub use crate::control::{receive, send, WireError};
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use tessera_aes67::HeardSession;

/// A flow's class: real-time flows are received, handed over and sent by
/// the service's real-time thread, before any bulk work (seed 004 §3.4).
/// The policy's own type, so that the scheduler reads it as it came.
pub use tessera_policy::mclock::FlowClass as Class;

/// A client's request for a flow: where its datagrams arrive and go, and
/// its QoS spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowRequest {
    /// For counters and logs, e.g. "music".
    pub name: String,
    pub class: Class,
    /// Minimum throughput each way, bits/s (0: none).
    pub reservation_bps: u64,
    /// Share of the excess, relative to other flows' weights.
    pub weight: u32,
    /// Most throughput each way, bits/s; `None`: no limit (bulk) or the
    /// reservation (real-time).
    pub limit_bps: Option<u64>,
    /// The local address the service binds for this flow.
    pub bind: SocketAddr,
    /// Where datagrams the client sends without an address go.
    pub peer: Option<SocketAddr>,
    /// The largest datagram either way, bytes.
    pub max_datagram: usize,
    /// Slots of each of the flow's two channels (a power of two).
    pub slots: usize,
    /// Answers sent later than this after the arrival of what they answer
    /// (their origin stamp) are counted late; `None`: none counted.
    pub response_deadline_ns: Option<u64>,
    /// How the flow joins its group (when `bind` is a multicast address)
    /// and sends to groups; `None`: [`Multicast::default`].
    #[serde(default)]
    pub multicast: Option<Multicast>,
    /// The flow carries RTP at this clock rate: the service counts its
    /// sequence gaps, reordering and jitter ([`FlowStatus::rtp`]).
    #[serde(default)]
    pub rtp_clock_rate: Option<u32>,
}

/// A multicast flow's membership and sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Multicast {
    /// The address of the interface to join and send on (0.0.0.0: the one
    /// the routing table picks for the group).
    pub interface: Ipv4Addr,
    /// Hops a sent datagram may take.
    pub ttl: u8,
    /// Whether receivers on this host hear what the flow sends.
    pub loopback: bool,
}

impl Default for Multicast {
    /// Any interface, AES67's customary TTL, heard on this host too (a
    /// second program here may be the receiver).
    fn default() -> Self {
        Multicast {
            interface: Ipv4Addr::UNSPECIFIED,
            ttl: 32,
            loopback: true,
        }
    }
}

/// What the service counted of an RTP flow's arrivals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RtpStats {
    pub packets: u64,
    /// Sequence numbers never seen (a packet that comes later is taken off
    /// and counted reordered).
    pub lost: u64,
    pub reordered: u64,
    pub duplicates: u64,
    /// The sender restarted: a new SSRC, or a sequence jump.
    pub restarts: u64,
    /// Datagrams that were not RTP.
    pub not_rtp: u64,
    /// The latest sender's synchronisation source.
    pub ssrc: u32,
    /// RFC 3550's interarrival jitter estimate, µs.
    pub jitter_us: f64,
}

/// The service's answer to a [`FlowRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Grant {
    /// The flow exists; its two channels follow on the socket: first the
    /// one to the client (the client takes its consumer end), then the one
    /// from it (its producer end).
    Granted {
        id: u32,
        local: SocketAddr,
    },
    Refused {
        reason: String,
    },
}

/// A client's later requests on its socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Request {
    Open(FlowRequest),
    /// Every flow's counters, and the service's capacity.
    Status,
    /// Announce this SDP (SAP) while the connection lasts.
    Announce {
        sdp: String,
    },
    /// The streams announced on the network.
    Streams,
}

/// The answer to [`Request::Announce`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnnounceReply {
    Announced { id: u64 },
    Refused { reason: String },
}

/// The answer to [`Request::Streams`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StreamsReply {
    Streams {
        sessions: Vec<HeardSession>,
        /// Datagrams on the SAP port that were not announcements of an
        /// audio stream.
        unreadable: u64,
    },
    Refused {
        reason: String,
    },
}

/// Delay percentiles of one direction, nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Delays {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub mean_ns: u64,
}

/// One direction of a flow, counted by the service.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionStats {
    pub bytes: u64,
    pub packets: u64,
    /// Datagrams the service lost: no room in the client's channel (in),
    /// a send the kernel refused (out).
    pub drops: u64,
    /// In: datagrams the kernel dropped before the service read them (the
    /// flow's socket buffer was full: the flow was served slower than it
    /// came). Always 0 out.
    #[serde(default)]
    pub overflowed: u64,
    /// In: kernel receive stamp → handed to the client; out: the client's
    /// enqueue → written to the socket.
    pub queueing: Delays,
}

/// A flow as `tessera net status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowStatus {
    pub id: u32,
    pub name: String,
    pub client_pid: i32,
    pub class: Class,
    pub reservation_bps: u64,
    pub weight: u32,
    pub limit_bps: Option<u64>,
    pub local: SocketAddr,
    pub received: DirectionStats,
    pub sent: DirectionStats,
    /// Datagrams sent that answered a received one (an origin stamp): from
    /// the kernel's receive stamp of what they answer to their send, the
    /// seed's Δt = t2 − t1 measured in the service.
    pub response: Delays,
    /// The response histogram: (largest value of a bucket, count), the
    /// buckets that have any.
    pub response_buckets: Vec<(u64, u64)>,
    /// Answers later than the flow's response deadline, counted exactly.
    pub late_responses: u64,
    /// An RTP flow's sequence and jitter counts.
    #[serde(default)]
    pub rtp: Option<RtpStats>,
}

/// The service and its flows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    pub discipline: String,
    /// Each way: the link's rate, what the service's CPU can carry, and
    /// what admission lets be committed.
    pub link_bps: u64,
    pub cpu_bps: u64,
    pub usable_bps: u64,
    pub committed_bps: u64,
    /// How the real-time thread runs (its cell and reservation, or why
    /// not).
    pub real_time: String,
    pub flows: Vec<FlowStatus>,
}

/// The answer to [`Request::Status`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StatusReply {
    Status(Status),
    /// Spelt as [`Grant::Refused`]: a caller the policy refuses gets it
    /// whatever it asked.
    Refused {
        reason: String,
    },
}

/// Bytes before the datagram in each slot of either channel.
pub const HEADER: usize = 24;

/// What the service tells the client about a datagram it hands over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The kernel's receive stamp, `CLOCK_MONOTONIC` ns (0 if none).
    pub arrival_ns: u64,
    /// When the service pushed it into the channel, `CLOCK_MONOTONIC` ns.
    pub handed_ns: u64,
    pub from: SocketAddrV4,
}

/// What the client tells the service about a datagram to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToSend {
    /// The arrival stamp of the datagram this answers (0: none): the
    /// service counts the response time from it.
    pub origin_ns: u64,
    /// When the client queued it, `CLOCK_MONOTONIC` ns.
    pub queued_ns: u64,
    /// `None`: the flow's peer.
    pub to: Option<SocketAddrV4>,
}

fn put_address(slot: &mut [u8], address: Option<SocketAddrV4>) {
    let (ip, port) = address.map_or((0, 0), |a| (u32::from(*a.ip()), a.port()));
    slot[16..20].copy_from_slice(&ip.to_le_bytes());
    slot[20..22].copy_from_slice(&port.to_le_bytes());
}

fn address(slot: &[u8]) -> Option<SocketAddrV4> {
    let ip = u32::from_le_bytes(slot[16..20].try_into().expect("4 bytes"));
    let port = u16::from_le_bytes(slot[20..22].try_into().expect("2 bytes"));
    (port != 0).then(|| SocketAddrV4::new(Ipv4Addr::from(ip), port))
}

fn stamp(slot: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(slot[at..at + 8].try_into().expect("8 bytes"))
}

impl Received {
    /// Fills `slot`'s header (`slot` is at least [`HEADER`] bytes).
    pub fn encode(&self, slot: &mut [u8]) {
        slot[0..8].copy_from_slice(&self.arrival_ns.to_le_bytes());
        slot[8..16].copy_from_slice(&self.handed_ns.to_le_bytes());
        put_address(slot, Some(self.from));
    }

    /// The header of a message the service handed over; `None` if it is
    /// shorter than one.
    pub fn decode(message: &[u8]) -> Option<Received> {
        (message.len() >= HEADER).then(|| Received {
            arrival_ns: stamp(message, 0),
            handed_ns: stamp(message, 8),
            from: address(message).unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
        })
    }
}

impl ToSend {
    pub fn encode(&self, slot: &mut [u8]) {
        slot[0..8].copy_from_slice(&self.origin_ns.to_le_bytes());
        slot[8..16].copy_from_slice(&self.queued_ns.to_le_bytes());
        put_address(slot, self.to);
    }

    pub fn decode(message: &[u8]) -> Option<ToSend> {
        (message.len() >= HEADER).then(|| ToSend {
            origin_ns: stamp(message, 0),
            queued_ns: stamp(message, 8),
            to: address(message),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let mut slot = [0u8; HEADER + 4];
        let received = Received {
            arrival_ns: 7,
            handed_ns: 9,
            from: "10.0.0.2:4000".parse().unwrap(),
        };
        received.encode(&mut slot);
        assert_eq!(Received::decode(&slot), Some(received));
        let to_send = ToSend {
            origin_ns: 1,
            queued_ns: 2,
            to: None,
        };
        to_send.encode(&mut slot);
        assert_eq!(ToSend::decode(&slot), Some(to_send));
        assert_eq!(ToSend::decode(&slot[..HEADER - 1]), None);
    }
}
