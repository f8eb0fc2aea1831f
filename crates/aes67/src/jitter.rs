//! The receiver's jitter buffer: packets decoded into a ring of
//! `packets × frames_per_packet` frames, placed by RTP timestamp, and read
//! by media time. Arrival order and timing are its problem; when to play is
//! the caller's (it owns the clock). After `new` it must never allocate:
//! push, read and advance run once per packet or cycle on the real-time
//! path.
//!
//! Invariants: a ring position holds the frame whose media time is in
//! `stamps` at that position, so a frame is held exactly when its stamp
//! matches and nothing needs clearing but the stamp. Once playing, every
//! held frame lies in `[play, play + ring)`, so no two held frames share a
//! position. All timestamp arithmetic wraps at 2^32 (RFC 3550 §5.1).

use serde::{Deserialize, Serialize};

use crate::format::StreamFormat;
use crate::payload::decode_channel;
use crate::rtp::{sequence_delta, timestamp_delta, RtpHeader};

/// What [`JitterBuffer::push`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    Stored,
    Late,
    Duplicate,
    TooEarly,
    WrongSize,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JitterCounters {
    pub received: u64,
    pub stored: u64,
    pub late: u64,
    /// Packet starts played with nothing held, that the sender did send:
    /// the network lost them, they came late, or this host dropped them.
    pub lost: u64,
    /// Packet starts played with nothing held that the sender never sent:
    /// its timestamps skipped them between two consecutive sequence
    /// numbers (a sender that missed a cycle and stamps on where its clock
    /// is, as PipeWire's rtp-sink does). Silence the sender made.
    #[serde(default)]
    pub unsent: u64,
    pub duplicates: u64,
    pub too_early: u64,
    pub reordered: u64,
    pub wrong_size: u64,
}

impl JitterCounters {
    /// How many counters there are, for [`Self::to_array`].
    pub const COUNT: usize = 9;

    /// The counters in a fixed order, for a real-time thread to publish
    /// one by one (as atomics) and a reader to put back together.
    pub fn to_array(&self) -> [u64; Self::COUNT] {
        [
            self.received,
            self.stored,
            self.late,
            self.lost,
            self.duplicates,
            self.too_early,
            self.reordered,
            self.wrong_size,
            self.unsent,
        ]
    }

    /// The inverse of [`Self::to_array`].
    pub fn from_array(values: [u64; Self::COUNT]) -> JitterCounters {
        let [received, stored, late, lost, duplicates, too_early, reordered, wrong_size, unsent] =
            values;
        JitterCounters {
            received,
            stored,
            late,
            lost,
            unsent,
            duplicates,
            too_early,
            reordered,
            wrong_size,
        }
    }
}

/// One stream's received audio, decoded and placed by media time; see the
/// module doc for its invariants.
pub struct JitterBuffer {
    format: StreamFormat,
    packets: usize,
    /// The ring's length in frames.
    len: usize,
    /// Planar, so that a read of one channel is a run of one slice:
    /// channel `c` at ring position `p` is `samples[c * len + p]`.
    samples: Vec<f32>,
    /// The media time of the frame held at each position.
    stamps: Vec<Option<u32>>,
    /// The media time of a frame the sender skipped, at its position (held
    /// like `stamps`: it counts only while it matches).
    unsent: Vec<Option<u32>>,
    /// A media time and its ring position. Moved along with play (or the
    /// newest packet) so that the deltas from it stay far inside i32 however
    /// long the stream runs.
    anchor: (u32, usize),
    play: Option<u32>,
    newest_end: Option<u32>,
    /// A media time at which some packet starts, kept at or just after the
    /// play position for the same reason as `anchor`.
    packet_phase: Option<u32>,
    /// The highest sequence number stored, and the media time just after
    /// its packet.
    highest: Option<(u16, u32)>,
    counters: JitterCounters,
}

