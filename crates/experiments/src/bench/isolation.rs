//! Why cells exist, measured (seed 001 §4.4 in miniature): on one core, a
//! periodic task (1333 µs period, 400 µs of work — 128 frames at 96 kHz) and
//! two CPU hogs at the same SCHED_FIFO priority (3 ms of work every 10 ms).
//!
//! Configurations, run back to back:
//! - `fifo`: everything SCHED_FIFO at one priority on the core: the periodic
//!   task waits behind a hog's 3 ms whenever they collide;
//! - `cell, hogs FIFO`: the periodic task in an event-triggered cell (a
//!   SCHED_DEADLINE reservation on that core), the hogs still FIFO there;
//! - `cells for all`: the hogs in cells of their own too (2.5 ms every 10 ms:
//!   with the task's 0.375 they fill 0.875 of the core's 0.90);
//! - `cell, no hogs`: the task in its cell alone, the machine's own floor.
//!
//! Without CAP_SYS_NICE only `plain` (SCHED_OTHER for all) runs, labelled.

use crate::cells::{setup_thread, Cells};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tessera_broker::{BrokerError, ErrorCode, Session};
use tessera_measure::{ConfigurationResult, RunResults};
use tessera_policy::{Budget, CellPolicy, CellRequest, CoreRequest};
use tessera_workloads::{PeriodicSpec, PeriodicStats, PeriodicTask};

pub const PERIOD: Duration = Duration::from_micros(1333);
pub const WORK: Duration = Duration::from_micros(400);
/// The periodic task's reservation by default: its work plus a margin.
pub const TASK_BUDGET: Duration = Duration::from_micros(500);
pub const HOG_PERIOD: Duration = Duration::from_millis(10);
pub const HOG_WORK: Duration = Duration::from_millis(3);
pub const HOG_BUDGET: Duration = Duration::from_micros(2500);
const FIFO_PRIORITY: u32 = 80;
pub const METRIC: &str = "periodic task response time";

/// How the periodic task and the hogs are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Configuration {
    Plain,
    Fifo,
    CellHogsFifo,
    CellsForAll,
    /// The task in its cell with no hogs: the machine's own floor (a
    /// virtual CPU's stalls show here, not in the other rows alone).
    CellAlone,
}

impl Configuration {
    pub fn name(self) -> &'static str {
        match self {
            Configuration::Plain => "plain (SCHED_OTHER)",
            Configuration::Fifo => "fifo (equal priority)",
            Configuration::CellHogsFifo => "cell, hogs FIFO",
            Configuration::CellsForAll => "cells for all",
            Configuration::CellAlone => "cell, no hogs",
        }
    }

    /// What runs here: everything, or `plain` alone without privileges.
    pub fn available(privileged: bool) -> Vec<Configuration> {
        if privileged {
            vec![
                Configuration::Fifo,
                Configuration::CellHogsFifo,
                Configuration::CellsForAll,
                Configuration::CellAlone,
            ]
        } else {
            vec![Configuration::Plain]
        }
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub seconds: f64,
    /// The core everything runs on (default: the last one).
    pub core: Option<usize>,
    /// The periodic task's runtime per period in its cell.
    pub task_budget: Duration,
    pub out_dir: PathBuf,
    pub configurations: Vec<Configuration>,
}

pub struct Outcome {
    pub results: RunResults,
    pub report_dir: PathBuf,
    pub table: String,
}

fn err(message: impl Into<String>) -> BrokerError {
    BrokerError::new(ErrorCode::Experiment, message, "")
}

fn cell(
    name: &str,
    policy: CellPolicy,
    core: usize,
    budget: Option<(Duration, Duration)>,
) -> CellRequest {
    let budget = budget.map(|(q, p)| Budget::new(q.as_nanos() as u64, p.as_nanos() as u64));
    CellRequest::new(name, policy, CoreRequest::List(vec![core]), budget)
}

/// A thread's setup: join a cell (through its own session) and/or set a
/// priority and a core.
fn setup(
    cell: Option<String>,
    fifo: bool,
    core: usize,
) -> impl FnOnce() -> Result<(), String> + Send {
    move || setup_thread(cell.as_deref(), fifo.then_some(FIFO_PRIORITY), Some(core))
}

