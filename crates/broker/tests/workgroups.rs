//! Workgroups through the broker (as root, on a private state directory,
//! the machine reset afterwards): created on first open and bound to the
//! opener, joined by a thread of the same user, refused past their
//! capacity, to another user, by an unknown name and for a cell without
//! reservations; a member that leaves gets its scheduling back; a thread
//! that held a reservation of its own leaves it to join; under global EDF
//! a workgroup holds more members than the machine has cores; each member
//! holds a budget of its own, and an empty reservation the largest when
//! it fits, what it holds when not (never a member's room); on one core
//! the members give way to another cell's smaller thread that grows; root
//! opens an audio server's workgroup for the server's user.

use std::time::Duration;
use tessera_broker::config::Config;
use tessera_broker::daemon::handle;
use tessera_broker::session::hold_lock;
use tessera_broker::{Broker, ErrorCode, MemberBudget, Request, WorkgroupInfo, WorkgroupShape};
use tessera_policy::{Budget, CellRequest};
use tessera_sys::ipc::PeerCredentials;
use tessera_sys::sched::{self, Policy};
use tessera_testkit::{privileged, privileged_with_a_second_core};

const PERIOD: u64 = 10_000_000;

fn shape(capacity: usize) -> WorkgroupShape {
    WorkgroupShape {
        capacity,
        budget: Budget::new(1_000_000, PERIOD),
        core: None,
        for_process: None,
    }
}

/// [`shape`] with every reservation on `core`, partitioned.
fn shape_on(core: usize, capacity: usize) -> WorkgroupShape {
    WorkgroupShape {
        core: Some(core),
        ..shape(capacity)
    }
}

/// A thread of this process that wakes every millisecond, as a periodic
/// thread does: a thread of the broker's own process is moved to a
/// partitioned core as it wakes. It stops when told, or after 30 s.
struct Waking {
    tid: i32,
    stop: std::sync::mpsc::Sender<()>,
    handle: std::thread::JoinHandle<()>,
}

impl Waking {
    fn start() -> Waking {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            let _ = tx.send(tessera_sys::proc::current_tid());
            let until = std::time::Instant::now() + Duration::from_secs(30);
            while stop_rx.try_recv().is_err() && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let tid = rx.recv().unwrap();
        Waking { tid, stop, handle }
    }

    fn stop(self) {
        let _ = self.stop.send(());
        self.handle.join().unwrap();
    }
}

/// The runtimes workgroup `name`'s reservations hold, smallest first.
fn runtimes_held(session: &mut tessera_broker::Session, name: &str) -> Vec<u64> {
    let cell = session.show(name).unwrap();
    let mut runtimes: Vec<u64> = cell
        .grant
        .reservations
        .iter()
        .map(|r| r.budget.runtime_ns)
        .collect();
    runtimes.sort();
    runtimes
}

fn me(uid: u32) -> PeerCredentials {
    PeerCredentials {
        pid: tessera_sys::proc::current_pid(),
        uid,
        gid: uid,
    }
}

