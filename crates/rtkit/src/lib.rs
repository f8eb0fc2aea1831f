//! RTKit's D-Bus interface, answered with reservations.
//!
//! A Linux desktop hands out real-time scheduling through RTKit
//! (`org.freedesktop.RealtimeKit1` on the system bus): PipeWire's module-rt,
//! the XDG Realtime portal, PulseAudio and JACK clients ask it to make a
//! thread SCHED_RR at a priority ≤ 20, with no admission and no guarantee.
//! With `rtkit = true` in its config, `tessera daemon` owns that name and
//! answers the same calls with what tessera guarantees instead: each
//! realtime request becomes an event-triggered SCHED_DEADLINE reservation
//! for that thread, admitted by the broker within the calling user's quota,
//! bound to the thread's process (its exit releases it), with
//! RESET_ON_FORK, and its budget adapted from the thread's own use (the
//! guard's controller, `tessera_policy::adaptive`, with the period learned
//! from the thread's wake-ups). What admission refuses gets RTKit's own
//! answer or an error, as `rtkit_fallback` says.
//!
//! - [`limits`]: RTKit 0.13's rules (priority ceiling, nice floor,
//!   RLIMIT_RTTIME, bursts of requests, threads per user) and the checks
//!   that the thread is the caller's;
//! - [`grants`]: what was granted to which thread, and the adaptation of the
//!   reserved threads' budgets;
//! - [`bus`]: the D-Bus object and its connection (zbus);
//! - [`private_bus`]: a bus of one's own for tests and benchmarks.
//!
//! It must never set a thread's scheduling but through the broker (a
//! reservation) or, for RTKit's own answers (the FIFO fallback, nice
//! levels, resets), through `tessera_sys::sched`; and never act for a
//! caller on a thread that is not of a process of the caller's user.

pub mod bus;
pub mod grants;
pub mod limits;
pub mod private_bus;

pub use bus::{serve, Service};
pub use grants::{GrantKind, GrantStatus, Grants};
pub use limits::{Caller, Limits, RtkitError};
