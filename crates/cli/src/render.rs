//! `tessera serve render` and `tessera render …`: seed 003's render
//! service process (or its single-threaded baseline), its status, a
//! snapshot of its screen, and the video player that drives it. Thin: the
//! service lives in `tessera_services::render`, the player in
//! `tessera_workloads::render_player`; this file parses and prints.

use crate::failure::Failure;
use crate::parse::invalid;
use crate::show;
use clap::{Args, Subcommand};
use std::fmt::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use tessera_broker::{BrokerError, ErrorCode, ServicePolicy};
use tessera_services::render::client::{self, Display};
use tessera_services::render::host::{Host, HostOptions};
use tessera_services::render::service::Share;
use tessera_services::render::wire::{Hello, Status};
use tessera_workloads::render_player::{self, PlayerReport, PlayerSpec};

pub const SERVE_EXAMPLES: &str = "Examples:\n  \
    sudo tessera serve render\n  \
    sudo tessera serve render --cores 1 --best-effort 40% --probing 10%\n  \
    sudo tessera serve render --baseline --cores 1   # one thread, arrival order, no SLAs\n  \
    tessera serve render --no-cell --screen 1920x1080\n\n\
    The service registers with the broker as NAME (default render); clients open it by\n\
    name. Each client with an SLA gets a rendering task in a reservation (a cell) of its\n\
    own. It runs until Ctrl-C or SIGTERM, then gives its cells and name back.";

pub const RENDER_EXAMPLES: &str = "Examples:\n  \
    tessera render status\n  \
    tessera render status --json\n  \
    tessera render snapshot screen.png\n  \
    tessera render play --fps 60 --frames 600 --spin 3ms --probes 30\n  \
    tessera render play --name render-baseline --frames 300 --json";

#[derive(Args)]
pub struct ServeRenderArgs {
    /// The name clients open the service by.
    #[arg(long, default_value = "render")]
    pub name: String,
    /// Where to listen (default: the broker's run directory).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// The traditional single-threaded server (Nano-X's manner) instead, for comparison.
    #[arg(long)]
    pub baseline: bool,
    /// Cores for the reservations (partitioned), or the baseline's thread, e.g. 1 or 0,1
    /// (default: global EDF over the shared cores).
    #[arg(long)]
    pub cores: Option<String>,
    /// What SLAs may hold together, in cores (default: the cores less the service's shares).
    #[arg(long)]
    pub capacity: Option<f64>,
    /// The best-effort share (a percentage of a core, every 10 ms).
    #[arg(long, default_value = "40%")]
    pub best_effort: String,
    /// The probing share (a percentage of a core, every 10 ms).
    #[arg(long, default_value = "10%")]
    pub probing: String,
    /// The screen, WIDTHxHEIGHT.
    #[arg(long, default_value = "1280x720")]
    pub screen: String,
    /// Window size over frame size (windows are tiled automatically).
    #[arg(long, default_value_t = 1.5)]
    pub scale: f32,
    /// Run without cells even when privileged.
    #[arg(long)]
    pub no_cell: bool,
    /// Admit this uid too (its owner and root always pass); repeatable.
    #[arg(long)]
    pub allow_uid: Vec<u32>,
    /// Admit this gid too; repeatable.
    #[arg(long)]
    pub allow_gid: Vec<u32>,
    /// Stop after this many seconds (default: until Ctrl-C or SIGTERM).
    #[arg(long)]
    pub seconds: Option<f64>,
}

#[derive(Subcommand)]
pub enum RenderCommand {
    /// The service's shares, capacity and every client's counters.
    #[command(after_help = RENDER_EXAMPLES)]
    Status {
        #[command(flatten)]
        service: ServiceArgs,
        #[arg(long)]
        json: bool,
    },
    /// The screen as a PNG file.
    #[command(after_help = RENDER_EXAMPLES)]
    Snapshot {
        #[command(flatten)]
        service: ServiceArgs,
        /// The PNG file to write.
        out: PathBuf,
    },
    /// A video player (seed 003 §5): CIF frames at a rate, probing and agreeing an SLA first.
    #[command(after_help = RENDER_EXAMPLES)]
    Play(PlayArgs),
}

/// Which server: by name through the broker, or at a socket.
#[derive(Args)]
pub struct ServiceArgs {
    #[arg(long, default_value = "render")]
    pub name: String,
    /// The server's socket, bypassing the broker's registry.
    #[arg(long)]
    pub socket: Option<PathBuf>,
}

impl ServiceArgs {
    fn connect(&self) -> Result<UnixStream, BrokerError> {
        match &self.socket {
            Some(path) => client::connect(path),
            None => client::connect_by_name(&self.name),
        }
        .map_err(refused)
    }
}

#[derive(Args)]
pub struct PlayArgs {
    #[command(flatten)]
    pub service: ServiceArgs,
    /// The player's name in the service's status.
    #[arg(long, default_value = "player")]
    pub player: String,
    #[arg(long, default_value_t = 30.0)]
    pub fps: f64,
    #[arg(long, default_value_t = 300)]
    pub frames: usize,
    /// Rendering work per request (the seed's expensive requests), e.g. 3ms.
    #[arg(long, default_value = "0us")]
    pub spin: String,
    /// Requests per frame (bands of rows).
    #[arg(long, default_value_t = 1)]
    pub bands: u16,
    /// Frames in flight at most.
    #[arg(long, default_value_t = 3)]
    pub slots: usize,
    /// Probe frames before asking for an SLA (0: stay best-effort).
    #[arg(long, default_value_t = 0)]
    pub probes: usize,
    /// Outstanding frames the SLA asks for.
    #[arg(long, default_value_t = 1)]
    pub outstanding: u32,
    /// Start playing at this CLOCK_MONOTONIC instant, ns (players started together).
    #[arg(long)]
    pub start_at: Option<u64>,
    #[arg(long)]
    pub json: bool,
}

