//! Scheduling policy of one thread: SCHED_DEADLINE (with RESET_ON_FORK,
//! RECLAIM and DL_OVERRUN), SCHED_FIFO/RR and SCHED_OTHER/BATCH/IDLE, through
//! `sched_setattr`/`sched_getattr`, which glibc does not wrap.
//!
//! It owns the syscall and the meaning of its errors for the user. It must
//! never decide parameters: admission and placement are the policy layer's.

use crate::error::{Error, ErrorKind, Result, GRANT_CAP_SYS_NICE};
use crate::kernel;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A kernel thread id; 0 means the calling thread.
pub type Tid = i32;

/// SCHED_DEADLINE flags (uapi/linux/sched.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeadlineFlags(pub u64);

impl DeadlineFlags {
    pub const RESET_ON_FORK: DeadlineFlags = DeadlineFlags(0x01);
    pub const RECLAIM: DeadlineFlags = DeadlineFlags(0x02);
    pub const DL_OVERRUN: DeadlineFlags = DeadlineFlags(0x04);

    pub fn contains(self, other: DeadlineFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for DeadlineFlags {
    type Output = DeadlineFlags;
    fn bitor(self, rhs: Self) -> Self {
        DeadlineFlags(self.0 | rhs.0)
    }
}

/// A constant-bandwidth server: `runtime` every `period`, due by `deadline`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadlineParams {
    pub runtime: Duration,
    pub deadline: Duration,
    pub period: Duration,
    pub flags: DeadlineFlags,
}

/// A thread's scheduling policy as the kernel knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    Other { nice: i32 },
    Batch { nice: i32 },
    Idle,
    Fifo { priority: u32 },
    RoundRobin { priority: u32 },
    Deadline(DeadlineParams),
}

impl Policy {
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Other { .. } => "SCHED_OTHER",
            Policy::Batch { .. } => "SCHED_BATCH",
            Policy::Idle => "SCHED_IDLE",
            Policy::Fifo { .. } => "SCHED_FIFO",
            Policy::RoundRobin { .. } => "SCHED_RR",
            Policy::Deadline(_) => "SCHED_DEADLINE",
        }
    }

    /// Whether setting this policy needs CAP_SYS_NICE (or an rtprio limit).
    pub fn is_real_time(&self) -> bool {
        matches!(
            self,
            Policy::Fifo { .. } | Policy::RoundRobin { .. } | Policy::Deadline(_)
        )
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Policy::Other { nice } | Policy::Batch { nice } => {
                write!(f, "{} nice {}", self.name(), nice)
            }
            Policy::Idle => write!(f, "{}", self.name()),
            Policy::Fifo { priority } | Policy::RoundRobin { priority } => {
                write!(f, "{} priority {}", self.name(), priority)
            }
            Policy::Deadline(p) => write!(
                f,
                "SCHED_DEADLINE runtime {} µs deadline {} µs period {} µs",
                p.runtime.as_micros(),
                p.deadline.as_micros(),
                p.period.as_micros()
            ),
        }
    }
}

const SCHED_ATTR_SIZE: u32 = std::mem::size_of::<libc::sched_attr>() as u32;

fn to_attr(policy: &Policy) -> libc::sched_attr {
    let mut attr = libc::sched_attr {
        size: SCHED_ATTR_SIZE,
        sched_policy: 0,
        sched_flags: 0,
        sched_nice: 0,
        sched_priority: 0,
        sched_runtime: 0,
        sched_deadline: 0,
        sched_period: 0,
    };
    match *policy {
        Policy::Other { nice } => {
            attr.sched_policy = libc::SCHED_OTHER as u32;
            attr.sched_nice = nice;
        }
        Policy::Batch { nice } => {
            attr.sched_policy = libc::SCHED_BATCH as u32;
            attr.sched_nice = nice;
        }
        Policy::Idle => attr.sched_policy = libc::SCHED_IDLE as u32,
        Policy::Fifo { priority } => {
            attr.sched_policy = libc::SCHED_FIFO as u32;
            attr.sched_priority = priority;
        }
        Policy::RoundRobin { priority } => {
            attr.sched_policy = libc::SCHED_RR as u32;
            attr.sched_priority = priority;
        }
        Policy::Deadline(p) => {
            attr.sched_policy = libc::SCHED_DEADLINE as u32;
            attr.sched_flags = p.flags.0;
            attr.sched_runtime = p.runtime.as_nanos() as u64;
            attr.sched_deadline = p.deadline.as_nanos() as u64;
            attr.sched_period = p.period.as_nanos() as u64;
        }
    }
    attr
}

