//! The synth cell's deadline misses on their way to the broker's monitor
//! (the RAP service's input) while the application runs.
//!
//! The engine knows them live: a cycle starts at its package's t1 (the
//! first packet's receive stamp, carried over the link), and one that ends
//! after t1 + [`crate::app::DEADLINE`] is counted as an xrun and queued, as
//! a notice, for the engine's notification thread. There [`XrunCount`] (the
//! engine's callbacks) adds it to a counter; a reporter thread of its own
//! reads the counter every [`REPORT_INTERVAL`] and sends what is new for
//! the synth's cell through [`CellReport`], and the rest when stopped.
//!
//! This module owns that thread. Nothing here runs on a real-time thread:
//! the engine's real-time side only queues its notice, as it always does;
//! the notification thread and the reporter may block on the broker. A
//! notice the engine's queue had no room for is not counted here (the
//! engine's own count at the end is exact).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;

use tessera_graph::{Callbacks, XrunReport};
use tessera_runtime::{CellJoin, CellReport, REPORT_INTERVAL};

/// The engine's callbacks: counts its xruns for the reporter.
pub struct XrunCount(Arc<AtomicU64>);

impl Callbacks for XrunCount {
    fn xrun(&mut self, _report: &XrunReport) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// The reporter thread, sending the synth cell's xruns to the broker.
pub struct XrunReporter {
    /// Dropped to stop the thread.
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl XrunReporter {
    /// Starts reporting for the cell `join` names, to the broker it
    /// reaches; the engine's callbacks that feed it.
    pub fn start(join: CellJoin) -> std::io::Result<(XrunReporter, XrunCount)> {
        let xruns = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&xruns);
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("music-report".into())
            .spawn(move || report(CellReport::to(join), &counted, &stopped))?;
        let reporter = XrunReporter {
            stop: Some(stop),
            thread: Some(thread),
        };
        Ok((reporter, XrunCount(xruns)))
    }

    /// Sends what is left and stops the thread.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for XrunReporter {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Every [`REPORT_INTERVAL`] until `stopped`, counts the xruns new since
/// the last look; then sends the rest at once.
fn report(mut report: CellReport, xruns: &AtomicU64, stopped: &mpsc::Receiver<()>) {
    let mut seen = 0;
    loop {
        let stopping = stopped.recv_timeout(REPORT_INTERVAL) != Err(RecvTimeoutError::Timeout);
        let now = xruns.load(Ordering::Relaxed);
        report.count(0, now - seen);
        seen = now;
        if stopping {
            report.flush(true);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_policy::{CellRequest, Placement};

    #[test]
    fn the_counted_xruns_reach_the_cells_broker_by_the_stop() {
        let Some(machine) = tessera_testkit::privileged("music xrun report") else {
            return;
        };
        let cell = "music-report";
        let mut session = machine.session();
        let request = CellRequest {
            placement: Placement::Global,
            ..CellRequest::event_triggered(cell, 100_000, 1_000_000)
        };
        session.create_cell(request, true).unwrap();
        let (reporter, count) =
            XrunReporter::start(CellJoin::embedded(cell, machine.paths.clone())).unwrap();
        count.0.fetch_add(3, Ordering::Relaxed);
        reporter.stop();
        let totals = session.report(cell, 0, 0).unwrap();
        assert_eq!((totals.misses, totals.xruns), (0, 3));
    }
}
