//! The broker against the real kernel (root): reservations read back,
//! shielding, overbooking, dead clients, reset. Each test holds the machine
//! alone and resets it when done, even on failure.

mod common;

use common::*;
use std::time::Duration;
use tessera_sys::cgroup::Hierarchy;
use tessera_sys::sched::{self, Policy};
use tessera_testkit::privileged_with_a_second_core;

#[test]
fn a_joined_thread_reads_back_the_cells_reservation() {
    let Some(m) = privileged("readback") else {
        return;
    };
    let mut s = m.session();
    let info = s
        .create_cell(event_triggered("synth", 400, 1333), true)
        .unwrap();
    let core = info.grant.reservations[0].core.expect("partitioned");
    let paths = m.paths.clone();
    let t = Parked::spawn(move || {
        tessera_broker::Session::embedded(paths)
            .join_current_thread("synth")
            .unwrap();
    });
    match sched::get_policy(t.tid).unwrap() {
        Policy::Deadline(p) => {
            assert_eq!(p.runtime, Duration::from_micros(400));
            assert_eq!(p.deadline, Duration::from_micros(1333));
            assert_eq!(p.period, Duration::from_micros(1333));
            assert!(p.flags.contains(sched::DeadlineFlags::RESET_ON_FORK));
        }
        other => panic!("expected SCHED_DEADLINE, got {other}"),
    }
    assert_eq!(
        tessera_sys::proc::cgroup_of(t.tid, Some("cpuset")).unwrap(),
        format!("/tessera/core{core}")
    );
    assert_eq!(
        tessera_sys::affinity::get_affinity(t.tid).unwrap(),
        vec![core]
    );
    s.destroy_cell("synth").unwrap();
    assert_eq!(
        sched::get_policy(t.tid).unwrap(),
        Policy::Other { nice: 0 },
        "destroy restores the thread"
    );
    t.finish();
}

#[test]
fn a_dedicated_cells_cores_carry_no_other_task() {
    let Some((m, core)) = privileged_with_a_second_core("dedicated") else {
        return;
    };
    let mut s = m.session();
    s.create_cell(dedicated("music", vec![core]), true).unwrap();
    let paths = m.paths.clone();
    let member = Parked::spawn(move || {
        tessera_broker::Session::embedded(paths)
            .join_current_thread("music")
            .unwrap();
    });
    let mut intruders = Vec::new();
    for pid in tessera_sys::proc::all_pids().unwrap() {
        if tessera_sys::proc::is_kernel_thread(pid) {
            continue;
        }
        for tid in tessera_sys::proc::threads_of(pid).unwrap_or_default() {
            let Ok(cpus) = tessera_sys::affinity::get_affinity(tid) else {
                continue;
            };
            if tid != member.tid && cpus.contains(&core) {
                intruders.push((pid, tid, tessera_sys::proc::thread_name(pid, tid), cpus));
            }
        }
    }
    assert!(
        intruders.is_empty(),
        "tasks still allowed on dedicated core {core}: {intruders:?}"
    );
    assert_eq!(
        tessera_sys::affinity::get_affinity(member.tid).unwrap(),
        vec![core]
    );
    s.destroy_cell("music").unwrap();
    assert!(
        tessera_sys::affinity::get_affinity(0)
            .unwrap()
            .contains(&core),
        "the shield is undone when the cell ends"
    );
    member.finish();
}

#[test]
fn overbooking_is_refused_with_the_explanation_and_changes_nothing() {
    let Some(m) = privileged("overbooking") else {
        return;
    };
    let mut s = m.session();
    let cores = tessera_sys::kernel::online_cpus().unwrap().len();
    // Fill every core that may take reservations, then ask for more.
    for i in 0..cores.saturating_sub(1).max(1) {
        s.create_cell(event_triggered(&format!("fill{i}"), 700, 1000), true)
            .unwrap();
    }
    let before = s.status().unwrap();
    let tree: Vec<_> = Hierarchy::cpuset()
        .unwrap()
        .root()
        .child("tessera")
        .children();
    let err = s
        .create_cell(event_triggered("greedy", 600, 1000), true)
        .unwrap_err();
    assert_eq!(err.code, tessera_broker::ErrorCode::Refused);
    assert!(
        err.message
            .contains("needs 0.60 of a core on a single core; the most free on any core is"),
        "{err}"
    );
    assert!(err.fix.contains("would fit"), "{err}");
    let after = s.status().unwrap();
    assert_eq!(before.cores, after.cores, "the ledger is unchanged");
    assert_eq!(
        tree,
        Hierarchy::cpuset()
            .unwrap()
            .root()
            .child("tessera")
            .children(),
        "the kernel is untouched"
    );
}

