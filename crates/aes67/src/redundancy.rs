//! Redundant paths (SMPTE ST 2022-7): a sender sends every packet on two
//! networks, and the receiver keeps the first copy of each RTP sequence
//! number that comes, by either path, and drops the other. It owns that
//! merge and its counts — duplicates, and each path's own losses (a
//! sequence number the merge saw from the other path only, or from
//! neither) — and must never reorder or hold a packet: ordering is the
//! jitter buffer's. After `new` it never allocates: it runs once per
//! packet on the real-time path.
//!
//! The merge remembers the last [`MERGE_WINDOW`] sequence numbers behind
//! the highest seen, so the paths may differ in delay by up to that many
//! packets (a second of 1 ms packets); a copy older than that is dropped
//! as too old. A path's loss of a packet is counted once the window has
//! passed it (a slower path's copy may still come until then). A new SSRC
//! (the sender restarted) starts the merge again.

use serde::{Deserialize, Serialize};

use crate::rtp::sequence_delta;

/// The paths a stream may come by: ST 2022-7's two networks.
pub const PATHS: usize = 2;
/// Sequence numbers remembered behind the highest.
pub const MERGE_WINDOW: usize = 1024;
/// A slot whose sequence number is in the window (set when the window
/// reaches it); the low bits say which paths brought it.
const TRACKED: u8 = 0x80;

/// What became of one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copy {
    /// The first copy of its sequence number: play it.
    First,
    /// Its sequence number came already, by this path or the other.
    Duplicate,
    /// Older than the window: not known whether it came already.
    TooOld,
}

/// One path's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathCounts {
    /// Copies that came by this path.
    pub received: u64,
    /// Sequence numbers that left the window without coming by this path.
    pub lost: u64,
}

/// The merge's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeCounts {
    pub paths: [PathCounts; PATHS],
    /// Copies dropped because their sequence number had come.
    pub duplicates: u64,
    pub too_old: u64,
}

impl MergeCounts {
    /// How many counts there are, for [`Self::to_array`].
    pub const COUNT: usize = 2 * PATHS + 2;

    /// The counts in a fixed order, for a real-time thread to publish one
    /// by one (as atomics) and a reader to put back together.
    pub fn to_array(&self) -> [u64; Self::COUNT] {
        let [a, b] = self.paths;
        [
            a.received,
            a.lost,
            b.received,
            b.lost,
            self.duplicates,
            self.too_old,
        ]
    }

    /// The inverse of [`Self::to_array`].
    pub fn from_array(values: [u64; Self::COUNT]) -> MergeCounts {
        let [a_received, a_lost, b_received, b_lost, duplicates, too_old] = values;
        MergeCounts {
            paths: [
                PathCounts {
                    received: a_received,
                    lost: a_lost,
                },
                PathCounts {
                    received: b_received,
                    lost: b_lost,
                },
            ],
            duplicates,
            too_old,
        }
    }
}

/// The merge of one stream's paths; see the module doc.
#[derive(Debug, Clone)]
pub struct Merge {
    /// Per sequence number mod the window: [`TRACKED`] and a bit per path.
    seen: [u8; MERGE_WINDOW],
    highest: Option<u16>,
    ssrc: Option<u32>,
    counts: MergeCounts,
}

impl Default for Merge {
    fn default() -> Self {
        Merge::new()
    }
}

impl Merge {
    pub fn new() -> Merge {
        Merge {
            seen: [0; MERGE_WINDOW],
            highest: None,
            ssrc: None,
            counts: MergeCounts::default(),
        }
    }

