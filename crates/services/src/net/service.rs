//! The network service as a process's job (seed 000 §2, Fig. 2): a control
//! thread that admits clients on a Unix socket (SO_PEERCRED against the
//! service's policy), grants or refuses their flows against the service's
//! measured capacity (mClock admission), owns each flow's UDP socket, hands
//! the flow's two channels over, and answers status requests; and the
//! serving threads ([`super::serve`]): one real-time thread for real-time
//! flows, inside the service's reservation, and one bulk thread.
//!
//! A client's flow lives as long as its connection: a client that exits
//! or dies (its socket hangs up) has its flow retired and its reservation
//! released. This module owns the flows' lifetimes and the admission
//! ledger; it never decides where its threads run (the setup hooks do) and
//! its control thread never touches a flow a serving thread holds.

use super::counters::FlowCounters;
use super::discovery::{Discovery, DiscoveryConfig};
use super::pacing::SharedPacer;
use super::serve::{Command, ServedFlow, Server, ThreadLink, MAX_FLOWS};
use super::wire::{
    self, AnnounceReply, FlowRequest, FlowStatus, Grant, Multicast, Request, Status, StatusReply,
    StreamsReply, WireError, HEADER,
};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_channel::{Channel, ChannelError};
use tessera_policy::mclock::{self, Capacity, Discipline, FlowClass, FlowSpec};
use tessera_sys::event::{Epoll, EventFd, Trigger};
use tessera_sys::ipc::{peer_credentials, PeerCredentials};
use tessera_sys::marking;

pub use crate::control::{Policy, ThreadHook};

/// Each flow socket's receive buffer: a stalled service queues instead of
/// losing (a flood's socket overflows alone).
const RECEIVE_BUFFER: usize = 4 << 20;
/// The largest UDP payload over IPv4.
const MAX_DATAGRAM: usize = 65_507;
/// What a service started without discovery answers to its requests.
const NO_DISCOVERY: &str = "this network service runs without SAP discovery; fix: start it with \
                            `tessera serve net --discovery`";
/// How long a client may take to send a whole control frame.
const FRAME_PATIENCE: Duration = Duration::from_secs(2);

