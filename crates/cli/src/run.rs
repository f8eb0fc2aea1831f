//! `tessera run`: a scenario file's configurations back to back, their
//! results and report; and the run's progress line and printed outcome,
//! which `probe` and `demo` share. Thin: the work is in tessera-experiments.

use crate::failure::Failure;
use crate::parse::invalid;
use crate::progress::ProgressLine;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use tessera_broker::{BrokerError, ErrorCode};
use tessera_experiments::runner::{self, Progress};
use tessera_measure::RunResults;
use tessera_scenario::Scenario;

#[derive(Args)]
pub struct RunArgs {
    /// Scenario file (TOML; see docs/scenarios.md).
    pub file: PathBuf,
    /// Report directory (default results/<scenario>-<time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Multiply every time of the scenario (duration, warm-up, starts) by this.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Only check the scenario; run nothing.
    #[arg(long)]
    pub check: bool,
    /// Trace the subject's threads and say why each deadline was missed:
    /// causes per configuration and metric in results.json and the report
    /// (docs/why.md; needs root, else every miss is "unknown").
    #[arg(long)]
    pub why: bool,
    #[arg(long)]
    pub json: bool,
}

/// The run's progress: one line redrawn in place on a terminal; in a log,
/// a plain line when a configuration starts, every 10 s, and at its end.
pub fn progress_line() -> impl FnMut(&Progress) {
    let mut shown = ProgressLine::new();
    move |p: &Progress| {
        let line = format!(
            "  [{}/{}] {} — {:.0}/{:.0} s",
            p.index,
            p.count,
            p.configuration,
            p.elapsed.min(p.total).as_secs_f64(),
            p.total.as_secs_f64()
        );
        shown.show(p.index, p.elapsed, p.total, &line);
    }
}

fn print_outcome(results: &RunResults, dir: &std::path::Path, json: bool) -> ExitCode {
    if json {
        println!("{}", serde_json::to_string(results).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    for metric in results.metric_names() {
        println!(
            "\n{metric}\n{}",
            tessera_measure::summary_table(results, metric)
        );
    }
    for c in &results.configurations {
        println!("- {}: {}", c.name, c.facts().join("; "));
    }
    println!(
        "\nreport: {}/README.md (results.json, PNG and SVG plots beside it)",
        dir.display()
    );
    ExitCode::SUCCESS
}

pub fn run_scenario(
    scenario: &Scenario,
    out: Option<PathBuf>,
    options: runner::Options,
    json: bool,
) -> Result<ExitCode, Failure> {
    let out_dir = out.unwrap_or_else(|| runner::default_out_dir(scenario));
    eprintln!(
        "tessera run: {} — {} configuration(s), {:.1} s each ({:.1} s warm-up)",
        scenario.name,
        scenario.configurations.len(),
        scenario.total().as_secs_f64(),
        scenario.warmup.as_secs_f64()
    );
    let outcome = runner::run_with(scenario, &out_dir, options, progress_line())?;
    Ok(print_outcome(&outcome.results, &outcome.report_dir, json))
}

pub fn run(args: RunArgs) -> Result<ExitCode, Failure> {
    let scenario = Scenario::from_file(&args.file).map_err(|e| {
        BrokerError::new(
            ErrorCode::Invalid,
            e.to_string(),
            "fix the scenario (docs/scenarios.md)",
        )
    })?;
    if args.scale.is_nan() || args.scale <= 0.0 {
        return Err(invalid("--scale must be positive", "e.g. --scale 0.1").into());
    }
    let scenario = scenario.scaled(args.scale);
    if args.check {
        println!(
            "{}: valid, {} configuration(s)",
            args.file.display(),
            scenario.configurations.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let options = runner::Options { why: args.why };
    run_scenario(&scenario, args.out, options, args.json)
}
