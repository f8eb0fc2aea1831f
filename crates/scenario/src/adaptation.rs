//! The `changing-demand` subject of a scenario file (the RAP service's
//! experiment, seed 000 §2.3): a video cell whose demand follows a
//! staircase with short bursts, the music application (what its SLABS
//! plays, the synthesizer), a guarded JACK2 with load clients, the static
//! budgets' `margin`, the monitor's interval and the daemon's
//! `[adaptation]` table; and how a configuration sets the
//! budgets: `"static:peak"`, `"static:mean"`, `"adaptive:mean"` or
//! `"adaptive:peak"` (sized so, and adapted by the daemon or not).
//!
//! Owns that part of parsing and validation, with the line of every
//! refusal, and the demand itself ([`VideoDemand::share_at`]: what the job
//! released at a time needs), so that the runner and the static sizing read
//! one definition. Like the rest of `scenario`, it must never touch the
//! machine.

use super::{
    duration, played, refuse, MusicSubject, PlayKeys, RawSubject, RawSubjectSched, Refusal,
};
use serde::Deserialize;
use std::ops::Range;
use std::time::Duration;
use tessera_policy::rap::RapConfig;
use toml::Spanned;

/// Highest share of a core a static budget may hold (the kernel's and the
/// RAP policy's usual cap).
const MAX_SHARE: f64 = 0.9;
/// The shortest step: the RAP service samples at 100 ms at the finest.
const MIN_STEP: Duration = Duration::from_millis(100);

/// The subject: what runs, and how budgets are sized and adapted.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangingDemand {
    pub video: VideoDemand,
    /// The music application (seed 000 §3) in cells of the daemon: its
    /// synth's cell adapted like the video's; `None`: no music.
    pub music: Option<MusicSubject>,
    /// A guarded jackd with load clients; `None`: no JACK.
    pub jack: Option<JackLoad>,
    /// A static budget is the demand (peak or mean) × (1 + margin).
    pub margin: f64,
    /// The daemon's `monitor_interval_ms`.
    pub monitor_interval: Duration,
    /// The daemon's `[adaptation]` table in the adaptive configurations
    /// (`enabled` is each configuration's).
    pub adaptation: RapConfig,
}

/// The video player's cell: a periodic task at `fps` whose job needs a
/// share of a core that follows `steps`, each lasting `step`, from the end
/// of the warm-up (the first step's share before it, the last one's after
/// the staircase), times `burst.factor` during bursts.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoDemand {
    pub fps: f64,
    pub steps: Vec<f64>,
    pub step: Duration,
    pub burst: Option<Burst>,
}

/// Short bursts: `length` long, at `first`, `first + every`, … (from the
/// end of the warm-up), each job in them needing `factor` × the step's share.
#[derive(Debug, Clone, PartialEq)]
pub struct Burst {
    pub first: Duration,
    pub every: Duration,
    pub length: Duration,
    pub factor: f64,
}

/// Debian's jackd2 on its dummy driver with load clients in a chain, every
/// real-time thread reserved by `tessera guard jackd --fixed fixed_pct`.
#[derive(Debug, Clone, PartialEq)]
pub struct JackLoad {
    pub frames: u32,
    pub rate: u32,
    /// Each client's work, a fraction of the period.
    pub clients: Vec<f64>,
    /// The guard's fixed share for the server and its clients together, %.
    pub fixed_pct: u32,
}

impl JackLoad {
    pub fn period(&self) -> Duration {
        Duration::from_nanos(u64::from(self.frames) * 1_000_000_000 / u64::from(self.rate))
    }
}

/// Which demand static budgets are sized for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizing {
    /// The largest share any job needs (bursts included).
    Peak,
    /// The mean share of the jobs of the run.
    Mean,
}

/// How one configuration sets the budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemandSettings {
    pub sizing: Sizing,
    /// The daemon adapts the budgets (`[adaptation] enabled = true`).
    pub adapt: bool,
}

impl Sizing {
    /// "peak" or "mean".
    pub fn name(self) -> &'static str {
        match self {
            Sizing::Peak => "peak",
            Sizing::Mean => "mean",
        }
    }
}

