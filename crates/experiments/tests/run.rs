//! End to end: the shipped two-configuration example runs (briefly) and
//! leaves results.json and a report with plots of sane size. Asserts what
//! was produced, never how fast anything was.

use std::path::Path;
use std::time::Duration;
use tessera_experiments::runner;
use tessera_measure::RunResults;
use tessera_scenario::Scenario;

#[test]
fn a_two_configuration_scenario_produces_json_and_report() {
    let dir = std::env::temp_dir().join(format!("tessera-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A broker state of its own: the example creates no cells, but the
    // runner connects to a broker all the same.
    std::env::set_var("TESSERA_RUN_DIR", dir.join("run"));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/example.toml");
    let mut scenario = Scenario::from_file(&path).unwrap();
    scenario.duration = Duration::from_millis(600);
    scenario.warmup = Duration::from_millis(200);
    let mut ticks = 0;
    let outcome = runner::run(&scenario, &dir.join("report"), |_| ticks += 1).unwrap();
    assert!(ticks >= 2, "progress was reported");
    let results = RunResults::load(&dir.join("report/results.json")).unwrap();
    assert_eq!(results.configurations.len(), 2);
    assert_eq!(
        results.configurations[1].name,
        outcome.results.configurations[1].name
    );
    let plain = &results.configurations[0];
    let metric = plain.metric("response time").expect("plain always runs");
    let hist = metric.histogram.as_ref().unwrap();
    assert!(hist.count() > 0 && metric.summary.count == hist.count());
    // 600 ms of 1333 µs periods after the warm-up, whatever the machine.
    assert!(
        hist.count() <= 600_000 / 1333 + 2,
        "warm-up excluded: {}",
        hist.count()
    );
    let readme = std::fs::read_to_string(dir.join("report/README.md")).unwrap();
    assert!(readme.contains("| configuration | count |"), "{readme}");
    assert!(readme.contains("Machine"));
    for plot in [
        "response-time-histogram.png",
        "response-time-exceedance.svg",
        "response-time-series.png",
    ] {
        let size = std::fs::metadata(dir.join("report").join(plot))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!((2_000..5_000_000).contains(&size), "{plot}: {size} bytes");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
