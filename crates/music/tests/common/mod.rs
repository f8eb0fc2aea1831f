//! What the in-process tests share: a synthesizer light enough for an
//! unoptimised build, and the application's cell when the test runs as root.

use std::time::Duration;

use tessera_music::emulator::held_pads;
use tessera_music::Options;
use tessera_synth::SynthConfig;
use tessera_testkit::Machine;

/// `seconds` of `pads` held, a light synthesizer, no warm-up, no cell.
pub fn light_options(seconds: f64, pads: impl IntoIterator<Item = usize>) -> Options {
    let mut options = Options::new(seconds, held_pads(pads, 0.3, 0.1, 0.8));
    options.synth = SynthConfig {
        oscillators_per_object: 8,
        ..SynthConfig::default()
    };
    options.warmup = Duration::ZERO;
    options.cell = false;
    options
}

/// As root, runs the application in its cell on this test's own broker
/// (the machine is reset when the returned guard drops): a best-effort
/// thread of an unoptimised build, on two cores shared with a spinning
/// sender and a loaded machine, can stall past what a socket buffer holds
/// and lose packets. Without root the test runs best-effort.
pub fn cell_when_root(options: &mut Options, test: &str) -> Option<Machine> {
    if !tessera_sys::caps::is_root() {
        return None;
    }
    let machine = tessera_testkit::privileged(test)?;
    options.cell = true;
    options.broker = Some(machine.paths.clone());
    Some(machine)
}
