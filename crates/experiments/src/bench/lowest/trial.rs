//! One trial of the lowest-buffer benchmark: an audio-server scenario at
//! one buffer size — the server, its 10 load clients and monitor, the §4.4
//! interference — written as scenario text (so it is validated like any
//! scenario file, and the report can show it), one of its two
//! configurations run by [`runner::run_configuration`], and the trial's
//! figures read from the audio-server subject's headline.
//!
//! It owns what a trial counts against holding. It must never start or stop
//! a process itself: the runner and [`crate::harness::servers`] do, by PID.

use super::results::{latency_ms, Config, Options, Trial, CLIENTS, CLIENT_LOAD, RATE};
use crate::harness::servers;
use crate::runner;
use crate::subject::audio_server::Headline;
use std::fmt::Write as _;
use std::time::{Duration, Instant};
use tessera_measure::ConfigurationResult;
use tessera_scenario::{Scenario, ServerKind};

/// PipeWire's module-rt gives its data thread and its JACK clients'
/// threads SCHED_FIFO 88 (Debian 12's PipeWire 0.3.65 default `rt.prio`).
const PIPEWIRE_PRIORITY: u32 = 88;

/// Seed 001 §4.4's interference as issue 21 states it.
pub(super) const INTERFERENCE: &str = "two rt-app tasks at SCHED_FIFO of the server's priority, \
     each 3 ms every 10 ms, and stress-ng --cpu 2 (SCHED_OTHER), from the start of every trial; \
     nothing pinned";

/// The rt-app tasks' and stress-ng's lines of a trial's scenario.
const INTERFERENCE_TOML: &str = r#"
[[interference]]
name = "rt-app-1"
kind = "rt-app"
period = "10ms"
work = "3ms"

[[interference]]
name = "rt-app-2"
kind = "rt-app"
period = "10ms"
work = "3ms"

[[interference]]
name = "stress-ng"
kind = "stress-ng"
args = ["--cpu", "2"]
"#;

/// The SCHED_FIFO priority the server runs at, which the rt-app tasks
/// share.
pub(super) fn server_priority(server: ServerKind, options: &Options) -> u32 {
    match server {
        ServerKind::Jack => options.jack_priority,
        ServerKind::PipeWire => PIPEWIRE_PRIORITY,
    }
}

/// A configuration's `subject` in the trial's scenario.
pub(super) fn scheduling(server: ServerKind, config: Config, options: &Options) -> String {
    match (config, server) {
        (Config::Plain, ServerKind::Jack) => format!("fifo:{}", options.jack_priority),
        // PipeWire sets its own priority; the scenario refuses another.
        (Config::Plain, ServerKind::PipeWire) => "fifo".into(),
        (Config::Guarded, _) => "guard".into(),
    }
}

/// What counts against holding on `server`, in short.
pub(super) fn unit(server: ServerKind) -> &'static str {
    match server {
        ServerKind::Jack => "xruns",
        ServerKind::PipeWire => "skipped + late",
    }
}

/// What counts against holding on `server`, in words.
pub(super) fn counted(server: ServerKind) -> &'static str {
    match server {
        ServerKind::Jack => "xruns (JACK2's own count, as its clients are told)",
        ServerKind::PipeWire => {
            "periods skipped + late cycles (PipeWire's libjack tells JACK clients of no xrun: \
             a skipped period or a cycle whose last client finished after the period is \
             what PipeWire counts as one)"
        }
    }
}

/// The trial's failures, counted as [`counted`] says.
fn failures(server: ServerKind, headline: &Headline) -> u64 {
    match server {
        ServerKind::Jack => headline.xruns,
        ServerKind::PipeWire => headline.lost + headline.late,
    }
}

/// The scenario of one server at one buffer size, with both
/// configurations ("plain", "guarded").
pub(super) fn scenario_text(server: ServerKind, frames: u32, options: &Options) -> String {
    let priority = server_priority(server, options);
    let mut text = format!(
        "name = \"lowest buffer: {} at {frames} frames\"\n\
         duration = \"{}ms\"\nwarmup = \"{}ms\"\n\n\
         [subject]\nkind = \"audio-server\"\nserver = \"{}\"\nframes = {frames}\nrate = {RATE}\n",
        server.name(),
        (options.seconds * 1e3).round(),
        (options.warmup * 1e3).round(),
        server.name(),
    );
    if server == ServerKind::Jack {
        let _ = writeln!(text, "priority = {priority}");
    }
    for _ in 0..CLIENTS {
        let _ = write!(text, "\n[[subject.client]]\nload = {CLIENT_LOAD}\n");
    }
    text.push_str(INTERFERENCE_TOML);
    let interference = format!(
        "{{ rt-app-1 = \"fifo:{priority}\", rt-app-2 = \"fifo:{priority}\", stress-ng = \"plain\" }}"
    );
    for config in Config::BOTH {
        let _ = write!(
            text,
            "\n[[configuration]]\nname = \"{}\"\nsubject = \"{}\"\ninterference = {interference}\n",
            config.name(),
            scheduling(server, config, options),
        );
    }
    text
}

