//! A periodic task: released every `period` at absolute times, it burns
//! `work` of its own CPU time (measured on the thread CPU-time clock, like
//! the thesis's dnl, so that time spent preempted does not count as work),
//! then sleeps until the next release. The response time of each job —
//! release to completion — is recorded; a job finishing after its deadline
//! is a miss. A job that overruns into later periods skips their releases
//! (each counted as a missed job), as a real audio cycle would be dropped.
//!
//! The loop neither allocates (samples go into a buffer sized up front) nor
//! prints; it must never do either.

use std::sync::atomic::{AtomicBool, Ordering};
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
    /// Jobs that finished after their deadline.
    pub late: u64,
    /// Releases skipped because an earlier job overran past them.
    pub skipped: u64,
    pub deadline_us: f64,
    /// Setup failure (e.g. the cell refused the thread); no jobs ran.
    pub setup_error: Option<String>,
}

impl PeriodicStats {
    /// Late jobs plus skipped releases.
    pub fn misses(&self) -> u64 {
        self.late + self.skipped
    }

    /// Jobs released (completed plus skipped).
    pub fn released(&self) -> u64 {
        self.response_us.len() as u64 + self.skipped
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

/// A running periodic task.
pub struct PeriodicTask {
    handle: JoinHandle<PeriodicStats>,
    stop: Arc<AtomicBool>,
}

impl PeriodicTask {
    /// Starts the task on a new thread. `setup` runs first on that thread
    /// (join a cell, set a priority); if it fails, no job runs and the error
    /// is reported in the stats. `t0_ns` is the common time origin
    /// (CLOCK_MONOTONIC) so that tasks started together release together.
    pub fn spawn<F>(spec: PeriodicSpec, t0_ns: u64, setup: F) -> std::io::Result<PeriodicTask>
    where
        F: FnOnce() -> Result<(), String> + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name(spec.name.chars().take(15).collect())
            .spawn(move || {
                let mut stats = PeriodicStats {
                    name: spec.name.clone(),
                    response_us: Vec::with_capacity(spec.max_jobs()),
                    late: 0,
                    skipped: 0,
                    deadline_us: spec.deadline.as_secs_f64() * 1e6,
                    setup_error: None,
                };
                if let Err(e) = setup() {
                    stats.setup_error = Some(e);
                    return stats;
                }
                run_jobs(&spec, t0_ns, &flag, &mut stats);
                stats
            })?;
        Ok(PeriodicTask { handle, stop })
    }

    /// Asks the task to stop after its current job.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub fn join(self) -> PeriodicStats {
        self.handle.join().unwrap_or_else(|_| PeriodicStats {
            name: "panicked".into(),
            response_us: Vec::new(),
            late: 0,
            skipped: 0,
            deadline_us: 0.0,
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
        let response = done.saturating_sub(release);
        if stats.response_us.len() < stats.response_us.capacity() {
            stats.response_us.push(response as f64 / 1000.0);
        }
        if response > deadline {
            stats.late += 1;
        }
        release += period;
        if done > release {
            // Releases that passed while this job ran are lost jobs.
            let lost = (done - release) / period + 1;
            stats.skipped += lost.min((end.saturating_sub(release)).div_ceil(period));
            release += lost * period;
        }
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
        let task = PeriodicTask::spawn(spec, monotonic_ns(), || Ok(())).unwrap();
        let stats = task.join();
        assert_eq!(stats.setup_error, None);
        assert_eq!(stats.released(), 20, "100 ms of 5 ms periods");
        assert!(
            stats.response_us.iter().all(|&r| r >= 100.0),
            "each job burned its work"
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
        let stats = PeriodicTask::spawn(spec, monotonic_ns(), || Err("refused".into()))
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
        let stats = PeriodicTask::spawn(spec, monotonic_ns(), || Ok(()))
            .unwrap()
            .join();
        assert!(stats.skipped > 0 && stats.late > 0);
        assert_eq!(
            stats.released(),
            20,
            "every release is accounted for: {stats:?}"
        );
    }
}
