//! The soak's report: README.md with the verdict against the goals and a
//! row per minute (misses, Δt p99 and max; each process's RSS and open
//! descriptors), and the plots over time (PNG and SVG, drawn by
//! tessera-measure): misses per minute, Δt p99 and max per minute, each
//! process's RSS growth and open descriptors.
//!
//! Owns the report's layout. It must never compute the verdict: that is
//! in the results.

use std::fmt::Write as _;
use std::path::Path;

use tessera_measure::plot::{self, SeriesPanel};
use tessera_measure::{RunResults, Series};

use super::results::{MinuteDt, ProcessSample, Sample, SoakResults};

const KIB_PER_MIB: f64 = 1024.0;

/// Writes README.md and the plots into `dir` (`run` is the configuration's
/// usual results, reported in `dir/run`; none when the run was cut short).
pub fn write(results: &SoakResults, run: Option<&RunResults>, dir: &Path) -> Result<(), String> {
    let plots = plots(results, dir)?;
    let readme = readme(results, run, &plots);
    std::fs::write(dir.join("README.md"), readme).map_err(|e| format!("README.md: {e}"))
}

/// Seconds since the end of the warm-up of minute `m`'s end.
fn at(minute: u64) -> f64 {
    minute as f64 * 60.0
}

/// A series of each minute's `value`.
fn per_minute(name: &str, unit: &str, minutes: &[MinuteDt], value: fn(&MinuteDt) -> f64) -> Series {
    let mut series = Series::with_capacity(name, unit, minutes.len());
    for m in minutes {
        series.push(at(m.minute), value(m));
    }
    series
}

/// A level drawn across the run, e.g. the deadline.
fn level(name: &str, unit: &str, value: f64, last_minute: u64) -> Series {
    let mut series = Series::with_capacity(name, unit, 2);
    series.push(0.0, value);
    series.push(at(last_minute.max(1)), value);
    series
}

/// One series per process of `value` over the samples.
fn per_process(
    samples: &[Sample],
    unit: &str,
    value: impl Fn(&ProcessSample, &ProcessSample) -> f64,
) -> Vec<Series> {
    let mut all: Vec<(Series, ProcessSample)> = Vec::new();
    for s in samples {
        for p in &s.processes {
            let index = match all.iter().position(|(series, _)| series.name == p.name) {
                Some(i) => i,
                None => {
                    all.push((
                        Series::with_capacity(&p.name, unit, samples.len()),
                        p.clone(),
                    ));
                    all.len() - 1
                }
            };
            let (series, first) = &mut all[index];
            series.push(at(u64::from(s.minute)), value(first, p));
        }
    }
    all.into_iter().map(|(series, _)| series).collect()
}

/// The plots' file names (stems) and captions.
fn plots(results: &SoakResults, dir: &Path) -> Result<Vec<(&'static str, String)>, String> {
    // A sliver of packages after the run's last minute (the sender's
    // schedule slipped) is in the table, not in the plots.
    let last = u64::from(results.minutes);
    let minutes: Vec<MinuteDt> = results
        .minutes_dt
        .iter()
        .filter(|m| m.minute <= last)
        .cloned()
        .collect();
    let minutes = minutes.as_slice();
    let label = results.configuration.as_str();
    let draw = |stem: &'static str, title: String, y: &str, series: Vec<Series>| {
        let panel = SeriesPanel {
            label,
            series: series.iter().collect(),
        };
        plot::time_series(&dir.join(stem), &title, y, &[panel])
            .map(|_| (stem, title))
            .map_err(|e| e.to_string())
    };
    let goal_mib = results.rss_goal_kib as f64 / KIB_PER_MIB;
    Ok(vec![
        draw(
            "misses",
            "Misses per minute (Δt over the 1.4059 ms deadline)".into(),
            "misses per minute",
            vec![
                per_minute("misses", "", minutes, |m| m.misses as f64),
                per_minute("of them, the SLABS stalled", "", minutes, |m| {
                    m.sender_misses as f64
                }),
            ],
        )?,
        draw(
            "dt",
            "Δt per minute: p99 and maximum".into(),
            "Δt (µs)",
            vec![
                per_minute("p99", "us", minutes, |m| m.p99_us),
                per_minute("max", "us", minutes, |m| m.max_us),
                level("deadline", "us", results.deadline_us, last),
            ],
        )?,
        draw(
            "rss",
            "RSS per process: growth since the end of the warm-up".into(),
            "RSS growth (MiB)",
            per_process(&results.samples, "MiB", |first, p| {
                (p.rss_kib as f64 - first.rss_kib as f64) / KIB_PER_MIB
            })
            .into_iter()
            .chain([level(
                &format!("goal: +{goal_mib:.0} MiB at most"),
                "MiB",
                goal_mib,
                last,
            )])
            .collect(),
        )?,
        draw(
            "fds",
            "Open file descriptors per process".into(),
            "open file descriptors",
            per_process(&results.samples, "", |_, p| p.fds as f64),
        )?,
    ])
}

fn met(ok: bool) -> &'static str {
    match ok {
        true => "**met**",
        false => "**not met**",
    }
}

fn mib(kib: u64) -> String {
    format!("{:.2}", kib as f64 / KIB_PER_MIB)
}

fn signed_mib(kib: i64) -> String {
    format!("{:+.2}", kib as f64 / KIB_PER_MIB)
}

