//! A video player as a client of the render service or its baseline (seed
//! 003 §5): raw CIF frames at a frame rate, each one action sent at its
//! release with the next release as its deadline; optionally probing first
//! and agreeing an SLA for its rate; then the end-to-end service time of
//! every frame, t_fb − t_req, and its misses.
//!
//! A frame that finds no free slot is not sent and counts as a miss, as a
//! frame shown late does. Players started together wait for a common
//! `CLOCK_MONOTONIC` instant so that their frames arrive nearly together
//! (the seed's stress). It only plays and measures; it never chooses where
//! it runs.

use crate::video::{i420_to_rgb, write_frame, CIF_HEIGHT, CIF_WIDTH};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tessera_policy::sla::{KindRate, Offer, Terms};
use tessera_services::render::client::{Action, Display, DisplayError, Submitted};
use tessera_services::render::wire::{Done, ServerKind};
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns};

/// Distinct frames a player cycles through.
const DISTINCT_FRAMES: usize = 30;
/// How long a player waits for its last frames after its last release.
const DRAIN: Duration = Duration::from_secs(5);

/// One player.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlayerSpec {
    pub name: String,
    pub width: usize,
    pub height: usize,
    pub fps: f64,
    pub frames: usize,
    /// Rendering work per request (the seed's expensive requests).
    pub spin_ns: u32,
    /// Requests per frame.
    pub bands: u16,
    /// Frames in flight at most (the pool's slots).
    pub slots: usize,
    /// Probe frames before asking for terms; 0: stay best-effort.
    pub probes: usize,
    /// Outstanding frames the terms ask for.
    pub max_outstanding: u32,
    /// Play from this `CLOCK_MONOTONIC` instant (ns); `None`: at once.
    pub start_at_ns: Option<u64>,
}

impl PlayerSpec {
    /// A CIF player at `fps` of `frames` frames, cheap requests, best-effort.
    pub fn cif(name: &str, fps: f64, frames: usize) -> PlayerSpec {
        PlayerSpec {
            name: name.into(),
            width: CIF_WIDTH,
            height: CIF_HEIGHT,
            fps,
            frames,
            spin_ns: 0,
            bands: 1,
            slots: 3,
            probes: 0,
            max_outstanding: 1,
            start_at_ns: None,
        }
    }

    pub fn period_ns(&self) -> u64 {
        (1e9 / self.fps) as u64
    }

    /// Checks the numbers; the error names the value and the fix.
    pub fn check(&self) -> Result<(), String> {
        if !(self.fps > 0.0 && self.fps <= 1000.0) {
            return Err(format!(
                "{}: {} fps (fix: give (0, 1000])",
                self.name, self.fps
            ));
        }
        if self.frames == 0 {
            return Err(format!(
                "{}: no frames to play (fix: give --frames 1 or more)",
                self.name
            ));
        }
        if self.max_outstanding == 0 {
            return Err(format!(
                "{}: 0 outstanding frames (fix: give 1 or more)",
                self.name
            ));
        }
        Ok(())
    }
}

/// Service times in µs.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Times {
    pub min_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl Times {
    pub fn of(samples_ns: &[u64]) -> Times {
        if samples_ns.is_empty() {
            return Times::default();
        }
        let mut sorted = samples_ns.to_vec();
        sorted.sort_unstable();
        let at = |q: f64| {
            sorted[((q * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)] as f64
                / 1e3
        };
        Times {
            min_us: at(0.0),
            mean_us: sorted.iter().sum::<u64>() as f64 / sorted.len() as f64 / 1e3,
            p50_us: at(0.5),
            p99_us: at(0.99),
            max_us: at(1.0),
        }
    }
}

/// What a player did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlayerReport {
    pub name: String,
    pub server: ServerKind,
    pub fps: f64,
    /// The SLA it holds, if it asked and got one.
    pub offer: Option<Offer>,
    /// How its rendering task runs, or why it has no SLA.
    pub sla_note: String,
    pub frames: usize,
    /// Frames shown (reported back).
    pub shown: usize,
    /// Shown after their deadline.
    pub late: usize,
    /// Not sent: every slot was in flight.
    pub not_sent: usize,
    /// Sent but never reported back within the drain.
    pub lost: usize,
    /// late + not sent + lost.
    pub misses: usize,
    pub times: Times,
    /// t_fb − t_req of every shown frame, in the order shown (ns).
    pub service_ns: Vec<u64>,
    /// t_req of every shown frame, beside `service_ns` (`CLOCK_MONOTONIC` ns).
    #[serde(default)]
    pub sent_ns: Vec<u64>,
    /// When the player started playing (`CLOCK_MONOTONIC` ns): its
    /// `start_at_ns`, or later if probing and agreeing took longer.
    #[serde(default)]
    pub started_ns: u64,
    /// CPU time the server spent per frame, mean (µs).
    pub cpu_mean_us: f64,
}

