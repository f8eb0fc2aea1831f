//! The Migrator Synthesizer of seed 000 §3.2, the DSP half of tessera's LAN
//! music application.
//!
//! 32 objects, one per SLABS pad, each a bank of 100 sinusoidal oscillators.
//! Every few seconds each oscillator migrates (glides) to a new frequency
//! drawn from a microtonal pitch-probability table convolved with a gaussian.
//! A pad's y selects one of its 4 tables, x the gaussian's width, pressure the
//! amplitude. Only the objects of pressed pads run; a mixer sums the objects
//! to the SLABS's 8 output channels, one 32-frame block at a time.
//!
//! This crate owns the sound and its control surface (OSC, gestures, WAV). It
//! never touches threads or sockets, and only its benchmark ([`bench`]) reads
//! clocks: the graph engine and the network
//! service call [`Synth::process`] once per SLABS package, and that call never
//! allocates, locks or blocks.
//!
//! Modules, bottom up: [`rng`] (seeded PRNG), [`table`] (pitch distributions),
//! [`oscillator`] (SIMD bank), [`object`] (one pad's voice), [`voice`]
//! (activation), [`mixer`], [`synth`] (the whole), and the edges [`osc`],
//! [`gesture`], [`wav`]; [`bench`] times the DSP; [`faust`] holds the Faust reference voice when
//! Debian's `faust` was installed at build time.

pub mod bench;
pub mod faust;
pub mod gesture;
pub mod mixer;
pub mod object;
pub mod osc;
pub mod oscillator;
pub mod rng;
pub mod synth;
pub mod table;
pub mod voice;
pub mod wav;

pub use gesture::{parse_pads, Gesture, GestureError, GesturePlayer};
pub use mixer::Mixer;
pub use osc::{Control, OscError};
pub use oscillator::Kernel;
pub use synth::{ConfigError, PadInput, PadVoice, Synth, SynthConfig};
pub use table::{PitchTable, TABLES_PER_PAD};

/// Pads on a SLABS, and so Migrator objects at most.
pub const PADS: usize = 32;
/// Output channels of a SLABS (its ADAT outlet).
pub const CHANNELS: usize = 8;
/// Frames per processing block: one SLABS input package (16 UDP packets of 2
/// frames), 0.7256 ms at 44.1 kHz.
pub const BLOCK: usize = 32;
/// The SLABS's sample rate.
pub const SLABS_SAMPLE_RATE: f32 = 44_100.0;
/// The music application's response-time deadline (seed 000 §3.2, Fig. 6):
/// (64 − 2) samples at 44.1 kHz.
pub const DEADLINE_NS: f64 = 1_405_900.0;

/// One output block: 32 frames of 8 channels.
pub type OutputBlock = [[f32; CHANNELS]; BLOCK];
