//! The netphone as a scenario subject (seed 004 §4): the shipped Table 1
//! and Table 2 scenarios parse into the configurations they name, and
//! mistakes are refused with the line and the reason.

use std::path::Path;
use tessera_scenario::netphone::Stream;
use tessera_scenario::{Scenario, Subject};

const NETPHONE: &str = include_str!("fixtures/netphone.toml");

/// The 1-based line of `NETPHONE` where `text` first appears.
fn line_of(text: &str) -> usize {
    NETPHONE
        .lines()
        .position(|l| l.contains(text))
        .expect("in NETPHONE")
        + 1
}

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
    if !tessera_sys::process::installed("gcc") {
        eprintln!("SKIPPED the shipped netphone scenarios: their build load needs gcc");
        return;
    }
    let table1 = shipped("netphone.toml");
    let Subject::Netphone(subject) = &table1.subject else {
        panic!("a netphone subject");
    };
    assert!(!subject.flood && subject.link_bps == 1_000_000_000);
    // (stream, marked, through the service, roles in cells)
    let runs = |scenario: &Scenario| -> Vec<(Stream, bool, bool, usize)> {
        scenario
            .configurations
            .iter()
            .map(|c| {
                let settings = c.netphone.as_ref().expect("netphone settings");
                let cells = c.roles.iter().filter(|(_, s)| s.cell.is_some()).count();
                (settings.stream, settings.marked, settings.service, cells)
            })
            .collect()
    };
    assert_eq!(
        runs(&table1),
        [
            (Stream::AUDIO, false, false, 0),
            (Stream::AUDIO, true, false, 2),
            (Stream::AUDIO, true, true, 3),
            (Stream::AUDIO, true, false, 2),
            (Stream::VIDEO, false, false, 0),
            (Stream::VIDEO, true, false, 2),
            (Stream::VIDEO, true, true, 3),
            (Stream::VIDEO, true, false, 2),
        ]
    );
    assert!(!table1.configurations[0].needs_privilege());
    let table2 = shipped("netphone-flood.toml");
    let Subject::Netphone(subject) = &table2.subject else {
        panic!("a netphone subject");
    };
    assert!(subject.flood);
    assert_eq!(
        runs(&table2),
        [
            (Stream::AUDIO, false, false, 0),
            (Stream::AUDIO, true, false, 2),
            (Stream::AUDIO, true, true, 3),
            (Stream::AUDIO, true, false, 2),
        ]
    );
}

#[test]
fn mistakes_are_refused_with_line_and_reason() {
    let (line, reason) = refusal("packets = \"marked\"", "packets = \"urgent\"");
    assert_eq!(line, line_of("name = \"tessera\"") + 1);
    assert!(reason.contains("\"marked\" or \"unmarked\""), "{reason}");
    let (line, reason) = refusal("packets = \"marked\"", "priority = \"6\"");
    assert_eq!(line, line_of("name = \"tessera\"") + 1);
    assert!(reason.contains("unknown key \"priority\""), "{reason}");
    let (_, reason) = refusal("speaker = \"cell:speaker\"", "speaker = \"cell:nowhere\"");
    assert!(reason.contains("no cell named \"nowhere\""), "{reason}");
    let (line, reason) = refusal("subject = \"plain\"", "subject = \"tessera\"");
    assert_eq!(line, line_of("subject = \"plain\""));
    assert!(reason.contains("\"plain\" or as a table"), "{reason}");
    let (line, reason) = refusal("service = \"cell:netsvc\"", "service = \"fifo:80\"");
    assert_eq!(line, line_of("service = \"cell:netsvc\""));
    assert!(reason.contains("runs in a cell"), "{reason}");
    let (_, reason) = refusal("service = \"cell:netsvc\"", "service = \"cell:nowhere\"");
    assert!(reason.contains("no cell named \"nowhere\""), "{reason}");
    let (line, reason) = refusal("stream = \"16mbit\"", "stream = \"4mbit\"");
    assert_eq!(line, 7);
    assert!(reason.contains("not a stream"), "{reason}");
    let (line, reason) = refusal("link = \"1gbit\"", "link = \"25mbit\"");
    assert_eq!(line, 8);
    assert!(reason.contains("twice the stream"), "{reason}");
    let (_, reason) = refusal("link = \"1gbit\"", "link = \"1mbit\"");
    assert!(reason.contains("20mbit–10gbit"), "{reason}");
}
