//! tessera-channel: channels between processes (layer 3 of the design,
//! seed 000 §2.1 and seed 003 §4).
//!
//! A channel is a single-producer single-consumer ring of fixed-size slots
//! in a sealed memfd that both processes map. The creator hands one end to
//! the other process over a Unix socket (the memfd travels by SCM_RIGHTS);
//! a side that has to wait sleeps on a futex in the mapping, and the other
//! side makes the wake-up system call only when it sees that flag set. A
//! message is one slot; bulk bytes stream through the slots. Each end holds
//! a pidfd of the other process, so a wait on a dead peer ends in
//! [`ChannelError::PeerGone`] within [`PEER_CHECK`], and what a dying peer
//! had half written is never seen: publication is one release store.
//!
//! * [`protocol`]: the ring and its wake-up handshake over any memory (the
//!   memory-ordering argument is its doc; `tests/loom.rs` checks it);
//! * `mapped`: the layout of the shared mapping;
//! * [`handover`]: the hand-over record, and admission by SO_PEERCRED;
//! * [`Channel`], [`Producer`], [`Consumer`], [`Link`]: the client API;
//! * [`bench`]: a message across processes against a same-process hand-off.
//!
//! docs/channels.md describes the layout, the orderings, the wake-ups, peer
//! death and the limits. This crate makes no system call of its own (they
//! are tessera-sys's) and has no `unsafe`: the mapping is reached only
//! through tessera-sys's atomic accessors and copies. It must never block a
//! real-time caller: only the `*_wait` calls sleep, and always with a
//! timeout.

#![forbid(unsafe_code)]

pub mod bench;
mod endpoint;
mod error;
pub mod handover;
mod mapped;
pub mod protocol;

pub use endpoint::{Channel, Consumer, Link, Producer, PEER_CHECK};
pub use error::ChannelError;
pub use mapped::{MAX_MAPPING, MAX_SLOT_SIZE};
pub use protocol::Readiness;
