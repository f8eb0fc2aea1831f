//! `tessera bench guard-scale`: what guarding a full session costs — JACK2
//! at its client limit and PipeWire with as many pw-jack clients — and how
//! soon a new client is reserved. For each server: a daemon of its own, the
//! server, `tessera guard` asking that daemon, and `tessera-jack-peer`
//! opening the load clients one after another on a staircase, then holding
//! them. Measured: the guard's and the daemon's CPU (their processes' user
//! and system time, with the tools they run: the guard's `pw-mon`) while
//! the clients join and once all are in, and for every client thread the
//! time from when it turned real-time (JACK2 and PipeWire's libjack make a
//! client's thread SCHED_FIFO just before its first cycle) to when it read
//! SCHED_DEADLINE, by polling its policy every [`POLL`]; the same polls of
//! the steady phase read the client process's budgets ([`Budgets`]: how
//! often they change, reserved against used). The load clients share one
//! process; after the steady phase, applications — one client each, a
//! process of their own, as on a desktop — join one after another, and
//! their threads are timed the same way ([`Applications`]).
//!
//! It owns the daemon and its directory (reset and removed however the run
//! ends) and drives the audio-server subject's run for the rest; it must
//! never judge the figures.

use crate::jack_peer::{PeerClients, Window};
use crate::subject::audio_server::{AudioServerRun, GuardPlace};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_broker::paths::Paths;
use tessera_broker::Session;
use tessera_measure::Summary;
use tessera_scenario::{AudioClient, AudioServerSubject, GuardSettings, ServerKind, ServerSched};
use tessera_sys::clock::monotonic_ns;
use tessera_sys::proc::{self, Pid};
use tessera_sys::sched::{self, Policy, Tid};

/// How often the clients' threads' policies are read.
pub const POLL: Duration = Duration::from_millis(2);
/// The guard's control interval (its default): the goal for a new client.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// Settling after the last client joined, before the steady phase.
const SETTLE: Duration = Duration::from_secs(2);

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub servers: Vec<ServerKind>,
    /// Load clients per server; None: JACK2's limit (64 clients in all,
    /// less the guard's, the monitor's and the server's own), 64 on PipeWire.
    pub clients: Option<usize>,
    /// Between two clients joining.
    pub join_every: Duration,
    /// How long all clients run together.
    pub steady: Duration,
    pub frames: u32,
    pub rate: u32,
    /// Each client's work, fraction of the period.
    pub load: f64,
    /// Applications (one client each, a process of their own) started one
    /// every `join_every` once the steady phase is over.
    pub applications: usize,
    /// The `tessera` binary (the daemon).
    pub tessera: PathBuf,
}

/// JACK2's CLIENT_NUM is 64, the server's own driver and freewheel
/// clients included; the guard's client and the peer's monitor take two.
pub const JACK2_LOAD_CLIENTS: usize = 60;
/// PipeWire's pw-jack clients, as many as JACK2's maximum.
pub const PIPEWIRE_LOAD_CLIENTS: usize = 64;

/// CPU of one process over a phase.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Cpu {
    /// % of one core.
    pub guard_pct: f64,
    pub daemon_pct: f64,
    pub total_pct: f64,
}

/// One server's run.
#[derive(Debug, Clone, Serialize)]
pub struct ServerResult {
    pub server: String,
    pub clients: usize,
    pub period_us: f64,
    /// While the clients joined.
    pub joining: Cpu,
    /// All clients in, after settling.
    pub steady: Cpu,
    pub steady_s: f64,
    /// From a client thread turning real-time to it reading SCHED_DEADLINE, ms.
    pub to_reservation_ms: Summary,
    /// Client threads seen real-time, and how many were reserved.
    pub threads_seen: usize,
    pub threads_reserved: usize,
    /// Of those never reserved, the ones that had exited by the end: short
    /// threads a client made real-time for less than the guard's policy
    /// poll (libpipewire starts and ends some as a client opens), which no
    /// reservation could have served.
    pub exited_unreserved: usize,
    /// At the last poll: client threads real-time and not reserved — what
    /// the goal counts — and client threads SCHED_DEADLINE (some reserved
    /// before a 2 ms poll saw them real-time, so not in `threads_reserved`).
    pub unreserved_at_end: usize,
    pub deadline_at_end: usize,
    /// Reserved within one control interval of the guard.
    pub within_interval: usize,
    /// The threads reserved later than that, slowest first.
    pub slow: Vec<SlowThread>,
    /// Xruns the monitor client counted (PipeWire's libjack tells of none).
    pub xruns: u64,
    /// The graph's cycles in the steady phase, as the clients recorded
    /// them: what ran, what ended after its period, and the periods lost
    /// (no cycle at all) — how PipeWire's overruns show.
    pub steady_cycles: u64,
    pub steady_late: u64,
    pub steady_lost: u64,
    /// The client process's reservations in the steady phase, read at
    /// every poll: what drives the daemon's work and the guard's batches.
    pub steady_budgets: Budgets,
    /// The applications started after the steady phase, each a new
    /// process: how soon their threads were reserved.
    pub applications: Applications,
    pub notes: Vec<String>,
}

