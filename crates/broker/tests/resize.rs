//! Resizing a cell against the real kernel (root): the joined thread reads
//! back the new reservation; a resize that does not fit is refused and
//! changes nothing; with `degrade` it gets the largest that fits; a pinned
//! cell never changes. Each test holds the machine alone and resets it.

#[allow(dead_code, unused_imports)]
mod common;

use common::*;
use std::time::Duration;
use tessera_broker::ErrorCode;
use tessera_broker::Session;
use tessera_policy::{Bandwidth, Budget, CellRequest, CoreMode, CoreRequest, Placement};
use tessera_sys::sched::{self, Policy};

fn global(name: &str, runtime_us: u64, period_us: u64, cores: usize) -> CellRequest {
    let mut req = event_triggered(name, runtime_us, period_us);
    req.placement = Placement::Global;
    req.cores = CoreRequest::Count(cores);
    req
}

/// A thread of this process joined to `cell` (it joins itself: a process
/// cannot move its own sleeping threads from outside).
fn member(m: &tessera_testkit::Machine, cell: &'static str) -> Parked {
    let paths = m.paths.clone();
    Parked::spawn(move || Session::embedded(paths).join_current_thread(cell).unwrap())
}

fn runtime_of(tid: i32) -> Duration {
    match sched::get_policy(tid).unwrap() {
        Policy::Deadline(p) => p.runtime,
        other => panic!("expected SCHED_DEADLINE, got {other}"),
    }
}

/// The shared cores and each one's deadline capacity.
fn shared_domain(s: &mut Session) -> (usize, Bandwidth) {
    let status = s.status().unwrap();
    let shared = status
        .cores
        .iter()
        .filter(|c| c.mode == CoreMode::Shared)
        .count();
    (shared, status.capacity_per_core)
}

#[test]
fn a_resize_reaches_the_joined_threads_reservation() {
    let Some(m) = privileged("resize-readback") else {
        return;
    };
    let mut s = m.session();
    s.create_cell(global("synth", 100, 1000, 1), true).unwrap();
    let t = member(&m, "synth");
    assert_eq!(runtime_of(t.tid), Duration::from_micros(100));
    let reply = s
        .resize_cell("synth", Budget::new(300_000, 1_000_000), false)
        .unwrap();
    assert_eq!(reply.budget, Budget::new(300_000, 1_000_000));
    assert!(!reply.degraded);
    match sched::get_policy(t.tid).unwrap() {
        Policy::Deadline(p) => {
            assert_eq!(p.runtime, Duration::from_micros(300));
            assert_eq!(p.deadline, Duration::from_millis(1));
            assert_eq!(p.period, Duration::from_millis(1));
            assert!(p.flags.contains(sched::DeadlineFlags::RESET_ON_FORK));
        }
        other => panic!("expected SCHED_DEADLINE, got {other}"),
    }
    let info = s.show("synth").unwrap();
    assert_eq!(info.grant.reservations[0].budget, reply.budget);
    assert_eq!(info.members[0].tid, t.tid, "the thread stays a member");
    t.finish();
}

#[test]
fn a_resize_that_does_not_fit_is_refused_and_degrade_gets_the_largest_that_fits() {
    let Some(m) = privileged("resize-refused") else {
        return;
    };
    let mut s = m.session();
    let (shared, capacity) = shared_domain(&mut s);
    // Fill the shared domain but 0.2 of a core per shared core, beside a
    // 0.1 cell: 0.2 · shared − 0.1 is left.
    let fill_us = capacity.runtime_in(1_000_000) / 1000 - 200;
    s.create_cell(global("fill", fill_us, 1000, shared), true)
        .unwrap();
    s.create_cell(global("synth", 100, 1000, 1), true).unwrap();
    let t = member(&m, "synth");
    let before = (s.status().unwrap(), sched::get_policy(t.tid).unwrap());
    let asked = Budget::new(capacity.runtime_in(1_000_000) - 1000, 1_000_000);
    let err = s.resize_cell("synth", asked, false).unwrap_err();
    assert_eq!(err.code, ErrorCode::Refused, "{err}");
    assert!(err.message.contains("global reservations"), "{err}");
    assert!(err.fix.contains("would fit"), "{err}");
    let after = (s.status().unwrap(), sched::get_policy(t.tid).unwrap());
    assert_eq!(before.0.cells, after.0.cells, "the ledger is unchanged");
    assert_eq!(before.0.global_reserved, after.0.global_reserved);
    assert_eq!(before.1, after.1, "the thread keeps its reservation");

    let reply = s.resize_cell("synth", asked, true).unwrap();
    assert!(reply.degraded);
    let got = reply.budget.runtime_ns;
    assert!(got < asked.runtime_ns, "{got}");
    assert!(got > 100_000, "it grew into the free bandwidth: {got}");
    assert_eq!(runtime_of(t.tid), Duration::from_nanos(got));
    let status = s.status().unwrap();
    assert!(status.global_reserved <= capacity.times(shared as u64));
    let more = Budget::new(got + 1000, 1_000_000);
    assert_eq!(
        s.resize_cell("synth", more, false).unwrap_err().code,
        ErrorCode::Refused,
        "1 µs more would not fit"
    );
    t.finish();
}

