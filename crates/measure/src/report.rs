//! Reports: a directory with README.md (machine, scenario, one table of
//! first-order statistics per metric, ratios to the baseline, the causes of
//! misses when the run traced them) and the PNG/SVG plots it links to.
//!
//! Owns the report layout and Markdown tables. It must never measure or
//! recompute statistics: it shows the summaries stored in the results.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::histogram::LatencyHistogram;
use crate::plot::{self, Labelled, PlotError, PlotFiles, SeriesPanel};
use crate::results::{Metric, RunResults};
use crate::stats::Summary;
use crate::units::{display_unit, format_value, to_us};

/// The files a report consists of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportFiles {
    pub readme: PathBuf,
    pub plots: Vec<PlotFiles>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot create report directory {}: {source}", .path.display())]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("cannot write report {}: {source}", .path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Plot(#[from] PlotError),
}

/// A plot of one metric with what the README calls it.
struct MetricPlot {
    description: String,
    files: PlotFiles,
}

/// Writes `out_dir/README.md` and every plot, creating `out_dir` if needed.
pub fn write_report(results: &RunResults, out_dir: &Path) -> Result<ReportFiles, ReportError> {
    fs::create_dir_all(out_dir).map_err(|source| ReportError::CreateDir {
        path: out_dir.to_path_buf(),
        source,
    })?;
    let mut readme = header(results);
    let mut plots = Vec::new();
    for metric in results.metric_names() {
        let metric_plots = plot_metric(results, metric, out_dir)?;
        readme.push_str(&metric_section(results, metric, &metric_plots));
        plots.extend(metric_plots.into_iter().map(|p| p.files));
    }
    readme.push_str(&crate::why::section(results, out_dir)?);
    let readme_path = out_dir.join("README.md");
    fs::write(&readme_path, readme).map_err(|source| ReportError::Write {
        path: readme_path.clone(),
        source,
    })?;
    Ok(ReportFiles {
        readme: readme_path,
        plots,
    })
}

/// The Markdown table of `metric`: one row per configuration that measured
/// it, with the ratio of its mean and p99 to the baseline configuration's
/// ("–" without a baseline). Empty if no configuration measured it.
pub fn summary_table(results: &RunResults, metric: &str) -> String {
    let rows = metric_rows(results, metric);
    let Some((_, first)) = rows.first() else {
        return String::new();
    };
    let unit = display_unit(&first.unit);
    let baseline = results
        .baseline
        .as_deref()
        .and_then(|name| rows.iter().find(|(config, _)| *config == name))
        .map(|(_, m)| &m.summary);
    let mut table = format!(
        "| configuration | count | min ({unit}) | mean ({unit}) | max ({unit}) | stdev ({unit}) \
         | p50 ({unit}) | p99 ({unit}) | p99.9 ({unit}) | misses | mean / baseline | p99 / baseline |\n\
         |---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n"
    );
    for (config, m) in &rows {
        let s = &m.summary;
        let stats = [s.min, s.mean, s.max, s.stdev, s.p50, s.p99, s.p999].map(format_value);
        let _ = writeln!(
            table,
            "| {} | {} | {} | {} | {} | {} |",
            escape_cell(config),
            s.count,
            stats.join(" | "),
            misses_cell(s),
            ratio_cell(s.mean, baseline.map(|b| b.mean)),
            ratio_cell(s.p99, baseline.map(|b| b.p99)),
        );
    }
    table
}

/// `(configuration name, metric)` for every configuration measuring `metric`.
fn metric_rows<'a>(results: &'a RunResults, metric: &str) -> Vec<(&'a str, &'a Metric)> {
    results
        .configurations
        .iter()
        .filter_map(|c| c.metric(metric).map(|m| (c.name.as_str(), m)))
        .collect()
}

