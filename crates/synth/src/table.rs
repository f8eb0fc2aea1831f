//! Microtonal pitch-probability tables and the distribution a migrating
//! oscillator draws its next frequency from.
//!
//! A [`PitchTable`] divides the octave into `bins` equal steps (up to
//! [`MAX_BINS`]: 12 is the chromatic scale, 24 quarter tones, 31, 53, ...)
//! with a weight per step, repeated over `octaves` octaves above `base_hz`.
//! The seed's distribution is that table convolved with a gaussian of given
//! standard deviation (in cents). The convolution of two distributions is the
//! distribution of the sum of independent draws, so [`PitchTable::sample`]
//! draws a table step by inverse CDF (a binary search over the cumulative
//! weights) and adds a gaussian deviate: exact, with no grid to quantise
//! pitches, and allocation-free. [`PitchTable::density`] evaluates the same
//! convolution explicitly, for tests and plots.
//!
//! This module owns tables and sampling only; it never holds oscillator state.

use crate::rng::Rng;

/// Steps per octave a table may have at most.
pub const MAX_BINS: usize = 128;
/// Tables a pad chooses among with its y position.
pub const TABLES_PER_PAD: usize = 4;
/// Octaves a table may span at most.
pub const MAX_OCTAVES: u8 = 8;
const CENTS_PER_OCTAVE: f64 = 1200.0;

/// Why a table was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum TableError {
    /// Between 1 and [`MAX_BINS`] weights are needed.
    BinCount(usize),
    /// Weights must be finite and non-negative, with a positive sum.
    Weights,
    /// The base frequency must lie in 10 Hz ..= 10 kHz and octaves in 1..=8.
    Range,
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableError::BinCount(n) => write!(f, "{n} table bins (1..={MAX_BINS} allowed)"),
            TableError::Weights => f.write_str("weights must be finite, >= 0, and not all zero"),
            TableError::Range => f.write_str("base frequency 10..=10000 Hz, octaves 1..=8"),
        }
    }
}

impl std::error::Error for TableError {}

/// A pitch-probability table: equal steps per octave with weights.
#[derive(Clone, Debug, PartialEq)]
pub struct PitchTable {
    base_hz: f32,
    octaves: u8,
    bins: usize,
    weights: [f32; MAX_BINS],
    /// Cumulative weights over one octave, normalised so the last is 1.
    cumulative: [f32; MAX_BINS],
}

impl PitchTable {
    /// A table of `weights.len()` equal steps per octave.
    pub fn new(base_hz: f32, octaves: u8, weights: &[f32]) -> Result<PitchTable, TableError> {
        let mut table = PitchTable {
            base_hz: 110.0,
            octaves: 1,
            bins: 1,
            weights: [0.0; MAX_BINS],
            cumulative: [1.0; MAX_BINS],
        };
        table.set_range(base_hz, octaves)?;
        table.set_weights(weights)?;
        Ok(table)
    }

    /// Replaces the weights (and so the steps per octave). Real-time safe.
    pub fn set_weights(&mut self, weights: &[f32]) -> Result<(), TableError> {
        if weights.is_empty() || weights.len() > MAX_BINS {
            return Err(TableError::BinCount(weights.len()));
        }
        let valid = weights.iter().all(|w| w.is_finite() && *w >= 0.0);
        let total: f64 = weights.iter().map(|&w| f64::from(w)).sum();
        if !(valid && total > 0.0 && total.is_finite()) {
            return Err(TableError::Weights);
        }
        self.bins = weights.len();
        self.weights = [0.0; MAX_BINS];
        self.weights[..self.bins].copy_from_slice(weights);
        let mut running = 0.0f64;
        for (c, &w) in self.cumulative.iter_mut().zip(weights) {
            running += f64::from(w);
            *c = (running / total) as f32;
        }
        // Rounding must not leave the last step short of 1, or a draw near 1
        // would fall off the end.
        self.cumulative[self.bins - 1] = 1.0;
        Ok(())
    }

    /// Moves the table: its lowest step sounds at `base_hz`, and it spans
    /// `octaves` octaves. Real-time safe.
    pub fn set_range(&mut self, base_hz: f32, octaves: u8) -> Result<(), TableError> {
        if !(10.0..=10_000.0).contains(&base_hz) || !(1..=MAX_OCTAVES).contains(&octaves) {
            return Err(TableError::Range);
        }
        self.base_hz = base_hz;
        self.octaves = octaves;
        Ok(())
    }

    /// Frequency of the lowest step.
    pub fn base_hz(&self) -> f32 {
        self.base_hz
    }

    /// Octaves spanned.
    pub fn octaves(&self) -> u8 {
        self.octaves
    }

    /// Steps per octave.
    pub fn bins(&self) -> usize {
        self.bins
    }

    /// The weights, one per step.
    pub fn weights(&self) -> &[f32] {
        &self.weights[..self.bins]
    }

    /// The pitch of `bin` in `octave`, in cents above `base_hz`.
    pub fn step_cents(&self, octave: u8, bin: usize) -> f64 {
        f64::from(octave) * CENTS_PER_OCTAVE + bin as f64 * CENTS_PER_OCTAVE / self.bins as f64
    }

    /// The frequency `cents` above the base.
    pub fn hz_at(&self, cents: f64) -> f64 {
        f64::from(self.base_hz) * (cents / CENTS_PER_OCTAVE).exp2()
    }

