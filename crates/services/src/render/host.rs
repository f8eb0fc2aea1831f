//! The render service's process (`tessera serve render`): its reservations
//! as cells of the broker (the front-end's, the best-effort and probing
//! shares', and one per SLA, each an event-triggered cell the broker
//! admits), its registration under a name clients open it by, and its life
//! until it is told to stop. The baseline server's process is here too.
//!
//! It owns the cells and the registration and gives both back however the
//! service ends (a destroyed cell restores its thread; a crashed process's
//! registration is found stale by the broker, its cells by `tessera
//! reset`). It must never run without saying how: best-effort is labelled,
//! with how to grant CAP_SYS_NICE.

use super::baseline::{BaselineConfig, BaselineServer};
use super::service::{RenderServer, Reservation, Reserve, ServerConfig, ServerError, Share};
use crate::control::{Policy, ThreadHook};
use std::path::PathBuf;
use std::sync::Arc;
use tessera_broker::{BrokerError, Mode, ServicePolicy, ServiceRegistration, Session};
use tessera_policy::{CellRequest, Placement};
use tessera_runtime::CellJoin;

/// How the service process runs.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// The name clients open it by.
    pub name: String,
    /// Where it listens; default: the broker's run directory.
    pub socket: Option<PathBuf>,
    /// The traditional single-threaded server instead of the service.
    pub baseline: bool,
    /// Cores its reservations go on (partitioned); `None`: global EDF
    /// over the shared cores.
    pub cores: Option<Vec<usize>>,
    /// What SLAs may hold together, in cores; `None`: the cores' capacity
    /// less the service's own shares.
    pub capacity_cores: Option<f64>,
    pub best_effort: Share,
    pub probing: Share,
    pub screen: (usize, usize),
    /// Window size over frame size for windows placed automatically.
    pub scale: f32,
    /// Run without cells even when privileged.
    pub no_cell: bool,
    /// Whom the service admits beside its owner and root.
    pub policy: ServicePolicy,
}

/// A running service process's parts, given back when dropped.
pub struct Host {
    server: Option<Server>,
    registration: Option<ServiceRegistration>,
    /// What the service runs on, in words, for the start line.
    pub summary: String,
}

enum Server {
    Render(RenderServer),
    Baseline(BaselineServer),
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error(transparent)]
    Server(#[from] ServerError),
}

impl Host {
    /// Starts the service (or the baseline) and registers it.
    pub fn start(options: &HostOptions) -> Result<Host, HostError> {
        let socket = options.socket.clone().unwrap_or_else(|| {
            let paths = tessera_broker::paths::Paths::from_env();
            let _ = paths.ensure();
            paths.dir.join(format!("service-{}.sock", options.name))
        });
        let policy = options.policy.clone();
        let policy: Policy = Arc::new(move |caller| policy.allows(caller));
        let (server, summary) = match options.baseline {
            true => start_baseline(options, socket.clone(), policy)?,
            false => start_render(options, socket.clone(), policy)?,
        };
        let mut host = Host {
            server: Some(server),
            registration: None,
            summary,
        };
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
        match self.server.take() {
            Some(Server::Render(server)) => server.stop(),
            Some(Server::Baseline(server)) => server.stop(),
            None => {}
        }
    }
}

fn start_render(
    options: &HostOptions,
    socket: PathBuf,
    policy: Policy,
) -> Result<(Server, String), HostError> {
    let reserve: Arc<dyn Reserve> = match best_effort_reason(options) {
        Some(why) => Arc::new(NoReservations(why)),
        None => {
            tessera_sys::mem::lock_all_memory().map_err(|e| ServerError::Task(e.to_string()))?;
            Arc::new(Cells {
                prefix: format!("{}-{}", options.name, std::process::id()),
                cores: options.cores.clone(),
            })
        }
    };
    let cores = options.cores.as_ref().map_or_else(
        || tessera_sys::kernel::online_cpus().map_or(1, |c| c.len()),
        Vec::len,
    );
    let mut config = ServerConfig::new(socket.clone(), 0.0, policy, reserve);
    config.best_effort = options.best_effort;
    config.probing = options.probing;
    (config.screen_width, config.screen_height) = options.screen;
    config.scale = options.scale;
    let own = config.best_effort.cores() + config.probing.cores() + config.front_end.cores();
    config.capacity_cores = options
        .capacity_cores
        .unwrap_or((cores as f64 * usable_per_core() - own).max(0.0));
    let capacity = config.capacity_cores;
    let server = RenderServer::start(config)?;
    let summary = format!(
        "render service {:?} (pid {}) at {}: {}×{} screen; SLAs may hold {capacity:.2} cores; {}",
        options.name,
        std::process::id(),
        socket.display(),
        options.screen.0,
        options.screen.1,
        server.tasks.join("; "),
    );
    Ok((Server::Render(server), summary))
}

