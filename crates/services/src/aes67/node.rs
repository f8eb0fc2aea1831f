//! The graph's ends of AES67 streams: [`StreamSource`] plays a received
//! stream into a cell's audio graph, [`StreamSink`] sends the graph's audio
//! as one. Both reach the network through a flow of the network service
//! (the service's process owns the sockets), and both are timed by the
//! media clock.
//!
//! A source plays the frames of media time `cycle due − latency` (the link
//! offset of AES67; a cycle is due at its timer's expiry, however late its
//! thread woke): a packet that came by then is heard, one that did not is
//! silence, counted lost, and one that comes after is counted late. A sink
//! stamps each cycle's frames with the media time the cycle was due. So a
//! path through a source and a sink delays by exactly
//! the source's latency, whatever the cycles' phases. Streams whose sender
//! is not on our media clock (Debian 12's PipeWire stamps from its own
//! graph) are played by arrival instead: latency frames behind the newest
//! frame heard, re-anchored when the sender drifts out of the buffer.
//!
//! Both nodes run on the engine's real-time threads: they never allocate,
//! lock or block (the flow's channel calls and the clock reads are
//! wait-free), and publish what they count through atomics.

use super::clock::MediaClock;
use crate::net::{ChannelError, Flow, ToSend};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tessera_aes67::format::MAX_CHANNELS;
use tessera_aes67::rtp::{self, timestamp_delta};
use tessera_aes67::{JitterBuffer, JitterCounters, Packetizer, StreamFormat};
use tessera_graph::{Node, PortSpec, ProcessContext};
use tessera_sys::clock::monotonic_ns;

/// How a source picks the media time it plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Playout {
    /// The sender stamps from the same media clock (PTP, or this machine's
    /// clock): play `latency` behind now.
    MediaClock,
    /// The sender has a clock of its own: play `latency` behind the newest
    /// frame heard.
    Arrival,
}

/// Packet ages at arrival are counted in buckets this wide…
pub const AGE_BUCKET_NS: u64 = 20_000;
/// …this many of them; the last holds every older packet (10 ms and more).
pub const AGE_BUCKETS: usize = 500;

/// How old each received packet was when it arrived: from the media time
/// of its first sample to the kernel's receive stamp, in buckets of
/// [`AGE_BUCKET_NS`]. The sender's cycle, both services and the wire are
/// in it: a receiver's latency must cover the tail (plus up to a packet
/// for a sender whose packets are off the media clock's grid). Counted
/// only for streams played by the media clock, whose senders stamp from
/// the same clock.
struct PacketAges(Box<[AtomicU64]>);

impl Default for PacketAges {
    fn default() -> Self {
        PacketAges((0..AGE_BUCKETS).map(|_| AtomicU64::new(0)).collect())
    }
}

impl PacketAges {
    fn count(&self, age_ns: u64) {
        let bucket = ((age_ns / AGE_BUCKET_NS) as usize).min(AGE_BUCKETS - 1);
        self.0[bucket].fetch_add(1, Relaxed);
    }

    fn snapshot(&self) -> Vec<u64> {
        self.0.iter().map(|c| c.load(Relaxed)).collect()
    }
}

/// What a stream's node counts, for the application's report.
#[derive(Default)]
pub struct StreamCounters {
    /// The jitter buffer's counts (source), published each cycle in
    /// [`JitterCounters::to_array`]'s order.
    jitter: [AtomicU64; JitterCounters::COUNT],
    /// Datagrams that were not RTP (source).
    not_rtp: AtomicU64,
    /// Frames played as silence because nothing was held for them.
    silent_frames: AtomicU64,
    /// The play (source) or stamp (sink) position jumped back onto the
    /// clock: a stalled cycle, or a sender out of the buffer.
    resyncs: AtomicU64,
    /// Packets given to the service (sink), and those it had no room for.
    sent: AtomicU64,
    send_full: AtomicU64,
    /// The network service died: the stream is silent from then on.
    service_gone: AtomicBool,
    /// Received packets' ages (source).
    ages: PacketAges,
}

