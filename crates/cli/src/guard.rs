//! `tessera guard`: parses the server to guard and the budget settings,
//! then runs `tessera_guard::Guard` (for PipeWire, after the guard crate
//! restarted it under PipeWire's libjack) until the server exits, the time
//! is up or SIGINT/SIGTERM arrives, printing a live line (redrawn in place on a
//! terminal, a plain line every few seconds in a log, JSON lines with
//! `--json`).

use crate::failure::Failure;
use crate::parse;
use clap::{Args, Subcommand};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tessera_broker::{BrokerError, ErrorCode, Session};
use tessera_guard::guard::{Budgeting, Guard, Settings, Status};
use tessera_guard::server::Server;
use tessera_guard::GuardError;
use tessera_policy::{AdaptiveConfig, PredictorConfig};

#[derive(Subcommand)]
pub enum GuardTarget {
    /// JACK2's jackd (by server name, or --pid) and its clients.
    Jackd {
        /// The JACK server name (jackd -n NAME); default $JACK_DEFAULT_SERVER or "default".
        #[arg(long)]
        server: Option<String>,
        #[arg(long)]
        pid: Option<i32>,
        #[command(flatten)]
        opts: GuardArgs,
    },
    /// PipeWire's daemon (this user's, or any user's by --pid) and its clients;
    /// graph threads at SCHED_OTHER are adopted too.
    Pipewire {
        #[arg(long)]
        pid: Option<i32>,
        #[command(flatten)]
        opts: GuardArgs,
    },
    /// Any program's real-time threads (give its audio period).
    Pid {
        pid: i32,
        #[command(flatten)]
        opts: GuardArgs,
    },
}

#[derive(Args)]
pub struct GuardArgs {
    /// The audio period when the server cannot tell it (required for `pid`).
    #[arg(long)]
    period: Option<String>,
    /// Open the server's workgroup for this many of its clients' threads:
    /// `jack-NAME` for JACK server NAME, `pipewire-UID` for user UID's
    /// PipeWire; bound to the server, owned by its user. Clients join it
    /// with tessera_workgroup_open(name) and mark their cycles
    /// (tessera-jack-peer --workgroup name). Not for `pid`.
    #[arg(long, value_name = "THREADS")]
    workgroup: Option<usize>,
    /// Headroom over the predicted use, % (AQuoSA's -I).
    #[arg(long, default_value_t = 20)]
    increment: u32,
    /// Smallest budget, % of the reservation period (per thread: the
    /// server's and the guard's own threads use 1–2 %).
    #[arg(long, default_value_t = 1)]
    min: u32,
    /// Largest budget, % of the reservation period.
    #[arg(long, default_value_t = 95)]
    max: u32,
    /// Predictor over the last samples: max, mean or pNN (e.g. p99).
    #[arg(long, default_value = "max")]
    predictor: String,
    /// Samples the predictor looks back over.
    #[arg(long, default_value_t = 16)]
    window: usize,
    /// Instead of adapting: a fixed share, % of what admission lets
    /// reservations have on a core, for the server and its clients together
    /// (AQuoSA's -F), shared out among the graph's threads by what each
    /// uses.
    #[arg(long)]
    fixed: Option<u32>,
    /// Where the reservations go: `auto` (the default) decides from what
    /// the threads use — one core (the last first) when they fit there,
    /// several, or global EDF — and says why on the live line; a core
    /// number puts the real-time threads there (the application shares
    /// under global EDF); `global` all in the shared cores under global
    /// EDF.
    #[arg(long)]
    core: Option<String>,
    #[command(flatten)]
    share: parse::ShareArgs,
    /// Let reservations use spare bandwidth (GRUB reclaiming; the default).
    #[arg(long, overrides_with = "no_reclaim")]
    reclaim: bool,
    /// Hold every thread to its budget (no reclaiming): a cycle that needs
    /// more than the budget waits for the next period.
    #[arg(long, overrides_with = "reclaim")]
    no_reclaim: bool,
    /// A new thread's budget until its use is measured, % of the period.
    #[arg(long, default_value_t = 25)]
    initial: u32,
    /// How often budgets are re-decided.
    #[arg(long, default_value = "100ms")]
    interval: String,
    /// Stop after this long (default: until the server exits or Ctrl-C).
    #[arg(long)]
    seconds: Option<f64>,
    /// Write budget set / predicted / used per thread and interval (CSV).
    #[arg(long)]
    record: Option<PathBuf>,
    /// Status as JSON lines, one a second.
    #[arg(long)]
    json: bool,
    /// No live line; only what changes.
    #[arg(long)]
    quiet: bool,
}

