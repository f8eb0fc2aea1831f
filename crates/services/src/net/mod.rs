//! The network service as a process of its own (seed 000 §2, Fig. 2; seed
//! 004 §3.4): it owns the sockets of its clients' flows, schedules the
//! work of every flow by mClock (reservation, weight, limit) within the
//! service's measured capacity, serves real-time flows on a real-time
//! thread inside its reservation before any bulk work, marks their packets
//! for the queueing disciplines, and counts each flow's bytes, packets,
//! drops and delays. Clients reach it through channels (`tessera-channel`)
//! handed over its Unix socket.
//!
//! - [`wire`]: the control frames and the datagram headers;
//! - [`service`]: the control thread — admission, flows, status;
//! - [`serve`]: a serving thread — heads, the discipline, the capacity;
//! - [`pacing`]: the capacity both serving threads share;
//! - [`counters`]: per-flow counters and delay histograms;
//! - [`discovery`]: SAP — clients' streams announced, others' heard;
//! - [`rtp`]: what it counts of flows that carry RTP (loss, order, jitter);
//! - [`client`]: the client library.
//!
//! The in-process network role of the music application is the sibling
//! module [`crate::network`].

pub mod client;
pub mod counters;
pub mod discovery;
pub mod host;
pub mod pacing;
pub mod rtp;
pub mod serve;
pub mod service;
pub mod wire;

pub use client::Flow;
pub use service::{NetConfig, NetError, NetService, Policy, ThreadHook};
pub use tessera_channel::ChannelError;
pub use tessera_policy::mclock::Discipline;
pub use wire::{Class, FlowRequest, FlowStatus, Multicast, Received, RtpStats, Status, ToSend};
