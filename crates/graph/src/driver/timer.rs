//! The timer driver: periodic cycles on absolute `CLOCK_MONOTONIC` wake-ups
//! (`clock_nanosleep` with `TIMER_ABSTIME`), so the period does not drift with
//! the time a cycle takes.
//!
//! After a late cycle it skips the period boundaries that already passed and
//! realigns on the original grid, instead of starting the missed cycles back
//! to back: one late cycle costs one xrun, not a burst. A graph timed by a
//! media clock rather than a device (network streams, whose receivers wait
//! a link offset for them) may instead catch up a few periods: the missed
//! cycles run back to back, each with its own due time, so their audio is
//! sent late rather than never. Such a graph may also put its cycles on
//! the media clock's grid (due when media time is a multiple of the
//! period), as AES67 devices align their packets: every graph on that
//! clock then cycles in phase, and a receiver playing a link offset behind
//! it finds each sender's packet whole in one cycle, with the whole offset
//! to arrive — out of phase, half a packet's frames would be due a packet
//! time sooner. The grid's clock is read every cycle (one load): when it
//! moved (stepped, or corrected by a few µs as a clock following PTP is),
//! the next cycle moves to the new grid's line nearest to where it was
//! planned, so a clock moved ahead by δ brings the cycle δ sooner rather
//! than a period less δ later — the cycle keeps its media time and skips
//! nothing. This module owns the
//! wake-up schedule; it must never allocate or block on anything but the
//! clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tessera_sys::clock;

use super::{CycleStart, Driver, DriverError};

/// A clock that cycles may fall on the grid of (a media clock): how far
/// it runs ahead of `CLOCK_MONOTONIC` now. Read on the engine's thread
/// every cycle, so it must be real-time safe: a load, no call.
pub trait GridClock: Send + Sync {
    fn ahead_of_monotonic_ns(&self) -> u64;
}

/// Wakes the engine every period: the running graph's frames / sample rate,
/// which [`crate::StreamConfig::new`] validated (32 to 4096 frames at 44.1,
/// 48 or 96 kHz), so buffer size changes take effect at the next period.
#[derive(Default)]
pub struct TimerDriver {
    /// Next scheduled wake-up; 0 before the first cycle.
    next_ns: u64,
    /// Missed periods run back to back rather than skipped, at most.
    catch_up: u64,
    /// The clock whose grid the cycles fall on, and its offset the grid
    /// was last put on (module doc).
    grid: Option<(Arc<dyn GridClock>, u64)>,
}

impl std::fmt::Debug for TimerDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerDriver")
            .field("next_ns", &self.next_ns)
            .field("catch_up", &self.catch_up)
            .field("grid_offset_ns", &self.grid.as_ref().map(|g| g.1))
            .finish()
    }
}

impl TimerDriver {
    pub fn new() -> Self {
        Self::default()
    }

    /// A driver that runs up to `periods` missed cycles back to back after
    /// a late one, and skips only those further behind (module doc).
    pub fn catching_up(periods: u64) -> Self {
        TimerDriver {
            catch_up: periods,
            ..TimerDriver::default()
        }
    }

    /// Due times on the grid of `clock` (a media clock): the first cycle
    /// waits for the next instant at which that clock reads a multiple of
    /// the period, and the rest follow a period apart; after a step of
    /// the clock, the next cycle waits for the new grid's next line
    /// (module doc). Exact when the period is a whole number of
    /// nanoseconds (48 and 96 kHz's packet times are); a new period later
    /// keeps the old one's phase.
    pub fn on_grid(self, clock: Arc<dyn GridClock>) -> Self {
        TimerDriver {
            grid: Some((clock, 0)),
            ..self
        }
    }

    /// The wake-up planned at `planned_ns` (now, before the first cycle),
    /// put on the grid's next line before the first cycle, and on its line
    /// nearest to `planned_ns` if the grid's clock moved since the last
    /// time (module doc); unchanged without a grid.
    fn on_the_grid(&mut self, planned_ns: u64, period_ns: u64) -> u64 {
        let first = self.next_ns == 0;
        let Some((clock, seen)) = &mut self.grid else {
            return planned_ns;
        };
        let offset = clock.ahead_of_monotonic_ns();
        if offset == *seen && !first {
            return planned_ns;
        }
        *seen = offset;
        let after = line_at_or_after(planned_ns, offset, period_ns);
        match first || after - planned_ns <= period_ns / 2 {
            true => after,
            false => after - period_ns,
        }
    }

    /// Skips the boundaries that passed while the last cycle ran late,
    /// but the last `catch_up` of them; returns how many it skipped.
    fn realign(&mut self, now_ns: u64, period_ns: u64) -> u64 {
        if now_ns <= self.next_ns {
            return 0;
        }
        let passed = (now_ns - self.next_ns) / period_ns + 1;
        let skipped = passed.saturating_sub(self.catch_up);
        self.next_ns += skipped * period_ns;
        skipped
    }
}

impl Driver for TimerDriver {
    fn wait_cycle(
        &mut self,
        period_ns: u64,
        _package: &mut [u8],
        stop: &AtomicBool,
    ) -> Result<Option<CycleStart>, DriverError> {
        let now = clock::monotonic_ns();
        let planned = if self.next_ns == 0 { now } else { self.next_ns };
        self.next_ns = self.on_the_grid(planned, period_ns);
        let skipped_periods = self.realign(now, period_ns);
        let scheduled_ns = self.next_ns;
        clock::sleep_until_monotonic_ns(scheduled_ns);
        if stop.load(Ordering::Acquire) {
            return Ok(None);
        }
        self.next_ns += period_ns;
        let start_ns = clock::monotonic_ns();
        Ok(Some(CycleStart {
            start_ns,
            skipped_periods,
            wakeup_latency_ns: start_ns.saturating_sub(scheduled_ns),
        }))
    }

