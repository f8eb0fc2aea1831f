//! The oscillator bank: many sinusoids summed into one block, 8 at a time.
//!
//! Each oscillator is a complex phasor `re + i·im` whose magnitude is its
//! amplitude, multiplied every sample by the unit rotation `cos ω + i·sin ω`;
//! its output is `im`. That is 2 multiplies and 2 FMAs per oscillator-sample,
//! no table and no transcendental function. Changing ω changes the rotation
//! only, so the phase stays continuous (no click). Float rounding makes the
//! magnitude drift slowly; once per block one Newton step of
//! `x ← x·(3 − |x|²/a²)/2` pulls it back to the amplitude `a`.
//!
//! Two kernels compute the same thing: AVX2+FMA through `std::arch`, chosen at
//! run time by [`Kernel::detect`], and a portable one in plain Rust that the
//! compiler vectorises with whatever the target has. They differ only in FMA
//! rounding. A bank is laid out as structure-of-arrays padded to 8 lanes;
//! padding and ballast oscillators (see `work_factor`) have amplitude 0, cost
//! the same as real ones and add exact zeros.
//!
//! The bank owns phasors and rotations; it never allocates after [`Bank::new`]
//! and never decides frequencies (that is the object's job).

use crate::BLOCK;

/// Oscillators per SIMD vector (AVX2: 8 × f32).
pub const LANES: usize = 8;

/// Which kernel renders banks. Only [`Kernel::detect`] and
/// [`Kernel::avx2_fma`] can choose AVX2, after checking the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel(Isa);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
}

impl Kernel {
    /// The fastest kernel this CPU runs.
    pub fn detect() -> Kernel {
        Kernel::avx2_fma().unwrap_or(Kernel::portable())
    }

    /// The plain-Rust kernel, on every CPU.
    pub fn portable() -> Kernel {
        Kernel(Isa::Portable)
    }

    /// The AVX2+FMA kernel, if this CPU has both.
    pub fn avx2_fma() -> Option<Kernel> {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return Some(Kernel(Isa::Avx2Fma));
        }
        None
    }

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self.0 {
            Isa::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => "avx2+fma",
        }
    }
}

/// A bank of phasor oscillators.
#[derive(Clone, Debug)]
pub struct Bank {
    re: Vec<f32>,
    im: Vec<f32>,
    cos: Vec<f32>,
    sin: Vec<f32>,
    /// 1/amplitude², the renormalisation target; 0 for silent oscillators.
    inv_power: Vec<f32>,
}

impl Bank {
    /// A bank of at least `oscillators` silent oscillators (rounded up to a
    /// whole number of vectors).
    pub fn new(oscillators: usize) -> Bank {
        let len = oscillators.div_ceil(LANES).max(1) * LANES;
        Bank {
            re: vec![0.0; len],
            im: vec![0.0; len],
            cos: vec![1.0; len],
            sin: vec![0.0; len],
            inv_power: vec![0.0; len],
        }
    }

    /// Oscillators in the bank, padding included: what a block costs.
    pub fn len(&self) -> usize {
        self.re.len()
    }

    /// Whether the bank has no oscillator (never: it has at least one vector).
    pub fn is_empty(&self) -> bool {
        self.re.is_empty()
    }

    /// Starts oscillator `i` at `phase` radians with `amplitude`, turning by
    /// `omega` radians per sample.
    pub fn start(&mut self, i: usize, amplitude: f32, phase: f64, omega: f64) {
        let a = f64::from(amplitude);
        self.re[i] = (a * phase.cos()) as f32;
        self.im[i] = (a * phase.sin()) as f32;
        self.inv_power[i] = if amplitude > 0.0 {
            1.0 / (amplitude * amplitude)
        } else {
            0.0
        };
        self.set_rotation(i, omega.cos(), omega.sin());
    }

    /// Sets oscillator `i`'s rotation per sample to `(cos ω, sin ω)`; its
    /// phase carries on from where it is.
    pub fn set_rotation(&mut self, i: usize, cos: f64, sin: f64) {
        self.cos[i] = cos as f32;
        self.sin[i] = sin as f32;
    }

    /// The instantaneous value (imaginary part) of oscillator `i`.
    pub fn value(&self, i: usize) -> f32 {
        self.im[i]
    }

    /// Renders one block: `out[f]` is the sum of every oscillator at frame `f`.
    pub fn render(&mut self, kernel: Kernel, out: &mut [f32; BLOCK]) {
        match kernel.0 {
            Isa::Portable => portable::render(self, out),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a `Kernel` holds `Avx2Fma` only when `Kernel::avx2_fma`
            // found both the `avx2` and `fma` CPU features at run time.
            Isa::Avx2Fma => unsafe { avx2::render(self, out) },
        }
    }
}

/// Horizontal sum of 8 lanes in the order the AVX2 kernel uses, so both
/// kernels round alike.
fn sum_lanes(lanes: [f32; LANES]) -> f32 {
    let quad = [
        lanes[0] + lanes[4],
        lanes[1] + lanes[5],
        lanes[2] + lanes[6],
        lanes[3] + lanes[7],
    ];
    let pair = [quad[0] + quad[2], quad[1] + quad[3]];
    pair[0] + pair[1]
}

mod portable {
    use super::{sum_lanes, Bank, LANES};
    use crate::BLOCK;

