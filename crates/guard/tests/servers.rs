//! The guard against the real audio servers (root): Debian's jackd2 with
//! its dummy driver, and PipeWire where its daemon starts on this machine.
//! A client joins and gets a reservation of its own, leaves and its
//! bandwidth returns; a client's busy worker thread at SCHED_OTHER gets its
//! application's share; the server is killed and everything is released.
//! Every server and client is started here and ended by its PID, even when
//! the test fails.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_guard::guard::{Guard, Kind, Settings};
use tessera_guard::server::Server;
use tessera_sys::sched::{self, Policy};
use tessera_testkit::jackd::{fifo_threads, Jackd};
use tessera_testkit::privileged;

/// A child process killed (by its PID) and reaped when dropped.
struct Started(Child);

impl Started {
    fn spawn(cmd: &mut Command) -> Started {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
        Started(child)
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Steps the guard until `done` holds or 10 s pass.
fn step_until(guard: &mut Guard, what: &str, done: impl Fn(&Guard) -> bool) {
    let start = Instant::now();
    while !done(guard) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting until {what}; status: {:?}",
            guard.status()
        );
        guard.step().expect("guard step");
    }
}

fn reserved_tids_of(guard: &Guard, pid: i32) -> Vec<i32> {
    guard
        .status()
        .threads
        .iter()
        .filter(|t| t.pid == pid)
        .map(|t| t.tid)
        .collect()
}

fn is_deadline(tid: i32) -> bool {
    matches!(sched::get_policy(tid), Ok(Policy::Deadline(_)))
}

/// One name for every run: a jackd that is killed keeps its entry in
/// JACK's server registry (8 entries), and only a server of the same name
/// reclaims it.
const JACK_NAME: &str = "tessera-guard-test";

/// Starts jackd (dummy driver, 256 frames at 48 kHz) as the guard sees it.
fn start_jackd() -> (Jackd, Server) {
    let jackd = Jackd::start(JACK_NAME, 256);
    let server = wait_for(|| Server::jack(JACK_NAME, Some(jackd.pid())).ok());
    (jackd, server)
}

#[test]
fn jackd_and_its_clients_get_reservations_of_their_own() {
    let Some(m) = privileged("guard-jackd") else {
        return;
    };
    let (mut jackd, server) = start_jackd();
    let name = JACK_NAME;
    let mut guard = Guard::start(m.session(), server, Settings::default()).expect("guard starts");
    let jack_pid = jackd.pid();
    step_until(&mut guard, "jackd's real-time thread is reserved", |g| {
        !reserved_tids_of(g, jack_pid).is_empty()
    });
    for tid in reserved_tids_of(&guard, jack_pid) {
        assert!(
            is_deadline(tid),
            "jackd thread {tid} reads back SCHED_DEADLINE"
        );
    }
    // The guard hears JACK2 by notice, outside its graph: the cycles are
    // counted from the server's frame time, and no thread of the guard's
    // runs them (none is reserved as real-time).
    step_until(&mut guard, "the graph's cycles are counted", |g| {
        g.status().cycles > 0
    });
    let me = std::process::id() as i32;
    assert!(
        guard
            .status()
            .threads
            .iter()
            .all(|t| t.pid != me || t.kind == Kind::Guard),
        "the guard's client takes no part in JACK2's cycles: {:?}",
        guard.status().threads
    );
    client_joins_and_leaves(
        &mut guard,
        &m,
        Command::new("jack_simple_client").env("JACK_DEFAULT_SERVER", name),
    );

    jackd.kill();
    step_until(&mut guard, "jackd's reservations are released", |g| {
        g.status().threads.iter().all(|t| t.pid != jack_pid)
    });
    assert!(!guard.server_alive());
    guard.stop();
    assert!(
        m.session().list().unwrap().is_empty(),
        "no cell left behind"
    );
}