    /// Draws a frequency (Hz) from the table convolved with a gaussian of
    /// `sigma_cents` standard deviation. Every octave is equally likely; within
    /// one, the step is drawn by inverse CDF. With `sigma_cents` 0 the result is
    /// exactly a table step.
    pub fn sample(&self, sigma_cents: f32, rng: &mut Rng) -> f64 {
        let octave = ((rng.uniform() * f64::from(self.octaves)) as u8).min(self.octaves - 1);
        let u = rng.uniform() as f32;
        let bin = self.cumulative[..self.bins]
            .partition_point(|&c| c <= u)
            .min(self.bins - 1);
        let mut cents = self.step_cents(octave, bin);
        if sigma_cents > 0.0 {
            cents += f64::from(sigma_cents) * rng.normal();
        }
        self.hz_at(cents)
    }

    /// Probability density (per cent) of drawing the pitch `cents` above the
    /// base: the explicit convolution of the table with the gaussian.
    /// `sigma_cents` must be positive (at 0 the distribution has no density).
    pub fn density(&self, cents: f64, sigma_cents: f64) -> f64 {
        let norm = 1.0 / (sigma_cents * std::f64::consts::TAU.sqrt());
        let mut density = 0.0;
        for octave in 0..self.octaves {
            for bin in 0..self.bins {
                let p = self.probability(bin) / f64::from(self.octaves);
                let z = (cents - self.step_cents(octave, bin)) / sigma_cents;
                density += p * norm * (-0.5 * z * z).exp();
            }
        }
        density
    }

    /// Probability of `bin` within an octave.
    pub fn probability(&self, bin: usize) -> f64 {
        let below = if bin == 0 {
            0.0
        } else {
            self.cumulative[bin - 1]
        };
        f64::from(self.cumulative[bin] - below)
    }

    /// The 4 tables a pad starts with. Rows of the SLABS (pads 0–7, 8–15, ...)
    /// start an octave apart from 55 Hz; each spans 3 octaves. The tables go
    /// from consonant to microtonal as y rises: a pentatonic in 12 steps, quarter
    /// tones leaning on the semitones, 19 equal steps, and 31 equal steps
    /// weighted towards harmonics 8–14.
    pub fn preset(pad: usize, table: usize) -> PitchTable {
        let base_hz = 55.0 * (((pad / 8) % 4) as f32).exp2();
        let mut weights = [0.0f32; 31];
        let bins = match table % TABLES_PER_PAD {
            0 => {
                for step in [0, 2, 4, 7, 9] {
                    weights[step] = 1.0;
                }
                12
            }
            1 => {
                for (step, w) in weights[..24].iter_mut().enumerate() {
                    *w = if step % 2 == 0 { 1.0 } else { 0.4 };
                }
                24
            }
            2 => {
                weights[..19].fill(1.0);
                19
            }
            _ => {
                for harmonic in 8..=14u32 {
                    let cents = 1200.0 * (f64::from(harmonic) / 8.0).log2();
                    let step = (cents * 31.0 / 1200.0).round() as usize % 31;
                    weights[step] += 1.0;
                }
                31
            }
        };
        PitchTable::new(base_hz, 3, &weights[..bins]).expect("presets are valid tables")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_width_draws_exact_steps_with_table_probabilities() {
        let table = PitchTable::new(100.0, 1, &[1.0, 0.0, 3.0, 0.0]).unwrap();
        let mut rng = Rng::new(3, 0);
        let (mut low, mut high) = (0, 0);
        for _ in 0..4000 {
            let hz = table.sample(0.0, &mut rng);
            if (hz - 100.0).abs() < 1e-9 {
                low += 1;
            } else if (hz - 100.0 * 2f64.sqrt()).abs() < 1e-9 {
                high += 1;
            } else {
                panic!("{hz} Hz is not a step with weight");
            }
        }
        let ratio = f64::from(high) / f64::from(low);
        assert!((2.6..3.4).contains(&ratio), "ratio {ratio}");
    }

    #[test]
    fn samples_follow_the_convolved_density() {
        let table = PitchTable::new(100.0, 2, &[1.0, 0.0, 0.0, 2.0, 0.0, 0.0]).unwrap();
        let sigma = 60.0;
        let mut rng = Rng::new(9, 1);
        let n = 40_000;
        let width = 50.0;
        let mut histogram = [0u32; 60];
        for _ in 0..n {
            let cents = 1200.0 * (table.sample(sigma as f32, &mut rng) / 100.0).log2();
            let cell = ((cents + 300.0) / width).floor();
            if (0.0..60.0).contains(&cell) {
                histogram[cell as usize] += 1;
            }
        }
        for (cell, &count) in histogram.iter().enumerate() {
            let centre = -300.0 + (cell as f64 + 0.5) * width;
            let expected = table.density(centre, sigma) * width * f64::from(n);
            let tolerance = 4.0 * expected.sqrt() + 0.02 * expected + 10.0;
            assert!(
                (f64::from(count) - expected).abs() < tolerance,
                "cell at {centre} cents: {count} drawn, {expected:.0} expected"
            );
        }
    }

    #[test]
    fn bad_tables_are_refused() {
        assert_eq!(PitchTable::new(100.0, 1, &[]), Err(TableError::BinCount(0)));
        assert_eq!(
            PitchTable::new(100.0, 1, &[0.0, 0.0]),
            Err(TableError::Weights)
        );
        assert_eq!(
            PitchTable::new(100.0, 1, &[f32::NAN]),
            Err(TableError::Weights)
        );
        assert_eq!(PitchTable::new(100.0, 0, &[1.0]), Err(TableError::Range));
        assert_eq!(PitchTable::new(5.0, 1, &[1.0]), Err(TableError::Range));
    }

    #[test]
    fn presets_are_valid_for_every_pad() {
        for pad in 0..32 {
            for table in 0..TABLES_PER_PAD {
                let t = PitchTable::preset(pad, table);
                assert!(t.weights().iter().sum::<f32>() > 0.0);
            }
        }
    }
}
