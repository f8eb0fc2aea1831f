//! The kernel's events as typed values: which tracepoints tessera reads,
//! the filter that keeps each to the watched threads, and the decoding of
//! a perf sample (time, CPU, its group's counts, raw tracepoint record)
//! into an [`Event`] through the fields' offsets from [`crate::format`];
//! and what a timer is for, by the kernel function it calls (from
//! `/proc/kallsyms`' text).
//!
//! Pure: bytes in, events out. It must never read a file or a ring, and
//! never panic on bytes it does not understand (they decode to nothing).

use crate::error::WhyError;
use crate::format::{Field, Format};
use std::collections::HashMap;

/// A task as a scheduling event names it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Task {
    pub pid: i32,
    pub comm: String,
    /// The kernel's priority: -1 for SCHED_DEADLINE, 0–98 for SCHED_FIFO
    /// and SCHED_RR (99 − rtprio), 100–139 for the others.
    pub prio: i32,
}

impl Task {
    pub fn is_deadline(&self) -> bool {
        self.prio < 0
    }

    /// The idle task (pid 0): the CPU had nothing else to run.
    pub fn is_idle(&self) -> bool {
        self.pid == 0
    }

    /// The stopper (`migration/N`), which preempts anything to move a task.
    pub fn is_stopper(&self) -> bool {
        self.comm.starts_with("migration/")
    }
}

impl Task {
    /// The idle task, for a switch-in the kernel did not report (it
    /// delivers no event while a CPU idles).
    pub fn idle() -> Task {
        Task {
            pid: 0,
            comm: "swapper".into(),
            prio: 120,
        }
    }
}

/// What a timer armed by a watched thread is for, by the function it calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// The thread's own wake-up: a sleep, a wait with a timeout, a timerfd,
    /// a POSIX timer or itimer.
    Wakeup,
    /// Its SCHED_DEADLINE reservation's replenishment (armed when it
    /// yields or is throttled).
    Replenishment,
    /// The kernel's own (a reservation's inactive timer, the hrtick, a
    /// driver's, armed while the thread happened to be current).
    Kernel,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// `sched_switch`: `prev` left the CPU in `prev_state` (0: still
    /// runnable; bit 0 S, bit 1 D, ...), `next` got it. `task_clock_ns`:
    /// the watched threads' task clock on this CPU so far (the sum of
    /// their `sched_stat_runtime`, counted by the kernel and read with the
    /// record), when it was counted; it leaves out stolen time, and
    /// interrupt time when the kernel accounts it apart.
    Switch {
        prev: Task,
        prev_state: u64,
        next: Task,
        task_clock_ns: Option<u64>,
    },
    /// `sched_waking`: `pid` is being made runnable, by `waker` (the
    /// watched thread current on the CPU, outside an interrupt) when the
    /// tracer knows it; the decoder never does.
    Waking {
        pid: i32,
        waker: Option<i32>,
    },
    /// `sched_migrate_task`: `pid` moves to `dest_cpu`.
    Migrate {
        pid: i32,
        dest_cpu: u32,
    },
    /// An interrupt or softirq began or ended while `pid` was current.
    InterruptEntry {
        pid: i32,
    },
    InterruptExit {
        pid: i32,
    },
    /// A page fault taken by `pid`.
    Fault {
        pid: i32,
    },
    /// `hrtimer_start` while `pid` was current: a timer asked for
    /// `soft_expires_ns` (CLOCK_MONOTONIC), for what `timer` says.
    TimerStart {
        pid: i32,
        soft_expires_ns: u64,
        timer: Timer,
    },
    /// `pid` called sched_yield (a SCHED_DEADLINE thread ends its job).
    Yield {
        pid: i32,
    },
    /// `pid` returned from a call it waits in (a sleep, a futex, a poll, a
    /// read, sched_yield): it runs again.
    Returned {
        pid: i32,
    },
    /// Records were lost from here to `until_ns` (the first record after
    /// them): a ring overflowed — a CPU's (every thread's events), or one
    /// thread's (`tid`: only its own). The cycles under way are forgotten,
    /// and one that began before `until_ns` is not judged by its parts.
    Lost {
        tid: Option<i32>,
        until_ns: u64,
    },
}

