//! The command line's shape: subcommands, flags, help text with examples.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use tessera_broker::BrokerError;
use tessera_policy::{Budget, CellPolicy, CellRequest, CoreRequest, Placement};

#[derive(Parser)]
#[command(
    name = "tessera",
    version,
    about = "Guaranteed CPU for low-latency audio on stock Linux: cells of cores and SCHED_DEADLINE bandwidth, with admission control",
    after_help = "Examples:\n  \
    tessera status\n  \
    tessera cell create synth --policy event-triggered --runtime 400us --period 1333us\n  \
    tessera cell exec synth -- ./my-synth\n  \
    tessera cell create mixer --policy dedicated --cores 1\n  \
    tessera reset\n  \
    tessera demo --seconds 10\n\n\
    Without a running `tessera daemon`, every command uses the broker embedded in it."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Capacity per core, the cells, who holds what.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Create, inspect and destroy cells; run programs in them.
    Cell {
        #[command(subcommand)]
        command: CellCommand,
    },
    /// Destroy every cell and return the machine to its state before tessera.
    Reset {
        #[arg(long)]
        json: bool,
    },
    /// The services registered with the broker: process, socket, whom each admits.
    #[command(after_help = crate::services::EXAMPLES)]
    Services {
        #[arg(long)]
        json: bool,
    },
    /// Serve the broker on a Unix socket for every client on the machine.
    #[command(
        after_help = "Examples:\n  sudo tessera daemon\n  sudo tessera daemon --config /etc/tessera/daemon.toml\n  sudo tessera install   (as a system service: tessera.service)\n\nUnder systemd (Type=notify) it sends READY=1 once its socket listens."
    )]
    Daemon {
        /// Config file (default /etc/tessera/daemon.toml if present).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Directory of the socket and state (default /run/tessera).
        #[arg(long)]
        run_dir: Option<PathBuf>,
    },
    /// The LAN music application (seed 000 §4.1) in its cells, alone and under interference, against plain and FIFO scheduling: about a minute.
    #[command(after_help = "Examples:\n  \
        sudo tessera demo\n  \
        sudo tessera demo --seconds 30 --out results/demo\n  \
        tessera demo --json            (without root: best-effort only, labelled)\n  \
        sudo tessera demo --isolation   (a periodic task against FIFO hogs)")]
    Demo(DemoArgs),
    /// Run a scenario file: its configurations back to back, results JSON and a report.
    #[command(after_help = "Examples:\n  \
        tessera run scenarios/example.toml\n  \
        tessera run scenarios/thesis-4.4.toml --out results/thesis\n  \
        tessera run scenarios/thesis-4.4.toml --scale 0.2   # every time × 0.2\n  \
        tessera run scenarios/probe.toml --check")]
    Run(crate::experiment::RunArgs),
    /// Write the report (Markdown, PNG and SVG plots) of a results.json.
    #[command(
        after_help = "Example:\n  tessera report results/thesis/results.json --out results/thesis-report"
    )]
    Report(crate::experiment::ReportArgs),
    /// Run one interference workload by itself.
    #[command(after_help = "Examples:\n  \
        tessera load hog --threads 2 --load 0.5 --duration 10s\n  \
        tessera load ep --verify S --threads 2\n  \
        tessera load stream --mebibytes 256 --duration 30s\n  \
        tessera load io --dir /var/tmp --duration 30s\n  \
        tessera load video --players 2 --fps 30 --duration 10s\n  \
        tessera load stress-ng --duration 10s -- --cpu 2 --cpu-load 80")]
    Load {
        #[command(subcommand)]
        command: crate::experiment::LoadCommand,
    },
    /// The timer-callback latency probe (seed 002) under 0/50/80/100 % CPU load, with cyclictest.
    #[command(after_help = "Examples:\n  \
        tessera probe\n  \
        tessera probe --period 2ms --seconds 30 --out results/probe\n  \
        tessera probe --print-scenario > my-probe.toml")]
    Probe(crate::experiment::ProbeArgs),
    /// Reserve the real-time threads of JACK2, PipeWire or any program, each with an adaptive budget.
    #[command(after_help = crate::guard::EXAMPLES)]
    Guard {
        #[command(subcommand)]
        target: crate::guard::GuardTarget,
    },
    /// Trace where a cell's threads run (e.g. a time-triggered window).
    Trace {
        #[command(subcommand)]
        command: TraceCommand,
    },
    /// Benchmarks against other systems on this machine (reported, not judged).
    Bench {
        #[command(subcommand)]
        command: crate::bench::BenchCommand,
    },
    /// The Migrator Synthesizer: render it to WAV, benchmark its DSP.
    Synth {
        #[command(subcommand)]
        command: crate::synth::SynthCommand,
    },
    /// Run a service as a process of its own (in its cell, registered with the broker).
    #[command(after_help = crate::net::SERVE_EXAMPLES)]
    Serve {
        #[command(subcommand)]
        service: crate::serve::ServeCommand,
    },
    /// A live view of the cells: budget set and used, load, misses and xruns per second.
    #[command(after_help = crate::top::EXAMPLES)]
    Top(crate::top::TopArgs),
    /// The demo's configuration with Group 2 for an hour: misses, RSS and open descriptors sampled each minute.
    #[command(after_help = crate::soak::EXAMPLES)]
    Soak(crate::soak::SoakArgs),
    /// The render service's clients: its status, a snapshot of its screen, the video player.
    #[command(after_help = crate::render::RENDER_EXAMPLES)]
    Render {
        #[command(subcommand)]
        command: crate::render::RenderCommand,
    },
    /// The network service's flows and the seed's abusive streamer.
    #[command(after_help = crate::net::NET_EXAMPLES)]
    Net {
        #[command(subcommand)]
        command: crate::net::NetCommand,
    },
    /// AES67 network audio: a graph in a cell receiving and sending RTP streams through the network service.
    #[command(after_help = crate::aes67::EXAMPLES)]
    Aes67 {
        #[command(subcommand)]
        command: Aes67Command,
    },
    /// The LAN music application (seed 000 §3): SLABS emulator and Migrator Synthesizer over UDP.
    Music {
        #[command(subcommand)]
        command: crate::music::MusicCommand,
    },
    /// Set tessera up as a system service, as its Debian package does: the daemon's unit, the D-Bus policy for RTKit's name, the default config; enabled and started.
    #[command(after_help = crate::install::INSTALL_EXAMPLES)]
    Install(crate::install::InstallArgs),
    /// Undo `tessera install`: stop and disable the service, remove its files (a changed config stays).
    #[command(after_help = crate::install::UNINSTALL_EXAMPLES)]
    Uninstall(crate::install::UninstallArgs),
}

