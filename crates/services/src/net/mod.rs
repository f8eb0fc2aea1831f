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

/// A rate as `tc` and people write it: bits/s, or with kbit, mbit or gbit
/// ("240mbit", "1gbit", "2.5gbit").
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (number, scale) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)]
        .iter()
        .find_map(|(unit, scale)| lower.strip_suffix(unit).map(|n| (n.trim(), *scale)))
        .unwrap_or((lower.as_str(), 1.0));
    match number.parse::<f64>() {
        Ok(value) if value > 0.0 && (value * scale).is_finite() => Ok((value * scale) as u64),
        _ => Err(format!(
            "{text:?} is not a rate (write e.g. \"240mbit\", \"1gbit\" or bits/s)"
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rates_are_read_as_tc_writes_them() {
        assert_eq!(super::parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(super::parse_rate("240mbit"), Ok(240_000_000));
        assert_eq!(super::parse_rate("2.5Gbit"), Ok(2_500_000_000));
        assert_eq!(super::parse_rate("64000"), Ok(64_000));
        assert!(super::parse_rate("1gbps").is_err());
        assert!(super::parse_rate("-3mbit").is_err());
    }
}
