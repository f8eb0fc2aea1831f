//! `tessera bench lowest` (issue 21, deliverable 3): the lowest buffer that
//! holds. For Debian's jackd2 (dummy driver) and PipeWire (headless, its
//! Dummy-Driver), each with 10 JACK load clients of 5 % of the period in a
//! chain plus a monitor, under seed 001 §4.4's interference — two rt-app
//! SCHED_FIFO tasks (3 ms every 10 ms) at the server's priority and
//! `stress-ng --cpu 2` — find the smallest buffer (powers of two, 16 to
//! 1024 frames at 48 kHz) at which a trial of `--seconds` has no xrun: for
//! the server as users run it (plain FIFO) and under `tessera guard` (its
//! defaults), in one run, the two searches taking turns so that both see
//! the same machine.
//!
//! A trial is one configuration of an audio-server scenario ([`trial`]),
//! run by [`crate::runner::run_configuration`]: the private servers of
//! [`crate::harness::servers`], `tessera-jack-peer` for the clients, the guard as a
//! child, and the runner's rt-app and stress-ng — so every process is
//! stopped by its PID and every scratch directory removed, error,
//! interruption or not.
//!
//! This module owns the search ([`search`]), the figures of each trial and
//! the report ([`report`]). It must never judge a result pass/fail (it
//! states the goal beside the ratio), never run two trials at once, and
//! never count a trial the server did not run at the size asked as a pass.

mod report;
mod results;
mod search;
mod trial;

pub use report::{summary_table, PLOT_STEM};
pub use results::*;
pub use search::Bisection;

use std::path::PathBuf;
use std::time::{Duration, Instant};
use tessera_scenario::ServerKind;

/// Where the run stands, for the progress line.
pub struct Progress<'a> {
    /// 1-based, and the most the run can take.
    pub trial: usize,
    pub max_trials: usize,
    pub server: &'a str,
    pub config: Config,
    pub frames: u32,
    pub elapsed: Duration,
    pub total: Duration,
}

pub struct Outcome {
    pub results: LowestResults,
    pub report: PathBuf,
}

/// Runs every search, writes lowest.json, README.md and the plot into the
/// options' directory — also when a trial fails or `interrupted` says so,
/// then with what was measured and the error.
pub fn run(
    options: &Options,
    mut progress: impl FnMut(&Progress),
    interrupted: &dyn Fn() -> bool,
) -> Result<Outcome, String> {
    options.check()?;
    trial::check_programs(options)?;
    let started = Instant::now();
    let mut results = LowestResults::start(options);
    let outcome = run_searches(options, &mut results, &mut progress, interrupted);
    results.total_s = started.elapsed().as_secs_f64();
    if let Err(e) = &outcome {
        results.stopped = Some(e.clone());
    }
    let report = report::write(&results, &options.out_dir)?;
    outcome.map(|()| Outcome { results, report })
}

fn run_searches(
    options: &Options,
    results: &mut LowestResults,
    progress: &mut dyn FnMut(&Progress),
    interrupted: &dyn Fn() -> bool,
) -> Result<(), String> {
    let max_trials =
        options.servers.len() * Config::BOTH.len() * Bisection::max_trials(options.frames.len());
    let mut count = 0;
    for &server in &options.servers {
        results.servers.push(ServerResult::start(server, options));
        let result = results.servers.last_mut().expect("pushed");
        let mut searches = Config::BOTH.map(|c| (c, Bisection::new(options.frames.len())));
        // The configurations take turns, one trial each, until both know.
        while searches.iter().any(|(_, s)| s.next().is_some()) {
            for (config, search) in &mut searches {
                let Some(index) = search.next() else { continue };
                let frames = options.frames[index];
                count += 1;
                let mut report = |elapsed: Duration, total: Duration| {
                    progress(&Progress {
                        trial: count,
                        max_trials,
                        server: server.name(),
                        config: *config,
                        frames,
                        elapsed,
                        total,
                    })
                };
                let trial = trial::run(server, *config, frames, options, &mut report, interrupted)?;
                search.record(index, trial.held);
                let slot = result.configs.iter_mut().find(|c| c.config == *config);
                slot.expect("one per configuration").trials.push(trial);
            }
        }
        result.conclude(&searches, &options.frames);
    }
    Ok(())
}

impl ServerResult {
    fn start(server: ServerKind, options: &Options) -> ServerResult {
        ServerResult {
            server: server.name().to_string(),
            unit: trial::unit(server).to_string(),
            counted: trial::counted(server).to_string(),
            interference_priority: trial::server_priority(server, options),
            configs: Config::BOTH
                .iter()
                .map(|&config| ConfigResult {
                    config,
                    scheduling: trial::scheduling(server, config, options),
                    lowest_frames: None,
                    latency_ms: None,
                    trials: Vec::new(),
                })
                .collect(),
            ratio: None,
        }
    }
}

impl LowestResults {
    fn start(options: &Options) -> LowestResults {
        LowestResults {
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            started_at: tessera_measure::results::rfc3339_utc(std::time::SystemTime::now()),
            machine: tessera_measure::MachineInfo::detect().describe(),
            rate: RATE,
            clients: CLIENTS,
            client_load: CLIENT_LOAD,
            interference: trial::INTERFERENCE.to_string(),
            seconds: options.seconds,
            warmup_s: options.warmup,
            frames: options.frames.clone(),
            search: format!(
                "bisection over the {} sizes (at most {} trials per configuration); it assumes \
                 holding is monotonic in the buffer size: a size that holds, every larger one holds",
                options.frames.len(),
                Bisection::max_trials(options.frames.len())
            ),
            servers: Vec::new(),
            total_s: 0.0,
            stopped: None,
        }
    }
}
