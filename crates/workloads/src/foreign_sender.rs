//! An AES67 sender that is not tessera's, as a device of another maker
//! sends: RTP (RFC 3550) with an L16 or L24 payload (RFC 3190) written
//! here from the RFCs, not through `tessera_aes67`'s packetiser, with a
//! payload type of its own, timestamps from a clock of its own that runs
//! `clock_ppm` off this machine's, and each packet sent up to `jitter` late
//! at random. Receivers are tested against it: a shared mistake of
//! tessera's packetiser and jitter buffer cannot cancel out here, and its
//! clock never agrees with the receiver's.
//!
//! It owns its socket and its sending thread (created in the caller's
//! network namespace: start it from a thread of a LAN host). It must never
//! read the media clock: its clock is `CLOCK_MONOTONIC` scaled.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::random::Random;
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns};
use tessera_sys::sched::{set_policy, Policy};

/// What the sender sends, and how off its timing is.
#[derive(Debug, Clone, PartialEq)]
pub struct ForeignSenderSpec {
    pub destination: SocketAddrV4,
    /// The address of the interface multicast leaves by.
    pub interface: Ipv4Addr,
    pub payload_type: u8,
    /// 2 (L16) or 3 (L24).
    pub bytes_per_sample: usize,
    pub channels: u16,
    pub sample_rate: u32,
    pub frames_per_packet: u32,
    /// How fast its clock runs against this machine's, parts per million
    /// (positive: it sends more samples a second).
    pub clock_ppm: f64,
    /// Each packet leaves up to this much after its time, uniformly at
    /// random.
    pub jitter: Duration,
    /// The random jitter's seed (a run is reproducible).
    pub seed: u64,
    /// Its thread's SCHED_FIFO priority, if any: a device's jitter is its
    /// own, not this machine's load.
    pub fifo_priority: Option<u32>,
}

/// What the sender did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ForeignSenderCounts {
    pub sent: u64,
    /// Datagrams the socket refused (a path down, a full queue).
    pub failed: u64,
}

/// A running sender; [`ForeignSender::stop`] ends it.
pub struct ForeignSender {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<ForeignSenderCounts>,
}

