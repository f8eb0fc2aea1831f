//! The engine: runs cycles of the compiled graph on a driver thread and N
//! worker threads, and takes graph edits from the control thread.
//!
//! A cycle: the driver thread waits for its [`Driver`] to start a cycle, picks
//! up a newly published graph if there is one (`switch`), resets activation
//! counters, pushes the source nodes into the ready queue and wakes workers
//! (`activation`). Every thread claims ready nodes, runs them and signals
//! their successors; independent branches therefore run in parallel. The
//! driver thread takes part unless it is kept for communication
//! (`driver_runs_nodes`). When the last node finishes, the driver ends the
//! cycle (driver output, profiler, xrun report) and only then waits for the
//! next one, so cycle n+1 never starts while n runs.
//!
//! This module owns the threads and the cycle. The cycle path must never
//! allocate, lock, print or block other than in the futex waits of
//! `activation` and the driver's own wait; the engine's threads are marked
//! real-time with `tessera_rtguard` so tests can check that.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tessera_rtguard::RtGuard;
use tessera_sys::clock;

use crate::activation::{arm, signal, CycleEnd, ReadyQueue, WorkerWake};
use crate::cell::CycleCell;
use crate::driver::{CycleStart, Driver, DriverError};
use crate::graph::{CompiledGraph, CompiledNode, Graph, GraphError, Limits};
use crate::node::ProcessContext;
use crate::notify::{
    self, Callbacks, ControlNotice, ControlNotifier, NoCallbacks, RtNotice, RtNotifier,
};
use crate::profiler::{BudgetProbe, CycleRecord, NodeRecord, NodeTiming, Profile, Profiler};
use crate::switch::{self, GraphPublisher, GraphReceiver, PublishTimeout};
use crate::xrun::XrunReport;
use crate::StreamConfig;

/// Which engine thread a [`ThreadSetup`] hook runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadRole {
    Driver,
    /// Worker `k`, 1-based (0 is the driver in profiles).
    Worker(u16),
}

/// Error of a thread setup hook.
pub type SetupError = Box<dyn std::error::Error + Send + Sync>;

/// Called on each engine thread when it starts, before its first cycle: the
/// cell runtime joins the thread to the cell's reservation and locks memory
/// here. If any call fails, the engine does not start.
pub type ThreadSetup = Arc<dyn Fn(ThreadRole) -> Result<(), SetupError> + Send + Sync>;

/// How long a worker sleeps before re-checking the stop flag.
const WORKER_POLL: Duration = Duration::from_millis(100);
/// Bound of each futex wait of the driver for the end of a cycle: between
/// waits a driver that runs nodes runs those no worker has taken.
const DRIVER_POLL: Duration = Duration::from_millis(100);
/// How long an edit waits for the driver to take previously published graphs.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(2);
/// Graphs that can wait for the driver at once.
const PUBLISH_DEPTH: usize = 4;
/// Real-time notices (xruns, graph switches) queued for the notify thread.
const NOTICE_CAPACITY: usize = 256;
/// Weight of the newest cycle in [`Engine::cpu_load`].
const LOAD_SMOOTHING: f64 = 0.1;

/// How an engine is built.
pub struct EngineConfig {
    /// Worker threads besides the driver thread.
    pub workers: usize,
    /// Whether the driver thread runs nodes too. `false` gives the driver
    /// thread to communication alone, as seed 000's synth cell did: it
    /// starts the cycle, the workers run every node, it ends the cycle.
    /// Needs at least one worker.
    pub driver_runs_nodes: bool,
    /// Most nodes a graph may have: sizes the ready queue and profiler rows.
    pub max_nodes: usize,
    /// Events each event port buffer holds.
    pub event_capacity: usize,
    /// Cycles the profiler keeps.
    pub profile_cycles: usize,
    /// A cycle's deadline, relative to its start; `None`: its period.
    pub deadline: Option<Duration>,
    /// Measure each node's thread CPU time (two `clock_gettime` system
    /// calls per node, about 1 µs on a virtual machine). Graphs of many
    /// small nodes turn it off; their nodes' CPU time reads 0.
    pub node_cpu_time: bool,
    pub thread_setup: Option<ThreadSetup>,
    pub budget_probe: Option<Box<dyn BudgetProbe>>,
    pub callbacks: Box<dyn Callbacks>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            workers: 1,
            driver_runs_nodes: true,
            max_nodes: 64,
            event_capacity: 256,
            profile_cycles: 4096,
            deadline: None,
            node_cpu_time: true,
            thread_setup: None,
            budget_probe: None,
            callbacks: Box::new(NoCallbacks),
        }
    }
}

