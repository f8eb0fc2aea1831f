//! An AES67 host's audio: a graph, on its engine's threads (in a cell, if
//! the caller's setup hook puts them there), whose nodes receive streams
//! from and send streams through the network service, routed as a host in
//! a chain forwards them, or as the end of a round trip that times a
//! marker through it, or as a tone generator. Its cycles fall on the
//! media clock's grid of packet times, so the hosts of one clock cycle in
//! phase and a receiver has its whole link offset for each packet. A
//! thread follows the system clock's steps (ptp4l steps it once when it
//! locks): the media clock's offset is taken again, the stream nodes
//! re-anchor and the cycles move to the new grid.
//!
//! It owns the graph, the flows its nodes hold (one connection to the
//! service each) and what it counts: per stream the jitter buffer's and
//! the sender's counts, the marker latencies, the engine's xruns with the
//! nodes they are attributed to. Where its threads run is the caller's
//! setup hook; it never creates cells.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::{ClockFollower, PtpFollowing};
use super::{MediaClock, Playout, StreamCounters, StreamCounts, AGE_BUCKET_NS};
use super::{Path, SourceSettings, StreamSink, StreamSource, StreamSpec};
use crate::net::{client, Flow, FlowRequest, NetError};
use tessera_graph::nodes::{marker_pair, MarkerCounts, Sine};
use tessera_graph::ring::Consumer;
use tessera_graph::{
    Callbacks, Engine, EngineConfig, Graph, GraphError, NodeId, StreamConfig, ThreadSetup,
    TimerDriver, XrunReport,
};

/// How the host's graph connects its streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Route {
    /// Received stream k is sent on as sent stream k, channel by channel:
    /// a host in a chain.
    Forward,
    /// A marker every `interval_frames` goes out on channel 1 of each sent
    /// stream k and is looked for on channel 1 of received stream k: the
    /// end of a round trip.
    Marker { interval_frames: u64 },
    /// A tone on every channel of every sent stream; received streams are
    /// played into nothing (their counts still tell what came).
    Tone,
}

/// What a host runs.
#[derive(Clone)]
pub struct HostConfig {
    /// Names the host's nodes in reports.
    pub name: String,
    /// The network service's socket.
    pub service: PathBuf,
    /// This host's address on the streams' network.
    pub interface: Ipv4Addr,
    /// Its address on the second network, for streams with a second path
    /// (ST 2022-7).
    pub secondary_interface: Option<Ipv4Addr>,
    pub receive: Vec<StreamSpec>,
    pub send: Vec<StreamSpec>,
    pub route: Route,
    /// Frames per cycle (the stream's packet size is the natural choice).
    pub frames: u32,
    pub sample_rate: u32,
    /// How far behind the clock a received stream plays (AES67's link
    /// offset), frames.
    pub latency_frames: u32,
    /// Packets each jitter buffer holds: at least the latency and a packet
    /// ([`buffer_for`] gives room for a burst as long as the latency).
    pub buffer_packets: usize,
    pub playout: Playout,
    pub clock: MediaClock,
    /// Engine threads besides the driver.
    pub workers: usize,
    pub setup: Option<ThreadSetup>,
}

/// Fewest packets [`buffer_for`] gives a jitter buffer.
pub const MIN_BUFFER_PACKETS: usize = 16;

/// The jitter buffer for a latency: twice the packets the latency and one
/// more packet span — a sender that bursts a latency's worth at once still
/// fits — and at least [`MIN_BUFFER_PACKETS`].
pub fn buffer_for(latency_frames: u32, frames_per_packet: u32) -> usize {
    let packets = (latency_frames + frames_per_packet).div_ceil(frames_per_packet.max(1));
    (packets as usize * 2).max(MIN_BUFFER_PACKETS)
}

/// The buffer a received stream needs when `buffer_packets` do not hold
/// the latency and a packet (every packet would come too early); None when
/// they do.
pub fn buffer_short(
    buffer_packets: usize,
    latency_frames: u32,
    frames_per_packet: u32,
) -> Option<usize> {
    let held = buffer_packets as u64 * u64::from(frames_per_packet);
    (held < u64::from(latency_frames) + u64::from(frames_per_packet))
        .then(|| buffer_for(latency_frames, frames_per_packet))
}

