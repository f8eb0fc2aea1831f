//! Workloads for experiments: periodic real-time tasks (rt-app style), and
//! the interference library — CPU hogs, the NAS EP kernel, a memory-bandwidth
//! streamer, file-system I/O, video players feeding the render service, and
//! wrappers for Debian's rt-app and stress-ng.
//!
//! A workload only does its work and measures itself; where its threads run
//! and how they are scheduled is decided by the caller's setup hook (a cell,
//! a FIFO priority, nothing). It must never allocate inside its timed loop.

pub mod ep;
pub mod external;
pub mod hog;
pub mod io;
pub mod periodic;
pub mod stream;
pub mod threads;
pub mod video;

pub use periodic::{burn_cpu, PeriodicSpec, PeriodicStats, PeriodicTask};
pub use threads::{LoadReport, LoadThreads, Setup, Window};
