//! One Migrator Synthesizer object: the voice of one SLABS pad.
//!
//! An object is a bank of oscillators (100 in the seed) that migrate: each
//! one, in turn, glides to a new frequency drawn from the pad's current
//! distribution, then holds it for an interval of about `migration_seconds`
//! (uniform in 0.5–1.5 times it). The first migrations are spread evenly over
//! the first interval, so migrations are staggered from the start.
//!
//! The pad maps onto the distribution and the level:
//! * y ∈ [0, 1] selects one of the pad's 4 tables (quarters of the pad);
//! * x ∈ [0, 1] sets the gaussian's standard deviation, 0 ..= `max_sigma_cents`;
//! * pressure ∈ [0, 1] sets the amplitude; it is smoothed (one pole, 10 ms)
//!   and ramped linearly across each block, so pressing, releasing and
//!   pressing harder never clicks, and the object is exactly silent at 0.
//!
//! Table and width only affect the frequencies drawn at later migrations (and
//! at the object's first activation, which draws them all): a pad move is
//! heard as the oscillators migrate, which is the instrument's character.
//! Glides are linear in frequency over `glide_seconds`, stepped once per
//! block by rotating the rotation, so they cost no transcendental function.
//!
//! An object's clock runs only while it is processed: a released pad's
//! object is frozen, costs nothing, and resumes where it was.
//!
//! The object owns its oscillators, tables, random stream and level; it never
//! allocates after [`Object::new`].

use crate::oscillator::{Bank, Kernel};
use crate::rng::Rng;
use crate::table::{PitchTable, TABLES_PER_PAD};
use crate::BLOCK;
use std::f64::consts::TAU;

/// Below this level a released object is taken as silent and stops.
const SILENCE: f32 = 1e-5;
/// Time constant of the pressure smoothing.
const PRESSURE_SMOOTHING_SECONDS: f64 = 0.010;
/// Loudness of one object at full pressure (RMS of its oscillator sum), low
/// enough that 4 objects on one channel rarely exceed full scale.
const OBJECT_RMS: f64 = 0.1;

/// Settings every object shares, derived from the synth's configuration.
#[derive(Clone, Debug)]
pub struct ObjectParams {
    pub sample_rate: f64,
    /// Mean blocks between two migrations of one oscillator.
    pub interval_blocks: f64,
    /// Blocks a glide lasts (at least 1).
    pub glide_blocks: u32,
    /// Gaussian width at x = 1, in cents.
    pub max_sigma_cents: f32,
    /// Per-block factor of the pressure smoothing.
    pub smoothing: f32,
}

impl ObjectParams {
    pub fn new(
        sample_rate: f64,
        migration_seconds: f64,
        glide_seconds: f64,
        max_sigma_cents: f32,
    ) -> ObjectParams {
        let blocks_per_second = sample_rate / BLOCK as f64;
        let block_seconds = BLOCK as f64 / sample_rate;
        ObjectParams {
            sample_rate,
            interval_blocks: (migration_seconds * blocks_per_second).max(1.0),
            glide_blocks: ((glide_seconds * blocks_per_second).round() as u32).max(1),
            max_sigma_cents,
            smoothing: (1.0 - (-block_seconds / PRESSURE_SMOOTHING_SECONDS).exp()) as f32,
        }
    }
}

/// A glide in progress: the rotation is turned by `step` each block.
#[derive(Clone, Copy, Debug, Default)]
struct Glide {
    /// Current rotation (cos ω, sin ω), in f64 so 1000 steps do not drift.
    rotation: (f64, f64),
    /// Rotation of the rotation per block: (cos δ, sin δ).
    step: (f64, f64),
    target_hz: f64,
    blocks_left: u32,
}

/// One pad's voice.
#[derive(Clone, Debug)]
pub struct Object {
    bank: Bank,
    oscillators: usize,
    rng: Rng,
    tables: [PitchTable; TABLES_PER_PAD],
    frequency: Vec<f64>,
    glide: Vec<Glide>,
    /// Oscillators now gliding, at most `oscillators` (capacity reserved).
    gliding: Vec<u16>,
    due: Vec<u64>,
    next_due: u64,
    clock: u64,
    started: bool,
    gain: f32,
    sum: [f32; BLOCK],
}

impl Object {
    /// Object `pad` with `oscillators` voices and `ballast` further silent
    /// oscillators that only add work (see `SynthConfig::work_factor`).
    pub fn new(pad: usize, oscillators: usize, ballast: usize, seed: u64) -> Object {
        assert!(
            oscillators <= usize::from(u16::MAX),
            "oscillator index must fit u16"
        );
        Object {
            bank: Bank::new(oscillators + ballast),
            oscillators,
            rng: Rng::new(seed, pad as u64),
            tables: std::array::from_fn(|t| PitchTable::preset(pad, t)),
            frequency: vec![0.0; oscillators],
            glide: vec![Glide::default(); oscillators],
            gliding: Vec::with_capacity(oscillators),
            due: vec![0; oscillators],
            next_due: 0,
            clock: 0,
            started: false,
            gain: 0.0,
            sum: [0.0; BLOCK],
        }
    }

    /// The pad's table `index` (0..4), to read or replace.
    pub fn table_mut(&mut self, index: usize) -> &mut PitchTable {
        &mut self.tables[index]
    }

    /// The pad's table `index` (0..4).
    pub fn table(&self, index: usize) -> &PitchTable {
        &self.tables[index]
    }

    /// Current (or glide-target) frequency of each oscillator, Hz.
    pub fn frequencies(&self) -> &[f64] {
        &self.frequency
    }

    /// Oscillators in the bank, padding and ballast included.
    pub fn cost(&self) -> usize {
        self.bank.len()
    }