fn scenario(server: ServerKind, frames: u32, options: &Options) -> Result<Scenario, String> {
    let file = format!(
        "tessera bench lowest ({} at {frames} frames)",
        server.name()
    );
    Scenario::parse(&scenario_text(server, frames, options), &file).map_err(|e| e.to_string())
}

/// Refuses at once what would make every trial fail: no root, a program
/// missing (the scenario's own checks, and this build's
/// tessera-jack-peer). Calibrates rt-app, once, before any trial.
pub(super) fn check_programs(options: &Options) -> Result<(), String> {
    if !tessera_sys::caps::is_root() {
        return Err(
            "needs root: the servers run SCHED_FIFO and the guard reserves \
             SCHED_DEADLINE (run it with sudo)"
                .into(),
        );
    }
    for &server in &options.servers {
        scenario(server, options.frames[0], options)?;
    }
    let peer = servers::program_beside_us("tessera-jack-peer");
    if !servers::is_program(&peer) {
        return Err("tessera-jack-peer is not built: cargo build -p tessera-jack-peer".into());
    }
    tessera_workloads::external::rt_app_calibration(&std::env::temp_dir()).map(drop)
}

/// Runs `config` of `server` at `frames`; `progress` gets the time into
/// the trial and its length. An error: the trial could not run (or was
/// interrupted), so it measured nothing.
pub(super) fn run(
    server: ServerKind,
    config: Config,
    frames: u32,
    options: &Options,
    progress: &mut dyn FnMut(Duration, Duration),
    interrupted: &dyn Fn() -> bool,
) -> Result<Trial, String> {
    let what = format!("{} {} at {frames} frames", server.name(), config.name());
    let scenario = scenario(server, frames, options)?;
    let configuration = scenario
        .configurations
        .iter()
        .find(|c| c.name == config.name())
        .expect("the scenario has both configurations");
    let total = scenario.total();
    let started = Instant::now();
    let result = runner::run_configuration(
        &scenario,
        configuration,
        &mut |elapsed| progress(elapsed, total),
        interrupted,
    )
    .map_err(|e| format!("{what}: {e}"))?;
    let duration_s = started.elapsed().as_secs_f64();
    figures(server, frames, result, duration_s).map_err(|e| format!("{what}: {e}"))
}

