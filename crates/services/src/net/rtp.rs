//! What the network service counts of a flow that carries RTP (RFC 3550):
//! packets lost (sequence gaps), out of order and duplicated, senders that
//! restarted (a new SSRC or a jump no reordering explains), and the
//! interarrival jitter of §6.4.1, from the kernel's receive stamps.
//!
//! The serving thread owns a [`SequenceTracker`] per flow (plain state) and
//! publishes into [`RtpCounts`] (atomics) that the control thread reads: it
//! must never allocate, lock or block, and it never drops or reorders a
//! datagram — the receiver's jitter buffer does what the counts describe.

use super::wire::RtpStats;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use tessera_aes67::rtp;

/// A sequence jump larger than this is a sender that restarted (RFC 3550
/// A.1's MAX_DROPOUT), not packets lost.
const MAX_DROPOUT: i16 = 3000;

/// The counts a flow's status shows.
#[derive(Default)]
pub struct RtpCounts {
    packets: AtomicU64,
    lost: AtomicU64,
    reordered: AtomicU64,
    duplicates: AtomicU64,
    restarts: AtomicU64,
    not_rtp: AtomicU64,
    ssrc: AtomicU32,
    /// The jitter estimate, in ns (×16 of RFC 3550's fixed point is kept
    /// by the tracker; this is the published value).
    jitter_ns: AtomicU64,
}

impl RtpCounts {
    pub fn stats(&self) -> RtpStats {
        RtpStats {
            packets: self.packets.load(Relaxed),
            lost: self.lost.load(Relaxed),
            reordered: self.reordered.load(Relaxed),
            duplicates: self.duplicates.load(Relaxed),
            restarts: self.restarts.load(Relaxed),
            not_rtp: self.not_rtp.load(Relaxed),
            ssrc: self.ssrc.load(Relaxed),
            jitter_us: self.jitter_ns.load(Relaxed) as f64 / 1000.0,
        }
    }
}

/// The serving thread's view of one RTP flow's sequence and timing.
pub struct SequenceTracker {
    clock_rate: u64,
    /// (SSRC, highest sequence seen) once a packet came.
    highest: Option<(u32, u16)>,
    /// Sequence numbers counted lost that may still come (a later packet
    /// with one of them is reordered, not lost): a bitmap of the 64 below
    /// the highest.
    missing: u64,
    /// The previous packet's transit (arrival − timestamp), in ns.
    transit_ns: Option<i64>,
    jitter_ns: f64,
}

impl SequenceTracker {
    pub fn new(clock_rate: u32) -> SequenceTracker {
        SequenceTracker {
            clock_rate: u64::from(clock_rate.max(1)),
            highest: None,
            missing: 0,
            transit_ns: None,
            jitter_ns: 0.0,
        }
    }

    /// Counts one datagram that arrived at `arrival_ns`. Real-time safe.
    pub fn observe(&mut self, datagram: &[u8], arrival_ns: u64, counts: &RtpCounts) {
        let Ok(packet) = rtp::parse(datagram) else {
            counts.not_rtp.fetch_add(1, Relaxed);
            return;
        };
        let header = packet.header;
        counts.packets.fetch_add(1, Relaxed);
        match self.highest {
            Some((ssrc, highest)) if ssrc == header.ssrc => {
                self.sequence(highest, header.sequence, header.ssrc, counts);
            }
            _ => self.restart(header.ssrc, header.sequence, counts),
        }
        self.jitter(header.timestamp, arrival_ns, counts);
    }

    fn restart(&mut self, ssrc: u32, sequence: u16, counts: &RtpCounts) {
        if self.highest.is_some() {
            counts.restarts.fetch_add(1, Relaxed);
        }
        counts.ssrc.store(ssrc, Relaxed);
        self.highest = Some((ssrc, sequence));
        self.missing = 0;
        self.transit_ns = None;
    }

