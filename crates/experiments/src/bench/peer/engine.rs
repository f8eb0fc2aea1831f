//! tessera's own engine in the run: the graph of `load` nodes (chain or
//! fan-out) on the timer driver, driver + workers at SCHED_FIFO, and its
//! profile turned into the cycles [`super::cycles`] measures.
//!
//! It owns the engine's start and stop within this process; it must never
//! leave the engine running or this process's memory locked after a run.

use std::sync::Arc;
use std::time::Duration;

use tessera_graph::{nodes, Engine, EngineConfig, Graph, Profile, StreamConfig, TimerDriver};
use tessera_measure::LatencyHistogram;
use tessera_sys::sched::{self, Policy};

use super::cycles::{figures, CycleNodes, NodeTimes, Role};
use super::setup::{Figures, Options, PeerError, Topology, HISTOGRAM_MAX_NS, WARM_UP};

pub(super) fn run(options: &Options, topology: Topology) -> Result<Figures, PeerError> {
    let engine_error = |e: &dyn std::fmt::Display| PeerError::Engine(e.to_string());
    let stream =
        StreamConfig::new(options.frames, options.sample_rate).map_err(|e| engine_error(&e))?;
    let graph = graph(options, topology).map_err(|e| engine_error(&e))?;
    let total = WARM_UP.as_secs_f64() + options.seconds;
    let cycles = (total * 1e9 / options.period_ns() as f64 * 1.1) as usize + 64;
    let priority = options.priority;
    let config = EngineConfig {
        workers: options.cores.saturating_sub(1),
        max_nodes: options.loads + 2,
        profile_cycles: cycles,
        thread_setup: Some(Arc::new(move |_| {
            sched::set_policy(0, &Policy::Fifo { priority })?;
            Ok(())
        })),
        ..EngineConfig::default()
    };
    tessera_sys::mem::lock_all_memory().map_err(|e| engine_error(&e))?;
    let engine =
        Engine::start(graph, stream, TimerDriver::new(), config).map_err(|e| engine_error(&e));
    let report = engine.and_then(|engine| {
        std::thread::sleep(Duration::from_secs_f64(total));
        engine.stop().map_err(|e| engine_error(&e))
    });
    // The JACK peer locks its own memory; this process need not stay locked.
    let _ = tessera_sys::mem::unlock_all_memory();
    let report = report?;
    let warm_up_cycles = (WARM_UP.as_nanos() as u64 / options.period_ns()) as usize;
    let samples = cycles_of(&report.profile, topology, warm_up_cycles);
    let mut figures = figures(
        format!("tessera {}", topology.name()),
        topology,
        options,
        &samples,
    );
    let measured = || report.profile.cycles.iter().skip(warm_up_cycles);
    let mut wakeup = LatencyHistogram::new(HISTOGRAM_MAX_NS);
    for cycle in measured() {
        wakeup.record(cycle.wakeup_latency_ns);
    }
    figures.wakeup = Some(wakeup);
    figures.xruns = Some(measured().filter(|c| c.xrun).count() as u64);
    figures.notes.push(format!(
        "timer driver, driver + {} worker(s), SCHED_FIFO {}",
        options.cores.saturating_sub(1),
        options.priority
    ));
    Ok(figures)
}

fn graph(options: &Options, topology: Topology) -> Result<Graph, tessera_graph::GraphError> {
    let mut graph = Graph::new();
    let mut loads = Vec::with_capacity(options.loads);
    for k in 1..=options.loads {
        let load = nodes::Load::new(options.load_fraction);
        loads.push(graph.add_node(&format!("load-{k:02}"), Box::new(load))?);
    }
    match topology {
        Topology::Chain => {
            for pair in loads.windows(2) {
                graph.connect(graph.port(pair[0], "out")?, graph.port(pair[1], "in")?)?;
            }
        }
        Topology::FanOut => {
            let source = graph.add_node("source", Box::new(nodes::Passthrough::new(1)))?;
            let sink = graph.add_node("sink", Box::new(nodes::Passthrough::new(1)))?;
            for &load in &loads {
                graph.connect(graph.port(source, "out0")?, graph.port(load, "in")?)?;
                graph.connect(graph.port(load, "out")?, graph.port(sink, "in0")?)?;
            }
        }
    }
    Ok(graph)
}

/// tessera's profile as per-cycle node timings (absolute ns from the start).
fn cycles_of(profile: &Profile, topology: Topology, skip: usize) -> Vec<CycleNodes> {
    let mut rows = profile.nodes.iter();
    let mut cycles = Vec::with_capacity(profile.cycles.len());
    for (index, cycle) in profile.cycles.iter().enumerate() {
        let nodes: Vec<NodeTimes> = rows
            .by_ref()
            .take(cycle.nodes as usize)
            .map(|n| NodeTimes {
                role: Role::of(n.name.as_str(), topology),
                signalled_ns: n.signalled_ns,
                awake_ns: n.awake_ns,
                finished_ns: n.finished_ns,
                work_ns: n.cpu_ns,
            })
            .collect();
        if index >= skip {
            cycles.push(CycleNodes { start_ns: 0, nodes });
        }
    }
    cycles
}
