//! The aes67 subject run end to end, short: two hosts, and a lone host
//! whose streams come back to it through multicast loopback, each in
//! cells. Every marker that comes back is exactly the receivers' latencies
//! late (the media clock's stamps, not the threads' wake-ups), each host
//! receives what the other (or it itself) sent, and the services are
//! stopped. Asserts behaviour, never speed: how many packets are lost is
//! the benchmark's question (scenarios/aes67-*.toml), not this test's.

mod common;

use tessera_experiments::runner;
use tessera_experiments::subject::aes67::METRIC;
use tessera_scenario::Scenario;

/// Two hosts in cells of their own: graph-a, net-a, graph-b, net-b.
fn two_hosts() -> String {
    let text = String::from(
        r#"name = "aes67"
duration = "1500ms"
warmup = "300ms"

[subject]
kind = "aes67"
hosts = 2
streams = 1
channels = 8
latency = "2ms"
deadline = "4ms"

[[configuration]]
name = "cells"
subject = { graph = "cell:graph-{host}", service = "cell:net-{host}" }
"#,
    );
    text + &common::aes67_host_cells()
}

/// Runs `text` and checks its one configuration: markers `hops` × 2 ms
/// late, and `directions` each carried packets. Returns its notes.
fn run_and_check(text: &str, hops: u64, directions: &[&str]) -> String {
    let Some(machine) = tessera_testkit::privileged("aes67 scenario") else {
        return String::new();
    };
    std::env::set_var("TESSERA_RUN_DIR", machine.dir());
    let scenario = Scenario::parse(text, "aes67.toml").unwrap();
    let outcome = runner::run(&scenario, &machine.dir().join("report"), |_| {}).unwrap();
    common::report_reads_no_notes(&outcome.results, &machine.dir());
    let c = &outcome.results.configurations[0];
    let notes = c.notes.join("; ");
    assert!(!notes.contains("not run"), "{notes}");
    let round_trip = c.metric(METRIC).expect("the marker's round trip");
    // A marker every 10 ms for 1.5 s: most come back, each exactly late —
    // unless the host stalled a vCPU for a fifth of the run or more (a CI
    // run: 930 ms stolen, 94 of 140 markers lost behind the stalls); those
    // that came back are exactly late even then.
    let most_stolen_ms = c
        .counters
        .iter()
        .filter(|k| k.name.starts_with("steal time cpu"))
        .map(|k| k.value)
        .fold(0.0, f64::max);
    let least = if most_stolen_ms < 300.0 { 50 } else { 1 };
    assert!(round_trip.summary.count >= least, "{notes}");
    let expected_us = (hops * 2000) as f64;
    assert_eq!(
        (round_trip.summary.min, round_trip.summary.max),
        (expected_us, expected_us),
        "{notes}"
    );
    for direction in directions {
        let received = received(&notes, direction);
        assert!(received > 500, "{direction}: {received}; {notes}");
    }
    assert!(notes.contains("the network service stopped"), "{notes}");
    notes
}

/// What the note of hop `direction` ("a → b") says its receiver received.
fn received(notes: &str, direction: &str) -> u64 {
    let (_, rest) = notes
        .split_once(&format!("aes67 {direction}: sent"))
        .unwrap_or_else(|| panic!("no {direction} in {notes}"));
    let (_, rest) = rest.split_once("received ").expect("received");
    rest.split(',').next().unwrap().parse().unwrap()
}

/// One test, the runs one after the other: the cells they make are named
/// after this process.
#[test]
fn two_hosts_and_a_lone_host_pass_markers_in_their_latencies() {
    run_and_check(&two_hosts(), 2, &["a → b", "b → a"]);
    let lone =
        two_hosts()
            .replacen("hosts = 2", "hosts = 1", 1)
            .replacen("streams = 1", "streams = 2", 1);
    let notes = run_and_check(&lone, 1, &["a → a"]);
    if !notes.is_empty() {
        assert!(
            notes.contains("a → a through groups it joined itself"),
            "{notes}"
        );
    }
}
