//! Requests and threads the broker's kernel tests share; the machine guard
//! itself is tessera-testkit's.

use tessera_policy::{CellRequest, CoreRequest};
pub use tessera_testkit::{last_core, privileged};

pub fn event_triggered(name: &str, runtime_us: u64, period_us: u64) -> CellRequest {
    CellRequest::event_triggered(name, runtime_us * 1000, period_us * 1000)
}

pub fn dedicated(name: &str, cores: Vec<usize>) -> CellRequest {
    CellRequest::dedicated(name, CoreRequest::List(cores))
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

/// A `sleep 60` of its own process: a thread of another process, which the
/// broker may wake (ptrace) where it cannot wake one of the test's. Killed
/// when dropped.
pub struct Sleeper(std::process::Child);

impl Sleeper {
    pub fn start() -> Sleeper {
        let child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("spawn sleep");
        Sleeper(child)
    }

    pub fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    /// Waits (at most 5 s) until it last ran on `cpu`, then 50 ms more for
    /// it to be asleep there (`sleep` blocks as soon as it has started).
    pub fn wait_until_last_on(&self, cpu: usize) {
        let pid = self.pid();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while tessera_sys::proc::last_cpu(pid, pid) != Some(cpu) {
            assert!(
                std::time::Instant::now() < deadline,
                "sleep {pid} never ran on cpu {cpu}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
