//! Tasks and jobs: what a task is (periodic, like the seed's `rt_periodic`,
//! or event-triggered, like `rt_select`), the legal ranges of its timing, and
//! the context a job's callback sees (its release, its deadline, and
//! [`JobContext::complete`], the seed's `rt_deadline`).
//!
//! It owns the specifications and their validation. It must never release
//! or dispatch jobs: that is the worker's.

use std::os::fd::OwnedFd;
use std::time::Duration;

/// A task of a runtime, numbered from 0 in the order tasks were added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub usize);

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "task {}", self.0)
    }
}

/// A task released every `period` at absolute times `epoch + offset + k ·
/// period`; job k is due `deadline` after its release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Periodic {
    pub name: String,
    pub period: Duration,
    /// Relative deadline, at most the period; defaults to the period.
    pub deadline: Duration,
    /// First release after the runtime's epoch.
    pub offset: Duration,
    /// The worker that runs this task's jobs.
    pub worker: usize,
}

impl Periodic {
    pub fn new(name: impl Into<String>, period: Duration) -> Periodic {
        Periodic {
            name: name.into(),
            period,
            deadline: period,
            offset: Duration::ZERO,
            worker: 0,
        }
    }

    pub fn deadline(mut self, deadline: Duration) -> Periodic {
        self.deadline = deadline;
        self
    }

    pub fn offset(mut self, offset: Duration) -> Periodic {
        self.offset = offset;
        self
    }

    pub fn worker(mut self, worker: usize) -> Periodic {
        self.worker = worker;
        self
    }

    pub(crate) fn validate(&self, workers: usize) -> Result<(), String> {
        if self.period.is_zero() {
            return Err(format!("periodic task {:?} has a period of 0", self.name));
        }
        if self.deadline.is_zero() || self.deadline > self.period {
            return Err(format!(
                "periodic task {:?}: its deadline ({:?}) must be above 0 and at most its \
                 period ({:?}); with a later deadline, jobs of one task would overlap",
                self.name, self.deadline, self.period
            ));
        }
        check_worker(&self.name, self.worker, workers)
    }
}

/// A task released when a file descriptor becomes readable (a socket, a
/// pipe, an eventfd); each job is due `deadline` after the worker saw the
/// readiness. While a job of the task is queued or running, the descriptor
/// is not watched: one readiness, one job; data left unread releases the
/// next job when the current one ends.
#[derive(Debug)]
pub struct Event {
    pub name: String,
    /// The runtime's own descriptor for the source (e.g. `socket.try_clone()`
    /// or [`tessera_sys::event::EventFd::try_clone`]); the callback keeps
    /// its own to read from.
    pub fd: OwnedFd,
    pub deadline: Duration,
    pub worker: usize,
}

impl Event {
    pub fn new(name: impl Into<String>, fd: impl Into<OwnedFd>, deadline: Duration) -> Event {
        Event {
            name: name.into(),
            fd: fd.into(),
            deadline,
            worker: 0,
        }
    }

    pub fn worker(mut self, worker: usize) -> Event {
        self.worker = worker;
        self
    }

    pub(crate) fn validate(&self, workers: usize) -> Result<(), String> {
        if self.deadline.is_zero() {
            return Err(format!("event task {:?} has a deadline of 0", self.name));
        }
        check_worker(&self.name, self.worker, workers)
    }
}

fn check_worker(name: &str, worker: usize, workers: usize) -> Result<(), String> {
    if worker >= workers {
        return Err(format!(
            "task {name:?} asks for worker {worker}, but the runtime has {workers} worker(s)"
        ));
    }
    Ok(())
}

/// A job's callback.
pub type JobFn = Box<dyn FnMut(&mut JobContext) + Send>;

/// What a running job knows about itself. Times are `CLOCK_MONOTONIC`
/// nanoseconds (`tessera_sys::clock::monotonic_ns`).
#[derive(Debug)]
pub struct JobContext {
    pub(crate) task: TaskId,
    pub(crate) job: u64,
    pub(crate) release_ns: u64,
    pub(crate) deadline_ns: u64,
    pub(crate) start_ns: u64,
    pub(crate) completed_ns: Option<u64>,
}

impl JobContext {
    pub fn task(&self) -> TaskId {
        self.task
    }

    /// The job's number within its task, from 0 (dropped jobs use numbers
    /// too, so gaps show drops).
    pub fn job(&self) -> u64 {
        self.job
    }

    pub fn release_ns(&self) -> u64 {
        self.release_ns
    }

    pub fn deadline_ns(&self) -> u64 {
        self.deadline_ns
    }

    /// When the worker started this job.
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    /// Time left until the deadline (zero once it passed): a cooperative job
    /// can shed optional work instead of running late.
    pub fn time_left(&self) -> Duration {
        Duration::from_nanos(
            self.deadline_ns
                .saturating_sub(tessera_sys::clock::monotonic_ns()),
        )
    }

    /// Ends the critical section now (the seed's `rt_deadline`): response
    /// time and miss are judged at this moment, not when the callback
    /// returns. Only the first call counts. Work after it still occupies the
    /// worker, so keep it short.
    pub fn complete(&mut self) {
        if self.completed_ns.is_none() {
            self.completed_ns = Some(tessera_sys::clock::monotonic_ns());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_periodic_deadline_beyond_the_period_is_refused() {
        let ms = Duration::from_millis;
        assert!(Periodic::new("a", ms(10)).validate(1).is_ok());
        let err = Periodic::new("a", ms(10)).deadline(ms(11)).validate(1);
        assert!(err.unwrap_err().contains("at most its period"));
        assert!(Periodic::new("a", ms(10))
            .deadline(ms(0))
            .validate(1)
            .is_err());
        assert!(Periodic::new("a", ms(0)).validate(1).is_err());
    }

    #[test]
    fn a_task_on_a_missing_worker_is_refused() {
        let p = Periodic::new("a", Duration::from_millis(1)).worker(2);
        assert!(p.validate(2).unwrap_err().contains("2 worker(s)"));
    }

    #[test]
    fn only_the_first_completion_counts() {
        let mut ctx = JobContext {
            task: TaskId(0),
            job: 0,
            release_ns: 0,
            deadline_ns: u64::MAX,
            start_ns: 0,
            completed_ns: None,
        };
        ctx.complete();
        let first = ctx.completed_ns;
        ctx.complete();
        assert_eq!(ctx.completed_ns, first);
        assert!(ctx.time_left() > Duration::ZERO);
    }
}