/// A snapshot of [`StreamCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StreamCounts {
    pub jitter: JitterCounters,
    pub not_rtp: u64,
    pub silent_frames: u64,
    pub resyncs: u64,
    pub sent: u64,
    pub send_full: u64,
    pub service_gone: bool,
}

impl StreamCounters {
    /// The received packets counted in each age bucket so far
    /// ([`AGE_BUCKET_NS`] wide): how old each was when it arrived, from the
    /// media time of its first sample; all zero for a sink.
    pub fn packet_ages(&self) -> Vec<u64> {
        self.ages.snapshot()
    }

    pub fn snapshot(&self) -> StreamCounts {
        StreamCounts {
            jitter: JitterCounters::from_array(self.jitter.each_ref().map(|c| c.load(Relaxed))),
            not_rtp: self.not_rtp.load(Relaxed),
            silent_frames: self.silent_frames.load(Relaxed),
            resyncs: self.resyncs.load(Relaxed),
            sent: self.sent.load(Relaxed),
            send_full: self.send_full.load(Relaxed),
            service_gone: self.service_gone.load(Relaxed),
        }
    }

    fn publish(&self, jitter: &JitterCounters) {
        for (counter, value) in self.jitter.iter().zip(jitter.to_array()) {
            counter.store(value, Relaxed);
        }
    }

    fn lose_service(&self, error: &ChannelError) {
        if matches!(error, ChannelError::PeerGone { .. }) {
            self.service_gone.store(true, Relaxed);
        }
    }
}

/// Where a stream's position stands against the clock: anchored once on
/// a cycle's due time, then advanced by each cycle's frames, and moved
/// back onto the clock by whole cycles when it is more than half a cycle
/// away — after a stalled cycle whose periods the driver skipped (it comes
/// back onto its grid). Keeping the phase to the driver's grid keeps any
/// wake-up's lateness out of the audio. After the media clock was stepped
/// (its offset taken again: [`MediaClock::steps`]) it anchors anew, phase
/// and all, since the old phase was the old clock's.
#[derive(Default)]
struct Position {
    next: Option<u32>,
    /// The clock's [`MediaClock::steps`] when last anchored.
    steps: u64,
}

impl Position {
    /// The position of this cycle's first frame, `ideal` by the clock whose
    /// step count is `steps`; counts a move back onto the clock.
    fn take(&mut self, ideal: u32, frames: u32, steps: u64, counters: &StreamCounters) -> u32 {
        if steps != self.steps {
            self.steps = steps;
            if self.next.take().is_some() {
                counters.resyncs.fetch_add(1, Relaxed);
            }
        }
        let at = match self.next {
            None => ideal,
            Some(next) => {
                let drift = timestamp_delta(next, ideal);
                let cycles = (f64::from(drift) / f64::from(frames.max(1))).round() as i32;
                if cycles != 0 {
                    counters.resyncs.fetch_add(1, Relaxed);
                }
                next.wrapping_add_signed(cycles.wrapping_mul(frames as i32))
            }
        };
        self.next = Some(at.wrapping_add(frames));
        at
    }
}

/// Plays a received stream on its audio outputs `out1`…`outN`.
pub struct StreamSource {
    flow: Flow,
    jitter: JitterBuffer,
    clock: MediaClock,
    playout: Playout,
    latency_frames: u32,
    position: Position,
    counters: Arc<StreamCounters>,
}

impl StreamSource {
    /// A source of `format` on `flow` (a flow of the network service that
    /// receives the stream), holding `buffer_packets` packets and playing
    /// `latency_frames` behind the clock (or the newest frame).
    pub fn new(
        flow: Flow,
        format: StreamFormat,
        buffer_packets: usize,
        latency_frames: u32,
        playout: Playout,
        clock: MediaClock,
    ) -> (StreamSource, Arc<StreamCounters>) {
        let counters = Arc::new(StreamCounters::default());
        let source = StreamSource {
            flow,
            jitter: JitterBuffer::new(format, buffer_packets),
            clock,
            playout,
            latency_frames,
            position: Position::default(),
            counters: counters.clone(),
        };
        (source, counters)
    }