#[test]
fn a_workgroup_is_opened_joined_left_and_refused_with_its_codes() {
    let Some(machine) = privileged("a_workgroup_is_opened_joined_left_and_refused_with_its_codes")
    else {
        return;
    };
    let mut session = machine.session();
    let unknown = session.open_workgroup("wg-none", None).unwrap_err();
    assert_eq!(unknown.code, ErrorCode::NotFound, "{unknown}");

    let wg = session.open_workgroup("wg-test", Some(shape(1))).unwrap();
    assert_eq!((wg.capacity, wg.members.len()), (1, 0));
    assert_eq!(wg.budget, Budget::new(1_000_000, PERIOD));
    // A second open finds it, whatever shape it asks for.
    assert_eq!(
        session.open_workgroup("wg-test", Some(shape(2))).unwrap(),
        wg
    );

    let tid = tessera_sys::proc::current_tid();
    let joined = session.join_workgroup("wg-test", tid).unwrap();
    assert_eq!(joined.members, vec![tid]);
    assert!(matches!(
        sched::get_policy(tid).unwrap(),
        Policy::Deadline(_)
    ));

    // Past its capacity: another thread of this process is refused.
    let (tx, rx) = std::sync::mpsc::channel();
    let other = std::thread::spawn(move || {
        let _ = tx.send(tessera_sys::proc::current_tid());
        std::thread::sleep(Duration::from_millis(500));
    });
    let other_tid = rx.recv().unwrap();
    let full = session.join_workgroup("wg-test", other_tid).unwrap_err();
    assert_eq!(full.code, ErrorCode::Refused, "{full}");
    other.join().unwrap();

    // Another user's workgroup, seen by the broker as that user would be.
    {
        let _lock = hold_lock(&machine.paths, Duration::from_secs(10)).unwrap();
        let (mut broker, _) =
            Broker::open(machine.paths.clone(), Config::default(), "test".into()).unwrap();
        let open = Request::OpenWorkgroup {
            name: "wg-test".into(),
            create: None,
        };
        let refused = handle(&mut broker, open.clone(), me(65534)).unwrap_err();
        assert_eq!(refused.code, ErrorCode::Permission, "{refused}");
        let join = Request::JoinWorkgroup {
            name: "wg-test".into(),
            tid,
        };
        let refused = handle(&mut broker, join, me(65534)).unwrap_err();
        assert_eq!(refused.code, ErrorCode::Permission, "{refused}");
        let seen: WorkgroupInfo =
            serde_json::from_value(handle(&mut broker, open, me(0)).unwrap()).unwrap();
        assert_eq!(seen.members, vec![tid], "root opens anyone's");
    }

    // A cell without reservations is no workgroup.
    let request = CellRequest::new(
        "wg-plain",
        tessera_policy::CellPolicy::BestEffort,
        tessera_policy::CoreRequest::Count(1),
        None,
    );
    session.create_cell(request, false).unwrap();
    let invalid = session.open_workgroup("wg-plain", None).unwrap_err();
    assert_eq!(invalid.code, ErrorCode::Invalid, "{invalid}");

    let not_member = session.leave_workgroup("wg-test", other_tid).unwrap_err();
    assert_eq!(not_member.code, ErrorCode::NotFound, "{not_member}");
    session.leave_workgroup("wg-test", tid).unwrap();
    assert!(!matches!(
        sched::get_policy(tid).unwrap(),
        Policy::Deadline(_)
    ));
    assert!(session
        .open_workgroup("wg-test", None)
        .unwrap()
        .members
        .is_empty());
}

#[test]
fn a_thread_in_a_cell_of_its_own_moves_in_and_members_may_outnumber_the_cores() {
    let Some(machine) =
        privileged("a_thread_in_a_cell_of_its_own_moves_in_and_members_may_outnumber_the_cores")
    else {
        return;
    };
    let mut session = machine.session();
    let cores = tessera_sys::kernel::online_cpus().unwrap().len();
    let wg = session
        .open_workgroup("wg-wide", Some(shape(cores + 1)))
        .unwrap();
    assert_eq!(
        wg.capacity,
        cores + 1,
        "global EDF: more members than cores"
    );

    // The thread holds a reservation of its own, as a guard gives it.
    let mut own = CellRequest::event_triggered("wg-own", 500_000, 5_000_000);
    own.placement = tessera_policy::Placement::Global;
    session.create_cell(own, true).unwrap();
    let (pid, tid) = (
        tessera_sys::proc::current_pid(),
        tessera_sys::proc::current_tid(),
    );
    session.attach("wg-own", pid, Some(tid)).unwrap();

    let joined = session.join_workgroup("wg-wide", tid).unwrap();
    assert_eq!(joined.members, vec![tid]);
    assert!(
        session.show("wg-own").unwrap().members.is_empty(),
        "it left the cell it was in"
    );
    let Policy::Deadline(params) = sched::get_policy(tid).unwrap() else {
        panic!("the member reads back SCHED_DEADLINE");
    };
    assert_eq!(
        params.period,
        Duration::from_nanos(PERIOD),
        "the workgroup's"
    );
    session.leave_workgroup("wg-wide", tid).unwrap();
    assert!(!matches!(
        sched::get_policy(tid).unwrap(),
        Policy::Deadline(_)
    ));
}

/// The runtime thread `tid` reads back.
fn runtime_of(tid: i32) -> Duration {
    let Policy::Deadline(params) = sched::get_policy(tid).unwrap() else {
        panic!("thread {tid} reads back SCHED_DEADLINE");
    };
    params.runtime
}