/// Why the engine could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    Publish(#[from] PublishTimeout),
    #[error("starting the engine's threads: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("thread setup failed on the {role:?} thread: {message}")]
    ThreadSetup { role: ThreadRole, message: String },
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error("an engine thread panicked")]
    Panicked,
    #[error(
        "no thread would run the nodes: the driver thread is kept for \
         communication and there are no workers; give the engine a worker"
    )]
    NoNodeThread,
}

/// What a run leaves behind.
#[derive(Debug)]
pub struct RunReport {
    pub profile: Profile,
    pub cycles: u64,
    pub xruns: u64,
    /// Process callbacks that panicked (the cycle went on without them).
    pub node_panics: u64,
    /// Real-time notices dropped because the notification thread lagged.
    pub dropped_notices: u64,
}

/// The cycle being run, written by the driver between cycles.
#[derive(Debug, Clone, Copy, Default)]
struct CycleInfo {
    number: u64,
    start_ns: u64,
    /// When the cycle was due: the start less the driver's wake-up
    /// latency.
    due_ns: u64,
    /// Tag of the cycle in the ready queue and the end-of-cycle word.
    tag: u32,
}

#[derive(Default)]
struct Stats {
    cycles: AtomicU64,
    xruns: AtomicU64,
    node_panics: AtomicU64,
    /// Version of the graph the driver runs.
    running_version: AtomicU64,
    /// Smoothed DSP load in percent, as f32 bits.
    cpu_load: AtomicU32,
}

/// State shared by the engine's threads.
struct Shared {
    graph: CycleCell<Box<CompiledGraph>>,
    cycle: CycleCell<CycleInfo>,
    package: CycleCell<Box<[u8]>>,
    output: CycleCell<Box<[u8]>>,
    queue: ReadyQueue,
    wake: WorkerWake,
    end: CycleEnd,
    /// Raised first: the driver finishes its cycle and returns.
    stop: AtomicBool,
    /// Raised once the driver returned, so no worker leaves mid-cycle.
    workers_stop: AtomicBool,
    /// 0: the period.
    deadline_ns: AtomicU64,
    node_cpu_time: bool,
    stats: Stats,
}

/// A running engine, owned by the control thread.
pub struct Engine {
    shared: Arc<Shared>,
    graph: Graph,
    stream: StreamConfig,
    limits: Limits,
    version: u64,
    publisher: GraphPublisher,
    notifier: ControlNotifier,
    driver: Option<JoinHandle<Result<Profiler, DriverError>>>,
    workers: Vec<JoinHandle<()>>,
}

impl Engine {
    /// Compiles `graph` for `stream`, starts the worker, driver and
    /// notification threads, runs the setup hook on each engine thread, and
    /// starts cycling.
    pub fn start(
        mut graph: Graph,
        stream: StreamConfig,
        driver: impl Driver,
        config: EngineConfig,
    ) -> Result<Engine, EngineError> {
        if !config.driver_runs_nodes && config.workers == 0 {
            return Err(EngineError::NoNodeThread);
        }
        let limits = Limits {
            max_nodes: config.max_nodes,
            event_capacity: config.event_capacity,
        };
        graph.set_node_limit(limits.max_nodes);
        let compiled = graph.compile(stream, limits, 0)?;
        let (package_size, output_size) = driver.packet_sizes();
        let shared = Arc::new(Shared {
            graph: CycleCell::new(Box::new(compiled)),
            cycle: CycleCell::new(CycleInfo::default()),
            package: CycleCell::new(vec![0; package_size].into_boxed_slice()),
            output: CycleCell::new(vec![0; output_size].into_boxed_slice()),
            queue: ReadyQueue::new(limits.max_nodes),
            wake: WorkerWake::default(),
            end: CycleEnd::default(),
            stop: AtomicBool::new(false),
            workers_stop: AtomicBool::new(false),
            deadline_ns: AtomicU64::new(deadline_ns(config.deadline)),
            node_cpu_time: config.node_cpu_time,
            stats: Stats::default(),
        });
        let (rt_notifier, notifier) =
            notify::start(config.callbacks, NOTICE_CAPACITY, stream).map_err(EngineError::Spawn)?;
        let (publisher, receiver) = switch::channel(PUBLISH_DEPTH);
        let mut engine = Engine {
            shared,
            graph,
            stream,
            limits,
            version: 0,
            publisher,
            notifier,
            driver: None,
            workers: Vec::new(),
        };
        engine.forward_changes();
        let driver_loop = DriverLoop {
            shared: Arc::clone(&engine.shared),
            driver: Box::new(driver),
            receiver,
            notifier: rt_notifier,
            profiler: Profiler::new(config.profile_cycles, limits.max_nodes),
            budget: config.budget_probe,
            cycle: 0,
            previous_start_ns: None,
            previous_xrun: false,
            runs_nodes: config.driver_runs_nodes,
            used_slots: 0,
            load: None,
        };
        engine.spawn_threads(config.workers, config.thread_setup, driver_loop)?;
        Ok(engine)
    }

