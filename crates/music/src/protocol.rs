//! The SLABS wire format (seed 000 §3.1), as tessera's emulator and music
//! application speak it. All fields little-endian.
//!
//! Input packet, SLABS → host, one every 45.35 µs (2 frames at 44.1 kHz),
//! [`INPUT_PACKET_SIZE`] = 776 bytes:
//!
//! | offset | field | type |
//! |---|---|---|
//! | 0 | package number | u32 |
//! | 4 | packet index in the package, 0..16 | u16 |
//! | 6 | frames in the packet, always 2 | u16 |
//! | 8 | frame 0: pad 0 (x, y, pressure), pad 1 (x, y, pressure), … pad 31 | 96 × f32 |
//! | 392 | frame 1, same layout | 96 × f32 |
//!
//! Sixteen packets with one package number form a package (32 frames,
//! 0.7256 ms). Output packet, host → SLABS, one per package,
//! [`OUTPUT_PACKET_SIZE`] = 1032 bytes:
//!
//! | offset | field | type |
//! |---|---|---|
//! | 0 | package number it answers | u32 |
//! | 4 | frames, always 32 | u16 |
//! | 6 | channels, always 8 | u16 |
//! | 8 | frame 0: channel 0 … channel 7, then frame 1, … frame 31 | 256 × f32 |
//!
//! This module owns the format. Encoding and decoding write into and read
//! from caller-provided buffers and must never allocate: the application's
//! node calls them on a real-time thread.

use tessera_synth::{OutputBlock, PadInput, BLOCK, CHANNELS, PADS};

/// Packets that form one package.
pub const PACKETS_PER_PACKAGE: usize = 16;
/// Byte offset of an input packet's index in its package (the packet
/// driver keeps in step with the sender by it).
pub const INDEX_OFFSET: usize = 4;
/// Temporal frames in one input packet.
pub const FRAMES_PER_PACKET: usize = 2;
/// The SLABS's sample rate, Hz.
pub const SAMPLE_RATE: u32 = 44_100;
/// Values per pad and frame: x, y, pressure.
const VALUES_PER_PAD: usize = 3;
const HEADER_SIZE: usize = 8;
/// Bytes of one frame of pad data.
const FRAME_SIZE: usize = PADS * VALUES_PER_PAD * 4;
/// Bytes of an input packet.
pub const INPUT_PACKET_SIZE: usize = HEADER_SIZE + FRAMES_PER_PACKET * FRAME_SIZE;
/// Bytes of an output packet.
pub const OUTPUT_PACKET_SIZE: usize = HEADER_SIZE + BLOCK * CHANNELS * 4;
/// Frames in a package: one synthesizer block.
pub const FRAMES_PER_PACKAGE: usize = PACKETS_PER_PACKAGE * FRAMES_PER_PACKET;

/// Nanoseconds from the start of a run to the send time of packet `packet`
/// (counted from 0 across packages): exact integer arithmetic on the frame
/// clock, so that a long run never drifts from 44.1 kHz.
pub fn packet_offset_ns(packet: u64) -> u64 {
    let frames = u128::from(packet) * FRAMES_PER_PACKET as u128;
    (frames * 1_000_000_000 / u128::from(SAMPLE_RATE)) as u64
}

/// The interval between two packages, 0.7256 ms.
pub fn package_period_ns() -> u64 {
    packet_offset_ns(PACKETS_PER_PACKAGE as u64)
}

/// A packet that does not follow the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("packet of {got} bytes; expected {expected}")]
    Size { got: usize, expected: usize },
    #[error("header says {frames} frames × {channels} channels; expected {expected_frames} × {expected_channels}")]
    Shape {
        frames: u16,
        channels: u16,
        expected_frames: u16,
        expected_channels: u16,
    },
    #[error("packet index {0} outside 0..16")]
    Index(u16),
}

/// Header of an input packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputHeader {
    pub package: u32,
    /// Position in the package, 0..16.
    pub index: u16,
}

fn check_size(buf: &[u8], expected: usize) -> Result<(), ProtocolError> {
    match buf.len() {
        got if got == expected => Ok(()),
        got => Err(ProtocolError::Size { got, expected }),
    }
}

fn read_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

fn read_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([buf[at], buf[at + 1]])
}

fn read_f32(buf: &[u8], at: usize) -> f32 {
    f32::from_bits(read_u32(buf, at))
}

