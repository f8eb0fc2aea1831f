//! The whole Migrator Synthesizer: objects, voice activation and mixer, one
//! 32-frame block per call.
//!
//! Input per block is one [`PadInput`] per pad. A SLABS package carries 16
//! packets × 2 frames of (x, y, pressure); the caller passes the latest frame
//! of the package (the objects smooth pressure within and across blocks, and x
//! and y only matter at migrations, so interpolating would change nothing
//! audible). Output is 32 frames × 8 channels.
//!
//! Load scaling for experiments: `objects` (≤ 32 pads), `oscillators_per_object`
//! and `work_factor` (≥ 1: each object runs `work_factor` × its oscillators,
//! the extra ones silent, so the load grows and the sound does not).
//!
//! [`Synth::process`] never allocates, locks or blocks; everything is sized in
//! [`Synth::new`]. Controls ([`Control`], e.g. from OSC) are applied with
//! [`Synth::apply`] between blocks, also without allocating.

use crate::mixer::Mixer;
use crate::object::{Object, ObjectParams};
use crate::osc::Control;
use crate::oscillator::Kernel;
use crate::voice::{is_active, Voices};
use crate::{OutputBlock, BLOCK, PADS};
use serde::{Deserialize, Serialize};

/// One pad's state for a block: position and pressure, each in [0, 1].
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PadInput {
    pub x: f32,
    pub y: f32,
    pub pressure: f32,
}

/// What a synthesizer is made of. Every field has the seed's default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SynthConfig {
    /// Random seed: the same seed and input give the same output, bit for bit.
    pub seed: u64,
    /// Objects (pads 0..objects), at most 32.
    pub objects: usize,
    /// Oscillators per object (100 in the seed).
    pub oscillators_per_object: usize,
    /// Hz (the SLABS's 44 100).
    pub sample_rate: f32,
    /// Frames per block; must be 32 (a SLABS package).
    pub block: usize,
    /// Work multiplier ≥ 1: silent ballast oscillators added to each object.
    pub work_factor: f32,
    /// Mean seconds between two migrations of one oscillator.
    pub migration_seconds: f32,
    /// Seconds a migration glides.
    pub glide_seconds: f32,
    /// Gaussian standard deviation at x = 1, in cents.
    pub max_sigma_cents: f32,
}

impl Default for SynthConfig {
    fn default() -> SynthConfig {
        SynthConfig {
            seed: 0,
            objects: PADS,
            oscillators_per_object: 100,
            sample_rate: crate::SLABS_SAMPLE_RATE,
            block: BLOCK,
            work_factor: 1.0,
            migration_seconds: 5.0,
            glide_seconds: 0.3,
            max_sigma_cents: 200.0,
        }
    }
}

/// A configuration the synthesizer cannot run.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl SynthConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let fail = |m: String| Err(ConfigError(m));
        if self.block != BLOCK {
            return fail(format!(
                "block is {} frames; the synth runs {BLOCK}",
                self.block
            ));
        }
        if !(1..=PADS).contains(&self.objects) {
            return fail(format!("objects is {}; 1..={PADS} allowed", self.objects));
        }
        if !(1..=10_000).contains(&self.oscillators_per_object) {
            return fail(format!(
                "oscillators_per_object is {}; 1..=10000 allowed",
                self.oscillators_per_object
            ));
        }
        if !(8_000.0..=384_000.0).contains(&self.sample_rate) {
            return fail(format!(
                "sample_rate {} Hz; 8000..=384000 allowed",
                self.sample_rate
            ));
        }
        if !(1.0..=100.0).contains(&self.work_factor) {
            return fail(format!("work_factor {}; 1..=100 allowed", self.work_factor));
        }
        let positive = [self.migration_seconds, self.glide_seconds];
        if positive.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return fail("migration_seconds and glide_seconds must be > 0".into());
        }
        if !(self.max_sigma_cents.is_finite() && self.max_sigma_cents >= 0.0) {
            return fail("max_sigma_cents must be >= 0".into());
        }
        Ok(())
    }

    /// Ballast oscillators per object that make up the work factor.
    fn ballast(&self) -> usize {
        let total = (self.oscillators_per_object as f64 * f64::from(self.work_factor)).round();
        total as usize - self.oscillators_per_object
    }
}

/// One pad's object with everything it needs to render on its own: the
/// unit a parallel runtime hands to whichever worker is free (seed 000 §3.2:
/// the objects are dynamically assigned to the cell's hardware threads).
/// [`Synth`] is these 32 units, voice activation and the mixer.
#[derive(Clone, Debug)]
pub struct PadVoice {
    pad: usize,
    object: Object,
    params: ObjectParams,
    kernel: Kernel,
}

impl PadVoice {
    /// Renders one block of the pad if its object is active (pressed, or
    /// still fading) and returns true; leaves `out` alone and returns false
    /// otherwise. Real-time safe.
    pub fn render(&mut self, input: PadInput, out: &mut [f32; BLOCK]) -> bool {
        if !is_active(input.pressure, self.object.gain()) {
            return false;
        }
        self.object.render(
            input.x,
            input.y,
            input.pressure,
            &self.params,
            self.kernel,
            out,
        );
        true
    }

