//! The application share: a guarded application's threads that are not
//! real-time — a network program's send and receive threads, a plug-in
//! host's disk streamer, a synth's voice loader — guaranteed CPU of their
//! own beside the real-time threads' reservations, so that guarding an
//! application never leaves part of its audio path to fight the load.
//!
//! **Mechanism: a reservation per busy thread.** Each such thread that used
//! at least [`BUSY`] of a CPU over a [`WINDOW`] gets an event-triggered
//! SCHED_DEADLINE reservation of its own, adapted like the real-time ones:
//! from its CPU time per audio period when it runs in step with the graph
//! (found by [`crate::lockstep`]), else per second, in reservations of
//! [`PERIOD_NS`]. It is never below its part of the application's floor
//! (`--app-share`). Why this and not the alternatives:
//! - a cpu cgroup's weight shares only what SCHED_FIFO leaves: the load an
//!   audio program meets (other real-time programs, a FIFO hog at the
//!   server's priority) takes the CPU before any weight counts;
//! - a SCHED_DEADLINE-backed share for a group of threads does not exist
//!   on a stock kernel (mainline has one reservation per thread, and the
//!   fair server is one per CPU for all normal threads), and a real-time
//!   cgroup (RT_GROUP_SCHED) is off in Debian's kernels;
//! - per-thread reservations are admitted by the broker like every other,
//!   measured per thread, and given back when the guard stops.
//!
//! What it costs: one reservation (and one admission entry) per busy
//! thread; the thread's budget is enforced at the kernel's tick, so a
//! burst beyond it waits for the next period unless spare bandwidth is
//! reclaimed (the default); and while it is SCHED_DEADLINE the thread
//! cannot narrow its own affinity (the kernel refuses a mask narrower than its root domain) — it may fork, the
//! reservation carrying RESET_ON_FORK. Idle threads (main loops, timers
//! that barely run) stay as their program set them.
//!
//! It owns only the judgement of which threads are busy, from /proc; it
//! must never change a thread.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tessera_policy::application::Layout;
use tessera_policy::application::{Spread, Why};
use tessera_policy::{Adaptive, AdaptiveConfig, Bandwidth, RequestError};
use tessera_sys::proc::{Pid, ThreadUsage};
use tessera_sys::sched::Tid;

/// How long a thread's use is measured before it is judged.
pub const WINDOW: Duration = Duration::from_secs(1);
/// The least use, of a CPU, that makes a thread busy: 5 ms a second.
pub const BUSY: f64 = 0.005;
/// Windows in a row a shared thread stays idle before its share is given
/// back.
pub const IDLE_WINDOWS: u32 = 10;

/// Below this use, of a CPU, a shared thread is idle: 1 ms a second, a
/// fifth of [`BUSY`] (a network thread fed 750 packets a second uses more).
pub const IDLE: f64 = BUSY / 5.0;

/// Whether a shared thread still keeps its share. One that used less than
/// [`IDLE`] for [`IDLE_WINDOWS`] windows in a row — a program's
/// start-up work done, a loader that finished — is given back to its
/// program's own scheduling, and adopted again if it turns busy: kept, it
/// held its part of the application's floor for nothing (a jackd thread
/// busy while ten clients opened kept 2 % of a CPU, idle, for the rest of
/// the session).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Idleness {
    windows: u32,
}

impl Idleness {
    /// Counts a window in which the thread used `used`; true once its share
    /// is to be given back.
    pub fn is_idle_after(&mut self, used: Bandwidth) -> bool {
        if used < Bandwidth::from_fraction(IDLE) {
            self.windows = self.windows.saturating_add(1);
        } else {
            self.windows = 0;
        }
        self.windows >= IDLE_WINDOWS
    }
}

/// The reservation period of a shared thread that does not cycle with the
/// graph: short enough that a thread woken by a packet runs within it,
/// long enough for the kernel's tick to enforce its budget.
pub const PERIOD_NS: u64 = 10_000_000;

/// A shared thread's controller, from the guard's settings: per
/// `period_ns` ([`PERIOD_NS`], or the guard's own loop's), at least 1 % of
/// it, opening at the least and following its first measurement at once
/// (it was measured busy before it was reserved).
pub fn controller(base: AdaptiveConfig, period_ns: u64) -> Result<Adaptive, RequestError> {
    let config = AdaptiveConfig {
        initial_budget_pct: 0,
        hold_samples: 1,
        min_budget_pct: 1,
        ..base
    };
    Adaptive::new(config, period_ns)
}

