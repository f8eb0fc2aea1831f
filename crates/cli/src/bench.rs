//! `tessera bench`: benchmarks against the real peers, run on this machine
//! and reported (tables, JSON, a report directory); never judged pass/fail.
//! Thin: the runs live in `tessera_experiments` and `tessera_channel::bench`.

use crate::failure::{failed, Failure};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;
use tessera_broker::BrokerError;
use tessera_channel::{bench as channel_bench, ChannelError};
use tessera_experiments::bench::{guard_scale, lowest, peer, rtkit_grants, workgroup};
use tessera_measure::Summary;
use tessera_scenario::ServerKind;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// tessera's engine vs Debian's jackd2 and PipeWire (dummy drivers) vs cyclictest: 64 frames at 48 kHz, a chain and a fan-out of 10 loads.
    #[command(after_help = "Examples:\n  \
        sudo tessera bench peer\n  \
        sudo flock /tmp/tessera-machine.lock tessera bench peer --seconds 5 --out results/peer\n\n\
        Needs jackd2, pipewire, pipewire-bin, pipewire-jack, rt-tests and tessera-jack-peer\n\
        (built next to tessera). The JACK clients run on PipeWire through pw-jack.")]
    Peer(PeerArgs),
    /// A message to another process through a tessera channel (its reader asleep) vs a same-process rtrb hand-off plus one futex wake-up: p50, p99 and their ratios.
    #[command(after_help = "Examples:\n  \
        tessera bench channel\n  \
        flock /tmp/tessera-machine.lock tessera bench channel --messages 5000 --json\n\n\
        Needs no privileges; the receiving process is this program run again.")]
    Channel(ChannelArgs),
    /// A realtime request through tessera's RTKit interface, from the D-Bus call to SCHED_DEADLINE read back: idle and under stress-ng, on a private bus.
    #[command(after_help = "Examples:\n  \
        sudo tessera bench rtkit\n  \
        sudo flock /tmp/tessera-machine.lock tessera bench rtkit --requests 1000 --json\n\n\
        Needs root, dbus-daemon and stress-ng; starts a daemon and a system bus of its own\n\
        (the machine's bus and its RTKit are not touched).")]
    Rtkit(RtkitArgs),
    /// What guarding a full session costs: JACK2 at its client limit and PipeWire with 64 pw-jack clients joining one by one, then applications joining in processes of their own; the guard's and the daemon's CPU, and each client's time from real-time to reserved.
    #[command(after_help = "Examples:\n  \
        sudo tessera bench guard-scale\n  \
        sudo flock /tmp/tessera-machine.lock tessera bench guard-scale --server jackd --json\n  \
        sudo tessera bench guard-scale --clients 8 --steady 5   (a quick look)\n  \
        sudo tessera bench guard-scale --server pipewire --apps 20   (applications joining a desktop's PipeWire)\n\n\
        Needs root, jackd2, pipewire, pipewire-jack and tessera-jack-peer (built next to\n\
        tessera); starts a daemon of its own. Goal: the guard and the daemon together at\n\
        most 1 % of a core, and every client reserved within one control interval (100 ms).")]
    GuardScale(GuardScaleArgs),
    /// The lowest buffer that holds: for jackd2 and PipeWire with 10 load clients under two FIFO rt-app tasks and stress-ng, the smallest buffer (16–1024 frames at 48 kHz) with no xrun in a 60 s trial, plain FIFO against `tessera guard`.
    #[command(after_help = "Examples:\n  \
        sudo flock /tmp/tessera-machine.lock tessera bench lowest\n  \
        sudo tessera bench lowest --servers jackd --seconds 20 --out results/lowest-jack\n  \
        sudo tessera bench lowest --frames 128,256,512 --seconds 10 --json\n\n\
        Each trial runs the server (jackd -R -P 70 on its dummy driver, or a private headless\n\
        PipeWire), tessera-jack-peer with 10 chained clients of 5 % plus a monitor, two rt-app\n\
        tasks of 3 ms every 10 ms at the server's SCHED_FIFO priority and stress-ng --cpu 2;\n\
        \"guarded\" adds `tessera guard` (its defaults) as a child. A bisection over the sizes\n\
        (3 trials per configuration for the 7 defaults) assumes holding is monotonic in the\n\
        buffer size. jackd fails on its xruns; PipeWire, which tells JACK clients of none, on\n\
        skipped periods and late cycles. At the default 60 s the run takes about 13 minutes.\n\
        Everything started is stopped by its PID, also on Ctrl-C. Needs root, jackd2, pipewire,\n\
        pipewire-bin, pipewire-jack, rt-app, stress-ng and tessera-jack-peer (built beside tessera).")]
    Lowest(LowestArgs),
    /// Workgroups against the guard: a C host (a callback and 3 workers) whose chain steps 30 → 70 % of the period and back, under the §4.4 interference, in a workgroup, under the guard, under a fixed 95 % share and as plain FIFO.
    #[command(after_help = "Examples:\n  \
        sudo flock /tmp/tessera-machine.lock tessera bench workgroup\n  \
        sudo tessera bench workgroup --seconds 30 --step-seconds 5 --out results/workgroup\n  \
        sudo tessera bench workgroup --seconds 4 --step-seconds 2 --json   (a quick look)\n\n\
        The host is compiled with cc against libtessera (built beside tessera) at the start;\n\
        its threads run SCHED_FIFO 70 beside two rt-app tasks of 3 ms every 10 ms at the same\n\
        priority and stress-ng --cpu 2. Each configuration has a daemon of its own; everything\n\
        started is stopped by its PID, also on Ctrl-C. Reported per configuration: missed\n\
        cycles per step, cycles to converge after the 30 → 70 % step, steady-state reserved ÷\n\
        the members' p99 demand, and the interval calls' cost. Needs root, gcc, rt-app and\n\
        stress-ng.")]
    Workgroup(WorkgroupArgs),
}

#[derive(Args)]
pub struct WorkgroupArgs {
    /// Measured seconds per configuration (4 configurations run one after the other).
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Seconds between two steps of the chain's work (30 % → 70 % → 30 % …).
    #[arg(long, default_value_t = 10)]
    pub step_seconds: u64,
    /// Report directory (default results/workgroup-<time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct GuardScaleArgs {
    /// `jackd`, `pipewire` or `both`.
    #[arg(long, default_value = "both")]
    pub server: String,
    /// Load clients (default: 60 on JACK2, its limit with the guard's and the monitor's; 64 on PipeWire).
    #[arg(long)]
    pub clients: Option<usize>,
    /// Between two clients joining, in ms.
    #[arg(long, default_value_t = 250)]
    pub join_every_ms: u64,
    /// Seconds all clients run together.
    #[arg(long, default_value_t = 20.0)]
    pub steady: f64,
    /// Frames per period at 48 kHz.
    #[arg(long, default_value_t = 256)]
    pub frames: u32,
    /// Each client's work, fraction of the period.
    #[arg(long, default_value_t = 0.005)]
    pub load: f64,
    /// Applications (one client each, a process of their own) started one after another after the steady phase.
    #[arg(long, default_value_t = 8)]
    pub apps: usize,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct LowestArgs {
    /// Measured seconds per trial.
    #[arg(long, default_value_t = 60.0)]
    pub seconds: f64,
    /// Seconds of each trial before the measurement (clients joining, the guard's first reservations).
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Servers to measure, comma-separated: jackd, pipewire.
    #[arg(long, value_delimiter = ',', default_value = "jackd,pipewire")]
    pub servers: Vec<String>,
    /// Buffer sizes to search, comma-separated powers of two (16–4096), at 48 kHz.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "16,32,64,128,256,512,1024"
    )]
    pub frames: Vec<u32>,
    /// jackd's SCHED_FIFO priority (-P), and the rt-app tasks' beside it (PipeWire sets its own, 88).
    #[arg(long, default_value_t = 70)]
    pub priority: u32,
    /// Report directory (default results/lowest-<time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct RtkitArgs {
    /// Requests per configuration (2 configurations).
    #[arg(long, default_value_t = 400)]
    pub requests: usize,
    /// Pause between requests, in ms.
    #[arg(long, default_value_t = 50)]
    pub interval_ms: u64,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
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

#[derive(Args)]
pub struct ChannelArgs {
    /// Messages per configuration.
    #[arg(long, default_value_t = 2000)]
    pub messages: usize,
    /// Pause before each message, in µs (long enough for the reader to fall asleep).
    #[arg(long, default_value_t = 500)]
    pub interval_us: u64,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Run as the receiving process of a run, on this abstract socket (internal).
    #[arg(long, hide = true)]
    pub receiver: Option<String>,
}

pub fn run(command: BenchCommand) -> Result<ExitCode, Failure> {
    match command {
        BenchCommand::Peer(args) => bench_peer(args),
        BenchCommand::Channel(args) => bench_channel(args),
        BenchCommand::Rtkit(args) => bench_rtkit(args),
        BenchCommand::GuardScale(args) => bench_guard_scale(args),
        BenchCommand::Lowest(args) => bench_lowest(args),
        BenchCommand::Workgroup(args) => bench_workgroup(args),
    }
}

fn bench_peer(args: PeerArgs) -> Result<ExitCode, Failure> {
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
        .map_err(|e| failed(e.to_string(), e.fix()))?;
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

fn channel_failed(e: ChannelError) -> Failure {
    failed(e.to_string(), e.fix())
}

fn bench_channel(args: ChannelArgs) -> Result<ExitCode, Failure> {
    if let Some(socket) = args.receiver {
        channel_bench::serve_receiver(&socket).map_err(channel_failed)?;
        return Ok(ExitCode::SUCCESS);
    }
    let exe = std::env::current_exe().map_err(|e| failed(format!("find this program: {e}"), ""))?;
    let mut receiver = Command::new(exe);
    receiver.args(["bench", "channel", "--receiver"]);
    let options = channel_bench::Options {
        messages: args.messages,
        interval: Duration::from_micros(args.interval_us),
    };
    eprintln!(
        "tessera bench channel: {} messages per configuration, one every {} µs",
        options.messages, args.interval_us
    );
    let samples = channel_bench::run(&options, receiver).map_err(channel_failed)?;
    let in_us = |ns: &[f64]| ns.iter().map(|ns| ns / 1e3).collect::<Vec<_>>();
    let across = Summary::from_samples(&in_us(&samples.cross_process_ns), None);
    let within = Summary::from_samples(&in_us(&samples.same_process_ns), None);
    let (p50_ratio, p99_ratio) = (across.p50 / within.p50, across.p99 / within.p99);
    if args.json {
        let json = serde_json::json!({
            "messages": options.messages, "interval_us": args.interval_us,
            "cross_process_us": across, "same_process_us": within,
            "p50_ratio": p50_ratio, "p99_ratio": p99_ratio,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&json).unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("configuration                         count  p50 (µs)  p99 (µs)  max (µs)");
    for (name, s) in [
        ("across processes (tessera channel)", &across),
        ("same process (rtrb + futex wake)", &within),
    ] {
        println!(
            "{name:<36} {:>6} {:>9.1} {:>9.1} {:>9.1}",
            s.count, s.p50, s.p99, s.max
        );
    }
    println!("ratio across/same: p50 {p50_ratio:.2}, p99 {p99_ratio:.2} (goal: p99 at most 2)");
    Ok(ExitCode::SUCCESS)
}

fn bench_rtkit(args: RtkitArgs) -> Result<ExitCode, Failure> {
    let unfixed = |e: String| failed(e, "");
    let options = rtkit_grants::Options {
        requests: args.requests,
        interval: Duration::from_millis(args.interval_ms),
        tessera: std::env::current_exe().map_err(|e| unfixed(format!("find this program: {e}")))?,
    };
    eprintln!(
        "tessera bench rtkit: {} requests per configuration, one every {} ms",
        options.requests, args.interval_ms
    );
    let results = rtkit_grants::run(&options, |line| eprintln!("  {line}")).map_err(unfixed)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&results).unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("configuration  granted  refused  p50 (µs)  p99 (µs)  p99.9 (µs)  max (µs)  bus alone p50 / p99 (µs)  load");
    for c in &results.configurations {
        let (s, bus) = (&c.granted_us, &c.bus_round_trip_us);
        println!(
            "{:<14} {:>7} {:>8} {:>9.0} {:>9.0} {:>11.0} {:>9.0}  {:>10.0} / {:<12.0}  {}",
            c.name, s.count, c.refused, s.p50, s.p99, s.p999, s.max, bus.p50, bus.p99, c.load
        );
    }
    println!(
        "p99 under load / idle: {:.2} (goal: p99 at most 2000 µs)",
        results.p99_ratio_loaded_to_idle
    );
    Ok(ExitCode::SUCCESS)
}

fn bench_guard_scale(args: GuardScaleArgs) -> Result<ExitCode, Failure> {
    let unfixed = |e: String| failed(e, "");
    let servers = match args.server.as_str() {
        "jackd" => vec![ServerKind::Jack],
        "pipewire" => vec![ServerKind::PipeWire],
        "both" => vec![ServerKind::Jack, ServerKind::PipeWire],
        other => {
            return Err(crate::parse::invalid(
                format!("--server {other:?} is not jackd, pipewire or both"),
                "e.g. --server jackd",
            )
            .into())
        }
    };
    let options = guard_scale::Options {
        servers,
        clients: args.clients,
        join_every: Duration::from_millis(args.join_every_ms),
        steady: Duration::from_secs_f64(args.steady.max(1.0)),
        frames: args.frames,
        rate: 48_000,
        load: args.load,
        applications: args.apps,
        tessera: std::env::current_exe().map_err(|e| unfixed(format!("find this program: {e}")))?,
    };
    eprintln!(
        "tessera bench guard-scale: clients join every {} ms, then {:.0} s together",
        args.join_every_ms, args.steady
    );
    let results = guard_scale::run(&options, |line| eprintln!("  {line}")).map_err(unfixed)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&results).unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("server    clients  guard %  daemon %  total %  (joining: total %)  reserved  exited  unreserved at end  within 100 ms  p50 (ms)  p99 (ms)  max (ms)  xruns  steady: cycles  late  lost  budget changes/s  reserved ÷ used");
    for r in &results.servers {
        let d = &r.to_reservation_ms;
        println!(
            "{:<9} {:>7} {:>8.2} {:>9.2} {:>8.2} {:>20.2} {:>5}/{:<4} {:>6} {:>18} {:>13} {:>9.1} {:>9.1} {:>9.1} {:>6} {:>15} {:>5} {:>5} {:>17.1} {:>16.2}",
            r.server, r.clients, r.steady.guard_pct, r.steady.daemon_pct, r.steady.total_pct,
            r.joining.total_pct, r.threads_reserved, r.threads_seen, r.exited_unreserved, r.unreserved_at_end,
            r.within_interval, d.p50, d.p99, d.max, r.xruns,
            r.steady_cycles, r.steady_late, r.steady_lost,
            r.steady_budgets.changes_per_s, r.steady_budgets.reserved_per_used
        );
        print_slow(&r.slow);
        let a = &r.applications;
        println!(
            "  applications (a process each): {} started, {}/{} threads reserved ({} exited unreserved), {} within {} ms, p50 / p99 / max {:.1} / {:.1} / {:.1} ms",
            a.started, a.threads_reserved, a.threads_seen, a.exited_unreserved, a.within_interval, results.interval_ms,
            a.to_reservation_ms.p50, a.to_reservation_ms.p99, a.to_reservation_ms.max
        );
        print_slow(&a.slow);
        for note in &r.notes {
            println!("  note: {note}");
        }
    }
    println!("goal: total at most 1 % of a core with every client in; every client reserved within {} ms", results.interval_ms);
    Ok(ExitCode::SUCCESS)
}
/// The threads reserved later than one interval, a line each.
fn print_slow(slow: &[guard_scale::SlowThread]) {
    for t in slow {
        println!(
            "  reserved after {:.1} ms: thread {} ({}), real-time at {:.2} s",
            t.to_reservation_ms, t.tid, t.name, t.real_time_at_s
        );
    }
}

fn server_kind(name: &str) -> Result<ServerKind, BrokerError> {
    match name.trim() {
        "jackd" => Ok(ServerKind::Jack),
        "pipewire" => Ok(ServerKind::PipeWire),
        other => Err(crate::parse::invalid(
            format!("--servers: unknown server {other:?}"),
            "give jackd, pipewire or both (comma-separated)",
        )),
    }
}

/// Catches Ctrl-C and SIGTERM from now on; the check returned says whether
/// one came (and keeps saying so): the run under way ends, its processes
/// stopped by their PIDs, and what was measured is written.
fn interruption() -> Result<impl Fn() -> bool, Failure> {
    tessera_sys::process::catch_termination().map_err(|e| failed(e.to_string(), ""))?;
    let stop = std::cell::Cell::new(false);
    Ok(move || {
        if tessera_sys::process::take_termination().is_some() {
            stop.set(true);
        }
        stop.get()
    })
}

fn bench_workgroup(args: WorkgroupArgs) -> Result<ExitCode, Failure> {
    let mut options = workgroup::Options::new(args.out.unwrap_or_else(workgroup::default_out_dir));
    options.seconds = args.seconds;
    options.step_seconds = args.step_seconds;
    options
        .check()
        .map_err(|e| crate::parse::invalid(e, "see tessera bench workgroup --help"))?;
    let interrupted = interruption()?;
    eprintln!(
        "tessera bench workgroup: {} configurations of {} s each, results in {}",
        workgroup::Config::ALL.len(),
        options.seconds,
        options.out_dir.display()
    );
    let outcome = workgroup::run(&options, |line| eprintln!("  {line}"), &interrupted)
        .map_err(|e| failed(e, ""))?;
    let table = workgroup::summary_table(&outcome.results);
    print_outcome(args.json, &outcome.results, &table, &outcome.report);
    Ok(ExitCode::SUCCESS)
}

/// A run's figures as JSON, or its summary table and where its report is.
fn print_outcome(json: bool, results: &impl serde::Serialize, table: &str, report: &Path) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(results).unwrap_or_default()
        );
    } else {
        println!("\n{table}");
        println!("report: {}", report.display());
    }
}

