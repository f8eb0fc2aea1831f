//! RTKit 0.13's rules, enforced before anything is granted: a priority no
//! higher than the ceiling, a nice level no lower than the floor,
//! RLIMIT_RTTIME set on the process and no larger than the limit, a bounded
//! number of requests per user in each burst window and of threads granted
//! per user ([`Limits`], the daemon's `[rtkit_limits]`); and the thread must
//! be a live thread of a process of the caller's own user.
//!
//! It owns the rules and the errors callers see; it must never change a
//! thread's scheduling.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};
use tessera_sys::proc::{self, Pid};
use tessera_sys::sched::Tid;

/// RTKit's limits, from the daemon's config (`[rtkit_limits]`).
pub use tessera_broker::config::RtkitLimits as Limits;

/// Why a request was not granted; each maps to RTKit's D-Bus error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtkitError {
    /// The arguments are out of range (org.freedesktop.DBus.Error.InvalidArgs).
    Invalid { problem: String, fix: String },
    /// A rule or admission refused (org.freedesktop.DBus.Error.AccessDenied).
    Denied { problem: String, fix: String },
    /// The thread or process is gone, or the kernel failed
    /// (org.freedesktop.DBus.Error.Failed).
    Failed { problem: String, fix: String },
}

impl RtkitError {
    pub fn invalid(problem: impl Into<String>, fix: impl Into<String>) -> RtkitError {
        RtkitError::Invalid {
            problem: problem.into(),
            fix: fix.into(),
        }
    }

    pub fn denied(problem: impl Into<String>, fix: impl Into<String>) -> RtkitError {
        RtkitError::Denied {
            problem: problem.into(),
            fix: fix.into(),
        }
    }

    pub fn failed(problem: impl Into<String>, fix: impl Into<String>) -> RtkitError {
        RtkitError::Failed {
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for RtkitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (RtkitError::Invalid { problem, fix }
        | RtkitError::Denied { problem, fix }
        | RtkitError::Failed { problem, fix }) = self;
        write!(f, "{problem}")?;
        if !fix.is_empty() {
            write!(f, " (fix: {fix})")?;
        }
        Ok(())
    }
}

impl std::error::Error for RtkitError {}

/// Who called, as the bus daemon knows the caller's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub pid: Pid,
}

/// A thread a request names, checked to be live and the caller's; its
/// start times tell it from a later thread or process that reuses the ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub pid: Pid,
    pub tid: Tid,
    pub uid: u32,
    pub process_start: u64,
    pub thread_start: u64,
}

impl Target {
    /// Thread `tid` of process `pid` (the caller's own process when RTKit's
    /// call names none), if it lives and belongs to the caller's user.
    pub fn check(caller: Caller, pid: Option<u64>, tid: u64) -> Result<Target, RtkitError> {
        let pid = match pid {
            Some(p) => id("process", p)?,
            None => caller.pid,
        };
        let tid = id("thread", tid)?;
        let gone = || {
            RtkitError::failed(
                format!("no thread {tid} in process {pid}"),
                "pass a thread id of the process (gettid()), while it runs",
            )
        };
        let thread_start = proc::thread_start_time(pid, tid).map_err(|_| gone())?;
        let process_start = proc::start_time(pid).map_err(|_| gone())?;
        let uid = proc::owner_uid(pid).map_err(|_| gone())?;
        if uid != caller.uid {
            return Err(RtkitError::denied(
                format!(
                    "process {pid} belongs to uid {uid}, not to the caller (uid {})",
                    caller.uid
                ),
                "ask for threads of your own processes",
            ));
        }
        Ok(Target {
            pid,
            tid,
            uid,
            process_start,
            thread_start,
        })
    }

    /// Whether the ids still name the thread and process that were checked
    /// (RTKit checks again after acting: a caller must not swap the process
    /// behind a pid while the request runs).
    pub fn still_same(&self) -> bool {
        proc::thread_start_time(self.pid, self.tid).ok() == Some(self.thread_start)
            && proc::start_time(self.pid).ok() == Some(self.process_start)
            && proc::owner_uid(self.pid).ok() == Some(self.uid)
    }
}

/// A D-Bus id (RTKit passes pids and tids as u64) as the kernel's.
fn id(what: &str, value: u64) -> Result<i32, RtkitError> {
    i32::try_from(value).ok().filter(|v| *v > 0).ok_or_else(|| {
        RtkitError::invalid(
            format!("{what} id {value} is not a Linux {what} id"),
            format!("pass the {what}'s id as the kernel gives it (1 to 2^31 − 1)"),
        )
    })
}

/// RTKit's priority rule: within SCHED_RR's range, and no higher than
/// the ceiling.
pub fn check_priority(limits: &Limits, priority: u32) -> Result<(), RtkitError> {
    if !(1..=99).contains(&priority) {
        return Err(RtkitError::invalid(
            format!("priority {priority} is outside SCHED_RR's 1–99"),
            format!(
                "ask for 1 to {} (the MaxRealtimePriority property)",
                limits.max_realtime_priority
            ),
        ));
    }
    if priority > limits.max_realtime_priority {
        return Err(RtkitError::denied(
            format!(
                "priority {priority} is above the ceiling of {}",
                limits.max_realtime_priority
            ),
            "read the MaxRealtimePriority property and ask for no more (PipeWire's module-rt does)",
        ));
    }
    Ok(())
}

