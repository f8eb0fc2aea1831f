//! Seed 003's render experiments as a scenario subject: the shipped
//! Experiment A and B scenarios parse into the configurations they name,
//! and mistakes are refused with the line and the reason.

use std::path::Path;
use std::time::Duration;
use tessera_scenario::{RenderServer, Scenario, Subject};

const TINY: &str = include_str!("fixtures/render.toml");

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// The 1-based line of `TINY` where `text` first appears.
fn line_of(text: &str) -> usize {
    TINY[..TINY.find(text).expect("in the scenario")]
        .matches('\n')
        .count()
        + 1
}

/// `TINY` with `from` replaced by `to`, refused: (line, reason).
fn refusal(from: &str, to: &str) -> (usize, String) {
    assert!(TINY.contains(from), "{from:?} not in the scenario");
    let e = Scenario::parse(&TINY.replacen(from, to, 1), "bad.toml").expect_err("refused");
    (e.line, e.reason)
}

#[test]
fn the_shipped_experiments_parse_into_the_seeds_configurations() {
    let a = Scenario::from_file(&repo("scenarios/seed-003-a.toml")).unwrap();
    let Subject::Render(subject) = &a.subject else {
        panic!("a render subject")
    };
    assert_eq!(a.configurations.len(), 14);
    let groups: Vec<(&str, usize, u128)> = subject
        .groups
        .iter()
        .map(|g| (g.name.as_str(), g.count, g.spin.as_micros()))
        .collect();
    assert_eq!(groups, [("cheap", 8, 0), ("expensive", 8, 1000)]);
    let four = &a.configurations[3];
    let settings = four.render.as_ref().unwrap();
    assert_eq!(settings.cores, Some(vec![1]));
    let players = settings.players(subject);
    assert_eq!((players.len(), players[0].count), (1, 4));
    let baseline = &a.configurations[2];
    assert_eq!(
        baseline.render.as_ref().unwrap().server,
        RenderServer::Baseline
    );
    assert_eq!(baseline.subject.cell.as_deref(), Some("nanox"));
    assert!(
        baseline.render.as_ref().unwrap().players(subject)[0].probes == 0,
        "the baseline makes no agreements: its players do not probe"
    );
    // No `warmup`: the players' probing through the 10 % share, 8 × 25
    // frames of (1 ms + 2 ms), + 2 s to connect.
    assert_eq!(a.warmup, Duration::from_secs(8));

    let b = Scenario::from_file(&repo("scenarios/seed-003-b.toml")).unwrap();
    let Subject::Render(subject) = &b.subject else {
        panic!("a render subject")
    };
    let names: Vec<&str> = b.configurations.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "baseline, 1 core",
            "service, no SLAs, 2 cores",
            "service, SLAs, 2 cores"
        ]
    );
    let no_sla = b.configurations[1].render.as_ref().unwrap();
    assert!(no_sla.players(subject).iter().all(|g| g.probes == 0));
    assert_eq!(no_sla.best_effort, 90.0);
    let sla = b.configurations[2].render.as_ref().unwrap();
    let rates: Vec<(f64, usize)> = sla
        .players(subject)
        .iter()
        .map(|g| (g.fps, g.probes))
        .collect();
    assert_eq!(rates, [(30.0, 25), (60.0, 25)]);
    assert!(b.configurations[2].needs_privilege());
    // The short runs play fewer frames, after the same time to agree.
    let short = b.scaled(0.1);
    assert_eq!(short.warmup, b.warmup);
    let Subject::Render(subject) = short.subject else {
        unreachable!()
    };
    assert_eq!(subject.groups[1].frames, 100);
}

#[test]
fn mistakes_are_refused_with_the_line_and_the_reason() {
    let (line, reason) = refusal("server = \"service\"", "server = \"nano-x\"");
    assert_eq!(line, line_of("server = \"service\""));
    assert!(reason.contains("\"baseline\""), "{reason}");
    let (line, reason) = refusal("probes = 20", "probes = 5");
    assert_eq!(line, line_of("probes = 20"));
    assert!(reason.contains("at least 20"), "{reason}");
    let (_, reason) = refusal("duration = \"1s\"", "duration = \"500ms\"");
    assert!(reason.contains("duration = \"1s\""), "{reason}");
    let (_, reason) = refusal(
        "render = { server = \"service\" }",
        "render = { server = \"service\", groups = [\"dear\"] }",
    );
    assert!(reason.contains("no group named \"dear\""), "{reason}");
    let (_, reason) = refusal(
        "render = { server = \"baseline\", cores = \"1\" }",
        "render = { server = \"baseline\", cores = \"1\", sla = true }",
    );
    assert!(reason.contains("drop `sla`"), "{reason}");
    let (_, reason) = refusal(
        "render = { server = \"service\" }",
        "subject = \"cell:nanox\"\nrender = { server = \"service\" }",
    );
    assert!(reason.contains("makes its own cells"), "{reason}");
    let (_, reason) = refusal("cores = \"1\"", "cores = \"4096\"");
    assert!(reason.contains("not online"), "{reason}");
    let (_, reason) = refusal("best_effort = \"10%\"", "best_effort = \"10\"");
    assert!(reason.contains("percentage"), "{reason}");
    let (_, reason) = refusal("render = { server = \"service\" }", "");
    assert!(reason.contains("needs `render"), "{reason}");
    let (line, reason) = refusal("frames = 30", "frames = 30\nspin = \"40ms\"");
    assert_eq!(line, line_of("frames = 30") + 1);
    assert!(reason.contains("every frame would miss"), "{reason}");
}