impl What {
    /// The thread that was current when it happened, for the events that
    /// happen in a thread's own context (so that it was on a CPU then).
    pub fn current(&self) -> Option<i32> {
        match *self {
            What::InterruptEntry { pid }
            | What::InterruptExit { pid }
            | What::Fault { pid }
            | What::TimerStart { pid, .. }
            | What::Yield { pid }
            | What::Returned { pid } => Some(pid),
            What::Switch { .. }
            | What::Waking { .. }
            | What::Migrate { .. }
            | What::Lost { .. } => None,
        }
    }
}

/// An event: when (CLOCK_MONOTONIC ns), on which CPU, what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub time_ns: u64,
    pub cpu: u32,
    pub what: What,
}

/// The kinds of tracepoint, by what they tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Switch,
    Waking,
    Migrate,
    Runtime,
    InterruptEntry,
    InterruptExit,
    Fault,
    TimerStart,
    Yield,
    Returned,
}

/// The tracepoints sampled: (group/name, kind, required). Without the
/// optional ones attribution still works, with fewer parts. Timer
/// interrupts are measured by their hrtimer callbacks (the tick is one):
/// x86's interrupt-vector tracepoints refuse perf sampling. The returns
/// from the calls a real-time thread waits in mark when it runs again
/// after a wake-up the kernel did not report (it delivers no event while a
/// CPU idles: neither the timer interrupt's wake-up nor the switch from
/// the idle task); `sched_switch` comes first: it leads each CPU's events.
/// The calls are read from the two raw syscall tracepoints, kept in the
/// kernel to the calls that matter ([`Kind::calls`]): one event each per
/// watched thread, where a tracepoint per call was ten. Those read per
/// thread are [`Kind::read_per_thread`].
pub const TRACEPOINTS: &[(&str, Kind, bool)] = &[
    ("sched/sched_switch", Kind::Switch, true),
    ("sched/sched_waking", Kind::Waking, true),
    ("sched/sched_migrate_task", Kind::Migrate, false),
    ("irq/irq_handler_entry", Kind::InterruptEntry, false),
    ("irq/irq_handler_exit", Kind::InterruptExit, false),
    ("irq/softirq_entry", Kind::InterruptEntry, false),
    ("irq/softirq_exit", Kind::InterruptExit, false),
    ("timer/hrtimer_expire_entry", Kind::InterruptEntry, false),
    ("timer/hrtimer_expire_exit", Kind::InterruptExit, false),
    ("exceptions/page_fault_user", Kind::Fault, false),
    ("exceptions/page_fault_kernel", Kind::Fault, false),
    ("timer/hrtimer_start", Kind::TimerStart, false),
    ("raw_syscalls/sys_enter", Kind::Yield, false),
    ("raw_syscalls/sys_exit", Kind::Returned, false),
];

/// The calls a real-time thread waits in (sleeps, futexes, polls, reads,
/// sched_yield): their return marks it running again.
const WAITING_CALLS: &[i64] = &[
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_futex,
    libc::SYS_epoll_pwait,
    libc::SYS_ppoll,
    libc::SYS_read,
    libc::SYS_sched_yield,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_epoll_wait,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_poll,
];

/// The tracepoint counted rather than sampled, in the group of each CPU's
/// `sched_switch`: the task clock's advances (`runtime` ns each), which a
/// thread that reads its CPU clock in a loop makes at every read (some
/// 10⁶ a second: sampled, they overflowed the rings).
pub const TASK_CLOCK: (&str, Kind) = ("sched/sched_stat_runtime", Kind::Runtime);

