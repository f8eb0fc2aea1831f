//! Runs a scenario: its configurations back to back under the same machine
//! conditions — cells created, subject and interference set up and released
//! together, the warm-up left out of the statistics, everything stopped and
//! the cells destroyed before the next configuration — then writes
//! results.json (every sample in a histogram, the raw series for the plots)
//! and the report directory. With [`Options::why`], the subject's threads
//! are traced while each configuration runs and its results say why its
//! deadlines were missed (`crate::why`).
//!
//! It must never judge a result, and never leave a cell, a thread or a
//! process behind: every configuration ends in [`Live::finish`], error or not.

use crate::cells::{cell_name, Cells};
use crate::interference::{Loads, LoadsData};
use crate::subject::{self, Running, Stopped};
use crate::why::{Traced, Tracing};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tessera_broker::{BrokerError, ErrorCode, Session};
use tessera_measure::machine::MachineWatch;
use tessera_measure::{ConfigurationResult, RunResults};
use tessera_scenario::{Configuration, Scenario};
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns};

/// Time between setting up and releasing everything.
const RELEASE_DELAY: Duration = Duration::from_millis(50);
/// How often the progress line is refreshed.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// Where a run stands, for the progress line.
pub struct Progress<'a> {
    pub index: usize,
    pub count: usize,
    pub configuration: &'a str,
    pub elapsed: Duration,
    pub total: Duration,
}

pub struct Outcome {
    pub results: RunResults,
    pub report_dir: PathBuf,
}

/// How a run runs, beyond its scenario.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Trace the subject's threads and attribute every miss to a cause
    /// (`tessera run --why`).
    pub why: bool,
}

fn err(message: impl Into<String>) -> BrokerError {
    BrokerError::new(ErrorCode::Experiment, message, "")
}

/// Runs every configuration of `scenario` and writes results and report
/// into `out_dir`.
pub fn run(
    scenario: &Scenario,
    out_dir: &Path,
    progress: impl FnMut(&Progress),
) -> Result<Outcome, BrokerError> {
    run_with(scenario, out_dir, Options::default(), progress)
}

/// [`run`], as `options` say.
pub fn run_with(
    scenario: &Scenario,
    out_dir: &Path,
    options: Options,
    mut progress: impl FnMut(&Progress),
) -> Result<Outcome, BrokerError> {
    let mut results = RunResults::start(scenario.name.clone());
    results.description = scenario.description.clone();
    results.duration_s = scenario.duration.as_secs_f64();
    results.warmup_s = scenario.warmup.as_secs_f64();
    results.baseline = scenario.baseline.clone();
    let privileged = tessera_broker::Mode::detect() == tessera_broker::Mode::Guaranteed;
    // Real-time threads must not page-fault (as cyclictest's -m): lock the
    // process's memory for the run; without the right, say so in the report.
    let unlocked = tessera_sys::mem::lock_all_memory()
        .err()
        .map(|e| format!("memory not locked: {e}"));
    let count = scenario.configurations.len();
    for (index, config) in scenario.configurations.iter().enumerate() {
        let mut report = |elapsed| {
            progress(&Progress {
                index: index + 1,
                count,
                configuration: &config.name,
                elapsed,
                total: scenario.total(),
            })
        };
        let result = if !privileged && config.needs_privilege() {
            not_run(config, "needs CAP_SYS_NICE (root) for SCHED_FIFO and cells; tessera runs in best-effort mode here".into())
        } else {
            match configuration(scenario, config, options, &mut report, &|| false) {
                Ok(r) => r,
                // A configuration that cannot run is reported; the others
                // still compare under the same conditions.
                Err(e) => not_run(config, e),
            }
        };
        results.configurations.push(ConfigurationResult {
            notes: result.notes.into_iter().chain(unlocked.clone()).collect(),
            ..result
        });
    }
    if unlocked.is_none() {
        let _ = tessera_sys::mem::unlock_all_memory();
    }
    write(&results, out_dir)?;
    Ok(Outcome {
        results,
        report_dir: out_dir.to_path_buf(),
    })
}

