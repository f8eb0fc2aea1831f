//! The network service (seed 000 Fig. 5, Cell B): owns the application's UDP
//! socket, assembles the sender's packets into packages, hands each to the
//! client cell over a package link, and sends the client's answer back.
//!
//! It measures the aggregate response time where the seed did, in the
//! network driver: t1 when the first packet of a package is received, t2
//! when the output packet for it is written to the socket; Δt = t2 − t1
//! covers the socket, the service, the link both ways and the client's
//! cycle. t1 is the kernel's receive stamp of the datagram (SO_TIMESTAMPNS,
//! taken as the packet enters the stack, as the seed's driver stamped it at
//! the interrupt), so a service woken late is inside Δt; how long each
//! datagram waited in the socket is reported beside it.
//!
//! One thread serves, after its setup hook (joining the network cell): an
//! epoll wait on the socket and on the link's output signal, outputs sent
//! first. The socket gets a large receive buffer, so a stall of the service
//! (a host preempting the vCPU) queues packets instead of losing them.
//!
//! The datagrams come and go through the service's own UDP socket, or
//! through a flow of the network service process ([`crate::net`]): then
//! the flow's channels stand for the socket, t1 is still the kernel's
//! receive stamp (the process carries it over), t2 is when the answer was
//! handed to the process, and the process counts when it reached the
//! socket.
//!
//! Every answered package's timing is kept ([`TimingLog::Every`], up to the
//! packages expected), or, for runs of an hour, handed to a sink that
//! aggregates it and only the most recent kept in a ring
//! ([`TimingLog::Bounded`]): memory sized at start, whatever the length.
//!
//! This module owns the socket and the measurement. Its serving loop must
//! never allocate (every buffer and the timing log are sized at start),
//! lock or block except in its epoll wait; a full link or log is counted.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tessera_graph::{LinkService, PackageAssembler, PacketConfig};
use tessera_sys::clock;
use tessera_sys::event::{Epoll, Readiness, Trigger};
use tessera_sys::net::receive_stamped;

use crate::net::{Flow, ToSend};
use std::os::fd::AsFd;
use tessera_channel::Readiness as RingReadiness;

use crate::console::ConsoleWriter;
use crate::Setup;

/// Longest epoll wait before the stop flag is looked at.
const STOP_POLL: Duration = Duration::from_millis(50);
const SOCKET: u64 = 0;
const OUTPUTS: u64 = 1;

/// Where the role's datagrams come from and go.
pub enum NetworkPort {
    /// A UDP socket of its own, bound here (e.g. 127.0.0.1:0).
    Socket(SocketAddr),
    /// A flow of the network service process.
    Flow(Box<Flow>),
}

/// The port, open.
enum Port {
    Socket(UdpSocket),
    Flow(Box<Flow>),
}

/// What the service serves.
#[derive(Debug)]
pub struct NetworkConfig {
    /// Shape of packages and answers (`output_size` must be the link's).
    pub packet: PacketConfig,
    /// Receive buffer to ask for, in bytes.
    pub receive_buffer: usize,
    /// Packages whose timing is kept by [`TimingLog::Every`] (the rest are
    /// counted).
    pub expected_packages: usize,
    pub log: TimingLog,
}

/// What the service keeps of the answered packages' timings.
pub enum TimingLog {
    /// Every one, in answer order, in [`NetworkReport::timings`] (up to
    /// `expected_packages`): short runs.
    Every,
    /// Long runs: each handed to `sink`, and only the last `recent` kept in
    /// a ring ([`NetworkReport::timings`] holds them, oldest first; the
    /// ones overwritten are counted in `timings_lost`). Nothing grows with
    /// the run's length.
    Bounded {
        recent: usize,
        sink: Box<dyn TimingSink>,
    },
}

impl std::fmt::Debug for TimingLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimingLog::Every => f.write_str("Every"),
            TimingLog::Bounded { recent, .. } => write!(f, "Bounded {{ recent: {recent} }}"),
        }
    }
}

/// Takes every answered package's timing, in answer order, on the serving
/// thread: it must never allocate, lock or block.
pub trait TimingSink: Send {
    fn record(&mut self, timing: &PackageTiming);
    /// The service has stopped: nothing more will be recorded.
    fn finish(&mut self) {}
}