impl JitterBuffer {
    /// Room for `packets` packets (≥ 2) of `format`.
    ///
    /// # Panics
    /// With fewer than 2 packets (a ring of one packet cannot hold the next
    /// while the current plays), or a ring of more than 2^30 frames.
    pub fn new(format: StreamFormat, packets: usize) -> JitterBuffer {
        assert!(
            packets >= 2,
            "a jitter buffer needs room for 2 packets or more, not {packets}"
        );
        let len = packets * format.frames_per_packet as usize;
        assert!(
            len <= 1 << 30,
            "a jitter buffer of {len} frames is far beyond any latency"
        );
        JitterBuffer {
            format,
            packets,
            len,
            samples: vec![0.0; len * usize::from(format.channels)],
            stamps: vec![None; len],
            unsent: vec![None; len],
            anchor: (0, 0),
            play: None,
            newest_end: None,
            packet_phase: None,
            highest: None,
            counters: JitterCounters::default(),
        }
    }

    pub fn format(&self) -> StreamFormat {
        self.format
    }

    pub fn packets(&self) -> usize {
        self.packets
    }

    /// Stores a packet's samples at its timestamp (`header.timestamp` is the
    /// media time of its first frame).
    ///
    /// * Late: all its frames are before the play position (frames of a
    ///   packet straddling it are stored from the play position on). Before
    ///   playing has started only a packet older than the ring's length
    ///   behind the newest is late: the ring keeps the newest.
    /// * TooEarly: once playing, its end is more than the ring's length
    ///   ahead of the play position.
    /// * Duplicate: the timestamp of its first frame (its first unplayed
    ///   one) is already held.
    /// * WrongSize: the payload is empty, not a whole number of frames, or
    ///   longer than `frames_per_packet` frames (shorter is stored).
    ///
    /// A stored packet whose sequence is behind the highest seen
    /// (wrap-aware) is counted reordered.
    pub fn push(&mut self, header: &RtpHeader, payload: &[u8]) -> Arrival {
        let arrival = self.arrive(header, payload);
        let c = &mut self.counters;
        c.received += 1;
        *match arrival {
            Arrival::Stored => &mut c.stored,
            Arrival::Late => &mut c.late,
            Arrival::Duplicate => &mut c.duplicates,
            Arrival::TooEarly => &mut c.too_early,
            Arrival::WrongSize => &mut c.wrong_size,
        } += 1;
        arrival
    }

    fn arrive(&mut self, header: &RtpHeader, payload: &[u8]) -> Arrival {
        let Some(frames) = self.frames_in(payload) else {
            return Arrival::WrongSize;
        };
        let start = header.timestamp;
        let end = start.wrapping_add(frames);
        let skip = self
            .floor()
            .map_or(0, |floor| timestamp_delta(start, floor).max(0) as u32);
        if skip >= frames {
            return Arrival::Late;
        }
        if self.holds(start.wrapping_add(skip)) {
            return Arrival::Duplicate;
        }
        if self
            .play
            .is_some_and(|play| timestamp_delta(play, end) > self.len as i32)
        {
            return Arrival::TooEarly;
        }
        match self
            .highest
            .map(|(h, h_end)| (sequence_delta(h, header.sequence), h_end))
        {
            Some((..=-1, _)) => self.counters.reordered += 1,
            Some((1, h_end)) => {
                self.mark_unsent(h_end, start);
                self.highest = Some((header.sequence, end));
            }
            _ => self.highest = Some((header.sequence, end)),
        }
        let frame_bytes = self.format.frame_bytes();
        self.store(
            start.wrapping_add(skip),
            &payload[skip as usize * frame_bytes..],
        );
        self.packet_phase.get_or_insert(start);
        if self
            .newest_end
            .is_none_or(|newest| timestamp_delta(newest, end) > 0)
        {
            self.newest_end = Some(end);
            if self.play.is_none() {
                self.anchor = (end, self.index(end));
            }
        }
        Arrival::Stored
    }

