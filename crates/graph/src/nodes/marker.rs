//! End-to-end latency by a marker in the audio: [`MarkerSource`] writes one
//! full-scale sample into silence every interval and notes the instant that
//! sample stands for; [`MarkerProbe`], later in a path that may leave the
//! machine and come back (a network stream and a remote graph), finds the
//! sample in its input and sends the latency — the instant it stands for
//! there minus the instant it was written — to a non-real-time reader.
//!
//! A sample's instant is its cycle's due time (the timer's expiry, however
//! late the thread woke) plus its offset in the cycle at the sample rate,
//! so both ends count in the same frame of reference, wake-up jitter stays
//! out, and a path with a fixed delay in samples measures exactly that
//! delay. Only
//! one marker is in flight at a time (the interval must exceed the path's
//! latency); a marker the path lost is counted when the next one is
//! written. This module owns the marker protocol; its nodes never allocate
//! and only touch atomics and a preallocated ring in `process`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::node::{Node, ProcessContext};
use crate::port::PortSpec;
use crate::ring::{self, Consumer, Producer};

/// A sample above this is the marker (a full-scale sample survives 16-bit
/// quantisation and any gain a path applies down to −6 dB).
const THRESHOLD: f32 = 0.5;
/// Latencies the ring holds before the reader must have taken them.
const RING: usize = 4096;

/// What the two nodes share: the marker in flight and the counts.
#[derive(Default)]
pub struct MarkerCounts {
    /// The instant of the marker in flight (ns), 0 when none is.
    in_flight_ns: AtomicU64,
    written: AtomicU64,
    found: AtomicU64,
    /// Latencies the reader had no room for.
    unread: AtomicU64,
}

impl MarkerCounts {
    /// Markers written so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Markers found again.
    pub fn found(&self) -> u64 {
        self.found.load(Ordering::Relaxed)
    }

    /// Written markers never found (the one in flight not counted).
    pub fn lost(&self) -> u64 {
        let in_flight = u64::from(self.in_flight_ns.load(Ordering::Relaxed) != 0);
        self.written().saturating_sub(self.found() + in_flight)
    }

    /// Latencies dropped because the reader fell behind.
    pub fn unread(&self) -> u64 {
        self.unread.load(Ordering::Relaxed)
    }
}

/// Writes the marker on its output `out`.
pub struct MarkerSource {
    interval_frames: u64,
    /// Frames until the next marker.
    countdown: u64,
    counts: Arc<MarkerCounts>,
}

/// Finds the marker on its input `in` and reports the latency.
pub struct MarkerProbe {
    counts: Arc<MarkerCounts>,
    latencies: Producer<u64>,
}

/// A source and a probe that know each other, the reader of latencies (ns)
/// and the counts. `interval_frames` must exceed the path's latency.
pub fn marker_pair(
    interval_frames: u64,
) -> (MarkerSource, MarkerProbe, Consumer<u64>, Arc<MarkerCounts>) {
    let counts = Arc::new(MarkerCounts::default());
    let (latencies, reader) = ring::spsc(RING);
    let source = MarkerSource {
        interval_frames: interval_frames.max(1),
        countdown: 0,
        counts: counts.clone(),
    };
    let probe = MarkerProbe {
        counts: counts.clone(),
        latencies,
    };
    (source, probe, reader, counts)
}

/// The instant frame `offset` of the current cycle stands for.
fn instant(ctx: &ProcessContext<'_>, offset: usize) -> u64 {
    ctx.cycle_due_ns() + offset as u64 * 1_000_000_000 / u64::from(ctx.sample_rate())
}

impl Node for MarkerSource {
    fn ports(&self) -> Vec<PortSpec> {
        vec![PortSpec::audio_out("out")]
    }

    fn process(&mut self, ctx: &mut ProcessContext<'_>) {
        let frames = ctx.frames() as u64;
        let at = (self.countdown < frames).then_some(self.countdown as usize);
        let out = ctx.audio_out(0);
        out.fill(0.0);
        let Some(offset) = at else {
            self.countdown -= frames;
            return;
        };
        out[offset] = 1.0;
        self.countdown = self.interval_frames - (frames - offset as u64);
        let at_ns = instant(ctx, offset);
        self.counts.in_flight_ns.store(at_ns, Ordering::Release);
        self.counts.written.fetch_add(1, Ordering::Relaxed);
    }
}

impl Node for MarkerProbe {
    fn ports(&self) -> Vec<PortSpec> {
        vec![PortSpec::audio_in("in")]
    }

    fn process(&mut self, ctx: &mut ProcessContext<'_>) {
        let written_ns = self.counts.in_flight_ns.load(Ordering::Acquire);
        if written_ns == 0 {
            return;
        }
        let Some(offset) = ctx.audio_in(0).iter().position(|&s| s > THRESHOLD) else {
            return;
        };
        let latency = instant(ctx, offset).saturating_sub(written_ns);
        // The source may have written a new marker since the load: only
        // the one loaded is taken off.
        let taken = self.counts.in_flight_ns.compare_exchange(
            written_ns,
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        if taken.is_err() {
            return;
        }
        self.counts.found.fetch_add(1, Ordering::Relaxed);
        if self.latencies.push(latency).is_err() {
            self.counts.unread.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{nodes::Passthrough, Engine, EngineConfig, FreewheelDriver, Graph, StreamConfig};

    #[test]
    fn a_marker_through_a_direct_path_has_no_latency() {
        let (source, probe, mut reader, counts) = marker_pair(480);
        let mut graph = Graph::new();
        let source = graph.add_node("marker", Box::new(source)).unwrap();
        let through = graph
            .add_node("through", Box::new(Passthrough::new(1)))
            .unwrap();
        let probe = graph.add_node("probe", Box::new(probe)).unwrap();
        graph
            .connect(
                graph.port(source, "out").unwrap(),
                graph.port(through, "in0").unwrap(),
            )
            .unwrap();
        graph
            .connect(
                graph.port(through, "out0").unwrap(),
                graph.port(probe, "in").unwrap(),
            )
            .unwrap();
        let stream = StreamConfig::new(64, 48_000).unwrap();
        let engine =
            Engine::start(graph, stream, FreewheelDriver, EngineConfig::default()).unwrap();
        while counts.found() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        engine.stop().unwrap();
        assert_eq!(reader.pop(), Ok(0));
        assert_eq!(counts.lost(), 0);
    }
}
