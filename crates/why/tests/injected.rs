//! Causes injected on purpose, classified from the kernel's events: a
//! SCHED_DEADLINE budget set too small (throttled), a SCHED_FIFO hog on
//! the thread's core outside any cell (waited for a CPU, naming the hog),
//! a timer armed late (woken late). Classification is asserted, not
//! timing. Root only (a skip is printed, and fails under CI=true); each
//! test is bounded by a timeout, and leaves the machine as it found it:
//! its threads end, the events are closed, tracefs is mounted as before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns, thread_cpu_ns};
use tessera_sys::sched::{set_policy, DeadlineFlags, DeadlineParams, Policy};
use tessera_why::{Attribution, Cause, Miss, Tracer, Watch};

const MS: u64 = 1_000_000;
const PERIOD: u64 = 10 * MS;

/// Runs `test` in a thread of its own, failing if it takes longer than `limit`.
fn bounded<T: Send + 'static>(limit: Duration, test: impl FnOnce() -> T + Send + 'static) -> T {
    let thread = std::thread::spawn(test);
    let start = std::time::Instant::now();
    while !thread.is_finished() {
        assert!(
            start.elapsed() < limit,
            "the test took longer than {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    thread
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// Spins until this thread has run `ns` more on its CPU clock.
fn work(ns: u64) {
    let until = thread_cpu_ns() + ns;
    while thread_cpu_ns() < until {
        std::hint::spin_loop();
    }
}

/// A periodic thread: it sends its tid, waits for the go, then runs
/// `cycles` cycles released on a grid of `PERIOD` (delayed by `late(k)`),
/// each doing `work_ns` of work.
fn periodic(
    cycles: u64,
    work_ns: u64,
    late: fn(u64) -> u64,
) -> (i32, mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        tid_tx.send(tessera_sys::proc::current_tid()).unwrap();
        go_rx.recv().unwrap();
        let start = monotonic_ns() + PERIOD;
        let mut next = start;
        for k in 0..cycles {
            sleep_until_monotonic_ns(next + late(k));
            work(work_ns);
            // The next grid point after now: a cycle that overran its
            // period sleeps to the following one rather than not at all.
            let now = monotonic_ns();
            next = start + ((now - start) / PERIOD + 1) * PERIOD;
        }
    });
    (tid_rx.recv().unwrap(), go_tx, thread)
}

/// Traces `watch`'s thread while it runs, and checks tracefs is left as it was.
fn traced(watch: Watch, go: mpsc::Sender<()>, thread: std::thread::JoinHandle<()>) -> Attribution {
    let mounted_before = tessera_sys::perf::tracefs_mount();
    let tracer = Tracer::start(&[watch], HashMap::new()).expect("the events can be read as root");
    let mut tracer = tracer;
    go.send(()).unwrap();
    while !thread.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
        tracer.poll();
    }
    thread.join().unwrap();
    let attribution = tracer.stop();
    assert_eq!(tessera_sys::perf::tracefs_mount(), mounted_before);
    eprintln!(
        "{} cycles, {} misses, {} lost: {:?}",
        attribution.cycles,
        attribution.misses.len(),
        attribution.lost,
        attribution.causes.misses
    );
    attribution
}

fn share(a: &Attribution, cause: Cause) -> f64 {
    let n = a.misses.iter().filter(|m| m.cause == cause).count();
    n as f64 / a.misses.len().max(1) as f64
}

#[test]
fn a_budget_set_too_small_is_throttled() {
    let Some(_machine) = tessera_testkit::privileged("why_throttled") else {
        return;
    };
    let a = bounded(Duration::from_secs(60), || {
        // 3 ms of work a cycle on a budget of 1 ms every 10 ms.
        let (tid, go, thread) = periodic(25, 3 * MS, |_| 0);
        let reservation = DeadlineParams {
            runtime: Duration::from_millis(1),
            deadline: Duration::from_nanos(PERIOD),
            period: Duration::from_nanos(PERIOD),
            flags: DeadlineFlags(0),
        };
        set_policy(tid, &Policy::Deadline(reservation)).expect("SCHED_DEADLINE as root");
        let watch = tessera_why::watch(tid, None, None, None).unwrap();
        assert_eq!(watch.budget_ns, Some(MS));
        traced(watch, go, thread)
    });
    assert!(a.misses.len() >= 8, "{:?}", a.misses);
    assert!(a.misses.iter().filter(|m| m.throttled).count() >= 8);
    assert!(share(&a, Cause::Throttled) >= 0.9, "{:#?}", a.misses);
}

