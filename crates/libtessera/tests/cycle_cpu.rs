//! A member's cycle is charged with all the CPU its thread used since its
//! last cycle finished, not only inside the interval: the reservation pays
//! for the work around it too (an audio server waking the thread, its port
//! buffers). A member that does 3 ms of work per 10 ms cycle outside its
//! intervals ends with a budget that holds those 3 ms. Root (a reservation
//! behind the workgroup); skipped otherwise, a failure under CI=true. Its
//! own test binary: it sets TESSERA_RUN_DIR.

use std::time::Duration;
use tessera::handle::WorkgroupHandle;
use tessera::TESSERA_OK;
use tessera_sys::clock::{monotonic_ns, thread_cpu_ns};

const PERIOD_NS: u64 = 10_000_000;
const OUTSIDE_NS: u64 = 3_000_000;
const CYCLES: u64 = 150;

/// Runs the thread for `ns` of its own CPU time.
fn spin_cpu(ns: u64) {
    let until = thread_cpu_ns() + ns;
    while thread_cpu_ns() < until {
        std::hint::spin_loop();
    }
}

#[test]
fn the_work_between_intervals_is_in_the_budget() {
    let Some(machine) = tessera_testkit::privileged("the_work_between_intervals_is_in_the_budget")
    else {
        return;
    };
    std::env::set_var("TESSERA_RUN_DIR", machine.dir());
    let (wg, opened) = WorkgroupHandle::open("wg-cycle-cpu", 1).expect("open");
    assert_eq!(opened, TESSERA_OK, "a reservation backs the workgroup");
    let (token, joined) = wg.join().expect("join");
    assert_eq!(joined, TESSERA_OK);
    let tid = tessera_sys::proc::current_tid();
    for _ in 0..CYCLES {
        let start = monotonic_ns();
        assert_eq!(wg.interval_start(start, start + PERIOD_NS), TESSERA_OK);
        assert_eq!(wg.interval_finish(), TESSERA_OK);
        // The cycle's real work, outside the interval (as JACK's around a
        // client's callback), then the rest of the period asleep.
        spin_cpu(OUTSIDE_NS);
        let next = start + PERIOD_NS;
        std::thread::sleep(Duration::from_nanos(next.saturating_sub(monotonic_ns())));
    }
    let stats = wg
        .member_stats(tid)
        .expect("the control thread saw the member");
    assert_eq!(wg.leave(token), TESSERA_OK);
    assert!(stats.cycles >= CYCLES - 5, "{stats:?}");
    assert!(
        stats.budget_ns >= OUTSIDE_NS,
        "budget {} ns for {OUTSIDE_NS} ns of work per cycle: {stats:?}",
        stats.budget_ns
    );
}
