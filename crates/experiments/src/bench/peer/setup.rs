//! What a peer run is asked (options, topologies, the servers) and what
//! each configuration gives back (its figures), with the benchmark's error
//! and its way of running a tool. A leaf of the benchmark: the runs of
//! each kind and the table use it, and it uses none of them.

use crate::harness::servers;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tessera_measure::LatencyHistogram;
use tessera_scenario::ServerKind;

/// Largest latency the histograms keep exactly (larger values saturate).
pub(super) const HISTOGRAM_MAX_NS: u64 = 100_000_000;
/// Cycles dropped at the start of each tessera run (threads settle, caches
/// warm), as the JACK peer does before it records.
pub(super) const WARM_UP: Duration = Duration::from_millis(500);

pub const OVERHEAD: &str = "overhead";
pub const SCHEDULING_LATENCY: &str = "scheduling latency";
pub const WAKEUP_LATENCY: &str = "driver wake-up latency";
pub const CYCLE_TIME: &str = "cycle time";
/// Counters of each configuration.
pub const CYCLES: &str = "cycles";
pub const LATE_CYCLES: &str = "late cycles";
pub const XRUNS: &str = "xruns";

/// The peers' servers, in the order they run.
pub const SERVERS: [ServerKind; 2] = [ServerKind::Jack, ServerKind::PipeWire];

/// Configurations in a run: cyclictest, then every topology on tessera and
/// on each server.
pub const CONFIGURATIONS: usize = 1 + Topology::ALL.len() * (1 + SERVERS.len());

/// How the loads are connected; mirrored on every side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    Chain,
    FanOut,
}

impl Topology {
    pub const ALL: [Topology; 2] = [Topology::Chain, Topology::FanOut];

    pub fn name(self) -> &'static str {
        match self {
            Topology::Chain => "chain",
            Topology::FanOut => "fan-out",
        }
    }
}

/// What a run does; [`Options::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct Options {
    /// Measured seconds per configuration.
    pub seconds: f64,
    pub out_dir: PathBuf,
    /// SCHED_FIFO priority of jackd (`-P`), tessera's threads and cyclictest
    /// (PipeWire sets its own).
    pub priority: u32,
    pub loads: usize,
    /// Each load's work as a fraction of the period.
    pub load_fraction: f64,
    pub frames: u32,
    pub sample_rate: u32,
    /// Cores the graph's threads may use (tessera: driver + workers).
    pub cores: usize,
    /// Hold a 0 µs CPU wake-up latency target for the whole run, as
    /// cyclictest does by default (see the module doc).
    pub cpu_latency_target: bool,
    pub jackd: PathBuf,
    pub cyclictest: PathBuf,
    pub peer: PathBuf,
}

impl Options {
    /// 20 s per configuration, priority 70, 10 loads of 5 %, 64 frames at
    /// 48 kHz, on this machine's cores (at most 2 threads: driver + 1 worker).
    pub fn new(out_dir: PathBuf) -> Options {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
        Options {
            seconds: 20.0,
            out_dir,
            priority: 70,
            loads: 10,
            load_fraction: 0.05,
            frames: 64,
            sample_rate: 48_000,
            cores,
            cpu_latency_target: true,
            jackd: "jackd".into(),
            cyclictest: "cyclictest".into(),
            peer: servers::program_beside_us("tessera-jack-peer"),
        }
    }

    pub(super) fn period_ns(&self) -> u64 {
        u64::from(self.frames) * 1_000_000_000 / u64::from(self.sample_rate)
    }

    /// Every program the run starts, with where it comes from.
    pub(super) fn programs(&self) -> Vec<(&Path, &'static str)> {
        let mut programs = vec![
            (self.cyclictest.as_path(), "rt-tests"),
            (self.jackd.as_path(), "jackd2"),
            (self.peer.as_path(), "tessera-jack-peer"),
        ];
        programs.extend(
            ServerKind::PipeWire
                .programs()
                .iter()
                .map(|(program, package)| (Path::new(program), *package)),
        );
        programs
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("{what}: {message}")]
    Tool {
        what: String,
        message: String,
        fix: &'static str,
    },
    #[error("tessera's engine: {0}")]
    Engine(String),
    #[error("{what} gave unreadable output: {message}")]
    Parse { what: String, message: String },
    #[error("writing results: {0}")]
    Write(String),
}

impl PeerError {
    /// How to fix it, for the CLI.
    pub fn fix(&self) -> &'static str {
        match self {
            PeerError::Tool { fix, .. } => fix,
            PeerError::Engine(_) => {
                "run as root (SCHED_FIFO and mlockall need CAP_SYS_NICE and CAP_IPC_LOCK)"
            }
            _ => "",
        }
    }
}

pub(super) fn tool(
    what: impl Into<String>,
    fix: &'static str,
) -> impl FnOnce(std::io::Error) -> PeerError {
    let what = what.into();
    move |e| PeerError::Tool {
        what,
        message: e.to_string(),
        fix,
    }
}

/// Runs `command` to its end; if it fails, its stderr is the error and
/// `fix` the advice.
pub(super) fn run_to_end(
    command: &mut Command,
    what: &str,
    fix: &'static str,
) -> Result<(), PeerError> {
    let output = command
        .output()
        .map_err(tool(format!("running {what}"), INSTALL_FIX))?;
    if output.status.success() {
        return Ok(());
    }
    Err(PeerError::Tool {
        what: what.into(),
        message: String::from_utf8_lossy(&output.stderr).into_owned(),
        fix,
    })
}

pub(super) const INSTALL_FIX: &str =
    "install Debian's packages: apt-get install jackd2 libjack-jackd2-dev \
     pipewire pipewire-bin pipewire-jack rt-tests, and build tessera-jack-peer \
     (cargo build --release -p tessera-jack-peer)";

/// One configuration's per-cycle figures.
#[derive(Debug, Clone)]
pub struct Figures {
    pub name: String,
    pub overhead: LatencyHistogram,
    pub scheduling: LatencyHistogram,
    pub wakeup: Option<LatencyHistogram>,
    pub cycle_time: LatencyHistogram,
    pub cycles: u64,
    /// As the engine counts them; None where it tells nobody (cyclictest,
    /// JACK clients on PipeWire).
    pub xruns: Option<u64>,
    pub late_cycles: u64,
    pub notes: Vec<String>,
}
