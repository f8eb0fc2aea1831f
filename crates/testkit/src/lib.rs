//! Test support for tests that change the machine (SCHED_DEADLINE, cpusets):
//! the root check — a skip is printed, and is a failure under CI=true — one
//! such test at a time on the machine (a mutex within a test binary, a file
//! lock across processes), a private broker state directory, and a guard
//! that resets the machine when the test ends, even when it fails; a
//! daemon served from a thread of the test process; jackd2 on its dummy
//! driver ([`jackd`]).
//!
//! It must never be a dependency of anything but tests.

pub mod jackd;

use std::fs::File;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tessera_broker::config::Config;
use tessera_broker::paths::Paths;
use tessera_broker::{daemon, Session};

static MACHINE: Mutex<()> = Mutex::new(());

/// The lock every machine-changing test holds, across processes. (Not the
/// lock benchmarks are run under with flock(1): a test run inside that would
/// wait for itself.)
pub const MACHINE_LOCK: &str = "/tmp/tessera-machine-test.lock";

/// A broker state directory of one test, removed when dropped.
pub struct ScratchDir {
    pub paths: Paths,
}

impl ScratchDir {
    pub fn new(test: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!("tessera-test-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test's state directory");
        ScratchDir {
            paths: Paths::at(dir),
        }
    }

    /// An embedded broker on this directory.
    pub fn session(&self) -> Session {
        Session::embedded(self.paths.clone())
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.paths.dir);
    }
}

/// The machine, held by one test; reset when dropped.
pub struct Machine {
    pub paths: Paths,
    _scratch: ScratchDir,
    _file_lock: File,
    _lock: MutexGuard<'static, ()>,
}

impl Machine {
    /// An embedded broker on this test's state directory.
    pub fn session(&self) -> Session {
        Session::embedded(self.paths.clone())
    }

    pub fn dir(&self) -> PathBuf {
        self.paths.dir.clone()
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if let Err(e) = self.session().reset() {
            eprintln!("reset after the test failed: {e}");
        }
    }
}

/// The machine, if this test may change it: None (after printing why) when
/// not root; under CI=true a skip is a failure.
pub fn privileged(test: &str) -> Option<Machine> {
    if !tessera_sys::caps::is_root() {
        let msg = format!("SKIPPED {test}: needs root (SCHED_DEADLINE and cpusets)");
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{msg}, and CI=true requires privileged tests to run");
        }
        eprintln!("{msg}");
        return None;
    }
    let lock = MACHINE.lock().unwrap_or_else(|p| p.into_inner());
    let file = File::create(MACHINE_LOCK).expect("create the machine lock file");
    tessera_sys::ipc::lock_exclusive(&file).expect("lock the machine");
    let scratch = ScratchDir::new(test);
    Some(Machine {
        paths: scratch.paths.clone(),
        _scratch: scratch,
        _file_lock: file,
        _lock: lock,
    })
}

/// The highest-numbered online core (the one experiments partition).
pub fn last_core() -> usize {
    *tessera_sys::kernel::online_cpus()
        .expect("online CPUs")
        .last()
        .expect("at least one CPU")
}

/// The privileged machine and its last core, for a test that partitions a
/// core other than the first; None (the test skipped, saying why) without
/// root or with one core.
pub fn privileged_with_a_second_core(test: &str) -> Option<(Machine, usize)> {
    let m = privileged(test)?;
    let core = last_core();
    if core == 0 {
        eprintln!("SKIPPED {test}: needs 2 cores");
        return None;
    }
    Some((m, core))
}

/// Starts a daemon on `paths` in a thread of this process (it serves until
/// the test binary exits) and returns once its socket accepts connections.
pub fn start_daemon(paths: &Paths, config: Config) {
    let (tx, rx) = std::sync::mpsc::channel();
    let ready = tx.clone();
    let paths = paths.clone();
    std::thread::spawn(move || {
        let outcome = daemon::run(paths, config, move |_, _| {
            let _ = ready.send(Ok(()));
            Ok::<(), tessera_broker::BrokerError>(())
        });
        let _ = tx.send(outcome);
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the daemon starts")
        .expect("the daemon serves");
}

/// Runs `f` on a thread of its own; fails the test if it takes longer
/// than `limit` (what `f` started is stopped by its own Drop guards, or
/// with the test process).
pub fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => value,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("did not finish within {limit:?}")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("the run panicked (above)"),
    }
}

/// xorshift64*: a deterministic generator for fuzzing tests, so that a
/// failure replays exactly.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// A child process of a test, killed and reaped when dropped: also when
/// the test fails before it ends the child itself.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