/// New client processes joining the guarded session, as applications do
/// on a desktop (the load clients above share one process).
#[derive(Debug, Clone, Serialize)]
pub struct Applications {
    pub started: usize,
    /// Their threads seen real-time, and how many were reserved.
    pub threads_seen: usize,
    pub threads_reserved: usize,
    /// Of those never reserved, the ones gone by the end (short threads).
    pub exited_unreserved: usize,
    pub within_interval: usize,
    /// From a thread turning real-time to it reading SCHED_DEADLINE, ms.
    pub to_reservation_ms: Summary,
    pub slow: Vec<SlowThread>,
}

/// A client thread reserved later than one control interval after it
/// turned real-time.
#[derive(Debug, Clone, Serialize)]
pub struct SlowThread {
    pub tid: Tid,
    /// Its name when it was first seen real-time.
    pub name: String,
    /// When it turned real-time, s after the run began.
    pub real_time_at_s: f64,
    pub to_reservation_ms: f64,
}

/// The client process's reserved threads over the steady phase.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Budgets {
    /// Budget changes (runtime or period) seen between two polls, per second.
    pub changes_per_s: f64,
    /// CPUs reserved, on average over the polls.
    pub reserved_cpus: f64,
    /// CPUs the reserved threads used.
    pub used_cpus: f64,
    /// `reserved_cpus ÷ used_cpus`.
    pub reserved_per_used: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub interval_ms: u64,
    pub servers: Vec<ServerResult>,
}

/// Runs every server in turn; needs root.
pub fn run(options: &Options, mut progress: impl FnMut(&str)) -> Result<Results, String> {
    let mut servers = Vec::new();
    for &kind in &options.servers {
        progress(&format!("{}: starting", kind.name()));
        servers.push(run_one(kind, options, &mut progress)?);
    }
    Ok(Results {
        interval_ms: INTERVAL.as_millis() as u64,
        servers,
    })
}

/// A daemon of the bench's own, stopped, reset and removed when dropped.
struct Daemon {
    dir: PathBuf,
    child: Child,
}

