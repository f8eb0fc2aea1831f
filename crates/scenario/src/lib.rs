//! tessera's scenario language: the TOML description of an experiment —
//! cells, the subject measured (a periodic task, an audio graph, the latency
//! probe, the music application, a real audio server: [`audio_server`], the
//! netphone: [`netphone`], video players on the render service: [`render`],
//! cells whose demand changes, for the RAP service: [`adaptation`], AES67
//! hosts passing streams along a chain: [`aes67`], an ordinary user's
//! PipeWire and where its real-time rights come from: [`desktop`]),
//! interference, duration and warm-up, and the named configurations run
//! back to back; durations
//! and rates as people write them ([`units`]). docs/scenarios.md documents
//! every key. The experiments run what it returns; the cli parses its
//! options' durations and rates with it.
//!
//! Owns parsing and validation: a malformed or impossible scenario is
//! refused here, before anything runs, with the line and the reason. It must
//! never touch the machine beyond reading facts (online CPUs, installed
//! programs, the kernel's deadline capacity), and never depend on what runs
//! a scenario: below it are only `tessera-sys` (the facts), `tessera-policy`
//! and two crates that depend on nothing of tessera, whose types a scenario
//! names and whose own checks it refuses with: `tessera-synth` (the
//! synthesizer's settings) and `tessera-aes67` (a stream's format).
//!
//! What the upper crates know that a refusal needs lives below them, so
//! that every refusal stays here, at parse time, with its line (none was
//! moved up into the experiment that runs it):
//! - where the data is a lower layer's own, it moved there: the engine's
//!   buffer sizes and rates to `tessera_policy::stream` (the graph takes
//!   them from there), the network service's flow class and discipline to
//!   `tessera_policy::mclock` (pure scheduling), an AES67 stream's rate on
//!   the wire to `tessera_aes67::StreamFormat`, whether a program is
//!   installed to `tessera_sys::process::installed` (a fact, like the
//!   online CPUs);
//! - where it only says what a scenario may ask for, it moved here and its
//!   users take it from here: the music application's roles
//!   ([`MUSIC_ROLES`]), the programs an audio server needs
//!   ([`ServerKind::programs`]), the netphone's stream ([`netphone::Stream`]),
//!   a video's frame geometry ([`video`]), the render service's largest side
//!   ([`render::MAX_SIDE`]), and rates as people write them ([`parse_rate`]).

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;
use tessera_policy::{Budget, CellPolicy, CellRequest, CoreRequest, Placement};
use toml::Spanned;

pub mod adaptation;
pub mod aes67;
pub mod audio_server;
pub mod desktop;
pub mod net_service;
pub mod netphone;
pub mod render;
pub mod units;
pub mod video;
pub use adaptation::{Burst, ChangingDemand, DemandSettings, JackLoad, Sizing, VideoDemand};
pub use aes67::{role_name as aes67_role, Aes67Settings, Aes67Subject, ROLES as AES67_ROLES};
pub use audio_server::{
    AudioClient, AudioServerSubject, GuardSettings, NetworkApp, ServerKind, ServerSched,
};
pub use desktop::{DesktopSubject, Rights};
pub use net_service::ServicePlan;
pub use netphone::{
    NetphoneSettings, NetphoneSubject, ROLES as NETPHONE_ROLES,
    SERVICE_ROLE as NETPHONE_SERVICE_ROLE,
};
pub use render::{PlayerGroup, RenderServer, RenderSettings, RenderSubject};
pub use units::{parse_duration, parse_rate};
use video::{gui_load, video_links, video_load, videos_have_their_gui};

/// Why a scenario was refused: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: String,
    /// 1-based; 0 when the problem is the file as a whole.
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.file, self.reason),
            line => write!(f, "{}:{line}: {}", self.file, self.reason),
        }
    }
}

impl std::error::Error for ScenarioError {}

/// How a thread is scheduled in one configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sched {
    /// Join this scenario cell (SCHED_DEADLINE for reserved cells).
    pub cell: Option<String>,
    /// SCHED_FIFO at this priority (inside the cell's cpuset if any).
    pub fifo: Option<u32>,
}

impl Sched {
    /// "plain", "fifo:80", "cell:audio", or "cell:others, fifo:10".
    pub fn parse(text: &str) -> Result<Sched, String> {
        let mut sched = Sched::default();
        for part in text.split(',').map(str::trim) {
            match part.split_once(':') {
                None if part == "plain" => {}
                Some(("fifo", p)) => {
                    let p: u32 = p
                        .trim()
                        .parse()
                        .map_err(|_| format!("{p:?} is not a FIFO priority"))?;
                    if !(1..=99).contains(&p) {
                        return Err(format!("FIFO priority {p} is outside 1–99"));
                    }
                    sched.fifo = Some(p);
                }
                Some(("cell", name)) if !name.trim().is_empty() => {
                    sched.cell = Some(name.trim().to_string())
                }
                _ => {
                    return Err(format!(
                        "{part:?} is not a scheduling (use plain, fifo:PRIO, cell:NAME or \"cell:NAME, fifo:PRIO\")"
                    ))
                }
            }
        }
        Ok(sched)
    }

    pub fn is_plain(&self) -> bool {
        self.cell.is_none() && self.fifo.is_none()
    }

    pub fn describe(&self) -> String {
        match (&self.cell, self.fifo) {
            (None, None) => "plain".into(),
            (None, Some(p)) => format!("fifo:{p}"),
            (Some(c), None) => format!("cell:{c}"),
            (Some(c), Some(p)) => format!("cell:{c}, fifo:{p}"),
        }
    }
}

/// A cell the configurations may use; created (with a per-run unique name)
/// before each configuration that uses it, destroyed after it.
#[derive(Debug, Clone, PartialEq)]
pub struct CellSpec {
    pub name: String,
    pub request: CellRequest,
}

/// One node of the graph subject: a load (the thesis's dnl) in the chain.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphNode {
    pub name: String,
    /// Fraction of the period it spins (0.1 = 10 %).
    pub load: f64,
    pub start: Duration,
    pub stop: Option<Duration>,
}

/// What the scenario measures.
#[derive(Debug, Clone, PartialEq)]
pub enum Subject {
    /// A periodic task: response time of each job.
    Periodic {
        period: Duration,
        work: Duration,
        deadline: Duration,
    },
    /// The audio graph on a timer driver: driver end, period, node ends,
    /// budget, xruns.
    Graph {
        frames: u32,
        rate: u32,
        workers: usize,
        deadline: Option<Duration>,
        nodes: Vec<GraphNode>,
    },
    /// The latency probe: a callback every period; how late each one is.
    Probe { period: Duration },
    /// The LAN music application (seed 000 §4.1): the SLABS emulator
    /// playing held pads into the network service, the synth cell and the
    /// console; Δt = t2 − t1 per package.
    Music(MusicSubject),
    /// A real audio server (jackd2 or PipeWire) with JACK load clients:
    /// xruns, late cycles, when each client finished, the guard's budgets.
    AudioServer(AudioServerSubject),
    /// Seed 004's netphone across an emulated LAN: T1–T4 of every packet.
    Netphone(NetphoneSubject),
    /// Seed 003's video players on the render service or its baseline:
    /// t_fb − t_req of every frame.
    Render(RenderSubject),
    /// The RAP service's experiment: cells whose demand changes over time,
    /// budgets static or adapted by a daemon of each configuration's own.
    ChangingDemand(ChangingDemand),
    /// AES67 hosts on a bridge passing streams along a chain and back: the
    /// round trip of a marker in the audio, loss, CPU.
    Aes67(Aes67Subject),
    /// An ordinary user's PipeWire with pw-jack load clients, its
    /// real-time rights from nowhere, stock RTKit or tessera's: skipped
    /// and late cycles, the threads' policies, CPU reserved.
    Desktop(DesktopSubject),
}

