//! Watching the threads of a set of processes: which threads they have,
//! which of them their programs make real-time, and when threads and
//! processes end.
//!
//! New threads and exits come from the kernel's process-events connector
//! when it can be used (immediately; needs CAP_NET_ADMIN), otherwise from
//! listing `/proc/PID/task` every [`WatchOptions::task_poll`]. The connector
//! does not report scheduling changes, so every known thread's policy is
//! read (sched_getattr) either way: every [`WatchOptions::policy_poll`]
//! while the thread is young (audio programs make their threads real-time
//! as they start them), every [`WatchOptions::settled_poll`] once it is
//! older than [`WatchOptions::settled_after`] — a session of 64 clients has
//! hundreds of threads, and reading each one's policy 100 times a second
//! would cost the watcher more than what it guards is worth — and a settled
//! SCHED_DEADLINE thread only every [`WatchOptions::deadline_poll`]: its
//! reservation is the guard's (or the program's own), and what can change
//! it is a program taking its thread back, which the guard may learn half
//! a second late, not a thread turning real-time, which it must reserve
//! within an interval.
//! Processes can be added at any time (the guard adds clients as they come)
//! and, with [`WatchOptions::children`], the processes they start are added
//! as they start.
//!
//! It owns only observation. It must never change a thread, never print,
//! and never wait without a timeout: [`Watch::poll`] returns within the
//! time it is given.
//!
//! Events, in the order they happened for each thread:
//! - `Appeared` for every thread first seen (with its policy), followed by
//!   `Realtime { from: None }` when it is already SCHED_FIFO/RR;
//! - `Realtime { from: Some(..) }` when a thread becomes SCHED_FIFO/RR —
//!   from SCHED_DEADLINE this is a program taking back a reservation;
//! - `Deadline` when it becomes SCHED_DEADLINE (tessera's reservation, or
//!   the program's own), `NotRealtime` when it goes to a normal policy from
//!   FIFO/RR or DEADLINE, `Changed` for a change within one of these kinds;
//! - `Exited` for a thread, `ProcessExited` once per process.

use crate::GuardError;
use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};
use tessera_sys::event::{Epoll, Readiness, Trigger};
use tessera_sys::proc::{self, Pid};
use tessera_sys::procevents::{ProcEvent, ProcEvents};
use tessera_sys::sched::{self, Policy, Tid};

/// How a [`Watch`] looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchOptions {
    /// How often a young thread's policy is read.
    pub policy_poll: Duration,
    /// How often the policy of a thread older than `settled_after` is read.
    pub settled_poll: Duration,
    pub settled_after: Duration,
    /// How often the policy of a settled SCHED_DEADLINE thread is read.
    pub deadline_poll: Duration,
    /// How often `/proc/PID/task` is listed when the connector is not used.
    pub task_poll: Duration,
    /// Poll `/proc` even when the connector could be used.
    pub force_polling: bool,
    /// Also watch the processes the watched ones start.
    pub children: bool,
}

impl Default for WatchOptions {
    fn default() -> WatchOptions {
        WatchOptions {
            policy_poll: Duration::from_millis(10),
            settled_poll: Duration::from_millis(100),
            settled_after: Duration::from_secs(1),
            deadline_poll: Duration::from_millis(500),
            task_poll: Duration::from_millis(50),
            force_polling: false,
            children: false,
        }
    }
}

/// With the connector, `/proc` is still listed this often: a safety net for
/// events the kernel dropped (a full socket buffer) or that raced with
/// adding a process.
const RESCAN_WITH_CONNECTOR: Duration = Duration::from_millis(500);

/// Where thread creations and exits come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The kernel's process-events connector (immediate).
    Connector,
    /// Listing `/proc/PID/task`; `reason` says why the connector is not used.
    Polling { reason: String },
}

/// Something that happened to a watched thread or process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadEvent {
    /// A thread seen for the first time, with its policy.
    Appeared {
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
    },
    /// The thread is SCHED_FIFO/RR by its program's choice: it appeared so
    /// (`from` None) or just became so.
    Realtime {
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
        from: Option<Policy>,
    },
    /// The thread became SCHED_DEADLINE.
    Deadline {
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
        from: Policy,
    },
    /// The thread went from FIFO/RR or DEADLINE to a normal policy.
    NotRealtime {
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
        from: Policy,
    },
    /// Another change: a priority, a nice value, reservation parameters.
    Changed {
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
        from: Policy,
    },
    /// The thread exited.
    Exited { pid: Pid, tid: Tid, name: String },
    /// A process a watched one started (with `children`), now watched too.
    ProcessStarted { pid: Pid, parent: Pid },
    /// The process ended (its last thread exited).
    ProcessExited { pid: Pid },
}

