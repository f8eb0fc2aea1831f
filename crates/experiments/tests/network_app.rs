//! The audio-server subject's network application (scenarios/network-app.toml,
//! issue 21): the shipped file parses into two hosts with the three
//! configurations, malformed tables are refused with the line and the
//! reason, and (as root) the file run short makes both hosts' clients
//! receive each other's packets, puts their counters in results.json as
//! metrics, and leaves no namespace and no jackd behind. Asserts
//! behaviour, never speed.

mod common;

use common::{built, within};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tessera_experiments::audio_server::network_app::{NetworkFigures, HOSTS, HOSTS_NOTE};
use tessera_experiments::runner;
use tessera_experiments::scenario::{Scenario, ServerSched, Subject};
use tessera_measure::{ConfigurationResult, RunResults};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn shipped() -> String {
    std::fs::read_to_string(repo("scenarios/network-app.toml")).unwrap()
}

fn installed(program: &str) -> bool {
    tessera_sys::process::installed(program)
}

/// Whether the programs the file needs are here (else the test says so).
fn programs_here(test: &str) -> bool {
    let missing: Vec<&str> = ["jackd", "rt-app", "stress-ng"]
        .into_iter()
        .filter(|p| !installed(p))
        .collect();
    if !missing.is_empty() {
        eprintln!("SKIPPED {test}: not installed: {missing:?}");
    }
    missing.is_empty()
}

/// The shipped file with `from` replaced by `to`, refused: (line, reason).
fn refusal(from: &str, to: &str) -> (usize, String) {
    let text = shipped();
    assert!(text.contains(from), "{from:?} not in the file");
    let e = Scenario::parse(&text.replacen(from, to, 1), "bad.toml").expect_err("refused");
    (e.line, e.reason)
}

#[test]
fn the_shipped_file_is_two_jackd_hosts_in_three_configurations() {
    if !programs_here("network-app parsing") {
        return;
    }
    let s =
        Scenario::from_file(&repo("scenarios/network-app.toml")).unwrap_or_else(|e| panic!("{e}"));
    let Subject::AudioServer(a) = &s.subject else {
        panic!("not an audio server: {:?}", s.subject)
    };
    assert_eq!((a.frames, a.rate, a.priority), (64, 48_000, 70));
    assert_eq!(a.network.map(|n| n.jitter), Some(4));
    assert!(a.clients.is_empty());
    let schedules: Vec<String> = s
        .configurations
        .iter()
        .map(|c| c.server.as_ref().unwrap().describe())
        .collect();
    assert_eq!(schedules, ["fifo:70", "guard:rt-only", "guard"]);
    let Some(ServerSched::Guard(rt)) = &s.configurations[1].server else {
        panic!()
    };
    assert_eq!(rt.args(), ["--rt-only"]);
    let Some(ServerSched::Guard(app)) = &s.configurations[2].server else {
        panic!()
    };
    assert!(app.args().is_empty(), "application shares are the default");
    assert_eq!(s.duration, Duration::from_secs(20));
    assert!(s.description.contains("1/10"), "the goal is stated");
}

#[test]
fn malformed_network_apps_name_line_and_reason() {
    if !programs_here("network-app refusals") {
        return;
    }
    let (line, reason) = refusal("jitter = 4 ", "jitter = 0 ");
    assert!(line > 1, "{line}");
    assert!(reason.contains("1 to 64, not 0"), "{reason}");
    let (_, reason) = refusal("jitter = 4 ", "jitter = 4\ncolour = \"red\" ");
    assert!(reason.contains("unknown field"), "{reason}");
    let (_, reason) = refusal(
        "[subject.network_app]",
        "[[subject.client]]\nload = 0.1\n\n[subject.network_app]",
    );
    assert!(reason.contains("only the network client"), "{reason}");
    let (_, reason) = refusal("frames = 64", "frames = 1024");
    assert!(reason.contains("at most 512 frames"), "{reason}");
    let (_, reason) = refusal(
        "subject = \"guard:rt-only\"",
        "subject = \"guard:rt-only,app-share=10\"",
    );
    assert!(reason.contains("not both"), "{reason}");
    let (_, reason) = refusal("subject = \"guard\"", "subject = \"guard:app-share=0\"");
    assert!(reason.contains("percentage from 1 to 100"), "{reason}");
}

/// The namespaces (`net:[ID]`) and jackd PIDs a configuration's note names.
fn hosts_of(result: &ConfigurationResult) -> Vec<(String, i32)> {
    let note = result
        .notes
        .iter()
        .find_map(|n| n.strip_prefix(HOSTS_NOTE))
        .unwrap_or_else(|| panic!("no hosts note: {:?}", result.notes));
    note.split(", ")
        .map(|host| {
            let words: Vec<&str> = host.split_whitespace().collect();
            let [_, namespace, "jackd", pid] = words[..] else {
                panic!("malformed hosts note {host:?}")
            };
            (namespace.to_string(), pid.parse().unwrap())
        })
        .collect()
}

/// Processes still in `namespace`, and `pid` if it is still a jackd.
fn still_there(namespace: &str, pid: i32) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let link = std::fs::read_link(entry.path().join("ns/net")).unwrap_or_default();
        if link.to_string_lossy() == namespace {
            found.push(format!(
                "process {} in {namespace}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim() == "jackd" {
        found.push(format!("jackd {pid}"));
    }
    found
}

#[test]
fn a_short_run_links_both_hosts_counts_and_cleans_up() {
    let test = "network-app run";
    if !programs_here(test) {
        return;
    }
    let Some(machine) = tessera_testkit::privileged(test) else {
        return;
    };
    if !built(test, "tessera-jack-peer") {
        return;
    }
    let guard_built = built(test, "tessera");
    std::env::set_var("TESSERA_RUN_DIR", machine.dir());
    let full = Scenario::from_file(&repo("scenarios/network-app.toml")).unwrap();
    // 3 s measured of the file's 20 s.
    let scenario = full.scaled(3.0 / 20.0);
    let dir = machine.dir().join("report");
    let out = dir.clone();
    within(Duration::from_secs(180), move || {
        runner::run(&scenario, &out, |_| {}).map_err(|e| e.to_string())
    })
    .unwrap();
    let results = RunResults::load(&dir.join("results.json")).expect("results.json");
    for result in &results.configurations {
        let notes = result.notes.join("; ");
        let not_run = result.notes.iter().any(|n| n.starts_with("not run"));
        let guarded = result.name.starts_with("guard");
        if not_run && guarded && !guard_built {
            continue;
        }
        assert!(!not_run, "{}: {notes}", result.name);
        let figures = NetworkFigures::from_result(result)
            .unwrap_or_else(|| panic!("{}: no counters in results.json: {notes}", result.name));
        assert_eq!(figures.hosts.len(), HOSTS.len(), "{notes}");
        for (host, f) in &figures.hosts {
            assert!(
                f.received > 0,
                "{}: host {host} received nothing: {notes}",
                result.name
            );
            assert!(
                f.cycles > 0,
                "{}: host {host} ran no cycle: {notes}",
                result.name
            );
        }
        assert_eq!(figures.reserved_pct.is_some(), guarded, "{notes}");
        for (namespace, pid) in hosts_of(result) {
            let left = still_there(&namespace, pid);
            assert!(left.is_empty(), "{}: left behind: {left:?}", result.name);
        }
    }
}
