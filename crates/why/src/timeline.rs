//! A watched thread's events, in time order, folded into cycles: from the
//! moment it is woken (or, for a SCHED_DEADLINE thread that yielded, its
//! replenishment) to the moment it sleeps again, with where the time in
//! between went — waiting on an idle CPU, waiting while another thread held
//! the CPU (and which), throttled, asleep uninterruptibly, running (wall
//! time, task-clock time, interrupts), page faults.
//!
//! The kernel may report neither a thread's wake-up nor its switch-in when
//! they happen while a CPU idles (some kernels deliver no event while the
//! idle task is current: the timer interrupt that wakes the thread and the
//! switch from the idle task are lost). A thread seen off its CPU whose own
//! events appear (its return from the call it waited in, a timer it arms,
//! an interrupt while it is current, its switch-out) was switched in
//! unseen, from an idle CPU: at the first of them, or earlier when the task
//! clock read with its switch-out says it ran longer. Its wake-up is then
//! its own timer's expiry when it armed one; the time in between, waiting
//! on an idle CPU.
//!
//! A SCHED_DEADLINE thread whose budget ran out arms its replenishment in
//! its own context (as it ran, slept, or gave the CPU to another
//! reservation): until that expiry, a wait of its is throttled, whoever
//! held the CPU.
//!
//! Pure: events in, cycles out; it keeps no clock of its own. It must never
//! judge a cycle (that is [`crate::attribute`]). A cycle begins only after
//! the thread was seen to sleep, so a trace started mid-cycle loses nothing
//! but that first cycle; lost events restart it the same way, and a cycle
//! that began before the records after the loss resumed says so
//! ([`Cycle::records_lost`]: its parts may miss a switch or a wake-up).

use crate::decode::{Event, Task, Timer, What};
use std::collections::BTreeMap;

/// `prev_state` bits: S (interruptible sleep), D (uninterruptible).
const STATE_SLEEPING: u64 = 1;
const STATE_UNINTERRUPTIBLE: u64 = 2;
/// The low bits name the state; higher ones (256: preempted) do not.
const STATE_MASK: u64 = 0xff;

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
    /// When it was woken; for a SCHED_DEADLINE job after a yield, its
    /// replenishment (or, without that, when it got its CPU back).
    pub woken_ns: u64,
    /// The expiry its own timer was armed for before it slept, if it set one.
    pub timer_ns: Option<u64>,
    /// The watched thread that woke it, when one did (not from an
    /// interrupt).
    pub woken_by: Option<i32>,
    /// When it slept again.
    pub end_ns: u64,
    /// Runnable on a CPU that was idle: the wake-up path's own latency.
    pub idle_wait_ns: u64,
    pub waits: Vec<Wait>,
    pub throttled_ns: u64,
    pub throttles: u32,
    pub blocked_ns: u64,
    /// Wall time on a CPU, and what of it its task clock counted (all of
    /// it when the task clock was not read).
    pub running_ns: u64,
    pub runtime_ns: u64,
    /// Time in interrupts and softirqs while it was current.
    pub interrupts_ns: u64,
    pub faults: u32,
    /// It ran under SCHED_DEADLINE.
    pub deadline: bool,
    /// It began before records lost on its way had resumed: its parts
    /// cannot be trusted.
    pub records_lost: bool,
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

impl State {
    /// When it left the CPU, for the states that count from then.
    fn since(&self) -> Option<u64> {
        match *self {
            State::Runnable { since, .. }
            | State::Throttled { since }
            | State::Blocked { since } => Some(since),
            State::Unknown | State::Sleeping | State::Running { .. } => None,
        }
    }
}

/// The first event of the thread's own while it was not seen on a CPU, and
/// the wake-up timer it had armed before (when it was asleep).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Unseen {
    at: u64,
    armed: Option<u64>,
}

