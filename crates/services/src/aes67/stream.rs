//! An AES67 stream as tessera sends or receives it: where it goes (on one
//! path, or two for ST 2022-7), its format and payload type, the network
//! service flows that carry it (real-time flows reserving the stream's
//! rate, joined to its group, counted as RTP), and the SDP that describes
//! it to others.
//!
//! It owns the mapping between a stream and a flow request and between a
//! stream and its description; it opens nothing itself.

use super::clock::MediaClock;
use crate::net::{Class, FlowRequest, Multicast};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use tessera_aes67::sdp::RefClock;
use tessera_aes67::{SessionDescription, StreamFormat};

/// The dynamic RTP payload type AES67 devices customarily use.
pub const PAYLOAD_TYPE: u8 = 96;
/// The largest datagram a receiving flow takes: any sender's packet that
/// fits an Ethernet frame (others may packetise differently from us).
const LARGEST_DATAGRAM: usize = 1500;
/// A stream's flow may go this fraction (1/2) faster than the stream's
/// rate: its packets come at that rate on average but late ones in bursts
/// (a late cycle, a stalled vCPU), and a real-time flow limited to exactly
/// its rate would hold every later packet back by the lateness of the
/// latest burst — for good, since a constant-rate stream never leaves the
/// limit room to catch up. Half as fast again drains such a lag in twice
/// its length, and keeps the limits admission adds up (a forwarding host's
/// 64 sent streams of 8 channels, L24, 1 ms) under a gigabit.
const LIMIT_HEADROOM: u64 = 2;
/// Slots of a stream's channels each way: 64 packets, well over any jitter
/// buffer's worth of 1 ms packets.
const SLOTS: usize = 64;

/// The address this host sends to `destination` from: `interface` when one
/// is named, else the one the routing table picks (a description's origin
/// must be a real address; 0.0.0.0 when there is no route at all).
pub fn origin_towards(interface: Ipv4Addr, destination: SocketAddrV4) -> Ipv4Addr {
    if !interface.is_unspecified() {
        return interface;
    }
    let local = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).and_then(|socket| {
        socket.connect(destination)?;
        socket.local_addr()
    });
    match local {
        Ok(SocketAddr::V4(local)) => *local.ip(),
        _ => Ipv4Addr::UNSPECIFIED,
    }
}

/// One stream.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StreamSpec {
    /// For flows, counters and the SDP's session name.
    pub name: String,
    /// The group (or unicast address) and port the stream is sent to.
    pub address: SocketAddrV4,
    /// Where it also goes on the second network (ST 2022-7), if it does.
    pub secondary: Option<SocketAddrV4>,
    pub format: StreamFormat,
    pub payload_type: u8,
    /// Whether format and payload type come from the stream's description
    /// (SDP): a receiver then plays that payload type only, else any
    /// dynamic one.
    pub described: bool,
}

/// A stream's path: the primary network's, or the secondary's (ST 2022-7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Primary,
    Secondary,
}

impl StreamSpec {
    /// A stream of one path, its format told by the caller (not described).
    pub fn new(
        name: impl Into<String>,
        address: SocketAddrV4,
        format: StreamFormat,
        payload_type: u8,
    ) -> StreamSpec {
        StreamSpec {
            name: name.into(),
            address,
            secondary: None,
            format,
            payload_type,
            described: false,
        }
    }

    /// What the stream takes on the wire, bits/s.
    pub fn bits_per_second(&self) -> u64 {
        self.format.wire_bits_per_second()
    }

    /// The stream's paths and their addresses: the primary, then the
    /// secondary if it has one.
    pub fn paths(&self) -> impl Iterator<Item = (Path, SocketAddrV4)> {
        std::iter::once((Path::Primary, self.address))
            .chain(self.secondary.map(|a| (Path::Secondary, a)))
    }