fn start_baseline(
    options: &HostOptions,
    socket: PathBuf,
    policy: Policy,
) -> Result<(Server, String), HostError> {
    let setup: Option<ThreadHook> = options.cores.clone().map(|cores| {
        let hook: ThreadHook = Arc::new(move || {
            tessera_sys::affinity::set_affinity(0, &cores).map_err(|e| e.to_string())
        });
        hook
    });
    let where_ = options
        .cores
        .as_ref()
        .map_or("any core".to_string(), |c| format!("cores {c:?}"));
    let server = BaselineServer::start(BaselineConfig {
        socket: socket.clone(),
        screen_width: options.screen.0,
        screen_height: options.screen.1,
        scale: options.scale,
        opacity: 256,
        policy,
        setup,
    })?;
    let summary = format!(
        "baseline render server {:?} (pid {}) at {}: one thread on {where_}, SCHED_OTHER, arrival \
         order, no reservations",
        options.name,
        std::process::id(),
        socket.display(),
    );
    Ok((Server::Baseline(server), summary))
}

/// Why nothing will be reserved, if nothing will.
fn best_effort_reason(options: &HostOptions) -> Option<String> {
    if options.no_cell {
        return Some("SCHED_OTHER, nothing guaranteed (--no-cell)".into());
    }
    (Mode::detect() == Mode::BestEffort).then(|| {
        "SCHED_OTHER, nothing guaranteed (BEST-EFFORT: no CAP_SYS_NICE, so no reservation; run \
         as root, or `sudo setcap cap_sys_nice+ep $(which tessera)`)"
            .into()
    })
}

/// Reservations as event-triggered cells of the broker.
struct Cells {
    prefix: String,
    cores: Option<Vec<usize>>,
}

impl Reserve for Cells {
    fn reserve(&self, task: &str, runtime_ns: u64, period_ns: u64) -> Result<Reservation, String> {
        let name = format!("{}-{task}", self.prefix);
        // An SLA's reservation is the client's guarantee, and the shares
        // are the service's design: the RAP service must not resize them.
        // They reclaim (GRUB): a frame that costs more than the budget its
        // probes sized finishes in bandwidth no one reserved, instead of
        // waiting for its next period (`tessera run --why` on seed-003-b
        // found the SLA tasks' misses throttled).
        let mut request = CellRequest {
            pinned: true,
            reclaim: true,
            ..CellRequest::event_triggered(&name, runtime_ns, period_ns)
        };
        request = match &self.cores {
            Some(cores) => request.on_cores(cores.clone()),
            None => CellRequest {
                placement: Placement::Global,
                ..request
            },
        };
        let mut session = Session::connect().map_err(|e| e.to_string())?;
        session
            .create_cell(request, true)
            .map_err(|e| e.to_string())?;
        // Memory is locked once for the process (`start_render`): locking
        // it again per task would be charged to the task's reservation.
        let (cell, cell_name) = (CellJoin::connect(name.clone()), name.clone());
        let join: ThreadHook = Arc::new(move || {
            cell.join_current_thread()
                .map_err(|e| format!("join cell {cell_name:?}: {e}"))
        });
        let release_name = name.clone();
        let release = Box::new(move || {
            if let Err(e) = session.destroy_cell(&release_name) {
                eprintln!("tessera serve render: cell {release_name:?} not destroyed: {e}");
            }
        });
        Ok(Reservation {
            join: Some(join),
            note: format!(
                "cell {name:?}, {} µs every {} µs (SCHED_DEADLINE)",
                runtime_ns / 1000,
                period_ns / 1000
            ),
            release: Some(release),
            misses: Some(tessera_runtime::CellReport::new(name)),
        })
    }
}

/// No reservations: every task runs best-effort, and says why.
struct NoReservations(String);

impl Reserve for NoReservations {
    fn reserve(&self, _: &str, _: u64, _: u64) -> Result<Reservation, String> {
        Ok(Reservation {
            join: None,
            note: self.0.clone(),
            release: None,
            misses: None,
        })
    }
}

/// The part of a core the kernel lets reservations take (its rt share less
/// its fair server's), as it says.
fn usable_per_core() -> f64 {
    tessera_sys::kernel::deadline_capacity().per_cpu
}
