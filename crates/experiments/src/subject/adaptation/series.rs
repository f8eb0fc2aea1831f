//! The changing-demand run's figures, from its daemon's monitor series
//! (`monitor.jsonl`): per cell group (the video cell, the music
//! application's synth cell, the guard's cells of jackd and its clients) the CPU reserved (Σ runtime /
//! period × reservations), the CPU used (Σ its threads') and the jobs missed
//! per sample, over the measured part of the run; the same summed over
//! every cell; the misses per interval. Also the report's section: misses
//! against CPU reserved per configuration, each compared with the baseline
//! (the best static allocation) as the RAP issue's goal states it.
//!
//! It only computes and states; it must never talk to a broker.

use std::fmt::Write as _;
use tessera_broker::monitor::{CellSample, Sample};
use tessera_measure::{Metric, RunResults, Series, Summary};

/// The metric of every cell together (its mean: CPU reserved on average).
pub const TOTAL: &str = "all cells: CPU reserved";
/// Misses (and xruns) per monitor interval, one series per group.
pub const MISSES: &str = "misses per interval";
/// A configuration's label saying whether its daemon adapted: on or off.
pub const ADAPTATION: &str = "adaptation";
pub const ON: &str = "on";
pub const OFF: &str = "off";
/// Adaptation's changes listed in the notes at most.
const CHANGES_LISTED: usize = 40;
/// The goal: the adaptive run reserves at most this share of what
/// the best static allocation reserves.
const GOAL_RESERVED: f64 = 0.8;

/// The metric of one group: reserved, used, jobs missed (% over time).
pub fn cell_metric(group: &str) -> String {
    format!("cell {group}")
}

/// A group of cells and the period of its jobs (for misses as % of them).
pub struct Group {
    pub name: &'static str,
    pub job_period_ns: u64,
    /// Its cells' misses are one count reported to each (the guard reports
    /// every xrun to every reserved thread's cell): the group's is their
    /// largest, not their sum.
    pub shared_count: bool,
}

/// The measured part of the run, CLOCK_MONOTONIC ns, and its origin.
pub struct Window {
    pub from_ns: u64,
    pub to_ns: u64,
    pub t0_ns: u64,
}

/// One group in one sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Point {
    reserved_pct: f64,
    used_pct: f64,
    misses: u64,
}

fn reserved_pct(cell: &CellSample) -> f64 {
    cell.budget.map_or(0.0, |b| {
        100.0 * b.runtime_ns as f64 / b.period_ns.max(1) as f64 * cell.reservations as f64
    })
}

/// The group of each cell in one sample.
fn points(
    sample: &Sample,
    groups: &[Group],
    group_of: &dyn Fn(&str) -> Option<usize>,
) -> Vec<Point> {
    let mut points = vec![Point::default(); groups.len()];
    for cell in &sample.cells {
        let Some(g) = group_of(&cell.name) else {
            continue;
        };
        let p = &mut points[g];
        p.reserved_pct += reserved_pct(cell);
        p.used_pct += cell.cpu_pct();
        let missed = cell.misses + cell.xruns;
        p.misses = match groups[g].shared_count {
            true => p.misses.max(missed),
            false => p.misses + missed,
        };
    }
    points
}

