//! Following an unmodified program in a cell: every thread its program makes
//! real-time gets a reservation of the cell, every other thread runs in the
//! cell's cpuset at the policy its program gave it, for the program's whole
//! life, and everything is given back when following stops.
//!
//! The rule, per thread, as the [`Watch`] reports it:
//! - real-time by the program's choice (SCHED_FIFO/RR, also born so): a free
//!   reservation slot of the cell (`Session::attach`, one reservation per
//!   thread as mainline SCHED_DEADLINE requires); when every slot is held
//!   the thread is named, left as its program set it, and the fix given; it
//!   gets a slot when one frees;
//! - any other policy: the cell's cpuset and affinity at that policy
//!   (`Session::attach_cpuset_only`); in a cell without reservations
//!   (dedicated, best-effort) every thread simply joins;
//! - such a thread found busy over a window (with an application share, the
//!   default): a reservation of its own beside the cell's, sized to what it
//!   uses, never below its part of the share's floor
//!   ([`crate::share_cells`]); given back if its program makes it
//!   real-time (the rule above then places it) or it exits;
//! - a reserved thread whose program re-sets its policy has taken its
//!   reservation back: that is said, naming the thread, and the thread is
//!   treated by the rule again (reserved anew while it stays real-time, at
//!   most [`FollowOptions::retakes`] times, then left as its program wants);
//! - a thread that exits leaves its slot to a waiting one.
//!
//! It must never set a thread's scheduling itself (the broker does), never
//! print (events are returned, or passed to a callback), and never leave a
//! thread placed behind: [`Follower::stop`] and `Drop` detach every thread.

use crate::share::AppShare;
use crate::share_cells::ShareCells;
use crate::watch::{is_program_real_time, ThreadEvent, Watch, WatchOptions};
use crate::GuardError;
use std::collections::BTreeMap;
use std::fmt;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;
use tessera_broker::ErrorCode;
use tessera_broker::Session;
use tessera_policy::{Bandwidth, Budget};
use tessera_sys::proc::Pid;
use tessera_sys::sched::{self, Policy, Tid};

/// How a [`Follower`] works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowOptions {
    pub watch: WatchOptions,
    /// How often a thread whose program takes back its reservation is
    /// reserved again before it is left as its program wants.
    pub retakes: u32,
    /// The share of the program's busy threads that are not real-time;
    /// None leaves them best-effort in the cell's cpuset.
    pub app_share: Option<AppShare>,
}

impl Default for FollowOptions {
    fn default() -> FollowOptions {
        FollowOptions {
            watch: WatchOptions {
                children: true,
                ..WatchOptions::default()
            },
            retakes: 3,
            app_share: Some(AppShare::default()),
        }
    }
}

/// What a followed thread is to the cell now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// In the cell's cpuset at its own policy.
    BestEffort,
    /// Holds one of the cell's reservations.
    Reserved,
    /// A member of a cell without reservations, at its own policy.
    Joined,
    /// Real-time, but every reservation is held: as its program set it.
    Waiting,
    /// Left as it is (its own SCHED_DEADLINE, a failed placement, or it
    /// kept taking its reservation back).
    Outside,
    /// Busy at a normal policy: in a reservation of its own, its
    /// application's share.
    Shared,
}

impl Role {
    /// Whether the broker holds the thread as a member of the cell.
    fn is_member(self) -> bool {
        matches!(self, Role::BestEffort | Role::Reserved | Role::Joined)
    }
}

