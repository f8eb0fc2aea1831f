//! Mixes N audio inputs `in<k>` into one output `out` with per-input gains.

use crate::node::{Node, ProcessContext};
use crate::port::PortSpec;

/// out = Σ gain[k] · in<k>.
pub struct Mixer {
    gains: Vec<f32>,
}

impl Mixer {
    /// One input per gain.
    pub fn new(gains: Vec<f32>) -> Self {
        Mixer { gains }
    }
}

impl Node for Mixer {
    fn ports(&self) -> Vec<PortSpec> {
        (0..self.gains.len())
            .map(|k| PortSpec::audio_in(format!("in{k}")))
            .chain(std::iter::once(PortSpec::audio_out("out")))
            .collect()
    }

    fn process(&mut self, ctx: &mut ProcessContext<'_>) {
        ctx.audio_out(0).fill(0.0);
        for (k, &gain) in self.gains.iter().enumerate() {
            // The input slice lives as long as the cycle, not the borrow of
            // `ctx`, so it can be read while the output is written.
            let input = ctx.audio_in(k);
            for (out, sample) in ctx.audio_out(0).iter_mut().zip(input) {
                *out += gain * sample;
            }
        }
    }
}
