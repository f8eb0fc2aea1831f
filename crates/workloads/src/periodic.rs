//! A periodic task: released every `period` at absolute times, it burns
//! `work` of its own CPU time (measured on the thread CPU-time clock, like
//! the thesis's dnl, so that time spent preempted does not count as work),
//! then sleeps until the next release. The response time of each job —
//! release to completion — is recorded; a job finishing after its deadline
//! is a miss. Releases that pass while a job overruns are served by that
//! job (no backlog builds up, as an audio cycle is dropped rather than
//! queued): their response time ends when it ends.
//!
//! The loop neither allocates (samples go into a buffer sized up front) nor
//! prints; it must never do either.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns, thread_cpu_ns};

/// What a periodic task does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodicSpec {
    pub name: String,
    pub period: Duration,
    /// CPU time burned per job.
    pub work: Duration,
    /// Relative deadline of each job (usually the period).
    pub deadline: Duration,
    /// How long to run (jobs released during this span).
    pub duration: Duration,
    /// Delay before the first release (e.g. to start interference at 15 s).
    pub start_after: Duration,
}

impl PeriodicSpec {
    pub fn new(name: &str, period: Duration, work: Duration, duration: Duration) -> PeriodicSpec {
        PeriodicSpec {
            name: name.into(),
            period,
            work,
            deadline: period,
            duration,
            start_after: Duration::ZERO,
        }
    }

    fn max_jobs(&self) -> usize {
        (self.duration.as_nanos() / self.period.as_nanos().max(1)) as usize + 1
    }
}

/// What a periodic task measured.
#[derive(Debug, Clone, PartialEq)]
pub struct PeriodicStats {
    pub name: String,
    /// Response time of each completed job, in µs.
    pub response_us: Vec<f64>,
    /// Releases whose response exceeded the deadline (the misses).
    pub late: u64,
    /// Releases that passed while an earlier job overran, served by it.
    pub skipped: u64,
    pub deadline_us: f64,
    /// Release i was at the first release + i × period.
    pub period_us: f64,
    /// Setup failure (e.g. the cell refused the thread); no jobs ran.
    pub setup_error: Option<String>,
}

impl PeriodicStats {
    /// Releases that missed their deadline.
    pub fn misses(&self) -> u64 {
        self.late
    }

    /// Releases measured (one response time each).
    pub fn released(&self) -> u64 {
        self.response_us.len() as u64
    }

    /// Slack of each release: deadline − response time (negative: missed).
    pub fn slack_us(&self) -> Vec<f64> {
        self.response_us
            .iter()
            .map(|r| self.deadline_us - r)
            .collect()
    }
}

/// Burns `work` of this thread's CPU time.
pub fn burn_cpu(work: Duration) {
    let target = work.as_nanos() as u64;
    let start = thread_cpu_ns();
    while thread_cpu_ns().wrapping_sub(start) < target {
        std::hint::spin_loop();
    }
}

/// A periodic task whose thread is set up and waits for [`PeriodicTask::start`].
pub struct PeriodicTask {
    handle: JoinHandle<PeriodicStats>,
    stop: Arc<AtomicBool>,
    start: mpsc::Sender<u64>,
}

impl PeriodicTask {
    /// Creates the task's thread and runs `setup` on it (join a cell, set a
    /// priority); returns once the setup is done, so that setting up never
    /// eats into the measured run. If the setup fails, no job runs and the
    /// error is in the stats.
    pub fn spawn<F>(spec: PeriodicSpec, setup: F) -> std::io::Result<PeriodicTask>
    where
        F: FnOnce() -> Result<(), String> + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let (start, start_rx) = mpsc::channel::<u64>();
        let handle = std::thread::Builder::new()
            .name(spec.name.chars().take(15).collect())
            .spawn(move || {
                let mut stats = PeriodicStats {
                    name: spec.name.clone(),
                    response_us: Vec::with_capacity(spec.max_jobs()),
                    late: 0,
                    skipped: 0,
                    deadline_us: spec.deadline.as_secs_f64() * 1e6,
                    period_us: spec.period.as_secs_f64() * 1e6,
                    setup_error: None,
                };
                let setup_result = setup();
                let _ = ready_tx.send(());
                if let Err(e) = setup_result {
                    stats.setup_error = Some(e);
                    return stats;
                }
                if let Ok(t0_ns) = start_rx.recv() {
                    run_jobs(&spec, t0_ns, &flag, &mut stats);
                }
                stats
            })?;
        let _ = ready_rx.recv();
        Ok(PeriodicTask {
            handle,
            stop,
            start,
        })
    }

    /// Releases the first job at `t0_ns` (CLOCK_MONOTONIC) plus the spec's
    /// `start_after`: tasks given one origin release together.
    pub fn start(&self, t0_ns: u64) {
        let _ = self.start.send(t0_ns);
    }

    /// Asks the task to stop after its current job.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Waits for the task's thread; a task never started ends at once (its
    /// start channel closes here).
    pub fn join(self) -> PeriodicStats {
        let PeriodicTask { handle, start, .. } = self;
        drop(start);
        handle.join().unwrap_or_else(|_| PeriodicStats {
            name: "panicked".into(),
            response_us: Vec::new(),
            late: 0,
            skipped: 0,
            deadline_us: 0.0,
            period_us: 0.0,
            setup_error: Some("the task's thread panicked".into()),
        })
    }
}