    pub(super) fn render(bank: &mut Bank, out: &mut [f32; BLOCK]) {
        let Bank {
            re,
            im,
            cos,
            sin,
            inv_power,
        } = bank;
        for sample in out.iter_mut() {
            // Two accumulators, alternating by vector, as in the AVX2 kernel.
            let mut acc = [[0.0f32; LANES]; 2];
            for (v, (((re, im), cos), sin)) in re
                .chunks_exact_mut(LANES)
                .zip(im.chunks_exact_mut(LANES))
                .zip(cos.chunks_exact(LANES))
                .zip(sin.chunks_exact(LANES))
                .enumerate()
            {
                for l in 0..LANES {
                    let (r, i) = (re[l], im[l]);
                    acc[v & 1][l] += i;
                    re[l] = r * cos[l] - i * sin[l];
                    im[l] = r * sin[l] + i * cos[l];
                }
            }
            let mut total = [0.0f32; LANES];
            for l in 0..LANES {
                total[l] = acc[0][l] + acc[1][l];
            }
            *sample = sum_lanes(total);
        }
        for ((re, im), inv_power) in re.iter_mut().zip(im.iter_mut()).zip(inv_power.iter()) {
            let k = 1.5 - 0.5 * (*re * *re + *im * *im) * inv_power;
            *re *= k;
            *im *= k;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Bank, LANES};
    use crate::BLOCK;
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn render(bank: &mut Bank, out: &mut [f32; BLOCK]) {
        let vectors = bank.re.len() / LANES;
        let re = bank.re.as_mut_ptr();
        let im = bank.im.as_mut_ptr();
        let cos = bank.cos.as_ptr();
        let sin = bank.sin.as_ptr();
        for sample in out.iter_mut() {
            let mut acc = [_mm256_setzero_ps(); 2];
            for v in 0..vectors {
                let at = v * LANES;
                // SAFETY: avx2 and fma are enabled on this function; `at + 8`
                // ≤ len for every array of the bank (all have the same length,
                // a multiple of LANES), and unaligned loads/stores are used.
                unsafe {
                    let r = _mm256_loadu_ps(re.add(at));
                    let i = _mm256_loadu_ps(im.add(at));
                    let c = _mm256_loadu_ps(cos.add(at));
                    let s = _mm256_loadu_ps(sin.add(at));
                    acc[v & 1] = _mm256_add_ps(acc[v & 1], i);
                    _mm256_storeu_ps(re.add(at), _mm256_fmsub_ps(r, c, _mm256_mul_ps(i, s)));
                    _mm256_storeu_ps(im.add(at), _mm256_fmadd_ps(r, s, _mm256_mul_ps(i, c)));
                }
            }
            // SAFETY: avx2 (and so avx, sse) is enabled on this function.
            *sample = unsafe { sum_vector(_mm256_add_ps(acc[0], acc[1])) };
        }
        // SAFETY: same CPU features as above, same bounds.
        unsafe { renormalise(bank) };
    }

    /// Sums 8 lanes as `super::sum_lanes` does.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn sum_vector(v: __m256) -> f32 {
        let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
        _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)))
    }

    /// One Newton step towards each oscillator's amplitude.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn renormalise(bank: &mut Bank) {
        let half = _mm256_set1_ps(0.5);
        let three_halves = _mm256_set1_ps(1.5);
        for at in (0..bank.re.len()).step_by(LANES) {
            // SAFETY: avx2 and fma are enabled on this function; `at + 8` ≤
            // len of every bank array.
            unsafe {
                let r = _mm256_loadu_ps(bank.re.as_ptr().add(at));
                let i = _mm256_loadu_ps(bank.im.as_ptr().add(at));
                let w = _mm256_loadu_ps(bank.inv_power.as_ptr().add(at));
                let power = _mm256_fmadd_ps(r, r, _mm256_mul_ps(i, i));
                let k = _mm256_fnmadd_ps(_mm256_mul_ps(half, power), w, three_halves);
                _mm256_storeu_ps(bank.re.as_mut_ptr().add(at), _mm256_mul_ps(r, k));
                _mm256_storeu_ps(bank.im.as_mut_ptr().add(at), _mm256_mul_ps(i, k));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bank_of(frequencies: &[f64], sample_rate: f64) -> Bank {
        let mut bank = Bank::new(frequencies.len());
        for (i, hz) in frequencies.iter().enumerate() {
            bank.start(
                i,
                0.5,
                0.3 * i as f64,
                std::f64::consts::TAU * hz / sample_rate,
            );
        }
        bank
    }

    #[test]
    fn one_oscillator_is_a_sine() {
        let omega = std::f64::consts::TAU * 441.0 / 44_100.0;
        for kernel in [Kernel::portable(), Kernel::detect()] {
            let mut bank = Bank::new(1);
            bank.start(0, 0.5, 0.0, omega);
            let mut out = [0.0; BLOCK];
            for block in 0..2000 {
                bank.render(kernel, &mut out);
                for (f, &x) in out.iter().enumerate() {
                    let n = (block * BLOCK + f) as f64;
                    let expected = 0.5 * (omega * n).sin();
                    assert!(
                        (f64::from(x) - expected).abs() < 2e-3,
                        "{} at {n}",
                        kernel.name()
                    );
                }
            }
        }
    }

    #[test]
    fn amplitude_holds_over_a_minute() {
        let mut bank = bank_of(&[55.0, 1234.5, 9876.5], 44_100.0);
        let mut out = [0.0; BLOCK];
        for _ in 0..(60 * 44_100 / BLOCK) {
            bank.render(Kernel::detect(), &mut out);
        }
        for i in 0..3 {
            let magnitude = (bank.re[i].powi(2) + bank.im[i].powi(2)).sqrt();
            assert!(
                (magnitude - 0.5).abs() < 1e-5,
                "oscillator {i}: {magnitude}"
            );
        }
    }
}
