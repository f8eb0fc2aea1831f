//! What a lowest-buffer run measured — its options, each trial, each
//! configuration's and server's result — as written to lowest.json and read
//! by the report. A leaf of the benchmark: the search, the trials and the
//! report use it, and it uses none of them but the bisection's record.

use super::search::Bisection;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
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
    crate::bench::output::default_dir("lowest")
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
    pub(super) fn conclude(&mut self, searches: &[(Config, Bisection)], frames: &[u32]) {
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
