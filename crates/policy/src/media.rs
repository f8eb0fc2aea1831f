//! The media formats the services, the workloads and the scenarios agree
//! on: a render canvas's largest side, the CIF video frame and the bytes of
//! a YUV 4:2:0 frame, the netphone's stream (seed 004). Defined here, on
//! the floor below all of them, so each takes them from one place.
//!
//! Pure arithmetic on those formats; it must never parse a file or touch a
//! socket.

use std::time::Duration;

/// Largest frame or screen side the render service accepts (a scenario's
/// screen may ask for no more).
pub const MAX_SIDE: usize = 8192;

/// CIF, the frame size of seeds 000 and 003: what a video plays unless told.
pub const CIF_WIDTH: usize = 352;
pub const CIF_HEIGHT: usize = 288;

/// Bytes of one YUV 4:2:0 (I420) frame: a full luma plane and two quarter
/// chroma planes (152 064 for CIF).
pub fn frame_bytes(width: usize, height: usize) -> usize {
    width * height + 2 * (width / 2) * (height / 2)
}

/// What mike sends: `packet_bytes` of UDP payload `hz` times a second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream {
    pub packet_bytes: usize,
    pub hz: u32,
}

impl Stream {
    /// The seed's audio stream: 1500-byte packets at 100 Hz, 1.2 Mbit/s.
    pub const AUDIO: Stream = Stream {
        packet_bytes: 1500,
        hz: 100,
    };
    /// The seed's video stream: 4 KB packets at 500 Hz, 16 Mbit/s.
    pub const VIDEO: Stream = Stream {
        packet_bytes: 4096,
        hz: 500,
    };
    /// Bytes of a packet's header: its sequence number and T1.
    pub const HEADER_BYTES: usize = 16;
    /// The MTU of the links between the hosts.
    pub const LINK_MTU: u32 = 9180;
    /// Smallest packet: the header.
    pub const MIN_PACKET: usize = Stream::HEADER_BYTES;
    /// Largest packet: a datagram that fits the link's MTU unfragmented.
    pub const MAX_PACKET: usize = Stream::LINK_MTU as usize - 28;

    pub fn period_ns(&self) -> u64 {
        1_000_000_000 / u64::from(self.hz.max(1))
    }

    pub fn bits_per_second(&self) -> f64 {
        (self.packet_bytes * 8) as f64 * f64::from(self.hz)
    }

    /// Packets sent in `duration`.
    pub fn packets(&self, duration: Duration) -> u64 {
        (duration.as_nanos() as u64).div_ceil(self.period_ns())
    }

    /// "1500 B at 100 Hz (1.2 Mbit/s)".
    pub fn describe(&self) -> String {
        format!(
            "{} B at {} Hz ({:.1} Mbit/s)",
            self.packet_bytes,
            self.hz,
            self.bits_per_second() / 1e6
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_streams_have_the_seeds_rates() {
        assert_eq!(Stream::AUDIO.bits_per_second(), 1.2e6);
        assert_eq!(Stream::VIDEO.bits_per_second(), 16_384_000.0);
        assert_eq!(Stream::AUDIO.packets(Duration::from_secs(60)), 6000);
        assert_eq!(Stream::VIDEO.packets(Duration::from_millis(1001)), 501);
        assert_eq!(Stream::AUDIO.describe(), "1500 B at 100 Hz (1.2 Mbit/s)");
    }

    #[test]
    fn a_cif_frame_is_a_luma_plane_and_two_quarter_chroma_planes() {
        assert_eq!(frame_bytes(CIF_WIDTH, CIF_HEIGHT), 152_064);
    }
}
