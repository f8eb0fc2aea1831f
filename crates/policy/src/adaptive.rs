//! Adaptive budgets: the feedback controller of one reserved thread, after
//! AQuoSA's in JACK (seed 001, Cucinotta's thesis §3.4.4–3.4.5), kept per
//! thread instead of per server.
//!
//! It owns the arithmetic that turns measured CPU time into the budget a
//! thread should ask for; it must never measure, sleep or call the broker:
//! the caller feeds it samples ([`Adaptive::observe`]) and events
//! ([`Adaptive::on_join`], [`Adaptive::on_xrun`]), asks it what it wants
//! ([`Adaptive::wanted`]), goes through admission, and tells it what was
//! granted ([`Adaptive::granted`]).
//!
//! The method:
//!
//! - **Period fragments.** Budgets are enforced at the kernel's granularity,
//!   so a reservation period shorter than `min_enforceable_period_ns` is not
//!   worth having. The reservation period is P = audio period × f, with f the
//!   smallest integer ≥ 1 such that P ≥ `min_enforceable_period_ns` (the
//!   thesis: "if P·f < 1333 then f = f + 1", so 64 frames at 96 kHz run in
//!   1333 µs reservations of two audio periods). Budgets scale by f. A change
//!   of audio period (buffer size) recomputes f, keeps the bandwidth of the
//!   current budget at the new period, and flushes the predictor.
//! - **Samples and predictor.** One sample is the CPU time used per audio
//!   period over an observation interval (cpu time / periods). The predictor
//!   estimates the next period's usage from the last `window` samples: their
//!   maximum (the default: the conservative choice for audio), mean, or a
//!   nearest-rank percentile.
//! - **Increment and clamp.** Q = prediction × f × (100 + I) / 100, clamped to
//!   [m, M] with m = `min_budget_pct` of P (the thesis's m = P/100 · 5) and
//!   M = `max_budget_pct` of P; never below the kernel's 1024 ns. The
//!   deadline and the period are P.
//! - **Bumps.** When a client joins or an xrun happens the predictor no
//!   longer knows the load: its queue is flushed and the budget raised by a
//!   percentage of the current one — 10 % when it sits at the minimum, 20 %
//!   otherwise (§3.4.5; both configurable, for joins and xruns apart). The
//!   bumped budget stands as a floor until `hold_samples` new samples came; the
//!   initial budget is held the same way, a start being the first join.
//!
//! What admission grants is recorded ([`Adaptive::granted`]) and reported:
//! a degraded grant is counted, and the next [`Adaptive::wanted`] still asks
//! for what the load needs, since capacity may have been freed meanwhile.

use crate::bandwidth::Bandwidth;
use crate::cell::{Budget, RequestError, MIN_RUNTIME_NS};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// How the next period's usage is estimated from the window of samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PredictorKind {
    /// The largest sample: no under-estimate of anything seen recently.
    Max,
    /// The mean, rounded up.
    Mean,
    /// The nearest-rank percentile (0–100) of the window.
    Percentile(u8),
}

/// The predictor and how many samples it remembers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredictorConfig {
    pub kind: PredictorKind,
    pub window: usize,
}

impl Default for PredictorConfig {
    fn default() -> PredictorConfig {
        PredictorConfig {
            kind: PredictorKind::Max,
            window: 16,
        }
    }
}

impl PredictorConfig {
    /// The estimate of the next sample; `None` without samples.
    pub fn predict(&self, samples: &VecDeque<u64>) -> Option<u64> {
        if samples.is_empty() {
            return None;
        }
        Some(match self.kind {
            PredictorKind::Max => samples.iter().copied().max().unwrap_or(0),
            PredictorKind::Mean => {
                let sum: u128 = samples.iter().map(|&s| s as u128).sum();
                sum.div_ceil(samples.len() as u128) as u64
            }
            PredictorKind::Percentile(p) => {
                let mut sorted: Vec<u64> = samples.iter().copied().collect();
                sorted.sort_unstable();
                let rank = (p.min(100) as usize * sorted.len()).div_ceil(100);
                sorted[rank.saturating_sub(1)]
            }
        })
    }
}

