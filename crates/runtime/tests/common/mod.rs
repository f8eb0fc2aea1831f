//! Shared set-up of the runtime's tests: a notification recorder, bounded
//! waits, cell requests; the machine guard is tessera-testkit's.

#![allow(dead_code)] // each test binary uses a different part

use std::sync::mpsc;
use std::time::{Duration, Instant};

use tessera_policy::CellRequest;
use tessera_runtime::{Miss, Notifications, Overrun};

/// The longest any test waits for anything.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// What the notification thread delivered.
#[derive(Debug)]
pub enum Note {
    Miss(Miss),
    Overrun(Overrun),
}

pub struct Recorder(mpsc::Sender<Note>);

impl Notifications for Recorder {
    fn on_miss(&mut self, miss: &Miss) {
        let _ = self.0.send(Note::Miss(*miss));
    }
    fn on_overrun(&mut self, overrun: &Overrun) {
        let _ = self.0.send(Note::Overrun(*overrun));
    }
}

pub fn recorder() -> (Recorder, mpsc::Receiver<Note>) {
    let (tx, rx) = mpsc::channel();
    (Recorder(tx), rx)
}

/// Polls `done` until it holds or [`PATIENCE`] runs out.
pub fn wait_until(done: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < PATIENCE {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    done()
}

/// A one-core event-triggered cell with `runtime_us` every `period_us`.
pub fn bandwidth_cell(
    name: &str,
    runtime_us: u64,
    period_us: u64,
    overrun_signal: bool,
) -> CellRequest {
    CellRequest {
        overrun_signal,
        ..CellRequest::event_triggered(name, runtime_us * 1000, period_us * 1000)
    }
}
