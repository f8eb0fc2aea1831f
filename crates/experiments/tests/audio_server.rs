//! The audio-server subject (seed 001 §4.4–4.6 on jackd2 and PipeWire)
//! run: (as root) a short run of tessera-scenario's
//! fixtures/audio-server.toml on a private jackd — and on a private
//! PipeWire when its daemon starts — records cycles and leaves no server
//! behind. Its parsing is tested in tessera-scenario. Asserts behaviour,
//! never speed.

mod common;

use common::built;
use std::sync::Mutex;
use std::time::Duration;
use tessera_experiments::runner;
use tessera_experiments::subject::audio_server::{Headline, CLIENT_END, END_TO_END};
use tessera_scenario::{Scenario, ServerKind};
use tessera_testkit::within;

/// Tests that change PATH, or spawn programs found through it, take turns.
static ENVIRONMENT: Mutex<()> = Mutex::new(());

const JACK: &str = include_str!("../../scenario/tests/fixtures/audio-server.toml");
/// `JACK` on PipeWire, which sets its own priority.
const PIPEWIRE: &str = include_str!("../../scenario/tests/fixtures/audio-server-pipewire.toml");

fn environment() -> std::sync::MutexGuard<'static, ()> {
    ENVIRONMENT.lock().unwrap_or_else(|p| p.into_inner())
}

fn installed(program: &str) -> bool {
    tessera_sys::process::installed(program)
}

/// Processes or /dev/shm files of a server this process started.
fn leftovers() -> Vec<String> {
    let marker = format!("tessera-{}-", std::process::id());
    let mut found: Vec<String> = std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.contains(&marker))
        .collect();
    let pw_marker = format!("tessera-pw-{}-", std::process::id());
    found.extend(
        std::fs::read_dir(std::env::temp_dir())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| f.contains(&pw_marker)),
    );
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let server = cmdline.starts_with("jackd") || cmdline.contains("/jackd ");
        if server && (cmdline.contains(&marker)) {
            found.push(format!(
                "process {}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
        let pipewire = cmdline.trim() == "pipewire" || cmdline.starts_with("/usr/bin/pipewire ");
        if pipewire {
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            if String::from_utf8_lossy(&environ).contains(&pw_marker) {
                found.push(format!("pipewire {}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// Runs `text` as root for its one configuration; None (after printing
/// why) when the test cannot run here.
fn short_run(test: &str, text: &str) -> Option<tessera_measure::ConfigurationResult> {
    let machine = tessera_testkit::privileged(test)?;
    if !built(test, "tessera-jack-peer") {
        return None;
    }
    std::env::set_var("TESSERA_RUN_DIR", machine.dir());
    let scenario = Scenario::parse(text, "audio.toml").unwrap();
    let dir = machine.dir().join("report");
    let outcome = within(Duration::from_secs(90), move || {
        runner::run(&scenario, &dir, |_| {}).map_err(|e| e.to_string())
    })
    .unwrap();
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
    common::report_reads_no_notes(&outcome.results, &machine.dir());
    outcome.results.configurations.into_iter().next()
}

fn assert_cycles_recorded(result: &tessera_measure::ConfigurationResult) {
    let notes = result.notes.join("; ");
    let headline = Headline::from_result(result).unwrap_or_else(|| panic!("no headline: {notes}"));
    // 2.5 s measured at 1333 µs: about 1875 cycles.
    assert!(headline.cycles > 1000, "{notes}");
    let e2e = result.metric(END_TO_END).expect("end-to-end");
    assert!(e2e.summary.count > 1000, "{notes}");
    let ends = result.metric(CLIENT_END).expect("client end");
    assert_eq!(ends.series.len(), 2, "one series per client: {notes}");
}

#[test]
fn a_short_jackd_run_records_cycles_and_leaves_no_jackd() {
    let _env = environment();
    if !installed("jackd") {
        eprintln!("SKIPPED jackd run: jackd is not installed (apt-get install jackd2)");
        return;
    }
    let Some(result) = short_run("audio-server on jackd", JACK) else {
        return;
    };
    assert!(
        !result.notes.iter().any(|n| n.starts_with("not run")),
        "{:?}",
        result.notes
    );
    assert_cycles_recorded(&result);
}

#[test]
fn a_short_pipewire_run_records_cycles_when_its_daemon_starts() {
    let _env = environment();
    let programs = ServerKind::PipeWire.programs();
    if !programs.iter().all(|(program, _)| installed(program)) {
        eprintln!("SKIPPED PipeWire run: not installed (apt-get install pipewire pipewire-bin pipewire-jack)");
        return;
    }
    let Some(result) = short_run("audio-server on PipeWire", PIPEWIRE) else {
        return;
    };
    if let Some(why) = result.notes.iter().find(|n| n.starts_with("not run")) {
        eprintln!("SKIPPED PipeWire run: its daemon did not start here: {why}");
        return;
    }
    assert_cycles_recorded(&result);
}
