//! Seed 000 §4.2 around a music run: the network service as a process of
//! its own (`tessera serve net`, its real-time thread in the `service`
//! role's cell), the music application's flow through it with the
//! configuration's reservation, and the abusive streamer (`tessera net
//! stream`, a process in the `streamer` role's cell) with its peer on the
//! far side of the LAN, next to the SLABS.
//!
//! It owns the two processes and the peer, stops them by their PIDs
//! however the run ends, and reads the service's counters of the music
//! flow before the application lets go of it. Starting the service and
//! waiting until it listens ([`spawn_service`], [`await_listening`]) serve
//! the netphone too, which starts it inside the speaker's host. It must
//! never judge a result, and never leave a process or a socket behind.

use crate::harness::servers::{program_beside_us, unique, OwnedChild};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_measure::{Counter, LatencyHistogram, Metric};
use tessera_music::app::{ServiceFlow, DEADLINE};
use tessera_music::lan::{Lan, LanError};
use tessera_scenario::{Sched, ServicePlan};
use tessera_services::net::{client, Discipline, FlowStatus, Status};
use tessera_workloads::streamer::{self, PeerReport, StreamReport};

/// How long the service and the streamer get to exit after SIGTERM.
const GRACE: Duration = Duration::from_secs(5);
/// How long the service may take to listen.
const PATIENCE: Duration = Duration::from_secs(10);
/// The streamer's peer's port on the SLABS's side.
const PEER_PORT: u16 = 47_300;
/// The service's real-time reservation when its role has no cell.
const BUDGET: &str = "300us";
const PERIOD: &str = "725.6us";
/// Metric of Δt as the service measures it (t2: written to the socket).
pub const SERVICE_RESPONSE_METRIC: &str = "Δt at the network service (t2 − t1)";

/// The service, the streamer and its peer, running.
pub(crate) struct ServiceRun {
    service: OwnedChild,
    socket: PathBuf,
    streamer: Option<OwnedChild>,
    peer: Option<(Arc<AtomicBool>, PeerThread)>,
    plan: ServicePlan,
    log_dir: PathBuf,
}

/// The peer's thread, in the SLABS's namespace.
type PeerThread = JoinHandle<Result<Result<PeerReport, String>, LanError>>;

/// What they measured.
pub(crate) struct ServiceData {
    pub status: Result<Status, String>,
    pub streamer: Option<Result<StreamReport, String>>,
    pub peer: Option<Result<PeerReport, String>>,
    pub plan: ServicePlan,
}

/// The broker's name of the cell a role's scheduling names, for a process
/// that joins it itself.
fn cell_of(sched: &Sched) -> Option<String> {
    sched.cell.as_deref().map(crate::cells::cell_name)
}

impl ServiceRun {
    /// Starts the service (its real-time thread in `service_sched`'s cell)
    /// and, when the plan says so, the streamer's peer beside the SLABS and
    /// the streamer (in `streamer_sched`'s cell), for `seconds`.
    pub(crate) fn start(
        plan: &ServicePlan,
        lan: Option<&Lan>,
        service_sched: &Sched,
        streamer_sched: &Sched,
        seconds: f64,
    ) -> Result<ServiceRun, String> {
        let log_dir = std::env::temp_dir().join(unique("tessera-net-service"));
        std::fs::create_dir_all(&log_dir).map_err(|e| format!("{}: {e}", log_dir.display()))?;
        let socket = log_dir.join("net.sock");
        let program = Command::new(program_beside_us("tessera"));
        let service = spawn_service(program, plan, &socket, &log_dir, service_sched)?;
        let mut run = ServiceRun {
            service,
            socket,
            streamer: None,
            peer: None,
            plan: plan.clone(),
            log_dir,
        };
        await_listening(&mut run.service, &run.socket, &run.log_dir)?;
        if plan.streamer {
            let peer_addr = run.start_peer(lan)?;
            run.streamer = Some(run.spawn_streamer(peer_addr, streamer_sched, seconds)?);
        }
        Ok(run)
    }

