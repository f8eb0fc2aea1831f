//! The changing-demand subject as a scenario: a tiny one (the experiments'
//! run test runs it too, fixtures/changing-demand.toml) parses into the
//! staircase and the music application with its defaults, and what it
//! cannot run is refused with the reason.

use tessera_scenario::{Scenario, Subject};

/// 5 % of a core, then 30 % from 3 s on; budgets sized for the mean (about
/// 20 %) and adapted every 250 ms, a pressed cell at least doubled. A light
/// music application beside it (4 pads of 8 oscillators).
const TINY: &str = include_str!("fixtures/changing-demand.toml");

#[test]
fn a_tiny_scenario_parses_and_refuses_what_it_cannot_run() {
    let scenario = Scenario::parse(TINY, "tiny.toml").unwrap();
    let Subject::ChangingDemand(d) = &scenario.subject else {
        panic!("not a changing-demand subject");
    };
    assert_eq!(d.video.steps, vec![0.05, 0.3]);
    let music = d.music.as_ref().expect("a music application");
    assert_eq!(music.pads, vec![0, 1, 2, 3]);
    assert_eq!(music.synth.oscillators_per_object, 8);
    assert_eq!(music.pressure, 0.8, "the music subject's defaults");
    assert!(scenario.configurations[0].needs_privilege());
    let refused = |from: &str, to: &str, why: &str| {
        let text = TINY.replace(from, to);
        let e = Scenario::parse(&text, "tiny.toml").unwrap_err();
        assert!(e.reason.contains(why), "{e}");
    };
    refused("adaptive:mean", "adaptive", "static:peak");
    refused("step = \"3s\"", "step = \"4s\"", "lengthen `duration`");
    refused("[0.05, 0.3]", "[0.05, 0.85]", "exceeds 0.9");
    refused(
        "interval_ms = 250",
        "enabled = true",
        "each configuration's",
    );
    refused("interval_ms = 250", "headroom_pct = 5", "headroom_pct");
    refused("pads = \"0-3\"", "pads = \"0-40\"", "is not a list of pads");
    refused("oscillators = 8", "period = \"2ms\"", "unknown field");
}
