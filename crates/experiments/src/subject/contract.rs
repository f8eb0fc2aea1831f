//! What every scenario subject provides, in the order a run uses it: a
//! [`Subject`] says whether it runs a configuration and starts it, a
//! [`Running`] subject is released, advanced, perhaps cut short and
//! stopped, a [`Stopped`] one measures itself.
//!
//! A leaf: the subjects implement these traits and the registry above
//! lists them, so neither imports the other. It must never name a subject.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tessera_measure::{Counter, Metric, RunResults};
use tessera_scenario::{Configuration, Scenario};

/// What a stopped subject measured: its metrics, its counters, the labels
/// its report shows as they are (words, not figures), and notes saying the
/// same in words.
#[derive(Debug, Default)]
pub struct Measured {
    pub metrics: Vec<Metric>,
    pub counters: Vec<Counter>,
    pub labels: BTreeMap<String, String>,
    pub notes: Vec<String>,
}

/// The label naming the scheduling a configuration ran its subject with
/// (e.g. "SCHED_FIFO 70", "guarded").
pub(crate) const SCHEDULING: &str = "scheduling";

impl Measured {
    pub fn new(metrics: Vec<Metric>, counters: Vec<Counter>, notes: Vec<String>) -> Measured {
        Measured {
            metrics,
            counters,
            labels: BTreeMap::new(),
            notes,
        }
    }

    /// With the label `name` saying `value`.
    pub fn label(mut self, name: &str, value: impl Into<String>) -> Measured {
        self.labels.insert(name.to_string(), value.into());
        self
    }

    /// A configuration `name`'s result of this alone (the runner adds the
    /// loads' figures to a run's).
    #[cfg(test)]
    pub fn into_result(self, name: &str) -> tessera_measure::ConfigurationResult {
        tessera_measure::ConfigurationResult {
            name: name.into(),
            notes: self.notes,
            metrics: self.metrics,
            counters: self.counters,
            labels: self.labels,
            why: None,
        }
    }
}

/// A kind of scenario subject.
pub(crate) trait Subject: Sync {
    /// Whether it runs `scenario`'s subject in `config` (exactly one
    /// registered subject does).
    fn runs(&self, scenario: &Scenario, config: &Configuration) -> bool;

    /// Sets it up for `config`, waiting for [`Running::release`].
    fn start(
        &self,
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<Box<dyn Running>, String>;

    /// Its section of a run's report (README.md), with any figures written
    /// into `dir`; empty when the run has none of its configurations.
    fn report_section(&self, _results: &RunResults, _dir: &Path) -> Result<String, String> {
        Ok(String::new())
    }
}

/// A subject set up for one configuration.
pub(crate) trait Running {
    /// Releases it: t0 is the run's origin (CLOCK_MONOTONIC ns).
    fn release(&mut self, t0: u64) -> Result<(), String>;

    /// Does what is due `elapsed_ns` after t0; returns when the next thing
    /// is due (ns after t0), if anything is.
    fn advance(&mut self, _elapsed_ns: u64) -> Result<Option<u64>, String> {
        Ok(None)
    }

    /// Its real-time threads, each with the metric its misses count in,
    /// for `tessera run --why` to trace from the release on; a subject
    /// that does not know its threads names none (its misses are then
    /// "unknown"). Asked again through the run: threads that appeared
    /// since (clients that open on the timeline) are traced from then on.
    fn watched(&self) -> Vec<Watched> {
        Vec::new()
    }

    /// Ends what would otherwise wait for the run's natural end, before
    /// [`Running::stop`] (the run was interrupted).
    fn cut_short(&mut self) {}

    /// Stops and joins everything it started, whatever state it is in;
    /// what went wrong on the way goes to `notes`.
    fn stop(self: Box<Self>, notes: &mut Vec<String>) -> Box<dyn Stopped>;
}

/// A thread of a running subject and what its cycles are judged by
/// (`None`: its reservation's, when it has one).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Watched {
    pub tid: i32,
    /// The metric its misses count in.
    pub metric: String,
    pub deadline: Option<Duration>,
    /// Its releases lie on a grid of this period (absolute timers).
    pub period: Option<Duration>,
    pub budget: Option<Duration>,
    /// Judged with a chain's other threads (an audio server's driver and
    /// its clients), not alone.
    pub chain: Option<tessera_why::ChainLink>,
    /// With a chain: the metric that counts each client ending late.
    pub thread_metric: Option<String>,
}

/// What a subject left when it stopped: its typed result.
pub(crate) trait Stopped {
    /// Its metrics, counters and notes, measured after the warm-up of
    /// `scenario` (t0: the run's origin).
    fn measure(self: Box<Self>, scenario: &Scenario, t0: u64) -> Measured;
}
