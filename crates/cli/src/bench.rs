//! `tessera bench`: benchmarks against the real peers, run on this machine
//! and reported (tables, JSON, a report directory); never judged pass/fail.
//! Thin: the runs live in `tessera_experiments`.

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use tessera_broker::BrokerError;
use tessera_experiments::peer;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// tessera's engine vs Debian's jackd2 and PipeWire (dummy drivers) vs cyclictest: 64 frames at 48 kHz, a chain and a fan-out of 10 loads.
    #[command(after_help = "Examples:\n  \
        sudo tessera bench peer\n  \
        sudo flock /tmp/tessera-machine.lock tessera bench peer --seconds 5 --out results/peer\n\n\
        Needs jackd2, pipewire, pipewire-bin, pipewire-jack, rt-tests and tessera-jack-peer\n\
        (built next to tessera). The JACK clients run on PipeWire through pw-jack.")]
    Peer(PeerArgs),
}

#[derive(Args)]
pub struct PeerArgs {
    /// Measured seconds per configuration (7 configurations run one after the other).
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    /// Report directory (default results/peer-<time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// SCHED_FIFO priority of jackd, tessera's threads and cyclictest (PipeWire sets its own).
    #[arg(long, default_value_t = 70)]
    pub priority: u32,
    /// Run without a 0 µs CPU wake-up latency target (cyclictest then runs with --laptop).
    #[arg(long)]
    pub no_latency_target: bool,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(command: BenchCommand) -> Result<ExitCode, BrokerError> {
    match command {
        BenchCommand::Peer(args) => bench_peer(args),
    }
}

fn bench_peer(args: PeerArgs) -> Result<ExitCode, BrokerError> {
    let mut options = peer::Options::new(args.out.unwrap_or_else(peer::default_out_dir));
    options.seconds = args.seconds;
    options.priority = args.priority;
    options.cpu_latency_target = !args.no_latency_target;
    eprintln!(
        "tessera bench peer: {} configurations of {:.0} s each, results in {}",
        peer::CONFIGURATIONS,
        options.seconds,
        options.out_dir.display()
    );
    let outcome = peer::run(&options, |line| eprintln!("  {line}"))
        .map_err(|e| BrokerError::new("experiment", e.to_string(), e.fix()))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&outcome.results).unwrap_or_default()
        );
    } else {
        println!("\n{}", outcome.table);
        println!("report: {}/README.md", outcome.report_dir.display());
    }
    Ok(ExitCode::SUCCESS)
}