/// Something the follower did or saw, for the caller to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowEvent {
    /// A real-time thread got a reservation; `policy` is read back.
    Reserved {
        pid: Pid,
        tid: Tid,
        name: String,
        from: Policy,
        policy: Policy,
    },
    /// A busy thread at a normal policy given a reservation of its own,
    /// its application's share.
    Shared {
        pid: Pid,
        tid: Tid,
        name: String,
        cell: String,
        used: Bandwidth,
        budget: Budget,
    },
    /// A thread put in the cell's cpuset at its own policy.
    BestEffort {
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
    },
    /// A thread joined a cell without reservations at its own policy.
    Joined {
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
    },
    /// More real-time threads than reservations: this one is left as its
    /// program set it.
    NoReservation {
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
        reservations: usize,
        fix: String,
    },
    /// The program re-set the policy of a reserved thread itself.
    TookBack {
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
    },
    /// A thread is left as it is, and why.
    LeftAlone {
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
        why: String,
    },
    /// Placing or restoring a thread failed: the broker's reason and fix.
    Failed {
        pid: Pid,
        tid: Tid,
        name: String,
        message: String,
        fix: String,
    },
    /// A followed thread exited; `reserved`: it held a reservation, now free.
    ThreadExited {
        pid: Pid,
        tid: Tid,
        name: String,
        reserved: bool,
    },
    ProcessStarted {
        pid: Pid,
        parent: Pid,
    },
    ProcessExited {
        pid: Pid,
    },
    /// A thread given back the scheduling it had before.
    Restored {
        pid: Pid,
        tid: Tid,
        name: String,
    },
}

impl fmt::Display for FollowEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FollowEvent::Reserved {
                tid,
                name,
                from,
                policy,
                ..
            } => write!(
                f,
                "thread {tid} {name:?} ({from}) → its own reservation: {policy}"
            ),
            FollowEvent::Shared {
                tid,
                name,
                cell,
                used,
                budget,
                ..
            } => write!(
                f,
                "thread {tid} {name:?} is busy ({used} of a CPU) → the application's share: cell {cell:?}, {budget}"
            ),
            FollowEvent::BestEffort {
                tid, name, policy, ..
            } => write!(
                f,
                "thread {tid} {name:?} → the cell's cores, best-effort at {policy}"
            ),
            FollowEvent::Joined {
                tid, name, policy, ..
            } => write!(f, "thread {tid} {name:?} → the cell, at {policy}"),
            FollowEvent::NoReservation {
                tid,
                name,
                policy,
                reservations,
                fix,
                ..
            } => write!(
                f,
                "thread {tid} {name:?} is real-time ({policy}) but the cell's {reservations} \
                 reservation(s) are all held: left as its program set it (fix: {fix})"
            ),
            FollowEvent::TookBack {
                tid, name, policy, ..
            } => write!(
                f,
                "thread {tid} {name:?}: its program set {policy} itself, leaving its reservation"
            ),
            FollowEvent::LeftAlone {
                tid,
                name,
                policy,
                why,
                ..
            } => write!(f, "thread {tid} {name:?} left at {policy}: {why}"),
            FollowEvent::Failed {
                tid,
                name,
                message,
                fix,
                ..
            } => {
                write!(f, "thread {tid} {name:?} could not be placed: {message}")?;
                if !fix.is_empty() {
                    write!(f, " (fix: {fix})")?;
                }
                Ok(())
            }
            FollowEvent::ThreadExited {
                tid,
                name,
                reserved: true,
                ..
            } => write!(f, "thread {tid} {name:?} exited; its reservation is free"),
            FollowEvent::ThreadExited { tid, name, .. } => {
                write!(f, "thread {tid} {name:?} exited")
            }
            FollowEvent::ProcessStarted { pid, parent } => {
                write!(f, "process {pid} (started by {parent}) is followed too")
            }
            FollowEvent::ProcessExited { pid } => write!(f, "process {pid} exited"),
            FollowEvent::Restored { tid, name, .. } => {
                write!(f, "thread {tid} {name:?} restored")
            }
        }
    }
}

#[derive(Debug)]
struct Followed {
    pid: Pid,
    name: String,
    role: Role,
    retakes: u32,
}

/// Follows processes' threads into one cell.
pub struct Follower {
    session: Session,
    cell: String,
    /// The cell's reservation slots (0: a cell without reservations).
    reservations: usize,
    watch: Watch,
    options: FollowOptions,
    threads: BTreeMap<Tid, Followed>,
    /// The application share's cells (None without a share, or in a cell
    /// without reservations, which its threads simply join).
    shares: Option<ShareCells>,
    /// Events of placements made before the first `step` (at start).
    pending: Vec<FollowEvent>,
}

