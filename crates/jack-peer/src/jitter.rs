//! The network-audio client's jitter buffer and its packets: a packet is
//! one period of audio with its sequence number; the buffer holds the
//! packets received ahead of their play time in slots indexed by sequence
//! number, and gives the process callback one period per cycle.
//!
//! Play time: the first packet received sets the sequence to play; the
//! buffer then waits `depth` cycles (its latency, in periods) before it
//! plays that packet, and plays the next sequence number every cycle after,
//! whatever arrives. A cycle whose packet is not there is an **underrun**
//! (silence is played); a packet whose sequence number was already played
//! or skipped is **late**; one too far ahead for the slots is **early**.
//!
//! It owns that bookkeeping only. It runs inside the process callback, so
//! it must never allocate, lock, block or print after [`JitterBuffer::new`].

/// Most frames a packet carries (a period of up to this many frames).
pub const MAX_FRAMES: usize = 512;
/// Bytes before the samples: sequence number, send time, frames.
const HEADER_BYTES: usize = 8 + 8 + 4;
/// The largest datagram a packet makes.
pub const MAX_DATAGRAM: usize = HEADER_BYTES + 4 * MAX_FRAMES;

/// One period of audio on the wire.
#[derive(Clone, Copy)]
pub struct Packet {
    pub seq: u64,
    /// CLOCK_MONOTONIC when the sender's process callback made it.
    pub sent_ns: u64,
    pub frames: u32,
    pub samples: [f32; MAX_FRAMES],
}

impl Packet {
    pub const fn silent() -> Packet {
        Packet {
            seq: 0,
            sent_ns: 0,
            frames: 0,
            samples: [0.0; MAX_FRAMES],
        }
    }

    /// The period's samples (at most [`MAX_FRAMES`]).
    pub fn audio(&self) -> &[f32] {
        &self.samples[..self.frames as usize]
    }

    /// Writes the datagram into `out`; its length.
    pub fn encode(&self, out: &mut [u8; MAX_DATAGRAM]) -> usize {
        out[0..8].copy_from_slice(&self.seq.to_le_bytes());
        out[8..16].copy_from_slice(&self.sent_ns.to_le_bytes());
        out[16..20].copy_from_slice(&self.frames.to_le_bytes());
        let mut at = HEADER_BYTES;
        for sample in self.audio() {
            out[at..at + 4].copy_from_slice(&sample.to_le_bytes());
            at += 4;
        }
        at
    }

    /// The packet of a datagram; None if it is not one.
    pub fn decode(datagram: &[u8], into: &mut Packet) -> Option<()> {
        let word = |at: usize| -> Option<[u8; 8]> { datagram.get(at..at + 8)?.try_into().ok() };
        let frames = u32::from_le_bytes(datagram.get(16..20)?.try_into().ok()?);
        let body = datagram.get(HEADER_BYTES..)?;
        if frames as usize > MAX_FRAMES || body.len() != 4 * frames as usize {
            return None;
        }
        into.seq = u64::from_le_bytes(word(0)?);
        into.sent_ns = u64::from_le_bytes(word(8)?);
        into.frames = frames;
        for (sample, bytes) in into.samples.iter_mut().zip(body.chunks_exact(4)) {
            *sample = f32::from_le_bytes(bytes.try_into().ok()?);
        }
        Some(())
    }
}

/// What became of a packet put in the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    Stored,
    /// Its sequence number was already played or skipped.
    Late,
    /// Too far ahead of the play position for the slots.
    Early,
    /// The same sequence number is already held.
    Duplicate,
}

/// What a cycle got from the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// A period was played.
    Played,
    /// The period due was not there: silence.
    Underrun,
    /// Nothing received yet, or still filling up to the depth: silence,
    /// not counted.
    Waiting,
}

pub struct JitterBuffer {
    slots: Box<[Packet]>,
    /// Whether the slot holds a packet not yet played.
    held: Box<[bool]>,
    /// The next sequence number to play, once the first packet came.
    next: Option<u64>,
    /// Cycles still to wait before playing.
    filling: u32,
}

impl JitterBuffer {
    /// A buffer that plays `depth` periods behind the first packet and
    /// holds up to `slots` (at least `depth + 1`) packets.
    pub fn new(depth: u32, slots: usize) -> JitterBuffer {
        let slots = slots.max(depth as usize + 1);
        JitterBuffer {
            slots: vec![Packet::silent(); slots].into_boxed_slice(),
            held: vec![false; slots].into_boxed_slice(),
            next: None,
            filling: depth,
        }
    }

    fn slot(&self, seq: u64) -> usize {
        (seq % self.slots.len() as u64) as usize
    }