/// The controller's parameters; every percentage is of the current budget
/// (bumps, increment) or of the reservation period (min, max, initial).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdaptiveConfig {
    /// AQuoSA's `-I`: headroom over the prediction, 0–100 %.
    pub increment_pct: u32,
    /// The smallest budget, % of the reservation period (the thesis's 5).
    pub min_budget_pct: u32,
    /// The largest budget, % of the reservation period.
    pub max_budget_pct: u32,
    /// The budget before any sample, % of the reservation period.
    pub initial_budget_pct: u32,
    pub predictor: PredictorConfig,
    /// Raise on a join, % of the current budget, when it is above the minimum.
    pub join_bump_pct: u32,
    /// Raise on a join when the budget sits at the minimum.
    pub join_bump_at_min_pct: u32,
    /// Raise on an xrun, % of the current budget, above the minimum.
    pub xrun_bump_pct: u32,
    /// Raise on an xrun when the budget sits at the minimum.
    pub xrun_bump_at_min_pct: u32,
    /// Samples after a start, a bump or a period change before the
    /// prediction decides again (at most the window). The thesis held a
    /// bump until its queue of per-cycle samples refilled, a few tens of
    /// milliseconds; samples over a control interval are fewer and longer,
    /// so a few of them stand for that.
    pub hold_samples: usize,
    /// A budget is changed only when what is wanted differs from what is
    /// held by more than this % of it (or the period changed): noise in the
    /// samples must not cost an admission round trip every interval; the
    /// increment covers a shortfall this small.
    pub hysteresis_pct: u32,
    /// The shortest reservation period worth enforcing; shorter audio
    /// periods are grouped into fragments (callers may raise it to the
    /// kernel's tick when HRTICK is off).
    pub min_enforceable_period_ns: u64,
}

impl Default for AdaptiveConfig {
    fn default() -> AdaptiveConfig {
        AdaptiveConfig {
            increment_pct: 20,
            min_budget_pct: 5,
            max_budget_pct: 95,
            initial_budget_pct: 50,
            predictor: PredictorConfig::default(),
            join_bump_pct: 20,
            join_bump_at_min_pct: 10,
            xrun_bump_pct: 20,
            xrun_bump_at_min_pct: 10,
            hysteresis_pct: 5,
            hold_samples: 3,
            min_enforceable_period_ns: 1_333_000,
        }
    }
}

fn bad(field: &'static str, problem: String, fix: &str) -> RequestError {
    RequestError {
        field,
        problem,
        fix: fix.into(),
    }
}

impl AdaptiveConfig {
    /// Checks the ranges; the controller refuses a config that fails.
    pub fn validate(&self) -> Result<(), RequestError> {
        if self.increment_pct > 100 {
            return Err(bad(
                "increment_pct",
                format!("{} is outside 0–100", self.increment_pct),
                "AQuoSA's -I is a percentage from 0 to 100 (20 is usual)",
            ));
        }
        if self.min_budget_pct > self.max_budget_pct || self.max_budget_pct > 100 {
            return Err(bad(
                "max_budget_pct",
                format!(
                    "min {} % and max {} % of the period are not 0 ≤ min ≤ max ≤ 100",
                    self.min_budget_pct, self.max_budget_pct
                ),
                "e.g. min 5, max 95",
            ));
        }
        if self.initial_budget_pct > 100 {
            return Err(bad(
                "initial_budget_pct",
                format!("{} is over 100", self.initial_budget_pct),
                "give a percentage of the period (50 is usual)",
            ));
        }
        if self.hysteresis_pct > 100 {
            return Err(bad(
                "hysteresis_pct",
                format!("{} is over 100", self.hysteresis_pct),
                "give a percentage of the budget (5 is usual)",
            ));
        }
        if self.predictor.window == 0 {
            return Err(bad(
                "predictor.window",
                "an empty window predicts nothing".into(),
                "keep at least one sample (16 is usual)",
            ));
        }
        if let PredictorKind::Percentile(p) = self.predictor.kind {
            if p > 100 {
                return Err(bad(
                    "predictor.kind",
                    format!("percentile {p} is over 100"),
                    "give a percentile from 0 to 100",
                ));
            }
        }
        Ok(())
    }
}

/// The smallest f ≥ 1 with `audio_period_ns` × f ≥ `min_enforceable_ns`.
pub fn fragments(audio_period_ns: u64, min_enforceable_ns: u64) -> u64 {
    min_enforceable_ns.div_ceil(audio_period_ns.max(1)).max(1)
}

