//! tessera's QoS services (seed 000 §2): each runs on threads of its own
//! cell and serves other cells through preallocated in-process channels.
//!
//! - [`network`]: owns a UDP socket, assembles packets into packages, hands
//!   each to a client cell through a package link and sends the client's
//!   answer back, measuring Δt = t2 − t1 where the seed did (its driver);
//! - [`console`]: real-time-safe logging — a one-way channel from any
//!   real-time thread to a console thread that writes the lines out;
//! - [`render`]: the GUI service — clients submit frames, the service
//!   composites them and measures how long each waited.
//!
//! A service never decides its own scheduling: the caller's setup hook joins
//! its threads to a cell (or sets a priority) before they serve.

pub mod console;
pub mod network;
pub mod render;

/// A service thread's setup hook: join a cell, set a priority; an error
/// stops the service before it serves.
pub type Setup = Box<dyn FnOnce() -> Result<(), String> + Send>;