    /// Marks `[from, to)` as frames the sender skipped: the media time
    /// between two consecutive packets that no packet covers. A skip as
    /// long as the ring or longer marks nothing: the playout starts over.
    fn mark_unsent(&mut self, from: u32, to: u32) {
        let gap = timestamp_delta(from, to);
        if gap <= 0 || gap as usize >= self.len {
            return;
        }
        for (t, p) in self.positions(from, gap as usize) {
            self.unsent[p] = Some(t);
        }
    }

    fn frames_in(&self, payload: &[u8]) -> Option<u32> {
        let frame_bytes = self.format.frame_bytes();
        let frames = payload.len() / frame_bytes;
        let whole = !payload.is_empty() && payload.len().is_multiple_of(frame_bytes);
        (whole && frames <= self.format.frames_per_packet as usize).then_some(frames as u32)
    }

    /// Stores whole frames starting at media time `ts`, in at most two runs
    /// when they wrap around the ring's end.
    fn store(&mut self, ts: u32, payload: &[u8]) {
        let frame_bytes = self.format.frame_bytes();
        let frames = payload.len() / frame_bytes;
        let first = self.index(ts);
        let head = frames.min(self.len - first);
        let (a, b) = payload.split_at(head * frame_bytes);
        self.store_run(first, ts, a);
        self.store_run(0, ts.wrapping_add(head as u32), b);
    }

    fn store_run(&mut self, position: usize, ts: u32, payload: &[u8]) {
        let channels = usize::from(self.format.channels);
        let frames = payload.len() / self.format.frame_bytes();
        for c in 0..channels {
            let ring = &mut self.samples[c * self.len + position..][..frames];
            decode_channel(self.format.encoding, channels, c, payload, ring);
        }
        for (k, stamp) in self.stamps[position..][..frames].iter_mut().enumerate() {
            *stamp = Some(ts.wrapping_add(k as u32));
        }
    }

    /// Copies channel `channel` of the frames `[ts, ts + out.len())` into
    /// `out`; frames not held are 0.0. Returns how many frames were missing.
    /// Does not move the play position. A channel ≥ the format's channels
    /// gives silence (its frames count as missing only where not held).
    pub fn read(&self, ts: u32, channel: usize, out: &mut [f32]) -> usize {
        let ring = (channel < usize::from(self.format.channels))
            .then(|| &self.samples[channel * self.len..][..self.len]);
        let mut missing = 0;
        let positions = self.positions(ts, out.len());
        for (x, (t, p)) in out.iter_mut().zip(positions) {
            *x = match (self.stamps[p] == Some(t), ring) {
                (true, Some(ring)) => ring[p],
                (true, None) => 0.0,
                (false, _) => {
                    missing += 1;
                    0.0
                }
            };
        }
        missing
    }

    /// The frames `[ts, ts + frames)` have been played: counts as lost (or
    /// unsent, when the sender skipped it) every packet that should have
    /// started in that range and whose first frame is not held (packet starts are at the phase of the first packet ever
    /// stored, every `frames_per_packet` frames; before any packet was stored
    /// nothing is counted), forgets those frames, and sets the play position
    /// to `ts + frames`. Takes O(frames / frames_per_packet + min(frames,
    /// ring)); consecutive ranges count each loss once.
    pub fn advance(&mut self, ts: u32, frames: u32) {
        self.count_lost(ts, frames);
        let span = (frames as usize).min(self.len);
        for (_, p) in self.positions(ts, span) {
            let played = self.stamps[p].is_some_and(|s| {
                let d = timestamp_delta(ts, s);
                d >= 0 && (d as u32) < frames
            });
            if played {
                self.stamps[p] = None;
            }
        }
        let play = ts.wrapping_add(frames);
        self.play = Some(play);
        self.anchor = (play, self.index(play));
    }

