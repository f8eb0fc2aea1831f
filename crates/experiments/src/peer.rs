//! tessera against the real peer (issue 3 item 8): Debian's jackd2 with its
//! dummy driver against tessera's timer driver, on the same machine, in one
//! run, 64 frames at 48 kHz, each configuration run after the other:
//!
//! 1. `cyclictest` (rt-tests), one thread at the period and the priority of
//!    the audio threads: what the kernel itself costs a periodic wake-up;
//! 2. tessera's engine ([`TimerDriver`], driver + 1 worker, SCHED_FIFO) on a
//!    chain of N `load` nodes, then on a fan-out (source → N loads in
//!    parallel → sink);
//! 3. jackd2 (`jackd -R -P <prio> -d dummy`) started here under a private
//!    server name, with `tessera-jack-peer` hosting the equivalent JACK
//!    clients, chain then fan-out; jackd is stopped by PID, even on failure.
//!
//! # Figures, per cycle
//!
//! * overhead: (last node finished − cycle start) − the nodes' own work that
//!   no schedule can avoid. Chain: the sum of every node's work. Fan-out: the
//!   larger of the critical path's work (source + longest load + sink) and the
//!   total work divided by the cores the graph can use (2 loads cannot share
//!   a core without taking turns). A node's work is its process callback's
//!   CPU time (thread CPU-time clock), measured the same way on both sides.
//!   tessera's cycle start is the driver's actual wake-up; JACK2's is what
//!   `jack_get_cycle_times` reports, its frame timer's (DLL-filtered) wake-up
//!   estimate, in µs.
//! * scheduling latency: node awake − node signalled (tessera: its profiler;
//!   JACK: client awake − predecessor's callback finished, or cycle start).
//! * driver wake-up latency: actual cycle start − scheduled (tessera's timer
//!   driver), compared with cyclictest's latency.
//! * xruns: as each engine counts them; late cycles: end-to-end > period,
//!   counted the same way on both sides.
//!
//! # Machine state
//!
//! cyclictest asks the kernel for a CPU wake-up latency target of 0 µs
//! (`/dev/cpu_dma_latency`, PM QoS) while it runs: idle CPUs then poll
//! instead of halting, which on a virtual machine saves a VM exit and entry
//! per wake-up. The run holds the same target for every configuration
//! ([`Options::cpu_latency_target`]), so all three see the same machine;
//! without it, cyclictest runs with `--laptop` (no target) like the others.
//!
//! This module owns the run, the child processes and the arithmetic. It must
//! never judge a result pass/fail (it reports ratios against the goals) and
//! never leave a jackd running.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::peer_record::{PeerRecord, PeerRow};
use crate::servers::{self, JackServer, ServerSpec};

use tessera_graph::{nodes, Engine, EngineConfig, Graph, Profile, StreamConfig, TimerDriver};
use tessera_measure::{ConfigurationResult, LatencyHistogram, Metric, RunResults};
use tessera_sys::sched::{self, Policy};

/// Largest latency the histograms keep exactly (larger values saturate).
const HISTOGRAM_MAX_NS: u64 = 100_000_000;
/// Bound of cyclictest's histogram, in µs (its resolution is 1 µs).
const CYCLICTEST_HISTOGRAM_US: u64 = 20_000;
/// Cycles dropped at the start of each tessera run (threads settle, caches
/// warm), as the JACK peer does before it records.
const WARM_UP: Duration = Duration::from_millis(500);

pub const OVERHEAD: &str = "overhead";
pub const SCHEDULING_LATENCY: &str = "scheduling latency";
pub const WAKEUP_LATENCY: &str = "driver wake-up latency";
pub const CYCLE_TIME: &str = "cycle time";

/// How the loads are connected; mirrored on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    Chain,
    FanOut,
}

impl Topology {
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
    /// SCHED_FIFO priority of jackd (`-P`), tessera's threads and cyclictest.
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