    /// The smoothed pressure gain reached at the end of the last block.
    pub fn gain(&self) -> f32 {
        self.gain
    }

    /// Blocks this object has rendered.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// Renders one block at `pressure`, with the table and width given by
    /// `(x, y)`, into `out` (overwritten). Real-time safe.
    pub fn render(
        &mut self,
        x: f32,
        y: f32,
        pressure: f32,
        params: &ObjectParams,
        kernel: Kernel,
        out: &mut [f32; BLOCK],
    ) {
        let table = table_index(y);
        let sigma = width_cents(x, params.max_sigma_cents);
        if !self.started {
            self.start(table, sigma, params);
        }
        if self.clock >= self.next_due {
            self.migrate_due(table, sigma, params);
        }
        self.advance_glides(params);
        self.bank.render(kernel, &mut self.sum);
        self.apply_gain(target_gain(pressure), params.smoothing, out);
        self.clock += 1;
    }

    /// First activation: every oscillator draws a frequency and a random
    /// phase (so the sum starts without a coherent peak), and the first
    /// migrations are spread evenly over one interval.
    fn start(&mut self, table: usize, sigma: f32, params: &ObjectParams) {
        let amplitude = (OBJECT_RMS * (2.0 / self.oscillators.max(1) as f64).sqrt()) as f32;
        for i in 0..self.oscillators {
            let hz = self.draw(table, sigma, params);
            let phase = TAU * self.rng.uniform();
            self.bank.start(i, amplitude, phase, omega(hz, params));
            self.frequency[i] = hz;
            let spread = (i as f64 + self.rng.uniform()) / self.oscillators as f64;
            self.due[i] = self.clock + (spread * params.interval_blocks) as u64;
        }
        self.next_due = self.due.iter().copied().min().unwrap_or(u64::MAX);
        self.started = true;
    }

    /// Starts the glides of the oscillators whose time has come.
    fn migrate_due(&mut self, table: usize, sigma: f32, params: &ObjectParams) {
        for i in 0..self.oscillators {
            if self.due[i] > self.clock {
                continue;
            }
            let target = self.draw(table, sigma, params);
            self.start_glide(i, target, params);
            let interval = params.interval_blocks * (0.5 + self.rng.uniform());
            self.due[i] = self.clock + (interval as u64).max(1);
        }
        self.next_due = self.due.iter().copied().min().unwrap_or(u64::MAX);
    }

    fn start_glide(&mut self, i: usize, target_hz: f64, params: &ObjectParams) {
        let from = omega(self.frequency[i], params);
        let delta = (omega(target_hz, params) - from) / f64::from(params.glide_blocks);
        self.glide[i] = Glide {
            rotation: (from.cos(), from.sin()),
            step: (delta.cos(), delta.sin()),
            target_hz,
            blocks_left: params.glide_blocks,
        };
        self.frequency[i] = target_hz;
        // An oscillator migrating again mid-glide is already listed.
        if !self.gliding.contains(&(i as u16)) {
            self.gliding.push(i as u16);
        }
    }

    /// Moves every gliding oscillator one block along; the last step lands
    /// exactly on the target's rotation, so rounding never accumulates.
    fn advance_glides(&mut self, params: &ObjectParams) {
        let mut k = 0;
        while k < self.gliding.len() {
            let i = usize::from(self.gliding[k]);
            let glide = &mut self.glide[i];
            glide.blocks_left -= 1;
            if glide.blocks_left == 0 {
                let w = omega(glide.target_hz, params);
                self.bank.set_rotation(i, w.cos(), w.sin());
                self.gliding.swap_remove(k);
                continue;
            }
            let (c, s) = glide.rotation;
            let (dc, ds) = glide.step;
            glide.rotation = (c * dc - s * ds, c * ds + s * dc);
            self.bank
                .set_rotation(i, glide.rotation.0, glide.rotation.1);
            k += 1;
        }
    }

    fn draw(&mut self, table: usize, sigma: f32, params: &ObjectParams) -> f64 {
        let hz = self.tables[table].sample(sigma, &mut self.rng);
        // A wide gaussian can reach past the audible band or Nyquist.
        hz.clamp(20.0, 0.45 * params.sample_rate)
    }

    /// Smooths the level towards `target` and writes the ramped block.
    fn apply_gain(&mut self, target: f32, smoothing: f32, out: &mut [f32; BLOCK]) {
        let from = self.gain;
        let mut to = from + (target - from) * smoothing;
        if target == 0.0 && to < SILENCE {
            to = 0.0;
        }
        let step = (to - from) / BLOCK as f32;
        for (f, (o, s)) in out.iter_mut().zip(self.sum.iter()).enumerate() {
            *o = s * (from + step * (f + 1) as f32);
        }
        self.gain = to;
    }
}

/// The table a pad's y selects: quarters of the pad.
pub fn table_index(y: f32) -> usize {
    let y = if y.is_finite() {
        y.clamp(0.0, 1.0)
    } else {
        0.0
    };
    ((y * TABLES_PER_PAD as f32) as usize).min(TABLES_PER_PAD - 1)
}

/// The gaussian width a pad's x sets, in cents.
pub fn width_cents(x: f32, max_sigma_cents: f32) -> f32 {
    let x = if x.is_finite() {
        x.clamp(0.0, 1.0)
    } else {
        0.0
    };
    x * max_sigma_cents
}

/// The level a pressure asks for: linear, 0 when not pressed or garbage.
pub fn target_gain(pressure: f32) -> f32 {
    if pressure.is_finite() {
        pressure.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

fn omega(hz: f64, params: &ObjectParams) -> f64 {
    TAU * hz / params.sample_rate
}
