//! The live side of attribution: opens the tracepoints of
//! [`crate::decode::TRACEPOINTS`] — switches, wake-ups, migrations and the
//! interrupts on every CPU, filtered in the kernel to the watched threads
//! (and their task clock counted in each CPU's `sched_switch` group); the
//! faults, timers and system calls of the thread's own context per watched
//! thread ([`crate::decode::Kind::read_per_thread`]) — each
//! scope writing into a ring sized to the watched threads' rate, drains
//! the rings, orders the events, folds them into each thread's
//! [`Timeline`] and judges every cycle. A [`Recorder`] does the same from a
//! thread of its own, for a run that only wants the result at its end.
//!
use crate::attribute::{Judge, TaskClock, Watch};
use crate::causes::{Causes, Miss};
use crate::chain::Chain;
use crate::decode::{Decoder, Event, Kind, Layout, Timers, What, TASK_CLOCK, TRACEPOINTS};
use crate::error::WhyError;
use crate::format;
use crate::timeline::Timeline;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;
use tessera_sys::perf::{self, Ring, Scope, Tracepoint, RECORD_LOST, RECORD_SAMPLE};

/// A ring holds this long of its records at the watched threads' rate:
/// several drains' worth (they come every 50–100 ms), for a reader kept
/// off its CPU by the very load it watches.
const RING_MARGIN_S: f64 = 0.5;
/// Bytes a watched thread's cycle writes into a CPU's ring (its wake-up,
/// its switches in and out, a preemption's pair: some 130 bytes each with
/// the sample's header, time, CPU, period and group counts; the tick's
/// and the hrtimers' entries and exits while it runs: some 90 bytes each)
/// and into its own (the return from its wait, a timer it arms, a yield,
/// a fault: some 90 bytes each).
const CPU_BYTES_PER_CYCLE: f64 = 6.0 * 160.0 + 10.0 * 96.0;
const OWN_BYTES_PER_CYCLE: f64 = 8.0 * 96.0;
/// A ring's bounds in pages (64 KiB to 2 MiB with 4 KiB pages).
const MIN_RING_PAGES: usize = 16;
const MAX_RING_PAGES: usize = 512;
/// The shortest cycle a thread is assumed to have (the kernel's shortest
/// SCHED_DEADLINE period), for sizing.
const SHORTEST_CYCLE_NS: u64 = 100_000;
/// Events newer than this are held back one drain: another CPU's ring may
/// still hold older ones.
const HOLD_BACK_NS: u64 = 20_000_000;
/// How often a [`Recorder`] drains the rings.
const DRAIN_EVERY: Duration = Duration::from_millis(50);

/// What a run's attribution found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    /// Why the kernel's events could not be read, when they could not:
    /// then every miss the caller counts is "unknown".
    pub unavailable: Option<String>,
    pub watched: Vec<Watch>,
    /// Cycles judged (each thread's whole cycles seen).
    pub cycles: u64,
    /// Records read from the rings (what tracing cost the kernel to write).
    #[serde(default)]
    pub records: u64,
    /// Records the kernel dropped because a ring was full (each loss
    /// restarts the timelines of the threads whose events it held; a miss
    /// in a cycle begun before the records resumed is "unknown (records
    /// lost)").
    pub lost: u64,
    pub misses: Vec<Miss>,
    pub causes: Causes,
    /// Threads that could not be added once the trace had begun, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_watched: Vec<String>,
}

impl Attribution {
    pub fn unavailable(e: &WhyError) -> Attribution {
        Attribution {
            unavailable: Some(format!("{e}; fix: {}", e.fix())),
            ..Attribution::default()
        }
    }

    /// The misses whose records were lost (their cause "unknown").
    pub fn lost_misses(&self) -> usize {
        self.misses.iter().filter(|m| m.records_lost).count()
    }

    /// The `n` longest misses, longest first.
    pub fn worst(&self, n: usize) -> Vec<&Miss> {
        let mut all: Vec<&Miss> = self.misses.iter().collect();
        all.sort_by(|a, b| b.response_us.total_cmp(&a.response_us));
        all.truncate(n);
        all
    }
}

