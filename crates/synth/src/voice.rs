//! Voice activation (seed 000 §3.2): only the objects of pressed pads run.
//!
//! An object is active while its pad is pressed, and after release until its
//! smoothed level has decayed to exact silence, so a release fades instead of
//! clicking. Inactive objects are not processed at all: their cost is zero and
//! their output is exactly zero.
//!
//! Owns the per-block list of active objects and a count of objects processed;
//! never allocates.

use crate::object::target_gain;
use crate::synth::PadInput;
use crate::PADS;

/// Which objects a block processes.
#[derive(Clone, Debug)]
pub struct Voices {
    active: [u8; PADS],
    count: usize,
    processed: u64,
}

impl Default for Voices {
    fn default() -> Voices {
        Voices {
            active: [0; PADS],
            count: 0,
            processed: 0,
        }
    }
}

impl Voices {
    /// Chooses the objects to process this block, in pad order.
    /// `gains`: each object's smoothed level ([`crate::object::Object::gain`]).
    pub fn select(&mut self, pads: &[PadInput; PADS], gains: impl Iterator<Item = f32>) -> &[u8] {
        self.count = 0;
        for (index, (pad, gain)) in pads.iter().zip(gains).enumerate() {
            if is_active(pad.pressure, gain) {
                self.active[self.count] = index as u8;
                self.count += 1;
            }
        }
        self.processed += self.count as u64;
        &self.active[..self.count]
    }

    /// The objects chosen for the last block.
    pub fn active(&self) -> &[u8] {
        &self.active[..self.count]
    }

    /// Objects processed since the synth was made (one per object per block).
    pub fn processed(&self) -> u64 {
        self.processed
    }
}

/// Whether an object must run: its pad is pressed, or it is still fading.
pub fn is_active(pressure: f32, gain: f32) -> bool {
    target_gain(pressure) > 0.0 || gain > 0.0
}