fn from_attr(attr: &libc::sched_attr) -> Policy {
    match attr.sched_policy as i32 {
        libc::SCHED_FIFO => Policy::Fifo {
            priority: attr.sched_priority,
        },
        libc::SCHED_RR => Policy::RoundRobin {
            priority: attr.sched_priority,
        },
        libc::SCHED_DEADLINE => Policy::Deadline(DeadlineParams {
            runtime: Duration::from_nanos(attr.sched_runtime),
            deadline: Duration::from_nanos(attr.sched_deadline),
            period: Duration::from_nanos(attr.sched_period),
            flags: DeadlineFlags(attr.sched_flags),
        }),
        libc::SCHED_BATCH => Policy::Batch {
            nice: attr.sched_nice,
        },
        libc::SCHED_IDLE => Policy::Idle,
        _ => Policy::Other {
            nice: attr.sched_nice,
        },
    }
}

/// The legal ranges of SCHED_DEADLINE parameters on this kernel, checked
/// before the syscall so that EINVAL never has to be guessed at.
pub fn validate_deadline(p: &DeadlineParams) -> Result<()> {
    let limits = kernel::deadline_period_range();
    let action = format!(
        "SCHED_DEADLINE runtime {} ns, deadline {} ns, period {} ns",
        p.runtime.as_nanos(),
        p.deadline.as_nanos(),
        p.period.as_nanos()
    );
    let invalid = |cause: String, fix: String| Error::new(ErrorKind::Invalid, &action, cause, fix);
    if p.runtime < kernel::DEADLINE_MIN_RUNTIME {
        return Err(invalid(
            format!(
                "runtime below the kernel's minimum of {} ns",
                kernel::DEADLINE_MIN_RUNTIME.as_nanos()
            ),
            "ask for a runtime of at least 1024 ns".into(),
        ));
    }
    if p.runtime > p.deadline || p.deadline > p.period {
        return Err(invalid(
            "the kernel needs runtime ≤ deadline ≤ period".into(),
            "lower the runtime or raise the deadline/period".into(),
        ));
    }
    if p.period < limits.0 || p.period > limits.1 {
        return Err(invalid(
            format!(
                "period outside the kernel's range {} µs – {} µs",
                limits.0.as_micros(),
                limits.1.as_micros()
            ),
            "choose a period inside that range (see /proc/sys/kernel/sched_deadline_period_{min,max}_us)".into(),
        ));
    }
    Ok(())
}

/// Sets the scheduling policy of thread `tid` (0: the calling thread).
pub fn set_policy(tid: Tid, policy: &Policy) -> Result<()> {
    set_attr(tid, policy, DeadlineFlags::default())
}

/// Sets thread `tid` to SCHED_OTHER if it is SCHED_DEADLINE; true when it
/// was. What a reservation left behind is undone with: a thread whose
/// reservation the kernel stopped replenishing (seen on 6.18: throttled,
/// its deadline long past, never run again) stays runnable and never runs
/// — not even to exit — until its policy changes.
pub fn demote_from_deadline(tid: Tid) -> Result<bool> {
    if !matches!(get_policy(tid)?, Policy::Deadline(_)) {
        return Ok(false);
    }
    set_policy(tid, &Policy::Other { nice: 0 })?;
    Ok(true)
}

/// Sets the scheduling policy of thread `tid` with SCHED_RESET_ON_FORK, so
/// that the thread's children start as SCHED_OTHER: what RTKit grants, and
/// what lets a program whose thread was made real-time from outside still
/// fork. (A SCHED_DEADLINE [`Policy`] carries its own flags.)
pub fn set_policy_reset_on_fork(tid: Tid, policy: &Policy) -> Result<()> {
    set_attr(tid, policy, DeadlineFlags::RESET_ON_FORK)
}

fn set_attr(tid: Tid, policy: &Policy, extra: DeadlineFlags) -> Result<()> {
    if let Policy::Deadline(p) = policy {
        validate_deadline(p)?;
    }
    let mut attr = to_attr(policy);
    attr.sched_flags |= extra.0;
    // SAFETY: `attr` is a valid, fully initialised sched_attr whose `size`
    // field matches its layout; the kernel only reads it.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &attr as *const _, 0u32) };
    if rc == 0 {
        return Ok(());
    }
    Err(explain_set_failure(tid, policy))
}