    fn end_cycle(&mut self, _output: &[u8]) -> Result<Option<u64>, DriverError> {
        Ok(None)
    }
}

/// The first instant at or after `at_ns` at which a clock `offset_ns`
/// ahead of `CLOCK_MONOTONIC` reads a multiple of `period_ns`.
fn line_at_or_after(at_ns: u64, offset_ns: u64, period_ns: u64) -> u64 {
    let on_clock = u128::from(at_ns) + u128::from(offset_ns);
    let line = on_clock.div_ceil(u128::from(period_ns)) * u128::from(period_ns);
    (line - u128::from(offset_ns)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn realigns_on_the_grid_after_a_late_cycle() {
        let mut timer = TimerDriver {
            next_ns: 1_000,
            ..TimerDriver::default()
        };
        assert_eq!(timer.realign(900, 100), 0, "on time: nothing skipped");
        assert_eq!(timer.next_ns, 1_000);
        assert_eq!(timer.realign(1_250, 100), 3, "1000, 1100, 1200 passed");
        assert_eq!(timer.next_ns, 1_300);
    }

    #[test]
    fn catching_up_runs_the_last_missed_cycles_and_skips_the_rest() {
        let mut timer = TimerDriver::catching_up(2);
        timer.next_ns = 1_000;
        assert_eq!(timer.realign(1_150, 100), 0, "1000, 1100 passed: both run");
        assert_eq!(timer.next_ns, 1_000);
        assert_eq!(timer.realign(1_450, 100), 3, "5 passed: the last 2 run");
        assert_eq!(timer.next_ns, 1_300);
    }

    /// A grid's clock a test moves.
    struct Ahead(AtomicU64);

    impl GridClock for Ahead {
        fn ahead_of_monotonic_ns(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn a_grid_line_is_the_clocks_next_multiple_of_the_period() {
        assert_eq!(
            line_at_or_after(1_234, 10_300, 1_000),
            1_700,
            "11 534 → 12 000"
        );
        assert_eq!(line_at_or_after(1_700, 10_300, 1_000), 1_700, "on a line");
        assert_eq!(line_at_or_after(10, u64::MAX - 5, 8), 14, "past 2^64");
    }

    #[test]
    fn cycles_on_a_grid_are_due_on_its_lines_and_follow_its_steps() {
        let stream = crate::StreamConfig::new(48, 48_000).unwrap();
        let period = stream.period_ns();
        let grid = Arc::new(Ahead(AtomicU64::new(1_700_000_000_123_456_789)));
        let mut timer = TimerDriver::new().on_grid(grid.clone());
        let stop = AtomicBool::new(false);
        let mut last = 0;
        for step in [0, 0, 0, 250_000, 0, 0] {
            let offset = grid.0.fetch_add(step, Ordering::Relaxed) + step;
            let cycle = timer.wait_cycle(period, &mut [], &stop).unwrap().unwrap();
            let due = cycle.start_ns - cycle.wakeup_latency_ns;
            assert_eq!((due + offset) % period, 0, "due {due} off the grid");
            assert!(due > last, "cycles move forward");
            last = due;
        }
    }

    #[test]
    fn a_clock_moved_a_little_moves_the_next_cycle_by_as_much() {
        let period = 1_000_000;
        let grid = Arc::new(Ahead(AtomicU64::new(5 * period)));
        let mut timer = TimerDriver::new().on_grid(grid.clone());
        timer.next_ns = 7 * period;
        assert_eq!(timer.on_the_grid(7 * period, period), 7 * period);
        // Ahead by 3 µs: due 3 µs sooner (its media time kept), not a
        // period less 3 µs later, which would skip a cycle.
        grid.0.fetch_add(3_000, Ordering::Relaxed);
        assert_eq!(timer.on_the_grid(8 * period, period), 8 * period - 3_000);
        // Back by 2 µs: 2 µs later.
        grid.0.fetch_sub(2_000, Ordering::Relaxed);
        let planned = 9 * period - 3_000;
        assert_eq!(timer.on_the_grid(planned, period), planned + 2_000);
        // A step beyond half a period: the nearest line, forward.
        grid.0.fetch_add(700_000, Ordering::Relaxed);
        let planned = 10 * period - 1_000;
        assert_eq!(timer.on_the_grid(planned, period), planned + 300_000);
    }

    #[test]
    fn runs_periodic_cycles() {
        let stream = crate::StreamConfig::new(32, 96_000).unwrap();
        let mut timer = TimerDriver::new();
        let stop = AtomicBool::new(false);
        let a = timer
            .wait_cycle(stream.period_ns(), &mut [], &stop)
            .unwrap()
            .unwrap();
        let b = timer
            .wait_cycle(stream.period_ns(), &mut [], &stop)
            .unwrap()
            .unwrap();
        assert!(b.start_ns > a.start_ns);
        stop.store(true, Ordering::Release);
        assert_eq!(
            timer
                .wait_cycle(stream.period_ns(), &mut [], &stop)
                .unwrap(),
            None
        );
    }
}
