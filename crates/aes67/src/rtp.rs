//! The RTP fixed header (RFC 3550 §5.1) and the wrap-aware arithmetic on
//! its sequence numbers and timestamps. It owns no state; parsing borrows
//! the datagram and writing fills the caller's buffer, so it must never
//! allocate: both run once per packet on the real-time path.

use thiserror::Error;

pub const HEADER_LEN: usize = 12;
const VERSION: u8 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpHeader {
    pub marker: bool,
    pub payload_type: u8,
    pub sequence: u16,
    pub timestamp: u32,
    pub ssrc: u32,
}

/// A parsed datagram: the header and the payload it borrows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpPacket<'a> {
    pub header: RtpHeader,
    pub payload: &'a [u8],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RtpError {
    #[error("RTP datagram truncated: {needed} bytes needed, {got} present")]
    Truncated { needed: usize, got: usize },
    #[error("RTP version {0}: only version 2 exists (is this RTP at all?)")]
    Version(u8),
    #[error("RTP padding count {count} but only {available} payload bytes (a corrupt packet)")]
    Padding { count: usize, available: usize },
    #[error("RTP payload type {0} does not fit 7 bits; use 0..=127 (AES67 uses 96..=127)")]
    PayloadType(u8),
}

impl RtpHeader {
    /// Writes the 12-byte header (V=2, no padding, no extension, no CSRC)
    /// at the start of `out`; Err if `out` is shorter.
    pub fn write(&self, out: &mut [u8]) -> Result<usize, RtpError> {
        if self.payload_type > 0x7f {
            return Err(RtpError::PayloadType(self.payload_type));
        }
        let got = out.len();
        let out = out.get_mut(..HEADER_LEN).ok_or(RtpError::Truncated {
            needed: HEADER_LEN,
            got,
        })?;
        out[0] = VERSION << 6;
        out[1] = u8::from(self.marker) << 7 | self.payload_type;
        out[2..4].copy_from_slice(&self.sequence.to_be_bytes());
        out[4..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
        Ok(HEADER_LEN)
    }
}

/// Parses a datagram: version 2 required; skips CSRCs and a header
/// extension; strips padding (checking the pad count). Never allocates.
pub fn parse(datagram: &[u8]) -> Result<RtpPacket<'_>, RtpError> {
    let fixed = take(datagram, 0, HEADER_LEN)?;
    let version = fixed[0] >> 6;
    if version != VERSION {
        return Err(RtpError::Version(version));
    }
    let padded = fixed[0] & 0x20 != 0;
    let extended = fixed[0] & 0x10 != 0;
    let csrc_count = usize::from(fixed[0] & 0x0f);
    let header = RtpHeader {
        marker: fixed[1] & 0x80 != 0,
        payload_type: fixed[1] & 0x7f,
        sequence: u16::from_be_bytes([fixed[2], fixed[3]]),
        timestamp: u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]),
        ssrc: u32::from_be_bytes([fixed[8], fixed[9], fixed[10], fixed[11]]),
    };
    let mut start = HEADER_LEN + 4 * csrc_count;
    if extended {
        // Profile-specific id (16 bits), then the length in 32-bit words.
        let ext = take(datagram, start, 4)?;
        start += 4 + 4 * usize::from(u16::from_be_bytes([ext[2], ext[3]]));
    }
    take(datagram, start, 0)?;
    let mut payload = &datagram[start..];
    if padded {
        // The last byte counts the padding, itself included (RFC 3550 §5.1).
        let count = usize::from(payload.last().copied().unwrap_or(0));
        if count == 0 || count > payload.len() {
            return Err(RtpError::Padding {
                count,
                available: payload.len(),
            });
        }
        payload = &payload[..payload.len() - count];
    }
    Ok(RtpPacket { header, payload })
}

fn take(datagram: &[u8], start: usize, len: usize) -> Result<&[u8], RtpError> {
    datagram.get(start..start + len).ok_or(RtpError::Truncated {
        needed: start + len,
        got: datagram.len(),
    })
}

/// The payload types RTP leaves to each session to define (RFC 3551 §6):
/// AES67 streams use one of them, chosen per stream and told in its SDP.
pub const DYNAMIC_PAYLOAD_TYPES: std::ops::RangeInclusive<u8> = 96..=127;

/// Whole samples at `sample_rate` in `ns` (split in seconds and
/// nanoseconds: no overflow for centuries at any audio rate). RTP
/// timestamps are this mod 2^32.
pub fn samples_at(ns: u64, sample_rate: u32) -> u64 {
    const NS: u64 = 1_000_000_000;
    let rate = u64::from(sample_rate);
    ns / NS * rate + ns % NS * rate / NS
}