    fn sequence(&mut self, highest: u16, sequence: u16, ssrc: u32, counts: &RtpCounts) {
        let delta = rtp::sequence_delta(highest, sequence);
        if !(-MAX_DROPOUT..=MAX_DROPOUT).contains(&delta) {
            return self.restart(ssrc, sequence, counts);
        }
        if delta > 0 {
            let gap = (delta - 1) as u32;
            counts.lost.fetch_add(u64::from(gap), Relaxed);
            // The missing ones sit just below the new highest.
            self.missing = self.missing.checked_shl(delta as u32).unwrap_or(0);
            let fresh = match gap {
                0 => 0,
                64.. => u64::MAX,
                _ => (1u64 << gap) - 1,
            };
            self.missing |= fresh;
            self.highest = Some((ssrc, sequence));
            return;
        }
        // Bit k of `missing` is the sequence k + 1 below the highest.
        let below = delta.unsigned_abs() as u32;
        let bit = 1u64.checked_shl(below.wrapping_sub(1)).unwrap_or(0);
        if below == 0 || self.missing & bit == 0 {
            counts.duplicates.fetch_add(1, Relaxed);
            return;
        }
        self.missing &= !bit;
        counts.lost.fetch_sub(1, Relaxed);
        counts.reordered.fetch_add(1, Relaxed);
    }

    /// RFC 3550 §6.4.1: J += (|D| − J) / 16, D the change in transit time.
    fn jitter(&mut self, timestamp: u32, arrival_ns: u64, counts: &RtpCounts) {
        let sent_ns = (u64::from(timestamp) * 1_000_000_000 / self.clock_rate) as i64;
        let period_ns = ((1u64 << 32) * 1_000_000_000 / self.clock_rate) as i64;
        let transit = (arrival_ns as i64).wrapping_sub(sent_ns);
        if let Some(previous) = self.transit_ns {
            // Transit changes by a whole timestamp wrap when the 32-bit
            // timestamp wraps: take the change nearest zero.
            let mut change = (transit - previous).rem_euclid(period_ns);
            if change > period_ns / 2 {
                change -= period_ns;
            }
            self.jitter_ns += (change.unsigned_abs() as f64 - self.jitter_ns) / 16.0;
            counts.jitter_ns.store(self.jitter_ns as u64, Relaxed);
        }
        self.transit_ns = Some(transit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_aes67::rtp::RtpHeader;

    fn packet(sequence: u16, timestamp: u32) -> [u8; 16] {
        let mut bytes = [0u8; 16];
        RtpHeader {
            marker: false,
            payload_type: 96,
            sequence,
            timestamp,
            ssrc: 7,
        }
        .write(&mut bytes)
        .unwrap();
        bytes
    }

    fn run(sequences: &[u16]) -> RtpStats {
        let counts = RtpCounts::default();
        let mut tracker = SequenceTracker::new(48_000);
        for (i, &sequence) in sequences.iter().enumerate() {
            let at = 1_000_000 * i as u64;
            tracker.observe(&packet(sequence, 48 * u32::from(sequence)), at, &counts);
        }
        counts.stats()
    }

    #[test]
    fn a_gap_is_lost_until_the_missing_packet_comes_late() {
        let stats = run(&[1, 2, 4, 5]);
        assert_eq!((stats.lost, stats.reordered), (1, 0));
        let stats = run(&[1, 2, 4, 3, 5]);
        assert_eq!((stats.lost, stats.reordered, stats.duplicates), (0, 1, 0));
    }

    #[test]
    fn sequences_wrap_and_repeats_are_duplicates() {
        let stats = run(&[65534, 65535, 0, 1, 1]);
        assert_eq!((stats.packets, stats.lost, stats.duplicates), (5, 0, 1));
    }

    #[test]
    fn a_jump_beyond_any_reordering_is_a_restart() {
        let stats = run(&[10, 11, 20_000, 20_001]);
        assert_eq!((stats.lost, stats.restarts), (0, 1));
    }

    #[test]
    fn steady_arrivals_have_no_jitter_and_uneven_ones_some() {
        let counts = RtpCounts::default();
        let mut tracker = SequenceTracker::new(48_000);
        for i in 0..100u16 {
            let at = 5_000_000 + 1_000_000 * u64::from(i);
            tracker.observe(&packet(i, 48 * u32::from(i)), at, &counts);
        }
        assert_eq!(counts.stats().jitter_us, 0.0);
        let jittery = RtpCounts::default();
        let mut tracker = SequenceTracker::new(48_000);
        for i in 0..100u16 {
            let at = 5_000_000 + 1_000_000 * u64::from(i) + 200_000 * u64::from(i % 2);
            tracker.observe(&packet(i, 48 * u32::from(i)), at, &jittery);
        }
        assert!(jittery.stats().jitter_us > 100.0, "{:?}", jittery.stats());
    }
}
