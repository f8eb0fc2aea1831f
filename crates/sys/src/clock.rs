//! Clocks: `CLOCK_MONOTONIC` for cycle timestamps and absolute-time periodic
//! wake-ups, `CLOCK_REALTIME` where times meet the kernel's packet stamps,
//! `CLOCK_TAI` and the kernel's TAI−UTC offset for media clocks counted
//! from the PTP epoch, `CLOCK_THREAD_CPUTIME_ID` for the CPU time a thread
//! really consumed (a descheduled thread's clock does not advance).
//!
//! Times are plain `u64` nanoseconds so that profilers can store and subtract
//! them without conversions. Every function here is allocation-free and safe
//! to call on a real-time thread, but [`step_realtime`]. This module must
//! never hold policy (what to measure, when to sleep): callers decide.

use std::time::Duration;

use crate::error::{Error, Result};

fn read_clock(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec owned by this frame and the
    // clock ids used by the callers are valid on every Linux kernel.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    // Only EFAULT/EINVAL are possible, and neither can happen with the
    // arguments above.
    debug_assert_eq!(rc, 0, "clock_gettime({clock}) failed");
    timespec_to_ns(&ts)
}

fn timespec_to_ns(ts: &libc::timespec) -> u64 {
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn ns_to_timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// Now on `CLOCK_MONOTONIC`, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    read_clock(libc::CLOCK_MONOTONIC)
}

/// Now on `CLOCK_REALTIME`, in nanoseconds: the clock of the kernel's
/// packet stamps, to place them on the monotonic clock or beside them.
pub fn realtime_ns() -> u64 {
    read_clock(libc::CLOCK_REALTIME)
}

/// Now on `CLOCK_TAI`, in nanoseconds: `CLOCK_REALTIME` plus the kernel's
/// TAI−UTC offset ([`tai_offset_s`]), which is 0 — TAI then reads as UTC —
/// until something sets it (phc2sys `-a`/`-O`, ptp4l from a traceable
/// grandmaster, chrony's `leapsectz`, `adjtimex`).
pub fn tai_ns() -> u64 {
    read_clock(libc::CLOCK_TAI)
}

/// The kernel's TAI−UTC offset in seconds (`adjtimex` with no modes set
/// reads it, unprivileged): what `CLOCK_TAI` adds to `CLOCK_REALTIME`. 0
/// when unset. A system call, not a vDSO read: read it off the real-time
/// path and keep it.
pub fn tai_offset_s() -> i32 {
    // SAFETY: an all-zero timex is a valid argument (modes 0: read only).
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: `tx` is a valid, writable timex owned by this frame; with
    // modes 0 the kernel only fills it in.
    let rc = unsafe { libc::adjtimex(&mut tx) };
    // Only EFAULT is possible with modes 0, and `tx` is valid.
    debug_assert!(rc >= 0, "adjtimex failed");
    tx.tai
}

/// A read of the two clocks across a gap longer than this (three vDSO reads
/// take some 60 ns) was interrupted in between: read again, at most
/// [`OFFSET_TRIES`] times, keeping the read of the smallest gap.
const OFFSET_GAP_NS: u64 = 200;
const OFFSET_TRIES: usize = 8;

/// `CLOCK_REALTIME − CLOCK_MONOTONIC` now, in nanoseconds: the wall clock
/// read between two monotonic reads and set against their middle, so that a
/// stall between two reads (a preempted vCPU) cannot move the offset by the
/// stall: the error is at most half the smallest gap of a few tries.
pub fn realtime_offset_ns() -> i128 {
    let mut best = (u64::MAX, 0i128);
    for _ in 0..OFFSET_TRIES {
        let before = monotonic_ns();
        let real = realtime_ns();
        let after = monotonic_ns();
        let gap = after - before;
        if gap < best.0 {
            best = (gap, real as i128 - (before + gap / 2) as i128);
        }
        if gap <= OFFSET_GAP_NS {
            break;
        }
    }
    best.1
}

/// CPU time consumed so far by the calling thread (`CLOCK_THREAD_CPUTIME_ID`),
/// in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    read_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Sleeps until `CLOCK_MONOTONIC` reaches `deadline_ns` (`clock_nanosleep`
/// with `TIMER_ABSTIME`): absolute wake-ups do not drift when a period's
/// work takes a variable time. Returns at once if the deadline has passed.
/// Signals do not shorten the sleep.
pub fn sleep_until_monotonic_ns(deadline_ns: u64) {
    sleep_until(libc::CLOCK_MONOTONIC, deadline_ns);
}

/// Sleeps until `CLOCK_REALTIME` reaches `deadline_ns`, as
/// [`sleep_until_monotonic_ns`] does on the monotonic clock: for timers
/// whose expiry is compared with the kernel's packet stamps (wall clock).
pub fn sleep_until_realtime_ns(deadline_ns: u64) {
    sleep_until(libc::CLOCK_REALTIME, deadline_ns);
}

