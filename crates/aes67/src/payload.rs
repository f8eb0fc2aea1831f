//! L16 and L24 payloads: big-endian two's-complement PCM, channels
//! interleaved within each frame (RFC 3551 §4.5.11, RFC 3190 §4). It owns
//! the scaling between f32 and the integer ranges and works one channel at
//! a time on caller buffers, so it must never allocate.
//!
//! Short buffers are caller bugs: `debug_assert!`s name them in debug
//! builds and slicing panics in release builds; nothing is silently cut.

use crate::format::Encoding;

const L16_SCALE: f32 = 32_768.0;
const L24_SCALE: f32 = 8_388_608.0;

/// Writes `samples` (one channel, frames = `samples.len()`) as channel
/// `channel` of a `channels`-interleaved payload. Scale: L16 x·32768, L24
/// x·8388608, rounded, clamped to the integer range (1.0 → 32767).
/// Never allocates.
pub fn encode_channel(
    encoding: Encoding,
    channels: usize,
    channel: usize,
    samples: &[f32],
    payload: &mut [u8],
) {
    let width = encoding.bytes_per_sample();
    let frames = frames_mut(payload, width, channels, channel, samples.len());
    match encoding {
        Encoding::L16 => {
            for (frame, &x) in frames.zip(samples) {
                let v = quantize(x, L16_SCALE) as i16;
                frame[channel * 2..][..2].copy_from_slice(&v.to_be_bytes());
            }
        }
        Encoding::L24 => {
            for (frame, &x) in frames.zip(samples) {
                let v = quantize(x, L24_SCALE) as i32;
                frame[channel * 3..][..3].copy_from_slice(&v.to_be_bytes()[1..]);
            }
        }
    }
}

/// The inverse of [`encode_channel`]: channel `channel` of `payload` into
/// `samples` (frames = `samples.len()`), value / 32768 or / 8388608.
/// Never allocates.
pub fn decode_channel(
    encoding: Encoding,
    channels: usize,
    channel: usize,
    payload: &[u8],
    samples: &mut [f32],
) {
    let width = encoding.bytes_per_sample();
    debug_assert!(channel < channels, "channel {channel} of {channels}");
    let frames = payload[..samples.len() * channels * width].chunks_exact(channels * width);
    match encoding {
        Encoding::L16 => {
            for (x, frame) in samples.iter_mut().zip(frames) {
                let s = &frame[channel * 2..];
                *x = f32::from(i16::from_be_bytes([s[0], s[1]])) / L16_SCALE;
            }
        }
        Encoding::L24 => {
            for (x, frame) in samples.iter_mut().zip(frames) {
                let s = &frame[channel * 3..];
                // Shifting the 24 bits to the top and back sign-extends them.
                let v = i32::from_be_bytes([s[0], s[1], s[2], 0]) >> 8;
                *x = v as f32 / L24_SCALE;
            }
        }
    }
}

fn frames_mut(
    payload: &mut [u8],
    width: usize,
    channels: usize,
    channel: usize,
    frames: usize,
) -> std::slice::ChunksExactMut<'_, u8> {
    debug_assert!(channel < channels, "channel {channel} of {channels}");
    payload[..frames * channels * width].chunks_exact_mut(channels * width)
}

/// Full scale is 2^(bits−1), so +1.0 is one step beyond the largest code and
/// clamps to it while −1.0 is exact. NaN becomes 0 through the `as` cast.
fn quantize(x: f32, scale: f32) -> f32 {
    (x * scale).round().clamp(-scale, scale - 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(encoding: Encoding, samples: &[f32]) -> Vec<u8> {
        let mut payload = vec![0u8; samples.len() * encoding.bytes_per_sample()];
        encode_channel(encoding, 1, 0, samples, &mut payload);
        payload
    }

    #[test]
    fn byte_order_is_big_endian() {
        assert_eq!(encode(Encoding::L24, &[0.5]), [0x40, 0x00, 0x00]);
        assert_eq!(encode(Encoding::L24, &[-1.0]), [0x80, 0x00, 0x00]);
        assert_eq!(
            encode(Encoding::L24, &[-1.0 / 8_388_608.0]),
            [0xff, 0xff, 0xff]
        );
        assert_eq!(encode(Encoding::L16, &[-1.0]), [0x80, 0x00]);
        assert_eq!(encode(Encoding::L16, &[0.25]), [0x20, 0x00]);
        assert_eq!(encode(Encoding::L16, &[1.0 / 32_768.0]), [0x00, 0x01]);
    }

    #[test]
    fn out_of_range_clips() {
        assert_eq!(
            encode(Encoding::L16, &[1.0, 7.0, -3.0]),
            [0x7f, 0xff, 0x7f, 0xff, 0x80, 0x00]
        );
        assert_eq!(encode(Encoding::L24, &[1.0]), [0x7f, 0xff, 0xff]);
        assert_eq!(encode(Encoding::L24, &[f32::NAN]), [0, 0, 0]);
    }

    #[test]
    fn channels_interleave_within_each_frame() {
        let mut payload = [0u8; 2 * 3 * 2];
        encode_channel(Encoding::L16, 3, 1, &[0.5, -0.5], &mut payload);
        assert_eq!(payload, [0, 0, 0x40, 0, 0, 0, 0, 0, 0xc0, 0, 0, 0]);
        let mut back = [0.0; 2];
        decode_channel(Encoding::L16, 3, 1, &payload, &mut back);
        assert_eq!(back, [0.5, -0.5]);
        decode_channel(Encoding::L16, 3, 0, &payload, &mut back);
        assert_eq!(back, [0.0, 0.0]);
    }

    proptest! {
        #[test]
        fn round_trip_is_within_half_a_step(
            samples in prop::collection::vec(-1.0f32..1.0, 1..64),
            channels in 1usize..9,
            l24 in any::<bool>(),
        ) {
            let (encoding, scale) = if l24 { (Encoding::L24, L24_SCALE) } else { (Encoding::L16, L16_SCALE) };
            let channel = channels - 1;
            let mut payload = vec![0u8; samples.len() * channels * encoding.bytes_per_sample()];
            encode_channel(encoding, channels, channel, &samples, &mut payload);
            let mut back = vec![0.0; samples.len()];
            decode_channel(encoding, channels, channel, &payload, &mut back);
            // The largest code is scale − 1: above it, within the last half
            // step below 1.0, a sample comes back as that code.
            let top = (scale - 1.0) / scale;
            for (a, b) in samples.iter().zip(&back) {
                prop_assert!((a.min(top) - b).abs() <= 0.5 / scale + f32::EPSILON);
            }
        }
    }
}