impl Follower {
    /// Starts following process `pid` in `cell`: its threads are placed by
    /// the rule before this returns (the events come with the first
    /// [`Follower::step`]).
    pub fn start(
        mut session: Session,
        cell: &str,
        pid: Pid,
        options: FollowOptions,
    ) -> Result<Follower, GuardError> {
        let info = session.show(cell)?;
        let mut watch = Watch::with_options(options.watch)?;
        watch.add_process(pid)?;
        let reservations = info.grant.reservations.len();
        let shares = options.app_share.filter(|_| reservations > 0).map(|share| {
            let core = info.grant.reservations.first().and_then(|r| r.core);
            ShareCells::new(share, cell, core)
        });
        let mut follower = Follower {
            session,
            cell: cell.to_string(),
            reservations,
            watch,
            options,
            threads: BTreeMap::new(),
            shares,
            pending: Vec::new(),
        };
        follower.pending = follower.step(Duration::ZERO);
        Ok(follower)
    }

    /// Follows process `pid` too (e.g. a client of a server).
    pub fn add_process(&mut self, pid: Pid) -> Result<(), GuardError> {
        self.watch.add_process(pid)
    }

    /// How threads are found, and how late: "process-events connector
    /// (immediate), policies polled every 10 ms (after 1 s, every 100 ms;
    /// reserved ones every 500 ms)".
    pub fn mechanism(&self) -> String {
        self.watch.mechanism()
    }

    /// Why the connector is not used, when it is not.
    pub fn fallback_reason(&self) -> Option<&str> {
        match self.watch.source() {
            crate::watch::Source::Polling { reason } => Some(reason),
            crate::watch::Source::Connector => None,
        }
    }

    pub fn cell(&self) -> &str {
        &self.cell
    }

    /// What thread `tid` is to the cell now, if it is followed.
    pub fn role_of(&self, tid: Tid) -> Option<Role> {
        self.threads.get(&tid).map(|t| t.role)
    }

    /// Whether every followed process has exited.
    pub fn is_done(&self) -> bool {
        self.watch.is_empty()
    }

    /// Waits up to `timeout` for something to happen, applies the rule, and
    /// returns what was done.
    pub fn step(&mut self, timeout: Duration) -> Vec<FollowEvent> {
        let mut out = std::mem::take(&mut self.pending);
        let wait = if out.is_empty() {
            timeout
        } else {
            Duration::ZERO
        };
        // The watch never fails once made; an error would only mean no events.
        for event in self.watch.poll(wait).unwrap_or_default() {
            self.apply(event, &mut out);
        }
        self.share_busy_threads(&mut out);
        out
    }

    /// Once a window: the best-effort threads found busy move into their
    /// application's share, and the shares follow what they use.
    fn share_busy_threads(&mut self, out: &mut Vec<FollowEvent>) {
        let Some(shares) = self.shares.as_mut() else {
            return;
        };
        let candidates: Vec<(Pid, Tid)> = self
            .threads
            .iter()
            .filter(|(_, t)| t.role == Role::BestEffort)
            .map(|(&tid, t)| (t.pid, tid))
            .collect();
        let busy = shares.busy(&candidates);
        shares.adapt(&mut self.session);
        for s in busy {
            self.share(s.pid, s.tid, s.used, out);
        }
    }

    /// Moves a busy best-effort thread from the cell's cpuset into a share
    /// cell of its own; back to the cell's cpuset if that fails.
    fn share(&mut self, pid: Pid, tid: Tid, used: Bandwidth, out: &mut Vec<FollowEvent>) {
        let Some(name) = self.threads.get(&tid).map(|t| t.name.clone()) else {
            return;
        };
        self.leave(tid, out);
        let Some(shares) = self.shares.as_mut() else {
            return;
        };
        match shares.open(&mut self.session, pid, tid, used) {
            Ok(opened) => {
                if let Ok(policy) = sched::get_policy(tid) {
                    self.watch.note_policy(tid, policy);
                }
                self.set_role(pid, tid, &name, Role::Shared);
                out.push(FollowEvent::Shared {
                    pid,
                    tid,
                    name,
                    cell: opened.cell,
                    used: opened.used,
                    budget: opened.budget,
                });
            }
            Err(e) => {
                let policy = sched::get_policy(tid).unwrap_or(Policy::Other { nice: 0 });
                self.failed(pid, tid, name.clone(), e, out);
                self.place_best_effort(pid, tid, name, policy, out);
            }
        }
    }

