//! Per-task statistics: counters and response-time extremes, written by the
//! task's worker with plain atomic stores (no lock, no allocation) and read
//! at any time by the control thread.
//!
//! It owns the counters' meaning. It must never keep a histogram (that is
//! the measurement layer's, above this one): callers that want one record
//! response times themselves from the job context.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The live counters of one task.
pub(crate) struct TaskStats {
    released: AtomicU64,
    completed: AtomicU64,
    missed: AtomicU64,
    dropped: AtomicU64,
    panicked: AtomicU64,
    response_min_ns: AtomicU64,
    response_max_ns: AtomicU64,
    response_sum_ns: AtomicU64,
}

impl Default for TaskStats {
    fn default() -> Self {
        TaskStats {
            released: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            missed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            panicked: AtomicU64::new(0),
            response_min_ns: AtomicU64::new(u64::MAX),
            response_max_ns: AtomicU64::new(0),
            response_sum_ns: AtomicU64::new(0),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl TaskStats {
    pub fn released(&self) {
        bump(&self.released);
    }

    /// A job that could not start before its deadline.
    pub fn dropped(&self) {
        bump(&self.dropped);
        bump(&self.missed);
    }

    /// A job that ran; `late` when it completed after its deadline.
    pub fn completed(&self, response_ns: u64, late: bool) {
        bump(&self.completed);
        if late {
            bump(&self.missed);
        }
        self.response_min_ns
            .fetch_min(response_ns, Ordering::Relaxed);
        self.response_max_ns
            .fetch_max(response_ns, Ordering::Relaxed);
        self.response_sum_ns
            .fetch_add(response_ns, Ordering::Relaxed);
    }

    pub fn panicked(&self) {
        bump(&self.panicked);
    }

    pub fn snapshot(&self) -> TaskCounters {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let completed = load(&self.completed);
        let response = |ns: u64| (completed > 0).then(|| Duration::from_nanos(ns));
        TaskCounters {
            released: load(&self.released),
            completed,
            missed: load(&self.missed),
            dropped: load(&self.dropped),
            panicked: load(&self.panicked),
            response_min: response(load(&self.response_min_ns)),
            response_max: response(load(&self.response_max_ns)),
            response_mean: response(load(&self.response_sum_ns) / completed.max(1)),
        }
    }
}

/// A task's statistics at one moment.
///
/// * `released`: jobs released (timer expirations, readiness events).
/// * `completed`: jobs that ran to the end of their critical section, in
///   time or late.
/// * `missed`: jobs that did not complete by their deadline: the late
///   completions plus the `dropped` jobs.
/// * `dropped`: jobs never started because their deadline passed first.
/// * `panicked`: jobs whose callback panicked (counted completed at the
///   panic).
/// * response times (release to completion) of completed jobs; `None` before
///   the first completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskCounters {
    pub released: u64,
    pub completed: u64,
    pub missed: u64,
    pub dropped: u64,
    pub panicked: u64,
    pub response_min: Option<Duration>,
    pub response_max: Option<Duration>,
    pub response_mean: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misses_include_drops_and_late_completions() {
        let s = TaskStats::default();
        s.released();
        s.released();
        s.released();
        s.completed(100, false);
        s.completed(300, true);
        s.dropped();
        let c = s.snapshot();
        assert_eq!((c.released, c.completed, c.missed, c.dropped), (3, 2, 2, 1));
        assert_eq!(c.response_min, Some(Duration::from_nanos(100)));
        assert_eq!(c.response_max, Some(Duration::from_nanos(300)));
        assert_eq!(c.response_mean, Some(Duration::from_nanos(200)));
    }

    #[test]
    fn no_response_time_before_the_first_completion() {
        assert_eq!(TaskStats::default().snapshot().response_min, None);
    }
}