/// `to` − `from` across the 16-bit wrap (65535 → 0 is +1).
pub fn sequence_delta(from: u16, to: u16) -> i16 {
    to.wrapping_sub(from) as i16
}

/// `to` − `from` across the 32-bit wrap.
pub fn timestamp_delta(from: u32, to: u32) -> i32 {
    to.wrapping_sub(from) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: RtpHeader = RtpHeader {
        marker: true,
        payload_type: 97,
        sequence: 0xbeef,
        timestamp: 0x0102_0304,
        ssrc: 0xdead_cafe,
    };

    #[test]
    fn header_round_trips_with_the_rfc_layout() {
        let mut buf = [0u8; 16];
        assert_eq!(HEADER.write(&mut buf), Ok(12));
        assert_eq!(
            buf[..12],
            [
                0x80,
                0x80 | 97,
                0xbe,
                0xef,
                1,
                2,
                3,
                4,
                0xde,
                0xad,
                0xca,
                0xfe
            ]
        );
        buf[12..].copy_from_slice(&[9, 8, 7, 6]);
        let packet = parse(&buf).unwrap();
        assert_eq!(packet.header, HEADER);
        assert_eq!(packet.payload, &[9, 8, 7, 6]);
    }

    #[test]
    fn write_refuses_a_short_buffer_and_a_wide_payload_type() {
        assert_eq!(
            HEADER.write(&mut [0u8; 11]),
            Err(RtpError::Truncated {
                needed: 12,
                got: 11
            })
        );
        let wide = RtpHeader {
            payload_type: 128,
            ..HEADER
        };
        assert_eq!(wide.write(&mut [0u8; 12]), Err(RtpError::PayloadType(128)));
    }

    #[test]
    fn csrcs_extension_and_padding_are_skipped() {
        let mut d = vec![0x80 | 0x20 | 0x10 | 2, 96, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3];
        d.extend_from_slice(&[0xaa; 8]); // two CSRCs
        d.extend_from_slice(&[0xbe, 0xde, 0, 1, 0xbb, 0xbb, 0xbb, 0xbb]); // one-word extension
        d.extend_from_slice(&[1, 2, 3]); // payload
        d.extend_from_slice(&[0, 0, 3]); // padding of 3
        let packet = parse(&d).unwrap();
        assert_eq!(packet.payload, &[1, 2, 3]);
        assert_eq!(packet.header.sequence, 1);
        assert_eq!(packet.header.timestamp, 2);
        assert_eq!(packet.header.ssrc, 3);
    }

    #[test]
    fn garbage_is_refused() {
        let mut d = [0u8; 12];
        d[0] = 0x80;
        assert!(parse(&d).is_ok());
        assert_eq!(
            parse(&d[..5]),
            Err(RtpError::Truncated { needed: 12, got: 5 })
        );
        d[0] = 0x40;
        assert_eq!(parse(&d), Err(RtpError::Version(1)));
        d[0] = 0x81; // one CSRC promised, none present
        assert_eq!(
            parse(&d),
            Err(RtpError::Truncated {
                needed: 16,
                got: 12
            })
        );
        d[0] = 0x90; // extension promised, none present
        assert_eq!(
            parse(&d),
            Err(RtpError::Truncated {
                needed: 16,
                got: 12
            })
        );
        let mut padded = [0u8; 14];
        padded[0] = 0xa0;
        padded[13] = 3;
        assert_eq!(
            parse(&padded),
            Err(RtpError::Padding {
                count: 3,
                available: 2
            })
        );
        padded[13] = 0;
        assert_eq!(
            parse(&padded),
            Err(RtpError::Padding {
                count: 0,
                available: 2
            })
        );
    }

    #[test]
    fn deltas_cross_the_wrap() {
        assert_eq!(sequence_delta(65535, 0), 1);
        assert_eq!(sequence_delta(0, 65535), -1);
        assert_eq!(sequence_delta(10, 15), 5);
        assert_eq!(timestamp_delta(u32::MAX, 0), 1);
        assert_eq!(timestamp_delta(u32::MAX - 47, 0), 48);
        assert_eq!(timestamp_delta(48, 0), -48);
    }

    #[test]
    fn samples_count_whole_frames_without_overflow() {
        assert_eq!(samples_at(1_000_000, 48_000), 48);
        assert_eq!(samples_at(1_020_833, 48_000), 48);
        assert_eq!(
            samples_at(u64::MAX, 96_000),
            u64::MAX / 1_000_000_000 * 96_000 + 68_116
        );
    }
}
