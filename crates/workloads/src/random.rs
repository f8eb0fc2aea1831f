//! Seeded random draws for workloads that emulate chance — a sender's
//! jitter, a path's loss and delay — so that a run is reproducible from
//! its seed. xorshift64*: a few integer operations a draw, no allocation,
//! no system entropy. Never for anything that must be unpredictable.

/// An xorshift64* generator.
pub(crate) struct Random(u64);

impl Random {
    /// A generator for `seed` (any value: 0 is made non-zero).
    pub(crate) fn new(seed: u64) -> Random {
        Random(seed | 1)
    }

    /// Uniform in [0, 1).
    pub(crate) fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_uniform_in_zero_to_one() {
        let mut random = Random::new(7);
        let draws: Vec<f64> = (0..10_000).map(|_| random.next()).collect();
        assert!(draws.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
        assert!(Random::new(0).next() > 0.0);
    }
}
