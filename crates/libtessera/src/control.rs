//! A workgroup's control thread (not real-time): it drains its members'
//! rings of per-cycle samples, feeds them to the policy's
//! [`WorkgroupControl`], and asks the broker for the budget it wants,
//! recording what was granted. [`Shared`] is what it shares with the
//! joining and leaving threads (under a lock the real-time path never
//! takes) and with the members (only the closed flag and a drop count,
//! both atomics).
//!
//! It must never block a member: members only push into their rings.
//! A budget that grows is asked for at once (a member overran, or is about
//! to); one that shrinks at most every [`SHRINK_EVERY`]: fed every cycle,
//! the prediction moves a little with each, and asking for each move had
//! the broker save its state 20 times a second and retune every member as
//! often — its CPU, not the members', was the workgroup's cost.
//!
//! Each member holds a budget of its own; when several processes share a
//! workgroup, each controls its own members' budgets from their samples
//! and names only them, so neither takes from the other what its members
//! need.

use rtrb::Consumer;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_broker::{MemberBudget, Session};
use tessera_policy::workgroup::per_cycle_config;
use tessera_policy::{Budget, CycleSample, MemberReport, WorkgroupControl};

/// How often the control thread looks at the rings: a few cycles.
const TICK: Duration = Duration::from_millis(2);
/// The least time between two shrinking budget changes.
pub(crate) const SHRINK_EVERY: Duration = Duration::from_millis(250);
/// Ticks to wait after the broker failed a change before asking again.
const BACKOFF_TICKS: u32 = 50;

/// The members this process's handle joined, and what the control thread
/// has not yet taken in.
#[derive(Default)]
pub struct Roster {
    pub joined: Vec<(i32, Consumer<CycleSample>)>,
    /// Members that joined deferred, whose broker join the control thread
    /// makes on its next tick.
    pub pending: Vec<i32>,
    pub left: Vec<i32>,
    /// Members that left deferred, whose broker leave the control thread
    /// makes on its next tick.
    pub leaving: Vec<i32>,
    /// Every member now (thread ids), to leave on close.
    pub members: Vec<i32>,
    /// Deferred joins the broker refused, with their codes: those members
    /// mark cycles without a reservation.
    pub refused: Vec<(i32, i32)>,
    /// The control thread's last report, per member.
    pub report: Vec<MemberReport>,
    /// The workgroup's opening budget: what a member holds until the
    /// controller gives it its own.
    pub budget: Option<Budget>,
}

/// What the handle, its members and its control thread share.
pub struct Shared {
    pub name: String,
    closed: AtomicBool,
    /// Samples lost to a full ring.
    pub dropped: AtomicU64,
    roster: Mutex<Roster>,
}

impl Roster {
    /// Whether the broker holds `tid` as a member: not a deferred join
    /// still pending, nor one it refused.
    pub fn broker_holds(&self, tid: i32) -> bool {
        !self.pending.contains(&tid) && !self.refused.iter().any(|(t, _)| *t == tid)
    }
}

