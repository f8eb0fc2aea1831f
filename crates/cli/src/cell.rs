//! `tessera cell …`: create, list, show, resize and destroy cells; attach,
//! detach and report threads; run or follow a program in a cell. Thin: the
//! broker decides, `follow` watches the program's threads.

use crate::failure::Failure;
use crate::{follow, parse, show};
use clap::{Args, Subcommand};
use std::process::ExitCode;
use tessera_broker::{BrokerError, Session};
use tessera_policy::{Budget, CellPolicy, CellRequest, CoreRequest};

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
        share: parse::ShareArgs,
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
        share: parse::ShareArgs,
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
        let ns = |t: &str, example: &str| parse::time(t, example).map(|d| d.as_nanos() as u64);
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

impl CreateArgs {
    pub fn into_request(self) -> Result<CellRequest, BrokerError> {
        let policy = CellPolicy::parse(&self.policy).ok_or_else(|| {
            parse::invalid(
                format!("unknown policy {:?}", self.policy),
                "use dedicated, time-triggered, event-triggered or best-effort",
            )
        })?;
        let placement = parse::placement(&self.placement)?;
        let ns = |s: &Option<String>| {
            s.as_deref()
                .map(|t| parse::time(t, "--runtime 400us").map(|d| d.as_nanos() as u64))
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
                return Err(parse::invalid(
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
            gives_way: false,
            reclaim: self.reclaim,
            overrun_signal: self.overrun_signal,
        })
    }
}

pub fn run(command: CellCommand) -> Result<ExitCode, Failure> {
    let mut session = Session::connect()?;
    match command {
        CellCommand::Create(c) => {
            let json = c.json;
            let request = c.into_request()?;
            let info = session.create_cell(request, false)?;
            show::print(json, &info, show::created)
        }
        CellCommand::List { json } => show::print(json, &session.list()?, |l| show::cells(l)),
        CellCommand::Show { name, json } => show::print(json, &session.show(&name)?, show::cell),
        CellCommand::Destroy { name } => {
            session.destroy_cell(&name)?;
            println!("cell {name:?} destroyed; its bandwidth returned to the ledger");
            Ok(ExitCode::SUCCESS)
        }
        CellCommand::Attach {
            cell,
            pid,
            follow,
            share,
            ..
        } if follow => follow::attach(session, &cell, pid, share.app_share()?),
        CellCommand::Attach {
            cell,
            pid,
            tid,
            json,
            ..
        } => {
            let tids = session.attach(&cell, pid, tid)?;
            show::print(json, &tids, |t| {
                format!("attached thread(s) {t:?} of process {pid} to cell {cell:?}\n")
            })
        }
        CellCommand::Detach { tid } => {
            session.detach(tid)?;
            println!("thread {tid} detached; its scheduling is restored");
            Ok(ExitCode::SUCCESS)
        }
        CellCommand::Exec {
            cell,
            share,
            command,
        } => follow::exec(session, &cell, &command, share.app_share()?),
        CellCommand::Report {
            name,
            misses,
            xruns,
            json,
        } => {
            let total = session.report(&name, misses, xruns)?;
            show::print(json, &total, |t| {
                format!(
                    "cell {name:?}: {} misses and {} xruns reported in all\n",
                    t.misses, t.xruns
                )
            })
        }
        CellCommand::Resize(r) => {
            let policy = session.show(&r.name)?.grant.request.policy;
            let budget = r.budget(policy == tessera_policy::CellPolicy::TimeTriggered)?;
            let reply = session.resize_cell(&r.name, budget, r.degrade)?;
            show::print(r.json, &reply, |x| {
                let note = if x.degraded {
                    " (degraded: the largest that fits)"
                } else {
                    ""
                };
                format!("cell {:?} now has {}{note}\n", r.name, x.budget)
            })
        }
    }
}
