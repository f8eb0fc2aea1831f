//! End to end: a synthetic two-configuration run becomes a report directory
//! with README.md and PNG/SVG plots. The report is left in
//! `$CARGO_TARGET_TMPDIR/report-e2e` for a person to look at.

use std::path::{Path, PathBuf};

use tessera_measure::{
    summary_table, write_report, ConfigurationResult, LatencyHistogram, Metric, RunResults, Series,
    Summary,
};

const DEADLINE_US: f64 = 1405.9;
const CYCLES: u64 = 30_000;
const PERIOD_S: f64 = 0.001333;

/// Response times around `mean_us` with a tail; every `spike_every` cycles
/// a host preemption of `spike_us`.
fn configuration(name: &str, mean_us: f64, spike_every: u64, spike_us: f64) -> ConfigurationResult {
    let mut histogram = LatencyHistogram::new(1_000_000_000);
    let mut period = Series::with_capacity("period length", "us", CYCLES as usize);
    let mut load = Series::with_capacity("DSP load", "%", CYCLES as usize);
    for i in 0..CYCLES {
        let u = ((i * 7919) % CYCLES) as f64 / CYCLES as f64;
        let spike = if i % spike_every == 0 { spike_us } else { 0.0 };
        let response_us = mean_us - 30.0 - 30.0 * (1.0 - u).ln() + spike;
        histogram.record((response_us * 1000.0) as u64);
        let t = i as f64 * PERIOD_S;
        period.push(t, 1333.0 + ((i * 31) % 7) as f64 - 3.0 + spike / 10.0);
        load.push(t, 60.0 + 10.0 * u);
    }
    let response = Metric {
        series: vec![period],
        ..Metric::latency("response time", Some(DEADLINE_US), histogram)
    };
    let dsp_load = Metric {
        name: "DSP load".into(),
        unit: "%".into(),
        deadline: None,
        summary: Summary::from_samples(&load.values(), None),
        histogram: None,
        series: vec![load],
    };
    ConfigurationResult {
        labels: Default::default(),
        name: name.into(),
        counters: Vec::new(),
        notes: vec![format!("synthetic data, spike every {spike_every} cycles")],
        metrics: vec![response, dsp_load],
        why: None,
    }
}

fn synthetic_run() -> RunResults {
    RunResults {
        duration_s: CYCLES as f64 * PERIOD_S,
        warmup_s: 1.0,
        baseline: Some("reservation".into()),
        configurations: vec![
            configuration("reservation", 1000.0, 10_000, 200.0),
            configuration("FIFO, equal priority", 1030.0, 1_000, 900.0),
        ],
        ..RunResults::start("music isolation (synthetic)")
    }
}

fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-e2e");
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn two_configuration_report() {
    let run = synthetic_run();
    let dir = out_dir();
    let files = write_report(&run, &dir).unwrap();

    let readme = std::fs::read_to_string(&files.readme).unwrap();
    assert!(readme.starts_with("# music isolation (synthetic)\n"));
    assert!(readme.contains(&run.machine.describe()));
    assert!(readme.contains("## response time") && readme.contains("## DSP load"));
    assert!(readme.contains(&summary_table(&run, "response time")));
    assert!(readme
        .contains("- **Samples of response time:** reservation 30000, FIFO, equal priority 30000"));

    // Histogram + tail for the latency metric, one series plot per metric.
    let names: Vec<String> = files
        .plots
        .iter()
        .map(|p| p.png.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "response-time-histogram.png",
            "response-time-exceedance.png",
            "response-time-series.png",
            "dsp-load-series.png"
        ]
    );
    for plot in &files.plots {
        let png = std::fs::metadata(&plot.png).unwrap().len();
        assert!(
            (5_000..2_000_000).contains(&png),
            "{}: {png} bytes",
            plot.png.display()
        );
        assert!(std::fs::read_to_string(&plot.svg).unwrap().contains("<svg"));
        let name = plot.png.file_name().unwrap().to_string_lossy();
        assert!(
            readme.contains(&format!("]({name})")),
            "README links {name}"
        );
    }
}

#[test]
fn table_rows_compare_with_the_baseline() {
    let run = synthetic_run();
    let table = summary_table(&run, "response time");
    let rows: Vec<&str> = table.lines().skip(2).collect();
    assert_eq!(rows.len(), 2);
    assert!(
        rows[0].starts_with("| reservation | 30000 |") && rows[0].ends_with("| 1.000 | 1.000 |")
    );
    let fifo = &run.configurations[1].metrics[0].summary;
    assert!(
        fifo.misses.unwrap() > 0,
        "the FIFO spikes miss the deadline"
    );
    assert!(rows[1].contains(&format!("| {} (", fifo.misses.unwrap())));
}
