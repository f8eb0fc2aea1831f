//! Latency histograms: fixed-size HDR histograms of nanosecond values, safe
//! to record into on a real-time thread, and their compact JSON form.
//!
//! Owns the histogram's bounds, precision and serialization. It must never
//! allocate after construction in [`LatencyHistogram::record`] (so never the
//! auto-resizing constructor, and saturating records only).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Nanoseconds in a microsecond, the unit of every latency summary.
pub const NS_PER_US: f64 = 1_000.0;

/// Three significant digits: each value is known to within 0.1 %.
const SIGNIFICANT_DIGITS: u8 = 3;

/// Smallest trackable value (values of 0 are recorded exactly too).
const LOWEST_NS: u64 = 1;

/// A histogram of latencies in nanoseconds, from 0 to `max_ns`, with 3
/// significant digits. Values above `max_ns` are recorded as `max_ns`, so a
/// maximum equal to the bound means the bound was too low.
///
/// Serialized as `{"max_ns": .., "significant_digits": 3, "buckets":
/// [[value_ns, count], ..]}` listing only non-empty buckets, each by its
/// highest equivalent value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "HistogramRecord", try_from = "HistogramRecord")]
pub struct LatencyHistogram {
    max_ns: u64,
    histogram: Histogram<u64>,
}

/// One non-empty bucket: every value in `low_ns..=high_ns` is counted here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub low_ns: u64,
    pub high_ns: u64,
    pub count: u64,
}

impl LatencyHistogram {
    /// A histogram for values up to `max_ns` (at least 2 ns). All memory is
    /// allocated here: a bound of 1 s takes about 50 KB.
    pub fn new(max_ns: u64) -> Self {
        let max_ns = max_ns.max(2 * LOWEST_NS);
        let histogram = Histogram::new_with_bounds(LOWEST_NS, max_ns, SIGNIFICANT_DIGITS)
            .expect("bounds 1..max_ns with 3 significant digits are always valid");
        LatencyHistogram { max_ns, histogram }
    }

    /// Records one value. Never allocates, never fails: safe on a real-time
    /// thread. Values above the bound are recorded as the bound.
    pub fn record(&mut self, ns: u64) {
        self.histogram.saturating_record(ns);
    }

    /// Forgets every sample, keeping the memory. Never allocates: safe on a
    /// real-time thread.
    pub fn reset(&mut self) {
        self.histogram.reset();
    }

    /// Adds every sample of `other`, clamping values above this histogram's
    /// bound. Not for real-time threads.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for bucket in other.buckets() {
            self.histogram
                .saturating_record_n(bucket.high_ns, bucket.count);
        }
    }

    /// The bound given at construction.
    pub fn max_trackable_ns(&self) -> u64 {
        self.max_ns
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// Lowest value of the lowest non-empty bucket (0 when empty).
    pub fn min_ns(&self) -> u64 {
        self.histogram.min()
    }

    /// Highest value of the highest non-empty bucket (0 when empty).
    pub fn max_ns(&self) -> u64 {
        if self.histogram.is_empty() {
            0
        } else {
            self.histogram.max()
        }
    }

    /// Mean over bucket midpoints (0 when empty).
    pub fn mean_ns(&self) -> f64 {
        self.histogram.mean()
    }

    /// Population standard deviation over bucket midpoints (0 when empty).
    pub fn stdev_ns(&self) -> f64 {
        self.histogram.stdev()
    }

    /// The value at quantile `q` in 0..=1: the highest value of the bucket
    /// holding the sample of nearest rank `ceil(q * count)` (0 when empty).
    pub fn quantile(&self, q: f64) -> u64 {
        self.histogram.value_at_quantile(q.clamp(0.0, 1.0))
    }

    /// Samples in buckets lying wholly above `x_ns` (so a sample in the same
    /// bucket as `x_ns` is not counted: the resolution is 0.1 %).
    pub fn count_exceeding(&self, x_ns: u64) -> u64 {
        self.count() - self.histogram.count_between(0, x_ns)
    }

    /// Fraction of samples exceeding `x_ns` (see [`Self::count_exceeding`]),
    /// 0 when empty.
    pub fn exceeding_fraction(&self, x_ns: u64) -> f64 {
        match self.count() {
            0 => 0.0,
            n => self.count_exceeding(x_ns) as f64 / n as f64,
        }
    }

    /// Non-empty buckets in ascending order of value.
    pub fn buckets(&self) -> impl Iterator<Item = Bucket> + '_ {
        self.histogram.iter_recorded().map(|v| {
            let value = v.value_iterated_to();
            Bucket {
                low_ns: self.histogram.lowest_equivalent(value),
                high_ns: self.histogram.highest_equivalent(value),
                count: v.count_at_value(),
            }
        })
    }
}