fn header(results: &RunResults) -> String {
    let m = &results.machine;
    let mut text = format!(
        "# {}\n\n\
         - **Machine:** {} (host `{}`)\n\
         - **Run:** started {}, tessera {}\n\
         - **Duration:** {} s per configuration, after {} s warm-up\n\
         - **Baseline:** {}\n",
        results.scenario,
        m.describe(),
        m.hostname,
        results.started_at,
        results.tool_version,
        results.duration_s,
        results.warmup_s,
        results.baseline.as_deref().unwrap_or("none"),
    );
    if !results.description.is_empty() {
        let _ = writeln!(text, "\n{}\n", results.description.trim());
    }
    for metric in results.metric_names() {
        let counts: Vec<String> = metric_rows(results, metric)
            .iter()
            .map(|(config, m)| format!("{config} {}", m.summary.count))
            .collect();
        let _ = writeln!(text, "- **Samples of {metric}:** {}", counts.join(", "));
    }
    if m.virtualized {
        text.push_str(
            "\n> Virtual machine: the host can preempt a vCPU for milliseconds. Compare \
             configurations within this run (ratios, percentiles) rather than absolute maxima.\n",
        );
    }
    text.push_str("\n## Configurations\n\n");
    for c in &results.configurations {
        let notes = match c.facts().as_slice() {
            [] => String::new(),
            facts => format!(": {}", facts.join("; ")),
        };
        let _ = writeln!(text, "- **{}**{notes}", c.name);
    }
    text
}

fn metric_section(results: &RunResults, metric: &str, plots: &[MetricPlot]) -> String {
    let mut text = format!("\n## {metric}\n\n");
    let deadlines: Vec<String> = metric_rows(results, metric)
        .iter()
        .filter_map(|(config, m)| {
            m.deadline
                .map(|d| format!("{config} {} {}", format_value(d), display_unit(&m.unit)))
        })
        .collect();
    if !deadlines.is_empty() {
        let _ = writeln!(
            text,
            "Deadline: {}. A miss is a sample strictly greater than its deadline.\n",
            deadlines.join(", ")
        );
    }
    text.push_str(&summary_table(results, metric));
    for plot in plots {
        let (png, svg) = (file_name(&plot.files.png), file_name(&plot.files.svg));
        let _ = write!(
            text,
            "\n![{}]({png})\n\n[{} (SVG)]({svg})\n",
            plot.description, plot.description
        );
    }
    text
}

/// Writes the plots of one metric: histograms and tail if any configuration
/// kept a histogram, and one time-series plot per unit of its series.
fn plot_metric(
    results: &RunResults,
    metric: &str,
    out_dir: &Path,
) -> Result<Vec<MetricPlot>, PlotError> {
    let rows = metric_rows(results, metric);
    let title = format!("{metric}: {}", results.scenario);
    let mut plots = latency_plots(&rows, metric, &title, out_dir)?;
    let units = crate::distinct_in_order(
        rows.iter()
            .flat_map(|(_, m)| &m.series)
            .map(|s| s.unit.as_str()),
    );
    for unit in &units {
        let kind = match units.len() {
            1 => "series".to_string(),
            _ => format!("series-{}", slug(unit)),
        };
        plots.push(series_plot(
            &rows,
            unit,
            (metric, &title),
            &plot_stem(out_dir, metric, &kind),
        )?);
    }
    Ok(plots)
}

/// The histograms and the tail of the configurations that kept a histogram.
fn latency_plots(
    rows: &[(&str, &Metric)],
    metric: &str,
    title: &str,
    out_dir: &Path,
) -> Result<Vec<MetricPlot>, PlotError> {
    let histograms: Vec<Labelled<LatencyHistogram>> = rows
        .iter()
        .filter_map(|&(label, m)| m.histogram.as_ref().map(|data| Labelled { label, data }))
        .collect();
    if histograms.is_empty() {
        return Ok(Vec::new());
    }
    let deadline_us = rows.iter().find_map(|(_, m)| to_us(m.deadline?, &m.unit));
    Ok(vec![
        MetricPlot {
            description: format!("{metric} histograms"),
            files: plot::latency_histograms(
                &plot_stem(out_dir, metric, "histogram"),
                title,
                metric,
                &histograms,
                deadline_us,
            )?,
        },
        MetricPlot {
            description: format!("{metric}: fraction of samples exceeding x"),
            files: plot::exceedance(
                &plot_stem(out_dir, metric, "exceedance"),
                title,
                metric,
                &histograms,
                deadline_us,
            )?,
        },
    ])
}

/// Series names the y axis lists; with more, it names the metric (the
/// legend lists them all).
const Y_LABEL_NAMES: usize = 4;

