//! The runtime of one cell: building it (configuration and tasks), starting
//! its workers (each joined to the cell, memory locked, the guarantee read
//! back), live statistics, and stopping it with a report.
//!
//! It owns the workers' lifecycle and the notification thread. It must never
//! run jobs itself (the workers do) and never sleep without a bound.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use tessera_broker::{BrokerError, ErrorCode, Mode};
use tessera_sys::clock::monotonic_ns;
use tessera_sys::event::{EventFd, TimerFd};
use tessera_sys::sched::{self, Policy};
use tessera_sys::signal::{self, OverrunWatch};

use crate::cell::CellJoin;
use crate::notify::{self, Notifications, NotifyThread};
use crate::stats::{TaskCounters, TaskStats};
use crate::task::{Event, JobContext, Periodic, TaskId};
use crate::worker::{Source, Worker, WorkerTask};

/// How long `start` waits for each worker to join its cell.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// How a runtime is built.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Worker threads. A bandwidth cell has one reservation per core, so `n`
    /// workers need a cell created with `n` cores.
    pub workers: usize,
    /// The cell the workers join; `None` runs them best-effort.
    pub cell: Option<CellJoin>,
    /// Lock the process's memory (`mlockall`) before the workers start.
    pub lock_memory: bool,
    /// Count SIGXCPU overrun signals per worker (installs the handler). The
    /// cell must be created with `overrun_signal` for the kernel to send them.
    pub watch_overruns: bool,
    /// Notices each worker can queue for the notification thread.
    pub notice_capacity: usize,
    /// From `start` returning to the epoch: periodic task k's first release
    /// is at epoch + its offset.
    pub first_release: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            workers: 1,
            cell: None,
            lock_memory: true,
            watch_overruns: true,
            notice_capacity: 256,
            first_release: Duration::from_millis(1),
        }
    }
}

/// Why the runtime could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("invalid task: {0}")]
    InvalidTask(String),
    #[error(transparent)]
    Sys(#[from] tessera_sys::Error),
    #[error("broker: {0}")]
    Broker(#[from] BrokerError),
    #[error("starting the runtime's threads: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("worker {worker} could not start: {message}")]
    WorkerSetup { worker: usize, message: String },
    #[error("a runtime thread panicked")]
    Panicked,
}

/// What the cell's CPU guarantee is worth here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guarantee {
    /// The broker enforces the cell (root): reservations and cpusets.
    Enforced,
    /// Reservations without cpusets (CAP_SYS_NICE, not root).
    Limited(String),
    /// Nothing is enforced; the reason says why and how to fix it.
    BestEffort(String),
}

/// A worker as it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    pub index: usize,
    pub tid: i32,
    /// The scheduling policy the worker read back after joining its cell.
    pub policy: Policy,
}

/// One task's final statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskReport {
    pub id: TaskId,
    pub name: String,
    pub counters: TaskCounters,
}

/// What a run leaves behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    pub tasks: Vec<TaskReport>,
    /// Notices lost because the notification thread lagged (the counters
    /// still count every miss).
    pub dropped_notices: u64,
}

/// A runtime being assembled: tasks are added before it starts, so that all
/// its storage is allocated before the first job.
pub struct Builder {
    config: RuntimeConfig,
    tasks: Vec<(usize, WorkerTask)>,
    names: Vec<String>,
}

impl Builder {
    pub fn new(config: RuntimeConfig) -> Builder {
        Builder {
            config,
            tasks: Vec::new(),
            names: Vec::new(),
        }
    }

    /// Adds a periodic task (the seed's `rt_periodic`).
    pub fn periodic(
        &mut self,
        spec: Periodic,
        callback: impl FnMut(&mut JobContext) + Send + 'static,
    ) -> Result<TaskId, RuntimeError> {
        spec.validate(self.config.workers)
            .map_err(RuntimeError::InvalidTask)?;
        let source = Source::Periodic {
            timer: TimerFd::new()?,
            period_ns: spec.period.as_nanos() as u64,
            offset_ns: spec.offset.as_nanos() as u64,
            next_release_ns: 0,
        };
        Ok(self.add(spec.name, spec.worker, source, spec.deadline, callback))
    }

    /// Adds an event-triggered task (the seed's `rt_select`).
    pub fn event(
        &mut self,
        spec: Event,
        callback: impl FnMut(&mut JobContext) + Send + 'static,
    ) -> Result<TaskId, RuntimeError> {
        spec.validate(self.config.workers)
            .map_err(RuntimeError::InvalidTask)?;
        let source = Source::Event { fd: spec.fd };
        Ok(self.add(spec.name, spec.worker, source, spec.deadline, callback))
    }

    fn add(
        &mut self,
        name: String,
        worker: usize,
        source: Source,
        deadline: Duration,
        callback: impl FnMut(&mut JobContext) + Send + 'static,
    ) -> TaskId {
        let id = TaskId(self.names.len());
        self.names.push(name);
        self.tasks.push((
            worker,
            WorkerTask {
                id,
                source,
                relative_deadline_ns: deadline.as_nanos() as u64,
                callback: Box::new(callback),
                next_seq: 0,
            },
        ));
        id
    }

