//! CPU affinity of one thread (sched_setaffinity/sched_getaffinity).
//!
//! It owns the cpu_set_t conversion; it must never choose CPUs.

use crate::error::{Error, ErrorKind, Result};
use crate::sched::Tid;

fn cpu_set_of(cpus: &[usize]) -> Result<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let capacity = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for &cpu in cpus {
        if cpu >= capacity {
            return Err(Error::new(
                ErrorKind::Invalid,
                "build CPU set",
                format!("CPU {cpu} is beyond the {capacity} CPUs a cpu_set_t holds"),
                "name CPUs that exist (see /sys/devices/system/cpu/online)",
            ));
        }
        // SAFETY: `cpu` was checked to be within the set's capacity.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    Ok(set)
}

/// Restricts thread `tid` (0: self) to `cpus`.
pub fn set_affinity(tid: Tid, cpus: &[usize]) -> Result<()> {
    let set = cpu_set_of(cpus)?;
    // SAFETY: `set` is a valid cpu_set_t and the size passed is its size.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set) };
    if rc == 0 {
        return Ok(());
    }
    let err = Error::last_os(format!("set CPU affinity of thread {tid} to {cpus:?}"));
    Err(match err.kind {
        ErrorKind::Invalid => {
            err.with_cause("none of those CPUs is online and allowed by the thread's cpuset")
        }
        ErrorKind::Busy | ErrorKind::Permission => err
            .with_cause(
                "the thread is SCHED_DEADLINE, whose affinity must span its root domain, \
             or belongs to another user",
            )
            .with_fix("place deadline threads with an exclusive cpuset instead of affinity"),
        _ => err,
    })
}

/// The CPUs thread `tid` (0: self) may run on.
pub fn get_affinity(tid: Tid) -> Result<Vec<usize>> {
    let mut set = cpu_set_of(&[])?;
    // SAFETY: `set` is writable and its size is passed.
    let rc = unsafe { libc::sched_getaffinity(tid, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Err(Error::last_os(format!("read CPU affinity of thread {tid}")));
    }
    let capacity = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads a bit of a valid set for an index in range.
    Ok((0..capacity)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// The CPU the calling thread is running on now.
pub fn current_cpu() -> usize {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    cpu.max(0) as usize
}
