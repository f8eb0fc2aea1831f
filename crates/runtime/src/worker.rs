//! One worker of a cell: a thread that waits for releases (timerfd
//! expirations and readable descriptors, through one epoll), queues the
//! released jobs earliest deadline first, and runs them one at a time.
//!
//! Dispatch policy, exactly:
//! * Releases are gathered before every job: the worker polls its epoll
//!   (without sleeping when jobs are queued), so a job released while
//!   another ran competes by deadline with the jobs already queued.
//! * The queued job with the earliest deadline runs next (ties: earlier
//!   release, then task order). Jobs are not preempted: a running callback
//!   keeps the worker until it returns.
//! * A job whose deadline is at or before the moment it would start is
//!   dropped, never run: it is counted released, missed and dropped, and
//!   reported. Late work is shed, so one late job cannot push the jobs queued
//!   behind it past their deadlines in a cascade.
//! * A job that ran is judged at the end of its critical section
//!   ([`JobContext::complete`], or the return of its callback): later than
//!   its deadline is a miss, counted and reported.
//! * A periodic task that was not served for whole periods releases every
//!   missed period (each dropped at once) so counts stay honest.
//!
//! The loop runs inside an [`RtGuard`]: it must never allocate, lock, or
//! print. Everything it needs is allocated when the worker is built.

