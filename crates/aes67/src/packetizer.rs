//! The sender side: a graph's cycles of any size cut into packets of
//! `frames_per_packet`, each written as a complete RTP datagram. It owns the
//! sequence numbering and the partial packet between cycles; sending is the
//! caller's. After `new` it must never allocate: it runs every cycle.

use crate::format::StreamFormat;
use crate::payload::encode_channel;
use crate::rtp::{RtpHeader, HEADER_LEN};

/// Gathers a graph cycle's frames (any cycle size) into packets of
/// `frames_per_packet` and writes each complete RTP datagram (header +
/// payload) into its own buffer. Never allocates after [`Packetizer::new`].
pub struct Packetizer {
    format: StreamFormat,
    payload_type: u8,
    ssrc: u32,
    sequence: u16,
    /// The datagram being filled; its header is written when it completes.
    datagram: Vec<u8>,
    /// One channel of one packet, gathered from the caller's closure so that
    /// the payload module encodes whole runs.
    scratch: Vec<f32>,
    /// Frames already in `datagram`.
    filled: usize,
    /// The media time of the first frame in `datagram`.
    packet_ts: u32,
    /// The media time the next push must start at to continue the packet.
    next_ts: Option<u32>,
    partial_dropped: u64,
}

impl Packetizer {
    /// # Panics
    /// If `payload_type` is over 127 (RTP has 7 bits for it).
    pub fn new(
        format: StreamFormat,
        payload_type: u8,
        ssrc: u32,
        first_sequence: u16,
    ) -> Packetizer {
        assert!(
            payload_type <= 0x7f,
            "RTP payload type {payload_type} does not fit 7 bits"
        );
        Packetizer {
            format,
            payload_type,
            ssrc,
            sequence: first_sequence,
            datagram: vec![0; format.packet_bytes()],
            scratch: vec![0.0; format.frames_per_packet as usize],
            filled: 0,
            packet_ts: 0,
            next_ts: None,
            partial_dropped: 0,
        }
    }

    /// Appends `frames` frames whose first frame is at media time `ts`;
    /// `sample(channel, frame)` gives the sample (`frame` counts from this
    /// call's first). For each packet that becomes complete, calls
    /// `emit(datagram)`. A `ts` that does not continue the previous frames (a
    /// jump) drops the partial packet (counted) and starts a new one at
    /// `ts`. The sequence increments by 1 per packet and wraps.
    pub fn push(
        &mut self,
        ts: u32,
        frames: usize,
        sample: impl Fn(usize, usize) -> f32,
        mut emit: impl FnMut(&[u8]),
    ) {
        if self.next_ts != Some(ts) && self.filled > 0 {
            self.partial_dropped += 1;
            self.filled = 0;
        }
        if self.filled == 0 {
            self.packet_ts = ts;
        }
        self.next_ts = Some(ts.wrapping_add(frames as u32));
        let per_packet = self.format.frames_per_packet as usize;
        let mut done = 0;
        while done < frames {
            let take = (per_packet - self.filled).min(frames - done);
            self.append(take, |c, k| sample(c, done + k));
            done += take;
            if self.filled == per_packet {
                self.complete(&mut emit);
            }
        }
    }

    fn append(&mut self, frames: usize, sample: impl Fn(usize, usize) -> f32) {
        let channels = usize::from(self.format.channels);
        let offset = HEADER_LEN + self.filled * self.format.frame_bytes();
        for c in 0..channels {
            let run = &mut self.scratch[..frames];
            for (k, x) in run.iter_mut().enumerate() {
                *x = sample(c, k);
            }
            encode_channel(
                self.format.encoding,
                channels,
                c,
                run,
                &mut self.datagram[offset..],
            );
        }
        self.filled += frames;
    }

    fn complete(&mut self, emit: &mut impl FnMut(&[u8])) {
        let header = RtpHeader {
            marker: false,
            payload_type: self.payload_type,
            sequence: self.sequence,
            timestamp: self.packet_ts,
            ssrc: self.ssrc,
        };
        header
            .write(&mut self.datagram)
            .expect("new checked the payload type and sized the datagram");
        emit(&self.datagram);
        self.sequence = self.sequence.wrapping_add(1);
        self.packet_ts = self.packet_ts.wrapping_add(self.format.frames_per_packet);
        self.filled = 0;
    }

    /// The next packet's sequence number.
    pub fn sequence(&self) -> u16 {
        self.sequence
    }

    /// Partial packets dropped by jumps in media time.
    pub fn partial_dropped(&self) -> u64 {
        self.partial_dropped
    }

    pub fn format(&self) -> StreamFormat {
        self.format
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Encoding;
    use crate::payload::decode_channel;
    use crate::rtp::{self, timestamp_delta};

    fn packetizer() -> Packetizer {
        let format = StreamFormat::new(Encoding::L24, 48_000, 2, 48).unwrap();
        Packetizer::new(format, 98, 0x1234_5678, 65_530)
    }

    fn value(ts: u32, channel: usize) -> f32 {
        ((ts % 1000) as usize + channel * 1000) as f32 / 8_388_608.0
    }

    /// Pushes `cycles` cycles from `ts`; returns the datagrams emitted.
    fn run(p: &mut Packetizer, ts: u32, cycle: usize, cycles: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for n in 0..cycles {
            let at = ts.wrapping_add((n * cycle) as u32);
            let sample = |c, k| value(at.wrapping_add(k as u32), c);
            p.push(at, cycle, sample, |d| out.push(d.to_vec()));
        }
        out
    }

    #[test]
    fn any_cycle_size_gives_contiguous_packets() {
        for cycle in [32, 48, 64, 128] {
            let mut p = packetizer();
            let start = u32::MAX - 500;
            let datagrams = run(&mut p, start, cycle, 384 / cycle);
            assert_eq!(datagrams.len(), 8, "cycle {cycle}");
            for (n, d) in datagrams.iter().enumerate() {
                assert_eq!(d.len(), 12 + 48 * 2 * 3);
                let packet = rtp::parse(d).unwrap();
                let h = packet.header;
                assert_eq!((h.payload_type, h.ssrc, h.marker), (98, 0x1234_5678, false));
                assert_eq!(h.sequence, 65_530u16.wrapping_add(n as u16));
                assert_eq!(timestamp_delta(start, h.timestamp), 48 * n as i32);
                let mut samples = [0.0; 48];
                for c in 0..2 {
                    decode_channel(Encoding::L24, 2, c, packet.payload, &mut samples);
                    for (k, &x) in samples.iter().enumerate() {
                        assert_eq!(x, value(h.timestamp.wrapping_add(k as u32), c));
                    }
                }
            }
            assert_eq!(p.sequence(), 65_530u16.wrapping_add(8));
            assert_eq!(p.partial_dropped(), 0);
        }
    }

    #[test]
    fn a_jump_drops_the_partial_packet() {
        let mut p = packetizer();
        assert!(run(&mut p, 0, 32, 1).is_empty());
        let datagrams = run(&mut p, 10_000, 64, 3);
        assert_eq!(p.partial_dropped(), 1);
        assert_eq!(datagrams.len(), 4);
        let first = rtp::parse(&datagrams[0]).unwrap().header;
        assert_eq!((first.timestamp, first.sequence), (10_000, 65_530));
        // A continuation is no jump, even after a complete packet.
        run(&mut p, 10_192, 64, 1);
        assert_eq!(p.partial_dropped(), 1);
    }
}