    /// The music application's flow through this service.
    pub(crate) fn music_flow(&self) -> ServiceFlow {
        ServiceFlow::music(
            self.socket.clone(),
            self.plan.class,
            self.plan.reservation_bps,
        )
    }

    /// The streamer's peer on the SLABS's side (its namespace on a LAN).
    fn start_peer(&mut self, lan: Option<&Lan>) -> Result<SocketAddr, String> {
        let ip = lan.map_or("127.0.0.1".parse().expect("an address"), |l| {
            std::net::IpAddr::V4(l.slabs_address())
        });
        let addr = SocketAddr::new(ip, PEER_PORT);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (bound_in, bound_out) = std::sync::mpsc::channel();
        let peer = tessera_music::lan::spawn_slabs(lan, move || {
            let socket = UdpSocket::bind(addr).and_then(|s| {
                s.set_read_timeout(Some(Duration::from_millis(50)))
                    .map(|()| s)
            });
            let socket = match socket {
                Ok(socket) => socket,
                Err(e) => {
                    let _ = bound_in.send(Err(format!("the streamer's peer at {addr}: {e}")));
                    return Err(e.to_string());
                }
            };
            let _ = bound_in.send(Ok(()));
            streamer::serve_peer(&socket, &flag).map_err(|e| e.to_string())
        })
        .map_err(|e| e.to_string())?;
        self.peer = Some((stop, peer));
        bound_out
            .recv_timeout(PATIENCE)
            .map_err(|_| "the streamer's peer did not start".to_string())??;
        Ok(addr)
    }

    fn spawn_streamer(
        &self,
        peer: SocketAddr,
        sched: &Sched,
        seconds: f64,
    ) -> Result<OwnedChild, String> {
        let mut command = Command::new(program_beside_us("tessera"));
        command.args(["net", "stream", "--json", "--socket"]);
        command.arg(&self.socket);
        command.args([
            "--peer",
            &peer.to_string(),
            "--seconds",
            &format!("{seconds:.3}"),
        ]);
        if let Some(cell) = cell_of(sched) {
            command.args(["--cell", &cell]);
        }
        let log = std::fs::File::create(self.log_dir.join("streamer.log"))
            .map_err(|e| format!("the streamer's log: {e}"))?;
        command.stdout(Stdio::piped()).stderr(log);
        let child = command.spawn().map_err(|e| {
            format!("starting `tessera net stream`: {e} (build it: cargo build --bins)")
        })?;
        Ok(OwnedChild::new(child, "the streamer", GRACE))
    }

    /// The service's counters now (the music flow still held).
    pub(crate) fn status(&self) -> Result<Status, String> {
        client::status(&self.socket).map_err(|e| e.to_string())
    }

    /// Stops the streamer, its peer and the service; `status` was read
    /// while the music flow lived.
    pub(crate) fn finish(mut self, status: Result<Status, String>) -> ServiceData {
        let streamer = self.streamer.take().map(streamer_report);
        let peer = self.peer.take().map(|(stop, thread)| {
            stop.store(true, Ordering::Relaxed);
            match thread.join() {
                Ok(Ok(report)) => report,
                Ok(Err(lan)) => Err(lan.to_string()),
                Err(_) => Err("the streamer's peer panicked".to_string()),
            }
        });
        self.service.stop();
        let _ = std::fs::remove_dir_all(&self.log_dir);
        ServiceData {
            status,
            streamer,
            peer,
            plan: self.plan,
        }
    }
}

