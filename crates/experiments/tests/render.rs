//! Seed 003's render experiments as a scenario subject: (as root) a tiny
//! run of tessera-scenario's fixtures/render.toml — 2 players × 30 frames
//! on the service with SLAs and on the baseline in a dedicated cell —
//! accounts for every frame (shown and timed, or not sent, or lost) and
//! writes the render section, and leaves no server process, cell or socket
//! behind. Asserts behaviour, never speed.

mod common;

use std::path::Path;
use tessera_experiments::runner;
use tessera_experiments::subject::render::METRIC_PREFIX;
use tessera_scenario::Scenario;

const TINY: &str = include_str!("../../scenario/tests/fixtures/render.toml");

#[test]
fn a_tiny_run_reports_every_frame_and_leaves_nothing_behind() {
    let Some(machine) = tessera_testkit::privileged("render scenario") else {
        return;
    };
    let tessera = tessera_experiments::harness::servers::program_beside_us("tessera");
    if !tessera.is_file() {
        let msg = "SKIPPED render scenario: tessera is not built (cargo build -p tessera-cli)";
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "{msg}");
        eprintln!("{msg}");
        return;
    }
    std::env::set_var("TESSERA_RUN_DIR", machine.dir());
    let scenario = Scenario::parse(TINY, "tiny.toml").unwrap();
    let dir = machine.dir().join("report");
    let outcome = runner::run(&scenario, &dir, |_| {}).unwrap();
    common::report_reads_no_notes(&outcome.results, &machine.dir());
    for c in &outcome.results.configurations {
        let notes = c.notes.join("; ");
        assert!(!notes.contains("not run"), "{notes}");
        let metric = c
            .metric(&format!("{METRIC_PREFIX}cheap"))
            .expect("the group's service times");
        // Every frame is accounted for: shown (and timed), or counted as
        // not sent (every slot in flight: a loaded machine) or lost.
        let count = |what: &str| c.count(&format!("group cheap: {what}")).expect(what);
        let shown = count("shown");
        assert_eq!(count("frames"), 60, "{notes}");
        assert_eq!(shown + count("not sent") + count("lost"), 60, "{notes}");
        // How many are shown on time is the machine's to decide (a frame
        // over its SLA keeps the player's one slot in flight): a test only
        // asks that the service shows frames at all.
        assert!(shown > 0, "frames are shown: {notes}");
        assert_eq!(
            metric.summary.count, shown,
            "every shown frame timed: {notes}"
        );
        assert_eq!(metric.series.len(), 2, "a series per player");
        assert!(notes.contains("the render server stopped"), "{notes}");
        assert!(notes.contains("are gone"), "{notes}");
        assert!(!notes.contains("started after the common start"), "{notes}");
        // Stopped by its PID: nothing serves the socket any more.
        let socket = c
            .notes
            .iter()
            .find_map(|n| n.strip_prefix("server: "))
            .and_then(|n| n.split(" at ").nth(1))
            .and_then(|s| s.split(':').next())
            .expect("the server's socket in the notes");
        assert!(!Path::new(socket).exists(), "{socket} is left");
    }
    let service = outcome.results.configurations[0].notes.join("; ");
    assert_eq!(
        service.matches("SCHED_DEADLINE); server's count").count(),
        2,
        "{service}"
    );
    let baseline = outcome.results.configurations[1].notes.join("; ");
    assert!(baseline.contains("baseline render server"), "{baseline}");
    assert!(
        baseline.contains("best-effort (no probes asked)"),
        "{baseline}"
    );
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(
        readme.contains("## Render service: seed 003 §5"),
        "{readme}"
    );
    assert!(readme.contains("| service | "), "{readme}");
    assert!(dir.join("render-clients-1.png").exists());
    assert!(dir.join("render-cdf-1.svg").exists());
    let left = machine.session().list().unwrap();
    assert!(left.is_empty(), "cells left: {left:?}");
}
