//! The changing-demand subject end to end, as root (about 8 s): a tiny
//! scenario (tessera-scenario's fixtures/changing-demand.toml, whose parsing
//! is tested there) runs its adaptive configuration with a daemon of its
//! own, the daemon grows the video cell's budget when its demand steps up,
//! and the music application's synth cell is in the daemon's monitor with
//! its budget and its use. Asserts on the monitor's series (budgets before
//! and after the step), never on how fast anything happened.

mod common;

use tessera_experiments::runner;
use tessera_experiments::subject::adaptation::{self, cell_metric, MUSIC, TOTAL};
use tessera_scenario::Scenario;

/// 5 % of a core, then 30 % from 3 s on; budgets sized for the mean (about
/// 20 %) and adapted every 250 ms, a pressed cell at least doubled. A light
/// music application beside it (4 pads of 8 oscillators).
const TINY: &str = include_str!("../../scenario/tests/fixtures/changing-demand.toml");

#[test]
fn the_adaptive_configuration_grows_the_stepping_cell() {
    let Some(machine) = tessera_testkit::privileged("changing-demand run") else {
        return;
    };
    if !adaptation::tessera_built() {
        let msg = "SKIPPED changing-demand run: the tessera binary is not built (cargo build -p \
                   tessera-cli)";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{msg}, and CI=true requires it");
        }
        eprintln!("{msg}");
        return;
    }
    // The runner connects to a broker before each configuration (no cells
    // of its own here): keep it off the system's.
    std::env::set_var("TESSERA_RUN_DIR", machine.dir());
    let scenario = Scenario::parse(TINY, "tiny.toml").unwrap();
    let outcome = runner::run(&scenario, &machine.dir().join("report"), |_| {}).unwrap();
    common::report_reads_no_notes(&outcome.results, &machine.dir());
    let result = &outcome.results.configurations[0];
    let notes = result.notes.join("; ");
    assert!(!notes.contains("not run"), "{notes}");
    let video = result
        .metric(&cell_metric("video"))
        .unwrap_or_else(|| panic!("no video series: {notes}"));
    let reserved = &video.series[0];
    assert_eq!(reserved.name, "reserved");
    // The step comes 3 s after the warm-up, 3.5 s after t0.
    let before: Vec<f64> = reserved
        .points
        .iter()
        .filter(|(t, _)| *t < 3.5)
        .map(|p| p.1)
        .collect();
    let last = reserved.points.last().map(|p| p.1).unwrap_or(0.0);
    assert!(!before.is_empty(), "samples before the step: {notes}");
    let held = before.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(
        held < 30.0,
        "sized for the mean, it holds less than the step asks: {reserved:?}"
    );
    assert!(
        last >= 30.0 && last > held,
        "grown to the new demand by the end: {reserved:?}; {notes}"
    );
    assert!(
        notes.contains("adapted by"),
        "the changes are noted: {notes}"
    );
    assert!(result.metric(TOTAL).is_some());
    let music = result
        .metric(&cell_metric(MUSIC))
        .unwrap_or_else(|| panic!("no music series: {notes}"));
    let (reserved, used) = (&music.series[0], &music.series[1]);
    assert!(
        reserved.points.iter().all(|p| p.1 > 0.0),
        "the synth's cell holds a budget in every sample: {reserved:?}"
    );
    assert!(
        used.points.iter().any(|p| p.1 > 0.0),
        "the monitor sees the synth's threads work: {used:?}"
    );
    assert!(
        notes.contains("music: synth cell:") && !notes.contains("music: the application"),
        "the application ran and said how: {notes}"
    );
    let readme = std::fs::read_to_string(machine.dir().join("report/README.md")).unwrap();
    assert!(
        readme.contains("## Misses against CPU reserved"),
        "{readme}"
    );
    let plot = machine.dir().join("report/cell-video-series.png");
    assert!(plot.is_file(), "one plot per cell");
}
