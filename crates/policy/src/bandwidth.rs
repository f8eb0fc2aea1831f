//! CPU bandwidth as a fixed-point fraction of one core, with the kernel's
//! 20-bit shift (`to_ratio()` in kernel/sched/core.c), so that sums compare
//! exactly as the kernel's admission compares them, with no float drift.
//!
//! It must never round up a request: [`Bandwidth::of`] truncates like the kernel.

use serde::{Deserialize, Serialize};
use std::ops::{Add, Sub};

const SHIFT: u32 = 20;
const ONE: u64 = 1 << SHIFT;

/// A fraction of one core; `Bandwidth::ONE` is a whole core.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash, Serialize, Deserialize,
)]
pub struct Bandwidth(pub u64);

impl Bandwidth {
    pub const ZERO: Bandwidth = Bandwidth(0);
    pub const ONE: Bandwidth = Bandwidth(ONE);

    /// `runtime / period`, truncated as the kernel does.
    pub fn of(runtime_ns: u64, period_ns: u64) -> Bandwidth {
        if period_ns == 0 {
            return Bandwidth::ZERO;
        }
        Bandwidth((((runtime_ns as u128) << SHIFT) / period_ns as u128) as u64)
    }

    pub fn from_fraction(f: f64) -> Bandwidth {
        Bandwidth((f.max(0.0) * ONE as f64) as u64)
    }

    pub fn as_fraction(self) -> f64 {
        self.0 as f64 / ONE as f64
    }

    /// The largest runtime with this bandwidth over `window_ns`.
    pub fn runtime_in(self, window_ns: u64) -> u64 {
        ((self.0 as u128 * window_ns as u128) >> SHIFT) as u64
    }

    pub fn times(self, n: u64) -> Bandwidth {
        Bandwidth(self.0.saturating_mul(n))
    }

    pub fn saturating_sub(self, other: Bandwidth) -> Bandwidth {
        Bandwidth(self.0.saturating_sub(other.0))
    }
}

impl Add for Bandwidth {
    type Output = Bandwidth;
    fn add(self, rhs: Bandwidth) -> Bandwidth {
        Bandwidth(self.0.saturating_add(rhs.0))
    }
}

impl Sub for Bandwidth {
    type Output = Bandwidth;
    fn sub(self, rhs: Bandwidth) -> Bandwidth {
        self.saturating_sub(rhs)
    }
}

impl std::iter::Sum for Bandwidth {
    fn sum<I: Iterator<Item = Bandwidth>>(iter: I) -> Bandwidth {
        iter.fold(Bandwidth::ZERO, |a, b| a + b)
    }
}

impl std::fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2}", self.as_fraction())
    }
}

/// The largest value in `lo..=hi` for which `fits` holds, if it holds for
/// `lo`. `fits` must only grow as the value falls (a runtime that fits
/// still fits when smaller), which lets a binary search find it.
pub fn largest_fitting(lo: u64, hi: u64, fits: impl Fn(u64) -> bool) -> Option<u64> {
    if hi < lo || !fits(lo) {
        return None;
    }
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_arithmetic() {
        assert_eq!(Bandwidth::of(1, 1), Bandwidth::ONE);
        assert_eq!(
            Bandwidth::of(950_000, 1_000_000).0,
            (950_000u64 << 20) / 1_000_000
        );
        assert_eq!(
            Bandwidth::of(400_000, 1_333_000).runtime_in(1_333_000),
            399_999
        );
        assert_eq!(Bandwidth::of(5, 0), Bandwidth::ZERO);
    }

    proptest::proptest! {
        #[test]
        fn largest_fitting_finds_the_threshold(lo in 0u64..1000, span in 0u64..1000, limit in 0u64..3000) {
            let hi = lo + span;
            let found = largest_fitting(lo, hi, |v| v <= limit);
            let expected = (limit >= lo).then(|| limit.min(hi));
            proptest::prop_assert_eq!(found, expected);
        }
    }
}
