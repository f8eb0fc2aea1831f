//! The network application's figures, per host, over the measured part of
//! the run: the client's own underruns, late packets, packets received and
//! cycles (from its counters over time), jackd's xruns (as the client was
//! notified of them), and the CPU the guards reserved (Σ set ÷ period of
//! every thread in their records, averaged). Each count is a counter and a
//! metric of its own (its value is the one sample; its series the count
//! over time), so results.json carries the figures as data;
//! [`NetworkFigures`] reads them back, and the report's section compares
//! the configurations with the goal.
//!
//! It owns the typed result the run leaves ([`NetworkAppData`]). It
//! computes and states; it must never run anything, and never call a
//! result good or bad beyond saying whether the stated goal was met.

use crate::jack_peer::Window;
use crate::subject::audio_server::budgets::{self, BudgetRow, SHARES_RATIO};
use crate::subject::contract::{Measured, SCHEDULING};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use tessera_jack_peer::record::{NetSnapshot, PeerRecord};
use tessera_measure::{ConfigurationResult, Counter, Metric, RunResults, Series, Summary};
use tessera_scenario::ServerSched;

/// The hosts' names, in the order they are made.
pub const HOSTS: [&str; 2] = ["A", "B"];

/// What one host left for the metrics.
pub struct HostData {
    pub name: &'static str,
    pub record: Result<PeerRecord, String>,
    /// The guard's record, in run time (s from t0).
    pub budgets: Option<Result<Vec<BudgetRow>, String>>,
}

/// What a run left for the metrics.
pub struct NetworkAppData {
    pub sched: ServerSched,
    pub hosts: Vec<HostData>,
    pub notes: Vec<String>,
}

const UNDERRUNS: &str = "underruns";
const LATE: &str = "late packets";
const RECEIVED: &str = "packets received";
const CYCLES: &str = "cycles";
pub const XRUNS: &str = "jackd xruns";
/// The CPU reserved by both hosts' guards together, % of a CPU.
pub const CPU_RESERVED: &str = "network-app CPU reserved";
/// The note naming a configuration's scheduling.
const SCHED_NOTE: &str = "network app scheduling: ";
/// The goal for the guard with application shares against plain
/// FIFO: at most this fraction of plain's underruns, and of its xruns.
const GOAL_UNDERRUNS: f64 = 1.0 / 10.0;
const GOAL_XRUNS: f64 = 1.0 / 20.0;

/// A host's metric: `network-app underruns A`, …
pub fn metric_name(what: &str, host: &str) -> String {
    format!("network-app {what} {host}")
}

/// One host's counts over the measured window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostFigures {
    pub cycles: u64,
    pub received: u64,
    pub underruns: u64,
    pub late: u64,
    pub xruns: u64,
}

/// One configuration's figures, as results.json has them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetworkFigures {
    pub sched: String,
    /// Per host, in [`HOSTS`] order (a host not measured is left out).
    pub hosts: Vec<(String, HostFigures)>,
    /// Both guards together, % of a CPU (None: no guard).
    pub reserved_pct: Option<f64>,
    /// The application shares' bandwidth reserved ÷ used, both hosts.
    pub shares_ratio: Option<f64>,
}

impl NetworkFigures {
    /// The figures of a configuration's counters; None if it has none.
    /// Results written before counters were have the same figures as
    /// metrics only: read from those.
    pub fn from_result(result: &ConfigurationResult) -> Option<NetworkFigures> {
        let figure = |name: &str| {
            (result.counter(name).map(|c| c.value))
                .or_else(|| result.metric(name).map(|m| m.summary.max))
        };
        let value = |what: &str, host: &str| figure(&metric_name(what, host)).map(|v| v as u64);
        let hosts: Vec<(String, HostFigures)> = HOSTS
            .iter()
            .filter_map(|host| {
                let figures = HostFigures {
                    cycles: value(CYCLES, host)?,
                    received: value(RECEIVED, host)?,
                    underruns: value(UNDERRUNS, host)?,
                    late: value(LATE, host)?,
                    xruns: value(XRUNS, host)?,
                };
                Some((host.to_string(), figures))
            })
            .collect();
        if hosts.is_empty() {
            return None;
        }
        let sched = result.label(SCHEDULING).unwrap_or("–").to_string();
        Some(NetworkFigures {
            sched,
            hosts,
            reserved_pct: figure(CPU_RESERVED),
            shares_ratio: figure(SHARES_RATIO),
        })
    }