impl DemandSettings {
    pub fn describe(&self) -> String {
        let sized = format!("sized for the {}", self.sizing.name());
        match self.adapt {
            true => format!("adaptive, starting {sized}"),
            false => format!("static, {sized}"),
        }
    }
}

impl VideoDemand {
    pub fn period(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.fps)
    }

    /// How long the staircase lasts.
    pub fn length(&self) -> Duration {
        self.step * self.steps.len() as u32
    }

    /// The share of a core the job released `t` after the end of the
    /// warm-up needs (`None`: during the warm-up, the first step's).
    pub fn share_at(&self, t: Option<Duration>) -> f64 {
        let Some(t) = t else {
            return self.steps[0];
        };
        let index = (t.as_nanos() / self.step.as_nanos().max(1)) as usize;
        let level = self.steps[index.min(self.steps.len() - 1)];
        match &self.burst {
            Some(b) if b.covers(t) => level * b.factor,
            _ => level,
        }
    }

    /// The largest share any job needs.
    pub fn peak(&self) -> f64 {
        let top = self.steps.iter().copied().fold(0.0, f64::max);
        top * self.burst.as_ref().map_or(1.0, |b| b.factor)
    }

    /// The mean share of the jobs released in the first `span` after the
    /// warm-up.
    pub fn mean(&self, span: Duration) -> f64 {
        let period = self.period();
        let jobs = (span.as_nanos() / period.as_nanos().max(1)).max(1) as u32;
        (0..jobs)
            .map(|k| self.share_at(Some(period * k)))
            .sum::<f64>()
            / f64::from(jobs)
    }

    fn scale(&mut self, factor: f64) {
        self.step = self.step.mul_f64(factor);
        if let Some(b) = &mut self.burst {
            b.first = b.first.mul_f64(factor);
            b.every = b.every.mul_f64(factor);
            b.length = b.length.mul_f64(factor);
        }
    }
}

impl Burst {
    fn covers(&self, t: Duration) -> bool {
        let Some(since_first) = t.checked_sub(self.first) else {
            return false;
        };
        let into = since_first.as_nanos() % self.every.as_nanos().max(1);
        into < self.length.as_nanos()
    }
}

impl ChangingDemand {
    /// Multiplies the staircase's and the bursts' times by `factor`.
    pub fn scale(&mut self, factor: f64) {
        self.video.scale(factor);
    }