#[test]
fn each_member_holds_a_budget_of_its_own() {
    let Some(machine) = privileged("each_member_holds_a_budget_of_its_own") else {
        return;
    };
    let mut session = machine.session();
    session.open_workgroup("wg-each", Some(shape(3))).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(tessera_sys::proc::current_tid());
        let _ = stop_rx.recv_timeout(Duration::from_secs(30));
    });
    let (callback, worker_tid) = (tessera_sys::proc::current_tid(), rx.recv().unwrap());
    session.join_workgroup("wg-each", callback).unwrap();
    session.join_workgroup("wg-each", worker_tid).unwrap();

    let budget = |tid, runtime| MemberBudget {
        tid,
        budget: Budget::new(runtime, PERIOD),
    };
    let reply = session
        .resize_members(
            "wg-each",
            vec![budget(callback, 3_000_000), budget(worker_tid, 1_500_000)],
            false,
        )
        .unwrap();
    assert!(!reply.degraded);
    assert_eq!(
        reply.budgets,
        [budget(callback, 3_000_000), budget(worker_tid, 1_500_000)]
    );
    assert_eq!(runtime_of(callback), Duration::from_micros(3000));
    assert_eq!(runtime_of(worker_tid), Duration::from_micros(1500));
    assert_eq!(
        runtimes_held(&mut session, "wg-each"),
        [1_500_000, 3_000_000, 3_000_000],
        "the empty one holds the largest"
    );
    assert_eq!(
        session.open_workgroup("wg-each", None).unwrap().budget,
        Budget::new(3_000_000, PERIOD)
    );

    // Naming one member leaves the other's budget as it was.
    session
        .resize_members("wg-each", vec![budget(worker_tid, 1_000_000)], false)
        .unwrap();
    assert_eq!(runtime_of(callback), Duration::from_micros(3000));
    assert_eq!(runtime_of(worker_tid), Duration::from_micros(1000));

    // A thread that is no member, and no budget at all, are refused and change nothing.
    let stranger = session
        .resize_members("wg-each", vec![budget(1, 1_000_000)], false)
        .unwrap_err();
    assert_eq!(stranger.code, ErrorCode::NotFound, "{stranger}");
    let none = session
        .resize_members("wg-each", vec![], false)
        .unwrap_err();
    assert_eq!(none.code, ErrorCode::Invalid, "{none}");
    // More than the machine has: refused, or with degrade capped.
    let huge = vec![budget(callback, PERIOD), budget(worker_tid, 1_000_000)];
    let refused = session.resize_members("wg-each", huge.clone(), false);
    let capped = session.resize_members("wg-each", huge, true);
    if let Err(e) = refused {
        assert_eq!(e.code, ErrorCode::Refused, "{e}");
        let capped = capped.unwrap();
        assert!(capped.degraded);
        assert!(capped.budgets[0].budget.runtime_ns < PERIOD);
        assert_eq!(
            capped.budgets[1],
            budget(worker_tid, 1_000_000),
            "below the cap: its own"
        );
    }
    assert_eq!(runtime_of(worker_tid), Duration::from_micros(1000));
    let _ = stop_tx.send(());
    worker.join().unwrap();
}

#[test]
fn a_workgroup_on_one_core_holds_its_members_there() {
    let Some((machine, core)) =
        privileged_with_a_second_core("a_workgroup_on_one_core_holds_its_members_there")
    else {
        return;
    };
    let mut session = machine.session();
    let on_core = shape_on(core, 2);
    let wg = session.open_workgroup("wg-core", Some(on_core)).unwrap();
    assert_eq!(wg.capacity, 2);
    let cell = session.show("wg-core").unwrap();
    assert!(
        cell.grant.reservations.iter().all(|r| r.core == Some(core)),
        "both reservations on core {core}: {:?}",
        cell.grant.reservations
    );
    let other = Waking::start();
    let tids = [tessera_sys::proc::current_tid(), other.tid];
    for tid in tids {
        session.join_workgroup("wg-core", tid).unwrap();
        assert!(matches!(
            sched::get_policy(tid).unwrap(),
            Policy::Deadline(_)
        ));
        assert_eq!(tessera_sys::affinity::get_affinity(tid).unwrap(), [core]);
    }
    // A third is past its capacity, and a core that cannot take the budgets refuses the workgroup.
    let too_much = WorkgroupShape {
        core: Some(core),
        capacity: 64,
        budget: Budget::new(PERIOD / 10, PERIOD),
        ..shape(64)
    };
    let refused = session
        .open_workgroup("wg-core-full", Some(too_much))
        .unwrap_err();
    assert_eq!(refused.code, ErrorCode::Refused, "{refused}");
    for tid in tids {
        session.leave_workgroup("wg-core", tid).unwrap();
    }
    other.stop();
}