    fn total(&self, f: fn(&HostFigures) -> u64) -> u64 {
        self.hosts.iter().map(|(_, h)| f(h)).sum()
    }

    /// "a / b" of one figure over the hosts.
    fn per_host(&self, f: fn(&HostFigures) -> u64) -> String {
        let values: Vec<String> = self.hosts.iter().map(|(_, h)| f(h).to_string()).collect();
        values.join(" / ")
    }
}

impl HostFigures {
    /// A host's figures as counters, named as its metrics.
    fn counters(&self, host: &str) -> Vec<Counter> {
        Counter::counts(
            [
                (UNDERRUNS, self.underruns),
                (LATE, self.late),
                (RECEIVED, self.received),
                (CYCLES, self.cycles),
                (XRUNS, self.xruns),
            ]
            .map(|(what, value)| (metric_name(what, host), value)),
        )
    }
}

/// The counters' snapshot in force at `ns`: the last one taken by then
/// (the first if none was).
fn at(snapshots: &[NetSnapshot], ns: u64) -> NetSnapshot {
    snapshots
        .iter()
        .take_while(|s| s.at_ns <= ns)
        .last()
        .or(snapshots.first())
        .copied()
        .unwrap_or_default()
}

/// One host's counts over the window.
fn host_figures(record: &PeerRecord, window: &Window) -> HostFigures {
    let (from, to) = (
        at(&record.network, window.from_ns),
        at(&record.network, window.to_ns),
    );
    HostFigures {
        cycles: to.cycles.saturating_sub(from.cycles),
        received: to.received.saturating_sub(from.received),
        underruns: to.underruns.saturating_sub(from.underruns),
        late: to.late.saturating_sub(from.late),
        xruns: in_window(&record.xrun_ns, window).count() as u64,
    }
}

fn in_window<'a>(times: &'a [u64], window: &'a Window) -> impl Iterator<Item = &'a u64> {
    times.iter().filter(|t| window.contains(**t))
}

/// A count as a metric: its one sample is the count, its series the count
/// since the window's start over time.
fn count_metric(what: &str, host: &str, unit: &str, count: u64, series: Series) -> Metric {
    Metric {
        name: metric_name(what, host),
        unit: unit.into(),
        deadline: None,
        summary: Summary::from_samples(&[count as f64], None),
        histogram: None,
        series: vec![series],
    }
}

/// A counter of the snapshots inside the window, from its value at the
/// window's start.
fn counter_series(
    name: &str,
    unit: &str,
    record: &PeerRecord,
    window: &Window,
    f: fn(&NetSnapshot) -> u64,
) -> Series {
    let base = f(&at(&record.network, window.from_ns));
    let inside: Vec<&NetSnapshot> = record
        .network
        .iter()
        .filter(|s| (window.from_ns..=window.to_ns).contains(&s.at_ns))
        .collect();
    let mut series = Series::with_capacity(name, unit, inside.len());
    for s in inside {
        series.push(window.t(s.at_ns), f(s).saturating_sub(base) as f64);
    }
    series
}

/// jackd's xruns in the window, counted up at each one's time.
fn xrun_series(record: &PeerRecord, window: &Window) -> Series {
    let times: Vec<&u64> = in_window(&record.xrun_ns, window).collect();
    let mut series = Series::with_capacity("xruns", "xruns", times.len());
    for (k, t) in times.into_iter().enumerate() {
        series.push(window.t(*t), (k + 1) as f64);
    }
    series
}

