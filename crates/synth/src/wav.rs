//! Renders the synthesizer to an 8-channel WAV file, block by block, driven
//! by a gesture. This is the offline path (`tessera synth render`): it writes
//! a file and may allocate; the real-time path is [`Synth::process`] alone.

use crate::gesture::GesturePlayer;
use crate::synth::Synth;
use crate::{OutputBlock, BLOCK, CHANNELS};
use std::path::Path;

/// Sample format of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleFormat {
    /// 32-bit IEEE float: the synth's output unchanged.
    Float32,
    /// 16-bit PCM, clipped to full scale.
    Int16,
}

/// What a render produced.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderSummary {
    pub frames: u64,
    /// Largest |sample| per channel.
    pub peak: [f32; CHANNELS],
    /// RMS per channel.
    pub rms: [f32; CHANNELS],
    /// Object-blocks processed (voice activation at work).
    pub objects_processed: u64,
}

/// Renders `seconds` of `synth` played by `player` into `path`.
pub fn render(
    synth: &mut Synth,
    player: &mut GesturePlayer,
    seconds: f64,
    path: &Path,
    format: SampleFormat,
) -> Result<RenderSummary, hound::Error> {
    let sample_rate = synth.config().sample_rate;
    let spec = hound::WavSpec {
        channels: CHANNELS as u16,
        sample_rate: sample_rate as u32,
        bits_per_sample: if format == SampleFormat::Float32 {
            32
        } else {
            16
        },
        sample_format: if format == SampleFormat::Float32 {
            hound::SampleFormat::Float
        } else {
            hound::SampleFormat::Int
        },
    };
    let mut writer = hound::WavWriter::create(path, spec)?;
    let blocks = (seconds * f64::from(sample_rate) / BLOCK as f64).ceil() as u64;
    let mut block: OutputBlock = [[0.0; CHANNELS]; BLOCK];
    let mut energy = [0.0f64; CHANNELS];
    let mut peak = [0.0f32; CHANNELS];
    for n in 0..blocks {
        let time = (n * BLOCK as u64) as f64 / f64::from(sample_rate);
        synth.process(player.advance(time), &mut block);
        for frame in &block {
            for (c, &x) in frame.iter().enumerate() {
                peak[c] = peak[c].max(x.abs());
                energy[c] += f64::from(x) * f64::from(x);
                match format {
                    SampleFormat::Float32 => writer.write_sample(x)?,
                    SampleFormat::Int16 => writer.write_sample(to_i16(x))?,
                }
            }
        }
    }
    writer.finalize()?;
    let frames = blocks * BLOCK as u64;
    Ok(RenderSummary {
        frames,
        peak,
        rms: energy.map(|e| (e / frames.max(1) as f64).sqrt() as f32),
        objects_processed: synth.objects_processed(),
    })
}

fn to_i16(x: f32) -> i16 {
    (x.clamp(-1.0, 1.0) * f32::from(i16::MAX)).round() as i16
}
