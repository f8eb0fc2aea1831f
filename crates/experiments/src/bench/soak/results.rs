//! What a soak measured — each minute's samples of every tessera process,
//! the application's Δt per minute — and its verdict against the goals, as
//! written to results.json and read by the report. A leaf of the soak: the
//! run and the report use it, and it uses neither.

use serde::{Deserialize, Serialize};
use std::path::Path;
use tessera_measure::MachineInfo;
use tessera_music::windows::WindowSummary;
use tessera_sys::proc::Pid;

/// The goal: no process's RSS grows by more than this over the run.
pub const RSS_GOAL_KIB: u64 = 1024;

/// One process at one sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessSample {
    pub pid: Pid,
    /// Its command name, PID and relation to the run, e.g.
    /// "tessera 4242 (this run)".
    pub name: String,
    pub rss_kib: u64,
    pub fds: u64,
}

/// Every tessera process, once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Minutes measured so far: 0 at the end of the warm-up.
    pub minute: u32,
    /// Seconds since the release.
    pub elapsed_s: f64,
    pub processes: Vec<ProcessSample>,
}

/// The application's Δt in one minute of the run (the packages that began
/// in it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MinuteDt {
    /// 1 for the first minute after the warm-up.
    pub minute: u64,
    pub packages: u64,
    pub misses: u64,
    /// Of the misses, those whose sender (the emulated SLABS) stalled
    /// mid-package.
    pub sender_misses: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl From<&WindowSummary> for MinuteDt {
    fn from(w: &WindowSummary) -> MinuteDt {
        let us = |ns: u64| ns as f64 / 1000.0;
        MinuteDt {
            minute: w.index + 1,
            packages: w.packages,
            misses: w.misses,
            sender_misses: w.sender_misses,
            mean_us: w.mean_ns / 1000.0,
            p50_us: us(w.p50_ns),
            p99_us: us(w.p99_ns),
            p999_us: us(w.p999_ns),
            max_us: us(w.max_ns),
        }
    }
}

/// One process over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessVerdict {
    pub name: String,
    /// Samples it was in.
    pub samples: usize,
    pub first_kib: u64,
    pub last_kib: u64,
    /// Last − first: the goal's measure.
    pub growth_kib: i64,
    /// Last − the sample after the first minute (start-up left out).
    pub growth_after_first_minute_kib: Option<i64>,
    pub peak_kib: u64,
    pub first_fds: u64,
    pub last_fds: u64,
    pub peak_fds: u64,
    /// `growth_kib` ≤ [`RSS_GOAL_KIB`].
    pub rss_met: bool,
    /// No more descriptors at the end than at the start.
    pub fds_flat: bool,
}

/// The misses per minute over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MissTrend {
    /// Minutes with Δt (the run's own, not a sliver after its end).
    pub minutes: usize,
    pub total: u64,
    pub most_in_a_minute: u64,
    /// Mean misses per minute of the first and of the last ⌊n/2⌋ minutes.
    pub first_half_per_minute: f64,
    pub second_half_per_minute: f64,
    /// Least-squares slope, misses per minute per minute.
    pub slope: f64,
    /// The second half had significantly more misses than the first: more
    /// than three standard deviations of the difference of the halves'
    /// sums, + 1. The deviation is the larger of two: the Poisson one
    /// (√ of both sums) and the one the minutes' own spread gives (√(n/2 ×
    /// (s₁² + s₂²)), Welch's): misses on a virtual machine come in bursts,
    /// far more spread than Poisson counts, and a Poisson test alone calls
    /// noise a trend.
    pub rising: bool,
}

/// The run against the goals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub processes: Vec<ProcessVerdict>,
    pub misses: MissTrend,
    /// Every process within [`RSS_GOAL_KIB`].
    pub rss_met: bool,
    pub fds_flat: bool,
    pub misses_flat: bool,
}

/// What the soak measured (results.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SoakResults {
    pub tool_version: String,
    pub started_at: String,
    pub machine: MachineInfo,
    pub scenario: String,
    pub configuration: String,
    /// Minutes asked for.
    pub minutes: u32,
    pub warmup_s: f64,
    pub deadline_us: f64,
    pub rss_goal_kib: u64,
    /// Whether the run got to its end (false while it runs).
    pub finished: bool,
    pub samples: Vec<Sample>,
    pub minutes_dt: Vec<MinuteDt>,
    pub notes: Vec<String>,
    pub verdict: Verdict,
}

