//! The freewheel driver: starts each cycle as soon as the previous one ended
//! (JACK's freewheel mode), for offline rendering and for tests that count
//! cycles rather than time them. It never sleeps, so it must never be used
//! where the period matters.

use std::sync::atomic::{AtomicBool, Ordering};

use tessera_sys::clock;

use super::{CycleStart, Driver, DriverError};

/// Runs cycles back to back.
#[derive(Debug, Default)]
pub struct FreewheelDriver;

impl Driver for FreewheelDriver {
    fn wait_cycle(
        &mut self,
        _period_ns: u64,
        _package: &mut [u8],
        stop: &AtomicBool,
    ) -> Result<Option<CycleStart>, DriverError> {
        if stop.load(Ordering::Acquire) {
            return Ok(None);
        }
        Ok(Some(CycleStart::event(clock::monotonic_ns())))
    }

    fn end_cycle(&mut self, _output: &[u8]) -> Result<Option<u64>, DriverError> {
        Ok(None)
    }
}
