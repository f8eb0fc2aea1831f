//! When a load runs within a run: its window, from its start to its stop.
//! A leaf shared by the loads and the videos (and the soak).

use std::time::Duration;
use tessera_scenario::Interference;
use tessera_workloads::Window;

/// When a load runs: from its start to its stop, within the run.
pub(crate) fn load_window(load: &Interference, total: Duration) -> Window {
    Window {
        start_after: load.start,
        run_for: Some(load.stop.unwrap_or(total).min(total) - load.start),
    }
}
