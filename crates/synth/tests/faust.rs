//! The Faust reference voice plays the same partials as tessera's bank (when
//! `faust` was installed at build time; otherwise there is nothing to test).

use tessera_synth::oscillator::{Bank, Kernel};
use tessera_synth::BLOCK;

#[test]
fn faust_voice_and_bank_play_the_same_partials() {
    let Some(mut faust) = tessera_synth::faust::voice(44_100) else {
        eprintln!("faust was not installed at build time: no Faust voice to compare");
        return;
    };
    let partials = [(220.0f32, 0.2f32), (331.0, 0.1), (1003.5, 0.05)];
    let mut bank = Bank::new(partials.len());
    for (i, &(hz, amplitude)) in partials.iter().enumerate() {
        faust.set_oscillator(i, hz, amplitude);
        // Faust's os.osc starts at phase 0, one sample ahead of the bank.
        let omega = std::f64::consts::TAU * f64::from(hz) / 44_100.0;
        bank.start(i, amplitude, omega, omega);
    }
    faust.set_gain(1.0);
    let (mut a, mut b) = ([0.0; BLOCK], [0.0; BLOCK]);
    let mut worst = 0.0f32;
    for _ in 0..1000 {
        faust.render(&mut a);
        bank.render(Kernel::detect(), &mut b);
        worst = a
            .iter()
            .zip(&b)
            .fold(worst, |m, (x, y)| m.max((x - y).abs()));
    }
    // Faust's 65536-point table without interpolation and its f32 phase
    // accumulator drift slowly against the phasor: close, not equal.
    assert!(worst < 0.02, "Faust and the bank differ by {worst}");
}
