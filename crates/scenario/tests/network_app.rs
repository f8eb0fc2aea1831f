//! The audio-server subject's network application (scenarios/network-app.toml,
//! issue 21): the shipped file parses into two hosts with the three
//! configurations, and malformed tables are refused with the line and the
//! reason.

use std::path::{Path, PathBuf};
use std::time::Duration;
use tessera_scenario::{Scenario, ServerSched, Subject};

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