#[test]
fn a_pinned_cell_is_never_resized() {
    let Some(m) = privileged("resize-pinned") else {
        return;
    };
    let mut s = m.session();
    let mut req = global("mixer", 200, 1000, 1);
    req.pinned = true;
    s.create_cell(req, true).unwrap();
    let t = member(&m, "mixer");
    for degrade in [false, true] {
        let err = s
            .resize_cell("mixer", Budget::new(100_000, 1_000_000), degrade)
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Refused);
        assert!(err.message.contains("pinned"), "{err}");
    }
    assert_eq!(runtime_of(t.tid), Duration::from_micros(200));
    assert_eq!(
        s.show("mixer").unwrap().grant.reservations[0].budget,
        Budget::new(200_000, 1_000_000)
    );
    assert_eq!(
        s.resize_cell("nope", Budget::new(100_000, 1_000_000), true)
            .unwrap_err()
            .code,
        ErrorCode::NotFound
    );
    t.finish();
}

#[test]
fn a_kernel_refusal_rolls_the_resize_back() {
    let Some(m) = privileged("resize-rollback") else {
        return;
    };
    let mut s = m.session();
    s.create_cell(global("synth", 100, 1000, 1), true).unwrap();
    let t = member(&m, "synth");
    // Reservations the ledger does not know of take the kernel's room: small
    // ones, added until the kernel refuses one, so less than one hog's
    // bandwidth is left whatever exited threads still hold (the kernel
    // frees a finished reservation only at its 0-lag time).
    let hog = Policy::Deadline(sched::DeadlineParams {
        runtime: Duration::from_micros(100),
        deadline: Duration::from_millis(1),
        period: Duration::from_millis(1),
        flags: sched::DeadlineFlags::RESET_ON_FORK,
    });
    let cpus = tessera_sys::kernel::online_cpus().unwrap().len();
    // Well beyond a hog's 10 %: an exited thread's reservation freed by the
    // kernel meanwhile (at its 0-lag time) must not make room for it. Room
    // still appeared between the fill and the resize twice in CI (a 60 % and
    // an 85 % resize passed): each fill starts once what exited threads held
    // is freed (within a few of their periods), and a resize the kernel took
    // is put back and the fill made again, up to 3 times.
    let mut attempts = 0;
    let (hogs, refused, result) = loop {
        attempts += 1;
        std::thread::sleep(Duration::from_millis(50));
        let mut hogs: Vec<Parked> = Vec::new();
        let mut refused = None;
        while refused.is_none() && hogs.len() < cpus * 10 {
            let h = Parked::spawn(|| ());
            refused = sched::set_policy(h.tid, &hog).err();
            hogs.push(h);
        }
        let result = s.resize_cell("synth", Budget::new(850_000, 1_000_000), false);
        for h in &hogs {
            let _ = sched::set_policy(h.tid, &Policy::Other { nice: 0 });
        }
        if result.is_err() || refused.is_none() || attempts == 3 {
            break (hogs, refused, result);
        }
        s.resize_cell("synth", Budget::new(100_000, 1_000_000), false)
            .unwrap();
        for h in hogs {
            h.finish();
        }
    };
    let refused = refused.unwrap_or_else(|| panic!("the kernel took {} hogs of 10 %", hogs.len()));
    assert_eq!(refused.kind, tessera_sys::ErrorKind::Busy, "{refused}");
    let err = result.unwrap_err();
    assert_eq!(err.code, ErrorCode::Kernel, "{err}");
    assert_eq!(runtime_of(t.tid), Duration::from_micros(100));
    assert_eq!(
        s.show("synth").unwrap().grant.reservations[0].budget,
        Budget::new(100_000, 1_000_000),
        "the ledger is rolled back"
    );
    for h in hogs {
        h.finish();
    }
    t.finish();
}