/// The fold of one thread's events.
#[derive(Debug, Clone)]
pub struct Timeline {
    tid: i32,
    state: State,
    cycle: Cycle,
    /// The last wake-up timer it armed while running, for its next wake-up.
    armed: Option<u64>,
    yielded: bool,
    interrupt_depth: u32,
    interrupt_since: u64,
    unseen: Option<Unseen>,
    /// Per CPU, the watched threads' task clock read with the last switch
    /// there: the next switch's reading less this is what the thread it
    /// switches out ran (no other watched thread ran there in between, or
    /// its switch-out would have been read first).
    task_clocks: BTreeMap<u32, u64>,
    /// Until when the last loss of its records lasted.
    lost_until: Option<u64>,
    /// When its reservation's budget comes back, armed as it ran out
    /// (not as it yielded): a wake-up before that waits for it, throttled.
    replenished_at: Option<u64>,
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
            unseen: None,
            task_clocks: BTreeMap::new(),
            lost_until: None,
            replenished_at: None,
        }
    }

    /// Forgets the cycle under way: its records until `until` were lost.
    fn restart(&mut self, until: u64) {
        let lost_until = self.lost_until.max(Some(until));
        *self = Timeline {
            lost_until,
            ..Timeline::new(self.tid)
        };
    }

    /// Takes the next event (those of other threads only for the task
    /// clock); returns the cycle it ended, if it ended one.
    pub fn push(&mut self, e: &Event) -> Option<Cycle> {
        let t = e.time_ns;
        if e.what.current() == Some(self.tid) {
            self.on_cpu(t);
        }
        match &e.what {
            What::Lost { tid, until_ns } if tid.is_none_or(|t| t == self.tid) => {
                self.restart(*until_ns)
            }
            What::Switch {
                prev,
                prev_state,
                next,
                task_clock_ns,
            } => {
                let ran = self.ran(e.cpu, *task_clock_ns);
                if next.pid == self.tid {
                    self.switched_in(t, e.cpu, next, prev);
                } else if prev.pid == self.tid {
                    return self.switched_out(t, e.cpu, prev, *prev_state, next, ran);
                }
            }
            What::Waking { pid, waker } if *pid == self.tid => self.woken(t, *waker),
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
                timer,
            } if *pid == self.tid => self.timer_armed(*soft_expires_ns, *timer),
            What::Yield { pid } if *pid == self.tid => self.yielded = true,
            _ => {}
        }
        None
    }

    /// What the thread switched out on `cpu` ran on its task clock since
    /// the last switch there, from this switch's reading.
    fn ran(&mut self, cpu: u32, task_clock: Option<u64>) -> Option<u64> {
        let now = task_clock?;
        let last = self.task_clocks.insert(cpu, now)?;
        Some(now.saturating_sub(last))
    }

    /// Its own wake-up timer is the next cycle's; a reservation's
    /// replenishment armed as it yields is the next job's release.
    fn timer_armed(&mut self, expires: u64, timer: Timer) {
        match timer {
            Timer::Wakeup => self.armed = Some(expires),
            Timer::Replenishment if self.yielded => self.armed = Some(expires),
            Timer::Replenishment => self.replenished_at = Some(expires),
            Timer::Kernel => {}
        }
    }

    /// An event of its own: it was on a CPU. Off it as far as the events
    /// said, it was switched in unseen; the first such event bounds when.
    fn on_cpu(&mut self, t: u64) {
        let off = matches!(
            self.state,
            State::Sleeping
                | State::Runnable { .. }
                | State::Throttled { .. }
                | State::Blocked { .. }
        );
        if off && self.unseen.is_none() {
            let armed = match self.state {
                State::Sleeping => self.take_expired(t),
                _ => None,
            };
            self.unseen = Some(Unseen { at: t, armed });
        }
    }

    fn woken(&mut self, t: u64, waker: Option<i32>) {
        if self.unseen.is_some() {
            // It is running (switched in unseen): a wake-up before it
            // slept again changes nothing.
            return;
        }
        match self.state {
            State::Sleeping => {
                self.begin(t);
                self.cycle.timer_ns = self.take_expired(t);
                self.cycle.woken_by = waker;
            }
            State::Blocked { since } => self.cycle.blocked_ns += t.saturating_sub(since),
            _ => return,
        }
        self.state = State::Runnable { since: t, by: None };
    }

    /// Its armed wake-up timer, if it had expired by `t`: a wake-up before
    /// that came from elsewhere (an event loop's eventfd before its
    /// timerfd), and the timer is still the one that will wake it next.
    fn take_expired(&mut self, t: u64) -> Option<u64> {
        self.armed.filter(|&expires| expires <= t)?;
        self.armed.take()
    }

    fn begin(&mut self, t: u64) {
        self.cycle = Cycle {
            tid: self.tid,
            woken_ns: t,
            ..Cycle::default()
        };
    }

    fn switched_in(&mut self, t: u64, cpu: u32, me: &Task, holder: &Task) {
        self.unseen = None;
        let armed = match self.state {
            State::Sleeping => self.take_expired(t),
            _ => None,
        };
        self.run_from(t, cpu, me, holder, armed);
    }

    /// It got a CPU at `t` from `holder`; `armed`: its wake-up timer, when
    /// it was asleep (its wake-up went unseen, or it is a reservation's
    /// next job after a yield).
    fn run_from(&mut self, t: u64, cpu: u32, me: &Task, holder: &Task, armed: Option<u64>) {
        let replenished_at = self.replenished_at.take();
        match std::mem::replace(&mut self.state, State::Running { since: t }) {
            State::Runnable { since, by } => {
                let throttled = self.throttled_since(since, t, replenished_at);
                self.waited(t.saturating_sub(since) - throttled, by, holder);
            }
            State::Throttled { since } => self.cycle.throttled_ns += t.saturating_sub(since),
            State::Blocked { since } => self.cycle.blocked_ns += t.saturating_sub(since),
            State::Sleeping => {
                let woken = armed.filter(|&x| x <= t).unwrap_or(t);
                self.begin(woken);
                self.cycle.timer_ns = armed;
                let throttled = self.throttled_since(woken, t, replenished_at);
                self.waited(t - woken - throttled, None, holder);
            }
            State::Unknown | State::Running { .. } => {
                self.state = State::Unknown;
                return;
            }
        }
        self.cycle.comm.clone_from(&me.comm);
        self.cycle.cpu = cpu;
        self.cycle.deadline |= me.is_deadline();
    }

    /// Of a wait from `since` (its wake-up, or the switch-out at which the
    /// kernel found its budget spent) to `t`, the part before its budget
    /// came back at `replenished_at`, counted as throttled: the kernel holds
    /// it off every CPU until then, whoever runs — also a reservation with
    /// an earlier deadline that it seemed to yield to.
    fn throttled_since(&mut self, since: u64, t: u64, replenished_at: Option<u64>) -> u64 {
        let ns = replenished_at.map_or(0, |r| r.min(t).saturating_sub(since));
        if ns > 0 {
            self.cycle.throttles += 1;
            self.cycle.throttled_ns += ns;
        }
        ns
    }

    /// Runnable for `ns` while `by` (it preempted the thread) or `holder`
    /// (it gave the CPU up) ran.
    fn waited(&mut self, ns: u64, by: Option<Task>, holder: &Task) {
        match by.as_ref().unwrap_or(holder) {
            _ if ns == 0 => {}
            h if h.is_idle() => self.cycle.idle_wait_ns += ns,
            h => self.cycle.waits.push(Wait {
                holder: h.clone(),
                ns,
            }),
        }
    }

    fn switched_out(
        &mut self,
        t: u64,
        cpu: u32,
        me: &Task,
        state: u64,
        next: &Task,
        ran: Option<u64>,
    ) -> Option<Cycle> {
        let state = state & STATE_MASK;
        match self.state {
            State::Running { .. } => {}
            State::Unknown => {
                self.unseen = None;
                if state != 0 || self.yielded {
                    self.yielded = false;
                    self.state = State::Sleeping;
                }
                return None;
            }
            _ => self.switched_in_unseen(t, cpu, me, ran),
        }
        let State::Running { since } = self.state else {
            return None;
        };
        let running = t.saturating_sub(since);
        self.cycle.running_ns += running;
        self.cycle.runtime_ns += ran.unwrap_or(running).min(running);
        self.cycle.cpu = cpu;
        self.state = if state & STATE_UNINTERRUPTIBLE != 0 && state & STATE_SLEEPING == 0 {
            State::Blocked { since: t }
        } else if state != 0 || self.yielded {
            self.yielded = false;
            self.state = State::Sleeping;
            self.cycle.end_ns = t;
            self.cycle.records_lost = self.lost_until.is_some_and(|u| self.cycle.woken_ns <= u);
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

    /// Switched out at `out` with no switch-in since it left its CPU: it
    /// got one unseen, from an idle CPU, at the first event of its own, or
    /// earlier by what its task clock says it ran (`ran`), never before it
    /// left.
    fn switched_in_unseen(&mut self, out: u64, cpu: u32, me: &Task, ran: Option<u64>) {
        let first = self.unseen.take();
        let armed = match first {
            Some(u) => u.armed,
            None if self.state == State::Sleeping => self.take_expired(out),
            None => None,
        };
        let mut at = first.map_or(out, |u| u.at);
        if let Some(ran) = ran {
            at = at.min(out.saturating_sub(ran));
        }
        let at = at.max(self.state.since().unwrap_or(0));
        self.run_from(at, cpu, me, &Task::idle(), armed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::{Judge, TaskClock, Watch};
    use proptest::prelude::*;
    use std::collections::HashMap;

    const ME: i32 = 7;

    fn task(pid: i32, prio: i32) -> Task {
        Task {
            pid,
            comm: format!("t{pid}"),
            prio,
        }
    }

    fn idle() -> Task {
        task(0, 120)
    }

    fn on(cpu: u32, time_ns: u64, what: What) -> Event {
        Event { time_ns, cpu, what }
    }

    fn at(time_ns: u64, what: What) -> Event {
        on(1, time_ns, what)
    }

    /// A switch on CPU 1 with no task clock read.
    fn switch(time: u64, prev: Task, state: u64, next: Task) -> Event {
        switch_on(1, time, prev, state, next, None)
    }

    fn switch_on(
        cpu: u32,
        time: u64,
        prev: Task,
        state: u64,
        next: Task,
        task_clock_ns: Option<u64>,
    ) -> Event {
        on(
            cpu,
            time,
            What::Switch {
                prev,
                prev_state: state,
                next,
                task_clock_ns,
            },
        )
    }

    fn timer(time: u64, expires: u64, timer: Timer) -> Event {
        at(
            time,
            What::TimerStart {
                pid: ME,
                soft_expires_ns: expires,
                timer,
            },
        )
    }

    fn cycles(events: &[Event]) -> Vec<Cycle> {
        let mut tl = Timeline::new(ME);
        events.iter().filter_map(|e| tl.push(e)).collect()
    }

    #[test]
    fn a_preempted_cycle_names_its_preemptor_and_its_waker() {
        let (me, hog) = (task(ME, 120), task(9, 49));
        let clock = Some;
        let events = [
            switch_on(1, 0, me.clone(), 1, idle(), clock(0)),
            at(
                1_000,
                What::Waking {
                    pid: ME,
                    waker: None,
                },
            ),
            switch_on(1, 3_000, hog.clone(), 0, me.clone(), clock(0)),
            switch_on(1, 4_000, me.clone(), 256, hog.clone(), clock(500)),
            switch_on(1, 9_000, hog.clone(), 1, me.clone(), clock(500)),
            switch_on(1, 10_000, me.clone(), 1, idle(), clock(1_500)),
        ];
        let cycles = cycles(&events);
        assert_eq!(cycles.len(), 1);
        let c = &cycles[0];
        assert_eq!((c.woken_ns, c.end_ns), (1_000, 10_000));
        assert_eq!(c.waits.len(), 2);
        assert!(c.waits.iter().all(|w| w.holder.pid == 9));
        assert_eq!(c.waits.iter().map(|w| w.ns).sum::<u64>(), 2_000 + 5_000);
        // 500 of its first 1 000 ns on the CPU were not its own: stolen.
        assert_eq!((c.running_ns, c.runtime_ns), (2_000, 1_500));
    }

    #[test]
    fn without_a_task_clock_reading_a_run_counts_whole() {
        let me = task(ME, 120);
        let events = [
            switch(0, me.clone(), 1, idle()),
            at(
                1_000,
                What::Waking {
                    pid: ME,
                    waker: None,
                },
            ),
            switch(1_000, idle(), 0, me.clone()),
            switch(3_000, me, 1, idle()),
        ];
        let c = &cycles(&events)[0];
        assert_eq!((c.running_ns, c.runtime_ns), (2_000, 2_000));
    }

    /// `me` asleep since 0, woken and given an idle CPU at 1 µs.
    fn woken_at_1_us(me: &Task) -> [Event; 3] {
        [
            switch(0, me.clone(), 1, idle()),
            at(
                1_000,
                What::Waking {
                    pid: ME,
                    waker: None,
                },
            ),
            switch(1_000, idle(), 0, me.clone()),
        ]
    }

    #[test]
    fn a_deadline_thread_switched_out_runnable_for_a_lower_class_is_throttled() {
        let (me, other) = (task(ME, -1), task(9, 120));
        let events = [
            woken_at_1_us(&me).as_slice(),
            &[
                switch(2_000, me.clone(), 0, other.clone()),
                switch(8_000, other.clone(), 0, me.clone()),
                switch(9_000, me.clone(), 1, idle()),
            ],
        ]
        .concat();
        let c = &cycles(&events)[0];
        assert_eq!((c.throttles, c.throttled_ns), (1, 6_000));
        assert!(c.waits.is_empty());
    }

    /// The workgroup bench's callback: its budget ran out as it slept
    /// (the replenishment armed then); woken before its budget came back,
    /// it waited for it while a lower class ran — throttled, not a wait
    /// for a CPU behind that task.
    #[test]
    fn a_deadline_thread_woken_before_its_budget_came_back_is_throttled() {
        let (me, other) = (task(ME, -1), task(9, 29));
        let events = [
            woken_at_1_us(&me).as_slice(),
            &[
                timer(1_900, 5_000, Timer::Replenishment),
                switch(2_000, me.clone(), 1, other.clone()),
                at(
                    3_000,
                    What::Waking {
                        pid: ME,
                        waker: None,
                    },
                ),
                switch(5_100, other.clone(), 0, me.clone()),
                switch(6_000, me.clone(), 1, other.clone()),
                // The next wake-up, its budget long back: a wait as before.
                at(
                    7_000,
                    What::Waking {
                        pid: ME,
                        waker: None,
                    },
                ),
                switch(7_040, other.clone(), 0, me.clone()),
                switch(8_000, me, 1, other.clone()),
            ],
        ]
        .concat();
        let cycles = cycles(&events);
        assert_eq!(cycles.len(), 3);
        let c = &cycles[1];
        assert_eq!((c.throttles, c.throttled_ns), (1, 2_000));
        assert_eq!(
            c.waits,
            vec![Wait {
                holder: other.clone(),
                ns: 100
            }]
        );
        let c = &cycles[2];
        assert_eq!((c.throttles, c.throttled_ns), (0, 0));
        assert_eq!(
            c.waits,
            vec![Wait {
                holder: other,
                ns: 40
            }]
        );
    }

    /// Its budget ran out as a reservation with an earlier deadline took
    /// the CPU: throttled until the replenishment, not preempted.
    #[test]
    fn a_deadline_thread_whose_budget_ran_out_as_it_was_preempted_is_throttled() {
        let (me, member) = (task(ME, -1), task(9, -1));
        let events = [
            woken_at_1_us(&me).as_slice(),
            &[
                timer(1_990, 5_000, Timer::Replenishment),
                switch(2_000, me.clone(), 0, member.clone()),
                switch(2_300, member.clone(), 1, idle()),
                switch(5_050, idle(), 0, me.clone()),
                switch(6_000, me, 1, idle()),
            ],
        ]
        .concat();
        let c = &cycles(&events)[0];
        assert_eq!((c.throttles, c.throttled_ns), (1, 3_000));
        assert_eq!(
            c.waits,
            vec![Wait {
                holder: member,
                ns: 50
            }]
        );
    }

    #[test]
    fn a_cycle_is_only_begun_after_a_sleep_was_seen() {
        let me = task(ME, 120);
        let mut tl = Timeline::new(ME);
        assert_eq!(tl.push(&switch(5, me.clone(), 1, idle())), None);
        tl.push(&at(
            10,
            What::Waking {
                pid: ME,
                waker: None,
            },
        ));
        tl.push(&switch(20, idle(), 0, me.clone()));
        let c = tl.push(&switch(30, me, 1, idle())).unwrap();
        assert_eq!((c.idle_wait_ns, c.running_ns), (10, 10));
    }

    /// An event loop woken by an eventfd before the timerfd it armed
    /// (PipeWire's driver, as its clients finish): the timer is the next
    /// wake-up's, which is the period's release.
    #[test]
    fn a_timer_not_yet_expired_waits_for_the_wake_up_it_causes() {
        let me = task(ME, 79);
        let events = [
            timer(500, 10_000, Timer::Wakeup),
            switch(600, me.clone(), 1, idle()),
            at(
                4_000,
                What::Waking {
                    pid: ME,
                    waker: None,
                },
            ),
            switch(4_010, idle(), 0, me.clone()),
            switch(4_100, me.clone(), 1, idle()),
            at(
                10_020,
                What::Waking {
                    pid: ME,
                    waker: None,
                },
            ),
            switch(10_030, idle(), 0, me.clone()),
            switch(10_200, me, 1, idle()),
        ];
        let cycles = cycles(&events);
        let woken: Vec<_> = cycles.iter().map(|c| (c.woken_ns, c.timer_ns)).collect();
        assert_eq!(woken, [(4_000, None), (10_020, Some(10_000))]);
    }

    /// Issue 24's `tessera why --pid` on a SCHED_FIFO sleeper saw no cycle:
    /// woken by its timer on an idle CPU, it gave neither a wake-up nor a
    /// switch-in, only its returns from the sleep and its switch-outs.
    #[test]
    fn a_sleeper_woken_on_an_idle_cpu_is_seen_by_its_own_events() {
        let me = task(ME, 79);
        let returned = |t| at(t, What::Returned { pid: ME });
        let events = [
            timer(500, 10_000, Timer::Wakeup),
            switch(600, me.clone(), 1, idle()),
            returned(10_030),
            timer(10_200, 20_000, Timer::Wakeup),
            switch(10_210, me.clone(), 1, idle()),
            returned(20_040),
            timer(20_290, 30_000, Timer::Wakeup),
            switch(20_300, me, 1, idle()),
        ];
        let cycles = cycles(&events);
        assert_eq!(cycles.len(), 2);
        let c = &cycles[0];
        assert_eq!(
            (c.woken_ns, c.timer_ns, c.end_ns),
            (10_000, Some(10_000), 10_210)
        );
        assert_eq!((c.idle_wait_ns, c.running_ns), (30, 180));
        assert_eq!(c.comm, "t7");
        let c = &cycles[1];
        assert_eq!(
            (c.woken_ns, c.idle_wait_ns, c.running_ns),
            (20_000, 40, 260)
        );
    }

    /// Issue 24's known defect: a throttled reservation, replenished on an
    /// idle CPU, was seen switched out on the other CPU with no switch-in
    /// before it, and its cycle was dropped.
    #[test]
    fn a_throttled_reservation_switched_in_unseen_on_the_other_cpu_keeps_its_cycle() {
        let (me, other) = (task(ME, -1), task(9, 120));
        let events = [
            switch_on(0, 0, me.clone(), 1, idle(), Some(0)),
            on(
                0,
                1_000,
                What::Waking {
                    pid: ME,
                    waker: None,
                },
            ),
            switch_on(1, 1_010, other, 0, me.clone(), Some(7_000)),
            // The budget ran out: the replenishment armed, the CPU given up.
            timer(2_000, 10_000, Timer::Replenishment),
            switch_on(1, 2_010, me.clone(), 0, idle(), Some(8_000)),
            on(
                1,
                10_000,
                What::Migrate {
                    pid: ME,
                    dest_cpu: 0,
                },
            ),
            // Replenished on CPU 0, idle: no switch-in; an interrupt, then its sleep.
            on(0, 10_500, What::InterruptEntry { pid: ME }),
            on(0, 10_510, What::InterruptExit { pid: ME }),
            switch_on(0, 11_000, me, 1, idle(), Some(990)),
        ];
        let cycles = cycles(&events);
        assert_eq!(cycles.len(), 1);
        let c = &cycles[0];
        // It ran 990 ns on CPU 0 before its switch-out: in at 10 010.
        assert_eq!((c.woken_ns, c.end_ns, c.cpu), (1_000, 11_000, 0));
        assert_eq!((c.throttles, c.throttled_ns), (1, 8_000));
        assert_eq!((c.running_ns, c.runtime_ns), (1_000 + 990, 1_000 + 990));
        assert_eq!(c.interrupts_ns, 10);
        assert!(c.deadline);
    }

    /// Issue 24: a reservation sleeping on its own timer had every miss
    /// judged "woken late": the inactive timer its reservation arms as it
    /// blocks was read as its wake-up.
    #[test]
    fn only_its_own_timer_is_its_wake_up() {
        let (me, other) = (task(ME, -1), task(9, 120));
        let events = [
            timer(500, 10_000_000, Timer::Wakeup),
            timer(505, 700_000, Timer::Kernel),
            switch(510, me.clone(), 1, other.clone()),
            at(
                10_000_000,
                What::Waking {
                    pid: ME,
                    waker: None,
                },
            ),
            switch(10_000_010, other.clone(), 0, me.clone()),
            timer(10_000_190, 20_000_000, Timer::Wakeup),
            timer(10_000_195, 10_700_000, Timer::Kernel),
            switch(10_000_200, me, 1, other),
        ];
        let c = &cycles(&events)[0];
        assert_eq!(c.timer_ns, Some(10_000_000));
        let watch = Watch {
            tid: ME,
            deadline_ns: 1_000_000,
            period_ns: Some(10_000_000),
            budget_ns: Some(200_000),
            chain: None,
        };
        let clock = TaskClock {
            counts_interrupts: true,
        };
        assert_eq!(Judge::new(watch, clock).judge(c, &HashMap::new()), None);
    }

    #[test]
    fn a_yielded_job_is_released_at_its_replenishment() {
        let me = task(ME, -1);
        let events = [
            switch(0, me.clone(), 1, idle()),
            at(
                1_000,
                What::Waking {
                    pid: ME,
                    waker: None,
                },
            ),
            switch(1_000, idle(), 0, me.clone()),
            at(1_500, What::Yield { pid: ME }),
            timer(1_505, 10_000, Timer::Replenishment),
            switch(1_510, me.clone(), 0, idle()),
            // Its next job starts unseen on the idle CPU.
            at(10_020, What::Returned { pid: ME }),
            at(10_600, What::Yield { pid: ME }),
            switch(10_610, me, 0, idle()),
        ];
        let cycles = cycles(&events);
        assert_eq!(cycles.len(), 2);
        assert_eq!((cycles[0].woken_ns, cycles[0].end_ns), (1_000, 1_510));
        let c = &cycles[1];
        assert_eq!((c.woken_ns, c.timer_ns), (10_000, Some(10_000)));
        assert_eq!((c.idle_wait_ns, c.running_ns, c.throttles), (20, 590, 0));
    }

    #[test]
    fn lost_records_forget_the_cycle_under_way() {
        let me = task(ME, 120);
        let events = [
            switch(0, me.clone(), 1, idle()),
            at(
                1_000,
                What::Waking {
                    pid: ME,
                    waker: None,
                },
            ),
            at(
                1_500,
                What::Lost {
                    tid: None,
                    until_ns: 1_900,
                },
            ),
            switch(2_000, idle(), 0, me.clone()),
            switch(3_000, me.clone(), 1, idle()),
            at(
                4_000,
                What::Waking {
                    pid: ME,
                    waker: None,
                },
            ),
            switch(4_000, idle(), 0, me.clone()),
            switch(5_000, me, 1, idle()),
        ];
        let cycles = cycles(&events);
        assert_eq!(cycles.len(), 1);
        assert_eq!(cycles[0].woken_ns, 4_000);
        assert!(!cycles[0].records_lost);
    }

    #[test]
    fn a_cycle_begun_before_lost_records_resumed_says_so() {
        let me = task(ME, 120);
        let lost = |tid| What::Lost {
            tid,
            until_ns: 2_500,
        };
        let events = [
            switch(0, me.clone(), 1, idle()),
            at(1_000, lost(None)),
            // Its switch-out (asleep) on another CPU, whose ring lost
            // nothing; its next wake-up came before the lost CPU's records
            // resumed.
            switch_on(2, 1_200, me.clone(), 1, idle(), None),
            on(
                2,
                2_000,
                What::Waking {
                    pid: ME,
                    waker: None,
                },
            ),
            switch_on(2, 2_100, idle(), 0, me.clone(), None),
            switch_on(2, 3_000, me.clone(), 1, idle(), None),
            // Another thread's ring lost records: not this one's.
            at(3_500, lost(Some(ME + 1))),
            at(
                4_000,
                What::Waking {
                    pid: ME,
                    waker: None,
                },
            ),
            switch(4_000, idle(), 0, me.clone()),
            switch(5_000, me, 1, idle()),
        ];
        let cycles = cycles(&events);
        assert_eq!(cycles.len(), 2);
        assert!(cycles[0].records_lost);
        assert!(!cycles[1].records_lost);
    }

    /// One run of a true schedule: how long, then the gap before the next
    /// run (preempted by a reservation with an earlier deadline, or
    /// throttled), and whether the next switch-in is from an idle CPU (not
    /// reported) and followed by an interrupt.
    #[derive(Debug, Clone)]
    struct Run {
        ns: u64,
        gap: u64,
        throttled: bool,
        unseen: bool,
        interrupt: bool,
    }

    /// A cycle of a true schedule: woken `late` after its timer, switched
    /// in `delay` later (from an idle CPU, unreported, or a busy one),
    /// its runs, its last run.
    #[derive(Debug, Clone)]
    struct TrueCycle {
        late: u64,
        delay: u64,
        unseen: bool,
        returned: bool,
        runs: Vec<Run>,
        last: u64,
    }

    fn true_cycle() -> impl Strategy<Value = TrueCycle> {
        let run = (
            1u64..1_000,
            1u64..1_000,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(ns, gap, throttled, unseen, interrupt)| Run {
                ns,
                gap,
                throttled,
                unseen,
                interrupt,
            });
        (
            0u64..100,
            0u64..100,
            any::<bool>(),
            any::<bool>(),
            proptest::collection::vec(run, 0..4),
            2u64..1_000,
        )
            .prop_map(|(late, delay, unseen, returned, runs, last)| TrueCycle {
                late,
                delay,
                unseen,
                returned,
                runs,
                last,
            })
    }

    /// The events of `cycles` of a reservation on a 10 µs grid, as a
    /// kernel that drops what happens while a CPU idles reports them, and
    /// what each cycle truly was: (woken, end, running, throttled,
    /// preempted).
    fn schedule(cycles: &[TrueCycle]) -> (Vec<Event>, Vec<[u64; 5]>) {
        let (me, busy, earlier) = (task(ME, -1), task(9, 120), task(11, -1));
        let mut events = vec![
            timer(0, 10_000, Timer::Wakeup),
            switch_on(1, 1, me.clone(), 1, idle(), Some(0)),
        ];
        let mut truth = vec![];
        let mut clock = 0;
        for (k, c) in cycles.iter().enumerate() {
            let expiry = 10_000 * (k as u64 + 1);
            let woken = expiry + c.late;
            let mut t = woken + c.delay;
            let (mut running, mut throttled, mut preempted) = (0, 0, c.delay);
            if c.unseen {
                preempted = 0;
                if c.returned {
                    events.push(at(t, What::Returned { pid: ME }));
                }
            } else {
                events.push(at(
                    woken,
                    What::Waking {
                        pid: ME,
                        waker: None,
                    },
                ));
                events.push(switch_on(1, t, busy.clone(), 0, me.clone(), Some(clock)));
            }
            for r in &c.runs {
                t += r.ns;
                clock += r.ns;
                running += r.ns;
                let next = if r.throttled { idle() } else { earlier.clone() };
                events.push(switch_on(1, t, me.clone(), 0, next.clone(), Some(clock)));
                t += r.gap;
                match r.throttled {
                    true => throttled += r.gap,
                    false => preempted += r.gap,
                }
                if r.unseen && r.throttled {
                    if r.interrupt {
                        events.push(at(t + 1, What::InterruptEntry { pid: ME }));
                        events.push(at(t + 2, What::InterruptExit { pid: ME }));
                    }
                } else {
                    events.push(switch_on(1, t, next, 0, me.clone(), Some(clock)));
                }
            }
            t += c.last;
            clock += c.last;
            running += c.last;
            events.push(timer(t - 1, expiry + 10_000, Timer::Wakeup));
            events.push(switch_on(1, t, me.clone(), 1, idle(), Some(clock)));
            truth.push([woken, t, running, throttled, preempted]);
        }
        (events, truth)
    }

    proptest! {
        /// Whatever the kernel left out of what happened while the CPU
        /// idled, every cycle is kept, ends when it did, and its parts add
        /// up to it; with the task clock read, its run time is exact.
        #[test]
        fn unreported_switch_ins_lose_no_cycle(cycles in proptest::collection::vec(true_cycle(), 1..6)) {
            let (events, truth) = schedule(&cycles);
            let got = super::tests::cycles(&events);
            prop_assert_eq!(got.len(), truth.len());
            for ((c, [woken, end, running, throttled, preempted]), t) in got.iter().zip(&truth).zip(&cycles) {
                prop_assert_eq!(c.end_ns, *end);
                let waited: u64 = c.waits.iter().map(|w| w.ns).sum();
                prop_assert_eq!(
                    c.idle_wait_ns + waited + c.throttled_ns + c.blocked_ns + c.running_ns,
                    c.end_ns - c.woken_ns
                );
                prop_assert_eq!((c.running_ns, c.runtime_ns), (*running, *running));
                prop_assert_eq!(c.throttles as usize, t.runs.iter().filter(|r| r.throttled).count());
                prop_assert_eq!(c.throttled_ns, *throttled);
                prop_assert_eq!(waited, *preempted);
                // Unseen, its wake-up is its timer's expiry.
                prop_assert_eq!(c.woken_ns, if t.unseen { woken - t.late } else { *woken });
            }
        }
    }
}