    fn count_lost(&mut self, ts: u32, frames: u32) {
        let Some(phase) = self.packet_phase else {
            return;
        };
        let step = u64::from(self.format.frames_per_packet);
        // A phase ahead of the range is the first packet's start (or the
        // next start after the last range): no packet was due before it,
        // so a stream's start is no loss.
        let mut offset = match timestamp_delta(ts, phase) {
            ahead @ 0.. => ahead as u64,
            behind => i64::from(behind).rem_euclid(step as i64) as u64,
        };
        while offset < u64::from(frames) {
            let start = ts.wrapping_add(offset as u32);
            if !self.holds(start) {
                match self.unsent[self.index(start)] == Some(start) {
                    true => self.counters.unsent += 1,
                    false => self.counters.lost += 1,
                }
            }
            offset += step;
        }
        self.packet_phase = Some(ts.wrapping_add(offset as u32));
    }

    /// The media time just after the newest frame stored (it may since have
    /// been played; None before the first packet): where a receiver that has
    /// not started playing may anchor (play at newest_end − latency).
    pub fn newest_end(&self) -> Option<u32> {
        self.newest_end
    }

    /// The play position (None before the first advance).
    pub fn play_position(&self) -> Option<u32> {
        self.play
    }

    /// Frames held at and after the play position, contiguous or not (before
    /// playing: those within the ring's length behind the newest). O(ring).
    pub fn fill(&self) -> u32 {
        let Some(floor) = self.floor() else {
            return 0;
        };
        let in_window = |s: u32| (s.wrapping_sub(floor) as usize) < self.len;
        self.stamps
            .iter()
            .flatten()
            .filter(|&&s| in_window(s))
            .count() as u32
    }

    pub fn counters(&self) -> JitterCounters {
        self.counters
    }

    /// Forgets everything held, the play position, the packet phase and the
    /// sequence history (keeps counters): a receiver re-anchoring after a
    /// jump, when the stream's new packets owe nothing to the old ones.
    pub fn reset(&mut self) {
        self.stamps.fill(None);
        self.play = None;
        self.newest_end = None;
        self.packet_phase = None;
        self.highest = None;
    }

    /// The oldest media time the ring may hold.
    fn floor(&self) -> Option<u32> {
        self.play
            .or_else(|| self.newest_end.map(|end| end.wrapping_sub(self.len as u32)))
    }

    fn holds(&self, ts: u32) -> bool {
        self.stamps[self.index(ts)] == Some(ts)
    }

    fn index(&self, ts: u32) -> usize {
        let (anchor_ts, anchor_pos) = self.anchor;
        let offset = anchor_pos as i64 + i64::from(timestamp_delta(anchor_ts, ts));
        offset.rem_euclid(self.len as i64) as usize
    }

