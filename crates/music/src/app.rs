//! The music application (seed 000 Fig. 5) on tessera's cells: the network
//! service (its own cell) receives the SLABS's 16 packets of a package and
//! hands the package over a link to the synth cell, whose communication
//! thread (the engine's driver) starts a cycle of the Migrator graph — 32
//! object nodes run by whichever of the cell's threads is free, then the
//! mixer — and hands the output packet back; the network service writes it
//! and records Δt = t2 − t1 (t1: first packet of the package received, t2:
//! output packet written), one line per package to the console service
//! (its own cell), which writes the package log. OSC controls reach the
//! nodes through [`crate::control`]. Given the synth's cell, the engine's
//! late cycles go to the broker's monitor as that cell's xruns while the
//! application runs ([`crate::report`]).
//!
//! The network role may instead be a client of the network service process
//! (seed 000 Fig. 2, [`ServiceFlow`]): the process owns the socket and
//! carries the SLABS's flow under its QoS spec, and the role takes the
//! datagrams from the flow's channel.
//!
//! This module owns the wiring and the application's report. It must never
//! decide scheduling: each role's threads run the caller's hook first
//! (join a cell, set a FIFO priority, or nothing).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tessera_graph::{
    package_link, Callbacks, Engine, EngineConfig, EngineError, Graph, GraphError, LinkConfig,
    NoCallbacks, PacketConfig, StreamConfig,
};
use tessera_measure::LatencyHistogram;
use tessera_runtime::CellJoin;
use tessera_services::console::{Console, ConsoleBuilder, ConsoleReport};
use tessera_services::net::{client, Class, Flow, FlowRequest, NetError};
use tessera_services::network::{
    NetworkConfig, NetworkError, NetworkPort, NetworkReport, NetworkService, TimingLog,
};
use tessera_synth::{ConfigError, Synth, SynthConfig};

use crate::control::{control_rings, ControlListener, ControlReport};
use crate::nodes::{MixerNode, ObjectNode};
use crate::protocol::{
    FRAMES_PER_PACKAGE, INPUT_PACKET_SIZE, OUTPUT_PACKET_SIZE, PACKETS_PER_PACKAGE, SAMPLE_RATE,
};
use crate::report::XrunReporter;
use crate::windows::{WindowReader, WindowSummary};

/// The response-time deadline: (64 − 2) samples at 44.1 kHz (seed 000 §3.2).
pub const DEADLINE: Duration = Duration::from_nanos(1_405_896);
/// Largest Δt the histogram keeps apart (1 s).
const HISTOGRAM_MAX_NS: u64 = 1_000_000_000;
/// Packages the network service may be ahead of the synth cell (186 ms:
/// a stalled vCPU delays packages instead of losing them).
const LINK_DEPTH: usize = 256;
/// The network socket's receive buffer: about 0.4 s of SLABS packets, so a
/// stalled vCPU queues packets instead of losing them.
const RECEIVE_BUFFER: usize = 4 << 20;
/// Lines the console holds between two of its polls (10 ms ≈ 14 packages).
const CONSOLE_RING: usize = 4096;
/// Cycles the engine's profile keeps in [`Timings::Windows`] (about 3 s):
/// the communication thread's CPU time per cycle is of these.
const RECENT_CYCLES: usize = 4096;

/// A role's thread-start hook: join a cell, set a priority, lock memory.
pub type ThreadHook = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// How each role's threads are set up; `None`: they run as they start.
#[derive(Clone, Default)]
pub struct Roles {
    /// The synth cell: the communication thread and the object workers.
    pub synth: Option<ThreadHook>,
    pub network: Option<ThreadHook>,
    pub console: Option<ThreadHook>,
}

fn service_setup(hook: &Option<ThreadHook>) -> tessera_services::Setup {
    match hook.clone() {
        Some(hook) => Box::new(move || hook()),
        None => Box::new(|| Ok(())),
    }
}

/// The SLABS's flow through the network service process: where the
/// process listens, and the flow asked of it.
#[derive(Debug, Clone)]
pub struct ServiceFlow {
    pub socket: PathBuf,
    pub request: FlowRequest,
}

impl ServiceFlow {
    /// The application's flow of `class` with `reservation_bps` reserved
    /// each way; datagrams of either direction's size; answers later than
    /// the deadline counted by the process.
    pub fn music(socket: PathBuf, class: Class, reservation_bps: u64) -> ServiceFlow {
        ServiceFlow {
            socket,
            request: FlowRequest {
                name: "music".into(),
                class,
                reservation_bps,
                weight: 1,
                limit_bps: None,
                bind: "127.0.0.1:0".parse().expect("an address"),
                peer: None,
                max_datagram: INPUT_PACKET_SIZE.max(OUTPUT_PACKET_SIZE),
                slots: 1024,
                response_deadline_ns: Some(DEADLINE.as_nanos() as u64),
                multicast: None,
                rtp_clock_rate: None,
            },
        }
    }
}

