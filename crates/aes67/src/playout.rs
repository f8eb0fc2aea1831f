//! Arrival playout: when to play a stream whose sender keeps a clock of its
//! own (no common PTP), from the packets' arrival times alone. It owns the
//! rule below and its counts; the receiver's clock, the jitter buffer and
//! the audio are the caller's. After `new` it must never allocate: it runs
//! once per packet and once per cycle on the real-time path.
//!
//! Times are in samples of the receiver's own clock (any clock that never
//! steps: the caller converts `CLOCK_MONOTONIC`), mod 2^32 like RTP's.
//!
//! **The rule.** Each packet's *transit* is its arrival time minus its RTP
//! timestamp: the two clocks' offset plus the packet's delay. The fastest
//! transit over the last window (between one and two windows' worth of
//! packets: two buckets of [`PlayoutConfig::window_frames`] each) is the
//! offset plus the path's least delay. A cycle due at `now` plays media
//! time `now − fastest − latency`: every packet is held `latency` longer
//! than the fastest one took. So a packet is heard when its transit
//! exceeds the fastest by at most `latency − cycle` (up to `latency` when
//! the receiver's cycles and the sender's packets happen to be in phase),
//! and jitter within that never moves the audio: it changes transits, not
//! their minimum. A packet later than that is lost (the jitter buffer
//! counts it late); it moves nothing either, since one late packet says
//! nothing of the next.
//!
//! **Drift.** Two clocks differ by some parts per million, so the fastest
//! transit creeps. The played position follows by *slips* of one whole
//! frame — one frame dropped (the sender is faster) or repeated (slower) —
//! at most [`PlayoutConfig::max_slip_ppm`] of the frames played, never by a
//! jump. It is kept within [`SLIP_BAND_FRAMES`] behind the target and never
//! ahead of it, so slips do not chase the noise of the minimum and the
//! position never plays earlier than `latency` allows.
//!
//! **Learning.** Until the window's first bucket is full (the first
//! window after the stream starts, or after it was silent for two), the
//! fastest transit is still being found, and it only ever falls: the
//! position follows the target directly, by forward jumps — the stream's
//! start, not counted as resyncs.
//!
//! **Resyncs** (a jump, counted) happen only when slipping cannot follow:
//! the position is more than `latency` off the target (the sender's clock
//! is further off than `max_slip_ppm` can follow, its path's delay changed
//! by more than the offset, or it restarted: the position jumps onto the
//! target), or the target is a whole cycle or more ahead — the receiver's
//! graph skipped periods after a stall, as its timer's catch-up has a
//! limit, or a fast sender's drift outran the slips: the position skips
//! whole cycles, keeping its phase. A packet whose transit is more than
//! the ring (`ring_frames`) away from the window's fastest, which no
//! buffer position could hold, starts the window again from it; so does a
//! *step*: every packet later than the fastest by more than `latency` for
//! a latency's worth of arrivals (a sender that skipped a cycle and stamps
//! on where it was, as PipeWire's rtp-sink does: every later packet a
//! quantum "slower"). Without it the old fastest held for up to two
//! windows, and each of their packets came late. One late packet, or a
//! burst after a stall, is shorter than that and moves nothing.
//!
//! **Limits.** A sender slower than the receiver lags the window's minimum
//! by up to two windows of drift (at 50 ppm and 1 s windows, 100 µs): that
//! much less jitter is absorbed. A drift beyond `max_slip_ppm` resyncs
//! every time it has accumulated a cycle (a fast sender) or `latency` (a
//! slow one). A slip is a whole frame: a tiny discontinuity, at most
//! `max_slip_ppm` of the time.

use serde::{Deserialize, Serialize};

use crate::rtp::timestamp_delta;

/// How far behind its target the position may sit before a frame is
/// dropped: the minimum's noise between windows, well under a packet.
pub const SLIP_BAND_FRAMES: i32 = 4;
/// The slip rate a receiver allows unless told otherwise: twice the
/// 100 ppm that separate quartz clocks may be apart.
pub const DEFAULT_MAX_SLIP_PPM: u32 = 200;
/// A slip is paid for with this many credits; every frame played earns
/// `max_slip_ppm`.
const SLIP_COST: u64 = 1_000_000;

