//! Unmodified programs in cells. Audio programs (JACK2, PipeWire, ALSA and
//! RtAudio code) make their own audio threads real-time after they start;
//! this crate finds those threads as they appear and gives each its own
//! reservation, and, for the audio servers people run, adapts every
//! reservation's budget to what the thread uses (seed 001 §3.4).
//!
//! It reaches the kernel only through `tessera-sys` and decides admission
//! only through the broker: it must never set a thread's scheduling itself.

pub mod follow;
pub mod guard;
pub mod lockstep;
pub mod monitor;
pub mod record;
pub mod server;
pub mod share;
pub mod share_cells;
pub mod supervise;
pub mod watch;

pub mod error;

pub(crate) use error::fail;
pub use error::GuardError;
