//! The live side of attribution: opens the tracepoints of
//! [`crate::decode::TRACEPOINTS`] on every CPU, filtered in the kernel to
//! the watched threads (and counts their task clock in each CPU's
//! `sched_switch` group), drains the rings, orders the events, folds them
//! into each thread's [`Timeline`] and judges every cycle. A [`Recorder`]
//! does the same from a thread of its own, for a run that only wants the
//! result at its end.
//!
//! It owns tracefs (mounted only to read the tracepoints' ids and formats,
//! and unmounted again if it was not mounted before), the reading of the
//! timer functions' addresses in `/proc/kallsyms`, and the perf events
//! (disabled and closed when the tracer is dropped). It must never change
//! any thread's scheduling.

use crate::attribute::{Judge, TaskClock, Watch};
use crate::causes::{Causes, Miss};
use crate::decode::{Decoder, Event, Kind, Layout, Timers, What, TASK_CLOCK, TRACEPOINTS};
use crate::error::WhyError;
use crate::format;
use crate::timeline::Timeline;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tessera_sys::perf::{self, Ring, Tracepoint, RECORD_LOST, RECORD_SAMPLE};

/// Pages of one CPU's ring (256 KiB with 4 KiB pages): at the ~1 MB/s a
/// kHz audio thread's events take, half a second of margin between drains.
const RING_PAGES: usize = 64;
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
    /// Records the kernel dropped because a ring was full (each one
    /// restarts the threads' timelines).
    pub lost: u64,
    pub misses: Vec<Miss>,
    pub causes: Causes,
}

impl Attribution {
    pub fn unavailable(e: &WhyError) -> Attribution {
        Attribution {
            unavailable: Some(format!("{e}; fix: {}", e.fix())),
            ..Attribution::default()
        }
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
    })
}

/// One CPU's events and their ring; the time of the last record read
/// from it (where records lost after it are marked).
struct CpuEvents {
    cpu: u32,
    ring: Ring,
    events: Vec<Tracepoint>,
    last_ns: u64,
}

/// Reads the watched threads' events and judges their cycles as they end.
pub struct Tracer {
    cpus: Vec<CpuEvents>,
    decoder: Decoder,
    threads: BTreeMap<i32, (Timeline, Judge)>,
    cells: HashMap<i32, String>,
    pending: Vec<Event>,
    result: Attribution,
}

impl Tracer {
    /// Starts reading the events of `watches`' threads on every online
    /// CPU; `cells` names the cell of every thread in one (to say whether
    /// a thread that held a CPU is in a cell).
    pub fn start(watches: &[Watch], cells: HashMap<i32, String>) -> Result<Tracer, WhyError> {
        let tids: Vec<i32> = watches.iter().map(|w| w.tid).collect();
        let (decoder, kinds) = read_tracepoints()?;
        let online = tessera_sys::kernel::online_cpus().map_err(WhyError::unavailable)?;
        let mut cpus = Vec::with_capacity(online.len());
        for cpu in online {
            cpus.push(open_cpu(cpu, &kinds, &tids)?);
        }
        for e in cpus.iter().flat_map(|c| &c.events) {
            e.enable().map_err(WhyError::unavailable)?;
        }
        let clock = task_clock();
        Ok(Tracer {
            cpus,
            decoder,
            threads: watches
                .iter()
                .map(|w| (w.tid, (Timeline::new(w.tid), Judge::new(*w, clock))))
                .collect(),
            cells,
            pending: vec![],
            result: Attribution {
                watched: watches.to_vec(),
                ..Attribution::default()
            },
        })
    }

    /// Judges the cycles ended by the events read so far (all but the
    /// newest few ms); returns the misses among them.
    pub fn poll(&mut self) -> Vec<Miss> {
        let horizon = tessera_sys::clock::monotonic_ns().saturating_sub(HOLD_BACK_NS);
        self.drain(horizon)
    }

