//! The scenario subjects behind one trait: the runner asks the registry
//! below which [`Subject`] runs a configuration, starts it, releases it at
//! t0, lets it advance while the run lasts, stops it and has it measure
//! itself; a run's report gets each subject's section in registry order.
//!
//! Each subject lives in a folder of its own below (its run, its typed
//! result and its metrics, its report section). A new subject is its folder
//! and one line in [`SUBJECTS`]; nothing else in the runner changes. This
//! module must never know what a subject does.

pub mod adaptation;
pub mod aes67;
pub mod audio_server;
pub mod graph;
pub mod music;
pub mod netphone;
pub mod periodic;
pub mod probe;
pub mod render;

use std::path::Path;
use tessera_measure::{Counter, Metric, RunResults};
use tessera_scenario::{Configuration, Scenario};

/// What a stopped subject measured: its metrics, its counters and notes
/// saying the same in words.
pub(crate) type Measured = (Vec<Metric>, Vec<Counter>, Vec<String>);

/// A kind of scenario subject.
pub(crate) trait Subject: Sync {
    /// Whether it runs `scenario`'s subject in `config` (exactly one of
    /// [`SUBJECTS`] does).
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

    /// Ends what would otherwise wait for the run's natural end, before
    /// [`Running::stop`] (the run was interrupted).
    fn cut_short(&mut self) {}

    /// Stops and joins everything it started, whatever state it is in;
    /// what went wrong on the way goes to `notes`.
    fn stop(self: Box<Self>, notes: &mut Vec<String>) -> Box<dyn Stopped>;
}

/// What a subject left when it stopped: its typed result.
pub(crate) trait Stopped {
    /// Its metrics, counters and notes, measured after the warm-up of
    /// `scenario` (t0: the run's origin).
    fn measure(self: Box<Self>, scenario: &Scenario, t0: u64) -> Measured;
}

/// Every scenario subject, in the order of their report sections.
static SUBJECTS: &[&dyn Subject] = &[
    &periodic::Kind,
    &probe::Kind,
    &graph::Kind,
    &music::Kind,
    &audio_server::Kind,
    &audio_server::network_app::Kind,
    &netphone::Kind,
    &render::Kind,
    &adaptation::Kind,
    &aes67::Kind,
];

/// The subject that runs `config` of `scenario`.
pub(crate) fn of(
    scenario: &Scenario,
    config: &Configuration,
) -> Result<&'static dyn Subject, String> {
    SUBJECTS
        .iter()
        .copied()
        .find(|s| s.runs(scenario, config))
        .ok_or_else(|| format!("no subject runs configuration {:?}", config.name))
}

/// Every subject's section of a run's report, in registry order.
pub(crate) fn report_sections(results: &RunResults, dir: &Path) -> Result<String, String> {
    let mut text = String::new();
    for subject in SUBJECTS {
        text.push_str(&subject.report_section(results, dir)?);
    }
    Ok(text)
}
