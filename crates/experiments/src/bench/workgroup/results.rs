//! What a workgroup benchmark run measured — its options, each
//! configuration's figures, each step's — as written to workgroup.json and
//! read by the report. A leaf of the benchmark: the run, the figures and
//! the report use it, and it uses none of them.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use tessera_measure::Summary;

/// 128 frames at 48 kHz.
pub const PERIOD_NS: u64 = 2_666_666;
/// The host's threads: a callback and three workers.
pub const THREADS: usize = 4;
/// The chain's work, % of the period, before and after each up-step.
pub const LOW_PCT: u64 = 30;
pub const HIGH_PCT: u64 = 70;
/// The host's SCHED_FIFO priority, and the rt-app tasks' beside it.
pub const PRIORITY: u32 = 70;
/// The goals.
pub const GOAL_MISSES_PER_STEP: u64 = 1;
pub const GOAL_CONVERGE_CYCLES: u64 = 16;
pub const GOAL_RESERVED_PER_DEMAND: f64 = 1.15;
pub const GOAL_CALL_P99_NS: f64 = 2_000.0;

/// The four ways of running the same host that are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Config {
    /// Its threads join a workgroup and mark each cycle (libtessera).
    Workgroup,
    /// SCHED_FIFO threads under `tessera guard pid` (its /proc sampling).
    Guard,
    /// The same with a fixed 95 % share (`--fixed 95`).
    Fixed95,
    /// SCHED_FIFO threads, nothing else.
    Fifo,
}

impl Config {
    pub const ALL: [Config; 4] = [
        Config::Workgroup,
        Config::Guard,
        Config::Fixed95,
        Config::Fifo,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Config::Workgroup => "workgroup",
            Config::Guard => "guard",
            Config::Fixed95 => "fixed-95",
            Config::Fifo => "fifo",
        }
    }

    /// How its threads are scheduled, in words.
    pub fn scheduling(self) -> String {
        match self {
            Config::Workgroup => format!(
                "SCHED_FIFO {PRIORITY}, then each thread joins the workgroup \
                 (tessera_workgroup_open_for, join) and marks every cycle: per-cycle feedback"
            ),
            Config::Guard => format!(
                "SCHED_FIFO {PRIORITY} under `tessera guard pid --rt-only` \
                 (its adaptive budgets from /proc every 100 ms)"
            ),
            Config::Fixed95 => format!(
                "SCHED_FIFO {PRIORITY} under `tessera guard pid --rt-only --fixed 95` \
                 (95 % of a core's capacity, shared out by use)"
            ),
            Config::Fifo => format!("SCHED_FIFO {PRIORITY}, nothing else"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    /// Measured seconds per configuration.
    pub seconds: u64,
    /// Seconds between two steps of the chain's work.
    pub step_seconds: u64,
    pub out_dir: PathBuf,
}

impl Options {
    pub fn new(out_dir: PathBuf) -> Options {
        Options {
            seconds: 60,
            step_seconds: 10,
            out_dir,
        }
    }

    /// Refuses options no run could use.
    pub fn check(&self) -> Result<(), String> {
        if self.step_seconds == 0 {
            return Err("--step-seconds: at least 1".into());
        }
        if self.seconds < 2 * self.step_seconds {
            return Err(format!(
                "--seconds {}: at least two steps of {} s (one up, one down)",
                self.seconds, self.step_seconds
            ));
        }
        Ok(())
    }
}

/// results/workgroup-<unix time>.
pub fn default_out_dir() -> PathBuf {
    crate::bench::output::default_dir("workgroup")
}

/// One step of the chain's work and what followed it, until the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    /// Seconds from the start of the run.
    pub at_s: f64,
    pub from_pct: u64,
    pub to_pct: u64,
    /// Cycles of the step (until the next step).
    pub cycles: u64,
    /// Cycles missed in it (the callback finished after the deadline, or
    /// could not start before it).
    pub missed: u64,
    /// Cycles from the step until the reserved budget settled (within 10 %
    /// of its median over the step's second half, and stayed); None: no
    /// reservation, or it never settled.
    pub converged_after: Option<u64>,
}

/// One configuration's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigResult {
    pub config: Config,
    pub scheduling: String,
    /// Cycles on the grid, and missed of them.
    pub cycles: u64,
    pub missed: u64,
    /// Each step (the first phase, before any step, is not one).
    pub steps: Vec<StepResult>,
    /// The largest `converged_after` over the up-steps (None if any never
    /// settled or nothing is reserved).
    pub converge_up_cycles: Option<u64>,
    /// In the second half of the high phases: the members' reserved budget
    /// per cycle (summed, median) ÷ the sum of each member's p99 CPU time
    /// per cycle (all of it, from the end of its last cycle: what its
    /// reservation pays). None when nothing is reserved.
    pub reserved_per_p99_demand: Option<f64>,
    /// Per thread (0 the callback), over the same cycles.
    pub threads: Vec<ThreadFigures>,
    /// `interval_start` + `interval_finish`, ns, per member and cycle
    /// (workgroup only).
    pub call_ns: Option<Summary>,
    /// Each thread's join code (workgroup only: 0 reserved, 1 best-effort).
    pub joined: Vec<i32>,
    /// What did not go as planned, and the interference's own summaries.
    pub notes: Vec<String>,
}

/// One thread's figures over the second halves of the high phases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadFigures {
    /// 0: the callback; 1–3: the workers.
    pub thread: usize,
    /// Its CPU time per cycle, p99.
    pub p99_cpu_ns: f64,
    /// Its budget per cycle, median (0: none reserved).
    pub median_budget_ns: u64,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkgroupResults {
    pub tool_version: String,
    pub started_at: String,
    pub machine: String,
    pub period_ns: u64,
    pub threads: usize,
    pub low_pct: u64,
    pub high_pct: u64,
    pub seconds: u64,
    pub step_seconds: u64,
    pub interference: String,
    /// How many system calls each interval call makes, and how that is known.
    pub syscalls: String,
    pub configs: Vec<ConfigResult>,
    pub total_s: f64,
    /// Why the run stopped early, if it did.
    pub stopped: Option<String>,
}

impl WorkgroupResults {
    pub fn config(&self, config: Config) -> Option<&ConfigResult> {
        self.configs.iter().find(|c| c.config == config)
    }
}
