//! tessera-measure: the measurement layer (layer 9 of the design).
//!
//! Owns everything that turns raw timings into evidence: exact statistics
//! ([`stats`]), allocation-free latency histograms ([`histogram`]), per-cycle
//! time series ([`series`]), the machine description ([`machine`]), the
//! results files written by experiment runs ([`results`]), plots ([`plot`]),
//! Markdown reports ([`report`]) and the causes of misses ([`why`]).
//!
//! It must never depend on a tessera crate above the kernel's (`sys`, for
//! the machine) and attribution's (`why`, for the vocabulary of causes),
//! nor touch the scheduler: data flows into it, nothing flows back.

pub mod histogram;
pub mod machine;
pub mod plot;
pub mod report;
pub mod results;
pub mod series;
pub mod stats;
pub mod units;
pub mod why;

pub use histogram::LatencyHistogram;
pub use machine::MachineInfo;
pub use plot::{PlotError, PlotFiles};
pub use report::{summary_table, write_report, ReportError, ReportFiles};
pub use results::{ConfigurationResult, Counter, Metric, ResultsError, RunResults};
pub use series::Series;
pub use stats::Summary;
pub use why::{MetricCauses, WatchedThread, Why};

/// Names without repeats, in order of first appearance (tables and legends
/// keep the order of the run).
fn distinct_in_order<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut distinct: Vec<&str> = Vec::new();
    for name in names {
        if !distinct.contains(&name) {
            distinct.push(name);
        }
    }
    distinct
}
