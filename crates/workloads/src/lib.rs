//! Workloads for experiments: periodic real-time tasks (rt-app style), the
//! netphone of seed 004 across an emulated LAN of network namespaces
//! ([`lan`], [`netphone`]), paths that lose and delay packets at random
//! ([`impair`]), an AES67 sender on a clock of its own ([`foreign_sender`]),
//! and the interference library — CPU hogs, the
//! NAS EP kernel, a memory-bandwidth streamer, file-system I/O, a build of
//! compiler processes, video players feeding the render service, and
//! wrappers for Debian's rt-app and stress-ng.
//!
//! A workload only does its work and measures itself; where its threads run
//! and how they are scheduled is decided by the caller's setup hook (a cell,
//! a FIFO priority, nothing). It must never allocate inside its timed loop.

pub mod build;
pub mod ep;
pub mod external;
pub mod foreign_sender;
pub mod hog;
pub mod impair;
pub mod io;
pub mod lan;
pub mod netphone;
pub mod periodic;
mod random;
pub mod render_player;
pub mod stream;
pub mod streamer;
pub mod threads;
pub mod video;

pub use periodic::{burn_cpu, PeriodicSpec, PeriodicStats, PeriodicTask};
pub use threads::{LoadReport, LoadThreads, Setup, Window};
