//! Δt per window, for runs of an hour ([`crate::app::Timings::Windows`]):
//! the network role hands every answered package's timing to a
//! [`WindowSink`], which keeps the current window's count, misses, exact
//! maximum and histogram, and the run's totals. When a package of a later
//! window is answered, the window is summarised ([`WindowSummary`]) and
//! passed to the application over a wait-free ring; the totals follow when
//! the role stops. Memory is sized at start: an hour keeps what a minute
//! keeps.
//!
//! Windows are counted from the t1 of the first package after the warm-up,
//! so window `i` holds the packages that began in `[i, i + 1)` windows
//! after it. This module owns that arithmetic. `record` runs on the
//! serving thread: it must never allocate, lock or block.

use std::time::Duration;

use rtrb::{Consumer, Producer, RingBuffer};
use tessera_measure::LatencyHistogram;
use tessera_services::network::{PackageTiming, TimingSink};

use crate::app::DEADLINE;

/// Largest Δt the histograms keep apart (1 s), as the application's.
const HISTOGRAM_MAX_NS: u64 = 1_000_000_000;
/// Ring slots beyond the windows the run is expected to have.
const SPARE_SLOTS: usize = 8;

/// One window's Δt.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WindowSummary {
    /// From the first package after the warm-up, 0-based.
    pub index: u64,
    /// Packages that began in the window.
    pub packages: u64,
    /// Δt over the deadline, counted on the exact values.
    pub misses: u64,
    /// Of the misses, those whose sender stalled mid-package
    /// ([`crate::sender_stalled`]).
    pub sender_misses: u64,
    /// Exact.
    pub mean_ns: f64,
    /// Quantiles of the histogram (3 significant digits).
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    /// Exact.
    pub max_ns: u64,
}

/// The run's Δt, after the warm-up.
#[derive(Debug, Clone)]
pub struct Totals {
    pub response: LatencyHistogram,
    /// t2 − the package's last packet.
    pub service: LatencyHistogram,
    pub misses: u64,
    pub sender_misses: u64,
    /// Windows the ring had no room for (its reader fell behind).
    pub lost_windows: u64,
}

/// What goes through the ring.
pub(crate) enum Message {
    Window(WindowSummary),
    Totals(Box<Totals>),
}

/// The sink's side: the current window and the totals.
pub(crate) struct WindowSink {
    window_ns: u64,
    /// Warm-up packages still to be left out.
    skip: u64,
    /// t1 of the first package counted.
    origin_ns: Option<u64>,
    current: WindowSummary,
    sum_ns: u64,
    histogram: LatencyHistogram,
    /// Handed over by `finish` (moved, not allocated).
    totals: Option<Box<Totals>>,
    out: Producer<Message>,
}

/// The reader's side, held by the application.
pub(crate) struct WindowReader {
    input: Consumer<Message>,
    totals: Option<Box<Totals>>,
}

/// A sink of windows of `window` after `warmup_packages`, and its reader;
/// the ring holds every window of a run of `expected_packages` (and a few
/// more), so a reader that only reads at the end loses none.
pub(crate) fn windows(
    window: Duration,
    warmup_packages: u64,
    expected_packages: usize,
) -> (WindowSink, WindowReader) {
    let window_ns = (window.as_nanos() as u64).max(1);
    let span_ns = expected_packages as u64 * crate::protocol::package_period_ns();
    let slots = (span_ns / window_ns) as usize + SPARE_SLOTS;
    let (out, input) = RingBuffer::new(slots);
    let totals = Totals {
        response: LatencyHistogram::new(HISTOGRAM_MAX_NS),
        service: LatencyHistogram::new(HISTOGRAM_MAX_NS),
        misses: 0,
        sender_misses: 0,
        lost_windows: 0,
    };
    let sink = WindowSink {
        window_ns,
        skip: warmup_packages,
        origin_ns: None,
        current: WindowSummary::default(),
        sum_ns: 0,
        histogram: LatencyHistogram::new(HISTOGRAM_MAX_NS),
        totals: Some(Box::new(totals)),
        out,
    };
    (
        sink,
        WindowReader {
            input,
            totals: None,
        },
    )
}

impl WindowSink {
    /// Summarises the current window and sends it, and an empty one for
    /// each window without a package before `next`; then starts `next`.
    /// One slot is always left for the totals.
    fn close(&mut self, next: u64) {
        let current = self.current.index;
        let count = self.current.packages;
        let summary = WindowSummary {
            mean_ns: self.sum_ns as f64 / count.max(1) as f64,
            p50_ns: self.histogram.quantile(0.5),
            p99_ns: self.histogram.quantile(0.99),
            p999_ns: self.histogram.quantile(0.999),
            ..self.current
        };
        self.send(summary);
        for index in current + 1..next {
            self.send(WindowSummary {
                index,
                ..WindowSummary::default()
            });
        }
        self.current = WindowSummary {
            index: next,
            ..WindowSummary::default()
        };
        self.sum_ns = 0;
        self.histogram.reset();
    }

    fn send(&mut self, summary: WindowSummary) {
        let room = self.out.slots() > 1 && self.out.push(Message::Window(summary)).is_ok();
        if !room {
            if let Some(totals) = &mut self.totals {
                totals.lost_windows += 1;
            }
        }
    }
}

