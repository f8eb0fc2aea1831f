//! The desktop subject (issue 22) run, as root: a short version of
//! scenarios/desktop.toml (a few seconds per configuration, same subject,
//! interference and configurations) — with no rights PipeWire's threads
//! stay SCHED_OTHER; under stock RTKit its data thread runs SCHED_RR; under
//! tessera's RTKit its data thread and the clients' run SCHED_DEADLINE with
//! CPU reserved; the counters reach results.json; and the run leaves no
//! user, polkit rule, bus or process behind. Its parsing is tested in
//! tessera-scenario. Asserts behaviour, never speed.

mod common;

use common::built;
use std::path::Path;
use std::time::Duration;
use tessera_experiments::runner;
use tessera_experiments::subject::desktop::{CENSUS_NAMES, CYCLES, RESERVED, TESSERA};
use tessera_measure::ConfigurationResult;
use tessera_scenario::{Rights, Scenario};
use tessera_testkit::within;

/// The run's user and polkit rule (tessera-experiments' own names).
const USER: &str = "tessera-desktop";
const RULE: &str = "/etc/polkit-1/rules.d/49-tessera-tessera-desktop.rules";

/// scenarios/desktop.toml, a few seconds per configuration.
fn short_scenario() -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/desktop.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text
        .replacen("duration = \"30s\"", "duration = \"3s\"", 1)
        .replacen("warmup = \"2s\"", "warmup = \"1s\"", 1);
    Scenario::parse(&text, "desktop.toml").unwrap()
}

/// Processes whose environment names this test's private buses.
fn leftovers() -> Vec<String> {
    let marker = format!("tessera-desktop-{}-", std::process::id());
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if String::from_utf8_lossy(&environ).contains(&marker) {
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            found.push(format!(
                "{} {}",
                entry.file_name().to_string_lossy(),
                comm.trim()
            ));
        }
    }
    if Path::new(RULE).exists() {
        found.push(RULE.into());
    }
    let user = std::process::Command::new("id").arg(USER).output();
    if user.is_ok_and(|o| o.status.success()) {
        found.push(format!("user {USER}"));
    }
    found
}

/// A configuration's census counter: `side` 0 the server, 1 the clients;
/// `policy` 0 DEADLINE, 1 FIFO, 2 RR, 3 OTHER.
fn threads(result: &ConfigurationResult, side: usize, policy: usize) -> u64 {
    let name = CENSUS_NAMES[side][policy];
    result
        .count(name)
        .unwrap_or_else(|| panic!("no {name}: {:?}", result.notes))
}

#[test]
fn a_short_desktop_run_gives_each_configuration_its_rights_and_counts_cycles() {
    let scenario = short_scenario();
    let Some(machine) = tessera_testkit::privileged("desktop") else {
        return;
    };
    if !built("desktop", "tessera-jack-peer") || !built("desktop", "tessera") {
        return;
    }
    std::env::set_var("TESSERA_RUN_DIR", machine.dir());
    let dir = machine.dir().join("report");
    let out = dir.clone();
    let outcome = within(Duration::from_secs(240), move || {
        runner::run(&scenario, &out, |_| {}).map_err(|e| e.to_string())
    })
    .unwrap();
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
    common::report_reads_no_notes(&outcome.results, &machine.dir());
    let results = &outcome.results.configurations;
    for r in results {
        eprintln!("{}: {:?}", r.name, r.notes);
    }
    let by_rights = |rights: Rights| {
        let name = match rights {
            Rights::None => "no RT rights",
            Rights::StockRtkit => "stock RTKit",
            Rights::Tessera { guard: false } => "tessera's RTKit",
            Rights::Tessera { guard: true } => "tessera's RTKit + guard",
        };
        results.iter().find(|r| r.name == name).expect(name)
    };
    for r in results {
        assert!(
            !r.notes.iter().any(|n| n.starts_with("not run")),
            "{}: {:?}",
            r.name,
            r.notes
        );
        assert!(
            r.count(CYCLES).is_some_and(|c| c > 500),
            "{}: {:?}",
            r.name,
            r.notes
        );
    }

    let none = by_rights(Rights::None);
    assert_eq!(none.count(TESSERA), Some(0));
    assert!(
        threads(none, 0, 3) > 0,
        "PipeWire's threads: {:?}",
        none.notes
    );
    for side in 0..2 {
        for policy in 0..3 {
            assert_eq!(
                threads(none, side, policy),
                0,
                "no rights: {:?}",
                none.notes
            );
        }
    }
    let stock = by_rights(Rights::StockRtkit);
    assert!(
        threads(stock, 0, 2) >= 1,
        "rtkit-daemon's SCHED_RR: {:?}",
        stock.notes
    );
    assert_eq!(threads(stock, 0, 0), 0);
    let ours = by_rights(Rights::Tessera { guard: false });
    assert_eq!(ours.count(TESSERA), Some(1));
    assert!(
        threads(ours, 0, 0) >= 1,
        "PipeWire's data thread: {:?}",
        ours.notes
    );
    assert!(
        threads(ours, 1, 0) >= 1,
        "the clients' threads: {:?}",
        ours.notes
    );
    assert!(ours.counter(RESERVED).is_some_and(|c| c.value > 0.0));

    let json = std::fs::read_to_string(dir.join("results.json")).expect("results.json");
    for name in [CYCLES, RESERVED, TESSERA, CENSUS_NAMES[0][0]] {
        assert!(json.contains(name), "{name} not in results.json");
    }
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("README.md");
    assert!(readme.contains("## The desktop"), "{readme}");
    assert!(dir.join("desktop-end-to-end.png").is_file());
}
