//! The application and the emulator on loopback: every package sent is
//! answered (or counted as one the synth's queue had no room for), and Δt
//! and tf − t0 are recorded once per answered package. Behaviour
//! only: nothing here depends on how fast the machine is, beyond keeping up
//! with a light synthesizer.

mod common;

use tessera_music::{run, EMULATOR_METRIC, RESPONSE_METRIC, SERVICE_METRIC};

#[test]
fn every_package_is_answered_and_measured_once() {
    let out = std::env::temp_dir().join(format!("tessera-music-test-{}", std::process::id()));
    let mut options = common::light_options(2.0, 0..2);
    let _machine = common::cell_when_root(&mut options, "music on loopback");
    options.out_dir = Some(out.clone());
    let outcome = run(&options).unwrap();
    let (app, emulator) = (&outcome.app, &outcome.emulator);
    let packages = emulator.packages_sent;
    assert_eq!(packages, 2_000_000_000 / 725_623);
    assert_eq!(emulator.packets_sent, packages * 16);
    assert_eq!(emulator.send_errors, 0);
    let context = format!(
        "{:?}; cycle CPU p50 {} µs; {} cycles, {} malformed, slipped {}",
        outcome.notes,
        app.cycle_cpu.quantile(0.5) / 1000,
        app.cycles,
        app.malformed_packages,
        emulator.slipped_packages
    );
    let answered = common::assert_answered_or_counted(&outcome, &context);
    assert_eq!(emulator.unexpected, 0);
    assert_eq!(app.cycles, answered);
    assert_eq!(app.malformed_packages, 0);
    assert_eq!(app.response.count(), answered, "one Δt per package");
    assert_eq!(
        emulator.response.count(),
        answered,
        "one tf − t0 per package"
    );
    let results = &outcome.results.configurations[0];
    let metric = |name: &str| results.metrics.iter().find(|m| m.name == name).unwrap();
    assert_eq!(metric(RESPONSE_METRIC).summary.count, answered);
    assert_eq!(metric(EMULATOR_METRIC).summary.count, answered);
    assert_eq!(metric(SERVICE_METRIC).summary.count, answered);
    assert!(
        app.network
            .timings
            .iter()
            .all(|t| t.t1_ns < t.complete_ns && t.complete_ns <= t.t2_ns),
        "each package completes after its first packet (16 packets 45 µs apart) and before its answer"
    );
    assert!(out.join("results.json").exists() && out.join("README.md").exists());
    let _ = std::fs::remove_dir_all(out);
}
