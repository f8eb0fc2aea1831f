//! `[subject.network_app]` of an `audio-server` subject: instead of one
//! server with load clients, two hosts (network namespaces on a veth pair),
//! each with its own jackd and a network-audio client that sends its output
//! to the other host over UDP and plays what it receives through a jitter
//! buffer (`tessera-jack-peer --net-listen …`).
//!
//! ```toml
//! [subject.network_app]
//! jitter = 4        # the jitter buffer's latency, in periods (default 4)
//! ```
//!
//! Owns that table's parsing and its refusals. Like the rest of
//! `scenario`, it must never touch the machine beyond looking for the
//! programs it needs.

use super::{refuse, RawSubject, Refusal, ServerKind};
use serde::Deserialize;
use toml::Spanned;

/// The jitter buffer's latency when the file names none, in periods.
const DEFAULT_JITTER: u32 = 4;
/// The largest the client takes.
const MAX_JITTER: u32 = 64;
/// The largest period a packet of the client carries.
const MAX_FRAMES: u32 = 512;

/// The network-audio application on two hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkApp {
    /// Periods the receiver holds before it plays: its latency, and how
    /// late a packet may come before it is too late.
    pub jitter: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNetworkApp {
    jitter: Option<Spanned<u32>>,
}

/// Validates the table of `s`, an audio-server subject on `server`.
pub(super) fn subject(
    raw: &Spanned<RawNetworkApp>,
    s: &RawSubject,
    server: ServerKind,
) -> Result<NetworkApp, Refusal> {
    if server != ServerKind::Jack {
        return refuse(
            raw.span(),
            "the network application runs on two jackd2 hosts: write server = \"jackd\"",
        );
    }
    if !s.client.is_empty() || s.staircase.is_some() {
        return refuse(
            raw.span(),
            "each host runs only the network client: remove [[subject.client]] and [subject.staircase]",
        );
    }
    if let Some(frames) = s.frames.as_ref().filter(|f| *f.get_ref() > MAX_FRAMES) {
        return refuse(
            frames.span(),
            format!(
                "the network client carries periods of at most {MAX_FRAMES} frames, not {}",
                frames.get_ref()
            ),
        );
    }
    let jitter = match &raw.get_ref().jitter {
        None => DEFAULT_JITTER,
        Some(j) if (1..=MAX_JITTER).contains(j.get_ref()) => *j.get_ref(),
        Some(j) => {
            return refuse(
                j.span(),
                format!(
                    "jitter is the buffer's latency in periods, 1 to {MAX_JITTER}, not {}",
                    j.get_ref()
                ),
            )
        }
    };
    Ok(NetworkApp { jitter })
}