    /// The video's share for `sizing` over a measured `span`.
    pub fn video_share(&self, sizing: Sizing, span: Duration) -> f64 {
        match sizing {
            Sizing::Peak => self.video.peak(),
            Sizing::Mean => self.video.mean(span),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVideo {
    fps: Option<Spanned<f64>>,
    steps: Spanned<Vec<f64>>,
    step: Spanned<String>,
    burst: Option<Spanned<RawBurst>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBurst {
    first: Option<Spanned<String>>,
    every: Spanned<String>,
    length: Spanned<String>,
    factor: Spanned<f64>,
}

/// `[subject.music]`: a music subject's keys of its load (the pads held
/// where the music subject holds them).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMusic {
    pads: Option<Spanned<String>>,
    oscillators: Option<Spanned<usize>>,
    work_factor: Option<Spanned<f64>>,
    seed: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJack {
    frames: Option<Spanned<u32>>,
    rate: Option<Spanned<u32>>,
    clients: Spanned<Vec<f64>>,
    fixed: Spanned<u32>,
}

/// The subject's keys; `measured` is the scenario's duration (the staircase
/// must fit in it).
pub(super) fn subject(
    s: &RawSubject,
    table: &Range<usize>,
    measured: Duration,
) -> Result<ChangingDemand, Refusal> {
    let raw_video = s.video.as_ref().ok_or_else(|| {
        (
            table.clone(),
            "a changing-demand subject needs [subject.video] (fps, steps, step, burst)".to_string(),
        )
    })?;
    let video = video(raw_video)?;
    if video.length() > measured {
        return refuse(
            raw_video.get_ref().step.span(),
            format!(
                "the staircase lasts {:?} ({} steps of {:?}) but the run measures {measured:?}: \
                 lengthen `duration` or shorten `step`",
                video.length(),
                video.steps.len(),
                video.step
            ),
        );
    }
    let margin = match &s.margin {
        None => 0.15,
        Some(m) if (0.0..=1.0).contains(m.get_ref()) => *m.get_ref(),
        Some(m) => {
            return refuse(
                m.span(),
                format!(
                    "margin must be 0–1 (a static budget is the demand × (1 + margin)), not {}",
                    m.get_ref()
                ),
            )
        }
    };
    if video.peak() * (1.0 + margin) > MAX_SHARE {
        let span = raw_video.get_ref().steps.span();
        return refuse(
            span,
            format!(
                "the video's peak share {:.3} × (1 + margin {margin}) exceeds {MAX_SHARE} of a \
                 core: lower the steps or the burst factor",
                video.peak()
            ),
        );
    }
    let monitor_interval = match &s.monitor_interval {
        None => Duration::from_secs(1),
        Some(v) => {
            let d = duration(v)?;
            if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&d) {
                return refuse(
                    v.span(),
                    "monitor_interval must be 100ms–60s (the daemon's range)",
                );
            }
            d
        }
    };
    let adaptation = match &s.adaptation {
        None => RapConfig::default(),
        Some(a) => {
            if a.get_ref().enabled {
                return refuse(
                    a.span(),
                    "`enabled` is each configuration's: remove it and write subject = \
                     \"adaptive:mean\" in the configurations that adapt",
                );
            }
            a.get_ref()
                .validate()
                .map_err(|e| (a.span(), format!("[subject.adaptation] {e}")))?;
            a.get_ref().clone()
        }
    };
    Ok(ChangingDemand {
        video,
        music: s.music.as_ref().map(music).transpose()?,
        jack: s.jack.as_ref().map(jack).transpose()?,
        margin,
        monitor_interval,
        adaptation,
    })
}

fn video(raw: &Spanned<RawVideo>) -> Result<VideoDemand, Refusal> {
    let v = raw.get_ref();
    let fps = crate::video::frame_rate(&v.fps)?;
    let steps = v.steps.get_ref().clone();
    if steps.is_empty() || steps.iter().any(|s| !(*s > 0.0 && *s < MAX_SHARE)) {
        return refuse(
            v.steps.span(),
            format!("steps: give one or more shares of a core, each in (0, {MAX_SHARE}), e.g. [0.1, 0.2, 0.1]"),
        );
    }
    let step = duration(&v.step)?;
    if step < MIN_STEP {
        return refuse(v.step.span(), "a step lasts at least 100ms");
    }
    let burst = v.burst.as_ref().map(|b| burst(b, fps)).transpose()?;
    Ok(VideoDemand {
        fps,
        steps,
        step,
        burst,
    })
}

fn burst(raw: &Spanned<RawBurst>, fps: f64) -> Result<Burst, Refusal> {
    let b = raw.get_ref();
    let every = duration(&b.every)?;
    let length = duration(&b.length)?;
    let first = b.first.as_ref().map(duration).transpose()?.unwrap_or(every);
    if length.as_secs_f64() * fps < 1.0 || length >= every {
        return refuse(
            raw.span(),
            "a burst lasts at least one frame and less than `every`",
        );
    }
    let factor = *b.factor.get_ref();
    if !(1.0..=4.0).contains(&factor) {
        return refuse(
            b.factor.span(),
            format!("a burst's factor is 1–4 (× the step's share), not {factor}"),
        );
    }
    Ok(Burst {
        first,
        every,
        length,
        factor,
    })
}

fn music(raw: &Spanned<RawMusic>) -> Result<MusicSubject, Refusal> {
    let m = raw.get_ref();
    played(&PlayKeys {
        pads: &m.pads,
        x: &None,
        y: &None,
        pressure: &None,
        oscillators: &m.oscillators,
        work_factor: &m.work_factor,
        seed: &m.seed,
        table: raw.span(),
    })
}

fn jack(raw: &Spanned<RawJack>) -> Result<JackLoad, Refusal> {
    let j = raw.get_ref();
    let frames = j.frames.as_ref().map_or(256, |f| *f.get_ref());
    if !(16..=4096).contains(&frames) || !frames.is_power_of_two() {
        let span = j.frames.as_ref().map_or(raw.span(), Spanned::span);
        return refuse(span, "frames must be a power of two in 16–4096");
    }
    let rate = j.rate.as_ref().map_or(48_000, |r| *r.get_ref());
    if !(8_000..=192_000).contains(&rate) {
        let span = j.rate.as_ref().map_or(raw.span(), Spanned::span);
        return refuse(span, "rate must be 8000–192000 Hz");
    }
    let clients = j.clients.get_ref().clone();
    if clients.is_empty()
        || clients.len() > 8
        || clients.iter().any(|c| !(*c > 0.0 && *c < 0.5))
        || clients.iter().sum::<f64>() >= 0.8
    {
        return refuse(
            j.clients.span(),
            "clients: one to eight loads, each a fraction of the period in (0, 0.5), adding up \
             to less than 0.8, e.g. [0.05, 0.05]",
        );
    }
    let fixed_pct = *j.fixed.get_ref();
    if !(1..=90).contains(&fixed_pct) {
        return refuse(
            j.fixed.span(),
            "fixed is `tessera guard --fixed`: 1–90 % for the server and its clients together",
        );
    }
    Ok(JackLoad {
        frames,
        rate,
        clients,
        fixed_pct,
    })
}

/// A configuration's `subject` for a changing-demand subject.
pub(super) fn configuration(
    value: Option<&Spanned<RawSubjectSched>>,
    table: &Range<usize>,
) -> Result<DemandSettings, Refusal> {
    const FORMS: &str = "\"static:peak\", \"static:mean\", \"adaptive:mean\" or \"adaptive:peak\"";
    let (text, span) = match value.map(|v| (v.get_ref(), v.span())) {
        Some((RawSubjectSched::All(text), span)) => (text.trim(), span),
        Some((RawSubjectSched::Roles(_), span)) => {
            return refuse(span, format!("give the budgets as one of {FORMS}"))
        }
        None => {
            return refuse(
                table.clone(),
                format!(
                    "a changing-demand configuration says how budgets are set: subject = {FORMS}"
                ),
            )
        }
    };
    let (how, sized) = text.split_once(':').unwrap_or((text, ""));
    let adapt = match how.trim() {
        "static" => false,
        "adaptive" => true,
        _ => return refuse(span, format!("{text:?}: write {FORMS}")),
    };
    let sizing = match sized.trim() {
        "peak" => Sizing::Peak,
        "mean" => Sizing::Mean,
        _ => return refuse(span, format!("{text:?}: write {FORMS}")),
    };
    Ok(DemandSettings { sizing, adapt })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staircase() -> VideoDemand {
        VideoDemand {
            fps: 30.0,
            steps: vec![0.1, 0.2, 0.4],
            step: Duration::from_secs(10),
            burst: Some(Burst {
                first: Duration::from_secs(5),
                every: Duration::from_secs(10),
                length: Duration::from_secs(1),
                factor: 1.5,
            }),
        }
    }

    #[test]
    fn the_share_follows_the_steps_and_the_bursts() {
        let v = staircase();
        let at = |s: f64| v.share_at(Some(Duration::from_secs_f64(s)));
        assert_eq!(v.share_at(None), 0.1, "the warm-up runs the first step");
        assert_eq!(at(0.0), 0.1);
        assert_eq!(at(5.5), 0.1 * 1.5, "a burst");
        assert_eq!(at(6.0), 0.1, "a burst ends after its length");
        assert_eq!(at(12.0), 0.2);
        assert_eq!(at(15.2), 0.2 * 1.5);
        assert_eq!(at(29.0), 0.4);
        assert_eq!(at(99.0), 0.4, "the last step holds after the staircase");
        assert!((v.peak() - 0.6).abs() < 1e-12);
        // 10 s per step, a tenth of each in a burst at 1.5×.
        let mean = v.mean(Duration::from_secs(30));
        assert!((mean - (0.7 / 3.0) * 1.05).abs() < 1e-3, "{mean}");
    }

    #[test]
    fn scaling_shortens_steps_and_bursts() {
        let mut v = staircase();
        v.scale(0.1);
        assert_eq!(v.step, Duration::from_secs(1));
        assert_eq!(v.share_at(Some(Duration::from_millis(550))), 0.1 * 1.5);
        assert_eq!(v.length(), Duration::from_secs(3));
    }
}