#[test]
fn a_fifo_hog_on_the_core_is_waited_for_and_named() {
    let Some(_machine) = tessera_testkit::privileged("why_hog") else {
        return;
    };
    let core = tessera_testkit::last_core();
    let a = bounded(Duration::from_secs(60), move || {
        let (tid, go, thread) = periodic(40, MS / 3, |_| 0);
        set_policy(tid, &Policy::Fifo { priority: 10 }).unwrap();
        tessera_sys::affinity::set_affinity(tid, &[core]).unwrap();
        // The hog: a higher SCHED_FIFO thread on the same core, in no
        // cell, busy 20 ms of every 50.
        let stop = Arc::new(AtomicBool::new(false));
        let (hog_tx, hog_rx) = mpsc::channel();
        let flag = stop.clone();
        let hog = std::thread::spawn(move || {
            hog_tx.send(tessera_sys::proc::current_tid()).unwrap();
            while !flag.load(Ordering::Relaxed) {
                let until = monotonic_ns() + 20 * MS;
                while monotonic_ns() < until {
                    std::hint::spin_loop();
                }
                std::thread::sleep(Duration::from_millis(30));
            }
        });
        let hog_tid = hog_rx.recv().unwrap();
        tessera_sys::affinity::set_affinity(hog_tid, &[core]).unwrap();
        set_policy(hog_tid, &Policy::Fifo { priority: 50 }).unwrap();
        let watch = tessera_why::watch(tid, Some(3 * MS), Some(PERIOD), None).unwrap();
        let a = traced(watch, go, thread);
        stop.store(true, Ordering::Relaxed);
        hog.join().unwrap();
        (a, hog_tid)
    });
    let (a, hog_tid) = a;
    let waited: Vec<_> = a
        .misses
        .iter()
        .filter(|m| m.cause == Cause::WaitedForCpu)
        .collect();
    assert!(waited.len() >= 5, "{:#?}", a.misses);
    // The hog delays no wake-up (its core takes the timer's interrupt as it
    // runs) and steals nothing: a miss woken late or stolen is the host's
    // (a busy host's stalled vCPU: in one CI run 2 of 15 misses woken
    // 3–15 ms late, 1 with 3 ms stolen). Of the others, the hog's.
    let by_the_host = a
        .misses
        .iter()
        .filter(|m| matches!(m.cause, Cause::WokenLate | Cause::Stolen))
        .count();
    assert!(
        waited.len() as f64 >= 0.9 * (a.misses.len() - by_the_host) as f64,
        "{:#?}",
        a.misses
    );
    // The hog is named first; under load the kernel's fair server may run
    // another thread on the core too (it preempts SCHED_FIFO for the
    // starved others), so a few waits may be mostly someone else's.
    let named = waited.iter().filter(|m| m.holders[0].pid == hog_tid);
    assert!(
        named.clone().count() as f64 >= 0.8 * waited.len() as f64,
        "{waited:#?}"
    );
    for m in named {
        assert_eq!(m.holders[0].cell, None);
        assert_eq!(m.holders[0].prio, 99 - 50);
    }
}

#[test]
fn a_timer_armed_late_is_woken_late() {
    let Some(_machine) = tessera_testkit::privileged("why_late_timer") else {
        return;
    };
    let a = bounded(Duration::from_secs(60), || {
        // Every fourth cycle's timer is armed 4 ms after its release.
        let (tid, go, thread) = periodic(40, MS / 5, |k| if k % 4 == 3 { 4 * MS } else { 0 });
        set_policy(tid, &Policy::Fifo { priority: 20 }).unwrap();
        let watch = tessera_why::watch(tid, Some(2 * MS), Some(PERIOD), None).unwrap();
        traced(watch, go, thread)
    });
    let late = a
        .misses
        .iter()
        .filter(|m| m.cause == Cause::WokenLate)
        .count();
    assert!(late >= 6, "{:#?}", a.misses);
    assert!(share(&a, Cause::WokenLate) >= 0.9, "{:#?}", a.misses);
    // The injected ones by their 4 ms (a vCPU stalled past the 2 ms
    // deadline may add one woken late by less).
    let by_the_delay = a
        .misses
        .iter()
        .filter(|m| m.cause == Cause::WokenLate)
        .filter(|m| m.parts_us[&Cause::WokenLate] >= 3_000.0)
        .count();
    assert!(by_the_delay >= 6, "{:#?}", a.misses);
}