    /// Gives thread `tid` back from its share, if it has one.
    fn unshare(&mut self, tid: Tid) -> bool {
        let released = match self.shares.as_mut() {
            Some(shares) => shares.release(&mut self.session, tid),
            None => false,
        };
        if released {
            if let Some(t) = self.threads.get_mut(&tid) {
                t.role = Role::Outside;
            }
        }
        released
    }

    /// Follows until every followed process exited or `stop` says so,
    /// passing each event to `on_event`; then restores every thread.
    pub fn run(
        mut self,
        mut stop: impl FnMut() -> bool,
        mut on_event: impl FnMut(&FollowEvent),
    ) -> Vec<FollowEvent> {
        while !self.is_done() && !stop() {
            for e in self.step(STEP) {
                on_event(&e);
            }
        }
        self.stop()
    }

    /// Stops following: every thread placed is given back its scheduling.
    pub fn stop(mut self) -> Vec<FollowEvent> {
        self.restore_all()
    }

    fn restore_all(&mut self) -> Vec<FollowEvent> {
        let mut out = Vec::new();
        if let Some(shares) = self.shares.as_mut() {
            for (pid, tid) in shares.release_all(&mut self.session) {
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.role = Role::Outside;
                    if sched::get_policy(tid).is_ok() {
                        out.push(FollowEvent::Restored {
                            pid,
                            tid,
                            name: t.name.clone(),
                        });
                    }
                }
            }
        }
        let threads = std::mem::take(&mut self.threads);
        for (tid, t) in threads.into_iter().filter(|(_, t)| t.role.is_member()) {
            match self.session.detach(tid) {
                Ok(()) if sched::get_policy(tid).is_ok() => out.push(FollowEvent::Restored {
                    pid: t.pid,
                    tid,
                    name: t.name,
                }),
                // Gone already, or dropped by the broker as exited.
                Ok(()) => {}
                Err(e) if e.code == ErrorCode::NotFound => {}
                Err(e) => out.push(FollowEvent::Failed {
                    pid: t.pid,
                    tid,
                    name: t.name,
                    message: format!("restore: {}", e.message),
                    fix: e.fix,
                }),
            }
        }
        out
    }

    fn apply(&mut self, event: ThreadEvent, out: &mut Vec<FollowEvent>) {
        match event {
            ThreadEvent::Appeared {
                pid,
                tid,
                name,
                policy,
            } => self.appeared(pid, tid, name, policy, out),
            ThreadEvent::Realtime {
                pid,
                tid,
                name,
                policy,
                from,
            } => self.real_time(pid, tid, name, policy, from, out),
            ThreadEvent::NotRealtime {
                pid,
                tid,
                name,
                policy,
                from,
            } => self.not_real_time(pid, tid, name, policy, from, out),
            ThreadEvent::Deadline {
                pid,
                tid,
                name,
                policy,
                ..
            } => self.own_deadline(pid, tid, name, policy, out),
            ThreadEvent::Changed {
                pid,
                tid,
                name,
                policy,
                from,
            } => {
                // A reserved thread given other reservation parameters: the
                // program set its own SCHED_DEADLINE.
                let ours = self.role_of(tid) == Some(Role::Reserved);
                if ours && matches!((from, policy), (Policy::Deadline(_), Policy::Deadline(_))) {
                    out.push(FollowEvent::TookBack {
                        pid,
                        tid,
                        name,
                        policy,
                    });
                }
            }
            ThreadEvent::Exited { pid, tid, name } => self.exited(pid, tid, name, out),
            ThreadEvent::ProcessStarted { pid, parent } => {
                out.push(FollowEvent::ProcessStarted { pid, parent })
            }
            ThreadEvent::ProcessExited { pid } => {
                let tids: Vec<Tid> = self
                    .threads
                    .iter()
                    .filter(|(_, t)| t.pid == pid)
                    .map(|(tid, _)| *tid)
                    .collect();
                for tid in tids {
                    let name = self.threads[&tid].name.clone();
                    self.exited(pid, tid, name, out);
                }
                out.push(FollowEvent::ProcessExited { pid });
            }
        }
    }

    fn appeared(
        &mut self,
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
        out: &mut Vec<FollowEvent>,
    ) {
        match policy {
            // Real-time: the `Realtime` event that follows places it.
            p if is_program_real_time(&p) => {}
            Policy::Deadline(_) => {
                self.set_role(pid, tid, &name, Role::Outside);
                out.push(FollowEvent::LeftAlone {
                    pid,
                    tid,
                    name,
                    policy,
                    why: "it has a SCHED_DEADLINE reservation of its own".into(),
                });
            }
            _ => self.place_best_effort(pid, tid, name, policy, out),
        }
    }

    fn real_time(
        &mut self,
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
        from: Option<Policy>,
        out: &mut Vec<FollowEvent>,
    ) {
        // A shared thread made real-time by its program leaves its share
        // (keeping the policy its program set) and is placed by the rule.
        if self.role_of(tid) == Some(Role::Shared) {
            self.unshare(tid);
        }
        let role = self.role_of(tid);
        if self.reservations == 0 {
            if !role.is_some_and(Role::is_member) {
                self.place_best_effort(pid, tid, name, policy, out);
            }
            return;
        }
        let taken_back = matches!(from, Some(Policy::Deadline(_)));
        match role {
            Some(Role::Reserved) if taken_back => self.taken_back(pid, tid, name, policy, out),
            // Our own reservation being read back: nothing to do.
            Some(Role::Reserved) => {}
            // Gave up on it: it keeps setting its own policy.
            Some(Role::Outside) if self.threads[&tid].retakes > self.options.retakes => {}
            _ => self.reserve(pid, tid, name, policy, out),
        }
    }

    /// The program re-set a reserved thread's policy to FIFO/RR: say so,
    /// and reserve it again unless it keeps doing that.
    fn taken_back(
        &mut self,
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
        out: &mut Vec<FollowEvent>,
    ) {
        out.push(FollowEvent::TookBack {
            pid,
            tid,
            name: name.clone(),
            policy,
        });
        let retakes = self.threads.get_mut(&tid).map_or(0, |t| {
            t.retakes += 1;
            t.retakes
        });
        // Its policy is no longer the reservation, so detaching keeps it.
        self.leave(tid, out);
        if retakes > self.options.retakes {
            self.set_role(pid, tid, &name, Role::Outside);
            out.push(FollowEvent::LeftAlone {
                pid,
                tid,
                name,
                policy,
                why: format!(
                    "its program re-set its policy {retakes} times; its reservation is freed"
                ),
            });
            self.fill_free_slots(out);
        } else {
            self.reserve(pid, tid, name, policy, out);
        }
    }

    fn not_real_time(
        &mut self,
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
        from: Policy,
        out: &mut Vec<FollowEvent>,
    ) {
        match self.role_of(tid) {
            Some(Role::Reserved) => {
                if matches!(from, Policy::Deadline(_)) {
                    out.push(FollowEvent::TookBack {
                        pid,
                        tid,
                        name: name.clone(),
                        policy,
                    });
                }
                self.leave(tid, out);
                self.place_best_effort(pid, tid, name, policy, out);
                self.fill_free_slots(out);
            }
            Some(Role::Waiting) | Some(Role::Outside) => {
                self.place_best_effort(pid, tid, name, policy, out)
            }
            Some(Role::Shared) => {
                self.unshare(tid);
                self.place_best_effort(pid, tid, name, policy, out)
            }
            _ => {}
        }
    }

    /// A thread that became SCHED_DEADLINE without us: the program's own.
    fn own_deadline(
        &mut self,
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
        out: &mut Vec<FollowEvent>,
    ) {
        match self.role_of(tid) {
            Some(Role::Reserved) => return,
            // A member keeps its place: detaching would end the program's
            // own reservation.
            Some(r) if r.is_member() => {}
            _ => self.set_role(pid, tid, &name, Role::Outside),
        }
        out.push(FollowEvent::LeftAlone {
            pid,
            tid,
            name,
            policy,
            why: "its program gave it a SCHED_DEADLINE reservation of its own".into(),
        });
    }

    fn exited(&mut self, pid: Pid, tid: Tid, name: String, out: &mut Vec<FollowEvent>) {
        self.unshare(tid);
        let Some(t) = self.threads.remove(&tid) else {
            return;
        };
        if t.role.is_member() {
            // The broker drops exited members; this frees the slot now.
            let _ = self.session.detach(tid);
        }
        let reserved = t.role == Role::Reserved;
        out.push(FollowEvent::ThreadExited {
            pid,
            tid,
            name,
            reserved,
        });
        if reserved {
            self.fill_free_slots(out);
        }
    }

    /// Gives a real-time thread a free reservation slot.
    fn reserve(
        &mut self,
        pid: Pid,
        tid: Tid,
        name: String,
        from: Policy,
        out: &mut Vec<FollowEvent>,
    ) {
        if self.role_of(tid).is_some_and(Role::is_member) {
            self.leave(tid, out);
        }
        match self.session.attach(&self.cell, pid, Some(tid)) {
            Ok(_) => {
                let policy = sched::get_policy(tid).unwrap_or(from);
                self.watch.note_policy(tid, policy);
                self.set_role(pid, tid, &name, Role::Reserved);
                out.push(FollowEvent::Reserved {
                    pid,
                    tid,
                    name,
                    from,
                    policy,
                });
            }
            Err(e) if e.code == ErrorCode::Refused => {
                let was_waiting = self.role_of(tid) == Some(Role::Waiting);
                self.set_role(pid, tid, &name, Role::Waiting);
                if !was_waiting {
                    out.push(self.no_reservation(pid, tid, name, from));
                }
            }
            Err(e) => self.failed(pid, tid, name, e.into(), out),
        }
    }

    fn no_reservation(&self, pid: Pid, tid: Tid, name: String, policy: Policy) -> FollowEvent {
        let wanted = self
            .threads
            .values()
            .filter(|t| matches!(t.role, Role::Reserved | Role::Waiting))
            .count()
            .max(self.reservations + 1);
        FollowEvent::NoReservation {
            pid,
            tid,
            name,
            policy,
            reservations: self.reservations,
            fix: format!(
                "create the cell with --cores {wanted} (one reservation per real-time thread), \
                 or give this thread a cell of its own"
            ),
        }
    }

    /// Waiting real-time threads take slots that became free, oldest first.
    fn fill_free_slots(&mut self, out: &mut Vec<FollowEvent>) {
        let waiting: Vec<(Tid, Pid, String)> = self
            .threads
            .iter()
            .filter(|(_, t)| t.role == Role::Waiting)
            .map(|(tid, t)| (*tid, t.pid, t.name.clone()))
            .collect();
        for (tid, pid, name) in waiting {
            let Ok(policy) = sched::get_policy(tid) else {
                continue;
            };
            self.reserve(pid, tid, name, policy, out);
            if self.role_of(tid) == Some(Role::Waiting) {
                return;
            }
        }
    }

    /// A thread that is not real-time: the cell's cpuset at its own policy
    /// (or, in a cell without reservations, the cell's policy).
    fn place_best_effort(
        &mut self,
        pid: Pid,
        tid: Tid,
        name: String,
        policy: Policy,
        out: &mut Vec<FollowEvent>,
    ) {
        // A cell without reservations is joined whole (its cpuset, and its
        // policy where it has one).
        let join = self.reservations == 0;
        let attached = match join {
            true => self.session.attach(&self.cell, pid, Some(tid)),
            false => self.session.attach_cpuset_only(&self.cell, pid, Some(tid)),
        };
        if let Err(e) = attached {
            return self.failed(pid, tid, name, e.into(), out);
        }
        let role = if join { Role::Joined } else { Role::BestEffort };
        self.set_role(pid, tid, &name, role);
        out.push(match join {
            true => FollowEvent::Joined {
                pid,
                tid,
                name,
                policy,
            },
            false => FollowEvent::BestEffort {
                pid,
                tid,
                name,
                policy,
            },
        });
    }

    /// Takes a member out of the cell (its policy is kept unless it still
    /// holds its reservation).
    fn leave(&mut self, tid: Tid, out: &mut Vec<FollowEvent>) {
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        if !t.role.is_member() {
            return;
        }
        t.role = Role::Outside;
        if let Err(e) = self.session.detach(tid) {
            if e.code != ErrorCode::NotFound {
                let (pid, name) = (t.pid, t.name.clone());
                out.push(FollowEvent::Failed {
                    pid,
                    tid,
                    name,
                    message: format!("leave the cell: {}", e.message),
                    fix: e.fix,
                });
            }
        }
    }

    fn failed(
        &mut self,
        pid: Pid,
        tid: Tid,
        name: String,
        e: GuardError,
        out: &mut Vec<FollowEvent>,
    ) {
        // A thread that exited while being placed is not a failure, and
        // nothing to follow.
        if not_found(&e) && sched::get_policy(tid).is_err() {
            self.threads.remove(&tid);
            return;
        }
        self.set_role(pid, tid, &name, Role::Outside);
        out.push(FollowEvent::Failed {
            pid,
            tid,
            name,
            message: e.message(),
            fix: e.fix().to_string(),
        });
    }

    /// Names thread `tid` `name` in what is known and not yet returned.
    fn rename(&mut self, tid: Tid, name: &str) {
        if let Some(t) = self.threads.get_mut(&tid) {
            t.name = name.to_string();
        }
        for e in &mut self.pending {
            if let FollowEvent::BestEffort {
                tid: t, name: n, ..
            }
            | FollowEvent::Joined {
                tid: t, name: n, ..
            }
            | FollowEvent::Reserved {
                tid: t, name: n, ..
            } = e
            {
                if *t == tid {
                    *n = name.to_string();
                }
            }
        }
    }

    fn set_role(&mut self, pid: Pid, tid: Tid, name: &str, role: Role) {
        let t = self.threads.entry(tid).or_insert_with(|| Followed {
            pid,
            name: name.to_string(),
            role,
            retakes: 0,
        });
        t.role = role;
        t.name = name.to_string();
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.restore_all();
    }
}