pub const EXAMPLES: &str = "Examples:\n  \
    sudo tessera guard jackd                      (the JACK2 server \"default\")\n  \
    sudo tessera guard jackd --server studio --record budgets.csv\n  \
    sudo tessera guard pipewire --no-reclaim --increment 40\n  \
    sudo tessera guard pipewire --pid 2345        (a user's session PipeWire)\n  \
    sudo tessera guard pid 4242 --period 1333us --fixed 40\n  \
    sudo tessera guard jackd --json | jq .reserved_cpus\n  \
    sudo tessera guard jackd --app-share 5        (at least 5 % of a CPU per program's busy threads)\n  \
    sudo tessera guard jackd --rt-only --core 1   (real-time threads only, all on CPU 1)\n  \
    sudo tessera guard jackd --workgroup 8        (clients' threads join workgroup jack-default)\n\n\
    Every real-time thread of the server and its clients gets a SCHED_DEADLINE\n\
    reservation of its own (a cell named <process>-<tid>), its budget adapted to\n\
    what it uses; each program's busy threads that are not real-time get its\n\
    application share; where they all go (one core, several, global EDF) is\n\
    decided from what they use and said on the live line. Everything is\n\
    restored when the guard stops. See docs/guard.md.";

pub fn run(target: GuardTarget) -> Result<ExitCode, Failure> {
    let (server, opts) = match target {
        GuardTarget::Jackd { server, pid, opts } => {
            let name = server
                .or_else(|| std::env::var("JACK_DEFAULT_SERVER").ok())
                .unwrap_or_else(|| "default".into());
            (Server::jack(&name, pid)?, opts)
        }
        GuardTarget::Pipewire { pid, opts } => {
            tessera_guard::monitor::reexec_with_pipewire_jack()?;
            (Server::pipewire(pid)?, opts)
        }
        GuardTarget::Pid { pid, opts } => (Server::process(pid)?, opts),
    };
    let settings = settings(&opts)?;
    let mode = tessera_broker::Mode::detect();
    if let Some(banner) = mode.banner() {
        eprintln!("tessera guard: {banner}");
        if mode == tessera_broker::Mode::BestEffort {
            return Err(BrokerError::new(
                ErrorCode::Permission,
                "a guard gives threads SCHED_DEADLINE reservations, which needs CAP_SYS_NICE",
                "run it as root, or grant the capability: sudo setcap cap_sys_nice+ep $(which tessera)",
            ).into());
        }
    }
    tessera_sys::process::catch_termination()?;
    let mut guard = Guard::start(Session::connect()?, server, settings)?;
    if let Some(path) = &opts.record {
        let file = std::fs::File::create(path).map_err(|e| {
            parse::invalid(format!("create {}: {e}", path.display()), "check the path")
        })?;
        guard.record_to(Box::new(std::io::BufWriter::new(file)))?;
    }
    eprintln!(
        "tessera guard: guarding {}; new threads: {}",
        guard.server().describe(),
        guard.mechanism()
    );
    if let Some(name) = guard.workgroup() {
        eprintln!(
            "tessera guard: opened workgroup {name} for the server's clients (docs/workgroups.md)"
        );
    }
    let outcome = follow(&mut guard, &opts);
    let status = guard.status();
    for line in guard.stop() {
        say(&opts, &line);
    }
    outcome?;
    eprintln!(
        "tessera guard: stopped after {:.0} s; {} xrun(s), {} degraded grant(s); every thread restored",
        status.elapsed_s, status.xruns, status.degradations
    );
    Ok(ExitCode::SUCCESS)
}

