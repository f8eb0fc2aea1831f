//! `tessera trace window`: where a time-triggered cell's thread runs within
//! its period, as a text timeline, a summary, or JSON.

use crate::failure::Failure;
use clap::Args;
use std::process::ExitCode;
use std::time::Duration;
use tessera_broker::Session;

#[derive(Args)]
#[command(
    after_help = "Examples:\n  tessera trace window\n  tessera trace window --runtime 2ms --period 10ms --seconds 2 --core 1 --json\n  tessera trace window --cooperative"
)]
pub struct WindowArgs {
    /// The window: runtime at the start of every period.
    #[arg(long, default_value = "2ms")]
    pub runtime: String,
    #[arg(long, default_value = "10ms")]
    pub period: String,
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// The core (default: where admission places it).
    #[arg(long)]
    pub core: Option<usize>,
    /// Periods shown in the timeline.
    #[arg(long, default_value_t = 12)]
    pub periods: usize,
    /// The thread ends its own window (sched_yield), as tessera's runtime does.
    #[arg(long)]
    pub cooperative: bool,
    /// Print the whole trace as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn window(args: WindowArgs) -> Result<ExitCode, Failure> {
    let mut session = Session::connect()?;
    let (runtime, period) = (
        crate::parse::time(&args.runtime, "--runtime 2ms")?,
        crate::parse::time(&args.period, "--period 10ms")?,
    );
    let seconds = Duration::from_secs_f64(args.seconds.clamp(0.05, 600.0));
    eprintln!(
        "tracing a thread that spins inside a time-triggered cell ({} every {}) for {:.1} s…",
        args.runtime,
        args.period,
        seconds.as_secs_f64()
    );
    let trace = tessera_experiments::bench::windows::trace(
        &mut session,
        runtime,
        period,
        args.core,
        seconds,
        args.cooperative,
    )?;
    if args.json {
        println!("{}", serde_json::to_string(&trace).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(banner) = session.status()?.banner {
        println!("!! {banner}\n");
    }
    println!(
        "core {:?}; each row is one period, `#` = the thread ran, `|` = end of the window\n",
        trace.core
    );
    print!("{}", trace.timeline(args.periods, 50));
    println!(
        "\nCPU share {:.3} (reserved {:.3}); {:.1} % of run time inside the windows; most run in one period {:.2} ms (window {:.2} ms); {} run intervals over {:.2} s",
        trace.cpu_share(),
        trace.reserved_share(),
        100.0 * trace.inside_fraction(),
        trace.longest_period_run_ns as f64 / 1e6,
        trace.runtime_ns as f64 / 1e6,
        trace.intervals.len(),
        trace.elapsed_ns as f64 / 1e9
    );
    Ok(ExitCode::SUCCESS)
}
