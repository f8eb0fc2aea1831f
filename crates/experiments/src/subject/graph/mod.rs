//! The graph subject: tessera's audio graph on a timer driver, its nodes
//! joining the end of a chain (and leaving) at the times the scenario says,
//! like JACK clients connecting to the previous one; measured per cycle
//! (driver end, period, node ends, budget) with its xruns.
//!
//! It owns the engine of one configuration and the edits due while it
//! runs; it must never judge a result.

use crate::cells::{setup_for, SetUp};
use crate::figures::latency_histogram;
use crate::subject::contract::{Measured, Running, Stopped, Subject, Watched};
use std::sync::Arc;
use tessera_graph::{
    nodes, Budget, BudgetProbe, CycleRecord, Engine, EngineConfig, Graph, Profile, StreamConfig,
    ThreadRole, TimerDriver,
};
use tessera_measure::{Counter, Metric, Series, Summary};
use tessera_scenario::{Configuration, GraphNode, Scenario};

/// `[subject] kind = "graph"`.
pub(crate) struct Kind;

impl Subject for Kind {
    fn runs(&self, scenario: &Scenario, _config: &Configuration) -> bool {
        matches!(scenario.subject, tessera_scenario::Subject::Graph { .. })
    }

    fn start(
        &self,
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<Box<dyn Running>, String> {
        Ok(Box::new(start_graph(scenario, config)?))
    }
}

/// The engine running, with the edits still to come.
struct GraphRun {
    engine: Engine,
    /// Nodes not yet added or removed, with the times they are due.
    pending: Vec<(u64, NodeEdit)>,
    previous: Option<String>,
    /// The driver's and the workers' threads, judged by the cycle's
    /// deadline (the driver on the period's grid, the workers from their
    /// wake-up).
    watched: Vec<Watched>,
}

/// The metric a graph cycle's misses count in.
const DRIVER_END: &str = "driver end";

enum NodeEdit {
    Add(GraphNode),
    Remove(String),
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
    let tessera_scenario::Subject::Graph {
        frames,
        rate,
        workers,
        deadline,
        nodes,
    } = &scenario.subject
    else {
        unreachable!("runs graph subjects only")
    };
    let stream = StreamConfig::new(*frames, *rate).map_err(|e| e.to_string())?;
    let period_ns = *frames as u64 * 1_000_000_000 / *rate as u64;
    let (driver, worker_threads) = (SetUp::default(), SetUp::default());
    let setups = [
        driver.recording(setup_for(&config.subject, scenario.core)),
        worker_threads.recording(setup_for(&config.subject, scenario.core)),
    ];
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
        thread_setup: Some(Arc::new(move |role| {
            let setup = match role {
                ThreadRole::Driver => &setups[0],
                _ => &setups[1],
            };
            setup.clone()().map_err(Into::into)
        })),
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
    let period = std::time::Duration::from_nanos(period_ns);
    let judged = |tid, grid| Watched {
        tid,
        metric: DRIVER_END.into(),
        deadline: Some(deadline.unwrap_or(period)),
        period: grid,
        budget: None,
        chain: None,
        thread_metric: None,
    };
    // The engine's start returns once its threads are set up.
    let mut watched: Vec<Watched> = driver
        .tids()
        .into_iter()
        .map(|t| judged(t, Some(period)))
        .collect();
    watched.extend(worker_threads.tids().into_iter().map(|t| judged(t, None)));
    Ok(GraphRun {
        engine,
        pending,
        previous: Some("system".into()),
        watched,
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

impl Running for GraphRun {
    fn release(&mut self, _t0: u64) -> Result<(), String> {
        // The timer driver runs from its start; the run measures from t0.
        Ok(())
    }

    fn advance(&mut self, elapsed_ns: u64) -> Result<Option<u64>, String> {
        self.apply_due(elapsed_ns)?;
        Ok(self.pending.first().map(|(at, _)| *at))
    }

    fn watched(&self) -> Vec<Watched> {
        self.watched.clone()
    }

    fn stop(self: Box<Self>, notes: &mut Vec<String>) -> Box<dyn Stopped> {
        Box::new(match self.engine.stop() {
            Ok(report) => GraphData {
                profile: report.profile,
                panics: report.node_panics,
            },
            Err(e) => {
                notes.push(format!("engine: {e}"));
                GraphData {
                    profile: Profile::default(),
                    panics: 0,
                }
            }
        })
    }
}

/// What the engine recorded: every cycle and node, and its node panics.
struct GraphData {
    profile: Profile,
    panics: u64,
}

impl Stopped for GraphData {
    fn measure(self: Box<Self>, scenario: &Scenario, t0: u64) -> Measured {
        let warmup = scenario.warmup.as_nanos() as u64;
        let (metrics, mut counters, note) = graph_metrics(&self.profile, t0 + warmup, t0);
        counters.push(Counter::count(GRAPH_PANICS, self.panics));
        Measured::new(
            metrics,
            counters,
            vec![format!("{note}, {} node panics", self.panics)],
        )
    }
}

/// Counters of the graph subject.
const GRAPH_CYCLES: &str = "graph cycles";
const GRAPH_XRUNS: &str = "graph xruns";
const GRAPH_SKIPPED: &str = "graph periods skipped";
const GRAPH_PANICS: &str = "graph node panics";

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
    let mut driver_end = Series::with_capacity(DRIVER_END, "us", cycles.len());
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
                DRIVER_END,
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
