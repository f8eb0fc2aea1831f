//! Dispatch without a cell (no privileges needed): EDF order, dropping of
//! jobs that can no longer meet their deadline, explicit completion, miss
//! reports, statistics. Behaviour only: blocking jobs make the orders
//! deterministic, and no assertion depends on how fast the machine is.

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tessera_runtime::{
    Event, Guarantee, JobContext, NoNotifications, Periodic, Runtime, RuntimeConfig, RuntimeError,
};
use tessera_sys::clock::monotonic_ns;
use tessera_sys::event::EventFd;
use tessera_sys::sched::Policy;

const SECOND: Duration = Duration::from_secs(1);

type Log = Arc<Mutex<Vec<&'static str>>>;

/// A job that appends `name` to `log`.
fn logs(log: &Log, name: &'static str) -> impl FnMut(&mut JobContext) + Send + 'static {
    let log = Arc::clone(log);
    move |_| log.lock().unwrap().push(name)
}

/// An event job that takes its event from `efd` and appends `name` to `log`.
fn logs_event(
    log: &Log,
    name: &'static str,
    efd: &EventFd,
) -> impl FnMut(&mut JobContext) + Send + 'static {
    let efd = efd.try_clone().unwrap();
    let mut log_it = logs(log, name);
    move |ctx| {
        efd.drain();
        log_it(ctx);
    }
}

/// An event task's source: the runtime's descriptor and the test's.
fn source() -> (EventFd, EventFd) {
    let efd = EventFd::new().unwrap();
    (efd.try_clone().unwrap(), efd)
}

/// A job that keeps its worker until `until` says so (bounded), logging
/// `name` when it starts; it drains `efd` so it runs once.
fn blocker(
    log: &Log,
    efd: EventFd,
    until: impl Fn() -> bool + Send + 'static,
) -> impl FnMut(&mut JobContext) + Send + 'static {
    let log = Arc::clone(log);
    move |_| {
        efd.drain();
        log.lock().unwrap().push("blocker");
        assert!(wait_until(&until), "blocker released");
    }
}

#[test]
fn jobs_released_together_run_earliest_deadline_first() {
    let log: Log = Arc::default();
    let go = Arc::new(AtomicBool::new(false));
    let mut b = Runtime::builder(RuntimeConfig::default());
    let (block_rt, block) = source();
    let (late_rt, late) = source();
    let (early_rt, early) = source();
    let go_flag = Arc::clone(&go);
    let block_efd = block.try_clone().unwrap();
    b.event(
        Event::new("blocker", block_rt, 10 * SECOND),
        blocker(&log, block_efd, move || go_flag.load(Ordering::Acquire)),
    )
    .unwrap();
    // Registered first, so only its later deadline can make it run second.
    b.event(
        Event::new("late", late_rt, 5 * SECOND),
        logs_event(&log, "late", &late),
    )
    .unwrap();
    b.event(
        Event::new("early", early_rt, SECOND),
        logs_event(&log, "early", &early),
    )
    .unwrap();
    let runtime = b.start(NoNotifications).unwrap();
    block.signal();
    assert!(wait_until(|| log.lock().unwrap().len() == 1));
    late.signal();
    early.signal();
    go.store(true, Ordering::Release);
    assert!(wait_until(|| log.lock().unwrap().len() >= 3));
    runtime.stop().unwrap();
    assert_eq!(&log.lock().unwrap()[..3], ["blocker", "early", "late"]);
}

#[test]
fn periodic_jobs_released_together_run_earliest_deadline_first() {
    let log: Log = Arc::default();
    let epoch = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
    let offset = Duration::from_millis(300);
    let mut b = Runtime::builder(RuntimeConfig::default());
    let (block_rt, block) = source();
    let block_efd = block.try_clone().unwrap();
    let seen_epoch = Arc::clone(&epoch);
    // Holds the worker until both periodic tasks were released.
    let released = move || {
        monotonic_ns()
            > seen_epoch
                .load(Ordering::Acquire)
                .saturating_add(400_000_000)
    };
    b.event(
        Event::new("blocker", block_rt, 10 * SECOND),
        blocker(&log, block_efd, released),
    )
    .unwrap();
    let period = 60 * SECOND;
    let spec = |name| Periodic::new(name, period).offset(offset);
    b.periodic(spec("relaxed").deadline(8 * SECOND), logs(&log, "relaxed"))
        .unwrap();
    b.periodic(spec("urgent").deadline(4 * SECOND), logs(&log, "urgent"))
        .unwrap();
    let runtime = b.start(NoNotifications).unwrap();
    epoch.store(runtime.epoch_ns(), Ordering::Release);
    block.signal();
    assert!(wait_until(|| log.lock().unwrap().len() >= 3));
    runtime.stop().unwrap();
    assert_eq!(&log.lock().unwrap()[..3], ["blocker", "urgent", "relaxed"]);
}

