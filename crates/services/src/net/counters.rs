//! Per-flow counters the serving threads keep and the control thread reads:
//! bytes, packets, drops and delay histograms, all atomics, so a serving
//! thread (real-time or not) never takes a lock or allocates to count, and
//! a status request never stops it.
//!
//! Histograms are log-linear (64 buckets per power of two: within 1.6 %,
//! finer than the 5 % a comparison of p99s asks), a fixed array made when
//! the flow is. This module must never block a
//! writer; readers see each counter whole, not all of them at one instant.

use super::rtp::RtpCounts;
use super::wire::{Delays, DirectionStats};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Buckets per power of two.
const SUB: u64 = 64;
const SUB_BITS: u32 = 6;
/// Enough buckets for any u64.
const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) * SUB as usize;

/// A histogram of nanoseconds one thread records into and any reads.
pub struct DelayHistogram {
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    sum: AtomicU64,
    max: AtomicU64,
}

fn bucket_of(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let exponent = 63 - ns.leading_zeros();
    let mantissa = (ns >> (exponent - SUB_BITS)) & (SUB - 1);
    ((exponent - SUB_BITS + 1) as u64 * SUB + mantissa) as usize
}

/// The largest value that falls in `bucket`.
fn bucket_top(bucket: usize) -> u64 {
    let bucket = bucket as u64;
    if bucket < SUB {
        return bucket;
    }
    let exponent = (bucket / SUB) as u32 + SUB_BITS - 1;
    let low = (SUB + bucket % SUB) << (exponent - SUB_BITS);
    low + ((1u64 << (exponent - SUB_BITS)) - 1)
}

impl Default for DelayHistogram {
    fn default() -> Self {
        DelayHistogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }
}

impl DelayHistogram {
    /// Counts one delay. Real-time safe.
    pub fn record(&self, ns: u64) {
        self.buckets[bucket_of(ns)].fetch_add(1, Relaxed);
        self.count.fetch_add(1, Relaxed);
        self.sum.fetch_add(ns, Relaxed);
        self.max.fetch_max(ns, Relaxed);
    }

    /// The smallest bucket top below which at least `q` of the delays lie.
    fn quantile(&self, counts: &[u64], total: u64, q: f64) -> u64 {
        let wanted = ((total as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, count) in counts.iter().enumerate() {
            seen += count;
            if seen >= wanted {
                return bucket_top(bucket).min(self.max.load(Relaxed));
            }
        }
        self.max.load(Relaxed)
    }

    /// (largest value of the bucket, count) of every bucket that has any.
    pub fn buckets(&self) -> Vec<(u64, u64)> {
        self.buckets
            .iter()
            .enumerate()
            .map(|(bucket, count)| (bucket_top(bucket), count.load(Relaxed)))
            .filter(|&(_, count)| count > 0)
            .collect()
    }

    pub fn delays(&self) -> Delays {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return Delays::default();
        }
        Delays {
            count: total,
            p50_ns: self.quantile(&counts, total, 0.5),
            p99_ns: self.quantile(&counts, total, 0.99),
            p999_ns: self.quantile(&counts, total, 0.999),
            max_ns: self.max.load(Relaxed),
            mean_ns: self.sum.load(Relaxed) / self.count.load(Relaxed).max(1),
        }
    }
}

/// One direction of a flow.
#[derive(Default)]
pub struct DirectionCounters {
    bytes: AtomicU64,
    packets: AtomicU64,
    drops: AtomicU64,
    overflowed: AtomicU64,
    pub queueing: DelayHistogram,
}

impl DirectionCounters {
    /// A datagram of `bytes` carried after waiting `queued_ns`.
    pub fn carried(&self, bytes: usize, queued_ns: u64) {
        self.bytes.fetch_add(bytes as u64, Relaxed);
        self.packets.fetch_add(1, Relaxed);
        self.queueing.record(queued_ns);
    }

    pub fn dropped(&self) {
        self.drops.fetch_add(1, Relaxed);
    }

    /// The kernel's count of datagrams the socket dropped so far.
    pub fn overflowed(&self, total: u32) {
        self.overflowed.fetch_max(total as u64, Relaxed);
    }

    pub fn stats(&self) -> DirectionStats {
        DirectionStats {
            bytes: self.bytes.load(Relaxed),
            packets: self.packets.load(Relaxed),
            drops: self.drops.load(Relaxed),
            overflowed: self.overflowed.load(Relaxed),
            queueing: self.queueing.delays(),
        }
    }
}

/// Everything counted of one flow.
#[derive(Default)]
pub struct FlowCounters {
    pub received: DirectionCounters,
    pub sent: DirectionCounters,
    pub response: DelayHistogram,
    late_responses: AtomicU64,
    /// 0: no deadline.
    response_deadline_ns: u64,
    /// An RTP flow's arrivals, counted by sequence.
    pub rtp: Option<RtpCounts>,
}

impl FlowCounters {
    pub fn with_deadline(response_deadline_ns: Option<u64>) -> FlowCounters {
        FlowCounters {
            response_deadline_ns: response_deadline_ns.unwrap_or(0),
            ..FlowCounters::default()
        }
    }

    /// Counts the flow's arrivals as RTP too.
    pub fn with_rtp(self) -> FlowCounters {
        FlowCounters {
            rtp: Some(RtpCounts::default()),
            ..self
        }
    }

    /// An answer sent `ns` after the arrival it answers.
    pub fn responded(&self, ns: u64) {
        self.response.record(ns);
        if self.response_deadline_ns != 0 && ns > self.response_deadline_ns {
            self.late_responses.fetch_add(1, Relaxed);
        }
    }

    pub fn late_responses(&self) -> u64 {
        self.late_responses.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_falls_in_a_bucket_whose_top_bounds_it_within_a_64th() {
        for ns in [
            0,
            1,
            63,
            64,
            65,
            1000,
            1_000_000,
            123_456_789,
            u64::MAX / 3,
            u64::MAX,
        ] {
            let top = bucket_top(bucket_of(ns));
            assert!(top >= ns, "{ns}: top {top}");
            assert!(top - ns <= ns / 64 + 1, "{ns}: top {top}");
        }
        assert!(bucket_of(u64::MAX) < BUCKETS);
    }

    #[test]
    fn quantiles_follow_the_recorded_delays() {
        let histogram = DelayHistogram::default();
        for us in 1..=1000 {
            histogram.record(us * 1000);
        }
        let delays = histogram.delays();
        assert_eq!(delays.count, 1000);
        assert_eq!(delays.max_ns, 1_000_000);
        assert!((500_000..=508_000).contains(&delays.p50_ns), "{delays:?}");
        assert!((990_000..=1_000_000).contains(&delays.p99_ns), "{delays:?}");
        assert_eq!(delays.mean_ns, 500_500);
    }
}
