//! `tessera demo`: the LAN music application (seed 000 §4.1) in its cells,
//! alone and under interference, about a minute; or, with `--isolation`, a
//! periodic task against FIFO hogs. Thin: the experiments are in
//! tessera-experiments; this prints their tables.

use crate::failure::Failure;
use crate::parse;
use crate::run::progress_line;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use tessera_broker::{BrokerError, ErrorCode};
use tessera_experiments::runner;

#[derive(Args)]
pub struct DemoArgs {
    /// Seconds per configuration (4 configurations; 2 without root).
    #[arg(long, default_value_t = 14.0)]
    pub seconds: f64,
    /// Run the earlier, smaller demonstration instead: a periodic task
    /// against equal-priority FIFO hogs on one core, with and without cells.
    #[arg(long)]
    pub isolation: bool,
    /// Core of the --isolation demonstration (default: the last one).
    #[arg(long, requires = "isolation")]
    pub core: Option<usize>,
    /// The --isolation task's reservation per 1333 µs period (its work is 400 µs).
    #[arg(long, default_value = "500us")]
    pub task_budget: String,
    /// Report directory (default results/demo-<time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Trace the application's threads and say why each deadline was
    /// missed, in the report and results.json (docs/why.md).
    #[arg(long, conflicts_with = "isolation")]
    pub why: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(opts: DemoArgs) -> Result<ExitCode, Failure> {
    let privileged = tessera_broker::Mode::detect() == tessera_broker::Mode::Guaranteed;
    if !privileged {
        eprintln!(
            "tessera demo: {}",
            tessera_broker::Mode::detect().banner().unwrap_or_default()
        );
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match opts.isolation {
        true => isolation_demo(opts, privileged, stamp),
        false => music_demo(opts, privileged, stamp),
    }
}

fn isolation_demo(opts: DemoArgs, privileged: bool, stamp: u64) -> Result<ExitCode, Failure> {
    if !privileged {
        eprintln!("tessera demo: only the plain SCHED_OTHER configuration can run; nothing here is guaranteed.\n");
    }
    let out_dir = opts
        .out
        .unwrap_or_else(|| std::path::PathBuf::from(format!("results/isolation-{stamp}")));
    let options = tessera_experiments::bench::isolation::Options {
        seconds: opts.seconds,
        core: opts.core,
        task_budget: parse::time(&opts.task_budget, "--task-budget 500us")?,
        out_dir,
        configurations: tessera_experiments::bench::isolation::Configuration::available(privileged),
    };
    eprintln!(
        "tessera demo: why cells exist — a periodic task (400 µs of work every 1333 µs) against two \
         equal-priority FIFO hogs (3 ms every 10 ms), all on one core; {:.0} s per configuration",
        opts.seconds
    );
    let outcome =
        tessera_experiments::bench::isolation::run(&options, |line| eprintln!("  {line}"))?;
    if opts.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&outcome.results).unwrap_or_default()
        );
    } else {
        println!("\n{}", outcome.table);
        for c in &outcome.results.configurations {
            println!("- {}: {}", c.name, c.facts().join("; "));
        }
        println!(
            "\nreport: {}/README.md (plots: PNG and SVG)",
            outcome.report_dir.display()
        );
        println!(
            "again: tessera demo --isolation --seconds {} --core {}",
            opts.seconds,
            opts.core
                .map(|c| c.to_string())
                .unwrap_or_else(|| "LAST".into())
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `tessera demo`: the seed's §4.1 experiment, about a minute, on whatever
/// cores exist; the Δt table, the comparison with the seed, the report.
fn music_demo(opts: DemoArgs, privileged: bool, stamp: u64) -> Result<ExitCode, Failure> {
    if !(opts.seconds.is_finite() && opts.seconds >= 2.0) {
        return Err(parse::invalid(
            format!("--seconds {}", opts.seconds),
            "give at least 2 seconds per configuration, e.g. --seconds 14",
        )
        .into());
    }
    let scenario = tessera_experiments::subject::music::seed_scenario(opts.seconds, privileged)
        .map_err(|e| {
            BrokerError::new(
                ErrorCode::Invalid,
                e,
                "report this: the shipped scenario must parse",
            )
        })?;
    if !privileged {
        eprintln!(
            "tessera demo: without CAP_SYS_NICE no cell, reservation or FIFO priority can be set: \
             the application runs best-effort (SCHED_OTHER) alone and under Group 2, and nothing \
             it measures is guaranteed.\n"
        );
    }
    eprintln!(
        "tessera demo: the LAN music application of seed 000 (SLABS emulator → network service → \
         Migrator Synthesizer → back) on loopback, {} cores; Δt = t2 − t1 of every package against \
         the 1.4059 ms deadline",
        tessera_sys::kernel::online_cpus().map_or(0, |c| c.len())
    );
    let out_dir = opts
        .out
        .unwrap_or_else(|| PathBuf::from(format!("results/demo-{stamp}")));
    let options = runner::Options { why: opts.why };
    let outcome = runner::run_with(&scenario, &out_dir, options, progress_line())?;
    let results = &outcome.results;
    if opts.json {
        println!("{}", serde_json::to_string(results).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    for metric in [
        tessera_music::RESPONSE_METRIC,
        tessera_music::SERVICE_METRIC,
        tessera_music::EMULATOR_METRIC,
    ] {
        println!(
            "\n{metric}\n{}",
            tessera_measure::summary_table(results, metric)
        );
    }
    println!(
        "seed 000 (Fig. 7, 16 hardware threads, 3 min): 0 misses alone and with Group 2; \
         max 1336 → 1405 µs, mean 997.5 → 1024.6 µs."
    );
    println!(
        "\nreport: {}/README.md (every configuration's notes; histograms and CDFs as PNG and SVG)",
        outcome.report_dir.display()
    );
    println!("the full experiment (3 min per configuration): tessera run scenarios/seed-4.1.toml");
    Ok(ExitCode::SUCCESS)
}