/// How long one turn of [`Follower::run`] and [`Launched::wait`] waits at
/// most: the delay of a stop request or of a forwarded signal.
const STEP: Duration = Duration::from_millis(20);

/// How long a started program may take to reach its gate, and the gate
/// keeper to place it.
const GATE_PATIENCE: Duration = Duration::from_secs(30);

/// A program started in a cell, followed for its lifetime.
pub struct Launched {
    pub child: Child,
    pub follower: Follower,
}

/// Starts `cmd` in `cell`: the child stops between fork and exec until its
/// main thread is placed by the rule, so the program never runs an
/// instruction of its own outside the cell; then it is followed. Fails
/// (and the program never runs) when the main thread cannot be placed.
pub fn spawn_in_cell(
    session: Session,
    cell: &str,
    mut cmd: Command,
    options: FollowOptions,
) -> Result<Launched, GuardError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let program = program.as_str();
    let (gate, child_ends) = tessera_sys::process::gate_exec(&mut cmd, GATE_PATIENCE)?;
    let (spawned, kept) = std::thread::scope(|s| {
        let keeper = s.spawn(move || -> Result<Follower, GuardError> {
            let pid = gate.wait_child(GATE_PATIENCE)?;
            match place_at_gate(session, cell, program, pid, options) {
                Ok(f) => {
                    gate.open()?;
                    Ok(f)
                }
                Err(e) => {
                    gate.refuse();
                    Err(e)
                }
            }
        });
        let spawned = cmd.spawn();
        drop(child_ends);
        let kept = keeper
            .join()
            .unwrap_or_else(|_| Err(crate::fail("the gate keeper panicked", "")));
        (spawned, kept)
    });
    match (spawned, kept) {
        (Ok(child), Ok(follower)) => Ok(Launched { child, follower }),
        (Ok(mut child), Err(e)) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
        // The follower restores (drops) what it placed of the dead child.
        (Err(e), Ok(_)) => Err(could_not_run(program, &e)),
        (Err(e), Err(refusal)) if tessera_sys::process::refused_at_gate(&e) => Err(refusal),
        (Err(e), Err(_)) => Err(could_not_run(program, &e)),
    }
}