    /// Takes a copy of sequence number `sequence` from `ssrc` that came by
    /// `path` (0 or 1).
    ///
    /// # Panics
    /// If `path` is not below [`PATHS`].
    pub fn accept(&mut self, path: usize, ssrc: u32, sequence: u16) -> Copy {
        assert!(path < PATHS, "path {path} of {PATHS}");
        self.counts.paths[path].received += 1;
        if self.ssrc != Some(ssrc) {
            self.restart();
            self.ssrc = Some(ssrc);
        }
        let bit = 1u8 << path;
        let Some(highest) = self.highest else {
            self.highest = Some(sequence);
            self.seen[slot(sequence)] = TRACKED | bit;
            return Copy::First;
        };
        let ahead = sequence_delta(highest, sequence);
        if ahead > 0 {
            self.advance(highest, ahead.unsigned_abs());
            self.highest = Some(sequence);
            self.seen[slot(sequence)] = TRACKED | bit;
            return Copy::First;
        }
        if usize::from(ahead.unsigned_abs()) >= MERGE_WINDOW {
            self.counts.too_old += 1;
            return Copy::TooOld;
        }
        let seen = &mut self.seen[slot(sequence)];
        let came = *seen & !TRACKED != 0;
        *seen |= TRACKED | bit;
        if came {
            self.counts.duplicates += 1;
            Copy::Duplicate
        } else {
            Copy::First
        }
    }

    /// Moves the window `by` sequence numbers past `highest`: each number
    /// leaving it counts as lost on the paths that did not bring it.
    fn advance(&mut self, highest: u16, by: u16) {
        if usize::from(by) >= MERGE_WINDOW {
            // A jump beyond the window: what it held leaves at once.
            for k in 0..MERGE_WINDOW as u16 {
                self.leave(slot(k));
            }
            self.seen.fill(0);
            return;
        }
        for k in 1..=by {
            let at = slot(highest.wrapping_add(k));
            self.leave(at);
            self.seen[at] = TRACKED;
        }
    }

    fn leave(&mut self, at: usize) {
        let seen = self.seen[at];
        if seen & TRACKED == 0 {
            return;
        }
        for (path, counts) in self.counts.paths.iter_mut().enumerate() {
            if seen & (1 << path) == 0 {
                counts.lost += 1;
            }
        }
    }

    fn restart(&mut self) {
        self.seen.fill(0);
        self.highest = None;
    }

    pub fn counts(&self) -> MergeCounts {
        self.counts
    }
}

