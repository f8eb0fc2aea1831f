//! AES67 with an implementation no one here wrote: Debian 12's PipeWire
//! and its RTP modules, in a network namespace of the test's own whose
//! loopback carries multicast (every socket — the network service's,
//! PipeWire's — is in it). Discovery both ways: the network service
//! announces a marker stream by SAP and PipeWire's rtp-source makes a
//! stream node of it; PipeWire's rtp-sink announces its own stream and the
//! service lists it. Audio both ways: that node, linked to rtp-sink's
//! stream node, plays tessera's stream through PipeWire's graph and sends
//! it back, where a tessera host finds its markers (a round trip through
//! PipeWire: found, not how fast); and the reverse, a second tessera host
//! plays PipeWire's stream through its graph and sends it on to a group of
//! its own, announced, for which PipeWire makes a node too, while the
//! service counts what it carried. And `tessera aes67 run --receive`, the
//! command a user types, receives PipeWire's stream by its address (its
//! format and payload type from the announcement the service heard), in a
//! cell of its own, played by arrival with no packet of the wrong type and
//! under 1 in 10 lost or late through the receiving host (packets that reached
//! its socket late are counted apart: PipeWire's sender, held up on this
//! VM, whose host stalls a vCPU for 10–20 ms at times, sent a third of a
//! run's packets more than 10 ms late once in CI).
//! Root only: skipped (with "SKIPPED") otherwise, a failure under CI=true;
//! skipped with the reason when PipeWire or its RTP modules do not start.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use tessera_aes67::playout::DEFAULT_MAX_SLIP_PPM;
use tessera_aes67::{Encoding, StreamFormat};
use tessera_experiments::harness::pipewire_rtp::{
    self, Direction, Ports, RtpModules, RtpSpec, Sample,
};
use tessera_experiments::harness::servers::{PipeWireServer, ServerSpec};
use tessera_services::aes67::host::{Host, HostConfig, HostReport, Route};
use tessera_services::aes67::{MediaClock, Playout, StreamSpec, PAYLOAD_TYPE};
use tessera_services::net::client::{self, Announcement};
use tessera_services::net::discovery::DiscoveryConfig;
use tessera_services::net::{Discipline, NetConfig, NetService, Status};
use tessera_sys::sched::{set_policy, Policy};
use tessera_workloads::lan::{End, Lan};

const RATE: u32 = 48_000;
const CHANNELS: u16 = 2;
/// tessera's cycle: one 1 ms packet a cycle.
const FRAMES: u32 = 48;
/// PipeWire's quantum: rtp-sink sends 5 packets in a burst (21 with
/// PipeWire's default 1024). At 48 frames PipeWire's graph, split over two
/// processes, skipped a third of its cycles on this 2-vCPU VM: rtp-sink's
/// stream then ran at 31 kHz, and every receiver heard a third of it late.
const PIPEWIRE_QUANTUM: u32 = 256;
/// How far behind the newest frame heard each side plays (tessera's
/// arrival playout, PipeWire's `sess.latency.msec`).
const LATENCY_MS: u32 = 10;
/// A marker every 200 ms: well over the round trip.
const MARKER_INTERVAL: u64 = RATE as u64 / 5;
/// How long the loop runs once PipeWire's nodes are linked.
const LINKED: Duration = Duration::from_secs(6);
/// How long PipeWire and the service may take to hear an announcement or
/// make a node (SAP's interval is 5 s; both sides announce at once).
const HEARING: Duration = Duration::from_secs(10);
/// The SAP group both sides announce on and listen to (AES67's).
const SAP: &str = "239.255.255.255:9875";

const MARKERS: &str = "tessera-markers";
const MARKERS_GROUP: &str = "239.69.2.1:5004";
const PIPEWIRE_SESSION: &str = "PipeWire loop back";
const PIPEWIRE_NODE: &str = "pw-rtp-out";
const PIPEWIRE_GROUP: &str = "239.69.2.2:5004";
const FORWARDED: &str = "tessera-forward";
const FORWARDED_GROUP: &str = "239.69.2.3:5004";
/// How long `tessera aes67 run` receives PipeWire's stream.
const COMMAND_SECONDS: u32 = 4;
/// How far behind the newest frame the command plays: past the host's
/// stalls.
const COMMAND_LATENCY_MS: u32 = 20;

