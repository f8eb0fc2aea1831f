//! AES67 network audio in cells (seed 000 §5's audio between machines, in
//! the standard studios use): RTP streams received and sent through the
//! network service, played into and taken from a cell's audio graph by
//! nodes, stamped by the media clock, described in SDP and announced with
//! SAP. The protocol formats themselves are `tessera_aes67`'s.
//!
//! - [`clock`]: the media clock — PTP through linuxptp when it runs, else
//!   the system clock — and its label;
//! - [`follow`]: how a media clock follows a grandmaster through a ptp4l
//!   that adjusts no clock (the offset and its rate, PTP's losses);
//! - [`stream`]: a stream, the flow that carries it, its description;
//! - [`node`]: the graph's source and sink nodes of streams;
//! - [`host`]: an AES67 host's graph, its streams routed through it (what
//!   `tessera aes67` runs and the AES67 experiment drives).

pub mod clock;
pub mod follow;
pub mod host;
pub mod node;
pub mod stream;

pub use clock::{ClockFollower, ClockSource, MediaClock, OffsetRecord, PtpFollowing};
pub use node::{Playout, SourceSettings, StreamCounters, StreamCounts, StreamSink, StreamSource};
pub use node::{AGE_BUCKETS, AGE_BUCKET_NS};
pub use stream::{origin_towards, Path, StreamSpec, PAYLOAD_TYPE};