/// The roles of a music subject a configuration may schedule one by one.
pub const MUSIC_ROLES: [&str; 7] = [
    "synth", "network", "console", "slabs", "answers", "service", "streamer",
];

/// The music application: what the SLABS plays, the synthesizer, and how
/// the SLABS reaches it.
#[derive(Debug, Clone, PartialEq)]
pub struct MusicSubject {
    pub pads: Vec<usize>,
    pub x: f32,
    pub y: f32,
    pub pressure: f32,
    pub synth: tessera_synth::SynthConfig,
    /// Threads of the synth cell beside its communication thread.
    pub workers: usize,
    /// The SLABS across a veth pair in its own network namespace (the
    /// seed's LAN) instead of on loopback.
    pub lan: bool,
    /// The link's rate (`link`): the LAN's shaping when a configuration
    /// runs through the network service, and the service's capacity.
    pub link_bps: u64,
}

/// An interference workload.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadKind {
    Hog {
        threads: usize,
        load: f64,
    },
    Periodic {
        period: Duration,
        work: Duration,
    },
    Ep {
        threads: usize,
    },
    Stream {
        threads: usize,
        mebibytes: usize,
    },
    Io {
        threads: usize,
        block_kib: usize,
        file_mib: usize,
        sync_mib: usize,
    },
    RtApp {
        period: Duration,
        run: Duration,
    },
    StressNg {
        args: Vec<String>,
    },
    /// The render (GUI) service: composites the frames of the videos that
    /// name it, for the whole run.
    Gui {
        threads: usize,
    },
    /// Compiler processes, each compiling a generated C file in a loop.
    Build {
        processes: usize,
    },
    /// A video player: a raw YUV 4:2:0 frame every 1/fps, converted and
    /// sent to the gui named `gui`.
    Video {
        fps: f64,
        width: usize,
        height: usize,
        /// Frames in the generated file, played in a loop.
        frames: usize,
        gui: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Interference {
    pub name: String,
    pub kind: LoadKind,
    /// From the start of the run (warm-up included).
    pub start: Duration,
    pub stop: Option<Duration>,
}

/// What measures the subject (the probe can be cross-checked by cyclictest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Tessera,
    Cyclictest,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Configuration {
    pub name: String,
    pub subject: Sched,
    /// Per-role scheduling of a music subject (synth, network, console,
    /// slabs); a role not listed is scheduled as `subject`.
    pub roles: Vec<(String, Sched)>,
    /// The interference that runs, with its scheduling, in scenario order.
    pub interference: Vec<(String, Sched)>,
    pub tool: Tool,
    /// How an audio-server subject runs (None for other subjects).
    pub server: Option<ServerSched>,
    /// A music subject's network through the network service process
    /// (seed 000 §4.2); `None`: the application's own socket.
    pub service: Option<ServicePlan>,
    /// How a netphone subject runs (None for other subjects).
    pub netphone: Option<NetphoneSettings>,
    /// How a render subject runs (None for other subjects).
    pub render: Option<RenderSettings>,
    /// How a changing-demand subject's budgets are set (None for other
    /// subjects).
    pub demand: Option<DemandSettings>,
    /// How an aes67 subject runs (None for other subjects); its roles, one
    /// per host, are `roles`.
    pub aes67: Option<Aes67Settings>,
    /// Where a desktop subject's real-time rights come from (None for
    /// other subjects).
    pub desktop: Option<Rights>,
    /// Its threads traced and each miss attributed (`tessera run --why`
    /// does it for every configuration): a scenario that runs the same
    /// configuration traced and not measures what attribution costs.
    pub why: bool,
}

/// A validated scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub file: String,
    pub name: String,
    pub description: String,
    /// Measured time per configuration.
    pub duration: Duration,
    /// Time before the measurement starts (loads already run).
    pub warmup: Duration,
    /// Core every thread outside a cell is pinned to (None: not pinned).
    pub core: Option<usize>,
    pub baseline: Option<String>,
    pub cells: Vec<CellSpec>,
    pub subject: Subject,
    pub interference: Vec<Interference>,
    pub configurations: Vec<Configuration>,
}

impl Configuration {
    /// The cells this configuration's threads join, each once.
    pub fn cells(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .interference
            .iter()
            .chain(&self.roles)
            .filter_map(|(_, s)| s.cell.as_deref())
            .chain(self.subject.cell.as_deref())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Whether any thread needs CAP_SYS_NICE (a cell or a FIFO priority).
    pub fn needs_privilege(&self) -> bool {
        self.server.is_some()
            || self.demand.is_some()
            // A user of its own, a system bus, RTKit.
            || self.desktop.is_some()
            // Network namespaces.
            || self.aes67.is_some()
            || self
                .render
                .as_ref()
                .is_some_and(|r| r.server == RenderServer::Service)
            || !self.subject.is_plain()
            || self
                .interference
                .iter()
                .chain(&self.roles)
                .any(|(_, s)| !s.is_plain())
    }
}

impl Scenario {
    /// Warm-up plus duration: how long each configuration runs.
    pub fn total(&self) -> Duration {
        self.warmup + self.duration
    }

    pub fn cell(&self, name: &str) -> Option<&CellSpec> {
        self.cells.iter().find(|c| c.name == name)
    }

    pub fn load(&self, name: &str) -> Option<&Interference> {
        self.interference.iter().find(|i| i.name == name)
    }

    /// The same scenario with every time (duration, warm-up, starts and
    /// stops) multiplied by `factor`: the short runs of the experiment suite.
    /// Periods and budgets keep their values.
    pub fn scaled(&self, factor: f64) -> Scenario {
        let f = |d: Duration| d.mul_f64(factor);
        let mut s = self.clone();
        s.duration = f(s.duration);
        s.warmup = f(s.warmup);
        for i in &mut s.interference {
            i.start = f(i.start);
            i.stop = i.stop.map(f);
        }
        if let Subject::Graph { nodes, .. } = &mut s.subject {
            for n in nodes {
                n.start = f(n.start);
                n.stop = n.stop.map(f);
            }
        }
        if let Subject::AudioServer(a) = &mut s.subject {
            a.scale(factor);
        }
        if let Subject::Render(r) = &mut s.subject {
            r.scale(factor);
            // Probing and agreeing take as long however many frames follow.
            s.warmup = self.warmup;
        }
        if let Subject::ChangingDemand(d) = &mut s.subject {
            d.scale(factor);
        }
        for c in &mut s.configurations {
            if let Some(aes67) = &mut c.aes67 {
                aes67.cut = aes67.cut.map(f);
                aes67.ptp_lost = aes67.ptp_lost.map(f);
            }
        }
        s
    }