/// Plays `spec` on `display`.
pub fn play(mut display: Display, spec: &PlayerSpec) -> Result<PlayerReport, DisplayError> {
    spec.check().map_err(DisplayError::Refused)?;
    let frames = frames(spec.width, spec.height);
    let (offer, sla_note) = negotiate(&mut display, spec, &frames[0])?;
    let mut run = Run {
        service_ns: Vec::with_capacity(spec.frames),
        sent_ns: Vec::with_capacity(spec.frames),
        cpu_ns: 0,
        late: 0,
    };
    let start = spec
        .start_at_ns
        .unwrap_or_else(monotonic_ns)
        .max(monotonic_ns());
    let period = spec.period_ns();
    let mut not_sent = 0;
    for i in 0..spec.frames {
        let release = start + i as u64 * period;
        sleep_until_monotonic_ns(release);
        run.collect(&mut display)?;
        let action = Action {
            kind: 0,
            deadline_ns: release + period,
            probe: false,
            spin_ns: spec.spin_ns,
            bands: spec.bands,
        };
        if display.submit(&action, &frames[i % frames.len()])? == Submitted::NoSlot {
            not_sent += 1;
        }
    }
    let give_up = monotonic_ns() + DRAIN.as_nanos() as u64;
    while display.in_flight() > 0 && monotonic_ns() < give_up {
        if let Some(done) = display.wait_done(Duration::from_millis(100))? {
            run.record(done);
        }
    }
    let lost = display.in_flight();
    let shown = run.service_ns.len();
    Ok(PlayerReport {
        name: spec.name.clone(),
        server: display.server(),
        fps: spec.fps,
        offer,
        sla_note,
        frames: spec.frames,
        shown,
        late: run.late,
        not_sent,
        lost,
        misses: run.late + not_sent + lost,
        times: Times::of(&run.service_ns),
        cpu_mean_us: run.cpu_ns as f64 / shown.max(1) as f64 / 1e3,
        service_ns: run.service_ns,
        sent_ns: run.sent_ns,
        started_ns: start,
    })
}

/// What the frames shown so far measured.
struct Run {
    service_ns: Vec<u64>,
    sent_ns: Vec<u64>,
    cpu_ns: u64,
    late: usize,
}

impl Run {
    fn collect(&mut self, display: &mut Display) -> Result<(), DisplayError> {
        while let Some(done) = display.try_done()? {
            self.record(done);
        }
        Ok(())
    }

    fn record(&mut self, done: Done) {
        // A probe's report that comes in after negotiation moved on (its
        // deadline is "none") is not a frame of the video.
        if done.deadline_ns == u64::MAX {
            return;
        }
        self.service_ns.push(done.service_ns());
        self.sent_ns.push(done.sent_ns);
        self.cpu_ns += done.cpu_ns;
        self.late += usize::from(done.late());
    }
}

/// Probes and asks for terms for the player's rate; an offer is accepted.
/// Without probes, or with the baseline, the player stays best-effort.
fn negotiate(
    display: &mut Display,
    spec: &PlayerSpec,
    frame: &[u8],
) -> Result<(Option<Offer>, String), DisplayError> {
    if spec.probes == 0 {
        return Ok((None, "best-effort (no probes asked)".into()));
    }
    if display.server() == ServerKind::Baseline {
        return Ok((None, "the baseline makes no agreements".into()));
    }
    let probe = Action {
        kind: 0,
        deadline_ns: u64::MAX,
        probe: true,
        spin_ns: spec.spin_ns,
        bands: spec.bands,
    };
    for _ in 0..spec.probes {
        // One probe at a time: each waits for the last, so a slot is free.
        display.submit(&probe, frame)?;
        display.wait_done(DRAIN)?;
    }
    let terms = Terms {
        rates: vec![KindRate {
            kind: 0,
            per_second: spec.fps,
        }],
        max_outstanding: spec.max_outstanding,
    };
    let offer = match display.terms(&terms) {
        Ok(offer) => offer,
        Err(DisplayError::Refused(why)) => return Ok((None, format!("best-effort: {why}"))),
        Err(e) => return Err(e),
    };
    match display.accept() {
        Ok(note) => Ok((Some(offer), note)),
        Err(DisplayError::Refused(why)) => Ok((None, format!("best-effort: {why}"))),
        Err(e) => Err(e),
    }
}

/// The distinct RGB frames of the test video.
fn frames(width: usize, height: usize) -> Vec<Vec<u8>> {
    let mut yuv = vec![0u8; crate::video::frame_bytes(width, height)];
    (0..DISTINCT_FRAMES)
        .map(|i| {
            write_frame(i, width, height, &mut yuv);
            let mut rgb = vec![0u8; width * height * 3];
            i420_to_rgb(&yuv, width, height, &mut rgb);
            rgb
        })
        .collect()
}
