//! tessera's LAN music application (seed 000 §3, Fig. 5): the SLABS
//! multitouch interface, emulated, playing the Migrator Synthesizer across
//! UDP, with the response time measured at both ends.
//!
//! - [`protocol`]: the packet format (16 input packets of 2 frames per
//!   package, one output packet of 32 frames × 8 channels back);
//! - [`emulator`]: the SLABS — paced sender, tf − t0 per package;
//! - [`app`]: the Migrator Synthesizer on the graph engine's packet driver,
//!   Δt = t2 − t1 per package, in an event-triggered cell when privileged;
//! - [`run`]: both in one process on loopback, results and a report.
//!
//! This crate owns the application and its measurement. It must never
//! decide what a cell gets beyond asking for one: the broker admits it.

pub mod app;
pub mod emulator;
pub mod protocol;

use std::path::PathBuf;
use std::time::Duration;

use tessera_broker::paths::Paths;
use tessera_broker::{BrokerError, Mode, Session};
use tessera_measure::{ConfigurationResult, LatencyHistogram, Metric, RunResults, Summary};
use tessera_policy::CellRequest;
use tessera_runtime::CellJoin;
use tessera_synth::{Gesture, GesturePlayer, OutputBlock, Synth, SynthConfig, BLOCK, CHANNELS};

use app::{App, AppConfig, AppError, AppReport, DEADLINE};
use emulator::{EmulatorConfig, EmulatorError, EmulatorReport};

/// Metric names in the results.
pub const RESPONSE_METRIC: &str = "Δt (t2 − t1)";
pub const EMULATOR_METRIC: &str = "tf − t0";
pub const LATENESS_METRIC: &str = "send lateness (jitter)";
pub const RATE_METRIC: &str = "achieved packet rate";

/// The cell's budget: this multiple of the measured p99 block time …
const BUDGET_FACTOR: u64 = 2;
/// … plus this for the 16 receives, the send and the engine's own work …
const BUDGET_OVERHEAD_NS: u64 = 150_000;
/// … but at most this share of the package period, in percent.
const BUDGET_CAP_PERCENT: u64 = 80;
/// Blocks timed to size the budget (after as many untimed ones).
const TIMED_BLOCKS: usize = 300;

/// What a run plays, for how long, and where it reports.
#[derive(Debug, Clone)]
pub struct Options {
    pub seconds: f64,
    pub gesture: Gesture,
    pub synth: SynthConfig,
    /// Packages at the start that are not measured (the seed's 1 s).
    pub warmup: Duration,
    /// Run the engine in an event-triggered cell when privileged.
    pub cell: bool,
    /// The broker's state directory (embedded); `None`: the daemon or the
    /// default embedded broker.
    pub broker: Option<Paths>,
    /// Where results.json and the report go; `None`: nowhere.
    pub out_dir: Option<PathBuf>,
}

impl Options {
    /// `seconds` of `gesture` with the seed's synthesizer, 1 s of warm-up,
    /// in a cell when privileged, no report.
    pub fn new(seconds: f64, gesture: Gesture) -> Options {
        Options {
            seconds,
            gesture,
            synth: SynthConfig::default(),
            warmup: Duration::from_secs(1),
            cell: true,
            broker: None,
            out_dir: None,
        }
    }