    /// Starts the workers: each joins the cell, reads back its scheduling
    /// and waits; once all are in place the epoch is set and they dispatch.
    pub fn start(self, notifications: impl Notifications) -> Result<Runtime, RuntimeError> {
        let Builder {
            config,
            tasks,
            names,
        } = self;
        if config.workers == 0 {
            return Err(RuntimeError::InvalidTask(
                "a runtime needs at least one worker".into(),
            ));
        }
        if config.watch_overruns {
            signal::install_overrun_handler()?;
        }
        let mut warnings = Vec::new();
        if config.lock_memory {
            if let Err(e) = tessera_sys::mem::lock_all_memory() {
                warnings.push(format!(
                    "memory is not locked, page faults may delay jobs: {e}"
                ));
            }
        }
        let mut guarantee = broker_guarantee(config.cell.as_ref())?;
        let stats: Arc<[TaskStats]> = names.iter().map(|_| TaskStats::default()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let (notifiers, notify) = notify::start(
            Box::new(notifications),
            config.workers,
            config.notice_capacity,
        )
        .map_err(RuntimeError::Spawn)?;
        let mut per_worker: Vec<Vec<WorkerTask>> =
            (0..config.workers).map(|_| Vec::new()).collect();
        for (worker, task) in tasks {
            per_worker[worker].push(task);
        }
        let mut launch = Launch::default();
        for (index, (tasks, notifier)) in per_worker.into_iter().zip(notifiers).enumerate() {
            let (worker, waker) = Worker::new(
                index,
                tasks,
                notifier,
                Arc::clone(&stats),
                Arc::clone(&stop),
            )?;
            launch.spawn(index, worker, waker, &config)?;
        }
        let workers = match launch.await_setup() {
            Ok((infos, refusal)) => {
                if let Some(reason) = refusal {
                    guarantee = Guarantee::BestEffort(reason);
                }
                infos
            }
            Err(e) => {
                stop.store(true, Ordering::Release);
                launch.abandon();
                let _ = notify.stop();
                return Err(e);
            }
        };
        let epoch_ns = monotonic_ns() + config.first_release.as_nanos() as u64;
        let threads = launch.go(epoch_ns);
        Ok(Runtime {
            threads,
            notify: Some(notify),
            stop,
            stats,
            names,
            workers,
            guarantee,
            warnings,
            epoch_ns,
        })
    }
}

/// The guarantee the broker's mode allows, before any worker joins.
fn broker_guarantee(cell: Option<&CellJoin>) -> Result<Guarantee, RuntimeError> {
    let Some(cell) = cell else {
        return Ok(Guarantee::BestEffort(
            "no cell: the workers keep their normal scheduling; set RuntimeConfig::cell to \
             run them in a cell's reservations"
                .into(),
        ));
    };
    let mode = cell.session()?.hello()?.mode;
    let banner = mode.banner().unwrap_or_default();
    Ok(match mode {
        Mode::Guaranteed => Guarantee::Enforced,
        Mode::ReservationsOnly => Guarantee::Limited(banner),
        Mode::BestEffort => Guarantee::BestEffort(banner),
    })
}

/// A worker thread's report once it joined (or could not join) its cell.
struct Setup {
    info: WorkerInfo,
    /// The broker refused the join for lack of privilege: run best-effort.
    refused: Option<String>,
}

type WorkerThread = JoinHandle<tessera_sys::Result<()>>;

/// Workers started but not yet dispatching.
#[derive(Default)]
struct Launch {
    threads: Vec<(WorkerThread, EventFd)>,
    go: Vec<mpsc::Sender<u64>>,
    setups: Vec<mpsc::Receiver<Result<Setup, String>>>,
}

impl Launch {
    fn spawn(
        &mut self,
        index: usize,
        worker: Worker,
        waker: EventFd,
        config: &RuntimeConfig,
    ) -> Result<(), RuntimeError> {
        let (setup_tx, setup_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel();
        let cell = config.cell.clone();
        let watch = config.watch_overruns;
        let thread = std::thread::Builder::new()
            .name(format!("tessera-worker-{index}"))
            .spawn(move || worker_main(index, worker, cell, watch, setup_tx, go_rx))
            .map_err(RuntimeError::Spawn)?;
        self.threads.push((thread, waker));
        self.go.push(go_tx);
        self.setups.push(setup_rx);
        Ok(())
    }

    /// Every worker's setup, or the first failure.
    fn await_setup(&self) -> Result<(Vec<WorkerInfo>, Option<String>), RuntimeError> {
        let mut infos = Vec::new();
        let mut refused = None;
        for (worker, rx) in self.setups.iter().enumerate() {
            let setup = rx
                .recv_timeout(START_PATIENCE)
                .map_err(|e| RuntimeError::WorkerSetup {
                    worker,
                    message: format!("no answer within {START_PATIENCE:?} ({e})"),
                })?
                .map_err(|message| RuntimeError::WorkerSetup { worker, message })?;
            refused = refused.or(setup.refused);
            infos.push(setup.info);
        }
        Ok((infos, refused))
    }

    /// Lets the workers dispatch from `epoch_ns`.
    fn go(self, epoch_ns: u64) -> Vec<(WorkerThread, EventFd)> {
        for go in &self.go {
            let _ = go.send(epoch_ns);
        }
        self.threads
    }

    /// Ends workers that never dispatched: without a go they return. A
    /// worker stuck in its setup is left behind rather than waited for.
    fn abandon(self) {
        drop(self.go);
        for (thread, _) in self.threads {
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
    }
}

fn worker_main(
    index: usize,
    mut worker: Worker,
    cell: Option<CellJoin>,
    watch: bool,
    setup: mpsc::Sender<Result<Setup, String>>,
    go: mpsc::Receiver<u64>,
) -> tessera_sys::Result<()> {
    let report = join_cell(index, cell.as_ref()).and_then(|setup| {
        if watch {
            let overruns = OverrunWatch::current_thread().map_err(|e| e.to_string())?;
            worker.watch_overruns(overruns);
        }
        Ok(setup)
    });
    let failed = report.is_err();
    let _ = setup.send(report);
    if failed {
        return Ok(());
    }
    match go.recv_timeout(START_PATIENCE) {
        Ok(epoch_ns) => worker.run(epoch_ns),
        Err(_) => Ok(()),
    }
}

/// Joins the calling worker thread to `cell` and reads back its policy.
fn join_cell(index: usize, cell: Option<&CellJoin>) -> Result<Setup, String> {
    let refused = match cell.map(CellJoin::join_current_thread) {
        None | Some(Ok(())) => None,
        Some(Err(e)) if e.code == ErrorCode::Permission => Some(format!(
            "worker {index} could not join cell {:?}, so it runs best-effort: {e}",
            cell.map_or("", CellJoin::cell)
        )),
        Some(Err(e)) => return Err(e.to_string()),
    };
    let policy = sched::get_policy(0).map_err(|e| e.to_string())?;
    Ok(Setup {
        info: WorkerInfo {
            index,
            tid: tessera_sys::proc::current_tid(),
            policy,
        },
        refused,
    })
}

/// A running cell runtime. Dropping it stops it (use [`Runtime::stop`] for
/// the report and errors).
pub struct Runtime {
    threads: Vec<(WorkerThread, EventFd)>,
    notify: Option<NotifyThread>,
    stop: Arc<AtomicBool>,
    stats: Arc<[TaskStats]>,
    names: Vec<String>,
    workers: Vec<WorkerInfo>,
    guarantee: Guarantee,
    warnings: Vec<String>,
    epoch_ns: u64,
}

impl Runtime {
    pub fn builder(config: RuntimeConfig) -> Builder {
        Builder::new(config)
    }

    pub fn guarantee(&self) -> &Guarantee {
        &self.guarantee
    }

    pub fn workers(&self) -> &[WorkerInfo] {
        &self.workers
    }

    /// What runs degraded (e.g. memory not locked).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The epoch on `CLOCK_MONOTONIC`: periodic releases are at epoch +
    /// offset + k · period.
    pub fn epoch_ns(&self) -> u64 {
        self.epoch_ns
    }

    /// A task's statistics now.
    pub fn counters(&self, task: TaskId) -> TaskCounters {
        self.stats[task.0].snapshot()
    }

    /// Stops the workers (a running job finishes first), delivers the
    /// pending notifications, and reports.
    pub fn stop(mut self) -> Result<RunReport, RuntimeError> {
        let dropped_notices = self.shutdown()?;
        let tasks = self
            .names
            .iter()
            .enumerate()
            .map(|(i, name)| TaskReport {
                id: TaskId(i),
                name: name.clone(),
                counters: self.stats[i].snapshot(),
            })
            .collect();
        Ok(RunReport {
            tasks,
            dropped_notices,
        })
    }

    fn shutdown(&mut self) -> Result<u64, RuntimeError> {
        self.stop.store(true, Ordering::Release);
        for (_, waker) in &self.threads {
            waker.signal();
        }
        let mut outcome = Ok(());
        for (thread, _) in self.threads.drain(..) {
            let result = match thread.join() {
                Ok(r) => r.map_err(RuntimeError::Sys),
                Err(_) => Err(RuntimeError::Panicked),
            };
            outcome = outcome.and(result);
        }
        let dropped = match self.notify.take() {
            Some(n) => n.stop().map_err(|()| RuntimeError::Panicked)?,
            None => 0,
        };
        outcome.map(|()| dropped)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if self.notify.is_some() {
            let _ = self.shutdown();
        }
    }
}
