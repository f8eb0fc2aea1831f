//! AES67 hosts as a scenario's subject: 1–4 hosts (network namespaces on a
//! bridge), each with a network service process of its own (`tessera
//! serve net`, started inside the host, its real-time thread as the
//! `service` role says) and a graph in this process (its engine thread as
//! the `graph` role says; it reaches its service by socket path only).
//! Host a's graph writes a marker on channel 1 of each stream it sends to
//! b; the hosts in between forward each stream both ways; the last sends
//! it back, and a finds it again: the round trip, first sample in → the
//! same sample out. A lone host sends its streams to groups it has joined
//! itself, so they come back through its own network stack: one service's
//! whole load, none of a peer's. Reported over the measured window (the warm-up left
//! out): the round trip as a latency histogram against the scenario's
//! deadline, markers lost, each direction's packets received, lost, late
//! and resyncs, sends the service had no room for, xruns, the media
//! clock's label, and the CPU each service process and each graph thread
//! used, in % of a core.
//!
//! With `[subject.foreign]`, host a is a device of another maker instead
//! (`tessera_workloads`' foreign sender: its own clock, its own jitter, a
//! payload type its SDP tells) and b, the only tessera host, plays its
//! streams by arrival: no marker, no round trip; resyncs and slips count.
//! With `[subject.paths]`, a and b are joined by two impaired paths
//! ([`network`]) and every stream goes on both (ST 2022-7); a
//! configuration's `cut` takes the second down during the window.
//! With `ptp = true`, every host runs ptp4l on the bridge
//! ([`crate::harness::ptp`]: a the grandmaster) and each other host's media
//! clock follows a's through its ptp4l's measured offset; each slave's
//! offset from the grandmaster — ptp4l's and its media clock's — is
//! reported per host as |offset| metrics beside the packet ages, with its
//! losses of PTP; a configuration's `ptp_lost` stops the slaves' ptp4l
//! during the window.
//!
//! It owns the LAN ([`network`]: removed with its namespaces), the service
//! and ptp4l processes (stopped by their PIDs however the run ends, their
//! logs removed), the hosts' graphs (stopped before their services) and the
//! thread that samples them. Nothing it adds runs on a real-time thread
//! beyond what [`Host`] runs there. It must never judge a result, nor leave
//! a process, a namespace or a cell's member behind its configuration.

use crate::subject::contract::{Measured, Running, Stopped, Watched};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

mod network;

use crate::cells::{role, setup_for};
use crate::figures::{latency_metric, within_cell};
use crate::harness::net_service::{await_listening, spawn_service};
use crate::harness::ptp::{Ptp, PtpHost};
use crate::harness::servers::{program_beside_us, unique, OwnedChild};
use network::{Cut, Network, PathGroup};
use tessera_graph::ThreadSetup;
use tessera_measure::{ConfigurationResult, Counter, Metric, RunResults};
use tessera_scenario::{
    aes67_role, Aes67Subject, Configuration, Scenario, Sched, ServicePlan, Subject,
};
use tessera_services::aes67::host::{buffer_for, Host, HostConfig, HostReport, Route};
use tessera_services::aes67::OffsetRecord;
use tessera_services::aes67::{MediaClock, Playout, StreamCounts, StreamSpec, PAYLOAD_TYPE};
use tessera_services::aes67::{AGE_BUCKETS, AGE_BUCKET_NS};
use tessera_services::net::{Class, Discipline};
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns};
use tessera_sys::proc::{current_pid, current_tid, thread_cpu_ns, thread_name, threads_of, Pid};
use tessera_sys::sched::{set_policy, Policy};
use tessera_workloads::foreign_sender::ForeignSenderSpec;
use tessera_workloads::lan::{End, HostId, Lan};

/// The round trip of the marker, and the metric the report's table reads.
pub const METRIC: &str = "round trip (marker)";
/// Every received packet's age at arrival (`tessera_services::aes67`'s
/// packet ages): the tail a receiver's latency must cover.
pub const AGE_METRIC: &str = "packet age at arrival";
/// The services' link: the bridge is a gigabit LAN.
const LINK_BPS: u64 = 1_000_000_000;
/// The port every stream is sent to (each stream has its own group).
const PORT: u16 = 5004;
/// Shortest time between markers: ~100 a second per stream.
const MIN_MARKER_INTERVAL: Duration = Duration::from_millis(10);
/// How often the marker latencies are taken (their rings hold 4096).
const COLLECT_EVERY: Duration = Duration::from_millis(250);
/// The network service's real-time thread (tessera_services::net).
const SERVICE_RT_THREAD: &str = "tessera-net-rt";
/// Note prefixes the report section reads: each holds one column's text.
const STREAMS_NOTE: &str = "aes67 streams each way: ";
/// The counter of the streams each way.
const STREAMS: &str = "aes67 streams each way";
const MARKERS_NOTE: &str = "aes67 markers lost: ";
const PACKETS_NOTE: &str = "aes67 packets lost / late: ";
const XRUNS_NOTE: &str = "aes67 xruns: ";
const SERVICE_CPU_NOTE: &str = "aes67 service CPU (% of a core): ";
const GRAPH_CPU_NOTE: &str = "aes67 graph CPU (% of a core): ";

/// The hosts, set up and waiting for the release.
pub(crate) struct Aes67Run {
    /// Samples the hosts from the release on; gives them back when done.
    keeper: Option<JoinHandle<Kept>>,
    release: Option<mpsc::Sender<u64>>,
    services: Vec<Service>,
    /// Each host's threads, for `--why`; and its graph's cycle.
    traced: Vec<CpuProbe>,
    cycle: Duration,
    /// When the second path is cut, into the window, and the cut once armed.
    cut_after: Option<Duration>,
    cut: Option<Cut>,
    /// When the slaves lose PTP (ns after the release), until done.
    ptp_lost_at: Option<u64>,
    /// The hosts' ptp4l, with ptp = true; dropped before the directory.
    ptp: Option<Ptp>,
    /// What stopping the slaves' ptp4l said.
    ptp_notes: Vec<String>,
    warmup: Duration,
    dir: RunDir,
    about: About,
    /// Last: the namespaces go when everything in them has stopped.
    network: Network,
}

/// What the report says of the configuration, from its start to its
/// metrics.
struct About {
    describe: String,
    /// Each host's media clock when it started, in words.
    clocks: Vec<String>,
    /// Whether the hosts ran PTP (host a the grandmaster).
    ptp: bool,
    names: Vec<&'static str>,
    streams: usize,
    deadline: Duration,
    /// Each receiver's: the packet ages' deadline.
    latency: Duration,
    /// Whether a marker goes round (not from a foreign sender).
    markers: bool,
}

/// What it measured, with what the report says of the configuration.
pub(crate) struct Aes67Data {
    window: Option<Window>,
    /// Each host's report when stopped (its errors, if it failed to stop).
    stopped: Vec<Result<HostReport, String>>,
    /// What the services, the devices, the paths and the cut said at the end.
    services: Vec<String>,
    about: About,
}

/// `tessera serve net` in one host: stopped by its PID when dropped.
struct Service {
    host: &'static str,
    child: OwnedChild,
    socket: PathBuf,
    real_time: String,
}

impl Service {
    fn stop(mut self) -> String {
        let stopped = self.child.stop();
        format!(
            "network service of host {} (pid {}), real-time thread {}: {stopped}",
            self.host,
            self.child.pid(),
            self.real_time
        )
    }
}

/// The services' sockets and logs, a directory per host; removed when
/// dropped, after the services that use it.
struct RunDir(PathBuf);