/// A thread watched as its scheduling says: a SCHED_DEADLINE thread by its
/// reservation (deadline, period, runtime as budget), any other by the
/// deadline or period given; given values override the reservation's.
pub fn watch(
    tid: i32,
    deadline_ns: Option<u64>,
    period_ns: Option<u64>,
    budget_ns: Option<u64>,
) -> Result<Watch, WhyError> {
    let policy = tessera_sys::sched::get_policy(tid).map_err(|e| WhyError::Watch {
        tid,
        cause: e.cause,
        fix: "give the id of a running thread (`ls /proc/PID/task`)".into(),
    })?;
    let reservation = match policy {
        tessera_sys::sched::Policy::Deadline(p) => Some(p),
        _ => None,
    };
    let ns = |d: Duration| d.as_nanos() as u64;
    let deadline = deadline_ns
        .or(reservation.map(|p| ns(p.deadline)))
        .or(period_ns);
    let Some(deadline_ns) = deadline else {
        return Err(WhyError::Watch {
            tid,
            cause: format!(
                "it runs under {} and no deadline or period was given",
                policy.name()
            ),
            fix: "give --deadline (or --period) for threads without a reservation".into(),
        });
    };
    Ok(Watch {
        tid,
        deadline_ns,
        period_ns: period_ns.or(reservation.map(|p| ns(p.period))),
        budget_ns: budget_ns.or(reservation.map(|p| ns(p.runtime))),
        chain: None,
    })
}

/// The events of one scope and their ring — a CPU's (the watched
/// threads' switches, wake-ups and migrations there, their task clock
/// counted) or a watched thread's own — and the last record read from it
/// (where records lost after it are marked).
struct Scoped {
    scope: Scope,
    ring: Ring,
    /// Each event with its kind (a CPU's are filtered to the watched
    /// threads by it).
    events: Vec<(Tracepoint, Kind)>,
    last_ns: u64,
    last_cpu: u32,
}

impl Scoped {
    /// Moves the ring's records into `pending` as events, counting them in
    /// `result`; records lost are marked after the last one read before
    /// them, until the first one after them (or `now`: they were lost
    /// before the kernel could write the mark).
    fn read(
        &mut self,
        decoder: &Decoder,
        pending: &mut Vec<Event>,
        result: &mut Attribution,
        now: u64,
    ) {
        let tid = match self.scope {
            Scope::Thread(tid) => Some(tid),
            Scope::Cpu(_) => None,
        };
        let (last_ns, last_cpu) = (&mut self.last_ns, &mut self.last_cpu);
        let mut open_loss: Option<usize> = None;
        self.ring.drain(|kind, body| match kind {
            RECORD_SAMPLE => {
                result.records += 1;
                if let Some(e) = decoder.sample(body) {
                    if let Some(What::Lost { until_ns, .. }) =
                        open_loss.take().map(|i| &mut pending[i].what)
                    {
                        *until_ns = e.time_ns;
                    }
                    (*last_ns, *last_cpu) = (e.time_ns, e.cpu);
                    pending.push(e);
                }
            }
            RECORD_LOST => {
                result.lost += lost_count(body);
                open_loss = Some(pending.len());
                pending.push(Event {
                    time_ns: *last_ns,
                    cpu: *last_cpu,
                    what: What::Lost { tid, until_ns: now },
                });
            }
            _ => {}
        });
    }
}

/// What each CPU runs, as far as the watched threads' events say: a
/// switch there involves a watched thread, so the task it switched to is
/// current until the next (a switch between two unwatched tasks, unseen,
/// leaves an unwatched one current either way); and whether the current
/// one is in an interrupt (its own events say so when it is watched).
#[derive(Debug, Default)]
struct Running {
    on: HashMap<u32, (i32, u32)>,
}

impl Running {
    /// Follows `event`, and names the waker of a wake-up: the thread
    /// current on its CPU, unless an interrupt did it.
    fn see(&mut self, event: &mut Event) {
        let cpu = event.cpu;
        match &mut event.what {
            What::Switch { next, .. } => {
                self.on.insert(cpu, (next.pid, 0));
            }
            What::InterruptEntry { pid } => self.nest(cpu, *pid, 1),
            What::InterruptExit { pid } => self.nest(cpu, *pid, -1),
            What::Waking { waker, .. } => {
                *waker = self
                    .on
                    .get(&cpu)
                    .filter(|(_, depth)| *depth == 0)
                    .map(|(c, _)| *c);
            }
            _ => {}
        }
    }