fn readme(results: &SoakResults, run: Option<&RunResults>, plots: &[(&str, String)]) -> String {
    let mut out = String::new();
    let v = &results.verdict;
    let _ = writeln!(
        out,
        "# {}\n\n{}, {} minutes after {:.0} s of warm-up, started {}, on {}. tessera {}.{}\n",
        results.scenario,
        results.configuration,
        results.minutes,
        results.warmup_s,
        results.started_at,
        results.machine.describe(),
        results.tool_version,
        match results.finished {
            true => "",
            false => " **The run did not finish: what follows is what it measured.**",
        }
    );
    let _ = writeln!(
        out,
        "Sampled each minute: the resident memory (VmRSS) and open file descriptors of every \
         tessera process (this run, what it started, any other running the tessera binary), and \
         the music application's Δt = t2 − t1 of the packages that began in the minute, against \
         the {:.1} µs deadline. The application keeps Δt per minute, the emulator a ring of send \
         times and the engine a few seconds of profile, so nothing the run keeps grows with its \
         length. Memory is locked (mlockall), so RSS is all a process has allocated.\n",
        results.deadline_us
    );
    let _ = writeln!(out, "## Verdict\n\n| goal | measured | |\n|---|---|---|");
    for p in &v.processes {
        let _ = writeln!(
            out,
            "| RSS of {} grows by {} MiB at most | {} → {} MiB: {} MiB{} | {} |",
            p.name,
            mib(results.rss_goal_kib),
            mib(p.first_kib),
            mib(p.last_kib),
            signed_mib(p.growth_kib),
            p.growth_after_first_minute_kib
                .map(|g| format!(" ({} MiB after the first minute)", signed_mib(g)))
                .unwrap_or_default(),
            met(p.rss_met)
        );
    }
    for p in &v.processes {
        let _ = writeln!(
            out,
            "| open descriptors of {} stay flat | {} → {} (at most {}) | {} |",
            p.name,
            p.first_fds,
            p.last_fds,
            p.peak_fds,
            met(p.fds_flat)
        );
    }
    let t = &v.misses;
    let _ = writeln!(
        out,
        "| misses per minute stay flat | {} misses in {} minutes (at most {} in one); {:.2}/min in \
         the first half, {:.2}/min in the second; slope {:+.3}/min per minute | {} |\n",
        t.total,
        t.minutes,
        t.most_in_a_minute,
        t.first_half_per_minute,
        t.second_half_per_minute,
        t.slope,
        met(!t.rising)
    );
    let _ = writeln!(
        out,
        "Misses per minute count as rising when the second half of the run had more than \
         three standard deviations + 1 more than the first. The deviation is the larger of the \
         Poisson one, √(both halves' misses), and the one the minutes' own spread gives, \
         √(n/2 × (s₁² + s₂²)) with s² each half's variance per minute: misses on a virtual \
         machine come in bursts, far more spread than Poisson counts.\n"
    );
    let metric = tessera_music::RESPONSE_METRIC;
    if let Some(run) = run.filter(|r| r.metric_names().contains(&metric)) {
        let _ = writeln!(
            out,
            "## Δt over the whole run\n\n{}\n",
            tessera_measure::summary_table(run, metric)
        );
    }
    let _ = writeln!(out, "## Plots\n");
    for (stem, title) in plots {
        let _ = writeln!(out, "![{title}]({stem}.png) ([SVG]({stem}.svg))\n");
    }
    out.push_str(&table(results));
    if run.is_some() {
        let _ = writeln!(
            out,
            "\nThe configuration's full report (Δt histograms, the emulator's tf − t0, the \
             video players and the GUI): [run/README.md](run/README.md)."
        );
    }
    let _ = writeln!(out, "\n## Notes\n");
    for n in &results.notes {
        let _ = writeln!(out, "- {n}");
    }
    out
}

/// A row per minute: its Δt, then each process's RSS and descriptors at
/// its end (minute 0: the end of the warm-up).
fn table(results: &SoakResults) -> String {
    let names: Vec<&str> = results
        .verdict
        .processes
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    let mut out =
        String::from("## Per minute\n\n| minute | packages | misses | Δt p99 (µs) | Δt max (µs) |");
    for n in &names {
        let _ = write!(out, " RSS {n} (MiB) | FDs {n} |");
    }
    out.push_str("\n|---|---|---|---|---|");
    out.push_str(&"---|---|".repeat(names.len()));
    out.push('\n');
    let last = results
        .minutes_dt
        .iter()
        .map(|m| m.minute)
        .chain(results.samples.iter().map(|s| u64::from(s.minute)))
        .max()
        .unwrap_or(0);
    for minute in 0..=last {
        let label = match minute {
            0 => "0 (end of the warm-up)".to_string(),
            m if m > u64::from(results.minutes) => format!("{m} (after the run's end)"),
            m => m.to_string(),
        };
        let _ = match results.minutes_dt.iter().find(|m| m.minute == minute) {
            Some(m) => write!(
                out,
                "| {label} | {} | {} | {:.0} | {:.0} |",
                m.packages, m.misses, m.p99_us, m.max_us
            ),
            None => write!(out, "| {label} | | | | |"),
        };
        let sample = results
            .samples
            .iter()
            .find(|s| u64::from(s.minute) == minute);
        for n in &names {
            let _ = match sample.and_then(|s| s.processes.iter().find(|p| p.name == *n)) {
                Some(p) => write!(out, " {} | {} |", mib(p.rss_kib), p.fds),
                None => write!(out, " | |"),
            };
        }
        out.push('\n');
    }
    out
}
