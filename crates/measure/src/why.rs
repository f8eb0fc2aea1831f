//! Why a configuration's deadlines were missed (issue 24): the causes
//! tessera-why found for the misses of the threads a run watched, per
//! metric, as results.json carries them under a configuration's `"why"`,
//! and the report's section showing them (a table of causes per
//! configuration and metric, a plot, the worst misses with their parts).
//!
//! Owns that part of the results format and of the report. It must never
//! attribute a miss itself (tessera-why does) nor drop one: misses a
//! subject counted that no traced cycle explains count as "unknown".

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tessera_why::{Cause, Causes, Miss, Watch};

use crate::plot::{self, PlotError, StackedBar};
use crate::results::RunResults;

/// Misses listed in full per configuration.
pub const WORST: usize = 5;

/// What attribution found in one configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Why {
    /// Why the kernel's events could not be read, when they could not:
    /// then every miss counts as "unknown".
    #[serde(default)]
    pub unavailable: Option<String>,
    /// The threads traced, each with the metric its misses count in.
    #[serde(default)]
    pub watched: Vec<WatchedThread>,
    /// Cycles judged, and records the kernel dropped (rings full).
    #[serde(default)]
    pub cycles: u64,
    #[serde(default)]
    pub lost: u64,
    /// Every metric with misses, with their causes.
    #[serde(default)]
    pub metrics: Vec<MetricCauses>,
    /// The longest misses of the measured part, longest first, each with
    /// the µs of every part of its cycle and who held its CPU.
    #[serde(default)]
    pub worst: Vec<Miss>,
}

/// A traced thread and the metric its misses count in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchedThread {
    pub metric: String,
    /// A chain's thread: the metric that counts each of the chain's
    /// clients ending late (where `metric` counts one miss a period).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_metric: Option<String>,
    #[serde(flatten)]
    pub watch: Watch,
}

/// The causes of one metric's misses: how many of each (every cause
/// present, zero or not) and the µs the deciding part took over them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricCauses {
    pub metric: String,
    /// Misses the subject counted in the measured part of the run; `None`
    /// when it counts none for this metric (a cell's misses the daemon
    /// sums per interval): every traced miss is shown.
    pub misses: Option<u64>,
    /// By cause. The traced misses, plus as "unknown" what the subject
    /// counted beyond them; more than `misses` in all when the tracer
    /// judged a cycle late that the subject did not (a cycle throttled
    /// yet in time).
    pub causes: BTreeMap<Cause, u64>,
    pub us: BTreeMap<Cause, f64>,
}

impl MetricCauses {
    /// `metric`'s `misses` as the subject counted them, explained by the
    /// tracer's `traced` causes; the misses it did not see are "unknown".
    pub fn new(metric: &str, misses: Option<u64>, traced: &Causes) -> MetricCauses {
        let mut seen = traced.clone();
        seen.add_unknown(misses.unwrap_or(0).saturating_sub(traced.total()));
        MetricCauses {
            metric: metric.to_string(),
            misses,
            causes: Cause::ALL
                .into_iter()
                .map(|c| (c, seen.misses.get(&c).copied().unwrap_or(0)))
                .collect(),
            us: Cause::ALL
                .into_iter()
                .map(|c| (c, seen.us.get(&c).copied().unwrap_or(0.0)))
                .collect(),
        }
    }

    fn count(&self, cause: Cause) -> u64 {
        self.causes.get(&cause).copied().unwrap_or(0)
    }
}

/// The report's section on the causes, with its plot written into `dir`;
/// empty when no configuration has causes.
pub fn section(results: &RunResults, dir: &Path) -> Result<String, PlotError> {
    let rows: Vec<(&str, &Why)> = results
        .configurations
        .iter()
        .filter_map(|c| c.why.as_ref().map(|w| (c.name.as_str(), w)))
        .collect();
    if rows.is_empty() {
        return Ok(String::new());
    }
    let mut text = "\n## Why the deadlines were missed\n\n\
        Each miss of a traced thread by its cause (docs/why.md): the count, then the µs the \
        deciding part took over all of them. Misses a configuration counted that no traced \
        cycle explains are \"unknown\".\n\n"
        .to_string();
    text.push_str(&table(&rows));
    let bars = bars(&rows);
    if !bars.is_empty() {
        let names: Vec<&str> = Cause::ALL.iter().map(|c| c.name()).collect();
        let title = format!("misses by cause: {}", results.scenario);
        let files = plot::stacked_bars(&dir.join("why-causes"), &title, "misses", &names, &bars)?;
        let file = |p: &Path| {
            p.file_name()
                .map_or(String::new(), |f| f.to_string_lossy().into())
        };
        let _ = write!(
            text,
            "\n![misses by cause]({})\n\n[misses by cause (SVG)]({})\n",
            file(&files.png),
            file(&files.svg)
        );
    }
    for (config, why) in &rows {
        text.push_str(&notes_and_worst(config, why));
    }
    Ok(text)
}

