//! The guard's record (`tessera guard --record FILE`, its format defined
//! by [`tessera_guard::record`]: one row per reserved thread per control
//! interval, budgets per reservation period) as metrics: budget set /
//! predicted / used over time per thread (µs) and in total (% of a CPU),
//! the thesis's Fig. 4.13–4.15, and the bandwidth reserved ÷ used over the
//! measured part of the run, of every reservation and of the application
//! shares alone.
//!
//! It only reads and computes; it must never talk to the guard.

use crate::subject::contract::Measured;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use tessera_guard::guard::Kind;
use tessera_guard::record::RecordRow;
use tessera_jack_peer::record::PeerRecord;
use tessera_measure::{Counter, Metric, Series, Summary};

pub const BUDGET: &str = "budget (all guarded threads)";
pub const THREAD_SET: &str = "budget set per thread";
pub const THREAD_PREDICTED: &str = "budget predicted per thread";
pub const THREAD_USED: &str = "budget used per thread";
/// Counters of the guard's record after the warm-up.
pub const GUARD_THREADS: &str = "guard threads reserved";
pub const GUARD_DECISIONS: &str = "guard budget decisions";
pub const GUARD_DEGRADED: &str = "guard budget decisions degraded";
pub const GUARD_XRUNS: &str = "guard xruns seen";
/// The bandwidth reserved ÷ used of the applications' threads their
/// programs did not make real-time — busy ones (shares) and ones adopted
/// in step with the graph — issue 21's goal: at most 1.5.
pub const SHARES_RATIO: &str = "application shares: reserved ÷ used";

/// One row of the record, its time moved onto the run's (s from t0).
pub type BudgetRow = RecordRow;

/// Where the record's times come from: seconds since the guard started,
/// CLOCK_MONOTONIC seconds, or Unix time — told apart by size.
pub struct Origin {
    pub guard_started_ns: u64,
    pub t0_ns: u64,
}

impl Origin {
    fn run_time(&self, t_s: f64) -> f64 {
        let t0 = self.t0_ns as f64 / 1e9;
        let started = self.guard_started_ns as f64 / 1e9;
        if t_s > 1e8 {
            let offset = tessera_sys::clock::realtime_ns() as f64 / 1e9
                - tessera_sys::clock::monotonic_ns() as f64 / 1e9;
            t_s - offset - t0
        } else if t_s >= started - 1.0 {
            t_s - t0
        } else {
            started + t_s - t0
        }
    }
}

pub(super) fn read(path: &Path, origin: &Origin) -> Result<Vec<BudgetRow>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("no record at {} ({e})", path.display()))?;
    parse(&text, origin)
}

/// The kind of each thread the guard's record names so far (while the
/// guard runs: none when it has written nothing yet; a row cut short is
/// skipped).
pub(super) fn kinds(path: &Path) -> HashMap<i32, Kind> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(RecordRow::parse)
        .map(|r| (r.tid, r.kind))
        .collect()
}

fn parse(text: &str, origin: &Origin) -> Result<Vec<BudgetRow>, String> {
    let rows = RecordRow::parse_all(text)?;
    Ok(rows
        .into_iter()
        .map(|r| RecordRow {
            t_s: origin.run_time(r.t_s),
            ..r
        })
        .collect())
}

/// What to call each thread: the load client it runs (from the clients'
/// record), else its name and id.
pub(super) fn labels(record: &PeerRecord) -> HashMap<i32, String> {
    record
        .threads
        .iter()
        .zip(&record.clients)
        .filter(|(tid, _)| **tid != 0)
        .map(|(tid, name)| (*tid, name.clone()))
        .collect()
}

