//! Runs a scenario: its configurations back to back under the same machine
//! conditions — cells created, subject and interference set up and released
//! together, the warm-up left out of the statistics, everything stopped and
//! the cells destroyed before the next configuration — then writes
//! results.json (every sample in a histogram, the raw series for the plots)
//! and the report directory.
//!
//! It must never judge a result, and never leave a cell, a thread or a
//! process behind: every configuration ends in [`Live::finish`], error or not.

use crate::adaptation;
use crate::aes67;
use crate::audio_server;
use crate::cells::{cell_name, setup_for, Cells};
use crate::figures::{latency_histogram, task_metric};
use crate::harness::cyclictest;
use crate::interference::{Loads, LoadsData};
use crate::music;
use crate::netphone;
use crate::probe;
use crate::render;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tessera_broker::{BrokerError, ErrorCode, Session};
use tessera_graph::{
    nodes, Budget, BudgetProbe, CycleRecord, Engine, EngineConfig, Graph, Profile, StreamConfig,
    TimerDriver,
};
use tessera_measure::{
    ConfigurationResult, Counter, LatencyHistogram, Metric, RunResults, Series, Summary,
};
use tessera_scenario::{Configuration, GraphNode, Scenario, Subject, Tool};
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns};
use tessera_workloads::{PeriodicSpec, PeriodicStats, PeriodicTask};

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

fn err(message: impl Into<String>) -> BrokerError {
    BrokerError::new(ErrorCode::Experiment, message, "")
}