fn fifo(priority: u32) -> Arc<dyn Fn() -> Result<(), String> + Send + Sync> {
    Arc::new(move || set_policy(0, &Policy::Fifo { priority }).map_err(|e| e.to_string()))
}

/// The network service, with SAP discovery on the loopback.
fn start_service(socket: &Path) -> NetService {
    NetService::start(NetConfig {
        socket: socket.to_path_buf(),
        discipline: Discipline::MClock,
        link_bps: 1_000_000_000,
        cpu_share: 1.0,
        real_time_setup: Some(fifo(60)),
        real_time_note: "SCHED_FIFO 60 (a test)".into(),
        policy: Arc::new(|_| Ok(())),
        discovery: Some(DiscoveryConfig {
            interface: Ipv4Addr::LOCALHOST,
            ..DiscoveryConfig::default()
        }),
    })
    .unwrap()
}

/// PipeWire at its quantum and 48 kHz with its RTP modules beside it, or
/// why they do not start here.
fn start_pipewire(dir: &Path) -> Result<(PipeWireServer, RtpModules), String> {
    let server = PipeWireServer::start(&ServerSpec {
        frames: PIPEWIRE_QUANTUM,
        rate: RATE,
        priority: 0,
        core: None,
        log: dir.join("pipewire.log"),
    })?;
    let spec = RtpSpec {
        session: PIPEWIRE_SESSION.into(),
        node: PIPEWIRE_NODE.into(),
        source: Ipv4Addr::LOCALHOST,
        destination: PIPEWIRE_GROUP.parse().unwrap(),
        sample: Sample::L24,
        rate: RATE,
        channels: CHANNELS,
        ptime_ms: 1,
        sap: SAP.parse().unwrap(),
        latency_ms: LATENCY_MS,
        log: dir.join("pipewire-rtp.log"),
    };
    let modules = RtpModules::start(&server, &spec).map_err(|e| e.to_string())?;
    Ok((server, modules))
}

/// L24, 48 kHz, stereo, 1 ms packets: what both sides send.
fn format() -> StreamFormat {
    StreamFormat::with_packet_time(Encoding::L24, RATE, CHANNELS, 1000).unwrap()
}

fn stream(name: &str, address: &str) -> StreamSpec {
    StreamSpec::new(name, address.parse().unwrap(), format(), PAYLOAD_TYPE)
}

/// Has the service announce `stream` for as long as the result lives.
fn announce(socket: &Path, stream: &StreamSpec, clock: &MediaClock, id: u64) -> Announcement {
    let description = stream.describe(Ipv4Addr::LOCALHOST, id, clock);
    client::announce(client::connect(socket).unwrap(), &description.to_sdp()).unwrap()
}

