//! Seed 003's render service as a process's job: a control thread that
//! admits clients on a Unix socket (SO_PEERCRED against the policy), takes
//! each client's frame pool (a memfd), hands over its two channels, offers
//! SLAs from the client's probe requests and turns an accepted one into a
//! reservation with a rendering task of its own; the front-end task
//! ([`super::front`]) and the rendering tasks ([`super::tasks`]) do the
//! serving.
//!
//! Shares of the service (seed 003 §3.1): best-effort clients are served by
//! one task in the best-effort share (40 % of a core by default), probe
//! requests by one task in the probing share (10 %), and the front-end runs
//! in a small reservation of its own; what SLAs may take is the capacity
//! the host gives, less what SLAs already hold. A client's SLA lives as
//! long as its connection: a client that exits or dies has its task
//! stopped and its reservation given back, and the others are served on.
//! This module owns the clients' lifetimes and the SLA ledger; it never
//! decides how a reservation is made (the host's [`Reserve`] does) and its
//! control thread never touches a canvas a task holds.

use super::front::{Command, Entry, FrontEnd, FrontLink, MAX_CLIENTS};
use super::screen::{Geometry, Rect, Screen};
use super::tasks::{self, Lane, ProbeCost, TaskShared, TaskStop};
use super::wire::{
    ClientStatus, Control, Done, Draw, First, Hello, Reply, ServerKind, Status, Welcome,
    BEST_EFFORT,
};
use crate::control::{self, Policy, ThreadHook, WireError};
use serde::{Deserialize, Serialize};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_channel::Channel;
use tessera_policy::sla::{self, Offer, ProbeLog, RequestGate, SlaRules};
use tessera_sys::event::{Epoll, EventFd, Trigger};
use tessera_sys::ipc::{peer_credentials, receive_with_fd, PeerCredentials};
use tessera_sys::shm::SharedMemory;

/// The name of the task that serves client `client`'s SLA in its
/// reservation (its thread's comm): how a tracer outside the process finds
/// it.
pub fn sla_task_name(client: u32) -> String {
    format!("render-c{client}")
}

/// How long a client may take to send a whole control frame.
const FRAME_PATIENCE: Duration = Duration::from_secs(2);
/// Slots of a client's request channel (a power of two).
const REQUEST_SLOTS: usize = 256;
/// Slots of a client's completion channel.
const DONE_SLOTS: usize = 128;
/// Probe costs kept per kind and client.
const PROBES_KEPT: usize = 256;

/// A reservation for one task: `join` moves the calling thread into it;
/// dropping it gives the reservation back.
pub struct Reservation {
    pub join: Option<ThreadHook>,
    /// How the task runs, in words ("cell render-123-be, 4000 µs every
    /// 10000 µs (SCHED_DEADLINE)", or best-effort and why).
    pub note: String,
    pub release: Option<Box<dyn FnOnce() + Send>>,
    /// Where the misses of what runs in it go (the broker's monitor, for
    /// a cell).
    pub misses: Option<tessera_runtime::CellReport>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

/// How the host makes reservations (cells through the broker, or nothing
/// when unprivileged).
pub trait Reserve: Send + Sync {
    /// A reservation of `runtime_ns` every `period_ns` for task `task`; the
    /// error says why it cannot be had.
    fn reserve(&self, task: &str, runtime_ns: u64, period_ns: u64) -> Result<Reservation, String>;
}

/// A share of a core: `runtime_ns` every `period_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    pub runtime_ns: u64,
    pub period_ns: u64,
}

impl Share {
    pub fn cores(&self) -> f64 {
        self.runtime_ns as f64 / self.period_ns.max(1) as f64
    }
}

/// How the service runs.
#[derive(Clone)]
pub struct ServerConfig {
    pub socket: PathBuf,
    pub screen_width: usize,
    pub screen_height: usize,
    /// Window size over frame size for windows placed automatically.
    pub scale: f32,
    /// 256 copies a frame into its window; less blends it over the screen.
    pub opacity: u16,
    /// What SLAs may hold together, in cores.
    pub capacity_cores: f64,
    pub best_effort: Share,
    pub probing: Share,
    pub front_end: Share,
    pub rules: SlaRules,
    pub policy: Policy,
    pub reserve: Arc<dyn Reserve>,
}