/// Runs every configuration of `scenario` and writes results and report
/// into `out_dir`.
pub fn run(
    scenario: &Scenario,
    out_dir: &Path,
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
            match run_configuration(scenario, config, &mut report, &|| false) {
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
        name: config.name.clone(),
        counters: Vec::new(),
        notes: vec![format!("not run: {why}")],
        metrics: Vec::new(),
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

/// The report of saved results: measure's tables and plots, plus the
/// probe's per-load section when the run was a probe.
pub fn write_report(results: &RunResults, dir: &Path) -> Result<(), BrokerError> {
    let files = tessera_measure::write_report(results, dir).map_err(|e| err(e.to_string()))?;
    let mut extra = probe::report_section(results, dir).map_err(err)?;
    extra.push_str(&audio_server::report_section(results));
    extra.push_str(&audio_server::network_app::report_section(results));
    extra.push_str(&netphone::report_section(results));
    extra.push_str(&render::report_section(results, dir).map_err(err)?);
    extra.push_str(&adaptation::report_section(results));
    extra.push_str(&aes67::report_section(results));
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
    subject: Option<SubjectRun>,
    loads: Loads,
}

enum SubjectRun {
    Task(PeriodicTask),
    Music(Box<music::MusicRun>),
    Graph(Box<GraphRun>),
    Cyclictest(cyclictest::Cyclictest),
    AudioServer(Box<audio_server::AudioServerRun>),
    NetworkApp(Box<audio_server::network_app::NetworkAppRun>),
    Netphone(Box<netphone::NetphoneRun>),
    Render(Box<render::RenderRun>),
    Demand(Box<adaptation::DemandRun>),
    Aes67(Box<aes67::Aes67Run>),
}

struct GraphRun {
    engine: Engine,
    /// Nodes not yet added or removed, with the times they are due.
    pending: Vec<(u64, NodeEdit)>,
    previous: Option<String>,
}

enum NodeEdit {
    Add(GraphNode),
    Remove(String),
}

/// What the live run left: the subject's data and the interference reports.
struct Finished {
    subject: Option<SubjectData>,
    loads: LoadsData,
    notes: Vec<String>,
}

enum SubjectData {
    Task(PeriodicStats),
    Music(Box<music::MusicData>),
    Graph(Profile, u64),
    Cyclictest(Result<LatencyHistogram, String>),
    AudioServer(Box<audio_server::AudioServerData>),
    NetworkApp(Box<audio_server::network_app::NetworkAppData>),
    Netphone(Box<netphone::NetphoneData>),
    Render(Box<render::RenderData>),
    Demand(Box<adaptation::DemandData>),
    Aes67(Box<aes67::Aes67Data>),
}

impl Live {
    fn start(&mut self, t0: u64) -> Result<(), String> {
        match &mut self.subject {
            Some(SubjectRun::Task(t)) => t.start(t0),
            Some(SubjectRun::Cyclictest(c)) => c.start(t0),
            Some(SubjectRun::Music(m)) => m.release(t0)?,
            Some(SubjectRun::AudioServer(a)) => a.release(t0)?,
            Some(SubjectRun::NetworkApp(n)) => n.release(t0)?,
            Some(SubjectRun::Netphone(n)) => n.release(t0),
            Some(SubjectRun::Render(r)) => r.release(t0)?,
            Some(SubjectRun::Demand(d)) => d.release(t0)?,
            Some(SubjectRun::Aes67(a)) => a.release(t0),
            _ => {}
        }
        self.loads.release(t0);
        Ok(())
    }

    /// Ends a subject that would otherwise wait for its run's natural end
    /// (an audio server's clients) before [`Live::finish`].
    fn cut_short(&mut self) {
        if let Some(SubjectRun::AudioServer(a)) = &mut self.subject {
            a.cut_short();
        }
    }

    /// Stops and joins everything, whatever state it is in.
    fn finish(self) -> Finished {
        let loads = self.loads.stop();
        let mut notes = Vec::new();
        let subject = self.subject.map(|s| match s {
            SubjectRun::Task(t) => {
                t.stop();
                SubjectData::Task(t.join())
            }
            SubjectRun::Graph(g) => match g.engine.stop() {
                Ok(report) => SubjectData::Graph(report.profile, report.node_panics),
                Err(e) => {
                    notes.push(format!("engine: {e}"));
                    SubjectData::Graph(Profile::default(), 0)
                }
            },
            SubjectRun::Cyclictest(c) => SubjectData::Cyclictest(c.join()),
            SubjectRun::Music(m) => SubjectData::Music(Box::new(m.finish())),
            SubjectRun::AudioServer(a) => SubjectData::AudioServer(Box::new(a.finish())),
            SubjectRun::NetworkApp(n) => SubjectData::NetworkApp(Box::new(n.finish())),
            SubjectRun::Netphone(n) => SubjectData::Netphone(Box::new(n.finish())),
            SubjectRun::Render(r) => SubjectData::Render(Box::new(r.finish())),
            SubjectRun::Demand(d) => SubjectData::Demand(Box::new(d.finish())),
            SubjectRun::Aes67(a) => SubjectData::Aes67(Box::new(a.finish())),
        });
        let mut loads = loads.join();
        notes.append(&mut loads.notes);
        Finished {
            subject,
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
    let steal = tessera_measure::machine::StealWatch::start();
    let mut live = Live::default();
    let outcome = start_all(scenario, config, &mut live)
        .and_then(|t0| drive(scenario, &mut live, t0, progress, interrupted));
    let mut finished = live.finish();
    finished.notes.extend(steal.note());
    finished.notes.extend(cells.destroy());
    let t0 = outcome?;
    Ok(collect(scenario, config, t0, finished))
}

/// Sets everything up and releases it; returns t0, the run's origin.
fn start_all(scenario: &Scenario, config: &Configuration, live: &mut Live) -> Result<u64, String> {
    live.subject = Some(start_subject(scenario, config)?);
    live.loads.start(scenario, config)?;
    let t0 = monotonic_ns() + RELEASE_DELAY.as_nanos() as u64;
    live.start(t0)?;
    Ok(t0)
}

fn start_subject(scenario: &Scenario, config: &Configuration) -> Result<SubjectRun, String> {
    let setup = setup_for(&config.subject, scenario.core);
    let total = scenario.total();
    let task = |name: &str, period, work, deadline| {
        let mut spec = PeriodicSpec::new(name, period, work, total);
        spec.deadline = deadline;
        let task = PeriodicTask::spawn(spec, setup.clone()).map_err(|e| e.to_string())?;
        Ok(SubjectRun::Task(task))
    };
    match (&scenario.subject, config.tool) {
        (
            Subject::Periodic {
                period,
                work,
                deadline,
            },
            _,
        ) => task("subject", *period, *work, *deadline),
        (Subject::Probe { period }, Tool::Tessera) => {
            task("probe", *period, Duration::ZERO, *period)
        }
        (Subject::Probe { period }, Tool::Cyclictest) => {
            Ok(SubjectRun::Cyclictest(cyclictest::Cyclictest::prepare(
                *period,
                config.subject.fifo,
                scenario.core,
                scenario.warmup,
                scenario.duration,
            )))
        }
        (Subject::Graph { .. }, _) => {
            start_graph(scenario, config).map(|g| SubjectRun::Graph(Box::new(g)))
        }
        (Subject::Music { .. }, _) => {
            music::MusicRun::start(scenario, config).map(|m| SubjectRun::Music(Box::new(m)))
        }
        (Subject::AudioServer(a), _) => match a.network {
            Some(app) => audio_server::network_app::NetworkAppRun::start(scenario, config, a, app)
                .map(|n| SubjectRun::NetworkApp(Box::new(n))),
            None => audio_server::AudioServerRun::start(scenario, config)
                .map(|a| SubjectRun::AudioServer(Box::new(a))),
        },
        (Subject::Netphone(_), _) => netphone::NetphoneRun::start(scenario, config)
            .map(|n| SubjectRun::Netphone(Box::new(n))),
        (Subject::Render(_), _) => {
            render::RenderRun::start(scenario, config).map(|r| SubjectRun::Render(Box::new(r)))
        }
        (Subject::ChangingDemand(_), _) => {
            adaptation::DemandRun::start(scenario, config).map(|d| SubjectRun::Demand(Box::new(d)))
        }
        (Subject::Aes67(_), _) => {
            aes67::Aes67Run::start(scenario, config).map(|a| SubjectRun::Aes67(Box::new(a)))
        }
    }
}

/// Budget columns of a graph in a reserved cell: the runtime per period it
/// was given (scaled to the audio period) and the CPU time its threads used.
struct CellBudget {
    set_ns: u64,
}

impl BudgetProbe for CellBudget {
    fn sample(&mut self, cycle: &CycleRecord) -> Budget {
        Budget {
            set_ns: self.set_ns,
            used_ns: cycle.thread_cpu_ns,
        }
    }
}

fn start_graph(scenario: &Scenario, config: &Configuration) -> Result<GraphRun, String> {
    let Subject::Graph {
        frames,
        rate,
        workers,
        deadline,
        nodes,
    } = &scenario.subject
    else {
        unreachable!("called for graph subjects only")
    };
    let stream = StreamConfig::new(*frames, *rate).map_err(|e| e.to_string())?;
    let period_ns = *frames as u64 * 1_000_000_000 / *rate as u64;
    let setup = setup_for(&config.subject, scenario.core);
    let budget_probe = config
        .subject
        .cell
        .as_deref()
        .and_then(|c| scenario.cell(c)?.request.budget)
        .map(|b| {
            Box::new(CellBudget {
                set_ns: b.runtime_ns * period_ns / b.period_ns,
            }) as Box<dyn BudgetProbe>
        });
    let cycles = (scenario.total().as_nanos() as u64 / period_ns) as usize;
    let engine_config = EngineConfig {
        workers: *workers,
        max_nodes: nodes.len() + 2,
        profile_cycles: cycles + cycles / 10 + 1000,
        deadline: *deadline,
        thread_setup: Some(Arc::new(move |_role| setup.clone()().map_err(Into::into))),
        budget_probe,
        ..EngineConfig::default()
    };
    let mut graph = Graph::new();
    graph
        .add_node("system", Box::new(nodes::Passthrough::new(1)))
        .map_err(|e| e.to_string())?;
    let engine = Engine::start(graph, stream, TimerDriver::new(), engine_config)
        .map_err(|e| e.to_string())?;
    let mut pending: Vec<(u64, NodeEdit)> = Vec::new();
    for n in nodes {
        pending.push((n.start.as_nanos() as u64, NodeEdit::Add(n.clone())));
        if let Some(stop) = n.stop {
            pending.push((stop.as_nanos() as u64, NodeEdit::Remove(n.name.clone())));
        }
    }
    pending.sort_by_key(|(at, _)| *at);
    Ok(GraphRun {
        engine,
        pending,
        previous: Some("system".into()),
    })
}

impl GraphRun {
    /// Applies the edits due by `elapsed_ns`: a node joins the end of the
    /// chain (like a JACK client connecting to the previous one), or leaves.
    fn apply_due(&mut self, elapsed_ns: u64) -> Result<(), String> {
        while self
            .pending
            .first()
            .is_some_and(|(at, _)| *at <= elapsed_ns)
        {
            let (_, edit) = self.pending.remove(0);
            let previous = self.previous.clone();
            match edit {
                NodeEdit::Add(node) => {
                    self.engine
                        .edit(|g| {
                            let id =
                                g.add_node(&node.name, Box::new(nodes::Load::new(node.load)))?;
                            if let Some(from) = previous.as_deref().and_then(|p| g.node_by_name(p))
                            {
                                let out = if previous.as_deref() == Some("system") {
                                    "out0"
                                } else {
                                    "out"
                                };
                                g.connect(g.port(from, out)?, g.port(id, "in")?)?;
                            }
                            Ok(())
                        })
                        .map_err(|e| e.to_string())?;
                    self.previous = Some(node.name);
                }
                NodeEdit::Remove(name) => {
                    self.engine
                        .edit(|g| match g.node_by_name(&name) {
                            Some(id) => g.remove_node(id),
                            None => Ok(()),
                        })
                        .map_err(|e| e.to_string())?;
                    if self.previous.as_deref() == Some(name.as_str()) {
                        self.previous = Some("system".into());
                    }
                }
            }
        }
        Ok(())
    }
}

/// Waits out the run: applies graph edits when due, refreshes progress;
/// cuts the subject short when `interrupted`.
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
        if let Some(SubjectRun::Graph(g)) = &mut live.subject {
            g.apply_due(elapsed)?;
        }
        progress(Duration::from_nanos(elapsed));
        if now >= end {
            return Ok(t0);
        }
        if interrupted() {
            live.cut_short();
            return Err("interrupted".into());
        }
        let next_edit = match &live.subject {
            Some(SubjectRun::Graph(g)) => g.pending.first().map_or(u64::MAX, |(at, _)| t0 + at),
            _ => u64::MAX,
        };
        sleep_until_monotonic_ns((now + tick).min(end).min(next_edit));
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
    let mut metrics = Vec::new();
    let mut counters = Vec::new();
    let warmup = scenario.warmup.as_nanos() as u64;
    match finished.subject {
        Some(SubjectData::Task(stats)) => {
            let (metric, task_counters, note) = task_metric(
                &stats,
                subject_metric_name(&scenario.subject),
                Duration::ZERO,
                scenario.warmup,
            );
            metrics.push(metric);
            counters.extend(task_counters);
            notes.push(note);
        }
        Some(SubjectData::Graph(profile, panics)) => {
            let (graph_metrics, graph_counters, note) = graph_metrics(&profile, t0 + warmup, t0);
            metrics.extend(graph_metrics);
            counters.extend(graph_counters);
            counters.push(Counter::count(GRAPH_PANICS, panics));
            notes.push(format!("{note}, {panics} node panics"));
        }
        Some(SubjectData::Cyclictest(Ok(h))) => {
            let period_us = match scenario.subject {
                Subject::Probe { period } => Some(period.as_secs_f64() * 1e6),
                _ => None,
            };
            notes.push(format!(
                "cyclictest: {} samples (its own warm-up excluded: it starts after the warm-up)",
                h.count()
            ));
            counters.push(Counter::count(CYCLICTEST_SAMPLES, h.count()));
            metrics.push(Metric::latency(probe::METRIC, period_us, h));
        }
        Some(SubjectData::Cyclictest(Err(e))) => notes.push(format!("cyclictest failed: {e}")),
        Some(SubjectData::Music(data)) => {
            let (music_metrics, music_counters, music_notes) =
                music::metrics(*data, scenario.warmup);
            metrics.extend(music_metrics);
            counters.extend(music_counters);
            notes.extend(music_notes);
        }
        Some(SubjectData::AudioServer(data)) => {
            let (audio_metrics, audio_counters, audio_notes) =
                audio_server::metrics(*data, scenario, t0);
            metrics.extend(audio_metrics);
            counters.extend(audio_counters);
            notes.extend(audio_notes);
        }
        Some(SubjectData::NetworkApp(data)) => {
            let (app_metrics, app_counters, app_notes) =
                audio_server::network_app::metrics(*data, scenario, t0);
            metrics.extend(app_metrics);
            counters.extend(app_counters);
            notes.extend(app_notes);
        }
        Some(SubjectData::Netphone(data)) => {
            let (phone_metrics, phone_counters, phone_notes) =
                netphone::metrics(*data, scenario.warmup);
            metrics.extend(phone_metrics);
            counters.extend(phone_counters);
            notes.extend(phone_notes);
        }
        Some(SubjectData::Render(data)) => {
            let (render_metrics, render_counters, render_notes) = render::metrics(*data);
            metrics.extend(render_metrics);
            counters.extend(render_counters);
            notes.extend(render_notes);
        }
        Some(SubjectData::Demand(data)) => {
            let (demand_metrics, demand_counters, demand_notes) =
                adaptation::metrics(*data, scenario, t0);
            metrics.extend(demand_metrics);
            counters.extend(demand_counters);
            notes.extend(demand_notes);
        }
        Some(SubjectData::Aes67(data)) => {
            let (aes67_metrics, aes67_counters, aes67_notes) = aes67::metrics(*data);
            metrics.extend(aes67_metrics);
            counters.extend(aes67_counters);
            notes.extend(aes67_notes);
        }
        None => {}
    }
    let (load_metrics, load_counters, load_notes) = finished.loads.measure(scenario, t0);
    metrics.extend(load_metrics);
    counters.extend(load_counters);
    notes.extend(load_notes);
    notes.extend(finished.notes);
    ConfigurationResult {
        name: config.name.clone(),
        counters,
        notes,
        metrics,
    }
}

fn subject_metric_name(subject: &Subject) -> &'static str {
    match subject {
        Subject::Probe { .. } => probe::METRIC,
        _ => "response time",
    }
}

/// Counters of the graph subject and of cyclictest.
const GRAPH_CYCLES: &str = "graph cycles";
const GRAPH_XRUNS: &str = "graph xruns";
const GRAPH_SKIPPED: &str = "graph periods skipped";
const GRAPH_PANICS: &str = "graph node panics";
const CYCLICTEST_SAMPLES: &str = "cyclictest samples";

/// Driver end, period, node end times and budget of the cycles that
/// started after `measure_from` (absolute ns), times in s from `t0`; the
/// cycles measured, xruns and periods skipped.
fn graph_metrics(
    profile: &Profile,
    measure_from: u64,
    t0: u64,
) -> (Vec<Metric>, Vec<Counter>, String) {
    let cycles: Vec<&CycleRecord> = profile
        .cycles
        .iter()
        .filter(|c| c.start_ns >= measure_from)
        .collect();
    let t = |c: &CycleRecord| (c.start_ns - t0) as f64 / 1e9;
    let us = |ns: u64| ns as f64 / 1000.0;
    let deadline_us = cycles.first().map(|c| us(c.deadline_ns));
    let mut driver_end = Series::with_capacity("driver end", "us", cycles.len());
    let mut period = Series::with_capacity("period", "us", cycles.len());
    let mut set = Series::with_capacity("budget set", "us", cycles.len());
    let mut used = Series::with_capacity("budget used", "us", cycles.len());
    for c in &cycles {
        driver_end.push(t(c), us(c.driver_end_ns));
        if c.period_ns > 0 {
            period.push(t(c), us(c.period_ns));
        }
        if c.budget_set_ns > 0 {
            set.push(t(c), us(c.budget_set_ns));
        }
        used.push(t(c), us(c.thread_cpu_ns));
    }
    let start_of: std::collections::HashMap<u64, &CycleRecord> =
        cycles.iter().map(|c| (c.cycle, *c)).collect();
    let mut node_series: Vec<Series> = Vec::new();
    for n in profile
        .nodes
        .iter()
        .filter(|n| start_of.contains_key(&n.cycle))
    {
        let name = n.name.to_string();
        if name == "system" {
            continue;
        }
        let index = match node_series.iter().position(|s| s.name == name) {
            Some(i) => i,
            None => {
                node_series.push(Series::with_capacity(name, "us", cycles.len()));
                node_series.len() - 1
            }
        };
        node_series[index].push(t(start_of[&n.cycle]), us(n.finished_ns));
    }
    let node_ends: Vec<f64> = node_series.iter().flat_map(|s| s.values()).collect();
    let xruns = cycles.iter().filter(|c| c.xrun).count();
    let skipped: u64 = cycles.iter().map(|c| c.skipped_periods).sum();
    let note = format!(
        "{} cycles measured, {xruns} xruns, {skipped} periods skipped",
        cycles.len()
    );
    let counters = Counter::counts([
        (GRAPH_CYCLES, cycles.len() as u64),
        (GRAPH_XRUNS, xruns as u64),
        (GRAPH_SKIPPED, skipped),
    ]);
    let mut metrics = vec![
        Metric {
            series: vec![driver_end],
            ..Metric::latency(
                "driver end",
                deadline_us,
                latency_histogram(cycles.iter().map(|c| c.driver_end_ns)),
            )
        },
        Metric {
            series: vec![period],
            ..Metric::latency(
                "period",
                None,
                latency_histogram(
                    cycles
                        .iter()
                        .filter(|c| c.period_ns > 0)
                        .map(|c| c.period_ns),
                ),
            )
        },
    ];
    if !node_series.is_empty() {
        metrics.push(Metric {
            name: "node end".into(),
            unit: "us".into(),
            deadline: deadline_us,
            summary: Summary::from_samples(&node_ends, deadline_us),
            histogram: None,
            series: node_series,
        });
    }
    let mut budget = vec![used];
    if !set.points.is_empty() {
        budget.insert(0, set);
    }
    metrics.push(Metric {
        name: "budget".into(),
        unit: "us".into(),
        deadline: None,
        summary: Summary::from_samples(
            &budget.last().map(Series::values).unwrap_or_default(),
            None,
        ),
        histogram: None,
        series: budget,
    });
    (metrics, counters, note)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn count(counters: &[Counter], name: &str) -> Option<f64> {
        counters.iter().find(|c| c.name == name).map(|c| c.value)
    }

    #[test]
    fn the_graphs_counters_are_its_measured_cycles() {
        let cycle = |k: u64, xrun, skipped_periods| CycleRecord {
            cycle: k,
            start_ns: k * 1_000_000,
            period_ns: 1_000_000,
            deadline_ns: 1_000_000,
            xrun,
            skipped_periods,
            ..CycleRecord::default()
        };
        let profile = Profile {
            cycles: vec![cycle(0, true, 0), cycle(1, true, 2), cycle(2, false, 1)],
            nodes: Vec::new(),
        };
        let (_, counters, note) = graph_metrics(&profile, 1_000_000, 0);
        assert_eq!(note, "2 cycles measured, 1 xruns, 3 periods skipped");
        assert_eq!(count(&counters, GRAPH_CYCLES), Some(2.0));
        assert_eq!(count(&counters, GRAPH_XRUNS), Some(1.0));
        assert_eq!(count(&counters, GRAPH_SKIPPED), Some(3.0));
    }
}
