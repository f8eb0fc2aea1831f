//! The attribution rules: whether a cycle missed, how long each part of it
//! took, and which part is the cause.
//!
//! - The cycle's expected release is the earliest of: when it was woken,
//!   the expiry its own timer asked for, and (when its period is known)
//!   the next point of its period's grid after the previous release by its
//!   own timer. A thread whose timers are relative to its own end has no
//!   grid: watch it without a period.
//! - It missed when it ended after release + deadline, or when its
//!   SCHED_DEADLINE budget ran out in it.
//! - Its response (release → end) is cut into parts that add up to it:
//!   woken late (release → woken, plus time runnable on an idle CPU),
//!   waited for a CPU (runnable while another thread ran), throttled,
//!   faults or blocking (asleep uninterruptibly), and the time it ran:
//!   interrupts (while it was current), stolen (wall time its task clock
//!   did not count, beyond interrupts the kernel accounts apart) and own
//!   work (the rest); what no event accounts for is unknown.
//! - A cycle whose records were partly lost has no parts: a miss of it is
//!   "unknown (records lost)", not judged from a partial timeline.
//! - The cause is the part that took longest, where own work counts only
//!   its excess over the thread's budget (the reservation's runtime, the
//!   budget given, or else the deadline), and own work in a cycle with page
//!   faults is "faults or blocking" (its memory was not resident). A cycle
//!   with no part is unknown.
//!
//! Pure functions and one small fold per thread (the previous release);
//! no I/O, no clock.

use crate::causes::{micros, Cause, Holder, Miss, Parts};
use crate::chain::ChainLink;
use crate::timeline::Cycle;
use std::collections::HashMap;

/// What a watched thread is judged by (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Watch {
    pub tid: i32,
    /// A cycle must end this long after its release.
    pub deadline_ns: u64,
    /// Its releases lie on a grid of this period (absolute timers, a
    /// reservation's period).
    pub period_ns: Option<u64>,
    /// How long its own work may take (a reservation's runtime).
    pub budget_ns: Option<u64>,
    /// Judged with a chain's other threads rather than alone
    /// ([`crate::chain`]): then its deadline and period are the chain's
    /// when it is the driver, and unused otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainLink>,
}

/// How the kernel's task clock treats interrupt time: with
/// CONFIG_IRQ_TIME_ACCOUNTING it is left out, as stolen time is with
/// CONFIG_PARAVIRT_TIME_ACCOUNTING (without that, stolen time is counted
/// as the thread's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskClock {
    pub counts_interrupts: bool,
}

/// The expected release of a cycle woken at `woken`.
pub fn expected_release(
    woken: u64,
    timer: Option<u64>,
    previous: Option<u64>,
    period: Option<u64>,
) -> u64 {
    let mut release = woken;
    if let Some(t) = timer.filter(|&t| t <= woken) {
        release = release.min(t);
    }
    if let (Some(prev), Some(p)) = (previous, period.filter(|&p| p > 0)) {
        let next = prev.saturating_add(p);
        if next <= woken {
            // The grid point of the period it was woken in (it may have
            // slept through whole periods).
            release = release.min(next + (woken - next) / p * p);
        }
    }
    release
}

/// The time each part of `cycle` took from `release` to its end.
pub fn parts(cycle: &Cycle, release: u64, clock: TaskClock) -> Parts {
    let mut p = Parts::default();
    let interrupts = cycle.interrupts_ns;
    let counted = match clock.counts_interrupts {
        true => cycle.runtime_ns,
        false => cycle.runtime_ns + interrupts,
    };
    p.set(
        Cause::WokenLate,
        cycle.woken_ns.saturating_sub(release) + cycle.idle_wait_ns,
    );
    p.set(Cause::WaitedForCpu, cycle.waits.iter().map(|w| w.ns).sum());
    p.set(Cause::Throttled, cycle.throttled_ns);
    p.set(Cause::Stolen, cycle.running_ns.saturating_sub(counted));
    p.set(
        Cause::Interrupts,
        interrupts.min(cycle.running_ns - p.get(Cause::Stolen)),
    );
    p.set(Cause::FaultsOrBlocking, cycle.blocked_ns);
    p.set(
        Cause::OwnWork,
        cycle
            .running_ns
            .saturating_sub(p.get(Cause::Stolen) + p.get(Cause::Interrupts)),
    );
    let response = cycle.end_ns.saturating_sub(release);
    p.set(Cause::Unknown, response.saturating_sub(p.total()));
    p
}

