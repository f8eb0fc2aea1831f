//! The DSP benchmark: times the oscillator bank (per kernel), the Faust
//! reference voice and the whole synth, per oscillator-sample in ns and in
//! TSC ticks, and the whole synth's block times against the deadline.
//!
//! The only module of this crate that reads clocks; nothing on the audio
//! path calls it. It returns numbers and never prints.

use crate::oscillator::Bank;
use crate::{ConfigError, Kernel, PadInput, Synth, SynthConfig, BLOCK, CHANNELS, PADS};
use std::hint::black_box;
use std::time::Instant;

/// One timed row: total time and TSC ticks over `work` oscillator-samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub ns: f64,
    pub ticks: f64,
    pub work: f64,
}

impl Timing {
    /// Times `calls` calls of `call` (after a tenth as many to warm up),
    /// each doing `work_per_call` oscillator-samples.
    pub fn measure(work_per_call: f64, calls: usize, mut call: impl FnMut()) -> Timing {
        for _ in 0..calls / 10 {
            call(); // warm caches, branch predictors and clocks
        }
        let (start, t0) = (Instant::now(), ticks());
        for _ in 0..calls {
            call();
        }
        let (t1, elapsed) = (ticks(), start.elapsed());
        Timing {
            ns: elapsed.as_nanos() as f64,
            ticks: (t1 - t0) as f64,
            work: work_per_call * calls as f64,
        }
    }

    pub fn ns_per_sample(&self) -> f64 {
        self.ns / self.work
    }

    pub fn ticks_per_sample(&self) -> f64 {
        self.ticks / self.work
    }

    /// TSC ticks per ns: the reference clock's rate in GHz.
    pub fn tick_ghz(&self) -> f64 {
        self.ticks / self.ns
    }
}

#[cfg(target_arch = "x86_64")]
fn ticks() -> u64 {
    // SAFETY: `rdtsc` exists on every x86_64 CPU (it is in the baseline ISA)
    // and only reads the time-stamp counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn ticks() -> u64 {
    0
}

/// The oscillator frequencies and amplitude of one object, as a bank and
/// Faust both play them.
fn voice_partials(oscillators: usize) -> (Vec<f64>, f32) {
    let frequencies = (0..oscillators)
        .map(|i| 110.0 * (i as f64 * 0.037).exp2())
        .collect();
    (frequencies, 0.1 * (2.0 / oscillators as f32).sqrt())
}

/// One object's bank of `oscillators`, rendered `blocks` times with `kernel`.
pub fn bank(kernel: Kernel, oscillators: usize, blocks: usize) -> Timing {
    let (frequencies, amplitude) = voice_partials(oscillators);
    let mut bank = Bank::new(oscillators);
    for (i, hz) in frequencies.iter().enumerate() {
        bank.start(
            i,
            amplitude,
            i as f64,
            std::f64::consts::TAU * hz / 44_100.0,
        );
    }
    let mut out = [0.0f32; BLOCK];
    Timing::measure((oscillators * BLOCK) as f64, blocks, || {
        bank.render(kernel, &mut out);
        black_box(&out);
    })
}

/// The Faust reference voice rendered `blocks` times; None when `faust` was
/// not installed at build time.
pub fn faust(oscillators: usize, blocks: usize) -> Option<Timing> {
    let mut voice = crate::faust::voice(44_100)?;
    let (frequencies, amplitude) = voice_partials(oscillators.min(voice.oscillators()));
    for (i, hz) in frequencies.iter().enumerate() {
        voice.set_oscillator(i, *hz as f32, amplitude);
    }
    let mut out = [0.0f32; BLOCK];
    Some(Timing::measure(
        (voice.oscillators() * BLOCK) as f64,
        blocks,
        || {
            voice.render(&mut out);
            black_box(&out);
        },
    ))
}

/// The whole synth under load: each measured block's time, sorted, and the
/// row's timing.
#[derive(Debug, Clone, PartialEq)]
pub struct FullLoad {
    /// Block times in ns, ascending.
    pub block_ns: Vec<u64>,
    pub timing: Timing,
}

impl FullLoad {
    pub fn mean_ns(&self) -> f64 {
        self.block_ns.iter().sum::<u64>() as f64 / self.block_ns.len() as f64
    }

    /// The block time at quantile `q` (0 the fastest, 1 the slowest).
    pub fn quantile_ns(&self, q: f64) -> f64 {
        self.block_ns[((self.block_ns.len() - 1) as f64 * q) as usize] as f64
    }
}

/// The whole synth with `pads` pads pressed, `blocks` (at least one) blocks
/// timed.
pub fn full_load(config: SynthConfig, pads: usize, blocks: usize) -> Result<FullLoad, ConfigError> {
    let mut synth = Synth::new(config)?;
    let mut input = [PadInput::default(); PADS];
    for (p, pad) in input.iter_mut().enumerate().take(pads) {
        *pad = PadInput {
            x: 0.5,
            y: (p % 4) as f32 / 4.0,
            pressure: 0.8,
        };
    }
    let mut out = [[0.0f32; CHANNELS]; BLOCK];
    // Oscillator-samples asked for (ballast included, SIMD padding not).
    let work = pads as f64 * object_work(synth.config());
    let mut times = Vec::with_capacity(blocks);
    let timing = Timing::measure(work, blocks, || {
        let start = Instant::now();
        synth.process(&input, &mut out);
        times.push(start.elapsed().as_nanos() as u64);
        black_box(&out);
    });
    // The warm-up blocks are timed too; keep only the measured ones.
    let mut block_ns = times.split_off(times.len() - blocks);
    block_ns.sort_unstable();
    Ok(FullLoad { block_ns, timing })
}

/// Oscillator-samples one object renders per block.
fn object_work(config: &SynthConfig) -> f64 {
    config.oscillators_per_object as f64 * f64::from(config.work_factor) * BLOCK as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_load_keeps_only_the_measured_blocks_in_order() {
        let config = SynthConfig {
            oscillators_per_object: 8,
            ..SynthConfig::default()
        };
        let load = full_load(config, 2, 20).unwrap();
        assert_eq!(load.block_ns.len(), 20);
        assert!(load.block_ns.windows(2).all(|w| w[0] <= w[1]));
        assert!(load.quantile_ns(0.0) <= load.mean_ns() && load.mean_ns() <= load.quantile_ns(1.0));
        assert_eq!(load.timing.work, 2.0 * 8.0 * BLOCK as f64 * 20.0);
    }
}