/// One answered package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackageTiming {
    /// `CLOCK_MONOTONIC` ns: first packet received (the kernel's stamp).
    pub t1_ns: u64,
    /// `CLOCK_MONOTONIC` ns: last packet received (the kernel's stamp):
    /// the package complete. Before it the sender paces, after it only
    /// the receiving side works.
    pub complete_ns: u64,
    /// `CLOCK_MONOTONIC` ns: answer written.
    pub t2_ns: u64,
}

impl PackageTiming {
    /// Δt = t2 − t1, the seed's response time.
    pub fn response_ns(&self) -> u64 {
        self.t2_ns.saturating_sub(self.t1_ns)
    }

    /// t2 − the last packet: the receiving side's part of Δt.
    pub fn service_ns(&self) -> u64 {
        self.t2_ns.saturating_sub(self.complete_ns)
    }
}

/// What the service saw.
#[derive(Debug, Clone, Default)]
pub struct NetworkReport {
    pub datagrams: u64,
    /// Complete packages handed to the client.
    pub packages: u64,
    pub answered: u64,
    /// Datagrams of the wrong size or out of step.
    pub dropped_packets: u64,
    /// Packages dropped whole for a lost packet.
    pub incomplete_packages: u64,
    /// Packages the client was too far behind to take.
    pub packages_lost: u64,
    /// Answers the service was too far behind to take.
    pub outputs_lost: u64,
    pub send_errors: u64,
    /// Receive buffer the kernel granted, in bytes.
    pub receive_buffer: usize,
    /// CPU time the serving thread used (`CLOCK_THREAD_CPUTIME_ID`).
    pub cpu_ns: u64,
    /// Sum and longest, over datagrams, of the wait from the kernel's
    /// receive stamp to the service's read: the network cell's wake-up
    /// latency and the queue before it.
    pub socket_wait_total_ns: u64,
    pub socket_wait_max_ns: u64,
    /// How long the thread's setup hook (joining its cell) took.
    pub setup_ns: u64,
    /// The longest time between two passes of the serving loop (an idle
    /// wait ends within [`STOP_POLL`]): longer means the thread was kept
    /// from its CPU, not that nothing came.
    pub longest_pass_gap_ns: u64,
    /// In answer order, up to `expected_packages` ([`TimingLog::Every`]),
    /// or the last `recent` ones ([`TimingLog::Bounded`]).
    pub timings: Vec<PackageTiming>,
    /// Answered packages not kept: beyond `expected_packages`, or
    /// overwritten in the ring.
    pub timings_lost: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error("the network service's socket at {addr}: {source}")]
    Socket {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the network service: {0}")]
    Service(String),
}

/// The running service.
pub struct NetworkService {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// `None` once joined.
    thread: Option<JoinHandle<Result<NetworkReport, String>>>,
}

