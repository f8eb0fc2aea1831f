//! The scenario subjects and their registry: the runner asks [`of`] which
//! [`Subject`] (the trait, in `contract`) runs a configuration, starts it,
//! releases it at t0, lets it advance while the run lasts, stops it and has
//! it measure itself; a run's report gets each subject's section in
//! registry order ([`report_sections`]).
//!
//! Each subject lives in a folder of its own below (its run, its typed
//! result and its metrics, its report section) and implements the trait of
//! the leaf `contract`, never importing this registry. A new subject is its
//! folder, its `mod` line and one line in [`SUBJECTS`]; nothing in the
//! runner changes. This module must never know what a subject does.

pub mod adaptation;
pub mod aes67;
pub mod audio_server;
mod contract;
pub mod desktop;
pub mod graph;
pub mod music;
pub mod netphone;
pub mod periodic;
pub mod probe;
pub mod render;

pub(crate) use contract::{Running, Stopped, Subject, Watched};

use std::path::Path;
use tessera_measure::RunResults;
use tessera_scenario::{Configuration, Scenario};

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
    &desktop::Kind,
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