#[test]
fn a_chain_added_later_is_judged_by_its_period_and_its_long_member_named() {
    let Some(_machine) = tessera_testkit::privileged("why_chain") else {
        return;
    };
    /// Periods after the member is watched.
    const WATCHED: u64 = 40;
    let a = bounded(Duration::from_secs(60), || {
        // The driver: 1 ms of work on a 10 ms grid, then it signals the
        // member, which works 1 ms — and, once watched, 12 ms every fourth
        // period: the chain ends past its period then, though no thread's
        // own cycle is longer than the period from its own wake-up.
        let (signal, signalled) = mpsc::channel::<Option<u64>>();
        let (member_tx, member_rx) = mpsc::channel();
        let member = std::thread::spawn(move || {
            member_tx.send(tessera_sys::proc::current_tid()).unwrap();
            // The periods since it was watched, if it is.
            while let Ok(since) = signalled.recv() {
                work(match since {
                    Some(j) if j % 4 == 3 => 12 * MS,
                    _ => MS,
                });
            }
        });
        let member_tid = member_rx.recv().unwrap();
        let (tid_tx, tid_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let watched = Arc::new(AtomicBool::new(false));
        let seen = watched.clone();
        let driver = std::thread::spawn(move || {
            tid_tx.send(tessera_sys::proc::current_tid()).unwrap();
            go_rx.recv().unwrap();
            let start = monotonic_ns() + PERIOD;
            let mut from = None;
            for k in 0.. {
                sleep_until_monotonic_ns(start + k * PERIOD);
                work(MS);
                if from.is_none() && seen.load(Ordering::Relaxed) {
                    from = Some(k);
                }
                let since = from.map(|f| k - f);
                if since == Some(WATCHED) {
                    break;
                }
                signal.send(since).unwrap();
            }
        });
        let driver_tid = tid_rx.recv().unwrap();
        for tid in [driver_tid, member_tid] {
            set_policy(tid, &Policy::Fifo { priority: 20 }).unwrap();
        }
        let link = |driver| Some(tessera_why::ChainLink { chain: 0, driver });
        let watch = |tid, driver| Watch {
            chain: link(driver),
            ..tessera_why::watch(tid, Some(PERIOD), Some(PERIOD), None).unwrap()
        };
        let mut tracer = Tracer::start_with_room(&[watch(driver_tid, true)], HashMap::new(), 100.0)
            .expect("the events can be read as root");
        go_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        tracer.watch_more(&[watch(member_tid, false)]).unwrap();
        watched.store(true, Ordering::Relaxed);
        while !driver.is_finished() {
            std::thread::sleep(Duration::from_millis(50));
            tracer.poll();
        }
        driver.join().unwrap();
        member.join().unwrap();
        (tracer.stop(), member_tid)
    });
    let (a, member_tid) = a;
    eprintln!("{} cycles, misses {:?}", a.cycles, a.causes.misses);
    // Ten long periods, the first perhaps before the member's first whole
    // cycle was seen. A host stall that holds the member into a later long
    // period makes one cycle of both (the member never waits between
    // them): one miss with two periods' work (a CI run: 6 misses, 3 of
    // them with 19 ms stolen); the long work all shows in the misses.
    assert!((1..=12).contains(&a.misses.len()), "{:#?}", a.misses);
    assert!(
        a.misses.iter().all(|m| m.tid == member_tid),
        "{:#?}",
        a.misses
    );
    // The member's own work past the period shows in the long periods'
    // misses, and it is their cause unless the host stole more of the
    // cycle than the work's excess over the period (a busy host stole
    // 6–9 ms of such 20 ms cycles in one CI run: "stolen", the longest
    // part).
    let own = |m: &Miss| m.parts_us.get(&Cause::OwnWork).copied().unwrap_or(0.0);
    let stolen = |m: &Miss| m.parts_us.get(&Cause::Stolen).copied().unwrap_or(0.0);
    let long: Vec<&Miss> = a.misses.iter().filter(|m| own(m) > 10_000.0).collect();
    let long_work_us: f64 = long.iter().map(|m| own(m)).sum();
    assert!(long_work_us >= 8.0 * 10_000.0, "{:#?}", a.misses);
    let undisturbed: Vec<&&Miss> = long
        .iter()
        .filter(|m| stolen(m) < own(m) - 10_000.0)
        .collect();
    let named = undisturbed
        .iter()
        .filter(|m| m.cause == Cause::OwnWork)
        .count();
    assert!(
        named as f64 >= 0.8 * undisturbed.len() as f64,
        "{:#?}",
        a.misses
    );
    assert!(a.misses.iter().all(|m| m.response_us > 10_000.0));
}
