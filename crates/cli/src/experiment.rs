//! The experiment commands: `run` (a scenario file), `report` (a report
//! from saved results), `load` (one interference workload by itself) and
//! `probe` (the timer-callback latency probe with cyclictest). Thin: the
//! work is in tessera-experiments and tessera-workloads.

use crate::args::invalid;
use clap::{Args, Subcommand};
use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tessera_broker::BrokerError;
use tessera_experiments::runner::{self, Progress};
use tessera_measure::RunResults;
use tessera_scenario::{parse_duration, Scenario};
use tessera_workloads::external::{self, ExternalLoad};
use tessera_workloads::{ep, hog, io, stream, Window};

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
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ReportArgs {
    /// results.json written by `tessera run`.
    pub results: PathBuf,
    /// Report directory.
    #[arg(long)]
    pub out: PathBuf,
}

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

#[derive(Subcommand)]
pub enum LoadCommand {
    /// Threads burning a share of a CPU each (best-effort unless run in a cell).
    Hog {
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Share of a CPU per thread, in (0, 1].
        #[arg(long, default_value_t = 1.0)]
        load: f64,
        #[command(flatten)]
        common: LoadCommon,
    },
    /// The NAS EP kernel over and over (or once, verified, with --verify).
    Ep {
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Run class S/W/A once and check NPB's sums instead.
        #[arg(long)]
        verify: Option<String>,
        #[command(flatten)]
        common: LoadCommon,
    },
    /// STREAM triad over arrays larger than the cache.
    Stream {
        #[arg(long, default_value_t = 1)]
        threads: usize,
        #[arg(long, default_value_t = 64)]
        mebibytes: usize,
        #[command(flatten)]
        common: LoadCommon,
    },
    /// Writers with periodic fdatasync in a directory.
    Io {
        #[arg(long, default_value_t = 1)]
        threads: usize,
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
        #[command(flatten)]
        common: LoadCommon,
    },
    /// Video players (raw CIF frames, YUV→RGB) feeding the GUI service.
    Video {
        #[arg(long, default_value_t = 2)]
        players: usize,
        /// Frames per second of each player, in (0, 240].
        #[arg(long, default_value_t = 30.0)]
        fps: f64,
        /// Threads of the GUI service.
        #[arg(long, default_value_t = 1)]
        gui_threads: usize,
        /// Where the raw video file is generated once and reused (default: the temp dir).
        #[arg(long)]
        dir: Option<PathBuf>,
        #[command(flatten)]
        common: LoadCommon,
    },
    /// Debian's stress-ng with the given stressor arguments.
    StressNg {
        #[command(flatten)]
        common: LoadCommon,
        #[arg(last = true, required = true)]
        args: Vec<String>,
    },
}

#[derive(Args)]
pub struct LoadCommon {
    /// How long to run.
    #[arg(long, default_value = "10s")]
    pub duration: String,
    #[arg(long)]
    pub json: bool,
}

/// The run's progress: one line redrawn in place on a terminal; in a log,
/// a plain line when a configuration starts, every 10 s, and at its end.
fn progress_line() -> impl FnMut(&Progress) {
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

/// The progress line of a run made of steps (configurations, trials):
/// redrawn in place on a terminal; in a log, printed when a step starts,
/// every 10 s of it, and at its end.
pub struct ProgressLine {
    terminal: bool,
    /// The step and its 10 s slice last printed.
    last: Option<(usize, u64)>,
}

impl ProgressLine {
    pub fn new() -> ProgressLine {
        ProgressLine {
            terminal: std::io::stderr().is_terminal(),
            last: None,
        }
    }

    /// Shows `line`, about `step`, `elapsed` into its `total`.
    pub fn show(&mut self, step: usize, elapsed: Duration, total: Duration, line: &str) {
        let done = elapsed >= total;
        let slice = (step, elapsed.as_secs() / 10);
        show_progress(self.terminal, line, done, self.last != Some(slice) || done);
        self.last = Some(slice);
    }
}

/// A progress line: redrawn in place on a terminal (and ended when
/// `done`); in a log, printed when `log` says so.
pub fn show_progress(terminal: bool, line: &str, done: bool, log: bool) {
    if terminal {
        eprint!("\r{line}\x1b[K");
        if done {
            eprintln!();
        }
    } else if log {
        eprintln!("{line}");
    }
    let _ = std::io::stderr().flush();
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
        println!("- {}: {}", c.name, c.notes.join("; "));
    }
    println!(
        "\nreport: {}/README.md (results.json, PNG and SVG plots beside it)",
        dir.display()
    );
    ExitCode::SUCCESS
}