/// One host's metrics and its figures.
fn host_metrics(host: &str, record: &PeerRecord, window: &Window) -> (Vec<Metric>, HostFigures) {
    let f = host_figures(record, window);
    let series = |name, unit, get| counter_series(name, unit, record, window, get);
    let metrics = vec![
        count_metric(
            UNDERRUNS,
            host,
            "underruns",
            f.underruns,
            series("underruns", "underruns", |s| s.underruns),
        ),
        count_metric(
            LATE,
            host,
            "packets",
            f.late,
            series("late", "packets", |s| s.late),
        ),
        count_metric(
            RECEIVED,
            host,
            "packets",
            f.received,
            series("received", "packets", |s| s.received),
        ),
        count_metric(
            CYCLES,
            host,
            "cycles",
            f.cycles,
            series("cycles", "cycles", |s| s.cycles),
        ),
        count_metric(XRUNS, host, "xruns", f.xruns, xrun_series(record, window)),
    ];
    (metrics, f)
}

/// The CPU one guard reserved over the window, % of a CPU per control
/// interval (Σ set ÷ period over its threads).
fn reserved_series(host: &str, rows: &[BudgetRow], window: &Window) -> Series {
    let (from_s, to_s) = window.seconds();
    let mut by_time: BTreeMap<i64, f64> = BTreeMap::new();
    for r in rows.iter().filter(|r| (from_s..=to_s).contains(&r.t_s)) {
        // Rows of one interval share its time, to the millisecond.
        *by_time.entry((r.t_s * 1000.0).round() as i64).or_default() +=
            100.0 * r.set_ns as f64 / r.period_ns.max(1) as f64;
    }
    let mut series = Series::with_capacity(host, "%", by_time.len());
    by_time.into_iter().for_each(|(ms, pct)| {
        series.push(ms as f64 / 1000.0, pct);
    });
    series
}

/// Both guards' record rows in the measured part of the run.
fn measured_rows<'a>(data: &'a NetworkAppData, window: &Window) -> Vec<&'a BudgetRow> {
    let (from_s, to_s) = window.seconds();
    data.hosts
        .iter()
        .filter_map(|h| match &h.budgets {
            Some(Ok(rows)) => Some(rows),
            _ => None,
        })
        .flatten()
        .filter(|r| (from_s..=to_s).contains(&r.t_s))
        .collect()
}

/// Both guards' reservations: one series per host; the value is the sum
/// of their means.
fn reserved_metric(
    data: &NetworkAppData,
    window: &Window,
    notes: &mut Vec<String>,
) -> Option<Metric> {
    let mut series = Vec::new();
    for host in &data.hosts {
        match &host.budgets {
            Some(Ok(rows)) => series.push(reserved_series(host.name, rows, window)),
            Some(Err(e)) => notes.push(format!("host {}: guard's record: {e}", host.name)),
            None => {}
        }
    }
    if series.is_empty() {
        return None;
    }
    let mean = |s: &Series| Summary::from_samples(&s.values(), None).mean;
    let total: f64 = series.iter().map(mean).sum();
    Some(Metric {
        name: CPU_RESERVED.into(),
        unit: "%".into(),
        deadline: None,
        summary: Summary::from_samples(&[total], None),
        histogram: None,
        series,
    })
}

/// The metrics, counters and notes of both hosts.
pub(super) fn measure(data: &NetworkAppData, window: &Window) -> Measured {
    let mut metrics = Vec::new();
    let mut counters = Vec::new();
    let mut notes = vec![format!("{SCHED_NOTE}{}", data.sched.describe())];
    let mut lines = Vec::new();
    for host in &data.hosts {
        match &host.record {
            Ok(record) => {
                let (host_metrics, f) = host_metrics(host.name, record, window);
                metrics.extend(host_metrics);
                counters.extend(f.counters(host.name));
                lines.push(format!(
                    "host {}: {} underruns, {} late packets, {} packets received, {} cycles, \
                     {} jackd xruns",
                    host.name, f.underruns, f.late, f.received, f.cycles, f.xruns
                ));
            }
            Err(e) => notes.push(format!("host {} not measured: {e}", host.name)),
        }
    }
    if let Some(reserved) = reserved_metric(data, window, &mut notes) {
        lines.push(format!(
            "CPU reserved {:.1} % of a CPU (both guards)",
            reserved.summary.max
        ));
        counters.push(Counter::new(CPU_RESERVED, reserved.summary.max, "%"));
        metrics.push(reserved);
    }
    if let Some((metric, note)) = budgets::shares(&measured_rows(data, window)) {
        lines.push(note);
        counters.push(Counter::new(SHARES_RATIO, metric.summary.max, "ratio"));
        metrics.push(metric);
    }
    notes.push(format!("network app: {}", lines.join("; ")));
    Measured::new(metrics, counters, notes).label(SCHEDULING, data.sched.describe())
}