impl Kind {
    /// The fields decoded, in the order [`Layout::values`] gives them.
    fn fields(self) -> &'static [&'static str] {
        match self {
            Kind::Switch => &[
                "prev_comm",
                "prev_pid",
                "prev_prio",
                "prev_state",
                "next_comm",
                "next_pid",
                "next_prio",
            ],
            Kind::Waking => &["pid"],
            Kind::Migrate => &["pid", "dest_cpu"],
            Kind::Runtime => &["pid", "runtime"],
            Kind::TimerStart => &["common_pid", "softexpires", "mode", "function"],
            Kind::InterruptEntry
            | Kind::InterruptExit
            | Kind::Fault
            | Kind::Yield
            | Kind::Returned => &["common_pid"],
        }
    }

    /// Whether it happens only while the thread it concerns is current
    /// (interrupts while it runs, its faults, the timers it arms, its
    /// system calls), so that the current task's id (`common_pid`) names
    /// it. Switches, wake-ups, migrations and the task clock happen in
    /// other tasks' contexts too (a switch-in, a waker, the stopper).
    pub fn in_own_context(self) -> bool {
        match self {
            Kind::Switch | Kind::Waking | Kind::Migrate | Kind::Runtime => false,
            Kind::InterruptEntry
            | Kind::InterruptExit
            | Kind::Fault
            | Kind::TimerStart
            | Kind::Yield
            | Kind::Returned => true,
        }
    }

    /// Whether it is read per watched thread rather than per CPU: those of
    /// the thread's own context that the machine's other tasks hit often
    /// (faults, timers armed, system calls) — per thread the kernel writes
    /// only the watched thread's hits, and every other task's costs it no
    /// more than a check of an empty list, where per CPU each hit on the
    /// machine would be built into a record and tested against the filter
    /// (a syscall tracepoint's on every task's every call). Interrupts are
    /// read per CPU, filtered to the watched threads: the machine takes a
    /// few thousand a second, while each event of a thread's own is
    /// scheduled out and in with the thread at every switch (with twenty
    /// such events, a pipe round trip of two threads watched by `tessera
    /// why` took 11–14 µs; with five, 7–8 µs; untraced, 3 µs).
    pub fn read_per_thread(self) -> bool {
        match self {
            Kind::Fault | Kind::TimerStart | Kind::Yield | Kind::Returned => true,
            Kind::Switch
            | Kind::Waking
            | Kind::Migrate
            | Kind::Runtime
            | Kind::InterruptEntry
            | Kind::InterruptExit => false,
        }
    }

    /// The system calls a raw syscall tracepoint of this kind is kept to:
    /// sched_yield's entry (a SCHED_DEADLINE thread ends its job), and the
    /// returns from the calls a real-time thread waits in. Empty for the
    /// others.
    pub fn calls(self) -> &'static [i64] {
        match self {
            Kind::Yield => &[libc::SYS_sched_yield],
            Kind::Returned => WAITING_CALLS,
            _ => &[],
        }
    }

    /// The kernel-side filter of a watched thread's own event of this
    /// kind (None: it keeps every hit).
    pub fn own_filter(self) -> Option<String> {
        let calls = self.calls();
        (!calls.is_empty()).then(|| {
            let terms: Vec<String> = calls.iter().map(|c| format!("id == {c}")).collect();
            terms.join(" || ")
        })
    }

    /// The kernel-side filter keeping this tracepoint to `tids`: the
    /// thread switched, woken, migrated or charged, or current when the
    /// interrupt, fault, timer or yield happened.
    /// With no thread, a filter nothing matches (no task has id -1).
    pub fn filter(self, tids: &[i32]) -> String {
        let none = [-1];
        let tids = match tids {
            [] => &none[..],
            some => some,
        };
        let terms = |field: &'static str| tids.iter().map(move |t| format!("{field} == {t}"));
        let all: Vec<String> = match self {
            Kind::Switch => terms("prev_pid").chain(terms("next_pid")).collect(),
            Kind::Waking | Kind::Migrate | Kind::Runtime => terms("pid").collect(),
            _ => terms("common_pid").collect(),
        };
        all.join(" || ")
    }
}