/// The name the kernel will give a process running `program` (its file
/// name, cut to the 15 bytes of a task's comm).
fn command_name(program: &str) -> String {
    let base = program.rsplit('/').next().unwrap_or(program);
    let mut end = base.len().min(15);
    while !base.is_char_boundary(end) {
        end -= 1;
    }
    base[..end].to_string()
}

fn could_not_run(program: &str, e: &std::io::Error) -> GuardError {
    crate::fail(
        format!("could not run {program:?}: {e}"),
        "check the program name and PATH",
    )
}

/// Whether the broker or the kernel no longer knew what was asked for (a
/// thread that exited meanwhile).
fn not_found(e: &GuardError) -> bool {
    match e {
        GuardError::Broker(e) => e.code == ErrorCode::NotFound,
        GuardError::Kernel(e) => e.kind == tessera_sys::ErrorKind::NotFound,
        GuardError::Missing { .. } | GuardError::Failed { .. } => false,
    }
}

/// Follows the child waiting at the gate; its main thread must be in the
/// cell before it may exec.
fn place_at_gate(
    session: Session,
    cell: &str,
    program: &str,
    pid: Pid,
    options: FollowOptions,
) -> Result<Follower, GuardError> {
    let mut follower = Follower::start(session, cell, pid, options)?;
    if follower.role_of(pid).is_some_and(Role::is_member) {
        // It still carries this process's name; it is about to be `program`.
        follower.rename(pid, &command_name(program));
        return Ok(follower);
    }
    let why = follower
        .pending
        .iter()
        .find_map(|e| match e {
            FollowEvent::Failed { message, fix, .. } => Some((message.clone(), fix.clone())),
            FollowEvent::NoReservation { fix, .. } => {
                Some(("every reservation of the cell is held".into(), fix.clone()))
            }
            _ => None,
        })
        .unwrap_or_else(|| {
            (
                "the program's main thread was not placed".into(),
                String::new(),
            )
        });
    Err(GuardError::Broker(tessera_broker::BrokerError::new(
        ErrorCode::Refused,
        format!("cell {cell:?}: {}", why.0),
        why.1,
    )))
}