fn write_header(buf: &mut [u8], package: u32, a: u16, b: u16) {
    buf[0..4].copy_from_slice(&package.to_le_bytes());
    buf[4..6].copy_from_slice(&a.to_le_bytes());
    buf[6..8].copy_from_slice(&b.to_le_bytes());
}

/// Writes an input packet: `frames[f][p]` is pad `p` in frame `f`.
/// `buf` must be [`INPUT_PACKET_SIZE`] bytes.
pub fn encode_input(
    header: InputHeader,
    frames: &[[PadInput; PADS]; FRAMES_PER_PACKET],
    buf: &mut [u8],
) -> Result<(), ProtocolError> {
    check_size(buf, INPUT_PACKET_SIZE)?;
    if header.index as usize >= PACKETS_PER_PACKAGE {
        return Err(ProtocolError::Index(header.index));
    }
    write_header(buf, header.package, header.index, FRAMES_PER_PACKET as u16);
    let values = frames
        .iter()
        .flatten()
        .flat_map(|pad| [pad.x, pad.y, pad.pressure]);
    for (chunk, value) in buf[HEADER_SIZE..].chunks_exact_mut(4).zip(values) {
        chunk.copy_from_slice(&value.to_le_bytes());
    }
    Ok(())
}

/// Reads and checks an input packet's header.
pub fn decode_input_header(buf: &[u8]) -> Result<InputHeader, ProtocolError> {
    check_size(buf, INPUT_PACKET_SIZE)?;
    let (index, frames) = (read_u16(buf, INDEX_OFFSET), read_u16(buf, 6));
    if frames as usize != FRAMES_PER_PACKET {
        return Err(ProtocolError::Shape {
            frames,
            channels: VALUES_PER_PAD as u16,
            expected_frames: FRAMES_PER_PACKET as u16,
            expected_channels: VALUES_PER_PAD as u16,
        });
    }
    if index as usize >= PACKETS_PER_PACKAGE {
        return Err(ProtocolError::Index(index));
    }
    Ok(InputHeader {
        package: read_u32(buf, 0),
        index,
    })
}

/// Reads pad `pad` of `frame` (0 or 1) of a checked input packet.
pub fn decode_input_pad(buf: &[u8], frame: usize, pad: usize) -> PadInput {
    let at = HEADER_SIZE + frame * FRAME_SIZE + pad * VALUES_PER_PAD * 4;
    PadInput {
        x: read_f32(buf, at),
        y: read_f32(buf, at + 4),
        pressure: read_f32(buf, at + 8),
    }
}

/// Reads every pad of `frame` (0 or 1) of a checked input packet into `pads`.
pub fn decode_input_frame(buf: &[u8], frame: usize, pads: &mut [PadInput; PADS]) {
    for (p, pad) in pads.iter_mut().enumerate() {
        *pad = decode_input_pad(buf, frame, p);
    }
}

/// The package's newest packet (highest index) and the package's number:
/// what the synthesizer plays (its last frame is the pads' latest state).
/// `None` when a packet of the package is malformed.
pub fn newest_packet(package: &[u8]) -> Option<(u32, &[u8])> {
    let mut newest: Option<(InputHeader, &[u8])> = None;
    for packet in package.chunks_exact(INPUT_PACKET_SIZE) {
        let header = decode_input_header(packet).ok()?;
        if newest.is_none_or(|(h, _)| header.index >= h.index) {
            newest = Some((header, packet));
        }
    }
    newest.map(|(h, packet)| (h.package, packet))
}

/// Writes the output packet answering `package`. `buf` must be
/// [`OUTPUT_PACKET_SIZE`] bytes.
pub fn encode_output(
    package: u32,
    block: &OutputBlock,
    buf: &mut [u8],
) -> Result<(), ProtocolError> {
    check_size(buf, OUTPUT_PACKET_SIZE)?;
    write_header(buf, package, BLOCK as u16, CHANNELS as u16);
    for (chunk, value) in buf[HEADER_SIZE..]
        .chunks_exact_mut(4)
        .zip(block.iter().flatten())
    {
        chunk.copy_from_slice(&value.to_le_bytes());
    }
    Ok(())
}

/// Reads an output packet's header: the package it answers.
pub fn decode_output_package(buf: &[u8]) -> Result<u32, ProtocolError> {
    check_size(buf, OUTPUT_PACKET_SIZE)?;
    let (frames, channels) = (read_u16(buf, 4), read_u16(buf, 6));
    if frames as usize != BLOCK || channels as usize != CHANNELS {
        return Err(ProtocolError::Shape {
            frames,
            channels,
            expected_frames: BLOCK as u16,
            expected_channels: CHANNELS as u16,
        });
    }
    Ok(read_u32(buf, 0))
}

