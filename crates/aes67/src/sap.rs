//! SAP (RFC 2974): the announcement datagram around an SDP text, and the
//! directory of sessions heard on the network. It owns the wire layout and
//! the bookkeeping of who announced what; sockets, timers and the choice of
//! timeout are the caller's, so it must never read a clock: every time is an
//! argument. Control path only; it allocates.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | V=1 |A|R|T|E|C|   auth len    |         msg id hash           |
//! |                originating source (32 bits for IPv4)          |
//! |            optional authentication data (auth len × 4)        |
//! |     optional payload type, e.g. "application/sdp", then 0     |
//! |                            payload                            |
//! ```

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::sdp::{self, SdpError, SessionDescription};

pub const SAP_PORT: u16 = 9875;
/// The AES67 / SAP announcement group for admin-scoped sessions (RFC 2974
/// §3: the highest address of the scope, 239.255.255.255).
pub const SAP_GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 255, 255);
/// Where Debian 12's PipeWire (0.3.65) announces and listens by default.
pub const SAP_GROUP_PIPEWIRE: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 56);
pub const SDP_MIME: &str = "application/sdp";

const VERSION: u8 = 1;
const IPV6: u8 = 0x10;
const DELETION: u8 = 0x04;
const ENCRYPTED: u8 = 0x02;
const COMPRESSED: u8 = 0x01;
const HEADER_LEN: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SapPacket {
    pub deletion: bool,
    pub message_id_hash: u16,
    pub origin: Ipv4Addr,
    pub payload_type: String,
    pub payload: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SapError {
    #[error("SAP packet truncated: {needed} bytes needed, {got} present")]
    Truncated { needed: usize, got: usize },
    #[error("SAP version {0}: only version 1 (RFC 2974) exists (is this SAP at all?)")]
    Version(u8),
    #[error("SAP packet from an IPv6 origin: tessera reads IPv4 announcements only")]
    Ipv6Origin,
    #[error("encrypted SAP packet: tessera holds no keys; announce in the clear")]
    Encrypted,
    #[error("compressed SAP packet: tessera does not inflate payloads; announce uncompressed")]
    Compressed,
    #[error("SAP payload has no payload type and does not start with \"v=0\", so it is not SDP")]
    NoPayloadType,
    #[error("SAP payload type or payload is not UTF-8")]
    NotUtf8,
}

impl SapPacket {
    /// An announcement of `sdp` from `origin`, hash from [`message_id_hash`].
    pub fn announce(origin: Ipv4Addr, sdp: &str) -> SapPacket {
        SapPacket::sdp(false, origin, sdp)
    }

    /// The deletion of an announcement of `sdp` from `origin`.
    pub fn delete(origin: Ipv4Addr, sdp: &str) -> SapPacket {
        SapPacket::sdp(true, origin, sdp)
    }

    fn sdp(deletion: bool, origin: Ipv4Addr, sdp: &str) -> SapPacket {
        SapPacket {
            deletion,
            message_id_hash: message_id_hash(sdp),
            origin,
            payload_type: SDP_MIME.to_string(),
            payload: sdp.to_string(),
        }
    }

    /// V=1, A=0 (IPv4), R=0, T, E=0, C=0, auth len 0, hash, origin, then the
    /// payload type and a 0 byte, then the payload.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(HEADER_LEN + self.payload_type.len() + 1 + self.payload.len());
        out.push(VERSION << 5 | if self.deletion { DELETION } else { 0 });
        out.push(0);
        out.extend_from_slice(&self.message_id_hash.to_be_bytes());
        out.extend_from_slice(&self.origin.octets());
        out.extend_from_slice(self.payload_type.as_bytes());
        out.push(0);
        out.extend_from_slice(self.payload.as_bytes());
        out
    }

    /// Version must be 1; IPv6 origins, encrypted and compressed packets are
    /// refused; authentication data is skipped (not checked: nothing here
    /// trusts an announcement more for it); a payload starting "v=0" has no
    /// payload type and is SDP (RFC 2974 §6).
    pub fn parse(datagram: &[u8]) -> Result<SapPacket, SapError> {
        let truncated = |needed| SapError::Truncated {
            needed,
            got: datagram.len(),
        };
        let header = datagram.get(..HEADER_LEN).ok_or(truncated(HEADER_LEN))?;
        let flags = header[0];
        if flags >> 5 != VERSION {
            return Err(SapError::Version(flags >> 5));
        }
        for (bit, refusal) in [
            (IPV6, SapError::Ipv6Origin),
            (ENCRYPTED, SapError::Encrypted),
            (COMPRESSED, SapError::Compressed),
        ] {
            if flags & bit != 0 {
                return Err(refusal);
            }
        }
        let body_start = HEADER_LEN + 4 * usize::from(header[1]);
        let body = datagram.get(body_start..).ok_or(truncated(body_start))?;
        let (payload_type, payload) = if body.starts_with(b"v=0") {
            (SDP_MIME.as_bytes(), body)
        } else {
            let end = body
                .iter()
                .position(|&b| b == 0)
                .ok_or(SapError::NoPayloadType)?;
            (&body[..end], &body[end + 1..])
        };
        let text = |bytes| {
            std::str::from_utf8(bytes)
                .map(str::to_string)
                .map_err(|_| SapError::NotUtf8)
        };
        Ok(SapPacket {
            deletion: flags & DELETION != 0,
            message_id_hash: u16::from_be_bytes([header[2], header[3]]),
            origin: Ipv4Addr::new(header[4], header[5], header[6], header[7]),
            payload_type: text(payload_type)?,
            payload: text(payload)?,
        })
    }
}

