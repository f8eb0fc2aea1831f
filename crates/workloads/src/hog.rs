//! CPU hogs: threads that keep a fraction of a CPU busy (their weight in
//! the load), the "CPU load" of the latency probe and the best-effort
//! interference of the isolation experiments.
//!
//! A hog at load `x` burns `x` × 10 ms of its own CPU time in every 10 ms
//! slice and sleeps the rest; at load 1 it never sleeps. It must never pick
//! its scheduling (the setup hook does) nor allocate while it runs.

use crate::periodic::burn_cpu;
use crate::threads::{LoadThreads, Setup, Window};
use std::time::Duration;
use tessera_sys::clock::monotonic_ns;

/// The duty-cycle slice: short enough that 50 % looks like 50 % to a 5 ms
/// probe, long enough that sleeping costs nothing.
pub const SLICE: Duration = Duration::from_millis(10);

#[derive(Debug, Clone, PartialEq)]
pub struct HogSpec {
    pub name: String,
    pub threads: usize,
    /// Fraction of a CPU each thread burns, in (0, 1].
    pub load: f64,
    pub window: Window,
}

/// Starts the hogs' threads (set up, waiting for `start`). Units: slices.
pub fn spawn(spec: &HogSpec, setup: impl FnMut(usize) -> Setup) -> std::io::Result<LoadThreads> {
    let load = spec.load.clamp(0.0, 1.0);
    LoadThreads::spawn(
        &spec.name,
        "slices",
        spec.threads,
        spec.window,
        setup,
        move |_, span| {
            let slice = SLICE.as_nanos() as u64;
            let busy = SLICE.mul_f64(load);
            let mut slices = 0;
            let mut next = monotonic_ns();
            while span.running() {
                burn_cpu(busy);
                slices += 1;
                if load < 1.0 {
                    // Stay on the grid; after a long preemption restart
                    // from now rather than burning the backlog.
                    next = (next + slice).max(monotonic_ns());
                    span.sleep_until(next);
                }
            }
            Ok(slices)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(load: f64, threads: usize, millis: u64) -> crate::LoadReport {
        let spec = HogSpec {
            name: "hog".into(),
            threads,
            load,
            window: Window::lasting(Duration::from_millis(millis)),
        };
        let hogs = spawn(&spec, |_| Box::new(|| Ok(()))).unwrap();
        hogs.start(monotonic_ns());
        hogs.join()
    }

    #[test]
    fn a_full_hog_burns_most_of_its_window() {
        let report = run(1.0, 1, 300);
        // CPU time can only be lost to other tasks (a shared machine), never
        // gained: the bound is loose on purpose.
        assert!(report.cpu_ns() >= 30_000_000, "{}", report.describe());
        assert!(report.cpu_ns() <= report.threads[0].wall_ns + 10_000_000);
    }

    #[test]
    fn a_half_hog_sleeps_half_the_time() {
        let report = run(0.5, 2, 300);
        let per_thread = report.cpu_ns() as f64 / 2.0;
        let wall = report.wall_s() * 1e9;
        assert!(per_thread <= 0.5 * wall + 20e6, "{}", report.describe());
        assert!(report.units() >= 2, "{}", report.describe());
    }
}
