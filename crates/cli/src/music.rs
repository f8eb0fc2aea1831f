//! `tessera music`: the LAN music application of seed 000 §3 — run the
//! Migrator Synthesizer on the packet driver against the SLABS emulator and
//! report Δt and tf − t0, or run the emulator alone against an application
//! elsewhere. Thin: everything lives in `tessera_music`; this file parses
//! and prints.

use crate::failure::{failed, Failure};
use crate::parse::invalid;
use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tessera_broker::BrokerError;
use tessera_measure::Summary;
use tessera_music::emulator::{self, EmulatorConfig, EmulatorReport};
use tessera_music::{app::DEADLINE, Options, EMULATOR_METRIC, RESPONSE_METRIC, SERVICE_METRIC};

#[derive(Subcommand)]
pub enum MusicCommand {
    /// Run the application (network, synth and console cells) and the SLABS emulator on loopback or across a veth pair (--lan); Δt (t2 − t1), tf − t0, misses, pacing.
    #[command(after_help = "Examples:\n  \
        sudo tessera music run --seconds 20\n  \
        sudo tessera music run --lan --seconds 20\n  \
        sudo tessera music run --workers 1 --osc 127.0.0.1:57120\n  \
        tessera music run --seconds 5 --pads 0-7 --pressure 0.5 --json\n  \
        tessera music run --gesture take1.txt --out results/music")]
    Run(RunArgs),
    /// Run the SLABS emulator alone against an application listening at ADDR.
    #[command(after_help = "Example:\n  tessera music emulate --to 10.213.0.1:47213 --seconds 10")]
    Emulate(EmulateArgs),
}

#[derive(Args)]
pub struct RunArgs {
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    #[command(flatten)]
    pub input: crate::synth::InputArgs,
    /// Seconds at the start that are not measured.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Do not ask for cells even when privileged.
    #[arg(long)]
    pub no_cell: bool,
    /// Threads of the synth cell beside its communication thread: the
    /// object nodes are shared out among them (one reservation each) and
    /// the communication thread only starts and ends cycles, as in seed
    /// 000. With 0 the communication thread runs the objects itself.
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Put the SLABS emulator in a network namespace of its own, joined to
    /// this machine by a veth pair (the seed's LAN; root only; both are
    /// removed when the run ends), instead of on loopback.
    #[arg(long)]
    pub lan: bool,
    /// Take OSC controls (/migrator/gain, /migrator/table, …) at this UDP
    /// address, e.g. 127.0.0.1:57120.
    #[arg(long)]
    pub osc: Option<SocketAddr>,
    /// Report directory (default results/music-<unix time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct EmulateArgs {
    /// The application's packet socket.
    #[arg(long)]
    pub to: SocketAddr,
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    #[command(flatten)]
    pub input: crate::synth::InputArgs,
}

pub fn run(command: MusicCommand) -> Result<ExitCode, Failure> {
    match command {
        MusicCommand::Run(args) => run_app(args),
        MusicCommand::Emulate(args) => emulate(args),
    }
}

fn seconds(value: f64, flag: &str) -> Result<Duration, BrokerError> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| invalid(format!("{flag} {value}"), "give a number of seconds ≥ 0"))
}

fn run_app(args: RunArgs) -> Result<ExitCode, Failure> {
    let out = args.out.unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        PathBuf::from(format!("results/music-{now}"))
    });
    let mut options = Options::new(args.seconds, crate::synth::gesture(&args.input)?);
    options.warmup = seconds(args.warmup, "--warmup")?;
    options.cell = !args.no_cell;
    options.workers = args.workers;
    options.osc = args.osc;
    options.lan = args.lan;
    if args.lan && !tessera_sys::caps::is_root() {
        return Err(failed(
            "--lan creates a network namespace and a veth pair, which needs root",
            "run `sudo tessera music run --lan`, or leave out --lan to run on loopback",
        ));
    }
    options.out_dir = Some(out.clone());
    seconds(args.seconds, "--seconds")?;
    let mode = tessera_broker::Mode::detect();
    let in_cells = options.cell && mode == tessera_broker::Mode::Guaranteed;
    if !args.json {
        if let (false, Some(banner)) = (args.no_cell, mode.banner()) {
            eprintln!(
                "tessera music: {banner}\ntessera music: the cells need root; every thread runs \
                 best-effort (SCHED_OTHER)\n"
            );
        }
        eprintln!(
            "tessera music: SLABS emulator → network, synth and console {}, {}, {:.0} s",
            if in_cells {
                "cells"
            } else {
                "threads (best-effort, no cells)"
            },
            tessera_music::network_name(args.lan),
            args.seconds
        );
    }
    let outcome = tessera_music::run(&options).map_err(|e| failed(e.to_string(), ""))?;
    if args.json {
        let json = serde_json::to_string_pretty(&outcome.results).unwrap_or_default();
        println!("{json}");
        return Ok(ExitCode::SUCCESS);
    }
    for metric in [RESPONSE_METRIC, SERVICE_METRIC, EMULATOR_METRIC] {
        println!(
            "\n{metric}\n{}",
            tessera_measure::summary_table(&outcome.results, metric)
        );
    }
    for configuration in &outcome.results.configurations {
        for note in &configuration.notes {
            println!("- {note}");
        }
    }
    println!("\nreport: {}/README.md", out.display());
    Ok(ExitCode::SUCCESS)
}

fn emulate(args: EmulateArgs) -> Result<ExitCode, Failure> {
    let duration = seconds(args.seconds, "--seconds")?;
    let config = EmulatorConfig::new(args.to, duration, crate::synth::gesture(&args.input)?);
    let report = emulator::run(&config).map_err(|e| failed(e.to_string(), ""))?;
    print_emulator(&report);
    Ok(ExitCode::SUCCESS)
}

fn print_emulator(report: &EmulatorReport) {
    let deadline_us = DEADLINE.as_nanos() as f64 / 1000.0;
    let s = Summary::from_histogram(&report.response, Some(deadline_us));
    println!(
        "{} packages sent, {} answered, {} unexpected answers",
        report.packages_sent, report.answered, report.unexpected
    );
    println!(
        "tf − t0 (µs): count {} min {:.1} mean {:.1} max {:.1} stdev {:.1} p50 {:.1} p99 {:.1} p99.9 {:.1} misses {}",
        s.count, s.min, s.mean, s.max, s.stdev, s.p50, s.p99, s.p999, s.misses.unwrap_or(0)
    );
    println!(
        "pacing: {:.1} packets/s (nominal {:.1}), send lateness p50 {:.1} µs, p99 {:.1} µs, \
         schedule slipped by {} packages",
        report.achieved_packet_rate(),
        emulator::nominal_packet_rate(),
        report.send_lateness.quantile(0.5) as f64 / 1000.0,
        report.send_lateness.quantile(0.99) as f64 / 1000.0,
        report.slipped_packages
    );
}