/// Missed cycles the host's graph runs late rather than skips: the graph
/// has no device to keep pace with, only receivers that wait a link offset
/// for its packets and jitter buffers that hold what came while it
/// stalled. As many as the offset spans: beyond it, its audio is of no
/// use to anyone.
fn catch_up_periods(config: &HostConfig) -> u64 {
    u64::from(config.latency_frames.div_ceil(config.frames.max(1)))
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("stream {stream:?}: {source}")]
    Flow {
        stream: String,
        #[source]
        source: NetError,
    },
    #[error("the host's graph: {0}")]
    Graph(#[from] GraphError),
    #[error("the host's engine: {0}")]
    Engine(String),
    #[error("{0}")]
    Config(String),
}

/// One stream's counts as a report shows them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StreamReport {
    pub name: String,
    pub direction: &'static str,
    pub counts: StreamCounts,
    /// Received packets per age bucket (`AGE_BUCKET_NS` wide): empty for a
    /// sent stream.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub packet_ages: Vec<u64>,
}

impl StreamReport {
    /// The age at arrival below which a share `q` (0–1) of the received
    /// packets came, ns (its bucket's upper edge); `None` if none came.
    pub fn packet_age_ns(&self, q: f64) -> Option<u64> {
        let total: u64 = self.packet_ages.iter().sum();
        let rank = ((total as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        let bucket = self.packet_ages.iter().position(|&n| {
            seen += n;
            seen >= rank
        })?;
        Some((bucket as u64 + 1) * AGE_BUCKET_NS)
    }
}

/// What a host measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct HostReport {
    pub streams: Vec<StreamReport>,
    /// Marker latencies, ns, in the order measured.
    pub latencies_ns: Vec<u64>,
    pub markers_written: u64,
    pub markers_lost: u64,
    pub cycles: u64,
    pub xruns: u64,
    /// Xruns each node was named late in.
    pub late_nodes: BTreeMap<String, u64>,
    /// The media clock, in words (a loss of PTP said).
    pub clock: String,
    /// A media clock following a free-running ptp4l: its state.
    pub ptp: Option<PtpFollowing>,
}

/// A marker path's latencies as they come, and its counts.
type Marker = (Consumer<u64>, Arc<MarkerCounts>);

/// A running host.
pub struct Host {
    engine: Engine,
    measures: Measures,
    /// Keeps the media clock's offset through steps (and a free-running
    /// ptp4l's measurements) while the host runs.
    _follower: ClockFollower,
}

/// What a host's nodes count, read apart from its engine (so that a
/// stopped host's report is read after the engine's last cycle).
struct Measures {
    streams: Vec<(String, &'static str, Arc<StreamCounters>)>,
    markers: Vec<Marker>,
    latencies_ns: Vec<u64>,
    late_nodes: Arc<Mutex<BTreeMap<String, u64>>>,
    clock: MediaClock,
}

/// Counts the nodes each xrun names (on the notification thread).
struct XrunTally(Arc<Mutex<BTreeMap<String, u64>>>);

impl Callbacks for XrunTally {
    fn xrun(&mut self, report: &XrunReport) {
        let mut tally = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for late in report.late_nodes() {
            *tally.entry(late.name.to_string()).or_default() += 1;
        }
    }
}

/// The stream's flows, one per path, each requested by `request` on the
/// path's interface.
fn open_flows(
    config: &HostConfig,
    stream: &StreamSpec,
    request: impl Fn(&StreamSpec, (Path, SocketAddrV4), Ipv4Addr) -> FlowRequest,
) -> Result<Vec<Flow>, HostError> {
    let failed = |source| HostError::Flow {
        stream: stream.name.clone(),
        source,
    };
    stream
        .paths()
        .map(|(path, address)| {
            let interface = match path {
                Path::Primary => config.interface,
                Path::Secondary => config.secondary_interface.ok_or_else(|| {
                    HostError::Config(format!(
                        "stream {:?} has a second path but the host no second interface; \
                         fix: give the host its address on the second network",
                        stream.name
                    ))
                })?,
            };
            let socket = client::connect(&config.service).map_err(failed)?;
            Flow::open(socket, &request(stream, (path, address), interface)).map_err(failed)
        })
        .collect()
}

impl Host {
    /// Opens a flow per stream, builds the graph and starts it.
    pub fn start(config: HostConfig) -> Result<Host, HostError> {
        check(&config)?;
        let follower = config
            .clock
            .follow()
            .map_err(|e| HostError::Config(format!("following the media clock: {e}")))?;
        let mut graph = Graph::new();
        let mut streams = Vec::new();
        let mut sources = Vec::new();
        for spec in &config.receive {
            let flows = open_flows(&config, spec, StreamSpec::receive_request)?;
            let settings = SourceSettings {
                buffer_packets: config.buffer_packets,
                latency_frames: config.latency_frames,
                playout: config.playout,
                payload_type: spec.described.then_some(spec.payload_type),
            };
            let (node, counters) =
                StreamSource::new(flows, spec.format, settings, config.clock.clone());
            let name = format!("{}:rx:{}", config.name, spec.name);
            sources.push(graph.add_node(&name, Box::new(node))?);
            streams.push((spec.name.clone(), "in", counters));
        }
        let mut sinks = Vec::new();
        for (k, spec) in config.send.iter().enumerate() {
            let flows = open_flows(&config, spec, StreamSpec::send_request)?;
            let ssrc = ssrc_of(&config.name, k);
            let (node, counters) = StreamSink::new(
                flows,
                spec.format,
                spec.payload_type,
                ssrc,
                config.clock.clone(),
            );
            let name = format!("{}:tx:{}", config.name, spec.name);
            sinks.push(graph.add_node(&name, Box::new(node))?);
            streams.push((spec.name.clone(), "out", counters));
        }
        let markers = route(&mut graph, &config, &sources, &sinks)?;
        let stream = StreamConfig::new(config.frames, config.sample_rate)
            .map_err(|e| HostError::Config(e.to_string()))?;
        let late_nodes = Arc::new(Mutex::new(BTreeMap::new()));
        let engine = Engine::start(
            graph,
            stream,
            TimerDriver::catching_up(catch_up_periods(&config))
                .on_grid(Arc::new(config.clock.clone())),
            EngineConfig {
                workers: config.workers,
                // A marker and a probe per stream pair, or a tone per sink.
                max_nodes: (sources.len() + sinks.len()) * 2 + 8,
                node_cpu_time: false,
                thread_setup: config.setup.clone(),
                callbacks: Box::new(XrunTally(late_nodes.clone())),
                ..EngineConfig::default()
            },
        )
        .map_err(|e| HostError::Engine(e.to_string()))?;
        Ok(Host {
            engine,
            measures: Measures {
                streams,
                markers,
                latencies_ns: Vec::new(),
                late_nodes,
                clock: config.clock.clone(),
            },
            _follower: follower,
        })
    }

