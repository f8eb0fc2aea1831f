//! The runtime in a real cell (root): workers read back the cell's
//! SCHED_DEADLINE reservation, an overrunning worker gets SIGXCPU and the
//! overrun is reported, the join hook joins a foreign thread. Each test
//! holds the machine alone and resets it when done, even on failure.

mod common;

use common::*;
use std::time::{Duration, Instant};
use tessera_testkit::{privileged, Machine};

use tessera_runtime::{
    CellJoin, Event, Guarantee, NoNotifications, Periodic, Runtime, RuntimeConfig,
};
use tessera_sys::event::EventFd;
use tessera_sys::sched::{self, DeadlineFlags, Policy};

fn config(m: &Machine, cell: &str) -> RuntimeConfig {
    RuntimeConfig {
        cell: Some(CellJoin::embedded(cell, m.paths.clone())),
        ..Default::default()
    }
}

#[test]
fn workers_read_back_the_cells_reservation() {
    let Some(m) = privileged("readback") else {
        return;
    };
    m.session()
        .create_cell(bandwidth_cell("rt", 2000, 10_000, false), true)
        .unwrap();
    let mut b = Runtime::builder(config(&m, "rt"));
    let tick = b
        .periodic(Periodic::new("tick", Duration::from_millis(10)), |_| {})
        .unwrap();
    let runtime = b.start(NoNotifications).unwrap();
    assert_eq!(runtime.guarantee(), &Guarantee::Enforced);
    let worker = &runtime.workers()[0];
    assert_eq!(sched::get_policy(worker.tid).unwrap(), worker.policy);
    match worker.policy {
        Policy::Deadline(p) => {
            assert_eq!(p.runtime, Duration::from_millis(2));
            assert_eq!(p.period, Duration::from_millis(10));
        }
        other => panic!("expected SCHED_DEADLINE, got {other}"),
    }
    assert!(wait_until(|| runtime.counters(tick).completed >= 5));
    runtime.stop().unwrap();
}

#[test]
fn an_overrunning_worker_gets_sigxcpu_and_the_overrun_is_reported() {
    let Some(m) = privileged("overrun") else {
        return;
    };
    m.session()
        .create_cell(bandwidth_cell("hog", 1000, 10_000, true), true)
        .unwrap();
    let mut b = Runtime::builder(config(&m, "hog"));
    let efd = EventFd::new().unwrap();
    let own = efd.try_clone().unwrap();
    // Spins for 300 ms of wall time: 30 times its 1 ms runtime per period.
    let spin = b
        .event(
            Event::new("spin", efd.try_clone().unwrap(), Duration::from_secs(5)),
            move |_| {
                own.drain();
                let start = Instant::now();
                while start.elapsed() < Duration::from_millis(300) {
                    std::hint::spin_loop();
                }
            },
        )
        .unwrap();
    let (notes, rx) = recorder();
    let runtime = b.start(notes).unwrap();
    match runtime.workers()[0].policy {
        Policy::Deadline(p) => assert!(p.flags.contains(DeadlineFlags::DL_OVERRUN)),
        other => panic!("expected SCHED_DEADLINE, got {other}"),
    }
    efd.signal();
    let overrun = std::iter::from_fn(|| rx.recv_timeout(PATIENCE).ok())
        .find_map(|note| match note {
            Note::Overrun(o) => Some(o),
            Note::Miss(_) => None,
        })
        .expect("an overrun was reported");
    assert_eq!((overrun.worker, overrun.task), (0, Some(spin)));
    assert!(overrun.signals >= 1);
    runtime.stop().unwrap();
}

#[test]
fn the_join_hook_joins_the_calling_thread_to_the_cell() {
    let Some(m) = privileged("hook") else {
        return;
    };
    m.session()
        .create_cell(bandwidth_cell("graph", 500, 5000, false), true)
        .unwrap();
    let hook = CellJoin::embedded("graph", m.paths.clone()).hook();
    let policy = std::thread::spawn(move || {
        hook()?;
        sched::get_policy(0).map_err(|e| e.to_string())
    })
    .join()
    .unwrap()
    .unwrap();
    assert!(matches!(policy, Policy::Deadline(p) if p.runtime == Duration::from_micros(500)));
    let missing = CellJoin::embedded("no-such-cell", m.paths.clone()).hook();
    let err = std::thread::spawn(missing).join().unwrap().unwrap_err();
    assert!(err.contains("no-such-cell"), "{err}");
}