/// A 16-bit hash of the SDP text that changes when the text changes: 32-bit
/// FNV-1a folded in half. Never 0, which older SAP receivers read as "no
/// hash".
pub fn message_id_hash(sdp: &str) -> u16 {
    let hash = sdp.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    match (hash >> 16) as u16 ^ hash as u16 {
        0 => 1,
        folded => folded,
    }
}

/// A session heard on the network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeardSession {
    pub origin: Ipv4Addr,
    pub sap_hash: u16,
    pub description: SessionDescription,
    pub first_heard_ns: u64,
    pub last_heard_ns: u64,
    pub announcements: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DirectoryError {
    #[error(transparent)]
    Sap(#[from] SapError),
    #[error("SAP payload type \"{0}\": tessera reads application/sdp announcements only")]
    NotSdp(String),
    #[error("announced SDP: {0}")]
    Sdp(#[from] SdpError),
}

/// The sessions heard on the network, by (origin, hash) and by SDP origin
/// (o= user, id, address): a new version of a session replaces the old.
#[derive(Debug, Default)]
pub struct Directory {
    sessions: Vec<HeardSession>,
}

impl Directory {
    pub fn new() -> Directory {
        Directory::default()
    }

    /// Takes one SAP datagram heard at `now_ns`. An announcement adds or
    /// refreshes (a changed SDP for the same o= session replaces the entry);
    /// a deletion removes. Err for a packet that is not SAP, or whose payload
    /// is not an SDP this crate reads (the caller counts and logs those).
    pub fn heard(&mut self, datagram: &[u8], now_ns: u64) -> Result<(), DirectoryError> {
        let packet = SapPacket::parse(datagram)?;
        if !packet.payload_type.eq_ignore_ascii_case(SDP_MIME) {
            return Err(DirectoryError::NotSdp(packet.payload_type));
        }
        if packet.deletion {
            self.forget(&packet);
            return Ok(());
        }
        let key = (packet.origin, packet.message_id_hash);
        // The hash exists so that an unchanged announcement need not be parsed again.
        if let Some(known) = self
            .sessions
            .iter_mut()
            .find(|s| (s.origin, s.sap_hash) == key)
        {
            known.last_heard_ns = now_ns;
            known.announcements += 1;
            return Ok(());
        }
        let description = SessionDescription::parse(&packet.payload)?;
        let d = &description;
        let same = |s: &&mut HeardSession| {
            same_session(
                &s.description,
                &d.origin_user,
                d.session_id,
                d.origin_address,
            )
        };
        match self.sessions.iter_mut().find(same) {
            Some(known) => {
                (known.origin, known.sap_hash) = key;
                known.description = description;
                known.last_heard_ns = now_ns;
                known.announcements += 1;
            }
            None => self.sessions.push(HeardSession {
                origin: packet.origin,
                sap_hash: packet.message_id_hash,
                description,
                first_heard_ns: now_ns,
                last_heard_ns: now_ns,
                announcements: 1,
            }),
        }
        Ok(())
    }

    fn forget(&mut self, deletion: &SapPacket) {
        let key = (deletion.origin, deletion.message_id_hash);
        let origin = sdp::find_origin(&deletion.payload);
        self.sessions.retain(|s| {
            let by_origin = origin.as_ref().is_some_and(|(user, id, _, address)| {
                same_session(&s.description, user, *id, *address)
            });
            (s.origin, s.sap_hash) != key && !by_origin
        });
    }

    /// Drops sessions not heard for `timeout_ns` (RFC 2974: ten announcement
    /// intervals or one hour, whichever is less; the caller picks).
    pub fn expire(&mut self, now_ns: u64, timeout_ns: u64) {
        self.sessions
            .retain(|s| now_ns.saturating_sub(s.last_heard_ns) < timeout_ns);
    }

    pub fn sessions(&self) -> impl Iterator<Item = &HeardSession> {
        self.sessions.iter()
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

/// RFC 4566 §5.2: user, id and address name a session; the version changes
/// with each modification of it.
fn same_session(d: &SessionDescription, user: &str, id: u64, address: Ipv4Addr) -> bool {
    d.origin_user == user && d.session_id == id && d.origin_address == address
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 7);

    fn sdp(id: u64, version: u64) -> String {
        format!(
            "v=0\r\no=- {id} {version} IN IP4 10.0.0.7\r\ns=Desk {id}\r\nc=IN IP4 239.69.0.{id}/15\r\n\
             t=0 0\r\nm=audio 5004 RTP/AVP 98\r\na=rtpmap:98 L24/48000/2\r\na=ptime:1\r\n"
        )
    }

    /// RFC 2974's fixed header, built field by field.
    fn header(flags: u8, auth_words: u8, hash: u16, origin: [u8; 4]) -> Vec<u8> {
        let mut bytes = vec![flags, auth_words];
        bytes.extend_from_slice(&hash.to_be_bytes());
        bytes.extend_from_slice(&origin);
        bytes
    }

    #[test]
    fn announcement_has_the_rfc_layout() {
        let text = sdp(1, 1);
        let packet = SapPacket::announce(ORIGIN, &text);
        // V=1 in the top three bits, A R T E C all 0.
        let mut expected = header(0x20, 0, message_id_hash(&text), [10, 0, 0, 7]);
        expected.extend_from_slice(b"application/sdp\0");
        expected.extend_from_slice(text.as_bytes());
        assert_eq!(packet.to_bytes(), expected);
        assert_eq!(SapPacket::parse(&expected), Ok(packet));
    }

    #[test]
    fn deletion_sets_the_t_bit() {
        let bytes = SapPacket::delete(ORIGIN, "o=- 1 1 IN IP4 10.0.0.7").to_bytes();
        assert_eq!(bytes[0], 0x24, "V=1 and T=1");
        assert!(SapPacket::parse(&bytes).unwrap().deletion);
    }

    #[test]
    fn authentication_data_is_skipped_and_payload_type_optional() {
        let mut bytes = header(0x20, 2, 0xabcd, [192, 0, 2, 1]);
        bytes.extend_from_slice(&[0xee; 8]);
        bytes.extend_from_slice(b"v=0\r\n");
        let packet = SapPacket::parse(&bytes).unwrap();
        assert_eq!(packet.message_id_hash, 0xabcd);
        assert_eq!(packet.origin, Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(packet.payload_type, SDP_MIME);
        assert_eq!(packet.payload, "v=0\r\n");
    }

    #[test]
    fn garbage_is_refused() {
        let with_body = |flags| {
            let mut bytes = header(flags, 0, 1, [10, 0, 0, 1]);
            bytes.extend_from_slice(&[0; 12]);
            bytes.extend_from_slice(b"application/sdp\0v=0");
            SapPacket::parse(&bytes)
        };
        assert_eq!(
            SapPacket::parse(&[0x20, 0, 0, 1, 10]),
            Err(SapError::Truncated { needed: 8, got: 5 })
        );
        assert_eq!(
            SapPacket::parse(&header(0x20, 1, 1, [10, 0, 0, 1])),
            Err(SapError::Truncated { needed: 12, got: 8 })
        );
        assert_eq!(with_body(0x40), Err(SapError::Version(2)));
        assert_eq!(with_body(0x30), Err(SapError::Ipv6Origin));
        assert_eq!(with_body(0x22), Err(SapError::Encrypted));
        assert_eq!(with_body(0x21), Err(SapError::Compressed));
        let mut no_type = header(0x20, 0, 1, [10, 0, 0, 1]);
        no_type.extend_from_slice(b"hello");
        assert_eq!(SapPacket::parse(&no_type), Err(SapError::NoPayloadType));
        no_type.extend_from_slice(b"\0\xff");
        assert_eq!(SapPacket::parse(&no_type), Err(SapError::NotUtf8));
    }

    #[test]
    fn the_hash_follows_the_text() {
        assert_ne!(message_id_hash(&sdp(1, 1)), message_id_hash(&sdp(1, 2)));
        assert_eq!(message_id_hash(&sdp(1, 1)), message_id_hash(&sdp(1, 1)));
    }

    fn announce(dir: &mut Directory, text: &str, now_ns: u64) {
        dir.heard(&SapPacket::announce(ORIGIN, text).to_bytes(), now_ns)
            .unwrap();
    }

    #[test]
    fn directory_adds_refreshes_replaces_and_deletes() {
        let mut dir = Directory::new();
        assert!(dir.is_empty());
        announce(&mut dir, &sdp(1, 1), 10);
        announce(&mut dir, &sdp(1, 1), 20);
        announce(&mut dir, &sdp(2, 1), 25);
        assert_eq!(dir.len(), 2);
        let first = dir.sessions().next().unwrap();
        assert_eq!(
            (
                first.first_heard_ns,
                first.last_heard_ns,
                first.announcements
            ),
            (10, 20, 2)
        );

        announce(&mut dir, &sdp(1, 2), 30);
        assert_eq!(dir.len(), 2);
        let first = dir.sessions().next().unwrap();
        assert_eq!(
            (first.description.session_version, first.announcements),
            (2, 3)
        );
        assert_eq!(first.sap_hash, message_id_hash(&sdp(1, 2)));

        let delete = SapPacket::delete(ORIGIN, &sdp(2, 1)).to_bytes();
        dir.heard(&delete, 40).unwrap();
        assert_eq!(dir.len(), 1);
        // A deletion may carry only the o= line (and so another hash).
        let delete = SapPacket::delete(ORIGIN, "o=- 1 2 IN IP4 10.0.0.7\r\n").to_bytes();
        dir.heard(&delete, 50).unwrap();
        assert!(dir.is_empty());
    }

    #[test]
    fn directory_expires_the_silent() {
        let mut dir = Directory::new();
        announce(&mut dir, &sdp(1, 1), 0);
        announce(&mut dir, &sdp(2, 1), 500);
        dir.expire(1000, 600);
        let ids: Vec<u64> = dir.sessions().map(|s| s.description.session_id).collect();
        assert_eq!(ids, [2]);
        dir.expire(1100, 600);
        assert!(dir.is_empty());
    }

    #[test]
    fn directory_refuses_what_it_cannot_read() {
        let mut dir = Directory::new();
        assert_eq!(
            dir.heard(&[0x80, 0, 0, 0, 0, 0, 0, 0], 0),
            Err(DirectoryError::Sap(SapError::Version(4)))
        );
        let mut other = SapPacket::announce(ORIGIN, "hello");
        other.payload_type = "text/plain".into();
        assert_eq!(
            dir.heard(&other.to_bytes(), 0),
            Err(DirectoryError::NotSdp("text/plain".into()))
        );
        let video = sdp(1, 1).replace("m=audio", "m=video");
        let err = dir
            .heard(&SapPacket::announce(ORIGIN, &video).to_bytes(), 0)
            .unwrap_err();
        assert_eq!(err, DirectoryError::Sdp(SdpError::Missing("m=audio")));
        assert!(dir.is_empty());
    }
}