/// The control loop: until the server exits, time is up or a stop request.
fn follow(guard: &mut Guard, opts: &GuardArgs) -> Result<(), GuardError> {
    let until = opts
        .seconds
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    let mut live = LiveLine::new(opts);
    loop {
        for line in guard.step()? {
            live.clear();
            say(opts, &line);
        }
        if tessera_sys::process::take_termination().is_some() {
            live.clear();
            return Ok(());
        }
        if !guard.server_alive() {
            live.clear();
            eprintln!("tessera guard: {} exited", guard.server().describe());
            return Ok(());
        }
        if until.is_some_and(|u| Instant::now() >= u) {
            live.clear();
            return Ok(());
        }
        live.show(&guard.status());
    }
}

fn say(opts: &GuardArgs, line: &str) {
    if opts.json {
        println!("{}", serde_json::json!({ "event": line }));
    } else {
        eprintln!("tessera guard: {line}");
    }
}

/// The live status: in place on a terminal, a line every 5 s in a log,
/// a JSON line a second with `--json`.
struct LiveLine {
    json: bool,
    quiet: bool,
    terminal: bool,
    last: Option<Instant>,
    drawn: bool,
}

impl LiveLine {
    fn new(opts: &GuardArgs) -> LiveLine {
        LiveLine {
            json: opts.json,
            quiet: opts.quiet,
            terminal: std::io::stderr().is_terminal(),
            last: None,
            drawn: false,
        }
    }

    fn due(&self) -> bool {
        let every = match (self.json, self.terminal) {
            (false, false) => Duration::from_secs(5),
            _ => Duration::from_secs(1),
        };
        self.last.is_none_or(|t| t.elapsed() >= every)
    }

    fn show(&mut self, status: &Status) {
        if self.quiet || !self.due() {
            return;
        }
        self.last = Some(Instant::now());
        if self.json {
            println!("{}", serde_json::to_string(status).unwrap_or_default());
        } else if self.terminal {
            eprint!("\r{}\x1b[K", summary(status));
            self.drawn = true;
        } else {
            eprintln!("{}", summary(status));
        }
        let _ = std::io::stderr().flush();
    }

    fn clear(&mut self) {
        if self.drawn {
            eprint!("\r\x1b[K");
            self.drawn = false;
        }
    }
}

/// "64 fr @ 48000 Hz (1333 µs) · 11 threads · set 0.52 CPU · used 0.31 · xruns 0 · degraded 0".
pub fn summary(s: &Status) -> String {
    let period = if s.frames > 0 {
        format!(
            "{} fr @ {} Hz ({:.0} µs)",
            s.frames,
            s.rate,
            s.audio_period_ns as f64 / 1000.0
        )
    } else {
        format!("period {:.0} µs", s.audio_period_ns as f64 / 1000.0)
    };
    let mut line = format!(
        "{period} · {} thread(s) reserved · set {:.2} CPU · used {:.2} · xruns {} · skipped {} · degraded {}",
        s.threads.len(),
        s.reserved_cpus,
        s.used_cpus,
        s.xruns,
        s.skipped_periods,
        s.degradations
    );
    if s.share_reserved_cpus > 0.0 {
        line.push_str(&format!(
            " · app shares set {:.2} used {:.2}",
            s.share_reserved_cpus, s.share_used_cpus
        ));
    }
    if !s.left_out.is_empty() {
        line.push_str(&format!(" · {} left out", s.left_out.len()));
    }
    line.push_str(&format!(" · {}", s.placement));
    line
}

fn settings(opts: &GuardArgs) -> Result<Settings, BrokerError> {
    let budgeting = match opts.fixed {
        Some(pct) => Budgeting::Fixed { pct },
        None => Budgeting::Adaptive(AdaptiveConfig {
            increment_pct: opts.increment,
            min_budget_pct: opts.min,
            initial_budget_pct: opts.initial,
            max_budget_pct: opts.max,
            predictor: PredictorConfig {
                kind: parse::predictor(&opts.predictor)?,
                window: opts.window,
            },
            ..AdaptiveConfig::default()
        }),
    };
    let period_ns = opts
        .period
        .as_deref()
        .map(|p| parse::time(p, "--period 1333us"))
        .transpose()?
        .map(|d| d.as_nanos() as u64);
    Ok(Settings {
        cores: parse::cores(opts.core.as_deref())?,
        budgeting,
        reclaim: !opts.no_reclaim,
        interval: parse::time(&opts.interval, "--interval 100ms")?,
        period_ns,
        app_share: opts.share.app_share()?,
        workgroup: opts.workgroup,
    })
}