/// `tessera demo`: the seed's §4.1 experiment, about a minute, on whatever
/// cores exist; the Δt table, the comparison with the seed, the report.
pub fn music_demo(
    opts: crate::args::DemoArgs,
    privileged: bool,
    stamp: u64,
) -> Result<ExitCode, BrokerError> {
    if !(opts.seconds.is_finite() && opts.seconds >= 2.0) {
        return Err(invalid(
            format!("--seconds {}", opts.seconds),
            "give at least 2 seconds per configuration, e.g. --seconds 14",
        ));
    }
    let scenario =
        tessera_experiments::music::seed_scenario(opts.seconds, privileged).map_err(|e| {
            BrokerError::new("invalid", e, "report this: the shipped scenario must parse")
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
    let outcome = runner::run(&scenario, &out_dir, progress_line())?;
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

fn run_scenario(
    scenario: &Scenario,
    out: Option<PathBuf>,
    json: bool,
) -> Result<ExitCode, BrokerError> {
    let out_dir = out.unwrap_or_else(|| runner::default_out_dir(scenario));
    eprintln!(
        "tessera run: {} — {} configuration(s), {:.1} s each ({:.1} s warm-up)",
        scenario.name,
        scenario.configurations.len(),
        scenario.total().as_secs_f64(),
        scenario.warmup.as_secs_f64()
    );
    let outcome = runner::run(scenario, &out_dir, progress_line())?;
    Ok(print_outcome(&outcome.results, &outcome.report_dir, json))
}

pub fn run(args: RunArgs) -> Result<ExitCode, BrokerError> {
    let scenario = Scenario::from_file(&args.file).map_err(|e| {
        BrokerError::new(
            "invalid",
            e.to_string(),
            "fix the scenario (docs/scenarios.md)",
        )
    })?;
    if args.scale.is_nan() || args.scale <= 0.0 {
        return Err(invalid("--scale must be positive", "e.g. --scale 0.1"));
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
    run_scenario(&scenario, args.out, args.json)
}

pub fn report(args: ReportArgs) -> Result<ExitCode, BrokerError> {
    let results = RunResults::load(&args.results).map_err(|e| {
        BrokerError::new(
            "invalid",
            e.to_string(),
            "give a results.json written by `tessera run`",
        )
    })?;
    runner::write_report(&results, &args.out)?;
    println!("report: {}/README.md", args.out.display());
    Ok(ExitCode::SUCCESS)
}

pub fn probe(args: ProbeArgs) -> Result<ExitCode, BrokerError> {
    let period = parse_duration(&args.period).map_err(|e| invalid(e, "e.g. --period 5ms"))?;
    if args.print_scenario {
        print!(
            "{}",
            tessera_experiments::probe::scenario_text(period, args.seconds)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let scenario = tessera_experiments::probe::scenario(period, args.seconds)
        .map_err(|e| invalid(e.to_string(), "e.g. --period 5ms --seconds 10"))?;
    run_scenario(&scenario, args.out, args.json)
}

fn window(common: &LoadCommon) -> Result<Window, BrokerError> {
    let d = parse_duration(&common.duration).map_err(|e| invalid(e, "e.g. --duration 10s"))?;
    Ok(Window::lasting(d))
}

fn no_setup(_: usize) -> tessera_workloads::Setup {
    Box::new(|| Ok(()))
}

pub fn load(command: LoadCommand) -> Result<ExitCode, BrokerError> {
    let spawn_error = |e: std::io::Error| BrokerError::new("experiment", e.to_string(), "");
    let (threads, json) = match command {
        LoadCommand::Ep {
            verify: Some(class),
            threads,
            ..
        } => {
            let class = ep::EpClass::parse(&class)
                .ok_or_else(|| invalid(format!("unknown class {class:?}"), "use S, W or A"))?;
            let tally = ep::kernel(class, threads);
            println!(
                "EP class {class:?}: {} pairs, {} accepted, sx {:.15e}, sy {:.15e}: {}",
                tally.pairs,
                tally.accepted(),
                tally.sx,
                tally.sy,
                if tally.verifies(class) {
                    "VERIFIED"
                } else {
                    "NOT verified"
                }
            );
            return Ok(if tally.verifies(class) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        LoadCommand::Video {
            players,
            fps,
            gui_threads,
            dir,
            common,
        } => return crate::video::load(players, fps, gui_threads, dir, &common),
        LoadCommand::StressNg { common, args } => {
            let spec = external::stress_ng("stress-ng", &args, window(&common)?);
            let load = ExternalLoad::spawn(spec, Box::new(|_| Ok(())))
                .map_err(|e| invalid(e, "install stress-ng"))?;
            load.start(tessera_sys::clock::monotonic_ns());
            println!("{}", load.join().describe());
            return Ok(ExitCode::SUCCESS);
        }
        LoadCommand::Hog {
            threads,
            load,
            common,
        } => {
            let spec = hog::HogSpec {
                name: "hog".into(),
                threads,
                load,
                window: window(&common)?,
            };
            (
                hog::spawn(&spec, no_setup).map_err(spawn_error)?,
                common.json,
            )
        }
        LoadCommand::Ep {
            threads, common, ..
        } => (
            ep::spawn("ep", threads, window(&common)?, no_setup).map_err(spawn_error)?,
            common.json,
        ),
        LoadCommand::Stream {
            threads,
            mebibytes,
            common,
        } => {
            let spec = stream::StreamSpec {
                name: "stream".into(),
                threads,
                mebibytes,
                window: window(&common)?,
            };
            (
                stream::spawn(&spec, no_setup).map_err(spawn_error)?,
                common.json,
            )
        }
        LoadCommand::Io {
            threads,
            dir,
            common,
        } => {
            let spec = io::IoSpec {
                name: "io".into(),
                threads,
                dir,
                block_kib: 256,
                file_mib: 64,
                sync_mib: 8,
                window: window(&common)?,
            };
            (
                io::spawn(&spec, no_setup).map_err(spawn_error)?,
                common.json,
            )
        }
    };
    threads.start(tessera_sys::clock::monotonic_ns());
    let report = threads.join();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "name": report.name, "threads": report.threads.len(), "cpu_s": report.cpu_ns() as f64 / 1e9,
                "wall_s": report.wall_s(), "cpus_used": report.cpus_used(), "units": report.units(),
                "unit": report.unit, "errors": report.errors(),
            })
        );
    } else {
        println!("{}", report.describe());
    }
    Ok(ExitCode::SUCCESS)
}