/// The budget metrics and counters of the rows after the warm-up, the
/// bandwidth reserved ÷ used, and notes.
pub(super) fn metrics(
    rows: &[BudgetRow],
    labels: &HashMap<i32, String>,
    warmup_s: f64,
) -> (Measured, Option<f64>) {
    let measured: Vec<&BudgetRow> = rows.iter().filter(|r| r.t_s >= warmup_s).collect();
    if measured.is_empty() {
        return (
            Measured {
                notes: vec!["the guard recorded no budgets".into()],
                ..Measured::default()
            },
            None,
        );
    }
    let ratio = reserved_per_used(&measured, |_| true);
    let threads: BTreeMap<i32, &str> = measured
        .iter()
        .map(|r| (r.tid, r.thread.as_str()))
        .collect();
    let degraded = measured.iter().filter(|r| r.degraded).count() as u64;
    let xruns = measured.iter().map(|r| r.xruns).max().unwrap_or(0);
    let mut notes = vec![format!(
        "guard: {} threads reserved, {degraded} of {} budget decisions degraded, {xruns} xruns \
         seen by the guard",
        threads.len(),
        measured.len(),
    )];
    let counters = Counter::counts([
        (GUARD_THREADS, threads.len() as u64),
        (GUARD_DECISIONS, measured.len() as u64),
        (GUARD_DEGRADED, degraded),
        (GUARD_XRUNS, xruns),
    ]);
    let names = thread_names(&measured, labels);
    let label = |r: &BudgetRow| names[&r.tid].clone();
    let mut metrics = vec![
        total(&measured),
        per_thread(THREAD_SET, &measured, &label, |r| r.set_ns),
        per_thread(THREAD_PREDICTED, &measured, &label, |r| r.predicted_ns),
        per_thread(THREAD_USED, &measured, &label, |r| r.used_ns),
    ];
    if let Some((metric, note)) = shares(&measured) {
        metrics.push(metric);
        notes.push(note);
    }
    (Measured::new(metrics, counters, notes), ratio)
}

/// [`SHARES_RATIO`] over `rows`, as a metric and a note; None when those
/// threads used nothing.
pub(super) fn shares(rows: &[&BudgetRow]) -> Option<(Metric, String)> {
    let ratio = reserved_per_used(rows, not_real_time)?;
    let note = format!(
        "application shares: reserved ÷ used {ratio:.2} ({} threads not real-time)",
        threads_where(rows, not_real_time)
    );
    let metric = Metric {
        name: SHARES_RATIO.into(),
        unit: "×".into(),
        deadline: None,
        summary: Summary::from_samples(&[ratio], None),
        histogram: None,
        series: Vec::new(),
    };
    Some((metric, note))
}

/// Σ set ÷ Σ used, each per its period, of the rows `which` keeps; None
/// when they used nothing.
fn reserved_per_used(rows: &[&BudgetRow], which: fn(&BudgetRow) -> bool) -> Option<f64> {
    let sum = |ns: fn(&BudgetRow) -> u64| -> f64 {
        rows.iter()
            .filter(|r| which(r))
            .map(|r| ns(r) as f64 / r.period_ns as f64)
            .sum()
    };
    let used = sum(|r| r.used_ns);
    (used > 0.0).then(|| sum(|r| r.set_ns) / used)
}

/// An application's thread reserved though its program did not make it
/// real-time (not the guard's own loop).
fn not_real_time(r: &BudgetRow) -> bool {
    matches!(r.kind, Kind::Share | Kind::Graph)
}

fn threads_where(rows: &[&BudgetRow], which: fn(&BudgetRow) -> bool) -> usize {
    let tids: std::collections::BTreeSet<i32> =
        rows.iter().filter(|r| which(r)).map(|r| r.tid).collect();
    tids.len()
}

/// A name per thread, the same from one configuration to the next: the
/// load client it runs, else its own name, numbered when several threads
/// share one ("jackd", "jackd 2").
fn thread_names(rows: &[&BudgetRow], labels: &HashMap<i32, String>) -> HashMap<i32, String> {
    let mut names: HashMap<i32, String> = HashMap::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for r in rows {
        if names.contains_key(&r.tid) {
            continue;
        }
        let base = labels.get(&r.tid).unwrap_or(&r.thread).clone();
        let count = seen.entry(base.clone()).or_default();
        *count += 1;
        let name = match *count {
            1 => base,
            n => format!("{base} {n}"),
        };
        names.insert(r.tid, name);
    }
    names
}

