//! Seed 000 §4.2 as a scenario: the music application's network through
//! the network service process; the `service` key's mistakes are refused
//! with the line and the reason.

use tessera_scenario::Scenario;

const SCENARIO: &str = include_str!("fixtures/net-service.toml");

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
