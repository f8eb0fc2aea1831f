//! AES67 between two hosts (network namespaces joined by a veth pair), each
//! with a network service of its own: host A sends a marker on a multicast
//! stream, host B's graph forwards it back on a unicast one, and A finds
//! it again. The marker's latency is the two receivers' latencies (the
//! media clock's link offsets) — behaviour, not speed: a path through a
//! source and a sink delays by the source's latency whatever the phases of
//! the cycles — nothing is lost, each service counts the RTP it carried,
//! and neither graph touches the heap on its real-time threads.
//! And SAP through the service: an announced stream is listed, until its
//! client leaves; a description that is not one is refused.
//! Root only: skipped (with "SKIPPED") otherwise, a failure under CI=true.
//! Its own test binary: the allocation guard's counters are process-wide.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tessera_aes67::{Encoding, StreamFormat};
use tessera_rtguard::{assert_no_rt_allocations, CountingAllocator};
use tessera_services::aes67::host::{Host, HostConfig, HostReport, Route};
use tessera_services::aes67::{MediaClock, Playout, StreamSpec, AGE_BUCKET_NS, PAYLOAD_TYPE};
use tessera_services::net::discovery::DiscoveryConfig;
use tessera_services::net::{client, Discipline, NetConfig, NetError, NetService};
use tessera_sys::sched::{set_policy, Policy};
use tessera_workloads::lan::{End, Lan};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

/// Each receiver plays 3 ms behind the clock: room for a vCPU stall.
const LATENCY_FRAMES: u32 = 144;
const RATE: u32 = 48_000;

fn fifo(priority: u32) -> Arc<dyn Fn() -> Result<(), String> + Send + Sync> {
    Arc::new(move || set_policy(0, &Policy::Fifo { priority }).map_err(|e| e.to_string()))
}

/// A network service whose threads start from a thread in `host`, so its
/// flows' sockets are that host's.
fn service_in(lan: &Lan, host: End, socket: &Path) -> NetService {
    start_in(lan, host, socket, None)
}

fn start_in(lan: &Lan, host: End, socket: &Path, discovery: Option<DiscoveryConfig>) -> NetService {
    let config = NetConfig {
        socket: socket.to_path_buf(),
        discipline: Discipline::MClock,
        link_bps: 1_000_000_000,
        cpu_share: 1.0,
        real_time_setup: Some(fifo(60)),
        real_time_note: "SCHED_FIFO 60 (a test)".into(),
        policy: Arc::new(|_| Ok(())),
        discovery,
    };
    lan.spawn_in(host, "aes67-service", move || NetService::start(config))
        .unwrap()
        .join()
        .unwrap()
        .unwrap()
        .unwrap()
}

fn stream(name: &str, address: SocketAddrV4, channels: u16) -> StreamSpec {
    StreamSpec {
        name: name.into(),
        address,
        format: StreamFormat::with_packet_time(Encoding::L24, RATE, channels, 1000).unwrap(),
        payload_type: PAYLOAD_TYPE,
    }
}

fn host(name: &str, service: &Path, interface: Ipv4Addr, route: Route) -> HostConfig {
    let engine_fifo = fifo(50);
    HostConfig {
        name: name.into(),
        service: service.to_path_buf(),
        interface,
        receive: Vec::new(),
        send: Vec::new(),
        route,
        frames: 48,
        sample_rate: RATE,
        latency_frames: LATENCY_FRAMES,
        buffer_packets: 16,
        playout: Playout::MediaClock,
        clock: MediaClock::system("a test: both hosts share this machine's clock"),
        workers: 0,
        setup: Some(Arc::new(move |_| engine_fifo().map_err(Into::into))),
    }
}

fn median(values: &[u64]) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted[sorted.len() / 2]
}

