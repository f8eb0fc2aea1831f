//! The dispatch loop never touches the heap: releases, EDF dispatch, drops,
//! miss notices and overrun checks all run inside an RtGuard. Its own test
//! binary: the allocation guard's counters are process-wide.

mod common;

use common::*;
use std::time::Duration;

use tessera_rtguard::{assert_no_rt_allocations, CountingAllocator};
use tessera_runtime::{Event, Periodic, Runtime, RuntimeConfig};
use tessera_sys::event::EventFd;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn the_dispatch_loop_allocates_nothing() {
    let (notes, rx) = recorder();
    let mut b = Runtime::builder(RuntimeConfig::default());
    let tick = b
        .periodic(Periodic::new("tick", Duration::from_millis(1)), |_| {})
        .unwrap();
    // Every job of this task is dropped: its deadline is far shorter than
    // the time the job before it keeps the worker.
    let hopeless = b
        .periodic(
            Periodic::new("hopeless", Duration::from_millis(3)).deadline(Duration::from_micros(1)),
            |_| {},
        )
        .unwrap();
    let efd = EventFd::new().unwrap();
    let own = efd.try_clone().unwrap();
    let event = b
        .event(
            Event::new("event", efd.try_clone().unwrap(), Duration::from_millis(50)),
            move |ctx| {
                own.drain();
                ctx.complete();
            },
        )
        .unwrap();
    let runtime = b.start(notes).unwrap();
    for _ in 0..50 {
        efd.signal();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(wait_until(|| {
        runtime.counters(tick).completed >= 100
            && runtime.counters(event).completed >= 10
            && runtime.counters(hopeless).dropped >= 10
    }));
    runtime.stop().unwrap();
    assert!(rx.try_iter().count() >= 10, "misses were reported");
    assert_no_rt_allocations();
}
