//! `tessera top`: a live view of the cells, like pw-top and top — per cell
//! and per thread the budget set and the CPU used per period, the load, the
//! misses and xruns per second, refreshed every interval from the broker's
//! monitor (daemon or embedded). Interactive on a terminal (keys sort, show
//! threads, change the interval, quit), plain refreshes in batch mode
//! (`-b`), one JSON sample per refresh with `--json`. Thin: the samples come
//! from `tessera_broker::monitor`; this file only sorts and prints.

use crate::failure::{failed, Failure};
use clap::{Args, ValueEnum};
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyModifiers};
use crossterm::{cursor, execute, terminal};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;
use tessera_broker::monitor::{CellSample, Sample};
use tessera_broker::Session;

pub const EXAMPLES: &str = "Examples:\n  \
    tessera top                      # live; keys: c cpu, l load, m misses, x xruns, b budget, n name,\n  \
    \x20                                # t threads, + / - interval, q quit\n  \
    tessera top -b -n 5 -d 2         # five plain refreshes, two seconds apart (for logs)\n  \
    tessera top --json -n 1          # one sample as JSON (for scripts)\n  \
    tessera top -s misses --threads";

#[derive(Args)]
pub struct TopArgs {
    /// Seconds between refreshes.
    #[arg(short = 'd', long = "delay", default_value_t = 1.0)]
    pub delay: f64,
    /// Stop after this many refreshes (default: until q or Ctrl-C).
    #[arg(short = 'n', long = "iterations")]
    pub iterations: Option<u64>,
    /// Plain refreshes one after another, no terminal control (for logs and scripts).
    #[arg(short = 'b', long = "batch")]
    pub batch: bool,
    /// One JSON sample per refresh (implies --batch).
    #[arg(long)]
    pub json: bool,
    /// What to sort the cells by.
    #[arg(short = 's', long = "sort", value_enum, default_value_t = SortKey::Cpu)]
    pub sort: SortKey,
    /// Show each cell's threads under it.
    #[arg(long)]
    pub threads: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SortKey {
    Cpu,
    Load,
    Misses,
    Xruns,
    Budget,
    Name,
}

struct View {
    sort: SortKey,
    threads: bool,
    delay: Duration,
}

fn internal(e: impl std::fmt::Display) -> Failure {
    failed(e.to_string(), "")
}

pub fn run(args: TopArgs) -> Result<ExitCode, Failure> {
    if !(args.delay >= 0.1 && args.delay <= 3600.0) {
        return Err(crate::parse::invalid(
            format!("a delay of {} s", args.delay),
            "give -d between 0.1 and 3600 seconds",
        )
        .into());
    }
    let mut view = View {
        sort: args.sort,
        threads: args.threads,
        delay: Duration::from_secs_f64(args.delay),
    };
    let mut session = Session::connect()?;
    let interactive = !args.batch && !args.json && std::io::stdout().is_terminal();
    if interactive {
        return interactive_loop(&mut session, &mut view, args.iterations);
    }
    let mut shown = 0;
    loop {
        let sample = latest(&mut session, &view)?;
        let text = match args.json {
            true => serde_json::to_string(&sample).map_err(internal)? + "\n",
            false => render(&sample, &view, &session.describe()),
        };
        print!("{text}");
        std::io::stdout().flush().map_err(internal)?;
        shown += 1;
        if args.iterations.is_some_and(|n| shown >= n) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(view.delay);
    }
}

/// The newest sample, taken now if the monitor's is older than the delay
/// (only the last few seconds of the series are asked for).
fn latest(session: &mut Session, view: &View) -> Result<Sample, Failure> {
    let fresh_ms = view.delay.as_millis() as u64;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let since = now_ms.saturating_sub(fresh_ms + 5000);
    session
        .monitor(Some(since), fresh_ms)?
        .pop()
        .ok_or_else(|| internal("the monitor has no sample"))
}

/// On a terminal: the alternate screen, redrawn in place; keys change the
/// view. The terminal is restored however the loop ends.
fn interactive_loop(
    session: &mut Session,
    view: &mut View,
    iterations: Option<u64>,
) -> Result<ExitCode, Failure> {
    let mut out = std::io::stdout();
    terminal::enable_raw_mode().map_err(internal)?;
    execute!(out, terminal::EnterAlternateScreen, cursor::Hide).map_err(internal)?;
    let result = (|| {
        let mut shown = 0;
        loop {
            let sample = latest(session, view)?;
            let text = render(&sample, view, &session.describe()).replace('\n', "\r\n");
            execute!(
                out,
                cursor::MoveTo(0, 0),
                terminal::Clear(terminal::ClearType::All)
            )
            .map_err(internal)?;
            write!(out, "{text}").map_err(internal)?;
            out.flush().map_err(internal)?;
            shown += 1;
            if iterations.is_some_and(|n| shown >= n) || !wait_for_keys(view)? {
                return Ok(ExitCode::SUCCESS);
            }
        }
    })();
    let _ = execute!(out, cursor::Show, terminal::LeaveAlternateScreen);
    let _ = terminal::disable_raw_mode();
    result
}

/// Waits one delay, taking keys as they come; false when told to quit.
fn wait_for_keys(view: &mut View) -> Result<bool, Failure> {
    let until = std::time::Instant::now() + view.delay;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || !event::poll(left).map_err(internal)? {
            return Ok(true);
        }
        if let Event::Key(key) = event::read().map_err(internal)? {
            if !apply_key(view, key) {
                return Ok(false);
            }
            return Ok(true);
        }
    }
}

