//! The atomics and the futex the cycle's hand-off is made of (`activation`,
//! and the activation counters of the compiled graph): std's atomics and
//! tessera-sys's futex in every build, loom's atomics and a model futex
//! under `cfg(loom)`, so that `tests/loom.rs` drives the real protocol.
//!
//! This module only chooses the implementation; it owns no protocol and
//! must never add a cost to the build: outside `cfg(loom)` it is plain
//! re-exports.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use tessera_sys::futex;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The kernel's futex, as loom can explore it: `wait` compares the word and
/// queues the caller atomically with respect to `wake` (the kernel's
/// hash-bucket lock, here a mutex), and a sleeper returns only when woken —
/// timeouts are ignored, so a lost wake-up shows as a deadlock — never
/// spuriously.
#[cfg(loom)]
pub(crate) mod futex {
    use std::time::Duration;

    use loom::sync::atomic::{AtomicU32, Ordering};
    use loom::sync::{Condvar, Mutex};

    /// Threads sleeping on a word, by the word's address.
    #[derive(Default)]
    struct Queue {
        sleeping: Vec<(usize, u64)>,
        next_ticket: u64,
    }

    loom::lazy_static! {
        static ref QUEUE: (Mutex<Queue>, Condvar) = Default::default();
    }

    fn address(word: &AtomicU32) -> usize {
        word as *const AtomicU32 as usize
    }

    /// Sleeps until woken by [`wake`] on `word`, unless `word` no longer
    /// holds `expected`.
    pub(crate) fn wait(word: &AtomicU32, expected: u32, _timeout: Option<Duration>) {
        let (queue, woken) = &*QUEUE;
        let mut sleepers = queue.lock().unwrap();
        // Relaxed: only the lock orders the compare against a wake, so the
        // model promises no more ordering than a futex does.
        if word.load(Ordering::Relaxed) != expected {
            return;
        }
        let ticket = sleepers.next_ticket;
        sleepers.next_ticket += 1;
        sleepers.sleeping.push((address(word), ticket));
        while sleepers.sleeping.iter().any(|&(_, t)| t == ticket) {
            sleepers = woken.wait(sleepers).unwrap();
        }
    }

    /// Wakes at most `count` threads sleeping on `word`; returns how many.
    pub(crate) fn wake(word: &AtomicU32, count: u32) -> usize {
        let (queue, woken) = &*QUEUE;
        let mut sleepers = queue.lock().unwrap();
        let mut left = count as usize;
        sleepers.sleeping.retain(|&(at, _)| {
            let wake = left > 0 && at == address(word);
            left -= wake as usize;
            !wake
        });
        let count = count as usize - left;
        if count > 0 {
            woken.notify_all();
        }
        count
    }
}
