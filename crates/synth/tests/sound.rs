//! The sound, tested: determinism, spectrum, silence, voice activation,
//! click-free migrations and pressure, and the two kernels agreeing.

use rustfft::{num_complex::Complex, FftPlanner};
use tessera_synth::{Kernel, PadInput, Synth, SynthConfig, BLOCK, CHANNELS, PADS};

type Block = [[f32; CHANNELS]; BLOCK];

fn pads(pressed: &[usize], input: PadInput) -> [PadInput; PADS] {
    let mut pads = [PadInput::default(); PADS];
    for &p in pressed {
        pads[p] = input;
    }
    pads
}

fn press(pressure: f32) -> PadInput {
    PadInput {
        x: 0.3,
        y: 0.6,
        pressure,
    }
}

/// Renders `blocks` blocks and returns every channel interleaved.
fn render(synth: &mut Synth, pads: &[PadInput; PADS], blocks: usize) -> Vec<[f32; CHANNELS]> {
    let mut out: Block = [[0.0; CHANNELS]; BLOCK];
    let mut frames = Vec::with_capacity(blocks * BLOCK);
    for _ in 0..blocks {
        synth.process(pads, &mut out);
        frames.extend_from_slice(&out);
    }
    frames
}

fn channel(frames: &[[f32; CHANNELS]], c: usize) -> Vec<f32> {
    frames.iter().map(|f| f[c]).collect()
}

fn config(seed: u64) -> SynthConfig {
    SynthConfig {
        seed,
        migration_seconds: 0.5,
        ..SynthConfig::default()
    }
}

#[test]
fn same_seed_same_output_bit_for_bit() {
    let input = pads(&[0, 7, 13, 31], press(0.8));
    let a = render(&mut Synth::new(config(7)).unwrap(), &input, 500);
    let b = render(&mut Synth::new(config(7)).unwrap(), &input, 500);
    let c = render(&mut Synth::new(config(8)).unwrap(), &input, 500);
    let bits = |f: &[[f32; CHANNELS]]| f.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&b));
    assert_ne!(bits(&a), bits(&c));
}

#[test]
fn spectrum_has_its_energy_at_the_sampled_frequencies() {
    let config = SynthConfig {
        seed: 11,
        objects: 1,
        oscillators_per_object: 6,
        migration_seconds: 1000.0,
        ..SynthConfig::default()
    };
    let mut synth = Synth::new(config).unwrap();
    let table = synth.object_mut(0).table_mut(0);
    table.set_range(220.0, 2).unwrap();
    table
        .set_weights(&[1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
        .unwrap();
    // x = 0: no gaussian, so frequencies are exact table steps; y = 0: table 0.
    let input = pads(
        &[0],
        PadInput {
            x: 0.0,
            y: 0.0,
            pressure: 1.0,
        },
    );
    render(&mut synth, &input, 50); // past the pressure attack
    let n = 44_100;
    let signal = channel(&render(&mut synth, &input, n / BLOCK + 1), 0);
    let frequencies = synth.object(0).frequencies().to_vec();
    let steps: Vec<f64> = [0.0, 300.0, 700.0, 1200.0, 1500.0, 1900.0]
        .iter()
        .map(|c| 220.0 * (c / 1200.0f64).exp2())
        .collect();
    for f in &frequencies {
        assert!(
            steps.iter().any(|s| (s - f).abs() < 1e-9),
            "{f} Hz is not a table step"
        );
    }

    let mut spectrum: Vec<Complex<f32>> = signal[..n]
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let hann = 0.5 - 0.5 * (std::f32::consts::TAU * i as f32 / n as f32).cos();
            Complex::new(x * hann, 0.0)
        })
        .collect();
    FftPlanner::new().plan_fft_forward(n).process(&mut spectrum);
    let power: Vec<f64> = spectrum[..n / 2]
        .iter()
        .map(|c| f64::from(c.norm_sqr()))
        .collect();
    let near = |bin: usize, width: f64| frequencies.iter().any(|f| (bin as f64 - f).abs() <= width);

    let total: f64 = power.iter().sum();
    let at_sampled: f64 = power
        .iter()
        .enumerate()
        .filter(|(b, _)| near(*b, 3.0))
        .map(|(_, p)| p)
        .sum();
    assert!(
        at_sampled / total > 0.999,
        "only {:.4} of the energy at the sampled frequencies",
        at_sampled / total
    );
    let strongest = power.iter().cloned().fold(0.0, f64::max);
    for (bin, &p) in power.iter().enumerate().skip(1).take(n / 2 - 2) {
        let peak = p > power[bin - 1] && p >= power[bin + 1] && p > 0.01 * strongest;
        assert!(
            !peak || near(bin, 1.0),
            "a peak at {bin} Hz, away from {frequencies:?}"
        );
    }
    for f in &frequencies {
        let bin = f.round() as usize;
        let local = power[bin - 1..=bin + 1].iter().cloned().fold(0.0, f64::max);
        assert!(local > 1e-3 * strongest, "nothing at {f} Hz");
    }
}