/// What an arrival playout is set to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlayoutConfig {
    /// How much longer than the fastest packet every packet is held, frames.
    pub latency_frames: u32,
    /// Most slips per million frames played (0: never slip).
    pub max_slip_ppm: u32,
    /// The length of each of the window's two buckets, frames.
    pub window_frames: u32,
    /// What the jitter buffer holds, frames: a transit further than this
    /// from the window's fastest restarts the window.
    pub ring_frames: u32,
}

/// How the cycle's frames are taken from the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slip {
    /// `frames` frames from `from`.
    None,
    /// The frame at `from` is dropped: `frames` frames from `from + 1`.
    Drop,
    /// `frames − 1` frames from `from`, the first of them played twice.
    Repeat,
}

/// One cycle's part of the stream: from which media time, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CyclePlay {
    /// The first frame not played yet.
    pub from: u32,
    pub slip: Slip,
}

impl CyclePlay {
    /// How many of the stream's frames the cycle consumes.
    pub fn consumed(&self, frames: u32) -> u32 {
        match self.slip {
            Slip::None => frames,
            Slip::Drop => frames + 1,
            Slip::Repeat => frames - 1,
        }
    }
}

/// What the playout counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlayoutCounts {
    /// Jumps of the position onto its target.
    pub resyncs: u64,
    /// Frames dropped and repeated by slips.
    pub frames_dropped: u64,
    pub frames_repeated: u64,
}

/// The window's fastest transits: the current bucket's and the previous
/// one's.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    current: Option<u32>,
    previous: Option<u32>,
    /// When the current bucket began (receiver's samples).
    started: Option<u32>,
}

/// The later of two transits (wrap-aware).
fn earlier(a: u32, b: u32) -> u32 {
    if timestamp_delta(a, b) < 0 {
        b
    } else {
        a
    }
}

impl Window {
    /// Whether the first bucket is still filling: no bucket is complete.
    fn learning(&self) -> bool {
        self.previous.is_none()
    }

    fn fastest(&self) -> Option<u32> {
        match (self.current, self.previous) {
            (Some(a), Some(b)) => Some(earlier(a, b)),
            (a, b) => a.or(b),
        }
    }

    /// Moves to a new bucket when the current one is `length` old; both
    /// expire after two.
    fn roll(&mut self, now: u32, length: u32) {
        let Some(started) = self.started else {
            return;
        };
        // A cycle may be due before the packet it drained arrived.
        let Ok(age) = u32::try_from(timestamp_delta(started, now)) else {
            return;
        };
        if age >= 2 * length {
            *self = Window::default();
        } else if age >= length {
            self.previous = self.current.take();
            self.started = Some(started.wrapping_add(length));
        }
    }

    fn record(&mut self, transit: u32, now: u32) {
        self.started.get_or_insert(now);
        self.current = Some(self.current.map_or(transit, |c| earlier(c, transit)));
    }
}

/// The arrival playout of one stream; see the module doc for the rule.
#[derive(Debug, Clone)]
pub struct ArrivalPlayout {
    config: PlayoutConfig,
    window: Window,
    /// Since when (arrival) every packet came later than the fastest by
    /// more than the latency: a step, once it lasts a latency.
    late_since: Option<u32>,
    /// The first frame not played yet (None before the first cycle heard).
    next: Option<u32>,
    /// Slips earned and not spent, in millionths of a slip.
    credit: u64,
    counts: PlayoutCounts,
}

impl ArrivalPlayout {
    pub fn new(config: PlayoutConfig) -> ArrivalPlayout {
        ArrivalPlayout {
            config,
            window: Window::default(),
            late_since: None,
            next: None,
            credit: 0,
            counts: PlayoutCounts::default(),
        }
    }

    /// A packet stamped `timestamp` arrived at `arrival` (receiver's
    /// samples). Returns how much later it came than the window's fastest,
    /// frames (0 for the fastest): the jitter the latency absorbs.
    pub fn arrive(&mut self, timestamp: u32, arrival: u32) -> u32 {
        self.window.roll(arrival, self.config.window_frames);
        let transit = arrival.wrapping_sub(timestamp);
        if let Some(fastest) = self.window.fastest() {
            let off = timestamp_delta(fastest, transit).unsigned_abs();
            if off > self.config.ring_frames || self.stepped(off, arrival) {
                // No position could hold both: the sender restarted, or
                // its packets have all come a step later for a while.
                self.window = Window::default();
                self.late_since = None;
            }
        }
        self.window.record(transit, arrival);
        let fastest = self.window.fastest().unwrap_or(transit);
        timestamp_delta(fastest, transit).max(0) as u32
    }