/// How the application runs.
#[derive(Clone)]
pub struct AppConfig {
    /// The network role's socket, e.g. 127.0.0.1:0 (its own, or the one
    /// the network service process binds for its flow).
    pub bind: SocketAddr,
    /// Through the network service process instead of a socket of its own.
    pub service: Option<ServiceFlow>,
    /// Where OSC controls are taken; `None`: no OSC.
    pub osc: Option<SocketAddr>,
    pub synth: SynthConfig,
    /// Packages whose Δt is not kept (warm-up).
    pub warmup_packages: u64,
    /// Packages the run is expected to last: sizes the profile and the
    /// timing log, so every Δt is kept.
    pub expected_packages: usize,
    /// Threads of the synth cell beside the communication thread; they run
    /// the objects. With none, the communication thread runs them itself.
    pub workers: usize,
    pub roles: Roles,
    /// The synth's cell, whose deadline misses (the engine's late cycles)
    /// go to the broker `join` reaches while the application runs;
    /// `None`: not reported.
    pub report: Option<CellJoin>,
    /// Where the console writes the package log
    /// (`t1_ns,complete_ns,t2_ns,dt_ns`);
    /// `None`: the lines are counted, not kept.
    pub package_log: Option<PathBuf>,
    pub timings: Timings,
}