#[derive(Debug, thiserror::Error)]
pub enum ForeignSenderError {
    #[error("the foreign sender's socket: {0}")]
    Socket(#[from] std::io::Error),
    #[error("{0} bytes a sample: an L16 or L24 payload has 2 or 3")]
    SampleWidth(usize),
}

impl ForeignSender {
    /// Opens its socket (in this thread's network namespace) and starts
    /// sending.
    pub fn start(spec: ForeignSenderSpec) -> Result<ForeignSender, ForeignSenderError> {
        if !(2..=3).contains(&spec.bytes_per_sample) {
            return Err(ForeignSenderError::SampleWidth(spec.bytes_per_sample));
        }
        let socket = UdpSocket::bind((spec.interface, 0))?;
        if spec.destination.ip().is_multicast() {
            socket.set_multicast_ttl_v4(32)?;
            tessera_sys::net::set_multicast_interface(&socket, spec.interface)?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("foreign-sender".into())
            .spawn(move || send(&spec, &socket, &stopped))?;
        Ok(ForeignSender { stop, thread })
    }

    /// Stops sending; what it sent.
    pub fn stop(self) -> ForeignSenderCounts {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

fn send(spec: &ForeignSenderSpec, socket: &UdpSocket, stop: &AtomicBool) -> ForeignSenderCounts {
    if let Some(priority) = spec.fifo_priority {
        // Without the right, it sends as any program does.
        let _ = set_policy(0, &Policy::Fifo { priority });
    }
    let mut random = Random::new(spec.seed);
    // Sequence, timestamp and SSRC start anywhere (RFC 3550 §5.1).
    let ssrc = (random.next() * f64::from(u32::MAX)) as u32;
    let first_sequence = (random.next() * 65_536.0) as u16;
    let first_timestamp = (random.next() * f64::from(u32::MAX)) as u32;
    let packet_ns = f64::from(spec.frames_per_packet) * 1e9
        / (f64::from(spec.sample_rate) * (1.0 + spec.clock_ppm * 1e-6));
    let jitter_ns = spec.jitter.as_nanos() as f64;
    let mut datagram = vec![0u8; 12 + packet_bytes(spec)];
    let mut counts = ForeignSenderCounts::default();
    let start = monotonic_ns();
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let due = start + (n as f64 * packet_ns + random.next() * jitter_ns) as u64;
        sleep_until_monotonic_ns(due);
        let frame = n * u64::from(spec.frames_per_packet);
        write_header(
            &mut datagram,
            spec.payload_type,
            first_sequence.wrapping_add(n as u16),
            first_timestamp.wrapping_add(frame as u32),
            ssrc,
        );
        write_tone(spec, frame, &mut datagram[12..]);
        match socket.send_to(&datagram, spec.destination) {
            Ok(_) => counts.sent += 1,
            Err(_) => counts.failed += 1,
        }
        n += 1;
    }
    counts
}

fn packet_bytes(spec: &ForeignSenderSpec) -> usize {
    spec.frames_per_packet as usize * usize::from(spec.channels) * spec.bytes_per_sample
}

/// RFC 3550 §5.1: V=2, no padding, extension or CSRC, marker 0.
fn write_header(out: &mut [u8], payload_type: u8, sequence: u16, timestamp: u32, ssrc: u32) {
    out[0] = 0x80;
    out[1] = payload_type & 0x7f;
    out[2..4].copy_from_slice(&sequence.to_be_bytes());
    out[4..8].copy_from_slice(&timestamp.to_be_bytes());
    out[8..12].copy_from_slice(&ssrc.to_be_bytes());
}

/// A 1 kHz tone at a quarter of full scale on every channel, from frame
/// `first` of the stream: big-endian two's complement, interleaved.
fn write_tone(spec: &ForeignSenderSpec, first: u64, payload: &mut [u8]) {
    let width = spec.bytes_per_sample;
    let frame_bytes = usize::from(spec.channels) * width;
    for (k, frame) in payload.chunks_exact_mut(frame_bytes).enumerate() {
        let t = (first + k as u64) as f64 / f64::from(spec.sample_rate);
        let x = 0.25 * (2.0 * std::f64::consts::PI * 1000.0 * t).sin();
        let full = (1i64 << (8 * width - 1)) as f64;
        let value = (x * full).round() as i32;
        let bytes = value.to_be_bytes();
        for sample in frame.chunks_exact_mut(width) {
            sample.copy_from_slice(&bytes[4 - width..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ForeignSenderSpec {
        ForeignSenderSpec {
            destination: "127.0.0.1:5004".parse().unwrap(),
            interface: Ipv4Addr::LOCALHOST,
            payload_type: 101,
            bytes_per_sample: 3,
            channels: 2,
            sample_rate: 48_000,
            frames_per_packet: 48,
            clock_ppm: 50.0,
            jitter: Duration::from_millis(1),
            seed: 7,
            fifo_priority: None,
        }
    }

    #[test]
    fn its_packets_are_what_tessera_parses() {
        let mut datagram = vec![0u8; 12 + packet_bytes(&spec())];
        write_header(&mut datagram, 101, 65_535, 0xdead_beef, 9);
        write_tone(&spec(), 12, &mut datagram[12..]);
        let packet = tessera_aes67::rtp::parse(&datagram).unwrap();
        assert_eq!(packet.header.payload_type, 101);
        assert_eq!(packet.header.sequence, 65_535);
        assert_eq!(packet.header.timestamp, 0xdead_beef);
        assert_eq!(packet.payload.len(), 48 * 2 * 3);
        let mut samples = [0.0f32; 48];
        tessera_aes67::payload::decode_channel(
            tessera_aes67::Encoding::L24,
            2,
            1,
            packet.payload,
            &mut samples,
        );
        // Frame 12 of a 1 kHz tone at 48 kHz: a quarter turn, the peak.
        assert!((samples[0] - 0.25).abs() < 1e-6, "{}", samples[0]);
    }

    #[test]
    fn a_sample_width_other_than_l16_or_l24_is_refused() {
        let wide = ForeignSenderSpec {
            bytes_per_sample: 4,
            ..spec()
        };
        assert!(matches!(
            ForeignSender::start(wide),
            Err(ForeignSenderError::SampleWidth(4))
        ));
    }
}