impl ThreadEvent {
    /// The process the event is about.
    pub fn pid(&self) -> Pid {
        match self {
            ThreadEvent::Appeared { pid, .. }
            | ThreadEvent::Realtime { pid, .. }
            | ThreadEvent::Deadline { pid, .. }
            | ThreadEvent::NotRealtime { pid, .. }
            | ThreadEvent::Changed { pid, .. }
            | ThreadEvent::Exited { pid, .. }
            | ThreadEvent::ProcessStarted { pid, .. }
            | ThreadEvent::ProcessExited { pid } => *pid,
        }
    }

    /// The thread the event is about (none for process events).
    pub fn tid(&self) -> Option<Tid> {
        match self {
            ThreadEvent::Appeared { tid, .. }
            | ThreadEvent::Realtime { tid, .. }
            | ThreadEvent::Deadline { tid, .. }
            | ThreadEvent::NotRealtime { tid, .. }
            | ThreadEvent::Changed { tid, .. }
            | ThreadEvent::Exited { tid, .. } => Some(*tid),
            ThreadEvent::ProcessStarted { .. } | ThreadEvent::ProcessExited { .. } => None,
        }
    }
}

impl fmt::Display for ThreadEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThreadEvent::Appeared {
                pid,
                tid,
                name,
                policy,
            } => write!(
                f,
                "thread {tid} {name:?} of process {pid} appeared ({policy})"
            ),
            ThreadEvent::Realtime {
                tid, name, policy, ..
            } => write!(f, "thread {tid} {name:?} is real-time ({policy})"),
            ThreadEvent::Deadline {
                tid, name, policy, ..
            } => write!(f, "thread {tid} {name:?} became {policy}"),
            ThreadEvent::NotRealtime {
                tid,
                name,
                policy,
                from,
                ..
            } => write!(f, "thread {tid} {name:?} left {} for {policy}", from.name()),
            ThreadEvent::Changed {
                tid,
                name,
                policy,
                from,
                ..
            } => write!(f, "thread {tid} {name:?} changed from {from} to {policy}"),
            ThreadEvent::Exited { tid, name, .. } => write!(f, "thread {tid} {name:?} exited"),
            ThreadEvent::ProcessStarted { pid, parent } => {
                write!(f, "process {pid} started by process {parent}")
            }
            ThreadEvent::ProcessExited { pid } => write!(f, "process {pid} exited"),
        }
    }
}

/// The three kinds of policy the events distinguish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Normal,
    RealTime,
    Deadline,
}

fn kind(p: &Policy) -> Kind {
    match p {
        Policy::Fifo { .. } | Policy::RoundRobin { .. } => Kind::RealTime,
        Policy::Deadline(_) => Kind::Deadline,
        _ => Kind::Normal,
    }
}

/// Whether a policy is real-time by a program's own choice (FIFO/RR).
pub fn is_program_real_time(p: &Policy) -> bool {
    kind(p) == Kind::RealTime
}

#[derive(Debug)]
struct Thread {
    name: String,
    policy: Policy,
    seen: Instant,
}

#[derive(Debug)]
struct Process {
    started: u64,
    threads: BTreeMap<Tid, Thread>,
}

/// Watches threads of processes.
#[derive(Debug)]
pub struct Watch {
    options: WatchOptions,
    connector: Option<ProcEvents>,
    source: Source,
    processes: BTreeMap<Pid, Process>,
    /// Events found outside `poll` (adding a process), handed out first.
    queued: Vec<ThreadEvent>,
    next_policy_poll: Instant,
    next_settled_poll: Instant,
    next_deadline_poll: Instant,
    next_scan: Instant,
    /// Until when some thread is young: after it, only the settled poll
    /// runs (a session's hundreds of settled threads are not walked every
    /// `policy_poll` for none).
    young_until: Instant,
    /// Waits for the connector and the descriptors given to
    /// [`Watch::wake_on`], once one was given.
    waiting: Option<Epoll>,
}

