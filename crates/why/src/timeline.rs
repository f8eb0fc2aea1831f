//! A watched thread's events, in time order, folded into cycles: from the
//! moment it is woken (or, for a SCHED_DEADLINE thread that yielded or was
//! throttled, given its CPU back) to the moment it sleeps again, with where
//! the time in between went — waiting on an idle CPU, waiting while another
//! thread held the CPU (and which), throttled, asleep uninterruptibly,
//! running (wall time, task-clock time, interrupts), page faults.
//!
//! Pure: events in, cycles out; it keeps no clock of its own. It must never
//! judge a cycle (that is [`crate::attribute`]). A cycle begins only after
//! the thread was seen to sleep, so a trace started mid-cycle loses nothing
//! but that first cycle; lost events restart it the same way.

use crate::decode::{Event, Task, What};

/// `prev_state` bits: S (interruptible sleep), D (uninterruptible).
const STATE_SLEEPING: u64 = 1;
const STATE_UNINTERRUPTIBLE: u64 = 2;
/// The low bits name the state; higher ones (256: preempted) do not.
const STATE_MASK: u64 = 0xff;
/// `hrtimer_mode` bit of a timer pinned to its CPU (the scheduler's own
/// hrtick), which is never the thread's wake-up.
const TIMER_PINNED: u32 = 2;

/// Time a watched thread was runnable while `holder` ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub holder: Task,
    pub ns: u64,
}

/// One cycle of a thread, as the events tell it (times in CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cycle {
    pub tid: i32,
    pub comm: String,
    /// The CPU it ended on.
    pub cpu: u32,
    /// When it was woken; for a SCHED_DEADLINE job after a yield or a
    /// throttle, when it got its CPU back.
    pub woken_ns: u64,
    /// The expiry its own timer was armed for before it slept, if it set one.
    pub timer_ns: Option<u64>,
    /// When it slept again.
    pub end_ns: u64,
    /// Runnable on a CPU that was idle: the wake-up path's own latency.
    pub idle_wait_ns: u64,
    pub waits: Vec<Wait>,
    pub throttled_ns: u64,
    pub throttles: u32,
    pub blocked_ns: u64,
    /// Wall time on a CPU, and what of it its task clock counted.
    pub running_ns: u64,
    pub runtime_ns: u64,
    /// Time in interrupts and softirqs while it was current.
    pub interrupts_ns: u64,
    pub faults: u32,
    /// It ran under SCHED_DEADLINE.
    pub deadline: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Not yet seen to sleep: its cycle's start is unknown.
    Unknown,
    Sleeping,
    /// Runnable since, preempted by `by` if it was.
    Runnable {
        since: u64,
        by: Option<Task>,
    },
    Running {
        since: u64,
    },
    Throttled {
        since: u64,
    },
    Blocked {
        since: u64,
    },
}

/// The fold of one thread's events.
#[derive(Debug, Clone)]
pub struct Timeline {
    tid: i32,
    state: State,
    cycle: Cycle,
    /// The last timer it armed while running, for its next wake-up.
    armed: Option<u64>,
    yielded: bool,
    interrupt_depth: u32,
    interrupt_since: u64,
}

impl Timeline {
    pub fn new(tid: i32) -> Timeline {
        Timeline {
            tid,
            state: State::Unknown,
            cycle: Cycle::default(),
            armed: None,
            yielded: false,
            interrupt_depth: 0,
            interrupt_since: 0,
        }
    }

    /// Forgets the cycle under way (events were lost).
    pub fn restart(&mut self) {
        *self = Timeline::new(self.tid);
    }

    /// Takes the next event of this thread (any other is ignored); returns
    /// the cycle it ended, if it ended one.
    pub fn push(&mut self, e: &Event) -> Option<Cycle> {
        let t = e.time_ns;
        match &e.what {
            What::Waking { pid } if *pid == self.tid => self.woken(t),
            What::Switch { next, prev, .. } if next.pid == self.tid => {
                self.switched_in(t, e.cpu, next, prev)
            }
            What::Switch {
                prev,
                prev_state,
                next,
            } if prev.pid == self.tid => return self.switched_out(t, e.cpu, *prev_state, next),
            What::Runtime { pid, ns } if *pid == self.tid => self.cycle.runtime_ns += ns,
            What::InterruptEntry { pid } if *pid == self.tid => {
                if self.interrupt_depth == 0 {
                    self.interrupt_since = t;
                }
                self.interrupt_depth += 1;
            }
            What::InterruptExit { pid } if *pid == self.tid && self.interrupt_depth > 0 => {
                self.interrupt_depth -= 1;
                if self.interrupt_depth == 0 {
                    self.cycle.interrupts_ns += t.saturating_sub(self.interrupt_since);
                }
            }
            What::Fault { pid } if *pid == self.tid => self.cycle.faults += 1,
            What::TimerStart {
                pid,
                soft_expires_ns,
                mode,
            } if *pid == self.tid && mode & TIMER_PINNED == 0 => {
                self.armed = Some(*soft_expires_ns)
            }
            What::Yield { pid } if *pid == self.tid => self.yielded = true,
            _ => {}
        }
        None
    }

    fn woken(&mut self, t: u64) {
        match self.state {
            State::Sleeping => {
                self.begin(t);
                self.cycle.timer_ns = self.armed.take();
            }
            State::Blocked { since } => self.cycle.blocked_ns += t.saturating_sub(since),
            _ => return,
        }
        self.state = State::Runnable { since: t, by: None };
    }

