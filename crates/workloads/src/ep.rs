//! The NAS Parallel Benchmarks' EP ("embarrassingly parallel") kernel, the
//! best-effort load of seed 000 (Table 1): Gaussian pairs by the polar
//! method from the NPB linear congruential generator, tallied in square
//! annuli, verified against the published sums.
//!
//! The generator is exact integer arithmetic modulo 2^46 (the Fortran's
//! double-precision trick gives the same numbers). Batches are independent
//! (each starts from a seed jumped to its offset), so threads share them out.
//! It must never pick its scheduling; the setup hook does.

use crate::threads::{LoadThreads, Setup, Window};

/// The multiplier 5^13 and the seed of NPB EP.
const A: u64 = 1_220_703_125;
const SEED: u64 = 271_828_183;
const MASK_46: u64 = (1 << 46) - 1;
const TWO_TO_MINUS_46: f64 = 1.0 / (1u64 << 46) as f64;
/// Pairs per batch: 2^MK.
const MK: u32 = 16;
pub const PAIRS_PER_BATCH: u64 = 1 << MK;
/// Annuli counted.
pub const ANNULI: usize = 10;
const EPSILON: f64 = 1e-8;

/// NPB classes: 2^M pairs, with the published sums of the deviates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpClass {
    S,
    W,
    A,
}

impl EpClass {
    pub fn parse(text: &str) -> Option<EpClass> {
        match text.to_ascii_uppercase().as_str() {
            "S" => Some(EpClass::S),
            "W" => Some(EpClass::W),
            "A" => Some(EpClass::A),
            _ => None,
        }
    }

    /// log2 of the number of pairs.
    pub fn m(self) -> u32 {
        match self {
            EpClass::S => 24,
            EpClass::W => 25,
            EpClass::A => 28,
        }
    }

    pub fn batches(self) -> u64 {
        1 << (self.m() - MK)
    }

    /// NPB's verification values of (sx, sy), digits as published.
    #[allow(clippy::excessive_precision)]
    fn expected(self) -> (f64, f64) {
        match self {
            EpClass::S => (-3.247834652034740e3, -6.958407078382297e3),
            EpClass::W => (-2.863319731645753e3, -6.320053679109499e3),
            EpClass::A => (-4.295875165629892e3, -1.580732573678431e4),
        }
    }
}

/// Sums and counts over the batches run so far.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EpTally {
    pub sx: f64,
    pub sy: f64,
    pub annuli: [u64; ANNULI],
    pub pairs: u64,
}

impl EpTally {
    pub fn add(&mut self, other: &EpTally) {
        self.sx += other.sx;
        self.sy += other.sy;
        self.pairs += other.pairs;
        for (a, b) in self.annuli.iter_mut().zip(other.annuli) {
            *a += b;
        }
    }

    /// Gaussian pairs accepted (NPB's `gc`).
    pub fn accepted(&self) -> u64 {
        self.annuli.iter().sum()
    }

    /// Whether these are NPB's sums for `class` (relative error ≤ 1e-8).
    pub fn verifies(&self, class: EpClass) -> bool {
        let (sx, sy) = class.expected();
        ((self.sx - sx) / sx).abs() <= EPSILON && ((self.sy - sy) / sy).abs() <= EPSILON
    }
}

fn mul_mod(a: u64, x: u64) -> u64 {
    // 2^46 divides 2^64: the wrapped product is right modulo 2^46.
    a.wrapping_mul(x) & MASK_46
}

/// A^(2 × pairs per batch): the jump from one batch's seed to the next.
fn batch_jump() -> u64 {
    (0..=MK).fold(A, |t, _| mul_mod(t, t))
}

/// The generator's state at the start of batch `k`: SEED × jump^k.
fn batch_seed(k: u64, jump: u64) -> u64 {
    let (mut seed, mut power, mut k) = (SEED, jump, k);
    while k > 0 {
        if k & 1 == 1 {
            seed = mul_mod(seed, power);
        }
        power = mul_mod(power, power);
        k >>= 1;
    }
    seed
}

/// Runs batch `k` into `tally`; `uniform` is scratch of 2 × pairs per batch.
pub fn run_batch(k: u64, uniform: &mut [f64], tally: &mut EpTally) {
    let mut x = batch_seed(k, batch_jump());
    for u in uniform.iter_mut() {
        x = mul_mod(A, x);
        *u = x as f64 * TWO_TO_MINUS_46;
    }
    for pair in uniform.chunks_exact(2) {
        let (x1, x2) = (2.0 * pair[0] - 1.0, 2.0 * pair[1] - 1.0);
        let t = x1 * x1 + x2 * x2;
        if t <= 1.0 {
            let f = (-2.0 * t.ln() / t).sqrt();
            let (g1, g2) = (x1 * f, x2 * f);
            let annulus = g1.abs().max(g2.abs()) as usize;
            tally.annuli[annulus.min(ANNULI - 1)] += 1;
            tally.sx += g1;
            tally.sy += g2;
        }
    }
    tally.pairs += PAIRS_PER_BATCH;
}

/// The whole kernel of `class` on `threads` threads (each batch once).
pub fn kernel(class: EpClass, threads: usize) -> EpTally {
    let threads = threads.max(1) as u64;
    let parts: Vec<EpTally> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut uniform = vec![0.0; 2 * PAIRS_PER_BATCH as usize];
                    let mut tally = EpTally::default();
                    for k in (t..class.batches()).step_by(threads as usize) {
                        run_batch(k, &mut uniform, &mut tally);
                    }
                    tally
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    parts.iter().fold(EpTally::default(), |mut total, p| {
        total.add(p);
        total
    })
}

/// EP as interference: each thread runs its share of batches over and over
/// until its window ends. Units: pairs generated.
pub fn spawn(
    name: &str,
    threads: usize,
    window: Window,
    setup: impl FnMut(usize) -> Setup,
) -> std::io::Result<LoadThreads> {
    let stride = threads.max(1) as u64;
    LoadThreads::spawn(name, "pairs", threads, window, setup, move |i, span| {
        let mut uniform = vec![0.0; 2 * PAIRS_PER_BATCH as usize];
        let mut tally = EpTally::default();
        let mut k = i as u64;
        while span.running() {
            run_batch(k % EpClass::A.batches(), &mut uniform, &mut tally);
            k += stride;
        }
        Ok(tally.pairs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_s_verifies_on_two_threads() {
        let tally = kernel(EpClass::S, 2);
        assert!(tally.verifies(EpClass::S), "{tally:?}");
        assert_eq!(tally.pairs, 1 << 24);
        assert!(!tally.verifies(EpClass::W));
    }

    #[test]
    fn thread_count_does_not_change_the_result() {
        let one = kernel(EpClass::S, 1);
        let three = kernel(EpClass::S, 3);
        assert_eq!(one.annuli, three.annuli);
        assert!(((one.sx - three.sx) / one.sx).abs() < 1e-12);
    }

    #[test]
    fn seeds_jump_like_the_sequential_generator() {
        let jump = batch_jump();
        let mut x = SEED;
        for _ in 0..2 * PAIRS_PER_BATCH {
            x = mul_mod(A, x);
        }
        assert_eq!(batch_seed(1, jump), x);
        assert_eq!(batch_seed(0, jump), SEED);
    }
}
