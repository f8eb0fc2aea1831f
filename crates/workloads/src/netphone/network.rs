//! The netphone's LAN: hosts `mike` and `speaker` joined by one shaped
//! link (both ends: the link's rate, strict priority by packet priority),
//! the seed's network. With a flood, a third host `flood` hangs off mike's
//! host by a link of twice the rate (plain FIFO) and mike's host forwards
//! its datagrams to the speaker's: they enter the netphone's link through
//! the same queue as mike's packets, as traffic converging on a switch's
//! port to the receiving host does, and always fill it. (A packet's kernel
//! priority does not survive a veth — the kernel clears it when a packet
//! changes namespace — so the link that must honour the marking starts in
//! the sender's own host.)
//!
//! The MTU is the seed's ATM link's (classical IP over ATM, 9180 bytes), so
//! that the 4 KB packets travel whole; the flood's datagrams are
//! Ethernet-sized, as the seed's IP traffic was.
//!
//! Owns the topology and the roles' addresses; it must never run a role's
//! work (the roles do, on threads it starts in their hosts, and the
//! caller's processes, started by commands it prepares for the speaker's
//! host).

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::thread::JoinHandle;

use crate::lan::{End, HostId, Lan, LanError, LinkId, Shaping};

/// The links' MTU.
pub const MTU: u32 = super::Stream::LINK_MTU;
/// The speaker's port (in its own host: nothing else listens there).
pub const SPEAKER_PORT: u16 = 5004;
/// The port the flood is sent to, at the speaker's host ("discard").
pub const FLOOD_PORT: u16 = 9;
/// The flood's link is this many times as fast as the netphone's.
const FLOOD_LINK_FACTOR: u64 = 2;

pub(crate) struct PhoneLan {
    lan: Lan,
    mike: HostId,
    speaker: HostId,
    flood: Option<HostId>,
    link: LinkId,
}

impl PhoneLan {
    /// The hosts and links, addressed, shaped and routed. Needs root.
    pub(crate) fn create(link_bps: u64, flood: bool) -> Result<PhoneLan, LanError> {
        let mut lan = Lan::new();
        let mike = lan.add_host("mike")?;
        let speaker = lan.add_host("speaker")?;
        let shaping = |rate_bps, prio| Some(Shaping { rate_bps, prio });
        let link = lan.link(End::Host(mike), End::Host(speaker), shaping(link_bps, true))?;
        lan.set_mtu(link, MTU)?;
        let flood = match flood {
            false => None,
            true => {
                let host = lan.add_host("flood")?;
                let uplink = lan.link(
                    End::Host(host),
                    End::Host(mike),
                    shaping(link_bps * FLOOD_LINK_FACTOR, false),
                )?;
                lan.forward(mike)?;
                lan.route_default(host, uplink)?;
                // The speaker answers nothing, but a host accepts only
                // packets it could route back (reverse-path filtering).
                lan.route_default(speaker, link)?;
                Some(host)
            }
        };
        Ok(PhoneLan {
            lan,
            mike,
            speaker,
            flood,
            link,
        })
    }

    /// Where mike sends.
    pub(crate) fn speaker_address(&self) -> SocketAddr {
        let ip = self.lan.address(self.link, End::Host(self.speaker));
        SocketAddr::new(ip.into(), SPEAKER_PORT)
    }

    /// Where the flood goes.
    pub(crate) fn flood_address(&self) -> SocketAddr {
        SocketAddr::new(self.speaker_address().ip(), FLOOD_PORT)
    }

    pub(crate) fn spawn_mike<R: Send + 'static>(
        &self,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Result<JoinHandle<Result<R, LanError>>, LanError> {
        self.lan.spawn_in(End::Host(self.mike), "mike", work)
    }

    pub(crate) fn spawn_speaker<R: Send + 'static>(
        &self,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Result<JoinHandle<Result<R, LanError>>, LanError> {
        self.spawn_in_speaker_host("speaker", work)
    }

    /// Starts `work` on a thread named `name` in the speaker's host.
    pub(crate) fn spawn_in_speaker_host<R: Send + 'static>(
        &self,
        name: &str,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Result<JoinHandle<Result<R, LanError>>, LanError> {
        self.lan.spawn_in(End::Host(self.speaker), name, work)
    }

    /// `program`, to be started as a process in the speaker's host.
    pub(crate) fn speaker_command(&self, program: &Path) -> Result<Command, String> {
        let program = program
            .to_str()
            .ok_or_else(|| format!("{}: not a UTF-8 path", program.display()))?;
        self.lan
            .command(End::Host(self.speaker), program)
            .map_err(|e| e.to_string())
    }

    /// Starts the flooder in the flood's host (None without a flood).
    pub(crate) fn spawn_flooder<R: Send + 'static>(
        &self,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Option<Result<JoinHandle<Result<R, LanError>>, LanError>> {
        let host = self.flood?;
        Some(self.lan.spawn_in(End::Host(host), "flood", work))
    }

    /// A socket bound to the flood's port in the speaker's host, which
    /// nobody reads: the host does all its receive work for each datagram,
    /// then drops it at the full socket.
    pub(crate) fn flood_sink(&self) -> Result<UdpSocket, String> {
        let address = self.flood_address();
        self.lan
            .spawn_in(End::Host(self.speaker), "flood-sink", move || {
                UdpSocket::bind(address)
            })
            .map_err(|e| e.to_string())?
            .join()
            .map_err(|_| "the flood sink's thread panicked".to_string())?
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("bind the flood sink at {address}: {e}"))
    }

    /// UDP datagrams the speaker's host took in so far, delivered or
    /// dropped at a full socket (its UDP counters: InDatagrams + InErrors).
    pub(crate) fn speaker_udp_arrivals(&self) -> Result<u64, String> {
        let snmp = self
            .lan
            .read_net_file(self.speaker, "snmp")
            .map_err(|e| e.to_string())?;
        udp_arrivals(&snmp).ok_or_else(|| "no UDP counters in /proc/net/snmp".into())
    }

    pub(crate) fn host_namespaces(&self) -> Vec<(String, u64)> {
        self.lan.host_namespaces()
    }
}

/// InDatagrams + InErrors of /proc/net/snmp's "Udp:" lines (a header line,
/// then a line of values).
fn udp_arrivals(snmp: &str) -> Option<u64> {
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (header, values) = (udp.next()?, udp.next()?);
    let value = |name: &str| -> Option<u64> {
        let column = header.split_whitespace().position(|h| h == name)?;
        values.split_whitespace().nth(column)?.parse().ok()
    };
    Some(value("InDatagrams")? + value("InErrors")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_arrivals_add_what_was_delivered_and_what_was_dropped() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\n\
                    Udp: 120 3 45 7 44\n\
                    UdpLite: InDatagrams NoPorts InErrors\nUdpLite: 0 0 0\n";
        assert_eq!(udp_arrivals(snmp), Some(165));
        assert_eq!(udp_arrivals("Ip: Forwarding\nIp: 1\n"), None);
    }
}