/// Starts `tessera serve net` as `program` (the `tessera` binary, with
/// whatever the caller prepared: a network namespace to run in) listening
/// at `socket`, its real-time thread in `sched`'s cell, its output in
/// `log_dir`'s service.log; [`await_listening`] says when it answers.
pub(crate) fn spawn_service(
    mut command: Command,
    plan: &ServicePlan,
    socket: &Path,
    log_dir: &Path,
    sched: &Sched,
) -> Result<OwnedChild, String> {
    // No experiment needs SAP, and none may announce on the machine's LAN.
    command.args(["serve", "net", "--no-discovery", "--socket"]);
    command.arg(socket);
    command.args([
        "--name",
        &unique("net"),
        "--discipline",
        plan.discipline.name(),
        "--link-rate",
        &plan.link_bps.to_string(),
        "--budget",
        BUDGET,
        "--period",
        PERIOD,
    ]);
    match cell_of(sched) {
        Some(cell) => command.args(["--cell", &cell]),
        None => command.arg("--no-cell"),
    };
    let log = std::fs::File::create(log_dir.join("service.log"))
        .map_err(|e| format!("the service's log: {e}"))?;
    let err = log.try_clone().map_err(|e| e.to_string())?;
    command.stdout(log).stderr(err);
    let child = command
        .spawn()
        .map_err(|e| format!("starting `tessera serve net`: {e} (build it: cargo build --bins)"))?;
    Ok(OwnedChild::new(child, "the network service", GRACE))
}