    /// An interrupt began (`step` 1) or ended (-1) while `pid` ran on `cpu`.
    fn nest(&mut self, cpu: u32, pid: i32, step: i32) {
        if let Some((current, depth)) = self.on.get_mut(&cpu) {
            if *current == pid {
                *depth = depth.saturating_add_signed(step);
            }
        }
    }
}

/// Reads the watched threads' events and judges their cycles as they end.
pub struct Tracer {
    scopes: Vec<Scoped>,
    decoder: Decoder,
    kinds: Kinds,
    /// Pages of each CPU's ring.
    cpu_pages: usize,
    clock: TaskClock,
    threads: BTreeMap<i32, (Timeline, Judge)>,
    chains: BTreeMap<u32, Chain>,
    running: Running,
    cells: HashMap<i32, String>,
    pending: Vec<Event>,
    result: Attribution,
}

impl Tracer {
    /// Starts reading the events of `watches`' threads: on every online
    /// CPU those in others' contexts, per thread their own; `cells` names
    /// the cell of every thread in one (to say whether a thread that held
    /// a CPU is in a cell).
    pub fn start(watches: &[Watch], cells: HashMap<i32, String>) -> Result<Tracer, WhyError> {
        Tracer::start_with_room(watches, cells, 0.0)
    }

    /// [`Tracer::start`], with the CPUs' rings sized for `room_cycles_per_s`
    /// more cycles a second: threads [`Tracer::watch_more`] will add.
    pub fn start_with_room(
        watches: &[Watch],
        cells: HashMap<i32, String>,
        room_cycles_per_s: f64,
    ) -> Result<Tracer, WhyError> {
        let tids: Vec<i32> = watches.iter().map(|w| w.tid).collect();
        let (decoder, kinds) = read_tracepoints()?;
        let online = tessera_sys::kernel::online_cpus().map_err(WhyError::unavailable)?;
        let all_cycles: f64 = watches.iter().map(cycles_per_s).sum::<f64>() + room_cycles_per_s;
        let cpu_pages = ring_pages(all_cycles * CPU_BYTES_PER_CYCLE);
        let mut scopes = Vec::with_capacity(online.len() + watches.len());
        for cpu in online {
            scopes.push(open_cpu(cpu, &kinds, &tids, cpu_pages)?);
        }
        for e in scopes.iter().flat_map(|c| &c.events) {
            e.0.enable().map_err(WhyError::unavailable)?;
        }
        let mut tracer = Tracer {
            scopes,
            decoder,
            kinds,
            cpu_pages,
            clock: task_clock(),
            threads: BTreeMap::new(),
            chains: BTreeMap::new(),
            running: Running::default(),
            cells,
            pending: vec![],
            result: Attribution::default(),
        };
        tracer.add_own(watches)?;
        Ok(tracer)
    }

    /// [`Tracer::watch_more`], a refusal noted in the result rather than
    /// returned (the recorder's thread has no one to return it to).
    fn watch_more_noting(&mut self, watches: &[Watch]) {
        if let Err(e) = self.watch_more(watches) {
            let tids: Vec<i32> = watches.iter().map(|w| w.tid).collect();
            self.result
                .not_watched
                .push(format!("threads {tids:?}: {e}; fix: {}", e.fix()));
        }
    }

