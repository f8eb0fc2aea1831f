//! Misses reported to the broker's monitor (the RAP service's input): a
//! [`Notifications`] that counts the runtime's misses and overruns and
//! sends them to the broker for a cell at most once per interval, from the
//! notification thread (never a worker). A report that fails is kept and
//! sent with the next one; it never blocks a worker and never stops the
//! application.

use crate::notify::{Miss, Notifications, Overrun};
use std::time::{Duration, Instant};
use tessera_broker::Session;

/// How often misses go to the broker at most.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Counts misses and overruns for `cell` and reports them; wraps the
/// application's own callbacks, which see every notice first.
pub struct BrokerReport<N: Notifications> {
    cell: String,
    inner: N,
    session: Option<Session>,
    unsent_misses: u64,
    last_sent: Instant,
}

impl<N: Notifications> BrokerReport<N> {
    /// Reports to the broker [`Session::connect`] finds.
    pub fn new(cell: impl Into<String>, inner: N) -> BrokerReport<N> {
        BrokerReport {
            cell: cell.into(),
            inner,
            session: None,
            unsent_misses: 0,
            last_sent: Instant::now(),
        }
    }

    /// Misses counted but not yet accepted by the broker.
    pub fn unsent(&self) -> u64 {
        self.unsent_misses
    }

    /// Sends what was counted, if the interval has passed (or `now`).
    pub fn flush(&mut self, now: bool) {
        if self.unsent_misses == 0 || (!now && self.last_sent.elapsed() < REPORT_INTERVAL) {
            return;
        }
        self.last_sent = Instant::now();
        if self.session.is_none() {
            self.session = Session::connect().ok();
        }
        let Some(session) = &mut self.session else {
            return;
        };
        match session.report(&self.cell, self.unsent_misses, 0) {
            Ok(_) => self.unsent_misses = 0,
            // The daemon may have restarted: connect again next time.
            Err(_) => self.session = None,
        }
    }
}

impl<N: Notifications> Notifications for BrokerReport<N> {
    fn on_miss(&mut self, miss: &Miss) {
        self.inner.on_miss(miss);
        self.unsent_misses += 1;
        self.flush(false);
    }

    fn on_overrun(&mut self, overrun: &Overrun) {
        self.inner.on_overrun(overrun);
    }
}

impl<N: Notifications> Drop for BrokerReport<N> {
    fn drop(&mut self) {
        self.flush(true);
    }
}