    /// Reads and validates a scenario file.
    pub fn from_file(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: path.display().to_string(),
            line: 0,
            reason: format!("cannot read: {e}"),
        })?;
        Scenario::parse(&text, &path.display().to_string())
    }

    /// Parses and validates scenario text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Scenario, ScenarioError> {
        let at = |span: Option<Range<usize>>, reason: String| ScenarioError {
            file: file.to_string(),
            line: span.map_or(0, |s| line_of(text, s.start)),
            reason,
        };
        let raw: RawScenario =
            toml::from_str(text).map_err(|e| at(e.span(), e.message().trim().to_string()))?;
        Validator {
            facts: Facts::detect(),
        }
        .scenario(raw, file)
        .map_err(|(span, reason)| at(Some(span), reason))
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Machine facts validation needs (a test can fix them).
#[derive(Debug, Clone)]
struct Facts {
    online: Vec<usize>,
    /// Bandwidth SCHED_DEADLINE may use per CPU.
    capacity: f64,
}

impl Facts {
    fn detect() -> Facts {
        Facts {
            online: tessera_sys::kernel::online_cpus().unwrap_or_else(|_| vec![0]),
            capacity: tessera_sys::kernel::deadline_capacity().per_cpu,
        }
    }
}

/// The keys of what the music application plays: a music subject's, and
/// a changing-demand subject's `[subject.music]`.
pub(crate) struct PlayKeys<'a> {
    pub pads: &'a Option<Spanned<String>>,
    pub x: &'a Option<Spanned<f64>>,
    pub y: &'a Option<Spanned<f64>>,
    pub pressure: &'a Option<Spanned<f64>>,
    pub oscillators: &'a Option<Spanned<usize>>,
    pub work_factor: &'a Option<Spanned<f64>>,
    pub seed: &'a Option<Spanned<u64>>,
    /// Where a refusal of the synthesizer points when no key of its own does.
    pub table: Range<usize>,
}

/// The music application playing held pads (all of them by default, at x
/// 0.5, y 0.3, pressure 0.8) into the seed's synthesizer with the keys'
/// changes; no workers, on loopback, the default link.
pub(crate) fn played(k: &PlayKeys) -> Result<MusicSubject, Refusal> {
    let pads = match k.pads {
        Some(p) => {
            tessera_synth::parse_pads(p.get_ref()).map_err(|e| (p.span(), format!("pads: {e}")))?
        }
        None => (0..tessera_synth::PADS).collect(),
    };
    let unit = |v: &Option<Spanned<f64>>, what: &str, default: f32| match v {
        Some(v) if (0.0..=1.0).contains(v.get_ref()) => Ok(*v.get_ref() as f32),
        Some(v) => refuse(
            v.span(),
            format!("{what} must be within 0–1, not {}", v.get_ref()),
        ),
        None => Ok(default),
    };
    let mut synth = tessera_synth::SynthConfig::default();
    if let Some(n) = k.oscillators {
        synth.oscillators_per_object = *n.get_ref();
    }
    if let Some(w) = k.work_factor {
        synth.work_factor = *w.get_ref() as f32;
    }
    if let Some(seed) = k.seed {
        synth.seed = *seed.get_ref();
    }
    tessera_synth::Synth::new(synth.clone()).map_err(|e| {
        let span = k.work_factor.as_ref().map(Spanned::span);
        let span = span.or(k.oscillators.as_ref().map(Spanned::span));
        (
            span.unwrap_or(k.table.clone()),
            format!("the synthesizer: {e}"),
        )
    })?;
    Ok(MusicSubject {
        pads,
        x: unit(k.x, "x", 0.5)?,
        y: unit(k.y, "y", 0.3)?,
        pressure: unit(k.pressure, "pressure", 0.8)?,
        synth,
        workers: 0,
        lan: false,
        link_bps: net_service::link(None)?,
    })
}

type Refusal = (Range<usize>, String);

fn refuse<T>(span: Range<usize>, reason: impl Into<String>) -> Result<T, Refusal> {
    Err((span, reason.into()))
}