    /// Watches more threads from now on (those already watched are left
    /// as they are). A tracepoint's filter is set once, so each CPU's
    /// events are opened again, filtered to every watched thread, and take
    /// over from the old ones: what happened in between is lost to every
    /// timeline, which begins again at each thread's next sleep.
    pub fn watch_more(&mut self, watches: &[Watch]) -> Result<(), WhyError> {
        let new: Vec<Watch> = watches
            .iter()
            .filter(|w| !self.threads.contains_key(&w.tid))
            .copied()
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let tids: Vec<i32> = self
            .threads
            .keys()
            .copied()
            .chain(new.iter().map(|w| w.tid))
            .collect();
        for scope in self.scopes.iter_mut() {
            let Scope::Cpu(cpu) = scope.scope else {
                continue;
            };
            let fresh = open_cpu(cpu, &self.kinds, &tids, self.cpu_pages)?;
            for e in &scope.events {
                let _ = e.0.disable();
            }
            // Every old record is before the mark, every new one after it
            // (its task clock counts from zero again).
            let now = tessera_sys::clock::monotonic_ns();
            for e in &fresh.events {
                e.0.enable().map_err(WhyError::unavailable)?;
            }
            scope.read(&self.decoder, &mut self.pending, &mut self.result, now);
            self.pending.push(Event {
                time_ns: now,
                cpu: cpu as u32,
                what: What::Lost {
                    tid: None,
                    until_ns: now,
                },
            });
            *scope = fresh;
        }
        self.add_own(&new)
    }

    /// Opens and enables `watches`' own events and starts their timelines
    /// (and their chains' judges).
    fn add_own(&mut self, watches: &[Watch]) -> Result<(), WhyError> {
        for w in watches {
            let pages = ring_pages(cycles_per_s(w) * OWN_BYTES_PER_CYCLE);
            let own = open_scope(Scope::Thread(w.tid), &self.kinds.own(), None, pages)?;
            for e in own.iter().flat_map(|c| &c.events) {
                e.0.enable().map_err(WhyError::unavailable)?;
            }
            self.scopes.extend(own);
            self.threads
                .insert(w.tid, (Timeline::new(w.tid), Judge::new(*w, self.clock)));
            if let Some(link) = w.chain.filter(|l| l.driver) {
                self.chains
                    .entry(link.chain)
                    .or_insert_with(|| Chain::new(w.deadline_ns, w.period_ns, self.clock));
            }
            self.join_chain(w);
            self.result.watched.push(*w);
        }
        Ok(())
    }

    /// Counts `w`'s thread in its chain, and the chain's threads watched
    /// before its driver in it.
    fn join_chain(&mut self, w: &Watch) {
        let Some(link) = w.chain else {
            return;
        };
        let Some(chain) = self.chains.get_mut(&link.chain) else {
            return;
        };
        let fellows = self.result.watched.iter().chain(std::iter::once(w));
        for f in fellows.filter(|f| f.chain.is_some_and(|l| l.chain == link.chain)) {
            chain.join(f.tid);
        }
    }

    /// Judges the cycles ended by the events read so far (all but the
    /// newest few ms); returns the misses among them.
    pub fn poll(&mut self) -> Vec<Miss> {
        let horizon = tessera_sys::clock::monotonic_ns().saturating_sub(HOLD_BACK_NS);
        self.drain(horizon)
    }

    /// Stops reading and judges every cycle the events ended.
    pub fn stop(mut self) -> Attribution {
        for e in self.scopes.iter().flat_map(|c| &c.events) {
            let _ = e.0.disable();
        }
        self.drain(u64::MAX);
        let mut misses: Vec<Miss> = self.chains.values_mut().flat_map(Chain::finish).collect();
        misses.sort_by_key(|m| m.release_ns);
        self.record(&misses);
        self.result
    }

    fn drain(&mut self, horizon: u64) -> Vec<Miss> {
        let now = tessera_sys::clock::monotonic_ns();
        for scope in &mut self.scopes {
            scope.read(&self.decoder, &mut self.pending, &mut self.result, now);
        }
        self.pending.sort_by_key(|e| e.time_ns);
        let ready = self.pending.partition_point(|e| e.time_ns <= horizon);
        let mut misses = vec![];
        for mut event in self.pending.drain(..ready) {
            self.running.see(&mut event);
            for (timeline, judge) in self.threads.values_mut() {
                let Some(cycle) = timeline.push(&event) else {
                    continue;
                };
                self.result.cycles += 1;
                let Some(link) = judge.watch.chain else {
                    misses.extend(judge.judge(&cycle, &self.cells));
                    continue;
                };
                // A member of a chain whose driver is not watched (yet) has
                // nothing to be judged by.
                if let Some(chain) = self.chains.get_mut(&link.chain) {
                    misses.extend(chain.push(&cycle, link.driver, &self.cells));
                }
            }
        }
        self.record(&misses);
        misses
    }