/// An application's share, as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppShare {
    /// The least its busy threads that are not real-time hold together.
    pub floor: Bandwidth,
}

impl AppShare {
    /// A share of `pct` % of one CPU; None outside 0–100 %.
    pub fn percent(pct: f64) -> Option<AppShare> {
        (0.0..=100.0).contains(&pct).then(|| AppShare {
            floor: Bandwidth::from_fraction(pct / 100.0),
        })
    }
}

impl Default for AppShare {
    fn default() -> AppShare {
        AppShare {
            floor: Bandwidth::from_fraction(0.02),
        }
    }
}

/// What a thread used over the window that closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampled {
    pub pid: Pid,
    pub tid: Tid,
    pub used: Bandwidth,
}

impl Sampled {
    pub fn is_busy(&self) -> bool {
        self.used >= Bandwidth::from_fraction(BUSY)
    }
}

/// Measures candidate threads window after window.
#[derive(Default)]
pub struct Busy {
    opened: Option<Instant>,
    readings: BTreeMap<Tid, (Pid, ThreadUsage)>,
}

impl Busy {
    /// Whether the window closes now: only then does [`Self::sample`] read
    /// anything, so the caller lists the candidates only then.
    pub fn is_due(&self) -> bool {
        self.opened.is_none_or(|at| at.elapsed() >= WINDOW)
    }

    /// Given the candidates now, returns what each used over the window
    /// that just closed (None while it is open) and opens the next. A
    /// candidate first seen during a window is measured over the next.
    pub fn sample(&mut self, candidates: &[(Pid, Tid)]) -> Option<Vec<Sampled>> {
        if !self.is_due() {
            return None;
        }
        let now = Instant::now();
        let mut before = std::mem::take(&mut self.readings);
        let mut sampled = Vec::new();
        for &(pid, tid) in candidates {
            let Some((_, mut usage)) = before.remove(&tid) else {
                self.readings
                    .insert(tid, (pid, ThreadUsage::kept_open(pid, tid)));
                continue;
            };
            let Ok(delta) = usage.advance(false) else {
                continue;
            };
            sampled.push(Sampled {
                pid,
                tid,
                used: Bandwidth::of(delta.cpu_ns, delta.elapsed_ns.max(1)),
            });
            self.readings.insert(tid, (pid, usage));
        }
        let first = self.opened.replace(now).is_none();
        (!first).then_some(sampled)
    }
}

/// What the whole machine keeps busy, measured between two relayouts:
/// with what the reservations used taken out, what a layout must leave
/// room for on the cores it keeps shared.
#[derive(Debug, Default)]
pub struct MachineBusy {
    last: Option<(u64, Instant)>,
}

impl MachineBusy {
    /// CPUs busy since the last call (None on the first, or when
    /// /proc/stat cannot be read).
    pub fn sample(&mut self) -> Option<Bandwidth> {
        let busy = tessera_sys::proc::cpus_busy_ns().ok()?;
        let now = Instant::now();
        let (before, then) = self.last.replace((busy, now))?;
        let wall = now.duration_since(then).as_nanos() as u64;
        (wall > 0).then(|| Bandwidth::of(busy.saturating_sub(before), wall))
    }
}

/// How long the hypervisor held the machine's vCPUs between two samples:
/// an overrun in an interval with a period or more of it stolen is the
/// host's, and no budget would have prevented it.
#[derive(Debug, Default)]
pub struct HostSteal {
    last: Option<u64>,
}

impl HostSteal {
    /// Steal time of all CPUs together since the last call, in ns (None on
    /// the first, or when /proc/stat cannot be read; 0 where the hypervisor
    /// reports none). /proc/stat counts it in 10 ms ticks.
    pub fn sample(&mut self) -> Option<u64> {
        let now: u64 = tessera_sys::proc::cpu_steal_ns()
            .ok()?
            .iter()
            .map(|(_, ns)| ns)
            .sum();
        let before = self.last.replace(now)?;
        Some(now.saturating_sub(before))
    }
}