#[test]
fn released_pads_are_exactly_silent_and_not_processed() {
    let mut synth = Synth::new(config(1)).unwrap();
    let silence = render(&mut synth, &pads(&[], press(0.0)), 200);
    assert!(silence.iter().flatten().all(|&x| x == 0.0));
    assert_eq!(synth.objects_processed(), 0);

    // Pressed, then released: the fade ends in exact zeros and no work.
    let sound = render(&mut synth, &pads(&[4], press(0.9)), 100);
    assert!(channel(&sound, 4).iter().any(|&x| x != 0.0));
    let release = render(&mut synth, &pads(&[], press(0.0)), 300);
    assert!(release[release.len() - 100 * BLOCK..]
        .iter()
        .flatten()
        .all(|&x| x == 0.0));
    assert!(synth.active_objects().is_empty());
}

#[test]
fn only_the_objects_of_pressed_pads_run() {
    let mut synth = Synth::new(config(2)).unwrap();
    let frames = render(&mut synth, &pads(&[1, 9, 18], press(0.7)), 10);
    assert_eq!(synth.objects_processed(), 30);
    assert_eq!(synth.active_objects(), &[1, 9, 18]);
    for pad in 0..PADS {
        let expected = if [1, 9, 18].contains(&pad) { 10 } else { 0 };
        assert_eq!(synth.object(pad).clock(), expected, "object {pad}");
    }
    // Pads 1, 9 and 18 sound on channels 1 and 2 only (pad % 8).
    for c in 0..CHANNELS {
        let sounding = channel(&frames, c).iter().any(|&x| x != 0.0);
        assert_eq!(sounding, c == 1 || c == 2, "channel {c}");
    }
}

/// Largest third difference of a signal: a sum of sinusoids keeps it below
/// Σ aᵢωᵢ³, while any jump of the waveform or its slope shows up whole.
fn max_third_difference(x: &[f32]) -> f32 {
    x.windows(4)
        .map(|w| (w[3] - 3.0 * w[2] + 3.0 * w[1] - w[0]).abs())
        .fold(0.0, f32::max)
}

#[test]
fn migrations_do_not_click() {
    let oscillators = 20;
    let config = SynthConfig {
        seed: 5,
        objects: 1,
        oscillators_per_object: oscillators,
        migration_seconds: 0.4,
        glide_seconds: 0.2,
        ..SynthConfig::default()
    };
    let mut synth = Synth::new(config).unwrap();
    synth
        .object_mut(0)
        .table_mut(1)
        .set_range(220.0, 2)
        .unwrap();
    // y = 0.3: table 1 (quarter tones), x = 0.5: 100 cents of randomness.
    let input = pads(
        &[0],
        PadInput {
            x: 0.5,
            y: 0.3,
            pressure: 1.0,
        },
    );
    render(&mut synth, &input, 100);
    let before = synth.object(0).frequencies().to_vec();
    let signal = channel(&render(&mut synth, &input, 5 * 44_100 / BLOCK), 0);
    let after = synth.object(0).frequencies().to_vec();
    let migrated = before.iter().zip(&after).filter(|(a, b)| a != b).count();
    assert!(
        migrated >= oscillators / 2,
        "only {migrated} oscillators migrated"
    );

    // Bound from the highest frequency a migration can reach (gaussian tails
    // included) and each oscillator's amplitude.
    let amplitude = 0.1 * (2.0 / oscillators as f32).sqrt();
    let omega_max =
        std::f32::consts::TAU * 220.0 * 4.0 * 2f32.powf(4.0 * 100.0 / 1200.0) / 44_100.0;
    let bound = oscillators as f32 * amplitude * omega_max.powi(3);
    let measured = max_third_difference(&signal);
    assert!(
        measured < bound,
        "third difference {measured} over the sinusoidal bound {bound}"
    );

    // The detector sees a click: a phase jump of one oscillator by π/2.
    let mut clicked = signal.clone();
    for x in &mut clicked[20_000..] {
        *x += amplitude;
    }
    assert!(max_third_difference(&clicked) > 10.0 * bound);
}