impl Daemon {
    fn start(tessera: &Path) -> Result<Daemon, String> {
        let dir = std::env::temp_dir().join(format!("tessera-guard-scale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let log = std::fs::File::create(dir.join("daemon.log")).map_err(|e| e.to_string())?;
        let child = Command::new(tessera)
            .args(["daemon", "--run-dir"])
            .arg(&dir)
            .stdin(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("start {} daemon: {e}", tessera.display()))?;
        let mut daemon = Daemon { dir, child };
        let start = Instant::now();
        while Session::daemon_at(&Paths::at(&daemon.dir)).is_err() {
            if daemon.child.try_wait().ok().flatten().is_some() || start.elapsed().as_secs() > 10 {
                let log =
                    std::fs::read_to_string(daemon.dir.join("daemon.log")).unwrap_or_default();
                return Err(format!("the daemon did not answer: {log}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(daemon)
    }

    fn pid(&self) -> Pid {
        self.child.id() as Pid
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Session::embedded(Paths::at(&self.dir)).reset();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn subject(kind: ServerKind, options: &Options) -> AudioServerSubject {
    let clients = options.clients.unwrap_or(match kind {
        ServerKind::Jack => JACK2_LOAD_CLIENTS,
        ServerKind::PipeWire => PIPEWIRE_LOAD_CLIENTS,
    });
    AudioServerSubject {
        server: kind,
        frames: options.frames,
        rate: options.rate,
        priority: 70,
        clients: (0..clients)
            .map(|i| AudioClient {
                load: options.load,
                start: options.join_every * i as u32,
                stop: None,
            })
            .collect(),
        network: None,
    }
}

/// When each client thread was first seen real-time and first reserved,
/// and, once [`Seen::start_steady`] was called, how the client process's
/// budgets moved.
#[derive(Default)]
struct Seen {
    real_time: BTreeMap<Tid, u64>,
    /// Each thread's name when first seen real-time.
    names: BTreeMap<Tid, String>,
    reserved: BTreeMap<Tid, u64>,
    /// The last poll's census.
    last: Census,
    steady: Option<Steady>,
}

/// The client process's threads at one poll.
#[derive(Default)]
struct Census {
    alive: BTreeSet<Tid>,
    real_time: usize,
    deadline: usize,
}

/// The steady phase's readings of the client process's reservations.
struct Steady {
    at: Instant,
    /// Each reserved thread's budget at the last poll (runtime, period).
    budgets: BTreeMap<Tid, (Duration, Duration)>,
    /// Each thread's CPU time when the phase began, ns.
    cpu_at_start: BTreeMap<Tid, u64>,
    changes: u64,
    polls: u64,
    /// Σ over polls of the CPUs reserved at that poll.
    reserved_sum: f64,
}

impl Seen {
    /// Reads every thread of `pid` once.
    fn poll(&mut self, pid: Pid) {
        let now = monotonic_ns();
        let mut reserved_cpus = 0.0;
        let mut census = Census::default();
        for tid in proc::threads_of(pid).unwrap_or_default() {
            census.alive.insert(tid);
            match sched::get_policy(tid) {
                Ok(Policy::Fifo { .. } | Policy::RoundRobin { .. }) => {
                    if let std::collections::btree_map::Entry::Vacant(first) =
                        self.real_time.entry(tid)
                    {
                        first.insert(now);
                        self.names.insert(tid, proc::thread_name(pid, tid));
                    }
                    census.real_time += 1;
                }
                Ok(Policy::Deadline(p)) => {
                    census.deadline += 1;
                    if self.real_time.contains_key(&tid) {
                        self.reserved.entry(tid).or_insert(now);
                    }
                    reserved_cpus += p.runtime.as_secs_f64() / p.period.as_secs_f64();
                    if let Some(steady) = &mut self.steady {
                        let budget = (p.runtime, p.period);
                        let before = steady.budgets.insert(tid, budget);
                        steady.changes += u64::from(before.is_some_and(|b| b != budget));
                    }
                }
                _ => {}
            }
        }
        if let Some(steady) = &mut self.steady {
            steady.polls += 1;
            steady.reserved_sum += reserved_cpus;
        }
        self.last = census;
    }

    /// Threads seen real-time, never reserved, and gone at the last poll.
    fn exited_unreserved(&self) -> usize {
        self.unreserved_gone(&self.last.alive)
    }

    /// Threads seen real-time, never reserved, and not in `alive`.
    fn unreserved_gone(&self, alive: &BTreeSet<Tid>) -> usize {
        self.real_time
            .keys()
            .filter(|tid| !self.reserved.contains_key(tid) && !alive.contains(tid))
            .count()
    }

    /// From now on, counts the budget changes of `pid`'s reserved threads.
    fn start_steady(&mut self, pid: Pid) {
        let cpu_at_start = proc::threads_of(pid)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|tid| Some((tid, proc::thread_cpu_ns(pid, tid).ok()?)))
            .collect();
        self.steady = Some(Steady {
            at: Instant::now(),
            budgets: BTreeMap::new(),
            cpu_at_start,
            changes: 0,
            polls: 0,
            reserved_sum: 0.0,
        });
    }

    /// The steady phase's figures: the CPU used is that of the threads
    /// reserved at the last poll.
    fn steady_budgets(&self, pid: Pid) -> Budgets {
        let Some(steady) = &self.steady else {
            return Budgets::default();
        };
        let span = steady.at.elapsed().as_secs_f64().max(1e-9);
        let used_ns: u64 = steady
            .budgets
            .keys()
            .filter_map(|&tid| {
                let start = steady.cpu_at_start.get(&tid)?;
                Some(proc::thread_cpu_ns(pid, tid).ok()?.saturating_sub(*start))
            })
            .sum();
        let reserved_cpus = steady.reserved_sum / steady.polls.max(1) as f64;
        let used_cpus = used_ns as f64 / 1e9 / span;
        Budgets {
            changes_per_s: steady.changes as f64 / span,
            reserved_cpus,
            used_cpus,
            reserved_per_used: reserved_cpus / used_cpus.max(1e-9),
        }
    }

    /// Each reserved thread's delay, ms.
    fn delays_ms(&self) -> Vec<f64> {
        self.delays().map(|(_, _, ms)| ms).collect()
    }

    /// Each reserved thread, when it turned real-time (ns) and how long it
    /// waited for its reservation (ms).
    fn delays(&self) -> impl Iterator<Item = (Tid, u64, f64)> + '_ {
        self.reserved.iter().filter_map(|(&tid, at)| {
            let from = *self.real_time.get(&tid)?;
            Some((tid, from, (at - from) as f64 / 1e6))
        })
    }

    /// The threads reserved more than `limit_ms` after turning real-time,
    /// slowest first; times from `t0_ns`.
    fn slow(&self, limit_ms: f64, t0_ns: u64) -> Vec<SlowThread> {
        let mut slow: Vec<SlowThread> = self
            .delays()
            .filter(|&(_, _, ms)| ms > limit_ms)
            .map(|(tid, from, ms)| SlowThread {
                tid,
                name: self.names.get(&tid).cloned().unwrap_or_default(),
                real_time_at_s: from.saturating_sub(t0_ns) as f64 / 1e9,
                to_reservation_ms: ms,
            })
            .collect();
        slow.sort_by(|a, b| b.to_reservation_ms.total_cmp(&a.to_reservation_ms));
        slow
    }
}

/// Starts `options.applications` one-client processes one every
/// `join_every`, polling their threads as [`Seen`] does the load clients',
/// and [`APPLICATIONS_SETTLE`] more after the last.
fn join_applications(
    run: &AudioServerRun,
    options: &Options,
    t0: u64,
    progress: &mut impl FnMut(&str),
) -> Result<Applications, String> {
    let n = options.applications;
    let lifetime = applications_span(options) + APPLICATIONS_SETTLE;
    let mut seen = Seen::default();
    let mut started = Vec::new();
    for i in 0..n {
        started.push(run.start_application(i, options.load, lifetime)?);
        poll_for(&mut seen, &started, options.join_every);
    }
    poll_for(&mut seen, &started, APPLICATIONS_SETTLE);
    let alive: BTreeSet<Tid> = started
        .iter()
        .flat_map(|a| proc::threads_of(a.pid()).unwrap_or_default())
        .collect();
    let exited_unreserved = seen.unreserved_gone(&alive);
    let delays = seen.delays_ms();
    let interval_ms = INTERVAL.as_secs_f64() * 1e3;
    progress(&format!(
        "applications: {n} started, {} of their threads real-time, {} reserved",
        seen.real_time.len(),
        seen.reserved.len()
    ));
    Ok(Applications {
        started: n,
        threads_seen: seen.real_time.len(),
        threads_reserved: seen.reserved.len(),
        exited_unreserved,
        within_interval: delays.iter().filter(|&&d| d <= interval_ms).count(),
        to_reservation_ms: Summary::from_samples(&delays, None),
        slow: seen.slow(interval_ms, t0),
    })
}

/// Polls the threads of every application in `started` every [`POLL`] for
/// `span`.
fn poll_for(seen: &mut Seen, started: &[PeerClients], span: Duration) {
    let until = Instant::now() + span;
    while Instant::now() < until {
        started.iter().for_each(|a| seen.poll(a.pid()));
        std::thread::sleep(POLL);
    }
}

/// From the first application's start to the last one's polls.
fn applications_span(options: &Options) -> Duration {
    options.join_every * options.applications as u32 + APPLICATIONS_SETTLE
}

/// How long the applications are watched after the last one started.
const APPLICATIONS_SETTLE: Duration = Duration::from_secs(1);

/// The guard's and the daemon's CPU time now, theirs and their children's, ns.
fn cpu_now(guard: Pid, daemon: Pid) -> (u64, u64) {
    (
        with_live_children_cpu_ns(guard),
        with_live_children_cpu_ns(daemon),
    )
}

/// `pid`'s CPU time, with its children's: those it has waited for and those
/// still running (the guard's `pw-mon` runs as long as the guard).
fn with_live_children_cpu_ns(pid: Pid) -> u64 {
    let cpu = |p: Pid| proc::process_and_children_cpu_ns(p).unwrap_or(0);
    cpu(pid) + proc::children_of(pid).into_iter().map(cpu).sum::<u64>()
}

fn cpu_over(before: (u64, u64), after: (u64, u64), span: Duration) -> Cpu {
    let pct = |a: u64, b: u64| (b.saturating_sub(a)) as f64 * 100.0 / span.as_nanos().max(1) as f64;
    let guard_pct = pct(before.0, after.0);
    let daemon_pct = pct(before.1, after.1);
    Cpu {
        guard_pct,
        daemon_pct,
        total_pct: guard_pct + daemon_pct,
    }
}

fn run_one(
    kind: ServerKind,
    options: &Options,
    progress: &mut impl FnMut(&str),
) -> Result<ServerResult, String> {
    let daemon = Daemon::start(&options.tessera)?;
    let subject = subject(kind, options);
    let clients = subject.clients.len();
    let joining = options.join_every * clients as u32;
    let total = joining + SETTLE + options.steady;
    // The guard as users run it: its record (`--record`, a row per thread
    // per interval for the scenarios' budget figures) was a tenth of its
    // CPU here, and this bench reads none of it.
    let place = GuardPlace {
        core: None,
        broker_dir: Some(daemon.dir.clone()),
        record: false,
    };
    let sched = ServerSched::Guard(GuardSettings::default());
    // The load clients stay in while the applications join.
    let session = total + applications_span(options) + APPLICATIONS_SETTLE;
    let mut run = AudioServerRun::start_on(&subject, sched, None, session, &place)?;
    let (peer, guard) = run.pids();
    let guard = guard.ok_or("the guard did not start")?;
    let t0 = monotonic_ns() + 200_000_000;
    run.release(t0)?;
    let mut seen = Seen::default();
    let start = Instant::now() + Duration::from_millis(200);
    let first = (Instant::now(), cpu_now(guard, daemon.pid()));
    let mut marks = Vec::new();
    for (phase_end, name) in [
        (joining, "joined"),
        (joining + SETTLE, "settled"),
        (total, "end"),
    ] {
        while start.elapsed() < phase_end {
            seen.poll(peer);
            std::thread::sleep(POLL);
        }
        marks.push((Instant::now(), cpu_now(guard, daemon.pid())));
        if name == "settled" {
            seen.start_steady(peer);
        }
        progress(&format!(
            "{}: {name} at {:.0} s: {} client threads real-time, {} reserved; now {} real-time \
             unreserved, {} SCHED_DEADLINE",
            kind.name(),
            start.elapsed().as_secs_f64(),
            seen.real_time.len(),
            seen.reserved.len(),
            seen.last.real_time,
            seen.last.deadline
        ));
    }
    let budgets = seen.steady_budgets(peer);
    let applications = join_applications(&run, options, t0, progress)?;
    let data = run.finish();
    let steady = Window {
        from_ns: t0 + (joining + SETTLE).as_nanos() as u64,
        to_ns: t0 + total.as_nanos() as u64,
        t0_ns: t0,
    };
    let cycles = data.cycles_over(&steady).unwrap_or_default();
    let delays = seen.delays_ms();
    let interval_ms = INTERVAL.as_secs_f64() * 1e3;
    let within = delays.iter().filter(|&&d| d <= interval_ms).count();
    Ok(ServerResult {
        server: kind.name().to_string(),
        clients,
        period_us: subject.period().as_secs_f64() * 1e6,
        joining: cpu_over(first.1, marks[0].1, marks[0].0 - first.0),
        steady: cpu_over(marks[1].1, marks[2].1, marks[2].0 - marks[1].0),
        steady_s: (marks[2].0 - marks[1].0).as_secs_f64(),
        to_reservation_ms: Summary::from_samples(&delays, None),
        threads_seen: seen.real_time.len(),
        threads_reserved: seen.reserved.len(),
        exited_unreserved: seen.exited_unreserved(),
        unreserved_at_end: seen.last.real_time,
        deadline_at_end: seen.last.deadline,
        within_interval: within,
        slow: seen.slow(interval_ms, t0),
        xruns: data.record.as_ref().map(|r| r.xruns).unwrap_or(0),
        steady_cycles: cycles.cycles,
        steady_late: cycles.late,
        steady_lost: cycles.lost,
        steady_budgets: budgets,
        applications,
        notes: data.notes,
    })
}
