//! The netphone as a scenario subject (seed 004 §4): the shipped Table 1
//! and Table 2 scenarios parse into the configurations they name, mistakes
//! are refused with the line and the reason, and a short run, plain and in
//! cells, measures every packet and writes the seed's table. Asserts
//! behaviour, never speed.

use std::path::Path;

use tessera_experiments::netphone::METRIC;
use tessera_experiments::runner;
use tessera_experiments::scenario::{Scenario, Subject};
use tessera_workloads::netphone::Stream;

const NETPHONE: &str = r#"name = "netphone"
duration = "1500ms"
warmup = "200ms"

[subject]
kind = "netphone"
stream = "16mbit"
link = "1gbit"

[[cell]]
name = "mike"
policy = "event-triggered"
placement = "global"
runtime = "500us"
period = "2ms"

[[cell]]
name = "speaker"
policy = "event-triggered"
placement = "global"
runtime = "500us"
period = "2ms"

[[configuration]]
name = "plain"
subject = "plain"

[[configuration]]
name = "tessera"
subject = { mike = "cell:mike", speaker = "cell:speaker", packets = "marked" }
"#;

fn refusal(from: &str, to: &str) -> (usize, String) {
    assert!(NETPHONE.contains(from), "{from:?} not in NETPHONE");
    let e = Scenario::parse(&NETPHONE.replacen(from, to, 1), "bad.toml").expect_err("refused");
    (e.line, e.reason)
}

fn shipped(name: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name);
    Scenario::from_file(&path).unwrap()
}

#[test]
fn the_shipped_tables_parse_into_plain_and_tessera_at_each_rate() {
    if !tessera_workloads::external::installed("gcc") {
        eprintln!("SKIPPED the shipped netphone scenarios: their build load needs gcc");
        return;
    }
    let table1 = shipped("netphone.toml");
    let Subject::Netphone(subject) = &table1.subject else {
        panic!("a netphone subject");
    };
    assert!(!subject.flood && subject.link_bps == 1_000_000_000);
    let runs: Vec<(Stream, bool, usize)> = table1
        .configurations
        .iter()
        .map(|c| {
            let settings = c.netphone.as_ref().expect("netphone settings");
            let cells = c.roles.iter().filter(|(_, s)| s.cell.is_some()).count();
            (settings.stream, settings.marked, cells)
        })
        .collect();
    assert_eq!(
        runs,
        [
            (Stream::AUDIO, false, 0),
            (Stream::AUDIO, true, 2),
            (Stream::AUDIO, true, 2),
            (Stream::VIDEO, false, 0),
            (Stream::VIDEO, true, 2),
            (Stream::VIDEO, true, 2),
        ]
    );
    assert!(!table1.configurations[0].needs_privilege());
    let table2 = shipped("netphone-flood.toml");
    let Subject::Netphone(subject) = &table2.subject else {
        panic!("a netphone subject");
    };
    assert!(subject.flood);
    assert_eq!(table2.configurations.len(), 3);
}

#[test]
fn mistakes_are_refused_with_line_and_reason() {
    let (line, reason) = refusal("packets = \"marked\"", "packets = \"urgent\"");
    assert_eq!(line, 30);
    assert!(reason.contains("\"marked\" or \"unmarked\""), "{reason}");
    let (line, reason) = refusal("packets = \"marked\"", "priority = \"6\"");
    assert_eq!(line, 30);
    assert!(reason.contains("unknown key \"priority\""), "{reason}");
    let (_, reason) = refusal("speaker = \"cell:speaker\"", "speaker = \"cell:nowhere\"");
    assert!(reason.contains("no cell named \"nowhere\""), "{reason}");
    let (line, reason) = refusal("subject = \"plain\"", "subject = \"tessera\"");
    assert_eq!(line, 26);
    assert!(reason.contains("\"plain\" or as a table"), "{reason}");
    let (line, reason) = refusal("stream = \"16mbit\"", "stream = \"4mbit\"");
    assert_eq!(line, 7);
    assert!(reason.contains("not a stream"), "{reason}");
    let (line, reason) = refusal("link = \"1gbit\"", "link = \"25mbit\"");
    assert_eq!(line, 8);
    assert!(reason.contains("twice the stream"), "{reason}");
    let (_, reason) = refusal("link = \"1gbit\"", "link = \"1mbit\"");
    assert!(reason.contains("20mbit–10gbit"), "{reason}");
}

#[test]
fn a_short_run_plain_and_in_cells_stamps_every_packet_and_writes_the_seeds_table() {
    let Some(machine) = tessera_testkit::privileged("netphone scenario") else {
        return;
    };
    std::env::set_var("TESSERA_RUN_DIR", machine.dir());
    let scenario = Scenario::parse(NETPHONE, "netphone.toml").unwrap();
    let dir = machine.dir().join("report");
    let outcome = runner::run(&scenario, &dir, |_| {}).unwrap();
    for c in &outcome.results.configurations {
        let notes = c.notes.join("; ");
        assert!(!notes.contains("not run"), "{notes}");
        let delay = c.metric(METRIC).expect("T4 − T1");
        // 1.5 s at 500 Hz after the warm-up, none lost without load.
        assert!(
            (745..=751).contains(&delay.summary.count),
            "{} packets; {notes}",
            delay.summary.count
        );
        assert!(notes.contains(" 0 lost"), "{notes}");
        let names: Vec<&str> = delay.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["T2 − T1", "T3 − T1", "T4 − T1"]);
    }
    let tessera = &outcome.results.configurations[1];
    assert!(tessera.notes.iter().any(|n| n.contains("experiment 6")));
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(readme.contains("## Netphone: end-to-end delay as in seed 004's Table 1"));
    assert!(readme.contains("| tessera | 4096 B at 500 Hz (16.4 Mbit/s), marked real-time"));
}
