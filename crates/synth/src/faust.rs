//! The seed's tool as a reference: one Migrator object written in Faust
//! (`faust/migrator.dsp`) and compiled to Rust by Debian's `faust` at build
//! time, for the benchmark to compare with tessera's oscillator bank.
//!
//! Present only when `faust` was installed when the crate was built
//! ([`AVAILABLE`]); the generated code lives in OUT_DIR and is never
//! committed. This module supplies the host types that Faust's Rust backend
//! expects (`FaustDsp`, `UI`, `Meta`, `ParamIndex`, `F32`), fills the
//! generated code's `static mut` sine table once in [`FaustVoice::new`] (never
//! on the real-time path) and boxes the DSP. The generated code is Faust's,
//! with its own `unsafe` table reads; tessera's rules apply to this wrapper.

use crate::BLOCK;

/// Whether the Faust voice was compiled in.
pub const AVAILABLE: bool = cfg!(tessera_faust);

#[cfg(tessera_faust)]
pub use compiled::FaustVoice;

/// A voice of oscillators with frequency and amplitude parameters, rendered
/// a block at a time: what the Faust object offers, reachable from crates
/// that cannot see this crate's build configuration.
pub trait ReferenceVoice {
    /// Oscillators in the voice.
    fn oscillators(&self) -> usize;
    /// Sets oscillator `i`'s frequency (Hz) and amplitude.
    fn set_oscillator(&mut self, i: usize, hz: f32, amplitude: f32);
    /// Sets the voice's gain (the pad's pressure).
    fn set_gain(&mut self, gain: f32);
    /// Renders one block.
    fn render(&mut self, out: &mut [f32; BLOCK]);
}

/// The Faust voice at `sample_rate`, if `faust` was installed at build time.
/// Not real-time safe (see [`FaustVoice::new`]).
pub fn voice(sample_rate: i32) -> Option<Box<dyn ReferenceVoice>> {
    #[cfg(tessera_faust)]
    return Some(Box::new(FaustVoice::new(sample_rate)));
    #[cfg(not(tessera_faust))]
    {
        let _ = sample_rate;
        None
    }
}

#[cfg(tessera_faust)]
mod host {
    /// Faust's single-precision sample type.
    pub type F32 = f32;

    /// A parameter's handle, as Faust's Rust backend numbers them.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ParamIndex(pub i32);

    /// Receives the DSP's metadata.
    pub trait Meta {
        fn declare(&mut self, key: &str, value: &str);
    }

    /// Receives the DSP's controls (only those `migrator.dsp` uses).
    pub trait UI<T> {
        fn open_vertical_box(&mut self, label: &str);
        fn close_box(&mut self);
        fn add_horizontal_slider(
            &mut self,
            label: &str,
            param: ParamIndex,
            init: T,
            min: T,
            max: T,
            step: T,
        );
    }

    /// The interface every Faust-generated DSP implements. The generated impl
    /// defines all of it, so all of it is declared, used or not.
    #[allow(dead_code)]
    pub trait FaustDsp {
        type T;
        fn new() -> Self
        where
            Self: Sized;
        fn metadata(&self, m: &mut dyn Meta);
        fn get_sample_rate(&self) -> i32;
        fn get_num_inputs(&self) -> i32;
        fn get_num_outputs(&self) -> i32;
        fn class_init(sample_rate: i32)
        where
            Self: Sized;
        fn instance_reset_params(&mut self);
        fn instance_clear(&mut self);
        fn instance_constants(&mut self, sample_rate: i32);
        fn instance_init(&mut self, sample_rate: i32);
        fn init(&mut self, sample_rate: i32);
        fn build_user_interface(&self, ui_interface: &mut dyn UI<Self::T>);
        fn build_user_interface_static(ui_interface: &mut dyn UI<Self::T>)
        where
            Self: Sized;
        fn get_param(&self, param: ParamIndex) -> Option<Self::T>;
        fn set_param(&mut self, param: ParamIndex, value: Self::T);
        fn compute(&mut self, count: i32, inputs: &[&[Self::T]], outputs: &mut [&mut [Self::T]]);
    }
}

#[cfg(tessera_faust)]
#[allow(warnings, clippy::all)]
mod generated {
    use super::host::*;
    include!(concat!(env!("OUT_DIR"), "/migrator_faust.rs"));
}

#[cfg(tessera_faust)]
mod compiled {
    use super::generated::mydsp;
    use super::host::{FaustDsp, ParamIndex, UI};
    use super::ReferenceVoice;
    use crate::BLOCK;
    use std::sync::Once;

    /// Oscillators in `migrator.dsp`.
    pub const OSCILLATORS: usize = 100;

    static CLASS_INIT: Once = Once::new();

    /// One Faust Migrator object: 100 table oscillators with frequency and
    /// amplitude parameters, and a gain.
    pub struct FaustVoice {
        dsp: Box<mydsp>,
        controls: Controls,
    }

    /// The parameter handles, found by label ("f7", "a7", "gain").
    struct Controls {
        frequency: [ParamIndex; OSCILLATORS],
        amplitude: [ParamIndex; OSCILLATORS],
        gain: ParamIndex,
    }

    impl UI<f32> for Controls {
        fn open_vertical_box(&mut self, _label: &str) {}
        fn close_box(&mut self) {}
        fn add_horizontal_slider(
            &mut self,
            label: &str,
            param: ParamIndex,
            _: f32,
            _: f32,
            _: f32,
            _: f32,
        ) {
            let slot = |prefix: char| {
                let number = label.strip_prefix(prefix)?.parse::<usize>().ok()?;
                (number < OSCILLATORS).then_some(number)
            };
            match (slot('f'), slot('a')) {
                (Some(i), _) => self.frequency[i] = param,
                (_, Some(i)) => self.amplitude[i] = param,
                _ if label == "gain" => self.gain = param,
                _ => {}
            }
        }
    }

    impl FaustVoice {
        /// A voice at `sample_rate`, all oscillators silent. Not real-time
        /// safe (it allocates, and may fill Faust's shared sine table).
        pub fn new(sample_rate: i32) -> FaustVoice {
            CLASS_INIT.call_once(|| mydsp::class_init(sample_rate));
            let mut dsp = Box::new(mydsp::new());
            dsp.instance_init(sample_rate);
            let mut controls = Controls {
                frequency: [ParamIndex::default(); OSCILLATORS],
                amplitude: [ParamIndex::default(); OSCILLATORS],
                gain: ParamIndex::default(),
            };
            dsp.build_user_interface(&mut controls);
            FaustVoice { dsp, controls }
        }
    }

    impl ReferenceVoice for FaustVoice {
        fn oscillators(&self) -> usize {
            OSCILLATORS
        }

        fn set_oscillator(&mut self, i: usize, hz: f32, amplitude: f32) {
            self.dsp.set_param(self.controls.frequency[i], hz);
            self.dsp.set_param(self.controls.amplitude[i], amplitude);
        }

        fn set_gain(&mut self, gain: f32) {
            self.dsp.set_param(self.controls.gain, gain);
        }

        fn render(&mut self, out: &mut [f32; BLOCK]) {
            self.dsp.compute(BLOCK as i32, &[], &mut [&mut out[..]]);
        }
    }
}