/// The cause of a late cycle from its parts: the longest, own work
/// counting only beyond `allowance`.
pub fn cause(parts: &Parts, allowance: u64, faults: u32) -> Cause {
    let mut best = (Cause::Unknown, 0);
    // The causes declared before own work: interference from outside the
    // thread's own work.
    for &c in &Cause::ALL[..Cause::OwnWork as usize] {
        if parts.get(c) > best.1 {
            best = (c, parts.get(c));
        }
    }
    let excess = parts.get(Cause::OwnWork).saturating_sub(allowance);
    if excess > best.1 {
        best = match faults {
            0 => (Cause::OwnWork, excess),
            _ => (Cause::FaultsOrBlocking, excess),
        };
    }
    if parts.get(Cause::Unknown) > best.1 {
        best = (Cause::Unknown, parts.get(Cause::Unknown));
    }
    best.0
}

/// Judges a thread's cycles one after another.
#[derive(Debug, Clone)]
pub struct Judge {
    pub watch: Watch,
    clock: TaskClock,
    previous_release: Option<u64>,
}

impl Judge {
    pub fn new(watch: Watch, clock: TaskClock) -> Judge {
        Judge {
            watch,
            clock,
            previous_release: None,
        }
    }

    /// The miss `cycle` was, if it was one; `cells` names the cell of
    /// each thread that is in one.
    pub fn judge(&mut self, cycle: &Cycle, cells: &HashMap<i32, String>) -> Option<Miss> {
        let release = expected_release(
            cycle.woken_ns,
            cycle.timer_ns,
            self.previous_release,
            self.watch.period_ns,
        );
        // Only the thread's own timer anchors its grid, at the expiry it
        // asked for: a wake-up by anything else (a start signal, a packet)
        // has a phase of its own, and a grid carried on from computed
        // releases drifts from a timer that is not exactly periodic (JACK's
        // dummy driver sleeps whole µs: every cycle looked a period late).
        if let Some(timer) = cycle.timer_ns {
            self.previous_release = Some(timer);
        }
        let response = cycle.end_ns.saturating_sub(release);
        if response <= self.watch.deadline_ns && cycle.throttles == 0 {
            return None;
        }
        let mut parts = parts(cycle, release, self.clock);
        let allowance = self.watch.budget_ns.unwrap_or(self.watch.deadline_ns);
        if cycle.records_lost {
            // Its timeline may miss a switch or a wake-up: no part is known.
            parts = Parts::default();
            parts.set(Cause::Unknown, response);
        }
        Some(Miss {
            release_ns: release,
            tid: cycle.tid,
            comm: cycle.comm.clone(),
            cpu: cycle.cpu,
            cause: cause(&parts, allowance, cycle.faults),
            response_us: micros(response),
            deadline_us: micros(self.watch.deadline_ns),
            parts_us: parts.micros(),
            holders: match cycle.records_lost {
                true => vec![],
                false => holders(cycle, cells),
            },
            throttled: cycle.throttles > 0,
            faults: cycle.faults,
            records_lost: cycle.records_lost,
            late_threads: 0,
        })
    }
}

/// The threads that held the CPU, each once, longest first.
pub(crate) fn holders(cycle: &Cycle, cells: &HashMap<i32, String>) -> Vec<Holder> {
    let mut by_pid: Vec<(i32, u64, &crate::decode::Task)> = vec![];
    for w in &cycle.waits {
        match by_pid.iter_mut().find(|(pid, ..)| *pid == w.holder.pid) {
            Some(entry) => entry.1 += w.ns,
            None => by_pid.push((w.holder.pid, w.ns, &w.holder)),
        }
    }
    by_pid.sort_by_key(|h| std::cmp::Reverse(h.1));
    let unthrottled_deadline = cycle.deadline && cycle.throttles == 0;
    by_pid
        .into_iter()
        .map(|(pid, ns, task)| Holder {
            pid,
            comm: task.comm.clone(),
            prio: task.prio,
            cell: cells.get(&pid).cloned(),
            us: micros(ns),
            by_fair_server: unthrottled_deadline && task.prio >= NORMAL_PRIO,
        })
        .collect()
}

