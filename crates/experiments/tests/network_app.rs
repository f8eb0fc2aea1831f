//! The audio-server subject's network application (scenarios/network-app.toml,
//! issue 21): (as root) the file run short makes both hosts' clients
//! receive each other's packets, puts their counters in results.json as
//! metrics, traces each host's graph as a chain of its own for `--why`,
//! and leaves no namespace and no jackd behind. Asserts behaviour, never
//! speed.

mod common;

use common::built;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tessera_experiments::runner::{self, Options};
use tessera_experiments::subject::audio_server::network_app::{
    metric_name, NetworkFigures, HOSTS, HOSTS_NOTE, XRUNS,
};
use tessera_measure::{ConfigurationResult, RunResults};
use tessera_scenario::Scenario;
use tessera_testkit::within;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
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
    let full = match Scenario::from_file(&repo("scenarios/network-app.toml")) {
        Err(e) if e.reason.contains("is not installed") => {
            eprintln!("SKIPPED {test}: {e}");
            return;
        }
        parsed => parsed.unwrap(),
    };
    let Some(machine) = tessera_testkit::privileged(test) else {
        return;
    };
    if !built(test, "tessera-jack-peer") {
        return;
    }
    let guard_built = built(test, "tessera");
    std::env::set_var("TESSERA_RUN_DIR", machine.dir());
    // 3 s measured of the file's 20 s.
    let scenario = full.scaled(3.0 / 20.0);
    let dir = machine.dir().join("report");
    let out = dir.clone();
    within(Duration::from_secs(180), move || {
        runner::run_with(&scenario, &out, Options { why: true }, |_| {}).map_err(|e| e.to_string())
    })
    .unwrap();
    let results = RunResults::load(&dir.join("results.json")).expect("results.json");
    common::report_reads_no_notes(&results, &machine.dir());
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
        let why = result.why.as_ref().expect("causes with --why");
        assert_eq!(why.unavailable, None, "{notes}");
        for (k, host) in HOSTS.iter().enumerate() {
            let chain: Vec<_> = why
                .watched
                .iter()
                .filter(|w| w.watch.chain.is_some_and(|c| c.chain == k as u32))
                .collect();
            assert!(
                chain
                    .iter()
                    .any(|w| w.watch.chain.is_some_and(|c| c.driver))
                    && chain.iter().all(|w| w.metric == metric_name(XRUNS, host)),
                "{}: host {host}'s jackd traced, its late periods in its xruns: {:?}",
                result.name,
                why.watched
            );
        }
        for (namespace, pid) in hosts_of(result) {
            let left = still_there(&namespace, pid);
            assert!(left.is_empty(), "{}: left behind: {left:?}", result.name);
        }
    }
}