    /// Takes every datagram the service handed over into the jitter buffer.
    fn drain(&mut self) {
        let rate = self.jitter.format().sample_rate;
        loop {
            match self.flow.try_receive() {
                Ok(Some((received, datagram))) => match rtp::parse(datagram) {
                    Ok(packet) => {
                        if self.playout == Playout::MediaClock && received.arrival_ns != 0 {
                            let arrival = received.arrival_ns;
                            let stamped =
                                self.clock
                                    .monotonic_ns_of(packet.header.timestamp, rate, arrival);
                            self.counters.ages.count(arrival.saturating_sub(stamped));
                        }
                        self.jitter.push(&packet.header, packet.payload);
                    }
                    Err(_) => {
                        self.counters.not_rtp.fetch_add(1, Relaxed);
                    }
                },
                Ok(None) => return,
                Err(error) => return self.counters.lose_service(&error),
            }
        }
    }

    /// The media time this cycle plays from; `None` while an arrival-timed
    /// stream has not been heard.
    fn play_position(&mut self, cycle_due_ns: u64, frames: u32) -> Option<u32> {
        let rate = self.jitter.format().sample_rate;
        let ideal = match self.playout {
            Playout::MediaClock => self
                .clock
                .rtp_timestamp_at(cycle_due_ns, rate)
                .wrapping_sub(self.latency_frames),
            Playout::Arrival => self.arrival_ideal(frames)?,
        };
        // An arrival-timed stream's position is the sender's, not the clock's.
        let steps = match self.playout {
            Playout::MediaClock => self.clock.steps(),
            Playout::Arrival => self.position.steps,
        };
        Some(self.position.take(ideal, frames, steps, &self.counters))
    }

    /// Where an arrival-timed stream would play: latency behind the newest
    /// frame — kept while the position stays inside what the buffer can
    /// hold, so the ideal is the current position until the sender drifts.
    fn arrival_ideal(&self, frames: u32) -> Option<u32> {
        let newest = self.jitter.newest_end()?;
        let anchored = newest.wrapping_sub(self.latency_frames);
        let Some(next) = self.position.next else {
            return Some(anchored);
        };
        let held = self.jitter.packets() as i32 * self.jitter.format().frames_per_packet as i32;
        let lead = timestamp_delta(next, newest);
        let inside = lead >= 0 && lead + frames as i32 <= held;
        Some(if inside { next } else { anchored })
    }
}

impl Node for StreamSource {
    fn ports(&self) -> Vec<PortSpec> {
        let channels = self.jitter.format().channels;
        (1..=channels)
            .map(|k| PortSpec::audio_out(format!("out{k}")))
            .collect()
    }

    fn process(&mut self, ctx: &mut ProcessContext<'_>) {
        self.drain();
        let frames = ctx.frames() as u32;
        let channels = usize::from(self.jitter.format().channels);
        let Some(at) = self.play_position(ctx.cycle_due_ns(), frames) else {
            for channel in 0..channels {
                ctx.audio_out(channel).fill(0.0);
            }
            return;
        };
        let mut missing = 0;
        for channel in 0..channels {
            missing = self.jitter.read(at, channel, ctx.audio_out(channel));
        }
        self.jitter.advance(at, frames);
        self.counters
            .silent_frames
            .fetch_add(missing as u64, Relaxed);
        self.counters.publish(&self.jitter.counters());
    }
}

/// Sends the audio on its inputs `in1`…`inN` as a stream.
pub struct StreamSink {
    flow: Flow,
    packetizer: Packetizer,
    clock: MediaClock,
    position: Position,
    counters: Arc<StreamCounters>,
}

impl StreamSink {
    /// A sink sending `format` with RTP payload type `payload_type` and
    /// synchronisation source `ssrc` on `flow` (a flow of the network
    /// service whose peer is the stream's destination).
    pub fn new(
        flow: Flow,
        format: StreamFormat,
        payload_type: u8,
        ssrc: u32,
        clock: MediaClock,
    ) -> (StreamSink, Arc<StreamCounters>) {
        let counters = Arc::new(StreamCounters::default());
        let sink = StreamSink {
            flow,
            // RFC 3550 §5.1: the first sequence number is random; the
            // SSRC is as good a source of it as any.
            packetizer: Packetizer::new(format, payload_type, ssrc, ssrc as u16),
            clock,
            position: Position::default(),
            counters: counters.clone(),
        };
        (sink, counters)
    }
}