/// The trial's figures from the configuration's result; an error when the
/// subject measured nothing.
fn figures(
    server: ServerKind,
    frames: u32,
    result: ConfigurationResult,
    duration_s: f64,
) -> Result<Trial, String> {
    let headline = Headline::from_result(&result).ok_or_else(|| result.notes.join("; "))?;
    let refused = match headline.served {
        Some((served, rate)) if served != u64::from(frames) => Some(format!(
            "the server gave its clients {served} frames at {rate} Hz, not {frames}"
        )),
        _ if headline.cycles == 0 => Some("no cycle was measured".to_string()),
        _ => None,
    };
    let failures = failures(server, &headline);
    Ok(Trial {
        frames,
        latency_ms: latency_ms(frames),
        held: refused.is_none() && failures == 0,
        failures,
        xruns: headline.xruns,
        late: headline.late,
        skipped: headline.lost,
        cycles: headline.cycles,
        reserved_per_used: headline.reserved_per_used,
        duration_s,
        refused,
        notes: result.notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use tessera_scenario::{LoadKind, ServerSched, Subject};

    fn options() -> Options {
        Options::new(PathBuf::from("/nonexistent"))
    }

    fn installed(programs: &[&str]) -> bool {
        programs.iter().all(|p| tessera_sys::process::installed(p))
    }

    #[test]
    fn a_trial_is_the_issues_setup_as_a_valid_scenario() {
        if !installed(&["jackd", "rt-app", "stress-ng"]) {
            eprintln!("SKIPPED a_trial_is_the_issues_setup: jackd2, rt-app or stress-ng missing");
            return;
        }
        let s = scenario(ServerKind::Jack, 128, &options()).unwrap();
        let Subject::AudioServer(a) = &s.subject else {
            panic!("{:?}", s.subject)
        };
        assert_eq!((a.frames, a.rate, a.priority), (128, 48_000, 70));
        assert_eq!(a.clients.len(), 10);
        assert!(a
            .clients
            .iter()
            .all(|c| c.load == 0.05 && c.start.is_zero()));
        assert_eq!(s.total(), Duration::from_secs(62));
        assert_eq!(s.core, None, "nothing pinned, as users run it");
        let rt_apps = s
            .interference
            .iter()
            .filter(|i| {
                i.kind
                    == LoadKind::RtApp {
                        period: Duration::from_millis(10),
                        run: Duration::from_millis(3),
                    }
            })
            .count();
        assert_eq!(rt_apps, 2);
        let names: Vec<&str> = s.configurations.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["plain", "guarded"]);
        assert_eq!(
            s.configurations[0].server,
            Some(ServerSched::Fifo(Some(70)))
        );
        assert!(s.configurations[1].server.as_ref().unwrap().is_guard());
        let fifo = s.configurations[1].interference[0].1.fifo;
        assert_eq!(fifo, Some(70), "the tasks at the server's priority");
    }

    #[test]
    fn pipewire_trials_run_the_tasks_at_its_own_priority() {
        if !installed(&["pipewire", "pw-metadata", "pw-jack", "rt-app", "stress-ng"]) {
            eprintln!("SKIPPED pipewire_trials: PipeWire, rt-app or stress-ng missing");
            return;
        }
        let s = scenario(ServerKind::PipeWire, 256, &options()).unwrap();
        assert_eq!(s.configurations[0].server, Some(ServerSched::Fifo(None)));
        assert_eq!(s.configurations[0].interference[1].1.fifo, Some(88));
    }

    fn headline(xruns: u64, late: u64, lost: u64) -> Headline {
        Headline {
            sched: "fifo".into(),
            cycles: 1000,
            xruns,
            late,
            lost,
            ..Headline::default()
        }
    }

    /// A configuration's result with the headline's counters and note,
    /// and `notes` after them.
    fn result(headline: Option<&Headline>, notes: &[String]) -> ConfigurationResult {
        ConfigurationResult {
            labels: Default::default(),
            name: "plain".into(),
            counters: headline.map(Headline::counters).unwrap_or_default(),
            notes: headline
                .map(Headline::note)
                .into_iter()
                .chain(notes.iter().cloned())
                .collect(),
            metrics: Vec::new(),
            why: None,
        }
    }

    #[test]
    fn jack_counts_its_xruns_and_pipewire_its_skipped_and_late_cycles() {
        let h = headline(2, 5, 1);
        let jack = figures(ServerKind::Jack, 256, result(Some(&h), &[]), 3.0).unwrap();
        assert_eq!((jack.failures, jack.held), (2, false));
        let pw = figures(ServerKind::PipeWire, 256, result(Some(&h), &[]), 3.0).unwrap();
        assert_eq!((pw.failures, pw.xruns, pw.late, pw.skipped), (6, 2, 5, 1));
        let clean = figures(
            ServerKind::Jack,
            256,
            result(Some(&headline(0, 3, 0)), &[]),
            3.0,
        );
        assert!(
            clean.unwrap().held,
            "late cycles without an xrun hold on JACK2"
        );
    }

    #[test]
    fn a_size_the_server_did_not_run_never_holds() {
        let served = Headline {
            served: Some((32, 48_000)),
            ..headline(0, 0, 0)
        };
        let other_size = result(Some(&served), &[]);
        let trial = figures(ServerKind::PipeWire, 16, other_size, 3.0).unwrap();
        assert!(!trial.held);
        assert!(trial.refused.unwrap().contains("32 frames"));
        let silent = Headline {
            cycles: 0,
            ..headline(0, 0, 0)
        };
        let trial = figures(ServerKind::Jack, 16, result(Some(&silent), &[]), 3.0).unwrap();
        assert_eq!(trial.refused.as_deref(), Some("no cycle was measured"));
    }

    #[test]
    fn a_trial_that_measured_nothing_is_an_error() {
        let e = figures(
            ServerKind::Jack,
            64,
            result(None, &["not measured: the clients never started".into()]),
            1.0,
        )
        .unwrap_err();
        assert!(e.contains("never started"), "{e}");
    }
}
