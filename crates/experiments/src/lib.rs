//! Experiments that prove tessera's guarantees: each sets up cells and
//! workloads in several configurations, runs them back to back under the
//! same machine conditions, and hands the measurements to `tessera-measure`
//! for tables and plots.
//!
//! It must never judge a result pass/fail: experiments report, tests assert.

pub mod bench;
pub mod cells;
mod figures;
pub mod harness;
mod interference;
mod jack_peer;
pub mod runner;
mod scratch;
pub mod subject;
mod why;
