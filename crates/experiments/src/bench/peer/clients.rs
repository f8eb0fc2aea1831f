//! The JACK clients on either peer server: jackd2 or PipeWire started
//! through [`crate::harness::servers`] (private name or runtime directory, dummy
//! driver, the run's frames and rate), `tessera-jack-peer` hosting the load
//! clients against it (through `pw-jack` on PipeWire), and its file read
//! back into the cycles [`super::cycles`] measures — with the cycle start
//! each server can give (see [`CycleStart`]).
//!
//! It owns the peer's command line and the reading of its file; it must
//! never start or stop a server but through [`crate::harness::servers`], nor signal
//! a process it did not start.

use std::collections::BTreeMap;
use std::fs;

use tessera_measure::LatencyHistogram;
use tessera_sys::sched::{self, Policy};

use super::cycles::{figures, CycleNodes, NodeTimes, Role};
use super::setup::{
    run_to_end, tool, Figures, Options, PeerError, Topology, HISTOGRAM_MAX_NS, INSTALL_FIX,
};
use crate::harness::servers::{AudioServer, JackServer, PipeWireServer, ServerSpec};
use tessera_jack_peer::record::{PeerRecord, PeerRow};
use tessera_scenario::ServerKind;

/// The server's name in the table and the results.
pub(super) fn label(kind: ServerKind) -> &'static str {
    match kind {
        ServerKind::Jack => "JACK2",
        ServerKind::PipeWire => "PipeWire",
    }
}

/// A configuration's name: server and topology.
pub(super) fn configuration(kind: ServerKind, topology: Topology) -> String {
    format!("{} {}", label(kind), topology.name())
}

fn kind_of(server: &AudioServer) -> ServerKind {
    match server {
        AudioServer::Jack(_) => ServerKind::Jack,
        AudioServer::PipeWire(_) => ServerKind::PipeWire,
    }
}

/// The server, ready for clients; stopped by its PID when dropped, so an
/// error anywhere in the run still stops it.
pub(super) fn start_server(options: &Options, kind: ServerKind) -> Result<AudioServer, PeerError> {
    let spec = ServerSpec {
        frames: options.frames,
        rate: options.sample_rate,
        priority: options.priority,
        core: None,
        log: options.out_dir.join(format!("{}.log", kind.name())),
    };
    let server = match kind {
        ServerKind::Jack => JackServer::start(&options.jackd, &spec).map(AudioServer::Jack),
        ServerKind::PipeWire => PipeWireServer::start(&spec).map(AudioServer::PipeWire),
    };
    server.map_err(|message| PeerError::Tool {
        what: kind.name().into(),
        message,
        fix: INSTALL_FIX,
    })
}

/// `tessera-jack-peer` with the run's clients in `topology` against
/// `server`, to its end; its cycles as figures.
pub(super) fn run(
    options: &Options,
    server: &AudioServer,
    topology: Topology,
) -> Result<Figures, PeerError> {
    let kind = kind_of(server);
    let out = options
        .out_dir
        .join(format!("{}-{}.tsv", kind.name(), topology.name()));
    let mut command = server.client_command(&options.peer);
    command
        .args(["--topology", topology.name()])
        .args(["--loads", &options.loads.to_string()])
        .args(["--load", &options.load_fraction.to_string()])
        .args(["--seconds", &options.seconds.to_string()])
        .arg("--out")
        .arg(&out);
    run_to_end(
        &mut command,
        "tessera-jack-peer",
        "see the server's log (jackd.log, pipewire.log) in the output directory",
    )?;
    let text = fs::read_to_string(&out).map_err(tool("reading the JACK peer's samples", ""))?;
    let peer = parse_peer_file(&text, CycleStart::of(kind))?;
    let mut figures = figures(
        configuration(kind, topology),
        topology,
        options,
        &peer.cycles,
    );
    figures.notes.extend(notes(options, server, &peer));
    figures.xruns = match kind {
        ServerKind::Jack => Some(peer.xruns),
        ServerKind::PipeWire => None,
    };
    Ok(figures)
}

/// How the server ran and how its cycles were read, for the figures.
fn notes(options: &Options, server: &AudioServer, peer: &PeerFile) -> Vec<String> {
    let kind = kind_of(server);
    let mut notes = vec![
        format!(
            "{}; clients: {}; {}'s real-time threads: {}",
            command_line(kind, options),
            peer.hosting,
            kind.name(),
            describe_policies(&real_time_policies(server))
        ),
        CycleStart::of(kind).note(&peer.first_wake),
        format!(
            "{} recorded cycles in which not every client ran once are left out",
            peer.incomplete
        ),
    ];
    if kind == ServerKind::PipeWire {
        notes.push(
            "xruns not counted: PipeWire's libjack gives JACK clients no xrun callbacks; \
             late cycles (end-to-end > period) are counted as for every configuration"
                .into(),
        );
    }
    notes
}