    /// Puts a received packet in its slot.
    pub fn insert(&mut self, packet: &Packet) -> Arrival {
        let next = *self.next.get_or_insert(packet.seq);
        if packet.seq < next {
            return Arrival::Late;
        }
        if packet.seq - next >= self.slots.len() as u64 {
            return Arrival::Early;
        }
        let k = self.slot(packet.seq);
        if self.held[k] && self.slots[k].seq == packet.seq {
            return Arrival::Duplicate;
        }
        self.slots[k] = *packet;
        self.held[k] = true;
        Arrival::Stored
    }

    /// The period due this cycle, copied into `out` (silence if there is
    /// none; `out` longer than the packet is padded with silence).
    pub fn take(&mut self, out: &mut [f32]) -> Take {
        out.fill(0.0);
        let Some(seq) = self.next else {
            return Take::Waiting;
        };
        if self.filling > 0 {
            self.filling -= 1;
            return Take::Waiting;
        }
        self.next = Some(seq + 1);
        let k = self.slot(seq);
        if !(self.held[k] && self.slots[k].seq == seq) {
            return Take::Underrun;
        }
        self.held[k] = false;
        let audio = self.slots[k].audio();
        let n = audio.len().min(out.len());
        out[..n].copy_from_slice(&audio[..n]);
        Take::Played
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(seq: u64, value: f32) -> Packet {
        let mut p = Packet::silent();
        p.seq = seq;
        p.frames = 4;
        p.samples[..4].fill(value);
        p
    }

    #[test]
    fn a_datagram_round_trips_and_malformed_ones_are_refused() {
        let mut p = packet(77, 0.25);
        p.sent_ns = 123;
        let mut wire = [0u8; MAX_DATAGRAM];
        let n = p.encode(&mut wire);
        assert_eq!(n, HEADER_BYTES + 16);
        let mut back = Packet::silent();
        assert!(Packet::decode(&wire[..n], &mut back).is_some());
        assert_eq!(
            (back.seq, back.sent_ns, back.audio()),
            (77, 123, &[0.25; 4][..])
        );
        assert!(Packet::decode(&wire[..n - 1], &mut back).is_none());
        assert!(Packet::decode(&wire[..10], &mut back).is_none());
    }

    #[test]
    fn it_waits_its_depth_then_plays_in_order() {
        let mut buffer = JitterBuffer::new(2, 8);
        let mut out = [9.0; 4];
        assert_eq!(buffer.take(&mut out), Take::Waiting);
        assert_eq!(out, [0.0; 4], "silence before the first packet");
        assert_eq!(buffer.insert(&packet(10, 1.0)), Arrival::Stored);
        assert_eq!(buffer.take(&mut out), Take::Waiting);
        assert_eq!(buffer.insert(&packet(11, 2.0)), Arrival::Stored);
        assert_eq!(buffer.take(&mut out), Take::Waiting);
        assert_eq!(buffer.take(&mut out), Take::Played);
        assert_eq!(out, [1.0; 4]);
        assert_eq!(buffer.take(&mut out), Take::Played);
        assert_eq!(out, [2.0; 4]);
    }

    #[test]
    fn a_missing_period_is_an_underrun_and_its_packet_later_is_late() {
        let mut buffer = JitterBuffer::new(0, 8);
        let mut out = [0.0; 4];
        buffer.insert(&packet(0, 1.0));
        assert_eq!(buffer.take(&mut out), Take::Played);
        assert_eq!(buffer.take(&mut out), Take::Underrun);
        assert_eq!(out, [0.0; 4]);
        assert_eq!(buffer.insert(&packet(1, 2.0)), Arrival::Late);
        assert_eq!(buffer.insert(&packet(2, 3.0)), Arrival::Stored);
        assert_eq!(buffer.insert(&packet(2, 3.0)), Arrival::Duplicate);
        assert_eq!(buffer.insert(&packet(2 + 8, 3.0)), Arrival::Early);
        assert_eq!(buffer.take(&mut out), Take::Played);
        assert_eq!(out, [3.0; 4]);
    }

    #[test]
    fn a_slot_reused_by_a_later_sequence_is_not_played_early() {
        let mut buffer = JitterBuffer::new(0, 4);
        let mut out = [0.0; 4];
        buffer.insert(&packet(0, 1.0));
        assert_eq!(buffer.take(&mut out), Take::Played);
        // 4 takes the slot of 0: while 1, 2 and 3 are due, 4 must not play.
        assert_eq!(buffer.insert(&packet(4, 5.0)), Arrival::Stored);
        assert_eq!(buffer.take(&mut out), Take::Underrun);
        assert_eq!(buffer.take(&mut out), Take::Underrun);
        assert_eq!(buffer.take(&mut out), Take::Underrun);
        assert_eq!(buffer.take(&mut out), Take::Played);
        assert_eq!(out, [5.0; 4]);
    }
}
