//! What the broker knows of the machine and of its own privileges, read once
//! at start: cores, deadline capacity, the period range, whether it may set
//! SCHED_DEADLINE (CAP_SYS_NICE) and write cgroups (root).
//!
//! It must never change the machine.

use serde::{Deserialize, Serialize};
use tessera_policy::cell::Limits;
use tessera_policy::{Bandwidth, Machine};
use tessera_sys::kernel;

/// What tessera can guarantee here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Root: reservations, cpusets and weights are enforced by the kernel.
    Guaranteed,
    /// CAP_SYS_NICE without root: global reservations only, no cpusets.
    ReservationsOnly,
    /// Neither: cells are admitted and tracked but nothing is enforced.
    BestEffort,
}

impl Mode {
    pub fn detect() -> Mode {
        if std::env::var_os("TESSERA_FORCE_BEST_EFFORT").is_some() {
            return Mode::BestEffort;
        }
        match (
            tessera_sys::caps::is_root(),
            tessera_sys::caps::has_sys_nice(),
        ) {
            (true, _) => Mode::Guaranteed,
            (false, true) => Mode::ReservationsOnly,
            (false, false) => Mode::BestEffort,
        }
    }

    /// The loud label and the way out, for every report.
    pub fn banner(&self) -> Option<String> {
        match self {
            Mode::Guaranteed => None,
            Mode::ReservationsOnly => Some(
                "LIMITED MODE: CAP_SYS_NICE but not root — SCHED_DEADLINE reservations are \
                 enforced, but cpusets (dedicated cores, per-core partitions) and weights are \
                 not; run as root for them"
                    .into(),
            ),
            Mode::BestEffort => Some(format!(
                "BEST-EFFORT MODE: no CAP_SYS_NICE — cells are admitted and tracked but NOTHING \
                 IS GUARANTEED (threads keep their normal scheduling). To get guarantees, {}",
                tessera_sys::error::GRANT_CAP_SYS_NICE
            )),
        }
    }
}

/// Machine facts and privileges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Facts {
    pub mode: Mode,
    pub machine: Machine,
    pub capacity_source: String,
    pub kernel: String,
}

impl Facts {
    pub fn detect() -> tessera_sys::Result<Facts> {
        let cores = kernel::online_cpus()?;
        let (min, max) = kernel::deadline_period_range();
        let cap = kernel::deadline_capacity();
        Ok(Facts {
            mode: Mode::detect(),
            machine: Machine {
                limits: Limits {
                    cores,
                    min_period_ns: min.as_nanos() as u64,
                    max_period_ns: max.as_nanos() as u64,
                },
                capacity: Bandwidth::from_fraction(cap.per_cpu),
                system_cores: 1,
            },
            capacity_source: cap.source,
            kernel: kernel::kernel_release(),
        })
    }
}
