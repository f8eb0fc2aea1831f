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
//! time sooner. This module owns the wake-up schedule; it must never
//! allocate or block on anything but the clock.

use std::sync::atomic::{AtomicBool, Ordering};

use tessera_sys::clock;

use super::{CycleStart, Driver, DriverError};

/// Wakes the engine every period: the running graph's frames / sample rate,
/// which [`crate::StreamConfig::new`] validated (32 to 4096 frames at 44.1,
/// 48 or 96 kHz), so buffer size changes take effect at the next period.
#[derive(Debug, Default)]
pub struct TimerDriver {
    /// Next scheduled wake-up; 0 before the first cycle.
    next_ns: u64,
    /// Missed periods run back to back rather than skipped, at most.
    catch_up: u64,
    /// How far the grid's clock runs ahead of `CLOCK_MONOTONIC`, when the
    /// first cycle waits for its grid (module doc).
    grid_offset_ns: Option<u64>,
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

    /// Due times on the grid of a clock `offset_ns` ahead of
    /// `CLOCK_MONOTONIC` (a media clock): the first cycle waits for the
    /// next instant at which that clock reads a multiple of the period,
    /// and the rest follow a period apart (module doc). Exact when the
    /// period is a whole number of nanoseconds (48 and 96 kHz's packet
    /// times are); a new period later keeps the old one's phase.
    pub fn on_grid(self, offset_ns: u64) -> Self {
        TimerDriver {
            grid_offset_ns: Some(offset_ns),
            ..self
        }
    }

    /// The first due time: now, or the grid's next line.
    fn first_due(&self, now_ns: u64, period_ns: u64) -> u64 {
        match self.grid_offset_ns {
            None => now_ns,
            Some(offset) => {
                let on_clock = u128::from(now_ns) + u128::from(offset);
                let line = on_clock.div_ceil(u128::from(period_ns)) * u128::from(period_ns);
                (line - u128::from(offset)) as u64
            }
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
        if self.next_ns == 0 {
            self.next_ns = self.first_due(now, period_ns);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_grid_puts_the_first_cycle_on_the_clocks_next_multiple_of_the_period() {
        let free = TimerDriver::new();
        assert_eq!(free.first_due(1_234, 1_000), 1_234, "no grid: now");
        let grid = TimerDriver::new().on_grid(10_300);
        assert_eq!(grid.first_due(1_234, 1_000), 1_700, "11 534 → 12 000");
        assert_eq!(grid.first_due(1_700, 1_000), 1_700, "on a line: now");
        let far = TimerDriver::new().on_grid(u64::MAX - 5);
        assert_eq!(far.first_due(10, 8), 14, "past 2^64 on the grid's clock");
    }

    #[test]
    fn cycles_on_a_grid_are_due_on_its_lines() {
        let stream = crate::StreamConfig::new(48, 48_000).unwrap();
        let period = stream.period_ns();
        let offset = 1_700_000_000_123_456_789;
        let mut timer = TimerDriver::new().on_grid(offset);
        let stop = AtomicBool::new(false);
        for _ in 0..3 {
            let cycle = timer.wait_cycle(period, &mut [], &stop).unwrap().unwrap();
            let due = cycle.start_ns - cycle.wakeup_latency_ns;
            assert_eq!((due + offset) % period, 0, "due {due} off the grid");
        }
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