/// The tokens of [`Watch::waiting`].
const CONNECTOR: u64 = 0;
const WAKE: u64 = 1;

impl Watch {
    /// A watch with the default options (the connector when possible,
    /// policies every 10 ms, /proc every 50 ms otherwise).
    pub fn new() -> Result<Watch, GuardError> {
        Watch::with_options(WatchOptions::default())
    }

    /// A watch of nothing yet. Never fails for lack of privilege: without
    /// the connector it polls /proc and says why ([`Watch::source`]).
    pub fn with_options(options: WatchOptions) -> Result<Watch, GuardError> {
        let (connector, source) = if options.force_polling {
            let reason = "polling was asked for".to_string();
            (None, Source::Polling { reason })
        } else {
            match ProcEvents::open() {
                Ok(c) => (Some(c), Source::Connector),
                Err(e) => (
                    None,
                    Source::Polling {
                        reason: e.to_string(),
                    },
                ),
            }
        };
        let now = Instant::now();
        Ok(Watch {
            options,
            connector,
            source,
            processes: BTreeMap::new(),
            queued: Vec::new(),
            next_policy_poll: now,
            next_settled_poll: now,
            next_deadline_poll: now,
            next_scan: now,
            young_until: now,
            waiting: None,
        })
    }

    /// Where thread creations and exits come from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The mechanism and its delay, for display: "process-events connector
    /// (immediate), policies polled every 10 ms (after 1 s, every 100 ms;
    /// reserved ones every 500 ms)".
    pub fn mechanism(&self) -> String {
        let policies = format!(
            "policies polled every {} ms (after {} s, every {} ms; reserved ones every {} ms)",
            self.options.policy_poll.as_millis(),
            self.options.settled_after.as_secs_f64(),
            self.options.settled_poll.as_millis(),
            self.options.deadline_poll.as_millis()
        );
        match &self.source {
            Source::Connector => format!("process-events connector (immediate), {policies}"),
            Source::Polling { .. } => format!(
                "/proc polling every {} ms, {policies}",
                self.options.task_poll.as_millis()
            ),
        }
    }

    /// Starts watching process `pid`: its threads are reported (as
    /// `Appeared`, and `Realtime` for those already real-time) by the next
    /// [`Watch::poll`]. Watching a process twice changes nothing.
    pub fn add_process(&mut self, pid: Pid) -> Result<(), GuardError> {
        if self.processes.contains_key(&pid) {
            return Ok(());
        }
        let started = proc::start_time(pid).map_err(|e| {
            crate::fail(
                format!("watch process {pid}: {}", e.cause),
                "check the PID (`ps -e`); the process may have exited",
            )
        })?;
        self.processes.insert(
            pid,
            Process {
                started,
                threads: BTreeMap::new(),
            },
        );
        let mut found = Vec::new();
        self.scan_process(pid, &mut found);
        self.queued.append(&mut found);
        Ok(())
    }

    /// Stops watching process `pid` (no events for it any more).
    pub fn remove_process(&mut self, pid: Pid) {
        self.processes.remove(&pid);
        self.queued.retain(|e| e.pid() != pid);
    }

    /// The processes watched now.
    pub fn processes(&self) -> Vec<Pid> {
        self.processes.keys().copied().collect()
    }