#[test]
fn bad_requests_get_clear_errors() {
    let Some(m) = privileged("bad-input") else {
        return;
    };
    let mut s = m.session();
    let cases = [
        (event_triggered("a", 2000, 1000), "exceeds the period"),
        (event_triggered("b", 10, 50), "outside the kernel's range"),
        (
            event_triggered("c", 1000, 5_000_000),
            "outside the kernel's range",
        ),
    ];
    for (req, text) in cases {
        let err = s.create_cell(req, true).unwrap_err();
        assert!(err.message.contains(text), "{err}");
    }
    let mut many = event_triggered("d", 100, 1000);
    many.cores = tessera_policy::CoreRequest::Count(64);
    assert!(s
        .create_cell(many, true)
        .unwrap_err()
        .message
        .contains("this machine has"));
    assert_eq!(
        s.destroy_cell("nope").unwrap_err().code,
        tessera_broker::ErrorCode::NotFound
    );
    assert_eq!(
        s.attach("nope", std::process::id() as i32, None)
            .unwrap_err()
            .code,
        tessera_broker::ErrorCode::NotFound
    );
    let core = last_core();
    if core > 0 {
        s.create_cell(dedicated("one", vec![core]), true).unwrap();
        let err = s
            .create_cell(dedicated("two", vec![core]), true)
            .unwrap_err();
        assert!(err.message.contains("dedicated to \"one\""), "{err}");
    }
    assert!(
        s.status().unwrap().cells.len() <= 1,
        "nothing else was created"
    );
}

#[test]
fn a_cell_takes_one_thread_per_reservation() {
    let Some(m) = privileged("slots") else { return };
    let mut s = m.session();
    s.create_cell(event_triggered("one", 100, 1000), true)
        .unwrap();
    let p1 = m.paths.clone();
    let first = Parked::spawn(move || {
        tessera_broker::Session::embedded(p1)
            .join_current_thread("one")
            .unwrap()
    });
    let p2 = m.paths.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let second = Parked::spawn(move || {
        tx.send(tessera_broker::Session::embedded(p2).join_current_thread("one"))
            .unwrap();
    });
    let err = rx.recv().unwrap().unwrap_err();
    assert!(err.message.contains("all held by threads"), "{err}");
    assert_eq!(
        sched::get_policy(second.tid).unwrap(),
        Policy::Other { nice: 0 },
        "a refused thread is untouched"
    );
    first.finish();
    second.finish();
}

#[test]
fn each_policy_places_its_thread_as_documented() {
    let Some(m) = privileged("policies") else {
        return;
    };
    let mut s = m.session();
    let join = |cell: &'static str| {
        let paths = m.paths.clone();
        Parked::spawn(move || {
            tessera_broker::Session::embedded(paths)
                .join_current_thread(cell)
                .unwrap()
        })
    };
    // Time-triggered: a window, deadline = runtime, on a partitioned core.
    s.create_cell(
        tessera_policy::CellRequest::time_triggered("window", 2_000_000, 10_000_000),
        true,
    )
    .unwrap();
    let tt = join("window");
    match sched::get_policy(tt.tid).unwrap() {
        Policy::Deadline(p) => assert_eq!(
            (p.runtime, p.deadline, p.period),
            (
                Duration::from_millis(2),
                Duration::from_millis(2),
                Duration::from_millis(10)
            )
        ),
        other => panic!("expected SCHED_DEADLINE, got {other}"),
    }
    // Global: a reservation spanning the shared cores.
    let mut global = event_triggered("global", 100, 1000);
    global.placement = tessera_policy::Placement::Global;
    s.create_cell(global, true).unwrap();
    let g = join("global");
    assert!(matches!(
        sched::get_policy(g.tid).unwrap(),
        Policy::Deadline(_)
    ));
    let shared = s
        .status()
        .unwrap()
        .cores
        .iter()
        .filter(|c| c.mode == tessera_policy::CoreMode::Shared)
        .map(|c| c.core)
        .collect::<Vec<_>>();
    assert_eq!(tessera_sys::affinity::get_affinity(g.tid).unwrap(), shared);
    // Best-effort with a weight: a cpu-controller group with that weight.
    s.create_cell(tessera_policy::CellRequest::best_effort("batch", 20), true)
        .unwrap();
    let be = join("batch");
    let cpu = tessera_sys::proc::cgroup_of(be.tid, Some("cpu")).unwrap();
    assert!(cpu.ends_with("/batch"), "{cpu}");
    let shares = std::fs::read_to_string(format!("/sys/fs/cgroup/cpu{cpu}/cpu.shares")).unwrap();
    assert_eq!(
        shares.trim(),
        "204",
        "weight 20 of 100 is 20 % of 1024 shares"
    );
    assert_eq!(
        sched::get_policy(be.tid).unwrap(),
        Policy::Other { nice: 0 }
    );
    for t in [tt, g, be] {
        t.finish();
    }
}

