//! The network-audio client's jitter buffer and its packets: a packet is
//! one period of audio with its sequence number; the buffer holds the
//! packets received ahead of their play time in slots indexed by sequence
//! number, and gives the process callback one period per cycle.
//!
//! It plays `depth` periods behind the stream, as jacktrip's buffer does:
//! it fills up to `depth` packets before it plays, plays the next sequence
//! number every cycle while it has it, and when it runs empty it fills up
//! again (re-primes) before playing on — so a stall of the sender or the
//! receiver costs the periods it lasted plus a refill, and never shifts
//! the play position for good. A cycle that plays silence once playing has
//! begun is an **underrun** (empty, or refilling after it ran empty); a
//! packet whose sequence number was already played or skipped is **late**;
//! when the stream runs further ahead than twice the depth (the receiver's
//! server lost cycles), the oldest held packets are skipped to bound the
//! latency (**overflow**). A gap (a packet lost) is skipped as soon as a
//! later packet is due.
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
    /// Held; `overflow` older packets were skipped to make room.
    Stored { overflow: u64 },
    /// Its sequence number was already played or skipped.
    Late,
    /// The same sequence number is already held.
    Duplicate,
}

/// What a cycle got from the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// A period was played.
    Played,
    /// Silence once playing had begun: empty, or refilling after it ran
    /// empty.
    Underrun,
    /// Silence before the first period played (filling), not counted.
    Waiting,
}

pub struct JitterBuffer {
    slots: Box<[Packet]>,
    /// Whether the slot holds a packet not yet played.
    held: Box<[bool]>,
    /// Packets held.
    count: usize,
    depth: usize,
    /// The next sequence number to play and the newest held, once the
    /// first packet came.
    next: Option<u64>,
    newest: u64,
    /// Whether it plays (else it fills up to `depth`).
    playing: bool,
    /// Whether it has played since the start.
    started: bool,
}

impl JitterBuffer {
    /// A buffer that plays `depth` (at least 1) periods behind the stream.
    pub fn new(depth: u32) -> JitterBuffer {
        let depth = depth.max(1) as usize;
        // Room for the stream at twice the depth, the most it holds.
        let slots = 2 * depth + 1;
        JitterBuffer {
            slots: vec![Packet::silent(); slots].into_boxed_slice(),
            held: vec![false; slots].into_boxed_slice(),
            count: 0,
            depth,
            next: None,
            newest: 0,
            playing: false,
            started: false,
        }
    }

    fn slot(&self, seq: u64) -> usize {
        (seq % self.slots.len() as u64) as usize
    }

    /// Whether `seq` is held.
    fn holds(&self, seq: u64) -> bool {
        let k = self.slot(seq);
        self.held[k] && self.slots[k].seq == seq
    }

    /// Lets go of `seq` (played or skipped); whether it was held.
    fn release(&mut self, seq: u64) -> bool {
        let was = self.holds(seq);
        if was {
            self.held[self.slot(seq)] = false;
            self.count -= 1;
        }
        was
    }

    /// Puts a received packet in its slot.
    pub fn insert(&mut self, packet: &Packet) -> Arrival {
        let next = *self.next.get_or_insert(packet.seq);
        if packet.seq < next {
            return Arrival::Late;
        }
        if self.holds(packet.seq) {
            return Arrival::Duplicate;
        }
        let overflow = self.make_room_for(packet.seq);
        let k = self.slot(packet.seq);
        self.slots[k] = *packet;
        self.held[k] = true;
        self.count += 1;
        self.newest = self.newest.max(packet.seq);
        Arrival::Stored { overflow }
    }

    /// Skips the oldest sequence numbers until `seq` is at most twice the
    /// depth ahead of the play position; the held packets skipped. Looks
    /// at each slot once however far the stream jumped.
    fn make_room_for(&mut self, seq: u64) -> u64 {
        let span = self.slots.len() as u64;
        let next = self.next.unwrap_or(seq);
        if seq - next < span {
            return 0;
        }
        let keep_from = seq + 1 - span;
        let mut skipped = 0;
        for k in 0..self.slots.len() {
            if self.held[k] && self.slots[k].seq < keep_from {
                self.held[k] = false;
                self.count -= 1;
                skipped += 1;
            }
        }
        self.next = Some(keep_from);
        skipped
    }

    /// The period due this cycle, copied into `out` (silence if there is
    /// none; `out` longer than the packet is padded with silence).
    pub fn take(&mut self, out: &mut [f32]) -> Take {
        out.fill(0.0);
        if !self.playing && self.count >= self.depth {
            self.playing = true;
            self.started = true;
        }
        let Some(seq) = self.due().filter(|_| self.playing) else {
            return self.silence();
        };
        self.release(seq);
        let k = self.slot(seq);
        let audio = self.slots[k].audio();
        let n = audio.len().min(out.len());
        out[..n].copy_from_slice(&audio[..n]);
        self.next = Some(seq + 1);
        Take::Played
    }