/// One row per configuration and metric with misses.
fn table(rows: &[(&str, &Why)]) -> String {
    let mut text = String::from("| configuration | metric | misses |");
    for c in Cause::ALL {
        let _ = write!(text, " {} |", c.name());
    }
    text.push_str("\n|---|---|--:|");
    text.push_str(&"--:|".repeat(Cause::ALL.len()));
    text.push('\n');
    for (config, why) in rows {
        for m in &why.metrics {
            let misses = m.misses.map_or("–".to_string(), |n| n.to_string());
            let _ = write!(text, "| {config} | {} | {misses} |", m.metric);
            for c in Cause::ALL {
                let us = m.us.get(&c).copied().unwrap_or(0.0);
                let _ = match m.count(c) {
                    0 => write!(text, " 0 |"),
                    n => write!(text, " {n} ({us:.0} µs) |"),
                };
            }
            text.push('\n');
        }
        if why.metrics.is_empty() {
            let _ = writeln!(
                text,
                "| {config} | – | 0 |{}",
                " 0 |".repeat(Cause::ALL.len())
            );
        }
    }
    text
}

/// A bar per configuration and metric with misses, a segment per cause.
fn bars(rows: &[(&str, &Why)]) -> Vec<StackedBar> {
    rows.iter()
        .flat_map(|(config, why)| {
            why.metrics.iter().map(move |m| StackedBar {
                label: match why.metrics.len() {
                    1 => config.to_string(),
                    _ => format!("{config}: {}", m.metric),
                },
                segments: Cause::ALL.iter().map(|&c| m.count(c) as f64).collect(),
            })
        })
        .filter(|b| b.segments.iter().sum::<f64>() > 0.0)
        .collect()
}

/// Whether attribution ran, what it traced, and the worst misses in full.
fn notes_and_worst(config: &str, why: &Why) -> String {
    let mut text = format!("\n### {config}\n\n");
    if let Some(reason) = &why.unavailable {
        let _ = writeln!(
            text,
            "Attribution unavailable: {reason}. Every miss counts as \"unknown\".\n"
        );
        return text;
    }
    let _ = writeln!(
        text,
        "{} threads traced, {} cycles judged{}.\n",
        why.watched.len(),
        why.cycles,
        match why.lost {
            0 => String::new(),
            n => format!(", {n} events lost (the timelines restarted)"),
        }
    );
    if why.worst.is_empty() {
        return text;
    }
    text.push_str("The worst misses (release in ns of CLOCK_MONOTONIC):\n\n");
    for miss in &why.worst {
        let _ = writeln!(text, "- {}", describe(miss));
    }
    text
}

