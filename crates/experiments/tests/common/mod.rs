//! What the scenario tests share: whether a workspace program is built
//! beside the test, and the check that a run's report is rendered from its
//! data alone (a time limit on a run is `tessera_testkit::within`). It must
//! never start a server or touch the machine.
//!
//! Each test crate uses part of it.
#![allow(dead_code)]

use std::path::Path;
use tessera_measure::RunResults;

/// Whether `program` of this workspace is built beside the test (else
/// the test is skipped, saying so, or failed under CI=true).
pub fn built(test: &str, program: &str) -> bool {
    let path = tessera_experiments::harness::servers::program_beside_us(program);
    if path.is_file() {
        return true;
    }
    let msg = format!(
        "SKIPPED {test}: {program} is not built (cargo build -p {})",
        package(program)
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}, and CI=true requires it");
    }
    eprintln!("{msg}");
    false
}

/// The package that builds `program`.
fn package(program: &str) -> &str {
    match program {
        "tessera" => "tessera-cli",
        other => other,
    }
}

/// Asserts that `results`' report says the same when every note is gone
/// (but the list of configurations, which shows the notes): each figure
/// and label of every table comes from the data in results.json, never
/// from a sentence. Renders both into `scratch`.
pub fn report_reads_no_notes(results: &RunResults, scratch: &Path) {
    let mut bare = results.clone();
    bare.configurations.iter_mut().for_each(|c| c.notes.clear());
    let [with, without] = [(results, "with-notes"), (&bare, "without-notes")].map(|(r, name)| {
        let dir = scratch.join(name);
        tessera_experiments::runner::write_report(r, &dir).expect("report");
        let text = std::fs::read_to_string(dir.join("README.md")).expect("README.md");
        std::fs::remove_dir_all(&dir).expect("remove the rendered report");
        without_configurations(&text)
    });
    assert_eq!(with, without, "a report table read a note");
}

/// A report's text less its "## Configurations" section.
fn without_configurations(text: &str) -> String {
    let Some(start) = text.find("\n## Configurations\n") else {
        return text.to_string();
    };
    let rest = &text[start + 1..];
    let end = rest.find("\n## ").map_or(text.len(), |i| start + 1 + i + 1);
    format!("{}{}", &text[..start + 1], &text[end..])
}

/// The cells of two AES67 hosts' graphs and network services (a and b),
/// as scenario text.
pub fn aes67_host_cells() -> String {
    ["graph-a", "net-a", "graph-b", "net-b"]
        .iter()
        .map(|cell| {
            format!(
                "\n[[cell]]\nname = \"{cell}\"\npolicy = \"event-triggered\"\nplacement = \"global\"\n\
                 runtime = \"300us\"\nperiod = \"1ms\"\nreclaim = true\n"
            )
        })
        .collect()
}
