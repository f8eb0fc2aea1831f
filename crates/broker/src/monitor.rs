//! Monitoring, the RAP service's eyes (seed 000 §2.3): per cell and per
//! member thread, the budget set and the CPU time used per period, and the
//! misses and xruns the cell's programs reported, sampled at a coarse
//! interval and kept as a time series — the newest [`KEPT`] samples in
//! memory and appended to `monitor.jsonl` in the broker's directory, so that
//! a restarted daemon (or the next process with an embedded broker)
//! continues the series where it stopped.
//!
//! A thread's use per period is its CPU time over the interval divided by
//! the periods in it: a mean, not a peak — what a coarse time scale can see.
//! Misses and xruns are cumulative counters in the broker's state (reports
//! survive restarts); a sample holds what they grew by since the last one.
//! It owns the series and the file; it never changes a cell (adaptation
//! does, from what it sampled) and never reads anything but /proc and the
//! broker's state.

use crate::state::{CellState, UnguaranteedThread};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use tessera_policy::{Budget, Grant};
use tessera_sys::proc::Liveness;

/// Samples kept in memory (an hour at 1 s).
pub const KEPT: usize = 3600;
/// Bytes of `monitor.jsonl` beyond which it is rewritten with the kept
/// samples only.
const FILE_LIMIT: u64 = 8 << 20;

/// One member thread over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadSample {
    pub pid: i32,
    pub tid: i32,
    pub start_time: u64,
    pub name: String,
    /// Its CPU time so far (cumulative).
    pub cpu_ns: u64,
    /// CPU time per period of its reservation during the interval (mean);
    /// `None` for the first sample of a thread.
    pub used_ns: Option<u64>,
    /// Share of one CPU it used during the interval, %.
    pub cpu_pct: f64,
}

/// One cell over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellSample {
    pub name: String,
    pub policy: String,
    /// Per reservation; `None` for cells without bandwidth.
    pub budget: Option<Budget>,
    pub reservations: usize,
    pub pinned: bool,
    /// Its owner adapts it (the guard): the RAP service leaves it.
    #[serde(default)]
    pub owner_adapts: bool,
    pub weight: u32,
    pub threads: Vec<ThreadSample>,
    /// The largest of its threads' use per period.
    pub used_ns: Option<u64>,
    /// Reported during the interval.
    pub misses: u64,
    pub xruns: u64,
    /// Reported since the cell was created.
    pub misses_total: u64,
    pub xruns_total: u64,
}

impl CellSample {
    /// Use over budget, % (the DSP load of an audio cell).
    pub fn load_pct(&self) -> Option<f64> {
        let budget = self.budget?;
        Some(self.used_ns? as f64 * 100.0 / budget.runtime_ns.max(1) as f64)
    }

    /// Its threads' CPU together, % of one CPU.
    pub fn cpu_pct(&self) -> f64 {
        self.threads.iter().map(|t| t.cpu_pct).sum()
    }
}

/// The whole machine at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub t_unix_ms: u64,
    pub t_mono_ns: u64,
    /// Since the previous sample (0 for the first).
    pub interval_ns: u64,
    pub cells: Vec<CellSample>,
    /// Real-time threads outside every cell, with no guarantee.
    #[serde(default)]
    pub unguaranteed: Vec<UnguaranteedThread>,
    /// What adaptation changed since the previous sample, one line each.
    #[serde(default)]
    pub changes: Vec<String>,
}

/// The series and where it is kept.
#[derive(Debug)]
pub struct Monitor {
    path: PathBuf,
    series: VecDeque<Sample>,
    /// Changes made since the last sample, for the next one.
    pending_changes: Vec<String>,
}

/// A cell as the broker holds it, for a sample.
pub struct CellFacts<'a> {
    pub name: &'a str,
    pub grant: &'a Grant,
    pub state: &'a CellState,
}

impl Monitor {
    /// The series kept at `path`, its newest [`KEPT`] samples loaded
    /// (unreadable lines are skipped: a crash may have cut the last one).
    pub fn open(path: PathBuf) -> Monitor {
        let mut series = VecDeque::with_capacity(KEPT);
        if let Ok(file) = std::fs::File::open(&path) {
            for line in std::io::BufReader::new(file).lines().map_while(Result::ok) {
                if let Ok(sample) = serde_json::from_str::<Sample>(&line) {
                    if series.len() == KEPT {
                        series.pop_front();
                    }
                    series.push_back(sample);
                }
            }
        }
        Monitor {
            path,
            series,
            pending_changes: Vec::new(),
        }
    }

    pub fn latest(&self) -> Option<&Sample> {
        self.series.back()
    }

    /// Samples taken after `since_unix_ms` (all with `None`), oldest first.
    pub fn since(&self, since_unix_ms: Option<u64>) -> Vec<Sample> {
        self.series
            .iter()
            .filter(|s| since_unix_ms.is_none_or(|t| s.t_unix_ms > t))
            .cloned()
            .collect()
    }

    /// Notes a change for the next sample.
    pub fn note_change(&mut self, line: String) {
        self.pending_changes.push(line);
    }

