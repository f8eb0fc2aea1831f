//! Misses and xruns reported to the broker's monitor (the RAP service's
//! input), from a thread that may block — a notification thread, a control
//! thread — never a real-time one: [`CellReport`] counts them for a cell and
//! sends them at most once per [`REPORT_INTERVAL`]; [`BrokerReport`] is the
//! runtime's [`Notifications`] doing so for its tasks' misses. A report that
//! fails is kept and sent with the next one (a restarted daemon is
//! reconnected to); reporting never stops the application.

use crate::cell::CellJoin;
use crate::notify::{Miss, Notifications, Overrun};
use std::time::{Duration, Instant};
use tessera_broker::Session;

/// How often counts go to the broker at most.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Misses and xruns of one cell, on their way to the broker.
pub struct CellReport {
    join: CellJoin,
    session: Option<Session>,
    misses: u64,
    xruns: u64,
    last_sent: Instant,
}

impl CellReport {
    /// Reports for `cell` to the broker [`Session::connect`] finds.
    pub fn new(cell: impl Into<String>) -> CellReport {
        CellReport::to(CellJoin::connect(cell))
    }

    /// Reports for the cell `join` names, to the broker it reaches (e.g. a
    /// daemon of a private run directory).
    pub fn to(join: CellJoin) -> CellReport {
        CellReport {
            join,
            session: None,
            misses: 0,
            xruns: 0,
            last_sent: Instant::now(),
        }
    }

    /// Counts, and sends if the interval has passed.
    pub fn count(&mut self, misses: u64, xruns: u64) {
        self.misses += misses;
        self.xruns += xruns;
        self.flush(false);
    }

    /// Counted but not yet accepted by the broker.
    pub fn unsent(&self) -> (u64, u64) {
        (self.misses, self.xruns)
    }

    /// Sends what was counted, if the interval has passed (or `now`).
    pub fn flush(&mut self, now: bool) {
        let nothing = self.misses == 0 && self.xruns == 0;
        if nothing || (!now && self.last_sent.elapsed() < REPORT_INTERVAL) {
            return;
        }
        self.last_sent = Instant::now();
        if self.session.is_none() {
            self.session = self.join.session().ok();
        }
        let Some(session) = &mut self.session else {
            return;
        };
        match session.report(self.join.cell(), self.misses, self.xruns) {
            Ok(_) => (self.misses, self.xruns) = (0, 0),
            // The daemon may have restarted: connect again next time.
            Err(_) => self.session = None,
        }
    }
}

impl Drop for CellReport {
    fn drop(&mut self) {
        self.flush(true);
    }
}

/// The runtime's notifications for `cell`: every miss is counted and
/// reported; the application's own callbacks see every notice first.
pub struct BrokerReport<N: Notifications> {
    inner: N,
    report: CellReport,
}

impl<N: Notifications> BrokerReport<N> {
    pub fn new(cell: impl Into<String>, inner: N) -> BrokerReport<N> {
        BrokerReport::to(CellJoin::connect(cell), inner)
    }

    /// Reports to the broker `join` reaches, for the cell it names.
    pub fn to(join: CellJoin, inner: N) -> BrokerReport<N> {
        BrokerReport {
            inner,
            report: CellReport::to(join),
        }
    }
}

impl<N: Notifications> Notifications for BrokerReport<N> {
    fn on_miss(&mut self, miss: &Miss) {
        self.inner.on_miss(miss);
        self.report.count(1, 0);
    }

    fn on_overrun(&mut self, overrun: &Overrun) {
        self.inner.on_overrun(overrun);
    }
}
