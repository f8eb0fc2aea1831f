//! The network-audio client (`--net-listen ADDR:PORT --net-send-to
//! ADDR:PORT`): one JACK client, `netapp`, that works like the programs
//! musicians link two hosts with (jacktrip, zita-njbridge). Its process
//! callback hands each period of its input to a send thread of its own,
//! which sends it to the other host over UDP, and plays what a receive
//! thread of its own put in the jitter buffer ([`crate::jitter`]): one
//! period per cycle, counting its own underruns and late packets — a packet
//! is late when it reaches the jitter buffer more than the buffer's latency
//! after the other host's callback made it (the hosts are namespaces of one
//! machine and share its CLOCK_MONOTONIC, so a packet's age is exact), or
//! after its sequence number was played or skipped. Both
//! threads are SCHED_OTHER, as in those programs: only the process thread
//! is real-time (JACK makes it so).
//!
//! It owns the socket, the two threads, the rings between them and the
//! callback, and the counters, which its main thread samples every tenth of
//! a second into the record (`network` lines of [`crate::record`]). The
//! process callback must never allocate, lock, block or print: it moves
//! fixed-size packets through lock-free rings (rtrb) and wakes the send
//! thread with an unpark (a futex wake, never a wait).

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rtrb::{Consumer, Producer, RingBuffer};
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns};

use crate::client::XrunCounter;
use crate::jitter::{Arrival, JitterBuffer, Packet, Take, MAX_DATAGRAM, MAX_FRAMES};
use crate::options::{NetOptions, Options};
use crate::record::{self, NetSnapshot};

/// The client's name on the server.
const CLIENT: &str = "netapp";
/// Packets each ring holds: far more than a stalled thread could miss
/// before the jitter buffer has given up on them anyway.
const RING_PACKETS: usize = 256;
/// How long the threads block before they look at the stop flag, and how
/// often the counters are sampled.
const TICK: Duration = Duration::from_millis(100);
/// What the client says on stderr once it is open and active.
const OPEN_LINE: &str = "tessera-jack-peer: netapp open, waiting for t0";
/// Room for xrun times.
const MAX_XRUN_TIMES: usize = 100_000;

/// Counters written by the callback and the threads, read by the main
/// thread.
#[derive(Default)]
struct Counters {
    cycles: AtomicU64,
    sent: AtomicU64,
    send_dropped: AtomicU64,
    received: AtomicU64,
    receive_dropped: AtomicU64,
    underruns: AtomicU64,
    late: AtomicU64,
    overflow: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    fn snapshot(&self, at_ns: u64) -> NetSnapshot {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        NetSnapshot {
            at_ns,
            cycles: read(&self.cycles),
            sent: read(&self.sent),
            send_dropped: read(&self.send_dropped),
            received: read(&self.received),
            receive_dropped: read(&self.receive_dropped),
            underruns: read(&self.underruns),
            late: read(&self.late),
            overflow: read(&self.overflow),
        }
    }
}

/// The process callback's side.
struct NetClient {
    input: jack::Port<jack::AudioIn>,
    output: jack::Port<jack::AudioOut>,
    outgoing: Producer<Packet>,
    incoming: Consumer<Packet>,
    jitter: JitterBuffer,
    /// The send thread, woken once a packet is in its ring.
    sender: std::thread::Thread,
    next_seq: u64,
    /// The jitter buffer's latency: a packet older than this when it
    /// reaches the buffer came after its play time.
    latency_ns: u64,
    counters: Arc<Counters>,
    tid: Arc<AtomicI32>,
}

impl NetClient {
    /// This cycle's input as the next packet, handed to the send thread.
    fn send(&mut self, scope: &jack::ProcessScope) {
        let input = self.input.as_slice(scope);
        let frames = input.len().min(MAX_FRAMES);
        let mut packet = Packet::silent();
        packet.seq = self.next_seq;
        packet.sent_ns = monotonic_ns();
        packet.frames = frames as u32;
        packet.samples[..frames].copy_from_slice(&input[..frames]);
        self.next_seq += 1;
        match self.outgoing.push(packet) {
            Ok(()) => self.sender.unpark(),
            Err(_) => bump(&self.counters.send_dropped),
        }
    }