/// The metrics of the samples in `window`, a note with the totals, and
/// one note per change adaptation made during the run (warm-up included).
pub fn metrics(
    samples: &[Sample],
    window: &Window,
    groups: &[Group],
    group_of: &dyn Fn(&str) -> Option<usize>,
) -> (Vec<Metric>, Vec<String>) {
    let measured: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.t_mono_ns > window.from_ns && s.t_mono_ns <= window.to_ns)
        .collect();
    let n = measured.len();
    let series = |name: &str, unit: &str| Series::with_capacity(name, unit, n);
    let mut per_group: Vec<[Series; 3]> = groups
        .iter()
        .map(|_| {
            [
                series("reserved", "%"),
                series("used", "%"),
                series("jobs missed", "%"),
            ]
        })
        .collect();
    let mut total = [series("reserved", "%"), series("used", "%")];
    let mut misses: Vec<Series> = groups.iter().map(|g| series(g.name, "misses")).collect();
    let mut misses_per_interval = Vec::with_capacity(n);
    let mut changes = 0;
    for sample in &measured {
        let t = sample.t_mono_ns.saturating_sub(window.t0_ns) as f64 / 1e9;
        let points = points(sample, groups, group_of);
        for ((group, point), series) in groups.iter().zip(&points).zip(&mut per_group) {
            series[0].push(t, point.reserved_pct);
            series[1].push(t, point.used_pct);
            if sample.interval_ns > 0 {
                let jobs = sample.interval_ns as f64 / group.job_period_ns.max(1) as f64;
                series[2].push(t, 100.0 * point.misses as f64 / jobs);
            }
        }
        for (series, point) in misses.iter_mut().zip(&points) {
            series.push(t, point.misses as f64);
        }
        total[0].push(t, points.iter().map(|p| p.reserved_pct).sum());
        total[1].push(t, points.iter().map(|p| p.used_pct).sum());
        misses_per_interval.push(points.iter().map(|p| p.misses as f64).sum());
        changes += sample.changes.len();
    }
    let percent = |name: String, series: Vec<Series>| Metric {
        name,
        unit: "%".into(),
        deadline: None,
        summary: Summary::from_samples(&series[0].values(), None),
        histogram: None,
        series,
    };
    let totals: Vec<u64> = misses.iter().map(sum).collect();
    let mut metrics: Vec<Metric> = groups
        .iter()
        .zip(per_group)
        .map(|(g, s)| percent(cell_metric(g.name), s.into()))
        .collect();
    let reserved = Summary::from_samples(&total[0].values(), None).mean;
    let used = Summary::from_samples(&total[1].values(), None).mean;
    metrics.push(percent(TOTAL.into(), total.into()));
    metrics.push(Metric {
        name: MISSES.into(),
        unit: "misses".into(),
        deadline: None,
        summary: Summary::from_samples(&misses_per_interval, None),
        histogram: None,
        series: misses,
    });
    let by_group: Vec<String> = groups
        .iter()
        .zip(&totals)
        .map(|(g, t)| format!("{} {t}", g.name))
        .collect();
    let note = format!(
        "monitor: {n} samples measured; misses {} (total {}); CPU reserved {reserved:.1} % of a \
         CPU on average, used {used:.1} %; {changes} budget changes by adaptation",
        by_group.join(", "),
        totals.iter().sum::<u64>()
    );
    let mut notes = vec![note];
    notes.extend(changes_noted(samples, window));
    (metrics, notes)
}

/// "adapted at 12.0 s: cell video: …" for each change from t0 on.
fn changes_noted(samples: &[Sample], window: &Window) -> Vec<String> {
    let all: Vec<String> = samples
        .iter()
        .filter(|s| s.t_mono_ns > window.t0_ns && s.t_mono_ns <= window.to_ns)
        .flat_map(|s| {
            let t = (s.t_mono_ns - window.t0_ns) as f64 / 1e9;
            s.changes
                .iter()
                .map(move |c| format!("adapted by {t:.1} s: {c}"))
        })
        .collect();
    let more = all.len().saturating_sub(CHANGES_LISTED);
    let mut listed: Vec<String> = all.into_iter().take(CHANGES_LISTED).collect();
    if more > 0 {
        listed.push(format!("… and {more} more changes"));
    }
    listed
}

/// A series' values added up (whole counts).
fn sum(series: &Series) -> u64 {
    series.points.iter().map(|&(_, v)| v as u64).sum()
}

/// One configuration's figures as the report's section sees them.
struct Row<'a> {
    name: &'a str,
    adapting: Option<bool>,
    /// Per group, in the run's order.
    misses: Vec<(String, u64)>,
    reserved: f64,
    used: f64,
}

impl Row<'_> {
    /// A group's misses, "–" if it did not run here.
    fn misses_of(&self, group: &str) -> String {
        self.misses
            .iter()
            .find(|(name, _)| name == group)
            .map_or("–".to_string(), |(_, m)| m.to_string())
    }

    fn total(&self) -> u64 {
        self.misses.iter().map(|(_, m)| m).sum()
    }
}