fn not_run(config: &Configuration, why: String) -> ConfigurationResult {
    ConfigurationResult {
        labels: Default::default(),
        name: config.name.clone(),
        counters: Vec::new(),
        notes: vec![format!("not run: {why}")],
        metrics: Vec::new(),
        why: None,
    }
}

/// Writes results.json and the report (README.md, PNG and SVG plots).
pub fn write(results: &RunResults, dir: &Path) -> Result<(), BrokerError> {
    std::fs::create_dir_all(dir).map_err(|e| err(format!("create {}: {e}", dir.display())))?;
    results
        .save(&dir.join("results.json"))
        .map_err(|e| err(e.to_string()))?;
    write_report(results, dir)
}

/// The report of saved results: measure's tables and plots, plus each
/// subject's own section.
pub fn write_report(results: &RunResults, dir: &Path) -> Result<(), BrokerError> {
    let files = tessera_measure::write_report(results, dir).map_err(|e| err(e.to_string()))?;
    let extra = subject::report_sections(results, dir).map_err(err)?;
    if !extra.is_empty() {
        let mut text = std::fs::read_to_string(&files.readme).map_err(|e| err(e.to_string()))?;
        text.push_str(&extra);
        std::fs::write(&files.readme, text).map_err(|e| err(e.to_string()))?;
    }
    Ok(())
}

/// Everything started for one configuration.
#[derive(Default)]
struct Live {
    subject: Option<Box<dyn Running>>,
    loads: Loads,
    tracing: Option<Tracing>,
}

/// What the live run left: the subject's result and the interference reports.
struct Finished {
    subject: Option<Box<dyn Stopped>>,
    traced: Option<Traced>,
    loads: LoadsData,
    notes: Vec<String>,
}

impl Live {
    fn start(&mut self, t0: u64) -> Result<(), String> {
        if let Some(subject) = &mut self.subject {
            subject.release(t0)?;
        }
        self.loads.release(t0);
        Ok(())
    }

    /// Ends a subject that would otherwise wait for its run's natural end
    /// (an audio server's clients) before [`Live::finish`].
    fn cut_short(&mut self) {
        if let Some(subject) = &mut self.subject {
            subject.cut_short();
        }
    }

    /// Stops and joins everything, whatever state it is in.
    fn finish(self) -> Finished {
        let traced = self.tracing.map(Tracing::stop);
        let loads = self.loads.stop();
        let mut notes = Vec::new();
        let subject = self.subject.map(|s| s.stop(&mut notes));
        let loads = loads.join();
        Finished {
            subject,
            traced,
            loads,
            notes,
        }
    }
}

/// Runs one configuration of `scenario` by itself — a benchmark's trial —
/// and returns its result without writing anything. Everything it started
/// is stopped before it returns; once `interrupted` says so (checked with
/// the progress), the run is cut short and refused as interrupted.
pub fn run_configuration(
    scenario: &Scenario,
    config: &Configuration,
    progress: &mut dyn FnMut(Duration),
    interrupted: &dyn Fn() -> bool,
) -> Result<ConfigurationResult, String> {
    configuration(scenario, config, Options::default(), progress, interrupted)
}

/// [`run_configuration`], as `options` say.
fn configuration(
    scenario: &Scenario,
    config: &Configuration,
    options: Options,
    progress: &mut dyn FnMut(Duration),
    interrupted: &dyn Fn() -> bool,
) -> Result<ConfigurationResult, String> {
    let mut session = Session::connect().map_err(|e| e.to_string())?;
    let mut cells = Cells::default();
    for name in config.cells() {
        let spec = scenario.cell(name).expect("validated");
        let mut request = spec.request.clone();
        request.name = cell_name(name);
        cells
            .create(&mut session, request)
            .map_err(|e| format!("cell {name:?}: {e}"))?;
    }
    drop(session);
    let mut live = Live::default();
    let started = start_all(scenario, config, options, &mut live);
    // The machine's time over the run alone: setting up and stopping (a
    // tracer's start and its attribution) are not the run's.
    let machine = MachineWatch::start();
    let outcome = started.and_then(|t0| drive(scenario, &mut live, t0, progress, interrupted));
    let taken = machine.taken();
    let mut finished = live.finish();
    finished.notes.extend(taken.note());
    finished.notes.extend(cells.destroy());
    let t0 = outcome?;
    let mut result = collect(scenario, config, t0, finished);
    result.counters.extend(taken.counters());
    Ok(result)
}