#[test]
fn the_kernels_own_refusal_names_requested_and_held_bandwidth() {
    let Some(_m) = privileged("ebusy") else {
        return;
    };
    let cpus = tessera_sys::kernel::online_cpus().unwrap().len() as u32;
    let heavy = Policy::Deadline(sched::DeadlineParams {
        runtime: Duration::from_micros(950),
        deadline: Duration::from_millis(1),
        period: Duration::from_millis(1),
        flags: sched::DeadlineFlags::RESET_ON_FORK,
    });
    // One more 0.95 than the machine's CPUs can hold (0.90 each).
    let threads: Vec<Parked> = (0..=cpus).map(|_| Parked::spawn(|| ())).collect();
    let results: Vec<_> = threads
        .iter()
        .map(|t| sched::set_policy(t.tid, &heavy))
        .collect();
    for t in &threads {
        let _ = sched::set_policy(t.tid, &Policy::Other { nice: 0 });
    }
    let refused = results
        .iter()
        .find_map(|r| r.as_ref().err())
        .expect("the kernel refused the last one");
    assert_eq!(refused.kind, tessera_sys::ErrorKind::Busy);
    let text = refused.to_string();
    assert!(
        text.contains("refused bandwidth 0.950") && text.contains("SCHED_DEADLINE thread(s) hold"),
        "{text}"
    );
    for t in threads {
        t.finish();
    }
}

#[test]
fn a_cpuset_only_member_shares_the_cells_core_at_its_own_policy_and_takes_no_slot() {
    let Some(m) = privileged("cpuset-only") else {
        return;
    };
    let mut s = m.session();
    let info = s
        .create_cell(event_triggered("synth", 300, 1000), true)
        .unwrap();
    let core = info.grant.reservations[0].core.expect("partitioned");
    let plain = Parked::spawn(|| ());
    let me = std::process::id() as i32;
    s.attach_cpuset_only("synth", me, Some(plain.tid)).unwrap();
    assert_eq!(
        sched::get_policy(plain.tid).unwrap(),
        Policy::Other { nice: 0 },
        "its policy is its own"
    );
    assert_eq!(
        tessera_sys::proc::cgroup_of(plain.tid, Some("cpuset")).unwrap(),
        format!("/tessera/core{core}")
    );
    assert_eq!(
        s.show("synth").unwrap().free_slots,
        Some(1),
        "it holds no reservation"
    );
    let paths = m.paths.clone();
    let reserved = Parked::spawn(move || {
        tessera_broker::Session::embedded(paths)
            .join_current_thread("synth")
            .unwrap()
    });
    assert!(matches!(
        sched::get_policy(reserved.tid).unwrap(),
        Policy::Deadline(_)
    ));
    // A program that re-sets its own policy keeps it when the thread leaves.
    sched::set_policy(plain.tid, &Policy::Other { nice: 5 }).unwrap();
    s.detach(plain.tid).unwrap();
    assert_eq!(
        sched::get_policy(plain.tid).unwrap(),
        Policy::Other { nice: 5 }
    );
    assert_ne!(
        tessera_sys::proc::cgroup_of(plain.tid, Some("cpuset")).unwrap(),
        format!("/tessera/core{core}")
    );
    s.destroy_cell("synth").unwrap();
    assert_eq!(
        sched::get_policy(reserved.tid).unwrap(),
        Policy::Other { nice: 0 }
    );
    plain.finish();
    reserved.finish();
}