/// On one core, a member's budget that would not fit with every empty
/// place at it too is granted in full, the empty places keeping what they
/// hold: §4.5's ten places at the first member's budget filled the core.
#[test]
fn an_empty_place_never_takes_room_from_a_member() {
    let Some((machine, core)) =
        privileged_with_a_second_core("an_empty_place_never_takes_room_from_a_member")
    else {
        return;
    };
    let mut session = machine.session();
    let on_core = shape_on(core, 4);
    session.open_workgroup("wg-places", Some(on_core)).unwrap();
    let tid = tessera_sys::proc::current_tid();
    session.join_workgroup("wg-places", tid).unwrap();
    // 40 % of the core: four places at it would not fit, one does.
    let wanted = MemberBudget {
        tid,
        budget: Budget::new(PERIOD * 4 / 10, PERIOD),
    };
    let reply = session
        .resize_members("wg-places", vec![wanted], true)
        .unwrap();
    assert!(!reply.degraded, "{reply:?}");
    assert_eq!(reply.budgets, [wanted]);
    assert_eq!(runtime_of(tid), Duration::from_nanos(PERIOD * 4 / 10));
    assert_eq!(
        runtimes_held(&mut session, "wg-places"),
        [1_000_000, 1_000_000, 1_000_000, PERIOD * 4 / 10],
        "the empty places keep their opening budget"
    );
    session.leave_workgroup("wg-places", tid).unwrap();
}

/// On one core, a workgroup's members that fill what another cell leaves
/// give way when that cell — smaller than a member — grows: its thread and
/// the member read back the new runtimes, the member's shrunk first (§4.5:
/// the server's driver was held at its floor beside ten members).
#[test]
fn a_workgroup_on_a_core_gives_way_to_its_servers_smaller_thread() {
    let Some((machine, core)) = privileged_with_a_second_core(
        "a_workgroup_on_a_core_gives_way_to_its_servers_smaller_thread",
    ) else {
        return;
    };
    let mut session = machine.session();
    let driver =
        CellRequest::event_triggered("wg-driver", PERIOD / 20, PERIOD).on_cores(vec![core]);
    session.create_cell(driver, true).unwrap();
    session.join_current_thread("wg-driver").unwrap();
    let driver_tid = tessera_sys::proc::current_tid();
    session
        .open_workgroup("wg-way", Some(shape_on(core, 1)))
        .unwrap();
    let member = Waking::start();
    let member_tid = member.tid;
    session.join_workgroup("wg-way", member_tid).unwrap();
    let all = MemberBudget {
        tid: member_tid,
        budget: Budget::new(PERIOD * 9 / 10, PERIOD),
    };
    let filled = session.resize_members("wg-way", vec![all], true).unwrap();
    assert!(filled.degraded, "the driver's 5 % is beside it: {filled:?}");
    let member_before = runtime_of(member_tid);
    let status = session.status().unwrap();
    let on_core = status.cores.iter().find(|c| c.core == core).unwrap();
    let giving = on_core.giving_way.clone();
    assert_eq!(
        giving.len(),
        1,
        "the member's reservation gives way: {giving:?}"
    );

    let grown = session
        .resize_cell("wg-driver", Budget::new(PERIOD * 15 / 100, PERIOD), true)
        .unwrap();
    assert!(!grown.degraded, "{grown:?}");
    assert_eq!(
        runtime_of(driver_tid),
        Duration::from_nanos(PERIOD * 15 / 100)
    );
    let member_after = runtime_of(member_tid);
    let given = member_before - member_after;
    assert!(
        given >= Duration::from_nanos(PERIOD / 10)
            && given < Duration::from_nanos(PERIOD / 10 + 10_000),
        "the member gave the driver its 10 % more: {member_before:?} → {member_after:?}"
    );
    assert_eq!(
        runtimes_held(&mut session, "wg-way"),
        [member_after.as_nanos() as u64]
    );
    // Past a member's size it gives no way: the driver gets what is free.
    let past = session
        .resize_cell("wg-driver", Budget::new(PERIOD * 8 / 10, PERIOD), true)
        .unwrap();
    assert!(past.degraded);
    assert_eq!(runtime_of(member_tid), member_after);

    session.leave_workgroup("wg-way", member_tid).unwrap();
    session.detach(driver_tid).unwrap();
    member.stop();
}

