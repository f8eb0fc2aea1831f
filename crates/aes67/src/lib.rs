//! tessera-aes67: the protocol logic of AES67 network audio, with no I/O.
//!
//! AES67 carries PCM audio as RTP over UDP (RFC 3550, payloads of RFC 3190
//! and 3551), describes each stream in SDP (RFC 4566) and announces the
//! descriptions with SAP (RFC 2974). This crate owns those formats and the
//! two stateful pieces between them and an audio graph: the sender's
//! [`Packetizer`] and the receiver's [`JitterBuffer`]. It opens no socket,
//! reads no clock and starts no thread: datagrams and times come from the
//! caller, so everything here is deterministic and testable.
//!
//! * [`format`](mod@format): what a stream is (encoding, rate, channels, packet size);
//! * [`rtp`]: the RTP header and wrap-aware sequence and timestamp deltas;
//! * [`payload`]: f32 samples to and from big-endian L16 / L24;
//! * [`jitter`]: the receiver's ring, indexed by media timestamp;
//! * [`packetizer`]: a graph's cycles into whole RTP datagrams;
//! * [`playout`]: when to play a sender on a clock of its own, and the
//!   slips that follow its drift;
//! * [`redundancy`]: the merge of a stream's two paths (ST 2022-7);
//! * [`sdp`]: the one-audio-media session descriptions AES67 uses;
//! * [`sap`]: announcements and the directory of sessions heard.
//!
//! The real-time path ([`rtp::parse`], [`payload`], [`JitterBuffer::push`],
//! [`JitterBuffer::read`], [`JitterBuffer::advance`], [`Packetizer::push`],
//! [`ArrivalPlayout`], [`Merge::accept`])
//! never allocates: buffers are sized in the constructors or lent by the
//! caller. SDP and SAP are control-path code and allocate freely.

pub mod format;
pub mod jitter;
pub mod packetizer;
pub mod payload;
pub mod playout;
pub mod redundancy;
pub mod rtp;
pub mod sap;
pub mod sdp;

pub use format::{Encoding, FormatError, StreamFormat};
pub use jitter::{Arrival, JitterBuffer, JitterCounters};
pub use packetizer::Packetizer;
pub use playout::{ArrivalPlayout, CyclePlay, PlayoutConfig, PlayoutCounts, Slip};
pub use redundancy::{Merge, MergeCounts, PathCounts};
pub use rtp::{RtpError, RtpHeader, RtpPacket};
pub use sap::{Directory, DirectoryError, HeardSession, SapError, SapPacket};
pub use sdp::{RefClock, SdpError, SessionDescription};
