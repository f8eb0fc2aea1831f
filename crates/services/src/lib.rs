//! tessera's QoS services (seed 000 §2): each runs on threads of its own
//! cell and serves other cells, through channels between processes or
//! preallocated in-process ones.
//!
//! - [`net`]: the network service as a process of its own — flows with
//!   mClock reservations, real-time packets first, clients over channels;
//! - [`network`]: an application's network role: a UDP socket (or a flow
//!   of [`net`]), packets assembled into packages handed to a client cell
//!   through a package link, the client's answer sent back, Δt = t2 − t1
//!   measured where the seed did (its driver);
//! - [`console`]: real-time-safe logging — a one-way channel from any
//!   real-time thread to a console that writes the lines out: a thread of
//!   the application, or the console service as a process of its own
//!   (`tessera serve console`) that writers in any process open by name;
//! - [`render`]: the GUI services — seed 003's render service as a process
//!   (per-client reservations, SLAs from probe requests, a front-end task
//!   enforcing them), its traditional single-threaded baseline, and the
//!   in-process compositor of the music demo;
//! - [`control`]: what every service process shares — control frames, the
//!   listening socket, who may connect, threads started after their setup.
//!
//! A service never decides its own scheduling: the caller's setup hook joins
//! its threads to a cell (or sets a priority) before they serve; the
//! network service's process ([`net::host`]) asks the broker for its cell.

pub mod aes67;
pub mod console;
pub mod control;
pub mod net;
pub mod network;
pub mod render;

/// A service thread's setup hook: join a cell, set a priority; an error
/// stops the service before it serves.
pub type Setup = Box<dyn FnOnce() -> Result<(), String> + Send>;