/// A layout in a few words, with the figures it was chosen from: the
/// guard's live line.
pub fn describe(layout: &Layout) -> String {
    let spread = match &layout.spread {
        Spread::One { core } => format!("one core (cpu{core})"),
        Spread::Several { cores } => format!(
            "{} cores ({})",
            cores.len(),
            cores
                .iter()
                .map(|c| format!("cpu{c}"))
                .collect::<Vec<_>>()
                .join(",")
        ),
        Spread::Global => "global EDF".to_string(),
    };
    let why = match &layout.why {
        Why::FitsOneCore { wanted, room } => format!("wants {wanted} CPU, the core has {room}"),
        Why::NeedsSeveral {
            wanted,
            largest_room,
        } => format!("wants {wanted} CPU, no core has more than {largest_room}"),
        Why::Global {
            wanted,
            largest_room,
            others,
            shared,
        } => format!(
            "wants {wanted} CPU; the roomiest core has {largest_room}, and the rest of the machine uses {others} of {shared} CPU: a partition would squeeze it"
        ),
        Why::Short {
            wanted,
            global,
            short,
        } => {
            let named: Vec<String> = short
                .iter()
                .map(|s| {
                    format!(
                        "thread {} used {} and would get {}",
                        s.thread, s.used, s.fits
                    )
                })
                .collect();
            if named.is_empty() {
                format!("wants {wanted} CPU, {global} fits: budgets squeezed alike, no thread below what it used")
            } else {
                format!(
                    "SHORT: wants {wanted} CPU, {global} fits: {}; free CPU or guard fewer programs",
                    named.join("; ")
                )
            }
        }
    };
    format!("{spread}: {why}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_judged_only_after_a_whole_window() {
        let me = tessera_sys::proc::current_pid();
        let tid = tessera_sys::proc::current_tid();
        let mut busy = Busy::default();
        assert!(busy.sample(&[(me, tid)]).is_none());
        assert!(busy.sample(&[(me, tid)]).is_none());
        let spin_until = Instant::now() + WINDOW + Duration::from_millis(50);
        while Instant::now() < spin_until {
            std::hint::spin_loop();
        }
        let sampled = busy.sample(&[(me, tid)]).expect("the window closed");
        assert_eq!(sampled.len(), 1);
        assert!(
            sampled[0].is_busy(),
            "a spinning thread is busy: {:?}",
            sampled[0]
        );
    }

    #[test]
    fn a_spinning_thread_keeps_the_machine_busy() {
        let (mut machine, mut steal) = (MachineBusy::default(), HostSteal::default());
        assert!(machine.sample().is_none());
        steal.sample();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(100) {
            std::hint::spin_loop();
        }
        let busy = machine.sample().expect("a second sample");
        // The ticks the host stole the vCPU for are counted as steal, not
        // busy: a spinning thread keeps the machine busy or stolen.
        let stolen = Bandwidth::of(
            steal.sample().unwrap_or(0),
            start.elapsed().as_nanos() as u64,
        );
        assert!(
            busy + stolen >= Bandwidth::from_fraction(0.5),
            "{busy} busy, {stolen} stolen"
        );
    }

    #[test]
    fn a_share_is_given_back_after_idle_windows_in_a_row_only() {
        let idle = Bandwidth::from_fraction(IDLE / 2.0);
        let busy = Bandwidth::from_fraction(BUSY);
        let mut idleness = Idleness::default();
        for _ in 1..IDLE_WINDOWS {
            assert!(!idleness.is_idle_after(idle));
        }
        assert!(!idleness.is_idle_after(busy), "a busy window starts again");
        for _ in 1..IDLE_WINDOWS {
            assert!(!idleness.is_idle_after(idle));
        }
        assert!(idleness.is_idle_after(idle));
    }

    #[test]
    fn a_share_is_a_percentage_of_one_cpu() {
        let two = AppShare::percent(2.0).expect("2 % is a share");
        assert_eq!(two.floor, Bandwidth::from_fraction(0.02));
        assert_eq!(AppShare::percent(2.0), Some(AppShare::default()));
        assert!(AppShare::percent(0.0).is_some() && AppShare::percent(100.0).is_some());
        assert!(AppShare::percent(100.5).is_none() && AppShare::percent(f64::NAN).is_none());
    }

    #[test]
    fn a_short_layout_names_the_threads() {
        let layout = tessera_policy::application::place(
            &[tessera_policy::application::Want {
                thread: 42,
                graph: false,
                wanted: Bandwidth::ONE,
                used: Bandwidth::from_fraction(0.9),
            }],
            &tessera_policy::application::Room {
                cores: vec![],
                global: Bandwidth::from_fraction(0.5),
                preferred: 0,
                others_used: Bandwidth::ZERO,
            },
        );
        let text = describe(&layout);
        assert!(
            text.contains("SHORT") && text.contains("thread 42"),
            "{text}"
        );
    }
}