impl Launched {
    /// The program's process id.
    pub fn pid(&self) -> Pid {
        self.child.id() as Pid
    }

    /// Follows the program until it exits, sending it each signal
    /// `signals` hands out, passing every event to `on_event` (the
    /// restorations last); returns the program's exit status.
    pub fn wait(
        mut self,
        mut signals: impl FnMut() -> Option<i32>,
        mut on_event: impl FnMut(&FollowEvent),
    ) -> Result<ExitStatus, GuardError> {
        let pid = self.pid();
        let status = loop {
            for e in self.follower.step(STEP) {
                on_event(&e);
            }
            if let Some(signal) = signals() {
                tessera_sys::process::signal_child(pid, signal)?;
            }
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => return Err(crate::fail(format!("wait for process {pid}: {e}"), "")),
            }
        };
        for e in self.follower.step(Duration::ZERO) {
            on_event(&e);
        }
        for e in self.follower.stop() {
            on_event(&e);
        }
        Ok(status)
    }
}

/// The exit code a shell gives a program's status: its code, or 128 + the
/// signal that killed it.
pub fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.wrapping_add(signal as u8),
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn exit_codes_are_the_shells() {
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        // A raw wait status of 15: killed by signal 15 (SIGTERM).
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
    }

    #[test]
    fn a_missing_slot_names_the_thread_and_the_fix() {
        let e = FollowEvent::NoReservation {
            pid: 1,
            tid: 2,
            name: "audio".into(),
            policy: Policy::Fifo { priority: 70 },
            reservations: 1,
            fix: "create the cell with --cores 2".into(),
        };
        let text = e.to_string();
        assert!(text.contains("thread 2 \"audio\""), "{text}");
        assert!(text.contains("SCHED_FIFO priority 70"), "{text}");
        assert!(text.contains("--cores 2"), "{text}");
    }
}