#[test]
fn a_cell_for_a_thread_that_cannot_be_attached_is_not_left_behind() {
    let Some(m) = privileged("cell-for-thread") else {
        return;
    };
    let (mut broker, _) = tessera_broker::Broker::open(
        m.paths.clone(),
        tessera_broker::config::Config::default(),
        "test".into(),
    )
    .unwrap();
    let owner = tessera_broker::state::Owner {
        uid: 0,
        process: None,
    };
    let me = tessera_sys::proc::current_pid();
    // PID 1's thread is not a thread of this process.
    let err = broker
        .create_cell_for_thread(event_triggered("stray", 100, 1000), owner.clone(), me, 1)
        .unwrap_err();
    assert!(broker.status().cells.is_empty(), "{err}: no cell left");
    // Under global EDF, as the RTKit interface asks: a sleeping thread of
    // this process cannot be moved into a partitioned core from outside.
    let t = Parked::spawn(|| {});
    let mut mine = event_triggered("mine", 100, 1000);
    mine.placement = tessera_policy::Placement::Global;
    broker
        .create_cell_for_thread(mine, owner, me, t.tid)
        .unwrap();
    assert!(matches!(
        sched::get_policy(t.tid).unwrap(),
        Policy::Deadline(_)
    ));
    broker.destroy_cell("mine", 0).unwrap();
    t.finish();
}

#[test]
fn a_member_moved_between_cells_stays_reserved_and_is_restored_when_it_leaves() {
    let Some(m) = privileged("move-member") else {
        return;
    };
    let mut s = m.session();
    let info = s
        .create_cell(event_triggered("on-a-core", 800, 10_000), true)
        .unwrap();
    let core = info.grant.reservations[0].core.expect("partitioned");
    let mut global = event_triggered("global", 100, 10_000);
    global.placement = tessera_policy::Placement::Global;
    s.create_cell(global, true).unwrap();
    let paths = m.paths.clone();
    let t = Parked::spawn(move || {
        tessera_broker::Session::embedded(paths)
            .join_current_thread("on-a-core")
            .unwrap();
    });
    s.move_member(t.tid, "global").unwrap();
    match sched::get_policy(t.tid).unwrap() {
        Policy::Deadline(p) => assert_eq!(p.runtime, Duration::from_micros(100)),
        other => panic!("expected the global cell's reservation, got {other}"),
    }
    assert_ne!(
        tessera_sys::proc::cgroup_of(t.tid, Some("cpuset")).unwrap(),
        format!("/tessera/core{core}")
    );
    let cells = s.cell_of_threads();
    assert_eq!(cells.get(&t.tid).map(String::as_str), Some("global"));
    // Its old cell lets go of nothing it still holds.
    s.destroy_cell("on-a-core").unwrap();
    assert!(matches!(
        sched::get_policy(t.tid).unwrap(),
        Policy::Deadline(_)
    ));
    let err = s.move_member(t.tid, "no-such-cell").unwrap_err();
    assert!(err.to_string().contains("no-such-cell"), "{err}");
    s.destroy_cell("global").unwrap();
    assert_eq!(
        sched::get_policy(t.tid).unwrap(),
        Policy::Other { nice: 0 },
        "leaving gives back what it had before its first cell"
    );
    t.finish();
}

/// A reserved thread asleep on the core that is then partitioned for
/// another cell is left counted on that core while its affinity no longer
/// includes it, and the kernel refuses it new parameters there (EPERM): a
/// guard moving a server's thread onto its new core hit this at every
/// layout change. The move wakes it onto its affinity and carries it.
#[test]
fn a_member_asleep_on_a_core_just_partitioned_moves_onto_it() {
    let Some((m, core)) = privileged_with_a_second_core("move-stranded") else {
        return;
    };
    let mut s = m.session();
    let mut global = event_triggered("global", 100, 10_000);
    global.placement = tessera_policy::Placement::Global;
    s.create_cell(global, true).unwrap();
    let sleeper = Sleeper::start();
    let pid = sleeper.pid();
    // It last runs on `core`, then sleeps there, reserved under global EDF.
    tessera_sys::affinity::set_affinity(pid, &[core]).unwrap();
    sleeper.wait_until_last_on(core);
    s.attach("global", pid, Some(pid)).unwrap();
    assert_eq!(tessera_sys::proc::last_cpu(pid, pid), Some(core));
    s.create_cell(
        event_triggered("on-core", 500, 10_000).on_cores(vec![core]),
        true,
    )
    .unwrap();
    assert!(
        !tessera_sys::affinity::get_affinity(pid)
            .unwrap()
            .contains(&core),
        "the partition took its core out of the sleeper's affinity"
    );
    s.move_member(pid, "on-core").unwrap();
    match sched::get_policy(pid).unwrap() {
        Policy::Deadline(p) => assert_eq!(p.runtime, Duration::from_micros(500)),
        other => panic!("expected the core's reservation, got {other}"),
    }
    assert_eq!(
        tessera_sys::proc::cgroup_of(pid, Some("cpuset")).unwrap(),
        format!("/tessera/core{core}")
    );
    s.destroy_cell("on-core").unwrap();
    s.destroy_cell("global").unwrap();
    drop(sleeper);
}