/// `tid 4243 (synth) cpu 1 at 1234 ns: throttled, 3512.0 µs > 2000.0 µs: ...`
fn describe(miss: &Miss) -> String {
    let parts: Vec<String> = miss
        .parts_us
        .iter()
        .map(|(cause, us)| format!("{} {us:.1} µs", cause.name()))
        .collect();
    let holders: Vec<String> = miss
        .holders
        .iter()
        .map(|h| {
            let cell = h.cell.as_deref().unwrap_or("no cell");
            let server = match h.fair_server_note() {
                "" => String::new(),
                note => format!("; {note}"),
            };
            format!(
                "{} {} prio {} ({cell}{server}) {:.1} µs",
                h.pid, h.comm, h.prio, h.us
            )
        })
        .collect();
    let mut line = format!(
        "tid {} ({}) cpu {} released at {}: **{}**, {:.1} µs > {:.1} µs: {}",
        miss.tid,
        miss.comm,
        miss.cpu,
        miss.release_ns,
        miss.cause_name(),
        miss.response_us,
        miss.deadline_us,
        parts.join(", ")
    );
    if !holders.is_empty() {
        let _ = write!(line, "; its CPU held by {}", holders.join(", "));
    }
    if miss.throttled {
        line.push_str("; its budget ran out");
    }
    if miss.faults > 0 {
        let _ = write!(line, "; {} page faults", miss.faults);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::ConfigurationResult;

    fn miss(cause: Cause, us: f64) -> Miss {
        Miss {
            release_ns: 1_000,
            tid: 42,
            comm: "subject".into(),
            cpu: 1,
            cause,
            response_us: us + 100.0,
            deadline_us: 1000.0,
            parts_us: [(cause, us), (Cause::OwnWork, 100.0)].into_iter().collect(),
            holders: vec![],
            throttled: cause == Cause::Throttled,
            faults: 0,
            records_lost: false,
            late_threads: 0,
        }
    }

    fn explained() -> Why {
        let mut traced = Causes::default();
        let worst = vec![
            miss(Cause::Throttled, 1500.0),
            miss(Cause::Throttled, 900.0),
        ];
        worst.iter().for_each(|m| traced.add(m));
        Why {
            watched: vec![WatchedThread {
                metric: "response time".into(),
                thread_metric: None,
                watch: Watch {
                    tid: 42,
                    deadline_ns: 1_000_000,
                    period_ns: Some(1_000_000),
                    budget_ns: Some(300_000),
                    chain: None,
                },
            }],
            cycles: 5000,
            metrics: vec![MetricCauses::new("response time", Some(3), &traced)],
            worst,
            ..Why::default()
        }
    }

    fn run_with(why: Option<Why>) -> RunResults {
        RunResults {
            configurations: vec![ConfigurationResult {
                name: "too small a budget".into(),
                notes: vec![],
                metrics: vec![],
                counters: vec![],
                labels: Default::default(),
                why,
            }],
            ..RunResults::start("why")
        }
    }

    #[test]
    fn a_holder_the_fair_server_ran_says_so() {
        let holder = |by_fair_server| tessera_why::Holder {
            pid: 7,
            comm: "hog".into(),
            prio: 120,
            cell: None,
            us: 10_000.0,
            by_fair_server,
        };
        let line = |by_fair_server| {
            describe(&Miss {
                holders: vec![holder(by_fair_server)],
                ..miss(Cause::WaitedForCpu, 10_000.0)
            })
        };
        assert!(line(true)
            .contains("7 hog prio 120 (no cell; run by the fair server, or the vCPU stalled)"));
        assert!(line(false).contains("7 hog prio 120 (no cell) 10000.0 µs"));
    }

    #[test]
    fn misses_the_tracer_did_not_see_are_unknown() {
        let why = explained();
        let m = &why.metrics[0];
        assert_eq!(m.causes[&Cause::Throttled], 2);
        assert_eq!(m.causes[&Cause::Unknown], 1);
        assert_eq!(m.us[&Cause::Throttled], 2400.0);
        assert_eq!(m.causes.len(), Cause::ALL.len(), "every cause is listed");
    }

    #[test]
    fn causes_round_trip_through_results_json_by_their_names() {
        let run = run_with(Some(explained()));
        let json = serde_json::to_value(&run).unwrap();
        let causes = &json["configurations"][0]["why"]["metrics"][0]["causes"];
        assert_eq!(causes["throttled"], 2);
        assert_eq!(causes["unknown"], 1);
        assert_eq!(causes["woken late"], 0);
        assert_eq!(json["configurations"][0]["why"]["watched"][0]["tid"], 42);
        let back: RunResults = serde_json::from_value(json).unwrap();
        assert_eq!(back, run);
    }

    #[test]
    fn results_without_causes_still_load() {
        let mut json = serde_json::to_value(run_with(None)).unwrap();
        json["configurations"][0]
            .as_object_mut()
            .unwrap()
            .remove("why");
        let back: RunResults = serde_json::from_value(json).unwrap();
        assert_eq!(back.configurations[0].why, None);
    }

    #[test]
    fn the_section_shows_the_causes_the_plot_and_the_worst_misses() {
        let dir = std::env::temp_dir().join(format!("tessera-why-section-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = section(&run_with(Some(explained())), &dir).unwrap();
        assert!(text.contains("## Why the deadlines were missed"), "{text}");
        assert!(
            text.contains("| too small a budget | response time | 3 | 0 | 0 | 2 (2400 µs) |"),
            "{text}"
        );
        assert!(
            text.contains("![misses by cause](why-causes.png)"),
            "{text}"
        );
        assert!(dir.join("why-causes.png").exists() && dir.join("why-causes.svg").exists());
        assert!(
            text.contains("tid 42 (subject) cpu 1 released at 1000: **throttled**, 1600.0 µs"),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            section(&run_with(None), Path::new("/nonexistent")).unwrap(),
            ""
        );
    }

    #[test]
    fn an_unavailable_attribution_says_why() {
        let mut why = Why {
            unavailable: Some("perf_event_open: permission denied; fix: run as root".into()),
            ..Why::default()
        };
        why.metrics.push(MetricCauses::new(
            "response time",
            Some(4),
            &Causes::default(),
        ));
        let dir = std::env::temp_dir().join(format!("tessera-why-none-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = section(&run_with(Some(why)), &dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            text.contains("Attribution unavailable: perf_event_open"),
            "{text}"
        );
        assert!(text.contains("| 4 (0 µs) |"), "{text}");
    }
}