    fn record(&mut self, misses: &[Miss]) {
        for m in misses {
            self.result.causes.add(m);
        }
        self.result.misses.extend(misses.iter().cloned());
    }
}

/// `PERF_RECORD_LOST`: `u64 id, u64 lost`.
fn lost_count(body: &[u8]) -> u64 {
    body.get(8..16)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_ne_bytes)
}

/// A tracepoint this kernel has: its id, what it tells, whether
/// attribution needs it.
struct Known {
    id: u64,
    kind: Kind,
    required: bool,
}

/// The tracepoints this kernel has: sampled ones, and the task clock
/// counted, if it has it.
struct Kinds {
    sampled: Vec<Known>,
    task_clock: Option<Known>,
}

impl Kinds {
    /// Those read per CPU (`sched_switch` first: it leads the ring).
    fn others(&self) -> Vec<&Known> {
        self.sampled
            .iter()
            .filter(|k| !k.kind.read_per_thread())
            .collect()
    }

    /// Those read per watched thread.
    fn own(&self) -> Vec<&Known> {
        self.sampled
            .iter()
            .filter(|k| k.kind.read_per_thread())
            .collect()
    }
}

/// The decoder of every tracepoint this kernel has, and their ids and
/// kinds; tracefs is mounted for the reading if it was not, then unmounted.
fn read_tracepoints() -> Result<(Decoder, Kinds), WhyError> {
    let (dir, mounted_here) = match perf::tracefs_mount() {
        Some(dir) => (dir, false),
        None => {
            perf::mount_tracefs().map_err(WhyError::unavailable)?;
            (perf::TRACEFS.into(), true)
        }
    };
    let events = dir.join("events");
    let read = read_formats(&events, TRACEPOINTS).and_then(|sampled| {
        let (name, kind) = TASK_CLOCK;
        let counted = read_formats(&events, &[(name, kind, false)])?;
        Ok((sampled, counted))
    });
    if mounted_here {
        let _ = perf::unmount_tracefs();
    }
    let (sampled, counted) = read?;
    // Hidden addresses (kptr_restrict) or no kallsyms: timers told by mode.
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    let mut decoder = Decoder::new(Timers::from_kallsyms(&kallsyms));
    let known = |(kind, required, format): (Kind, bool, format::Format)| Known {
        id: format.id,
        kind,
        required,
    };
    for (kind, _, format) in &sampled {
        decoder.add(format.id, Layout::new(*kind, format)?);
    }
    let kinds = Kinds {
        sampled: sampled.into_iter().map(known).collect(),
        task_clock: counted.into_iter().map(known).next(),
    };
    Ok((decoder, kinds))
}

fn read_formats(
    events: &Path,
    tracepoints: &[(&str, Kind, bool)],
) -> Result<Vec<(Kind, bool, format::Format)>, WhyError> {
    let mut formats = vec![];
    for &(name, kind, required) in tracepoints {
        match std::fs::read_to_string(events.join(name).join("format")) {
            Ok(text) => formats.push((kind, required, format::parse(name, &text)?)),
            Err(_) if !required => {}
            Err(e) => {
                return Err(WhyError::Unavailable {
                    cause: format!("tracepoint {name}: {e}"),
                    fix: "run as root on a kernel with CONFIG_FTRACE and the sched tracepoints"
                        .into(),
                })
            }
        }
    }
    Ok(formats)
}

