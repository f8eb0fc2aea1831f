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
mod search;
mod trial;

pub use report::{summary_table, PLOT_STEM};
pub use search::Bisection;

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tessera_scenario::ServerKind;

/// The candidate buffer sizes of issue 21.
pub const FRAMES: [u32; 7] = [16, 32, 64, 128, 256, 512, 1024];
pub const RATE: u32 = 48_000;
/// Load clients in the chain, and each one's share of the period.
pub const CLIENTS: usize = 10;
pub const CLIENT_LOAD: f64 = 0.05;
/// The goal: guarded holds at no more than half plain's buffer.
pub const GOAL_RATIO: f64 = 2.0;

/// The two ways of running a server that are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Config {
    /// As users run it: `jackd -R -P P`, PipeWire with its module-rt.
    Plain,
    /// The same plus `tessera guard` (its defaults) as a child.
    Guarded,
}

impl Config {
    pub const BOTH: [Config; 2] = [Config::Plain, Config::Guarded];

    pub fn name(self) -> &'static str {
        match self {
            Config::Plain => "plain",
            Config::Guarded => "guarded",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub servers: Vec<ServerKind>,
    /// Candidate sizes, ascending, each a power of two.
    pub frames: Vec<u32>,
    /// Measured seconds per trial.
    pub seconds: f64,
    /// Seconds before the measurement (clients joining, the guard's first
    /// reservations), per trial.
    pub warmup: f64,
    /// jackd's `-P`, and the rt-app tasks' priority on jackd.
    pub jack_priority: u32,
    pub out_dir: PathBuf,
}

impl Options {
    pub fn new(out_dir: PathBuf) -> Options {
        Options {
            servers: vec![ServerKind::Jack, ServerKind::PipeWire],
            frames: FRAMES.to_vec(),
            seconds: 60.0,
            warmup: 2.0,
            jack_priority: 70,
            out_dir,
        }
    }

    /// Refuses options no trial could run with.
    pub fn check(&self) -> Result<(), String> {
        if self.servers.is_empty() {
            return Err("no server to measure".into());
        }
        if self.frames.is_empty() {
            return Err("no buffer size to try".into());
        }
        if let Some(f) = self
            .frames
            .iter()
            .find(|f| !f.is_power_of_two() || !(16..=4096).contains(*f))
        {
            return Err(format!("{f} frames: give powers of two from 16 to 4096"));
        }
        if !self.frames.is_sorted_by(|a, b| a < b) {
            return Err("give the buffer sizes in ascending order, each once".into());
        }
        if !(self.seconds.is_finite() && self.seconds >= 1.0) {
            return Err(format!("--seconds {}: at least 1", self.seconds));
        }
        if !(self.warmup.is_finite() && self.warmup >= 0.0) {
            return Err(format!("--warmup {}: 0 or more", self.warmup));
        }
        Ok(())
    }
}

/// results/lowest-<unix time>.
pub fn default_out_dir() -> PathBuf {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from(format!("results/lowest-{now}"))
}

/// The period of `frames` at [`RATE`], in ms.
pub fn latency_ms(frames: u32) -> f64 {
    f64::from(frames) * 1e3 / f64::from(RATE)
}

/// One trial: a server, a configuration, a buffer size, for `seconds`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub frames: u32,
    pub latency_ms: f64,
    pub held: bool,
    /// What counted against holding (see [`ServerResult::counted`]).
    pub failures: u64,
    /// JACK2's xruns as its clients heard them (PipeWire tells none).
    pub xruns: u64,
    /// Cycles whose last client finished after the period.
    pub late: u64,
    /// Periods the graph skipped (its frame counter jumped).
    pub skipped: u64,
    /// Cycles measured (the warm-up left out).
    pub cycles: u64,
    /// Bandwidth the guard reserved ÷ what its threads used.
    pub reserved_per_used: Option<f64>,
    /// Wall-clock time of the whole trial, setup and teardown included.
    pub duration_s: f64,
    /// Why the trial cannot count as holding although it ran, if so.
    pub refused: Option<String>,
    /// The runner's notes: the guard's ending, the interference's, steal time.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigResult {
    pub config: Config,
    /// The scenario's scheduling of the server ("fifo:70", "guard").
    pub scheduling: String,
    /// The smallest size that held; None if none did (or not searched to
    /// the end).
    pub lowest_frames: Option<u32>,
    pub latency_ms: Option<f64>,
    /// In the order they ran.
    pub trials: Vec<Trial>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerResult {
    pub server: String,
    /// What a trial's failures are on this server, in short ("xruns")
    /// and in full.
    pub unit: String,
    pub counted: String,
    /// The rt-app tasks' SCHED_FIFO priority (the server's).
    pub interference_priority: u32,
    pub configs: Vec<ConfigResult>,
    /// Plain's lowest ÷ guarded's lowest (≥ 2: the goal is met).
    pub ratio: Option<f64>,
}

impl ServerResult {
    pub fn config(&self, config: Config) -> Option<&ConfigResult> {
        self.configs.iter().find(|c| c.config == config)
    }

    /// Fills in the lowest sizes and the ratio from the trials.
    fn conclude(&mut self, searches: &[(Config, Bisection)], frames: &[u32]) {
        for (config, search) in searches {
            let lowest = search.lowest().map(|i| frames[i]);
            if let Some(c) = self.configs.iter_mut().find(|c| c.config == *config) {
                c.lowest_frames = lowest;
                c.latency_ms = lowest.map(latency_ms);
            }
        }
        let lowest = |config| self.config(config).and_then(|c| c.lowest_frames);
        self.ratio = match (lowest(Config::Plain), lowest(Config::Guarded)) {
            (Some(plain), Some(guarded)) => Some(f64::from(plain) / f64::from(guarded)),
            _ => None,
        };
    }
}

/// Everything the benchmark measured: the `--json` output and the report's
/// data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LowestResults {
    pub tool_version: String,
    pub started_at: String,
    pub machine: String,
    pub rate: u32,
    pub clients: usize,
    pub client_load: f64,
    pub interference: String,
    pub seconds: f64,
    pub warmup_s: f64,
    /// The candidate sizes.
    pub frames: Vec<u32>,
    pub search: String,
    pub servers: Vec<ServerResult>,
    pub total_s: f64,
    /// Why the run ended early (interrupted, a trial that could not run).
    pub stopped: Option<String>,
}

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