/// What a key does to the view; false to quit.
fn apply_key(view: &mut View, key: KeyEvent) -> bool {
    let sort = |view: &mut View, key| view.sort = key;
    match key.code {
        KeyCode::Char('q') | KeyCode::Esc => return false,
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => return false,
        KeyCode::Char('c') => sort(view, SortKey::Cpu),
        KeyCode::Char('l') => sort(view, SortKey::Load),
        KeyCode::Char('m') => sort(view, SortKey::Misses),
        KeyCode::Char('x') => sort(view, SortKey::Xruns),
        KeyCode::Char('b') => sort(view, SortKey::Budget),
        KeyCode::Char('n') => sort(view, SortKey::Name),
        KeyCode::Char('t') => view.threads = !view.threads,
        KeyCode::Char('+') => view.delay = (view.delay * 2).min(Duration::from_secs(60)),
        KeyCode::Char('-') => view.delay = (view.delay / 2).max(Duration::from_millis(100)),
        _ => {}
    }
    true
}

/// Per second over the sample's interval.
fn per_second(count: u64, sample: &Sample) -> f64 {
    match sample.interval_ns {
        0 => 0.0,
        ns => count as f64 * 1e9 / ns as f64,
    }
}

fn sorted(sample: &Sample, key: SortKey) -> Vec<&CellSample> {
    let mut cells: Vec<&CellSample> = sample.cells.iter().collect();
    let number = |c: &CellSample| match key {
        SortKey::Cpu => c.cpu_pct(),
        SortKey::Load => c.load_pct().unwrap_or(-1.0),
        SortKey::Misses => c.misses as f64,
        SortKey::Xruns => c.xruns as f64,
        SortKey::Budget => c
            .budget
            .map_or(-1.0, |b| b.runtime_ns as f64 / b.period_ns as f64),
        SortKey::Name => 0.0,
    };
    match key {
        SortKey::Name => cells.sort_by(|a, b| a.name.cmp(&b.name)),
        _ => cells.sort_by(|a, b| number(b).total_cmp(&number(a)).then(a.name.cmp(&b.name))),
    }
    cells
}

fn micros(ns: u64) -> String {
    format!("{}µs", ns / 1000)
}