impl Shared {
    pub fn new(name: String, budget: Option<Budget>) -> Shared {
        Shared {
            name,
            closed: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            roster: Mutex::new(Roster {
                budget,
                ..Roster::default()
            }),
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Never taken on the real-time path.
    pub fn roster(&self) -> MutexGuard<'_, Roster> {
        self.roster.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Starts the control thread of `shared`, resizing through `session`
/// (none: best-effort, samples counted but no budget asked).
pub fn spawn(
    shared: Arc<Shared>,
    session: Option<Session>,
    period_ns: u64,
) -> std::io::Result<JoinHandle<()>> {
    let control = WorkgroupControl::new(per_cycle_config(), period_ns)
        .expect("the library's config and the broker's period are valid");
    let mut run = Control {
        shared,
        session,
        control,
        rings: Vec::new(),
        backoff: 0,
        last_shrink: None,
    };
    std::thread::Builder::new()
        .name(tessera_broker::workgroup::CONTROL_THREAD.into())
        .spawn(move || run.serve())
}

struct Control {
    shared: Arc<Shared>,
    session: Option<Session>,
    control: WorkgroupControl,
    rings: Vec<(i32, Consumer<CycleSample>)>,
    backoff: u32,
    /// When a budget was last made smaller.
    last_shrink: Option<Instant>,
}

impl Control {
    fn serve(&mut self) {
        while !self.shared.is_closed() {
            self.take_roster();
            self.drain();
            self.resize();
            self.shared.roster().report = self.control.report();
            std::thread::park_timeout(TICK);
        }
    }

    fn take_roster(&mut self) {
        let leaving = {
            let mut roster = self.shared.roster();
            // The broker joins under the roster's lock: a member leaving
            // meanwhile is either still pending (and dropped from it) or
            // waits for its join, so its leave never comes before its join.
            // A thread joining meanwhile waits too (two first cycles joining
            // at once): not yet made lock-free.
            for tid in std::mem::take(&mut roster.pending) {
                if let Some(session) = self.session.as_mut() {
                    if let Err(e) = session.join_workgroup(&self.shared.name, tid) {
                        roster.refused.push((tid, crate::status::of_broker(&e)));
                    }
                }
            }
            for tid in roster.left.drain(..) {
                self.control.leave(tid);
                self.rings.retain(|(t, _)| *t != tid);
            }
            for (tid, ring) in roster.joined.drain(..) {
                self.control.join(tid);
                self.rings.push((tid, ring));
            }
            std::mem::take(&mut roster.leaving)
        };
        // Left outside the lock: the members of a graph leave one after the
        // other within a cycle, and each would wait for the broker's answer
        // to the one before. A deferred leave is only of a thread the broker
        // holds, so it never comes before its join; a join of the same
        // thread again comes on a later tick.
        for tid in leaving {
            if let Some(session) = self.session.as_mut() {
                // A thread that exited meanwhile the broker drops itself.
                let _ = session.leave_workgroup(&self.shared.name, tid);
            }
        }
    }

    fn drain(&mut self) {
        for (tid, ring) in &mut self.rings {
            while let Ok(sample) = ring.pop() {
                // A period the kernel cannot enforce is ignored: the
                // member's next cycles say more.
                let _ = self.control.observe(*tid, sample);
            }
        }
    }

    /// Asks the broker for the members' budgets that must change (those
    /// it holds: not a deferred join still pending or refused), at once
    /// when one grows, at most every [`SHRINK_EVERY`] when all shrink.
    fn resize(&mut self) {
        if self.backoff > 0 {
            self.backoff -= 1;
            return;
        }
        let (Some(session), Some(next)) = (self.session.as_mut(), self.control.update()) else {
            return;
        };
        let changes: Vec<MemberBudget> = {
            let roster = self.shared.roster();
            next.into_iter()
                .filter(|&(tid, budget)| {
                    roster.broker_holds(tid) && self.control.granted_budget(tid) != Some(budget)
                })
                .map(|(tid, budget)| MemberBudget { tid, budget })
                .collect()
        };
        if changes.is_empty() {
            return;
        }
        let shrinks = changes.iter().all(|c| {
            self.control
                .granted_budget(c.tid)
                .is_some_and(|held| held.shrinks_to(c.budget))
        });
        if shrinks
            && self
                .last_shrink
                .is_some_and(|at| at.elapsed() < SHRINK_EVERY)
        {
            return;
        }
        match session.resize_members(&self.shared.name, changes, true) {
            Ok(reply) => {
                if shrinks {
                    self.last_shrink = Some(Instant::now());
                }
                let granted: Vec<_> = reply.budgets.iter().map(|b| (b.tid, b.budget)).collect();
                self.control.granted(&granted, reply.degraded);
            }
            Err(_) => self.backoff = BACKOFF_TICKS,
        }
    }
}