/// RTKit's nice rule: a nice level, and no lower than the floor.
pub fn check_nice(limits: &Limits, nice: i32) -> Result<(), RtkitError> {
    if !(-20..=19).contains(&nice) {
        return Err(RtkitError::invalid(
            format!("nice level {nice} is outside −20 to 19"),
            format!(
                "ask for {} to 19 (the MinNiceLevel property)",
                limits.min_nice_level
            ),
        ));
    }
    if nice < limits.min_nice_level {
        return Err(RtkitError::denied(
            format!(
                "nice level {nice} is below the floor of {}",
                limits.min_nice_level
            ),
            "read the MinNiceLevel property and ask for no less",
        ));
    }
    Ok(())
}

/// RTKit's RLIMIT_RTTIME rule: the process's hard limit is set, and no
/// larger than the limit.
pub fn check_rttime(limits: &Limits, pid: Pid) -> Result<(), RtkitError> {
    let limit = proc::rttime_hard_limit_us(pid)
        .map_err(|e| RtkitError::failed(format!("read process {pid}'s limits: {e}"), ""))?;
    match limit {
        Some(us) if us <= limits.rttime_usec_max => Ok(()),
        other => Err(RtkitError::denied(
            format!(
                "process {pid}'s hard RLIMIT_RTTIME is {}, over the {} µs RTKit requires",
                other.map_or("unlimited".to_string(), |us| format!("{us} µs")),
                limits.rttime_usec_max
            ),
            "set RLIMIT_RTTIME (soft and hard) to at most the RTTimeUSecMax property before asking \
             (setrlimit, or `prlimit --rttime=200000:200000 --pid PID`)",
        )),
    }
}

/// Requests per user in the current burst window (RTKit's flood guard).
#[derive(Debug, Default)]
pub struct Bursts {
    users: BTreeMap<u32, (Instant, u32)>,
}

impl Bursts {
    /// Counts one request of `uid` at `now`; refuses it when the user has
    /// made `limits.actions_per_burst` already in this window.
    pub fn admit(&mut self, uid: u32, now: Instant, limits: &Limits) -> Result<(), RtkitError> {
        let (start, count) = self.users.entry(uid).or_insert((now, 0));
        let burst = Duration::from_secs(limits.burst_sec);
        if now.duration_since(*start) >= burst {
            *start = now;
            *count = 0;
        }
        if *count >= limits.actions_per_burst {
            let wait = burst.saturating_sub(now.duration_since(*start));
            return Err(RtkitError::denied(
                format!(
                    "uid {uid} made {} requests in {} s, RTKit's limit",
                    limits.actions_per_burst, limits.burst_sec
                ),
                format!("ask again in {} s", wait.as_secs().max(1)),
            ));
        }
        *count += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_and_nice_levels_follow_rtkit() {
        let l = Limits::default();
        assert!(check_priority(&l, 20).is_ok());
        assert!(check_priority(&l, 1).is_ok());
        assert!(matches!(
            check_priority(&l, 21),
            Err(RtkitError::Denied { .. })
        ));
        assert!(matches!(
            check_priority(&l, 0),
            Err(RtkitError::Invalid { .. })
        ));
        assert!(matches!(
            check_priority(&l, 100),
            Err(RtkitError::Invalid { .. })
        ));
        assert!(check_nice(&l, -15).is_ok());
        assert!(check_nice(&l, 19).is_ok());
        assert!(matches!(
            check_nice(&l, -16),
            Err(RtkitError::Denied { .. })
        ));
        assert!(matches!(
            check_nice(&l, 20),
            Err(RtkitError::Invalid { .. })
        ));
    }

    #[test]
    fn a_burst_admits_its_quota_then_refuses_until_the_window_passes() {
        let l = Limits::default();
        let mut b = Bursts::default();
        let t0 = Instant::now();
        for _ in 0..l.actions_per_burst {
            b.admit(1000, t0, &l).unwrap();
        }
        let refused = b.admit(1000, t0 + Duration::from_secs(5), &l).unwrap_err();
        assert!(
            refused.to_string().contains("ask again in 15 s"),
            "{refused}"
        );
        assert!(b.admit(1001, t0, &l).is_ok(), "users are counted apart");
        let window = Duration::from_secs(l.burst_sec);
        assert!(b.admit(1000, t0 + window, &l).is_ok(), "a new window");
    }

    #[test]
    fn ids_out_of_the_kernels_range_are_invalid() {
        let caller = Caller { uid: 0, pid: 1 };
        for bad in [0, u64::MAX, 1 << 40] {
            assert!(matches!(
                Target::check(caller, None, bad),
                Err(RtkitError::Invalid { .. })
            ));
            assert!(matches!(
                Target::check(caller, Some(bad), 1),
                Err(RtkitError::Invalid { .. })
            ));
        }
    }

    #[test]
    fn a_thread_of_another_process_is_not_found() {
        let me = proc::current_pid();
        let caller = Caller {
            uid: tessera_sys::caps::euid(),
            pid: me,
        };
        // PID 1's main thread is not a thread of this process.
        assert!(matches!(
            Target::check(caller, None, 1),
            Err(RtkitError::Failed { .. })
        ));
        let mine = Target::check(caller, None, proc::current_tid() as u64).unwrap();
        assert!(mine.still_same());
    }
}