/// The report's section for a run of the network application (empty for
/// other runs): every configuration's figures, then the goal.
pub fn report_section(results: &RunResults) -> String {
    let rows: Vec<(&str, NetworkFigures)> = results
        .configurations
        .iter()
        .filter_map(|c| Some((c.name.as_str(), NetworkFigures::from_result(c)?)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let hosts = HOSTS.join(" / ");
    let mut text = format!(
        "\n## The network application: its own underruns, jackd's xruns\n\n\
         | configuration | scheduling | underruns {hosts} | late packets {hosts} \
         | packets received {hosts} | jackd xruns {hosts} | CPU reserved (% of a CPU) \
         | shares reserved ÷ used |\n\
         |---|---|--:|--:|--:|--:|--:|--:|\n"
    );
    for (name, f) in &rows {
        let reserved = f.reserved_pct.map_or("–".into(), |p| format!("{p:.1}"));
        let shares = f.shares_ratio.map_or("–".into(), |r| format!("{r:.2}"));
        let _ = writeln!(
            text,
            "| {name} | {} | {} | {} | {} | {} | {reserved} | {shares} |",
            f.sched,
            f.per_host(|h| h.underruns),
            f.per_host(|h| h.late),
            f.per_host(|h| h.received),
            f.per_host(|h| h.xruns),
        );
    }
    text.push_str(&goal(&rows));
    text
}

/// Each guard with application shares against plain FIFO, as the issue
/// states the goal.
fn goal(rows: &[(&str, NetworkFigures)]) -> String {
    let Some((plain_name, plain)) = rows.iter().find(|(_, f)| f.sched.starts_with("fifo")) else {
        return "\nNo plain FIFO configuration: no comparison with the goal.\n".into();
    };
    let shared: Vec<&(&str, NetworkFigures)> = rows
        .iter()
        .filter(|(_, f)| f.sched.starts_with("guard") && !f.sched.contains("rt-only"))
        .collect();
    if shared.is_empty() {
        return "\nNo guard with application shares measured: no comparison with the goal.\n"
            .into();
    }
    let mut text = format!(
        "\n**The goal** (issue 21): guarded with application shares, the application's own \
         underruns at most 1/10 of plain FIFO's ({plain_name}) and jackd's xruns at most 1/20, \
         in the same run.\n\n"
    );
    for (name, f) in shared {
        let check = |what: &str, get: fn(&HostFigures) -> u64, bound: f64| {
            let (ours, theirs) = (f.total(get), plain.total(get));
            let met = (ours as f64) <= bound * theirs as f64;
            format!(
                "{what} {ours} against {theirs} ({})",
                if met { "met" } else { "not met" }
            )
        };
        let _ = writeln!(
            text,
            "- {name}: {}; {}.",
            check("underruns", |h| h.underruns, GOAL_UNDERRUNS),
            check("jackd xruns", |h| h.xruns, GOAL_XRUNS)
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_scenario::GuardSettings;

    fn snapshot(at_ns: u64, underruns: u64, late: u64, received: u64) -> NetSnapshot {
        NetSnapshot {
            at_ns,
            cycles: at_ns / 10,
            received,
            underruns,
            late,
            ..NetSnapshot::default()
        }
    }

    fn record(underruns_in_window: u64) -> PeerRecord {
        PeerRecord {
            clients: vec!["netapp".into()],
            network: vec![
                snapshot(100, 5, 1, 10),
                snapshot(1_000, 6, 2, 100),
                snapshot(2_000, 6 + underruns_in_window, 4, 200),
                snapshot(3_000, 50, 9, 300),
            ],
            xrun_ns: vec![500, 1_500, 2_500],
            ..PeerRecord::default()
        }
    }

    fn window() -> Window {
        Window {
            from_ns: 1_000,
            to_ns: 2_000,
            t0_ns: 0,
        }
    }

    fn row(t_s: f64, set_ns: u64) -> BudgetRow {
        BudgetRow {
            t_s,
            pid: 10,
            tid: 1,
            thread: "x".into(),
            kind: tessera_guard::guard::Kind::RealTime,
            period_ns: 1_000,
            used_ns: 0,
            predicted_ns: 0,
            set_ns,
            degraded: false,
            xruns: 0,
        }
    }

    fn data(sched: ServerSched, underruns: [u64; 2], budgets: bool) -> NetworkAppData {
        let rows = || Some(Ok(vec![row(1e-6, 100), row(1e-6, 50), row(9.0, 900)]));
        NetworkAppData {
            sched,
            hosts: HOSTS
                .iter()
                .zip(underruns)
                .map(|(name, u)| HostData {
                    name,
                    record: Ok(record(u)),
                    budgets: budgets.then(rows).flatten(),
                })
                .collect(),
            notes: vec![],
        }
    }

    #[test]
    fn counts_are_those_of_the_window_and_read_back_from_the_counters() {
        let result = measure(&data(ServerSched::Fifo(Some(70)), [3, 4], false), &window())
            .into_result("plain");
        assert_eq!(result.count(&metric_name(UNDERRUNS, "B")), Some(4));
        assert_eq!(result.count(&metric_name(XRUNS, "A")), Some(1));
        let f = NetworkFigures::from_result(&result).expect("figures");
        assert_eq!(f.sched, "fifo:70");
        assert_eq!(f.hosts.len(), 2);
        assert_eq!(
            f.hosts[0].1,
            HostFigures {
                cycles: 100,
                received: 100,
                underruns: 3,
                late: 2,
                xruns: 1
            }
        );
        assert_eq!(f.hosts[1].1.underruns, 4);
        assert_eq!(f.reserved_pct, None, "no guard, nothing reserved");
        let underruns = result.metric(&metric_name(UNDERRUNS, "A")).unwrap();
        assert_eq!(underruns.series[0].points, [(1e-6, 0.0), (2e-6, 3.0)]);
        let before_counters = ConfigurationResult {
            counters: Vec::new(),
            ..result.clone()
        };
        assert_eq!(NetworkFigures::from_result(&before_counters), Some(f));
    }

    #[test]
    fn the_guards_reservations_add_up_over_the_window() {
        let sched = ServerSched::Guard(GuardSettings::default());
        let Measured {
            metrics, counters, ..
        } = measure(&data(sched, [0, 0], true), &window());
        let reserved = metrics.iter().find(|m| m.name == CPU_RESERVED).unwrap();
        // 15 % on each host in the window; the row at 9 s is after it.
        assert!((reserved.summary.max - 30.0).abs() < 1e-9, "{reserved:?}");
        let counter = counters.iter().find(|c| c.name == CPU_RESERVED).unwrap();
        assert_eq!(
            (counter.value, counter.unit.as_str()),
            (reserved.summary.max, "%")
        );
        assert_eq!(reserved.series.len(), 2);
    }

    #[test]
    fn the_section_tables_every_configuration_and_states_the_goal() {
        let mut results = RunResults::start("network app");
        let configs = [
            ("plain", ServerSched::Fifo(Some(70)), [40, 60]),
            (
                "guard-rt",
                ServerSched::Guard(GuardSettings {
                    rt_only: true,
                    ..GuardSettings::default()
                }),
                [900, 900],
            ),
            (
                "guard-app",
                ServerSched::Guard(GuardSettings::default()),
                [5, 4],
            ),
        ];
        for (name, sched, underruns) in configs {
            let measured = measure(&data(sched, underruns, false), &window());
            results.configurations.push(measured.into_result(name));
        }
        let section = report_section(&results);
        assert!(
            section.contains("| plain | fifo:70 | 40 / 60 | 2 / 2 | 100 / 100 | 1 / 1 | – |"),
            "{section}"
        );
        assert!(
            section.contains("| guard-rt | guard:rt-only | 900 / 900 |"),
            "{section}"
        );
        assert!(
            section.contains(
                "- guard-app: underruns 9 against 100 (met); jackd xruns 2 against 2 (not met)."
            ),
            "{section}"
        );
        assert!(!section.contains("- guard-rt:"), "{section}");
        assert_eq!(report_section(&RunResults::start("other")), "");
    }
}
