//! The music application as a scenario subject (seed 000 §4.1): roles,
//! values by machine size and global cells parse, mistakes are refused with
//! the line and the reason, the shipped scenario parses (and its demo
//! variants), and a short run in cells, the SLABS across a veth pair,
//! answers every package and reports Δt. Asserts behaviour, never speed.

use tessera_experiments::music::{seed_scenario, ROLES};
use tessera_experiments::runner;
use tessera_experiments::scenario::{MusicSubject, Scenario, Subject};
use tessera_music::{EMULATOR_METRIC, RESPONSE_METRIC};
use tessera_policy::{CoreRequest, Placement};

const MUSIC: &str = r#"name = "music"
duration = "1500ms"
warmup = "200ms"

[subject]
kind = "music"
pads = "0-3"
oscillators = 8
workers = { 1 = 0 }

[[cell]]
name = "synth"
policy = "event-triggered"
runtime = "300us"
period = "725.6us"
reclaim = true
count = { 1 = 1 }

[[cell]]
name = "network"
policy = "event-triggered"
runtime = "250us"
period = "725.6us"
reclaim = true

[[cell]]
name = "console"
policy = "event-triggered"
placement = "global"
runtime = "500us"
period = "10ms"

[[configuration]]
name = "cells"
subject = { synth = "cell:synth", network = "cell:network", console = "cell:console" }

[[configuration]]
name = "plain"
subject = "plain"
"#;

fn refusal(from: &str, to: &str) -> (usize, String) {
    assert!(MUSIC.contains(from), "{from:?} not in MUSIC");
    let e = Scenario::parse(&MUSIC.replacen(from, to, 1), "bad.toml").expect_err("refused");
    (e.line, e.reason)
}

#[test]
fn roles_sized_values_and_global_cells_parse() {
    let s = Scenario::parse(MUSIC, "music.toml").unwrap();
    let Subject::Music(MusicSubject {
        pads,
        workers,
        synth,
        pressure,
        lan,
        ..
    }) = &s.subject
    else {
        panic!("a music subject")
    };
    assert_eq!((pads.as_slice(), *workers), (&[0, 1, 2, 3][..], 0));
    assert!(!lan, "loopback unless asked");
    assert_eq!((synth.oscillators_per_object, *pressure), (8, 0.8));
    assert_eq!(
        s.cell("synth").unwrap().request.cores,
        CoreRequest::Count(1)
    );
    assert_eq!(
        s.cell("console").unwrap().request.placement,
        Placement::Global
    );
    let cells = &s.configurations[0];
    assert_eq!(cells.roles.len(), 3);
    assert_eq!(cells.cells(), ["console", "network", "synth"]);
    assert!(cells.needs_privilege());
    assert!(!s.configurations[1].needs_privilege());
}

#[test]
fn mistakes_are_refused_with_line_and_reason() {
    let (line, reason) = refusal("synth = \"cell:synth\"", "mixer = \"cell:synth\"");
    assert_eq!(line, 35);
    assert!(
        reason.contains("unknown role \"mixer\"") && reason.contains(&ROLES.join(", ")),
        "{reason}"
    );
    let (_, reason) = refusal("count = { 1 = 1 }", "count = { 64 = 1 }");
    assert!(reason.contains("no entry for a machine of"), "{reason}");
    let (_, reason) = refusal("count = { 1 = 1 }", "count = { two = 1 }");
    assert!(reason.contains("not a core count"), "{reason}");
    let (line, reason) = refusal("pads = \"0-3\"", "pads = \"0-40\"");
    assert_eq!(line, 7);
    assert!(reason.contains("pads"), "{reason}");
    let (_, reason) = refusal("oscillators = 8", "pressure = 1.5");
    assert!(reason.contains("pressure must be within 0–1"), "{reason}");
    let (_, reason) = refusal("oscillators = 8", "work_factor = 1000.0");
    assert!(reason.contains("the synthesizer: work_factor"), "{reason}");
    let (_, reason) = refusal("placement = \"global\"", "placement = \"everywhere\"");
    assert!(reason.contains("unknown placement"), "{reason}");
    let (_, reason) = refusal("workers = { 1 = 0 }", "workers = 1");
    assert!(reason.contains("reservation slots"), "{reason}");
    let (line, reason) = refusal("oscillators = 8", "network = \"wifi\"");
    assert_eq!(line, 8);
    assert!(
        reason.contains("network must be \"loopback\" or \"lan\""),
        "{reason}"
    );
    let periodic = MUSIC.replacen(
        "kind = \"music\"\npads = \"0-3\"\noscillators = 8\nworkers = { 1 = 0 }",
        "kind = \"periodic\"\nperiod = \"5ms\"\nwork = \"1ms\"",
        1,
    );
    let e = Scenario::parse(&periodic, "bad.toml").expect_err("roles need a music subject");
    assert!(e.reason.contains("only a music subject has roles"), "{e}");
}

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