fn slot(sequence: u16) -> usize {
    usize::from(sequence) % MERGE_WINDOW
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Encoding, StreamFormat};
    use crate::jitter::{Arrival, JitterBuffer};
    use crate::payload::{decode_channel, encode_channel};
    use crate::rtp::RtpHeader;
    use proptest::prelude::*;

    #[test]
    fn the_first_copy_wins_and_the_second_is_a_duplicate() {
        let mut m = Merge::new();
        assert_eq!(m.accept(0, 7, 65_535), Copy::First);
        assert_eq!(m.accept(1, 7, 65_535), Copy::Duplicate);
        assert_eq!(m.accept(1, 7, 0), Copy::First);
        assert_eq!(m.accept(0, 7, 0), Copy::Duplicate);
        // Path 1 ahead: 2 comes before 1, and path 0 fills in 1.
        assert_eq!(m.accept(1, 7, 2), Copy::First);
        assert_eq!(m.accept(0, 7, 1), Copy::First);
        assert_eq!(m.accept(1, 7, 1), Copy::Duplicate);
        assert_eq!(m.accept(0, 7, 2), Copy::Duplicate);
        let c = m.counts();
        assert_eq!(c.duplicates, 4);
        assert_eq!((c.paths[0].received, c.paths[1].received), (4, 4));
    }

    #[test]
    fn a_path_loss_is_counted_once_the_window_passed_it() {
        let mut m = Merge::new();
        for seq in 0..3000u16 {
            m.accept(0, 1, seq);
            // Path 1 is cut from 1000 on.
            if seq < 1000 {
                m.accept(1, 1, seq);
            }
        }
        let c = m.counts();
        assert_eq!(c.paths[0].lost, 0);
        // Left the window: up to 3000 − 1024; path 1 missed 1000 on.
        assert_eq!(c.paths[1].lost, 3000 - MERGE_WINDOW as u64 - 1000);
        assert_eq!(c.duplicates, 1000);
    }

    #[test]
    fn counts_round_trip_through_their_array() {
        let mut m = Merge::new();
        m.accept(0, 1, 1);
        m.accept(1, 1, 1);
        let c = m.counts();
        assert_eq!(MergeCounts::from_array(c.to_array()), c);
    }

    #[test]
    fn copies_older_than_the_window_and_a_new_sender() {
        let mut m = Merge::new();
        m.accept(0, 1, 5000);
        assert_eq!(m.accept(1, 1, 5000 - MERGE_WINDOW as u16), Copy::TooOld);
        assert_eq!(m.accept(1, 1, 5001 - MERGE_WINDOW as u16), Copy::First);
        // The sender restarted: its numbers owe nothing to the old ones.
        assert_eq!(m.accept(1, 2, 5000), Copy::First);
        assert_eq!(m.accept(0, 2, 5000), Copy::Duplicate);
        assert_eq!(m.counts().too_old, 1);
    }

    const FRAMES: u32 = 48;

    fn format() -> StreamFormat {
        StreamFormat::new(Encoding::L16, 48_000, 1, FRAMES).unwrap()
    }

    /// Packet `n`'s payload: its frames carry n and their index.
    fn payload(n: u32) -> Vec<u8> {
        let samples: Vec<f32> = (0..FRAMES)
            .map(|k| ((n * FRAMES + k) % 30_000) as f32 / 32_768.0)
            .collect();
        let mut out = vec![0u8; FRAMES as usize * 2];
        encode_channel(Encoding::L16, 1, 0, &samples, &mut out);
        out
    }

    proptest! {
        /// Whatever each path loses and however their delays interleave
        /// the copies, if every sequence number comes by at least one path
        /// the merge passes each exactly once, and the jitter buffer plays
        /// the whole stream in order.
        #[test]
        fn every_packet_by_one_path_or_the_other_is_played_once_in_order(
            first in any::<u16>(),
            base in any::<u32>(),
            // Per packet: 1 = path 0 only, 2 = path 1 only, 3 = both.
            delivery in prop::collection::vec(1u8..=3, 50..400),
            skews in prop::collection::vec((0u32..5_000, 0u32..5_000), 400),
            offset in 0u32..20_000,
        ) {
            let n = delivery.len() as u32;
            // Each copy's arrival: its send time (1000 µs apart), the
            // path's offset and the copy's own delay.
            let mut copies = Vec::new();
            for (k, &paths) in delivery.iter().enumerate() {
                let sent = k as u32 * 1000;
                for path in 0..PATHS {
                    if paths & (1 << path) != 0 {
                        let (a, b) = skews[k];
                        let delay = if path == 0 { a } else { offset + b };
                        copies.push((sent + delay, path, k as u32));
                    }
                }
            }
            copies.sort();
            let mut merge = Merge::new();
            let mut jitter = JitterBuffer::new(format(), 512);
            let mut firsts = vec![0u32; n as usize];
            for &(_, path, k) in &copies {
                let sequence = first.wrapping_add(k as u16);
                if merge.accept(path, 9, sequence) == Copy::First {
                    firsts[k as usize] += 1;
                    let header = RtpHeader {
                        marker: false,
                        payload_type: 97,
                        sequence,
                        timestamp: base.wrapping_add(k * FRAMES),
                        ssrc: 9,
                    };
                    prop_assert_eq!(jitter.push(&header, &payload(k)), Arrival::Stored);
                }
            }
            prop_assert!(firsts.iter().all(|&f| f == 1), "{:?}", firsts);
            let both = delivery.iter().filter(|&&d| d == 3).count() as u64;
            prop_assert_eq!(merge.counts().duplicates, both);
            let mut out = vec![0.0; (n * FRAMES) as usize];
            prop_assert_eq!(jitter.read(base, 0, &mut out), 0);
            let mut expected = vec![0.0; out.len()];
            for k in 0..n {
                let at = (k * FRAMES) as usize;
                decode_channel(Encoding::L16, 1, 0, &payload(k), &mut expected[at..at + FRAMES as usize]);
            }
            prop_assert_eq!(out, expected);
            jitter.advance(base, n * FRAMES);
            prop_assert_eq!(jitter.counters().lost, 0);
        }
    }
}