    /// The flow that receives the stream's `path` at `address` on
    /// `interface`: bound to its group and port (or to the port on every
    /// address, for a unicast stream).
    pub fn receive_request(
        &self,
        (path, address): (Path, SocketAddrV4),
        interface: Ipv4Addr,
    ) -> FlowRequest {
        let bind = match address.ip().is_multicast() {
            true => address,
            false => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, address.port()),
        };
        FlowRequest {
            max_datagram: LARGEST_DATAGRAM,
            ..self.flow(flow_name(&self.name, "in", path), bind, None, interface)
        }
    }

    /// The flow that sends the stream's `path` to `address` from
    /// `interface`.
    pub fn send_request(
        &self,
        (path, address): (Path, SocketAddrV4),
        interface: Ipv4Addr,
    ) -> FlowRequest {
        let bind = SocketAddrV4::new(interface, 0);
        FlowRequest {
            max_datagram: self.format.packet_bytes(),
            ..self.flow(
                flow_name(&self.name, "out", path),
                bind,
                Some(address),
                interface,
            )
        }
    }

    fn flow(
        &self,
        name: String,
        bind: SocketAddrV4,
        peer: Option<SocketAddrV4>,
        interface: Ipv4Addr,
    ) -> FlowRequest {
        let rate = self.bits_per_second();
        FlowRequest {
            name,
            class: Class::RealTime,
            reservation_bps: rate,
            weight: 1,
            limit_bps: Some(rate + rate / LIMIT_HEADROOM),
            bind: SocketAddr::V4(bind),
            peer: peer.map(SocketAddr::V4),
            max_datagram: LARGEST_DATAGRAM,
            slots: SLOTS,
            response_deadline_ns: None,
            multicast: Some(Multicast {
                interface,
                ..Multicast::default()
            }),
            rtp_clock_rate: Some(self.format.sample_rate),
        }
    }

    /// The stream a description tells of (its first audio media), with
    /// its format and payload type.
    pub fn from_description(description: &SessionDescription) -> StreamSpec {
        StreamSpec {
            described: true,
            ..StreamSpec::new(
                description.name.clone(),
                SocketAddrV4::new(description.destination, description.port),
                description.format,
                description.payload_type,
            )
        }
    }

    /// The description of this stream sent from `origin` on `clock`: the
    /// media clock's reference (PTP's grandmaster, or none on the system
    /// clock) and a direct media clock with offset 0, as the sink stamps.
    pub fn describe(
        &self,
        origin: Ipv4Addr,
        session_id: u64,
        clock: &MediaClock,
    ) -> SessionDescription {
        let ref_clock = clock
            .ptp_reference()
            .map(|(version, grandmaster, domain)| RefClock::Ptp {
                version,
                grandmaster,
                domain,
            });
        let multicast = self.address.ip().is_multicast();
        SessionDescription {
            origin_user: "-".into(),
            session_id,
            session_version: session_id,
            origin_address: origin,
            name: self.name.clone(),
            info: Some(format!(
                "{} channels, tessera; media clock: {}",
                self.format.channels,
                clock.label()
            )),
            destination: *self.address.ip(),
            ttl: multicast.then_some(Multicast::default().ttl),
            port: self.address.port(),
            payload_type: self.payload_type,
            format: self.format,
            ref_clock,
            media_clock_offset: Some(0),
            direction: Some("recvonly".into()),
            tool: Some(format!("tessera {}", env!("CARGO_PKG_VERSION"))),
        }
    }
}

/// "stage in", "stage out (secondary)".
fn flow_name(stream: &str, way: &str, path: Path) -> String {
    match path {
        Path::Primary => format!("{stream} {way}"),
        Path::Secondary => format!("{stream} {way} (secondary)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_aes67::Encoding;

    fn stream() -> StreamSpec {
        StreamSpec::new(
            "stage",
            "239.69.1.1:5004".parse().unwrap(),
            StreamFormat::with_packet_time(Encoding::L24, 48_000, 8, 1000).unwrap(),
            PAYLOAD_TYPE,
        )
    }

    fn primary() -> (Path, SocketAddrV4) {
        (Path::Primary, stream().address)
    }

    #[test]
    fn a_stream_reserves_its_rate_on_the_wire() {
        // 48 frames × 8 channels × 3 bytes + 12 + 28, a thousand a second.
        assert_eq!(stream().bits_per_second(), (1152 + 40) * 8 * 1000);
        let request = stream().send_request(primary(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(request.reservation_bps, (1152 + 40) * 8 * 1000);
        // Bursts after a late cycle catch up instead of lagging for good.
        assert_eq!(request.limit_bps, Some((1152 + 40) * 8 * 1500));
    }

    #[test]
    fn a_multicast_stream_is_received_on_its_group_and_sent_to_it() {
        let here = Ipv4Addr::new(10, 0, 0, 1);
        let receive = stream().receive_request(primary(), here);
        assert_eq!(receive.bind, "239.69.1.1:5004".parse().unwrap());
        assert_eq!(receive.rtp_clock_rate, Some(48_000));
        let send = stream().send_request(primary(), here);
        assert_eq!(send.peer, Some("239.69.1.1:5004".parse().unwrap()));
        assert_eq!(send.bind, "10.0.0.1:0".parse().unwrap());
        assert_eq!(send.max_datagram, 1164);
    }

    #[test]
    fn a_description_gives_back_the_stream() {
        let clock = MediaClock::system("a test");
        let description = stream().describe(Ipv4Addr::new(10, 0, 0, 1), 7, &clock);
        let text = description.to_sdp();
        let parsed = SessionDescription::parse(&text).unwrap();
        let described = StreamSpec::from_description(&parsed);
        assert!(described.described);
        assert_eq!(
            StreamSpec {
                described: false,
                ..described
            },
            stream()
        );
    }

    #[test]
    fn a_second_path_has_flows_of_its_own() {
        let stream = StreamSpec {
            secondary: Some("239.70.1.1:5004".parse().unwrap()),
            ..stream()
        };
        let paths: Vec<_> = stream.paths().collect();
        assert_eq!(paths.len(), 2);
        let second = Ipv4Addr::new(10, 1, 0, 1);
        let receive = stream.receive_request(paths[1], second);
        assert_eq!(receive.bind, "239.70.1.1:5004".parse().unwrap());
        assert_eq!(receive.name, "stage in (secondary)");
        assert_eq!(receive.multicast.unwrap().interface, second);
        let send = stream.send_request(paths[1], second);
        assert_eq!(send.peer, Some("239.70.1.1:5004".parse().unwrap()));
    }
}