/// Runs in a child process: a JACK client of the server named by
/// `TESSERA_TEST_WORKER_SERVER` whose process callback does nothing, beside
/// a worker thread of its own at SCHED_OTHER working 15 % of every 10 ms
/// (a network or disk thread), until killed. (Invoked by the test below.)
#[test]
fn jack_client_with_a_worker_helper() {
    let Ok(server) = std::env::var("TESSERA_TEST_WORKER_SERVER") else {
        return;
    };
    std::env::set_var("JACK_DEFAULT_SERVER", server);
    let (client, _) =
        jack::Client::new("tessera-worker-test", jack::ClientOptions::NO_START_SERVER).unwrap();
    let handler =
        jack::contrib::ClosureProcessHandler::new(|_: &jack::Client, _: &jack::ProcessScope| {
            jack::Control::Continue
        });
    let _active = client.activate_async((), handler).unwrap();
    std::thread::Builder::new()
        .name("worker".into())
        .spawn(|| loop {
            let start = Instant::now();
            while start.elapsed() < Duration::from_micros(1500) {
                std::hint::spin_loop();
            }
            std::thread::sleep(Duration::from_micros(8500));
        })
        .unwrap();
    std::thread::sleep(Duration::from_secs(60));
}

/// A JACK client whose worker thread is busy at SCHED_OTHER: its process
/// thread gets a reservation as a real-time thread, the worker one in the
/// application's share; both go when the client does.
#[test]
fn a_clients_busy_worker_thread_gets_its_application_share() {
    let Some(m) = privileged("guard-jackd-worker") else {
        return;
    };
    let (mut jackd, server) = start_jackd();
    let name = JACK_NAME;
    let mut guard = Guard::start(m.session(), server, Settings::default()).expect("guard starts");
    let mut client = Started::spawn(
        Command::new(std::env::current_exe().unwrap())
            .args(["jack_client_with_a_worker_helper", "--exact", "--nocapture"])
            .env("TESSERA_TEST_WORKER_SERVER", name),
    );
    let pid = client.pid();
    let kinds_of = |g: &Guard| -> Vec<Kind> {
        g.status()
            .threads
            .iter()
            .filter(|t| t.pid == pid)
            .map(|t| t.kind)
            .collect()
    };
    step_until(&mut guard, "the client's worker is in its share", |g| {
        kinds_of(g).contains(&Kind::Share) && kinds_of(g).contains(&Kind::RealTime)
    });
    let status = guard.status();
    let worker = status
        .threads
        .iter()
        .find(|t| t.pid == pid && t.kind == Kind::Share)
        .unwrap();
    assert!(
        is_deadline(worker.tid),
        "the worker reads back SCHED_DEADLINE"
    );
    // The floor, 2 % of a CPU, in the broker's fixed point (a few ns short
    // of 200 µs per 10 ms).
    assert!(
        status.share_reserved_cpus >= 0.0199,
        "at least the floor: {status:?}"
    );
    assert!(!status.placement.is_empty());

    client.kill();
    step_until(&mut guard, "the client's reservations are released", |g| {
        kinds_of(g).is_empty()
    });
    let jack_pid = jackd.pid();
    jackd.kill();
    step_until(&mut guard, "jackd's reservations are released", |g| {
        g.status().threads.iter().all(|t| t.pid != jack_pid)
    });
    guard.stop();
    assert!(
        m.session().list().unwrap().is_empty(),
        "no cell left behind"
    );
}

