//! The network service end to end in one process (its control socket, its
//! serving threads, a client through the client library, plain UDP sockets
//! as the far side): datagrams both ways in order with their stamps,
//! admission refusing what does not fit and saying what would, the policy
//! refusing a caller, garbage on the control socket, a client that leaves,
//! and serving threads that never touch the heap. Its own test binary: the
//! allocation guard's counters are process-wide.

use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_rtguard::{assert_no_rt_allocations, CountingAllocator};
use tessera_services::net::{
    client, Class, Discipline, Flow, FlowRequest, NetConfig, NetError, NetService, ToSend,
};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const PATIENCE: Duration = Duration::from_secs(10);

fn socket_path(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tessera-net-{}-{test}.sock", std::process::id()))
}

fn config(test: &str, discipline: Discipline, link_bps: u64) -> NetConfig {
    NetConfig {
        socket: socket_path(test),
        discipline,
        link_bps,
        cpu_share: 1.0,
        real_time_setup: None,
        real_time_note: "best-effort (test)".into(),
        policy: Arc::new(|_| Ok(())),
        discovery: None,
    }
}

fn request(name: &str, class: Class, reservation_bps: u64) -> FlowRequest {
    FlowRequest {
        name: name.into(),
        class,
        reservation_bps,
        weight: 1,
        limit_bps: None,
        bind: "127.0.0.1:0".parse().unwrap(),
        peer: None,
        max_datagram: 1472,
        slots: 256,
        response_deadline_ns: Some(1_000_000_000),
        multicast: None,
        rtp_clock_rate: None,
    }
}

fn open(service: &NetService, request: &FlowRequest) -> Result<Flow, NetError> {
    Flow::open(client::connect(service.socket())?, request)
}

fn far_side() -> UdpSocket {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    socket
}

fn to(address: SocketAddr) -> Option<std::net::SocketAddrV4> {
    match address {
        SocketAddr::V4(v4) => Some(v4),
        SocketAddr::V6(_) => None,
    }
}

#[test]
fn datagrams_cross_the_service_both_ways_in_order_with_their_stamps() {
    for discipline in [Discipline::MClock, Discipline::Fifo] {
        let name = format!("both-ways-{}", discipline.name());
        let service = NetService::start(config(&name, discipline, 1_000_000_000)).unwrap();
        let mut flow = open(&service, &request("music", Class::RealTime, 100_000_000)).unwrap();
        let far = far_side();
        for seq in 0u32..200 {
            far.send_to(&seq.to_le_bytes(), flow.local_addr()).unwrap();
        }
        for seq in 0u32..200 {
            let (header, bytes) = flow.receive(PATIENCE).unwrap();
            assert_eq!(bytes, seq.to_le_bytes(), "datagram {seq} ({discipline:?})");
            assert!(header.arrival_ns > 0 && header.arrival_ns <= header.handed_ns);
            assert_eq!(Some(header.from), to(far.local_addr().unwrap()));
            let answer = ToSend {
                origin_ns: header.arrival_ns,
                queued_ns: tessera_sys::clock::monotonic_ns(),
                to: Some(header.from),
            };
            flow.send(&(seq + 1000).to_le_bytes(), answer, PATIENCE)
                .unwrap();
        }
        let mut buf = [0u8; 16];
        for seq in 0u32..200 {
            let (len, from) = far.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..len], (seq + 1000).to_le_bytes());
            assert_eq!(from, flow.local_addr());
        }
        // The service counts a datagram as sent once `sendto` returns, which
        // may be after the far side has it: wait for the count.
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            let status = flow.status().unwrap();
            let counted = &status.flows[0];
            if counted.sent.packets >= 200 && counted.response.count >= 200 {
                break status;
            }
            assert!(Instant::now() < deadline, "{counted:?}");
            std::thread::sleep(Duration::from_millis(1));
        };
        let counted = &status.flows[0];
        assert_eq!(counted.received.packets, 200);
        assert_eq!(counted.sent.packets, 200);
        assert_eq!(counted.response.count, 200);
        assert_eq!(counted.late_responses, 0);
        assert_eq!(status.discipline, discipline.name());
        drop(flow);
        service.stop();
    }
    assert_no_rt_allocations();
}

