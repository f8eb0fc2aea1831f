//! Seed 000 §4.2 as a scenario: the music application's network through
//! the network service process, with the abusive streamer (a process of
//! its own) pulling and pushing beside it across a shaped LAN. A short run
//! answers every package and reports Δt as the service measured it; the
//! `service` key's mistakes are refused with the line and the reason.
//! Asserts behaviour, never speed.

use tessera_experiments::net_service::SERVICE_RESPONSE_METRIC;
use tessera_experiments::runner;
use tessera_experiments::scenario::Scenario;
use tessera_music::EMULATOR_METRIC;

const SCENARIO: &str = r#"name = "network service"
duration = "1500ms"
warmup = "200ms"

[subject]
kind = "music"
network = "lan"
link = "1gbit"
pads = "0-3"
oscillators = 8

[[cell]]
name = "synth"
policy = "event-triggered"
runtime = "300us"
period = "725.6us"
reclaim = true
cores = { 2 = [1], 4 = [3], 8 = [6], 16 = [4] }

[[cell]]
name = "netsvc"
policy = "event-triggered"
runtime = "250us"
period = "725.6us"
reclaim = true
cores = { 2 = [1], 4 = [2], 8 = [5], 16 = [1] }

[[cell]]
name = "relay"
policy = "event-triggered"
placement = "global"
runtime = "250us"
period = "725.6us"
reclaim = true

[[cell]]
name = "slabs"
policy = "event-triggered"
placement = "global"
runtime = "350us"
period = "725.6us"
reclaim = true

[[cell]]
name = "streamer"
policy = "best-effort"

[[configuration]]
name = "reserved"
subject = { synth = "cell:synth", network = "cell:relay", slabs = "cell:slabs", service = "cell:netsvc", streamer = "cell:streamer" }
service = { discipline = "mclock", reservation = "240mbit", streamer = true }

[[configuration]]
name = "fifo"
subject = { synth = "cell:synth", network = "cell:relay", slabs = "cell:slabs", service = "cell:netsvc", streamer = "cell:streamer" }
service = { discipline = "fifo", streamer = true }
"#;

/// The 1-based line of the scenario where `text` first appears.
fn line_of(text: &str) -> usize {
    SCENARIO
        .lines()
        .position(|l| l.contains(text))
        .expect("in the scenario")
        + 1
}

fn refusal(from: &str, to: &str) -> String {
    assert!(SCENARIO.contains(from), "{from:?} not in the scenario");
    let e = Scenario::parse(&SCENARIO.replacen(from, to, 1), "bad.toml").expect_err("refused");
    format!("line {}: {}", e.line, e.reason)
}

#[test]
fn the_service_key_is_checked() {
    let s = Scenario::parse(SCENARIO, "net.toml").unwrap();
    let plan = s.configurations[0]
        .service
        .as_ref()
        .expect("a service plan");
    assert_eq!(
        (plan.reservation_bps, plan.link_bps),
        (240_000_000, 1_000_000_000)
    );
    assert!(plan.streamer);
    let bad = refusal("discipline = \"fifo\"", "discipline = \"wfq\"");
    let line = format!("line {}:", line_of("discipline = \"fifo\""));
    assert!(bad.starts_with(&line) && bad.contains("mclock"), "{bad}");
    let bad = refusal("reservation = \"240mbit\"", "reservation = \"2gbit\"");
    assert!(bad.contains("does not fit"), "{bad}");
    let bad = refusal("reservation = \"240mbit\"", "reservation = \"lots\"");
    assert!(bad.contains("not a rate"), "{bad}");
}

#[test]
fn a_short_run_through_the_service_beside_the_streamer_answers_every_package() {
    let Some(machine) = tessera_testkit::privileged("the network service process and a LAN") else {
        return;
    };
    std::env::set_var("TESSERA_RUN_DIR", machine.dir());
    let scenario = Scenario::parse(SCENARIO, "net.toml").unwrap();
    let dir = machine.dir().join("report");
    let outcome = runner::run(&scenario, &dir, |_| {}).unwrap();
    // 1.5 s after the 200 ms warm-up, one answer per package of 725.6 µs.
    let packages = 1_700_000_000 / 725_623 - 200_000_000 / 725_623;
    for configuration in &outcome.results.configurations {
        let notes = configuration.notes.join("; ");
        assert!(!notes.contains("not run"), "{notes}");
        let emulator = configuration.metric(EMULATOR_METRIC).expect("tf − t0");
        assert_eq!(emulator.summary.count, packages, "{notes}");
        let dt = configuration
            .metric(SERVICE_RESPONSE_METRIC)
            .expect("Δt at the service");
        assert!(dt.summary.count >= packages, "{notes}");
        assert!(dt.summary.misses.is_some());
        assert!(notes.contains("abusive streamer: sent"), "{notes}");
        assert!(notes.contains("flow \"streamer\" (bulk)"), "{notes}");
    }
}
