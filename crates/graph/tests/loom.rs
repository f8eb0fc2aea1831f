//! Loom models of the cycle's hand-off: the real activation protocol
//! (`tessera_graph::activation`, public under `cfg(loom)` only) over loom's
//! atomics and a model futex whose waits never time out, so that a lost
//! wake-up shows as a deadlock. What the protocol hands over (node outputs,
//! node timings, the cycle's data) is a loom cell here, so loom reports any
//! access the orderings leave unordered. Run with:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p tessera-graph --test loom --release
//! ```
//!
//! * a node's predecessors' outputs happen before it runs, and exactly one
//!   predecessor makes it ready;
//! * a ready node is claimed exactly once, and a claim read in one cycle
//!   cannot take a slot of the next, nor a slot the driver reset;
//! * a worker never sleeps through a push;
//! * the driver sees the cycle's end only after every runner's last access;
//! * end to end, a driver and a worker run a chain of two nodes for two
//!   cycles: each cycle's data reaches every runner, no runner's access
//!   overlaps the next cycle's reset, and stopping wakes the worker.
//!
//! The graph switch's queues are rtrb's; what the engine adds to them — a
//! graph retires only after the end of the cycle that last used it — is
//! `the_cycle_ends_after_every_runners_last_access`.

#![cfg(loom)]

// std's Arc, not loom's: loom's panics when dropped while a deadlock
// unwinds, which aborts the whole run instead of failing the model.
use std::sync::Arc;
use std::time::Duration;

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use loom::thread;
use tessera_graph::activation::{arm, signal, CycleEnd, ReadyQueue, WorkerWake};

/// Runs `f` under loom, exploring every interleaving, or those with at most
/// `preemptions` preemptions (unless LOOM_MAX_PREEMPTIONS says otherwise).
fn model_bounded(preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = preemptions;
    }
    builder.check(f);
}

/// Every interleaving: seconds for the two- and three-thread models below.
fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(None, f);
}

/// The end-to-end model's bound: 2 takes seconds, 3 about a minute; the
/// small models cover each step exhaustively.
const CHAIN_PREEMPTIONS: usize = 2;

/// Ignored by the model futex, which sleeps until woken.
const FOREVER: Duration = Duration::from_secs(3600);

/// A value the protocol hands from thread to thread, as the engine's
/// `CycleCell` holds node outputs, timings and the cycle's data.
struct Handed(UnsafeCell<u32>);

// SAFETY: as the engine's `CycleCell`: shared between threads, accessed
// under the protocol's happens-before edges, which is what loom checks.
unsafe impl Sync for Handed {}

impl Handed {
    fn new(value: u32) -> Handed {
        Handed(UnsafeCell::new(value))
    }

    fn write(&self, value: u32) {
        // SAFETY: loom checks that no other access is concurrent with this
        // one; the model fails if the protocol leaves them unordered.
        self.0.with_mut(|v| unsafe { *v = value });
    }

    fn read(&self) -> u32 {
        // SAFETY: as in `write`.
        self.0.with(|v| unsafe { *v })
    }
}

#[test]
fn predecessor_outputs_happen_before_the_node_runs() {
    model(|| {
        // Node 0 has two predecessors, each running on its own thread.
        let outputs = Arc::new([Handed::new(0), Handed::new(0)]);
        let counter = Arc::new(AtomicU32::new(0));
        let queue = Arc::new(ReadyQueue::new(1));
        arm(&counter, 2);
        queue.reset(1, 0);
        let predecessors: Vec<_> = (0..2)
            .map(|i| {
                let (outputs, counter, queue) = (
                    Arc::clone(&outputs),
                    Arc::clone(&counter),
                    Arc::clone(&queue),
                );
                thread::spawn(move || {
                    outputs[i].write(10 + i as u32);
                    if signal(&counter) {
                        queue.push(0);
                    }
                })
            })
            .collect();
        // A runner claims the node whenever it is ready, and reads both
        // outputs.
        let run = |node: u32| {
            assert_eq!(node, 0);
            assert_eq!((outputs[0].read(), outputs[1].read()), (10, 11));
        };
        let claimed_early = queue.claim();
        if let Some(node) = claimed_early {
            run(node);
        }
        for p in predecessors {
            p.join().unwrap();
        }
        if claimed_early.is_none() {
            run(queue.claim().expect("pushed once"));
        }
        assert_eq!(queue.claim(), None, "pushed once");
    });
}

#[test]
fn a_ready_node_is_claimed_exactly_once() {
    model(|| {
        let queue = Arc::new(ReadyQueue::new(2));
        queue.reset(1, 0);
        queue.push(5);
        let other = {
            let queue = Arc::clone(&queue);
            thread::spawn(move || queue.claim())
        };
        let mine = queue.claim();
        let theirs = other.join().unwrap();
        let claims: Vec<u32> = mine.into_iter().chain(theirs).collect();
        assert_eq!(claims, [5]);
    });
}

#[test]
fn a_claim_never_crosses_into_the_next_cycle() {
    model(|| {
        // Cycle 1 has node 7 ready in slot 0; a worker tries to claim it
        // while the driver claims it itself (cycle 1 ends), resets the queue
        // for cycle 2 and pushes node 3 into the same slot.
        let queue = Arc::new(ReadyQueue::new(1));
        queue.reset(1, 0);
        queue.push(7);
        let worker = {
            let queue = Arc::clone(&queue);
            thread::spawn(move || queue.claim())
        };
        let driver_claim = queue.claim();
        if driver_claim == Some(7) {
            queue.reset(2, 1);
            queue.push(3);
        }
        let worker_claim = worker.join().unwrap();
        match (driver_claim, worker_claim) {
            // The worker took node 7 in cycle 1, or node 3 in cycle 2 (or
            // nothing yet) — never node 7 twice: neither with cycle 1's head
            // nor from the slot as it was before the reset.
            (Some(7), None) | (Some(7), Some(3)) | (None, Some(7)) => {}
            other => panic!("claims {other:?}"),
        }
    });
}