/// How the server runs, for the notes.
fn command_line(kind: ServerKind, options: &Options) -> String {
    match kind {
        ServerKind::Jack => format!(
            "jackd -R -P {} -d dummy -r {} -p {}",
            options.priority, options.sample_rate, options.frames
        ),
        ServerKind::PipeWire => format!(
            "pipewire (Dummy-Driver; settings clock.force-rate {}, clock.force-quantum {}), \
             clients through pw-jack",
            options.sample_rate, options.frames
        ),
    }
}

/// The real-time policies of the server's threads now.
fn real_time_policies(server: &AudioServer) -> Vec<Policy> {
    let threads = tessera_sys::proc::threads_of(server.pid()).unwrap_or_default();
    threads
        .into_iter()
        .filter_map(|tid| sched::get_policy(tid).ok())
        .filter(Policy::is_real_time)
        .collect()
}

/// "1 at SCHED_FIFO priority 88", one part per policy; "none".
fn describe_policies(policies: &[Policy]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for policy in policies {
        *counts.entry(policy.to_string()).or_default() += 1;
    }
    if counts.is_empty() {
        return "none".into();
    }
    let parts: Vec<String> = counts
        .into_iter()
        .map(|(policy, n)| format!("{n} at {policy}"))
        .collect();
    parts.join(", ")
}

/// Where a JACK client's cycle starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CycleStart {
    /// What `jack_get_cycle_times` reports: JACK2's frame timer's
    /// (DLL-filtered) estimate of its driver's wake-up.
    Reported,
    /// The first client's wake-up: PipeWire's libjack reports its driver's
    /// scheduled timer expiry, before the driver even woke.
    FirstWakeUp,
}

impl CycleStart {
    pub fn of(kind: ServerKind) -> CycleStart {
        match kind {
            ServerKind::Jack => CycleStart::Reported,
            ServerKind::PipeWire => CycleStart::FirstWakeUp,
        }
    }

    /// Says which start the figures use; `first_wake` is, per cycle, the
    /// first client's wake-up after the reported start.
    fn note(self, first_wake: &LatencyHistogram) -> String {
        let lag = format!(
            "p50 {:.1} / p99 {:.1} µs",
            first_wake.quantile(0.5) as f64 / 1e3,
            first_wake.quantile(0.99) as f64 / 1e3
        );
        match self {
            CycleStart::Reported => format!(
                "cycle start: jack_get_cycle_times (JACK2's frame-timer wake-up estimate); \
                 the first client woke {lag} after it"
            ),
            CycleStart::FirstWakeUp => format!(
                "cycle start: the first client's wake-up, since jack_get_cycle_times gives \
                 PipeWire's scheduled timer expiry; the first client woke {lag} after that \
                 (timer latency, PipeWire's driver, its hand-off), which this overhead and \
                 cycle time leave out (tessera ÷ PipeWire errs against tessera), and its \
                 scheduling latency is 0 by construction"
            ),
        }
    }
}

/// What the JACK peer recorded (format: tessera-jack-peer's `record` module).
#[derive(Debug)]
pub struct PeerFile {
    pub cycles: Vec<CycleNodes>,
    pub xruns: u64,
    pub hosting: String,
    /// Per cycle: the first client's wake-up after the reported start.
    pub first_wake: LatencyHistogram,
    /// Cycles recorded in which not every client ran exactly once.
    pub incomplete: u64,
}

/// Parses the peer's file into cycles in which every client ran, timed
/// from `start`; each client is signalled when its predecessors finished
/// (the cycle start for the first), as JACK's graph order has it.
pub fn parse_peer_file(text: &str, start: CycleStart) -> Result<PeerFile, PeerError> {
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
    let mut first_wake = LatencyHistogram::new(HISTOGRAM_MAX_NS);
    let mut incomplete = 0;
    let mut cycles = Vec::new();
    for group in by_cycle(record.rows.clone()) {
        match cycle(&group, &clients, topology, start) {
            Some((cycle, lag_ns)) => {
                first_wake.record(lag_ns);
                cycles.push(cycle);
            }
            None => incomplete += 1,
        }
    }
    Ok(PeerFile {
        cycles,
        xruns: record.xruns,
        hosting: record.hosting,
        first_wake,
        incomplete,
    })
}

/// The rows grouped by cycle (frame count), each group in client order.
fn by_cycle(mut rows: Vec<PeerRow>) -> Vec<Vec<PeerRow>> {
    rows.sort_by_key(|r| (r.frames, r.client));
    rows.chunk_by(|a, b| a.frames == b.frames)
        .map(<[PeerRow]>::to_vec)
        .collect()
}