/// A new cell on a core a workgroup's member fills is given way as a
/// resize is: the member's reservation shrinks in the kernel before the
/// newcomer's thread attaches, and one larger than the member is refused
/// with the member untouched (§4.5: the peer's real-time threads that
/// appeared after its clients' workgroup were refused).
#[test]
fn a_new_cell_on_a_workgroups_full_core_is_given_way() {
    let Some((machine, core)) =
        privileged_with_a_second_core("a_new_cell_on_a_workgroups_full_core_is_given_way")
    else {
        return;
    };
    let mut session = machine.session();
    session
        .open_workgroup("wg-new", Some(shape_on(core, 1)))
        .unwrap();
    let member = Waking::start();
    let member_tid = member.tid;
    session.join_workgroup("wg-new", member_tid).unwrap();
    let all = MemberBudget {
        tid: member_tid,
        budget: Budget::new(PERIOD, PERIOD),
    };
    let filled = session.resize_members("wg-new", vec![all], true).unwrap();
    assert!(filled.degraded, "the core's whole capacity: {filled:?}");
    let member_before = runtime_of(member_tid);

    let newcomer =
        CellRequest::event_triggered("wg-newcomer", PERIOD / 20, PERIOD).on_cores(vec![core]);
    session.create_cell(newcomer, true).unwrap();
    let member_after = runtime_of(member_tid);
    let given = member_before - member_after;
    assert!(
        given.abs_diff(Duration::from_nanos(PERIOD / 20)) < Duration::from_micros(10),
        "the member gave the newcomer its 5 %: {member_before:?} → {member_after:?}"
    );
    session.join_current_thread("wg-newcomer").unwrap();
    let newcomer_tid = tessera_sys::proc::current_tid();
    assert_eq!(runtime_of(newcomer_tid), Duration::from_nanos(PERIOD / 20));

    let larger = CellRequest::event_triggered("wg-larger", PERIOD, PERIOD).on_cores(vec![core]);
    let refused = session.create_cell(larger, true).unwrap_err();
    assert_eq!(refused.code, ErrorCode::Refused, "{refused}");
    assert_eq!(runtime_of(member_tid), member_after);

    session.detach(newcomer_tid).unwrap();
    session.leave_workgroup("wg-new", member_tid).unwrap();
    member.stop();
}

#[test]
fn root_opens_an_audio_servers_workgroup_for_its_user_and_it_lives_as_long_as_the_server() {
    let Some(machine) = privileged("root_opens_an_audio_servers_workgroup_for_its_user") else {
        return;
    };
    // The "server": a process of another user (nobody).
    let mut server = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sleep",
            "60",
        ])
        .spawn()
        .expect("setpriv (util-linux)");
    let pid = server.id() as i32;
    let since = std::time::Instant::now();
    while tessera_sys::proc::owner_uid(pid).ok() != Some(65534) {
        assert!(
            since.elapsed() < Duration::from_secs(5),
            "the server runs as nobody"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let for_server = WorkgroupShape {
        for_process: Some(pid),
        ..shape(4)
    };
    {
        let _lock = hold_lock(&machine.paths, Duration::from_secs(10)).unwrap();
        let (mut broker, _) =
            Broker::open(machine.paths.clone(), Config::default(), "test".into()).unwrap();
        let open = |name: &str| Request::OpenWorkgroup {
            name: name.into(),
            create: Some(for_server),
        };
        // Not root: refused, and nothing is made.
        let refused = handle(&mut broker, open("wg-server"), me(1000)).unwrap_err();
        assert_eq!(refused.code, ErrorCode::Permission, "{refused}");
        assert!(broker.show("wg-server").is_err());
        // Root: owned by the server's user, bound to the server.
        let opened: WorkgroupInfo =
            serde_json::from_value(handle(&mut broker, open("wg-server"), me(0)).unwrap()).unwrap();
        assert_eq!((opened.owner_uid, opened.capacity), (65534, 4));
        let cell = broker.show("wg-server").unwrap();
        assert_eq!(cell.bound_to_pid, Some(pid));
        // The server's user opens it as its own.
        let server_user = PeerCredentials {
            pid,
            uid: 65534,
            gid: 65534,
        };
        let seen = handle(&mut broker, open("wg-server"), server_user);
        assert!(seen.is_ok(), "{seen:?}");
        // The server ends: so does its workgroup.
        server.kill().unwrap();
        server.wait().unwrap();
        broker.reap();
        let gone = broker.show("wg-server").unwrap_err();
        assert_eq!(gone.code, ErrorCode::NotFound, "{gone}");
    }
}