/// `value` × `pct` / 100, rounded down, without overflow.
fn pct_of(value: u64, pct: u32) -> u64 {
    (value as u128 * pct as u128 / 100).min(u64::MAX as u128) as u64
}

/// What the controller knows, for live display and plots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdaptiveReport {
    pub audio_period_ns: u64,
    pub fragments: u64,
    pub reservation_period_ns: u64,
    /// The last sample: CPU time used per audio period.
    pub last_sample_ns: Option<u64>,
    /// The predictor's estimate per audio period.
    pub prediction_ns: Option<u64>,
    pub wanted: Budget,
    pub granted: Option<Budget>,
    /// Whether the last grant was less than asked.
    pub degraded: bool,
    pub degradations: u64,
    pub bumps: u64,
    /// A bumped (or initial) budget stands until `hold_samples` samples came.
    pub holding: bool,
    pub samples: usize,
}

/// The feedback controller of one reserved thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adaptive {
    config: AdaptiveConfig,
    audio_period_ns: u64,
    fragments: u64,
    samples: VecDeque<u64>,
    /// Runtime per reservation period that stands as a floor until the
    /// hold_samples samples came (after a start, a bump or a period change).
    hold_ns: Option<u64>,
    last_sample_ns: Option<u64>,
    granted: Option<Budget>,
    degraded: bool,
    degradations: u64,
    bumps: u64,
}

impl Adaptive {
    /// A controller for a thread whose audio period is `audio_period_ns`.
    pub fn new(config: AdaptiveConfig, audio_period_ns: u64) -> Result<Adaptive, RequestError> {
        config.validate()?;
        check_period(audio_period_ns)?;
        let f = fragments(audio_period_ns, config.min_enforceable_period_ns);
        let initial = pct_of(audio_period_ns * f, config.initial_budget_pct);
        Ok(Adaptive {
            config,
            audio_period_ns,
            fragments: f,
            samples: VecDeque::with_capacity(config.predictor.window),
            hold_ns: Some(initial),
            last_sample_ns: None,
            granted: None,
            degraded: false,
            degradations: 0,
            bumps: 0,
        })
    }

    pub fn config(&self) -> &AdaptiveConfig {
        &self.config
    }

    pub fn fragments(&self) -> u64 {
        self.fragments
    }

    /// P = audio period × f.
    pub fn reservation_period_ns(&self) -> u64 {
        self.audio_period_ns.saturating_mul(self.fragments)
    }

    /// The smallest and largest runtime per reservation period.
    pub fn bounds(&self) -> (u64, u64) {
        let p = self.reservation_period_ns();
        let min = pct_of(p, self.config.min_budget_pct).max(MIN_RUNTIME_NS);
        let max = pct_of(p, self.config.max_budget_pct).max(min);
        (min, max)
    }