impl ServerConfig {
    /// A 1280×720 screen, windows 1.5 × their frames, opaque; best-effort
    /// share 40 % and probing share 10 % of a core (every 10 ms), the
    /// front-end 5 % (every 2 ms).
    pub fn new(
        socket: PathBuf,
        capacity_cores: f64,
        policy: Policy,
        reserve: Arc<dyn Reserve>,
    ) -> ServerConfig {
        ServerConfig {
            socket,
            screen_width: 1280,
            screen_height: 720,
            scale: 1.5,
            opacity: 256,
            capacity_cores,
            best_effort: Share {
                runtime_ns: 4_000_000,
                period_ns: 10_000_000,
            },
            probing: Share {
                runtime_ns: 1_000_000,
                period_ns: 10_000_000,
            },
            front_end: Share {
                runtime_ns: 100_000,
                period_ns: 2_000_000,
            },
            rules: SlaRules::default(),
            policy,
            reserve,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("the render service's socket {path}: {source} (fix: remove a stale socket file, or pick another path)")]
    Listen {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the render service: {0}")]
    Kernel(#[from] tessera_sys::Error),
    #[error("the render service's {0}")]
    Task(String),
    #[error("the screen: {0} (fix: each side 1–{max})", max = super::MAX_SIDE)]
    Screen(String),
    #[error("a window scale of {0} (fix: give more than 0 and at most 16)")]
    Scale(f32),
}

/// A running render service; stopping (or dropping) it ends its threads,
/// gives its reservations back and removes its socket.
pub struct RenderServer {
    stop: Arc<AtomicBool>,
    /// The shared tasks.
    tasks_running: Vec<(TaskStop, JoinHandle<Option<()>>)>,
    /// The front-end and the control thread.
    threads: Vec<JoinHandle<Option<()>>>,
    socket: PathBuf,
    screen: Arc<Screen>,
    /// The shared tasks' and the front-end's reservations.
    reservations: Vec<Reservation>,
    /// How the shared tasks run, for the start line and the status.
    pub tasks: Vec<String>,
}

impl RenderServer {
    /// Makes the shared tasks' reservations, binds the socket and starts
    /// the threads.
    pub fn start(config: ServerConfig) -> Result<RenderServer, ServerError> {
        let sides = 1..=super::MAX_SIDE;
        if !sides.contains(&config.screen_width) || !sides.contains(&config.screen_height) {
            return Err(ServerError::Screen(format!(
                "{}×{}",
                config.screen_width, config.screen_height
            )));
        }
        check_scale(config.scale)?;
        let listener = control::listen(&config.socket).map_err(|source| ServerError::Listen {
            path: config.socket.clone(),
            source,
        })?;
        let screen = Arc::new(Screen::new(config.screen_width, config.screen_height));
        let stop = Arc::new(AtomicBool::new(false));
        let front_bell = Arc::new(EventFd::new()?);
        let shared = TaskShared {
            screen: screen.clone(),
            opacity: config.opacity,
            front_bell: front_bell.clone(),
        };
        let mut server = RenderServer {
            stop: stop.clone(),
            tasks_running: Vec::new(),
            threads: Vec::new(),
            socket: config.socket.clone(),
            screen,
            reservations: Vec::new(),
            tasks: Vec::new(),
        };
        let (probes_in, probes) = rtrb::RingBuffer::new(4096);
        let best_effort = server.start_task(
            "best-effort",
            config.best_effort,
            &config,
            shared.clone(),
            None,
        )?;
        let probing = server.start_task(
            "probing",
            config.probing,
            &config,
            shared.clone(),
            Some(probes_in),
        )?;
        let doorbell = Arc::new(EventFd::new()?);
        let (front, front_link) = FrontEnd::new(
            best_effort,
            probing,
            doorbell.clone(),
            front_bell,
            stop.clone(),
        )?;
        let reservation = server.reserve("front-end", config.front_end, &config)?;
        let join = reservation.join.clone();
        server.reservations.push(reservation);
        server.threads.push(
            control::spawn_after_setup("render-front", join, move || front.run())
                .map_err(ServerError::Task)?,
        );
        let control_thread = ControlThread {
            listener,
            connections: Vec::new(),
            front: front_link,
            probes,
            doorbell,
            shared,
            config,
            next_client: 1,
            tasks: server.tasks.clone(),
            stop,
            leaving_lanes: Vec::new(),
        };
        server.threads.push(
            control::spawn_after_setup("render-control", None, move || control_thread.run())
                .map_err(ServerError::Task)?,
        );
        Ok(server)
    }

    fn reserve(
        &mut self,
        task: &str,
        share: Share,
        config: &ServerConfig,
    ) -> Result<Reservation, ServerError> {
        let reservation = config
            .reserve
            .reserve(task, share.runtime_ns, share.period_ns)
            .map_err(|why| ServerError::Task(format!("{task} share: {why}")))?;
        self.tasks.push(format!("{task}: {}", reservation.note));
        Ok(reservation)
    }

    /// Starts a shared task in a reservation of `share`.
    fn start_task(
        &mut self,
        name: &str,
        share: Share,
        config: &ServerConfig,
        shared: TaskShared,
        probes: Option<rtrb::Producer<ProbeCost>>,
    ) -> Result<tasks::TaskLink, ServerError> {
        let reservation = self.reserve(name, share, config)?;
        let (task, link, stop) = tasks::task(shared, probes);
        let thread = control::spawn_after_setup(
            &format!("render-{name}"),
            reservation.join.clone(),
            move || task.run(),
        )
        .map_err(ServerError::Task)?;
        self.reservations.push(reservation);
        self.tasks_running.push((stop, thread));
        Ok(link)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn screen(&self) -> &Screen {
        &self.screen
    }

    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        // The shared tasks end first: while one serves its last job, the
        // front-end and the control thread still hold the job's lane, so
        // a real-time thread never drops a lane's last reference.
        for (stop, _) in &self.tasks_running {
            stop.stop();
        }
        for (_, thread) in self.tasks_running.drain(..) {
            let _ = thread.join();
        }
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        self.reservations.clear();
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for RenderServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// An SLA in force: its reservation and its task.
struct Agreement {
    offer: Offer,
    reservation: Reservation,
    stop: TaskStop,
    thread: JoinHandle<Option<()>>,
    /// Late actions already reported to the reservation's cell.
    late_reported: u64,
}

/// A client's connection.
struct Connection {
    stream: UnixStream,
    caller: PeerCredentials,
    lane: Arc<Lane>,
    probes: ProbeLog,
    offer: Option<Offer>,
    agreement: Option<Agreement>,
}

struct ControlThread {
    listener: UnixListener,
    connections: Vec<Option<Connection>>,
    front: FrontLink,
    probes: rtrb::Consumer<ProbeCost>,
    doorbell: Arc<EventFd>,
    shared: TaskShared,
    config: ServerConfig,
    next_client: u32,
    tasks: Vec<String>,
    stop: Arc<AtomicBool>,
    /// Lanes of clients that left, kept while a task still holds one in a
    /// job: the task's reference must never be the last, or the
    /// real-time thread would free the lane.
    leaving_lanes: Vec<Arc<Lane>>,
}

impl control::ControlLoop for ControlThread {
    fn listener(&self) -> &UnixListener {
        &self.listener
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn accept(&mut self, epoll: &Epoll) {
        ControlThread::accept(self, epoll);
    }

    fn serve(&mut self, index: usize) {
        self.serve_connection(index);
    }

    fn after_wake(&mut self) {
        self.take_probes();
        self.report_late();
        while let Ok(entry) = self.front.retired.pop() {
            self.leaving_lanes.push(entry.into_lane());
        }
        // Only the front-end makes new references, from an entry that is
        // gone: a count of one stays one.
        self.leaving_lanes
            .retain(|lane| Arc::strong_count(lane) > 1);
    }
}

impl ControlThread {
    fn run(mut self) {
        control::run_control(&mut self);
        for index in 0..self.connections.len() {
            self.close(index);
        }
    }

    /// Tells each SLA's cell of its client's late actions (the broker's
    /// monitor counts them as the cell's misses).
    fn report_late(&mut self) {
        for connection in self.connections.iter_mut().flatten() {
            let late = connection.lane.counters.late.load(Ordering::Relaxed);
            let Some(agreement) = &mut connection.agreement else {
                continue;
            };
            let new = late.saturating_sub(agreement.late_reported);
            if let Some(report) = agreement.reservation.misses.as_mut().filter(|_| new > 0) {
                report.count(new, 0);
                agreement.late_reported = late;
            }
        }
    }

    /// Moves the probing task's measurements into the clients' logs.
    fn take_probes(&mut self) {
        while let Ok(cost) = self.probes.pop() {
            if let Some(c) = self
                .connections
                .iter_mut()
                .flatten()
                .find(|c| c.lane.client == cost.client)
            {
                c.probes.record(cost.kind, cost.cpu_ns);
            }
        }
    }

    fn accept(&mut self, epoll: &Epoll) {
        while let Ok((stream, _)) = self.listener.accept() {
            if stream.set_nonblocking(false).is_err()
                || stream.set_read_timeout(Some(FRAME_PATIENCE)).is_err()
            {
                continue;
            }
            let caller = match peer_credentials(&stream) {
                Ok(caller) => caller,
                Err(_) => continue,
            };
            if let Err(reason) = (self.config.policy)(&caller) {
                let _ = control::send(&stream, &Welcome::Refused { reason });
                continue;
            }
            match control::receive::<First>(&stream) {
                Ok(First::Hello(hello)) => self.welcome(epoll, stream, caller, hello),
                Ok(First::Control(request)) => {
                    let _ = self.answer(&stream, request, None);
                }
                Err(e) => {
                    let reason = format!(
                        "{e}; fix: speak the service's protocol, e.g. through \
                         tessera_services::render::client"
                    );
                    let _ = control::send(&stream, &Welcome::Refused { reason });
                }
            }
        }
    }

    /// A client's hello: refused in a frame, or welcomed, its pool taken,
    /// its channels handed over and its lane given to the front-end.
    fn welcome(
        &mut self,
        epoll: &Epoll,
        stream: UnixStream,
        caller: PeerCredentials,
        hello: Hello,
    ) {
        let clients = self.connections.iter().flatten().count();
        let refusal = match hello.check() {
            Err(why) => Some(why),
            Ok(()) if clients >= MAX_CLIENTS => Some(format!(
                "{MAX_CLIENTS} clients already (fix: wait for one to leave)"
            )),
            Ok(()) => None,
        };
        if let Some(reason) = refusal {
            let _ = control::send(&stream, &Welcome::Refused { reason });
            return;
        }
        let client = self.next_client;
        self.next_client += 1;
        let window = hello.window.unwrap_or_else(|| {
            let side = |n: usize| ((n as f32 * self.config.scale) as usize).max(1);
            Rect::tile(
                clients,
                side(hello.width),
                side(hello.height),
                (self.config.screen_width, self.config.screen_height),
            )
        });
        let welcome = Welcome::Welcome {
            server: ServerKind::Render,
            client,
            window,
        };
        if control::send(&stream, &welcome).is_err() {
            return;
        }
        match self.open_lane(&stream, client, hello, window) {
            Ok((lane, requests)) => {
                let index = control::free_slot(&mut self.connections);
                if epoll
                    .add(stream.as_fd(), index as u64, Trigger::Level)
                    .is_err()
                {
                    return;
                }
                self.front.send(Command::Add(Box::new(Entry::best_effort(
                    lane.clone(),
                    requests,
                ))));
                self.connections[index] = Some(Connection {
                    stream,
                    caller,
                    lane,
                    probes: ProbeLog::new(PROBES_KEPT),
                    offer: None,
                    agreement: None,
                });
            }
            Err(why) => eprintln!("tessera serve render: client {client} dropped: {why}"),
        }
    }

    /// The client's pool and channels; a failure ends the connection (the
    /// client sees it closed) and is said on stderr.
    fn open_lane(
        &self,
        stream: &UnixStream,
        client: u32,
        hello: Hello,
        window: Rect,
    ) -> Result<(Arc<Lane>, tessera_channel::Consumer), String> {
        let mut byte = [0u8; 1];
        let (_, fd) = receive_with_fd(stream, &mut byte).map_err(|e| e.to_string())?;
        let fd = fd.ok_or("no frame pool came with the hello")?;
        let pool = SharedMemory::from_fd(fd)
            .and_then(|memory| memory.map())
            .map_err(|e| e.to_string())?;
        let requests = Channel::with_doorbell(
            &format!("render.{client}.requests"),
            Draw::SIZE,
            REQUEST_SLOTS,
            &self.doorbell,
        )
        .and_then(|c| c.hand_over_producer(stream))
        .map_err(|e| e.to_string())?;
        let done = Channel::create(&format!("render.{client}.done"), Done::SIZE, DONE_SLOTS)
            .and_then(|c| c.hand_over_consumer(stream))
            .map_err(|e| e.to_string())?;
        let geometry = Geometry::new(hello.width, hello.height, window, &self.shared.screen);
        let lane = Lane::new(client, hello, geometry, pool, done)?;
        Ok((Arc::new(lane), requests))
    }

    /// One request on connection `index`, or its end.
    fn serve_connection(&mut self, index: usize) {
        let Some(connection) = self.connections.get(index).and_then(Option::as_ref) else {
            return;
        };
        let request = control::receive::<Control>(&connection.stream);
        let stream = connection.stream.try_clone();
        match (request, stream) {
            (Ok(request), Ok(stream)) => {
                if self.answer(&stream, request, Some(index)).is_err() {
                    self.close(index);
                }
            }
            (Err(WireError::Malformed(e)), Ok(stream)) => {
                let reason =
                    format!("a malformed request ({e}); fix: speak the service's protocol");
                let _ = control::send(&stream, &Reply::Refused { reason });
                self.close(index);
            }
            _ => self.close(index),
        }
    }

    /// Answers a control request (of client `index`, if it is one).
    fn answer(
        &mut self,
        stream: &UnixStream,
        request: Control,
        index: Option<usize>,
    ) -> Result<(), WireError> {
        let reply = match (request, index) {
            (Control::Status, _) => Reply::Status(self.status()),
            (Control::Snapshot, _) => return send_snapshot(stream, &self.shared.screen),
            (Control::Terms(terms), Some(index)) => self.offer(index, &terms),
            (Control::Accept, Some(index)) => self.agree(index),
            (_, None) => Reply::Refused {
                reason: "terms are for a client: say hello first (fix: use \
                         tessera_services::render::client::Display)"
                    .into(),
            },
        };
        control::send(stream, &reply)
    }

    fn committed(&self) -> f64 {
        self.connections
            .iter()
            .flatten()
            .filter_map(|c| c.agreement.as_ref())
            .map(|a| a.offer.utilisation())
            .fold(0.0, |sum, u| sum + u)
    }

    /// Terms asked: an offer from the client's probes and what is left.
    fn offer(&mut self, index: usize, terms: &sla::Terms) -> Reply {
        self.take_probes();
        let capacity = sla::Capacity {
            cores: self.config.capacity_cores,
            committed: self.committed(),
        };
        let connection = self.connections[index].as_mut().expect("a connection");
        if connection.agreement.is_some() {
            return Reply::Refused {
                reason: "this client already has an SLA (fix: reconnect to agree new terms)".into(),
            };
        }
        match sla::offer(terms, &connection.probes, capacity, &self.config.rules) {
            Ok(offer) => {
                connection.offer = Some(offer.clone());
                Reply::Offer(offer)
            }
            Err(refusal) => Reply::Refused {
                reason: refusal.to_string(),
            },
        }
    }

    /// The last offer accepted: its reservation made, its task started, the
    /// front-end told to route the client there through the SLA's gate.
    fn agree(&mut self, index: usize) -> Reply {
        let committed = self.committed();
        let connection = self.connections[index].as_mut().expect("a connection");
        let Some(offer) = connection.offer.take() else {
            return Reply::Refused {
                reason: "no offer to accept (fix: ask for terms first)".into(),
            };
        };
        if committed + offer.utilisation() > self.config.capacity_cores + 1e-9 {
            return Reply::Refused {
                reason: "the offer is no longer free: another client took the capacity (fix: \
                         ask for terms again)"
                    .into(),
            };
        }
        let client = connection.lane.client;
        let name = format!("client-{client}");
        let reservation =
            match self
                .config
                .reserve
                .reserve(&name, offer.runtime_ns, offer.period_ns)
            {
                Ok(reservation) => reservation,
                Err(reason) => return Reply::Refused { reason },
            };
        let (task, link, stop) = tasks::task(self.shared.clone(), None);
        let thread = match control::spawn_after_setup(
            &sla_task_name(client),
            reservation.join.clone(),
            move || task.run(),
        ) {
            Ok(thread) => thread,
            Err(reason) => return Reply::Refused { reason },
        };
        let gate = RequestGate::new(offer.max_per_second, offer.burst, offer.max_outstanding);
        self.front.send(Command::Agree { client, link, gate });
        let note = reservation.note.clone();
        let late_reported = connection.lane.counters.late.load(Ordering::Relaxed);
        connection.agreement = Some(Agreement {
            offer,
            reservation,
            stop,
            thread,
            late_reported,
        });
        Reply::Agreed { reservation: note }
    }

    /// The client left (or broke the protocol): the front-end lets it go,
    /// its task stops and its reservation is given back.
    fn close(&mut self, index: usize) {
        let Some(connection) = self.connections[index].take() else {
            return;
        };
        self.front.send(Command::Remove(connection.lane.client));
        if let Some(agreement) = connection.agreement {
            agreement.stop.stop();
            let _ = agreement.thread.join();
            drop(agreement.reservation);
        }
    }

    fn status(&self) -> Status {
        let clients = self
            .connections
            .iter()
            .flatten()
            .map(|c| {
                let counters = &c.lane.counters;
                ClientStatus {
                    client: c.lane.client,
                    name: c.lane.hello.name.clone(),
                    pid: c.caller.pid,
                    share: c.agreement.as_ref().map_or(BEST_EFFORT.into(), |a| {
                        format!(
                            "SLA: {} µs every {} µs ({})",
                            a.offer.runtime_ns / 1000,
                            a.offer.period_ns / 1000,
                            a.reservation.note
                        )
                    }),
                    window: c.lane.geometry.rect,
                    actions: counters.actions.load(Ordering::Relaxed),
                    probes: counters.probes.load(Ordering::Relaxed),
                    late: counters.late.load(Ordering::Relaxed),
                    throttled: counters.throttled.load(Ordering::Relaxed),
                    malformed: counters.malformed.load(Ordering::Relaxed),
                }
            })
            .collect();
        Status {
            server: ServerKind::Render,
            pid: std::process::id(),
            screen: (self.config.screen_width, self.config.screen_height),
            capacity_cores: self.config.capacity_cores,
            committed_cores: self.committed(),
            tasks: self.tasks.clone(),
            clients,
        }
    }
}

/// Answers a snapshot request: a [`Reply::Snapshot`], then the PNG.
pub(super) fn send_snapshot(mut stream: &UnixStream, screen: &Screen) -> Result<(), WireError> {
    use std::io::Write;
    let png = screen.png()?;
    control::send(stream, &Reply::Snapshot { bytes: png.len() })?;
    stream.write_all(&png)?;
    Ok(())
}

/// Windows placed automatically are their frames × `scale`.
pub(super) fn check_scale(scale: f32) -> Result<(), ServerError> {
    match scale > 0.0 && scale <= 16.0 {
        true => Ok(()),
        false => Err(ServerError::Scale(scale)),
    }
}
