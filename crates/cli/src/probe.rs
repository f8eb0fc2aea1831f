//! `tessera probe`: the timer-callback latency probe (seed 002) under
//! 0/50/80/100 % CPU load, with cyclictest, run as a scenario. Thin: the
//! probe's scenario is tessera-experiments'.

use crate::failure::Failure;
use crate::parse;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct ProbeArgs {
    /// Callback period.
    #[arg(long, default_value = "5ms")]
    pub period: String,
    /// Seconds per configuration (16 configurations: 4 loads × plain, FIFO, reserved, cyclictest).
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Report directory (default results/probe-<time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the probe's scenario file and exit.
    #[arg(long)]
    pub print_scenario: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ProbeArgs) -> Result<ExitCode, Failure> {
    let period = parse::time(&args.period, "--period 5ms")?;
    if args.print_scenario {
        print!(
            "{}",
            tessera_experiments::subject::probe::scenario_text(period, args.seconds)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let scenario = tessera_experiments::subject::probe::scenario(period, args.seconds)
        .map_err(|e| parse::invalid(e.to_string(), "e.g. --period 5ms --seconds 10"))?;
    crate::run::run_scenario(&scenario, args.out, Default::default(), args.json)
}