use std::os::fd::{AsFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tessera_rtguard::RtGuard;
use tessera_sys::clock::monotonic_ns;
use tessera_sys::event::{Epoll, EventFd, Readiness, TimerFd, Trigger};
use tessera_sys::signal::OverrunWatch;

use crate::notify::{Miss, Notice, Notifier, Overrun};
use crate::queue::{Job, ReadyQueue};
use crate::stats::TaskStats;
use crate::task::{JobContext, JobFn, TaskId};

/// The epoll token of the worker's control eventfd (tasks use their index).
const CONTROL_TOKEN: u64 = u64::MAX;
/// How long an idle worker sleeps before re-checking its stop flag, should a
/// control wake-up be lost.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// Where a task's releases come from.
pub(crate) enum Source {
    Periodic {
        timer: TimerFd,
        period_ns: u64,
        offset_ns: u64,
        /// The release time of the next expiration.
        next_release_ns: u64,
    },
    Event {
        fd: OwnedFd,
    },
}

/// A task as its worker holds it.
pub(crate) struct WorkerTask {
    pub id: TaskId,
    pub source: Source,
    pub relative_deadline_ns: u64,
    pub callback: JobFn,
    pub next_seq: u64,
}

/// A worker before and while it runs.
pub(crate) struct Worker {
    index: usize,
    epoll: Epoll,
    control: EventFd,
    tasks: Vec<WorkerTask>,
    queue: ReadyQueue,
    ready: Vec<Readiness>,
    notifier: Notifier,
    stats: Arc<[TaskStats]>,
    stop: Arc<AtomicBool>,
    overruns: Option<OverrunWatch>,
    seen_overruns: u64,
}

impl Worker {
    /// Builds worker `index` with its tasks; returns it and the eventfd that
    /// wakes it (see [`Worker::run`]'s stop flag).
    pub fn new(
        index: usize,
        tasks: Vec<WorkerTask>,
        notifier: Notifier,
        stats: Arc<[TaskStats]>,
        stop: Arc<AtomicBool>,
    ) -> tessera_sys::Result<(Worker, EventFd)> {
        let epoll = Epoll::new()?;
        let control = EventFd::new()?;
        epoll.add(control.as_fd(), CONTROL_TOKEN, Trigger::Level)?;
        for (local, task) in tasks.iter().enumerate() {
            let token = local as u64;
            match &task.source {
                Source::Periodic { timer, .. } => {
                    epoll.add(timer.as_fd(), token, Trigger::Level)?
                }
                Source::Event { fd } => epoll.add(fd.as_fd(), token, Trigger::OneShot)?,
            }
        }
        let waker = control.try_clone()?;
        let worker = Worker {
            index,
            epoll,
            control,
            // After a purge of expired jobs, a task has at most one job
            // queued (see `enqueue`), so one slot per task suffices.
            queue: ReadyQueue::with_capacity(tasks.len()),
            ready: vec![Readiness::EMPTY; tasks.len() + 1],
            tasks,
            notifier,
            stats,
            stop,
            overruns: None,
            seen_overruns: 0,
        };
        Ok((worker, waker))
    }

    /// Counts this thread's overrun signals from now on.
    pub fn watch_overruns(&mut self, watch: OverrunWatch) {
        self.seen_overruns = watch.count();
        self.overruns = Some(watch);
    }

    /// Arms the periodic tasks at `epoch_ns` and dispatches until the stop
    /// flag is set (the control eventfd wakes the worker to see it). Jobs
    /// still queued then are abandoned.
    pub fn run(mut self, epoch_ns: u64) -> tessera_sys::Result<()> {
        self.arm(epoch_ns)?;
        let _real_time = RtGuard::enter();
        while !self.stop.load(Ordering::Acquire) {
            let wait = if self.queue.is_empty() {
                IDLE_WAIT
            } else {
                Duration::ZERO
            };
            self.poll(wait)?;
            self.check_overruns(None);
            if let Some(job) = self.queue.pop() {
                self.dispatch(job);
            }
        }
        Ok(())
    }

    fn arm(&mut self, epoch_ns: u64) -> tessera_sys::Result<()> {
        for task in &mut self.tasks {
            if let Source::Periodic {
                timer,
                period_ns,
                offset_ns,
                next_release_ns,
            } = &mut task.source
            {
                *next_release_ns = epoch_ns + *offset_ns;
                timer.arm_periodic(*next_release_ns, *period_ns)?;
            }
        }
        Ok(())
    }

    /// Waits up to `wait` for readiness and releases the ready tasks' jobs.
    fn poll(&mut self, wait: Duration) -> tessera_sys::Result<()> {
        let n = self.epoll.wait(&mut self.ready, wait)?;
        // One timestamp for everything seen together: jobs released by the
        // same wake-up are released at the same instant.
        let now = monotonic_ns();
        for i in 0..n {
            match self.ready[i].token() {
                CONTROL_TOKEN => {
                    self.control.drain();
                }
                token => self.release(token as usize, now),
            }
        }
        Ok(())
    }

    fn release(&mut self, local: usize, now: u64) {
        let task = &mut self.tasks[local];
        let (first_release, period, count) = match &mut task.source {
            Source::Periodic {
                timer,
                period_ns,
                next_release_ns,
                ..
            } => {
                let count = timer.expirations();
                let first = *next_release_ns;
                *next_release_ns += count * *period_ns;
                (first, *period_ns, count)
            }
            // The event's time is when the worker saw it.
            Source::Event { .. } => (now, 0, 1),
        };
        let (id, deadline, first_seq) = (task.id, task.relative_deadline_ns, task.next_seq);
        task.next_seq += count;
        for k in 0..count {
            self.stats[id.0].released();
            let release_ns = first_release + k * period;
            self.enqueue(
                Job {
                    deadline_ns: release_ns + deadline,
                    release_ns,
                    task: local,
                    seq: first_seq + k,
                },
                now,
            );
        }
    }

    /// Queues a released job, first dropping every queued job already past
    /// its deadline. That purge keeps one slot per task enough: a periodic
    /// task's earlier job is due by this release (deadline ≤ period), so it
    /// was purged; an event task is not watched while its job is queued.
    fn enqueue(&mut self, job: Job, now: u64) {
        while let Some(expired) = self.queue.pop_expired(now) {
            self.drop_job(expired, now);
        }
        if job.deadline_ns <= now {
            self.drop_job(job, now);
            return;
        }
        if let Err(job) = self.queue.push(job) {
            // Unreachable by the argument above; shed rather than grow.
            self.drop_job(job, now);
        }
    }

    fn dispatch(&mut self, job: Job) {
        let start = monotonic_ns();
        if start >= job.deadline_ns {
            self.drop_job(job, start);
            return;
        }
        let task = &mut self.tasks[job.task];
        let mut ctx = JobContext {
            task: task.id,
            job: job.seq,
            release_ns: job.release_ns,
            deadline_ns: job.deadline_ns,
            start_ns: start,
            completed_ns: None,
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| (task.callback)(&mut ctx)));
        let end = ctx.completed_ns.unwrap_or_else(monotonic_ns);
        let stats = &self.stats[task.id.0];
        if outcome.is_err() {
            stats.panicked();
        }
        let late = end > job.deadline_ns;
        stats.completed(end.saturating_sub(job.release_ns), late);
        if late {
            self.report_miss(job, end - job.deadline_ns, false);
        }
        self.finished(job.task);
        self.check_overruns(Some((self.tasks[job.task].id, job.seq)));
    }

    fn drop_job(&mut self, job: Job, now: u64) {
        self.stats[self.tasks[job.task].id.0].dropped();
        self.report_miss(job, now.saturating_sub(job.deadline_ns), true);
        self.finished(job.task);
    }

    fn report_miss(&mut self, job: Job, lateness_ns: u64, dropped: bool) {
        self.notifier.send(Notice::Miss(Miss {
            task: self.tasks[job.task].id,
            job: job.seq,
            release_ns: job.release_ns,
            deadline_ns: job.deadline_ns,
            lateness: Duration::from_nanos(lateness_ns),
            dropped,
        }));
    }

    /// A job of task `local` left the worker: an event task is watched again.
    fn finished(&mut self, local: usize) {
        if let Source::Event { fd } = &self.tasks[local].source {
            // MOD of a descriptor this worker registered and owns cannot
            // fail; were it to, the task would only stop releasing jobs.
            let _ = self.epoll.rearm(fd.as_fd(), local as u64);
        }
    }

    fn check_overruns(&mut self, running: Option<(TaskId, u64)>) {
        let Some(watch) = &self.overruns else {
            return;
        };
        let count = watch.count();
        if count == self.seen_overruns {
            return;
        }
        let signals = count - self.seen_overruns;
        self.seen_overruns = count;
        self.notifier.send(Notice::Overrun(Overrun {
            worker: self.index,
            task: running.map(|(task, _)| task),
            job: running.map(|(_, job)| job),
            signals,
        }));
    }
}