/// How to read one tracepoint's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub kind: Kind,
    fields: Vec<Field>,
}

impl Layout {
    /// The layout of `format` read as `kind`: refused when a field it
    /// needs is missing.
    pub fn new(kind: Kind, format: &Format) -> Result<Layout, WhyError> {
        let fields = kind
            .fields()
            .iter()
            .map(|name| {
                format.field(name).cloned().ok_or_else(|| WhyError::Format {
                    event: format.event.clone(),
                    cause: format!("no field {name}"),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Layout { kind, fields })
    }

    /// The event a raw record tells, or None when it is too short for a
    /// field (or is the counted tracepoint's, which is never sampled).
    fn what(&self, raw: &[u8], timers: &Timers, task_clock_ns: Option<u64>) -> Option<What> {
        let int = |i: usize| integer(raw, &self.fields[i]);
        let text = |i: usize| string(raw, &self.fields[i]);
        let pid = || int(0).map(|v| v as i32);
        Some(match self.kind {
            Kind::Switch => What::Switch {
                prev: Task {
                    comm: text(0)?,
                    pid: int(1)? as i32,
                    prio: int(2)? as i32,
                },
                prev_state: int(3)? as u64,
                next: Task {
                    comm: text(4)?,
                    pid: int(5)? as i32,
                    prio: int(6)? as i32,
                },
                task_clock_ns,
            },
            Kind::Waking => What::Waking {
                pid: pid()?,
                waker: None,
            },
            Kind::Migrate => What::Migrate {
                pid: pid()?,
                dest_cpu: int(1)? as u32,
            },
            Kind::Runtime => return None,
            Kind::TimerStart => What::TimerStart {
                pid: pid()?,
                soft_expires_ns: int(1)? as u64,
                timer: timers.of(int(3)? as u64, int(2)? as u32),
            },
            Kind::InterruptEntry => What::InterruptEntry { pid: pid()? },
            Kind::InterruptExit => What::InterruptExit { pid: pid()? },
            Kind::Fault => What::Fault { pid: pid()? },
            Kind::Yield => What::Yield { pid: pid()? },
            Kind::Returned => What::Returned { pid: pid()? },
        })
    }
}

/// A field as an integer, sign-extended when the kernel says it is signed.
fn integer(raw: &[u8], f: &Field) -> Option<i64> {
    let bytes = raw.get(f.offset..f.offset.checked_add(f.size)?)?;
    Some(match (f.size, f.signed) {
        (1, true) => i8::from_ne_bytes(bytes.try_into().ok()?) as i64,
        (1, false) => u8::from_ne_bytes(bytes.try_into().ok()?) as i64,
        (2, true) => i16::from_ne_bytes(bytes.try_into().ok()?) as i64,
        (2, false) => u16::from_ne_bytes(bytes.try_into().ok()?) as i64,
        (4, true) => i32::from_ne_bytes(bytes.try_into().ok()?) as i64,
        (4, false) => u32::from_ne_bytes(bytes.try_into().ok()?) as i64,
        (8, _) => i64::from_ne_bytes(bytes.try_into().ok()?),
        _ => return None,
    })
}

/// A string field: fixed (`char comm[16]`) or `__data_loc`, up to its NUL.
fn string(raw: &[u8], f: &Field) -> Option<String> {
    let bytes = if f.data_loc {
        let loc = integer(
            raw,
            &Field {
                size: 4,
                ..f.clone()
            },
        )? as u32;
        let (at, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
        raw.get(at..at + len)?
    } else {
        raw.get(f.offset..f.offset.checked_add(f.size)?)?
    };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// `hrtimer_mode` bits: pinned to its CPU, expiring in hard interrupt
/// context. On a kernel without PREEMPT_RT only the kernel's own timers
/// (the scheduler's hrtick and reservation timers) carry them.
const TIMER_PINNED: u32 = 2;
const TIMER_HARD: u32 = 8;

/// The kernel functions a timer may call, by address, and what each is
/// for; without them (no readable `/proc/kallsyms`), a timer is told by its
/// mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timers {
    by_function: HashMap<u64, Timer>,
}

/// The functions that wake a thread that armed a timer for itself, and the
/// one that replenishes a reservation.
const WAKEUP_FUNCTIONS: &[&str] = &[
    "hrtimer_wakeup",
    "timerfd_tmrproc",
    "posix_timer_fn",
    "it_real_fn",
    "alarmtimer_fired",
];
const REPLENISHMENT_FUNCTION: &str = "dl_task_timer";

impl Timers {
    /// The timer functions named in `/proc/kallsyms`' text (`ADDRESS TYPE
    /// NAME [MODULE]` lines); none when the addresses are hidden (zero).
    pub fn from_kallsyms(text: &str) -> Timers {
        let by_function = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let address = u64::from_str_radix(fields.next()?, 16).ok()?;
                let name = fields.nth(1)?;
                let timer = match name {
                    n if WAKEUP_FUNCTIONS.contains(&n) => Timer::Wakeup,
                    REPLENISHMENT_FUNCTION => Timer::Replenishment,
                    _ => return None,
                };
                Some((address, timer)).filter(|_| address != 0)
            })
            .collect();
        Timers { by_function }
    }

    /// What a timer calling `function` in `mode` is for.
    pub fn of(&self, function: u64, mode: u32) -> Timer {
        match self.by_function.get(&function) {
            Some(&timer) => timer,
            None if !self.by_function.is_empty() => Timer::Kernel,
            None if mode & (TIMER_PINNED | TIMER_HARD) == 0 => Timer::Wakeup,
            None => Timer::Kernel,
        }
    }
}

/// Decodes samples of the tracepoints it was built with.
#[derive(Debug, Clone, Default)]
pub struct Decoder {
    by_id: HashMap<u16, Layout>,
    timers: Timers,
}

impl Decoder {
    pub fn new(timers: Timers) -> Decoder {
        Decoder {
            by_id: HashMap::new(),
            timers,
        }
    }

    pub fn add(&mut self, id: u64, layout: Layout) {
        self.by_id.insert(id as u16, layout);
    }

    /// A `PERF_RECORD_SAMPLE` body with TIME, CPU, PERIOD, READ (as a
    /// group) and RAW: `u64 time; u32 cpu, res; u64 period; u64 nr; u64
    /// value[nr]; u32 size; u8 raw[size]`, the raw record starting with
    /// its tracepoint id (`common_type`). A second value is the task
    /// clock counted in `sched_switch`'s group.
    pub fn sample(&self, body: &[u8]) -> Option<Event> {
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_ne_bytes(
                body.get(at..at.checked_add(8)?)?.try_into().ok()?,
            ))
        };
        let time_ns = u64_at(0)?;
        let cpu = u32::from_ne_bytes(body.get(8..12)?.try_into().ok()?);
        let counts = usize::try_from(u64_at(24)?).ok()?;
        let task_clock_ns = match counts {
            0 | 1 => None,
            _ => Some(u64_at(40)?),
        };
        let at = counts.checked_mul(8)?.checked_add(32)?;
        let size = u32::from_ne_bytes(body.get(at..at.checked_add(4)?)?.try_into().ok()?) as usize;
        let raw = body.get(at + 4..(at + 4).checked_add(size)?)?;
        let id = u16::from_ne_bytes(raw.get(0..2)?.try_into().ok()?);
        let what = self
            .by_id
            .get(&id)?
            .what(raw, &self.timers, task_clock_ns)?;
        Some(Event { time_ns, cpu, what })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// This machine's (Linux 6.18) sched_switch and sched_migrate_task formats.
    fn fixed_formats() -> Vec<(Kind, Format)> {
        let f = |name: &str, offset, size, signed, data_loc| Field {
            name: name.into(),
            offset,
            size,
            signed,
            data_loc,
        };
        let common = [
            f("common_type", 0, 2, false, false),
            f("common_pid", 4, 4, true, false),
        ];
        let switch = [
            f("prev_comm", 8, 16, false, false),
            f("prev_pid", 24, 4, true, false),
            f("prev_prio", 28, 4, true, false),
            f("prev_state", 32, 8, true, false),
            f("next_comm", 40, 16, false, false),
            f("next_pid", 56, 4, true, false),
            f("next_prio", 60, 4, true, false),
        ];
        let migrate = [
            f("comm", 8, 4, false, true),
            f("pid", 12, 4, true, false),
            f("prio", 16, 4, true, false),
            f("orig_cpu", 20, 4, true, false),
            f("dest_cpu", 24, 4, true, false),
        ];
        let timer = [
            f("hrtimer", 8, 8, false, false),
            f("function", 16, 8, false, false),
            f("expires", 24, 8, true, false),
            f("softexpires", 32, 8, true, false),
            f("mode", 40, 4, false, false),
        ];
        let format = |event: &str, id, rest: &[Field]| Format {
            event: event.into(),
            id,
            fields: common.iter().chain(rest).cloned().collect(),
        };
        vec![
            (Kind::Switch, format("sched/sched_switch", 330, &switch)),
            (
                Kind::Migrate,
                format("sched/sched_migrate_task", 331, &migrate),
            ),
            (Kind::TimerStart, format("timer/hrtimer_start", 460, &timer)),
        ]
    }

    /// Writes `what` as the kernel would into a perf sample of `layout`;
    /// a switch's task clock as the second count of its group.
    fn encode(id: u16, layout: &Layout, event: &Event) -> Vec<u8> {
        let mut raw = vec![0u8; 64];
        raw[0..2].copy_from_slice(&id.to_ne_bytes());
        let mut put = |i: usize, v: i64| {
            let f = &layout.fields[i];
            raw[f.offset..f.offset + f.size].copy_from_slice(&v.to_ne_bytes()[..f.size]);
        };
        let mut comms = vec![];
        let mut counts = vec![1u64];
        match &event.what {
            What::Switch {
                prev,
                prev_state,
                next,
                task_clock_ns,
            } => {
                put(1, prev.pid as i64);
                put(2, prev.prio as i64);
                put(3, *prev_state as i64);
                put(5, next.pid as i64);
                put(6, next.prio as i64);
                comms = vec![(0, prev.comm.clone()), (4, next.comm.clone())];
                counts.extend(task_clock_ns);
            }
            What::Migrate { pid, dest_cpu } => {
                put(0, *pid as i64);
                put(1, *dest_cpu as i64);
            }
            _ => unreachable!("only the fixed formats are encoded"),
        }
        for (i, comm) in comms {
            let f = &layout.fields[i];
            raw[f.offset..f.offset + comm.len()].copy_from_slice(comm.as_bytes());
        }
        let mut body = vec![];
        body.extend(event.time_ns.to_ne_bytes());
        body.extend(event.cpu.to_ne_bytes());
        body.extend(0u32.to_ne_bytes());
        body.extend(1u64.to_ne_bytes());
        body.extend((counts.len() as u64).to_ne_bytes());
        counts.iter().for_each(|c| body.extend(c.to_ne_bytes()));
        body.extend((raw.len() as u32).to_ne_bytes());
        body.extend(raw);
        body
    }

    fn decoder() -> (Decoder, Vec<(u16, Layout)>) {
        decoder_with(Timers::default())
    }

    fn decoder_with(timers: Timers) -> (Decoder, Vec<(u16, Layout)>) {
        let mut d = Decoder::new(timers);
        let mut layouts = vec![];
        for (kind, format) in fixed_formats() {
            let layout = Layout::new(kind, &format).unwrap();
            d.add(format.id, layout.clone());
            layouts.push((format.id as u16, layout));
        }
        (d, layouts)
    }

    fn task() -> impl Strategy<Value = Task> {
        (0i32..1 << 22, "[a-z0-9/:_-]{0,15}", -1i32..140).prop_map(|(pid, comm, prio)| Task {
            pid,
            comm,
            prio,
        })
    }

    #[test]
    fn a_record_of_an_unknown_tracepoint_decodes_to_nothing() {
        let (d, layouts) = decoder();
        let event = Event {
            time_ns: 5,
            cpu: 1,
            what: What::Migrate {
                pid: 3,
                dest_cpu: 0,
            },
        };
        let mut body = encode(layouts[1].0, &layouts[1].1, &event);
        body[44] = 0xee; // another common_type, after one count
        assert_eq!(d.sample(&body), None);
    }

    /// A `hrtimer_start` sample of `function` in `mode`.
    fn timer_sample(function: u64, mode: u32) -> Vec<u8> {
        let mut raw = vec![0u8; 48];
        raw[0..2].copy_from_slice(&460u16.to_ne_bytes());
        raw[4..8].copy_from_slice(&7i32.to_ne_bytes());
        raw[16..24].copy_from_slice(&function.to_ne_bytes());
        raw[32..40].copy_from_slice(&5_000i64.to_ne_bytes());
        raw[40..44].copy_from_slice(&mode.to_ne_bytes());
        let mut body = vec![0u8; 24];
        body.extend(1u64.to_ne_bytes());
        body.extend(1u64.to_ne_bytes());
        body.extend((raw.len() as u32).to_ne_bytes());
        body.extend(raw);
        body
    }

    fn timer_of(d: &Decoder, function: u64, mode: u32) -> Timer {
        match d.sample(&timer_sample(function, mode)).map(|e| e.what) {
            Some(What::TimerStart {
                pid: 7,
                soft_expires_ns: 5_000,
                timer,
            }) => timer,
            other => panic!("{other:?}"),
        }
    }

    const KALLSYMS: &str = "ffffffff813c2a90 t inactive_task_timer
ffffffff813c5a00 t dl_task_timer
ffffffff8141e4b0 t hrtimer_wakeup
ffffffff81733b90 t timerfd_tmrproc
ffffffffc0001000 t hrtimer_wakeup_like\t[some_module]
";

    #[test]
    fn a_timer_is_told_by_the_function_it_calls() {
        let (d, _) = decoder_with(Timers::from_kallsyms(KALLSYMS));
        // A sleep (REL), a timerfd (ABS), a reservation's replenishment and
        // its inactive timer (REL|HARD: the one armed as a reservation
        // blocks, which had been read as the thread's own wake-up).
        assert_eq!(timer_of(&d, 0xffffffff8141e4b0, 1), Timer::Wakeup);
        assert_eq!(timer_of(&d, 0xffffffff81733b90, 0), Timer::Wakeup);
        assert_eq!(timer_of(&d, 0xffffffff813c5a00, 8), Timer::Replenishment);
        assert_eq!(timer_of(&d, 0xffffffff813c2a90, 9), Timer::Kernel);
        assert_eq!(timer_of(&d, 0xffffffffc0001000, 0), Timer::Kernel);
    }

    #[test]
    fn without_the_functions_a_timer_is_told_by_its_mode() {
        let hidden: String = KALLSYMS
            .lines()
            .map(|l| format!("0000000000000000{}\n", &l[16..]))
            .collect();
        assert_eq!(Timers::from_kallsyms(&hidden), Timers::default());
        let (d, _) = decoder();
        assert_eq!(timer_of(&d, 0x1234, 0), Timer::Wakeup);
        assert_eq!(timer_of(&d, 0x1234, 1), Timer::Wakeup);
        for kernel_mode in [8, 9, 10] {
            assert_eq!(timer_of(&d, 0x1234, kernel_mode), Timer::Kernel);
        }
    }

    #[test]
    fn filters_name_every_watched_thread() {
        assert_eq!(
            Kind::Switch.filter(&[4, 9]),
            "prev_pid == 4 || prev_pid == 9 || next_pid == 4 || next_pid == 9"
        );
        assert_eq!(Kind::Fault.filter(&[4]), "common_pid == 4");
        assert_eq!(Kind::Waking.filter(&[]), "pid == -1");
    }

    #[test]
    fn the_kinds_read_per_thread_are_those_of_the_current_thread() {
        for &(name, kind, _) in TRACEPOINTS {
            let by_current = kind.filter(&[4]) == "common_pid == 4";
            assert_eq!(kind.in_own_context(), by_current, "{name}");
            assert!(!kind.read_per_thread() || by_current, "{name}");
            assert_eq!(
                kind.own_filter().is_some(),
                name.starts_with("raw_syscalls/"),
                "{name}"
            );
        }
        assert!(
            !TRACEPOINTS[0].1.read_per_thread(),
            "sched_switch leads a CPU's ring"
        );
    }

    #[test]
    fn a_threads_calls_are_kept_to_the_waits_and_the_yield() {
        assert_eq!(
            Kind::Yield.own_filter().unwrap(),
            format!("id == {}", libc::SYS_sched_yield)
        );
        let returns = Kind::Returned.own_filter().unwrap();
        let kept: Vec<&str> = returns.split(" || ").collect();
        for call in [libc::SYS_futex, libc::SYS_clock_nanosleep, libc::SYS_read] {
            assert!(
                kept.contains(&format!("id == {call}").as_str()),
                "{returns}"
            );
        }
        assert!(
            !kept.contains(&format!("id == {}", libc::SYS_write).as_str()),
            "{returns}"
        );
        assert_eq!(Kind::Fault.own_filter(), None);
    }

    proptest! {
        #[test]
        fn a_switch_reads_back(time in any::<u64>(), cpu in 0u32..1024, prev in task(),
                               state in 0u64..512, next in task(),
                               task_clock_ns in proptest::option::of(any::<u64>())) {
            let (d, layouts) = decoder();
            let event = Event { time_ns: time, cpu, what: What::Switch { prev, prev_state: state, next, task_clock_ns } };
            let body = encode(layouts[0].0, &layouts[0].1, &event);
            prop_assert_eq!(d.sample(&body), Some(event));
        }

        #[test]
        fn a_migration_reads_back(time in any::<u64>(), cpu in 0u32..1024, pid in 0i32..1 << 22, dest in 0u32..1024) {
            let (d, layouts) = decoder();
            let event = Event { time_ns: time, cpu, what: What::Migrate { pid, dest_cpu: dest } };
            let body = encode(layouts[1].0, &layouts[1].1, &event);
            prop_assert_eq!(d.sample(&body), Some(event));
        }

        #[test]
        fn any_bytes_decode_or_not_without_panicking(body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let (d, _) = decoder();
            let _ = d.sample(&body);
        }

        #[test]
        fn a_cut_sample_decodes_to_nothing(cut in 0usize..116) {
            let (d, layouts) = decoder();
            let event = Event { time_ns: 1, cpu: 0, what: What::Switch {
                prev: Task { pid: 1, comm: "a".into(), prio: 120 }, prev_state: 1,
                next: Task { pid: 2, comm: "b".into(), prio: -1 }, task_clock_ns: Some(3) } };
            let body = encode(layouts[0].0, &layouts[0].1, &event);
            prop_assert_eq!(d.sample(&body[..cut]), None);
        }
    }
}
