//! Drivers: what starts a cycle and what happens to its output.
//!
//! A [`Driver`] runs on the engine's driver thread. `wait_cycle` blocks until
//! the next cycle should start (a timer expiry, a complete input package, or
//! at once when freewheeling) and `end_cycle` writes the cycle's output. This
//! module owns the trait and the error type; each driver lives in its own
//! module. Drivers must never allocate after construction: both methods run
//! in the engine's real-time section.

use std::io;
use std::sync::atomic::AtomicBool;

pub mod freewheel;
pub mod link;
pub mod packet;
pub mod timer;

pub use freewheel::FreewheelDriver;
pub use link::{package_link, LinkConfig, LinkDriver, LinkService};
pub use packet::{PackageAssembler, PacketConfig, PacketDriver};
pub use timer::{GridClock, TimerDriver};

/// The start of a cycle, as a driver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CycleStart {
    /// `CLOCK_MONOTONIC` ns: timer expiry, or first packet of the package.
    pub start_ns: u64,
    /// Periods skipped to realign after a late cycle (timer driver).
    pub skipped_periods: u64,
    /// How late the driver woke after its scheduled wake-up, in ns (timer
    /// driver; 0 for drivers that wait for an event, not a time).
    pub wakeup_latency_ns: u64,
}

impl CycleStart {
    /// A cycle started by an event (a package, or at once) at `start_ns`: nothing
    /// skipped, no wake-up time to be late for.
    pub fn event(start_ns: u64) -> CycleStart {
        CycleStart {
            start_ns,
            skipped_periods: 0,
            wakeup_latency_ns: 0,
        }
    }
}

/// Why a driver cannot run.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("{context}: {source}")]
    Io {
        context: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("invalid driver configuration: {0}")]
    Config(&'static str),
}

impl DriverError {
    pub(crate) fn io(context: &'static str) -> impl FnOnce(io::Error) -> DriverError {
        move |source| DriverError::Io { context, source }
    }
}

/// What starts cycles and takes their output.
pub trait Driver: Send + 'static {
    /// Sizes of the input package and output packet buffers the engine
    /// preallocates (both 0 for drivers without packets).
    fn packet_sizes(&self) -> (usize, usize) {
        (0, 0)
    }

    /// Blocks until the next cycle starts, filling `package` if the driver
    /// receives one. Returns `None` once `stop` is raised (drivers check it at
    /// least every 100 ms or every period, whichever is longer).
    fn wait_cycle(
        &mut self,
        period_ns: u64,
        package: &mut [u8],
        stop: &AtomicBool,
    ) -> Result<Option<CycleStart>, DriverError>;

    /// Called once the cycle's last node finished: writes `output` if the
    /// driver has one and returns when it was written (`CLOCK_MONOTONIC` ns).
    fn end_cycle(&mut self, output: &[u8]) -> Result<Option<u64>, DriverError>;
}