/// The stream the service heard announced as `name` (bounded wait).
fn heard(socket: &Path, name: &str) -> StreamSpec {
    let give_up = Instant::now() + HEARING;
    while Instant::now() < give_up {
        let (sessions, _) = client::streams(&client::connect(socket).unwrap()).unwrap();
        if let Some(session) = sessions.iter().find(|s| s.description.name == name) {
            return StreamSpec::from_description(&session.description);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the service never heard {name:?} announced in {HEARING:?}");
}

fn host(name: &str, socket: &Path, route: Route) -> HostConfig {
    let engine_fifo = fifo(50);
    HostConfig {
        name: name.into(),
        service: socket.to_path_buf(),
        interface: Ipv4Addr::LOCALHOST,
        secondary_interface: None,
        receive: Vec::new(),
        send: Vec::new(),
        route,
        frames: FRAMES,
        sample_rate: RATE,
        latency_frames: LATENCY_MS * RATE / 1000,
        buffer_packets: 64,
        playout: Playout::Arrival {
            max_slip_ppm: DEFAULT_MAX_SLIP_PPM,
        },
        clock: MediaClock::system("a test: PipeWire's clock is its own"),
        workers: 0,
        setup: Some(Arc::new(move |_| engine_fifo().map_err(Into::into))),
    }
}

/// `tessera aes67 run --receive` of PipeWire's stream in the studio, in a
/// cell of the test's broker (`run_dir`), played by arrival, reporting in
/// JSON on its standard output.
fn receive_by_command(lan: &Lan, studio: End, socket: &Path, run_dir: &Path) -> Child {
    let tessera = tessera_experiments::harness::servers::program_beside_us("tessera");
    lan.command(studio, &tessera.to_string_lossy())
        .unwrap()
        .env("TESSERA_RUN_DIR", run_dir)
        .args(["aes67", "run", "--json", "--playout", "arrival"])
        .args(["--interface", "127.0.0.1", "--receive", PIPEWIRE_GROUP])
        .args(["--latency", &format!("{COMMAND_LATENCY_MS}ms")])
        .args(["--route", "tone", "--seconds", &COMMAND_SECONDS.to_string()])
        .arg("--socket")
        .arg(socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What the command received of PipeWire's stream: its report's counts.
fn command_counts(child: Child) -> serde_json::Value {
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "tessera aes67 run: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("the --json report: {e}; {stderr}"));
    eprintln!("tessera aes67 run received PipeWire's stream: {report}");
    report["streams"][0]["counts"].clone()
}

/// Gives PipeWire's node for tessera's marker stream and rtp-sink's
/// stream node their ports and links the one to the other.
fn link_loop(server: &PipeWireServer) {
    let ports = |direction| Ports {
        direction,
        rate: RATE,
        channels: CHANNELS,
    };
    let session = pipewire_rtp::node_id(server, MARKERS, HEARING).unwrap();
    let sink = pipewire_rtp::node_id(server, PIPEWIRE_NODE, HEARING).unwrap();
    pipewire_rtp::set_port_config(server, session, &ports(Direction::Output), HEARING).unwrap();
    pipewire_rtp::set_port_config(server, sink, &ports(Direction::Input), HEARING).unwrap();
    pipewire_rtp::link(server, MARKERS, PIPEWIRE_NODE, CHANNELS).unwrap();
}

fn report(ends: &HostReport, forward: &HostReport, status: &Status) {
    let mut sorted = ends.latencies_ns.clone();
    sorted.sort_unstable();
    let ms = |ns: Option<&u64>| ns.map_or(0.0, |&ns| ns as f64 / 1e6);
    eprintln!(
        "tessera → PipeWire → tessera: {} markers found of {} written ({} lost); round trip \
         p50 {:.2} ms, max {:.2} ms",
        sorted.len(),
        ends.markers_written,
        ends.markers_lost,
        ms(sorted.get(sorted.len() / 2)),
        ms(sorted.last()),
    );
    for (host, report) in [("ends", ends), ("forward", forward)] {
        for s in &report.streams {
            eprintln!("{host} {} {:?}: {:?}", s.direction, s.name, s.counts);
        }
        eprintln!("{host}: {} cycles, {} xruns", report.cycles, report.xruns);
    }
    for flow in &status.flows {
        eprintln!(
            "service flow {:?}: received {}, sent {}, RTP {:?}",
            flow.name, flow.received.packets, flow.sent.packets, flow.rtp
        );
    }
}

/// The command's counts if the receiving host kept what it owes: packets
/// that reached its socket in time and missed their play, and slots
/// played empty whose packet was never taken at all, at most 1 in 10 of
/// those received. A packet that reached the socket later than the latency
/// allows (PipeWire's sender held up: the kernel's receive stamp says so),
/// and a cycle PipeWire skipped and never sent, are counted apart and
/// shown, not held against the host.
///
/// The bound is behaviour, not timing: a receiver that does not play what
/// it takes loses most of the stream. This VM's host stalls both vCPUs for
/// 10–20 ms while PipeWire, two hosts and the command share them, and a CI
/// run held 3.4 % up in the host on its second try (137 of 3 993); the
/// share itself is what `tessera aes67 run --json` reports, and timing it
/// belongs to the benchmarks.
fn host_owes(counts: serde_json::Value) -> Result<serde_json::Value, String> {
    let count = |key: &str| counts.pointer(key).and_then(|v| v.as_u64()).unwrap_or(0);
    let (on_arrival, in_host) = (count("/late_arrivals"), count("/late_in_host"));
    let never_taken = count("/jitter/lost").saturating_sub(on_arrival + in_host);
    eprintln!(
        "tessera aes67 run: {on_arrival} packets reached the socket late, {in_host} were held \
         up in the host, {never_taken} slots had no packet ever taken, {} PipeWire never sent",
        count("/jitter/unsent")
    );
    match 10 * (in_host + never_taken) <= count("/jitter/received") {
        true => Ok(counts),
        false => Err(format!("lost or late in the host: {counts}")),
    }
}

#[test]
fn pipewire_plays_a_tessera_stream_back_and_tessera_plays_pipewires_on() {
    let Some(machine) = tessera_testkit::privileged("AES67 with PipeWire's RTP modules") else {
        return;
    };
    if !common::built("AES67 with PipeWire's RTP modules", "tessera") {
        return;
    }
    let mut lan = Lan::new();
    let namespace = lan.add_host("studio").unwrap();
    lan.multicast_on_loopback(namespace).unwrap();
    let studio = End::Host(namespace);
    let socket = machine.dir().join("net.sock");
    let (at, dir): (PathBuf, PathBuf) = (socket.clone(), machine.dir());
    // Everything with a network socket starts from a thread in the host;
    // it is dropped in reverse: PipeWire's modules, PipeWire, the service.
    let (_service, pipewire) = lan
        .spawn_in(studio, "studio", move || {
            (start_service(&at), start_pipewire(&dir))
        })
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    let (server, _modules) = match pipewire {
        Ok(started) => started,
        Err(reason) => {
            eprintln!("SKIPPED AES67 with PipeWire's RTP modules: {reason}");
            return;
        }
    };

    // PipeWire's announcement, as the service heard it.
    let from_pipewire = heard(&socket, PIPEWIRE_SESSION);
    eprintln!("the service heard PipeWire announce {from_pipewire:?}");
    assert_eq!(
        (from_pipewire.address, from_pipewire.format),
        (PIPEWIRE_GROUP.parse().unwrap(), format()),
        "PipeWire's stream as the service heard it: {from_pipewire:?}"
    );
    let (markers, forwarded) = (
        stream(MARKERS, MARKERS_GROUP),
        stream(FORWARDED, FORWARDED_GROUP),
    );
    let clock = MediaClock::system("a test");
    let _announced = [
        announce(&socket, &markers, &clock, 1),
        announce(&socket, &forwarded, &clock, 2),
    ];
    let marker = Route::Marker {
        interval_frames: MARKER_INTERVAL,
    };
    let mut ends = Host::start(HostConfig {
        receive: vec![from_pipewire.clone()],
        send: vec![markers],
        ..host("ends", &socket, marker)
    })
    .unwrap();
    let forward = Host::start(HostConfig {
        receive: vec![from_pipewire],
        send: vec![forwarded],
        ..host("forward", &socket, Route::Forward)
    })
    .unwrap();

    // PipeWire heard both announcements and made a node of each.
    link_loop(&server);
    pipewire_rtp::node_id(&server, FORWARDED, HEARING).unwrap();
    let command = receive_by_command(&lan, studio, &socket, &machine.dir());
    let linked = Instant::now();
    while linked.elapsed() < LINKED {
        std::thread::sleep(Duration::from_millis(100));
        ends.collect();
    }
    let status = client::status(&socket).unwrap();
    let (ends, forward) = (ends.stop().unwrap(), forward.stop().unwrap());
    report(&ends, &forward, &status);
    // A try whose receiving host was starved (this VM's host stalls both
    // vCPUs for tens of ms: a CI run's own graphs then failed a quarter
    // of their cycles) is made once more, with PipeWire's stream alone.
    let by_command = match host_owes(command_counts(command)) {
        Ok(counts) => counts,
        Err(first) => {
            eprintln!("tessera aes67 run, first try: {first}; once more");
            let again = receive_by_command(&lan, studio, &socket, &machine.dir());
            host_owes(command_counts(again)).unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let count = |key: &str| by_command.pointer(key).and_then(|v| v.as_u64());
    assert!(
        count("/jitter/stored") > Some(u64::from(COMMAND_SECONDS) * 700),
        "{by_command}"
    );
    assert_eq!(count("/wrong_payload_type"), Some(0), "{by_command}");

    assert!(ends.latencies_ns.len() >= 3, "markers found: {ends:?}");
    for s in ends.streams.iter().chain(&forward.streams) {
        match s.direction {
            "in" => assert!(s.counts.jitter.stored > 1000, "PipeWire's stream: {s:?}"),
            _ => assert!(s.counts.sent > 1000, "{s:?}"),
        }
    }
    let carried = |name: &str| {
        let flow = status.flows.iter().find(|f| f.name == name);
        flow.map_or(0, |f| f.sent.packets)
    };
    assert!(
        carried(&format!("{FORWARDED} out")) > 1000,
        "the forwarded stream, as the service sent it: {status:?}"
    );
}
