//! The workgroup benchmark's outputs: workgroup.json (every figure), one
//! CSV per configuration with the budget set, used and demanded in every
//! cycle (the format is this module's: `cycle,t_s,missed,demand_ns,
//! used_ns,reserved_ns`, each summed over the host's four threads), the
//! plot of the three per cycle, README.md, and the summary table printed at
//! the end.
//!
//! It only formats what the run measured; it must never compute a figure
//! the results do not hold (they come from [`super::cycles`]).

use super::cycles::Cycle;
use super::results::{
    Config, ConfigResult, ThreadFigures, WorkgroupResults, GOAL_CALL_P99_NS, GOAL_CONVERGE_CYCLES,
    GOAL_MISSES_PER_STEP, GOAL_RESERVED_PER_DEMAND, PERIOD_NS,
};
use crate::bench::output::{stopped_early, write_file, write_json};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tessera_measure::plot::{self, SeriesPanel};
use tessera_measure::Series;

/// The plot's file name without extension (PNG and SVG beside README.md).
const PLOT_STEM: &str = "budget-per-cycle";
const JSON: &str = "workgroup.json";

/// Writes workgroup.json, the CSVs, the plot and README.md into `dir`;
/// returns the README's path.
pub(super) fn write(
    results: &WorkgroupResults,
    series: &[(Config, Vec<Cycle>)],
    dir: &Path,
) -> Result<PathBuf, String> {
    write_json(dir, JSON, results)?;
    for (config, cycles) in series {
        write_file(&dir.join(csv_name(*config)), &csv(cycles))?;
    }
    if !series.is_empty() {
        plot(series, dir)?;
    }
    let readme = dir.join("README.md");
    write_file(&readme, &readme_text(results))?;
    Ok(readme)
}

fn csv_name(config: Config) -> String {
    format!("cycles-{}.csv", config.name())
}

fn csv(cycles: &[Cycle]) -> String {
    let mut text = String::from("cycle,t_s,missed,demand_ns,used_ns,reserved_ns\n");
    for c in cycles {
        let _ = writeln!(
            text,
            "{},{:.6},{},{},{},{}",
            c.index,
            seconds(c),
            u8::from(c.missed),
            c.demand_ns,
            c.used_ns,
            c.reserved_ns
        );
    }
    text
}

/// A cycle's time from the first cycle, s.
fn seconds(c: &Cycle) -> f64 {
    (c.index * PERIOD_NS) as f64 / 1e9
}

/// One panel per configuration: the budget reserved, the CPU time used and
/// the chain's demand per cycle, % of the period.
fn plot(series: &[(Config, Vec<Cycle>)], dir: &Path) -> Result<(), String> {
    let pct = |ns: u64| ns as f64 * 100.0 / PERIOD_NS as f64;
    let of = |name: &str, cycles: &[Cycle], value: &dyn Fn(&Cycle) -> u64| {
        let mut s = Series::with_capacity(name, "%", cycles.len());
        for c in cycles {
            s.push(seconds(c), pct(value(c)));
        }
        s
    };
    let drawn: Vec<(&str, [Series; 3])> = series
        .iter()
        .map(|(config, cycles)| {
            let three = [
                of("budget set", cycles, &|c| c.reserved_ns),
                of("used", cycles, &|c| c.used_ns),
                of("demand", cycles, &|c| c.demand_ns),
            ];
            (config.name(), three)
        })
        .collect();
    let panels: Vec<SeriesPanel> = drawn
        .iter()
        .map(|(label, three)| SeriesPanel {
            label,
            series: three.iter().collect(),
        })
        .collect();
    plot::time_series(
        &dir.join(PLOT_STEM),
        "Budget set, CPU used and demand per cycle (four threads summed)",
        "% of the period",
        &panels,
    )
    .map(drop)
    .map_err(|e| e.to_string())
}

/// The plot, when a configuration was measured.
fn plot_link(results: &WorkgroupResults) -> String {
    match results.configs.is_empty() {
        true => String::new(),
        false => format!("![budget set, used and demand per cycle]({PLOT_STEM}.png)\n\n"),
    }
}

fn opt<T>(value: Option<T>, show: impl Fn(T) -> String) -> String {
    value.map_or("–".into(), show)
}

/// Per configuration: missed cycles, the most in one step, cycles to
/// converge after the up-steps, reserved ÷ p99 demand, the calls' p99.
fn rows(results: &WorkgroupResults) -> Vec<[String; 6]> {
    results
        .configs
        .iter()
        .map(|c: &ConfigResult| {
            [
                c.config.name().to_string(),
                format!("{}/{}", c.missed, c.cycles),
                opt(c.steps.iter().map(|s| s.missed).max(), |m| m.to_string()),
                opt(c.converge_up_cycles, |n| n.to_string()),
                opt(c.reserved_per_p99_demand, |r| format!("{r:.2}")),
                opt(c.call_ns.as_ref(), |s| format!("{:.0}", s.p99)),
            ]
        })
        .collect()
}

const HEADINGS: [&str; 6] = [
    "configuration",
    "missed",
    "most in a step",
    "cycles to converge (up)",
    "reserved ÷ p99 demand",
    "calls p99 (ns)",
];