    /// Whether no process is watched any more (all exited or removed).
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
    }

    /// The threads of process `pid` known now, with their last-read policies.
    pub fn threads(&self, pid: Pid) -> Vec<(Tid, Policy)> {
        self.processes
            .get(&pid)
            .map(|p| p.threads.iter().map(|(t, th)| (*t, th.policy)).collect())
            .unwrap_or_default()
    }

    /// Records `policy` as thread `tid`'s current one without an event: the
    /// caller set it (a reservation) and reads it back, so that only a later
    /// change by someone else is reported.
    pub fn note_policy(&mut self, tid: Tid, policy: Policy) {
        for p in self.processes.values_mut() {
            if let Some(t) = p.threads.get_mut(&tid) {
                t.policy = policy;
            }
        }
    }

    /// The events of the next `timeout` at most: returns as soon as there
    /// are some (or at once with those already found), empty when nothing
    /// happened. Every wait inside is bounded by `timeout`.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<ThreadEvent>, GuardError> {
        let until = Instant::now() + timeout;
        let mut out = std::mem::take(&mut self.queued);
        // What the kernel already said, even when there is no time to wait.
        let mut woken = self.wait(Duration::ZERO, &mut out);
        loop {
            let now = Instant::now();
            if now >= self.next_scan {
                self.next_scan = now + self.scan_interval();
                self.scan_all(&mut out);
            }
            if now >= self.next_policy_poll {
                let settled_too = now >= self.next_settled_poll;
                if settled_too {
                    self.next_settled_poll = now + self.options.settled_poll;
                }
                let deadline_too = settled_too && now >= self.next_deadline_poll;
                if deadline_too {
                    self.next_deadline_poll = now + self.options.deadline_poll;
                }
                let due = Due {
                    settled: settled_too,
                    deadline: deadline_too,
                };
                self.poll_policies(now, due, &mut out);
                self.next_policy_poll = match now < self.young_until {
                    true => now + self.options.policy_poll,
                    false => self.next_settled_poll,
                };
            }
            if !out.is_empty() || now >= until || woken {
                return Ok(out);
            }
            let wake = self.next_policy_poll.min(self.next_scan).min(until);
            woken = self.wait(wake.saturating_duration_since(now), &mut out);
        }
    }

    /// Makes [`Watch::poll`] return early while `fd` is readable (level:
    /// the caller reads it before polling again) — where news of processes
    /// to add comes from, so that they are added within the interval.
    pub fn wake_on(&mut self, fd: BorrowedFd<'_>) -> Result<(), GuardError> {
        if self.waiting.is_none() {
            let epoll = Epoll::new()?;
            if let Some(connector) = &self.connector {
                epoll.add(connector.as_fd(), CONNECTOR, Trigger::Level)?;
            }
            self.waiting = Some(epoll);
        }
        let epoll = self.waiting.as_ref().expect("made above");
        epoll.add(fd, WAKE, Trigger::Level)?;
        Ok(())
    }

    fn scan_interval(&self) -> Duration {
        match self.source {
            Source::Connector => RESCAN_WITH_CONNECTOR,
            Source::Polling { .. } => self.options.task_poll,
        }
    }

    /// Sleeps `pause`, or waits that long for connector events or a wake
    /// ([`Watch::wake_on`]); says whether it was woken.
    fn wait(&mut self, pause: Duration, out: &mut Vec<ThreadEvent>) -> bool {
        let Some(epoll) = &self.waiting else {
            self.receive(pause, out);
            return false;
        };
        let mut ready = [Readiness::EMPTY; 2];
        let n = match epoll.wait(&mut ready, pause) {
            Ok(n) => n,
            // Not expected of a valid epoll: wait as if none were given.
            Err(_) => {
                self.waiting = None;
                self.receive(pause, out);
                return false;
            }
        };
        let ready = &ready[..n];
        if ready.iter().any(|r| r.token() == CONNECTOR) {
            self.receive(Duration::ZERO, out);
        }
        ready.iter().any(|r| r.token() == WAKE)
    }

    /// Sleeps `pause`, or waits that long for connector events.
    fn receive(&mut self, pause: Duration, out: &mut Vec<ThreadEvent>) {
        let Some(connector) = &mut self.connector else {
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
            return;
        };
        match connector.recv(pause) {
            Ok(events) => {
                for e in events {
                    self.on_kernel_event(e, out);
                }
            }
            Err(e) => {
                // The socket broke: carry on by polling /proc, and say why.
                self.connector = None;
                self.source = Source::Polling {
                    reason: e.to_string(),
                };
                self.next_scan = Instant::now();
            }
        }
    }

    fn on_kernel_event(&mut self, event: ProcEvent, out: &mut Vec<ThreadEvent>) {
        match event {
            ProcEvent::Fork {
                parent_tgid,
                child_pid,
                child_tgid,
                ..
            } => {
                if child_pid != child_tgid {
                    if self.processes.contains_key(&child_tgid) {
                        self.add_thread(child_tgid, child_pid, out);
                    }
                } else if self.options.children && self.processes.contains_key(&parent_tgid) {
                    self.add_child(child_tgid, parent_tgid, out);
                }
            }
            // execve replaced the image: other threads are gone, names changed.
            ProcEvent::Exec { tgid, .. } if self.processes.contains_key(&tgid) => {
                self.scan_process(tgid, out);
                self.refresh_names(tgid);
            }
            ProcEvent::Exit { pid, tgid, .. } if self.processes.contains_key(&tgid) => {
                self.thread_gone(tgid, pid, out);
            }
            // Events were dropped: list /proc now.
            ProcEvent::Lost => self.next_scan = Instant::now(),
            _ => {}
        }
    }

    fn add_child(&mut self, child: Pid, parent: Pid, out: &mut Vec<ThreadEvent>) {
        if self.processes.contains_key(&child) || self.add_process(child).is_err() {
            return;
        }
        out.push(ThreadEvent::ProcessStarted { pid: child, parent });
        out.append(&mut self.queued);
    }

    /// Records a new thread and reports it; a thread already gone is skipped.
    fn add_thread(&mut self, pid: Pid, tid: Tid, out: &mut Vec<ThreadEvent>) {
        let Some(process) = self.processes.get_mut(&pid) else {
            return;
        };
        if process.threads.contains_key(&tid) {
            return;
        }
        let Ok(policy) = sched::get_policy(tid) else {
            return;
        };
        let name = proc::thread_name(pid, tid);
        let seen = Instant::now();
        process.threads.insert(
            tid,
            Thread {
                name: name.clone(),
                policy,
                seen,
            },
        );
        self.young_until = self.young_until.max(seen + self.options.settled_after);
        self.next_policy_poll = self.next_policy_poll.min(seen + self.options.policy_poll);
        out.push(ThreadEvent::Appeared {
            pid,
            tid,
            name: name.clone(),
            policy,
        });
        if kind(&policy) == Kind::RealTime {
            out.push(ThreadEvent::Realtime {
                pid,
                tid,
                name,
                policy,
                from: None,
            });
        }
    }

    /// A thread is gone; the process with it when it has no thread left.
    fn thread_gone(&mut self, pid: Pid, tid: Tid, out: &mut Vec<ThreadEvent>) {
        let Some(process) = self.processes.get_mut(&pid) else {
            return;
        };
        if let Some(t) = process.threads.remove(&tid) {
            out.push(ThreadEvent::Exited {
                pid,
                tid,
                name: t.name,
            });
        }
        if process.threads.is_empty() || tid == pid {
            self.check_process(pid, out);
        }
    }

    /// Reports the process's end if it no longer runs (or its PID now
    /// belongs to another process).
    fn check_process(&mut self, pid: Pid, out: &mut Vec<ThreadEvent>) {
        let Some(process) = self.processes.get(&pid) else {
            return;
        };
        let same = proc::start_time(pid).is_ok_and(|t| t == process.started);
        if same && proc::is_running(pid) {
            return;
        }
        if let Some(process) = self.processes.remove(&pid) {
            for (tid, t) in process.threads {
                out.push(ThreadEvent::Exited {
                    pid,
                    tid,
                    name: t.name,
                });
            }
        }
        out.push(ThreadEvent::ProcessExited { pid });
    }

    fn scan_all(&mut self, out: &mut Vec<ThreadEvent>) {
        let pids: Vec<Pid> = self.processes.keys().copied().collect();
        for pid in pids {
            self.scan_process(pid, out);
            if self.options.children && self.processes.contains_key(&pid) {
                for child in proc::children_of(pid) {
                    self.add_child(child, pid, out);
                }
            }
        }
    }

    /// Lists /proc/PID/task: threads not known yet appear, known ones that
    /// are not listed exited.
    fn scan_process(&mut self, pid: Pid, out: &mut Vec<ThreadEvent>) {
        let listed = proc::threads_of(pid).unwrap_or_default();
        let known: Vec<Tid> = match self.processes.get(&pid) {
            Some(p) => p.threads.keys().copied().collect(),
            None => return,
        };
        for &tid in known.iter().filter(|t| !listed.contains(t)) {
            self.thread_gone(pid, tid, out);
        }
        for tid in listed.into_iter().filter(|t| !known.contains(t)) {
            self.add_thread(pid, tid, out);
        }
        if self
            .processes
            .get(&pid)
            .is_some_and(|p| p.threads.is_empty())
        {
            self.check_process(pid, out);
        }
    }

    /// Reads the names of a process's threads again (after exec, for the
    /// events to come; a rescan does not, a session's hundreds of names
    /// read twice a second being most of what it cost).
    fn refresh_names(&mut self, pid: Pid) {
        if let Some(p) = self.processes.get_mut(&pid) {
            for (tid, t) in p.threads.iter_mut() {
                t.name = fresh_name(pid, *tid, &t.name);
            }
        }
    }

    /// Reads the young threads' policies and those of the settled ones
    /// `due`, and reports the changes.
    fn poll_policies(&mut self, now: Instant, due: Due, out: &mut Vec<ThreadEvent>) {
        let mut gone = Vec::new();
        let settled_after = self.options.settled_after;
        for (&pid, process) in self.processes.iter_mut() {
            let due = process.threads.iter_mut().filter(|(_, t)| {
                now.duration_since(t.seen) < settled_after
                    || match kind(&t.policy) {
                        Kind::Deadline => due.deadline,
                        Kind::Normal | Kind::RealTime => due.settled,
                    }
            });
            for (&tid, t) in due {
                match sched::get_policy(tid) {
                    Ok(now) if now != t.policy => {
                        let from = std::mem::replace(&mut t.policy, now);
                        // Read again when it turns real-time or back (a
                        // program names a thread after starting it), not
                        // at each of a reservation's budget changes.
                        if kind(&from) != kind(&now) {
                            t.name = fresh_name(pid, tid, &t.name);
                        }
                        out.push(change(pid, tid, t.name.clone(), from, now));
                    }
                    Ok(_) => {}
                    Err(_) => gone.push((pid, tid)),
                }
            }
        }
        for (pid, tid) in gone {
            self.thread_gone(pid, tid, out);
        }
    }
}