    /// `(media time, ring position)` of `n` consecutive frames from `ts`.
    fn positions(&self, ts: u32, n: usize) -> impl Iterator<Item = (u32, usize)> {
        let (first, len) = (self.index(ts), self.len);
        (0..n).map(move |k| (ts.wrapping_add(k as u32), (first + k) % len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Encoding;
    use crate::payload::encode_channel;
    use proptest::prelude::*;

    const FPP: u32 = 48;

    fn buffer(packets: usize) -> JitterBuffer {
        let format = StreamFormat::new(Encoding::L16, 48_000, 2, FPP).unwrap();
        JitterBuffer::new(format, packets)
    }

    /// A value exact in L16 that tells the media time and channel apart.
    fn value(ts: u32, channel: usize) -> f32 {
        let v = (ts % 4096) as i32 * 2 + channel as i32 - 4096;
        v as f32 / 32_768.0
    }

    fn packet(ts: u32, frames: u32) -> Vec<u8> {
        let mut payload = vec![0u8; frames as usize * 4];
        for c in 0..2 {
            let samples: Vec<f32> = (0..frames).map(|k| value(ts.wrapping_add(k), c)).collect();
            encode_channel(Encoding::L16, 2, c, &samples, &mut payload);
        }
        payload
    }

    fn header(sequence: u16, timestamp: u32) -> RtpHeader {
        RtpHeader {
            marker: false,
            payload_type: 96,
            sequence,
            timestamp,
            ssrc: 1,
        }
    }

    /// Pushes packet `n` of a stream starting at media time `base`.
    fn push(jb: &mut JitterBuffer, base: u32, n: u16) -> Arrival {
        let ts = base.wrapping_add(u32::from(n) * FPP);
        jb.push(&header(n, ts), &packet(ts, FPP))
    }

    /// Plays `frames` from `ts`: checks held frames are what was sent, returns the missing count.
    fn play(jb: &mut JitterBuffer, ts: u32, frames: usize) -> usize {
        let mut out = vec![0.0; frames];
        let mut missing = 0;
        for c in 0..2 {
            missing = jb.read(ts, c, &mut out);
            for (k, &x) in out.iter().enumerate() {
                assert!(
                    x == 0.0 || x == value(ts.wrapping_add(k as u32), c),
                    "frame {k}"
                );
            }
        }
        jb.advance(ts, frames as u32);
        missing
    }

    #[test]
    fn reordered_packet_is_stored_and_played_in_order() {
        let mut jb = buffer(4);
        assert_eq!(push(&mut jb, 1000, 0), Arrival::Stored);
        assert_eq!(push(&mut jb, 1000, 2), Arrival::Stored);
        assert_eq!(push(&mut jb, 1000, 1), Arrival::Stored);
        assert_eq!(jb.fill(), 144);
        assert_eq!(play(&mut jb, 1000, 144), 0);
        let c = jb.counters();
        assert_eq!((c.received, c.stored, c.reordered, c.lost), (3, 3, 1, 0));
        assert_eq!(jb.play_position(), Some(1144));
        assert_eq!(jb.fill(), 0);
    }

    #[test]
    fn the_silence_before_a_stream_starts_is_no_loss() {
        let mut jb = buffer(8);
        push(&mut jb, 1000, 0);
        assert_eq!(play(&mut jb, 900, 148), 100);
        assert_eq!(jb.counters().lost, 0);
        assert_eq!(play(&mut jb, 1048, 48), 48);
        assert_eq!(jb.counters().lost, 1);
    }

    #[test]
    fn a_lost_packet_is_silence_counted_once() {
        let mut jb = buffer(4);
        push(&mut jb, 0, 0);
        push(&mut jb, 0, 2);
        assert_eq!(play(&mut jb, 0, 64), 16);
        assert_eq!(jb.counters().lost, 1);
        assert_eq!(play(&mut jb, 64, 64), 32);
        assert_eq!(jb.counters().lost, 1);
        push(&mut jb, 0, 3);
        assert_eq!(play(&mut jb, 128, 64), 0);
        assert_eq!(jb.counters().lost, 1);
    }

    #[test]
    fn a_cycle_the_sender_skipped_is_unsent_not_lost() {
        let mut jb = buffer(16);
        for n in 0..3u16 {
            push(&mut jb, 0, n);
        }
        // Sequence 3 comes next, stamped two packets on: the sender missed
        // a cycle and stamps on where its clock is. Then sequence 5 is
        // lost on the way.
        for (sequence, ts) in [(3, 5 * FPP), (4, 6 * FPP), (6, 8 * FPP)] {
            jb.push(&header(sequence, ts), &packet(ts, FPP));
        }
        assert_eq!(play(&mut jb, 0, 9 * FPP as usize), 3 * FPP as usize);
        let c = jb.counters();
        assert_eq!((c.unsent, c.lost), (2, 1), "{c:?}");
    }

    #[test]
    fn late_packet_is_not_played() {
        let mut jb = buffer(4);
        push(&mut jb, 0, 0);
        play(&mut jb, 0, 96);
        assert_eq!(push(&mut jb, 0, 1), Arrival::Late);
        assert_eq!(push(&mut jb, 0, 0), Arrival::Late);
        assert_eq!(jb.counters().late, 2);
        assert_eq!(jb.read(48, 0, &mut [0.0; 48]), 48);
    }

    #[test]
    fn straddling_packet_keeps_its_unplayed_frames() {
        let mut jb = buffer(4);
        push(&mut jb, 0, 0);
        play(&mut jb, 0, 60);
        assert_eq!(push(&mut jb, 0, 1), Arrival::Stored);
        assert_eq!(jb.fill(), 36);
        assert_eq!(play(&mut jb, 60, 36), 0);
    }

    #[test]
    fn duplicates_and_too_early_are_dropped() {
        let mut jb = buffer(4);
        push(&mut jb, 0, 0);
        assert_eq!(push(&mut jb, 0, 0), Arrival::Duplicate);
        jb.advance(0, 0);
        assert_eq!(push(&mut jb, 0, 3), Arrival::Stored);
        assert_eq!(push(&mut jb, 0, 4), Arrival::TooEarly);
        let c = jb.counters();
        assert_eq!((c.duplicates, c.too_early, c.stored), (1, 1, 2));
    }

    #[test]
    fn before_playing_the_ring_keeps_the_newest() {
        let mut jb = buffer(2);
        for n in 0..5 {
            assert_eq!(push(&mut jb, 0, n), Arrival::Stored);
        }
        assert_eq!(jb.newest_end(), Some(240));
        assert_eq!(jb.fill(), 96);
        assert_eq!(push(&mut jb, 0, 1), Arrival::Late);
        assert_eq!(play(&mut jb, 144, 96), 0);
    }

    #[test]
    fn wrong_sizes_are_refused_and_short_packets_stored() {
        let mut jb = buffer(4);
        assert_eq!(jb.push(&header(0, 0), &[0; 3]), Arrival::WrongSize);
        assert_eq!(jb.push(&header(0, 0), &[]), Arrival::WrongSize);
        assert_eq!(
            jb.push(&header(0, 0), &packet(0, FPP + 1)),
            Arrival::WrongSize
        );
        assert_eq!(jb.push(&header(0, 0), &packet(0, 10)), Arrival::Stored);
        assert_eq!(jb.counters().wrong_size, 3);
        assert_eq!(jb.fill(), 10);
    }

    #[test]
    fn timestamps_wrap_across_u32_max_while_playing() {
        let mut jb = buffer(4);
        let base = u32::MAX - 100;
        let mut ts = base;
        for n in 0..20u16 {
            assert_eq!(push(&mut jb, base, n), Arrival::Stored);
            assert_eq!(play(&mut jb, ts, 48), 0);
            ts = ts.wrapping_add(48);
        }
        assert_eq!(jb.counters().lost, 0);
        assert_eq!(jb.play_position(), Some(base.wrapping_add(960)));
    }

    #[test]
    fn reset_forgets_all_but_counters() {
        let mut jb = buffer(4);
        push(&mut jb, 0, 0);
        jb.advance(0, 10);
        jb.reset();
        assert_eq!(
            (jb.newest_end(), jb.play_position(), jb.fill()),
            (None, None, 0)
        );
        assert_eq!(jb.counters().stored, 1);
        assert_eq!(push(&mut jb, 1 << 31, 0), Arrival::Stored);
    }

    #[test]
    fn a_missing_channel_reads_as_silence() {
        let mut jb = buffer(4);
        push(&mut jb, 0, 0);
        let mut out = [1.0; 48];
        assert_eq!(jb.read(0, 5, &mut out), 0);
        assert!(out.iter().all(|&x| x == 0.0));
    }

    proptest! {
        #[test]
        fn in_order_play_equals_what_was_sent(
            base in any::<u32>(),
            cycle in 1usize..200,
            latency in 48u32..144,
        ) {
            // Play each cycle once `latency` frames beyond it have arrived.
            let mut jb = buffer(16);
            let mut at = base;
            for n in 0..40u16 {
                prop_assert_eq!(push(&mut jb, base, n), Arrival::Stored);
                while jb.newest_end().unwrap().wrapping_sub(at) as usize >= cycle + latency as usize {
                    prop_assert_eq!(play(&mut jb, at, cycle), 0);
                    at = at.wrapping_add(cycle as u32);
                }
            }
            prop_assert_eq!(jb.counters().lost, 0);
        }
    }
}
