//! `tessera why [CELL | --pid P]`: every miss of the watched threads as it
//! happens, with its cause and the µs each part of the cycle took (a line
//! each, or a JSON object each with `--json`), and the totals at the end.
//! Without the privilege or the kernel events to attribute, it says so and
//! counts the cell's misses as "unknown"; it never fails for that.

use crate::failure::{failed, Failure};
use clap::Args;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tessera_broker::Session;
use tessera_why::{Attribution, Cause, Miss, Tracer, Watch};

pub const EXAMPLES: &str = "Examples:\n  tessera why synth\n  tessera why --pid 4242 --deadline 2ms --period 5ms --seconds 30\n  tessera why synth --seconds 60 --json";

#[derive(Args)]
pub struct WhyArgs {
    /// The cell whose threads to watch.
    pub cell: Option<String>,
    /// Watch the threads of this process (or this thread) instead.
    #[arg(long, conflicts_with = "cell")]
    pub pid: Option<i32>,
    /// A cycle must end this long after its release (default: the
    /// thread's reservation's deadline).
    #[arg(long)]
    pub deadline: Option<String>,
    /// Its releases lie on a grid of this period (default: the reservation's).
    #[arg(long)]
    pub period: Option<String>,
    /// Its own work may take this long (default: the reservation's runtime).
    #[arg(long)]
    pub budget: Option<String>,
    /// Stop after this many seconds and print the totals (default: until interrupted).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// One JSON object per miss, then one with the totals.
    #[arg(long)]
    pub json: bool,
}

/// The totals printed at the end.
#[derive(serde::Serialize)]
struct Totals<'a> {
    unavailable: &'a Option<String>,
    watched: &'a [Watch],
    cycles: u64,
    records: u64,
    lost: u64,
    /// Misses judged "unknown" because their records were lost.
    lost_misses: usize,
    causes: &'a tessera_why::Causes,
}

