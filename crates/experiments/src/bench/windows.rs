//! A trace of a time-triggered cell: one thread joins a `time-triggered` cell
//! and spins, timestamping itself without pause, so that every gap in its
//! timestamps is time it did not run. The trace shows where, in each period,
//! the thread ran — the proof that a time-triggered cell's threads run only
//! inside their windows — and how much CPU it got against its runtime/period.
//!
//! The kernel enforces a reservation's budget at scheduler ticks unless
//! HRTICK is on, so a window may overrun by up to a tick (and the overrun is
//! paid back by skipped windows); the trace measures that rather than
//! assuming it away. A `cooperative` thread ends its own window (sched_yield
//! at the window's end, as tessera's cell runtime does for its tasks): the
//! kernel then replenishes it at the next period's start, so it runs inside
//! its windows to the microsecond. It must never judge: it reports.

use serde::Serialize;
use std::time::Duration;
use tessera_broker::{BrokerError, ErrorCode, Session};
use tessera_policy::CellRequest;
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns};

/// A gap longer than this between two timestamps means the thread was not running.
const GAP_NS: u64 = 20_000;
/// The most run intervals kept (preallocated: the spinning loop never allocates).
const MAX_INTERVALS: usize = 200_000;

#[derive(Debug, Clone, Serialize)]
pub struct WindowTrace {
    pub runtime_ns: u64,
    pub period_ns: u64,
    pub core: Option<usize>,
    /// Run intervals, ns since the first release (the window grid's origin).
    pub intervals: Vec<(u64, u64)>,
    pub elapsed_ns: u64,
    pub run_ns: u64,
    /// Run time that fell outside [kP, kP + runtime] windows.
    pub outside_ns: u64,
    /// Most run time in any one period.
    pub longest_period_run_ns: u64,
}

impl WindowTrace {
    pub fn cpu_share(&self) -> f64 {
        self.run_ns as f64 / self.elapsed_ns.max(1) as f64
    }

    pub fn reserved_share(&self) -> f64 {
        self.runtime_ns as f64 / self.period_ns as f64
    }

    pub fn inside_fraction(&self) -> f64 {
        1.0 - self.outside_ns as f64 / self.run_ns.max(1) as f64
    }

    /// The first `periods` periods as text: one row per period, `#` where
    /// the thread ran, `|` at the window's end.
    pub fn timeline(&self, periods: usize, columns: usize) -> String {
        let step = (self.period_ns / columns as u64).max(1);
        let window_end = (self.runtime_ns / step) as usize;
        let mut out = String::new();
        for k in 0..periods as u64 {
            let base = k * self.period_ns;
            let row: String = (0..columns)
                .map(|c| {
                    let t = base + c as u64 * step;
                    let running = self.intervals.iter().any(|&(s, e)| s <= t + step && e >= t);
                    match (running, c == window_end) {
                        (_, true) => '|',
                        (true, false) => '#',
                        (false, false) => '.',
                    }
                })
                .collect();
            out.push_str(&format!("{:>6.1} ms {row}\n", base as f64 / 1e6));
        }
        out
    }
}

/// Creates a time-triggered cell, runs a spinning thread in it for
/// `duration`, and returns the trace. The cell is released afterwards.
pub fn trace(
    session: &mut Session,
    runtime: Duration,
    period: Duration,
    core: Option<usize>,
    duration: Duration,
    cooperative: bool,
) -> Result<WindowTrace, BrokerError> {
    let name = format!("window-trace-{}", std::process::id());
    let runtime_ns = runtime.as_nanos() as u64;
    let period_ns = period.as_nanos() as u64;
    let mut request = CellRequest::time_triggered(name.clone(), runtime_ns, period_ns);
    if let Some(c) = core {
        request = request.on_cores(vec![c]);
    }
    let info = session.create_cell(request, true)?;
    let placed_on = info.grant.reservations.first().and_then(|r| r.core);
    let result = run_spinner(session, &name, runtime_ns, period_ns, duration, cooperative);
    let _ = session.destroy_cell(&name);
    let (intervals, elapsed_ns) = result?;
    Ok(summarise(
        runtime_ns, period_ns, placed_on, intervals, elapsed_ns,
    ))
}