#[test]
fn a_job_whose_deadline_passed_before_it_could_start_is_dropped_and_reported() {
    let (notes, rx) = recorder();
    let log: Log = Arc::default();
    let epoch = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
    let mut b = Runtime::builder(RuntimeConfig::default());
    let (block_rt, block) = source();
    let block_efd = block.try_clone().unwrap();
    let seen_epoch = Arc::clone(&epoch);
    // The tight task is released at epoch + 100 ms, due 20 ms later; the
    // blocker keeps the worker until 100 ms after that deadline.
    let past_deadline = move || {
        monotonic_ns()
            > seen_epoch
                .load(Ordering::Acquire)
                .saturating_add(220_000_000)
    };
    b.event(
        Event::new("blocker", block_rt, 10 * SECOND),
        blocker(&log, block_efd, past_deadline),
    )
    .unwrap();
    let tight = b
        .periodic(
            Periodic::new("tight", 60 * SECOND)
                .deadline(Duration::from_millis(20))
                .offset(Duration::from_millis(100)),
            logs(&log, "tight"),
        )
        .unwrap();
    let runtime = b.start(notes).unwrap();
    epoch.store(runtime.epoch_ns(), Ordering::Release);
    block.signal();
    assert!(wait_until(|| runtime.counters(tight).dropped == 1));
    let report = runtime.stop().unwrap();
    let c = report.tasks[tight.0].counters;
    assert_eq!((c.released, c.completed, c.missed, c.dropped), (1, 0, 1, 1));
    assert_eq!(
        *log.lock().unwrap(),
        ["blocker"],
        "the dropped job never ran"
    );
    match rx.recv_timeout(PATIENCE).unwrap() {
        Note::Miss(m) => {
            assert_eq!((m.task, m.job, m.dropped), (tight, 0, true));
            assert!(m.lateness > Duration::ZERO);
            assert_eq!(m.deadline_ns - m.release_ns, 20_000_000);
        }
        other => panic!("expected a miss, got {other:?}"),
    }
}

#[test]
fn a_late_completion_is_a_miss_but_not_a_drop() {
    let (notes, rx) = recorder();
    let mut b = Runtime::builder(RuntimeConfig::default());
    let (slow_rt, slow) = source();
    let efd = slow.try_clone().unwrap();
    let task = b
        .event(
            Event::new("slow", slow_rt, Duration::from_millis(50)),
            move |_| {
                efd.drain();
                std::thread::sleep(Duration::from_millis(100));
            },
        )
        .unwrap();
    let runtime = b.start(notes).unwrap();
    slow.signal();
    assert!(wait_until(|| runtime.counters(task).completed == 1));
    let c = runtime.stop().unwrap().tasks[0].counters;
    assert_eq!((c.released, c.completed, c.missed, c.dropped), (1, 1, 1, 0));
    assert!(c.response_min.unwrap() >= Duration::from_millis(100));
    match rx.recv_timeout(PATIENCE).unwrap() {
        Note::Miss(m) => assert!(!m.dropped && m.lateness > Duration::ZERO),
        other => panic!("expected a miss, got {other:?}"),
    }
}

#[test]
fn explicit_completion_judges_the_job_when_its_critical_section_ends() {
    let mut b = Runtime::builder(RuntimeConfig::default());
    let (rt_fd, efd) = source();
    let own = efd.try_clone().unwrap();
    let task = b
        .event(Event::new("explicit", rt_fd, 2 * SECOND), move |ctx| {
            own.drain();
            ctx.complete();
            // Non-critical work past the deadline does not make a miss.
            std::thread::sleep(2 * SECOND + Duration::from_millis(200));
        })
        .unwrap();
    let runtime = b.start(NoNotifications).unwrap();
    efd.signal();
    assert!(wait_until(|| runtime.counters(task).completed == 1));
    let c = runtime.stop().unwrap().tasks[0].counters;
    assert_eq!((c.completed, c.missed), (1, 0));
    assert!(c.response_max.unwrap() < 2 * SECOND);
}