/// One panel per configuration with the metric's series in `unit`.
fn series_plot(
    rows: &[(&str, &Metric)],
    unit: &str,
    (metric, title): (&str, &str),
    stem: &Path,
) -> Result<MetricPlot, PlotError> {
    let panels: Vec<SeriesPanel> = rows
        .iter()
        .map(|&(label, m)| SeriesPanel {
            label,
            series: m.series.iter().filter(|s| s.unit == unit).collect(),
        })
        .filter(|panel| !panel.series.is_empty())
        .collect();
    let names = plot::series_names(&panels);
    let shown = match names.len() {
        n if n > Y_LABEL_NAMES => metric.to_string(),
        _ => names.join(", "),
    };
    let y_label = format!("{shown} ({})", display_unit(unit));
    Ok(MetricPlot {
        description: format!("{y_label} over time"),
        files: plot::time_series(stem, title, &y_label, &panels)?,
    })
}

fn misses_cell(s: &Summary) -> String {
    match s.misses {
        None => "–".to_string(),
        Some(0) => "0".to_string(),
        Some(m) => format!("{m} ({:.3} %)", 100.0 * m as f64 / s.count as f64),
    }
}

fn ratio_cell(value: f64, baseline: Option<f64>) -> String {
    match baseline {
        Some(b) if b != 0.0 => format!("{:.3}", value / b),
        _ => "–".to_string(),
    }
}

/// Keeps a configuration name from breaking the table.
fn escape_cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// A file-name-safe form of a name: lowercase letters and digits joined by '-'.
fn slug(name: &str) -> String {
    name.to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// `<out_dir>/<metric slug>-<kind>`, to which plots add ".png" and ".svg".
fn plot_stem(out_dir: &Path, metric: &str, kind: &str) -> PathBuf {
    out_dir.join(format!("{}-{kind}", slug(metric)))
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::ConfigurationResult;

    fn summary(mean: f64, p99: f64, misses: Option<u64>) -> Summary {
        Summary {
            count: 1000,
            min: 700.0,
            mean,
            max: 1400.0,
            stdev: 35.0,
            p50: mean,
            p99,
            p999: 1300.0,
            misses,
        }
    }

    fn config(name: &str, s: Summary) -> ConfigurationResult {
        ConfigurationResult {
            labels: Default::default(),
            name: name.into(),
            counters: Vec::new(),
            notes: vec![],
            metrics: vec![Metric {
                name: "response time".into(),
                unit: "us".into(),
                deadline: Some(1405.9),
                summary: s,
                histogram: None,
                series: vec![],
            }],
            why: None,
        }
    }

    fn run(baseline: Option<&str>) -> RunResults {
        RunResults {
            baseline: baseline.map(str::to_string),
            configurations: vec![
                config("alone", summary(1000.0, 1200.0, Some(0))),
                config("with | load", summary(1100.0, 1500.0, Some(25))),
            ],
            ..RunResults::start("music isolation")
        }
    }

    #[test]
    fn table_has_statistics_misses_and_ratios() {
        let table = summary_table(&run(Some("alone")), "response time");
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("| configuration | count | min (µs) | mean (µs)"));
        assert_eq!(
            lines[2],
            "| alone | 1000 | 700.0 | 1000.0 | 1400.0 | 35.00 | 1000.0 | 1200.0 | 1300.0 | 0 | 1.000 | 1.000 |"
        );
        assert!(lines[3].starts_with(r"| with \| load | 1000 |"));
        assert!(
            lines[3].ends_with("| 25 (2.500 %) | 1.100 | 1.250 |"),
            "{}",
            lines[3]
        );
    }

    #[test]
    fn table_without_baseline_or_metric() {
        let table = summary_table(&run(None), "response time");
        assert!(table.lines().nth(2).unwrap().ends_with("| 0 | – | – |"));
        let table = summary_table(&run(Some("no such configuration")), "response time");
        assert!(table.lines().nth(3).unwrap().ends_with("| – | – |"));
        assert_eq!(summary_table(&run(None), "no such metric"), "");
    }

    #[test]
    fn slugs() {
        assert_eq!(slug("Response time (Δt)"), "response-time-t");
        assert_eq!(slug("budget: set/used"), "budget-set-used");
    }
}
