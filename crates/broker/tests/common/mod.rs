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
