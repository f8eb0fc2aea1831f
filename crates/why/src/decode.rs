//! The kernel's events as typed values: which tracepoints tessera reads,
//! the filter that keeps each to the watched threads, and the decoding of
//! a perf sample (time, CPU, raw tracepoint record) into an [`Event`]
//! through the fields' offsets from [`crate::format`].
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

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// `sched_switch`: `prev` left the CPU in `prev_state` (0: still
    /// runnable; bit 0 S, bit 1 D, ...), `next` got it.
    Switch {
        prev: Task,
        prev_state: u64,
        next: Task,
    },
    /// `sched_waking`: `pid` is being made runnable.
    Waking {
        pid: i32,
    },
    /// `sched_migrate_task`: `pid` moves to `dest_cpu`.
    Migrate {
        pid: i32,
        dest_cpu: u32,
    },
    /// `sched_stat_runtime`: `pid` ran `ns` more on its task clock (which
    /// leaves out stolen time, and interrupt time when the kernel accounts
    /// it apart).
    Runtime {
        pid: i32,
        ns: u64,
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
    /// `hrtimer_start` by `pid`: a timer asked for `soft_expires_ns`
    /// (CLOCK_MONOTONIC), in hrtimer `mode` (bit 1: pinned).
    TimerStart {
        pid: i32,
        soft_expires_ns: u64,
        mode: u32,
    },
    /// `pid` called sched_yield (a SCHED_DEADLINE thread ends its job).
    Yield {
        pid: i32,
    },
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
}

/// The tracepoints read: (group/name, kind, required). Without the
/// optional ones attribution still works, with fewer parts. Timer
/// interrupts are measured by their hrtimer callbacks (the tick is one):
/// x86's interrupt-vector tracepoints refuse perf sampling.
pub const TRACEPOINTS: &[(&str, Kind, bool)] = &[
    ("sched/sched_switch", Kind::Switch, true),
    ("sched/sched_waking", Kind::Waking, true),
    ("sched/sched_stat_runtime", Kind::Runtime, true),
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
    ("syscalls/sys_enter_sched_yield", Kind::Yield, false),
];

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
            Kind::TimerStart => &["common_pid", "softexpires", "mode"],
            Kind::InterruptEntry | Kind::InterruptExit | Kind::Fault | Kind::Yield => {
                &["common_pid"]
            }
        }
    }

    /// The kernel-side filter keeping this tracepoint to `tids`: the
    /// thread switched, woken, migrated or charged, or current when the
    /// interrupt, fault, timer or yield happened.
    pub fn filter(self, tids: &[i32]) -> String {
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
    /// field.
    fn what(&self, raw: &[u8]) -> Option<What> {
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
            },
            Kind::Waking => What::Waking { pid: pid()? },
            Kind::Migrate => What::Migrate {
                pid: pid()?,
                dest_cpu: int(1)? as u32,
            },
            Kind::Runtime => What::Runtime {
                pid: pid()?,
                ns: int(1)? as u64,
            },
            Kind::TimerStart => What::TimerStart {
                pid: pid()?,
                soft_expires_ns: int(1)? as u64,
                mode: int(2)? as u32,
            },
            Kind::InterruptEntry => What::InterruptEntry { pid: pid()? },
            Kind::InterruptExit => What::InterruptExit { pid: pid()? },
            Kind::Fault => What::Fault { pid: pid()? },
            Kind::Yield => What::Yield { pid: pid()? },
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

/// Decodes samples of the tracepoints it was built with.
#[derive(Debug, Clone, Default)]
pub struct Decoder {
    by_id: HashMap<u16, Layout>,
}

impl Decoder {
    pub fn add(&mut self, id: u64, layout: Layout) {
        self.by_id.insert(id as u16, layout);
    }

    /// A `PERF_RECORD_SAMPLE` body with TIME, CPU, PERIOD and RAW: `u64
    /// time; u32 cpu, res; u64 period; u32 size; u8 raw[size]`, the raw
    /// record starting with its tracepoint id (`common_type`).
    pub fn sample(&self, body: &[u8]) -> Option<Event> {
        let time_ns = u64::from_ne_bytes(body.get(0..8)?.try_into().ok()?);
        let cpu = u32::from_ne_bytes(body.get(8..12)?.try_into().ok()?);
        let size = u32::from_ne_bytes(body.get(24..28)?.try_into().ok()?) as usize;
        let raw = body.get(28..28usize.checked_add(size)?)?;
        let id = u16::from_ne_bytes(raw.get(0..2)?.try_into().ok()?);
        let what = self.by_id.get(&id)?.what(raw)?;
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
        ]
    }

    /// Writes `what` as the kernel would into a perf sample of `layout`.
    fn encode(id: u16, layout: &Layout, event: &Event) -> Vec<u8> {
        let mut raw = vec![0u8; 64];
        raw[0..2].copy_from_slice(&id.to_ne_bytes());
        let mut put = |i: usize, v: i64| {
            let f = &layout.fields[i];
            raw[f.offset..f.offset + f.size].copy_from_slice(&v.to_ne_bytes()[..f.size]);
        };
        let mut comms = vec![];
        match &event.what {
            What::Switch {
                prev,
                prev_state,
                next,
            } => {
                put(1, prev.pid as i64);
                put(2, prev.prio as i64);
                put(3, *prev_state as i64);
                put(5, next.pid as i64);
                put(6, next.prio as i64);
                comms = vec![(0, prev.comm.clone()), (4, next.comm.clone())];
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
        body.extend((raw.len() as u32).to_ne_bytes());
        body.extend(raw);
        body
    }

    fn decoder() -> (Decoder, Vec<(u16, Layout)>) {
        let mut d = Decoder::default();
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
        body[28] = 0xee; // another common_type
        assert_eq!(d.sample(&body), None);
    }

    #[test]
    fn filters_name_every_watched_thread() {
        assert_eq!(
            Kind::Switch.filter(&[4, 9]),
            "prev_pid == 4 || prev_pid == 9 || next_pid == 4 || next_pid == 9"
        );
        assert_eq!(Kind::Fault.filter(&[4]), "common_pid == 4");
    }

    proptest! {
        #[test]
        fn a_switch_reads_back(time in any::<u64>(), cpu in 0u32..1024, prev in task(),
                               state in 0u64..512, next in task()) {
            let (d, layouts) = decoder();
            let event = Event { time_ns: time, cpu, what: What::Switch { prev, prev_state: state, next } };
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
        fn a_cut_sample_decodes_to_nothing(cut in 0usize..92) {
            let (d, layouts) = decoder();
            let event = Event { time_ns: 1, cpu: 0, what: What::Switch {
                prev: Task { pid: 1, comm: "a".into(), prio: 120 }, prev_state: 1,
                next: Task { pid: 2, comm: "b".into(), prio: -1 } } };
            let body = encode(layouts[0].0, &layouts[0].1, &event);
            prop_assert_eq!(d.sample(&body[..cut]), None);
        }
    }
}