/// The serialized form of a [`LatencyHistogram`].
#[derive(Serialize, Deserialize)]
struct HistogramRecord {
    max_ns: u64,
    significant_digits: u8,
    buckets: Vec<(u64, u64)>,
}

impl From<LatencyHistogram> for HistogramRecord {
    fn from(h: LatencyHistogram) -> Self {
        HistogramRecord {
            max_ns: h.max_ns,
            significant_digits: SIGNIFICANT_DIGITS,
            buckets: h.buckets().map(|b| (b.high_ns, b.count)).collect(),
        }
    }
}

impl TryFrom<HistogramRecord> for LatencyHistogram {
    type Error = String;

    fn try_from(record: HistogramRecord) -> Result<Self, String> {
        if record.significant_digits != SIGNIFICANT_DIGITS {
            return Err(format!(
                "histogram has {} significant digits, tessera writes {SIGNIFICANT_DIGITS}",
                record.significant_digits
            ));
        }
        let mut h = LatencyHistogram::new(record.max_ns);
        for (value_ns, count) in record.buckets {
            h.histogram.saturating_record_n(value_ns, count);
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_values(values: &[u64]) -> LatencyHistogram {
        let mut h = LatencyHistogram::new(10_000_000);
        values.iter().for_each(|&v| h.record(v));
        h
    }

    #[test]
    fn records_zero_and_saturates_above_bound() {
        let h = with_values(&[0, 5, 20_000_000]);
        assert_eq!(h.count(), 3);
        assert_eq!(h.min_ns(), 0);
        assert!(h.max_ns() >= 10_000_000 && h.max_ns() < 10_010_000);
    }

    #[test]
    fn quantiles_and_exceeding_fraction() {
        let values: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        let h = with_values(&values);
        assert_eq!(h.count(), 1000);
        let near = |a: u64, b: u64| a.abs_diff(b) <= b / 1000 + 1;
        assert!(near(h.quantile(0.5), 500_000));
        assert!(near(h.quantile(0.99), 990_000));
        assert!(near(h.quantile(1.0), 1_000_000));
        assert_eq!(h.count_exceeding(900_000), 100);
        assert_eq!(h.exceeding_fraction(900_000), 0.1);
        assert_eq!(h.exceeding_fraction(2_000_000), 0.0);
        assert_eq!(LatencyHistogram::new(100).exceeding_fraction(1), 0.0);
    }

    #[test]
    fn merge_adds_counts_even_across_bounds() {
        let mut a = with_values(&[1_000, 2_000]);
        let mut small = LatencyHistogram::new(5_000);
        small.record(3_000);
        a.merge(&small);
        a.merge(&with_values(&[4_000_000]));
        assert_eq!(a.count(), 4);
        assert!(a.max_ns() >= 4_000_000);
        small.merge(&a);
        assert_eq!(small.count(), 5);
        assert!(small.max_ns() <= 5_010, "clamped to its own bound");
    }

    #[test]
    fn buckets_cover_their_values() {
        let h = with_values(&[7, 7, 1_234_567]);
        let buckets: Vec<Bucket> = h.buckets().collect();
        assert_eq!(buckets.len(), 2);
        assert_eq!(
            (buckets[0].low_ns, buckets[0].high_ns, buckets[0].count),
            (7, 7, 2)
        );
        assert!(buckets[1].low_ns <= 1_234_567 && 1_234_567 <= buckets[1].high_ns);
        assert_eq!(buckets[1].count, 1);
    }

    #[test]
    fn json_round_trip_keeps_every_sample() {
        let h = with_values(&[0, 1, 999, 1_000_001, 1_000_001, 9_999_999]);
        let json = serde_json::to_string(&h).unwrap();
        assert!(json.starts_with(r#"{"max_ns":10000000,"significant_digits":3,"buckets":[[0,1],"#));
        let back: LatencyHistogram = serde_json::from_str(&json).unwrap();
        assert_eq!(back, h);
        assert_eq!(
            back.buckets().collect::<Vec<_>>(),
            h.buckets().collect::<Vec<_>>()
        );
    }

    #[test]
    fn json_with_other_precision_is_rejected() {
        let err = serde_json::from_str::<LatencyHistogram>(
            r#"{"max_ns":1000,"significant_digits":2,"buckets":[]}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("significant digits"), "{err}");
    }
}
