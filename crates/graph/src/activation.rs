//! The activation protocol of a cycle: per-node activation counters, the
//! ready queue the engine's threads take nodes from, worker sleep/wake on a
//! futex, and the end-of-cycle signal to the driver.
//!
//! This module owns the lock-free state shared by the threads of one engine.
//! It must never allocate, lock or block except in the futex waits below.
//!
//! # Memory ordering
//!
//! * A node's outputs are published to its successors by the activation
//!   counter: each finishing predecessor decrements it with `AcqRel`, so the
//!   predecessor that brings it to zero has acquired the writes of all others
//!   (the decrements form one release sequence). It then pushes the node with
//!   a `Release` store into a ready-queue slot, and the thread that claims the
//!   node loads that slot with `Acquire`: every predecessor's output
//!   happens-before the node runs.
//! * The ready queue's head packs the cycle's 32-bit tag with the index of
//!   the next slot to claim, so a thread that read the head in cycle n cannot
//!   claim a slot of cycle n+1 with a stale value (the compare-exchange fails
//!   on the tag). The driver resets slots, counters ([`arm`]) and the cycle's
//!   data, then stores the new head with `Release`: a claim (`Acquire`) sees
//!   the reset, and never a slot as the previous cycle left it.
//! * Worker sleep is a Dekker pair on `SeqCst` operations: a sleeper
//!   increments `sleepers`, reads `seq`, re-checks the queue, then waits on
//!   `seq`; a producer pushes, increments `seq`, then reads `sleepers` and
//!   wakes. In the single total order of `SeqCst` operations, either the
//!   producer's increment comes before the sleeper's read of `seq` — the
//!   sleeper then reads the new `seq`, which acquires the push, and its
//!   re-check finds the node — or the sleeper's increment of `sleepers`
//!   comes before the producer's read of it — the producer then wakes it,
//!   and `futex_wait` either fails on the changed `seq` or is woken (the
//!   kernel compares and queues atomically with respect to a wake). No
//!   wake-up is lost; a stop flag stored before the notify is seen the same
//!   way.
//! * The cycle ends when `remaining` (nodes not finished) reaches zero; every
//!   runner decrements it with `AcqRel` after its last access to the cycle's
//!   data, and the last one stores the cycle's tag into `done` with `Release`.
//!   The driver loads `done` with `Acquire`, so the whole cycle happens-before
//!   anything the driver does next (recycling buffers, retiring the graph).
//!
//! `tests/loom.rs` drives these types over loom's atomics and a model futex
//! (`sync`, under `cfg(loom)`, where this module is public for it). Each
//! ordering named above is needed: weakened one at a time (`AcqRel` to
//! `Release` or `Acquire`, `Release` and `Acquire` to `Relaxed`, `SeqCst`
//! to `Release`, `Acquire` or `Relaxed`), each makes a model fail.

use std::time::Duration;

use crate::sync::{futex, AtomicU32, AtomicU64, Ordering};

/// Arms a node's activation counter for the coming cycle: the node waits
/// for `predecessors` signals. Driver only, between cycles; published by the
/// ready queue's [`ReadyQueue::reset`].
pub fn arm(counter: &AtomicU32, predecessors: u32) {
    counter.store(predecessors, Ordering::Relaxed);
}

/// Brings a node's activation counter one step closer to zero; `true` for the
/// caller that made it zero and must now make the node ready.
pub fn signal(counter: &AtomicU32) -> bool {
    counter.fetch_sub(1, Ordering::AcqRel) == 1
}

/// The nodes made ready in the current cycle, in the order they became
/// ready. Each node enters at most once per cycle, so a slot per node is
/// enough and the queue never wraps within a cycle.
pub struct ReadyQueue {
    /// Cycle tag (high 32 bits) and index of the next slot to claim.
    head: AtomicU64,
    /// Next slot to fill.
    tail: AtomicU32,
    /// Node position + 1; 0 means "not filled yet".
    slots: Box<[AtomicU32]>,
}