    fn period_ns(&self) -> u64 {
        u64::from(self.frames) * 1_000_000_000 / u64::from(self.sample_rate)
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

fn tool(what: impl Into<String>, fix: &'static str) -> impl FnOnce(std::io::Error) -> PeerError {
    let what = what.into();
    move |e| PeerError::Tool {
        what,
        message: e.to_string(),
        fix,
    }
}

const INSTALL_FIX: &str =
    "install Debian's packages: apt-get install jackd2 libjack-jackd2-dev rt-tests, and build tessera-jack-peer (cargo build --release -p tessera-jack-peer)";

/// One configuration's per-cycle figures.
#[derive(Debug, Clone)]
pub struct Figures {
    pub name: String,
    pub overhead: LatencyHistogram,
    pub scheduling: LatencyHistogram,
    pub wakeup: Option<LatencyHistogram>,
    pub cycle_time: LatencyHistogram,
    pub cycles: u64,
    pub xruns: u64,
    pub late_cycles: u64,
    pub notes: Vec<String>,
}

pub struct PeerOutcome {
    pub results: RunResults,
    pub figures: Vec<Figures>,
    /// The text table with ratios.
    pub table: String,
    pub report_dir: PathBuf,
}

/// Runs every configuration once, writes `results.json` and the report into
/// `out_dir`, and returns the figures. `progress` gets one line per step.
pub fn run(options: &Options, mut progress: impl FnMut(&str)) -> Result<PeerOutcome, PeerError> {
    fs::create_dir_all(&options.out_dir).map_err(|e| PeerError::Write(e.to_string()))?;
    let _latency_target = match options.cpu_latency_target {
        true => Some(CpuLatencyTarget::hold_zero()?),
        false => None,
    };
    let mut figures = Vec::new();
    progress(&format!("cyclictest, {:.0} s", options.seconds));
    figures.push(run_cyclictest(options)?);
    for topology in [Topology::Chain, Topology::FanOut] {
        progress(&format!(
            "tessera {}, {:.0} s",
            topology.name(),
            options.seconds
        ));
        figures.push(run_tessera(options, topology)?);
    }
    let server = start_jackd(options)?;
    for topology in [Topology::Chain, Topology::FanOut] {
        progress(&format!(
            "JACK2 {}, {:.0} s",
            topology.name(),
            options.seconds
        ));
        figures.push(run_jack(options, &server, topology)?);
    }
    server.stop();
    let results = results(options, &figures);
    results
        .save(&options.out_dir.join("results.json"))
        .map_err(|e| PeerError::Write(e.to_string()))?;
    tessera_measure::write_report(&results, &options.out_dir)
        .map_err(|e| PeerError::Write(e.to_string()))?;
    let table = table(options, &figures);
    fs::write(options.out_dir.join("figures.txt"), &table)
        .map_err(|e| PeerError::Write(e.to_string()))?;
    Ok(PeerOutcome {
        results,
        figures,
        table,
        report_dir: options.out_dir.clone(),
    })
}

// ------------------------------------------------------------ machine state

const CPU_DMA_LATENCY: &str = "/dev/cpu_dma_latency";

/// A PM QoS CPU latency request: in force while the file stays open.
struct CpuLatencyTarget {
    _file: fs::File,
}

impl CpuLatencyTarget {
    fn hold_zero() -> Result<CpuLatencyTarget, PeerError> {
        use std::io::Write;
        let mut file = fs::OpenOptions::new()
            .write(true)
            .open(CPU_DMA_LATENCY)
            .map_err(tool(format!("opening {CPU_DMA_LATENCY}"), "run as root"))?;
        // The kernel takes a binary s32 in µs.
        file.write_all(&0i32.to_ne_bytes())
            .map_err(tool(format!("writing {CPU_DMA_LATENCY}"), "run as root"))?;
        Ok(CpuLatencyTarget { _file: file })
    }
}

// ---------------------------------------------------------------- cyclictest

fn run_cyclictest(options: &Options) -> Result<Figures, PeerError> {
    let histfile = options.out_dir.join("cyclictest-histogram.txt");
    let interval_us = options.period_ns() / 1_000;
    let mut command = Command::new(&options.cyclictest);
    if !options.cpu_latency_target {
        command.arg("--laptop");
    }
    let output = command
        .args(["-m", "-q", "-t", "1"])
        .arg(format!("-p{}", options.priority))
        .arg(format!("-i{interval_us}"))
        .arg(format!("-D{}", options.seconds.ceil() as u64))
        .arg(format!("-h{CYCLICTEST_HISTOGRAM_US}"))
        .arg(format!("--histfile={}", histfile.display()))
        .output()
        .map_err(tool("running cyclictest", INSTALL_FIX))?;
    if !output.status.success() {
        return Err(PeerError::Tool {
            what: "cyclictest".into(),
            message: String::from_utf8_lossy(&output.stderr).into_owned(),
            fix: "run as root (cyclictest needs SCHED_FIFO and mlockall)",
        });
    }
    let text = fs::read_to_string(&histfile).map_err(tool("reading cyclictest's histogram", ""))?;
    let wakeup = parse_cyclictest_histogram(&text)?;
    Ok(Figures {
        name: "cyclictest".into(),
        cycles: wakeup.count(),
        overhead: LatencyHistogram::new(HISTOGRAM_MAX_NS),
        scheduling: LatencyHistogram::new(HISTOGRAM_MAX_NS),
        cycle_time: LatencyHistogram::new(HISTOGRAM_MAX_NS),
        wakeup: Some(wakeup),
        xruns: 0,
        late_cycles: 0,
        notes: vec![format!(
            "cyclictest -m -q -t 1 -p{} -i{interval_us} (1 µs resolution){}",
            options.priority,
            if options.cpu_latency_target {
                ""
            } else {
                " --laptop"
            }
        )],
    })
}

/// cyclictest's histogram file: `#` comment lines, then `bucket_us count`
/// rows (one count column per thread; one thread here).
pub fn parse_cyclictest_histogram(text: &str) -> Result<LatencyHistogram, PeerError> {
    let parse_error = |message: String| PeerError::Parse {
        what: "cyclictest".into(),
        message,
    };
    let mut histogram = LatencyHistogram::new(HISTOGRAM_MAX_NS);
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let mut fields = line.split_whitespace().map(str::parse::<u64>);
        let (Some(Ok(bucket_us)), Some(Ok(count))) = (fields.next(), fields.next()) else {
            return Err(parse_error(format!("histogram row {line:?}")));
        };
        for _ in 0..count {
            histogram.record(bucket_us * 1_000);
        }
    }
    if histogram.count() == 0 {
        return Err(parse_error("an empty histogram".into()));
    }
    Ok(histogram)
}

// ------------------------------------------------------------------ tessera

fn run_tessera(options: &Options, topology: Topology) -> Result<Figures, PeerError> {
    let engine_error = |e: &dyn std::fmt::Display| PeerError::Engine(e.to_string());
    let stream =
        StreamConfig::new(options.frames, options.sample_rate).map_err(|e| engine_error(&e))?;
    let graph = tessera_graph(options, topology).map_err(|e| engine_error(&e))?;
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
    let samples = tessera_cycles(&report.profile, topology, warm_up_cycles);
    let mut figures = figures(
        format!("tessera {}", topology.name()),
        topology,
        options,
        &samples,
    );
    let mut wakeup = LatencyHistogram::new(HISTOGRAM_MAX_NS);
    for cycle in report.profile.cycles.iter().skip(warm_up_cycles) {
        wakeup.record(cycle.wakeup_latency_ns);
    }
    figures.wakeup = Some(wakeup);
    figures.xruns = report
        .profile
        .cycles
        .iter()
        .skip(warm_up_cycles)
        .filter(|c| c.xrun)
        .count() as u64;
    figures.notes.push(format!(
        "timer driver, driver + {} worker(s), SCHED_FIFO {}",
        options.cores.saturating_sub(1),
        options.priority
    ));
    Ok(figures)
}

fn tessera_graph(
    options: &Options,
    topology: Topology,
) -> Result<Graph, tessera_graph::GraphError> {
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
fn tessera_cycles(profile: &Profile, topology: Topology, skip: usize) -> Vec<CycleNodes> {
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

// --------------------------------------------------------------------- JACK

/// jackd under a private name, stopped by PID when dropped, so an error
/// anywhere in the run still stops it.
fn start_jackd(options: &Options) -> Result<JackServer, PeerError> {
    let spec = ServerSpec {
        frames: options.frames,
        rate: options.sample_rate,
        priority: options.priority,
        core: None,
        log: options.out_dir.join("jackd.log"),
    };
    JackServer::start(&options.jackd, &spec).map_err(|message| PeerError::Tool {
        what: "jackd".into(),
        message,
        fix: INSTALL_FIX,
    })
}

fn run_jack(
    options: &Options,
    server: &JackServer,
    topology: Topology,
) -> Result<Figures, PeerError> {
    let out = options
        .out_dir
        .join(format!("jack-{}.tsv", topology.name()));
    let output = Command::new(&options.peer)
        .envs(server.client_env())
        .args(["--topology", topology.name()])
        .args(["--loads", &options.loads.to_string()])
        .args(["--load", &options.load_fraction.to_string()])
        .args(["--seconds", &options.seconds.to_string()])
        .arg("--out")
        .arg(&out)
        .output()
        .map_err(tool("running tessera-jack-peer", INSTALL_FIX))?;
    if !output.status.success() {
        return Err(PeerError::Tool {
            what: "tessera-jack-peer".into(),
            message: String::from_utf8_lossy(&output.stderr).into_owned(),
            fix: "see jackd.log in the output directory",
        });
    }
    let text = fs::read_to_string(&out).map_err(tool("reading the JACK peer's samples", ""))?;
    let peer = parse_peer_file(&text)?;
    let mut figures = figures(
        format!("JACK2 {}", topology.name()),
        topology,
        options,
        &peer.cycles,
    );
    figures.xruns = peer.xruns;
    figures.notes.push(format!(
        "jackd -R -P {} -d dummy -r {} -p {}; clients: {}",
        options.priority, options.sample_rate, options.frames, peer.hosting
    ));
    Ok(figures)
}

/// What the JACK peer recorded (format: tessera-jack-peer's `record` module).
#[derive(Debug)]
pub struct PeerFile {
    pub cycles: Vec<CycleNodes>,
    pub xruns: u64,
    pub hosting: String,
}

/// Parses the peer's file into cycles in which every client ran; each
/// client is signalled when its predecessors finished (the cycle start for
/// the first), as JACK2's graph order has it.
pub fn parse_peer_file(text: &str) -> Result<PeerFile, PeerError> {
    let parse_error = |message: String| PeerError::Parse {
        what: "tessera-jack-peer".into(),
        message,
    };
    let record = PeerRecord::parse(text).map_err(parse_error)?;
    let topology = match record.topology.as_str() {
        "chain" => Topology::Chain,
        "fan-out" => Topology::FanOut,
        other => return Err(parse_error(format!("topology {other:?}"))),
    };
    let clients: Vec<&str> = record.clients.iter().map(String::as_str).collect();
    let cycles = group_cycles(record.rows.clone(), &clients, topology);
    Ok(PeerFile {
        cycles,
        xruns: record.xruns,
        hosting: record.hosting,
    })
}

/// Groups rows by cycle (frame count), keeps cycles every client recorded,
/// and fills in when each client was signalled.
fn group_cycles(mut rows: Vec<PeerRow>, clients: &[&str], topology: Topology) -> Vec<CycleNodes> {
    rows.sort_by_key(|r| (r.frames, r.client));
    let mut cycles = Vec::new();
    for group in rows.chunk_by(|a, b| a.frames == b.frames) {
        let complete =
            group.len() == clients.len() && group.iter().enumerate().all(|(i, r)| r.client == i);
        if !complete {
            continue;
        }
        // Every client reports the same cycle start; the first client's
        // mapping onto CLOCK_MONOTONIC is used for all.
        let start_ns = group[0].start_ns;
        let mut nodes: Vec<NodeTimes> = group
            .iter()
            .map(|r| NodeTimes {
                role: Role::of(clients[r.client], topology),
                signalled_ns: 0,
                awake_ns: r.awake_ns.saturating_sub(start_ns),
                finished_ns: r.finished_ns.saturating_sub(start_ns),
                work_ns: r.cpu_ns,
            })
            .collect();
        signal_from_predecessors(&mut nodes, topology);
        cycles.push(CycleNodes { start_ns: 0, nodes });
    }
    cycles
}

/// Sets each node's signal time to its predecessors' last finish (graph
/// order: chain in order; fan-out source, loads, sink).
fn signal_from_predecessors(nodes: &mut [NodeTimes], topology: Topology) {
    match topology {
        Topology::Chain => {
            for k in 1..nodes.len() {
                nodes[k].signalled_ns = nodes[k - 1].finished_ns;
            }
        }
        Topology::FanOut => {
            let source_done = nodes
                .iter()
                .find(|n| n.role == Role::Source)
                .map_or(0, |n| n.finished_ns);
            let loads_done = nodes
                .iter()
                .filter(|n| n.role == Role::Load)
                .map(|n| n.finished_ns)
                .max()
                .unwrap_or(source_done);
            for node in nodes.iter_mut() {
                node.signalled_ns = match node.role {
                    Role::Source => 0,
                    Role::Load => source_done,
                    Role::Sink => loads_done,
                };
            }
        }
    }
}

// --------------------------------------------------------------- arithmetic

/// A node's place in the fan-out (every chain node is a load).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Source,
    Load,
    Sink,
}

impl Role {
    fn of(name: &str, topology: Topology) -> Role {
        match (topology, name) {
            (Topology::FanOut, "source") => Role::Source,
            (Topology::FanOut, "sink") => Role::Sink,
            _ => Role::Load,
        }
    }
}

/// A node's times in one cycle, in ns from the cycle's start.
#[derive(Debug, Clone, Copy)]
pub struct NodeTimes {
    pub role: Role,
    pub signalled_ns: u64,
    pub awake_ns: u64,
    pub finished_ns: u64,
    /// CPU time of its process callback.
    pub work_ns: u64,
}

/// One cycle's nodes; times are relative to `start_ns` (0).
#[derive(Debug, Clone)]
pub struct CycleNodes {
    pub start_ns: u64,
    pub nodes: Vec<NodeTimes>,
}

impl CycleNodes {
    /// Cycle start → last node finished.
    pub fn end_to_end_ns(&self) -> u64 {
        let end = self.nodes.iter().map(|n| n.finished_ns).max().unwrap_or(0);
        end.saturating_sub(self.start_ns)
    }

    /// The least time `cores` threads need for this cycle's work in
    /// `topology`: chain, all work in sequence; fan-out, the longer of the
    /// critical path and the total work spread over the cores.
    pub fn unavoidable_work_ns(&self, topology: Topology, cores: usize) -> u64 {
        let total: u64 = self.nodes.iter().map(|n| n.work_ns).sum();
        match topology {
            Topology::Chain => total,
            Topology::FanOut => {
                let of = |role| {
                    self.nodes
                        .iter()
                        .filter(move |n: &&NodeTimes| n.role == role)
                };
                let longest_load = of(Role::Load).map(|n| n.work_ns).max().unwrap_or(0);
                let path: u64 = of(Role::Source)
                    .chain(of(Role::Sink))
                    .map(|n| n.work_ns)
                    .sum::<u64>()
                    + longest_load;
                path.max(total / cores.max(1) as u64)
            }
        }
    }

    /// End-to-end time not explained by the nodes' own work (0 if the work
    /// explains all of it).
    pub fn overhead_ns(&self, topology: Topology, cores: usize) -> u64 {
        self.end_to_end_ns()
            .saturating_sub(self.unavoidable_work_ns(topology, cores))
    }
}

fn figures(name: String, topology: Topology, options: &Options, cycles: &[CycleNodes]) -> Figures {
    let mut overhead = LatencyHistogram::new(HISTOGRAM_MAX_NS);
    let mut scheduling = LatencyHistogram::new(HISTOGRAM_MAX_NS);
    let mut cycle_time = LatencyHistogram::new(HISTOGRAM_MAX_NS);
    let mut late_cycles = 0;
    for cycle in cycles {
        overhead.record(cycle.overhead_ns(topology, options.cores));
        cycle_time.record(cycle.end_to_end_ns());
        late_cycles += u64::from(cycle.end_to_end_ns() > options.period_ns());
        for node in &cycle.nodes {
            scheduling.record(node.awake_ns.saturating_sub(node.signalled_ns));
        }
    }
    Figures {
        name,
        overhead,
        scheduling,
        wakeup: None,
        cycle_time,
        cycles: cycles.len() as u64,
        xruns: 0,
        late_cycles,
        notes: vec![format!(
            "{} loads of {:.0} % of the period, {} cores",
            options.loads,
            options.load_fraction * 100.0,
            options.cores
        )],
    }
}

// ------------------------------------------------------------------ output

fn results(options: &Options, figures: &[Figures]) -> RunResults {
    let mut results = RunResults::start("tessera vs JACK2 (dummy driver) vs cyclictest");
    results.duration_s = options.seconds;
    results.warmup_s = WARM_UP.as_secs_f64();
    results.baseline = Some("JACK2 chain".into());
    let period_us = Some(options.period_ns() as f64 / 1_000.0);
    for f in figures {
        let mut metrics = Vec::new();
        if f.cycle_time.count() > 0 {
            metrics.push(Metric::latency(OVERHEAD, None, f.overhead.clone()));
            metrics.push(Metric::latency(
                SCHEDULING_LATENCY,
                None,
                f.scheduling.clone(),
            ));
            metrics.push(Metric::latency(CYCLE_TIME, period_us, f.cycle_time.clone()));
        }
        if let Some(wakeup) = &f.wakeup {
            metrics.push(Metric::latency(WAKEUP_LATENCY, None, wakeup.clone()));
        }
        let mut notes = f.notes.clone();
        notes.push(format!(
            "{} cycles, {} xruns, {} late cycles",
            f.cycles, f.xruns, f.late_cycles
        ));
        results.configurations.push(ConfigurationResult {
            name: f.name.clone(),
            notes,
            metrics,
        });
    }
    results
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

fn percentiles(h: &LatencyHistogram) -> String {
    if h.count() == 0 {
        return format!("{:>23}", "–");
    }
    format!(
        "{:>7.1} {:>7.1} {:>7.1}",
        us(h.quantile(0.5)),
        us(h.quantile(0.99)),
        us(h.max_ns())
    )
}

/// The run's table: p50/p99/max in µs per configuration, then the ratios the
/// issue's goals are stated in.
pub fn table(options: &Options, figures: &[Figures]) -> String {
    let empty = LatencyHistogram::new(2);
    let mut out = format!(
        "{} frames @ {} Hz (period {:.1} µs), {} loads × {:.0} %, SCHED_FIFO {}, {:.0} s per configuration, \
         CPU latency target {}\n\
         all figures µs: p50 p99 max\n\n{:<18} {:>23} {:>23} {:>23} {:>7} {:>6} {:>6}\n",
        options.frames,
        options.sample_rate,
        options.period_ns() as f64 / 1_000.0,
        options.loads,
        options.load_fraction * 100.0,
        options.priority,
        options.seconds,
        if options.cpu_latency_target { "0 µs (all configurations)" } else { "none" },
        "configuration",
        "overhead",
        "scheduling latency",
        "driver wake-up",
        "cycles",
        "xruns",
        "late"
    );
    for f in figures {
        out.push_str(&format!(
            "{:<18} {} {} {} {:>7} {:>6} {:>6}\n",
            f.name,
            percentiles(&f.overhead),
            percentiles(&f.scheduling),
            percentiles(f.wakeup.as_ref().unwrap_or(&empty)),
            f.cycles,
            f.xruns,
            f.late_cycles
        ));
    }
    out.push_str("\nratios (goal: overhead ≤ 0.50 × JACK2; wake-up p99 ≤ 1.20 × cyclictest)\n");
    let find = |name: &str| figures.iter().find(|f| f.name == name);
    let ratio = |a: u64, b: u64| {
        if b == 0 {
            f64::NAN
        } else {
            a as f64 / b as f64
        }
    };
    for topology in [Topology::Chain, Topology::FanOut] {
        let (Some(t), Some(j)) = (
            find(&format!("tessera {}", topology.name())),
            find(&format!("JACK2 {}", topology.name())),
        ) else {
            continue;
        };
        for (label, a, b) in [
            ("overhead", &t.overhead, &j.overhead),
            ("scheduling latency", &t.scheduling, &j.scheduling),
        ] {
            out.push_str(&format!(
                "  {:<8} {:<19} tessera/JACK2  p50 {:.2}  p99 {:.2}\n",
                topology.name(),
                label,
                ratio(a.quantile(0.5), b.quantile(0.5)),
                ratio(a.quantile(0.99), b.quantile(0.99))
            ));
        }
        if let (Some(c), Some(w)) = (find("cyclictest"), t.wakeup.as_ref()) {
            let cyclic = c.wakeup.as_ref().unwrap_or(&empty);
            out.push_str(&format!(
                "  {:<8} {:<19} tessera/cyclictest  p50 {:.2}  p99 {:.2}\n",
                topology.name(),
                "driver wake-up",
                ratio(w.quantile(0.5), cyclic.quantile(0.5)),
                ratio(w.quantile(0.99), cyclic.quantile(0.99))
            ));
        }
    }
    out
}

/// The directory a run writes to by default: `results/peer-<unix time>`.
pub fn default_out_dir() -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Path::new("results").join(format!("peer-{secs}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(role: Role, signalled: u64, awake: u64, finished: u64, work: u64) -> NodeTimes {
        NodeTimes {
            role,
            signalled_ns: signalled,
            awake_ns: awake,
            finished_ns: finished,
            work_ns: work,
        }
    }

    #[test]
    fn chain_overhead_is_end_to_end_minus_all_work() {
        let cycle = CycleNodes {
            start_ns: 0,
            nodes: vec![
                node(Role::Load, 0, 10, 110, 100),
                node(Role::Load, 110, 130, 230, 100),
            ],
        };
        assert_eq!(cycle.end_to_end_ns(), 230);
        assert_eq!(cycle.overhead_ns(Topology::Chain, 2), 30);
    }

    #[test]
    fn fan_out_overhead_counts_the_cores_the_loads_must_share() {
        let mut nodes = vec![node(Role::Source, 0, 0, 10, 10)];
        nodes.extend((0..4).map(|_| node(Role::Load, 10, 10, 300, 100)));
        nodes.push(node(Role::Sink, 300, 300, 310, 10));
        let cycle = CycleNodes { start_ns: 0, nodes };
        // Path: 10 + 100 + 10 = 120; spread: 420 / 2 = 210.
        assert_eq!(cycle.unavoidable_work_ns(Topology::FanOut, 2), 210);
        assert_eq!(cycle.overhead_ns(Topology::FanOut, 2), 100);
        // On one core only the sum is unavoidable.
        assert_eq!(cycle.unavoidable_work_ns(Topology::FanOut, 1), 420);
        // The critical path wins when cores are plenty.
        assert_eq!(cycle.unavoidable_work_ns(Topology::FanOut, 8), 120);
    }

    #[test]
    fn cyclictest_histogram_rows_become_samples() {
        let text = "# Histogram\n000001 000003\n000002 000001\n# Total: 000000004\n# Max Latencies: 00002\n";
        let h = parse_cyclictest_histogram(text).unwrap();
        assert_eq!(h.count(), 4);
        assert_eq!(h.quantile(0.5), 1_000);
        assert!(parse_cyclictest_histogram("# nothing\n").is_err());
    }

    #[test]
    fn peer_file_gives_complete_cycles_with_predecessor_signals() {
        // Cycle start at JACK time 1000 µs; callbacks woke at JACK 1002 µs =
        // 5_002_000 ns monotonic, so the start maps to 5_000_000 ns.
        let text = "# tessera-jack-peer 1\n# topology chain\n# clients load-01 load-02\n\
                    # xruns 3\n# hosting one process\n\
                    client\tcycle_frames\tcycle_start_us\tjack_awake_us\tawake_ns\tfinished_ns\tcpu_ns\n\
                    0\t64\t1000\t1002\t5002000\t5070000\t66000\n\
                    1\t64\t1000\t1075\t5075000\t5142000\t66000\n\
                    0\t128\t2333\t2335\t6335000\t6400000\t66000\n";
        let peer = parse_peer_file(text).unwrap();
        assert_eq!((peer.xruns, peer.hosting.as_str()), (3, "one process"));
        assert_eq!(peer.cycles.len(), 1, "cycle 128 lacks load-02");
        let nodes = &peer.cycles[0].nodes;
        assert_eq!(nodes[0].awake_ns - nodes[0].signalled_ns, 2_000);
        assert_eq!(nodes[1].signalled_ns, nodes[0].finished_ns);
        assert_eq!(nodes[1].awake_ns - nodes[1].signalled_ns, 5_000);
        assert_eq!(
            peer.cycles[0].overhead_ns(Topology::Chain, 2),
            142_000 - 132_000
        );
    }
}