fn sleep_until(clock: libc::clockid_t, deadline_ns: u64) {
    let deadline = ns_to_timespec(deadline_ns);
    loop {
        // SAFETY: `deadline` is a valid timespec; with TIMER_ABSTIME the
        // remaining-time pointer is unused and may be null.
        let rc = unsafe {
            libc::clock_nanosleep(clock, libc::TIMER_ABSTIME, &deadline, std::ptr::null_mut())
        };
        // clock_nanosleep returns the error number instead of setting errno.
        if rc != libc::EINTR {
            debug_assert_eq!(rc, 0, "clock_nanosleep failed");
            return;
        }
    }
}

/// Steps `CLOCK_REALTIME` by `delta_ns` (`adjtimex` with `ADJ_SETOFFSET`,
/// which needs CAP_SYS_TIME). tessera never moves the machine's clock: its
/// tests step it a microsecond forward and straight back, to show that
/// what follows the clock's steps (`event::ClockSteps`) sees them.
pub fn step_realtime(delta_ns: i64) -> Result<()> {
    // SAFETY: timex is plain data; all-zero is a valid value.
    let mut step: libc::timex = unsafe { std::mem::zeroed() };
    step.modes = libc::ADJ_SETOFFSET | libc::ADJ_NANO;
    // With ADJ_NANO the microseconds field holds nanoseconds, 0..1e9.
    step.time = libc::timeval {
        tv_sec: delta_ns.div_euclid(1_000_000_000) as libc::time_t,
        tv_usec: delta_ns.rem_euclid(1_000_000_000) as libc::suseconds_t,
    };
    // SAFETY: `step` is a valid timex on this frame.
    match unsafe { libc::adjtimex(&mut step) } {
        -1 => Err(
            Error::last_os(format!("stepping CLOCK_REALTIME by {delta_ns} ns"))
                .with_fix("run as root (CAP_SYS_TIME)"),
        ),
        _ => Ok(()),
    }
}

/// Sleeps for `duration` measured on `CLOCK_MONOTONIC`.
pub fn sleep_monotonic(duration: Duration) {
    sleep_until_monotonic_ns(monotonic_ns().saturating_add(duration.as_nanos() as u64));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_of_the_wall_clock_is_read_alike_twice() {
        // The clocks only drift apart by the wall clock's slewing (ppm) or
        // a step: two reads a moment apart agree, whatever stalls the
        // thread between or inside them.
        let (a, b) = (realtime_offset_ns(), realtime_offset_ns());
        assert!((a - b).abs() < 1_000_000, "{a} then {b}");
        let now = realtime_ns() as i128 - monotonic_ns() as i128;
        assert!((now - a).abs() < 50_000_000, "{now} against {a}");
    }

    #[test]
    fn tai_is_the_wall_clock_plus_the_kernels_tai_offset() {
        let offset = tai_ns() as i128 - realtime_ns() as i128;
        let expected = tai_offset_s() as i128 * 1_000_000_000;
        assert!(
            (offset - expected).abs() < 50_000_000,
            "{offset} against {expected}"
        );
    }

    #[test]
    fn the_kernels_tai_offset_is_unset_or_plausible() {
        // 0 until set; 37 s since 2017 (leap seconds only ever added).
        assert!(matches!(tai_offset_s(), 0 | 37..=60), "{}", tai_offset_s());
    }

    #[test]
    fn monotonic_clock_does_not_go_back() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
    }

    #[test]
    fn absolute_sleep_reaches_its_deadline() {
        let deadline = monotonic_ns() + 1_000_000;
        sleep_until_monotonic_ns(deadline);
        assert!(monotonic_ns() >= deadline);
    }

    #[test]
    fn absolute_sleep_on_the_wall_clock_reaches_its_deadline() {
        let deadline = realtime_ns() + 1_000_000;
        sleep_until_realtime_ns(deadline);
        assert!(realtime_ns() >= deadline);
    }

    #[test]
    fn thread_cpu_clock_advances_when_working_not_when_sleeping() {
        let start = thread_cpu_ns();
        let mut x = 0u64;
        while thread_cpu_ns() - start < 2_000_000 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(thread_cpu_ns() - start >= 2_000_000);

        let before_sleep = thread_cpu_ns();
        sleep_monotonic(Duration::from_millis(20));
        // Sleeping costs a few microseconds of CPU, never the 20 ms slept.
        assert!(thread_cpu_ns() - before_sleep < 20_000_000);
    }

    #[test]
    fn timespec_round_trip() {
        let ns = 12_345_678_901;
        assert_eq!(timespec_to_ns(&ns_to_timespec(ns)), ns);
    }
}
