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
//! graph) are played by arrival instead, by `tessera_aes67::playout`'s
//! rule: latency frames behind the fastest packet of the last second or
//! two, following the sender's drift by slipping whole frames.
//!
//! A stream may come by two paths (ST 2022-7): the source takes each RTP
//! sequence number's first copy from either flow (`tessera_aes67`'s
//! merge), the sink sends every packet on both. A source plays the payload
//! type its stream's description gives, or any dynamic one (96–127) when
//! it has none; others are counted and dropped.
//!
//! Both nodes run on the engine's real-time threads: they never allocate,
//! lock or block (the flow's channel calls and the clock reads are
//! wait-free), and publish what they count through atomics.

use super::clock::MediaClock;
use crate::net::{ChannelError, Flow, ToSend};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tessera_aes67::format::MAX_CHANNELS;
use tessera_aes67::playout::{ArrivalPlayout, CyclePlay, PlayoutConfig, PlayoutCounts, Slip};
use tessera_aes67::redundancy::{Copy, Merge, MergeCounts};
use tessera_aes67::rtp::{self, samples_at, timestamp_delta, DYNAMIC_PAYLOAD_TYPES};
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
    /// The sender has a clock of its own: play `latency` behind the fastest
    /// packet of the last window, slipping whole frames (at most
    /// `max_slip_ppm`) as its clock drifts from ours.
    Arrival { max_slip_ppm: u32 },
}

/// How a source plays its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceSettings {
    /// Packets the jitter buffer holds.
    pub buffer_packets: usize,
    /// How far behind the clock (or the fastest packet) it plays, frames.
    pub latency_frames: u32,
    pub playout: Playout,
    /// The payload type its description gives; None: any dynamic one.
    pub payload_type: Option<u8>,
}

/// Packet ages at arrival are counted in buckets this wide…
pub const AGE_BUCKET_NS: u64 = 20_000;
/// …this many of them; the last holds every older packet (10 ms and more).
pub const AGE_BUCKETS: usize = 500;

/// How old each received packet was when it arrived: from the media time
/// of its first sample to the kernel's receive stamp, in buckets of
/// [`AGE_BUCKET_NS`]. The sender's cycle, both services and the wire are
/// in it: a receiver's latency must cover the tail (plus up to a packet
/// for a sender whose packets are off the media clock's grid). For a
/// stream played by arrival, whose sender's clock is its own, the age
/// counts from the fastest packet of the playout's window instead: the
/// jitter its latency absorbs.
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
    /// RTP packets of a payload type the source does not play.
    wrong_payload_type: AtomicU64,
    /// Frames played as silence because nothing was held for them.
    silent_frames: AtomicU64,
    /// The play (source) or stamp (sink) position jumped back onto the
    /// clock: a stalled cycle, a stepped clock, or a sender an arrival
    /// playout could not follow by slips.
    resyncs: AtomicU64,
    /// An arrival playout's frames dropped and repeated (its resyncs are
    /// in `resyncs`).
    slips: [AtomicU64; 2],
    /// The merge of two paths, in [`MergeCounts::to_array`]'s order.
    merge: [AtomicU64; MergeCounts::COUNT],
    /// Packets given to the service on at least one path (sink), and a
    /// count per path that had no room for one.
    sent: AtomicU64,
    send_full: AtomicU64,
    /// The network service died: the stream is silent from then on.
    service_gone: AtomicBool,
    /// Packets whose first frame had already played when they were taken
    /// (source), by where they were held up: [`StreamCounts::late_arrivals`]
    /// and [`StreamCounts::late_in_host`].
    late: [AtomicU64; 2],
    /// Received packets' ages (source).
    ages: PacketAges,
}

/// A snapshot of [`StreamCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StreamCounts {
    pub jitter: JitterCounters,
    pub not_rtp: u64,
    pub wrong_payload_type: u64,
    pub silent_frames: u64,
    pub resyncs: u64,
    /// Frames an arrival playout dropped and repeated, one per slip.
    pub frames_dropped: u64,
    pub frames_repeated: u64,
    /// Each path's copies and losses, and the duplicates the merge dropped
    /// (all 0 for a stream of one path).
    pub merge: MergeCounts,
    /// Packets given to the service (on one path at least).
    pub sent: u64,
    /// Packets a path's channel had no room for.
    pub send_full: u64,
    /// Packets that came too late to be played whole because they reached
    /// this host's socket late: more than the latency (less a cycle) after
    /// the window's fastest packet (arrival playout) or after their media
    /// time (media-clock playout). The sender's or the network's delay,
    /// which only a longer latency absorbs.
    #[serde(default)]
    pub late_arrivals: u64,
    /// Packets that reached the socket in time and still missed their
    /// first frame's play: held up in this host (the network service's
    /// hand-over, or a cycle that ran late). What this host owes.
    #[serde(default)]
    pub late_in_host: u64,
    pub service_gone: bool,
}