/// Runs one configuration and returns the periodic task's statistics.
pub fn run_configuration(
    config: Configuration,
    seconds: f64,
    core: usize,
    task_budget: Duration,
) -> Result<PeriodicStats, BrokerError> {
    let mut session = Session::connect()?;
    let mut cells = Cells::default();
    let pid = std::process::id();
    let task_cell = format!("iso-task-{pid}");
    let hog_cells = [format!("iso-hog1-{pid}"), format!("iso-hog2-{pid}")];
    let shared_hogs = format!("iso-hogs-{pid}");
    let (task_in, hogs_in): (Option<String>, Vec<Option<String>>) = match config {
        Configuration::Plain | Configuration::Fifo => (None, vec![None, None]),
        Configuration::CellHogsFifo => {
            (Some(task_cell.clone()), vec![Some(shared_hogs.clone()); 2])
        }
        Configuration::CellsForAll => (
            Some(task_cell.clone()),
            hog_cells.iter().cloned().map(Some).collect(),
        ),
        Configuration::CellAlone => (Some(task_cell.clone()), Vec::new()),
    };
    if task_in.is_some() {
        cells.create(
            &mut session,
            cell(
                &task_cell,
                CellPolicy::EventTriggered,
                core,
                Some((task_budget, PERIOD)),
            ),
        )?;
    }
    match config {
        Configuration::CellHogsFifo => {
            cells.create(
                &mut session,
                cell(&shared_hogs, CellPolicy::BestEffort, core, None),
            )?;
        }
        Configuration::CellsForAll => {
            for h in &hog_cells {
                cells.create(
                    &mut session,
                    cell(
                        h,
                        CellPolicy::EventTriggered,
                        core,
                        Some((HOG_BUDGET, HOG_PERIOD)),
                    ),
                )?;
            }
        }
        _ => {}
    }
    let fifo = config != Configuration::Plain;
    let hogs_fifo = matches!(config, Configuration::Fifo | Configuration::CellHogsFifo);
    let duration = Duration::from_secs_f64(seconds);
    let task_fifo = fifo && task_in.is_none();
    let task = PeriodicTask::spawn(
        PeriodicSpec::new("iso-task", PERIOD, WORK, duration),
        setup(task_in, task_fifo, core),
    )
    .map_err(|e| err(format!("start the periodic task: {e}")))?;
    let mut hogs = Vec::new();
    for (i, h) in hogs_in.into_iter().enumerate() {
        let mut spec =
            PeriodicSpec::new(&format!("iso-hog{}", i + 1), HOG_PERIOD, HOG_WORK, duration);
        // Offset the hogs so that both collide with the task in turn.
        spec.start_after = HOG_PERIOD * i as u32 / 2;
        hogs.push(
            PeriodicTask::spawn(spec, setup(h, hogs_fifo, core))
                .map_err(|e| err(format!("start a hog: {e}")))?,
        );
    }
    // Every thread is in place: release them together, shortly.
    let t0 = tessera_sys::clock::monotonic_ns() + 10_000_000;
    for t in std::iter::once(&task).chain(&hogs) {
        t.start(t0);
    }
    let stats = task.join();
    for h in hogs {
        h.stop();
        if let Some(e) = h.join().setup_error {
            return Err(err(format!("a hog could not be set up: {e}")));
        }
    }
    drop(cells);
    match &stats.setup_error {
        Some(e) => Err(err(format!("the periodic task could not be set up: {e}"))),
        None => Ok(stats),
    }
}

/// Runs every configuration, writes results.json and the report.
pub fn run(opts: &Options, mut progress: impl FnMut(&str)) -> Result<Outcome, BrokerError> {
    let cores = tessera_sys::kernel::online_cpus()?;
    let core = opts.core.unwrap_or(*cores.last().unwrap_or(&0));
    if !cores.contains(&core) {
        return Err(BrokerError::new(
            ErrorCode::Invalid,
            format!("core {core} is not online ({cores:?})"),
            "pick an online core",
        ));
    }
    let mut results =
        RunResults::start("isolation: periodic task vs. equal-priority FIFO hogs on one core");
    results.duration_s = opts.seconds;
    results.baseline = opts.configurations.first().map(|c| c.name().to_string());
    for (i, &config) in opts.configurations.iter().enumerate() {
        progress(&format!(
            "[{}/{}] {} — {:.0} s on core {core}",
            i + 1,
            opts.configurations.len(),
            config.name(),
            opts.seconds
        ));
        // A configuration the broker refuses is reported, not fatal: the
        // others still compare under the same conditions.
        let result = match run_configuration(config, opts.seconds, core, opts.task_budget) {
            Ok(stats) => {
                let (metric, counters, _) =
                    crate::figures::task_metric(&stats, METRIC, Duration::ZERO, Duration::ZERO);
                ConfigurationResult {
                    labels: Default::default(),
                    name: config.name().to_string(),
                    counters,
                    notes: vec![format!(
                        "{} releases, {} missed their deadline ({:.2} %), {} served late by an overrunning job",
                        stats.released(),
                        stats.misses(),
                        100.0 * stats.misses() as f64 / stats.released().max(1) as f64,
                        stats.skipped
                    )],
                    metrics: vec![metric], why: None, }
            }
            Err(e) => ConfigurationResult {
                labels: Default::default(),
                name: config.name().to_string(),
                counters: Vec::new(),
                notes: vec![format!("not run: {e}")],
                metrics: Vec::new(),
                why: None,
            },
        };
        results.configurations.push(result);
    }
    let report_dir = opts.out_dir.clone();
    write(&results, &report_dir)?;
    let table = tessera_measure::summary_table(&results, METRIC);
    Ok(Outcome {
        results,
        report_dir,
        table,
    })
}

fn write(results: &RunResults, dir: &Path) -> Result<(), BrokerError> {
    std::fs::create_dir_all(dir).map_err(|e| err(format!("create {}: {e}", dir.display())))?;
    results
        .save(&dir.join("results.json"))
        .map_err(|e| err(e.to_string()))?;
    tessera_measure::write_report(results, dir).map_err(|e| err(e.to_string()))?;
    Ok(())
}