pub fn run(args: WhyArgs) -> Result<ExitCode, Failure> {
    let ns = |flag: &Option<String>, example: &str| -> Result<Option<u64>, Failure> {
        flag.as_deref()
            .map(|t| crate::parse::time(t, example).map(|d| d.as_nanos() as u64))
            .transpose()
            .map_err(Failure::from)
    };
    let deadline = ns(&args.deadline, "--deadline 2ms")?;
    let period = ns(&args.period, "--period 5ms")?;
    let budget = ns(&args.budget, "--budget 1ms")?;
    let mut session = Session::connect().ok();
    let tids = threads(&args, session.as_mut())?;
    let mut watches = vec![];
    for tid in tids {
        match tessera_why::watch(tid, deadline, period, budget) {
            Ok(w) => watches.push(w),
            Err(e) => eprintln!("tessera why: not watching {tid}: {e} (fix: {})", e.fix()),
        }
    }
    if watches.is_empty() {
        return Err(failed(
            "no thread to watch",
            "give --deadline or --period for threads without a reservation",
        ));
    }
    let cells = session
        .as_mut()
        .map(Session::cell_of_threads)
        .unwrap_or_default();
    let until = args
        .seconds
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    let started = tessera_sys::clock::monotonic_ns();
    let attribution = match Tracer::start(&watches, cells) {
        Ok(mut tracer) => {
            let mut printed = 0;
            while until.is_none_or(|u| Instant::now() < u) {
                std::thread::sleep(Duration::from_millis(100));
                for miss in tracer.poll() {
                    print_miss(&miss, started, args.json)?;
                    printed += 1;
                }
            }
            let mut all = tracer.stop();
            for miss in &all.misses[printed..] {
                print_miss(miss, started, args.json)?;
            }
            all.watched = watches;
            all
        }
        Err(e) => {
            eprintln!(
                "tessera why: {e}; every miss counts as \"unknown\" (fix: {})",
                e.fix()
            );
            let mut unknown = Attribution::unavailable(&e);
            unknown.watched = watches;
            let misses_at = |s: Option<&mut Session>| s.and_then(|s| cell_misses(s, &args.cell));
            let first = misses_at(session.as_mut());
            if let Some(u) = until {
                std::thread::sleep(u.saturating_duration_since(Instant::now()));
            } else {
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            if let (Some(a), Some(b)) = (first, misses_at(session.as_mut())) {
                unknown.causes.add_unknown(b.saturating_sub(a));
            }
            unknown
        }
    };
    print_totals(&attribution, args.json)?;
    Ok(ExitCode::SUCCESS)
}

/// The threads to watch: the cell's members, or the process's threads.
fn threads(args: &WhyArgs, session: Option<&mut Session>) -> Result<Vec<i32>, Failure> {
    match (&args.cell, args.pid) {
        (Some(cell), _) => {
            let session = session.ok_or_else(|| {
                failed(
                    "the broker is not reachable to name the cell's threads",
                    "start `tessera daemon`, or give --pid",
                )
            })?;
            Ok(session.show(cell)?.members.iter().map(|m| m.tid).collect())
        }
        (None, Some(pid)) => tessera_sys::proc::threads_of(pid).map_err(Failure::from),
        (None, None) => Err(failed(
            "nothing to watch",
            "name a cell (`tessera why CELL`) or a process (`--pid P`)",
        )),
    }
}

/// The misses and xruns the cell has reported to the broker so far.
fn cell_misses(session: &mut Session, cell: &Option<String>) -> Option<u64> {
    let cell = cell.as_deref()?;
    let sample = session.monitor(None, 0).ok()?.pop()?;
    let c = sample.cells.into_iter().find(|c| c.name == cell)?;
    Some(c.misses_total + c.xruns_total)
}

fn print_miss(miss: &Miss, started: u64, json: bool) -> Result<(), Failure> {
    let line = match json {
        true => serde_json::to_string(miss).map_err(|e| failed(e.to_string(), ""))?,
        false => render(miss, started),
    };
    println!("{line}");
    Ok(())
}

/// `  3.210 s  tid 4242 (synth) cpu 1  waited for a CPU  3512.0 µs > 2000.0 µs: ...`
fn render(miss: &Miss, started: u64) -> String {
    let at = miss.release_ns.saturating_sub(started) as f64 / 1e9;
    let parts: Vec<String> = miss
        .parts_us
        .iter()
        .map(|(cause, us)| match cause {
            Cause::WaitedForCpu => format!("{} {us:.1} ({})", cause.name(), holders(miss)),
            _ => format!("{} {us:.1}", cause.name()),
        })
        .collect();
    let faults = match miss.faults {
        0 => String::new(),
        n => format!("; {n} page faults"),
    };
    format!(
        "{at:8.3} s  tid {} ({}) cpu {}  {}  {:.1} µs > {:.1} µs: {}{faults}",
        miss.tid,
        miss.comm,
        miss.cpu,
        miss.cause_name(),
        miss.response_us,
        miss.deadline_us,
        parts.join(", ")
    )
}

fn holders(miss: &Miss) -> String {
    let named: Vec<String> = miss
        .holders
        .iter()
        .map(|h| {
            let cell = h
                .cell
                .as_deref()
                .map_or("no cell".into(), |c| format!("cell {c}"));
            let server = match h.fair_server_note() {
                "" => String::new(),
                note => format!(", {note}"),
            };
            format!(
                "by {} {} prio {}, {cell}{server}, {:.1}",
                h.pid, h.comm, h.prio, h.us
            )
        })
        .collect();
    named.join("; ")
}

fn print_totals(a: &Attribution, json: bool) -> Result<(), Failure> {
    if json {
        let totals = Totals {
            unavailable: &a.unavailable,
            watched: &a.watched,
            cycles: a.cycles,
            records: a.records,
            lost: a.lost,
            lost_misses: a.lost_misses(),
            causes: &a.causes,
        };
        let line = serde_json::to_string(&totals).map_err(|e| failed(e.to_string(), ""))?;
        println!("{line}");
        return Ok(());
    }
    let by_cause: Vec<String> = a
        .causes
        .misses
        .iter()
        .map(|(c, n)| format!("{} {n} ({:.1} µs)", c.name(), a.causes.us[c]))
        .collect();
    println!(
        "{} threads, {} cycles, {} misses{}{}",
        a.watched.len(),
        a.cycles,
        a.causes.total(),
        match by_cause.is_empty() {
            true => String::new(),
            false => format!(": {}", by_cause.join(", ")),
        },
        match (a.lost, a.lost_misses()) {
            (0, _) => String::new(),
            (n, 0) => format!("; {n} events lost"),
            (n, m) => format!("; {n} events lost ({m} misses unknown for it)"),
        }
    );
    Ok(())
}
