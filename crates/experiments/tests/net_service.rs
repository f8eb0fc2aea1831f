//! Seed 000 §4.2 as a scenario: the music application's network through
//! the network service process, with the abusive streamer (a process of
//! its own) pulling and pushing beside it across a shaped LAN. A short run
//! of tessera-scenario's fixtures/net-service.toml answers packages end to
//! end and reports Δt as the service measured it. Asserts behaviour, never
//! speed.

mod common;

use tessera_experiments::harness::net_service::SERVICE_RESPONSE_METRIC;
use tessera_experiments::runner;
use tessera_music::EMULATOR_METRIC;
use tessera_scenario::Scenario;

const SCENARIO: &str = include_str!("../../scenario/tests/fixtures/net-service.toml");

#[test]
fn a_short_run_through_the_service_beside_the_streamer_answers_its_packages() {
    let Some(machine) = tessera_testkit::privileged("the network service process and a LAN") else {
        return;
    };
    std::env::set_var("TESSERA_RUN_DIR", machine.dir());
    let scenario = Scenario::parse(SCENARIO, "net.toml").unwrap();
    let dir = machine.dir().join("report");
    let outcome = runner::run(&scenario, &dir, |_| {}).unwrap();
    common::report_reads_no_notes(&outcome.results, &machine.dir());
    // 1.5 s after the 200 ms warm-up, one answer per package of 725.6 µs.
    let packages = 1_700_000_000 / 725_623 - 200_000_000 / 725_623;
    for configuration in &outcome.results.configurations {
        let notes = configuration.notes.join("; ");
        assert!(!notes.contains("not run"), "{notes}");
        // Answers come back end to end; how many reach the emulator before
        // its window closes is timing (on this VM's noisy host the synth's
        // cell ran late and 1 029–2 066 of 2 067 did: a benchmark's figure).
        let emulator = configuration.metric(EMULATOR_METRIC).expect("tf − t0");
        assert!(
            (1..=packages).contains(&emulator.summary.count),
            "{} answers of {packages} packages: {notes}",
            emulator.summary.count
        );
        // Every answer that reached the emulator went through the service
        // and was timed there; how many packages the service was handed is
        // timing too (a CI run whose host stole 1.1 s of one vCPU in 2 s:
        // the emulator's schedule slipped 173 packages, and 1 769 of
        // 2 067 reached the service, every one answered).
        let dt = configuration
            .metric(SERVICE_RESPONSE_METRIC)
            .expect("Δt at the service");
        assert!(
            dt.summary.count >= emulator.summary.count,
            "{} timed at the service, {} answers: {notes}",
            dt.summary.count,
            emulator.summary.count
        );
        assert!(dt.summary.misses.is_some());
        assert!(notes.contains("abusive streamer: sent"), "{notes}");
        assert!(notes.contains("flow \"streamer\" (bulk)"), "{notes}");
    }
}