    /// Samples every cell now, keeps and appends the sample (with the
    /// `unguaranteed` threads as last reported), and returns it.
    pub fn sample<'a>(
        &mut self,
        cells: impl Iterator<Item = CellFacts<'a>>,
        unguaranteed: &[UnguaranteedThread],
        live: &mut Liveness,
    ) -> &Sample {
        let t_mono_ns = tessera_sys::clock::monotonic_ns();
        let previous = self.series.back();
        let interval_ns = previous.map_or(0, |p| t_mono_ns.saturating_sub(p.t_mono_ns));
        let cells = cells
            .map(|facts| sample_cell(&facts, previous, interval_ns, live))
            .collect();
        let sample = Sample {
            t_unix_ms: unix_ms(),
            t_mono_ns,
            interval_ns,
            cells,
            unguaranteed: unguaranteed.to_vec(),
            changes: std::mem::take(&mut self.pending_changes),
        };
        self.append(&sample);
        if self.series.len() == KEPT {
            self.series.pop_front();
        }
        self.series.push_back(sample);
        self.series.back().expect("just pushed")
    }

    /// Appends to the file, rewriting it with the kept samples when it grew
    /// past [`FILE_LIMIT`]. Monitoring goes on in memory if the file cannot
    /// be written.
    fn append(&mut self, sample: &Sample) {
        let too_big = std::fs::metadata(&self.path).is_ok_and(|m| m.len() > FILE_LIMIT);
        if too_big {
            let _ = rewrite(&self.path, self.series.iter());
        }
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
        {
            if let Ok(line) = serde_json::to_string(sample) {
                let _ = writeln!(file, "{line}");
            }
        }
    }
}

fn rewrite<'a>(path: &Path, samples: impl Iterator<Item = &'a Sample>) -> std::io::Result<()> {
    let aside = path.with_extension("jsonl.new");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&aside)?);
    for sample in samples {
        writeln!(out, "{}", serde_json::to_string(sample)?)?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(aside, path)
}

/// Now, in ms since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One cell now, against the previous sample.
fn sample_cell(
    facts: &CellFacts,
    previous: Option<&Sample>,
    interval_ns: u64,
    live: &mut Liveness,
) -> CellSample {
    let request = &facts.grant.request;
    let before = previous.and_then(|p| p.cells.iter().find(|c| c.name == facts.name));
    let period_ns = request.budget.map(|b| b.period_ns);
    let threads: Vec<ThreadSample> = facts
        .state
        .members
        .iter()
        .filter_map(|m| {
            let cpu_ns = live.cpu_ns(m.tid, m.start_time)?;
            let last = before.and_then(|c| {
                c.threads
                    .iter()
                    .find(|t| t.tid == m.tid && t.start_time == m.start_time)
            });
            let spent = last.map(|t| cpu_ns.saturating_sub(t.cpu_ns));
            Some(ThreadSample {
                pid: m.pid,
                tid: m.tid,
                start_time: m.start_time,
                // Read once: a member is named by then (it joined a cell
                // after its program started it), and a guarded session's
                // hundred members are sampled every second.
                name: last.map_or_else(
                    || tessera_sys::proc::thread_name(m.pid, m.tid),
                    |t| t.name.clone(),
                ),
                cpu_ns,
                used_ns: spent
                    .zip(period_ns)
                    .filter(|_| interval_ns > 0)
                    .map(|(spent, period)| per_period(spent, period, interval_ns)),
                cpu_pct: spent.map_or(0.0, |s| s as f64 * 100.0 / interval_ns.max(1) as f64),
            })
        })
        .collect();
    let reported = &facts.state.reported;
    let grew = |now: u64, then: Option<u64>| then.map_or(0, |t| now.saturating_sub(t));
    CellSample {
        name: facts.name.to_string(),
        policy: request.policy.name().to_string(),
        budget: request.budget,
        reservations: facts.grant.reservations.len(),
        pinned: request.pinned,
        owner_adapts: request.owner_adapts,
        weight: request.weight,
        used_ns: threads.iter().filter_map(|t| t.used_ns).max(),
        misses: grew(reported.misses, before.map(|c| c.misses_total)),
        xruns: grew(reported.xruns, before.map(|c| c.xruns_total)),
        misses_total: reported.misses,
        xruns_total: reported.xruns,
        threads,
    }
}

/// CPU time per period: `spent` over `interval_ns`, in periods of
/// `period_ns`.
fn per_period(spent: u64, period_ns: u64, interval_ns: u64) -> u64 {
    (u128::from(spent) * u128::from(period_ns) / u128::from(interval_ns.max(1))) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_per_period_is_the_cpu_time_spread_over_the_periods() {
        // 300 ms of CPU in 1 s of 10 ms periods: 3 ms a period.
        assert_eq!(
            per_period(300_000_000, 10_000_000, 1_000_000_000),
            3_000_000
        );
    }

    #[test]
    fn the_series_survives_a_reopen_and_a_cut_last_line() {
        let dir = std::env::temp_dir().join(format!("tessera-monitor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("monitor.jsonl");
        let _ = std::fs::remove_file(&path);
        let mut monitor = Monitor::open(path.clone());
        monitor.note_change("cell a: grown".into());
        monitor.sample(std::iter::empty(), &[], &mut Liveness::default());
        monitor.sample(std::iter::empty(), &[], &mut Liveness::default());
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"{\"t_unix_ms\": 12").unwrap();
        let reopened = Monitor::open(path.clone());
        let series = reopened.since(None);
        assert_eq!(series.len(), 2);
        assert_eq!(series[0].changes, vec!["cell a: grown".to_string()]);
        assert!(series[1].interval_ns > 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
