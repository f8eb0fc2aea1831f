//! The command line's shape: the commands and their subcommands, each
//! command's flags in its own module. Only `main` uses it; no command
//! module may import it.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

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
        command: crate::cell::CellCommand,
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
    Demo(crate::demo::DemoArgs),
    /// Run a scenario file: its configurations back to back, results JSON and a report.
    #[command(after_help = "Examples:\n  \
        tessera run scenarios/example.toml\n  \
        tessera run scenarios/thesis-4.4.toml --out results/thesis\n  \
        tessera run scenarios/thesis-4.4.toml --scale 0.2   # every time × 0.2\n  \
        tessera run scenarios/probe.toml --check")]
    Run(crate::run::RunArgs),
    /// Write the report (Markdown, PNG and SVG plots) of a results.json.
    #[command(
        after_help = "Example:\n  tessera report results/thesis/results.json --out results/thesis-report"
    )]
    Report(crate::report::ReportArgs),
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
        command: crate::load::LoadCommand,
    },
    /// The timer-callback latency probe (seed 002) under 0/50/80/100 % CPU load, with cyclictest.
    #[command(after_help = "Examples:\n  \
        tessera probe\n  \
        tessera probe --period 2ms --seconds 30 --out results/probe\n  \
        tessera probe --print-scenario > my-probe.toml")]
    Probe(crate::probe::ProbeArgs),
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
        service: ServeCommand,
    },
    /// A live view of the cells: budget set and used, load, misses and xruns per second.
    #[command(after_help = crate::top::EXAMPLES)]
    Top(crate::top::TopArgs),
    /// Why each miss of a cell's (or a process's) threads was late: a line per miss with its cause and the µs of each part, from the kernel's events.
    #[command(after_help = crate::why::EXAMPLES)]
    Why(crate::why::WhyArgs),
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

#[derive(Subcommand)]
pub enum ServeCommand {
    /// The network service: flows with reservations (mClock), real-time packets first.
    #[command(after_help = crate::net::SERVE_EXAMPLES)]
    Net(crate::net::ServeNetArgs),
    /// The console service: real-time-safe logging, one channel per writer.
    #[command(after_help = crate::console::EXAMPLES)]
    Console(crate::console::ServeConsoleArgs),
    /// The render service of seed 003: per-client reservations, SLAs from probe requests.
    #[command(after_help = crate::render::SERVE_EXAMPLES)]
    Render(crate::render::ServeRenderArgs),
}