/// Starts the spinning thread, which joins `cell` itself, and returns its run intervals and the time it ran for.
fn run_spinner(
    session: &mut Session,
    cell: &str,
    runtime_ns: u64,
    period_ns: u64,
    duration: Duration,
    cooperative: bool,
) -> Result<(Vec<(u64, u64)>, u64), BrokerError> {
    let mut own = session.sibling()?;
    let cell = cell.to_string();
    let spinner = std::thread::Builder::new()
        .name("window-trace".into())
        .spawn(move || -> Result<(Vec<(u64, u64)>, u64), BrokerError> {
            let mut intervals = Vec::with_capacity(MAX_INTERVALS);
            own.join_current_thread(&cell)?;
            // Released after the reservation's first deadline passed, so its
            // period is anchored where it wakes: the window grid's origin
            // (a vCPU stalled past the wake-up moves both; the grid from
            // the time asked for would then lie outside every window, and
            // a cooperative thread yield its budget away in each period).
            sleep_until_monotonic_ns(monotonic_ns() + 20_000_000);
            let origin = monotonic_ns();
            let window = cooperative.then_some((runtime_ns, period_ns));
            let elapsed = spin(origin, duration.as_nanos() as u64, window, &mut intervals);
            Ok((intervals, elapsed))
        })
        .map_err(|e| {
            BrokerError::new(
                ErrorCode::Kernel,
                format!("start the tracing thread: {e}"),
                "",
            )
        })?;
    spinner.join().unwrap_or_else(|_| {
        Err(BrokerError::new(
            ErrorCode::Internal,
            "the tracing thread panicked",
            "",
        ))
    })
}

/// Spins until `length` after `origin`, recording run intervals; with a
/// `window` (runtime, period), gives up the processor at each window's end.
fn spin(
    origin: u64,
    length: u64,
    window: Option<(u64, u64)>,
    intervals: &mut Vec<(u64, u64)>,
) -> u64 {
    let mut start = monotonic_ns();
    let mut last = start;
    loop {
        let now = monotonic_ns();
        if let Some((runtime, period)) = window {
            if (now - origin) % period >= runtime {
                tessera_sys::sched::yield_now();
                continue;
            }
        }
        if now - last > GAP_NS {
            push(intervals, start - origin, last - origin);
            start = now;
        }
        last = now;
        if now - origin >= length {
            push(intervals, start - origin, last - origin);
            return now - origin;
        }
    }
}

fn push(intervals: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    if intervals.len() < intervals.capacity() {
        intervals.push((start, end));
    }
}

fn summarise(
    runtime_ns: u64,
    period_ns: u64,
    core: Option<usize>,
    intervals: Vec<(u64, u64)>,
    elapsed_ns: u64,
) -> WindowTrace {
    let mut run_ns = 0;
    let mut outside_ns = 0;
    let mut per_period = vec![0u64; (elapsed_ns / period_ns + 1) as usize];
    for &(s, e) in &intervals {
        run_ns += e - s;
        // Split the interval at period boundaries.
        let mut t = s;
        while t < e {
            let k = t / period_ns;
            let period_end = (k + 1) * period_ns;
            let piece_end = e.min(period_end);
            let window_end = k * period_ns + runtime_ns;
            outside_ns += piece_end.saturating_sub(window_end.max(t));
            if let Some(p) = per_period.get_mut(k as usize) {
                *p += piece_end - t;
            }
            t = piece_end;
        }
    }
    WindowTrace {
        runtime_ns,
        period_ns,
        core,
        intervals,
        elapsed_ns,
        run_ns,
        outside_ns,
        longest_period_run_ns: per_period.into_iter().max().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_outside_windows_is_counted_per_period() {
        // Windows of 2 ms every 10 ms; runs: inside, straddling the window's
        // end by 1 ms, and entirely outside (4 ms).
        let t = summarise(
            2_000_000,
            10_000_000,
            Some(1),
            vec![
                (0, 2_000_000),
                (10_500_000, 13_000_000),
                (25_000_000, 29_000_000),
            ],
            30_000_000,
        );
        assert_eq!(t.run_ns, 2_000_000 + 2_500_000 + 4_000_000);
        assert_eq!(t.outside_ns, 1_000_000 + 4_000_000);
        assert_eq!(t.longest_period_run_ns, 4_000_000);
        let line = t.timeline(1, 10);
        assert!(line.contains("##|"), "{line}");
    }
}
