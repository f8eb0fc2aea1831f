//! The music application (seed 000 Fig. 5) on tessera's graph engine: a
//! [`PacketDriver`] assembles the SLABS's 16 packets into a package, and one
//! node, [`MigratorNode`], reads the pads' latest frame from it, runs the
//! Migrator Synthesizer for the package's 32 frames and writes the output
//! packet. The engine records Δt = t2 − t1 per cycle (t1: first packet of
//! the package received, t2: output packet written).
//!
//! This module owns the graph and the engine's configuration. The node must
//! never allocate, lock or block: it runs on the engine's real-time thread,
//! which joins the application's cell when one is given.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tessera_graph::{
    Engine, EngineConfig, EngineError, Graph, GraphError, Node, PacketConfig, PacketDriver,
    PortSpec, ProcessContext, StreamConfig,
};
use tessera_measure::LatencyHistogram;
use tessera_runtime::CellJoin;
use tessera_synth::{
    ConfigError, OutputBlock, PadInput, Synth, SynthConfig, BLOCK, CHANNELS, PADS,
};

use crate::protocol::{
    self, FRAMES_PER_PACKAGE, FRAMES_PER_PACKET, INPUT_PACKET_SIZE, OUTPUT_PACKET_SIZE,
    PACKETS_PER_PACKAGE, SAMPLE_RATE,
};

/// The response-time deadline: (64 − 2) samples at 44.1 kHz (seed 000 §3.2).
pub const DEADLINE: Duration = Duration::from_nanos(1_405_896);
/// Largest Δt the histogram keeps apart (1 s).
const HISTOGRAM_MAX_NS: u64 = 1_000_000_000;

/// Reads packages, plays the synthesizer, writes output packets.
pub struct MigratorNode {
    synth: Synth,
    pads: [PadInput; PADS],
    block: OutputBlock,
    /// Packages with a malformed packet: answered with the previous pads.
    malformed: Arc<AtomicU64>,
}

impl MigratorNode {
    pub fn new(synth: Synth, malformed: Arc<AtomicU64>) -> MigratorNode {
        MigratorNode {
            synth,
            pads: [PadInput::default(); PADS],
            block: [[0.0; CHANNELS]; BLOCK],
            malformed,
        }
    }

    /// Takes the pads from the package's newest packet (highest index), its
    /// last frame, and returns that packet's package number. `None` when a
    /// packet is malformed: the pads keep their previous state.
    fn read_package(&mut self, package: &[u8]) -> Option<u32> {
        let mut newest: Option<(u16, u32, &[u8])> = None;
        for packet in package.chunks_exact(INPUT_PACKET_SIZE) {
            let header = protocol::decode_input_header(packet).ok()?;
            if newest.is_none_or(|(index, _, _)| header.index >= index) {
                newest = Some((header.index, header.package, packet));
            }
        }
        let (_, number, packet) = newest?;
        protocol::decode_input_frame(packet, FRAMES_PER_PACKET - 1, &mut self.pads);
        Some(number)
    }
}

impl Node for MigratorNode {
    fn ports(&self) -> Vec<PortSpec> {
        Vec::new()
    }

    fn process(&mut self, ctx: &mut ProcessContext<'_>) {
        let number = self.read_package(ctx.package());
        if number.is_none() {
            self.malformed.fetch_add(1, Ordering::Relaxed);
        }
        self.synth.process(&self.pads, &mut self.block);
        if let Some(out) = ctx.packet_out() {
            // The buffer is the driver's output packet, sized for the format.
            let _ = protocol::encode_output(number.unwrap_or(u32::MAX), &self.block, out);
        }
    }
}