impl RunDir {
    fn create() -> Result<RunDir, String> {
        let dir = std::env::temp_dir().join(unique("tessera-aes67"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(RunDir(dir))
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where the CPU a host uses is read: its service process and its graph's
/// engine thread (its kernel id, once the engine has set it up).
#[derive(Clone)]
struct CpuProbe {
    service: Pid,
    graph: Arc<AtomicI32>,
}

impl CpuProbe {
    /// CPU time so far, ns: the service's threads', the graph thread's.
    fn sample(&self) -> (u64, u64) {
        let service = threads_of(self.service)
            .unwrap_or_default()
            .iter()
            .filter_map(|&tid| thread_cpu_ns(self.service, tid).ok())
            .sum();
        let graph = match self.graph.load(Ordering::Relaxed) {
            0 => 0,
            tid => thread_cpu_ns(current_pid(), tid).unwrap_or(0),
        };
        (service, graph)
    }

    /// For `tessera run --why`: host `name`'s graph thread, judged by its
    /// cycle on its grid (no subject count: every traced miss is shown).
    /// Its service's real-time thread is not traced: its ~64 000 wake-ups
    /// and system calls a second, each through the traced path, slowed it
    /// until a quarter of the packets came late (`aes67-one-service.toml`,
    /// cells alone: 25.8 % against 2.3 % untraced).
    fn watched(&self, name: &str, cycle: Duration) -> Option<Watched> {
        let tid = self.graph.load(Ordering::Relaxed);
        (tid > 0).then(|| Watched {
            tid,
            metric: format!("graph cycle of host {name}"),
            deadline: Some(cycle),
            period: Some(cycle),
            budget: None,
            chain: None,
            thread_metric: None,
        })
    }
}

/// The hosts and what samples them, on the keeper's thread.
struct Kept {
    hosts: Vec<Host>,
    window: Option<Window>,
}

/// The hosts' media clocks: the keeper takes their offsets.
type Clocks = Vec<MediaClock>;

/// The measured window: each host's reports and CPU at its two ends, and
/// the marker latencies between them.
struct Window {
    start: Vec<(HostReport, (u64, u64))>,
    end: Vec<(HostReport, (u64, u64))>,
    latencies_ns: Vec<u64>,
    length_ns: u64,
    /// Each host's media clock's measurements of its offset from the
    /// grandmaster in the window (empty but for followers of PTP).
    offsets: Vec<Vec<OffsetRecord>>,
}

/// Each host's report and CPU now (host a's latencies taken: the caller
/// keeps or drops them).
fn sample(hosts: &mut [Host], probes: &[CpuProbe]) -> Vec<(HostReport, (u64, u64))> {
    hosts
        .iter_mut()
        .zip(probes)
        .map(|(host, probe)| (host.report(), probe.sample()))
        .collect()
}

/// The keeper: waits for the release, samples at the warm-up's end, takes
/// the marker latencies every [`COLLECT_EVERY`], samples at the run's end.
/// Without a release (the run failed before it) it only gives the hosts
/// back.
fn keep(
    mut hosts: Vec<Host>,
    (probes, clocks): (Vec<CpuProbe>, Clocks),
    release: mpsc::Receiver<u64>,
    warmup: Duration,
    total: Duration,
) -> Kept {
    let Ok(t0) = release.recv() else {
        return Kept {
            hosts,
            window: None,
        };
    };
    let from = t0 + warmup.as_nanos() as u64;
    let end = t0 + total.as_nanos() as u64;
    let mut collected = 0;
    while collected < from {
        collected = (monotonic_ns() + COLLECT_EVERY.as_nanos() as u64).min(from);
        sleep_until_monotonic_ns(collected);
        hosts[0].report();
    }
    let start = sample(&mut hosts, &probes);
    // The warm-up's measurements are left out.
    clocks.iter().for_each(|c| drop(c.take_offsets()));
    let mut latencies_ns = Vec::new();
    while collected < end {
        collected = (monotonic_ns() + COLLECT_EVERY.as_nanos() as u64).min(end);
        sleep_until_monotonic_ns(collected);
        latencies_ns.extend(hosts[0].report().latencies_ns);
    }
    let end_sample = sample(&mut hosts, &probes);
    latencies_ns.extend(end_sample.iter().flat_map(|(r, _)| &r.latencies_ns));
    Kept {
        hosts,
        window: Some(Window {
            start,
            end: end_sample,
            latencies_ns,
            length_ns: end - from,
            offsets: clocks.iter().map(MediaClock::take_offsets).collect(),
        }),
    }
}

/// The stream `k` (1-based) from host `from` to its neighbour `to`:
/// multicast, a group per hop, direction and stream (a lone host's from
/// 0 to 0), and one per path.
fn stream(subject: &Aes67Subject, from: usize, to: usize, k: usize) -> StreamSpec {
    let hop = from.min(to);
    let direction = usize::from(to < from);
    let names = subject.host_names();
    let group = |network| {
        SocketAddrV4::new(
            Ipv4Addr::new(239, network, (10 + 2 * hop + direction) as u8, k as u8),
            PORT,
        )
    };
    let stream = StreamSpec::new(
        format!("{}-{}-{k}", names[from], names[to]),
        group(69),
        subject.format,
        PAYLOAD_TYPE,
    );
    StreamSpec {
        // The second network's group, one more in the second octet.
        secondary: subject.paths.map(|_| group(70)),
        // A foreign sender's payload type, as its SDP would say.
        payload_type: subject.foreign.map_or(PAYLOAD_TYPE, |f| f.payload_type),
        described: subject.foreign.is_some(),
        ..stream
    }
}

/// What host `i` receives and sends: from and to each neighbour, `streams`
/// each way, in the order its route pairs them (received k → sent k).
fn streams_of(
    subject: &Aes67Subject,
    i: usize,
    streams: usize,
) -> (Vec<StreamSpec>, Vec<StreamSpec>) {
    let mut receive = Vec::new();
    let mut send = Vec::new();
    let ks = 1..=streams;
    if subject.hosts == 1 {
        let looped: Vec<_> = ks.map(|k| stream(subject, 0, 0, k)).collect();
        return (looped.clone(), looped);
    }
    if subject.foreign.is_some() {
        // b receives the device's streams and sends nothing.
        return (ks.map(|k| stream(subject, 0, 1, k)).collect(), Vec::new());
    }
    if i > 0 {
        receive.extend(ks.clone().map(|k| stream(subject, i - 1, i, k)));
    }
    if i + 1 < subject.hosts {
        receive.extend(ks.clone().map(|k| stream(subject, i + 1, i, k)));
        send.extend(ks.clone().map(|k| stream(subject, i, i + 1, k)));
    }
    if i > 0 {
        send.extend(ks.map(|k| stream(subject, i, i - 1, k)));
    }
    (receive, send)
}

/// Frames per cycle: the fewest whole packets the engine runs.
fn cycle_frames(subject: &Aes67Subject) -> u32 {
    let packet = subject.format.frames_per_packet;
    packet * tessera_graph::MIN_FRAMES.div_ceil(packet)
}

/// A host's graph cycle: [`cycle_frames`] at the sample rate.
fn cycle_period(subject: &Aes67Subject) -> Duration {
    let ns = u64::from(cycle_frames(subject)) * 1_000_000_000;
    Duration::from_nanos(ns / u64::from(subject.format.sample_rate))
}

fn frames_of(subject: &Aes67Subject, d: Duration) -> u64 {
    (d.as_nanos() * u128::from(subject.format.sample_rate) / 1_000_000_000) as u64
}

/// A marker every 10 ms, or every two round trips if longer: one in
/// flight at a time.
fn marker_interval(subject: &Aes67Subject) -> u64 {
    let round_trip = subject.latency * subject.hops() as u32;
    frames_of(subject, MIN_MARKER_INTERVAL.max(round_trip * 2))
}

/// The setup of a graph's engine thread: scheduled by `sched`, its kernel
/// id noted in `tid` (for its CPU time).
fn graph_setup(sched: &Sched, core: Option<usize>, tid: Arc<AtomicI32>) -> ThreadSetup {
    let setup = setup_for(sched, core);
    Arc::new(move |_| {
        tid.store(current_tid(), Ordering::Relaxed);
        setup.clone()().map_err(Into::into)
    })
}

/// Host `i`'s graph on `interfaces` (the primary network's, the
/// secondary's), reaching its service at `service`: a marker at the first
/// host, forwarding elsewhere, playing into nothing what a foreign device
/// sends; its engine thread set up by `setup`.
fn host_config(
    subject: &Aes67Subject,
    (i, streams): (usize, usize),
    (service, interfaces): (&Path, (Ipv4Addr, Option<Ipv4Addr>)),
    setup: ThreadSetup,
    clock: &MediaClock,
) -> HostConfig {
    let (receive, send) = streams_of(subject, i, streams);
    let route = match (i, subject.foreign) {
        (_, Some(_)) => Route::Tone,
        (0, None) => Route::Marker {
            interval_frames: marker_interval(subject),
        },
        _ => Route::Forward,
    };
    let playout = match subject.foreign {
        Some(f) => Playout::Arrival {
            max_slip_ppm: f.max_slip_ppm,
        },
        None => Playout::MediaClock,
    };
    let latency_frames = frames_of(subject, subject.latency) as u32;
    HostConfig {
        name: subject.host_names()[i].to_string(),
        service: service.to_path_buf(),
        interface: interfaces.0,
        secondary_interface: interfaces.1,
        receive,
        send,
        route,
        frames: cycle_frames(subject),
        sample_rate: subject.format.sample_rate,
        latency_frames,
        buffer_packets: buffer_for(latency_frames, subject.format.frames_per_packet),
        playout,
        clock: clock.clone(),
        workers: 0,
        setup: Some(setup),
    }
}

/// Starts `tessera serve net` inside `host`, listening at `dir`/net.sock,
/// its real-time thread in `sched`'s cell, at its FIFO priority, or plain.
fn start_service(
    lan: &Lan,
    host: (HostId, &'static str),
    sched: &Sched,
    dir: &Path,
) -> Result<Service, String> {
    let log_dir = dir.join(host.1);
    std::fs::create_dir_all(&log_dir).map_err(|e| format!("{}: {e}", log_dir.display()))?;
    let socket = log_dir.join("net.sock");
    let plan = ServicePlan {
        discipline: Discipline::MClock,
        reservation_bps: 0,
        class: Class::RealTime,
        streamer: false,
        link_bps: LINK_BPS,
    };
    let command = lan
        .command(
            End::Host(host.0),
            &program_beside_us("tessera").to_string_lossy(),
        )
        .map_err(|e| e.to_string())?;
    let mut service = Service {
        host: host.1,
        child: spawn_service(command, &plan, &socket, &log_dir, sched)?,
        socket: socket.clone(),
        real_time: sched.describe(),
    };
    await_listening(&mut service.child, &socket, &log_dir)?;
    if let Some(priority) = sched.fifo {
        raise_real_time_thread(service.child.pid(), priority)?;
    }
    Ok(service)
}

/// Puts the service's real-time thread at SCHED_FIFO `priority` (it runs
/// with `--no-cell`: SCHED_OTHER until then); the process's end undoes it.
fn raise_real_time_thread(pid: Pid, priority: u32) -> Result<(), String> {
    let tid = real_time_thread(pid)?;
    set_policy(tid, &Policy::Fifo { priority }).map_err(|e| e.to_string())
}

/// The network service `pid`'s real-time thread.
fn real_time_thread(pid: Pid) -> Result<i32, String> {
    threads_of(pid)
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|&tid| thread_name(pid, tid) == SERVICE_RT_THREAD)
        .ok_or(format!(
            "the network service (pid {pid}) has no thread {SERVICE_RT_THREAD:?}"
        ))
}

/// The groups each path's relay forwards: every stream's, each way, on
/// its path's network.
fn path_groups(subject: &Aes67Subject, streams: usize) -> [Vec<PathGroup>; 2] {
    let mut groups = [Vec::new(), Vec::new()];
    for (sender, receiver) in [(0, 1), (1, 0)] {
        for k in 1..=streams {
            let s = stream(subject, sender, receiver, k);
            groups[0].push(PathGroup {
                group: s.address,
                sender,
            });
            groups[1].extend(s.secondary.map(|group| PathGroup { group, sender }));
        }
    }
    groups
}

/// What a foreign device in host a sends: each of b's streams, from its
/// address, on its own clock.
fn device_specs(
    subject: &Aes67Subject,
    streams: usize,
    interface: Ipv4Addr,
) -> Vec<ForeignSenderSpec> {
    let Some(foreign) = subject.foreign else {
        return Vec::new();
    };
    (1..=streams)
        .map(|k| {
            let s = stream(subject, 0, 1, k);
            ForeignSenderSpec {
                destination: s.address,
                interface,
                payload_type: foreign.payload_type,
                bytes_per_sample: s.format.encoding.bytes_per_sample(),
                channels: s.format.channels,
                sample_rate: s.format.sample_rate,
                frames_per_packet: s.format.frames_per_packet,
                clock_ppm: foreign.clock_ppm,
                jitter: foreign.jitter,
                seed: 26 + k as u64,
                fifo_priority: None,
            }
        })
        .collect()
}

impl Aes67Run {
    pub(crate) fn start(scenario: &Scenario, config: &Configuration) -> Result<Aes67Run, String> {
        let Subject::Aes67(subject) = &scenario.subject else {
            unreachable!("called for aes67 subjects only")
        };
        let settings = config.aes67.expect("validated for aes67 subjects");
        let streams = settings.streams;
        let all = subject.host_names();
        let mut network = match &subject.paths {
            Some(paths) => {
                Network::two_paths([all[0], all[1]], paths, path_groups(subject, streams))?
            }
            None => Network::bridged(all)?,
        };
        let device_address = network.interfaces(0).0;
        network.start_devices(0, device_specs(subject, streams, device_address))?;
        // The hosts that run tessera, by their index among all.
        let names = subject.tessera_hosts().to_vec();
        let first = all.len() - names.len();
        let dir = RunDir::create()?;
        let mut services = Vec::new();
        for (k, &name) in names.iter().enumerate() {
            let sched = role(config, &aes67_role("service", name));
            let host = (network.host(first + k), name);
            services.push(start_service(network.lan(), host, sched, &dir.0)?);
        }
        let (ptp, clocks) = media_clocks(subject, &network, &names, &dir.0)?;
        let mut hosts = Vec::new();
        let mut probes = Vec::new();
        // From the last to the first: each stream's receiver is there
        // before its sender, and host a's markers start last.
        for k in (0..names.len()).rev() {
            let tid = Arc::new(AtomicI32::new(0));
            let sched = role(config, &aes67_role("graph", names[k]));
            let host = host_config(
                subject,
                (first + k, streams),
                (&services[k].socket, network.interfaces(first + k)),
                graph_setup(sched, scenario.core, tid.clone()),
                &clocks[k],
            );
            hosts.insert(
                0,
                Host::start(host).map_err(|e| format!("host {}: {e}", names[k]))?,
            );
            probes.insert(
                0,
                CpuProbe {
                    service: services[k].child.pid(),
                    graph: tid,
                },
            );
        }
        let traced = probes.clone();
        let (release, wait) = mpsc::channel();
        let (warmup, total) = (scenario.warmup, scenario.total());
        let labels = clocks.iter().map(MediaClock::label).collect();
        let keeper = std::thread::Builder::new()
            .name("aes67-keeper".into())
            .spawn(move || keep(hosts, (probes, clocks), wait, warmup, total))
            .map_err(|e| format!("the hosts' keeper thread: {e}"))?;
        Ok(Aes67Run {
            keeper: Some(keeper),
            release: Some(release),
            services,
            traced,
            cycle: cycle_period(subject),
            cut_after: settings.cut,
            cut: None,
            ptp_lost_at: settings.ptp_lost.map(|l| (warmup + l).as_nanos() as u64),
            ptp,
            ptp_notes: Vec::new(),
            warmup,
            dir,
            about: About {
                describe: describe(subject, streams),
                clocks: labels,
                ptp: subject.ptp,
                names,
                streams,
                deadline: subject.deadline,
                latency: subject.latency,
                markers: subject.foreign.is_none(),
            },
            network,
        })
    }

    /// The measured window's clock starts at `t0` (CLOCK_MONOTONIC); a
    /// cut is armed from it.
    pub(crate) fn release(&mut self, t0: u64) -> Result<(), String> {
        if let Some(release) = &self.release {
            let _ = release.send(t0);
        }
        if let Some(after) = self.cut_after {
            let at = t0 + (self.warmup + after).as_nanos() as u64;
            self.cut = Some(self.network.cut_at(at)?);
        }
        Ok(())
    }

    /// Stops the slaves' ptp4l once `elapsed_ns` (after the release) has
    /// reached the configuration's `ptp_lost`; when that is due, if not yet.
    fn advance(&mut self, elapsed_ns: u64) -> Option<u64> {
        let at = self.ptp_lost_at?;
        if elapsed_ns < at {
            return Some(at);
        }
        self.ptp_lost_at = None;
        if let Some(ptp) = &mut self.ptp {
            let stopped = ptp.stop_slaves();
            self.ptp_notes.extend(
                stopped
                    .into_iter()
                    .map(|s| format!("aes67 PTP lost on purpose: {s}")),
            );
        }
        None
    }

    /// Stops the graphs, the devices, the services, the ptp4l and the
    /// paths, then removes the LAN.
    pub(crate) fn finish(self) -> Aes67Data {
        let Aes67Run {
            keeper,
            release,
            services,
            cut,
            ptp,
            ptp_notes,
            dir,
            about,
            mut network,
            ..
        } = self;
        // Without a release the keeper gives the hosts back at once.
        drop(release);
        let (window, stopped) = match keeper.map(JoinHandle::join) {
            Some(Ok(kept)) => {
                let stopped = kept
                    .hosts
                    .into_iter()
                    .map(|h| h.stop().map_err(|e| e.to_string()));
                (kept.window, stopped.collect())
            }
            _ => (None, vec![Err("the hosts' keeper thread panicked".into())]),
        };
        let mut notes = network.stop_outside();
        notes.extend(cut.map(Cut::finish));
        notes.extend(services.into_iter().map(Service::stop));
        notes.extend(ptp_notes);
        notes.extend(ptp.into_iter().flat_map(Ptp::stop));
        drop((dir, network));
        Aes67Data {
            window,
            stopped,
            services: notes,
            about,
        }
    }
}

/// Each host's media clock, and with `ptp = true` the hosts' ptp4l (host a
/// the grandmaster) whose clocks they are; else one clock for all: this
/// machine's.
fn media_clocks(
    subject: &Aes67Subject,
    network: &Network,
    names: &[&'static str],
    dir: &Path,
) -> Result<(Option<Ptp>, Vec<MediaClock>), String> {
    if !subject.ptp {
        let clock =
            MediaClock::system("every host is a namespace of this machine: they share its clock");
        return Ok((None, vec![clock; names.len()]));
    }
    let interface = network
        .bridge_device()
        .ok_or("PTP runs on the hosts' bridge, and they are on none")?;
    let hosts: Vec<PtpHost> = names
        .iter()
        .enumerate()
        .map(|(k, name)| PtpHost {
            id: network.host(k),
            name: name.to_string(),
            interface: interface.to_string(),
        })
        .collect();
    let mut ptp = Ptp::start(network.lan(), &hosts, &dir.join("ptp"))?;
    let clocks = ptp.clocks()?;
    Ok((Some(ptp), clocks))
}

/// The configuration in a line: the chain, the streams, the timing (the
/// roles are the runner's note).
fn describe(subject: &Aes67Subject, streams: usize) -> String {
    let f = &subject.format;
    let format = format!(
        "{streams} stream(s) each way of {} ch {}/{} Hz, {} µs packets",
        f.channels,
        f.encoding.name(),
        f.sample_rate,
        f.packet_time_ns() / 1000
    );
    if let Some(foreign) = subject.foreign {
        return format!(
            "host a a foreign device (its own RTP, payload type {}, clock {:+} ppm, up to {:.3} ms \
             of send jitter) on a bridge with b; {} from a to b; b plays them by arrival {:.3} ms \
             behind the fastest packet, slipping at most {} ppm",
            foreign.payload_type,
            foreign.clock_ppm,
            foreign.jitter.as_secs_f64() * 1e3,
            format.replacen(" each way", "", 1),
            subject.latency.as_secs_f64() * 1e3,
            foreign.max_slip_ppm
        );
    }
    let names = subject.host_names();
    let back = names.iter().rev().skip(1);
    let chain = match names {
        [lone] => format!("{lone} → {lone} through groups it joined itself (multicast loopback)"),
        _ => names
            .iter()
            .chain(back)
            .copied()
            .collect::<Vec<_>>()
            .join(" → "),
    };
    let network = match subject.paths {
        None => "hosts on a bridge".to_string(),
        Some(p) => format!(
            "hosts on two paths (ST 2022-7), each losing {:.2} % and delaying {:.3} ms plus up to \
             {:.3} ms",
            p.loss * 100.0,
            p.delay.as_secs_f64() * 1e3,
            p.jitter.as_secs_f64() * 1e3
        ),
    };
    format!(
        "{network}, {chain}; {format}; each receiver {:.3} ms behind the media clock ({} hops: \
         {:.3} ms round trip); a marker every {:.0} ms per stream",
        subject.latency.as_secs_f64() * 1e3,
        subject.hops(),
        (subject.latency * subject.hops() as u32).as_secs_f64() * 1e3,
        marker_interval(subject) as f64 * 1e3 / f64::from(f.sample_rate),
    )
}

/// The window's counts of each stream, by name and direction, summed per
/// hop direction ("a-b": from a to b): what b received, what a sent.
fn per_direction(window: &Window) -> Vec<(String, StreamCounts)> {
    let mut sums: Vec<(String, StreamCounts)> = Vec::new();
    for ((start, _), (end, _)) in window.start.iter().zip(&window.end) {
        for (s, e) in start.streams.iter().zip(&end.streams) {
            let d = e.counts.since(&s.counts);
            let hop = s.name.rsplit_once('-').map_or(s.name.as_str(), |(h, _)| h);
            let at = match sums.iter().position(|(h, _)| h == hop) {
                Some(at) => at,
                None => {
                    sums.push((hop.to_string(), StreamCounts::default()));
                    sums.len() - 1
                }
            };
            sums[at].1.add(&d);
        }
    }
    sums
}

/// A hop direction's counts: "aes67 a → b received", …
fn direction_counters((hop, c): &(String, StreamCounts)) -> Vec<Counter> {
    let j = &c.jitter;
    Counter::counts(
        [
            ("sent", c.sent),
            ("service full", c.send_full),
            ("received", j.received),
            ("lost", j.lost),
            ("unsent", j.unsent),
            ("late", j.late),
            ("late on arrival", c.late_arrivals),
            ("late in host", c.late_in_host),
            ("duplicates", j.duplicates),
            ("reordered", j.reordered),
            ("too early", j.too_early),
            ("frames silent", c.silent_frames),
            ("resyncs", c.resyncs),
            ("frames dropped", c.frames_dropped),
            ("frames repeated", c.frames_repeated),
            ("wrong payload type", c.wrong_payload_type),
            ("copies merged", c.merge.duplicates),
            ("path 1 lost", c.merge.paths[0].lost),
            ("path 2 lost", c.merge.paths[1].lost),
        ]
        .map(|(what, n)| (format!("aes67 {}: {what}", hop.replace('-', " → ")), n)),
    )
}

fn direction_note((hop, c): &(String, StreamCounts)) -> String {
    let j = &c.jitter;
    let gone = if c.service_gone {
        "; A SERVICE DIED"
    } else {
        ""
    };
    format!(
        "aes67 {}: sent {} (service full {}); received {}, lost {}, unsent {}, late {} ({} on \
         arrival, {} in the host), duplicates {}, \
         reordered {}, too early {}; {} frames silent; {} resyncs; slips: {} frames dropped, {} \
         repeated; paths: {} copies merged, path 1 lost {}, path 2 lost {}{gone}",
        hop.replace('-', " → "),
        c.sent,
        c.send_full,
        j.received,
        j.lost,
        j.unsent,
        j.late,
        c.late_arrivals,
        c.late_in_host,
        j.duplicates,
        j.reordered,
        j.too_early,
        c.silent_frames,
        c.resyncs,
        c.frames_dropped,
        c.frames_repeated,
        c.merge.duplicates,
        c.merge.paths[0].lost,
        c.merge.paths[1].lost
    )
}

/// Every packet the hosts received in the window, as the middle of its age
/// bucket.
fn packet_ages_ns(window: &Window) -> impl Iterator<Item = u64> {
    let mut counts = vec![0u64; AGE_BUCKETS];
    for ((start, _), (end, _)) in window.start.iter().zip(&window.end) {
        for (s, e) in start.streams.iter().zip(&end.streams) {
            for (count, (a, b)) in counts
                .iter_mut()
                .zip(s.packet_ages.iter().zip(&e.packet_ages))
            {
                *count += b.saturating_sub(*a);
            }
        }
    }
    counts.into_iter().enumerate().flat_map(|(k, n)| {
        std::iter::repeat_n(k as u64 * AGE_BUCKET_NS + AGE_BUCKET_NS / 2, n as usize)
    })
}

/// `values` per host as "12.3 / 11.0 (a / b)".
fn per_host(hosts: &[HostFigures], value: fn(&HostFigures) -> f64) -> String {
    let values: Vec<String> = hosts.iter().map(|h| format!("{:.1}", value(h))).collect();
    let names: Vec<&str> = hosts.iter().map(|h| h.name).collect();
    format!("{} ({})", values.join(" / "), names.join(" / "))
}

/// The measured window's figures the report's table shows, a counter each.
#[derive(Debug, Clone, PartialEq)]
struct Figures {
    markers_lost: u64,
    markers_written: u64,
    packets_lost: u64,
    packets_late: u64,
    /// Resyncs and frames slipped over all received streams (None in
    /// results from before they were counted).
    resyncs: Option<u64>,
    slipped: Option<u64>,
    /// In the hosts' order.
    hosts: Vec<HostFigures>,
}

#[derive(Debug, Clone, PartialEq)]
struct HostFigures {
    name: &'static str,
    xruns: u64,
    /// CPU time over the window, % of a core.
    service_cpu: f64,
    graph_cpu: f64,
}

const MARKERS_LOST: &str = "aes67 markers lost";
const MARKERS_WRITTEN: &str = "aes67 markers written";
const PACKETS_LOST: &str = "aes67 packets lost";
const PACKETS_LATE: &str = "aes67 packets late";
const RESYNCS: &str = "aes67 resyncs";
const SLIPPED: &str = "aes67 frames slipped";
/// A host's counters: "aes67 xruns a", …
const XRUNS: &str = "aes67 xruns";
const SERVICE_CPU: &str = "aes67 service CPU";
const GRAPH_CPU: &str = "aes67 graph CPU";
const PERCENT_OF_A_CORE: &str = "% of a core";

fn host_counter(what: &str, host: &str) -> String {
    format!("{what} {host}")
}

impl Figures {
    fn markers(&self) -> String {
        format!("{} of {}", self.markers_lost, self.markers_written)
    }

    fn packets(&self) -> String {
        format!("{} / {}", self.packets_lost, self.packets_late)
    }

    fn resyncs_and_slips(&self) -> String {
        let or_dash = |n: Option<u64>| n.map_or("–".into(), |n| n.to_string());
        format!("{} / {}", or_dash(self.resyncs), or_dash(self.slipped))
    }

    fn xruns(&self) -> String {
        per_host(&self.hosts, |h| h.xruns as f64)
    }

    fn service_cpu(&self) -> String {
        per_host(&self.hosts, |h| h.service_cpu)
    }

    fn graph_cpu(&self) -> String {
        per_host(&self.hosts, |h| h.graph_cpu)
    }

    fn counters(&self) -> Vec<Counter> {
        let mut counters = Counter::counts([
            (MARKERS_LOST, self.markers_lost),
            (MARKERS_WRITTEN, self.markers_written),
            (PACKETS_LOST, self.packets_lost),
            (PACKETS_LATE, self.packets_late),
        ]);
        for (name, value) in [(RESYNCS, self.resyncs), (SLIPPED, self.slipped)] {
            counters.extend(value.map(|n| Counter::count(name, n)));
        }
        for h in &self.hosts {
            counters.extend([
                Counter::count(host_counter(XRUNS, h.name), h.xruns),
                Counter::new(
                    host_counter(SERVICE_CPU, h.name),
                    h.service_cpu,
                    PERCENT_OF_A_CORE,
                ),
                Counter::new(
                    host_counter(GRAPH_CPU, h.name),
                    h.graph_cpu,
                    PERCENT_OF_A_CORE,
                ),
            ]);
        }
        counters
    }

    /// The figures of a configuration's counters; None if it has none.
    fn from_result(result: &ConfigurationResult) -> Option<Figures> {
        let hosts = tessera_scenario::aes67::HOST_NAMES
            .iter()
            .filter_map(|&name| {
                let value = |what| Some(result.counter(&host_counter(what, name))?.value);
                Some(HostFigures {
                    name,
                    xruns: result.count(&host_counter(XRUNS, name))?,
                    service_cpu: value(SERVICE_CPU)?,
                    graph_cpu: value(GRAPH_CPU)?,
                })
            })
            .collect();
        Some(Figures {
            markers_lost: result.count(MARKERS_LOST)?,
            markers_written: result.count(MARKERS_WRITTEN)?,
            packets_lost: result.count(PACKETS_LOST)?,
            packets_late: result.count(PACKETS_LATE)?,
            resyncs: result.count(RESYNCS),
            slipped: result.count(SLIPPED),
            hosts,
        })
    }
}

/// The subject's metrics, counters and notes, over the measured window.
pub(crate) fn metrics(data: Aes67Data) -> Measured {
    let mut notes = vec![format!("aes67: {}", data.about.describe)];
    notes.extend(
        data.about
            .names
            .iter()
            .zip(&data.about.clocks)
            .map(|(name, clock)| format!("aes67 media clock of host {name}: {clock}")),
    );
    notes.push(format!("{STREAMS_NOTE}{}", data.about.streams));
    let mut labels = Vec::new();
    let deadline_us = data.about.deadline.as_nanos() as f64 / 1000.0;
    let mut metrics = Vec::new();
    let mut counters = vec![Counter::count(STREAMS, data.about.streams as u64)];
    if let Some(w) = &data.window {
        let a = (&w.start[0].0, &w.end[0].0);
        let directions = per_direction(w);
        let total = directions
            .iter()
            .fold(StreamCounts::default(), |mut s, (_, c)| {
                s.add(c);
                s
            });
        let share =
            |(s, e): (u64, u64)| e.saturating_sub(s) as f64 * 100.0 / w.length_ns.max(1) as f64;
        let hosts = data
            .about
            .names
            .iter()
            .zip(w.start.iter().zip(&w.end))
            .map(|(&name, ((s, s_cpu), (e, e_cpu)))| HostFigures {
                name,
                xruns: e.xruns.saturating_sub(s.xruns),
                service_cpu: share((s_cpu.0, e_cpu.0)),
                graph_cpu: share((s_cpu.1, e_cpu.1)),
            })
            .collect();
        let figures = Figures {
            markers_lost: a.1.markers_lost.saturating_sub(a.0.markers_lost),
            markers_written: a.1.markers_written.saturating_sub(a.0.markers_written),
            packets_lost: total.jitter.lost,
            packets_late: total.jitter.late,
            resyncs: Some(total.resyncs),
            slipped: Some(total.frames_dropped + total.frames_repeated),
            hosts,
        };
        notes.push(format!("{MARKERS_NOTE}{}", figures.markers()));
        notes.push(format!("{PACKETS_NOTE}{}", figures.packets()));
        notes.extend(directions.iter().map(direction_note));
        counters.extend(directions.iter().flat_map(direction_counters));
        notes.push(format!("{XRUNS_NOTE}{}", figures.xruns()));
        notes.push(format!("{SERVICE_CPU_NOTE}{}", figures.service_cpu()));
        notes.push(format!("{GRAPH_CPU_NOTE}{}", figures.graph_cpu()));
        counters.extend(figures.counters());
        if data.about.markers {
            metrics.push(latency_metric(
                METRIC,
                Some(deadline_us),
                w.latencies_ns.iter().copied(),
            ));
        }
        let latency_us = data.about.latency.as_nanos() as f64 / 1000.0;
        metrics.push(latency_metric(
            AGE_METRIC,
            Some(latency_us),
            packet_ages_ns(w),
        ));
        if data.about.ptp {
            let ptp = ptp_figures(&data.about.names, w);
            metrics.extend(ptp.metrics);
            counters.extend(ptp.counters);
            notes.extend(ptp.notes);
            labels = ptp.labels;
        }
    } else {
        notes.push("aes67: nothing measured (the run ended before its release)".into());
    }
    for (name, stopped) in data.about.names.iter().zip(&data.stopped) {
        match stopped {
            Ok(r) if !r.late_nodes.is_empty() => notes.push(format!(
                "aes67 host {name}: xruns named late {:?} (whole run)",
                r.late_nodes
            )),
            Ok(_) => {}
            Err(e) => notes.push(format!("aes67 host {name}: {e}")),
        }
    }
    notes.extend(data.services);
    labels.into_iter().fold(
        Measured::new(metrics, counters, notes),
        |measured, (name, value)| measured.label(&name, value),
    )
}

/// The metric of a host's |offset| from the grandmaster as ptp4l measured
/// it (its system clock's): "… (ptp4l) b".
pub const PTP4L_OFFSET_METRIC: &str = "PTP |offset| from the grandmaster (ptp4l)";
/// … and its media clock's (ptp4l's plus what the media clock adds).
pub const MEDIA_OFFSET_METRIC: &str = "PTP |offset| from the grandmaster (media clock)";
/// A host's losses of PTP in the window: "aes67 PTP losses b".
pub const PTP_LOSSES: &str = "aes67 PTP losses";
/// The label of a host's PTP at the window's end: "aes67 PTP b".
pub const PTP_LABEL: &str = "aes67 PTP";
/// Issue 26's goal for |offset| p99 on every host, µs: the metrics'
/// deadline, so their misses count the measurements beyond it.
const PTP_GOAL_US: f64 = 50.0;

/// What the window says of PTP per host.
struct PtpFigures {
    metrics: Vec<Metric>,
    counters: Vec<Counter>,
    labels: Vec<(String, String)>,
    notes: Vec<String>,
}

/// Per slave host (all but a, the grandmaster: its offset is 0), its
/// |offset| metrics, its losses in the window, a label of where it stands
/// at the window's end ("following", or the loss in words) and a note.
fn ptp_figures(names: &[&'static str], w: &Window) -> PtpFigures {
    let mut figures = PtpFigures {
        metrics: Vec::new(),
        counters: Vec::new(),
        labels: Vec::new(),
        notes: vec![format!(
            "aes67 PTP: host {} is the grandmaster (its offset is 0)",
            names[0]
        )],
    };
    for (k, &name) in names.iter().enumerate().skip(1) {
        let (start, end) = (&w.start[k].0, &w.end[k].0);
        let losses = |r: &HostReport| r.ptp.as_ref().map_or(0, |p| p.losses);
        let lost = losses(end).saturating_sub(losses(start));
        let records = &w.offsets[k];
        let metric = |what: &str, value: fn(&OffsetRecord) -> i64| {
            let values = records.iter().map(|r| value(r).unsigned_abs());
            latency_metric(&host_counter(what, name), Some(PTP_GOAL_US), values)
        };
        let ptp4l = metric(PTP4L_OFFSET_METRIC, |r| r.ptp4l_ns);
        let media = metric(MEDIA_OFFSET_METRIC, |r| r.media_ns);
        let state = match &end.ptp {
            Some(p) if p.locked && lost == 0 => "following".to_string(),
            Some(p) => format!(
                "{}{}",
                if p.locked { "following again" } else { "lost" },
                p.last_loss
                    .as_ref()
                    .map_or(String::new(), |l| format!(": {}", l.why))
            ),
            None => "not following (its clock did not lock)".to_string(),
        };
        let summary = |m: &Metric| {
            let s = &m.summary;
            format!("p50 {:.1} / p99 {:.1} / max {:.1} µs", s.p50, s.p99, s.max)
        };
        figures.notes.push(format!(
            "aes67 PTP host {name}: {} measurements; |offset| ptp4l {}, media clock {}; \
             {lost} loss(es) of PTP; {state}; rate {:+.1} ppb",
            records.len(),
            summary(&ptp4l),
            summary(&media),
            end.ptp.as_ref().map_or(0.0, |p| p.rate_ppb)
        ));
        figures.notes.push(format!(
            "aes67 media clock of host {name} at the end: {}",
            end.clock
        ));
        figures.metrics.extend([ptp4l, media]);
        figures
            .counters
            .push(Counter::count(host_counter(PTP_LOSSES, name), lost));
        figures.labels.push((host_counter(PTP_LABEL, name), state));
    }
    figures
}

/// The report's AES67 section: a row per configuration. Empty for other
/// runs.
pub fn report_section(results: &RunResults) -> String {
    let mut rows = String::new();
    let mut deadline = None;
    for c in &results.configurations {
        let (round_trip, ages) = (c.metric(METRIC), c.metric(AGE_METRIC));
        if round_trip.is_none() && ages.is_none() {
            continue;
        }
        deadline = deadline.or(round_trip.and_then(|m| m.deadline));
        let summary = |m: Option<&Metric>| {
            m.map_or("–".into(), |m| {
                let s = &m.summary;
                format!(
                    "{:.2} / {:.2} / {:.2}",
                    s.p50 / 1000.0,
                    s.p999 / 1000.0,
                    s.max / 1000.0
                )
            })
        };
        let within = round_trip.map_or("–".into(), |m| within_cell(m.summary.misses));
        let figures = Figures::from_result(c);
        let cell = |f: fn(&Figures) -> String| figures.as_ref().map_or("–".into(), f);
        let _ = writeln!(
            rows,
            "| {} | {} | {} | {within} | {} | {} | {} | {} | {} | {} | {} |",
            c.name,
            c.count(STREAMS).map_or("–".into(), |n| n.to_string()),
            summary(round_trip),
            summary(ages),
            cell(Figures::markers),
            cell(Figures::packets),
            cell(Figures::resyncs_and_slips),
            cell(Figures::xruns),
            cell(Figures::service_cpu),
            cell(Figures::graph_cpu),
        );
    }
    if rows.is_empty() {
        return String::new();
    }
    let ptp = ptp_section(results);
    let deadline_ms = deadline.map_or("–".into(), |d| format!("{:.1} ms", d / 1000.0));
    let step = AGE_BUCKET_NS / 1000;
    format!(
        "\n## AES67: round trip, loss and CPU per configuration\n\n\
         The marker's round trip (first sample in → the same sample out at host a) over the \
         measured window, against the deadline of {deadline_ms}; every received packet's age at \
         arrival (from the media time of its first sample to the kernel's receive stamp, in \
         {step} µs steps: what a receiver's latency must cover; for a foreign sender played by \
         arrival, from the fastest packet of the playout's window instead, and no marker goes \
         round); markers and packets lost or late over all hosts and directions, after the merge \
         of two paths (a packet is lost when its first frame is not there when played — its later \
         frames may still be heard; late when all of it came after); the received streams' \
         resyncs and frames slipped; xruns and CPU (% of a core) per host.\n\n\
         | configuration | streams each way | round trip p50 / p99.9 / max (ms) | ≤ {deadline_ms} | \
         packet age p50 / p99.9 / max (ms) | markers lost | packets lost / late | resyncs / \
         slips | xruns | service CPU % | graph CPU % |\n\
         |---|--:|---|---|---|---|---|---|---|---|---|\n{rows}{ptp}"
    )
}

/// The report's PTP table: a row per configuration and slave host. Empty
/// for runs without PTP.
fn ptp_section(results: &RunResults) -> String {
    let mut rows = String::new();
    for c in &results.configurations {
        for &name in tessera_scenario::aes67::HOST_NAMES.iter() {
            let metric = |what| c.metric(&host_counter(what, name));
            let (Some(ptp4l), Some(media)) =
                (metric(PTP4L_OFFSET_METRIC), metric(MEDIA_OFFSET_METRIC))
            else {
                continue;
            };
            let summary = |m: &Metric| {
                let s = &m.summary;
                format!("{:.1} / {:.1} / {:.1}", s.p50, s.p99, s.max)
            };
            let _ = writeln!(
                rows,
                "| {} | {name} | {} | {} | {} | {} | {} |",
                c.name,
                ptp4l.summary.count,
                summary(ptp4l),
                summary(media),
                c.count(&host_counter(PTP_LOSSES, name))
                    .map_or("–".into(), |n| n.to_string()),
                c.labels
                    .get(&host_counter(PTP_LABEL, name))
                    .map_or("–", String::as_str),
            );
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "\n### PTP: each host's offset from the grandmaster\n\n\
         Host a is the grandmaster. Each other host's ptp4l runs free and measures its system \
         clock's offset from a's at every sync it is asked about (every 250 ms); its media clock \
         adds the negated line fitted to those measurements, so its own offset is ptp4l's plus \
         what it added when the sync came. |offset| in µs over the measured window (goal: p99 \
         ≤ {PTP_GOAL_US:.0} µs); losses of PTP in the window, and where PTP stood at its end.\n\n\
         | configuration | host | measurements | ptp4l p50 / p99 / max (µs) | media clock p50 / \
         p99 / max (µs) | losses | PTP at the end |\n|---|---|--:|---|---|--:|---|\n{rows}"
    )
}

/// `[subject] kind = "aes67"`.
pub(crate) struct Kind;

impl crate::subject::contract::Subject for Kind {
    fn runs(&self, scenario: &Scenario, _config: &Configuration) -> bool {
        matches!(scenario.subject, Subject::Aes67(_))
    }

    fn start(
        &self,
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<Box<dyn Running>, String> {
        Ok(Box::new(Aes67Run::start(scenario, config)?))
    }

    fn report_section(&self, results: &RunResults, _dir: &Path) -> Result<String, String> {
        Ok(report_section(results))
    }
}

impl Running for Aes67Run {
    fn release(&mut self, t0: u64) -> Result<(), String> {
        Aes67Run::release(self, t0)
    }

    fn advance(&mut self, elapsed_ns: u64) -> Result<Option<u64>, String> {
        Ok(Aes67Run::advance(self, elapsed_ns))
    }

    fn watched(&self) -> Vec<Watched> {
        self.about
            .names
            .iter()
            .zip(&self.traced)
            .flat_map(|(name, probe)| probe.watched(name, self.cycle))
            .collect()
    }

    fn stop(self: Box<Self>, _notes: &mut Vec<String>) -> Box<dyn Stopped> {
        Box::new(self.finish())
    }
}

impl Stopped for Aes67Data {
    fn measure(self: Box<Self>, _scenario: &Scenario, _t0: u64) -> Measured {
        metrics(*self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_aes67::{Encoding, StreamFormat};

    fn subject(hosts: usize) -> Aes67Subject {
        Aes67Subject {
            hosts,
            streams: 2,
            format: StreamFormat::with_packet_time(Encoding::L24, 48_000, 8, 1000).unwrap(),
            latency: Duration::from_micros(1750),
            deadline: Duration::from_millis(8),
            foreign: None,
            paths: None,
            ptp: false,
        }
    }

    #[test]
    fn each_host_forwards_what_comes_from_one_neighbour_to_the_other() {
        let s = subject(3);
        let names = |v: Vec<StreamSpec>| v.into_iter().map(|s| s.name).collect::<Vec<_>>();
        let (rx, tx) = streams_of(&s, 0, 2);
        assert_eq!(
            (names(rx), names(tx)),
            (
                vec!["b-a-1".to_string(), "b-a-2".into()],
                vec!["a-b-1".to_string(), "a-b-2".into()]
            )
        );
        let (rx, tx) = streams_of(&s, 1, 1);
        assert_eq!(names(rx), ["a-b-1", "c-b-1"]);
        assert_eq!(names(tx), ["b-c-1", "b-a-1"]);
        let (rx, tx) = streams_of(&s, 2, 1);
        assert_eq!(
            (names(rx), names(tx)),
            (vec!["b-c-1".to_string()], vec!["c-b-1".to_string()])
        );
        let groups: Vec<Ipv4Addr> = [(0, 1), (1, 0), (1, 2), (2, 1)]
            .map(|(f, t)| *stream(&s, f, t, 3).address.ip())
            .to_vec();
        assert_eq!(
            groups,
            [
                [239, 69, 10, 3],
                [239, 69, 11, 3],
                [239, 69, 12, 3],
                [239, 69, 13, 3]
            ]
            .map(Ipv4Addr::from)
        );
    }

    #[test]
    fn the_tables_counts_are_rendered_from_the_counters() {
        let host = |name, xruns, service_cpu| HostFigures {
            name,
            xruns,
            service_cpu,
            graph_cpu: 3.25,
        };
        let figures = Figures {
            markers_lost: 1,
            markers_written: 500,
            packets_lost: 2,
            packets_late: 3,
            resyncs: Some(0),
            slipped: Some(7),
            hosts: vec![host("a", 4, 12.5), host("b", 0, 11.0)],
        };
        let result = ConfigurationResult {
            labels: Default::default(),
            name: "guarded".into(),
            notes: Vec::new(),
            metrics: vec![latency_metric(
                METRIC,
                Some(8000.0),
                [1_000_000].into_iter(),
            )],
            counters: [vec![Counter::count(STREAMS, 2)], figures.counters()].concat(),
            why: None,
        };
        assert_eq!(result.count("aes67 xruns a"), Some(4));
        assert_eq!(Figures::from_result(&result), Some(figures));
        let results = RunResults {
            configurations: vec![result],
            ..RunResults::start("aes67")
        };
        let section = report_section(&results);
        assert!(
            section.contains(
                "| 1 of 500 | 2 / 3 | 0 / 7 | 4.0 / 0.0 (a / b) | 12.5 / 11.0 (a / b) | 3.2 / 3.2 (a / b) |"
            ),
            "{section}"
        );
    }

    #[test]
    fn a_foreign_device_sends_to_b_which_sends_nothing() {
        let mut s = subject(2);
        s.foreign = Some(tessera_scenario::aes67::ForeignSender {
            jitter: Duration::from_millis(1),
            clock_ppm: 50.0,
            payload_type: 101,
            max_slip_ppm: 200,
        });
        let (rx, tx) = streams_of(&s, 1, 2);
        assert!(tx.is_empty());
        assert_eq!(rx.len(), 2);
        assert!(rx.iter().all(|r| r.payload_type == 101 && r.described));
        let specs = device_specs(&s, 2, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[1].destination, rx[1].address);
        assert_eq!((specs[0].payload_type, specs[0].clock_ppm), (101, 50.0));
        assert!(describe(&s, 2).contains("foreign device"));
    }

    #[test]
    fn two_paths_carry_every_stream_each_way_on_a_group_of_their_own() {
        let mut s = subject(2);
        s.paths = Some(tessera_scenario::aes67::RedundantPaths {
            loss: 0.01,
            delay: Duration::from_millis(1),
            jitter: Duration::from_millis(1),
        });
        let [first, second] = path_groups(&s, 2);
        assert_eq!((first.len(), second.len()), (4, 4));
        let ab = stream(&s, 0, 1, 1);
        assert_eq!(
            first[0],
            PathGroup {
                group: ab.address,
                sender: 0
            }
        );
        assert_eq!(
            second[0],
            PathGroup {
                group: ab.secondary.unwrap(),
                sender: 0
            }
        );
        assert_eq!(*ab.secondary.unwrap().ip(), Ipv4Addr::new(239, 70, 10, 1));
        assert_eq!(second[2].sender, 1);
        assert!(describe(&s, 1).contains("two paths"));
    }

    #[test]
    fn each_slaves_offsets_and_losses_are_typed_and_tabled() {
        use tessera_services::aes67::follow::Loss;
        use tessera_services::aes67::PtpFollowing;
        let following = |locked, losses| PtpFollowing {
            locked,
            losses,
            last_loss: (losses > 0).then(|| Loss {
                at_ns: 0,
                why: "no ptp4l answers".into(),
            }),
            correction_ns: 300,
            rate_ppb: 1.5,
        };
        let report = |ptp| HostReport {
            ptp,
            ..HostReport::default()
        };
        let record = |ptp4l_ns, media_ns| OffsetRecord {
            at_ns: 0,
            ptp4l_ns,
            media_ns,
        };
        let window = Window {
            start: vec![
                (report(None), (0, 0)),
                (report(Some(following(true, 0))), (0, 0)),
            ],
            end: vec![
                (report(None), (0, 0)),
                (report(Some(following(false, 1))), (0, 0)),
            ],
            latencies_ns: Vec::new(),
            length_ns: 1,
            offsets: vec![
                Vec::new(),
                vec![record(-2_000, 1_000), record(4_000, -3_000)],
            ],
        };
        let ptp = ptp_figures(&["a", "b"], &window);
        assert_eq!(ptp.counters, vec![Counter::count("aes67 PTP losses b", 1)]);
        assert_eq!(
            ptp.labels,
            vec![(
                "aes67 PTP b".to_string(),
                "lost: no ptp4l answers".to_string()
            )]
        );
        let names: Vec<&str> = ptp.metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "PTP |offset| from the grandmaster (ptp4l) b",
                "PTP |offset| from the grandmaster (media clock) b"
            ]
        );
        assert_eq!(
            (ptp.metrics[0].summary.count, ptp.metrics[0].summary.max),
            (2, 4.0)
        );
        assert_eq!(ptp.metrics[1].summary.max, 3.0);
        assert!(ptp.notes[0].contains("host a is the grandmaster"));
        let result = Measured::new(ptp.metrics, ptp.counters, Vec::new());
        let result = ptp
            .labels
            .into_iter()
            .fold(result, |m, (n, v)| m.label(&n, v))
            .into_result("lost");
        let section = ptp_section(&RunResults {
            configurations: vec![result],
            ..RunResults::start("aes67")
        });
        assert!(section.contains("| lost | b | 2 | "), "{section}");
        assert!(
            section.contains("| 1 | lost: no ptp4l answers |"),
            "{section}"
        );
    }

    #[test]
    fn a_lone_host_receives_what_it_sends() {
        let s = subject(1);
        let (rx, tx) = streams_of(&s, 0, 2);
        assert_eq!(rx, tx);
        let names: Vec<_> = rx.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a-a-1", "a-a-2"]);
        assert!(describe(&s, 2).contains("a → a through groups it joined itself"));
    }

    #[test]
    fn cycles_are_whole_packets_and_markers_outlast_the_round_trip() {
        let mut s = subject(2);
        assert_eq!(cycle_frames(&s), 48);
        assert_eq!(marker_interval(&s), 480);
        s.format = StreamFormat::with_packet_time(Encoding::L24, 48_000, 8, 125).unwrap();
        assert_eq!(cycle_frames(&s), 36);
        let mut chain = subject(4);
        chain.latency = Duration::from_millis(2);
        assert_eq!(marker_interval(&chain), 48 * 24);
    }

    #[test]
    fn a_hosts_graph_thread_is_watched_on_its_cycle_once_it_has_set_up() {
        let probe = CpuProbe {
            service: current_pid(),
            graph: Arc::new(AtomicI32::new(0)),
        };
        let cycle = cycle_period(&subject(1));
        assert_eq!(cycle, Duration::from_millis(1));
        assert_eq!(probe.watched("a", cycle), None, "not set up yet");
        probe.graph.store(42, Ordering::Relaxed);
        let watched = probe.watched("a", cycle).expect("the graph's thread");
        assert_eq!(
            (watched.tid, watched.metric.as_str()),
            (42, "graph cycle of host a")
        );
        assert_eq!(
            (watched.deadline, watched.period),
            (Some(cycle), Some(cycle))
        );
    }
}
