//! Scenarios with video players and their gui (seed 000 §4.1, Group 2): a
//! short run of tessera-scenario's fixtures/media.toml reports the videos'
//! frame response time and the gui's service time. Its parsing is tested
//! in tessera-scenario. Asserts behaviour, never speed.

use std::time::Duration;
use tessera_experiments::runner;
use tessera_scenario::Scenario;

const MEDIA: &str = include_str!("../../scenario/tests/fixtures/media.toml");

#[test]
fn videos_and_their_gui_run_and_report() {
    let dir = std::env::temp_dir().join(format!("tessera-media-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A broker state of its own: the scenario creates no cells, but the
    // runner connects to a broker all the same.
    std::env::set_var("TESSERA_RUN_DIR", dir.join("run"));
    let scenario = Scenario::parse(MEDIA, "media.toml").unwrap();
    assert_eq!(scenario.total(), Duration::from_millis(800));
    let outcome = runner::run(&scenario, &dir.join("report"), |_| {}).unwrap();
    let [alone, videos] = &outcome.results.configurations[..] else {
        panic!("two configurations");
    };
    assert!(alone.metric("gui service time").is_none());
    assert!(alone.metric("tt frame response time").is_none());
    for name in ["tt frame response time", "et frame response time"] {
        let metric = videos.metric(name).unwrap_or_else(|| panic!("{name}"));
        assert!(metric.summary.count > 0, "{name}: {:?}", videos.notes);
        assert!(metric.summary.misses.is_some());
        assert!(metric.deadline.is_some(), "the period is the deadline");
        // 600 ms measured after the warm-up at 30 (25) fps, whatever the machine.
        assert!(metric.summary.count <= 20, "{name}: warm-up excluded");
    }
    let gui = videos.metric("gui service time").expect("the gui's metric");
    assert!(gui.summary.count > 0 && gui.summary.misses.is_some());
    assert_eq!(gui.series.len(), 2, "a series per client");
    assert!(
        videos
            .notes
            .iter()
            .any(|n| n.starts_with("gui: 1 thread(s)")),
        "{:?}",
        videos.notes
    );
    assert!(std::fs::read_to_string(dir.join("report/README.md"))
        .unwrap()
        .contains("gui service time"));
    std::fs::remove_dir_all(&dir).unwrap();
}