    /// Adds one sample: `cpu_ns` used over `periods` audio periods.
    /// An interval without periods carries no information and is ignored.
    pub fn observe(&mut self, cpu_ns: u64, periods: u64) {
        if periods == 0 {
            return;
        }
        let sample = cpu_ns.div_ceil(periods);
        self.last_sample_ns = Some(sample);
        if self.samples.len() == self.config.predictor.window {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
        if self.samples.len() >= self.config.hold_samples.min(self.config.predictor.window) {
            self.hold_ns = None;
        }
    }

    /// The predictor's estimate of the next period's usage.
    pub fn prediction(&self) -> Option<u64> {
        self.config.predictor.predict(&self.samples)
    }

    /// The least runtime per reservation period that holds what the window
    /// saw — the prediction with half the increment — and any standing
    /// bump, clamped to the bounds: a budget below it is short already,
    /// one between it and [`Adaptive::wanted`] still holds every recent
    /// period.
    pub fn needed(&self) -> u64 {
        let half = self.config.increment_pct / 2;
        let predicted = self.prediction().map_or(0, |p| self.per_period(p, half));
        let (min, max) = self.bounds();
        predicted.max(self.hold_ns.unwrap_or(0)).clamp(min, max)
    }

    /// `per_cycle` over the reservation period's fragments, with `pct` % on
    /// top.
    fn per_period(&self, per_cycle: u64, pct: u32) -> u64 {
        let q = per_cycle as u128 * self.fragments as u128 * (100 + pct) as u128 / 100;
        q.min(u64::MAX as u128) as u64
    }

    /// The budget the load needs: the prediction scaled by the fragments
    /// and the increment, not below a standing bump, clamped to [min, max].
    pub fn wanted(&self) -> Budget {
        let predicted = self
            .prediction()
            .map(|p| self.per_period(p, self.config.increment_pct));
        let runtime = match (predicted, self.hold_ns) {
            (Some(q), Some(h)) => q.max(h),
            (Some(q), None) => q,
            (None, Some(h)) => h,
            // The window only empties by a flush, which sets a hold.
            (None, None) => self.bounds().1,
        };
        let (min, max) = self.bounds();
        Budget::new(runtime.clamp(min, max), self.reservation_period_ns())
    }

    /// The budget to ask admission for, when it differs from what is held
    /// (the thesis calls `qres_set_params` only when Q or P changed) by
    /// more than the hysteresis, or a bump or a period change stands.
    pub fn update(&self) -> Option<Budget> {
        self.update_to(self.wanted())
    }

    /// [`Adaptive::update`] towards `target` instead of what the load
    /// wants (a budget [`compress`]ed to share a full core).
    pub fn update_to(&self, target: Budget) -> Option<Budget> {
        let Some(held) = self.granted else {
            return Some(target);
        };
        let band = pct_of(held.runtime_ns, self.config.hysteresis_pct);
        let changed = held.period_ns != target.period_ns
            || target.runtime_ns.abs_diff(held.runtime_ns) > band
            || (self.hold_ns.is_some() && target != held);
        changed.then_some(target)
    }

    /// Records what admission gave; `degraded` when it was less than asked.
    pub fn granted(&mut self, budget: Budget, degraded: bool) {
        self.granted = Some(budget);
        self.degraded = degraded;
        if degraded {
            self.degradations += 1;
        }
    }

    /// A client joined: the load is unknown until the window refills.
    pub fn on_join(&mut self) {
        let (at_min, above) = (self.config.join_bump_at_min_pct, self.config.join_bump_pct);
        self.bump(at_min, above);
    }

    /// An xrun: the budget was too small for what changed.
    pub fn on_xrun(&mut self) {
        let (at_min, above) = (self.config.xrun_bump_at_min_pct, self.config.xrun_bump_pct);
        self.bump(at_min, above);
    }

    /// The budget in force: what was granted at this period, or what is
    /// wanted, whichever is larger (a bump must never lower the request).
    fn current_runtime(&self) -> u64 {
        let wanted = self.wanted();
        match self.granted {
            Some(g) if g.period_ns == wanted.period_ns => g.runtime_ns.max(wanted.runtime_ns),
            _ => wanted.runtime_ns,
        }
    }

    fn bump(&mut self, at_min_pct: u32, above_pct: u32) {
        let current = self.current_runtime();
        let pct = if current <= self.bounds().0 {
            at_min_pct
        } else {
            above_pct
        };
        self.hold_ns = Some(current.saturating_add(pct_of(current, pct)));
        self.samples.clear();
        self.bumps += 1;
    }

    /// The audio period changed (a new buffer size): new fragments, the
    /// current bandwidth carried over to the new period, the window flushed
    /// (its samples were per old period).
    pub fn set_audio_period(&mut self, audio_period_ns: u64) -> Result<(), RequestError> {
        check_period(audio_period_ns)?;
        if audio_period_ns == self.audio_period_ns {
            return Ok(());
        }
        let old_period = self.reservation_period_ns();
        let current = self.current_runtime();
        self.audio_period_ns = audio_period_ns;
        self.fragments = fragments(audio_period_ns, self.config.min_enforceable_period_ns);
        let new_period = self.reservation_period_ns();
        let scaled = current as u128 * new_period as u128 / old_period as u128;
        self.hold_ns = Some(scaled.min(u64::MAX as u128) as u64);
        self.samples.clear();
        Ok(())
    }

    pub fn report(&self) -> AdaptiveReport {
        AdaptiveReport {
            audio_period_ns: self.audio_period_ns,
            fragments: self.fragments,
            reservation_period_ns: self.reservation_period_ns(),
            last_sample_ns: self.last_sample_ns,
            prediction_ns: self.prediction(),
            wanted: self.wanted(),
            granted: self.granted,
            degraded: self.degraded,
            degradations: self.degradations,
            bumps: self.bumps,
            holding: self.hold_ns.is_some(),
            samples: self.samples.len(),
        }
    }
}

/// Shares `room` among reservations that together want more than it
/// holds: each keeps its floor, and the rest of the room is divided in
/// proportion to what each wants above its floor — so a full core squeezes
/// every thread alike instead of refusing the last to ask. Wants that fit
/// are returned unchanged; floors that do not fit are returned as they are
/// (admission then refuses or degrades).
pub fn compress(wanted: &[Budget], floors: &[u64], room: Bandwidth) -> Vec<Budget> {
    let total: Bandwidth = wanted.iter().map(Budget::bandwidth).sum();
    if total <= room {
        return wanted.to_vec();
    }
    let floor_of = |(b, f): (&Budget, &u64)| Budget::new((*f).min(b.runtime_ns), b.period_ns);
    let floored: Vec<Budget> = wanted.iter().zip(floors).map(floor_of).collect();
    let floor_total: Bandwidth = floored.iter().map(Budget::bandwidth).sum();
    if floor_total >= room {
        return floored;
    }
    let spare = room - floor_total;
    let above = total - floor_total;
    wanted
        .iter()
        .zip(&floored)
        .map(|(w, f)| {
            let extra = (w.runtime_ns - f.runtime_ns) as u128 * spare.0 as u128 / above.0 as u128;
            Budget::new(f.runtime_ns + extra as u64, w.period_ns)
        })
        .collect()
}

/// Shares a fixed `total` out among reservations in proportion to their
/// weights (bandwidths: what each used, say), every one keeping its
/// period: the budgets of threads that together hold one fixed share, as
/// JACK's threads held one reservation under AQuoSA's `-F`, so that the
/// share goes where the work is. Their bandwidths sum to at most `total`
/// (less by the rounding), but that no budget is below
/// [`MIN_RUNTIME_NS`]; a larger weight never gets less. Weights of
/// nothing at all share it equally.
pub fn share_out(weights: &[Budget], total: Bandwidth) -> Vec<Budget> {
    let sum: Bandwidth = weights.iter().map(Budget::bandwidth).sum();
    let n = weights.len().max(1) as u128;
    weights
        .iter()
        .map(|w| {
            let part = match sum.0 {
                0 => total.0 as u128 / n,
                sum => total.0 as u128 * w.bandwidth().0 as u128 / sum as u128,
            };
            let part = Bandwidth(part.min(u64::MAX as u128) as u64);
            Budget::new(
                part.runtime_in(w.period_ns).max(MIN_RUNTIME_NS),
                w.period_ns,
            )
        })
        .collect()
}

fn check_period(audio_period_ns: u64) -> Result<(), RequestError> {
    // Beyond a second an audio period is a mistake (and P × f stays far
    // from overflowing).
    if audio_period_ns == 0 || audio_period_ns > 1_000_000_000 {
        return Err(bad(
            "audio_period",
            format!("{audio_period_ns} ns is not an audio period"),
            "give frames / sample rate, e.g. 1333333 ns for 128 frames at 96 kHz",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thesis_example_runs_64_frames_in_two_fragments() {
        // 64 frames at 96 kHz: 666 666 ns; 128 frames: 1 333 333 ns.
        assert_eq!(fragments(666_666, 1_333_000), 2);
        assert_eq!(fragments(1_333_333, 1_333_000), 1);
        assert_eq!(fragments(100_000, 1_333_000), 14);
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let p = |kind| PredictorConfig { kind, window: 10 };
        let samples: VecDeque<u64> = (1..=10).collect();
        assert_eq!(p(PredictorKind::Percentile(90)).predict(&samples), Some(9));
        assert_eq!(
            p(PredictorKind::Percentile(100)).predict(&samples),
            Some(10)
        );
        assert_eq!(p(PredictorKind::Percentile(0)).predict(&samples), Some(1));
        assert_eq!(p(PredictorKind::Mean).predict(&samples), Some(6));
        assert_eq!(p(PredictorKind::Max).predict(&VecDeque::new()), None);
    }
}