#[test]
fn every_periodic_release_is_accounted_for() {
    let mut b = Runtime::builder(RuntimeConfig::default());
    let task = b
        .periodic(Periodic::new("tick", Duration::from_millis(2)), |_| {})
        .unwrap();
    let runtime = b.start(NoNotifications).unwrap();
    assert!(wait_until(|| runtime.counters(task).released >= 20));
    let c = runtime.stop().unwrap().tasks[0].counters;
    // At most one job can be left queued when the worker stops.
    let handled = c.completed + c.dropped;
    assert!(handled <= c.released && handled + 1 >= c.released, "{c:?}");
    assert!(c.missed >= c.dropped);
    assert!(c.response_min.unwrap() <= c.response_mean.unwrap());
    assert!(c.response_mean.unwrap() <= c.response_max.unwrap());
}

#[test]
fn a_panicking_job_is_counted_and_the_task_goes_on() {
    let mut b = Runtime::builder(RuntimeConfig::default());
    let (rt_fd, efd) = source();
    let own = efd.try_clone().unwrap();
    let task = b
        .event(Event::new("fragile", rt_fd, 5 * SECOND), move |ctx| {
            own.drain();
            assert!(ctx.job() > 0, "first job panics (expected in this test)");
        })
        .unwrap();
    let runtime = b.start(NoNotifications).unwrap();
    efd.signal();
    assert!(wait_until(|| runtime.counters(task).completed == 1));
    efd.signal();
    assert!(wait_until(|| runtime.counters(task).completed == 2));
    let c = runtime.stop().unwrap().tasks[0].counters;
    assert_eq!((c.completed, c.panicked), (2, 1));
}

#[test]
fn without_a_cell_the_runtime_runs_and_says_it_is_best_effort() {
    let mut b = Runtime::builder(RuntimeConfig::default());
    let task = b
        .periodic(Periodic::new("tick", Duration::from_millis(1)), |_| {})
        .unwrap();
    let runtime = b.start(NoNotifications).unwrap();
    assert!(matches!(runtime.guarantee(), Guarantee::BestEffort(r) if r.contains("no cell")));
    assert!(matches!(runtime.workers()[0].policy, Policy::Other { .. }));
    assert!(wait_until(|| runtime.counters(task).completed >= 3));
    runtime.stop().unwrap();
}

#[test]
fn tasks_outside_the_legal_ranges_are_refused_with_the_reason() {
    let mut b = Runtime::builder(RuntimeConfig::default());
    let err = b
        .periodic(
            Periodic::new("odd", Duration::from_millis(1)).deadline(Duration::from_millis(2)),
            |_| {},
        )
        .unwrap_err();
    assert!(matches!(err, RuntimeError::InvalidTask(m) if m.contains("at most its period")));
    let err = b
        .periodic(Periodic::new("far", SECOND).worker(1), |_| {})
        .unwrap_err();
    assert!(err.to_string().contains("1 worker(s)"));
    let zero = RuntimeConfig {
        workers: 0,
        ..Default::default()
    };
    assert!(Runtime::builder(zero).start(NoNotifications).is_err());
}

#[test]
fn tasks_on_different_workers_run_on_different_threads() {
    let config = RuntimeConfig {
        workers: 2,
        ..Default::default()
    };
    let threads = Arc::new(Mutex::new([0i32; 2]));
    let mut b = Runtime::builder(config);
    for worker in 0..2 {
        let threads = Arc::clone(&threads);
        b.periodic(
            Periodic::new(format!("w{worker}"), Duration::from_millis(2)).worker(worker),
            move |_| threads.lock().unwrap()[worker] = tessera_sys::proc::current_tid(),
        )
        .unwrap();
    }
    let runtime = b.start(NoNotifications).unwrap();
    assert!(wait_until(|| threads
        .lock()
        .unwrap()
        .iter()
        .all(|&t| t != 0)));
    let seen = *threads.lock().unwrap();
    let workers: Vec<i32> = runtime.workers().iter().map(|w| w.tid).collect();
    runtime.stop().unwrap();
    assert_eq!(seen.to_vec(), workers);
}