#[derive(Subcommand)]
pub enum Aes67Command {
    /// A host: received streams played into a graph, the graph's audio sent as streams.
    #[command(after_help = crate::aes67::EXAMPLES)]
    Run(crate::aes67::RunArgs),
}

#[derive(Subcommand)]
pub enum TraceCommand {
    /// A thread spinning in a time-triggered cell: where in each period it runs.
    Window(crate::trace::WindowArgs),
}

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
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand)]
pub enum CellCommand {
    /// Admit and create a cell (it persists until destroyed or reset).
    #[command(after_help = "Examples:\n  \
        tessera cell create synth --policy event-triggered --runtime 400us --period 1333us\n  \
        tessera cell create video --policy time-triggered --runtime 2ms --period 10ms\n  \
        tessera cell create fx --policy event-triggered --runtime 300us --period 1ms --placement global --cores 2\n  \
        tessera cell create mixer --policy dedicated --cores 1 --pinned\n  \
        tessera cell create tuned --policy event-triggered --runtime 1ms --period 5ms --owner-adapts\n  \
        tessera cell create batch --policy best-effort --weight 20")]
    Create(CreateArgs),
    /// List the cells.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One cell in detail.
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Destroy a cell: its threads get their scheduling back.
    Destroy { name: String },
    /// Start an unmodified program inside a cell and follow its threads.
    ///
    /// The program starts in the cell (it waits between fork and exec until
    /// its main thread is placed). Every thread it makes real-time
    /// (SCHED_FIFO/RR, as JACK, PipeWire, ALSA and RtAudio programs do) gets
    /// a reservation of its own; its other threads run on the cell's cores
    /// at their own policy, and those that are busy get the program's
    /// application share (reservations of their own beside the cell's;
    /// `--rt-only` turns it off). More real-time threads than reservations: the
    /// extra ones are named and left as the program set them. SIGINT and
    /// SIGTERM are passed on; when the program ends every thread is restored
    /// and tessera exits with the program's status (128+N for signal N).
    #[command(after_help = "Examples:\n  \
        tessera cell exec synth -- ./my-synth --buffer 64\n  \
        tessera cell create jack --policy event-triggered --runtime 300us --period 1333us --cores 2\n  \
        tessera cell exec jack -- jackd -R -d dummy -p 64\n  \
        tessera cell exec synth -- tessera-thread-probe --threads 3 --fifo 1   (see it happen)\n  \
        tessera cell exec synth --app-share 10 -- tessera-thread-probe --threads 3 --fifo 1 --busy 15\n\n\
        New threads are seen at once through the kernel's process-events connector (root or\n\
        CAP_NET_ADMIN), else by polling /proc every 50 ms; policies are polled every 10 ms.\n\
        See docs/follow.md.")]
    Exec {
        cell: String,
        #[command(flatten)]
        share: ShareArgs,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Join a running process's threads (or one thread) to a cell.
    #[command(after_help = "Examples:\n  \
        tessera cell attach synth --pid 4242\n  \
        tessera cell attach synth --pid 4242 --tid 4250\n  \
        tessera cell attach synth --pid $(pidof jackd) --follow   (until it exits or Ctrl-C)")]
    Attach {
        cell: String,
        #[arg(long)]
        pid: i32,
        #[arg(long)]
        tid: Option<i32>,
        /// Follow the process until it exits or Ctrl-C, as `cell exec` does:
        /// real-time threads get reservations, the others the cell's cores;
        /// every thread is restored at the end.
        #[arg(long, conflicts_with_all = ["tid", "json"])]
        follow: bool,
        #[command(flatten)]
        share: ShareArgs,
        #[arg(long)]
        json: bool,
    },
    /// Take a thread out of its cell.
    Detach {
        #[arg(long)]
        tid: i32,
    },
    /// Tell the broker's monitor of misses and xruns a cell's program saw (its owner or root).
    #[command(after_help = "Examples:\n  \
        tessera cell report synth --xruns 1        # what an audio program's xrun callback saw\n  \
        tessera cell report video --misses 3 --json")]
    Report {
        name: String,
        #[arg(long, default_value_t = 0)]
        misses: u64,
        #[arg(long, default_value_t = 0)]
        xruns: u64,
        #[arg(long)]
        json: bool,
    },
    /// Change a cell's budget through admission; its threads get it at once.
    #[command(after_help = "Examples:\n  \
        tessera cell resize synth --runtime 300us --period 1333us\n  \
        tessera cell resize synth --runtime 900us --period 1333us --degrade   (the largest that fits)\n  \
        tessera cell resize video --runtime 3ms --period 10ms --json")]
    Resize(ResizeArgs),
}

#[derive(Args)]
pub struct ResizeArgs {
    pub name: String,
    /// New CPU time per period (e.g. 300us).
    #[arg(long)]
    pub runtime: String,
    /// New period (e.g. 1333us).
    #[arg(long)]
    pub period: String,
    /// Relative deadline (default: the period; a time-triggered window's is its runtime).
    #[arg(long)]
    pub deadline: Option<String>,
    /// If the budget does not fit, take the largest runtime that does instead of failing.
    #[arg(long)]
    pub degrade: bool,
    #[arg(long)]
    pub json: bool,
}

impl ResizeArgs {
    /// The budget asked for; a time-triggered `window`'s deadline is its runtime.
    pub fn budget(&self, window: bool) -> Result<Budget, BrokerError> {
        let ns = |t: &str, example: &str| time(t, example).map(|d| d.as_nanos() as u64);
        let runtime_ns = ns(&self.runtime, "--runtime 300us")?;
        let period_ns = ns(&self.period, "--period 1333us")?;
        let deadline_ns = match &self.deadline {
            Some(d) => ns(d, "--deadline 1ms")?,
            None if window => runtime_ns,
            None => period_ns,
        };
        Ok(Budget {
            runtime_ns,
            deadline_ns,
            period_ns,
        })
    }
}

#[derive(Args)]
pub struct CreateArgs {
    pub name: String,
    /// dedicated | time-triggered | event-triggered | best-effort
    #[arg(long)]
    pub policy: String,
    /// How many cores (one reservation per core).
    #[arg(long, conflicts_with = "core_list")]
    pub cores: Option<usize>,
    /// Exactly these cores, e.g. 2,3.
    #[arg(long, value_delimiter = ',')]
    pub core_list: Option<Vec<usize>>,
    /// CPU time per period (e.g. 400us).
    #[arg(long)]
    pub runtime: Option<String>,
    /// Period (e.g. 1333us).
    #[arg(long)]
    pub period: Option<String>,
    /// Relative deadline (default: the period).
    #[arg(long)]
    pub deadline: Option<String>,
    /// partitioned (one core per reservation) | global (shared cores, global EDF).
    #[arg(long, default_value = "partitioned")]
    pub placement: String,
    /// Weight of a best-effort cell (1–10000, default 100).
    #[arg(long, default_value_t = 100)]
    pub weight: u32,
    /// Never resize or move this cell's allocation.
    #[arg(long)]
    pub pinned: bool,
    /// You adapt the budget yourself (`tessera cell resize`): the daemon's
    /// adaptation leaves it alone.
    #[arg(long, conflicts_with = "pinned")]
    pub owner_adapts: bool,
    /// Let reservations reclaim unused bandwidth (GRUB).
    #[arg(long)]
    pub reclaim: bool,
    /// Send SIGXCPU to a thread that overruns its runtime (SCHED_FLAG_DL_OVERRUN).
    #[arg(long)]
    pub overrun_signal: bool,
    #[arg(long)]
    pub json: bool,
}

/// A duration as people write them for audio ("400us", "1.333ms", "2s");
/// `example` shows the flag in the fix.
pub fn time(text: &str, example: &str) -> Result<std::time::Duration, BrokerError> {
    tessera_scenario::parse_duration(text).map_err(|e| invalid(e, &format!("e.g. {example}")))
}

/// A bad argument: what is wrong and an example of a good one.
/// A `--placement` flag: partitioned or global.
pub fn placement(text: &str) -> Result<Placement, BrokerError> {
    match text {
        "partitioned" => Ok(Placement::Partitioned),
        "global" => Ok(Placement::Global),
        other => Err(invalid(
            format!("unknown placement {other:?}"),
            "use partitioned or global",
        )),
    }
}

pub fn invalid(message: impl Into<String>, fix: &str) -> BrokerError {
    BrokerError::new("invalid", message, fix)
}

/// SLABS pads as people list them: "0-31", "0,3,8-11" (pads 0–31).
pub fn pads(list: &str) -> Result<Vec<usize>, BrokerError> {
    tessera_synth::parse_pads(list).map_err(|e| {
        invalid(
            format!("--pads: {e}"),
            "e.g. --pads 0-31 or --pads 0,3,8-11",
        )
    })
}

impl CreateArgs {
    pub fn into_request(self) -> Result<CellRequest, BrokerError> {
        let policy = CellPolicy::parse(&self.policy).ok_or_else(|| {
            invalid(
                format!("unknown policy {:?}", self.policy),
                "use dedicated, time-triggered, event-triggered or best-effort",
            )
        })?;
        let placement = placement(&self.placement)?;
        let ns = |s: &Option<String>| {
            s.as_deref()
                .map(|t| time(t, "--runtime 400us").map(|d| d.as_nanos() as u64))
                .transpose()
        };
        let (runtime, period, deadline) =
            (ns(&self.runtime)?, ns(&self.period)?, ns(&self.deadline)?);
        let budget = match (runtime, period) {
            (Some(r), Some(p)) => {
                let d = match (deadline, policy) {
                    (Some(d), _) => d,
                    (None, CellPolicy::TimeTriggered) => r,
                    (None, _) => p,
                };
                Some(Budget {
                    runtime_ns: r,
                    deadline_ns: d,
                    period_ns: p,
                })
            }
            (None, None) => None,
            _ => {
                return Err(invalid(
                    "give both --runtime and --period",
                    "e.g. --runtime 400us --period 1333us",
                ))
            }
        };
        let cores = match (self.cores, self.core_list) {
            (_, Some(list)) => CoreRequest::List(list),
            (Some(n), None) => CoreRequest::Count(n),
            (None, None) if policy == CellPolicy::BestEffort => CoreRequest::Count(0),
            (None, None) => CoreRequest::Count(1),
        };
        Ok(CellRequest {
            name: self.name,
            policy,
            cores,
            budget,
            placement,
            weight: self.weight,
            pinned: self.pinned,
            owner_adapts: self.owner_adapts,
            reclaim: self.reclaim,
            overrun_signal: self.overrun_signal,
        })
    }
}

/// The application share of a guarded or followed program's busy threads
/// that are not real-time (`tessera guard`, `cell exec`, `attach --follow`).
#[derive(clap::Args, Debug, Clone)]
pub struct ShareArgs {
    /// The least CPU, % of one, each guarded process's busy threads that
    /// are not real-time hold together (its application share): they get
    /// reservations of their own, adapted to what they use.
    #[arg(long, default_value = "2", conflicts_with = "rt_only")]
    pub app_share: String,
    /// Reserve only the threads programs made real-time (no application
    /// shares): the others run at their own policy.
    #[arg(long)]
    pub rt_only: bool,
}

impl ShareArgs {
    /// The share asked for, or none with `--rt-only`.
    pub fn app_share(&self) -> Result<Option<tessera_guard::share::AppShare>, BrokerError> {
        if self.rt_only {
            return Ok(None);
        }
        match self.app_share.trim_end_matches('%').parse::<f64>() {
            Ok(pct) if (0.0..=100.0).contains(&pct) => Ok(Some(tessera_guard::share::AppShare {
                floor: tessera_policy::Bandwidth::from_fraction(pct / 100.0),
            })),
            _ => Err(invalid(
                format!(
                    "--app-share {:?} is not a percentage of a CPU",
                    self.app_share
                ),
                "e.g. --app-share 2 (2 % of a CPU per application, the default), or --rt-only",
            )),
        }
    }
}