/// One CPU's tracepoints in others' contexts, filtered to `tids`, all
/// writing into the ring of the first (`sched_switch`), whose records also
/// read the task clock counted in its group.
fn open_cpu(cpu: usize, kinds: &Kinds, tids: &[i32], pages: usize) -> Result<Scoped, WhyError> {
    let mut scoped =
        open_scope(Scope::Cpu(cpu), &kinds.others(), Some(tids), pages)?.ok_or_else(|| {
            WhyError::Unavailable {
                cause: format!("no scheduling tracepoint opens on cpu {cpu}"),
                fix: "run as root on a kernel with CONFIG_FTRACE and the sched tracepoints".into(),
            }
        })?;
    if let Some(k) = &kinds.task_clock {
        let counted = Tracepoint::open_counter(k.id, &scoped.events[0].0)
            .and_then(|e| filtered(e, k.kind, Some(tids)));
        scoped.events.extend(counted.ok().map(|e| (e, k.kind)));
    }
    Ok(scoped)
}

/// `kinds` opened in `scope` (filtered to `tids` when given), all writing
/// into the ring of the first, of `pages` pages; None when none opened.
/// An optional tracepoint the kernel will not sample is left out.
fn open_scope(
    scope: Scope,
    kinds: &[&Known],
    tids: Option<&[i32]>,
    pages: usize,
) -> Result<Option<Scoped>, WhyError> {
    let bytes = Ring::bytes(pages);
    let mut events = vec![];
    for k in kinds {
        match Tracepoint::open(k.id, scope, bytes).and_then(|e| filtered(e, k.kind, tids)) {
            Ok(e) => events.push((e, k.kind)),
            Err(e) if k.required => return Err(WhyError::unavailable(e)),
            Err(_) => {}
        }
    }
    let Some(first) = events.first() else {
        return Ok(None);
    };
    let ring = Ring::map(&first.0, pages).map_err(WhyError::unavailable)?;
    for e in &events[1..] {
        e.0.redirect_to(&first.0).map_err(WhyError::unavailable)?;
    }
    let last_cpu = match scope {
        Scope::Cpu(cpu) => cpu as u32,
        Scope::Thread(_) => 0,
    };
    Ok(Some(Scoped {
        scope,
        ring,
        events,
        last_ns: 0,
        last_cpu,
    }))
}

/// `e` kept to `tids` by the kernel, when given; a thread's own event
/// sees only that thread's hits, and is kept to the calls of its kind.
fn filtered(e: Tracepoint, kind: Kind, tids: Option<&[i32]>) -> tessera_sys::Result<Tracepoint> {
    let filter = match tids {
        Some(tids) => Some(kind.filter(tids)),
        None => kind.own_filter(),
    };
    if let Some(filter) = filter {
        e.set_filter(&filter)?;
    }
    Ok(e)
}

/// How many cycles a second `w`'s thread may run: one a period (or a
/// deadline, without one).
fn cycles_per_s(w: &Watch) -> f64 {
    let cycle = w.period_ns.unwrap_or(w.deadline_ns).max(SHORTEST_CYCLE_NS);
    1e9 / cycle as f64
}

/// Pages (a power of two) of a ring holding [`RING_MARGIN_S`] of records
/// written at `bytes_per_s`.
fn ring_pages(bytes_per_s: f64) -> usize {
    let pages = (bytes_per_s * RING_MARGIN_S / Ring::bytes(1) as f64).ceil() as usize;
    pages
        .clamp(MIN_RING_PAGES, MAX_RING_PAGES)
        .next_power_of_two()
}

/// Whether this kernel's task clock counts interrupt time: it does unless
/// it was built with CONFIG_IRQ_TIME_ACCOUNTING (read from its config when
/// /boot has it; the kernel's default otherwise).
fn task_clock() -> TaskClock {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let config = std::fs::read_to_string(format!("/boot/config-{}", release.trim()));
    TaskClock {
        counts_interrupts: !config.is_ok_and(|c| c.contains("CONFIG_IRQ_TIME_ACCOUNTING=y")),
    }
}

/// A tracer drained from a thread of its own until stopped.
pub struct Recorder {
    stop: Arc<AtomicBool>,
    told: Sender<Told>,
    thread: std::thread::JoinHandle<Attribution>,
}

/// What a recorder's thread is told while it records.
enum Told {
    /// More threads to watch.
    Watch(Vec<Watch>),
    /// Every cell's members now: threads join cells after the recording
    /// starts (a music application's network thread did), and a thread
    /// that held a watched one's CPU was named as in no cell.
    Cells(HashMap<i32, String>),
}