/// The report's section for a changing-demand run (empty for other runs).
pub fn report_section(results: &RunResults) -> String {
    let rows: Vec<Row> = results
        .configurations
        .iter()
        .filter_map(|c| {
            let total = c.metric(TOTAL)?;
            let misses = c.metric(MISSES)?;
            let mean = |i: usize| {
                let series = total.series.get(i)?;
                Some(Summary::from_samples(&series.values(), None).mean)
            };
            let adapting = match c.label(ADAPTATION) {
                Some(ON) => Some(true),
                Some(OFF) => Some(false),
                _ => None,
            };
            Some(Row {
                name: &c.name,
                adapting,
                misses: misses
                    .series
                    .iter()
                    .map(|s| (s.name.clone(), sum(s)))
                    .collect(),
                reserved: mean(0)?,
                used: mean(1)?,
            })
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let baseline = results
        .baseline
        .as_deref()
        .and_then(|b| rows.iter().find(|r| r.name == b));
    let mut groups: Vec<&str> = Vec::new();
    for (group, _) in rows.iter().flat_map(|r| &r.misses) {
        if !groups.contains(&group.as_str()) {
            groups.push(group);
        }
    }
    let mut text = String::from(
        "\n## Misses against CPU reserved\n\n\
         From each configuration's daemon's monitor (one sample per interval, the measured part \
         of the run): misses as the cells' programs reported them (the video task's late or \
         dropped jobs, the music application's late cycles, JACK's xruns as the guard heard \
         them), CPU reserved Σ runtime / \
         period × reservations and used Σ the cells' threads' CPU, in % of one CPU, averaged \
         over the samples.\n\n",
    );
    let _ = writeln!(
        text,
        "| configuration | adaptation | {} | misses | reserved (%) | used (%) | reserved / baseline |",
        groups
            .iter()
            .map(|g| format!("{g} misses"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(
        text,
        "|---|---|{}--:|--:|--:|--:|",
        "--:|".repeat(groups.len())
    );
    for r in &rows {
        let ratio = baseline.map_or("–".to_string(), |b| {
            format!("{:.3}", r.reserved / b.reserved)
        });
        let adapting = match r.adapting {
            Some(true) => "on",
            Some(false) => "off",
            None => "?",
        };
        let _ = writeln!(
            text,
            "| {} | {adapting} | {} | {} | {:.1} | {:.1} | {ratio} |",
            r.name.replace('|', "\\|"),
            groups
                .iter()
                .map(|g| r.misses_of(g))
                .collect::<Vec<_>>()
                .join(" | "),
            r.total(),
            r.reserved,
            r.used
        );
    }
    let Some(baseline) = baseline else {
        return text;
    };
    text.push_str(&format!(
        "\nThe RAP issue's goal: with adaptation, no more misses than the best static allocation \
         found by hand (the baseline, **{}**: {} misses, {:.1} % reserved) with at least {:.0} % \
         less CPU reserved on average.\n\n",
        baseline.name,
        baseline.total(),
        baseline.reserved,
        (1.0 - GOAL_RESERVED) * 100.0
    ));
    let adaptive = rows
        .iter()
        .filter(|r| r.adapting == Some(true) && r.name != baseline.name);
    for r in adaptive {
        let fewer = r.total() <= baseline.total();
        let ratio = r.reserved / baseline.reserved;
        let less = ratio <= GOAL_RESERVED;
        let _ = writeln!(
            text,
            "- **{}**: {} misses ({} the baseline's {}), {:.1} % reserved = {:.3} × the \
             baseline's ({} the {:.2} asked): goal {}.",
            r.name,
            r.total(),
            if fewer { "no more than" } else { "more than" },
            baseline.total(),
            r.reserved,
            ratio,
            if less { "within" } else { "above" },
            GOAL_RESERVED,
            if fewer && less { "met" } else { "not met" }
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_broker::monitor::ThreadSample;
    use tessera_policy::Budget;

    fn cell(name: &str, runtime_us: u64, period_us: u64, cpu_pct: f64, misses: u64) -> CellSample {
        CellSample {
            name: name.into(),
            policy: "event-triggered".into(),
            budget: Some(Budget::new(runtime_us * 1000, period_us * 1000)),
            reservations: 1,
            pinned: false,
            owner_adapts: false,
            weight: 100,
            threads: vec![ThreadSample {
                pid: 1,
                tid: 2,
                start_time: 3,
                name: name.into(),
                cpu_ns: 0,
                used_ns: Some(0),
                cpu_pct,
            }],
            used_ns: Some(0),
            misses,
            xruns: 0,
            misses_total: misses,
            xruns_total: 0,
        }
    }

    fn sample(t_s: u64, cells: Vec<CellSample>) -> Sample {
        Sample {
            t_unix_ms: 0,
            t_mono_ns: t_s * 1_000_000_000,
            interval_ns: 1_000_000_000,
            cells,
            unguaranteed: Vec::new(),
            changes: Vec::new(),
        }
    }

    #[test]
    fn groups_add_up_reservations_and_the_guards_cells_share_one_count() {
        let groups = [
            Group {
                name: "video",
                job_period_ns: 100_000_000,
                shared_count: false,
            },
            Group {
                name: "jack",
                job_period_ns: 10_000_000,
                shared_count: true,
            },
        ];
        let group_of = |n: &str| Some(usize::from(n != "video"));
        let samples = [
            sample(1, vec![cell("video", 10_000, 100_000, 5.0, 0)]),
            sample(
                11,
                vec![
                    cell("video", 20_000, 100_000, 19.0, 2),
                    cell("jackd-1", 1_000, 10_000, 4.0, 3),
                    cell("peer-2", 1_000, 10_000, 6.0, 3),
                ],
            ),
            sample(12, vec![cell("video", 30_000, 100_000, 20.0, 0)]),
        ];
        let window = Window {
            from_ns: 10_000_000_000,
            to_ns: 20_000_000_000,
            t0_ns: 5_000_000_000,
        };
        let (metrics, notes) = metrics(&samples, &window, &groups, &group_of);
        let note = &notes[0];
        let video = &metrics[0];
        assert_eq!(video.name, "cell video");
        assert_eq!(
            video.series[0].points,
            vec![(6.0, 20.0), (7.0, 30.0)],
            "warm-up left out"
        );
        // 2 of 10 jobs in 1 s of 100 ms periods.
        assert_eq!(video.series[2].points[0], (6.0, 20.0));
        let jack = &metrics[1];
        assert_eq!(jack.series[0].points[0], (6.0, 20.0));
        assert_eq!(jack.series[1].points[0], (6.0, 10.0));
        // 3 xruns of 100 cycles, reported to both cells: counted once.
        assert_eq!(jack.series[2].points[0], (6.0, 3.0));
        let total = &metrics[2];
        assert_eq!(total.name, TOTAL);
        assert_eq!(total.summary.mean, 35.0);
        assert!(note.contains("misses video 2, jack 3 (total 5)"), "{note}");
    }

    #[test]
    fn the_section_compares_each_adaptive_run_with_the_baseline() {
        let groups = [Group {
            name: "video",
            job_period_ns: 100_000_000,
            shared_count: false,
        }];
        let window = Window {
            from_ns: 0,
            to_ns: 10_000_000_000,
            t0_ns: 0,
        };
        let configuration = |name: &str, adapting: &str, runtime_us: u64, misses: u64| {
            let samples = [sample(
                1,
                vec![cell("video", runtime_us, 100_000, 10.0, misses)],
            )];
            let (metrics, _) = metrics(&samples, &window, &groups, &|_| Some(0));
            tessera_measure::ConfigurationResult {
                labels: [(ADAPTATION.to_string(), adapting.to_string())].into(),
                name: name.into(),
                counters: Vec::new(),
                notes: Vec::new(),
                metrics,
                why: None,
            }
        };
        let results = RunResults {
            baseline: Some("peak".into()),
            configurations: vec![
                configuration("peak", OFF, 40_000, 0),
                configuration("adaptive", ON, 20_000, 0),
                configuration("adaptive, missing", ON, 10_000, 3),
            ],
            ..RunResults::start("rap")
        };
        let text = report_section(&results);
        assert!(
            text.contains("| peak | off | 0 | 0 | 40.0 | 10.0 | 1.000 |"),
            "{text}"
        );
        assert!(text.contains("**adaptive**: 0 misses"), "{text}");
        assert!(
            text.contains("0.500 × the baseline's (within the 0.80 asked): goal met"),
            "{text}"
        );
        assert!(
            text.contains("3 misses (more than the baseline's 0)"),
            "{text}"
        );
        assert!(text.contains("goal not met"), "{text}");
        assert!(report_section(&RunResults::start("other")).is_empty());
    }
}