#[test]
fn a_reservation_beyond_the_capacity_is_refused_with_what_would_fit() {
    let service = NetService::start(config("admission", Discipline::MClock, 100_000_000)).unwrap();
    let _held = open(&service, &request("first", Class::Bulk, 60_000_000)).unwrap();
    let refused = open(&service, &request("second", Class::Bulk, 60_000_000));
    let Err(NetError::Refused(reason)) = refused else {
        panic!("admitted beyond the capacity");
    };
    assert!(reason.contains("would fit"), "{reason}");
    assert!(
        reason.contains("35 Mbit/s"),
        "95 usable − 60 held: {reason}"
    );
    let fits = open(&service, &request("second", Class::Bulk, 35_000_000));
    assert!(fits.is_ok(), "what the refusal offered fits");
}

#[test]
fn impossible_requests_are_refused_and_change_nothing() {
    let service =
        NetService::start(config("impossible", Discipline::MClock, 1_000_000_000)).unwrap();
    let mut zero_weight = request("w", Class::Bulk, 0);
    zero_weight.weight = 0;
    let mut bad_slots = request("s", Class::Bulk, 0);
    bad_slots.slots = 100;
    let mut foreign = request("f", Class::Bulk, 0);
    foreign.bind = "192.0.2.1:9".parse().unwrap();
    for (bad, says) in [
        (zero_weight, "weight"),
        (bad_slots, "power of two"),
        (foreign, "cannot bind"),
    ] {
        match open(&service, &bad) {
            Err(NetError::Refused(reason)) => assert!(reason.contains(says), "{reason}"),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("{} admitted", bad.name),
        }
    }
    let status = client::status(service.socket()).unwrap();
    assert!(status.flows.is_empty() && status.committed_bps == 0);
}

#[test]
fn garbage_on_the_control_socket_is_answered_and_the_service_keeps_serving() {
    use std::io::{Read, Write};
    let service = NetService::start(config("garbage", Discipline::MClock, 1_000_000_000)).unwrap();
    let mut stream = UnixStream::connect(service.socket()).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(&9u32.to_le_bytes()).unwrap();
    stream.write_all(b"not json!").unwrap();
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply);
    assert!(text.contains("malformed"), "{text}");
    assert!(open(&service, &request("after", Class::Bulk, 0)).is_ok());
}

#[test]
fn a_caller_the_policy_refuses_is_told_why() {
    let mut config = config("policy", Discipline::MClock, 1_000_000_000);
    config.policy = Arc::new(|peer| Err(format!("uid {} may not use the network", peer.uid)));
    let service = NetService::start(config).unwrap();
    match open(&service, &request("x", Class::Bulk, 0)) {
        Err(e) => assert!(e.to_string().contains("may not use the network"), "{e}"),
        Ok(_) => panic!("admitted against the policy"),
    }
}

#[test]
fn a_client_that_leaves_has_its_flow_retired_and_its_reservation_released() {
    let service = NetService::start(config("leaves", Discipline::MClock, 1_000_000_000)).unwrap();
    let flow = open(&service, &request("gone", Class::RealTime, 500_000_000)).unwrap();
    let held = client::status(service.socket()).unwrap();
    assert_eq!((held.flows.len(), held.committed_bps), (1, 500_000_000));
    drop(flow);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let status = client::status(service.socket()).unwrap();
        if status.flows.is_empty() && status.committed_bps == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the flow outlived its client");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(open(&service, &request("again", Class::RealTime, 500_000_000)).is_ok());
}

#[test]
fn a_flood_beyond_the_capacity_is_counted_where_it_was_lost() {
    let service = NetService::start(config("flood", Discipline::MClock, 100_000_000)).unwrap();
    let mut request = request("flood", Class::Bulk, 0);
    request.slots = 64;
    let flow = open(&service, &request).unwrap();
    let far = far_side();
    const SENT: u64 = 8000;
    for _ in 0..SENT {
        let _ = far.send_to(&[7u8; 1400], flow.local_addr());
    }
    // The client never reads: 64 datagrams fill its channel and the
    // service drops what it takes after that; sent far faster than the
    // service's 100 Mbit/s, the rest overflows the socket. The kernel tells
    // the count with the next datagram queued after the drops: one more
    // now and then.
    let deadline = Instant::now() + PATIENCE;
    let mut sent = SENT;
    let received = loop {
        let status = flow.status().unwrap();
        let received = status.flows[0].received;
        if received.overflowed > 0 && received.drops > 0 {
            break received;
        }
        assert!(Instant::now() < deadline, "{received:?}");
        let _ = far.send_to(&[7u8; 1400], flow.local_addr());
        sent += 1;
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(received.packets, 64, "{received:?}");
    assert!(received.packets + received.drops + received.overflowed <= sent);
}
