//! The abusive data streamer of seed 000 §4.2: a client of the network
//! service that sends and receives as much as the service lets it, and its
//! peer on the far side of the link.
//!
//! The streamer sends full datagrams to the peer whenever its flow's
//! channel has room, and pulls data from the peer by credits: it grants
//! the peer a window of datagrams and grants more as they arrive, so what
//! it receives is what the service hands it (plus the window in flight),
//! never a flood the link's own queue would have to absorb. The peer
//! counts what it is sent and sends what it is granted.
//!
//! It owns its flow and its counts; it must never pick its scheduling (its
//! process's cell does) and never sleep with nothing bounded: every wait
//! has a timeout.

use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tessera_services::net::{ChannelError, Flow, ToSend};
use tessera_sys::clock::monotonic_ns;

/// The size of every datagram either way: a full Ethernet frame's UDP
/// payload.
pub const DATAGRAM: usize = 1472;
/// Datagrams the peer may have in flight towards the streamer.
pub const WINDOW: u32 = 2048;
/// The streamer grants credit in batches of this many datagrams.
const GRANT_BATCH: u32 = 64;
/// How long the streamer waits when it can neither send nor receive.
const IDLE_WAIT: Duration = Duration::from_millis(1);
const DATA: u8 = 0;
const CREDIT: u8 = 1;

/// What the streamer moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StreamReport {
    pub sent_bytes: u64,
    pub received_bytes: u64,
    pub seconds: f64,
}

impl StreamReport {
    pub fn sent_mbps(&self) -> f64 {
        self.sent_bytes as f64 * 8.0 / self.seconds.max(1e-9) / 1e6
    }

    pub fn received_mbps(&self) -> f64 {
        self.received_bytes as f64 * 8.0 / self.seconds.max(1e-9) / 1e6
    }
}

fn to(peer: SocketAddr) -> Option<SocketAddrV4> {
    match peer {
        SocketAddr::V4(v4) => Some(v4),
        SocketAddr::V6(_) => None,
    }
}

/// Streams through `flow` to and from the peer at `peer` until `stop`.
pub fn stream(
    flow: &mut Flow,
    peer: SocketAddr,
    stop: &AtomicBool,
) -> Result<StreamReport, ChannelError> {
    let start = monotonic_ns();
    let mut data = [0u8; DATAGRAM];
    data[0] = DATA;
    let mut report = StreamReport::default();
    let mut unanswered = 0u32;
    grant(flow, peer, WINDOW)?;
    while !stop.load(Ordering::Relaxed) {
        let mut moved = false;
        while let Some((_, bytes)) = flow.try_receive()? {
            report.received_bytes += bytes.len() as u64;
            unanswered += 1;
            moved = true;
        }
        if unanswered >= GRANT_BATCH && grant(flow, peer, unanswered).is_ok() {
            unanswered = 0;
        }
        let meta = ToSend {
            origin_ns: 0,
            queued_ns: monotonic_ns(),
            to: to(peer),
        };
        match flow.try_send(&data, meta) {
            Ok(()) => {
                report.sent_bytes += DATAGRAM as u64;
                moved = true;
            }
            Err(ChannelError::Full) => {}
            Err(e) => return Err(e),
        }
        if !moved {
            match flow.receive(IDLE_WAIT) {
                Ok((_, bytes)) => {
                    report.received_bytes += bytes.len() as u64;
                    unanswered += 1;
                }
                Err(ChannelError::TimedOut) => {}
                Err(e) => return Err(e),
            }
        }
    }
    report.seconds = (monotonic_ns() - start) as f64 / 1e9;
    Ok(report)
}

/// Lets the peer send `datagrams` more.
fn grant(flow: &mut Flow, peer: SocketAddr, datagrams: u32) -> Result<(), ChannelError> {
    let mut credit = [0u8; 5];
    credit[0] = CREDIT;
    credit[1..].copy_from_slice(&datagrams.to_le_bytes());
    let meta = ToSend {
        origin_ns: 0,
        queued_ns: monotonic_ns(),
        to: to(peer),
    };
    flow.try_send(&credit, meta)
}

/// What the peer saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PeerReport {
    pub received_bytes: u64,
    pub sent_bytes: u64,
}

/// The streamer's peer on `socket` (bound, with a read timeout): counts
/// the data sent to it and sends as many datagrams as it is granted, until
/// `stop`.
pub fn serve_peer(socket: &UdpSocket, stop: &AtomicBool) -> std::io::Result<PeerReport> {
    let mut buf = [0u8; DATAGRAM];
    let out = [DATA; DATAGRAM];
    let mut report = PeerReport::default();
    while !stop.load(Ordering::Relaxed) {
        let (len, from) = match socket.recv_from(&mut buf) {
            Ok(received) => received,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        report.received_bytes += len as u64;
        if len == 5 && buf[0] == CREDIT {
            let granted = u32::from_le_bytes(buf[1..5].try_into().expect("4 bytes"));
            for _ in 0..granted.min(WINDOW) {
                // A full send buffer drops, as a flooded link would.
                if socket.send_to(&out, from).is_ok() {
                    report.sent_bytes += DATAGRAM as u64;
                }
            }
        }
    }
    Ok(report)
}