impl TimingSink for WindowSink {
    fn record(&mut self, timing: &PackageTiming) {
        if self.skip > 0 {
            self.skip -= 1;
            return;
        }
        let origin = *self.origin_ns.get_or_insert(timing.t1_ns);
        // Answers come in order; one out of order stays in the current window.
        let index = timing.t1_ns.saturating_sub(origin) / self.window_ns;
        if index > self.current.index {
            self.close(index);
        }
        let response = timing.response_ns();
        let missed = response > DEADLINE.as_nanos() as u64;
        let stalled = missed && crate::sender_stalled(timing);
        let window = &mut self.current;
        window.packages += 1;
        window.misses += u64::from(missed);
        window.sender_misses += u64::from(stalled);
        window.max_ns = window.max_ns.max(response);
        self.sum_ns += response;
        self.histogram.record(response);
        if let Some(totals) = &mut self.totals {
            totals.response.record(response);
            totals.service.record(timing.service_ns());
            totals.misses += u64::from(missed);
            totals.sender_misses += u64::from(stalled);
        }
    }

    /// Sends the last window (if it had a package) and the totals.
    fn finish(&mut self) {
        if self.current.packages > 0 {
            let next = self.current.index + 1;
            self.close(next);
        }
        if let Some(totals) = self.totals.take() {
            // The slot kept free by `send`.
            let _ = self.out.push(Message::Totals(totals));
        }
    }
}

impl WindowReader {
    /// The windows summarised since the last call, oldest first.
    pub(crate) fn take(&mut self) -> Vec<WindowSummary> {
        let mut windows = Vec::with_capacity(self.input.slots());
        while let Ok(message) = self.input.pop() {
            match message {
                Message::Window(w) => windows.push(w),
                Message::Totals(t) => self.totals = Some(t),
            }
        }
        windows
    }

    /// The totals, once the sink has finished (after [`Self::take`]).
    pub(crate) fn totals(&mut self) -> Option<Box<Totals>> {
        self.totals.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A package that began at `t1_ms`, complete 0.7 ms later, answered
    /// after `dt_us` in all.
    fn timing(t1_ms: u64, dt_us: u64) -> PackageTiming {
        let t1_ns = 5_000 * MS + t1_ms * MS;
        PackageTiming {
            t1_ns,
            complete_ns: t1_ns + 700_000,
            t2_ns: t1_ns + dt_us * 1000,
        }
    }

    #[test]
    fn windows_count_from_the_first_package_after_the_warm_up() {
        let (mut sink, mut reader) = windows(Duration::from_secs(1), 2, 10_000);
        // Warm-up: left out however late.
        sink.record(&timing(0, 9_000));
        sink.record(&timing(1, 9_000));
        // Window 0 starts at 2 ms.
        sink.record(&timing(2, 1_000));
        sink.record(&timing(500, 2_000));
        sink.record(&timing(1_001, 1_200));
        assert!(reader.take().is_empty(), "window 0 is still open");
        // Window 1 is 1002..2002 ms: this closes window 0.
        sink.record(&timing(1_002, 1_100));
        let closed = reader.take();
        assert_eq!(closed.len(), 1);
        let w = closed[0];
        assert_eq!((w.index, w.packages, w.misses), (0, 3, 1));
        assert_eq!(w.max_ns, 2_000_000);
        assert!((w.mean_ns - 1_400_000.0).abs() < 1.0, "{}", w.mean_ns);
        assert!(w.p50_ns.abs_diff(1_200_000) < 2_000, "{}", w.p50_ns);
        // Window 3, with nothing in window 2.
        sink.record(&timing(3_500, 1_500));
        sink.finish();
        let rest = reader.take();
        let indices: Vec<(u64, u64)> = rest.iter().map(|w| (w.index, w.packages)).collect();
        assert_eq!(indices, vec![(1, 1), (2, 0), (3, 1)]);
        assert_eq!(rest[2].misses, 1);
        let totals = reader.totals().expect("sent by finish");
        assert_eq!((totals.response.count(), totals.misses), (5, 2));
        assert_eq!((totals.service.count(), totals.lost_windows), (5, 0));
    }

    #[test]
    fn misses_of_a_stalled_sender_are_the_senders() {
        let (mut sink, mut reader) = windows(Duration::from_secs(60), 0, 1000);
        let mut stalled = timing(0, 3_000);
        stalled.complete_ns = stalled.t1_ns + 2_500_000;
        sink.record(&stalled);
        sink.record(&timing(1, 1_500));
        sink.finish();
        let w = reader.take()[0];
        assert_eq!((w.misses, w.sender_misses), (2, 1));
        assert_eq!(reader.totals().unwrap().sender_misses, 1);
    }

    #[test]
    fn a_reader_that_falls_behind_loses_windows_but_never_the_totals() {
        // A run of 0 packages expected: SPARE_SLOTS slots.
        let (mut sink, mut reader) = windows(Duration::from_millis(1), 0, 0);
        for t in 0..20 {
            sink.record(&timing(t, 100));
        }
        sink.finish();
        let kept = reader.take();
        assert_eq!(kept.len(), SPARE_SLOTS - 1);
        let totals = reader.totals().expect("the slot kept for them");
        assert_eq!(totals.lost_windows, 20 - (SPARE_SLOTS as u64 - 1));
        assert_eq!(totals.response.count(), 20);
    }
}