#[test]
fn pipewire_and_its_clients_get_reservations_of_their_own() {
    let Some(m) = privileged("guard-pipewire") else {
        return;
    };
    let Some(jack_dir) = tessera_guard::monitor::pipewire_jack_dir() else {
        eprintln!("SKIPPED pipewire guard test: PipeWire's libjack is not installed (apt-get install pipewire-jack)");
        return;
    };
    if std::env::var_os("TESSERA_GUARD_PW_JACK").is_none() {
        // The monitor must load PipeWire's libjack: run this test again in
        // a process that starts with it on LD_LIBRARY_PATH.
        drop(m);
        rerun_with_pipewire_jack(&jack_dir);
        return;
    }
    let scratch = ScratchDir::create();
    let runtime = scratch.0.clone();
    let mut pipewire = Started::spawn(Command::new("pipewire").env("XDG_RUNTIME_DIR", &runtime));
    std::env::set_var("XDG_RUNTIME_DIR", &runtime);
    let pw_pid = pipewire.pid();
    let Some(server) = wait_for_optional(|| {
        Server::pipewire(Some(pw_pid))
            .ok()
            .filter(|_| !fifo_threads(pw_pid).is_empty())
    }) else {
        eprintln!("SKIPPED pipewire guard test: the PipeWire daemon did not start a real-time data thread on this machine");
        return;
    };
    let mut guard = Guard::start(m.session(), server, Settings::default()).expect("guard starts");
    step_until(&mut guard, "PipeWire's data thread is reserved", |g| {
        !reserved_tids_of(g, pw_pid).is_empty()
    });
    for tid in reserved_tids_of(&guard, pw_pid) {
        assert!(
            is_deadline(tid),
            "pipewire thread {tid} reads back SCHED_DEADLINE"
        );
    }
    // jack_simple_client wants physical ports, which the dummy driver of a
    // headless PipeWire has not; jack_cpu_load needs none.
    client_joins_and_leaves(
        &mut guard,
        &m,
        Command::new("jack_cpu_load").env("XDG_RUNTIME_DIR", &runtime),
    );
    pipewire.kill();
    step_until(&mut guard, "PipeWire's reservations are released", |g| {
        g.status().threads.iter().all(|t| t.pid != pw_pid)
    });
    guard.stop();
    assert!(
        m.session().list().unwrap().is_empty(),
        "no cell left behind"
    );
}

/// A client of the server starts: its real-time thread gets a cell of its
/// own; it is killed: the cell is gone and its bandwidth back in the ledger.
fn client_joins_and_leaves(guard: &mut Guard, m: &tessera_testkit::Machine, client: &mut Command) {
    let mut client = Started::spawn(client);
    let pid = client.pid();
    step_until(guard, "the client's thread is reserved", |g| {
        !reserved_tids_of(g, pid).is_empty()
    });
    let tids = reserved_tids_of(guard, pid);
    assert_eq!(tids.len(), 1, "one reservation per real-time thread");
    assert!(
        is_deadline(tids[0]),
        "the client's thread reads back SCHED_DEADLINE"
    );
    let cells: Vec<String> = guard
        .status()
        .threads
        .iter()
        .map(|t| t.cell.clone())
        .collect();
    let mut unique = cells.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        cells.len(),
        unique.len(),
        "each thread in a cell of its own"
    );
    assert!(ledger_reserved(m) > 0.0);

    client.kill();
    step_until(guard, "the client's reservation is released", |g| {
        reserved_tids_of(g, pid).is_empty()
    });
    let names: Vec<String> = m
        .session()
        .list()
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert!(
        names.iter().all(|n| !n.ends_with(&format!("-{}", tids[0]))),
        "the client's cell is gone: {names:?}"
    );
    // Other threads' budgets moved meanwhile (a join bumps them): the
    // ledger must hold exactly the reservations of the threads still there.
    let held = ledger_reserved(m);
    let live = guard.status().reserved_cpus;
    assert!(
        (held - live).abs() < 0.001,
        "the client's bandwidth returned to the ledger: it holds {held:.4} CPU, the live threads {live:.4}"
    );
}

/// The bandwidth the ledger holds for every cell, in CPUs.
fn ledger_reserved(m: &tessera_testkit::Machine) -> f64 {
    m.session()
        .list()
        .unwrap()
        .iter()
        .map(|c| c.bandwidth.as_fraction())
        .sum()
}

fn rerun_with_pipewire_jack(jack_dir: &std::path::Path) {
    let me = std::env::current_exe().unwrap();
    let status = Command::new(me)
        .args([
            "--exact",
            "pipewire_and_its_clients_get_reservations_of_their_own",
            "--nocapture",
        ])
        .env("LD_LIBRARY_PATH", jack_dir)
        .env("TESSERA_GUARD_PW_JACK", "1")
        .status()
        .expect("rerun the test");
    assert!(
        status.success(),
        "the PipeWire guard test failed (see above)"
    );
}

/// PipeWire's private runtime directory, removed when dropped (after the
/// server, which is declared after it).
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn create() -> ScratchDir {
        let dir = std::env::temp_dir().join(format!("tessera-pw-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        ScratchDir(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn wait_for<T>(f: impl Fn() -> Option<T>) -> T {
    wait_for_optional(f).expect("the server did not come up within 10 s")
}

fn wait_for_optional<T>(f: impl Fn() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > Duration::from_secs(10) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