/// How the service runs.
#[derive(Clone)]
pub struct NetConfig {
    /// Where clients connect.
    pub socket: PathBuf,
    pub discipline: Discipline,
    /// The link's rate each way, bits/s.
    pub link_bps: u64,
    /// The CPU the serving threads are guaranteed, in cores (the real-time
    /// thread's reservation; 1.0 best-effort).
    pub cpu_share: f64,
    pub real_time_setup: Option<ThreadHook>,
    /// How the real-time thread runs, for status.
    pub real_time_note: String,
    pub policy: Policy,
    /// Announce clients' streams and list others' (SAP); `None`: no
    /// discovery.
    pub discovery: Option<DiscoveryConfig>,
}

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("the service's socket {path}: {source} (fix: remove a stale socket file, or pick another path)")]
    Listen {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the network service: {0}")]
    Kernel(#[from] tessera_sys::Error),
    #[error("a serving thread: {0}")]
    Thread(String),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error(transparent)]
    Channel(#[from] ChannelError),
    #[error("the network service refused the flow: {0}")]
    Refused(String),
    #[error("the broker: {0}")]
    Broker(#[from] tessera_broker::BrokerError),
}

/// A running network service; stopping (or dropping) it ends its threads
/// and removes its socket.
pub struct NetService {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Option<()>>>,
    socket: PathBuf,
    capacity: Capacity,
}

impl NetService {
    /// Measures the CPU's capacity, binds the socket and starts the
    /// threads.
    pub fn start(config: NetConfig) -> Result<NetService, NetError> {
        let capacity = Capacity {
            link_bps: config.link_bps,
            cpu_bps: (measure_cpu_bps()? as f64 * config.cpu_share) as u64,
        };
        let listener =
            crate::control::listen(&config.socket).map_err(|source| NetError::Listen {
                path: config.socket.clone(),
                source,
            })?;
        let stop = Arc::new(AtomicBool::new(false));
        let usable = capacity.usable_bps();
        let receive = Arc::new(SharedPacer::new(usable));
        let send = Arc::new(SharedPacer::new(usable));
        let classes: &[FlowClass] = match config.discipline {
            Discipline::Fifo => &[FlowClass::RealTime],
            Discipline::MClock => &[FlowClass::RealTime, FlowClass::Bulk],
        };
        let mut threads = Vec::new();
        let mut links = Vec::new();
        for &class in classes {
            let (server, link) = Server::new(
                class,
                config.discipline,
                receive.clone(),
                send.clone(),
                stop.clone(),
            )?;
            let setup = match class {
                FlowClass::RealTime => config.real_time_setup.clone(),
                FlowClass::Bulk => None,
            };
            threads.push(spawn_server(server, class, setup)?);
            links.push(link);
        }
        // A host without a multicast route still gets its flows served.
        let discovery = config.discovery.as_ref().and_then(|discovery| {
            Discovery::start(discovery.clone())
                .map_err(|e| {
                    eprintln!(
                        "tessera serve net: SAP discovery is off: {e} (fix: give the host a \
                         route for 224.0.0.0/4, or name an interface with --sap-interface)"
                    )
                })
                .ok()
        });
        let control = Control {
            listener,
            links,
            discovery,
            connections: Vec::new(),
            config: config.clone(),
            capacity,
            next_id: 1,
            stop: stop.clone(),
        };
        threads.push(
            crate::control::spawn_after_setup("tessera-net-ctl", None, move || {
                crate::control::run_control(&mut { control })
            })
            .map_err(NetError::Thread)?,
        );
        Ok(NetService {
            stop,
            threads,
            socket: config.socket,
            capacity,
        })
    }

    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for NetService {
    fn drop(&mut self) {
        self.halt();
    }
}

fn spawn_server(
    server: Server,
    class: FlowClass,
    setup: Option<ThreadHook>,
) -> Result<JoinHandle<Option<()>>, NetError> {
    let name = match class {
        FlowClass::RealTime => "tessera-net-rt",
        FlowClass::Bulk => "tessera-net-bulk",
    };
    crate::control::spawn_after_setup(name, setup, move || server.run()).map_err(NetError::Thread)
}

/// What a single core carries through the service, bits/s: datagrams of
/// 1472 bytes received and pushed into a channel on this thread, timed on
/// its CPU clock.
fn measure_cpu_bps() -> Result<u64, NetError> {
    const SIZE: usize = 1472;
    const COUNT: usize = 2000;
    let receiver = UdpSocket::bind("127.0.0.1:0").map_err(|e| NetError::Thread(e.to_string()))?;
    let sender = UdpSocket::bind("127.0.0.1:0").map_err(|e| NetError::Thread(e.to_string()))?;
    tessera_sys::net::set_receive_buffer(&receiver, 8 << 20)?;
    tessera_sys::net::enable_receive_timestamps(&receiver)
        .map_err(|e| NetError::Thread(e.to_string()))?;
    let (here, there) = UnixStream::pair().map_err(|e| NetError::Thread(e.to_string()))?;
    let mut to_client =
        Channel::create("net.calibration", HEADER + SIZE, 64)?.hand_over_consumer(&here)?;
    let mut client = tessera_channel::Consumer::open_from(&there)?;
    let mut slot = vec![0u8; HEADER + SIZE];
    let mut out = vec![0u8; HEADER + SIZE];
    let to = receiver
        .local_addr()
        .map_err(|e| NetError::Thread(e.to_string()))?;
    let mut spent = 0;
    for _ in 0..COUNT / 32 {
        for _ in 0..32 {
            let _ = sender.send_to(&slot[HEADER..], to);
        }
        let start = tessera_sys::clock::thread_cpu_ns();
        for _ in 0..32 {
            if tessera_sys::net::receive_stamped(&receiver, &mut slot[HEADER..]).is_ok() {
                let _ = to_client.try_push(&slot);
            }
        }
        spent += tessera_sys::clock::thread_cpu_ns() - start;
        while client.try_pop(&mut out).is_ok() {}
    }
    let per_datagram = (spent / (COUNT as u64 / 32 * 32)).max(1);
    Ok(SIZE as u64 * 8 * 1_000_000_000 / per_datagram)
}

/// A client's connection, and the flow it holds.
struct Connection {
    stream: UnixStream,
    caller: PeerCredentials,
    flow: Option<Held>,
    /// A description this client has announced (retracted when it leaves).
    announcement: Option<u64>,
}

/// A flow admission let in: its spec, its serving thread, its socket.
struct Admitted {
    spec: FlowSpec,
    thread: usize,
    socket: UdpSocket,
}

/// A flow as the control thread keeps track of it.
struct Held {
    id: u32,
    thread: usize,
    spec: FlowSpec,
    request: FlowRequest,
    local: std::net::SocketAddr,
    counters: Arc<FlowCounters>,
}

struct Control {
    listener: UnixListener,
    links: Vec<ThreadLink>,
    discovery: Option<Discovery>,
    connections: Vec<Option<Connection>>,
    config: NetConfig,
    capacity: Capacity,
    next_id: u32,
    stop: Arc<AtomicBool>,
}

impl crate::control::ControlLoop for Control {
    fn listener(&self) -> &UnixListener {
        &self.listener
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn accept(&mut self, epoll: &Epoll) {
        Control::accept(self, epoll);
    }

    fn serve(&mut self, index: usize) {
        self.serve_connection(index);
    }

    fn after_wake(&mut self) {
        self.drop_retired();
    }
}

impl Control {
    fn accept(&mut self, epoll: &Epoll) {
        while let Ok((stream, _)) = self.listener.accept() {
            let Some(caller) = self.admit_caller(&stream) else {
                continue;
            };
            if stream.set_read_timeout(Some(FRAME_PATIENCE)).is_err() {
                continue;
            }
            let index = crate::control::free_slot(&mut self.connections);
            if epoll
                .add(stream.as_fd(), index as u64, Trigger::Level)
                .is_ok()
            {
                self.connections[index] = Some(Connection {
                    stream,
                    caller,
                    flow: None,
                    announcement: None,
                });
            }
        }
    }

    /// Who connected (SO_PEERCRED), if the policy lets them in; a refused
    /// caller is told why in a refusal frame, whatever it asked.
    fn admit_caller(&self, stream: &UnixStream) -> Option<PeerCredentials> {
        let caller = peer_credentials(stream).ok()?;
        match (self.config.policy)(&caller) {
            Ok(()) => Some(caller),
            Err(reason) => {
                let _ = wire::send(stream, &Grant::Refused { reason });
                None
            }
        }
    }

    /// One request from connection `index`, or its end.
    fn serve_connection(&mut self, index: usize) {
        let Some(connection) = self.connections.get(index).and_then(Option::as_ref) else {
            return;
        };
        match wire::receive::<Request>(&connection.stream) {
            Ok(Request::Open(request)) => self.open(index, request),
            Ok(Request::Status) => {
                let reply = StatusReply::Status(self.status());
                self.reply_or_close(index, &reply);
            }
            Ok(Request::Announce { sdp }) => {
                let reply = self.announce(index, &sdp);
                self.reply_or_close(index, &reply);
            }
            Ok(Request::Streams) => {
                let reply = match &self.discovery {
                    Some(discovery) => {
                        let (sessions, unreadable) = discovery.sessions();
                        StreamsReply::Streams {
                            sessions,
                            unreadable,
                        }
                    }
                    None => StreamsReply::Refused {
                        reason: NO_DISCOVERY.into(),
                    },
                };
                self.reply_or_close(index, &reply);
            }
            Err(WireError::Malformed(e)) => {
                let reason = format!(
                    "a malformed request ({e}); fix: speak the service's protocol, e.g. \
                     through tessera_services::net::client"
                );
                let _ = wire::send(&connection.stream, &Grant::Refused { reason });
                self.close(index);
            }
            Err(_) => self.close(index),
        }
    }

    fn reply_or_close<T: serde::Serialize>(&mut self, index: usize, reply: &T) {
        let Some(connection) = self.connections[index].as_ref() else {
            return;
        };
        if wire::send(&connection.stream, reply).is_err() {
            self.close(index);
        }
    }

    /// The client left (or broke the protocol): its flow is retired and its
    /// reservation released.
    fn close(&mut self, index: usize) {
        let Some(connection) = self.connections[index].take() else {
            return;
        };
        if let (Some(id), Some(discovery)) = (connection.announcement, &self.discovery) {
            discovery.retract(id);
        }
        if let Some(held) = connection.flow {
            let mut command = Command::Remove(held.id);
            // The queue is short only while the thread catches up.
            while let Err(back) = self.links[held.thread].send(command) {
                command = back;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Announces a client's description for as long as its connection
    /// lasts (one per connection).
    fn announce(&mut self, index: usize, sdp: &str) -> AnnounceReply {
        let Some(discovery) = &self.discovery else {
            return AnnounceReply::Refused {
                reason: NO_DISCOVERY.into(),
            };
        };
        let connection = self.connections[index].as_mut().expect("a connection");
        if connection.announcement.is_some() {
            return AnnounceReply::Refused {
                reason: "this connection announces a stream already; fix: open one connection \
                         per announcement"
                    .into(),
            };
        }
        match discovery.announce(sdp) {
            Ok(id) => {
                connection.announcement = Some(id);
                AnnounceReply::Announced { id }
            }
            Err(reason) => AnnounceReply::Refused { reason },
        }
    }

    fn drop_retired(&mut self) {
        for link in &mut self.links {
            while let Ok(flow) = link.retired.pop() {
                drop(flow);
            }
        }
    }

    /// A flow asked for: refused with the reason in a frame, or granted and
    /// handed over. A failure after the grant (the client vanished, no
    /// memory for the channels) ends the connection: the client's open then
    /// fails on the closed socket, and the service says why on its stderr.
    fn open(&mut self, index: usize, request: FlowRequest) {
        let admitted = match self.admit_flow(index, &request) {
            Ok(admitted) => admitted,
            Err(reason) => return self.reply_or_close(index, &Grant::Refused { reason }),
        };
        if let Err(why) = self.hand_over(index, request, admitted) {
            eprintln!("tessera serve net: a granted flow was not handed over: {why}");
            self.close(index);
        }
    }

    /// Checks `request` against the connection, the spec's rules and the
    /// capacity, and binds its socket; the reason in words otherwise.
    fn admit_flow(&self, index: usize, request: &FlowRequest) -> Result<Admitted, String> {
        let connection = self.connections[index].as_ref().expect("a connection");
        if connection.flow.is_some() {
            return Err(
                "this connection already holds a flow; fix: open one connection per flow".into(),
            );
        }
        let spec = flow_spec(request)?;
        check_shape(request)?;
        let admitted: Vec<FlowSpec> = self.held().map(|h| h.spec).collect();
        mclock::admit(&admitted, &spec, &self.capacity).map_err(|refusal| refusal.to_string())?;
        let thread = self.thread_for(spec.class);
        if self.held().filter(|h| h.thread == thread).count() >= MAX_FLOWS {
            return Err(format!(
                "the service holds {MAX_FLOWS} flows of this class already; fix: close one"
            ));
        }
        Ok(Admitted {
            spec,
            thread,
            socket: flow_socket(request)?,
        })
    }

    /// Grants an admitted flow: the grant, its two channels, and the flow
    /// given to its serving thread.
    fn hand_over(
        &mut self,
        index: usize,
        request: FlowRequest,
        admitted: Admitted,
    ) -> Result<(), String> {
        let Admitted {
            spec,
            thread,
            socket,
        } = admitted;
        let local = socket.local_addr().map_err(|e| e.to_string())?;
        let id = self.next_id;
        self.next_id += 1;
        let stream = &self.connections[index]
            .as_ref()
            .expect("a connection")
            .stream;
        wire::send(stream, &Grant::Granted { id, local }).map_err(|e| e.to_string())?;
        let slot = HEADER + request.max_datagram;
        // The client may wait for this channel beside other descriptors.
        let client_doorbell = EventFd::new().map_err(|e| e.to_string())?;
        let to_client = Channel::with_doorbell(
            &format!("net.{id}.in"),
            slot,
            request.slots,
            &client_doorbell,
        )
        .and_then(|c| c.hand_over_consumer(stream))
        .map_err(|e| e.to_string())?;
        let doorbell = &self.links[thread].doorbell;
        let from_client =
            Channel::with_doorbell(&format!("net.{id}.out"), slot, request.slots, doorbell)
                .and_then(|c| c.hand_over_producer(stream))
                .map_err(|e| e.to_string())?;
        let counters = FlowCounters::with_deadline(request.response_deadline_ns);
        let counters = Arc::new(match request.rtp_clock_rate {
            Some(_) => counters.with_rtp(),
            None => counters,
        });
        let flow = ServedFlow::new(
            id,
            spec,
            socket,
            to_client,
            from_client,
            request.peer,
            counters.clone(),
        );
        let flow = match request.rtp_clock_rate {
            Some(rate) => flow.with_rtp(rate),
            None => flow,
        };
        self.links[thread]
            .send(Command::Add(Box::new(flow)))
            .map_err(|_| "the serving thread's queue is full".to_string())?;
        self.connections[index].as_mut().expect("a connection").flow = Some(Held {
            id,
            thread,
            spec,
            request,
            local,
            counters,
        });
        Ok(())
    }

    fn thread_for(&self, class: FlowClass) -> usize {
        match (self.config.discipline, class) {
            (Discipline::MClock, FlowClass::Bulk) => 1,
            _ => 0,
        }
    }

    fn held(&self) -> impl Iterator<Item = &Held> {
        self.connections
            .iter()
            .flatten()
            .filter_map(|c| c.flow.as_ref())
    }

    fn status(&self) -> Status {
        let flows = self
            .connections
            .iter()
            .flatten()
            .filter_map(|c| c.flow.as_ref().map(|held| flow_status(held, &c.caller)))
            .collect();
        let admitted: Vec<FlowSpec> = self.held().map(|h| h.spec).collect();
        Status {
            pid: std::process::id(),
            discipline: self.config.discipline.name().into(),
            link_bps: self.capacity.link_bps,
            cpu_bps: self.capacity.cpu_bps,
            usable_bps: self.capacity.usable_bps(),
            committed_bps: admitted.iter().map(FlowSpec::committed_bps).sum(),
            real_time: self.config.real_time_note.clone(),
            flows,
        }
    }
}

fn flow_status(held: &Held, caller: &PeerCredentials) -> FlowStatus {
    FlowStatus {
        id: held.id,
        name: held.request.name.clone(),
        client_pid: caller.pid,
        class: held.request.class,
        reservation_bps: held.request.reservation_bps,
        weight: held.request.weight,
        limit_bps: held.request.limit_bps,
        local: held.local,
        received: held.counters.received.stats(),
        sent: held.counters.sent.stats(),
        response: held.counters.response.delays(),
        response_buckets: held.counters.response.buckets(),
        late_responses: held.counters.late_responses(),
        rtp: held.counters.rtp.as_ref().map(|counts| counts.stats()),
    }
}

fn flow_spec(request: &FlowRequest) -> Result<FlowSpec, String> {
    let spec = FlowSpec {
        class: request.class,
        reservation_bps: request.reservation_bps,
        weight: request.weight,
        limit_bps: request.limit_bps,
    };
    spec.validate().map_err(|e| e.to_string())?;
    Ok(spec)
}

fn check_shape(request: &FlowRequest) -> Result<(), String> {
    if request.max_datagram == 0 || request.max_datagram > MAX_DATAGRAM {
        return Err(format!(
            "a largest datagram of {} bytes; fix: ask for 1 to {MAX_DATAGRAM}",
            request.max_datagram
        ));
    }
    if !request.slots.is_power_of_two() || request.slots > 1 << 16 {
        return Err(format!(
            "{} slots; fix: ask for a power of two up to 65536",
            request.slots
        ));
    }
    Ok(())
}

/// Binds where the client asked: a group is bound shared (other receivers
/// on this host may hear it too) and joined on the flow's interface.
fn bind_flow(bind: SocketAddr, multicast: &Multicast) -> Result<UdpSocket, String> {
    let refused = |e: std::io::Error| {
        format!(
            "cannot bind {bind}: {e}; fix: pick an address of this host that no other flow or \
             program holds (port 0 lets the kernel choose)"
        )
    };
    let SocketAddr::V4(at) = bind else {
        return UdpSocket::bind(bind).map_err(refused);
    };
    if !at.ip().is_multicast() {
        return UdpSocket::bind(at).map_err(refused);
    }
    let socket = tessera_sys::net::bind_udp_shared(at).map_err(refused)?;
    socket
        .join_multicast_v4(at.ip(), &multicast.interface)
        .map_err(|e| {
            format!(
                "cannot join group {} on {}: {e}; fix: name the address of an interface of \
                 this host that is up (or give the host a route for 224.0.0.0/4)",
                at.ip(),
                multicast.interface
            )
        })?;
    Ok(socket)
}

/// The flow's socket: bound where the client asked, non-blocking, stamping
/// arrivals, marked by class.
fn flow_socket(request: &FlowRequest) -> Result<UdpSocket, String> {
    let multicast = request.multicast.unwrap_or_default();
    let socket = bind_flow(request.bind, &multicast)?;
    let failed = |e: &dyn std::fmt::Display| format!("the flow's socket: {e}");
    socket
        .set_multicast_ttl_v4(u32::from(multicast.ttl))
        .and_then(|()| socket.set_multicast_loop_v4(multicast.loopback))
        .map_err(|e| failed(&e))?;
    if !multicast.interface.is_unspecified() {
        tessera_sys::net::set_multicast_interface(&socket, multicast.interface).map_err(|e| {
            format!(
                "cannot send multicast from {}: {e}; fix: name an address of one of this \
                 host's interfaces",
                multicast.interface
            )
        })?;
    }
    socket.set_nonblocking(true).map_err(|e| failed(&e))?;
    tessera_sys::net::set_receive_buffer(&socket, RECEIVE_BUFFER).map_err(|e| failed(&e))?;
    tessera_sys::net::enable_receive_timestamps(&socket).map_err(|e| failed(&e))?;
    tessera_sys::net::enable_drop_counts(&socket).map_err(|e| failed(&e))?;
    let (priority, tos) = match request.class {
        FlowClass::RealTime => (marking::PRIORITY_REAL_TIME, marking::TOS_EXPEDITED),
        FlowClass::Bulk => (0, 0),
    };
    marking::mark(&socket, priority, tos).map_err(|e| failed(&e))?;
    Ok(socket)
}