    /// Stops reading and judges every cycle the events ended.
    pub fn stop(mut self) -> Attribution {
        for e in self.cpus.iter().flat_map(|c| &c.events) {
            let _ = e.disable();
        }
        self.drain(u64::MAX);
        self.result
    }

    fn drain(&mut self, horizon: u64) -> Vec<Miss> {
        for cpu in &mut self.cpus {
            let (decoder, pending, lost) =
                (&self.decoder, &mut self.pending, &mut self.result.lost);
            let (id, last_ns) = (cpu.cpu, &mut cpu.last_ns);
            cpu.ring.drain(|kind, body| match kind {
                RECORD_SAMPLE => {
                    if let Some(e) = decoder.sample(body) {
                        *last_ns = e.time_ns;
                        pending.push(e);
                    }
                }
                // The records lost came after the last one read: the
                // timelines restart there, in time order.
                RECORD_LOST => {
                    *lost += lost_count(body);
                    pending.push(Event {
                        time_ns: *last_ns,
                        cpu: id,
                        what: What::Lost,
                    });
                }
                _ => {}
            });
        }
        self.pending.sort_by_key(|e| e.time_ns);
        let ready = self.pending.partition_point(|e| e.time_ns <= horizon);
        let mut misses = vec![];
        for event in self.pending.drain(..ready) {
            for (timeline, judge) in self.threads.values_mut() {
                if let Some(cycle) = timeline.push(&event) {
                    self.result.cycles += 1;
                    misses.extend(judge.judge(&cycle, &self.cells));
                }
            }
        }
        for m in &misses {
            self.result.causes.add(m);
        }
        self.result.misses.extend(misses.iter().cloned());
        misses
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

/// One CPU's tracepoints, filtered to `tids`, all writing into the ring
/// of the first (`sched_switch`), whose records also read the task clock
/// counted in its group. An optional tracepoint the kernel will not
/// sample (or count) is left out.
fn open_cpu(cpu: usize, kinds: &Kinds, tids: &[i32]) -> Result<CpuEvents, WhyError> {
    let bytes = Ring::bytes(RING_PAGES);
    let filtered = |e: Tracepoint, kind: Kind| -> tessera_sys::Result<Tracepoint> {
        e.set_filter(&kind.filter(tids))?;
        Ok(e)
    };
    let mut events = vec![];
    for k in &kinds.sampled {
        match Tracepoint::open(k.id, cpu, bytes).and_then(|e| filtered(e, k.kind)) {
            Ok(e) => events.push(e),
            Err(e) if k.required => return Err(WhyError::unavailable(e)),
            Err(_) => {}
        }
    }
    let ring = Ring::map(&events[0], RING_PAGES).map_err(WhyError::unavailable)?;
    for e in &events[1..] {
        e.redirect_to(&events[0]).map_err(WhyError::unavailable)?;
    }
    if let Some(k) = &kinds.task_clock {
        let counted = Tracepoint::open_counter(k.id, &events[0]).and_then(|e| filtered(e, k.kind));
        events.extend(counted.ok());
    }
    Ok(CpuEvents {
        cpu: cpu as u32,
        ring,
        events,
        last_ns: 0,
    })
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
    thread: std::thread::JoinHandle<Attribution>,
}

impl Recorder {
    /// Starts recording; when the events cannot be read, the error says
    /// why (the caller records [`Attribution::unavailable`]).
    pub fn start(watches: &[Watch], cells: HashMap<i32, String>) -> Result<Recorder, WhyError> {
        let mut tracer = Tracer::start(watches, cells)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tessera-why".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(DRAIN_EVERY);
                    tracer.poll();
                }
                tracer.stop()
            })
            .map_err(|e| WhyError::Unavailable {
                cause: format!("start the recorder's thread: {e}"),
                fix: "raise the thread limit".into(),
            })?;
        Ok(Recorder { stop, thread })
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
