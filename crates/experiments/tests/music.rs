//! The music application as a scenario subject (seed 000 §4.1): the
//! shipped scenario parses (and its demo variants), and a short run of
//! tessera-scenario's fixtures/music.toml in cells, the SLABS across a veth
//! pair, answers every package and reports Δt. Asserts behaviour, never
//! speed.

mod common;

use tessera_experiments::runner;
use tessera_experiments::subject::music::seed_scenario;
use tessera_music::{EMULATOR_METRIC, RESPONSE_METRIC};
use tessera_scenario::Scenario;

const MUSIC: &str = include_str!("../../scenario/tests/fixtures/music.toml");

#[test]
fn the_shipped_scenario_and_its_demo_variants_parse() {
    let full = seed_scenario(180.0, true).unwrap();
    assert_eq!(full.configurations.len(), 4);
    assert_eq!(full.duration.as_secs(), 180);
    let demo = seed_scenario(14.0, true).unwrap();
    assert!((demo.total().as_secs_f64() - 14.0 * 181.0 / 180.0).abs() < 0.01);
    let best_effort = seed_scenario(14.0, false).unwrap();
    assert_eq!(best_effort.configurations.len(), 2);
    for c in &best_effort.configurations {
        assert!(
            !c.needs_privilege() && c.name.contains("best-effort"),
            "{}",
            c.name
        );
    }
}

#[test]
fn a_short_run_in_cells_across_the_lan_answers_every_package_and_reports_dt() {
    let Some(machine) = tessera_testkit::privileged("music scenario in cells") else {
        return;
    };
    std::env::set_var("TESSERA_RUN_DIR", machine.dir());
    let over_lan = MUSIC.replacen("oscillators = 8", "oscillators = 8\nnetwork = \"lan\"", 1);
    let mut scenario = Scenario::parse(&over_lan, "music.toml").unwrap();
    scenario.configurations.truncate(1);
    let dir = machine.dir().join("report");
    let outcome = runner::run(&scenario, &dir, |_| {}).unwrap();
    common::report_reads_no_notes(&outcome.results, &machine.dir());
    let cells = &outcome.results.configurations[0];
    let notes = cells.notes.join("; ");
    assert!(!notes.contains("not run"), "{notes}");
    let dt = cells.metric(RESPONSE_METRIC).expect("Δt");
    // 1.5 s after the 200 ms warm-up, one Δt per package of 725.6 µs.
    assert_eq!(
        dt.summary.count,
        1_700_000_000 / 725_623 - 200_000_000 / 725_623,
        "{notes}"
    );
    assert!(dt.summary.misses.is_some() && !dt.series.is_empty());
    assert_eq!(
        cells.metric(EMULATOR_METRIC).unwrap().summary.count,
        dt.summary.count
    );
    assert!(
        notes.contains("0 packages the synth cell had no room for"),
        "{notes}"
    );
    assert!(notes.contains("SLABS emulator over LAN"), "{notes}");
    assert!(dir.join("results.json").exists());
}