#[test]
fn a_worker_never_sleeps_through_a_push() {
    model(|| {
        let queue = Arc::new(ReadyQueue::new(1));
        let wake = Arc::new(WorkerWake::default());
        queue.reset(1, 0);
        // Loom takes an atomic's initial value for a store that is not
        // SeqCst, which a SeqCst load may still read after a newer SeqCst
        // store (a false alarm the C11 model excludes; loom's README): a
        // sleep that finds work and a notify give both words a SeqCst store
        // first, as an engine's first cycle does.
        wake.sleep(|| true, FOREVER);
        wake.notify(0);
        let worker = {
            let (queue, wake) = (Arc::clone(&queue), Arc::clone(&wake));
            // The engine's worker loop, until it has run one node.
            thread::spawn(move || loop {
                if let Some(node) = queue.claim() {
                    return node;
                }
                wake.sleep(|| queue.has_ready(), FOREVER);
            })
        };
        // A runner makes a node ready and wakes a worker for it (it has
        // another to run itself).
        queue.push(4);
        wake.notify(1);
        assert_eq!(worker.join().unwrap(), 4, "lost wake-up");
    });
}

#[test]
fn the_cycle_ends_after_every_runners_last_access() {
    model(|| {
        // Two nodes run on two threads; each writes its timing, then counts
        // itself finished. The driver waits for the end, then reads the
        // timings and recycles them (as it retires a graph after its last
        // cycle), which must not race with a runner.
        let timings = Arc::new([Handed::new(0), Handed::new(0)]);
        let end = Arc::new(CycleEnd::default());
        end.reset(2);
        let runners: Vec<_> = (0..2)
            .map(|i| {
                let (timings, end) = (Arc::clone(&timings), Arc::clone(&end));
                thread::spawn(move || {
                    timings[i].write(20 + i as u32);
                    end.node_finished(1);
                })
            })
            .collect();
        while !end.wait(1, FOREVER) {}
        assert_eq!((timings[0].read(), timings[1].read()), (20, 21));
        timings[0].write(0);
        timings[1].write(0);
        for r in runners {
            r.join().unwrap();
        }
    });
}

/// The engine in miniature: a chain of two nodes (0 → 1), its protocol state
/// and the data the cycle hands over.
struct Chain {
    queue: ReadyQueue,
    wake: WorkerWake,
    end: CycleEnd,
    counters: [AtomicU32; 2],
    /// The cycle's number, written by the driver between cycles.
    cycle: Handed,
    outputs: [Handed; 2],
    /// The engine's `workers_stop`.
    stop: AtomicBool,
}

impl Chain {
    fn new() -> Chain {
        let chain = Chain {
            queue: ReadyQueue::new(2),
            wake: WorkerWake::default(),
            end: CycleEnd::default(),
            counters: [AtomicU32::new(0), AtomicU32::new(0)],
            cycle: Handed::new(0),
            outputs: [Handed::new(0), Handed::new(0)],
            stop: AtomicBool::new(false),
        };
        // See `a_worker_never_sleeps_through_a_push`.
        chain.wake.sleep(|| true, FOREVER);
        chain.wake.notify(0);
        chain
    }

    /// The driver, between cycles: the cycle's data, the counters, the end,
    /// the queue, then the source and the wake-up (none: the driver runs
    /// nodes itself and there is one source), as the engine's `run_cycle`.
    fn start_cycle(&self, tag: u32, used_slots: usize) {
        self.cycle.write(tag);
        arm(&self.counters[0], 0);
        arm(&self.counters[1], 1);
        self.end.reset(2);
        self.queue.reset(tag, used_slots);
        self.queue.push(0);
        self.wake.notify(0);
    }

    /// Runs a claimed node: reads the cycle and its predecessor's output,
    /// writes its own, activates its successor, counts itself finished.
    fn run(&self, node: u32) {
        let tag = self.cycle.read();
        if node == 1 {
            assert_eq!(self.outputs[0].read(), tag * 10, "predecessor's output");
        }
        self.outputs[node as usize].write(tag * 10 + node);
        if node == 0 && signal(&self.counters[1]) {
            self.queue.push(1);
        }
        self.end.node_finished(tag);
    }

    /// The engine's `worker_main`.
    fn work(&self) {
        while !self.stop.load(Ordering::Acquire) {
            if let Some(node) = self.queue.claim() {
                self.run(node);
                continue;
            }
            self.wake.sleep(
                || self.queue.has_ready() || self.stop.load(Ordering::Acquire),
                FOREVER,
            );
        }
    }
}

#[test]
fn consecutive_cycles_hand_their_data_over_whole() {
    model_bounded(Some(CHAIN_PREEMPTIONS), || {
        let chain = Arc::new(Chain::new());
        let worker = {
            let chain = Arc::clone(&chain);
            thread::spawn(move || chain.work())
        };
        let mut used_slots = 0;
        for tag in 1..=2 {
            chain.start_cycle(tag, used_slots);
            used_slots = 2;
            // The driver runs nodes too, until the cycle ends.
            loop {
                while let Some(node) = chain.queue.claim() {
                    chain.run(node);
                }
                if chain.end.wait(tag, FOREVER) {
                    break;
                }
            }
            assert_eq!(chain.outputs[1].read(), tag * 10 + 1);
        }
        // The engine's `shut_down`.
        chain.stop.store(true, Ordering::Release);
        chain.wake.notify(u32::MAX);
        worker.join().unwrap();
    });
}