#[test]
fn a_marker_goes_to_another_host_and_back_delayed_by_the_two_latencies() {
    let Some(machine) = tessera_testkit::privileged("aes67 between two hosts") else {
        return;
    };
    let mut lan = Lan::new();
    let (a, b) = (lan.add_host("a").unwrap(), lan.add_host("b").unwrap());
    let link = lan.link(End::Host(a), End::Host(b), None).unwrap();
    let (at_a, at_b) = (
        lan.address(link, End::Host(a)),
        lan.address(link, End::Host(b)),
    );
    let sockets = [
        machine.dir().join("net-a.sock"),
        machine.dir().join("net-b.sock"),
    ];
    let services = [
        service_in(&lan, End::Host(a), &sockets[0]),
        service_in(&lan, End::Host(b), &sockets[1]),
    ];
    let there = stream("a-to-b", "239.69.83.1:5004".parse().unwrap(), 2);
    let back = stream("b-to-a", SocketAddrV4::new(at_a, 5006), 2);
    let forward = HostConfig {
        receive: vec![there.clone()],
        send: vec![back.clone()],
        ..host("b", &sockets[1], at_b, Route::Forward)
    };
    let ends = HostConfig {
        receive: vec![back],
        send: vec![there],
        ..host(
            "a",
            &sockets[0],
            at_a,
            Route::Marker {
                interval_frames: u64::from(RATE) / 10,
            },
        )
    };
    let mut b_host = Host::start(forward).unwrap();
    let mut a_host = Host::start(ends).unwrap();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        a_host.collect();
        b_host.collect();
    }
    let statuses = sockets.each_ref().map(|s| client::status(s).unwrap());
    let a_report = a_host.stop().unwrap();
    let b_report = b_host.stop().unwrap();
    drop(services);
    report(&a_report);

    let expected_ns = u64::from(2 * LATENCY_FRAMES) * 1_000_000_000 / u64::from(RATE);
    assert!(
        a_report.latencies_ns.len() >= 10,
        "markers found: {:?}",
        a_report
    );
    let typical = median(&a_report.latencies_ns);
    assert!(
        typical.abs_diff(expected_ns) <= 500_000,
        "the marker took {typical} ns, not the two latencies' {expected_ns} ns"
    );
    let latency_ns = u64::from(LATENCY_FRAMES) * 1_000_000_000 / u64::from(RATE);
    let latency_buckets = (latency_ns / AGE_BUCKET_NS) as usize;
    for streams in [&a_report.streams, &b_report.streams] {
        for s in streams.iter() {
            assert!(!s.counts.service_gone, "{s:?}");
            match s.direction {
                "in" => {
                    assert!(s.counts.jitter.received > 1000, "{s:?}");
                    // Every packet's age is counted; most came well within
                    // the latency (an age off by the clock or a wrap would
                    // not).
                    let ages = &s.packet_ages;
                    assert_eq!(ages.iter().sum::<u64>(), s.counts.jitter.received);
                    let within: u64 = ages[..latency_buckets].iter().sum();
                    assert!(within * 2 > s.counts.jitter.received, "{ages:?}");
                }
                _ => assert!(s.counts.sent > 1000, "{s:?}"),
            }
        }
    }
    for status in &statuses {
        let received = status.flows.iter().find_map(|f| f.rtp).unwrap();
        assert!(received.packets > 1000, "{status:?}");
        assert_eq!((received.not_rtp, received.restarts), (0, 0), "{status:?}");
    }
    assert_no_rt_allocations();
}

fn report(report: &HostReport) {
    let mut sorted = report.latencies_ns.clone();
    sorted.sort_unstable();
    eprintln!(
        "marker round trip over {} markers: min {} µs, median {} µs, max {} µs; lost {}; {:?}",
        sorted.len(),
        sorted.first().unwrap_or(&0) / 1000,
        sorted.get(sorted.len() / 2).unwrap_or(&0) / 1000,
        sorted.last().unwrap_or(&0) / 1000,
        report.markers_lost,
        report.streams
    );
}

/// The sessions the service heard, once `done` holds of them (bounded).
fn heard_until(
    socket: &Path,
    done: impl Fn(&[tessera_aes67::HeardSession]) -> bool,
) -> Vec<tessera_aes67::HeardSession> {
    for _ in 0..100 {
        let (sessions, _) = client::streams(&client::connect(socket).unwrap()).unwrap();
        if done(&sessions) {
            return sessions;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the service never heard what was expected");
}

#[test]
fn an_announced_stream_is_listed_until_its_client_leaves_and_garbage_is_refused() {
    let Some(machine) = tessera_testkit::privileged("SAP through the network service") else {
        return;
    };
    let mut lan = Lan::new();
    let studio = lan.add_host("studio").unwrap();
    lan.multicast_on_loopback(studio).unwrap();
    let host = End::Host(studio);
    let socket = machine.dir().join("net-sap.sock");
    let discovery = DiscoveryConfig {
        interface: Ipv4Addr::LOCALHOST,
        ..DiscoveryConfig::default()
    };
    let _service = start_in(&lan, host, &socket, Some(discovery));
    let garbage = client::announce(
        client::connect(&socket).unwrap(),
        "v=0\r\nm=video 1 RTP/AVP 96\r\n",
    );
    match garbage {
        Err(NetError::Refused(reason)) => assert!(reason.contains("fix:"), "{reason}"),
        _ => panic!("a description that is not one was announced"),
    }
    let clock = MediaClock::system("a test");
    let description = stream("stage", "239.69.83.9:5004".parse().unwrap(), 8).describe(
        Ipv4Addr::LOCALHOST,
        42,
        &clock,
    );
    let announcement =
        client::announce(client::connect(&socket).unwrap(), &description.to_sdp()).unwrap();
    let heard = heard_until(&socket, |s| s.iter().any(|h| h.description.name == "stage"));
    let stage = heard
        .iter()
        .find(|h| h.description.name == "stage")
        .unwrap();
    assert_eq!(stage.description, description);
    assert_eq!(stage.origin, Ipv4Addr::LOCALHOST);
    drop(announcement);
    heard_until(&socket, |s| s.iter().all(|h| h.description.name != "stage"));
}
