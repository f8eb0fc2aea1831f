//! The JACK bridge to workgroups (`--workgroup NAME`): a load client's
//! process thread joins the workgroup on its first cycle and from then on
//! marks every cycle — its start from JACK's cycle times, its deadline one
//! period later — so that its reservation follows its exact cycles
//! (libtessera's controller) instead of the guard's /proc sampling; once the
//! run goes quiet it leaves, and the main thread waits for that before the
//! client closes (JACK2 cancels a closing client's thread, and a thread
//! cancelled inside the broker's calls would abort the process).
//!
//! The join is deferred (`tessera_workgroup_join_deferred`): the broker's
//! join is made by libtessera's control thread, not in the cycle, whose
//! lateness would hold the whole graph (20–100 ms with a broker's answer
//! in it: an xrun at each client's start). So is the leave
//! (`tessera_workgroup_leave_deferred`: ten loads leaving with a broker
//! round trip each had 101–104 xrun notifications in 30 ms). Marking a
//! cycle is two real-time-safe calls. It must never print or allocate in a
//! cycle: what became of the member goes to atomics the main thread reads.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use tessera::handle::{JoinToken, WorkgroupHandle};

/// The join's code before the first cycle tried it.
const NOT_TRIED: i32 = i32::MIN;

/// What the main thread sees of a member.
pub struct Membership {
    /// libtessera's code of the join, or [`NOT_TRIED`].
    joined: AtomicI32,
    /// It left the workgroup.
    left: AtomicBool,
}

impl Membership {
    /// Its join's code; None before its first cycle.
    pub fn joined(&self) -> Option<i32> {
        Some(self.joined.load(Ordering::Acquire)).filter(|&c| c != NOT_TRIED)
    }

    /// Whether its thread is out of the workgroup: it left, or never joined.
    pub fn is_out(&self) -> bool {
        self.left.load(Ordering::Acquire) || self.joined().is_none_or(|code| code < 0)
    }
}

/// One process thread's membership of the workgroup.
pub struct Bridge {
    workgroup: Arc<WorkgroupHandle>,
    token: Option<JoinToken>,
    membership: Arc<Membership>,
    /// A cycle was started and not yet finished.
    marking: bool,
}

impl Bridge {
    pub fn new(workgroup: Arc<WorkgroupHandle>) -> Bridge {
        Bridge {
            workgroup,
            token: None,
            membership: Arc::new(Membership {
                joined: AtomicI32::new(NOT_TRIED),
                left: AtomicBool::new(false),
            }),
            marking: false,
        }
    }

    /// What the main thread reads.
    pub fn membership(&self) -> Arc<Membership> {
        Arc::clone(&self.membership)
    }

    /// A cycle starts at `start_ns` (CLOCK_MONOTONIC) and lasts `period_ns`:
    /// the first joins, the next ones are marked.
    pub fn begin(&mut self, start_ns: u64, period_ns: u64) {
        if self.membership.joined().is_none() {
            let code = match self.workgroup.join_deferred() {
                Ok((token, code)) => {
                    self.token = Some(token);
                    code
                }
                Err(code) => code,
            };
            self.membership.joined.store(code, Ordering::Release);
            return;
        }
        self.marking = self.token.is_some()
            && self
                .workgroup
                .interval_start(start_ns, start_ns + period_ns)
                >= 0;
    }

    /// The cycle's work is done.
    pub fn end(&mut self) {
        if std::mem::take(&mut self.marking) {
            self.workgroup.interval_finish();
        }
    }

    /// Leaves the workgroup (once; the run is over).
    pub fn leave(&mut self) {
        if let Some(token) = self.token.take() {
            self.workgroup.leave_deferred(token);
            self.membership.left.store(true, Ordering::Release);
        }
    }
}
