//! The network service's process (`tessera serve net`): the cell its
//! real-time thread runs in (an event-triggered reservation the broker
//! admits), its registration with the broker under a name clients open it
//! by, the link rate it measures, and its life until it is told to stop.
//!
//! It owns the cell and the registration and gives both back however the
//! service ends (a destroyed cell restores the thread; a crashed process's
//! registration is found stale by the broker). It must never run without
//! saying how: best-effort is labelled, with how to grant CAP_SYS_NICE.

use super::discovery::DiscoveryConfig;
use super::service::{NetConfig, NetError, NetService, ThreadHook};
use std::path::PathBuf;
use std::sync::Arc;
use tessera_broker::{BrokerError, Mode, ServicePolicy, ServiceRegistration, Session};
use tessera_policy::mclock::Discipline;
use tessera_policy::{CellRequest, Placement};
use tessera_runtime::CellJoin;

/// How the service process runs.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// The name clients open it by.
    pub name: String,
    /// Where it listens; default: the broker's run directory.
    pub socket: Option<PathBuf>,
    pub discipline: Discipline,
    /// The link's rate, bits/s; `None`: measured from `device`.
    pub link_bps: Option<u64>,
    /// The interface whose rate (its tc shaping, else its speed) is the
    /// link's.
    pub device: Option<String>,
    /// The real-time thread's reservation: budget every period, on a core
    /// of its own (partitioned: needs the machine's cpusets) or under
    /// global EDF over the shared cores (no cpusets).
    pub budget_ns: u64,
    pub period_ns: u64,
    pub placement: Placement,
    /// Run without a cell even when privileged.
    pub no_cell: bool,
    /// Join this existing cell (its reservation) instead of creating one.
    pub cell: Option<String>,
    /// Whom the service admits beside its owner and root.
    pub policy: ServicePolicy,
    /// SAP: announce clients' streams, list others'.
    pub discovery: Option<DiscoveryConfig>,
}

/// The link rate assumed when nothing says otherwise: gigabit Ethernet.
pub const DEFAULT_LINK_BPS: u64 = 1_000_000_000;

/// A running service process's parts, given back when dropped.
pub struct Host {
    service: Option<NetService>,
    registration: Option<ServiceRegistration>,
    cell: Option<(Session, String)>,
    /// What the service runs on, in words, for the start line.
    pub summary: String,
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error(transparent)]
    Service(#[from] NetError),
    #[error("the link rate: {0}")]
    Link(String),
}

impl Host {
    /// Creates the cell (when privileged), starts the service and registers
    /// it.
    pub fn start(options: &HostOptions) -> Result<Host, HostError> {
        let (link_bps, link_note) = link_rate(options)?;
        let mut session = Session::connect()?;
        let socket = options.socket.clone().unwrap_or_else(|| {
            tessera_broker::paths::Paths::from_env().service_socket(&options.name)
        });
        let (cell, setup, cpu_share, real_time_note) = real_time_cell(&mut session, options)?;
        let policy = options.policy.clone();
        let config = NetConfig {
            socket: socket.clone(),
            discipline: options.discipline,
            link_bps,
            cpu_share,
            real_time_setup: setup,
            real_time_note: real_time_note.clone(),
            policy: Arc::new(move |caller| policy.allows(caller)),
            discovery: options.discovery.clone(),
        };
        let mut host = Host {
            service: None,
            registration: None,
            cell,
            summary: String::new(),
        };
        let service = NetService::start(config)?;
        let capacity = service.capacity();
        host.summary = format!(
            "network service {:?} (pid {}) at {}: {} discipline; link {} Mbit/s ({link_note}), CPU \
             {} Mbit/s, {} Mbit/s admissible each way; real-time thread: {real_time_note}",
            options.name,
            std::process::id(),
            socket.display(),
            options.discipline.name(),
            capacity.link_bps / 1_000_000,
            capacity.cpu_bps / 1_000_000,
            capacity.usable_bps() / 1_000_000,
        );
        host.service = Some(service);
        host.registration = Some(ServiceRegistration::register(
            Session::connect()?,
            &options.name,
            &socket,
            options.policy.clone(),
        )?);
        Ok(host)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        drop(self.registration.take());
        if let Some(service) = self.service.take() {
            service.stop();
        }
        if let Some((mut session, name)) = self.cell.take() {
            if let Err(e) = session.destroy_cell(&name) {
                eprintln!("tessera serve net: cell {name:?} not destroyed: {e}");
            }
        }
    }
}

