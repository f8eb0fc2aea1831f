//! A wake-up word for serving threads: whoever queues work bumps it, and
//! makes the futex system call only when a thread sleeps on it. It owns the
//! word; it never decides what the work is.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tessera_sys::futex;

/// The futex word bumped when work is ready, and how many serving threads
/// sleep on it (so that a producer makes a system call only when one does).
#[derive(Default)]
pub struct Wake {
    sequence: AtomicU32,
    sleepers: AtomicU32,
}

impl Wake {
    pub fn notify_one(&self) {
        self.sequence.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            futex::wake(&self.sequence, 1);
        }
    }

    pub fn notify_all(&self) {
        self.sequence.fetch_add(1, Ordering::SeqCst);
        futex::wake_all(&self.sequence);
    }

    /// Sleeps unless the sequence moved past `seen`; at most `longest`.
    pub fn sleep(&self, seen: u32, longest: Duration) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        futex::wait(&self.sequence, seen, Some(longest));
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// The sequence to pass to [`Wake::sleep`]: read it before looking for
    /// work, so that work queued after the look ends the sleep.
    pub fn seen(&self) -> u32 {
        self.sequence.load(Ordering::SeqCst)
    }
}