/// How the application runs.
#[derive(Clone)]
pub struct AppConfig {
    /// The packet socket, e.g. 127.0.0.1:0.
    pub bind: SocketAddr,
    pub synth: SynthConfig,
    /// Cycles whose Δt is not kept (warm-up).
    pub warmup_packages: u64,
    /// Packages the run is expected to last: sizes the profile ring, so
    /// every Δt is kept.
    pub expected_packages: usize,
    /// The cell the engine's thread joins; `None`: runs where it is.
    pub cell: Option<CellJoin>,
}

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("the synthesizer: {0}")]
    Synth(#[from] ConfigError),
    #[error("the graph: {0}")]
    Graph(#[from] GraphError),
    #[error("the engine: {0}")]
    Engine(#[from] EngineError),
    #[error("the packet driver: {0}")]
    Driver(#[from] tessera_graph::DriverError),
}

/// What the application measured.
#[derive(Debug, Clone)]
pub struct AppReport {
    pub cycles: u64,
    /// Cycles that ended after the deadline, counted by the engine.
    pub xruns: u64,
    pub node_panics: u64,
    pub malformed_packages: u64,
    /// Δt = t2 − t1 of every cycle after the warm-up.
    pub response: LatencyHistogram,
    /// CPU time the engine's thread used per cycle, from the package's
    /// completion to the output sent (synthesizer, send).
    pub cycle_cpu: LatencyHistogram,
}

/// The running application.
pub struct App {
    engine: Engine,
    addr: SocketAddr,
    warmup_packages: u64,
    malformed: Arc<AtomicU64>,
}

impl App {
    /// Binds the packet socket and starts the engine (its thread joins the
    /// cell first, when one is given).
    pub fn start(config: AppConfig) -> Result<App, AppError> {
        let synth = Synth::new(config.synth)?;
        let malformed = Arc::new(AtomicU64::new(0));
        let mut graph = Graph::new();
        let node = MigratorNode::new(synth, Arc::clone(&malformed));
        let id = graph.add_node("migrator", Box::new(node))?;
        graph.set_packet_writer(Some(id))?;
        let driver = PacketDriver::bind(
            config.bind,
            PacketConfig {
                packets_per_package: PACKETS_PER_PACKAGE,
                packet_size: INPUT_PACKET_SIZE,
                output_size: OUTPUT_PACKET_SIZE,
                reply_to: None,
                index_at: Some(crate::protocol::INDEX_OFFSET),
            },
        )?;
        let addr = driver.local_addr()?;
        let stream = StreamConfig::new(FRAMES_PER_PACKAGE as u32, SAMPLE_RATE)
            .expect("32 frames at 44.1 kHz is a valid stream");
        let setup = config.cell.map(|cell| {
            let hook = cell.hook();
            Arc::new(move |_| hook().map_err(Into::into)) as tessera_graph::ThreadSetup
        });
        let engine_config = EngineConfig {
            // One node: the driver thread runs it, as the seed's single
            // synthesizer thread would; no worker to wake.
            workers: 0,
            max_nodes: 2,
            profile_cycles: config.expected_packages + config.expected_packages / 10 + 1000,
            deadline: Some(DEADLINE),
            thread_setup: setup,
            ..EngineConfig::default()
        };
        let engine = Engine::start(graph, stream, driver, engine_config)?;
        Ok(App {
            engine,
            addr,
            warmup_packages: config.warmup_packages,
            malformed,
        })
    }

    /// Where the emulator sends its packets.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Packages answered so far.
    pub fn cycles(&self) -> u64 {
        self.engine.cycles()
    }

    /// Stops the engine and summarises its profile.
    pub fn stop(self) -> Result<AppReport, AppError> {
        let run = self.engine.stop()?;
        let mut response = LatencyHistogram::new(HISTOGRAM_MAX_NS);
        let mut cycle_cpu = LatencyHistogram::new(HISTOGRAM_MAX_NS);
        for cycle in run
            .profile
            .cycles
            .iter()
            .filter(|c| c.cycle >= self.warmup_packages)
        {
            if let Some(dt) = cycle.response_ns {
                response.record(dt);
            }
            cycle_cpu.record(cycle.thread_cpu_ns);
        }
        Ok(AppReport {
            cycles: run.cycles,
            xruns: run.xruns,
            node_panics: run.node_panics,
            malformed_packages: self.malformed.load(Ordering::Relaxed),
            response,
            cycle_cpu,
        })
    }
}
