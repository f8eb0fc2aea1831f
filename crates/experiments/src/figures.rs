//! Figures every part of a run computes the same way: a latency histogram
//! with the run's bound, a latency metric with an exact summary, a periodic
//! task's response times, slack and counts of jobs, and the cells of report
//! tables ("yes", "no (N over)").
//!
//! A leaf: it uses nothing of this crate, so the runner, the subjects, the
//! interference and the benchmarks all take these from here. It must never
//! decide what a configuration runs.

use std::time::Duration;
use tessera_measure::{Counter, LatencyHistogram, Metric, Series, Summary};
use tessera_workloads::PeriodicStats;

/// Largest latency a histogram keeps exactly (larger ones are clamped).
const HISTOGRAM_BOUND_NS: u64 = 10_000_000_000;

/// Counters of a periodic task ("NAME jobs late").
const JOBS_MEASURED: &str = "jobs measured";
const JOBS_LATE: &str = "jobs late";
const JOBS_SERVED_LATE: &str = "jobs served late";

/// A report table's cell for a metric's deadline: "yes" when no sample
/// missed it, "no (N over)", "–" without a deadline.
pub(crate) fn within_cell(misses: Option<u64>) -> String {
    match misses {
        None => "–".into(),
        Some(0) => "yes".into(),
        Some(n) => format!("no ({n} over)"),
    }
}

pub(crate) fn latency_histogram(values_ns: impl Iterator<Item = u64>) -> LatencyHistogram {
    let mut h = LatencyHistogram::new(HISTOGRAM_BOUND_NS);
    values_ns.for_each(|v| h.record(v));
    h
}

/// A latency metric whose summary is exact (the histogram, for the plots,
/// keeps 3 significant digits).
pub(crate) fn latency_metric(
    name: &str,
    deadline_us: Option<f64>,
    ns: impl Iterator<Item = u64>,
) -> Metric {
    let samples: Vec<u64> = ns.collect();
    let us: Vec<f64> = samples.iter().map(|&v| v as f64 / 1000.0).collect();
    Metric {
        summary: Summary::from_samples(&us, deadline_us),
        ..Metric::latency(name, deadline_us, latency_histogram(samples.into_iter()))
    }
}

/// Samples of a periodic task released after the warm-up, with their
/// release times (s from t0). Job i was released at start + i × period.
fn measured(stats: &PeriodicStats, start: Duration, warmup: Duration) -> Vec<(f64, f64)> {
    stats
        .response_us
        .iter()
        .enumerate()
        .map(|(i, &r)| (start.as_secs_f64() + i as f64 * stats.period_us / 1e6, r))
        .filter(|(t, _)| *t >= warmup.as_secs_f64())
        .collect()
}

/// A periodic task's response times, its counts of jobs measured, late
/// and served late ("NAME jobs measured", …) and a note saying them.
pub(crate) fn task_metric(
    stats: &PeriodicStats,
    name: &str,
    start: Duration,
    warmup: Duration,
) -> (Metric, Vec<Counter>, String) {
    let samples = measured(stats, start, warmup);
    let hist = latency_histogram(samples.iter().map(|(_, r)| (r * 1000.0) as u64));
    let mut series = Series::with_capacity(name, "us", samples.len());
    samples.iter().for_each(|&(t, r)| {
        series.push(t, r);
    });
    // Counted on the exact samples: the histogram's 3 significant digits
    // would round a response just past the deadline onto it.
    let late = samples
        .iter()
        .filter(|(_, r)| *r > stats.deadline_us)
        .count();
    let note = match &stats.setup_error {
        Some(e) => format!("{}: setup failed: {e}", stats.name),
        None => format!(
            "{}: {} jobs measured, {} late ({} served late by an overrunning job)",
            stats.name,
            samples.len(),
            late,
            stats.skipped
        ),
    };
    let mut metric = Metric {
        series: vec![series],
        ..Metric::latency(name, Some(stats.deadline_us), hist)
    };
    metric.summary.misses = Some(late as u64);
    let counters = Counter::counts(
        [
            (JOBS_MEASURED, samples.len() as u64),
            (JOBS_LATE, late as u64),
            (JOBS_SERVED_LATE, stats.skipped),
        ]
        .map(|(what, n)| (format!("{} {what}", stats.name), n)),
    );
    (metric, counters, note)
}

/// Slack: deadline − response time of each job (negative: a miss), the
/// thesis's measure of how well the periodic tasks fared.
pub(crate) fn slack_metric(stats: &PeriodicStats, start: Duration, warmup: Duration) -> Metric {
    let name = format!("{} slack", stats.name);
    let samples = measured(stats, start, warmup);
    let skip = stats.response_us.len() - samples.len();
    let slack: Vec<f64> = stats.slack_us().split_off(skip);
    let mut series = Series::with_capacity("slack", "us", samples.len());
    samples.iter().zip(&slack).for_each(|(&(t, _), &s)| {
        series.push(t, s);
    });
    Metric {
        name,
        unit: "us".into(),
        deadline: None,
        summary: Summary::from_samples(&slack, None),
        histogram: None,
        series: vec![series],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(counters: &[Counter], name: &str) -> Option<f64> {
        counters.iter().find(|c| c.name == name).map(|c| c.value)
    }

    #[test]
    fn a_tasks_counters_are_its_jobs_measured_and_late() {
        let stats = PeriodicStats {
            name: "hog".into(),
            // Released every ms; the first after the 1 ms warm-up is job 1.
            response_us: vec![100.0, 200.0, 1500.0, 300.0, 1200.0],
            late: 2,
            skipped: 1,
            deadline_us: 1000.0,
            period_us: 1000.0,
            setup_error: None,
        };
        let warmup = Duration::from_millis(1);
        let (metric, counters, note) = task_metric(&stats, "hog", Duration::ZERO, warmup);
        assert_eq!(
            note,
            "hog: 4 jobs measured, 2 late (1 served late by an overrunning job)"
        );
        assert_eq!(metric.summary.misses, Some(2));
        assert_eq!(count(&counters, "hog jobs measured"), Some(4.0));
        assert_eq!(count(&counters, "hog jobs late"), Some(2.0));
        assert_eq!(count(&counters, "hog jobs served late"), Some(1.0));
    }
}