/// Set, predicted and used summed over every thread per control interval,
/// as % of a CPU; statistics of the set (reserved) share.
fn total(rows: &[&BudgetRow]) -> Metric {
    let mut by_time: BTreeMap<i64, [f64; 3]> = BTreeMap::new();
    for r in rows {
        // Rows of one interval share its time, to the millisecond.
        let sums = by_time.entry((r.t_s * 1000.0).round() as i64).or_default();
        let pct = |ns: u64| 100.0 * ns as f64 / r.period_ns as f64;
        sums[0] += pct(r.set_ns);
        sums[1] += pct(r.predicted_ns);
        sums[2] += pct(r.used_ns);
    }
    let series: Vec<Series> = ["set", "predicted", "used"]
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let mut s = Series::with_capacity(*name, "%", by_time.len());
            by_time.iter().for_each(|(ms, sums)| {
                s.push(*ms as f64 / 1000.0, sums[k]);
            });
            s
        })
        .collect();
    Metric {
        name: BUDGET.into(),
        unit: "%".into(),
        deadline: None,
        summary: Summary::from_samples(&series[0].values(), None),
        histogram: None,
        series,
    }
}

/// One series per thread of `value` (µs per reservation period).
fn per_thread(
    name: &str,
    rows: &[&BudgetRow],
    label: &dyn Fn(&BudgetRow) -> String,
    value: fn(&BudgetRow) -> u64,
) -> Metric {
    let mut series: BTreeMap<String, Series> = BTreeMap::new();
    for r in rows {
        let s = series
            .entry(label(r))
            .or_insert_with_key(|l| Series::with_capacity(l.clone(), "us", rows.len()));
        s.push(r.t_s, value(r) as f64 / 1000.0);
    }
    let all: Vec<f64> = rows.iter().map(|r| value(r) as f64 / 1000.0).collect();
    Metric {
        name: name.into(),
        unit: "us".into(),
        deadline: None,
        summary: Summary::from_samples(&all, None),
        histogram: None,
        series: series.into_values().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str =
        "t_s,pid,tid,thread,kind,period_ns,used_ns,predicted_ns,set_ns,degraded,xruns\n\
        0.1,10,11,jackd,real-time,1333333,100000,120000,200000,0,0\n\
        1.1,10,11,jackd,real-time,1333333,100000,120000,200000,0,0\n\
        1.1,20,21,\"tessera,peer\",share,1333333,300000,320000,400000,1,2\n";

    fn origin() -> Origin {
        Origin {
            guard_started_ns: 1_000_000_000_000,
            t0_ns: 1_000_500_000_000,
        }
    }

    #[test]
    fn rows_are_moved_onto_the_run_s_time() {
        let rows = parse(CSV, &origin()).unwrap();
        assert_eq!(rows.len(), 3);
        // 0.1 s after the guard started, which was 0.5 s before t0.
        assert!((rows[0].t_s + 0.4).abs() < 1e-9, "{}", rows[0].t_s);
        assert_eq!(rows[2].thread, "tessera,peer");
        assert!(rows[2].degraded && rows[2].xruns == 2);
        assert!(parse("t_s,pid\n1,2\n", &origin()).is_err());
    }

    #[test]
    fn metrics_after_the_warm_up_with_labels_and_ratio() {
        let rows = parse(CSV, &origin()).unwrap();
        let labels = HashMap::from([(21, "load-01".to_string())]);
        let (
            Measured {
                metrics,
                counters,
                notes,
                ..
            },
            ratio,
        ) = metrics(&rows, &labels, 0.0);
        let count = |name| counters.iter().find(|c| c.name == name).map(|c| c.value);
        assert_eq!(count(GUARD_THREADS), Some(2.0));
        assert_eq!(count(GUARD_DEGRADED), Some(1.0));
        // Reserved 600 µs for 400 µs used, both per the same period.
        assert!((ratio.unwrap() - 1.5).abs() < 1e-9);
        assert_eq!(metrics.len(), 5);
        let shares = metrics.iter().find(|m| m.name == SHARES_RATIO).unwrap();
        assert!((shares.summary.mean - 400.0 / 300.0).abs() < 1e-9);
        let total = &metrics[0];
        assert_eq!(total.series.len(), 3);
        assert_eq!(
            total.series[0].points.len(),
            1,
            "one interval after the warm-up"
        );
        assert!((total.series[0].points[0].1 - 45.0).abs() < 1e-3);
        let names: Vec<&str> = metrics[1].series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["jackd", "load-01"]);
        assert!(
            notes[0].contains("2 threads reserved, 1 of 2"),
            "{}",
            notes[0]
        );
    }
}