/// What the application keeps of each package's timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Timings {
    /// Every package's t1 and t2, and every cycle's profile: memory in
    /// proportion to `expected_packages` (about 3 KB a package).
    #[default]
    Every,
    /// For runs of an hour: Δt summarised per `window` ([`App::windows`])
    /// and over the run, the last `recent` packages' timings and the last
    /// few seconds of cycles kept. Memory is sized at start and does not
    /// depend on the run's length beyond a summary per window.
    Windows { window: Duration, recent: usize },
}

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("the synthesizer: {0}")]
    Synth(#[from] ConfigError),
    #[error("the graph: {0}")]
    Graph(#[from] GraphError),
    #[error("the synth cell's engine: {0}")]
    Engine(#[from] EngineError),
    #[error("the package link: {0}")]
    Driver(#[from] tessera_graph::DriverError),
    #[error(transparent)]
    Network(#[from] NetworkError),
    #[error(transparent)]
    Service(#[from] NetError),
    #[error("the console service: {0}")]
    Console(String),
    #[error("the OSC socket: {0}")]
    Osc(std::io::Error),
    #[error("the miss reporter's thread: {0}")]
    Report(std::io::Error),
}

/// What the application measured.
#[derive(Debug, Clone)]
pub struct AppReport {
    pub cycles: u64,
    /// Cycles that ended after the deadline, counted by the engine.
    pub xruns: u64,
    pub node_panics: u64,
    pub malformed_packages: u64,
    /// Δt = t2 − t1 of every package after the warm-up, at the network.
    pub response: LatencyHistogram,
    /// Of those, the ones over the deadline (counted on the exact values),
    /// and how many of them had a sender that stalled mid-package
    /// ([`crate::sender_stalled`]).
    pub misses: u64,
    pub sender_misses: u64,
    /// t2 − the package's last packet: Δt without the sender's pacing.
    pub service: LatencyHistogram,
    /// CPU time the communication thread used per cycle (the last
    /// [`RECENT_CYCLES`] in [`Timings::Windows`]).
    pub cycle_cpu: LatencyHistogram,
    /// The network service's counters and every package's t1 and t2
    /// (warm-up included), or only the last ones in [`Timings::Windows`].
    pub network: NetworkReport,
    pub timings: Timings,
    /// [`Timings::Windows`]: the windows [`App::windows`] had not yet
    /// taken, oldest first, and how many the ring had no room for.
    pub windows: Vec<WindowSummary>,
    pub lost_windows: u64,
    pub console: ConsoleReport,
    pub control: Option<ControlReport>,
}

/// The running application.
pub struct App {
    network: NetworkService,
    engine: Engine,
    console: Console,
    osc: Option<ControlListener>,
    reporter: Option<XrunReporter>,
    warmup_packages: u64,
    malformed: Arc<AtomicU64>,
    timings: Timings,
    /// [`Timings::Windows`]'s reader.
    windows: Option<WindowReader>,
}

impl App {
    /// Starts the console, the synth cell's engine and the network service,
    /// each role's threads running its hook first.
    pub fn start(config: AppConfig) -> Result<App, AppError> {
        let synth = Synth::new(config.synth.clone())?;
        let objects = synth.config().objects;
        let (router, rings) = control_rings(objects);
        let malformed = Arc::new(AtomicU64::new(0));
        let graph = migrator_graph(synth, rings, Arc::clone(&malformed))?;
        let (service_end, driver) = package_link(LinkConfig {
            package_size: PACKETS_PER_PACKAGE * INPUT_PACKET_SIZE,
            output_size: OUTPUT_PACKET_SIZE,
            depth: LINK_DEPTH,
        })?;
        let mut console = ConsoleBuilder::new(CONSOLE_RING);
        let mut log = console
            .writer()
            .map_err(|e| AppError::Console(e.to_string()))?;
        log.line(format_args!("t1_ns,complete_ns,t2_ns,dt_ns"));
        let sink: Box<dyn std::io::Write + Send> = match &config.package_log {
            Some(path) => Box::new(
                std::fs::File::create(path)
                    .map_err(|e| AppError::Console(format!("{}: {e}", path.display())))?,
            ),
            None => Box::new(std::io::sink()),
        };
        let console = console
            .start(sink, config.roles.console.clone())
            .map_err(|e| AppError::Console(e.to_string()))?;
        let stream = StreamConfig::new(FRAMES_PER_PACKAGE as u32, SAMPLE_RATE)
            .expect("32 frames at 44.1 kHz is a valid stream");
        let (timing_log, windows, profile_cycles) = match config.timings {
            Timings::Every => (
                TimingLog::Every,
                None,
                config.expected_packages + config.expected_packages / 10 + 1000,
            ),
            Timings::Windows { window, recent } => {
                let (sink, reader) = crate::windows::windows(
                    window,
                    config.warmup_packages,
                    config.expected_packages,
                );
                let sink = Box::new(sink);
                (
                    TimingLog::Bounded { recent, sink },
                    Some(reader),
                    RECENT_CYCLES,
                )
            }
        };
        let (reporter, callbacks) = reporting(config.report.clone())?;
        let thread_setup = config.roles.synth.clone().map(|hook| {
            Arc::new(move |_| hook().map_err(Into::into)) as tessera_graph::ThreadSetup
        });
        let engine = Engine::start(
            graph,
            stream,
            driver,
            EngineConfig {
                workers: config.workers,
                // As in the seed: with workers, the communication thread
                // only starts and ends cycles; alone, it runs the objects.
                driver_runs_nodes: config.workers == 0,
                max_nodes: objects + 1,
                profile_cycles,
                deadline: Some(DEADLINE),
                // 33 small nodes: their CPU-time system calls would cost
                // more than half the synthesizer's own work.
                node_cpu_time: false,
                thread_setup,
                callbacks,
                ..EngineConfig::default()
            },
        )?;
        let network = NetworkService::start(
            NetworkConfig {
                packet: PacketConfig {
                    packets_per_package: PACKETS_PER_PACKAGE,
                    packet_size: INPUT_PACKET_SIZE,
                    output_size: OUTPUT_PACKET_SIZE,
                    reply_to: None,
                    index_at: Some(crate::protocol::INDEX_OFFSET),
                },
                receive_buffer: RECEIVE_BUFFER,
                expected_packages: config.expected_packages + config.expected_packages / 10 + 1000,
                log: timing_log,
            },
            network_port(&config)?,
            service_end,
            service_setup(&config.roles.network),
            Some(log),
        )?;
        let osc = config
            .osc
            .map(|addr| ControlListener::start(addr, router))
            .transpose()
            .map_err(AppError::Osc)?;
        Ok(App {
            network,
            engine,
            console,
            osc,
            reporter,
            warmup_packages: config.warmup_packages,
            malformed,
            timings: config.timings,
            windows,
        })
    }

    /// [`Timings::Windows`]: the windows summarised since the last call,
    /// oldest first (a window is summarised when a package of a later one
    /// is answered). Empty for [`Timings::Every`].
    pub fn windows(&mut self) -> Vec<WindowSummary> {
        self.windows
            .as_mut()
            .map(WindowReader::take)
            .unwrap_or_default()
    }

    /// Where the emulator sends its packets.
    pub fn local_addr(&self) -> SocketAddr {
        self.network.local_addr()
    }

    /// Where OSC controls go, when taken.
    pub fn osc_addr(&self) -> Option<SocketAddr> {
        self.osc.as_ref().map(ControlListener::local_addr)
    }

    /// Packages answered so far.
    pub fn cycles(&self) -> u64 {
        self.engine.cycles()
    }

    /// Stops feeding, then the engine, the console and OSC; summarises.
    pub fn stop(self) -> Result<AppReport, AppError> {
        let network = self.network.stop();
        let run = self.engine.stop()?;
        // After the engine: its last notices are delivered by now.
        if let Some(reporter) = self.reporter {
            reporter.stop();
        }
        let console = self.console.stop().map_err(AppError::Console)?;
        let control = self.osc.map(ControlListener::stop);
        let network = network?;
        let mut reader = self.windows;
        let windows = reader.as_mut().map(WindowReader::take).unwrap_or_default();
        let (totals, lost_windows) = match reader.as_mut().and_then(WindowReader::totals) {
            Some(t) => (
                (t.response, t.service, t.misses, t.sender_misses),
                t.lost_windows,
            ),
            // Windows only keep the last timings: no warm-up among them.
            None => match self.timings {
                Timings::Every => (every_timing(&network, self.warmup_packages), 0),
                Timings::Windows { .. } => (every_timing(&network, 0), 0),
            },
        };
        let (response, service, misses, sender_misses) = totals;
        let mut cycle_cpu = LatencyHistogram::new(HISTOGRAM_MAX_NS);
        for cycle in run
            .profile
            .cycles
            .iter()
            .filter(|c| c.cycle >= self.warmup_packages)
        {
            cycle_cpu.record(cycle.thread_cpu_ns);
        }
        Ok(AppReport {
            cycles: run.cycles,
            xruns: run.xruns,
            node_panics: run.node_panics,
            malformed_packages: self.malformed.load(Ordering::Relaxed),
            response,
            misses,
            sender_misses,
            service,
            cycle_cpu,
            network,
            timings: self.timings,
            windows,
            lost_windows,
            console,
            control,
        })
    }
}

/// The reporter for `cell` and the engine's callbacks feeding it; none
/// without a cell.
fn reporting(
    cell: Option<CellJoin>,
) -> Result<(Option<XrunReporter>, Box<dyn Callbacks>), AppError> {
    match cell {
        Some(join) => {
            let (reporter, count) = XrunReporter::start(join).map_err(AppError::Report)?;
            Ok((Some(reporter), Box::new(count)))
        }
        None => Ok((None, Box::new(NoCallbacks))),
    }
}

/// Δt and the service time of every package after the warm-up, the misses
/// and the sender's share of them.
fn every_timing(
    network: &NetworkReport,
    warmup_packages: u64,
) -> (LatencyHistogram, LatencyHistogram, u64, u64) {
    let mut response = LatencyHistogram::new(HISTOGRAM_MAX_NS);
    let mut service = LatencyHistogram::new(HISTOGRAM_MAX_NS);
    for timing in network.timings.iter().skip(warmup_packages as usize) {
        response.record(timing.response_ns());
        service.record(timing.service_ns());
    }
    let (misses, sender) = crate::count_misses(&network.timings, warmup_packages);
    (response, service, misses, sender)
}

/// The network role's own socket, or its flow of the network service
/// process bound where the role would have bound.
fn network_port(config: &AppConfig) -> Result<NetworkPort, AppError> {
    let Some(plan) = &config.service else {
        return Ok(NetworkPort::Socket(config.bind));
    };
    let request = FlowRequest {
        bind: config.bind,
        ..plan.request.clone()
    };
    let flow = Flow::open(client::connect(&plan.socket)?, &request)?;
    Ok(NetworkPort::Flow(Box::new(flow)))
}

/// The Migrator graph: one object node per pad into the mixer node, which
/// writes the output packet.
pub fn migrator_graph(
    synth: Synth,
    rings: crate::control::ControlRings,
    malformed: Arc<AtomicU64>,
) -> Result<Graph, GraphError> {
    let objects = synth.config().objects;
    let (voices, mixer) = synth.into_parts();
    let mut graph = Graph::new();
    let mixer_id = graph.add_node(
        "mixer",
        Box::new(MixerNode::new(mixer, objects, Some(rings.mixer), malformed)),
    )?;
    for (voice, controls) in voices.into_iter().zip(rings.pads) {
        let pad = voice.pad();
        let id = graph.add_node(
            &format!("object{pad}"),
            Box::new(ObjectNode::new(voice, Some(controls))),
        )?;
        graph.connect(
            graph.port(id, "out")?,
            graph.port(mixer_id, &MixerNode::input(pad))?,
        )?;
    }
    graph.set_packet_writer(Some(mixer_id))?;
    Ok(graph)
}
