//! The Mixer of seed 000 Fig. 5: sums the objects to the SLABS's 8 output
//! channels and applies the master gain.
//!
//! Mapping: object (pad) `p` goes to channel `p % 8`. The SLABS's 32 pads lie
//! in 4 rows of 8, so each channel carries one column of pads: 4 objects, one
//! per row (and rows start an octave apart, see `PitchTable::preset`). The
//! master gain, set over OSC, is smoothed like pressure: ramped across each
//! block towards its target.
//!
//! Owns the channel map and the master gain; never allocates.

use crate::{OutputBlock, BLOCK, CHANNELS};

/// Per-block factor of the master gain smoothing (about 10 ms at 44.1 kHz).
const GAIN_SMOOTHING: f32 = 0.07;

/// The output channel of object `object`.
pub fn channel_of(object: usize) -> usize {
    object % CHANNELS
}

/// Sums objects into channels.
#[derive(Clone, Debug)]
pub struct Mixer {
    gain: f32,
    target: f32,
}

impl Default for Mixer {
    fn default() -> Mixer {
        Mixer {
            gain: 1.0,
            target: 1.0,
        }
    }
}

impl Mixer {
    /// Sets the master gain the output moves to (clamped to 0..=4).
    pub fn set_gain(&mut self, gain: f32) {
        self.target = if gain.is_finite() {
            gain.clamp(0.0, 4.0)
        } else {
            self.target
        };
    }

    /// The master gain being moved to.
    pub fn target(&self) -> f32 {
        self.target
    }

    /// Adds one object's block to its channel.
    pub fn add(&self, object: usize, block: &[f32; BLOCK], out: &mut OutputBlock) {
        let channel = channel_of(object);
        for (frame, &x) in out.iter_mut().zip(block) {
            frame[channel] += x;
        }
    }

    /// Applies the (ramped) master gain to the summed block.
    pub fn finish(&mut self, out: &mut OutputBlock) {
        let from = self.gain;
        let to = from + (self.target - from) * GAIN_SMOOTHING;
        // Close enough: land exactly, so a steady gain is a plain multiply.
        let to = if (to - self.target).abs() < 1e-6 {
            self.target
        } else {
            to
        };
        let step = (to - from) / BLOCK as f32;
        for (f, frame) in out.iter_mut().enumerate() {
            let g = from + step * (f + 1) as f32;
            for x in frame.iter_mut() {
                *x *= g;
            }
        }
        self.gain = to;
    }
}