#[test]
fn pressing_and_releasing_do_not_click() {
    let config = SynthConfig {
        seed: 3,
        objects: 1,
        oscillators_per_object: 20,
        ..SynthConfig::default()
    };
    let mut synth = Synth::new(config).unwrap();
    let mut signal = channel(&render(&mut synth, &pads(&[0], press(1.0)), 200), 0);
    signal.extend(channel(
        &render(&mut synth, &pads(&[0], press(0.2)), 200),
        0,
    ));
    signal.extend(channel(&render(&mut synth, &pads(&[], press(0.0)), 200), 0));
    // Largest step between samples: a held sum of 20 oscillators up to about
    // 450 Hz moves by at most Σ aω per sample; an unsmoothed press would jump by
    // the whole waveform (up to Σ a).
    let amplitude = 0.1 * (2.0f32 / 20.0).sqrt();
    let omega_max = std::f32::consts::TAU * 55.0 * 8.0 * 2f32.powf(0.35) / 44_100.0;
    let bound = 20.0 * amplitude * omega_max * 1.1;
    let step = signal
        .windows(2)
        .map(|w| (w[1] - w[0]).abs())
        .fold(0.0, f32::max);
    assert!(step < bound, "largest step {step} over {bound}");
}

#[test]
fn simd_and_portable_kernels_agree() {
    let Some(simd) = Kernel::avx2_fma() else {
        eprintln!("no AVX2+FMA on this CPU: only the portable kernel exists");
        return;
    };
    let input = pads(&(0..PADS).collect::<Vec<_>>(), press(0.8));
    let mut fast = Synth::with_kernel(config(9), simd).unwrap();
    let mut plain = Synth::with_kernel(config(9), Kernel::portable()).unwrap();
    let a = render(&mut fast, &input, 2 * 44_100 / BLOCK);
    let b = render(&mut plain, &input, 2 * 44_100 / BLOCK);
    let peak = a.iter().flatten().fold(0.0f32, |m, x| m.max(x.abs()));
    let diff = a
        .iter()
        .flatten()
        .zip(b.iter().flatten())
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(peak > 0.1);
    assert!(
        diff < 1e-4 * peak.max(1.0),
        "kernels differ by {diff} (peak {peak})"
    );
}

#[test]
fn work_factor_adds_load_not_sound() {
    let input = pads(&[2, 3], press(0.6));
    let light = render(&mut Synth::new(config(4)).unwrap(), &input, 300);
    let mut heavy_synth = Synth::new(SynthConfig {
        work_factor: 2.5,
        ..config(4)
    })
    .unwrap();
    let heavy = render(&mut heavy_synth, &input, 300);
    assert_eq!(heavy_synth.full_load_oscillator_samples(), 32 * 256 * BLOCK);
    let diff = light
        .iter()
        .flatten()
        .zip(heavy.iter().flatten())
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(diff < 1e-5, "ballast changed the sound by {diff}");
}

#[test]
fn bad_configurations_are_refused() {
    for bad in [
        SynthConfig {
            block: 64,
            ..SynthConfig::default()
        },
        SynthConfig {
            objects: 33,
            ..SynthConfig::default()
        },
        SynthConfig {
            work_factor: 0.5,
            ..SynthConfig::default()
        },
        SynthConfig {
            glide_seconds: 0.0,
            ..SynthConfig::default()
        },
    ] {
        assert!(Synth::new(bad).is_err());
    }
}