/// One cycle's nodes timed from `start`, and how long after the reported
/// start the first client woke; None unless every client ran exactly once.
fn cycle(
    group: &[PeerRow],
    clients: &[&str],
    topology: Topology,
    start: CycleStart,
) -> Option<(CycleNodes, u64)> {
    let complete =
        group.len() == clients.len() && group.iter().enumerate().all(|(i, r)| r.client == i);
    if !complete {
        return None;
    }
    // Every client reports the same cycle start; the first client's
    // mapping onto CLOCK_MONOTONIC is used for all.
    let reported_ns = group[0].start_ns;
    let first_awake_ns = group
        .iter()
        .map(|r| r.awake_ns)
        .min()
        .unwrap_or(reported_ns);
    let start_ns = match start {
        CycleStart::Reported => reported_ns,
        CycleStart::FirstWakeUp => first_awake_ns,
    };
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
    let lag_ns = first_awake_ns.saturating_sub(reported_ns);
    Some((CycleNodes { start_ns: 0, nodes }, lag_ns))
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

#[cfg(test)]
mod tests {
    use super::*;

    // Cycle 64 starts at JACK time 1000 µs; callbacks woke at JACK 1002 µs
    // = 5_002_000 ns monotonic, so the start maps to 5_000_000 ns. Cycle 128
    // lacks load-02.
    const CHAIN: &str = "# tessera-jack-peer 1\n# topology chain\n# clients load-01 load-02\n\
                         # xruns 3\n# hosting one process\n\
                         client\tcycle_frames\tcycle_start_us\tjack_awake_us\tawake_ns\tfinished_ns\tcpu_ns\n\
                         0\t64\t1000\t1002\t5002000\t5070000\t66000\n\
                         1\t64\t1000\t1075\t5075000\t5142000\t66000\n\
                         0\t128\t2333\t2335\t6335000\t6400000\t66000\n";

    #[test]
    fn peer_file_gives_complete_cycles_with_predecessor_signals() {
        let peer = parse_peer_file(CHAIN, CycleStart::Reported).unwrap();
        assert_eq!((peer.xruns, peer.hosting.as_str()), (3, "one process"));
        assert_eq!((peer.cycles.len(), peer.incomplete), (1, 1));
        let nodes = &peer.cycles[0].nodes;
        assert_eq!(nodes[0].awake_ns - nodes[0].signalled_ns, 2_000);
        assert_eq!(nodes[1].signalled_ns, nodes[0].finished_ns);
        assert_eq!(nodes[1].awake_ns - nodes[1].signalled_ns, 5_000);
        assert_eq!(
            peer.cycles[0].overhead_ns(Topology::Chain, 2),
            142_000 - 132_000
        );
        assert_eq!(peer.first_wake.quantile(0.5), 2_000);
    }

    #[test]
    fn first_wake_up_start_leaves_the_hand_off_out() {
        let reported = parse_peer_file(CHAIN, CycleStart::Reported).unwrap();
        let first = parse_peer_file(CHAIN, CycleStart::FirstWakeUp).unwrap();
        let (r, f) = (&reported.cycles[0], &first.cycles[0]);
        assert_eq!(r.end_to_end_ns() - f.end_to_end_ns(), 2_000);
        assert_eq!(f.nodes[0].awake_ns - f.nodes[0].signalled_ns, 0);
        // The successors' scheduling latency does not depend on the start.
        assert_eq!(f.nodes[1].awake_ns - f.nodes[1].signalled_ns, 5_000);
        assert_eq!(first.first_wake.quantile(0.5), 2_000);
        assert_eq!(
            CycleStart::of(ServerKind::PipeWire),
            CycleStart::FirstWakeUp
        );
    }

    #[test]
    fn a_client_that_ran_twice_makes_the_cycle_incomplete() {
        let twice = format!(
            "{CHAIN}1\t128\t2333\t2400\t6400000\t6460000\t66000\n\
                             1\t128\t2333\t2470\t6470000\t6530000\t66000\n"
        );
        let peer = parse_peer_file(&twice, CycleStart::Reported).unwrap();
        assert_eq!((peer.cycles.len(), peer.incomplete), (1, 1));
    }

    #[test]
    fn policies_are_counted_per_kind() {
        let fifo = |priority| Policy::Fifo { priority };
        assert_eq!(describe_policies(&[]), "none");
        assert_eq!(
            describe_policies(&[fifo(88), fifo(70), fifo(88)]),
            "1 at SCHED_FIFO priority 70, 2 at SCHED_FIFO priority 88"
        );
    }
}