    /// The sequence number to play: the next one, or past a gap the oldest
    /// held after it (the ones in between were lost); None when empty.
    fn due(&mut self) -> Option<u64> {
        let next = self.next?;
        let seq = (next..=self.newest).find(|&s| self.holds(s))?;
        self.next = Some(seq);
        Some(seq)
    }

    /// A silent cycle: an underrun once playing had begun, and from then on
    /// the buffer fills up again before it plays.
    fn silence(&mut self) -> Take {
        self.playing = false;
        match self.started {
            true => Take::Underrun,
            false => Take::Waiting,
        }
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
    fn it_fills_its_depth_then_plays_in_order() {
        let mut buffer = JitterBuffer::new(2);
        let mut out = [9.0; 4];
        assert_eq!(buffer.take(&mut out), Take::Waiting);
        assert_eq!(out, [0.0; 4], "silence before the first packet");
        assert_eq!(
            buffer.insert(&packet(10, 1.0)),
            Arrival::Stored { overflow: 0 }
        );
        assert_eq!(buffer.take(&mut out), Take::Waiting);
        assert_eq!(
            buffer.insert(&packet(11, 2.0)),
            Arrival::Stored { overflow: 0 }
        );
        assert_eq!(buffer.take(&mut out), Take::Played);
        assert_eq!(out, [1.0; 4]);
        assert_eq!(buffer.take(&mut out), Take::Played);
        assert_eq!(out, [2.0; 4]);
    }

    #[test]
    fn running_empty_is_an_underrun_and_it_refills_before_playing_on() {
        let mut buffer = JitterBuffer::new(2);
        let mut out = [0.0; 4];
        buffer.insert(&packet(0, 1.0));
        buffer.insert(&packet(1, 2.0));
        assert_eq!(buffer.take(&mut out), Take::Played);
        assert_eq!(buffer.take(&mut out), Take::Played);
        assert_eq!(buffer.take(&mut out), Take::Underrun);
        assert_eq!(out, [0.0; 4]);
        // The stream comes back: the buffer waits for its depth again, and
        // those silent cycles are underruns too.
        buffer.insert(&packet(2, 3.0));
        assert_eq!(buffer.take(&mut out), Take::Underrun);
        buffer.insert(&packet(3, 4.0));
        assert_eq!(buffer.take(&mut out), Take::Played);
        assert_eq!(out, [3.0; 4], "nothing was skipped");
        assert_eq!(buffer.insert(&packet(2, 3.0)), Arrival::Late);
        assert_eq!(buffer.insert(&packet(3, 4.0)), Arrival::Duplicate);
    }

    #[test]
    fn a_sender_that_lost_cycles_does_not_shift_the_play_position() {
        let mut buffer = JitterBuffer::new(2);
        let mut out = [0.0; 4];
        let (mut underruns, mut played) = (0, Vec::new());
        // One packet a cycle, but the sender's server lost the periods
        // 10..30 (nothing was sent): the receiver hears those 20 periods
        // as silence, then plays every packet again, as far behind as
        // before.
        for cycle in 0..60u64 {
            if !(10..30).contains(&cycle) {
                buffer.insert(&packet(cycle, cycle as f32));
            }
            match buffer.take(&mut out) {
                Take::Underrun => underruns += 1,
                Take::Played => played.push(out[0] as u64),
                Take::Waiting => {}
            }
        }
        assert_eq!(underruns, 20);
        assert_eq!(played, (0..10).chain(30..59).collect::<Vec<u64>>());
    }

    #[test]
    fn a_stream_too_far_ahead_skips_the_oldest_and_a_gap_is_skipped() {
        let mut buffer = JitterBuffer::new(2);
        let mut out = [0.0; 4];
        for seq in 0..5 {
            assert_eq!(
                buffer.insert(&packet(seq, seq as f32)),
                Arrival::Stored { overflow: 0 }
            );
        }
        // 5 is more than twice the depth ahead of 0.
        assert_eq!(
            buffer.insert(&packet(5, 5.0)),
            Arrival::Stored { overflow: 1 }
        );
        assert_eq!(buffer.take(&mut out), Take::Played);
        assert_eq!(out, [1.0; 4]);
        assert_eq!(buffer.insert(&packet(0, 0.0)), Arrival::Late);
        // 6 lost: after 5, 7 plays.
        for _ in 2..=5 {
            buffer.take(&mut out);
        }
        buffer.insert(&packet(7, 7.0));
        assert_eq!(buffer.take(&mut out), Take::Played);
        assert_eq!(out, [7.0; 4]);
        assert_eq!(buffer.insert(&packet(6, 6.0)), Arrival::Late);
        // A stray sequence number far ahead costs one pass over the slots.
        assert_eq!(
            buffer.insert(&packet(u64::MAX / 2, 0.0)),
            Arrival::Stored { overflow: 0 }
        );
    }
}