/// Sets everything up, starts tracing the subject's threads if asked,
/// and releases it all; returns t0, the run's origin.
fn start_all(
    scenario: &Scenario,
    config: &Configuration,
    options: Options,
    live: &mut Live,
) -> Result<u64, String> {
    let subject = live
        .subject
        .insert(subject::of(scenario, config)?.start(scenario, config)?);
    if options.why || config.why {
        live.tracing = Some(Tracing::start(subject.watched()));
    }
    live.loads.start(scenario, config)?;
    let t0 = monotonic_ns() + RELEASE_DELAY.as_nanos() as u64;
    live.start(t0)?;
    Ok(t0)
}

/// Waits out the run: lets the subject do what is due (a graph's edits),
/// traces the threads it and the periodic loads started since (under
/// `--why`), refreshes
/// progress; cuts the subject short when `interrupted`.
fn drive(
    scenario: &Scenario,
    live: &mut Live,
    t0: u64,
    progress: &mut dyn FnMut(Duration),
    interrupted: &dyn Fn() -> bool,
) -> Result<u64, String> {
    let end = t0 + scenario.total().as_nanos() as u64;
    let tick = PROGRESS_EVERY.as_nanos() as u64;
    sleep_until_monotonic_ns(t0);
    loop {
        let now = monotonic_ns();
        let elapsed = now.saturating_sub(t0);
        let next_due = match &mut live.subject {
            Some(subject) => subject.advance(elapsed)?,
            None => None,
        };
        if let (Some(tracing), Some(subject)) = (&mut live.tracing, &live.subject) {
            let mut threads = subject.watched();
            threads.extend(live.loads.watched());
            tracing.refresh(threads);
        }
        progress(Duration::from_nanos(elapsed));
        if now >= end {
            return Ok(t0);
        }
        if interrupted() {
            live.cut_short();
            return Err("interrupted".into());
        }
        let next_due = next_due.map_or(u64::MAX, |at| t0 + at);
        sleep_until_monotonic_ns((now + tick).min(end).min(next_due));
    }
}

fn collect(
    scenario: &Scenario,
    config: &Configuration,
    t0: u64,
    finished: Finished,
) -> ConfigurationResult {
    let subject = match config.roles.as_slice() {
        [] if config.server.is_some() => config
            .server
            .as_ref()
            .map(|s| s.describe())
            .unwrap_or_default(),
        [] if config.demand.is_some() => config.demand.map(|d| d.describe()).unwrap_or_default(),
        [] => config.subject.describe(),
        roles => roles
            .iter()
            .map(|(r, s)| format!("{r} {}", s.describe()))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let mut notes = vec![format!(
        "subject {subject}; {}",
        match config.interference.as_slice() {
            [] => "no interference".to_string(),
            list => list
                .iter()
                .map(|(n, s)| format!("{n} {}", s.describe()))
                .collect::<Vec<_>>()
                .join(", "),
        }
    )];
    let measured = finished
        .subject
        .map(|subject| subject.measure(scenario, t0))
        .unwrap_or_default();
    let (mut metrics, mut counters) = (measured.metrics, measured.counters);
    notes.extend(measured.notes);
    let (load_metrics, load_counters, load_notes) = finished.loads.measure(scenario, t0);
    metrics.extend(load_metrics);
    counters.extend(load_counters);
    notes.extend(load_notes);
    notes.extend(finished.notes);
    let measured_from = t0 + scenario.warmup.as_nanos() as u64;
    ConfigurationResult {
        name: config.name.clone(),
        counters,
        notes,
        why: finished.traced.map(|t| t.why(&metrics, measured_from)),
        metrics,
        labels: measured.labels,
    }
}

/// Where a run's files go by default: results/<scenario file stem>-<unix time>.
pub fn default_out_dir(scenario: &Scenario) -> PathBuf {
    let stem = Path::new(&scenario.file)
        .file_stem()
        .map_or("scenario".into(), |s| s.to_string_lossy().into_owned());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from(format!("results/{stem}-{now}"))
}
