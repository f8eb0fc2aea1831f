//! The external programs experiments start and stop: Debian's jackd2 and
//! PipeWire (`servers`), PipeWire's RTP modules (`pipewire_rtp`),
//! cyclictest (`cyclictest`), a private `tessera daemon` with its
//! adaptation (`daemon`) and tessera's network service with its streamer
//! (`net_service`).
//!
//! Each owns its program's command line, readiness and exit: a process is
//! stopped by the PID it was started with, error or not. Nothing here
//! decides what a configuration runs or reads a result for a report.

pub mod cyclictest;
pub(crate) mod daemon;
pub mod net_service;
/// PipeWire's RTP modules beside a PipeWire started here, for interoperation.
pub mod pipewire_rtp;
pub mod servers;
