//! Workloads for experiments: periodic real-time tasks (rt-app style) and the
//! CPU hogs that interfere with them.
//!
//! A workload only burns CPU and measures itself; where its threads run and
//! how they are scheduled is decided by the caller's setup hook (a cell, a
//! FIFO priority, nothing). It must never allocate inside its timed loop.

pub mod periodic;

pub use periodic::{burn_cpu, PeriodicSpec, PeriodicStats, PeriodicTask};
