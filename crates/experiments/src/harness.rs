//! The external programs experiments start and stop: Debian's jackd2 and
//! PipeWire (`servers`), PipeWire's RTP modules (`pipewire_rtp`),
//! cyclictest (`cyclictest`), a private `tessera daemon` with its
//! adaptation or RTKit's interface (`daemon`), `tessera guard` (`guard`),
//! tessera's network service
//! with its streamer (`net_service`), a user of a run's own
//! (`session_user`), Debian's rtkit-daemon with the polkit it asks
//! (`stock_rtkit`) and linuxptp between a run's hosts (`ptp`).
//!
//! Each owns its program's command line, readiness and exit: a process is
//! stopped by the PID it was started with, error or not. Nothing here
//! decides what a configuration runs or reads a result for a report.

pub mod cyclictest;
pub(crate) mod daemon;
pub(crate) mod guard;
pub mod net_service;
/// PipeWire's RTP modules beside a PipeWire started here, for interoperation.
pub mod pipewire_rtp;
pub mod ptp;
pub mod servers;
pub mod session_user;
pub(crate) mod stock_rtkit;