fn refused(e: impl std::fmt::Display) -> BrokerError {
    BrokerError::new(ErrorCode::Refused, e.to_string(), "")
}

/// "40%" of a core every 10 ms.
fn share(text: &str, flag: &str) -> Result<Share, BrokerError> {
    let percent = text
        .trim()
        .strip_suffix('%')
        .and_then(|n| n.trim().parse::<f64>().ok())
        .filter(|p| *p > 0.0 && *p <= 100.0)
        .ok_or_else(|| {
            invalid(
                format!("{flag} {text:?}"),
                &format!("give a percentage of a core, e.g. {flag} 40%"),
            )
        })?;
    Ok(Share {
        runtime_ns: (percent / 100.0 * 10_000_000.0) as u64,
        period_ns: 10_000_000,
    })
}

fn screen(text: &str) -> Result<(usize, usize), BrokerError> {
    text.split_once('x')
        .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
        .ok_or_else(|| {
            invalid(
                format!("--screen {text:?}"),
                "give WIDTHxHEIGHT, e.g. --screen 1280x720",
            )
        })
}

pub fn serve(args: ServeRenderArgs) -> Result<ExitCode, Failure> {
    let cores = args
        .cores
        .as_deref()
        .map(|c| {
            tessera_sys::kernel::parse_cpu_list(c)
                .map_err(|e| invalid(e.to_string(), "e.g. --cores 1 or --cores 0,1"))
        })
        .transpose()?;
    let options = HostOptions {
        name: args.name.clone(),
        socket: args.socket.clone(),
        baseline: args.baseline,
        cores,
        capacity_cores: args.capacity,
        best_effort: share(&args.best_effort, "--best-effort")?,
        probing: share(&args.probing, "--probing")?,
        screen: screen(&args.screen)?,
        scale: args.scale,
        no_cell: args.no_cell,
        policy: ServicePolicy {
            uids: args.allow_uid.clone(),
            gids: args.allow_gid.clone(),
        },
    };
    crate::serve::until_stopped(args.seconds, || {
        let host = Host::start(&options).map_err(refused)?;
        println!("{}", host.summary);
        Ok(host)
    })?;
    println!("render service {:?} stopped", args.name);
    Ok(ExitCode::SUCCESS)
}

pub fn run(command: RenderCommand) -> Result<ExitCode, Failure> {
    match command {
        RenderCommand::Status { service, json } => {
            let status = client::status(service.connect()?).map_err(refused)?;
            show::print(json, &status, status_table)
        }
        RenderCommand::Snapshot { service, out } => {
            let png = client::snapshot(service.connect()?).map_err(refused)?;
            std::fs::write(&out, png)
                .map_err(|e| invalid(format!("{}: {e}", out.display()), "give a writable path"))?;
            println!("wrote {}", out.display());
            Ok(ExitCode::SUCCESS)
        }
        RenderCommand::Play(args) => play(args),
    }
}

fn play(args: PlayArgs) -> Result<ExitCode, Failure> {
    let spec = PlayerSpec {
        spin_ns: crate::parse::time(&args.spin, "--spin 3ms")?
            .as_nanos()
            .min(u128::from(u32::MAX)) as u32,
        bands: args.bands,
        slots: args.slots,
        probes: args.probes,
        max_outstanding: args.outstanding,
        start_at_ns: args.start_at,
        ..PlayerSpec::cif(&args.player, args.fps, args.frames)
    };
    spec.check()
        .map_err(|e| invalid(e, "see `tessera render play --help`"))?;
    let hello = Hello {
        name: spec.name.clone(),
        width: spec.width,
        height: spec.height,
        slots: spec.slots,
        window: None,
    };
    let display = Display::open(args.service.connect()?, hello).map_err(refused)?;
    let report = render_player::play(display, &spec).map_err(refused)?;
    show::print(args.json, &report, player_line)
}

fn player_line(r: &PlayerReport) -> String {
    format!(
        "{}: {} of {} frames shown, {} missed ({} late, {} not sent, {} lost); service time \
         min {:.0} / mean {:.0} / p99 {:.0} / max {:.0} µs; {}\n",
        r.name,
        r.shown,
        r.frames,
        r.misses,
        r.late,
        r.not_sent,
        r.lost,
        r.times.min_us,
        r.times.mean_us,
        r.times.p99_us,
        r.times.max_us,
        r.sla_note
    )
}

fn status_table(status: &Status) -> String {
    let mut out = format!(
        "{:?} server, pid {}, {}×{} screen; SLAs hold {:.2} of {:.2} cores\n",
        status.server,
        status.pid,
        status.screen.0,
        status.screen.1,
        status.committed_cores,
        status.capacity_cores
    );
    for task in &status.tasks {
        let _ = writeln!(out, "  {task}");
    }
    let _ = writeln!(
        out,
        "{:>4} {:<16} {:>7} {:>8} {:>7} {:>6} {:>9} {:>9}  share",
        "id", "client", "pid", "actions", "probes", "late", "throttled", "malformed"
    );
    for c in &status.clients {
        let _ = writeln!(
            out,
            "{:>4} {:<16} {:>7} {:>8} {:>7} {:>6} {:>9} {:>9}  {}",
            c.client, c.name, c.pid, c.actions, c.probes, c.late, c.throttled, c.malformed, c.share
        );
    }
    out
}