    /// Whether a packet `off` frames from the fastest, arriving at
    /// `arrival`, ends a run of packets all later than the latency allows
    /// that has lasted a latency.
    fn stepped(&mut self, off: u32, arrival: u32) -> bool {
        if off <= self.config.latency_frames {
            self.late_since = None;
            return false;
        }
        let since = *self.late_since.get_or_insert(arrival);
        timestamp_delta(since, arrival) >= self.config.latency_frames as i32
    }

    /// The cycle of `frames` due at `now` (receiver's samples): where it
    /// plays from and whether it slips; None before any packet was heard.
    /// Counts resyncs and slips.
    pub fn cycle(&mut self, now: u32, frames: u32) -> Option<CyclePlay> {
        self.window.roll(now, self.config.window_frames);
        self.credit =
            (self.credit + u64::from(frames) * u64::from(self.config.max_slip_ppm)).min(SLIP_COST);
        let target = self.window.fastest().map(|fastest| {
            now.wrapping_sub(fastest)
                .wrapping_sub(self.config.latency_frames)
        });
        let play = match (self.next, target) {
            (None, None) => return None,
            (None, Some(target)) => CyclePlay {
                from: target,
                slip: Slip::None,
            },
            // Not heard for a window: keep going where it was.
            (Some(next), None) => CyclePlay {
                from: next,
                slip: Slip::None,
            },
            (Some(next), Some(target)) => self.follow(next, target, frames),
        };
        self.next = Some(play.from.wrapping_add(play.consumed(frames)));
        Some(play)
    }

    /// From `next`, towards `target`: a slip if due and paid for, a jump
    /// if beyond the latency.
    fn follow(&mut self, next: u32, target: u32, frames: u32) -> CyclePlay {
        let error = timestamp_delta(next, target);
        let beyond = error.unsigned_abs() > self.config.latency_frames;
        if beyond || self.window.learning() {
            self.counts.resyncs += u64::from(beyond);
            return CyclePlay {
                from: target,
                slip: Slip::None,
            };
        }
        if frames > 0 && error >= frames as i32 {
            self.counts.resyncs += 1;
            let skipped = error - error % frames as i32;
            return CyclePlay {
                from: next.wrapping_add_signed(skipped),
                slip: Slip::None,
            };
        }
        let slip = match error {
            e if e > SLIP_BAND_FRAMES => Slip::Drop,
            e if e < 0 && frames > 1 => Slip::Repeat,
            _ => Slip::None,
        };
        if slip == Slip::None || self.credit < SLIP_COST {
            return CyclePlay {
                from: next,
                slip: Slip::None,
            };
        }
        self.credit -= SLIP_COST;
        match slip {
            Slip::Drop => self.counts.frames_dropped += 1,
            _ => self.counts.frames_repeated += 1,
        }
        CyclePlay { from: next, slip }
    }