    /// Moves what the receive thread got into the jitter buffer, counting
    /// the packets that came after their play time.
    fn receive(&mut self) {
        let now = monotonic_ns();
        while let Ok(packet) = self.incoming.pop() {
            let arrival = self.jitter.insert(&packet);
            let overdue = now.saturating_sub(packet.sent_ns) > self.latency_ns;
            if overdue || arrival == Arrival::Late {
                bump(&self.counters.late);
            }
            if let Arrival::Stored { overflow } = arrival {
                self.counters
                    .overflow
                    .fetch_add(overflow, Ordering::Relaxed);
            }
        }
    }

    /// Plays the period due (silence if the jitter buffer has none).
    fn play(&mut self, scope: &jack::ProcessScope) {
        let out = self.output.as_mut_slice(scope);
        if self.jitter.take(out) == Take::Underrun {
            bump(&self.counters.underruns);
        }
    }
}

impl jack::ProcessHandler for NetClient {
    fn process(&mut self, _: &jack::Client, scope: &jack::ProcessScope) -> jack::Control {
        if self.tid.load(Ordering::Relaxed) == 0 {
            self.tid
                .store(tessera_sys::proc::current_tid(), Ordering::Relaxed);
        }
        self.send(scope);
        self.receive();
        self.play(scope);
        bump(&self.counters.cycles);
        jack::Control::Continue
    }
}

/// The send thread: sends every packet of its ring to the other host.
fn send_loop(
    socket: UdpSocket,
    to: SocketAddr,
    mut outgoing: Consumer<Packet>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) {
    let mut wire = [0u8; MAX_DATAGRAM];
    while !stop.load(Ordering::Acquire) {
        while let Ok(packet) = outgoing.pop() {
            let n = packet.encode(&mut wire);
            match socket.send_to(&wire[..n], to) {
                Ok(_) => bump(&counters.sent),
                Err(_) => bump(&counters.send_dropped),
            }
        }
        std::thread::park_timeout(TICK);
    }
}

/// The receive thread: every packet from the other host into the ring of
/// the process callback.
fn receive_loop(
    socket: UdpSocket,
    mut incoming: Producer<Packet>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) {
    // One byte more than a packet: a longer datagram shows as malformed.
    let mut wire = [0u8; MAX_DATAGRAM + 1];
    let mut packet = Packet::silent();
    while !stop.load(Ordering::Acquire) {
        let Ok(n) = socket.recv(&mut wire) else {
            continue; // the read timeout: look at the stop flag
        };
        if Packet::decode(&wire[..n], &mut packet).is_none() {
            continue;
        }
        bump(&counters.received);
        if incoming.push(packet).is_err() {
            bump(&counters.receive_dropped);
        }
    }
}

/// The two network threads; stopped and joined when dropped.
struct NetThreads {
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<()>>,
}

impl NetThreads {
    fn sender(&self) -> std::thread::Thread {
        self.handles[0].thread().clone()
    }
}

impl Drop for NetThreads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for handle in self.handles.drain(..) {
            handle.thread().unpark();
            let _ = handle.join();
        }
    }
}

/// Binds the socket and starts both threads (they inherit this thread's
/// SCHED_OTHER); the callback's ends of their rings.
fn start_threads(
    net: &NetOptions,
    counters: &Arc<Counters>,
) -> Result<(NetThreads, Producer<Packet>, Consumer<Packet>), String> {
    let socket = UdpSocket::bind(net.listen).map_err(|e| {
        format!(
            "binding UDP {}: {e} (is this the host's address?)",
            net.listen
        )
    })?;
    socket
        .set_read_timeout(Some(TICK))
        .map_err(|e| format!("socket timeout: {e}"))?;
    let send_socket = socket
        .try_clone()
        .map_err(|e| format!("socket for the send thread: {e}"))?;
    let (to_sender, from_callback) = RingBuffer::new(RING_PACKETS);
    let (to_callback, from_receiver) = RingBuffer::new(RING_PACKETS);
    let stop = Arc::new(AtomicBool::new(false));
    let spawn = |name: &str, work: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(work)
            .map_err(|e| format!("starting thread {name}: {e}"))
    };
    let mut threads = NetThreads {
        stop: Arc::clone(&stop),
        handles: Vec::new(),
    };
    let (c, s, to) = (Arc::clone(counters), Arc::clone(&stop), net.send_to);
    threads.handles.push(spawn(
        "netapp-send",
        Box::new(move || send_loop(send_socket, to, from_callback, c, s)),
    )?);
    let (c, s) = (Arc::clone(counters), Arc::clone(&stop));
    threads.handles.push(spawn(
        "netapp-recv",
        Box::new(move || receive_loop(socket, to_callback, c, s)),
    )?);
    Ok((threads, to_sender, from_receiver))
}

