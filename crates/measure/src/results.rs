//! The results data model that experiment runs write as JSON: a run, its
//! configurations, their metrics (summary, histogram, raw series) and
//! counters (one figure each: xruns, packets lost, cycles, ratios).
//!
//! Owns the file format and its load/save errors. It must never compute
//! statistics itself ([`crate::stats`] does) nor format reports.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::histogram::LatencyHistogram;
use crate::machine::MachineInfo;
use crate::series::Series;
use crate::stats::Summary;
use crate::why::Why;

/// One experiment run: every configuration of one scenario on one machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResults {
    pub tool_version: String,
    /// RFC 3339 UTC, e.g. "2025-01-31T12:00:00Z".
    pub started_at: String,
    pub machine: MachineInfo,
    pub scenario: String,
    /// What the scenario does and what to look for (Markdown).
    #[serde(default)]
    pub description: String,
    /// Measured time per configuration, after the warm-up.
    pub duration_s: f64,
    pub warmup_s: f64,
    /// The configuration other configurations are compared with.
    pub baseline: Option<String>,
    pub configurations: Vec<ConfigurationResult>,
}

/// One configuration of a run (e.g. "FIFO, equal priority" or "reservations").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigurationResult {
    pub name: String,
    /// Facts a reader needs, e.g. "best-effort mode: no CAP_SYS_NICE".
    pub notes: Vec<String>,
    pub metrics: Vec<Metric>,
    /// Every count the subject reports, as data (the notes may say the
    /// same in words); absent from files written before counters were.
    #[serde(default)]
    pub counters: Vec<Counter>,
    /// Facts of the configuration that are words, not figures, and that a
    /// report shows as they are, by name (e.g. "scheduling": "SCHED_FIFO
    /// 70"); absent from files written before labels were.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Why its deadlines were missed, when the run traced its threads
    /// (`tessera run --why`); absent otherwise and from older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<Why>,
}

/// One figure of a configuration: a count ("xruns", unit "count") or a
/// quantity that is not a sample of a distribution ("reserved ÷ used",
/// unit "ratio").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Counter {
    pub name: String,
    pub value: f64,
    pub unit: String,
}

/// One measured quantity (e.g. "response time") in one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub name: String,
    /// Unit of `deadline` and `summary` ("us", "ms", "%").
    pub unit: String,
    pub deadline: Option<f64>,
    pub summary: Summary,
    /// Every sample, in nanoseconds (latency metrics only).
    pub histogram: Option<LatencyHistogram>,
    pub series: Vec<Series>,
}

#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("cannot read results file {}: {source}", .path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{} is not a valid tessera results file: {source}", .path.display())]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("cannot write results file {}: {source}", .path.display())]
    Write { path: PathBuf, source: io::Error },
}

impl RunResults {
    /// An empty run of `scenario` starting now on this machine.
    pub fn start(scenario: impl Into<String>) -> RunResults {
        RunResults {
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            started_at: rfc3339_utc(SystemTime::now()),
            machine: MachineInfo::detect(),
            scenario: scenario.into(),
            description: String::new(),
            duration_s: 0.0,
            warmup_s: 0.0,
            baseline: None,
            configurations: Vec::new(),
        }
    }

    /// Reads a results file written by [`RunResults::save`].
    pub fn load(path: &Path) -> Result<RunResults, ResultsError> {
        let file = File::open(path).map_err(|source| ResultsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_reader(BufReader::new(file)).map_err(|source| ResultsError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Writes compact JSON (results with histograms and series are large).
    pub fn save(&self, path: &Path) -> Result<(), ResultsError> {
        let write_error = |source| ResultsError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut out = BufWriter::new(File::create(path).map_err(write_error)?);
        serde_json::to_writer(&mut out, self).map_err(|e| write_error(e.into()))?;
        out.flush().map_err(write_error)
    }

    /// Metric names in order of first appearance across configurations.
    pub fn metric_names(&self) -> Vec<&str> {
        crate::distinct_in_order(
            self.configurations
                .iter()
                .flat_map(|c| &c.metrics)
                .map(|m| m.name.as_str()),
        )
    }
}

impl ConfigurationResult {
    pub fn metric(&self, name: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.name == name)
    }

    pub fn counter(&self, name: &str) -> Option<&Counter> {
        self.counters.iter().find(|c| c.name == name)
    }

    /// The value of the counter `name` as a whole count.
    pub fn count(&self, name: &str) -> Option<u64> {
        self.counter(name).map(|c| c.value as u64)
    }

    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.get(name).map(String::as_str)
    }

    /// What a reader is told of the configuration in words: each label as
    /// "name: value", then the notes.
    pub fn facts(&self) -> Vec<String> {
        self.labels
            .iter()
            .map(|(name, value)| format!("{name}: {value}"))
            .chain(self.notes.iter().cloned())
            .collect()
    }
}

impl Counter {
    /// A whole count of events or items, unit "count".
    pub fn count(name: impl Into<String>, value: u64) -> Counter {
        Counter::new(name, value as f64, COUNT)
    }

