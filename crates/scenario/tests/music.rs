//! The music application as a scenario subject (seed 000 §4.1): roles,
//! values by machine size and global cells parse, and mistakes are refused
//! with the line and the reason.

use tessera_policy::{CoreRequest, Placement};
use tessera_scenario::{MusicSubject, Scenario, Subject};

const MUSIC: &str = include_str!("fixtures/music.toml");

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
        reason.contains("unknown role \"mixer\"")
            && reason.contains(&tessera_scenario::MUSIC_ROLES.join(", ")),
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