/// Runs the client from launch to t0 + `--seconds`, then writes the record.
pub fn run(options: &Options, net: &NetOptions) -> Result<(), String> {
    let counters = Arc::new(Counters::default());
    let client = crate::connect(CLIENT)?;
    let period = (client.buffer_size(), client.sample_rate());
    if period.0 as usize > MAX_FRAMES {
        return Err(format!(
            "the server's period is {} frames: the network client carries at most {MAX_FRAMES}",
            period.0
        ));
    }
    let (threads, outgoing, incoming) = start_threads(net, &counters)?;
    let tid = Arc::new(AtomicI32::new(0));
    let handler = NetClient {
        input: register(&client, "in", jack::AudioIn::default())?,
        output: register(&client, "out", jack::AudioOut::default())?,
        outgoing,
        incoming,
        jitter: JitterBuffer::new(net.jitter),
        sender: threads.sender(),
        next_seq: 0,
        latency_ns: u64::from(net.jitter) * u64::from(period.0) * 1_000_000_000
            / u64::from(period.1.max(1)),
        counters: Arc::clone(&counters),
        tid: Arc::clone(&tid),
    };
    let xruns = Arc::new(AtomicU64::new(0));
    let xrun_times = Arc::new(Mutex::new(Vec::with_capacity(MAX_XRUN_TIMES)));
    let notifications =
        XrunCounter::new(Arc::clone(&xruns), true).with_times(Arc::clone(&xrun_times));
    let active = client
        .activate_async(notifications, handler)
        .map_err(|e| format!("activating {CLIENT}: {e}"))?;
    wire_to_the_driver(active.as_client());
    // The caller waits for this line before it starts anything that moves
    // the server's threads (a guard).
    eprintln!("{OPEN_LINE}");
    let t0 = crate::origin(options)?;
    let snapshots = sample_until(&counters, t0 + (options.seconds * 1e9) as u64);
    let header = record::PeerRecord {
        topology: "network".into(),
        clients: vec![CLIENT.into()],
        xruns: xruns.load(Ordering::Relaxed),
        hosting: format!(
            "network-audio client: jitter buffer of {} periods, UDP send and receive threads SCHED_OTHER",
            net.jitter
        ),
        period,
        t0_ns: t0,
        threads: vec![tid.load(Ordering::Relaxed)],
        xrun_ns: xrun_times.lock().map(|t| t.clone()).unwrap_or_default(),
        network: snapshots,
        workgroup: Vec::new(),
        rows: Vec::new(),
    };
    let written = write(&options.out, &header);
    // The record is written before the client closes (see `client`).
    let closed = active
        .deactivate()
        .map(drop)
        .map_err(|e| format!("deactivating {CLIENT}: {e}"));
    drop(threads);
    written.and(closed)
}

fn register<P: jack::PortSpec>(
    client: &jack::Client,
    name: &str,
    spec: P,
) -> Result<jack::Port<P>, String> {
    client
        .register_port(name, spec)
        .map_err(|e| format!("registering port {CLIENT}:{name}: {e}"))
}

/// The driver's capture into the client, the client into its playback, as
/// a musician wires it; a server without those ports is left unwired.
fn wire_to_the_driver(client: &jack::Client) {
    for (from, to) in [
        ("system:capture_1".to_string(), format!("{CLIENT}:in")),
        (format!("{CLIENT}:out"), "system:playback_1".to_string()),
    ] {
        if client.port_by_name(&from).is_some() && client.port_by_name(&to).is_some() {
            let _ = client.connect_ports_by_name(&from, &to);
        }
    }
}

/// The counters every [`TICK`] until `end_ns` (or SIGINT/SIGTERM), and
/// once more at the end.
fn sample_until(counters: &Counters, end_ns: u64) -> Vec<NetSnapshot> {
    let mut snapshots = Vec::new();
    loop {
        let now = monotonic_ns();
        snapshots.push(counters.snapshot(now));
        if now >= end_ns || tessera_sys::process::take_termination().is_some() {
            return snapshots;
        }
        sleep_until_monotonic_ns(end_ns.min(now + TICK.as_nanos() as u64));
    }
}

fn write(out: &std::path::Path, header: &record::PeerRecord) -> Result<(), String> {
    let file =
        std::fs::File::create(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    record::write(std::io::BufWriter::new(file), header, &[Vec::new()])
        .map_err(|e| format!("writing {}: {e}", out.display()))
}