    /// Takes the marker latencies measured since the last call (the rings
    /// hold a few thousand: call at least every few seconds).
    pub fn collect(&mut self) {
        self.measures.collect();
    }

    /// Each stream's counts now.
    pub fn counts(&self) -> Vec<StreamReport> {
        self.measures.counts()
    }

    /// What the host measured so far, without stopping it, taking the
    /// marker latencies measured since the last call (or the start): a
    /// window's report is the difference of two, and [`Host::stop`]'s
    /// latencies are those not taken by then. A stream's counts are read
    /// while its node runs: a packet's age may be counted in this report
    /// and its receipt (published at the cycle's end) in the next.
    pub fn report(&mut self) -> HostReport {
        self.measures
            .report(self.engine.cycles(), self.engine.xruns())
    }

    /// Stops the engine; what the host measured, read after its last
    /// cycle (every count agrees with every other).
    pub fn stop(mut self) -> Result<HostReport, HostError> {
        let run = self
            .engine
            .stop()
            .map_err(|e| HostError::Engine(e.to_string()))?;
        Ok(self.measures.report(run.cycles, run.xruns))
    }
}

impl Measures {
    fn collect(&mut self) {
        for (reader, _) in &mut self.markers {
            while let Ok(latency) = reader.pop() {
                self.latencies_ns.push(latency);
            }
        }
    }

    fn counts(&self) -> Vec<StreamReport> {
        self.streams
            .iter()
            .map(|(name, direction, counters)| StreamReport {
                name: name.clone(),
                direction,
                counts: counters.snapshot(),
                packet_ages: match *direction {
                    "in" => counters.packet_ages(),
                    _ => Vec::new(),
                },
            })
            .collect()
    }