impl Node for StreamSink {
    fn ports(&self) -> Vec<PortSpec> {
        let channels = self.packetizer.format().channels;
        (1..=channels)
            .map(|k| PortSpec::audio_in(format!("in{k}")))
            .collect()
    }

    fn process(&mut self, ctx: &mut ProcessContext<'_>) {
        let format = self.packetizer.format();
        let frames = ctx.frames();
        let ideal = self
            .clock
            .rtp_timestamp_at(ctx.cycle_due_ns(), format.sample_rate);
        let steps = self.clock.steps();
        let at = self
            .position
            .take(ideal, frames as u32, steps, &self.counters);
        let mut inputs: [&[f32]; MAX_CHANNELS as usize] = [&[]; MAX_CHANNELS as usize];
        for (channel, input) in inputs.iter_mut().enumerate().take(format.channels.into()) {
            *input = ctx.audio_in(channel);
        }
        let StreamSink {
            flow,
            packetizer,
            counters,
            ..
        } = self;
        packetizer.push(
            at,
            frames,
            |channel, frame| inputs[channel][frame],
            |datagram| send(flow, datagram, counters),
        );
    }
}

/// Gives one datagram to the service; a full channel (the service is
/// behind) loses it, counted.
fn send(flow: &mut Flow, datagram: &[u8], counters: &StreamCounters) {
    let meta = ToSend {
        origin_ns: 0,
        queued_ns: monotonic_ns(),
        to: None,
    };
    match flow.try_send(datagram, meta) {
        Ok(()) => {
            counters.sent.fetch_add(1, Relaxed);
        }
        Err(ChannelError::Full) => {
            counters.send_full.fetch_add(1, Relaxed);
        }
        Err(error) => counters.lose_service(&error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn less_than_half_a_cycle_off_the_clock_never_moves_the_audio() {
        let (mut position, counters) = (Position::default(), StreamCounters::default());
        assert_eq!(position.take(1000, 48, 0, &counters), 1000);
        assert_eq!(position.take(1071, 48, 0, &counters), 1048);
        assert_eq!(position.take(1074, 48, 0, &counters), 1096);
        assert_eq!(counters.snapshot().resyncs, 0);
    }

    #[test]
    fn a_skipped_period_moves_the_position_by_whole_cycles_and_keeps_its_phase() {
        let (mut position, counters) = (Position::default(), StreamCounters::default());
        position.take(1000, 48, 0, &counters);
        // The driver stalled and skipped the period of 1048.
        assert_eq!(position.take(1096, 48, 0, &counters), 1096);
        assert_eq!(position.take(1144, 48, 0, &counters), 1144);
        assert_eq!(counters.snapshot().resyncs, 1);
    }

    #[test]
    fn a_stepped_clock_anchors_the_position_anew_phase_and_all() {
        let (mut position, counters) = (Position::default(), StreamCounters::default());
        position.take(1000, 48, 0, &counters);
        // The clock was stepped by 1.25 cycles: whole cycles would keep
        // the old clock's phase; the position takes the new one.
        assert_eq!(position.take(1108, 48, 1, &counters), 1108);
        assert_eq!(position.take(1156, 48, 1, &counters), 1156);
        assert_eq!(counters.snapshot().resyncs, 1);
    }

    #[test]
    fn positions_wrap_with_the_timestamps() {
        let (mut position, counters) = (Position::default(), StreamCounters::default());
        assert_eq!(
            position.take(u32::MAX - 20, 48, 0, &counters),
            u32::MAX - 20
        );
        assert_eq!(position.take(27, 48, 0, &counters), 27);
        assert_eq!(counters.snapshot().resyncs, 0);
    }
}