impl Recorder {
    /// Starts recording, with room in the rings for `room_cycles_per_s`
    /// more cycles a second ([`Recorder::watch_more`]); when the events
    /// cannot be read, the error says why (the caller records
    /// [`Attribution::unavailable`]).
    pub fn start(
        watches: &[Watch],
        cells: HashMap<i32, String>,
        room_cycles_per_s: f64,
    ) -> Result<Recorder, WhyError> {
        let mut tracer = Tracer::start_with_room(watches, cells, room_cycles_per_s)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (told, hear): (Sender<Told>, Receiver<Told>) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("tessera-why".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(DRAIN_EVERY);
                    tracer.poll();
                    for told in hear.try_iter() {
                        match told {
                            Told::Watch(watches) => tracer.watch_more_noting(&watches),
                            Told::Cells(cells) => tracer.cells = cells,
                        }
                    }
                }
                tracer.stop()
            })
            .map_err(|e| WhyError::Unavailable {
                cause: format!("start the recorder's thread: {e}"),
                fix: "raise the thread limit".into(),
            })?;
        Ok(Recorder { stop, told, thread })
    }

    /// Watches more threads from the next drain on (those already watched
    /// are left as they are).
    pub fn watch_more(&self, watches: Vec<Watch>) {
        // The recorder's thread only ends when stopped: nothing to tell.
        let _ = self.told.send(Told::Watch(watches));
    }

    /// Names each thread's cell from the next drain on (`cells`: every
    /// cell's members now), for the threads that held a watched one's CPU.
    pub fn see_cells(&self, cells: HashMap<i32, String>) {
        let _ = self.told.send(Told::Cells(cells));
    }

    /// Stops and returns every miss with its cause.
    pub fn stop(self) -> Attribution {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_else(|_| Attribution {
            unavailable: Some("the recorder's thread panicked".into()),
            ..Attribution::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_up_names_the_thread_current_on_its_cpu_unless_an_interrupt_did_it() {
        use crate::decode::Task;
        let mut running = Running::default();
        let task = |pid| Task {
            pid,
            comm: String::new(),
            prio: 10,
        };
        let mut waker_of = |cpu, what: What| {
            let mut e = Event {
                time_ns: 0,
                cpu,
                what,
            };
            running.see(&mut e);
            match e.what {
                What::Waking { waker, .. } => waker,
                _ => None,
            }
        };
        let waking = || What::Waking {
            pid: 6,
            waker: None,
        };
        waker_of(
            0,
            What::Switch {
                prev: task(1),
                prev_state: 1,
                next: task(5),
                task_clock_ns: None,
            },
        );
        assert_eq!(waker_of(0, waking()), Some(5));
        assert_eq!(waker_of(1, waking()), None, "nothing seen on cpu 1");
        waker_of(0, What::InterruptEntry { pid: 5 });
        assert_eq!(waker_of(0, waking()), None, "the interrupt woke it");
        waker_of(0, What::InterruptExit { pid: 5 });
        assert_eq!(waker_of(0, waking()), Some(5));
    }

    #[test]
    fn rings_hold_half_a_second_of_the_watched_threads_records() {
        let page = Ring::bytes(1) as f64;
        for bytes_per_s in [0.0, 1e3, 1e5, 3e5, 1e6, 1e7, 1e9] {
            let pages = ring_pages(bytes_per_s);
            assert!(pages.is_power_of_two());
            assert!((MIN_RING_PAGES..=MAX_RING_PAGES).contains(&pages));
            let held_s = pages as f64 * page / bytes_per_s;
            assert!(
                held_s >= RING_MARGIN_S || pages == MAX_RING_PAGES,
                "{bytes_per_s}"
            );
        }
        let audio = Watch {
            tid: 1,
            deadline_ns: 2_666_666,
            period_ns: Some(2_666_666),
            budget_ns: None,
            chain: None,
        };
        assert!((cycles_per_s(&audio) - 375.0).abs() < 0.1);
        let unbounded = Watch {
            deadline_ns: 0,
            period_ns: None,
            ..audio
        };
        assert_eq!(cycles_per_s(&unbounded), 10_000.0);
    }
}