impl StreamCounts {
    /// Every count in a fixed order (the flag aside), for windows' sums and
    /// differences.
    fn to_array(self) -> [u64; StreamCounts::COUNT] {
        let mut out = [0; StreamCounts::COUNT];
        let parts = self.jitter.to_array().into_iter().chain(
            [
                self.not_rtp,
                self.wrong_payload_type,
                self.silent_frames,
                self.resyncs,
                self.frames_dropped,
                self.frames_repeated,
                self.sent,
                self.send_full,
                self.late_arrivals,
                self.late_in_host,
            ]
            .into_iter()
            .chain(self.merge.to_array()),
        );
        for (slot, value) in out.iter_mut().zip(parts) {
            *slot = value;
        }
        out
    }

    /// The counts of a stream's own, after the jitter buffer's.
    const OWN: usize = 10;
    const COUNT: usize = JitterCounters::COUNT + Self::OWN + MergeCounts::COUNT;

    fn from_array(values: [u64; StreamCounts::COUNT], service_gone: bool) -> StreamCounts {
        let j = JitterCounters::COUNT;
        let own = &values[j..j + Self::OWN];
        StreamCounts {
            jitter: JitterCounters::from_array(std::array::from_fn(|i| values[i])),
            not_rtp: own[0],
            wrong_payload_type: own[1],
            silent_frames: own[2],
            resyncs: own[3],
            frames_dropped: own[4],
            frames_repeated: own[5],
            sent: own[6],
            send_full: own[7],
            late_arrivals: own[8],
            late_in_host: own[9],
            merge: MergeCounts::from_array(std::array::from_fn(|i| values[j + Self::OWN + i])),
            service_gone,
        }
    }

    /// What was counted since `start` (an earlier snapshot of the same
    /// stream); the flag is this one's.
    pub fn since(&self, start: &StreamCounts) -> StreamCounts {
        let (a, b) = (start.to_array(), self.to_array());
        StreamCounts::from_array(
            std::array::from_fn(|i| b[i].saturating_sub(a[i])),
            self.service_gone,
        )
    }

    /// Adds `other`'s counts to these (streams summed).
    pub fn add(&mut self, other: &StreamCounts) {
        let (a, b) = (self.to_array(), other.to_array());
        *self = StreamCounts::from_array(
            std::array::from_fn(|i| a[i] + b[i]),
            self.service_gone || other.service_gone,
        );
    }
}

impl StreamCounters {
    /// The received packets counted in each age bucket so far
    /// ([`AGE_BUCKET_NS`] wide): how old each was when it arrived, from the
    /// media time of its first sample; all zero for a sink.
    pub fn packet_ages(&self) -> Vec<u64> {
        self.ages.snapshot()
    }

    pub fn snapshot(&self) -> StreamCounts {
        let [frames_dropped, frames_repeated] = self.slips.each_ref().map(|c| c.load(Relaxed));
        let [late_arrivals, late_in_host] = self.late.each_ref().map(|c| c.load(Relaxed));
        StreamCounts {
            jitter: JitterCounters::from_array(self.jitter.each_ref().map(|c| c.load(Relaxed))),
            not_rtp: self.not_rtp.load(Relaxed),
            wrong_payload_type: self.wrong_payload_type.load(Relaxed),
            silent_frames: self.silent_frames.load(Relaxed),
            resyncs: self.resyncs.load(Relaxed),
            frames_dropped,
            frames_repeated,
            merge: MergeCounts::from_array(self.merge.each_ref().map(|c| c.load(Relaxed))),
            sent: self.sent.load(Relaxed),
            send_full: self.send_full.load(Relaxed),
            late_arrivals,
            late_in_host,
            service_gone: self.service_gone.load(Relaxed),
        }
    }

    /// Publishes a source's counts (its real-time thread, every cycle).
    fn publish(&self, jitter: &JitterCounters, merge: Option<&Merge>) {
        store_all(&self.jitter, jitter.to_array());
        if let Some(merge) = merge {
            store_all(&self.merge, merge.counts().to_array());
        }
    }

    /// An arrival playout's counts: its resyncs, slips published as they
    /// are (a source's resyncs are the playout's alone).
    fn publish_playout(&self, counts: &PlayoutCounts) {
        self.resyncs.store(counts.resyncs, Relaxed);
        store_all(&self.slips, [counts.frames_dropped, counts.frames_repeated]);
    }

