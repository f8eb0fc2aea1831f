//! A workgroup handle in Rust: opening (or creating) the workgroup through
//! the broker with this process's credentials, joining and leaving the
//! calling thread, closing. Every failure is a return code of
//! [`crate::status`]; a broker that cannot be reached leaves a best-effort
//! workgroup (samples measured and counted, no reservation), labelled so.
//!
//! It must never be called from the real-time path: every operation here
//! may talk to the broker.

use crate::control::{self, state, Shared};
use crate::member;
use crate::status::{self, TESSERA_BEST_EFFORT, TESSERA_ERR_BROKER, TESSERA_OK};
use std::sync::Arc;
use std::thread::JoinHandle;
use tessera_broker::{ErrorCode, Mode, Session, WorkgroupShape};
use tessera_policy::workgroup::{opening_pct, OPENING_PERIOD_NS};
use tessera_policy::{Budget, MemberReport};

/// A workgroup's members' places in this process, at least: each slot's
/// ring is made at open, so a join allocates nothing.
const MIN_SLOTS: usize = 16;
/// How long a leave that must wait for the broker waits for a deferred
/// join the control thread is still making.
const JOIN_SETTLES: std::time::Duration = std::time::Duration::from_secs(5);

/// The machine's cores: a workgroup's members by default.
fn cores() -> usize {
    tessera_sys::kernel::online_cpus().map_or(1, |c| c.len())
}

pub struct Workgroup {
    shared: Arc<Shared>,
    capacity: usize,
    guaranteed: bool,
    /// A broker's workgroup backs it (reservations when `guaranteed`).
    backed: bool,
    /// This process created it (and destroys it on close).
    created: bool,
    control: Option<JoinHandle<()>>,
}

impl Workgroup {
    /// Opens workgroup `name`, creating it (bound to this process, for up
    /// to `capacity` members — None: as many as the machine has cores —
    /// under global EDF, or on `core` partitioned) when none exists.
    pub fn open(
        name: &str,
        capacity: Option<usize>,
        core: Option<usize>,
    ) -> Result<Workgroup, i32> {
        let capacity = capacity.unwrap_or_else(cores);
        match Session::connect() {
            Ok(session) => Self::through(name, session, capacity, core),
            Err(_) => Ok(Self::best_effort(name, capacity)),
        }
    }

    fn through(
        name: &str,
        mut session: Session,
        capacity: usize,
        core: Option<usize>,
    ) -> Result<Workgroup, i32> {
        let mut pct = opening_pct(capacity);
        let info = loop {
            let shape = WorkgroupShape {
                core,
                capacity,
                for_process: None,
                budget: Budget::new(OPENING_PERIOD_NS * u64::from(pct) / 100, OPENING_PERIOD_NS),
            };
            match session.open_workgroup(name, Some(shape)) {
                Ok(info) => break info,
                // A busy machine: a smaller opening budget, which the
                // members' measured cycles raise as far as admission lets.
                Err(e) if e.code == ErrorCode::Refused && pct > 1 => pct /= 2,
                Err(e) => match status::of_broker(&e) {
                    TESSERA_ERR_BROKER => return Ok(Self::best_effort(name, capacity)),
                    code => return Err(code),
                },
            }
        };
        let pid = tessera_sys::proc::current_pid();
        let created = session
            .show(name)
            .is_ok_and(|c| c.bound_to_pid == Some(pid));
        let guaranteed = info.mode != Mode::BestEffort;
        let (shared, rings) = Shared::new(name.to_string(), Some(info.budget), slots(capacity));
        let shared = Arc::new(shared);
        let control = control::spawn(shared.clone(), rings, Some(session), info.budget.period_ns)
            .map_err(|_| TESSERA_ERR_BROKER)?;
        Ok(Workgroup {
            shared,
            capacity: info.capacity,
            guaranteed,
            backed: true,
            created,
            control: Some(control),
        })
    }

