//! What an AES67 stream is: encoding, sample rate, channel count and the
//! frames in one packet, checked once at construction so that every other
//! module can trust the sizes it derives. It owns no buffers and must never
//! accept a format whose packet does not fit a 1500-byte MTU.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::rtp;

/// UDP and IPv4 headers around each datagram.
const UDP_IP_BYTES: usize = 28;

/// The linear PCM encodings AES67 requires (RFC 3551 L16, RFC 3190 L24).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Encoding {
    L16,
    L24,
}

impl Encoding {
    pub fn bytes_per_sample(self) -> usize {
        match self {
            Encoding::L16 => 2,
            Encoding::L24 => 3,
        }
    }

    /// The name SDP's rtpmap uses.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::L16 => "L16",
            Encoding::L24 => "L24",
        }
    }

    /// SDP encoding names are case-insensitive (RFC 4566 §6).
    pub fn from_name(name: &str) -> Option<Encoding> {
        [Encoding::L16, Encoding::L24]
            .into_iter()
            .find(|e| e.name().eq_ignore_ascii_case(name))
    }
}

/// The shape of every packet of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamFormat {
    pub encoding: Encoding,
    pub sample_rate: u32,
    pub channels: u16,
    pub frames_per_packet: u32,
}

pub const MAX_CHANNELS: u16 = 64;
/// AES67: a packet fits a 1500-byte MTU.
pub const MAX_PAYLOAD: usize = 1440;
const RATES: [u32; 4] = [44_100, 48_000, 88_200, 96_000];

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FormatError {
    #[error("sample rate {0} Hz is not an AES67 rate; use 44100, 48000, 88200 or 96000")]
    SampleRate(u32),
    #[error("{0} channels: a stream carries 1 to {MAX_CHANNELS}")]
    Channels(u16),
    #[error("a packet of 0 frames carries nothing; use a packet time of at least one frame")]
    NoFrames,
    #[error(
        "a packet of {frames} frames is {bytes} bytes, over the {MAX_PAYLOAD}-byte AES67 limit; \
         use at most {max_frames} frames (a shorter packet time or fewer channels)"
    )]
    PayloadTooLarge {
        frames: u32,
        bytes: usize,
        max_frames: usize,
    },
}

impl StreamFormat {
    /// Checked: rate 44100/48000/88200/96000, channels 1..=MAX_CHANNELS,
    /// frames ≥ 1, payload ≤ MAX_PAYLOAD.
    pub fn new(
        encoding: Encoding,
        sample_rate: u32,
        channels: u16,
        frames_per_packet: u32,
    ) -> Result<StreamFormat, FormatError> {
        if !RATES.contains(&sample_rate) {
            return Err(FormatError::SampleRate(sample_rate));
        }
        if channels == 0 || channels > MAX_CHANNELS {
            return Err(FormatError::Channels(channels));
        }
        if frames_per_packet == 0 {
            return Err(FormatError::NoFrames);
        }
        let format = StreamFormat {
            encoding,
            sample_rate,
            channels,
            frames_per_packet,
        };
        if format.payload_bytes() > MAX_PAYLOAD {
            return Err(FormatError::PayloadTooLarge {
                frames: frames_per_packet,
                bytes: format.payload_bytes(),
                max_frames: MAX_PAYLOAD / format.frame_bytes(),
            });
        }
        Ok(format)
    }

    /// frames = round(rate × packet_time_us / 1e6): AES67's packet times
    /// are 125, 250, 333, 1000 and 4000 µs (333 µs → 16 frames at 48 kHz).
    pub fn with_packet_time(
        encoding: Encoding,
        sample_rate: u32,
        channels: u16,
        packet_time_us: u32,
    ) -> Result<StreamFormat, FormatError> {
        let frames = (u64::from(sample_rate) * u64::from(packet_time_us) + 500_000) / 1_000_000;
        let frames = u32::try_from(frames).unwrap_or(u32::MAX);
        StreamFormat::new(encoding, sample_rate, channels, frames)
    }

    /// Bytes of one frame: a sample of every channel.
    pub fn frame_bytes(&self) -> usize {
        usize::from(self.channels) * self.encoding.bytes_per_sample()
    }

    pub fn payload_bytes(&self) -> usize {
        self.frames_per_packet as usize * self.frame_bytes()
    }

    pub fn packet_bytes(&self) -> usize {
        rtp::HEADER_LEN + self.payload_bytes()
    }

    /// Rounded to the nearest nanosecond (16 frames at 48 kHz: 333 333 ns).
    pub fn packet_time_ns(&self) -> u64 {
        let rate = u64::from(self.sample_rate);
        (u64::from(self.frames_per_packet) * 1_000_000_000 + rate / 2) / rate
    }

    /// What a stream of this format takes on the wire, bits/s: every
    /// packet with its UDP and IPv4 headers (the rate a flow reserves).
    pub fn wire_bits_per_second(&self) -> u64 {
        let bytes = (self.packet_bytes() + UDP_IP_BYTES) as u64;
        bytes * 8 * 1_000_000_000 / self.packet_time_ns().max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_names_are_case_insensitive() {
        assert_eq!(Encoding::from_name("l24"), Some(Encoding::L24));
        assert_eq!(Encoding::from_name("L16"), Some(Encoding::L16));
        assert_eq!(Encoding::from_name("PCMU"), None);
        assert_eq!(Encoding::L24.bytes_per_sample(), 3);
    }

    #[test]
    fn aes67_packet_times_give_the_standard_frame_counts() {
        let frames = |rate, us| {
            StreamFormat::with_packet_time(Encoding::L24, rate, 2, us)
                .unwrap()
                .frames_per_packet
        };
        assert_eq!(frames(48_000, 125), 6);
        assert_eq!(frames(48_000, 250), 12);
        assert_eq!(frames(48_000, 333), 16);
        assert_eq!(frames(48_000, 1000), 48);
        assert_eq!(frames(48_000, 4000), 192);
        assert_eq!(frames(96_000, 1000), 96);
    }

    #[test]
    fn sizes_and_times() {
        let f = StreamFormat::new(Encoding::L24, 48_000, 8, 48).unwrap();
        assert_eq!(f.payload_bytes(), 1152);
        assert_eq!(f.packet_bytes(), 1164);
        assert_eq!(f.packet_time_ns(), 1_000_000);
        let f = StreamFormat::new(Encoding::L16, 48_000, 2, 16).unwrap();
        assert_eq!(f.packet_time_ns(), 333_333);
    }

    #[test]
    fn invalid_formats_are_refused_with_the_fix() {
        use FormatError::*;
        assert_eq!(
            StreamFormat::new(Encoding::L16, 22_050, 2, 48),
            Err(SampleRate(22_050))
        );
        assert_eq!(
            StreamFormat::new(Encoding::L16, 48_000, 0, 48),
            Err(Channels(0))
        );
        assert_eq!(
            StreamFormat::new(Encoding::L16, 48_000, 65, 1),
            Err(Channels(65))
        );
        assert_eq!(
            StreamFormat::new(Encoding::L16, 48_000, 2, 0),
            Err(NoFrames)
        );
        let err = StreamFormat::with_packet_time(Encoding::L24, 48_000, 8, 4000).unwrap_err();
        assert_eq!(
            err,
            PayloadTooLarge {
                frames: 192,
                bytes: 4608,
                max_frames: 60
            }
        );
        assert!(err.to_string().contains("use at most 60 frames"));
    }
}