/// The figures of merit, printed at the end of a run.
pub fn summary_table(results: &WorkgroupResults) -> String {
    let mut text = format!(
        "{:<13} {:>13} {:>15} {:>24} {:>22} {:>15}\n",
        HEADINGS[0], HEADINGS[1], HEADINGS[2], HEADINGS[3], HEADINGS[4], HEADINGS[5]
    );
    for [a, b, c, d, e, f] in rows(results) {
        let _ = writeln!(text, "{a:<13} {b:>13} {c:>15} {d:>24} {e:>22} {f:>15}");
    }
    text.push_str(&goals());
    text
}

fn goals() -> String {
    format!(
        "goals (workgroup): at most {GOAL_MISSES_PER_STEP} missed cycle per step, converged \
         within {GOAL_CONVERGE_CYCLES} periods, reserved ≤ {GOAL_RESERVED_PER_DEMAND} × the \
         members' p99 demand, interval_start + interval_finish ≤ {:.0} µs at p99; fewer \
         misses than guard and fixed-95",
        GOAL_CALL_P99_NS / 1e3
    )
}

fn readme_text(results: &WorkgroupResults) -> String {
    let mut text = format!(
        "# Workgroups against the guard, a fixed share and plain FIFO (`tessera bench workgroup`)\n\n\
         A C host (compiled against libtessera at the start of the run) with {} threads — one \
         callback and {} workers — processing a synthetic plug-in chain on a grid of {:.3} ms \
         cycles, its work stepping between {} % and {} % of the period every {} s, under seed \
         001 §4.4's interference — {} — for {} s in each configuration, one after the other.\n\n\
         Machine: {}. Started {}, {:.0} s in all.\n\n",
        results.threads,
        results.threads - 1,
        results.period_ns as f64 / 1e6,
        results.low_pct,
        results.high_pct,
        results.step_seconds,
        results.interference,
        results.seconds,
        results.machine,
        results.started_at,
        results.total_s,
    );
    text.push_str(&stopped_early(results.stopped.as_deref()));
    let _ = writeln!(text, "| {} |", HEADINGS.join(" | "));
    text.push_str("|---|--:|--:|--:|--:|--:|\n");
    for row in rows(results) {
        let _ = writeln!(text, "| {} |", row.join(" | "));
    }
    let _ = write!(
        text,
        "\n{}.\n\n{}\
         ## Method\n\n\
         - A cycle is missed when the callback (which waits for its workers) finished after \
         the cycle's deadline (its period), or could not start it before then.\n\
         - A step's misses are those from the step to the next one; the cycles to converge are \
         those from an up-step until the summed budget per cycle stays within 10 % of its median \
         over the step's second half.\n\
         - Reserved ÷ p99 demand: over the second halves of the high phases, the median of the \
         members' budgets per cycle (summed) over the sum of each member's p99 CPU time per cycle \
         (all the CPU time a thread used for its cycle, from the end of its last one: the plug-ins, \
         the wake-ups, the semaphores and the calls around them — what its reservation pays).\n\
         - The interval calls' cost is timed around them in the host (CLOCK_MONOTONIC); {}.\n\
         - Per cycle, summed over the threads: `cycles-<configuration>.csv` (budget set = \
         `reserved_ns`, read back with sched_getattr after each cycle; used = `used_ns`, the \
         threads' CPU time for the cycle; demand = `demand_ns`, the plug-ins' work asked).\n\n\
         ## Configurations\n\n",
        goals(),
        plot_link(results),
        results.syscalls
    );
    for c in &results.configs {
        let _ = writeln!(text, "### {}\n\n{}.\n", c.config.name(), c.scheduling);
        if !c.joined.is_empty() {
            let _ = writeln!(text, "Join codes per thread: {:?}.\n", c.joined);
        }
        text.push_str("| step at (s) | from → to (%) | cycles | missed | converged after |\n|--:|--:|--:|--:|--:|\n");
        for s in &c.steps {
            let _ = writeln!(
                text,
                "| {:.1} | {} → {} | {} | {} | {} |",
                s.at_s,
                s.from_pct,
                s.to_pct,
                s.cycles,
                s.missed,
                opt(s.converged_after, |n| n.to_string())
            );
        }
        text.push_str(&thread_table(&c.threads));
        if let Some(calls) = &c.call_ns {
            let _ = writeln!(
                text,
                "\ninterval_start + interval_finish (ns): p50 {:.0}, p99 {:.0}, p99.9 {:.0}, max {:.0} over {} calls.",
                calls.p50, calls.p99, calls.p999, calls.max, calls.count
            );
        }
        for note in &c.notes {
            let _ = writeln!(text, "\n- {note}");
        }
        text.push('\n');
    }
    text
}

/// Each thread's p99 CPU time and median budget per cycle in the high
/// phases' second halves (empty without figures).
fn thread_table(threads: &[ThreadFigures]) -> String {
    if threads.is_empty() {
        return String::new();
    }
    let mut text = "\nPer thread, second halves of the 70 % phases:\n\n\
        | thread | p99 CPU per cycle (µs) | median budget per cycle (µs) | budget ÷ p99 |\n|---|--:|--:|--:|\n"
        .to_string();
    for t in threads {
        let name = match t.thread {
            0 => "callback".to_string(),
            n => format!("worker {n}"),
        };
        let ratio = if t.p99_cpu_ns > 0.0 && t.median_budget_ns > 0 {
            format!("{:.2}", t.median_budget_ns as f64 / t.p99_cpu_ns)
        } else {
            "–".into()
        };
        let _ = writeln!(
            text,
            "| {name} | {:.0} | {:.0} | {ratio} |",
            t.p99_cpu_ns / 1e3,
            t.median_budget_ns as f64 / 1e3
        );
    }
    text
}