impl SoakResults {
    pub fn load(path: &Path) -> Result<SoakResults, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub(super) fn save(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The verdict of the samples and minutes so far.
    pub(super) fn judge(&mut self) {
        let minutes: Vec<&MinuteDt> = self
            .minutes_dt
            .iter()
            .filter(|m| m.minute <= u64::from(self.minutes))
            .collect();
        self.verdict = verdict(&self.samples, &minutes);
    }
}

/// The samples and minutes against the goals.
pub fn verdict(samples: &[Sample], minutes: &[&MinuteDt]) -> Verdict {
    let mut names: Vec<&str> = Vec::new();
    for p in samples.iter().flat_map(|s| &s.processes) {
        if !names.contains(&p.name.as_str()) {
            names.push(&p.name);
        }
    }
    let processes: Vec<ProcessVerdict> = names
        .into_iter()
        .filter_map(|name| process_verdict(name, samples))
        .collect();
    let misses = miss_trend(minutes);
    Verdict {
        rss_met: processes.iter().all(|p| p.rss_met),
        fds_flat: processes.iter().all(|p| p.fds_flat),
        misses_flat: !misses.rising,
        processes,
        misses,
    }
}

fn process_verdict(name: &str, samples: &[Sample]) -> Option<ProcessVerdict> {
    let seen: Vec<(u32, &ProcessSample)> = samples
        .iter()
        .filter_map(|s| Some((s.minute, s.processes.iter().find(|p| p.name == name)?)))
        .collect();
    let (_, first) = *seen.first()?;
    let (_, last) = *seen.last()?;
    let growth = |from: &ProcessSample| last.rss_kib as i64 - from.rss_kib as i64;
    let growth_kib = growth(first);
    Some(ProcessVerdict {
        name: name.to_string(),
        samples: seen.len(),
        first_kib: first.rss_kib,
        last_kib: last.rss_kib,
        growth_kib,
        growth_after_first_minute_kib: seen.iter().find(|(m, _)| *m == 1).map(|(_, p)| growth(p)),
        peak_kib: seen.iter().map(|(_, p)| p.rss_kib).max().unwrap_or(0),
        first_fds: first.fds,
        last_fds: last.fds,
        peak_fds: seen.iter().map(|(_, p)| p.fds).max().unwrap_or(0),
        rss_met: growth_kib <= RSS_GOAL_KIB as i64,
        fds_flat: last.fds <= first.fds,
    })
}

pub(super) fn miss_trend(minutes: &[&MinuteDt]) -> MissTrend {
    let n = minutes.len();
    let counts: Vec<f64> = minutes.iter().map(|m| m.misses as f64).collect();
    let half = n / 2;
    let per_minute = |c: &[f64]| match c.len() {
        0 => 0.0,
        len => c.iter().sum::<f64>() / len as f64,
    };
    let (first, second) = (&counts[..half], &counts[n - half..]);
    let (sum_first, sum_second) = (first.iter().sum::<f64>(), second.iter().sum::<f64>());
    MissTrend {
        minutes: n,
        total: minutes.iter().map(|m| m.misses).sum(),
        most_in_a_minute: minutes.iter().map(|m| m.misses).max().unwrap_or(0),
        first_half_per_minute: per_minute(first),
        second_half_per_minute: per_minute(second),
        slope: slope(&counts),
        rising: sum_second - sum_first > 3.0 * deviation_of_difference(first, second) + 1.0,
    }
}

/// The standard deviation of the difference of two halves' sums (see
/// [`MissTrend::rising`]).
fn deviation_of_difference(first: &[f64], second: &[f64]) -> f64 {
    let sum = |c: &[f64]| c.iter().sum::<f64>();
    let poisson = sum(first) + sum(second);
    let spread = first.len() as f64 * (variance(first) + variance(second));
    poisson.max(spread).sqrt()
}

/// The sample variance (0 for fewer than 2 values).
fn variance(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
}

/// Least-squares slope of `values` against their index (0 for fewer than 2).
fn slope(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    if values.len() < 2 {
        return 0.0;
    }
    let mean_x = (n - 1.0) / 2.0;
    let mean_y = values.iter().sum::<f64>() / n;
    let (num, den) = values
        .iter()
        .enumerate()
        .fold((0.0, 0.0), |(num, den), (i, y)| {
            let dx = i as f64 - mean_x;
            (num + dx * (y - mean_y), den + dx * dx)
        });
    num / den
}