    fn lose_service(&self, error: &ChannelError) {
        if matches!(error, ChannelError::PeerGone { .. }) {
            self.service_gone.store(true, Relaxed);
        }
    }
}

fn store_all<const N: usize>(counters: &[AtomicU64; N], values: [u64; N]) {
    for (counter, value) in counters.iter().zip(values) {
        counter.store(value, Relaxed);
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
    /// One flow per path (two: ST 2022-7).
    paths: Vec<Flow>,
    receiver: Receiver,
}

/// What a source does with its packets, apart from the flows they come by.
struct Receiver {
    /// The first copy of each packet, when there are two paths.
    merge: Option<Merge>,
    payload_type: Option<u8>,
    jitter: JitterBuffer,
    timing: Timing,
    /// How far behind the window's fastest packet (arrival) or its media
    /// time (clock) a packet is played, frames.
    latency_frames: u32,
    /// The last cycle's frames: a packet later than the latency less a
    /// cycle may miss its play through no fault of this host.
    cycle_frames: u32,
    counters: Arc<StreamCounters>,
}

/// The fastest transit of an arrival playout is taken over buckets of a
/// second.
const PLAYOUT_WINDOW_S: u32 = 1;

impl StreamSource {
    /// A source of `format` on `paths` (flows of the network service that
    /// receive the stream: one, or two for ST 2022-7), timed by `clock`
    /// when its playout is the media clock's.
    ///
    /// # Panics
    /// With no path or more than [`tessera_aes67::redundancy::PATHS`].
    pub fn new(
        paths: Vec<Flow>,
        format: StreamFormat,
        settings: SourceSettings,
        clock: MediaClock,
    ) -> (StreamSource, Arc<StreamCounters>) {
        assert!(
            (1..=tessera_aes67::redundancy::PATHS).contains(&paths.len()),
            "a stream comes by one or two paths, not {}",
            paths.len()
        );
        let counters = Arc::new(StreamCounters::default());
        let timing = match settings.playout {
            Playout::MediaClock => Timing::MediaClock {
                clock,
                latency_frames: settings.latency_frames,
                position: Position::default(),
            },
            Playout::Arrival { max_slip_ppm } => {
                Timing::Arrival(ArrivalPlayout::new(PlayoutConfig {
                    latency_frames: settings.latency_frames,
                    max_slip_ppm,
                    window_frames: format.sample_rate * PLAYOUT_WINDOW_S,
                    ring_frames: (settings.buffer_packets * format.frames_per_packet as usize)
                        as u32,
                }))
            }
        };
        let receiver = Receiver {
            merge: (paths.len() > 1).then(Merge::new),
            payload_type: settings.payload_type,
            jitter: JitterBuffer::new(format, settings.buffer_packets),
            timing,
            latency_frames: settings.latency_frames,
            cycle_frames: 0,
            counters: counters.clone(),
        };
        (StreamSource { paths, receiver }, counters)
    }

    /// Takes every datagram the service handed over, on every path, into
    /// the jitter buffer.
    fn drain(&mut self) {
        for (path, flow) in self.paths.iter_mut().enumerate() {
            loop {
                match flow.try_receive() {
                    Ok(Some((received, datagram))) => {
                        self.receiver.take(path, received.arrival_ns, datagram)
                    }
                    Ok(None) => break,
                    Err(error) => return self.receiver.counters.lose_service(&error),
                }
            }
        }
    }
}

/// How a source places the frames it plays.
enum Timing {
    /// `latency` behind the media clock.
    MediaClock {
        clock: MediaClock,
        latency_frames: u32,
        position: Position,
    },
    /// By the packets' arrival, on this machine's monotonic clock.
    Arrival(ArrivalPlayout),
}

/// `CLOCK_MONOTONIC` in samples at `rate`, mod 2^32: an arrival playout's
/// clock (it never steps).
fn local_samples(monotonic_ns: u64, rate: u32) -> u32 {
    samples_at(monotonic_ns, rate) as u32
}

impl Receiver {
    /// One datagram that came by `path` at `arrival_ns` (the kernel's
    /// stamp; 0 if none).
    fn take(&mut self, path: usize, arrival_ns: u64, datagram: &[u8]) {
        let Ok(packet) = rtp::parse(datagram) else {
            self.counters.not_rtp.fetch_add(1, Relaxed);
            return;
        };
        let header = packet.header;
        let playable = match self.payload_type {
            Some(described) => header.payload_type == described,
            None => DYNAMIC_PAYLOAD_TYPES.contains(&header.payload_type),
        };
        if !playable {
            self.counters.wrong_payload_type.fetch_add(1, Relaxed);
            return;
        }
        if let Some(merge) = &mut self.merge {
            if merge.accept(path, header.ssrc, header.sequence) != Copy::First {
                return;
            }
        }
        let arrival_ns = match arrival_ns {
            0 => monotonic_ns(),
            stamped => stamped,
        };
        let rate = self.jitter.format().sample_rate;
        let (age_ns, behind_frames) = match &mut self.timing {
            Timing::MediaClock { clock, .. } => {
                let age_ns = arrival_ns.saturating_sub(clock.monotonic_ns_of(
                    header.timestamp,
                    rate,
                    arrival_ns,
                ));
                (age_ns, age_ns * u64::from(rate) / 1_000_000_000)
            }
            Timing::Arrival(playout) => {
                let behind = playout.arrive(header.timestamp, local_samples(arrival_ns, rate));
                (
                    u64::from(behind) * 1_000_000_000 / u64::from(rate),
                    u64::from(behind),
                )
            }
        };
        self.counters.ages.count(age_ns);
        self.count_late(header.timestamp, behind_frames);
        self.jitter.push(&header, packet.payload);
    }

    /// Counts a packet (first frame at `timestamp`, `behind_frames` later
    /// than the playout's reference when it reached the socket) whose
    /// first frame has already played, by where it was held up.
    fn count_late(&self, timestamp: u32, behind_frames: u64) {
        let missed = self
            .jitter
            .play_position()
            .is_some_and(|play| timestamp_delta(timestamp, play) > 0);
        if missed {
            let in_time = self.latency_frames.saturating_sub(self.cycle_frames);
            let held_here = behind_frames <= u64::from(in_time);
            self.counters.late[usize::from(held_here)].fetch_add(1, Relaxed);
        }
    }

    /// Where this cycle plays from and how; `None` while an arrival-timed
    /// stream has not been heard.
    fn play(&mut self, cycle_due_ns: u64, frames: u32) -> Option<CyclePlay> {
        self.cycle_frames = frames;
        let rate = self.jitter.format().sample_rate;
        match &mut self.timing {
            Timing::MediaClock {
                clock,
                latency_frames,
                position,
            } => {
                let ideal = clock
                    .rtp_timestamp_at(cycle_due_ns, rate)
                    .wrapping_sub(*latency_frames);
                let from = position.take(ideal, frames, clock.steps(), &self.counters);
                Some(CyclePlay {
                    from,
                    slip: Slip::None,
                })
            }
            Timing::Arrival(playout) => {
                let play = playout.cycle(local_samples(cycle_due_ns, rate), frames);
                self.counters.publish_playout(&playout.counts());
                play
            }
        }
    }
}

impl Node for StreamSource {
    fn ports(&self) -> Vec<PortSpec> {
        let channels = self.receiver.jitter.format().channels;
        (1..=channels)
            .map(|k| PortSpec::audio_out(format!("out{k}")))
            .collect()
    }

    fn process(&mut self, ctx: &mut ProcessContext<'_>) {
        self.drain();
        let r = &mut self.receiver;
        let frames = ctx.frames() as u32;
        let channels = usize::from(r.jitter.format().channels);
        let Some(play) = r.play(ctx.cycle_due_ns(), frames) else {
            for channel in 0..channels {
                ctx.audio_out(channel).fill(0.0);
            }
            return;
        };
        let mut missing = 0;
        for channel in 0..channels {
            missing = read_slipped(&r.jitter, play, channel, ctx.audio_out(channel));
        }
        r.jitter.advance(play.from, play.consumed(frames));
        r.counters.silent_frames.fetch_add(missing as u64, Relaxed);
        r.counters.publish(&r.jitter.counters(), r.merge.as_ref());
    }
}

/// Reads channel `channel` of the cycle `play` into `out` (its frames),
/// dropping or repeating a frame as the slip says; how many frames were
/// missing.
fn read_slipped(jitter: &JitterBuffer, play: CyclePlay, channel: usize, out: &mut [f32]) -> usize {
    match play.slip {
        Slip::None => jitter.read(play.from, channel, out),
        Slip::Drop => jitter.read(play.from.wrapping_add(1), channel, out),
        Slip::Repeat => {
            let missing = jitter.read(play.from, channel, &mut out[1..]);
            out[0] = out[1];
            missing
        }
    }
}

/// Sends the audio on its inputs `in1`…`inN` as a stream.
pub struct StreamSink {
    /// One flow per path: every packet goes on each (ST 2022-7).
    paths: Vec<Flow>,
    packetizer: Packetizer,
    clock: MediaClock,
    position: Position,
    counters: Arc<StreamCounters>,
}

impl StreamSink {
    /// A sink sending `format` with RTP payload type `payload_type` and
    /// synchronisation source `ssrc` on `paths` (flows of the network
    /// service whose peer is the stream's destination on each path).
    pub fn new(
        paths: Vec<Flow>,
        format: StreamFormat,
        payload_type: u8,
        ssrc: u32,
        clock: MediaClock,
    ) -> (StreamSink, Arc<StreamCounters>) {
        let counters = Arc::new(StreamCounters::default());
        let sink = StreamSink {
            paths,
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
            paths,
            packetizer,
            counters,
            ..
        } = self;
        packetizer.push(
            at,
            frames,
            |channel, frame| inputs[channel][frame],
            |datagram| send(paths, datagram, counters),
        );
    }
}

/// Gives one datagram to the service on every path; a full channel (the
/// service is behind) loses it there, counted.
fn send(paths: &mut [Flow], datagram: &[u8], counters: &StreamCounters) {
    let meta = ToSend {
        origin_ns: 0,
        queued_ns: monotonic_ns(),
        to: None,
    };
    let mut taken = false;
    for flow in paths {
        match flow.try_send(datagram, meta) {
            Ok(()) => taken = true,
            Err(ChannelError::Full) => {
                counters.send_full.fetch_add(1, Relaxed);
            }
            Err(error) => counters.lose_service(&error),
        }
    }
    if taken {
        counters.sent.fetch_add(1, Relaxed);
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

    /// A receiver played by arrival with 4 ms of latency, 1 ms packets and
    /// cycles, 0.1 ms of transit.
    struct Played {
        receiver: Receiver,
    }

    impl Played {
        const PACKET: u32 = 48;
        const BASE: u32 = 10_000;

        fn new() -> Played {
            let format = StreamFormat::new(tessera_aes67::Encoding::L16, 48_000, 1, 48).unwrap();
            let latency_frames = 4 * Self::PACKET;
            let playout = ArrivalPlayout::new(PlayoutConfig {
                latency_frames,
                max_slip_ppm: 0,
                window_frames: 48_000,
                ring_frames: 64 * Self::PACKET,
            });
            Played {
                receiver: Receiver {
                    merge: None,
                    payload_type: None,
                    jitter: JitterBuffer::new(format, 64),
                    timing: Timing::Arrival(playout),
                    latency_frames,
                    cycle_frames: 0,
                    counters: Arc::new(StreamCounters::default()),
                },
            }
        }

        /// Packet `n` taken now, having reached the socket at `arrival_ns`.
        fn take(&mut self, n: u32, arrival_ns: u64) {
            let mut datagram = [0u8; 12 + 96];
            rtp::RtpHeader {
                marker: false,
                payload_type: 96,
                sequence: n as u16,
                timestamp: Self::BASE + n * Self::PACKET,
                ssrc: 1,
            }
            .write(&mut datagram)
            .unwrap();
            self.receiver.take(0, arrival_ns, &datagram);
        }

        /// The cycle due at `n` ms.
        fn cycle(&mut self, n: u64) {
            let r = &mut self.receiver;
            if let Some(play) = r.play(n * 1_000_000, Self::PACKET) {
                r.jitter.advance(play.from, play.consumed(Self::PACKET));
            }
        }

        /// Packet `n`'s arrival when its transit is the usual 0.1 ms.
        fn on_time(n: u32) -> u64 {
            u64::from(n) * 1_000_000 + 100_000
        }
    }

    #[test]
    fn a_late_packet_is_told_apart_by_when_it_reached_the_socket() {
        let mut played = Played::new();
        for n in 0..3000u32 {
            match n {
                // Reached the socket 20 ms late: the sender's or the wire's.
                2000 => {}
                2020 => {
                    played.take(2000, Played::on_time(2020));
                    played.take(2020, Played::on_time(2020));
                }
                // Reached it in time and sat 20 ms in this host.
                2500 => {}
                2520 => {
                    played.take(2500, Played::on_time(2500));
                    played.take(2520, Played::on_time(2520));
                }
                _ => played.take(n, Played::on_time(n)),
            }
            played.cycle(u64::from(n));
        }
        let counts = played.receiver.counters.snapshot();
        assert_eq!(
            (counts.late_arrivals, counts.late_in_host),
            (1, 1),
            "{counts:?}"
        );
        assert_eq!(played.receiver.jitter.counters().late, 2);
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