/// The kernel's priorities of normal tasks start here (SCHED_OTHER,
/// SCHED_BATCH, SCHED_IDLE: 100–139).
const NORMAL_PRIO: i32 = 100;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Task;
    use crate::timeline::Wait;
    use proptest::prelude::*;

    const CLOCK: TaskClock = TaskClock {
        counts_interrupts: true,
    };

    fn cycle() -> impl Strategy<Value = Cycle> {
        let ns = || 0u64..5_000_000;
        (
            (0u64..1 << 40, ns(), ns(), ns(), ns()),
            (ns(), ns(), ns(), ns(), 0u32..3, 0u32..3),
            proptest::collection::vec((0i32..50, ns()), 0..4),
        )
            .prop_map(
                |(
                    (woken, idle, throttled, blocked, running),
                    (runtime, interrupts, gap, late, throttles, faults),
                    waits,
                )| {
                    let waits: Vec<Wait> = waits
                        .into_iter()
                        .map(|(pid, ns)| Wait {
                            holder: Task {
                                pid: pid + 1,
                                comm: format!("h{pid}"),
                                prio: 50,
                            },
                            ns,
                        })
                        .collect();
                    let waited: u64 = waits.iter().map(|w| w.ns).sum();
                    Cycle {
                        tid: 1,
                        woken_ns: woken + late,
                        timer_ns: Some(woken),
                        end_ns: woken + late + idle + waited + throttled + blocked + running + gap,
                        idle_wait_ns: idle,
                        waits,
                        throttled_ns: throttled,
                        throttles,
                        blocked_ns: blocked,
                        running_ns: running,
                        runtime_ns: runtime.min(running),
                        interrupts_ns: interrupts.min(runtime.min(running)),
                        faults,
                        ..Cycle::default()
                    }
                },
            )
    }

    #[test]
    fn a_normal_task_ahead_of_an_unthrottled_reservation_is_the_fair_servers() {
        let wait = |prio| Wait {
            holder: Task {
                pid: 7,
                comm: "hog".into(),
                prio,
            },
            ns: 5_000,
        };
        let reservation = |holder: i32, throttles| Cycle {
            deadline: true,
            throttles,
            waits: vec![wait(holder)],
            ..Cycle::default()
        };
        let flagged = |c: &Cycle| holders(c, &HashMap::new())[0].by_fair_server;
        assert!(flagged(&reservation(120, 0)));
        assert!(
            !flagged(&reservation(120, 1)),
            "throttled: its budget's doing"
        );
        assert!(!flagged(&reservation(-1, 0)), "another reservation");
        let fifo = Cycle {
            deadline: false,
            ..reservation(120, 0)
        };
        assert!(
            !flagged(&fifo),
            "a SCHED_FIFO thread a normal task can't hold"
        );
    }

    proptest! {
        #[test]
        fn the_parts_add_up_to_the_response(c in cycle(), counts in any::<bool>()) {
            let release = c.timer_ns.unwrap();
            let p = parts(&c, release, TaskClock { counts_interrupts: counts });
            prop_assert_eq!(p.total(), c.end_ns - release);
        }

        #[test]
        fn the_cause_is_the_longest_part(c in cycle(), allowance in 0u64..5_000_000) {
            let p = parts(&c, c.timer_ns.unwrap(), CLOCK);
            let chosen = cause(&p, allowance, c.faults);
            let excess = p.get(Cause::OwnWork).saturating_sub(allowance);
            let weight = |k: Cause| match k {
                Cause::OwnWork => excess,
                Cause::FaultsOrBlocking if c.faults > 0 => p.get(k).max(excess),
                _ => p.get(k),
            };
            for k in Cause::ALL {
                prop_assert!(weight(chosen) >= weight(k) || chosen == Cause::Unknown && weight(k) == 0,
                    "{:?} chosen over {:?}: {:?}", chosen, k, p);
            }
        }

        #[test]
        fn a_cycle_within_its_deadline_and_budget_is_no_miss(c in cycle()) {
            let c = Cycle { throttles: 0, ..c };
            let release = c.timer_ns.unwrap();
            let mut judge = Judge::new(Watch {
                tid: 1, deadline_ns: c.end_ns - release, period_ns: None, budget_ns: None,
                chain: None,
            }, CLOCK);
            prop_assert_eq!(judge.judge(&c, &HashMap::new()), None);
        }

        #[test]
        fn a_throttled_cycle_is_a_miss(c in cycle()) {
            let c = Cycle { throttles: 1, ..c };
            let mut judge = Judge::new(Watch {
                tid: 1, deadline_ns: u64::MAX / 2, period_ns: None, budget_ns: None,
                chain: None,
            }, CLOCK);
            prop_assert!(judge.judge(&c, &HashMap::new()).unwrap().throttled);
        }

        #[test]
        fn a_late_cycle_whose_records_were_lost_is_unknown(c in cycle()) {
            let c = Cycle { records_lost: true, throttles: 1, ..c };
            let mut judge = Judge::new(Watch {
                tid: 1, deadline_ns: 0, period_ns: None, budget_ns: None,
                chain: None,
            }, CLOCK);
            let miss = judge.judge(&c, &HashMap::new()).unwrap();
            prop_assert_eq!(miss.cause, Cause::Unknown);
            prop_assert!(miss.records_lost && miss.holders.is_empty());
            prop_assert_eq!(miss.parts_us.keys().copied().collect::<Vec<_>>(), vec![Cause::Unknown]);
        }

        #[test]
        fn the_release_is_never_after_the_wake_up(woken in 0u64..1 << 40, timer in proptest::option::of(0u64..1 << 41),
                                                   previous in proptest::option::of(0u64..1 << 40),
                                                   period in proptest::option::of(0u64..1 << 30)) {
            let r = expected_release(woken, timer, previous, period);
            prop_assert!(r <= woken);
            if let (Some(prev), Some(p)) = (previous, period) {
                if p > 0 && prev + p <= woken {
                    prop_assert!(woken - r < p || timer.is_some_and(|t| t <= woken && t == r));
                }
            }
        }
    }

    #[test]
    fn a_timer_armed_late_on_a_grid_is_woken_late() {
        // Period 10 ms; the previous release at 0; this cycle's timer was
        // armed for 14 ms and fired on time; it ran 0.5 ms; deadline 2 ms.
        let c = Cycle {
            woken_ns: 14_000_000,
            timer_ns: Some(14_000_000),
            end_ns: 14_500_000,
            running_ns: 500_000,
            runtime_ns: 500_000,
            ..Cycle::default()
        };
        let mut judge = Judge::new(
            Watch {
                tid: 1,
                deadline_ns: 2_000_000,
                period_ns: Some(10_000_000),
                budget_ns: None,
                chain: None,
            },
            CLOCK,
        );
        judge.previous_release = Some(0);
        let miss = judge.judge(&c, &HashMap::new()).unwrap();
        assert_eq!(miss.cause, Cause::WokenLate);
        assert_eq!(miss.parts_us[&Cause::WokenLate], 4_000.0);
        assert_eq!(miss.release_ns, 10_000_000);
    }

    #[test]
    fn the_holder_of_the_cpu_is_named_with_its_cell() {
        let hog = Task {
            pid: 42,
            comm: "hog".into(),
            prio: 49,
        };
        let c = Cycle {
            woken_ns: 0,
            end_ns: 5_000_000,
            waits: vec![
                Wait {
                    holder: hog.clone(),
                    ns: 3_000_000,
                },
                Wait {
                    holder: hog,
                    ns: 1_500_000,
                },
            ],
            running_ns: 500_000,
            runtime_ns: 500_000,
            ..Cycle::default()
        };
        let watch = Watch {
            tid: 1,
            deadline_ns: 1_000_000,
            period_ns: None,
            budget_ns: None,
            chain: None,
        };
        let cells = HashMap::from([(42, "noise".to_string())]);
        let miss = Judge::new(watch, CLOCK).judge(&c, &cells).unwrap();
        assert_eq!(miss.cause, Cause::WaitedForCpu);
        assert_eq!(miss.holders.len(), 1);
        assert_eq!(miss.holders[0].cell.as_deref(), Some("noise"));
        assert_eq!(miss.holders[0].us, 4_500.0);
    }
}