fn bench_lowest(args: LowestArgs) -> Result<ExitCode, Failure> {
    let mut options = lowest::Options::new(args.out.unwrap_or_else(lowest::default_out_dir));
    options.servers = args
        .servers
        .iter()
        .map(|s| server_kind(s))
        .collect::<Result<_, _>>()?;
    options.frames = args.frames;
    options.seconds = args.seconds;
    options.warmup = args.warmup;
    options.jack_priority = args.priority;
    options
        .check()
        .map_err(|e| crate::parse::invalid(e, "see tessera bench lowest --help"))?;
    let interrupted = interruption()?;
    eprintln!(
        "tessera bench lowest: {} × plain and guarded, {} buffer sizes, {:.0} s per trial, results in {}",
        args.servers.join(", "),
        options.frames.len(),
        options.seconds,
        options.out_dir.display()
    );
    let outcome =
        lowest::run(&options, lowest_progress(), &interrupted).map_err(|e| failed(e, ""))?;
    let table = lowest::summary_table(&outcome.results);
    print_outcome(args.json, &outcome.results, &table, &outcome.report);
    Ok(ExitCode::SUCCESS)
}

/// The run's progress: redrawn in place on a terminal; in a log, a line
/// when a trial starts, every 10 s, and when it ends.
fn lowest_progress() -> impl FnMut(&lowest::Progress) {
    let mut shown = crate::progress::ProgressLine::new();
    move |p: &lowest::Progress| {
        let line = format!(
            "  trial {} (of at most {}): {} {} at {} frames ({:.2} ms) — {:.0}/{:.0} s",
            p.trial,
            p.max_trials,
            p.server,
            p.config.name(),
            p.frames,
            lowest::latency_ms(p.frames),
            p.elapsed.min(p.total).as_secs_f64(),
            p.total.as_secs_f64()
        );
        shown.show(p.trial, p.elapsed, p.total, &line);
    }
}