/// Waits until the service started by [`spawn_service`] answers at
/// `socket`; its log's end if it exits or takes longer than [`PATIENCE`].
pub(crate) fn await_listening(
    service: &mut OwnedChild,
    socket: &Path,
    log_dir: &Path,
) -> Result<(), String> {
    let deadline = Instant::now() + PATIENCE;
    while client::status(socket).is_err() {
        if service.exited().is_some() || Instant::now() > deadline {
            return Err(format!(
                "the network service did not start: {}",
                crate::harness::servers::log_tail(&log_dir.join("service.log"))
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Stops the streamer and reads the report it prints when it ends.
fn streamer_report(mut streamer: OwnedChild) -> Result<StreamReport, String> {
    streamer.stop();
    let out = streamer.take_stdout().unwrap_or_default();
    serde_json::from_str::<StreamReport>(&out)
        .map_err(|e| format!("the streamer's report ({e}): {}", out.trim()))
}

/// The music flow's counters among the service's.
fn music_flow(status: &Status) -> Option<&FlowStatus> {
    status.flows.iter().find(|f| f.name == "music")
}

/// Δt as the service measured it, its misses counted exactly by the
/// service against the deadline; notes on the service, the flows and the
/// streamer.
pub(crate) fn metrics(data: &ServiceData) -> (Vec<Metric>, Vec<Counter>, Vec<String>) {
    let mut notes = vec![plan_note(&data.plan)];
    let mut metrics = Vec::new();
    let mut counters = Vec::new();
    match &data.status {
        Ok(status) => {
            notes.push(format!(
                "network service: {} discipline, link {:.0} Mbit/s, CPU {:.0} Mbit/s, {:.0} of \
                 {:.0} Mbit/s committed; real-time thread: {}",
                status.discipline,
                status.link_bps as f64 / 1e6,
                status.cpu_bps as f64 / 1e6,
                status.committed_bps as f64 / 1e6,
                status.usable_bps as f64 / 1e6,
                status.real_time
            ));
            notes.extend(status.flows.iter().map(flow_note));
            counters.extend(status.flows.iter().flat_map(flow_counters));
            if let Some(music) = music_flow(status) {
                metrics.push(response_metric(music));
            }
        }
        Err(e) => notes.push(format!("the network service's counters: {e}")),
    }
    match &data.streamer {
        Some(Ok(s)) => {
            notes.push(format!(
                "abusive streamer: sent {:.1} Mbit/s, received {:.1} Mbit/s",
                s.sent_mbps(),
                s.received_mbps()
            ));
            counters.extend([
                Counter::new("abusive streamer sent", s.sent_mbps(), "Mbit/s"),
                Counter::new("abusive streamer received", s.received_mbps(), "Mbit/s"),
            ]);
        }
        Some(Err(e)) => notes.push(format!("abusive streamer: {e}")),
        None => {}
    }
    if let Some(Err(e)) = &data.peer {
        notes.push(format!("the streamer's peer: {e}"));
    }
    (metrics, counters, notes)
}

fn plan_note(plan: &ServicePlan) -> String {
    let reserved = match plan.reservation_bps {
        0 => "no reservation".to_string(),
        r => format!("{:.0} Mbit/s reserved", r as f64 / 1e6),
    };
    let reserved = format!("{reserved}, a {} flow of weight 1", plan.class.name());
    let scheduling = match plan.discipline {
        Discipline::Fifo => "first come, first served (no QoS)",
        Discipline::MClock => "mClock, real-time flows first",
    };
    format!(
        "through the network service process ({scheduling}): the music flow with {reserved}; {}",
        match plan.streamer {
            true => "the abusive streamer running",
            false => "no streamer",
        }
    )
}

/// A flow's counters in a line.
pub(crate) fn flow_note(f: &FlowStatus) -> String {
    format!(
        "flow {:?} ({}): in {:.1} MB, {} packets, {} dropped by the service and {} by its full \
         socket, queueing p99 {:.0} µs; out {:.1} MB, {} packets, {} dropped, queueing p99 {:.0} µs",
        f.name,
        f.class.name(),
        f.received.bytes as f64 / 1e6,
        f.received.packets,
        f.received.drops,
        f.received.overflowed,
        f.received.queueing.p99_ns as f64 / 1e3,
        f.sent.bytes as f64 / 1e6,
        f.sent.packets,
        f.sent.drops,
        f.sent.queueing.p99_ns as f64 / 1e3
    )
}

/// A flow's counts, as [`flow_note`] says them: "flow music: in packets", …
pub(crate) fn flow_counters(f: &FlowStatus) -> Vec<Counter> {
    let name = |what| format!("flow {}: {what}", f.name);
    let mut counters = Counter::counts([
        (name("in packets"), f.received.packets),
        (name("in dropped by the service"), f.received.drops),
        (name("in dropped by its full socket"), f.received.overflowed),
        (name("out packets"), f.sent.packets),
        (name("out dropped"), f.sent.drops),
    ]);
    let us = |what, ns: u64| Counter::new(name(what), ns as f64 / 1e3, "us");
    counters.extend([
        Counter::new(name("in bytes"), f.received.bytes as f64, "bytes"),
        Counter::new(name("out bytes"), f.sent.bytes as f64, "bytes"),
        us("in queueing p99", f.received.queueing.p99_ns),
        us("out queueing p99", f.sent.queueing.p99_ns),
    ]);
    counters
}

/// The service's response histogram as a latency metric (each bucket at
/// its top, within 1/64), misses as the service counted them.
fn response_metric(music: &FlowStatus) -> Metric {
    let mut histogram = LatencyHistogram::new(10_000_000_000);
    for &(top, count) in &music.response_buckets {
        for _ in 0..count {
            histogram.record(top);
        }
    }
    let deadline_us = DEADLINE.as_nanos() as f64 / 1000.0;
    let mut metric = Metric::latency(SERVICE_RESPONSE_METRIC, Some(deadline_us), histogram);
    metric.summary.misses = Some(music.late_responses);
    metric
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_services::net::Class;

    #[test]
    fn a_flows_counts_are_counters_beside_its_note() {
        let mut flow = FlowStatus {
            id: 1,
            name: "music".into(),
            client_pid: 42,
            class: Class::RealTime,
            reservation_bps: 1_000_000,
            weight: 1,
            limit_bps: None,
            local: "127.0.0.1:9000".parse().unwrap(),
            received: Default::default(),
            sent: Default::default(),
            response: Default::default(),
            response_buckets: Vec::new(),
            late_responses: 0,
            rtp: None,
        };
        flow.received.packets = 1000;
        flow.received.overflowed = 3;
        flow.received.queueing.p99_ns = 25_000;
        flow.sent.drops = 2;
        let counters = flow_counters(&flow);
        let value = |name: &str| counters.iter().find(|c| c.name == name).map(|c| c.value);
        assert_eq!(value("flow music: in packets"), Some(1000.0));
        assert_eq!(
            value("flow music: in dropped by its full socket"),
            Some(3.0)
        );
        assert_eq!(value("flow music: out dropped"), Some(2.0));
        assert_eq!(value("flow music: in queueing p99"), Some(25.0));
        assert!(flow_note(&flow).contains("1000 packets, 0 dropped by the service and 3"));
    }
}