impl ReadyQueue {
    pub fn new(capacity: usize) -> Self {
        ReadyQueue {
            head: AtomicU64::new(0),
            tail: AtomicU32::new(0),
            slots: (0..capacity).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// Empties the queue for the cycle tagged `tag`. Driver only, between
    /// cycles; `used` is the number of slots the last cycle filled.
    pub fn reset(&self, tag: u32, used: usize) {
        for slot in &self.slots[..used] {
            slot.store(0, Ordering::Relaxed);
        }
        self.tail.store(0, Ordering::Relaxed);
        self.head.store((tag as u64) << 32, Ordering::Release);
    }

    /// Makes the node at `position` ready.
    pub fn push(&self, position: u32) {
        let slot = self.tail.fetch_add(1, Ordering::Relaxed) as usize;
        self.slots[slot].store(position + 1, Ordering::Release);
    }

    /// Claims the next ready node, if one is ready.
    pub fn claim(&self) -> Option<u32> {
        loop {
            let head = self.head.load(Ordering::Acquire);
            let filled = self.filled(head)?;
            if self
                .head
                .compare_exchange_weak(head, head + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Some(filled - 1);
            }
        }
    }

    pub fn has_ready(&self) -> bool {
        self.filled(self.head.load(Ordering::Acquire)).is_some()
    }

    fn filled(&self, head: u64) -> Option<u32> {
        let slot = self.slots.get(head as u32 as usize)?;
        match slot.load(Ordering::Acquire) {
            0 => None,
            filled => Some(filled),
        }
    }
}

/// Sleep and wake-up of idle worker threads.
#[derive(Default)]
pub struct WorkerWake {
    seq: AtomicU32,
    sleepers: AtomicU32,
}

impl WorkerWake {
    /// Wakes up to `count` sleeping workers after work was pushed (or the
    /// engine is shutting down). No system call when nobody sleeps.
    pub fn notify(&self, count: u32) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        if count > 0 && self.sleepers.load(Ordering::SeqCst) > 0 {
            futex::wake(&self.seq, count);
        }
    }

    /// Sleeps until notified or `timeout`, unless `has_work` says there is
    /// something to do after announcing the sleep.
    pub fn sleep(&self, has_work: impl Fn() -> bool, timeout: Duration) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let seq = self.seq.load(Ordering::SeqCst);
        if !has_work() {
            futex::wait(&self.seq, seq, Some(timeout));
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Nodes still to finish in the cycle, and the driver's end-of-cycle wait.
#[derive(Default)]
pub struct CycleEnd {
    remaining: AtomicU32,
    done: AtomicU32,
}

impl CycleEnd {
    /// Driver only, between cycles.
    pub fn reset(&self, nodes: u32) {
        self.remaining.store(nodes, Ordering::Relaxed);
    }

    /// Records a finished node; the runner of the last one ends the cycle
    /// tagged `tag` and wakes the driver.
    pub fn node_finished(&self, tag: u32) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.done.store(tag, Ordering::Release);
            futex::wake(&self.done, 1);
        }
    }

    /// Driver: waits until the cycle tagged `tag` has ended or `timeout`
    /// passed; `true` if it ended.
    pub fn wait(&self, tag: u32, timeout: Duration) -> bool {
        let done = self.done.load(Ordering::Acquire);
        if done == tag {
            return true;
        }
        futex::wait(&self.done, done, Some(timeout));
        self.done.load(Ordering::Acquire) == tag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ready_node_is_claimed_once_in_push_order() {
        let queue = ReadyQueue::new(4);
        queue.reset(1, 0);
        assert_eq!(queue.claim(), None);
        queue.push(2);
        queue.push(0);
        assert!(queue.has_ready());
        assert_eq!(queue.claim(), Some(2));
        assert_eq!(queue.claim(), Some(0));
        assert_eq!(queue.claim(), None);
        assert!(!queue.has_ready());
    }

    #[test]
    fn reset_forgets_the_previous_cycle() {
        let queue = ReadyQueue::new(2);
        queue.reset(1, 0);
        queue.push(1);
        queue.reset(2, 1);
        assert_eq!(queue.claim(), None);
        queue.push(0);
        assert_eq!(queue.claim(), Some(0));
    }

    #[test]
    fn the_last_predecessor_signals() {
        let counter = AtomicU32::new(2);
        assert!(!signal(&counter));
        assert!(signal(&counter));
    }

    #[test]
    fn cycle_end_wait_returns_after_the_last_node() {
        let end = CycleEnd::default();
        end.reset(2);
        assert!(!end.wait(7, Duration::from_millis(1)), "not ended yet");
        end.node_finished(7);
        end.node_finished(7);
        assert!(end.wait(7, Duration::from_millis(10)));
    }
}