/// The real-time thread's cell: created when the kernel will enforce it,
/// with its hook, the share of a core it guarantees, and a note.
#[allow(clippy::type_complexity)]
fn real_time_cell(
    session: &mut Session,
    options: &HostOptions,
) -> Result<(Option<(Session, String)>, Option<ThreadHook>, f64, String), HostError> {
    let share = options.budget_ns as f64 / options.period_ns.max(1) as f64;
    if options.no_cell || Mode::detect() == Mode::BestEffort {
        let why = match options.no_cell {
            true => "--no-cell".to_string(),
            false => "BEST-EFFORT: no CAP_SYS_NICE, so no reservation (run as root, or \
                      `sudo setcap cap_sys_nice+ep $(which tessera)`)"
                .to_string(),
        };
        return Ok((
            None,
            None,
            1.0,
            format!("SCHED_OTHER, nothing guaranteed ({why})"),
        ));
    }
    if let Some(cell) = &options.cell {
        let budget = session.show(cell)?.grant.request.budget;
        let share = budget.map_or(1.0, |b| b.runtime_ns as f64 / b.period_ns.max(1) as f64);
        let hook: ThreadHook = Arc::new(CellJoin::connect(cell.clone()).hook());
        let note = format!("cell {cell:?} (given)");
        return Ok((None, Some(hook), share, note));
    }
    let name = format!("{}-{}", options.name, std::process::id());
    let request = CellRequest {
        reclaim: true,
        placement: options.placement,
        ..CellRequest::event_triggered(&name, options.budget_ns, options.period_ns)
    };
    session.create_cell(request, true)?;
    let join = CellJoin::connect(&name);
    let hook: ThreadHook = Arc::new(join.hook());
    let placement = match options.placement {
        Placement::Partitioned => "a core of its own",
        Placement::Global => "global EDF",
    };
    let note = format!(
        "cell {name:?}, {} µs every {} µs (SCHED_DEADLINE, {placement}, reclaiming)",
        options.budget_ns / 1000,
        options.period_ns / 1000
    );
    Ok((Some((Session::connect()?, name)), Some(hook), share, note))
}

/// The link's rate and where it came from.
fn link_rate(options: &HostOptions) -> Result<(u64, String), HostError> {
    if let Some(rate) = options.link_bps {
        return Ok((rate, "as given".into()));
    }
    let Some(device) = &options.device else {
        return Ok((
            DEFAULT_LINK_BPS,
            "assumed: give --link-rate or --device".into(),
        ));
    };
    if let Some(rate) = shaped_rate(device) {
        return Ok((rate, format!("{device}'s tbf shaping")));
    }
    let speed = std::fs::read_to_string(format!("/sys/class/net/{device}/speed")).map_err(|e| {
        HostError::Link(format!(
            "{device}: {e} (fix: name an interface of this host)"
        ))
    })?;
    match speed.trim().parse::<u64>() {
        Ok(mbps) if mbps > 0 => Ok((mbps * 1_000_000, format!("{device}'s speed"))),
        _ => Err(HostError::Link(format!(
            "{device} reports no speed (fix: give --link-rate)"
        ))),
    }
}

/// The rate of a `tbf` qdisc on `device`, bits/s, from `tc -j`.
fn shaped_rate(device: &str) -> Option<u64> {
    let output = std::process::Command::new("tc")
        .args(["-j", "qdisc", "show", "dev", device])
        .output()
        .ok()?;
    let qdiscs: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    qdiscs.as_array()?.iter().find_map(|q| {
        (q.get("kind")?.as_str()? == "tbf").then(|| {
            q.get("options")?
                .get("rate")?
                .as_u64()
                .map(|bytes| bytes * 8)
        })?
    })
}