// The file's shape. Every value a rule checks is `Spanned` so that the
// refusal can name its line.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: String,
    #[serde(default)]
    description: String,
    duration: Spanned<String>,
    warmup: Option<Spanned<String>>,
    core: Option<Spanned<RawCore>>,
    baseline: Option<Spanned<String>>,
    #[serde(default)]
    cell: Vec<Spanned<RawCell>>,
    subject: Spanned<RawSubject>,
    #[serde(default)]
    interference: Vec<Spanned<RawInterference>>,
    #[serde(default)]
    configuration: Vec<Spanned<RawConfiguration>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawCore {
    Index(usize),
    Named(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCell {
    name: Spanned<String>,
    policy: Spanned<toml::Value>,
    cores: Option<Spanned<toml::Value>>,
    count: Option<Spanned<toml::Value>>,
    placement: Option<Spanned<toml::Value>>,
    runtime: Option<Spanned<String>>,
    period: Option<Spanned<String>>,
    deadline: Option<Spanned<String>>,
    weight: Option<Spanned<u32>>,
    #[serde(default)]
    reclaim: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSubject {
    kind: Spanned<String>,
    period: Option<Spanned<String>>,
    work: Option<Spanned<String>>,
    deadline: Option<Spanned<String>>,
    frames: Option<Spanned<u32>>,
    rate: Option<Spanned<u32>>,
    workers: Option<Spanned<toml::Value>>,
    #[serde(default)]
    node: Vec<Spanned<RawNode>>,
    // kind = "music"
    pads: Option<Spanned<String>>,
    x: Option<Spanned<f64>>,
    y: Option<Spanned<f64>>,
    pressure: Option<Spanned<f64>>,
    oscillators: Option<Spanned<usize>>,
    work_factor: Option<Spanned<f64>>,
    seed: Option<Spanned<u64>>,
    network: Option<Spanned<String>>,
    // kind = "desktop" (and frames, rate)
    clients: Option<Spanned<usize>>,
    load: Option<Spanned<f64>>,
    // kind = "audio-server" (and frames, rate)
    server: Option<Spanned<String>>,
    priority: Option<Spanned<u32>>,
    #[serde(default)]
    client: Vec<Spanned<audio_server::RawClient>>,
    staircase: Option<Spanned<audio_server::RawStaircase>>,
    network_app: Option<Spanned<audio_server::RawNetworkApp>>,
    // kind = "netphone"
    stream: Option<Spanned<String>>,
    link: Option<Spanned<String>>,
    flood: Option<Spanned<bool>>,
    // kind = "render"
    screen: Option<Spanned<String>>,
    scale: Option<Spanned<f64>>,
    best_effort: Option<Spanned<String>>,
    probing: Option<Spanned<String>>,
    #[serde(default)]
    group: Vec<Spanned<render::RawGroup>>,
    // kind = "changing-demand"
    margin: Option<Spanned<f64>>,
    monitor_interval: Option<Spanned<String>>,
    video: Option<Spanned<adaptation::RawVideo>>,
    music: Option<Spanned<adaptation::RawMusic>>,
    jack: Option<Spanned<adaptation::RawJack>>,
    adaptation: Option<Spanned<tessera_policy::rap::RapConfig>>,
    // kind = "aes67" (and rate, deadline)
    hosts: Option<Spanned<usize>>,
    streams: Option<Spanned<usize>>,
    channels: Option<Spanned<u16>>,
    encoding: Option<Spanned<String>>,
    ptime: Option<Spanned<String>>,
    latency: Option<Spanned<String>>,
    foreign: Option<Spanned<aes67::RawForeign>>,
    paths: Option<Spanned<aes67::RawPaths>>,
    ptp: Option<Spanned<bool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: Spanned<String>,
    load: Spanned<f64>,
    start: Option<Spanned<String>>,
    stop: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInterference {
    name: Spanned<String>,
    kind: Spanned<String>,
    threads: Option<Spanned<usize>>,
    load: Option<Spanned<f64>>,
    period: Option<Spanned<String>>,
    work: Option<Spanned<String>>,
    mebibytes: Option<Spanned<usize>>,
    block_kib: Option<Spanned<usize>>,
    file_mib: Option<Spanned<usize>>,
    sync_mib: Option<Spanned<usize>>,
    args: Option<Spanned<Vec<String>>>,
    // kind = "video" (and "gui": threads)
    fps: Option<Spanned<f64>>,
    width: Option<Spanned<usize>>,
    height: Option<Spanned<usize>>,
    frames: Option<Spanned<usize>>,
    gui: Option<Spanned<String>>,
    start: Option<Spanned<String>>,
    stop: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfiguration {
    name: Spanned<String>,
    subject: Option<Spanned<RawSubjectSched>>,
    interference: Option<Spanned<BTreeMap<String, Spanned<String>>>>,
    tool: Option<Spanned<String>>,
    /// A music configuration through the network service process.
    service: Option<Spanned<net_service::RawServicePlan>>,
    /// How a render subject runs.
    render: Option<Spanned<render::RawRenderConfiguration>>,
    /// An aes67 subject's streams each way between neighbours.
    streams: Option<Spanned<usize>>,
    /// When an aes67 subject's second path is cut, into the measured window.
    cut: Option<Spanned<String>>,
    /// When an aes67 subject's slaves lose PTP, into the measured window.
    ptp_lost: Option<Spanned<String>>,
    /// Trace this configuration's threads and say why each miss was late.
    why: Option<bool>,
}

/// A configuration's subject: one scheduling for every thread, or (music)
/// one per role.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawSubjectSched {
    All(String),
    Roles(BTreeMap<String, String>),
}

struct Validator {
    facts: Facts,
}

/// How a configuration runs an audio-server subject (None for other
/// subjects): its `subject`, or as the server sets itself.
fn server_sched(
    value: Option<&Spanned<RawSubjectSched>>,
    scenario: &Scenario,
    table: &Range<usize>,
) -> Result<Option<ServerSched>, Refusal> {
    let Subject::AudioServer(subject) = &scenario.subject else {
        return Ok(None);
    };
    let (text, span) = match value.map(|v| (v.get_ref(), v.span())) {
        None => ("fifo", table.clone()),
        Some((RawSubjectSched::All(text), span)) => (text.as_str(), span),
        Some((RawSubjectSched::Roles(_), span)) => {
            return refuse(
                span,
                "only a music subject has roles; give the audio server one scheduling (fifo:P, fifo, guard…)",
            )
        }
    };
    let sched = ServerSched::parse(text, subject).map_err(|e| (span.clone(), e))?;
    if matches!(&sched, ServerSched::Guard(g) if g.workgroup_on_core) && scenario.core.is_none() {
        return refuse(
            span,
            "guard:workgroup=core puts the workgroup on the scenario's core: give `core = N` at the top of the file",
        );
    }
    Ok(Some(sched))
}

/// A value that may depend on the machine's size: `3`, or a table keyed by
/// core counts, `{ 2 = 0, 8 = 1, 16 = 3 }`, whose entry with the largest
/// count not above the machine's applies.
fn sized<T: serde::de::DeserializeOwned>(
    value: &Spanned<toml::Value>,
    cores: usize,
    what: &str,
) -> Result<T, Refusal> {
    let chosen = match value.get_ref() {
        toml::Value::Table(by_size) => {
            let mut best: Option<(usize, &toml::Value)> = None;
            for (key, v) in by_size {
                let size: usize = key.parse().map_err(|_| {
                    (
                        value.span(),
                        format!("{what}: key {key:?} is not a core count (write e.g. {{ 2 = …, 8 = … }})"),
                    )
                })?;
                if size <= cores && best.is_none_or(|(b, _)| size > b) {
                    best = Some((size, v));
                }
            }
            match best {
                Some((_, v)) => v.clone(),
                None => {
                    return refuse(
                        value.span(),
                        format!("{what}: no entry for a machine of {cores} core(s); add one keyed {cores} or less"),
                    )
                }
            }
        }
        v => v.clone(),
    };
    chosen
        .try_into()
        .map_err(|e: toml::de::Error| (value.span(), format!("{what}: {}", e.message().trim())))
}

const MAX_THREADS: usize = 64;

fn duration(value: &Spanned<String>) -> Result<Duration, Refusal> {
    parse_duration(value.get_ref()).map_err(|e| (value.span(), e))
}

fn opt_duration(value: &Option<Spanned<String>>) -> Result<Option<Duration>, Refusal> {
    value.as_ref().map(duration).transpose()
}

fn required<'a, T>(
    value: &'a Option<Spanned<T>>,
    table: &Range<usize>,
    what: &str,
) -> Result<&'a Spanned<T>, Refusal> {
    value
        .as_ref()
        .ok_or_else(|| (table.clone(), format!("missing key `{what}`")))
}

fn threads(value: &Option<Spanned<usize>>) -> Result<usize, Refusal> {
    match value {
        None => Ok(1),
        Some(t) if (1..=MAX_THREADS).contains(t.get_ref()) => Ok(*t.get_ref()),
        Some(t) => refuse(
            t.span(),
            format!("threads must be 1–{MAX_THREADS}, not {}", t.get_ref()),
        ),
    }
}

fn fraction(value: &Spanned<f64>, what: &str) -> Result<f64, Refusal> {
    let v = *value.get_ref();
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        refuse(
            value.span(),
            format!("{what} must be in (0, 1] (a fraction of a CPU or period), not {v}"),
        )
    }
}

impl Validator {
    fn scenario(&self, raw: RawScenario, file: &str) -> Result<Scenario, Refusal> {
        let duration_value = duration(&raw.duration)?;
        if duration_value.is_zero() {
            return refuse(raw.duration.span(), "duration must be longer than 0");
        }
        let warmup = opt_duration(&raw.warmup)?.unwrap_or(Duration::ZERO);
        let total = warmup + duration_value;
        let core = raw.core.as_ref().map(|c| self.core(c)).transpose()?;
        let cells = self.cells(&raw.cell, core)?;
        let subject = match raw.subject.get_ref().kind.get_ref().as_str() {
            "changing-demand" => {
                let (s, table) = (raw.subject.get_ref(), raw.subject.span());
                adaptation::subject(s, &table, duration_value).map(Subject::ChangingDemand)?
            }
            _ => self.subject(&raw.subject, total)?,
        };
        let interference = self.interference(&raw.interference, total)?;
        let mut scenario = Scenario {
            file: file.to_string(),
            name: raw.name,
            description: raw.description,
            duration: duration_value,
            warmup,
            core,
            baseline: None,
            cells,
            subject,
            interference,
            configurations: Vec::new(),
        };
        if raw.configuration.is_empty() {
            return refuse(
                0..0,
                "no [[configuration]]: name at least one (e.g. name = \"plain\")",
            );
        }
        for c in &raw.configuration {
            let configuration = self.configuration(c, &scenario)?;
            if scenario
                .configurations
                .iter()
                .any(|x| x.name == configuration.name)
            {
                return refuse(
                    c.get_ref().name.span(),
                    format!("configuration {:?} is named twice", configuration.name),
                );
            }
            scenario.configurations.push(configuration);
        }
        if let Subject::Render(render) = &scenario.subject {
            let given = opt_duration(&raw.warmup)?;
            scenario.warmup =
                render::warmup(render, &scenario.configurations, given, &raw.duration)?;
        }
        scenario.baseline = match &raw.baseline {
            Some(b)
                if scenario
                    .configurations
                    .iter()
                    .any(|c| &c.name == b.get_ref()) =>
            {
                Some(b.get_ref().clone())
            }
            Some(b) => {
                return refuse(
                    b.span(),
                    format!("baseline {:?} is not a configuration", b.get_ref()),
                )
            }
            None => scenario.configurations.first().map(|c| c.name.clone()),
        };
        Ok(scenario)
    }

    fn core(&self, core: &Spanned<RawCore>) -> Result<usize, Refusal> {
        let index = match core.get_ref() {
            RawCore::Index(i) => *i,
            RawCore::Named(n) if n == "last" => *self.facts.online.last().unwrap_or(&0),
            RawCore::Named(n) => {
                return refuse(
                    core.span(),
                    format!("core {n:?}: give a CPU number or \"last\""),
                )
            }
        };
        if !self.facts.online.contains(&index) {
            return refuse(
                core.span(),
                format!(
                    "CPU {index} is not online (online: {:?})",
                    self.facts.online
                ),
            );
        }
        Ok(index)
    }

    fn cells(
        &self,
        raw: &[Spanned<RawCell>],
        core: Option<usize>,
    ) -> Result<Vec<CellSpec>, Refusal> {
        let mut cells: Vec<CellSpec> = Vec::new();
        for c in raw {
            let spec = self.cell(c, core)?;
            if cells.iter().any(|x| x.name == spec.name) {
                return refuse(
                    c.get_ref().name.span(),
                    format!("cell {:?} is declared twice", spec.name),
                );
            }
            cells.push(spec);
        }
        Ok(cells)
    }

    /// A cell without `cores` or `count` sits on the scenario's `core` when
    /// one is given, so that it shares that CPU with the pinned threads.
    fn cell(&self, spanned: &Spanned<RawCell>, core: Option<usize>) -> Result<CellSpec, Refusal> {
        let (c, table) = (spanned.get_ref(), spanned.span());
        let machine = self.facts.online.len();
        let policy_name: String = sized(&c.policy, machine, "policy")?;
        let policy = CellPolicy::parse(&policy_name).ok_or_else(|| {
            (
                c.policy.span(),
                format!(
                    "unknown policy {policy_name:?} (dedicated, time-triggered, event-triggered, best-effort)"
                ),
            )
        })?;
        let list = c
            .cores
            .as_ref()
            .map(|l| sized::<Vec<usize>>(l, machine, "cores").map(|v| (v, l.span())))
            .transpose()?
            // `[]` for a machine size: no core list there (e.g. a global cell).
            .filter(|(list, _)| !list.is_empty());
        let count = c
            .count
            .as_ref()
            .map(|n| sized::<usize>(n, machine, "count").map(|v| (v, n.span())))
            .transpose()?;
        let cores = match (list, count) {
            (Some((list, span)), None) => {
                if let Some(bad) = list.iter().find(|i| !self.facts.online.contains(i)) {
                    return refuse(
                        span,
                        format!("CPU {bad} is not online (online: {:?})", self.facts.online),
                    );
                }
                CoreRequest::List(list)
            }
            (None, Some((n, _))) if n <= machine => CoreRequest::Count(n),
            (None, Some((n, span))) => {
                return refuse(span, format!("{n} cores asked, the machine has {machine}"))
            }
            (Some((_, span)), Some(_)) => {
                return refuse(span, "give `cores` (a list) or `count`, not both")
            }
            (None, None) if core.is_some() => CoreRequest::List(core.into_iter().collect()),
            (None, None) if policy == CellPolicy::BestEffort => CoreRequest::Count(0),
            (None, None) => CoreRequest::Count(1),
        };
        let placement = c
            .placement
            .as_ref()
            .map(|p| sized::<String>(p, machine, "placement").map(|v| (v, p.span())))
            .transpose()?;
        let placement = match placement
            .as_ref()
            .map(|(p, span)| (p.as_str(), span.clone()))
        {
            None | Some(("partitioned", _)) => Placement::Partitioned,
            Some(("global", _)) => Placement::Global,
            Some((other, span)) => {
                return refuse(
                    span,
                    format!("unknown placement {other:?} (partitioned, global)"),
                )
            }
        };
        let budget = self.budget(c, policy, &policy_name, &table)?;
        let weight = match &c.weight {
            Some(w) if (1..=10_000).contains(w.get_ref()) => *w.get_ref(),
            Some(w) => {
                return refuse(
                    w.span(),
                    format!("weight must be 1–10000, not {}", w.get_ref()),
                )
            }
            None => 100,
        };
        Ok(CellSpec {
            name: c.name.get_ref().clone(),
            request: CellRequest {
                name: c.name.get_ref().clone(),
                policy,
                cores,
                budget,
                placement,
                weight,
                pinned: false,
                owner_adapts: false,
                gives_way: false,
                reclaim: c.reclaim,
                overrun_signal: false,
            },
        })
    }

    fn budget(
        &self,
        c: &RawCell,
        policy: CellPolicy,
        policy_name: &str,
        table: &Range<usize>,
    ) -> Result<Option<Budget>, Refusal> {
        let reserved = matches!(
            policy,
            CellPolicy::EventTriggered | CellPolicy::TimeTriggered
        );
        if !reserved {
            if let Some(r) = &c.runtime {
                return refuse(
                    r.span(),
                    format!("a {policy_name} cell has no runtime/period"),
                );
            }
            return Ok(None);
        }
        let runtime = duration(required(&c.runtime, table, "runtime")?)?;
        let period_value = required(&c.period, table, "period")?;
        let period = duration(period_value)?;
        let deadline = opt_duration(&c.deadline)?.unwrap_or(match policy {
            CellPolicy::TimeTriggered => runtime,
            _ => period,
        });
        let (low, high) = tessera_sys::kernel::deadline_period_range();
        if period < low || period > high {
            return refuse(
                period_value.span(),
                format!("period {period:?} is outside the kernel's range {low:?}–{high:?}"),
            );
        }
        if runtime < Duration::from_nanos(1024) || runtime > deadline || deadline > period {
            return refuse(table.clone(), format!("need 1024 ns ≤ runtime ≤ deadline ≤ period (runtime {runtime:?}, deadline {deadline:?}, period {period:?})"));
        }
        let share = runtime.as_secs_f64() / period.as_secs_f64();
        if share > self.facts.capacity {
            return refuse(
                table.clone(),
                format!(
                    "runtime/period = {share:.3} exceeds the {:.2} of a CPU SCHED_DEADLINE may use",
                    self.facts.capacity
                ),
            );
        }
        Ok(Some(Budget {
            runtime_ns: runtime.as_nanos() as u64,
            deadline_ns: deadline.as_nanos() as u64,
            period_ns: period.as_nanos() as u64,
        }))
    }

    fn subject(&self, spanned: &Spanned<RawSubject>, total: Duration) -> Result<Subject, Refusal> {
        let (s, table) = (spanned.get_ref(), spanned.span());
        match s.kind.get_ref().as_str() {
            "periodic" => {
                let period_value = required(&s.period, &table, "period")?;
                let period = duration(period_value)?;
                let work_value = required(&s.work, &table, "work")?;
                let work = duration(work_value)?;
                if work >= period {
                    return refuse(work_value.span(), format!("work {work:?} must be shorter than the period {period:?}: every job would miss"));
                }
                let deadline = opt_duration(&s.deadline)?.unwrap_or(period);
                Ok(Subject::Periodic {
                    period,
                    work,
                    deadline,
                })
            }
            "probe" => {
                let period_value = required(&s.period, &table, "period")?;
                let period = duration(period_value)?;
                if period < Duration::from_micros(100) {
                    return refuse(
                        period_value.span(),
                        "a probe period under 100 µs measures the timer, not the scheduler",
                    );
                }
                Ok(Subject::Probe { period })
            }
            "graph" => self.graph(s, &table, total),
            "music" => self.music(s),
            "audio-server" => {
                audio_server::subject(s, &table, total, tessera_sys::process::installed)
                    .map(Subject::AudioServer)
            }
            "netphone" => netphone::subject(s).map(Subject::Netphone),
            "render" => render::subject(s, &table).map(Subject::Render),
            "aes67" => aes67::subject(s, &table).map(Subject::Aes67),
            "desktop" => {
                desktop::subject(s, &table, tessera_sys::process::installed).map(Subject::Desktop)
            }
            other => refuse(
                s.kind.span(),
                format!(
                    "unknown subject kind {other:?} (periodic, graph, probe, music, audio-server, \
                     netphone, render, changing-demand, aes67, desktop)"
                ),
            ),
        }
    }

    fn workers(&self, s: &RawSubject) -> Result<usize, Refusal> {
        s.workers
            .as_ref()
            .map_or(Ok(0), |w| sized(w, self.facts.online.len(), "workers"))
    }

    /// The music application: held pads, the synthesizer's load, the
    /// synth cell's workers and the network.
    fn music(&self, s: &RawSubject) -> Result<Subject, Refusal> {
        let played = played(&PlayKeys {
            pads: &s.pads,
            x: &s.x,
            y: &s.y,
            pressure: &s.pressure,
            oscillators: &s.oscillators,
            work_factor: &s.work_factor,
            seed: &s.seed,
            table: s.kind.span(),
        })?;
        Ok(Subject::Music(MusicSubject {
            workers: self.workers(s)?,
            lan: match s.network.as_ref().map(|n| (n.span(), n.get_ref().as_str())) {
                None | Some((_, "loopback")) => false,
                Some((_, "lan")) => true,
                Some((span, other)) => refuse(
                    span,
                    format!(
                        "network must be \"loopback\" or \"lan\" (a veth pair to the SLABS's \
                         own namespace, root only), not {other:?}"
                    ),
                )?,
            },
            link_bps: net_service::link(s.link.as_ref())?,
            ..played
        }))
    }

    fn graph(
        &self,
        s: &RawSubject,
        table: &Range<usize>,
        total: Duration,
    ) -> Result<Subject, Refusal> {
        let frames = required(&s.frames, table, "frames")?;
        let rate = required(&s.rate, table, "rate")?;
        tessera_policy::stream::StreamConfig::new(*frames.get_ref(), *rate.get_ref())
            .map_err(|e| (frames.span().start..rate.span().end, e.to_string()))?;
        let workers = self.workers(s)?;
        let mut nodes: Vec<GraphNode> = Vec::new();
        for n in &s.node {
            let raw = n.get_ref();
            let start = opt_duration(&raw.start)?.unwrap_or(Duration::ZERO);
            let stop = opt_duration(&raw.stop)?;
            if start >= total {
                return refuse(
                    n.span(),
                    format!("node starts at {start:?}, after the run ends ({total:?})"),
                );
            }
            if stop.is_some_and(|t| t <= start) {
                return refuse(n.span(), "a node must stop after it starts");
            }
            if nodes.iter().any(|x| &x.name == raw.name.get_ref()) {
                return refuse(
                    raw.name.span(),
                    format!("node {:?} is declared twice", raw.name.get_ref()),
                );
            }
            nodes.push(GraphNode {
                name: raw.name.get_ref().clone(),
                load: fraction(&raw.load, "load")?,
                start,
                stop,
            });
        }
        let sum: f64 = nodes.iter().map(|n| n.load).sum();
        if sum >= 1.0 {
            return refuse(
                table.clone(),
                format!("the nodes' loads add up to {sum:.2} of the period: no cycle could finish"),
            );
        }
        Ok(Subject::Graph {
            frames: *frames.get_ref(),
            rate: *rate.get_ref(),
            workers,
            deadline: opt_duration(&s.deadline)?,
            nodes,
        })
    }

    fn interference(
        &self,
        raw: &[Spanned<RawInterference>],
        total: Duration,
    ) -> Result<Vec<Interference>, Refusal> {
        let mut loads: Vec<Interference> = Vec::new();
        for i in raw {
            let load = self.load(i, total)?;
            if loads.iter().any(|x| x.name == load.name) {
                return refuse(
                    i.get_ref().name.span(),
                    format!("interference {:?} is declared twice", load.name),
                );
            }
            loads.push(load);
        }
        video_links(raw, &loads)?;
        Ok(loads)
    }

    fn load(
        &self,
        spanned: &Spanned<RawInterference>,
        total: Duration,
    ) -> Result<Interference, Refusal> {
        let (i, table) = (spanned.get_ref(), spanned.span());
        let periodic = |what: &str| -> Result<(Duration, Duration), Refusal> {
            let period = duration(required(&i.period, &table, "period")?)?;
            let work_value = required(&i.work, &table, "work")?;
            let work = duration(work_value)?;
            if work.is_zero() || work >= period {
                return refuse(
                    work_value.span(),
                    format!("{what} work must be in (0, period)"),
                );
            }
            Ok((period, work))
        };
        let external = |program: &str| -> Result<(), Refusal> {
            if tessera_sys::process::installed(program) {
                Ok(())
            } else {
                refuse(
                    i.kind.span(),
                    format!("{program} is not installed (Debian: apt-get install {program})"),
                )
            }
        };
        let kind = match i.kind.get_ref().as_str() {
            "hog" => LoadKind::Hog {
                threads: threads(&i.threads)?,
                load: i.load.as_ref().map_or(Ok(1.0), |l| fraction(l, "load"))?,
            },
            "periodic" => {
                let (period, work) = periodic("a periodic task's")?;
                LoadKind::Periodic { period, work }
            }
            "ep" => LoadKind::Ep { threads: threads(&i.threads)? },
            "stream" => LoadKind::Stream {
                threads: threads(&i.threads)?,
                mebibytes: i.mebibytes.as_ref().map_or(64, |m| *m.get_ref()).max(3),
            },
            "io" => LoadKind::Io {
                threads: threads(&i.threads)?,
                block_kib: i.block_kib.as_ref().map_or(256, |v| *v.get_ref()),
                file_mib: i.file_mib.as_ref().map_or(64, |v| *v.get_ref()),
                sync_mib: i.sync_mib.as_ref().map_or(8, |v| *v.get_ref()),
            },
            "rt-app" => {
                external("rt-app")?;
                let (period, run) = periodic("rt-app's")?;
                LoadKind::RtApp { period, run }
            }
            "stress-ng" => {
                external("stress-ng")?;
                let args = required(&i.args, &table, "args")?;
                LoadKind::StressNg { args: args.get_ref().clone() }
            }
            "build" => {
                external("gcc")?;
                LoadKind::Build { processes: threads(&i.threads)? }
            }
            "gui" => gui_load(i)?,
            "video" => video_load(i, &table)?,
            other => return refuse(i.kind.span(), format!("unknown interference kind {other:?} (hog, periodic, ep, stream, io, build, rt-app, stress-ng, gui, video)")),
        };
        let start = opt_duration(&i.start)?.unwrap_or(Duration::ZERO);
        let stop = opt_duration(&i.stop)?;
        if start >= total {
            return refuse(
                table,
                format!("starts at {start:?}, after the run ends ({total:?})"),
            );
        }
        if stop.is_some_and(|t| t <= start) {
            return refuse(table, "interference must stop after it starts");
        }
        Ok(Interference {
            name: i.name.get_ref().clone(),
            kind,
            start,
            stop,
        })
    }

    fn sched(&self, value: &Spanned<String>, scenario: &Scenario) -> Result<Sched, Refusal> {
        self.sched_at(value.get_ref(), value.span(), scenario)
    }

    fn sched_at(
        &self,
        text: &str,
        span: Range<usize>,
        scenario: &Scenario,
    ) -> Result<Sched, Refusal> {
        let sched = Sched::parse(text).map_err(|e| (span.clone(), e))?;
        if let Some(cell) = &sched.cell {
            if scenario.cell(cell).is_none() {
                return refuse(span, format!("no cell named {cell:?} is declared"));
            }
        }
        Ok(sched)
    }

    /// The subject's scheduling: one for every thread, or one per role of
    /// a music subject (roles not listed run plain).
    fn subject_sched(
        &self,
        value: &Spanned<RawSubjectSched>,
        scenario: &Scenario,
    ) -> Result<(Sched, Vec<(String, Sched)>), Refusal> {
        let span = value.span();
        match value.get_ref() {
            RawSubjectSched::All(text) => Ok((self.sched_at(text, span, scenario)?, Vec::new())),
            RawSubjectSched::Roles(map) => {
                if !matches!(scenario.subject, Subject::Music { .. }) {
                    return refuse(span, "only a music subject has roles; give one scheduling (plain, fifo:PRIO, cell:NAME)");
                }
                let mut roles = Vec::new();
                for (role, text) in map {
                    if !MUSIC_ROLES.contains(&role.as_str()) {
                        return refuse(
                            span,
                            format!("unknown role {role:?} (roles: {})", MUSIC_ROLES.join(", ")),
                        );
                    }
                    roles.push((role.clone(), self.sched_at(text, span.clone(), scenario)?));
                }
                Ok((Sched::default(), roles))
            }
        }
    }

    /// A netphone's or aes67 subject's roles as written, each checked as
    /// any scheduling is.
    fn written_roles(
        &self,
        roles: &[(String, String, Range<usize>)],
        scenario: &Scenario,
    ) -> Result<Vec<(String, Sched)>, Refusal> {
        let check = |(role, text, span): &(String, String, Range<usize>)| {
            Ok((role.clone(), self.sched_at(text, span.clone(), scenario)?))
        };
        roles.iter().map(check).collect()
    }

    /// An aes67 subject's roles, one per host, checked, with a reservation
    /// slot for every thread that joins a reserved cell.
    fn aes67_roles(
        &self,
        aes: &aes67::Aes67Configuration,
        scenario: &Scenario,
        span: &Range<usize>,
    ) -> Result<Vec<(String, Sched)>, Refusal> {
        let roles = self.written_roles(&aes.roles, scenario)?;
        aes67::slots_suffice(&roles, scenario, span)?;
        Ok(roles)
    }

    fn configuration(
        &self,
        spanned: &Spanned<RawConfiguration>,
        scenario: &Scenario,
    ) -> Result<Configuration, Refusal> {
        let (c, table) = (spanned.get_ref(), spanned.span());
        let server = server_sched(c.subject.as_ref(), scenario, &table)?;
        let netphone = match &scenario.subject {
            Subject::Netphone(phone) => Some(netphone::configuration(c.subject.as_ref(), phone)?),
            _ => None,
        };
        let demand = match &scenario.subject {
            Subject::ChangingDemand(_) => {
                Some(adaptation::configuration(c.subject.as_ref(), &table)?)
            }
            _ => None,
        };
        if let (false, Some(lost)) = (matches!(scenario.subject, Subject::Aes67(_)), &c.ptp_lost) {
            return refuse(
                lost.span(),
                "only an aes67 subject with ptp = true takes `ptp_lost`",
            );
        }
        let aes = match (&scenario.subject, &c.streams, &c.cut) {
            (Subject::Aes67(a), streams, cut) => Some(aes67::configuration(
                aes67::ConfigurationKeys {
                    streams: streams.as_ref(),
                    cut: cut.as_ref(),
                    ptp_lost: c.ptp_lost.as_ref(),
                },
                c.subject.as_ref(),
                a,
                &table,
            )?),
            (_, Some(streams), _) => {
                return refuse(streams.span(), "only an aes67 subject takes `streams`")
            }
            (_, None, Some(cut)) => {
                return refuse(cut.span(), "only an aes67 subject of two paths takes `cut`")
            }
            (_, None, None) => None,
        };
        let desktop = match &scenario.subject {
            Subject::Desktop(_) => Some(desktop::configuration(
                c.subject.as_ref(),
                &table,
                tessera_sys::process::installed,
            )?),
            _ => None,
        };
        let (subject, roles) = match (&c.subject, &netphone) {
            _ if demand.is_some() || desktop.is_some() => (Sched::default(), Vec::new()),
            _ if aes.is_some() => {
                let span = c.subject.as_ref().map_or(table.clone(), Spanned::span);
                let aes = aes.as_ref().expect("matched");
                (Sched::default(), self.aes67_roles(aes, scenario, &span)?)
            }
            (_, Some(phone)) => (
                Sched::default(),
                self.written_roles(&phone.roles, scenario)?,
            ),
            (Some(_), None) if server.is_some() => (Sched::default(), Vec::new()),
            (Some(s), None) => self.subject_sched(s, scenario)?,
            (None, None) => (Sched::default(), Vec::new()),
        };
        let interference = match &c.interference {
            None => scenario
                .interference
                .iter()
                .map(|i| (i.name.clone(), Sched::default()))
                .collect(),
            Some(map) => {
                let mut chosen = Vec::new();
                for i in &scenario.interference {
                    if let Some(s) = map.get_ref().get(&i.name) {
                        chosen.push((i.name.clone(), self.sched(s, scenario)?));
                    }
                }
                if let Some((name, s)) = map
                    .get_ref()
                    .iter()
                    .find(|(n, _)| scenario.load(n).is_none())
                {
                    return refuse(
                        s.span(),
                        format!("no interference named {name:?} is declared"),
                    );
                }
                chosen
            }
        };
        let tool = match c.tool.as_ref().map(|t| (t.get_ref().as_str(), t.span())) {
            None | Some(("tessera", _)) => Tool::Tessera,
            Some(("cyclictest", span)) => {
                if !matches!(scenario.subject, Subject::Probe { .. }) {
                    return refuse(span, "cyclictest can only stand in for the probe subject");
                }
                if !tessera_sys::process::installed("cyclictest") {
                    return refuse(
                        span,
                        "cyclictest is not installed (Debian: apt-get install rt-tests)",
                    );
                }
                if subject.cell.is_some() {
                    return refuse(
                        span,
                        "cyclictest cannot run in a cell: give it plain or fifo:PRIO",
                    );
                }
                Tool::Cyclictest
            }
            Some((other, span)) => {
                return refuse(
                    span,
                    format!("unknown tool {other:?} (tessera, cyclictest)"),
                )
            }
        };
        let service = match (&c.service, &scenario.subject) {
            (None, _) => None,
            (Some(raw), Subject::Music(music)) => {
                Some(net_service::plan(raw, music.link_bps, &table)?)
            }
            (Some(raw), _) => {
                return refuse(
                    raw.span(),
                    "only a music subject runs through the network service",
                )
            }
        };
        let render_subject = match &scenario.subject {
            Subject::Render(r) => Some(r),
            _ => None,
        };
        let render = render::configuration(
            c.render.as_ref(),
            render_subject,
            &subject,
            &self.facts.online,
            &table,
        )?;
        let configuration = Configuration {
            name: c.name.get_ref().clone(),
            service,
            render,
            demand,
            subject,
            roles,
            interference,
            tool,
            server,
            netphone: netphone.map(|phone| phone.settings),
            aes67: aes.map(|a| a.settings),
            desktop,
            why: c.why.unwrap_or(false),
        };
        self.feasible(&configuration, scenario, &table)?;
        Ok(configuration)
    }

    /// The checks that need the whole configuration: rt-app schedules
    /// itself (no cells), the engine needs a reservation slot per thread,
    /// and the reservations on a core must fit its capacity.
    fn feasible(
        &self,
        c: &Configuration,
        scenario: &Scenario,
        table: &Range<usize>,
    ) -> Result<(), Refusal> {
        videos_have_their_gui(c, scenario, table)?;
        for (name, sched) in &c.interference {
            let is_rt_app = scenario
                .load(name)
                .is_some_and(|l| matches!(l.kind, LoadKind::RtApp { .. }));
            if is_rt_app && sched.cell.is_some() {
                return refuse(table.clone(), format!("{name}: rt-app sets its own policy; give it plain or fifo:PRIO (use kind = \"periodic\" for a task in a cell)"));
            }
        }
        let engine_cell = match &scenario.subject {
            Subject::Graph { workers, .. } => c.subject.cell.as_ref().map(|cell| (*workers, cell)),
            Subject::Music(MusicSubject { workers, .. }) => c
                .roles
                .iter()
                .find(|(role, _)| role == "synth")
                .map_or(&c.subject, |(_, s)| s)
                .cell
                .as_ref()
                .map(|cell| (*workers, cell)),
            _ => None,
        };
        if let Some((workers, cell)) = engine_cell {
            let spec = scenario.cell(cell).expect("validated");
            let slots = match &spec.request.cores {
                CoreRequest::List(l) => l.len(),
                CoreRequest::Count(n) => *n,
            };
            if spec.request.budget.is_some() && workers + 1 > slots {
                return refuse(table.clone(), format!("the engine's driver and {workers} worker(s) need {} reservation slots; cell {cell:?} has {slots} core(s) (give it more cores or set workers = {})", workers + 1, slots.saturating_sub(1)));
            }
        }
        let mut per_core: BTreeMap<usize, f64> = BTreeMap::new();
        for name in c.cells() {
            let spec = scenario.cell(name).expect("validated");
            if let (Some(b), CoreRequest::List(cores)) = (&spec.request.budget, &spec.request.cores)
            {
                for core in cores {
                    *per_core.entry(*core).or_default() += b.runtime_ns as f64 / b.period_ns as f64;
                }
            }
        }
        if let Some((core, share)) = per_core
            .iter()
            .find(|(_, s)| **s > self.facts.capacity + 1e-9)
        {
            return refuse(table.clone(), format!("the reservations on CPU {core} add up to {share:.3}, more than the {:.2} SCHED_DEADLINE may use there", self.facts.capacity));
        }
        Ok(())
    }
}