fn explain_set_failure(tid: Tid, policy: &Policy) -> Error {
    let action = format!("set thread {} to {}", describe_tid(tid), policy);
    let err = Error::last_os(action);
    match err.kind {
        ErrorKind::Permission if crate::caps::has_sys_nice() => err.with_cause(
            "permission denied although the process has CAP_SYS_NICE: a SCHED_DEADLINE \
             thread's CPU affinity must span its whole root domain (exclusive cpuset)",
        )
        .with_fix("reset the thread's affinity to all CPUs of its cpuset before setting SCHED_DEADLINE"),
        ErrorKind::Permission => err
            .with_cause(format!("{} needs root or CAP_SYS_NICE", policy.name()))
            .with_fix(GRANT_CAP_SYS_NICE),
        ErrorKind::Busy => {
            let p = match policy {
                Policy::Deadline(p) => *p,
                _ => return err,
            };
            let requested = p.runtime.as_secs_f64() / p.period.as_secs_f64();
            let cap = kernel::deadline_capacity();
            let (holders, held) = deadline_bandwidth_in_use(tid);
            err.with_cause(format!(
                "the kernel's admission control refused bandwidth {:.3} of a CPU; {} other \
                 SCHED_DEADLINE thread(s) hold {:.3}, and the limit is {:.3} per CPU of the root \
                 domain ({})",
                requested,
                holders,
                held,
                cap.per_cpu,
                cap.source
            ))
            .with_fix("release other reservations (`tessera status` shows them) or ask for less runtime per period")
        }
        ErrorKind::Invalid => err.with_fix(
            "SCHED_DEADLINE needs 1024 ns ≤ runtime ≤ deadline ≤ period and a period within \
             /proc/sys/kernel/sched_deadline_period_{min,max}_us; a SCHED_DEADLINE thread cannot \
             create threads unless RESET_ON_FORK is set",
        ),
        _ => err,
    }
}

/// Sets this process's RLIMIT_RTTIME (soft and hard) to `us` µs of CPU a
/// SCHED_FIFO/RR thread may run without blocking: what RTKit requires of a
/// process before it makes one of its threads real-time.
pub fn set_rttime_limit_us(us: u64) -> Result<()> {
    let limit = libc::rlimit {
        rlim_cur: us,
        rlim_max: us,
    };
    // SAFETY: setrlimit reads one valid rlimit.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_RTTIME, &limit) };
    if rc == 0 {
        return Ok(());
    }
    Err(Error::last_os(format!("set RLIMIT_RTTIME to {us} µs")))
}

/// SCHED_DEADLINE threads on the machine other than `except`, and the sum
/// of their bandwidths (runtime / period).
pub fn deadline_bandwidth_in_use(except: Tid) -> (usize, f64) {
    let mut holders = 0;
    let mut held = 0.0;
    for pid in crate::proc::all_pids().unwrap_or_default() {
        for tid in crate::proc::threads_of(pid).unwrap_or_default() {
            if tid == except {
                continue;
            }
            if let Ok(Policy::Deadline(p)) = get_policy(tid) {
                holders += 1;
                held += p.runtime.as_secs_f64() / p.period.as_secs_f64();
            }
        }
    }
    (holders, held)
}

fn describe_tid(tid: Tid) -> String {
    if tid == 0 {
        format!("{} (self)", crate::proc::current_tid())
    } else {
        tid.to_string()
    }
}

/// Reads the scheduling policy of thread `tid` (0: the calling thread).
pub fn get_policy(tid: Tid) -> Result<Policy> {
    let mut attr = to_attr(&Policy::Idle);
    // SAFETY: `attr` is a writable sched_attr of SCHED_ATTR_SIZE bytes; the
    // kernel writes at most that many.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            &mut attr as *mut _,
            SCHED_ATTR_SIZE,
            0u32,
        )
    };
    if rc != 0 {
        return Err(Error::last_os(format!(
            "read scheduling policy of thread {}",
            describe_tid(tid)
        )));
    }
    Ok(from_attr(&attr))
}

/// Gives up the processor; for a SCHED_DEADLINE thread, the rest of this
/// period's runtime (the end of its job).
pub fn yield_now() {
    // SAFETY: sched_yield takes no arguments and cannot fail on Linux.
    unsafe { libc::sched_yield() };
}