    fn warmup_packages(&self) -> u64 {
        self.warmup.as_nanos() as u64 / protocol::package_period_ns()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MusicError {
    #[error(transparent)]
    App(#[from] AppError),
    #[error("the emulator: {0}")]
    Emulator(#[from] EmulatorError),
    #[error("the application's cell: {0}")]
    Cell(#[from] BrokerError),
    #[error("the report: {0}")]
    Report(String),
    #[error("the emulator's thread panicked")]
    Panicked,
}

/// What a run measured.
pub struct Outcome {
    pub results: RunResults,
    pub app: AppReport,
    pub emulator: EmulatorReport,
    /// How the engine ran (cell and budget, or why not).
    pub notes: Vec<String>,
    pub report_dir: Option<PathBuf>,
}

/// Starts the application and the emulator in this process on loopback for
/// `options.seconds`, and returns (and writes, given `out_dir`) the results.
pub fn run(options: &Options) -> Result<Outcome, MusicError> {
    let mut notes = Vec::new();
    let cell = match options.cell && Mode::detect() == Mode::Guaranteed {
        true => Some(AppCell::create(options, &mut notes)?),
        false => {
            notes.push("no cell: the engine's thread runs best-effort (SCHED_OTHER)".into());
            None
        }
    };
    let duration = Duration::from_secs_f64(options.seconds);
    let mut emulator_config = EmulatorConfig::new(
        "127.0.0.1:0".parse().expect("a socket address"),
        duration,
        options.gesture.clone(),
    );
    emulator_config.warmup_packages = options.warmup_packages();
    let app = App::start(AppConfig {
        bind: "127.0.0.1:0".parse().expect("a socket address"),
        synth: options.synth.clone(),
        warmup_packages: options.warmup_packages(),
        expected_packages: emulator_config.packages() as usize,
        cell: cell.as_ref().map(|c| c.join.clone()),
    })?;
    emulator_config.to = app.local_addr();
    let emulator = std::thread::Builder::new()
        .name("slabs-send".into())
        .spawn(move || emulator::run(&emulator_config))
        .map_err(|e| MusicError::Report(format!("starting the emulator: {e}")))?
        .join()
        .map_err(|_| MusicError::Panicked)??;
    let app = app.stop()?;
    drop(cell);
    let results = results(options, &app, &emulator, &notes);
    if let Some(dir) = &options.out_dir {
        write(&results, dir)?;
    }
    Ok(Outcome {
        results,
        app,
        emulator,
        notes,
        report_dir: options.out_dir.clone(),
    })
}

fn results(
    options: &Options,
    app: &AppReport,
    emulator: &EmulatorReport,
    notes: &[String],
) -> RunResults {
    let deadline_us = Some(DEADLINE.as_nanos() as f64 / 1000.0);
    let mut results =
        RunResults::start("music: SLABS emulator and Migrator Synthesizer on loopback");
    results.duration_s = options.seconds;
    results.warmup_s = options.warmup.as_secs_f64();
    let rate = emulator.achieved_packet_rate();
    let mut configuration_notes = notes.to_vec();
    configuration_notes.push(format!(
        "{} packages sent, {} answered, {} unexpected answers; {} cycles, {} xruns, {} malformed packages",
        emulator.packages_sent,
        emulator.answered,
        emulator.unexpected,
        app.cycles,
        app.xruns,
        app.malformed_packages
    ));
    configuration_notes.push(format!(
        "pacing: {rate:.1} packets/s (nominal {:.1}), send lateness p50 {:.1} µs, p99 {:.1} µs, \
         schedule slipped by {} packages",
        emulator::nominal_packet_rate(),
        emulator.send_lateness.quantile(0.5) as f64 / 1000.0,
        emulator.send_lateness.quantile(0.99) as f64 / 1000.0,
        emulator.slipped_packages
    ));
    results.configurations.push(ConfigurationResult {
        name: "loopback".into(),
        notes: configuration_notes,
        metrics: vec![
            Metric::latency(RESPONSE_METRIC, deadline_us, app.response.clone()),
            Metric::latency(EMULATOR_METRIC, deadline_us, emulator.response.clone()),
            Metric::latency(LATENESS_METRIC, None, emulator.send_lateness.clone()),
            Metric {
                name: RATE_METRIC.into(),
                unit: "packets/s".into(),
                deadline: None,
                summary: Summary::from_samples(&[rate], None),
                histogram: None,
                series: Vec::new(),
            },
        ],
    });
    results
}

fn write(results: &RunResults, dir: &std::path::Path) -> Result<(), MusicError> {
    let fail = |e: &dyn std::fmt::Display| MusicError::Report(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
    results
        .save(&dir.join("results.json"))
        .map_err(|e| fail(&e))?;
    tessera_measure::write_report(results, dir).map_err(|e| fail(&e))?;
    Ok(())
}

/// The application's event-triggered cell, destroyed when dropped.
struct AppCell {
    session: Session,
    name: String,
    join: CellJoin,
}

impl AppCell {
    /// Sizes the budget from the synthesizer's measured block time and asks
    /// the broker for one reservation per package period.
    fn create(options: &Options, notes: &mut Vec<String>) -> Result<AppCell, MusicError> {
        let name = format!("music-{}", std::process::id());
        let period_ns = protocol::package_period_ns();
        let block_p99 = block_time_p99(&options.synth, &options.gesture)?;
        let wanted = BUDGET_FACTOR * block_p99 + BUDGET_OVERHEAD_NS;
        let budget = wanted.min(period_ns * BUDGET_CAP_PERCENT / 100);
        notes.push(format!(
            "event-triggered cell {name:?} with reclaiming: budget {:.0} µs every {:.1} µs \
             ({BUDGET_FACTOR} × p99 block time {:.0} µs + {} µs for receives and send{})",
            budget as f64 / 1000.0,
            period_ns as f64 / 1000.0,
            block_p99 as f64 / 1000.0,
            BUDGET_OVERHEAD_NS / 1000,
            if budget < wanted {
                ", capped at 80 % of the period"
            } else {
                ""
            }
        ));
        let (mut session, join) = match &options.broker {
            Some(paths) => (
                Session::embedded(paths.clone()),
                CellJoin::embedded(&name, paths.clone()),
            ),
            None => (Session::connect()?, CellJoin::connect(&name)),
        };
        // Reclaiming (GRUB) lets a cycle that outgrows the measured budget
        // use the core's idle time instead of being throttled while packets
        // pile up in the socket.
        let request = CellRequest {
            reclaim: true,
            ..CellRequest::event_triggered(&name, budget, period_ns)
        };
        session.create_cell(request, true)?;
        Ok(AppCell {
            session,
            name,
            join,
        })
    }
}

impl Drop for AppCell {
    fn drop(&mut self) {
        // A thread that just left can hold the cell for an instant.
        if self.session.destroy_cell(&self.name).is_err() {
            std::thread::sleep(Duration::from_millis(200));
            if let Err(e) = self.session.destroy_cell(&self.name) {
                eprintln!("tessera music: cell {:?} not destroyed: {e}", self.name);
            }
        }
    }
}

/// The p99 wall time of one synthesizer block for this input, on the
/// calling thread (outside any cell).
fn block_time_p99(config: &SynthConfig, gesture: &Gesture) -> Result<u64, MusicError> {
    let mut synth = Synth::new(config.clone()).map_err(AppError::from)?;
    let pads = *GesturePlayer::new(gesture.clone()).advance(0.0);
    let mut block: OutputBlock = [[0.0; CHANNELS]; BLOCK];
    let mut times = LatencyHistogram::new(1_000_000_000);
    for i in 0..2 * TIMED_BLOCKS {
        let start = tessera_sys::clock::monotonic_ns();
        synth.process(&pads, &mut block);
        if i >= TIMED_BLOCKS {
            times.record(tessera_sys::clock::monotonic_ns() - start);
        }
    }
    Ok(times.quantile(0.99))
}
