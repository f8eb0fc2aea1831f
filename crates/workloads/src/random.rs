//! Seeded random draws for workloads that emulate chance — a sender's
//! jitter, a path's loss and delay — so that a run is reproducible from
//! its seed. xorshift64*: a few integer operations a draw, no allocation,
//! no system entropy. Never for anything that must be unpredictable.

/// An xorshift64* generator.
pub(crate) struct Random(u64);

impl Random {
    /// A generator for `seed`: nearby seeds give unrelated draws (the
    /// seed goes through SplitMix64's finaliser; the state is never 0).
    pub(crate) fn new(seed: u64) -> Random {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Random((z ^ (z >> 31)).max(1))
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

    #[test]
    fn neighbouring_seeds_draw_apart() {
        // Two paths seeded 26 and 27 must not lose the same packets.
        let (mut a, mut b) = (Random::new(26), Random::new(27));
        let both = (0..10_000)
            .filter(|_| {
                let (x, y) = (a.next(), b.next());
                x < 0.01 && y < 0.01
            })
            .count();
        assert!(both < 10, "{both} of 10 000 draws below 1 % in both");
    }
}
