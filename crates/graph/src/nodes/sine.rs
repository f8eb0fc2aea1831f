//! A sine oscillator whose phase continues across cycles (no click at cycle
//! boundaries or buffer size changes).

use std::f64::consts::TAU;

use crate::node::{Node, ProcessContext};
use crate::port::PortSpec;

/// Writes `amplitude · sin(phase)` to its output `out`.
pub struct Sine {
    frequency: f64,
    amplitude: f32,
    /// In cycles (0..1), kept in f64 so long runs do not drift.
    phase: f64,
}

impl Sine {
    pub fn new(frequency: f64, amplitude: f32) -> Self {
        Sine {
            frequency,
            amplitude,
            phase: 0.0,
        }
    }
}

impl Node for Sine {
    fn ports(&self) -> Vec<PortSpec> {
        vec![PortSpec::audio_out("out")]
    }

    fn process(&mut self, ctx: &mut ProcessContext<'_>) {
        let step = self.frequency / f64::from(ctx.sample_rate());
        let (amplitude, mut phase) = (self.amplitude, self.phase);
        for sample in ctx.audio_out(0).iter_mut() {
            *sample = amplitude * (TAU * phase).sin() as f32;
            phase = (phase + step).fract();
        }
        self.phase = phase;
    }
}
