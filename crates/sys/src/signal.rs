//! Overrun signals: with `SCHED_FLAG_DL_OVERRUN` the kernel sends SIGXCPU to
//! a SCHED_DEADLINE thread that ran past its runtime. This module installs a
//! SIGXCPU handler that only counts — in total, and per watched thread — so
//! that a runtime can notice overruns after the fact and report them off the
//! real-time path.
//!
//! The handler is async-signal-safe: it makes one `gettid` system call and
//! touches only lock-free atomics in static storage; it never allocates,
//! locks, or prints. It must never do more: reporting is the caller's.

use crate::error::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// Threads whose overruns can be counted separately at once.
pub const WATCH_SLOTS: usize = 64;

struct Slot {
    /// The watched thread's id; 0 when free.
    tid: AtomicI32,
    count: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)] // only used to initialise SLOTS
const FREE: Slot = Slot {
    tid: AtomicI32::new(0),
    count: AtomicU64::new(0),
};
static SLOTS: [Slot; WATCH_SLOTS] = [FREE; WATCH_SLOTS];
static TOTAL: AtomicU64 = AtomicU64::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigxcpu(_signal: libc::c_int) {
    TOTAL.fetch_add(1, Ordering::Relaxed);
    // SAFETY: gettid takes no arguments, cannot fail and leaves errno alone;
    // a raw system call is async-signal-safe.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
    if let Some(slot) = SLOTS.iter().find(|s| s.tid.load(Ordering::Relaxed) == tid) {
        slot.count.fetch_add(1, Ordering::Relaxed);
    }
}

/// Installs the counting SIGXCPU handler (once per process; later calls do
/// nothing). Install it before any thread gets `SCHED_FLAG_DL_OVERRUN`: the
/// default action of SIGXCPU kills the process. It replaces any other
/// SIGXCPU handler, including RLIMIT_CPU's default.
pub fn install_overrun_handler() -> Result<()> {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    // SA_RESTART (in `install`): the signal must not make the interrupted
    // thread's blocking calls fail (epoll_wait still returns EINTR, which
    // callers handle).
    install(libc::SIGXCPU, on_sigxcpu, "SIGXCPU, counting handler").map_err(|e| {
        INSTALLED.store(false, Ordering::Release);
        e.with_fix("SIGXCPU can always be caught; check that the process is not being traced")
    })
}

/// Installs `handler` for `signal` (restarting interrupted calls).
fn install(signal: libc::c_int, handler: extern "C" fn(libc::c_int), what: &str) -> Result<()> {
    // SAFETY: an all-zero sigaction is a valid starting value (empty flags,
    // no handler) that is filled in below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as *const () as usize;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid sigset_t owned by this frame.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `action` is fully initialised and its handler is an
    // async-signal-safe `extern "C" fn(c_int)`; the old-action pointer may be null.
    if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } == 0 {
        Ok(())
    } else {
        Err(Error::last_os(format!("sigaction({what})")))
    }
}

/// SIGXCPU signals received by the whole process since the handler was
/// installed.
pub fn total_overruns() -> u64 {
    TOTAL.load(Ordering::Relaxed)
}

/// Counts the overrun signals of one thread while it lives; releases its slot
/// when dropped.
#[derive(Debug)]
pub struct OverrunWatch {
    slot: usize,
}

impl OverrunWatch {
    /// Watches the calling thread.
    pub fn current_thread() -> Result<OverrunWatch> {
        let tid = crate::proc::current_tid();
        let slot = SLOTS
            .iter()
            .position(|s| {
                s.tid
                    .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Busy,
                    format!("watch thread {tid} for overrun signals"),
                    format!("all {WATCH_SLOTS} watch slots are taken"),
                    "run fewer watched threads in this process, or drop unused watches",
                )
            })?;
        SLOTS[slot].count.store(0, Ordering::Relaxed);
        Ok(OverrunWatch { slot })
    }

    /// Overrun signals this thread received since it was watched.
    pub fn count(&self) -> u64 {
        SLOTS[self.slot].count.load(Ordering::Relaxed)
    }
}

impl Drop for OverrunWatch {
    fn drop(&mut self) {
        SLOTS[self.slot].tid.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sigxcpu_is_counted_for_the_thread_that_received_it() {
        install_overrun_handler().unwrap();
        let before = total_overruns();
        let watch = OverrunWatch::current_thread().unwrap();
        // SAFETY: the handler is installed; raise sends SIGXCPU to this
        // thread, which runs the handler before returning.
        assert_eq!(unsafe { libc::raise(libc::SIGXCPU) }, 0);
        assert_eq!(watch.count(), 1);
        assert!(total_overruns() > before);
        let other = std::thread::spawn(|| {
            let watch = OverrunWatch::current_thread().unwrap();
            watch.count()
        })
        .join()
        .unwrap();
        assert_eq!(other, 0, "another thread's count is its own");
    }
}
