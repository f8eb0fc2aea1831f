//! [`StreamConfig`]: an audio stream's buffer size and sample rate, validated
//! once so that every driver and the compiled graph can rely on them; its
//! period is the period of the cell that runs the graph. Here, below the
//! graph, so that the scenario language refuses what the engine would not
//! run without depending on the engine. Pure: it must never do I/O.

use std::fmt;
use std::time::Duration;

/// Smallest buffer size, in frames, the engine runs.
pub const MIN_FRAMES: u32 = 32;
/// Largest buffer size, in frames, the engine runs.
pub const MAX_FRAMES: u32 = 4096;
/// Sample rates the engine runs.
pub const SAMPLE_RATES: [u32; 3] = [44_100, 48_000, 96_000];

/// Buffer size and sample rate of a stream; its period is frames / rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StreamConfig {
    frames: u32,
    sample_rate: u32,
}

/// A buffer size or sample rate the engine does not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamConfigError {
    Frames(u32),
    SampleRate(u32),
}

impl fmt::Display for StreamConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamConfigError::Frames(frames) => write!(
                f,
                "buffer size {frames} frames is out of range: use {MIN_FRAMES} to {MAX_FRAMES} frames"
            ),
            StreamConfigError::SampleRate(rate) => write!(
                f,
                "sample rate {rate} Hz is not supported: use 44100, 48000 or 96000 Hz"
            ),
        }
    }
}

impl std::error::Error for StreamConfigError {}

impl StreamConfig {
    /// Validates `frames` (32..=4096) and `sample_rate` (44.1, 48 or 96 kHz).
    pub fn new(frames: u32, sample_rate: u32) -> Result<Self, StreamConfigError> {
        if !(MIN_FRAMES..=MAX_FRAMES).contains(&frames) {
            return Err(StreamConfigError::Frames(frames));
        }
        if !SAMPLE_RATES.contains(&sample_rate) {
            return Err(StreamConfigError::SampleRate(sample_rate));
        }
        Ok(StreamConfig {
            frames,
            sample_rate,
        })
    }

    pub fn frames(&self) -> u32 {
        self.frames
    }

    pub fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    /// frames / sample rate, in nanoseconds.
    pub fn period_ns(&self) -> u64 {
        self.frames as u64 * 1_000_000_000 / self.sample_rate as u64
    }

    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_range() {
        for frames in [32, 128, 4096] {
            for rate in SAMPLE_RATES {
                assert!(StreamConfig::new(frames, rate).is_ok());
            }
        }
        assert_eq!(
            StreamConfig::new(128, 96_000).unwrap().period_ns(),
            1_333_333
        );
    }

    #[test]
    fn rejects_others_with_a_clear_error() {
        assert_eq!(
            StreamConfig::new(16, 48_000),
            Err(StreamConfigError::Frames(16))
        );
        assert_eq!(
            StreamConfig::new(8192, 48_000),
            Err(StreamConfigError::Frames(8192))
        );
        let err = StreamConfig::new(128, 22_050).unwrap_err();
        assert!(err.to_string().contains("44100, 48000 or 96000"));
    }
}