impl NetworkService {
    /// Binds the socket and starts serving `link` (the client's end is the
    /// engine's `LinkDriver`), logging one line per answered package to
    /// `console` when given: `t1_ns,complete_ns,t2_ns,dt_ns`.
    pub fn start(
        config: NetworkConfig,
        port: NetworkPort,
        link: LinkService,
        setup: Setup,
        console: Option<ConsoleWriter>,
    ) -> Result<NetworkService, NetworkError> {
        let assembler = PackageAssembler::new(&config.packet)
            .map_err(|e| NetworkError::Service(e.to_string()))?;
        if link.config().package_size != assembler.package_size()
            || link.config().output_size != config.packet.output_size
        {
            return Err(NetworkError::Service(format!(
                "the link carries {}-byte packages and {}-byte answers; the packets make {}-byte \
                 packages and {}-byte answers",
                link.config().package_size,
                link.config().output_size,
                assembler.package_size(),
                config.packet.output_size
            )));
        }
        let (port, addr, receive_buffer) = open_port(port, config.receive_buffer)?;
        let stop = Arc::new(AtomicBool::new(false));
        let depth = link.config().depth;
        let (kept, sink) = match config.log {
            TimingLog::Every => (config.expected_packages, None),
            TimingLog::Bounded { recent, sink } => (recent, Some(sink)),
        };
        let server = Server {
            package: vec![0; assembler.package_size()].into_boxed_slice(),
            output: vec![0; config.packet.output_size].into_boxed_slice(),
            scratch: vec![0; config.packet.packet_size + 1].into_boxed_slice(),
            report: NetworkReport {
                receive_buffer,
                timings: Vec::with_capacity(kept),
                ..NetworkReport::default()
            },
            sink,
            ring_next: 0,
            port,
            assembler,
            link,
            console,
            reply_to: config.packet.reply_to,
            sender: None,
            batch: config.packet.packets_per_package,
            in_flight: VecDeque::with_capacity(depth),
        };
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("tessera-network".into())
            .spawn(move || server.serve(setup, &flag))
            .map_err(|e| NetworkError::Service(format!("starting its thread: {e}")))?;
        Ok(NetworkService {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// Where the sender sends.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and reports.
    pub fn stop(mut self) -> Result<NetworkReport, NetworkError> {
        self.stop.store(true, Ordering::Release);
        self.thread
            .take()
            .expect("joined only here")
            .join()
            .map_err(|_| NetworkError::Service("its thread panicked".into()))?
            .map_err(NetworkError::Service)
    }
}

/// A service dropped without [`NetworkService::stop`] still ends its thread
/// (and closes its socket).
impl Drop for NetworkService {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Opens the role's own socket (its address, the receive buffer the
/// kernel granted), or takes the flow as it is.
fn open_port(
    port: NetworkPort,
    receive_buffer: usize,
) -> Result<(Port, SocketAddr, usize), NetworkError> {
    let addr = match port {
        NetworkPort::Flow(flow) => {
            let addr = flow.local_addr();
            return Ok((Port::Flow(flow), addr, 0));
        }
        NetworkPort::Socket(addr) => addr,
    };
    let socket_error = |source| NetworkError::Socket { addr, source };
    let socket = UdpSocket::bind(addr).map_err(socket_error)?;
    socket.set_nonblocking(true).map_err(socket_error)?;
    let granted = tessera_sys::net::set_receive_buffer(&socket, receive_buffer)
        .map_err(|e| NetworkError::Service(e.to_string()))?;
    tessera_sys::net::enable_receive_timestamps(&socket).map_err(socket_error)?;
    let addr = socket.local_addr().map_err(socket_error)?;
    Ok((Port::Socket(socket), addr, granted))
}

/// A datagram taken into the scratch buffer.
struct Arrival {
    len: usize,
    from: SocketAddr,
    /// The kernel's receive stamp, `CLOCK_MONOTONIC` ns.
    arrival_ns: Option<u64>,
}

/// The serving thread's state: everything preallocated.
struct Server {
    port: Port,
    assembler: PackageAssembler,
    link: LinkService,
    console: Option<ConsoleWriter>,
    reply_to: Option<SocketAddr>,
    sender: Option<SocketAddr>,
    /// Datagrams taken per wake-up: one package.
    batch: usize,
    /// (t1, complete) of the packages handed over and not yet answered,
    /// oldest first; at most the link's depth, so it never grows.
    in_flight: VecDeque<(u64, u64)>,
    package: Box<[u8]>,
    output: Box<[u8]>,
    /// One datagram plus one byte, to catch oversized ones.
    scratch: Box<[u8]>,
    report: NetworkReport,
    /// [`TimingLog::Bounded`]'s sink: `report.timings` is then a ring,
    /// whose oldest entry is at `ring_next` once full.
    sink: Option<Box<dyn TimingSink>>,
    ring_next: usize,
}

impl Server {
    fn serve(mut self, setup: Setup, stop: &AtomicBool) -> Result<NetworkReport, String> {
        let setup_start = clock::monotonic_ns();
        setup().map_err(|e| format!("setting up its thread: {e}"))?;
        self.report.setup_ns = clock::monotonic_ns() - setup_start;
        let epoll = Epoll::new().map_err(|e| e.to_string())?;
        let incoming = match &self.port {
            Port::Socket(socket) => socket.as_fd(),
            Port::Flow(flow) => flow
                .doorbell()
                .ok_or("the network service gave the flow no doorbell to wait on")?,
        };
        epoll
            .add(incoming, SOCKET, Trigger::Level)
            .and_then(|()| epoll.add(self.link.output_fd(), OUTPUTS, Trigger::Level))
            .map_err(|e| e.to_string())?;
        let _rt = tessera_rtguard::RtGuard::enter();
        let cpu_start = clock::thread_cpu_ns();
        let mut ready = [Readiness::EMPTY; 2];
        let mut last_pass = clock::monotonic_ns();
        while !stop.load(Ordering::Acquire) {
            let now = clock::monotonic_ns();
            self.report.longest_pass_gap_ns = self.report.longest_pass_gap_ns.max(now - last_pass);
            last_pass = now;
            let slept = self.may_sleep()?;
            let n = match slept {
                true => epoll
                    .wait(&mut ready, STOP_POLL)
                    .map_err(|e| e.to_string())?,
                false => 0,
            };
            let woke = |token| ready[..n].iter().any(|r| r.token() == token);
            // A flow's doorbell says only that something came: look at both.
            let (outputs, incoming) = match &self.port {
                Port::Socket(_) => (woke(OUTPUTS), woke(SOCKET)),
                Port::Flow(flow) => {
                    flow.disarm();
                    if woke(SOCKET) {
                        flow.clear_doorbell();
                    }
                    // Only a quiet wait can mean the service has died.
                    if slept && n == 0 {
                        flow.check_service()
                            .map_err(|e| format!("the network service's flow: {e}"))?;
                    }
                    (true, true)
                }
            };
            // Answers first: their t2 is what the sender waits for.
            if outputs {
                self.send_outputs();
            }
            if incoming {
                self.receive_packets()?;
            }
        }
        self.report.cpu_ns = clock::thread_cpu_ns() - cpu_start;
        self.report.dropped_packets = self.assembler.dropped_packets();
        self.report.incomplete_packages = self.assembler.incomplete_packages();
        self.report.packages_lost = self.link.packages_lost();
        self.report.outputs_lost = self.link.outputs_lost();
        if let Some(sink) = &mut self.sink {
            sink.finish();
            self.report.timings.rotate_left(self.ring_next);
        }
        Ok(self.report)
    }

    /// Whether the thread may sleep: always on its own socket; on a flow,
    /// once armed and nothing has come (see `Flow::arm`).
    fn may_sleep(&mut self) -> Result<bool, String> {
        match &mut self.port {
            Port::Socket(_) => Ok(true),
            Port::Flow(flow) => match flow.arm() {
                Ok(RingReadiness::NotYet) => Ok(true),
                Ok(_) => Ok(false),
                Err(e) => Err(format!("the network service's flow: {e}")),
            },
        }
    }

    /// The next datagram into `scratch`: its length, sender and the
    /// kernel's receive stamp; `None` when none is waiting.
    fn next_datagram(&mut self) -> Result<Option<Arrival>, String> {
        match &mut self.port {
            Port::Socket(socket) => match receive_stamped(socket, &mut self.scratch) {
                Ok(d) => Ok(Some(Arrival {
                    len: d.len,
                    from: d.from,
                    arrival_ns: d.arrival_ns,
                })),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    Ok(None)
                }
                Err(e) => Err(format!("receiving: {e}")),
            },
            Port::Flow(flow) => match flow.try_receive() {
                Ok(Some((header, bytes))) => {
                    let len = bytes.len().min(self.scratch.len());
                    self.scratch[..len].copy_from_slice(&bytes[..len]);
                    Ok(Some(Arrival {
                        len,
                        from: SocketAddr::V4(header.from),
                        arrival_ns: Some(header.arrival_ns),
                    }))
                }
                Ok(None) => Ok(None),
                Err(e) => Err(format!("the network service's flow: {e}")),
            },
        }
    }

    /// Takes the datagrams waiting, at most a package's worth, so answers
    /// are sent between packages even when the sender never pauses (epoll
    /// reports the socket again at once); hands over a completed package.
    fn receive_packets(&mut self) -> Result<(), String> {
        for _ in 0..self.batch {
            let Some(datagram) = self.next_datagram()? else {
                return Ok(());
            };
            let read = clock::monotonic_ns();
            let arrival = datagram.arrival_ns.unwrap_or(read).min(read);
            self.report.socket_wait_total_ns += read - arrival;
            self.report.socket_wait_max_ns = self.report.socket_wait_max_ns.max(read - arrival);
            self.report.datagrams += 1;
            self.sender = Some(datagram.from);
            let received = &self.scratch[..datagram.len];
            if let Some(t1) = self.assembler.accept(received, arrival, &mut self.package) {
                if self.link.send_package(t1, &self.package) {
                    self.report.packages += 1;
                    self.note_in_flight(t1, arrival);
                }
            }
        }
        Ok(())
    }

    /// Sends every answer waiting, stamping t2.
    fn send_outputs(&mut self) {
        self.link.take_outputs_signal();
        while let Some(t1) = self.link.receive_output(&mut self.output) {
            let Some(to) = self.reply_to.or(self.sender) else {
                continue;
            };
            if !self.send_output(t1, to) {
                self.report.send_errors += 1;
                continue;
            }
            let timing = PackageTiming {
                t1_ns: t1,
                complete_ns: self.completed(t1),
                t2_ns: clock::monotonic_ns(),
            };
            self.report.answered += 1;
            self.log(timing);
        }
    }

    /// Sends the answer to the package that began at `t1`: to the socket,
    /// or to the network service process with `t1` as its origin (so the
    /// process counts Δt up to the socket).
    fn send_output(&mut self, t1: u64, to: SocketAddr) -> bool {
        match &mut self.port {
            Port::Socket(socket) => socket.send_to(&self.output, to).is_ok(),
            Port::Flow(flow) => {
                let SocketAddr::V4(to) = to else {
                    return false;
                };
                let meta = ToSend {
                    origin_ns: t1,
                    queued_ns: clock::monotonic_ns(),
                    to: Some(to),
                };
                flow.try_send(&self.output, meta).is_ok()
            }
        }
    }

    fn note_in_flight(&mut self, t1: u64, complete: u64) {
        if self.in_flight.len() == self.in_flight.capacity() {
            // Only when answers were lost: theirs are the oldest.
            self.in_flight.pop_front();
        }
        self.in_flight.push_back((t1, complete));
    }

    /// When the package that began at `t1` was complete; answers come in
    /// order, so older entries are of answers lost. `t1` if unknown.
    fn completed(&mut self, t1: u64) -> u64 {
        while let Some(&(start, complete)) = self.in_flight.front() {
            if start > t1 {
                break;
            }
            self.in_flight.pop_front();
            if start == t1 {
                return complete;
            }
        }
        t1
    }

    fn log(&mut self, timing: PackageTiming) {
        let timings = &mut self.report.timings;
        if let Some(sink) = &mut self.sink {
            sink.record(&timing);
        }
        if timings.len() < timings.capacity() {
            timings.push(timing);
        } else {
            self.report.timings_lost += 1;
            // Bounded: the oldest gives way.
            if self.sink.is_some() && !timings.is_empty() {
                timings[self.ring_next] = timing;
                self.ring_next = (self.ring_next + 1) % timings.len();
            }
        }
        if let Some(console) = &mut self.console {
            console.line(format_args!(
                "{},{},{},{}",
                timing.t1_ns,
                timing.complete_ns,
                timing.t2_ns,
                timing.response_ns()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use tessera_graph::{package_link, Driver, LinkConfig};

    const K: usize = 4;
    const SIZE: usize = 6;

    fn config(expected: usize) -> NetworkConfig {
        NetworkConfig {
            packet: PacketConfig {
                packets_per_package: K,
                packet_size: SIZE,
                output_size: 2,
                reply_to: None,
                index_at: Some(0),
            },
            receive_buffer: 1 << 20,
            expected_packages: expected,
            log: TimingLog::Every,
        }
    }

    fn link() -> (LinkService, tessera_graph::LinkDriver) {
        package_link(LinkConfig {
            package_size: K * SIZE,
            output_size: 2,
            depth: 4,
        })
        .unwrap()
    }

    fn loopback() -> NetworkPort {
        NetworkPort::Socket("127.0.0.1:0".parse().unwrap())
    }

    fn nothing() -> Setup {
        Box::new(|| Ok(()))
    }

    /// A sender that waits up to 5 s for an answer.
    fn sender() -> UdpSocket {
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        sender
    }

    /// Sends package `n` (its K packets filled with `n`) to `service`,
    /// runs the client's cycle on it (answering `[n, 0xAA]`) and takes the
    /// answer: the cycle's start, the package's last byte as the client got
    /// it, the answer.
    fn round_trip(
        sender: &UdpSocket,
        service: &NetworkService,
        driver: &mut tessera_graph::LinkDriver,
        n: u8,
    ) -> (u64, u8, Vec<u8>) {
        for index in 0..K as u16 {
            let mut packet = [n; SIZE];
            packet[..2].copy_from_slice(&index.to_le_bytes());
            sender.send_to(&packet, service.local_addr()).unwrap();
        }
        let mut package = [0u8; K * SIZE];
        let stop = AtomicBool::new(false);
        let start = driver.wait_cycle(0, &mut package, &stop).unwrap().unwrap();
        driver.end_cycle(&[n, 0xAA]).unwrap();
        let mut answer = [0u8; 3];
        let (len, _) = sender.recv_from(&mut answer).unwrap();
        (
            start.start_ns,
            package[K * SIZE - 1],
            answer[..len].to_vec(),
        )
    }

    #[test]
    fn packages_reach_the_client_and_answers_reach_the_sender_timed() {
        let (service_end, mut driver) = link();
        let service =
            NetworkService::start(config(8), loopback(), service_end, nothing(), None).unwrap();
        let sender = sender();
        for n in 0..3u8 {
            let (start_ns, last, answer) = round_trip(&sender, &service, &mut driver, n);
            assert!(start_ns > 0);
            assert_eq!(last, n, "package {n} arrived whole");
            assert_eq!(answer, [n, 0xAA]);
        }
        let report = service.stop().unwrap();
        assert_eq!(
            (report.datagrams, report.packages, report.answered),
            (12, 3, 3)
        );
        assert_eq!(report.timings.len(), 3);
        assert!(report
            .timings
            .iter()
            .all(|t| t.t1_ns <= t.complete_ns && t.complete_ns <= t.t2_ns));
        assert!(report.receive_buffer > 0);
        assert!(
            report.socket_wait_max_ns > 0
                && report.socket_wait_total_ns >= report.socket_wait_max_ns,
            "each datagram's wait from its kernel stamp to its read is counted"
        );
    }

    /// Counts what it is given; remembers the last t1 and whether it
    /// was finished.
    struct Counting(Arc<(AtomicU64, AtomicU64, AtomicBool)>);

    impl TimingSink for Counting {
        fn record(&mut self, timing: &PackageTiming) {
            self.0 .0.fetch_add(1, Ordering::Relaxed);
            self.0 .1.store(timing.t1_ns, Ordering::Relaxed);
        }

        fn finish(&mut self) {
            self.0 .2.store(true, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_bounded_log_hands_every_timing_to_its_sink_and_keeps_the_last_few() {
        let (service_end, mut driver) = link();
        let seen = Arc::new((AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false)));
        let config = NetworkConfig {
            log: TimingLog::Bounded {
                recent: 2,
                sink: Box::new(Counting(Arc::clone(&seen))),
            },
            ..config(1)
        };
        let service =
            NetworkService::start(config, loopback(), service_end, nothing(), None).unwrap();
        let sender = sender();
        for n in 0..5u8 {
            round_trip(&sender, &service, &mut driver, n);
        }
        let report = service.stop().unwrap();
        assert_eq!(report.answered, 5);
        assert_eq!(seen.0.load(Ordering::Relaxed), 5, "the sink saw every one");
        assert!(seen.2.load(Ordering::Relaxed), "and was finished");
        assert_eq!(report.timings.len(), 2, "the ring never grows");
        assert_eq!(report.timings_lost, 3);
        assert!(
            report.timings[0].t1_ns < report.timings[1].t1_ns,
            "oldest first"
        );
        assert_eq!(
            report.timings[1].t1_ns,
            seen.1.load(Ordering::Relaxed),
            "the last one is kept"
        );
    }

    #[test]
    fn a_link_of_the_wrong_shape_is_refused_with_both_sizes() {
        let (service_end, _driver) = package_link(LinkConfig {
            package_size: 10,
            output_size: 2,
            depth: 1,
        })
        .unwrap();
        let err = NetworkService::start(config(1), loopback(), service_end, nothing(), None)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("10-byte packages") && err.contains("24-byte"),
            "{err}"
        );
    }

    #[test]
    fn a_failing_setup_stops_the_service_with_the_reason() {
        let (service_end, _driver) = link();
        let service = NetworkService::start(
            config(1),
            loopback(),
            service_end,
            Box::new(|| Err("cell \"net\" is gone".into())),
            None,
        )
        .unwrap();
        let err = service.stop().unwrap_err().to_string();
        assert!(err.contains("cell \"net\" is gone"), "{err}");
    }
}