    /// Applies `edit` to the graph and publishes the result: it runs from the
    /// start of a coming cycle, with no cycle dropped or repeated. Edits made
    /// before `edit` returns an error are published too.
    pub fn edit<R>(
        &mut self,
        edit: impl FnOnce(&mut Graph) -> Result<R, GraphError>,
    ) -> Result<R, EngineError> {
        let result = edit(&mut self.graph);
        self.publish()?;
        Ok(result?)
    }

    /// Changes buffer size and sample rate from a coming cycle on.
    pub fn set_stream_config(&mut self, stream: StreamConfig) -> Result<(), EngineError> {
        self.stream = stream;
        self.publish()
    }

    /// Sets the deadline of the coming cycles (`None`: their period).
    pub fn set_deadline(&self, deadline: Option<Duration>) {
        self.shared
            .deadline_ns
            .store(deadline_ns(deadline), Ordering::Relaxed);
    }

    /// The graph as last edited (possibly not yet running).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub fn stream_config(&self) -> StreamConfig {
        self.stream
    }

    /// Cycles completed.
    pub fn cycles(&self) -> u64 {
        self.shared.stats.cycles.load(Ordering::Acquire)
    }

    pub fn xruns(&self) -> u64 {
        self.shared.stats.xruns.load(Ordering::Relaxed)
    }

    /// Smoothed DSP load in percent (busy time / period, exponentially
    /// averaged), like `jack_cpu_load`.
    pub fn cpu_load(&self) -> f32 {
        f32::from_bits(self.shared.stats.cpu_load.load(Ordering::Relaxed))
    }

    /// Waits until at least `count` cycles completed; `false` on timeout.
    pub fn wait_for_cycles(&self, count: u64, timeout: Duration) -> bool {
        let give_up = Instant::now() + timeout;
        while self.cycles() < count {
            if Instant::now() >= give_up {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Waits until the graph as last edited runs (its first cycle started);
    /// `false` on timeout.
    pub fn wait_until_running(&self, timeout: Duration) -> bool {
        let give_up = Instant::now() + timeout;
        while self.shared.stats.running_version.load(Ordering::Acquire) != self.version {
            if Instant::now() >= give_up {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Stops the threads and returns the profile. An error of the driver is
    /// returned here (and reported to `Callbacks::shutdown` when it happened).
    pub fn stop(mut self) -> Result<RunReport, EngineError> {
        self.shut_down()
    }

    fn publish(&mut self) -> Result<(), EngineError> {
        let version = self.version + 1;
        let compiled = self.graph.compile(self.stream, self.limits, version)?;
        self.publisher
            .publish(Box::new(compiled), PUBLISH_TIMEOUT)?;
        self.version = version;
        self.forward_changes();
        Ok(())
    }

    fn forward_changes(&mut self) {
        for change in self.graph.take_changes() {
            self.notifier.notify(ControlNotice::Change(change));
        }
    }

    fn spawn_threads(
        &mut self,
        workers: usize,
        setup: Option<ThreadSetup>,
        driver_loop: DriverLoop,
    ) -> Result<(), EngineError> {
        let (ready_tx, ready_rx) = mpsc::channel();
        for index in 1..=workers as u16 {
            let (shared, setup, ready) =
                (Arc::clone(&self.shared), setup.clone(), ready_tx.clone());
            let role = ThreadRole::Worker(index);
            let handle = std::thread::Builder::new()
                .name(format!("tessera-worker-{index}"))
                .spawn(move || {
                    if report_setup(setup.as_deref(), role, &ready) {
                        worker_main(&shared, index);
                    }
                });
            let handle = handle.map_err(|e| self.abort_start(EngineError::Spawn(e)))?;
            self.workers.push(handle);
        }
        let (go_tx, go_rx) = mpsc::channel::<bool>();
        let handle = std::thread::Builder::new()
            .name("tessera-driver".into())
            .spawn(move || {
                let role = ThreadRole::Driver;
                if report_setup(setup.as_deref(), role, &ready_tx) && go_rx.recv() == Ok(true) {
                    driver_loop.run()
                } else {
                    Ok(driver_loop.profiler)
                }
            });
        self.driver = Some(handle.map_err(|e| self.abort_start(EngineError::Spawn(e)))?);
        for _ in 0..=workers {
            let outcome = ready_rx.recv().unwrap_or(Err(EngineError::Panicked));
            if let Err(error) = outcome {
                let _ = go_tx.send(false);
                return Err(self.abort_start(error));
            }
        }
        let _ = go_tx.send(true);
        Ok(())
    }

    /// Stops what `start` started and hands `error` back.
    fn abort_start(&mut self, error: EngineError) -> EngineError {
        let _ = self.shut_down();
        error
    }

    fn shut_down(&mut self) -> Result<RunReport, EngineError> {
        self.shared.stop.store(true, Ordering::Release);
        let driver = self.driver.take().map(JoinHandle::join);
        self.shared.workers_stop.store(true, Ordering::Release);
        self.shared.wake.notify(u32::MAX);
        let workers_ok = self.workers.drain(..).all(|w| w.join().is_ok());
        let outcome = match driver {
            Some(Ok(result)) => result.map_err(EngineError::from),
            Some(Err(_)) => Err(EngineError::Panicked),
            None => Ok(Profiler::new(1, 1)),
        };
        let reason = match &outcome {
            Ok(_) => "engine stopped".to_owned(),
            Err(error) => error.to_string(),
        };
        self.notifier.stop(&reason);
        self.publisher.free_retired();
        if !workers_ok {
            return Err(EngineError::Panicked);
        }
        let stats = &self.shared.stats;
        Ok(RunReport {
            profile: outcome?.into_profile(),
            cycles: stats.cycles.load(Ordering::Acquire),
            xruns: stats.xruns.load(Ordering::Relaxed),
            node_panics: stats.node_panics.load(Ordering::Relaxed),
            dropped_notices: self.notifier.dropped(),
        })
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if self.driver.is_some() {
            let _ = self.shut_down();
        }
    }
}

/// A cycle is an xrun if it ended after its scheduled start plus its
/// deadline — a driver woken late (its thread preempted) loses audio as
/// surely as a slow node — or if periods were lost since a previous cycle
/// that was on time (after a late cycle they are that xrun's, not a second).
fn is_xrun(start: &CycleStart, driver_end_ns: u64, deadline_ns: u64, previous_xrun: bool) -> bool {
    start.wakeup_latency_ns + driver_end_ns > deadline_ns
        || (start.skipped_periods > 0 && !previous_xrun)
}

fn deadline_ns(deadline: Option<Duration>) -> u64 {
    deadline.map_or(0, |d| d.as_nanos().max(1) as u64)
}

/// Runs the setup hook and tells the starting thread; `true` if it succeeded.
fn report_setup(
    setup: Option<&(dyn Fn(ThreadRole) -> Result<(), SetupError> + Send + Sync)>,
    role: ThreadRole,
    ready: &mpsc::Sender<Result<(), EngineError>>,
) -> bool {
    let outcome = setup
        .map_or(Ok(()), |hook| hook(role))
        .map_err(|e| EngineError::ThreadSetup {
            role,
            message: e.to_string(),
        });
    let ok = outcome.is_ok();
    let _ = ready.send(outcome);
    ok
}

fn worker_main(shared: &Shared, index: u16) {
    let _rt = RtGuard::enter();
    while !shared.workers_stop.load(Ordering::Acquire) {
        if let Some(position) = shared.queue.claim() {
            run_node(shared, position, index);
            continue;
        }
        shared.wake.sleep(
            || shared.queue.has_ready() || shared.workers_stop.load(Ordering::Acquire),
            WORKER_POLL,
        );
    }
}

/// Runs a claimed node and activates its successors.
fn run_node(shared: &Shared, position: u32, thread: u16) {
    // SAFETY: the caller claimed a node of the current cycle, so the driver
    // wrote the graph and the cycle info before publishing the queue head the
    // claim acquired, and will not write them again before this node is
    // counted finished at the end of this function.
    let (graph, info) = unsafe { (shared.graph.get(), *shared.cycle.get()) };
    let node = &graph.nodes[position as usize];
    let awake_ns = clock::monotonic_ns();
    prepare_ports(graph, node);
    let packet_out = (graph.packet_writer == Some(position)).then_some(&shared.output);
    let mut ctx = ProcessContext {
        graph,
        node,
        cycle: info.number,
        cycle_start_ns: info.start_ns,
        cycle_due_ns: info.due_ns,
        // SAFETY: the driver writes the package only between cycles.
        package: unsafe { shared.package.get() },
        packet_out,
    };
    let thread_cpu = || match shared.node_cpu_time {
        true => clock::thread_cpu_ns(),
        false => 0,
    };
    let cpu_start = thread_cpu();
    // SAFETY: a node is claimed by exactly one thread per cycle, and
    // consecutive cycles are ordered by the end-of-cycle handshake.
    let state = unsafe { node.state.get_mut() };
    // A panicking node must not take the engine down with it: the cycle goes
    // on and the panic is counted.
    if std::panic::catch_unwind(AssertUnwindSafe(|| state.process(&mut ctx))).is_err() {
        shared.stats.node_panics.fetch_add(1, Ordering::Relaxed);
    }
    let cpu_ns = thread_cpu().saturating_sub(cpu_start);
    let finished_ns = clock::monotonic_ns();
    // SAFETY: this node's timing is written by its runner only now; its
    // signaller wrote before pushing it, the driver reads after the cycle.
    let timing = unsafe { node.timing.get_mut() };
    timing.awake_ns = awake_ns;
    timing.finished_ns = finished_ns;
    timing.cpu_ns = cpu_ns;
    timing.thread = thread;
    activate_successors(shared, graph, node, finished_ns);
    shared.end.node_finished(info.tag);
}

/// Mixes multi-writer inputs into their own buffers and clears event outputs.
fn prepare_ports(graph: &CompiledGraph, node: &CompiledNode) {
    for input in node.audio_in.iter().filter(|i| !i.mix_from.is_empty()) {
        // SAFETY: a mix buffer belongs to this input alone; its writers are
        // finished predecessors, read-only until the cycle ends.
        let mix = unsafe { graph.audio[input.read as usize].get_mut() };
        mix.fill(0.0);
        for &writer in input.mix_from.iter() {
            // SAFETY: as above.
            let samples = unsafe { graph.audio[writer as usize].get() };
            for (sum, sample) in mix.iter_mut().zip(samples.iter()) {
                *sum += sample;
            }
        }
    }
    for input in node.event_in.iter().filter(|i| !i.mix_from.is_empty()) {
        // SAFETY: as for audio mix buffers.
        let merged = unsafe { graph.events[input.read as usize].get_mut() };
        // SAFETY: finished predecessors' buffers, read-only in this cycle.
        merged.merge_from(
            input
                .mix_from
                .iter()
                .map(|&w| unsafe { graph.events[w as usize].get() }),
        );
    }
    for &output in node.event_out.iter() {
        // SAFETY: only this node writes its outputs; readers run after it.
        unsafe { graph.events[output as usize].get_mut() }.clear();
    }
}

/// Decrements the successors' activation counters and makes ready those that
/// reach zero; the calling thread will take one itself, so it wakes workers
/// for the others only.
fn activate_successors(shared: &Shared, graph: &CompiledGraph, node: &CompiledNode, now_ns: u64) {
    let mut made_ready = 0;
    for &next in node.successors.iter() {
        let successor = &graph.nodes[next as usize];
        if signal(&successor.counter) {
            // SAFETY: the successor cannot run before it is pushed below, and
            // only the thread that brought its counter to zero gets here.
            unsafe { successor.timing.get_mut() }.signalled_ns = now_ns;
            shared.queue.push(next);
            made_ready += 1;
        }
    }
    if made_ready > 1 {
        shared.wake.notify(made_ready - 1);
    }
}

/// The running graph, seen from the driver thread.
fn current_graph(shared: &Shared) -> &CompiledGraph {
    // SAFETY: only the driver thread calls this, and only the driver thread
    // writes the graph slot (in `switch_graph`, while no reference from here
    // is alive); workers only read it.
    unsafe { shared.graph.get() }
}

/// The driver thread's state.
struct DriverLoop {
    shared: Arc<Shared>,
    driver: Box<dyn Driver>,
    receiver: GraphReceiver,
    notifier: RtNotifier,
    profiler: Profiler,
    budget: Option<Box<dyn BudgetProbe>>,
    cycle: u64,
    previous_start_ns: Option<u64>,
    /// Whether the previous cycle was an xrun (its overrun explains the
    /// periods this one skipped: one xrun, not two).
    previous_xrun: bool,
    /// Whether this thread runs nodes while it waits for the cycle's end.
    runs_nodes: bool,
    /// Ready-queue slots the last cycle filled.
    used_slots: usize,
    /// Smoothed DSP load (fraction), `None` before the first cycle.
    load: Option<f64>,
}

impl DriverLoop {
    fn run(mut self) -> Result<Profiler, DriverError> {
        let rt = RtGuard::enter();
        let outcome = self.cycles();
        drop(rt);
        match outcome {
            Ok(()) => Ok(self.profiler),
            Err(error) => {
                // Off the real-time section now: the message may allocate.
                self.notifier
                    .notify(RtNotice::DriverFailed(error.to_string()));
                Err(error)
            }
        }
    }

    fn cycles(&mut self) -> Result<(), DriverError> {
        loop {
            let period_ns = current_graph(&self.shared).stream.period_ns();
            // SAFETY: between cycles only the driver touches the package.
            let package = unsafe { self.shared.package.get_mut() };
            let Some(start) = self
                .driver
                .wait_cycle(period_ns, package, &self.shared.stop)?
            else {
                return Ok(());
            };
            let cpu_start_ns = clock::thread_cpu_ns();
            self.switch_graph();
            let end_ns = self.run_cycle(&start);
            // SAFETY: the cycle ended; nodes no longer touch the output.
            let output = unsafe { self.shared.output.get() };
            let written_ns = self.driver.end_cycle(output)?;
            self.account(start, end_ns, written_ns, cpu_start_ns);
        }
    }

    fn switch_graph(&mut self) {
        // SAFETY: between cycles the driver has the graph slot to itself.
        let current = unsafe { self.shared.graph.get_mut() };
        if self.receiver.switch(current) {
            let running = &self.shared.stats.running_version;
            running.store(current.version, Ordering::Release);
            let notice = RtNotice::GraphSwitched {
                version: current.version,
                cycle: self.cycle,
                stream: current.stream,
            };
            self.notifier.notify(notice);
        }
    }

    /// Runs one cycle of the current graph; returns when its last node
    /// finished.
    fn run_cycle(&mut self, start: &CycleStart) -> u64 {
        let (start_ns, tag) = (start.start_ns, (self.cycle as u32).wrapping_add(1));
        // SAFETY: between cycles only the driver touches the cycle info.
        unsafe {
            *self.shared.cycle.get_mut() = CycleInfo {
                number: self.cycle,
                start_ns,
                due_ns: start_ns.saturating_sub(start.wakeup_latency_ns),
                tag,
            }
        };
        let shared = &*self.shared;
        let graph = current_graph(shared);
        for node in graph.nodes.iter() {
            arm(&node.counter, node.predecessors);
            // SAFETY: no node runs between cycles.
            *unsafe { node.timing.get_mut() } = NodeTiming {
                signalled_ns: start_ns,
                ..NodeTiming::default()
            };
        }
        let nodes = graph.nodes.len();
        shared.end.reset(nodes as u32);
        shared.queue.reset(tag, self.used_slots);
        self.used_slots = nodes;
        if nodes == 0 {
            return start_ns;
        }
        for &source in graph.sources.iter() {
            shared.queue.push(source);
        }
        let sources = graph.sources.len() as u32;
        shared.wake.notify(if self.runs_nodes {
            sources - 1
        } else {
            sources
        });
        loop {
            if self.runs_nodes {
                while let Some(position) = shared.queue.claim() {
                    run_node(shared, position, 0);
                }
            }
            if shared.end.wait(tag, DRIVER_POLL) {
                break;
            }
        }
        // SAFETY: the cycle ended (acquired in `wait`): timings are final.
        graph
            .nodes
            .iter()
            .map(|node| unsafe { node.timing.get() }.finished_ns)
            .max()
            .unwrap_or(start_ns)
    }

    /// Profiles the cycle, reports an xrun, updates the load figure.
    fn account(
        &mut self,
        start: CycleStart,
        end_ns: u64,
        written_ns: Option<u64>,
        cpu_start_ns: u64,
    ) {
        let graph = current_graph(&self.shared);
        let nominal = graph.stream.period_ns();
        let deadline = match self.shared.deadline_ns.load(Ordering::Relaxed) {
            0 => nominal,
            set => set,
        };
        let driver_end = end_ns.saturating_sub(start.start_ns);
        let finished = start.wakeup_latency_ns + driver_end;
        let xrun = is_xrun(&start, driver_end, deadline, self.previous_xrun);
        let timings = || {
            graph.nodes.iter().map(|node| {
                // SAFETY: the cycle ended: timings are final and nobody
                // writes them.
                (node, unsafe { *node.timing.get() })
            })
        };
        let worker_cpu: u64 = timings()
            .filter(|(_, t)| t.thread != 0)
            .map(|(_, t)| t.cpu_ns)
            .sum();
        let dsp_load = driver_end as f64 / nominal as f64;
        let mut record = CycleRecord {
            cycle: self.cycle,
            start_ns: start.start_ns,
            period_ns: self
                .previous_start_ns
                .map_or(0, |p| start.start_ns.saturating_sub(p)),
            nominal_period_ns: nominal,
            deadline_ns: deadline,
            driver_end_ns: driver_end,
            dsp_load,
            xrun,
            skipped_periods: start.skipped_periods,
            wakeup_latency_ns: start.wakeup_latency_ns,
            thread_cpu_ns: clock::thread_cpu_ns().saturating_sub(cpu_start_ns) + worker_cpu,
            budget_set_ns: 0,
            budget_used_ns: 0,
            response_ns: written_ns.map(|w| w.saturating_sub(start.start_ns)),
            nodes: 0,
        };
        if let Some(probe) = self.budget.as_mut() {
            let budget = probe.sample(&record);
            record.budget_set_ns = budget.set_ns;
            record.budget_used_ns = budget.used_ns;
        }
        let (cycle, start_ns) = (self.cycle, start.start_ns);
        self.profiler.record(
            record,
            timings().map(|(node, t)| NodeRecord::new(cycle, start_ns, node.id.0, node.name, &t)),
        );
        if record.xrun {
            self.shared.stats.xruns.fetch_add(1, Ordering::Relaxed);
            let report = XrunReport::attribute(
                cycle,
                start_ns,
                deadline,
                finished,
                graph.critical_path,
                timings().map(|(node, t)| (node.id, node.name, t)),
            );
            self.notifier.notify(RtNotice::Xrun(report));
        }
        let load = self
            .load
            .map_or(dsp_load, |l| l + LOAD_SMOOTHING * (dsp_load - l));
        self.load = Some(load);
        let percent = (load * 100.0) as f32;
        self.shared
            .stats
            .cpu_load
            .store(percent.to_bits(), Ordering::Relaxed);
        self.previous_start_ns = Some(start_ns);
        self.previous_xrun = record.xrun;
        self.cycle += 1;
        self.shared.stats.cycles.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(wakeup_latency_ns: u64, skipped_periods: u64) -> CycleStart {
        CycleStart {
            start_ns: 0,
            skipped_periods,
            wakeup_latency_ns,
        }
    }

    #[test]
    fn a_late_wake_up_counts_against_the_deadline() {
        assert!(!is_xrun(&start(100, 0), 800, 1000, false));
        assert!(
            is_xrun(&start(300, 0), 800, 1000, false),
            "woken 300 late, 800 of work: 100 over"
        );
        assert!(is_xrun(&start(0, 0), 1001, 1000, false));
    }

    #[test]
    fn lost_periods_are_one_xrun_not_two() {
        assert!(
            is_xrun(&start(0, 2), 100, 1000, false),
            "periods lost after an on-time cycle"
        );
        assert!(
            !is_xrun(&start(0, 2), 100, 1000, true),
            "already counted as the late cycle's"
        );
    }
}