    fn report(&mut self, cycles: u64, xruns: u64) -> HostReport {
        self.collect();
        HostReport {
            streams: self.counts(),
            latencies_ns: std::mem::take(&mut self.latencies_ns),
            markers_written: self.markers.iter().map(|(_, c)| c.written()).sum(),
            markers_lost: self.markers.iter().map(|(_, c)| c.lost()).sum(),
            cycles,
            xruns,
            late_nodes: tally(&self.late_nodes),
            clock: self.clock.label(),
            ptp: self.clock.ptp_following(),
        }
    }
}

/// The xruns each node was named late in, so far.
fn tally(late_nodes: &Mutex<BTreeMap<String, u64>>) -> BTreeMap<String, u64> {
    late_nodes.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn check(config: &HostConfig) -> Result<(), HostError> {
    if config.receive.is_empty() && config.send.is_empty() {
        return Err(HostError::Config(
            "a host with no streams; fix: give at least one stream to receive or send".into(),
        ));
    }
    let paired = config.receive.len() == config.send.len();
    if config.route == Route::Forward && !paired {
        return Err(HostError::Config(format!(
            "forwarding {} received streams onto {} sent ones; fix: give as many of each",
            config.receive.len(),
            config.send.len()
        )));
    }
    if let Some(stream) = config
        .receive
        .iter()
        .chain(&config.send)
        .find(|s| s.format.sample_rate != config.sample_rate)
    {
        return Err(HostError::Config(format!(
            "stream {:?} is {} Hz but the graph runs {} Hz (nothing resamples); fix: run the \
             graph at the stream's rate",
            stream.name, stream.format.sample_rate, config.sample_rate
        )));
    }
    if config.buffer_packets < 2 {
        return Err(HostError::Config(
            "a jitter buffer of fewer than 2 packets; fix: give 2 or more".into(),
        ));
    }
    for stream in &config.receive {
        let packet = stream.format.frames_per_packet;
        if let Some(needed) = buffer_short(config.buffer_packets, config.latency_frames, packet) {
            return Err(HostError::Config(format!(
                "stream {:?}: a jitter buffer of {} packets ({} frames) is shorter than the \
                 latency ({} frames) and a packet, so every packet would come too early; fix: \
                 a buffer of {needed} packets",
                stream.name,
                config.buffer_packets,
                config.buffer_packets as u64 * u64::from(packet),
                config.latency_frames,
            )));
        }
    }
    Ok(())
}

/// An SSRC per host and stream, distinct across the hosts of a run.
fn ssrc_of(host: &str, stream: usize) -> u32 {
    let hash = host.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    hash ^ (stream as u32).wrapping_mul(0x9e37_79b9) ^ std::process::id()
}

/// Connects the host's nodes as its route says; the marker readers.
fn route(
    graph: &mut Graph,
    config: &HostConfig,
    sources: &[NodeId],
    sinks: &[NodeId],
) -> Result<Vec<Marker>, HostError> {
    let channels = |specs: &[StreamSpec], k: usize| usize::from(specs[k].format.channels);
    let mut markers = Vec::new();
    match config.route {
        Route::Forward => {
            for (k, (&source, &sink)) in sources.iter().zip(sinks).enumerate() {
                let shared = channels(&config.receive, k).min(channels(&config.send, k));
                for channel in 1..=shared {
                    let from = graph.port(source, &format!("out{channel}"))?;
                    graph.connect(from, graph.port(sink, &format!("in{channel}"))?)?;
                }
            }
        }
        Route::Marker { interval_frames } => {
            for (k, (&source, &sink)) in sources.iter().zip(sinks).enumerate() {
                let (marker, probe, reader, counts) = marker_pair(interval_frames);
                let marker =
                    graph.add_node(&format!("{}:marker{k}", config.name), Box::new(marker))?;
                let probe =
                    graph.add_node(&format!("{}:probe{k}", config.name), Box::new(probe))?;
                graph.connect(graph.port(marker, "out")?, graph.port(sink, "in1")?)?;
                graph.connect(graph.port(source, "out1")?, graph.port(probe, "in")?)?;
                markers.push((reader, counts));
            }
        }
        Route::Tone => {
            for (k, &sink) in sinks.iter().enumerate() {
                let tone = 220.0 * (k + 1) as f64;
                let sine = graph.add_node(
                    &format!("{}:tone{k}", config.name),
                    Box::new(Sine::new(tone, 0.25)),
                )?;
                for channel in 1..=channels(&config.send, k) {
                    let to = graph.port(sink, &format!("in{channel}"))?;
                    graph.connect(graph.port(sine, "out")?, to)?;
                }
            }
        }
    }
    Ok(markers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_age_quantiles_are_bucket_edges() {
        let mut packet_ages = vec![0; 10];
        packet_ages[2] = 998;
        packet_ages[7] = 2;
        let report = StreamReport {
            name: "s".into(),
            direction: "in",
            counts: StreamCounts::default(),
            packet_ages,
        };
        assert_eq!(report.packet_age_ns(0.5), Some(3 * AGE_BUCKET_NS));
        assert_eq!(report.packet_age_ns(0.998), Some(3 * AGE_BUCKET_NS));
        assert_eq!(report.packet_age_ns(0.999), Some(8 * AGE_BUCKET_NS));
        let none = StreamReport {
            packet_ages: Vec::new(),
            ..report
        };
        assert_eq!(none.packet_age_ns(0.5), None);
    }
}