    fn begin(&mut self, t: u64) {
        self.cycle = Cycle {
            tid: self.tid,
            woken_ns: t,
            ..Cycle::default()
        };
        self.yielded = false;
    }

    fn switched_in(&mut self, t: u64, cpu: u32, me: &Task, holder: &Task) {
        match std::mem::replace(&mut self.state, State::Running { since: t }) {
            State::Runnable { since, by } => {
                let ns = t.saturating_sub(since);
                match by.as_ref().unwrap_or(holder) {
                    h if h.is_idle() => self.cycle.idle_wait_ns += ns,
                    h => self.cycle.waits.push(Wait {
                        holder: h.clone(),
                        ns,
                    }),
                }
            }
            State::Throttled { since } => self.cycle.throttled_ns += t.saturating_sub(since),
            // A SCHED_DEADLINE job that yielded starts again at its
            // replenishment, with no wake-up event.
            State::Sleeping if me.is_deadline() => self.begin(t),
            State::Sleeping | State::Unknown | State::Blocked { .. } | State::Running { .. } => {
                self.state = State::Unknown;
                return;
            }
        }
        self.cycle.comm.clone_from(&me.comm);
        self.cycle.cpu = cpu;
        self.cycle.deadline |= me.is_deadline();
    }

    fn switched_out(&mut self, t: u64, cpu: u32, state: u64, next: &Task) -> Option<Cycle> {
        let State::Running { since } = self.state else {
            self.state = match state & STATE_MASK {
                0 => State::Unknown,
                _ => State::Sleeping,
            };
            return None;
        };
        self.cycle.running_ns += t.saturating_sub(since);
        self.cycle.cpu = cpu;
        let state = state & STATE_MASK;
        self.state = if state & STATE_UNINTERRUPTIBLE != 0 && state & STATE_SLEEPING == 0 {
            State::Blocked { since: t }
        } else if state != 0 || self.yielded {
            self.state = State::Sleeping;
            self.cycle.end_ns = t;
            return Some(std::mem::take(&mut self.cycle));
        } else if self.cycle.deadline && !next.is_deadline() && !next.is_stopper() {
            // Only a reservation with an earlier deadline, or the stopper,
            // preempts a SCHED_DEADLINE thread: anything else means its
            // budget ran out.
            self.cycle.throttles += 1;
            State::Throttled { since: t }
        } else {
            State::Runnable {
                since: t,
                by: Some(next.clone()),
            }
        };
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(pid: i32, prio: i32) -> Task {
        Task {
            pid,
            comm: format!("t{pid}"),
            prio,
        }
    }

    fn at(time_ns: u64, what: What) -> Event {
        Event {
            time_ns,
            cpu: 1,
            what,
        }
    }

    fn switch(time: u64, prev: Task, state: u64, next: Task) -> Event {
        at(
            time,
            What::Switch {
                prev,
                prev_state: state,
                next,
            },
        )
    }

    #[test]
    fn a_preempted_cycle_names_its_preemptor_and_its_waker() {
        let (me, hog, idle) = (task(7, 120), task(9, 49), task(0, 120));
        let events = [
            switch(0, me.clone(), 1, idle.clone()),
            at(1_000, What::Waking { pid: 7 }),
            switch(3_000, hog.clone(), 0, me.clone()),
            at(3_500, What::Runtime { pid: 7, ns: 500 }),
            switch(4_000, me.clone(), 256, hog.clone()),
            switch(9_000, hog.clone(), 1, me.clone()),
            at(10_000, What::Runtime { pid: 7, ns: 1_000 }),
            switch(10_000, me.clone(), 1, idle.clone()),
        ];
        let mut tl = Timeline::new(7);
        let cycles: Vec<Cycle> = events.iter().filter_map(|e| tl.push(e)).collect();
        assert_eq!(cycles.len(), 1);
        let c = &cycles[0];
        assert_eq!((c.woken_ns, c.end_ns), (1_000, 10_000));
        assert_eq!(c.waits.len(), 2);
        assert!(c.waits.iter().all(|w| w.holder.pid == 9));
        assert_eq!(c.waits.iter().map(|w| w.ns).sum::<u64>(), 2_000 + 5_000);
        assert_eq!((c.running_ns, c.runtime_ns), (2_000, 1_500));
    }

    #[test]
    fn a_deadline_thread_switched_out_runnable_for_a_lower_class_is_throttled() {
        let (me, other, idle) = (task(7, -1), task(9, 120), task(0, 120));
        let events = [
            switch(0, me.clone(), 1, idle.clone()),
            at(1_000, What::Waking { pid: 7 }),
            switch(1_000, idle.clone(), 0, me.clone()),
            switch(2_000, me.clone(), 0, other.clone()),
            switch(8_000, other.clone(), 0, me.clone()),
            switch(9_000, me.clone(), 1, idle.clone()),
        ];
        let mut tl = Timeline::new(7);
        let c = events.iter().find_map(|e| tl.push(e)).unwrap();
        assert_eq!((c.throttles, c.throttled_ns), (1, 6_000));
        assert!(c.waits.is_empty());
    }

    #[test]
    fn a_cycle_is_only_begun_after_a_sleep_was_seen() {
        let (me, idle) = (task(7, 120), task(0, 120));
        let mut tl = Timeline::new(7);
        assert_eq!(tl.push(&switch(5, me.clone(), 1, idle.clone())), None);
        tl.push(&at(10, What::Waking { pid: 7 }));
        tl.push(&switch(20, idle.clone(), 0, me.clone()));
        let c = tl.push(&switch(30, me, 1, idle)).unwrap();
        assert_eq!((c.idle_wait_ns, c.running_ns), (10, 10));
    }
}
