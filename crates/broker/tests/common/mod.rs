//! Shared set-up of the privileged tests: root check (a skip is printed, and
//! is a failure under CI=true), one test at a time on the machine, and a
//! guard that resets the machine even when a test fails.

use std::sync::{Mutex, MutexGuard};
use tessera_broker::paths::Paths;
use tessera_broker::Session;
use tessera_policy::{Budget, CellPolicy, CellRequest, CoreRequest, Placement};

static MACHINE: Mutex<()> = Mutex::new(());

/// Holds the machine for one test and resets it afterwards.
pub struct Machine {
    pub paths: Paths,
    _dir: TempDir,
    _lock: MutexGuard<'static, ()>,
}

pub struct TempDir(pub std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Machine {
    pub fn session(&self) -> Session {
        Session::embedded(self.paths.clone())
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if let Err(e) = self.session().reset() {
            eprintln!("reset after test failed: {e}");
        }
    }
}

/// The machine, if this test may change it; None (after printing why) when
/// not root. Under CI=true a skip is a failure.
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
    let dir = std::env::temp_dir().join(format!("tessera-test-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let m = Machine {
        paths: Paths::at(&dir),
        _dir: TempDir(dir),
        _lock: lock,
    };
    Some(m)
}

pub fn last_core() -> usize {
    *tessera_sys::kernel::online_cpus().unwrap().last().unwrap()
}

pub fn event_triggered(name: &str, runtime_us: u64, period_us: u64) -> CellRequest {
    CellRequest {
        name: name.into(),
        policy: CellPolicy::EventTriggered,
        cores: CoreRequest::Count(1),
        budget: Some(Budget::new(runtime_us * 1000, period_us * 1000)),
        placement: Placement::Partitioned,
        weight: 100,
        pinned: false,
        reclaim: false,
        overrun_signal: false,
    }
}

pub fn dedicated(name: &str, cores: Vec<usize>) -> CellRequest {
    CellRequest {
        name: name.into(),
        policy: CellPolicy::Dedicated,
        cores: CoreRequest::List(cores),
        budget: None,
        placement: Placement::Partitioned,
        weight: 100,
        pinned: false,
        reclaim: false,
        overrun_signal: false,
    }
}

/// A thread that runs `f` then waits until told to finish.
pub struct Parked {
    pub tid: i32,
    release: std::sync::mpsc::Sender<()>,
    handle: std::thread::JoinHandle<()>,
}

impl Parked {
    pub fn spawn(f: impl FnOnce() + Send + 'static) -> Parked {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            f();
            tid_tx.send(tessera_sys::proc::current_tid()).unwrap();
            let _ = wait.recv_timeout(std::time::Duration::from_secs(60));
        });
        let tid = tid_rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("thread started");
        Parked {
            tid,
            release,
            handle,
        }
    }

    pub fn finish(self) {
        let _ = self.release.send(());
        let _ = self.handle.join();
    }
}