/// Reads a whole output packet: the package it answers, its samples into
/// `block`.
pub fn decode_output(buf: &[u8], block: &mut OutputBlock) -> Result<u32, ProtocolError> {
    let package = decode_output_package(buf)?;
    for (i, sample) in block.iter_mut().flatten().enumerate() {
        *sample = read_f32(buf, HEADER_SIZE + i * 4);
    }
    Ok(package)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pad(frame: usize, p: usize) -> PadInput {
        let v = (frame * PADS + p) as f32;
        PadInput {
            x: v,
            y: v + 0.25,
            pressure: v + 0.5,
        }
    }

    #[test]
    fn sizes_follow_the_seed() {
        assert_eq!(INPUT_PACKET_SIZE, 8 + 2 * 32 * 3 * 4);
        assert_eq!(OUTPUT_PACKET_SIZE, 8 + 32 * 8 * 4);
        assert_eq!(FRAMES_PER_PACKAGE, 32);
        assert_eq!(packet_offset_ns(1), 45_351);
        assert_eq!(package_period_ns(), 725_623);
        // 44 100 packets are exactly two seconds: no drift.
        assert_eq!(packet_offset_ns(44_100), 2_000_000_000);
    }

    #[test]
    fn input_round_trips_frames_and_pads_in_order() {
        let frames = [0, 1].map(|f| std::array::from_fn(|p| pad(f, p)));
        let mut buf = [0u8; INPUT_PACKET_SIZE];
        let header = InputHeader {
            package: 0xDEAD_BEEF,
            index: 15,
        };
        encode_input(header, &frames, &mut buf).unwrap();
        assert_eq!(decode_input_header(&buf).unwrap(), header);
        assert_eq!(&buf[0..8], &[0xEF, 0xBE, 0xAD, 0xDE, 15, 0, 2, 0]);
        let mut pads = [PadInput::default(); PADS];
        for (f, expected) in frames.iter().enumerate() {
            decode_input_frame(&buf, f, &mut pads);
            assert_eq!(&pads, expected);
        }
        // Frame 1, pad 3's pressure sits where the table says.
        let at = 8 + FRAME_SIZE + 3 * 12 + 8;
        assert_eq!(read_f32(&buf, at), pad(1, 3).pressure);
    }

    #[test]
    fn output_round_trips_frames_and_channels_in_order() {
        let block: OutputBlock =
            std::array::from_fn(|f| std::array::from_fn(|c| (f * CHANNELS + c) as f32 * 0.5));
        let mut buf = [0u8; OUTPUT_PACKET_SIZE];
        encode_output(7, &block, &mut buf).unwrap();
        assert_eq!(&buf[4..8], &[32, 0, 8, 0]);
        let mut back = [[0.0; CHANNELS]; BLOCK];
        assert_eq!(decode_output(&buf, &mut back).unwrap(), 7);
        assert_eq!(back, block);
        assert_eq!(read_f32(&buf, 8 + (2 * CHANNELS + 5) * 4), block[2][5]);
    }

    #[test]
    fn malformed_packets_are_refused() {
        let frames = [[PadInput::default(); PADS]; 2];
        let mut short = [0u8; INPUT_PACKET_SIZE - 1];
        let header = InputHeader {
            package: 1,
            index: 0,
        };
        assert!(matches!(
            encode_input(header, &frames, &mut short),
            Err(ProtocolError::Size { .. })
        ));
        let mut buf = [0u8; INPUT_PACKET_SIZE];
        let bad_index = InputHeader {
            index: 16,
            ..header
        };
        assert_eq!(
            encode_input(bad_index, &frames, &mut buf),
            Err(ProtocolError::Index(16))
        );
        encode_input(header, &frames, &mut buf).unwrap();
        buf[6] = 3;
        assert!(matches!(
            decode_input_header(&buf),
            Err(ProtocolError::Shape { frames: 3, .. })
        ));
        let mut out = [0u8; OUTPUT_PACKET_SIZE];
        encode_output(1, &[[0.0; CHANNELS]; BLOCK], &mut out).unwrap();
        out[6] = 2;
        assert!(decode_output_package(&out).is_err());
        assert!(decode_output_package(&out[..100]).is_err());
    }
}
