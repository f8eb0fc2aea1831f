//! Reserved members the kernel stopped running. A SCHED_DEADLINE thread
//! whose replenishment the kernel lost stays throttled — runnable, its
//! runtime spent, its deadline long past — and never runs again: not for
//! its program, not even to exit. Seen on Linux 6.18 (2026-12-02, §4.5's
//! workgroup on one partitioned core, beside the kernel's warnings on its
//! deadline bandwidth accounting): two members closing with their JACK
//! clients held their process, and `tessera run`, for minutes, until set
//! SCHED_OTHER by hand. A reservation that is set again starts afresh.
//!
//! The reaper reads every member's CPU time anyway (its liveness check);
//! this module keeps, per member, since when that time stood still, and
//! says when it has for [`stranded_after`] its period. It owns only that judgement:
//! it must never read or change a thread (the caller checks the thread is
//! runnable, and gives the reservation again).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a member's CPU time may stand still, at the least, before the
/// reaper looks whether it is runnable: a reservation runs every period,
/// so a runnable member that got no CPU for a second — and for three of
/// its periods, when those are longer — is not waiting its turn.
pub const STRANDED_AFTER: Duration = Duration::from_secs(1);

/// How long a member whose reservation has `period_ns` may go without
/// CPU time while runnable before it counts as stranded.
pub fn stranded_after(period_ns: u64) -> Duration {
    STRANDED_AFTER.max(Duration::from_nanos(period_ns.saturating_mul(3)))
}

/// A thread, named by id and start time (as the reaper's liveness files).
pub type ThreadId = (i32, u64);

/// Since when each member's CPU time stood where it is.
#[derive(Debug, Default)]
pub struct Progress {
    seen: HashMap<ThreadId, Seen>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    cpu_ns: u64,
    since: Instant,
}

impl Progress {
    /// Records that `id` had used `cpu_ns` at `now`; true when that time
    /// has not moved for `after` or longer.
    pub fn stood_still(
        &mut self,
        id: ThreadId,
        cpu_ns: u64,
        now: Instant,
        after: Duration,
    ) -> bool {
        let seen = self.seen.entry(id).or_insert(Seen { cpu_ns, since: now });
        if seen.cpu_ns != cpu_ns {
            *seen = Seen { cpu_ns, since: now };
        }
        now.saturating_duration_since(seen.since) >= after
    }

    /// Starts `id`'s count again (its reservation was just given again, or
    /// it is not runnable: a member asleep uses no CPU either).
    pub fn restart(&mut self, id: ThreadId, now: Instant) {
        if let Some(seen) = self.seen.get_mut(&id) {
            seen.since = now;
        }
    }

    /// Forgets the threads `keep` does not name.
    pub fn retain(&mut self, keep: impl Fn(ThreadId) -> bool) {
        self.seen.retain(|&id, _| keep(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: ThreadId = (42, 7);

    #[test]
    fn a_member_that_runs_never_stood_still() {
        let mut p = Progress::default();
        let t0 = Instant::now();
        for k in 0..20u64 {
            let at = t0 + Duration::from_millis(200 * k);
            assert!(!p.stood_still(ID, 1_000 * k, at, STRANDED_AFTER));
        }
    }

    #[test]
    fn a_member_stands_still_after_a_second_without_cpu_time() {
        let mut p = Progress::default();
        let t0 = Instant::now();
        assert!(!p.stood_still(ID, 5, t0, STRANDED_AFTER));
        assert!(!p.stood_still(ID, 5, t0 + Duration::from_millis(800), STRANDED_AFTER));
        assert!(p.stood_still(ID, 5, t0 + STRANDED_AFTER, STRANDED_AFTER));
        // Restarted (given its reservation again, or found asleep): a
        // second more before it counts again.
        p.restart(ID, t0 + STRANDED_AFTER);
        assert!(!p.stood_still(ID, 5, t0 + Duration::from_millis(1_500), STRANDED_AFTER));
        assert!(p.stood_still(ID, 5, t0 + STRANDED_AFTER * 2, STRANDED_AFTER));
        // It ran: the count starts from its new time.
        assert!(!p.stood_still(ID, 6, t0 + STRANDED_AFTER * 3, STRANDED_AFTER));
    }

    #[test]
    fn a_long_period_waits_three_of_its_periods() {
        assert_eq!(stranded_after(1_333_333), STRANDED_AFTER);
        assert_eq!(stranded_after(2_000_000_000), Duration::from_secs(6));
    }

    #[test]
    fn forgotten_members_start_again() {
        let mut p = Progress::default();
        let t0 = Instant::now();
        p.stood_still(ID, 5, t0, STRANDED_AFTER);
        p.retain(|_| false);
        assert!(!p.stood_still(ID, 5, t0 + STRANDED_AFTER * 5, STRANDED_AFTER));
    }
}