/// An embedded session keeps its broker between requests only while the
/// state file is the one it saved: two sessions taking turns each see what
/// the other changed (a kept broker that missed a change would refuse a
/// name the other freed, and list a cell the other destroyed).
#[test]
fn two_embedded_sessions_taking_turns_each_see_the_others_changes() {
    let Some(m) = privileged("turns") else {
        return;
    };
    let mut a = m.session();
    let mut b = tessera_broker::Session::embedded(m.paths.clone());
    let names = |s: &mut tessera_broker::Session| -> Vec<String> {
        s.list().unwrap().into_iter().map(|c| c.name).collect()
    };
    a.create_cell(event_triggered("first", 100, 10_000), false)
        .unwrap();
    assert_eq!(names(&mut a), ["first"], "a's own change");
    b.create_cell(event_triggered("second", 100, 10_000), false)
        .unwrap();
    assert_eq!(names(&mut a), ["first", "second"], "b's change, seen by a");
    a.destroy_cell("second").unwrap();
    assert_eq!(names(&mut b), ["first"], "a's change, seen by b");
    b.destroy_cell("first").unwrap();
    a.create_cell(event_triggered("first", 100, 10_000), false)
        .expect("the name b freed");
    a.destroy_cell("first").unwrap();
    assert!(names(&mut b).is_empty());
}

/// The reaper's look for members the kernel stopped running
/// (`tessera_broker::stranded`) never takes a member that runs, nor one
/// asleep, for one: through two and a half seconds of reaps (the daemon's
/// every 200 ms) neither is given its reservation again, and both keep it.
#[test]
fn a_member_that_runs_or_sleeps_is_never_taken_for_stranded() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let Some(m) = privileged("stranded-look") else {
        return;
    };
    let mut s = m.session();
    s.create_cell(event_triggered("spins", 1_000, 10_000), true)
        .unwrap();
    s.create_cell(event_triggered("sleeps", 100, 10_000), true)
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (paths, spinning) = (m.paths.clone(), Arc::clone(&stop));
    let spinner = std::thread::spawn(move || {
        tessera_broker::Session::embedded(paths)
            .join_current_thread("spins")
            .unwrap();
        tid_tx.send(tessera_sys::proc::current_tid()).unwrap();
        // Throttled nine tenths of each period, never asleep.
        while !spinning.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
    });
    let spins = tid_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let paths = m.paths.clone();
    let asleep = Parked::spawn(move || {
        tessera_broker::Session::embedded(paths)
            .join_current_thread("sleeps")
            .unwrap();
    });
    let notes: Vec<String> = {
        let _lock = tessera_broker::session::hold_lock(&m.paths, Duration::from_secs(10)).unwrap();
        let (mut broker, _) = tessera_broker::Broker::open(
            m.paths.clone(),
            tessera_broker::config::Config::default(),
            "test".into(),
        )
        .unwrap();
        (0..13)
            .flat_map(|_| {
                std::thread::sleep(Duration::from_millis(200));
                broker.reap()
            })
            .collect()
    };
    assert!(notes.iter().all(|n| !n.contains("got no CPU")), "{notes:?}");
    for (tid, runtime_us) in [(spins, 1_000), (asleep.tid, 100)] {
        match sched::get_policy(tid).unwrap() {
            Policy::Deadline(p) => assert_eq!(p.runtime, Duration::from_micros(runtime_us)),
            other => panic!("thread {tid} lost its reservation: {other}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    s.destroy_cell("spins").unwrap();
    s.destroy_cell("sleeps").unwrap();
    asleep.finish();
}
