//! Scenario files: the shipped ones parse; malformed and impossible ones are
//! refused with the line and the reason, before anything runs.

use std::path::Path;
use tessera_scenario::{LoadKind, Scenario, Sched, Subject};

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

const GOOD: &str = r#"name = "t"
duration = "2s"
warmup = "500ms"
core = "last"

[subject]
kind = "periodic"
period = "1333us"
work = "400us"

[[cell]]
name = "rt"
policy = "event-triggered"
runtime = "500us"
period = "1333us"

[[interference]]
name = "hog"
kind = "hog"
load = 0.5

[[configuration]]
name = "plain"

[[configuration]]
name = "cell"
subject = "cell:rt"
interference = { hog = "fifo:10" }
"#;

/// `GOOD` with `from` replaced by `to`, refused: (line, reason).
fn refusal(from: &str, to: &str) -> (usize, String) {
    assert!(GOOD.contains(from), "{from:?} not in the base scenario");
    let text = GOOD.replacen(from, to, 1);
    let e = Scenario::parse(&text, "bad.toml").expect_err("should be refused");
    assert!(e.to_string().starts_with("bad.toml:"), "{e}");
    (e.line, e.reason)
}

#[test]
fn a_good_scenario_parses() {
    let s = Scenario::parse(GOOD, "good.toml").unwrap();
    assert_eq!(s.configurations.len(), 2);
    assert_eq!(s.baseline.as_deref(), Some("plain"));
    assert_eq!(s.total().as_millis(), 2500);
    assert!(matches!(s.subject, Subject::Periodic { .. }));
    assert!(matches!(s.interference[0].kind, LoadKind::Hog { threads: 1, load } if load == 0.5));
    assert_eq!(
        s.configurations[0].interference.len(),
        1,
        "all interference, plain, by default"
    );
    assert_eq!(
        s.configurations[1].subject,
        Sched {
            cell: Some("rt".into()),
            fifo: None
        }
    );
    assert_eq!(s.configurations[1].interference[0].1.fifo, Some(10));
}

#[test]
fn malformed_scenarios_name_line_and_reason() {
    let (line, reason) = refusal("duration = \"2s\"", "duration = \"2 parsecs\"");
    assert_eq!(line, 2);
    assert!(reason.contains("unknown unit"), "{reason}");
    let (line, reason) = refusal("kind = \"hog\"", "kind = \"hgo\"");
    assert_eq!(line, 19);
    assert!(reason.contains("unknown interference kind"), "{reason}");
    let (line, reason) = refusal("load = 0.5", "lod = 0.5");
    assert_eq!(line, 20);
    assert!(reason.contains("unknown field `lod`"), "{reason}");
    let (line, reason) = refusal("subject = \"cell:rt\"", "subject = \"cell:nope\"");
    assert_eq!(line, 27);
    assert!(reason.contains("no cell named \"nope\""), "{reason}");
    let (line, reason) = refusal("hog = \"fifo:10\"", "hog = \"fifo:120\"");
    assert_eq!(line, 28);
    assert!(reason.contains("outside 1–99"), "{reason}");
    let (line, _) = refusal("name = \"plain\"", "name = \"plain\"\nbogus = [");
    assert!(line >= 24, "{line}");
}

#[test]
fn impossible_scenarios_are_refused() {
    let (line, reason) = refusal("work = \"400us\"", "work = \"2ms\"");
    assert_eq!(line, 9);
    assert!(reason.contains("shorter than the period"), "{reason}");
    let (line, reason) = refusal("runtime = \"500us\"", "runtime = \"1300us\"");
    assert!((11..=15).contains(&line), "the cell's table: {line}");
    assert!(reason.contains("SCHED_DEADLINE may use"), "{reason}");
    let (_, reason) = refusal("core = \"last\"", "core = 4096");
    assert!(reason.contains("not online"), "{reason}");
    let (_, reason) = refusal("load = 0.5", "load = 1.5");
    assert!(reason.contains("(0, 1]"), "{reason}");
    let (_, reason) = refusal("name = \"cell\"", "name = \"plain\"");
    assert!(reason.contains("named twice"), "{reason}");
}

#[test]
fn reservations_on_one_cpu_must_fit_it() {
    let text = GOOD.replace(
        "[[interference]]",
        "[[cell]]\nname = \"big\"\npolicy = \"event-triggered\"\nruntime = \"8ms\"\nperiod = \"10ms\"\n\n[[interference]]",
    )
    .replace("interference = { hog = \"fifo:10\" }", "interference = { hog = \"cell:big\" }");
    let e = Scenario::parse(&text, "x.toml").unwrap_err();
    assert!(e.reason.contains("add up to"), "{e}");
}

#[test]
fn the_graph_engine_needs_a_slot_per_thread_in_a_reserved_cell() {
    let text = std::fs::read_to_string(repo("scenarios/thesis-4.4.toml"))
        .unwrap()
        .replace("workers = 0", "workers = 1");
    let e = Scenario::parse(&text, "thesis.toml").unwrap_err();
    assert!(e.reason.contains("reservation slots"), "{e}");
}

#[test]
fn shipped_scenarios_parse() {
    for name in [
        "example",
        "thesis-4.4",
        "thesis-4.5-engine",
        "thesis-4.6-engine",
        "probe",
        "seed-003-a",
        "seed-003-b",
        "why-overhead",
    ] {
        let path = repo(&format!("scenarios/{name}.toml"));
        let s = Scenario::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(!s.configurations.is_empty(), "{name}");
    }
    let thesis = Scenario::from_file(&repo("scenarios/thesis-4.4.toml")).unwrap();
    assert_eq!(thesis.configurations.len(), 4);
    assert_eq!(thesis.total().as_secs(), 90);
    let short = thesis.scaled(0.1);
    assert_eq!(short.total().as_secs(), 9);
    assert_eq!(short.interference[1].start.as_secs(), 3);
}