    /// Applies what of `control` concerns this pad (its tables, migration,
    /// width; the gain is the mixer's). Real-time safe.
    pub fn apply(&mut self, control: &Control) {
        match *control {
            Control::Gain(_) => {}
            Control::Table {
                pad,
                table,
                ref weights,
                bins,
            } if usize::from(pad) == self.pad => {
                // The parser already refused bad weights; a table that
                // fails here is left as it was.
                let _ = self
                    .object
                    .table_mut(usize::from(table))
                    .set_weights(&weights[..usize::from(bins)]);
            }
            Control::Range {
                pad,
                table,
                base_hz,
                octaves,
            } if usize::from(pad) == self.pad => {
                let _ = self
                    .object
                    .table_mut(usize::from(table))
                    .set_range(base_hz, octaves);
            }
            Control::Table { .. } | Control::Range { .. } => {}
            Control::Migration { seconds } => {
                let p = &self.params;
                self.params = ObjectParams::new(
                    p.sample_rate,
                    f64::from(seconds),
                    f64::from(p.glide_blocks) * BLOCK as f64 / p.sample_rate,
                    p.max_sigma_cents,
                );
            }
            Control::Width { max_cents } => self.params.max_sigma_cents = max_cents,
        }
    }

    /// The pad this voice plays.
    pub fn pad(&self) -> usize {
        self.pad
    }

    pub fn object(&self) -> &Object {
        &self.object
    }
}

/// The Migrator Synthesizer.
pub struct Synth {
    config: SynthConfig,
    pads: Vec<PadVoice>,
    voices: Voices,
    mixer: Mixer,
    kernel: Kernel,
    block: [f32; BLOCK],
}

impl Synth {
    /// A synthesizer on the fastest kernel this CPU has.
    pub fn new(config: SynthConfig) -> Result<Synth, ConfigError> {
        Synth::with_kernel(config, Kernel::detect())
    }

    /// A synthesizer on a chosen kernel (tests compare them).
    pub fn with_kernel(config: SynthConfig, kernel: Kernel) -> Result<Synth, ConfigError> {
        config.validate()?;
        let params = ObjectParams::new(
            f64::from(config.sample_rate),
            f64::from(config.migration_seconds),
            f64::from(config.glide_seconds),
            config.max_sigma_cents,
        );
        let pads = (0..config.objects)
            .map(|pad| PadVoice {
                pad,
                object: Object::new(
                    pad,
                    config.oscillators_per_object,
                    config.ballast(),
                    config.seed,
                ),
                params: params.clone(),
                kernel,
            })
            .collect();
        Ok(Synth {
            config,
            pads,
            voices: Voices::default(),
            mixer: Mixer::default(),
            kernel,
            block: [0.0; BLOCK],
        })
    }

    /// The pads' voices and the mixer, for a runtime that renders the
    /// objects in parallel and mixes them itself (in pad order, with
    /// [`Mixer::add`] for each voice that rendered, then [`Mixer::finish`]:
    /// the same output as [`Synth::process`], bit for bit).
    pub fn into_parts(self) -> (Vec<PadVoice>, Mixer) {
        (self.pads, self.mixer)
    }

    /// Renders one block from the pads' state. Real-time safe.
    pub fn process(&mut self, pads: &[PadInput; PADS], out: &mut OutputBlock) {
        for frame in out.iter_mut() {
            *frame = [0.0; crate::CHANNELS];
        }
        let gains = self.pads.iter().map(|v| v.object.gain());
        // The mixer runs even when every pad is silent, so the master gain
        // keeps moving in time like the parallel graph's mixer node.
        for &index in self.voices.select(pads, gains) {
            let index = usize::from(index);
            self.pads[index].render(pads[index], &mut self.block);
            self.mixer.add(index, &self.block, out);
        }
        self.mixer.finish(out);
    }

    /// Applies a control (from OSC or a scenario). Real-time safe: it only
    /// writes preallocated state. Controls naming a pad beyond `objects` are
    /// ignored, so one address space serves every load scale.
    pub fn apply(&mut self, control: &Control) {
        match *control {
            Control::Gain(gain) => self.mixer.set_gain(gain),
            _ => self.pads.iter_mut().for_each(|v| v.apply(control)),
        }
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &SynthConfig {
        &self.config
    }

    /// The kernel rendering the oscillators.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Object `pad`, to inspect (tests read its frequencies).
    pub fn object(&self, pad: usize) -> &Object {
        &self.pads[pad].object
    }

    /// Object `pad`, to set up before playing (e.g. its tables).
    pub fn object_mut(&mut self, pad: usize) -> &mut Object {
        &mut self.pads[pad].object
    }

    /// The objects the last block processed.
    pub fn active_objects(&self) -> &[u8] {
        self.voices.active()
    }

    /// Object-blocks processed since creation (voice activation at work).
    pub fn objects_processed(&self) -> u64 {
        self.voices.processed()
    }

    /// The master gain being moved to.
    pub fn gain(&self) -> f32 {
        self.mixer.target()
    }

    /// Oscillator-samples one block costs with all objects active, padding
    /// and ballast included: the denominator of "cycles per oscillator-sample".
    pub fn full_load_oscillator_samples(&self) -> usize {
        self.pads.iter().map(|v| v.object.cost()).sum::<usize>() * BLOCK
    }
}