/// Which settled threads a policy poll reads.
#[derive(Debug, Clone, Copy)]
struct Due {
    /// Those that are not SCHED_DEADLINE.
    settled: bool,
    /// The SCHED_DEADLINE ones.
    deadline: bool,
}

/// A thread's name now (programs name their threads after creating them),
/// or the one known when it cannot be read.
fn fresh_name(pid: Pid, tid: Tid, known: &str) -> String {
    let name = proc::thread_name(pid, tid);
    if name.is_empty() {
        known.to_string()
    } else {
        name
    }
}

/// The event for a policy change from `from` to `policy`.
fn change(pid: Pid, tid: Tid, name: String, from: Policy, policy: Policy) -> ThreadEvent {
    match (kind(&from), kind(&policy)) {
        (a, b) if a == b => ThreadEvent::Changed {
            pid,
            tid,
            name,
            policy,
            from,
        },
        (_, Kind::RealTime) => ThreadEvent::Realtime {
            pid,
            tid,
            name,
            policy,
            from: Some(from),
        },
        (_, Kind::Deadline) => ThreadEvent::Deadline {
            pid,
            tid,
            name,
            policy,
            from,
        },
        (_, Kind::Normal) => ThreadEvent::NotRealtime {
            pid,
            tid,
            name,
            policy,
            from,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_classified_by_kind() {
        let other = Policy::Other { nice: 0 };
        let fifo = Policy::Fifo { priority: 10 };
        let deadline = Policy::Deadline(sched::DeadlineParams {
            runtime: Duration::from_micros(100),
            deadline: Duration::from_millis(1),
            period: Duration::from_millis(1),
            flags: sched::DeadlineFlags::RESET_ON_FORK,
        });
        let c = |a, b| change(1, 2, "t".into(), a, b);
        assert!(matches!(
            c(other, fifo),
            ThreadEvent::Realtime { from: Some(_), .. }
        ));
        assert!(matches!(
            c(deadline, fifo),
            ThreadEvent::Realtime {
                from: Some(Policy::Deadline(_)),
                ..
            }
        ));
        assert!(matches!(c(fifo, deadline), ThreadEvent::Deadline { .. }));
        assert!(matches!(
            c(deadline, other),
            ThreadEvent::NotRealtime { .. }
        ));
        assert!(matches!(c(fifo, other), ThreadEvent::NotRealtime { .. }));
        assert!(matches!(
            c(fifo, Policy::Fifo { priority: 20 }),
            ThreadEvent::Changed { .. }
        ));
    }

    /// A watch that polls /proc, or uses the connector if it can.
    fn watch_by(force_polling: bool) -> Watch {
        Watch::with_options(WatchOptions {
            force_polling,
            ..WatchOptions::default()
        })
        .unwrap()
    }

    /// A thread of a watched process is seen appearing, changing its
    /// policy and exiting, by either mechanism (the connector only as root).
    #[test]
    fn a_new_threads_life_is_seen() {
        for force_polling in [true, false] {
            let mut w = watch_by(force_polling);
            w.add_process(proc::current_pid()).unwrap();
            let _ = w.poll(Duration::ZERO).unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            let (go, wait) = std::sync::mpsc::channel::<()>();
            let t = std::thread::spawn(move || {
                tx.send(proc::current_tid()).unwrap();
                let _ = wait.recv();
                // Raising one's own nice value needs no privilege.
                sched::set_policy(0, &Policy::Other { nice: 3 }).unwrap();
                let _ = wait.recv();
            });
            let tid = rx.recv().unwrap();
            let seen = |w: &mut Watch, what: &dyn Fn(&ThreadEvent) -> bool| {
                let start = Instant::now();
                while start.elapsed() < Duration::from_secs(5) {
                    if w.poll(Duration::from_millis(100)).unwrap().iter().any(what) {
                        return true;
                    }
                }
                false
            };
            assert!(
                seen(
                    &mut w,
                    &|e| matches!(e, ThreadEvent::Appeared { tid: t, .. } if *t == tid)
                ),
                "{}: appeared",
                w.mechanism()
            );
            go.send(()).unwrap();
            assert!(
                seen(
                    &mut w,
                    &|e| matches!(e, ThreadEvent::Changed { tid: t, policy: Policy::Other { nice: 3 }, .. } if *t == tid)
                ),
                "{}: changed",
                w.mechanism()
            );
            go.send(()).unwrap();
            t.join().unwrap();
            assert!(
                seen(
                    &mut w,
                    &|e| matches!(e, ThreadEvent::Exited { tid: t, .. } if *t == tid)
                ),
                "{}: exited",
                w.mechanism()
            );
            let start = Instant::now();
            let quiet = w.poll(Duration::from_millis(30)).unwrap();
            assert!(start.elapsed() < Duration::from_millis(500), "{quiet:?}");
        }
    }

    #[test]
    fn a_wake_ends_a_poll_early_until_it_is_read() {
        for force_polling in [true, false] {
            let mut w = watch_by(force_polling);
            let doorbell = tessera_sys::event::EventFd::new().unwrap();
            w.wake_on(doorbell.as_fd()).unwrap();
            // A process of one thread that does nothing (this one's threads
            // come and go with the other tests).
            let mut sleeper = std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap();
            w.add_process(sleeper.id() as Pid).unwrap();
            let _ = w.poll(Duration::from_millis(20)).unwrap();
            let start = Instant::now();
            let quiet = w.poll(Duration::from_millis(300)).unwrap();
            assert!(quiet.is_empty(), "{quiet:?}");
            assert!(
                start.elapsed() >= Duration::from_millis(250),
                "nothing woke it"
            );
            doorbell.signal();
            let start = Instant::now();
            let _ = w.poll(Duration::from_secs(10)).unwrap();
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{}: the doorbell woke it",
                w.mechanism()
            );
            doorbell.drain();
            let start = Instant::now();
            let _ = w.poll(Duration::from_millis(300)).unwrap();
            assert!(
                start.elapsed() >= Duration::from_millis(250),
                "once read, it no longer wakes it"
            );
            let _ = sleeper.kill();
            let _ = sleeper.wait();
        }
    }

    #[test]
    fn the_mechanism_names_its_delay() {
        let polling = Watch::with_options(WatchOptions {
            force_polling: true,
            ..WatchOptions::default()
        })
        .unwrap();
        assert_eq!(
            polling.mechanism(),
            "/proc polling every 50 ms, policies polled every 10 ms (after 1 s, every 100 ms; reserved ones every 500 ms)"
        );
        let w = Watch::new().unwrap();
        match w.source() {
            Source::Connector => assert_eq!(
                w.mechanism(),
                "process-events connector (immediate), policies polled every 10 ms (after 1 s, every 100 ms; reserved ones every 500 ms)"
            ),
            Source::Polling { reason } => assert!(reason.contains("CAP_NET_ADMIN"), "{reason}"),
        }
    }
}
