//! The JACK bridge (root): Debian's jackd2 on its dummy driver, guarded by
//! `tessera guard`'s guard, which opens the server's workgroup
//! (`--workgroup`: bound to jackd, owned by its user), and tessera-jack-peer
//! with one load that joins it on its first cycle and marks every cycle
//! after. Its thread ends in the workgroup — SCHED_DEADLINE with the
//! cycle's period — the guard leaves it to the workgroup's controller,
//! libtessera's counts for it advance, and the guard closes the workgroup
//! when it stops. Everything started here is ended by its PID, and the
//! machine reset, even when the test fails.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tessera_broker::workgroup::jack_server_workgroup;
use tessera_guard::guard::{Guard, Settings};
use tessera_guard::server::Server;
use tessera_jack_peer::record::PeerRecord;
use tessera_sys::sched::{self, Policy};
use tessera_testkit::jackd::Jackd;
use tessera_testkit::{privileged, Reaped};

/// One name for every run (see [`Jackd::start`]).
const JACK_NAME: &str = "tessera-bridge-test";
/// 256 frames at 48 kHz.
const FRAMES: u32 = 256;
const PERIOD_NS: u64 = 5_333_333;
/// How long the peer records.
const SECONDS: u64 = 6;

/// The member thread, once it holds the workgroup's reservation at the
/// cycle's period and the guard holds none for it.
fn member_at_the_cycles_period(machine: &tessera_testkit::Machine, guard: &Guard) -> Option<i32> {
    let wg = machine
        .session()
        .open_workgroup(guard.workgroup()?, None)
        .ok()?;
    let &[tid] = wg.members.as_slice() else {
        return None;
    };
    let Ok(Policy::Deadline(params)) = sched::get_policy(tid) else {
        return None;
    };
    let guarded = guard.status().threads.iter().any(|t| t.tid == tid);
    (params.period == Duration::from_nanos(PERIOD_NS) && !guarded).then_some(tid)
}

#[test]
fn a_guarded_servers_client_marks_its_cycles_in_a_workgroup() {
    let Some(machine) = privileged("a_guarded_servers_client_marks_its_cycles_in_a_workgroup")
    else {
        return;
    };
    let jackd = Jackd::start(JACK_NAME, FRAMES);
    let server = Server::jack(JACK_NAME, Some(jackd.pid())).expect("the guard finds jackd");
    let settings = Settings {
        workgroup: Some(2),
        ..Settings::default()
    };
    let mut guard = Guard::start(machine.session(), server, settings).expect("guard starts");
    let workgroup = jack_server_workgroup(JACK_NAME).unwrap();
    assert_eq!(guard.workgroup(), Some(workgroup.as_str()));
    let cell = machine.session().show(&workgroup).unwrap();
    assert_eq!(cell.bound_to_pid, Some(jackd.pid()), "{cell:?}");
    let jackd_uid = tessera_sys::proc::owner_uid(jackd.pid()).unwrap();
    assert_eq!(cell.owner_uid, jackd_uid, "{cell:?}");
    let out = machine.dir().join("peer.txt");
    let log = std::fs::File::create(machine.dir().join("peer.log")).unwrap();
    let mut peer = Reaped(
        Command::new(env!("CARGO_BIN_EXE_tessera-jack-peer"))
            .args(["--topology", "chain", "--loads", "1", "--load", "0.1"])
            .args(["--workgroup", &workgroup, "--seconds", &SECONDS.to_string()])
            .arg("--out")
            .arg(&out)
            .env("JACK_DEFAULT_SERVER", JACK_NAME)
            .env("TESSERA_RUN_DIR", machine.dir())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start tessera-jack-peer"),
    );
    let peer_log = || std::fs::read_to_string(machine.dir().join("peer.log")).unwrap_or_default();

    // Whoever came first — the guard reserving the client's real-time
    // thread, or the thread joining — the workgroup ends up holding it.
    let start = Instant::now();
    let member = loop {
        guard.step().expect("guard step");
        if let Some(tid) = member_at_the_cycles_period(&machine, &guard) {
            break tid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(SECONDS),
            "no member at the cycle's period; guard: {:?}; peer: {}",
            guard.status(),
            peer_log()
        );
    };
    // Past the guard's relayout (1 s), where it checks the broker's cells:
    // still the workgroup's, never the guard's.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_millis(1500) {
        guard.step().expect("guard step");
        assert_eq!(
            member_at_the_cycles_period(&machine, &guard),
            Some(member),
            "the guard left the member alone; peer: {}",
            peer_log()
        );
    }

    let limit = Instant::now() + Duration::from_secs(SECONDS + 15);
    while peer.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < limit, "the peer ends: {}", peer_log());
        guard.step().expect("guard step");
    }
    assert!(peer.0.wait().unwrap().success(), "peer: {}", peer_log());
    let record = PeerRecord::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let [load] = record.workgroup.as_slice() else {
        panic!("one load in the workgroup: {record:?}");
    };
    assert_eq!(load.joined, Some(0), "joined with a reservation");
    assert_eq!(
        record.threads[0], member,
        "the load's thread was the member"
    );
    // Every cycle since the join was marked: more than the recording's.
    let recorded = SECONDS * 1_000_000_000 / PERIOD_NS;
    assert!(
        load.cycles > recorded / 2,
        "member counts advance: {load:?} (about {recorded} cycles recorded)"
    );
    assert_eq!(load.period_ns, PERIOD_NS, "{load:?}");
    assert!(load.budget_ns > 0 && load.budget_ns < PERIOD_NS, "{load:?}");
    guard.stop();
    let closed = machine.session().show(&workgroup).unwrap_err();
    assert_eq!(closed.code, tessera_broker::ErrorCode::NotFound, "{closed}");
}
