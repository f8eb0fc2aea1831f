//! First-order statistics: count, min, mean, max, stdev, p50, p99, p99.9 and
//! deadline misses, exactly from raw samples or approximately from a
//! [`LatencyHistogram`].
//!
//! Owns the definitions of those numbers (percentile method, which standard
//! deviation, what a miss is). It must never be called on a real-time thread:
//! [`Summary::from_samples`] sorts a copy of its input.

use serde::{Deserialize, Serialize};

use crate::histogram::{LatencyHistogram, NS_PER_US};

/// First-order statistics of one metric in one configuration.
///
/// All fields are in the unit of the samples (for latency summaries built
/// from a histogram: microseconds).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub count: u64,
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    /// Population standard deviation (divides by `count`, not `count - 1`):
    /// the runs measure every cycle, not a sample of cycles.
    pub stdev: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    /// Samples strictly greater than the deadline; `None` without a deadline.
    pub misses: Option<u64>,
}

/// A percentile as the exact fraction `num / den`, so ranks need no rounding.
struct Percentile {
    num: u64,
    den: u64,
}

const P50: Percentile = Percentile { num: 1, den: 2 };
const P99: Percentile = Percentile { num: 99, den: 100 };
const P999: Percentile = Percentile {
    num: 999,
    den: 1000,
};

impl Percentile {
    fn quantile(&self) -> f64 {
        self.num as f64 / self.den as f64
    }

    /// Nearest-rank method: the smallest sample such that at least
    /// `num / den` of all samples are less than or equal to it, i.e. the
    /// sample of 1-based rank `ceil(n * num / den)` in ascending order.
    fn nearest_rank(&self, sorted: &[f64]) -> f64 {
        let n = sorted.len() as u64;
        let rank = (n * self.num).div_ceil(self.den).max(1);
        sorted[(rank - 1) as usize]
    }
}

impl Summary {
    /// The summary of no samples: count 0, every statistic 0 (never NaN), and
    /// `Some(0)` misses when a deadline is given.
    pub fn empty(deadline: Option<f64>) -> Summary {
        Summary {
            count: 0,
            min: 0.0,
            mean: 0.0,
            max: 0.0,
            stdev: 0.0,
            p50: 0.0,
            p99: 0.0,
            p999: 0.0,
            misses: deadline.map(|_| 0),
        }
    }

    /// Exact statistics of `samples`; NaN samples are not measurements and
    /// are ignored. Percentiles use the nearest-rank method (always an
    /// observed sample, never interpolated); `stdev` is the population
    /// standard deviation; `misses` counts samples strictly greater than
    /// `deadline`. Empty input gives [`Summary::empty`].
    pub fn from_samples(samples: &[f64], deadline: Option<f64>) -> Summary {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
        if sorted.is_empty() {
            return Summary::empty(deadline);
        }
        sorted.sort_by(f64::total_cmp);
        let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
        let (mean, variance) = mean_and_population_variance(&sorted);
        Summary {
            count: sorted.len() as u64,
            min,
            // The true mean lies in [min, max]; rounding may step just outside.
            mean: mean.clamp(min, max),
            max,
            stdev: variance.sqrt(),
            p50: P50.nearest_rank(&sorted),
            p99: P99.nearest_rank(&sorted),
            p999: P999.nearest_rank(&sorted),
            misses: deadline.map(|d| sorted.iter().filter(|&&x| x > d).count() as u64),
        }
    }

    /// Statistics of a latency histogram, in microseconds, with `deadline_us`
    /// also in microseconds.
    ///
    /// Approximate to the histogram's precision (3 significant digits, so
    /// within 0.1 % of each value): `min` is the lowest value of the lowest
    /// bucket, `max` the highest value of the highest bucket, percentiles are
    /// the highest value of the bucket holding the nearest-rank sample, mean
    /// and stdev (population) use bucket midpoints, and a miss is a sample in
    /// a bucket lying wholly above the deadline.
    pub fn from_histogram(histogram: &LatencyHistogram, deadline_us: Option<f64>) -> Summary {
        if histogram.count() == 0 {
            return Summary::empty(deadline_us);
        }
        let us = |ns: u64| ns as f64 / NS_PER_US;
        let percentile = |p: &Percentile| us(histogram.quantile(p.quantile()));
        Summary {
            count: histogram.count(),
            min: us(histogram.min_ns()),
            mean: histogram.mean_ns() / NS_PER_US,
            max: us(histogram.max_ns()),
            stdev: histogram.stdev_ns() / NS_PER_US,
            p50: percentile(&P50),
            p99: percentile(&P99),
            p999: percentile(&P999),
            misses: deadline_us.map(|d| histogram.count_exceeding((d * NS_PER_US) as u64)),
        }
    }
}