/// One refresh as text: a header, a row per cell (and its threads), and
/// what adaptation changed.
fn render(sample: &Sample, view: &View, broker: &str) -> String {
    let reserved: f64 = sample
        .cells
        .iter()
        .filter_map(|c| {
            c.budget
                .map(|b| b.runtime_ns as f64 / b.period_ns as f64 * c.reservations as f64)
        })
        // Not `sum`: f64's sum of nothing is −0.0, printed "-0.00".
        .fold(0.0, |total, cores| total + cores);
    let mut out = format!(
        "tessera top — {} cells, {reserved:.2} cores reserved; {broker}; every {:.1} s, sorted by {}\n",
        sample.cells.len(),
        view.delay.as_secs_f64(),
        sort_name(view.sort),
    );
    let _ = writeln!(
        out,
        "{:<24} {:<16} {:>17} {:>9} {:>7} {:>6} {:>7} {:>7} {:>3}",
        "CELL", "POLICY", "BUDGET/PERIOD", "USED", "LOAD", "CPU%", "MISS/s", "XRUN/s", "THR"
    );
    for cell in sorted(sample, view.sort) {
        let budget = cell.budget.map_or("-".into(), |b| {
            format!("{}/{}", micros(b.runtime_ns), micros(b.period_ns))
        });
        let _ = writeln!(
            out,
            "{:<24} {:<16} {:>17} {:>9} {:>7} {:>6.1} {:>7.1} {:>7.1} {:>3}{}",
            truncate(&cell.name, 24),
            cell.policy,
            budget,
            cell.used_ns.map_or("-".into(), micros),
            cell.load_pct().map_or("-".into(), |l| format!("{l:.1}%")),
            cell.cpu_pct(),
            per_second(cell.misses, sample),
            per_second(cell.xruns, sample),
            cell.threads.len(),
            mark(cell),
        );
        if view.threads {
            for t in &cell.threads {
                let _ = writeln!(
                    out,
                    "  └ {:<8} {:<28} {:>17} {:>9} {:>7} {:>6.1}",
                    t.tid,
                    truncate(&t.name, 28),
                    "",
                    t.used_ns.map_or("-".into(), micros),
                    "",
                    t.cpu_pct
                );
            }
        }
    }
    render_unguaranteed(&mut out, sample);
    for change in &sample.changes {
        let _ = writeln!(out, "adapted: {change}");
    }
    out
}

/// The real-time threads outside every cell, as the daemon reported them:
/// RTKit's fallback left them on SCHED_RR, with nothing guaranteed.
fn render_unguaranteed(out: &mut String, sample: &Sample) {
    if sample.unguaranteed.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "UNGUARANTEED: real-time without a reservation (admission refused; RTKit's SCHED_RR)"
    );
    let _ = writeln!(
        out,
        "{:<8} {:<28} {:>8} {:>6} {:<12} WHY",
        "TID", "THREAD", "PID", "UID", "POLICY"
    );
    for t in &sample.unguaranteed {
        let policy = format!("SCHED_RR {}", t.priority);
        let _ = writeln!(
            out,
            "{:<8} {:<28} {:>8} {:>6} {policy:<12} {}",
            t.tid,
            truncate(&t.name, 28),
            t.pid,
            t.uid,
            t.why
        );
    }
}

fn sort_name(key: SortKey) -> &'static str {
    match key {
        SortKey::Cpu => "cpu",
        SortKey::Load => "load",
        SortKey::Misses => "misses",
        SortKey::Xruns => "xruns",
        SortKey::Budget => "budget",
        SortKey::Name => "name",
    }
}

/// What the RAP service may not change, at the end of a cell's line.
fn mark(cell: &CellSample) -> &'static str {
    match (cell.pinned, cell.owner_adapts) {
        (true, _) => "  pinned",
        (false, true) => "  owner adapts",
        (false, false) => "",
    }
}

fn truncate(text: &str, width: usize) -> String {
    text.chars().take(width).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_broker::state::UnguaranteedThread;

    fn view() -> View {
        View {
            sort: SortKey::Cpu,
            threads: false,
            delay: Duration::from_secs(1),
        }
    }

    fn sample(unguaranteed: Vec<UnguaranteedThread>) -> Sample {
        Sample {
            t_unix_ms: 0,
            t_mono_ns: 0,
            interval_ns: 1_000_000_000,
            cells: Vec::new(),
            unguaranteed,
            changes: Vec::new(),
        }
    }

    #[test]
    fn threads_left_on_rtkits_sched_rr_are_labelled_unguaranteed() {
        let thread = UnguaranteedThread {
            pid: 4000,
            tid: 4001,
            uid: 1000,
            name: "data-loop.0".into(),
            priority: 20,
            why: "over uid 1000's quota".into(),
        };
        let text = render(&sample(vec![thread]), &view(), "daemon");
        assert!(text.contains("UNGUARANTEED"), "{text}");
        let row = text.lines().find(|l| l.starts_with("4001")).expect(&text);
        assert!(
            row.contains("data-loop.0") && row.contains("SCHED_RR 20"),
            "{row}"
        );
        assert!(row.contains("over uid 1000's quota"), "{row}");
    }

    #[test]
    fn without_such_threads_there_is_no_unguaranteed_section() {
        let text = render(&sample(Vec::new()), &view(), "daemon");
        assert!(!text.contains("UNGUARANTEED"), "{text}");
    }
}