    /// A workgroup no broker backs: members are measured and counted,
    /// nothing is reserved.
    fn best_effort(name: &str, capacity: usize) -> Workgroup {
        let (shared, rings) = Shared::new(name.to_string(), None, slots(capacity));
        let shared = Arc::new(shared);
        let control = control::spawn(shared.clone(), rings, None, OPENING_PERIOD_NS).ok();
        Workgroup {
            shared,
            capacity,
            guaranteed: false,
            backed: false,
            created: false,
            control,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn guaranteed(&self) -> bool {
        self.guaranteed
    }

    /// Makes the calling thread a member through `handle` (the C pointer);
    /// [`TESSERA_BEST_EFFORT`] when no reservation backs it.
    pub fn join(&self, handle: usize) -> Result<(i32, i32), i32> {
        self.admit(handle, false)
    }

    /// As [`Workgroup::join`], but the broker's join is left to the control
    /// thread's next tick, so the call makes no broker request: for a
    /// thread that joins from inside its first cycle (a JACK callback),
    /// where a broker's answer (20–100 ms on a busy machine) would stall
    /// the whole graph. The reservation follows within a tick; a refusal
    /// shows in the member's stats ([`Workgroup::refusal`]).
    pub fn join_deferred(&self, handle: usize) -> Result<(i32, i32), i32> {
        self.admit(handle, true)
    }

    /// Makes the calling thread a member: a slot claimed (its ring made at
    /// open) and the membership in a thread-local. Deferred, it allocates
    /// nothing and takes no lock another thread waits on (the
    /// thread-local's first use on a thread aside: glibc allocates once
    /// to register its destructor).
    fn admit(&self, handle: usize, deferred: bool) -> Result<(i32, i32), i32> {
        if member::is_member() {
            return Err(status::TESSERA_ERR_ALREADY_JOINED);
        }
        let tid = tessera_sys::proc::current_tid();
        // Some(whether it is reserved) once the broker holds the member.
        let joined = match self.backed && !deferred {
            true => Some(self.broker_join(tid)?),
            false => None,
        };
        let held = joined.is_some();
        let next = match () {
            _ if deferred && self.backed => state::PENDING,
            _ if held => state::HELD,
            _ => state::UNHELD,
        };
        let Some((slot, producer)) = self.shared.claim(tid, next) else {
            if held {
                self.broker_leave(tid)?;
            }
            return Err(status::TESSERA_ERR_REFUSED);
        };
        if let Err((code, producer)) =
            member::enter(self.shared.clone(), handle, tid, slot, producer)
        {
            self.shared.unclaim(slot, producer);
            if held {
                self.broker_leave(tid)?;
            }
            return Err(code);
        }
        if next == state::PENDING {
            if let Some(control) = &self.control {
                control.thread().unpark();
            }
        }
        let reserved = (joined == Some(true) || next == state::PENDING) && self.guaranteed;
        Ok((
            tid,
            if reserved {
                TESSERA_OK
            } else {
                TESSERA_BEST_EFFORT
            },
        ))
    }

    /// Whether the broker gave the thread a reservation.
    fn broker_join(&self, tid: i32) -> Result<bool, i32> {
        let mut session = Session::connect().map_err(|e| status::of_broker(&e))?;
        match session.join_workgroup(&self.shared.name, tid) {
            Ok(info) => Ok(info.mode != Mode::BestEffort),
            Err(e) => Err(status::of_broker(&e)),
        }
    }

    /// Ends the calling thread's membership through `handle`: the broker
    /// has ended its reservation when this returns.
    pub fn leave(&self, handle: usize) -> Result<(), i32> {
        self.part(handle, false)
    }

    /// As [`Workgroup::leave`], but the broker's leave is left to the
    /// control thread's next tick, so the call makes no broker request: for
    /// a member that leaves from inside a cycle, where a broker round trip
    /// per member held the whole graph (a JACK peer's ten loads leaving:
    /// 101–104 xrun notifications in 30 ms). The thread keeps its
    /// reservation until then.
    pub fn leave_deferred(&self, handle: usize) -> Result<(), i32> {
        self.part(handle, true)
    }

    fn part(&self, handle: usize, deferred: bool) -> Result<(), i32> {
        let membership = member::exit(handle)?;
        let (tid, slot) = (membership.tid, membership.slot);
        if !deferred {
            // The broker has ended the reservation when a leave returns:
            // a deferred join the control thread is making comes first.
            let since = std::time::Instant::now();
            while self.shared.pending(slot) && since.elapsed() < JOIN_SETTLES {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        let leave_is_ours = self
            .shared
            .hand_back(slot, membership.into_ring(), deferred);
        if let Some(control) = &self.control {
            control.thread().unpark();
        }
        match leave_is_ours {
            true => self.broker_leave(tid),
            false => Ok(()),
        }
    }

    fn broker_leave(&self, tid: i32) -> Result<(), i32> {
        let mut session = Session::connect().map_err(|e| status::of_broker(&e))?;
        session
            .leave_workgroup(&self.shared.name, tid)
            .map_err(|e| status::of_broker(&e))
    }

    /// The control thread's counts for member `tid`.
    pub fn member_report(&self, tid: i32) -> Option<MemberReport> {
        let reports = self.shared.reports();
        reports.members.iter().find(|r| r.member == tid).copied()
    }

    /// The broker's refusal of member `tid`'s deferred join, as a return
    /// code: the member marks its cycles without a reservation.
    pub fn refusal(&self, tid: i32) -> Option<i32> {
        let slots = self.shared.slots();
        let slot = slots
            .iter()
            .find(|s| s.tid() == tid && s.state() == state::UNHELD);
        slot.and_then(|s| s.refusal())
    }

    /// The budget member `tid`'s reservation has now: its own once the
    /// controller gave it one, else the workgroup's opening budget.
    pub fn budget_of(&self, tid: i32) -> Option<Budget> {
        let reports = self.shared.reports();
        let own = reports.members.iter().find(|r| r.member == tid);
        own.and_then(|r| r.budget).or(reports.budget)
    }

    /// Stops the control thread; members still joined through this handle
    /// leave the broker's cell, and a workgroup this process created is
    /// destroyed. Members' further interval calls answer "not joined".
    pub fn close(mut self) -> i32 {
        self.shared.close();
        if let Some(control) = self.control.take() {
            control.thread().unpark();
            let _ = control.join();
        }
        if !self.backed {
            return TESSERA_OK;
        }
        let Ok(mut session) = Session::connect() else {
            return TESSERA_ERR_BROKER;
        };
        // Members the broker holds: joined, or left deferred with their
        // leave not yet made (the control thread has stopped, so no
        // deferred join is half made).
        let members: Vec<i32> = self
            .shared
            .slots()
            .iter()
            .filter(|s| matches!(s.state(), state::HELD | state::LEFT_HELD))
            .map(|s| s.tid())
            .collect();
        let mut code = TESSERA_OK;
        for tid in members {
            if let Err(e) = session.leave_workgroup(&self.shared.name, tid) {
                code = status::of_broker(&e);
            }
        }
        if self.created {
            if let Err(e) = session.destroy_cell(&self.shared.name) {
                code = status::of_broker(&e);
            }
        }
        code
    }
}

/// The slots of a workgroup for `capacity` members: room for members that
/// leave and join again before the control thread frees their old slots.
fn slots(capacity: usize) -> usize {
    capacity.saturating_mul(2).max(MIN_SLOTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_joining_and_leaving_at_once_each_get_a_place_and_give_it_back() {
        let wg = Arc::new(Workgroup::best_effort("wg-places", 4));
        let threads: Vec<_> = (0..4)
            .map(|n| {
                let wg = wg.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let (tid, code) = wg.join_deferred(n).expect("a place");
                        assert_eq!(code, TESSERA_BEST_EFFORT);
                        assert_eq!(tid, tessera_sys::proc::current_tid());
                        assert!(wg.join_deferred(n).is_err(), "joined twice");
                        wg.leave_deferred(n).expect("left");
                        std::thread::sleep(std::time::Duration::from_millis(3));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let since = std::time::Instant::now();
        let free = || wg.shared.slots().iter().all(|s| s.state() == state::FREE);
        while !free() && since.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(free(), "every place given back");
        assert_eq!(wg.shared.slots().len(), MIN_SLOTS);
    }

    #[test]
    fn a_deadline_moved_by_interval_update_leaves_the_period_alone() {
        let wg = Workgroup::best_effort("wg-update", 1);
        let handle = 1;
        wg.join(handle).expect("joined");
        let tid = tessera_sys::proc::current_tid();
        let start = tessera_sys::clock::monotonic_ns();
        for cycle in 0..20 {
            let begin = start + cycle * 1_000_000;
            assert_eq!(member::interval_start(handle, begin, begin + 1_000_000), 0);
            assert_eq!(member::interval_update(handle, begin + 1_700_000), 0);
            assert_eq!(member::interval_finish(handle), 0);
        }
        let since = std::time::Instant::now();
        let report = loop {
            match wg.member_report(tid) {
                Some(r) if r.cycles == 20 => break r,
                _ if since.elapsed() > std::time::Duration::from_secs(2) => {
                    panic!("the control thread's report: {:?}", wg.member_report(tid))
                }
                _ => std::thread::sleep(std::time::Duration::from_millis(2)),
            }
        };
        assert_eq!(report.wanted.period_ns % 1_000_000, 0, "{report:?}");
        assert_eq!(
            report.misses, 0,
            "late by the moved deadline only: {report:?}"
        );
        wg.leave(handle).expect("left");
    }
}