    /// Counts of (name, value) pairs, in order.
    pub fn counts<N: Into<String>>(pairs: impl IntoIterator<Item = (N, u64)>) -> Vec<Counter> {
        pairs
            .into_iter()
            .map(|(name, value)| Counter::count(name, value))
            .collect()
    }

    pub fn new(name: impl Into<String>, value: f64, unit: impl Into<String>) -> Counter {
        Counter {
            name: name.into(),
            value,
            unit: unit.into(),
        }
    }
}

/// The unit of a [`Counter::count`].
pub const COUNT: &str = "count";

impl Metric {
    /// A latency metric in microseconds, summarised from its histogram.
    pub fn latency(
        name: impl Into<String>,
        deadline_us: Option<f64>,
        histogram: LatencyHistogram,
    ) -> Metric {
        Metric {
            name: name.into(),
            unit: "us".to_string(),
            deadline: deadline_us,
            summary: Summary::from_histogram(&histogram, deadline_us),
            histogram: Some(histogram),
            series: Vec::new(),
        }
    }
}

/// Formats a time as RFC 3339 UTC with whole seconds.
pub fn rfc3339_utc(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn sample_run() -> RunResults {
        let mut histogram = LatencyHistogram::new(10_000_000);
        (0..100).for_each(|i| histogram.record(1_000_000 + i * 1_000));
        let mut series = Series::with_capacity("period", "us", 4);
        series.push(0.0, 1333.0);
        RunResults {
            configurations: vec![ConfigurationResult {
                labels: Default::default(),
                name: "reservation".into(),
                notes: vec!["best-effort mode".into()],
                metrics: vec![Metric {
                    series: vec![series],
                    ..Metric::latency("response time", Some(1405.9), histogram)
                }],
                counters: vec![
                    Counter::count("xruns", 3),
                    Counter::new("reserved ÷ used", 1.5, "ratio"),
                ],
                why: None,
            }],
            ..RunResults::start("music-isolation")
        }
    }

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("tessera-measure-{}-{name}", std::process::id()))
    }

    #[test]
    fn save_then_load_is_identity() {
        let run = sample_run();
        let path = temp_path("results.json");
        run.save(&path).unwrap();
        let back = RunResults::load(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(back, run);
        assert_eq!(back.metric_names(), vec!["response time"]);
        assert_eq!(back.configurations[0].count("xruns"), Some(3));
        assert_eq!(
            back.configurations[0].counter("reserved ÷ used"),
            Some(&Counter::new("reserved ÷ used", 1.5, "ratio"))
        );
        assert_eq!(back.configurations[0].counter("late"), None);
        assert_eq!(
            back.configurations[0]
                .metric("response time")
                .unwrap()
                .summary
                .count,
            100
        );
    }

    #[test]
    fn files_without_counters_still_load() {
        let mut json = serde_json::to_value(sample_run()).unwrap();
        json["configurations"][0]
            .as_object_mut()
            .unwrap()
            .remove("counters");
        let back: RunResults = serde_json::from_value(json).unwrap();
        assert!(back.configurations[0].counters.is_empty());
        assert_eq!(back.configurations[0].notes, ["best-effort mode"]);
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let missing = temp_path("missing.json");
        let err = RunResults::load(&missing).unwrap_err().to_string();
        assert!(
            err.contains(&missing.display().to_string()) && err.contains("cannot read"),
            "{err}"
        );

        let bad = temp_path("bad.json");
        std::fs::write(&bad, r#"{"tool_version": "0.1.0"}"#).unwrap();
        let err = RunResults::load(&bad).unwrap_err().to_string();
        std::fs::remove_file(&bad).unwrap();
        assert!(err.contains(&bad.display().to_string()), "{err}");
        assert!(err.contains("missing field `started_at`"), "{err}");

        let unwritable = Path::new("/nonexistent-dir/results.json");
        let err = sample_run().save(unwritable).unwrap_err().to_string();
        assert!(err.contains("/nonexistent-dir/results.json"), "{err}");
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let leap_day = UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_661);
        assert_eq!(rfc3339_utc(leap_day), "2000-02-29T01:01:01Z");
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH + Duration::from_secs(1_767_225_599)),
            "2025-12-31T23:59:59Z"
        );
    }
}