fn run_jobs(spec: &PeriodicSpec, t0_ns: u64, stop: &AtomicBool, stats: &mut PeriodicStats) {
    let period = spec.period.as_nanos() as u64;
    let deadline = spec.deadline.as_nanos() as u64;
    let first = t0_ns + spec.start_after.as_nanos() as u64;
    let end = first + spec.duration.as_nanos() as u64;
    let mut release = first;
    while release < end && !stop.load(Ordering::Relaxed) {
        sleep_until_monotonic_ns(release);
        burn_cpu(spec.work);
        let done = monotonic_ns();
        record(stats, done - release.min(done), deadline);
        release += period;
        // Releases that passed while this job ran are served by it: their
        // response ends when it ends.
        while release < done && release < end {
            record(stats, done - release, deadline);
            stats.skipped += 1;
            release += period;
        }
    }
}

pub(crate) fn record(stats: &mut PeriodicStats, response_ns: u64, deadline_ns: u64) {
    if stats.response_us.len() < stats.response_us.capacity() {
        stats.response_us.push(response_ns as f64 / 1000.0);
    }
    if response_ns > deadline_ns {
        stats.late += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burns_its_own_cpu_time() {
        let before = thread_cpu_ns();
        burn_cpu(Duration::from_millis(5));
        assert!(thread_cpu_ns() - before >= 5_000_000);
    }

    #[test]
    fn runs_the_expected_number_of_jobs() {
        let spec = PeriodicSpec::new(
            "t",
            Duration::from_millis(5),
            Duration::from_micros(100),
            Duration::from_millis(100),
        );
        let task = PeriodicTask::spawn(spec, || Ok(())).unwrap();
        task.start(monotonic_ns());
        let stats = task.join();
        assert_eq!(stats.setup_error, None);
        assert_eq!(stats.released(), 20, "100 ms of 5 ms periods");
        // A release that passed while a job ran (the host stalled the vCPU
        // for a period) is served by that job, and its response may be
        // shorter than the work; every job that ran burned its work.
        let burned = stats.response_us.iter().filter(|&&r| r >= 100.0).count();
        assert!(
            burned as u64 >= stats.released() - stats.skipped,
            "each job burned its work: {stats:?}"
        );
    }

    #[test]
    fn a_task_never_started_joins_at_once() {
        let spec = PeriodicSpec::new(
            "t",
            Duration::from_millis(5),
            Duration::from_micros(100),
            Duration::from_millis(100),
        );
        let task = PeriodicTask::spawn(spec, || Ok(())).unwrap();
        task.stop();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(task.join().released()));
        let released = rx.recv_timeout(Duration::from_secs(10));
        assert_eq!(
            released,
            Ok(0),
            "join must not wait for a start that never comes"
        );
    }

    #[test]
    fn a_failed_setup_runs_no_job() {
        let spec = PeriodicSpec::new(
            "t",
            Duration::from_millis(5),
            Duration::from_micros(100),
            Duration::from_millis(50),
        );
        let stats = PeriodicTask::spawn(spec, || Err("refused".into()))
            .unwrap()
            .join();
        assert_eq!(stats.setup_error.as_deref(), Some("refused"));
        assert!(stats.response_us.is_empty());
    }

    #[test]
    fn overrunning_jobs_skip_releases() {
        let spec = PeriodicSpec::new(
            "t",
            Duration::from_millis(2),
            Duration::from_millis(5),
            Duration::from_millis(40),
        );
        let task = PeriodicTask::spawn(spec, || Ok(())).unwrap();
        task.start(monotonic_ns());
        let stats = task.join();
        assert!(stats.skipped > 0 && stats.late > 0);
        assert_eq!(
            stats.released(),
            20,
            "every release is accounted for: {stats:?}"
        );
    }
}
