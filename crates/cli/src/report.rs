//! `tessera report`: the report (Markdown, PNG and SVG plots) of a saved
//! results.json. Thin: the report is written by tessera-experiments.

use crate::failure::Failure;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use tessera_broker::{BrokerError, ErrorCode};
use tessera_experiments::runner;
use tessera_measure::RunResults;

#[derive(Args)]
pub struct ReportArgs {
    /// results.json written by `tessera run`.
    pub results: PathBuf,
    /// Report directory.
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(args: ReportArgs) -> Result<ExitCode, Failure> {
    let results = RunResults::load(&args.results).map_err(|e| {
        BrokerError::new(
            ErrorCode::Invalid,
            e.to_string(),
            "give a results.json written by `tessera run`",
        )
    })?;
    runner::write_report(&results, &args.out)?;
    println!("report: {}/README.md", args.out.display());
    Ok(ExitCode::SUCCESS)
}
