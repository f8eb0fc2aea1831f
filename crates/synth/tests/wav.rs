//! WAV files: headers a player can read, the samples the synth made.

use tessera_synth::wav::{render, SampleFormat};
use tessera_synth::{Gesture, GesturePlayer, PadInput, Synth, SynthConfig};

fn render_to(
    format: SampleFormat,
    name: &str,
) -> (std::path::PathBuf, tessera_synth::wav::RenderSummary) {
    let path =
        std::env::temp_dir().join(format!("tessera-synth-{}-{name}.wav", std::process::id()));
    let mut synth = Synth::new(SynthConfig {
        seed: 7,
        ..SynthConfig::default()
    })
    .unwrap();
    let gesture = Gesture::fixed(
        [0, 5],
        PadInput {
            x: 0.2,
            y: 0.1,
            pressure: 0.8,
        },
    );
    let summary = render(
        &mut synth,
        &mut GesturePlayer::new(gesture),
        0.5,
        &path,
        format,
    )
    .unwrap();
    (path, summary)
}

#[test]
fn float_file_has_a_sane_header_and_the_samples() {
    let (path, summary) = render_to(SampleFormat::Float32, "f32");
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[0..4], b"RIFF");
    assert_eq!(&bytes[8..12], b"WAVE");
    assert_eq!(
        u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize,
        bytes.len() - 8
    );
    let reader = hound::WavReader::open(&path).unwrap();
    let spec = reader.spec();
    assert_eq!(
        (spec.channels, spec.sample_rate, spec.bits_per_sample),
        (8, 44_100, 32)
    );
    assert_eq!(spec.sample_format, hound::SampleFormat::Float);
    assert_eq!(u64::from(reader.duration()), summary.frames);
    assert!(summary.frames >= 22_050);
    assert!(summary.rms[0] > 0.0 && summary.rms[5] > 0.0 && summary.rms[1] == 0.0);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn pcm16_file_has_a_sane_header() {
    let (path, summary) = render_to(SampleFormat::Int16, "i16");
    let reader = hound::WavReader::open(&path).unwrap();
    let spec = reader.spec();
    assert_eq!((spec.channels, spec.bits_per_sample), (8, 16));
    assert_eq!(spec.sample_format, hound::SampleFormat::Int);
    assert_eq!(u64::from(reader.duration()), summary.frames);
    std::fs::remove_file(path).unwrap();
}