    pub fn counts(&self) -> PlayoutCounts {
        self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FRAMES: u32 = 48;
    /// Cycles after which the first window is learnt (a second, and the
    /// first packet's delay).
    const LEARNT: u64 = 1010;

    fn config() -> PlayoutConfig {
        PlayoutConfig {
            latency_frames: 192,
            max_slip_ppm: 200,
            window_frames: 48_000,
            ring_frames: 48 * 32,
        }
    }

    /// A sender whose clock runs `ppm` fast (negative: slow) against the
    /// receiver's, sending a 48-frame packet each of its milliseconds with
    /// a delay of `delay(n)` receiver frames; the receiver cycles every 48
    /// of its frames from `start`. Returns the playout after `seconds`,
    /// and whether every packet's frames were played while held: the
    /// lateness of each packet behind the frame the receiver needed first.
    struct Run {
        playout: ArrivalPlayout,
        /// Packets that came after their first frame was played.
        late: u64,
        /// Frames played that no packet had brought yet.
        unheld: u64,
        /// Played positions go up by whole cycles and slips only.
        jumps: u64,
    }

    fn run(
        config: PlayoutConfig,
        ppm: f64,
        seconds: u32,
        start: u32,
        delay: impl Fn(u64) -> f64,
    ) -> Run {
        let mut playout = ArrivalPlayout::new(config);
        let ratio = 1.0 + ppm * 1e-6;
        let sender_start = 3_000_000_000u32;
        let (mut late, mut unheld, mut jumps) = (0, 0, 0);
        // Every packet's arrival (receiver's frames since start), in the
        // order they come.
        let sent = (f64::from(seconds) * 1000.0 * ratio) as u64 + 20;
        let mut arrivals: Vec<(f64, u64)> = (0..sent)
            .map(|n| (n as f64 * 48.0 / ratio + delay(n), n))
            .collect();
        arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut next_arrival = 0;
        // Newest frame heard (exclusive), as media time.
        let mut heard_to: Option<u32> = None;
        let mut expected_next: Option<u32> = None;
        let cycles = u64::from(seconds) * 1000;
        for c in 0..cycles {
            let now_f = (c * 48) as f64;
            while arrivals[next_arrival].0 <= now_f {
                let (at, n) = arrivals[next_arrival];
                let ts = sender_start.wrapping_add((n * 48) as u32);
                playout.arrive(ts, start.wrapping_add(at as u32));
                if let Some(next) = expected_next {
                    // Its first frame was due before it came.
                    if timestamp_delta(ts, next) > 0 {
                        late += 1;
                    }
                }
                let end = ts.wrapping_add(48);
                if heard_to.is_none_or(|h| timestamp_delta(h, end) > 0) {
                    heard_to = Some(end);
                }
                next_arrival += 1;
            }
            let now = start.wrapping_add(c as u32 * 48);
            let Some(play) = playout.cycle(now, FRAMES) else {
                continue;
            };
            // The first window is learnt by jumps.
            if let Some(next) = expected_next.filter(|_| c > LEARNT) {
                if play.from != next {
                    jumps += 1;
                }
            }
            let end = play.from.wrapping_add(play.consumed(FRAMES));
            if let Some(heard) = heard_to {
                unheld += timestamp_delta(heard, end).max(0) as u64;
            }
            expected_next = Some(end);
        }
        Run {
            playout,
            late,
            unheld,
            jumps,
        }
    }

    /// A deterministic pseudo-random delay in [0, 1): n hashed.
    fn jitter(n: u64) -> f64 {
        let x = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 11;
        x as f64 / (1u64 << 53) as f64
    }

    #[test]
    fn jitter_within_the_latency_never_moves_the_audio() {
        // 1 ms of random send jitter (48 frames), latency 4 ms.
        let r = run(config(), 0.0, 20, 17, |n| 100.0 + 48.0 * jitter(n));
        let c = r.playout.counts();
        assert_eq!((c.resyncs, r.jumps, r.late, r.unheld), (0, 0, 0, 0));
        assert_eq!((c.frames_dropped, c.frames_repeated), (0, 0));
    }

    #[test]
    fn drift_is_followed_by_slips_at_its_rate() {
        for ppm in [50.0, -50.0] {
            let r = run(config(), ppm, 60, u32::MAX - 1000, |n| {
                100.0 + 48.0 * jitter(n)
            });
            let c = r.playout.counts();
            assert_eq!(
                (c.resyncs, r.jumps, r.late, r.unheld),
                (0, 0, 0, 0),
                "{ppm}"
            );
            // 50 ppm of 60 s at 48 kHz: 144 frames, give or take the band.
            let (slips, other) = match ppm > 0.0 {
                true => (c.frames_dropped, c.frames_repeated),
                false => (c.frames_repeated, c.frames_dropped),
            };
            assert!((135..=150).contains(&slips), "{ppm}: {c:?}");
            assert!(other <= 2, "{ppm}: {c:?}");
        }
    }

    #[test]
    fn drift_beyond_the_slip_rate_resyncs() {
        let slow = PlayoutConfig {
            max_slip_ppm: 10,
            ..config()
        };
        let r = run(slow, 100.0, 120, 0, |_| 100.0);
        let c = r.playout.counts();
        // 90 ppm not followed: 4.3 frames a second, a cycle skipped every
        // 48 of them.
        assert_eq!((c.resyncs, r.jumps, r.late), (10, 10, 0), "{c:?}");
        assert!(c.frames_dropped <= 58, "{c:?}");
    }

    #[test]
    fn periods_the_graph_skipped_are_skipped_by_whole_cycles() {
        let mut p = ArrivalPlayout::new(config());
        let mut now = 0;
        for c in 0..1100u32 {
            p.arrive(c * 48, c * 48 + 100);
            now = c * 48 + 48;
            p.cycle(now, 48).unwrap();
        }
        let next = now.wrapping_sub(100 + 192).wrapping_add(48);
        // Two periods skipped: the next cycle is due three later.
        let play = p.cycle(now + 3 * 48, 48).unwrap();
        assert_eq!(
            play,
            CyclePlay {
                from: next + 96,
                slip: Slip::None
            }
        );
        assert_eq!(p.counts().resyncs, 1);
        assert_eq!(p.counts().frames_dropped, 0);
    }

    #[test]
    fn a_late_packet_is_lost_not_resynced_on() {
        // Every 500th packet 8 ms late: past the 4 ms latency.
        let r = run(config(), 0.0, 10, 0, |n| {
            if n % 500 == 250 {
                484.0
            } else {
                100.0
            }
        });
        assert_eq!(r.playout.counts().resyncs, 0);
        assert_eq!(r.jumps, 0);
        assert_eq!(r.late, 20);
    }

    #[test]
    fn a_step_in_the_transit_is_followed_within_a_latency() {
        // From the 3rd second every packet comes 12 ms (3 latencies)
        // later: a sender that skipped and stamps on where it was.
        let r = run(config(), 0.0, 10, 0, |n| match n < 3000 {
            true => 100.0,
            false => 100.0 + 576.0,
        });
        // Late: the first latency's worth after the step, not two
        // windows of packets.
        assert!(r.late <= 16, "late {}", r.late);
        assert_eq!(r.playout.counts().resyncs, 1, "{:?}", r.playout.counts());
    }

    #[test]
    fn a_restarted_sender_is_a_resync() {
        let mut p = ArrivalPlayout::new(config());
        for c in 0..100u32 {
            p.arrive(c * 48, c * 48 + 100);
            p.cycle(c * 48 + 48, 48).unwrap();
        }
        // New timestamps, far from the old: played from the new at once.
        for c in 100..200u32 {
            let stamp = (1 << 30) + c * 48;
            p.arrive(stamp, c * 48 + 100);
            let play = p.cycle(c * 48 + 48, 48).unwrap();
            assert_eq!(play.from, stamp.wrapping_sub(52 + 192), "{c}");
        }
        assert_eq!(p.counts().resyncs, 1);
    }

    #[test]
    fn the_first_window_is_learnt_by_jumps_not_slips_or_resyncs() {
        // The first packet came 40 frames later than all the others.
        let r = run(config(), 0.0, 5, 0, |n| if n == 0 { 140.0 } else { 100.0 });
        let c = r.playout.counts();
        assert_eq!(c, PlayoutCounts::default());
        assert_eq!((r.jumps, r.late, r.unheld), (0, 0, 0));
    }

    #[test]
    fn nothing_is_played_before_a_packet_and_silence_keeps_the_position() {
        let mut p = ArrivalPlayout::new(config());
        assert_eq!(p.cycle(0, 48), None);
        p.arrive(1000, 50);
        let first = p.cycle(96, 48).unwrap();
        assert_eq!(first.from, 1000 + 96 - 50 - 192);
        // Three windows without a packet: the position goes on.
        let later = 96 + 48 * 3000;
        let mut at = first.from.wrapping_add(48);
        for now in (144..later).step_by(48) {
            let play = p.cycle(now, 48).unwrap();
            assert_eq!(
                play,
                CyclePlay {
                    from: at,
                    slip: Slip::None
                }
            );
            at = at.wrapping_add(48);
        }
        assert_eq!(p.counts(), PlayoutCounts::default());
    }

    proptest! {
        #[test]
        fn slips_never_exceed_their_rate(
            ppm in -300.0f64..300.0,
            max_slip_ppm in 0u32..400,
            start in any::<u32>(),
        ) {
            let cfg = PlayoutConfig { max_slip_ppm, ..config() };
            let r = run(cfg, ppm, 5, start, |n| 100.0 + 48.0 * jitter(n));
            let c = r.playout.counts();
            let played = 5 * 48_000u64;
            let allowed = played * u64::from(max_slip_ppm) / 1_000_000 + 1;
            prop_assert!(c.frames_dropped + c.frames_repeated <= allowed, "{:?}", c);
            // Only a resync moves the position other than by its cycles and slips.
            prop_assert_eq!(r.jumps, c.resyncs);
        }
    }
}