/// Welford's one-pass mean and population variance (no catastrophic
/// cancellation for samples far from zero, such as 1 ms ± 1 µs).
fn mean_and_population_variance(samples: &[f64]) -> (f64, f64) {
    let (mut mean, mut m2) = (0.0, 0.0);
    for (i, &x) in samples.iter().enumerate() {
        let delta = x - mean;
        mean += delta / (i + 1) as f64;
        m2 += delta * (x - mean);
    }
    (mean, (m2 / samples.len() as f64).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn textbook_data_set() {
        // Mean 5, population variance 32/8 = 4, so stdev exactly 2.
        let s = Summary::from_samples(&[9.0, 2.0, 4.0, 4.0, 5.0, 4.0, 7.0, 5.0], Some(5.0));
        assert_eq!(s.count, 8);
        assert_eq!((s.min, s.max), (2.0, 9.0));
        assert!((s.mean - 5.0).abs() < 1e-12);
        assert!((s.stdev - 2.0).abs() < 1e-12);
        assert_eq!(s.p50, 4.0); // rank ceil(8 * 0.5) = 4 -> 4
        assert_eq!(s.p99, 9.0); // rank ceil(7.92) = 8 -> 9
        assert_eq!(s.p999, 9.0);
        assert_eq!(s.misses, Some(2), "7 and 9 exceed 5; 5 itself is no miss");
    }

    #[test]
    fn nearest_rank_on_one_to_thousand() {
        let samples: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let s = Summary::from_samples(&samples, None);
        assert_eq!((s.p50, s.p99, s.p999), (500.0, 990.0, 999.0));
        assert_eq!(s.mean, 500.5);
        // Population variance of 1..=n is (n^2 - 1) / 12.
        assert!((s.stdev - (999_999.0f64 / 12.0).sqrt()).abs() < 1e-9);
        assert_eq!(s.misses, None);
    }

    #[test]
    fn single_sample_and_nan() {
        let s = Summary::from_samples(&[f64::NAN, 3.5], Some(1.0));
        assert_eq!(s.count, 1);
        assert_eq!(
            (s.min, s.p50, s.p999, s.max, s.stdev),
            (3.5, 3.5, 3.5, 3.5, 0.0)
        );
        assert_eq!(s.misses, Some(1));
    }

    #[test]
    fn empty_input_is_zero_not_nan() {
        assert_eq!(
            Summary::from_samples(&[], Some(1.0)),
            Summary::empty(Some(1.0))
        );
        let s = Summary::from_samples(&[], None);
        assert_eq!((s.count, s.mean, s.stdev, s.misses), (0, 0.0, 0.0, None));
        let h = LatencyHistogram::new(1_000_000);
        assert_eq!(Summary::from_histogram(&h, None), Summary::empty(None));
    }

    #[test]
    fn histogram_summary_matches_exact_within_precision() {
        let mut h = LatencyHistogram::new(10_000_000);
        let samples_us: Vec<f64> = (0..10_000u64).map(|i| 900.0 + (i % 500) as f64).collect();
        for &us in &samples_us {
            h.record((us * NS_PER_US) as u64);
        }
        let exact = Summary::from_samples(&samples_us, Some(1350.0));
        let approx = Summary::from_histogram(&h, Some(1350.0));
        assert_eq!(approx.count, exact.count);
        let close = |a: f64, b: f64| (a - b).abs() <= b * 1e-3 + 1e-9;
        for (a, b) in [
            (approx.min, exact.min),
            (approx.mean, exact.mean),
            (approx.max, exact.max),
            (approx.p50, exact.p50),
            (approx.p99, exact.p99),
            (approx.p999, exact.p999),
        ] {
            assert!(close(a, b), "histogram {a} vs exact {b}");
        }
        assert!((approx.stdev - exact.stdev).abs() < 1.0);
        assert_eq!(approx.misses, exact.misses);
    }

    proptest! {
        #[test]
        fn order_of_statistics(samples in prop::collection::vec(-1e9f64..1e9, 1..300)) {
            let s = Summary::from_samples(&samples, Some(0.0));
            prop_assert!(s.min <= s.p50 && s.p50 <= s.p99 && s.p99 <= s.p999 && s.p999 <= s.max);
            prop_assert!(s.min <= s.mean && s.mean <= s.max);
            prop_assert!(s.stdev >= 0.0 && s.stdev <= s.max - s.min);
            prop_assert_eq!(s.count, samples.len() as u64);
            prop_assert!(s.misses.unwrap() <= s.count);
        }

        #[test]
        fn percentiles_are_observed_samples(samples in prop::collection::vec(0f64..1e6, 1..300)) {
            let s = Summary::from_samples(&samples, None);
            for p in [s.p50, s.p99, s.p999] {
                prop_assert!(samples.contains(&p));
            }
        }
    }
}
