//! The desktop subject's figures: from the clients' record, the cycles
//! measured, the periods skipped (JACK's frame counter jumping by more than
//! one period between recorded cycles) and the late cycles (the last load
//! client finishing more than a period after the cycle began), the cycles'
//! end-to-end times; from the censuses, how many of the server's and the
//! clients' threads ran SCHED_DEADLINE, FIFO, RR or OTHER, and the CPU
//! their reservations held. All of them are counters (and one metric); the
//! report's section — a table of every configuration, the goal line, a
//! plot of the end-to-end times — renders from them.
//!
//! It computes and states; whether the goal is met is arithmetic on the
//! counters, said as such, never a judgement of the run.

use crate::figures::latency_histogram;
use crate::jack_peer::{cycles, periods, thinned, Window};
use crate::subject::contract::Measured;
use std::fmt::Write as _;
use std::path::Path;
use tessera_jack_peer::record::PeerRecord;
use tessera_measure::plot::{self, SeriesPanel};
use tessera_measure::{ConfigurationResult, Counter, Metric, RunResults};
use tessera_scenario::Scenario;
use tessera_scenario::{DesktopSubject, Rights};
use tessera_sys::proc::Pid;
use tessera_sys::sched::{self, Policy};

/// What a run left for the metrics.
pub(crate) struct DesktopData {
    pub(super) subject: DesktopSubject,
    pub(super) rights: Rights,
    pub(super) record: Result<PeerRecord, String>,
    /// (s from t0, census) in order.
    pub(super) censuses: Vec<(f64, Census)>,
    pub(super) notes: Vec<String>,
}

pub const CYCLES: &str = "desktop cycles";
pub const SKIPPED: &str = "desktop periods skipped";
pub const LATE: &str = "desktop late cycles";
const SKIPPED_OR_LATE: &str = "desktop periods skipped + late cycles";
/// CPU held by the reservations of the server's and the clients' threads
/// at the last census (CPUs: runtime ÷ period summed).
pub const RESERVED: &str = "desktop CPU reserved";
/// 1 when tessera gave the rights (its RTKit), 0 otherwise.
pub const TESSERA: &str = "desktop rights from tessera";
pub const END_TO_END: &str = "desktop cycle end-to-end";
/// The policies a census counts, in the table's order.
const POLICIES: [&str; 4] = ["SCHED_DEADLINE", "SCHED_FIFO", "SCHED_RR", "SCHED_OTHER"];
/// The counters of the last census: (server or clients) × policy.
pub const CENSUS_NAMES: [[&str; 4]; 2] = [
    [
        "desktop server threads SCHED_DEADLINE",
        "desktop server threads SCHED_FIFO",
        "desktop server threads SCHED_RR",
        "desktop server threads SCHED_OTHER",
    ],
    [
        "desktop client threads SCHED_DEADLINE",
        "desktop client threads SCHED_FIFO",
        "desktop client threads SCHED_RR",
        "desktop client threads SCHED_OTHER",
    ],
];
/// The goal: tessera's skipped + late at most this fraction of the best
/// of the others.
const GOAL_FRACTION: f64 = 1.0 / 20.0;

/// The threads of the server and of the clients by policy, and the CPU
/// their reservations hold.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Census {
    /// [server, clients] × [`POLICIES`] (SCHED_BATCH and IDLE count as
    /// OTHER).
    pub threads: [[u64; 4]; 2],
    /// runtime ÷ period, summed over the SCHED_DEADLINE threads.
    pub reserved_cpu: f64,
}

impl Census {
    /// The threads of `server` and `clients` (processes that are gone
    /// count nothing).
    pub fn take(server: Option<Pid>, clients: Option<Pid>) -> Census {
        let mut census = Census::default();
        for (side, pid) in [server, clients].into_iter().enumerate() {
            let threads = pid.and_then(|p| tessera_sys::proc::threads_of(p).ok());
            for tid in threads.unwrap_or_default() {
                if let Ok(policy) = sched::get_policy(tid) {
                    census.count(side, &policy);
                }
            }
        }
        census
    }

    fn count(&mut self, side: usize, policy: &Policy) {
        let column = match policy {
            Policy::Deadline(p) => {
                self.reserved_cpu += p.runtime.as_secs_f64() / p.period.as_secs_f64();
                0
            }
            Policy::Fifo { .. } => 1,
            Policy::RoundRobin { .. } => 2,
            Policy::Other { .. } | Policy::Batch { .. } | Policy::Idle => 3,
        };
        self.threads[side][column] += 1;
    }

    fn counters(&self) -> Vec<Counter> {
        let mut counters: Vec<Counter> = CENSUS_NAMES
            .iter()
            .zip(&self.threads)
            .flat_map(|(names, counts)| names.iter().zip(counts))
            .map(|(name, count)| Counter::count(*name, *count))
            .collect();
        counters.push(Counter::new(RESERVED, self.reserved_cpu, "CPU"));
        counters
    }

    fn describe(&self) -> String {
        let side = |counts: &[u64; 4]| {
            let listed: Vec<String> = POLICIES
                .iter()
                .zip(counts)
                .filter(|(_, n)| **n > 0)
                .map(|(p, n)| format!("{n} {p}"))
                .collect();
            match listed.is_empty() {
                true => "none".to_string(),
                false => listed.join(", "),
            }
        };
        format!(
            "server threads {}; client threads {}; {:.3} CPU reserved",
            side(&self.threads[0]),
            side(&self.threads[1]),
            self.reserved_cpu
        )
    }
}

/// The metrics, counters and notes of a finished run.
pub(super) fn measure(data: DesktopData, scenario: &Scenario, t0: u64) -> Measured {
    let mut notes = vec![format!(
        "desktop: real-time rights from {}",
        data.rights.describe()
    )];
    let mut counters = vec![Counter::count(TESSERA, u64::from(data.rights.is_tessera()))];
    match data.censuses.last() {
        Some((t, census)) => {
            counters.extend(census.counters());
            notes.push(format!("at {t:.1} s: {}", census.describe()));
        }
        None => notes.push("no census of the threads was taken (the run was too short)".into()),
    }
    notes.extend(data.notes);
    let record = match data.record {
        Ok(record) => record,
        Err(e) => {
            notes.insert(0, format!("not measured: {e}"));
            return Measured::new(Vec::new(), counters, notes);
        }
    };
    let window = Window::of_run(scenario, t0);
    let audio = data.subject.audio();
    let period_ns = audio.period().as_nanos() as u64;
    let all = cycles(&record);
    let measured: Vec<_> = all.iter().filter(|c| window.contains(c.start_ns)).collect();
    let (_, skipped) = periods(&measured, audio.frames);
    let ends: Vec<(f64, u64)> = measured
        .iter()
        .filter_map(|c| Some((window.t(c.start_ns), c.end_to_end()?)))
        .collect();
    let late = ends.iter().filter(|(_, e)| *e > period_ns).count() as u64;
    counters.extend(Counter::counts([
        (CYCLES, measured.len() as u64),
        (SKIPPED, skipped),
        (LATE, late),
        (SKIPPED_OR_LATE, skipped + late),
    ]));
    notes.push(format!(
        "{} cycles, {skipped} periods skipped, {late} late cycles",
        measured.len()
    ));
    let period_us = period_ns as f64 / 1000.0;
    let mut e2e = Metric::latency(
        END_TO_END,
        Some(period_us),
        latency_histogram(ends.iter().map(|&(_, e)| e)),
    );
    e2e.summary.misses = Some(late);
    let points: Vec<(f64, f64)> = ends.iter().map(|&(t, e)| (t, e as f64 / 1000.0)).collect();
    e2e.series = vec![thinned("end-to-end", &points)];
    Measured::new(vec![e2e], counters, notes)
}

/// One configuration's row.
struct Row<'a> {
    name: &'a str,
    tessera: bool,
    cycles: u64,
    skipped: u64,
    late: u64,
    threads: [[Option<u64>; 4]; 2],
    reserved: Option<f64>,
}

impl<'a> Row<'a> {
    fn of(result: &'a ConfigurationResult) -> Option<Row<'a>> {
        let threads = CENSUS_NAMES.map(|names| names.map(|n| result.count(n)));
        Some(Row {
            name: &result.name,
            tessera: result.count(TESSERA)? == 1,
            cycles: result.count(CYCLES)?,
            skipped: result.count(SKIPPED)?,
            late: result.count(LATE)?,
            threads,
            reserved: result.counter(RESERVED).map(|c| c.value),
        })
    }

    fn failed(&self) -> u64 {
        self.skipped + self.late
    }

    fn threads(&self, side: usize) -> String {
        let counts: Vec<String> = self.threads[side]
            .iter()
            .map(|n| n.map_or("–".into(), |n| n.to_string()))
            .collect();
        counts.join(" / ")
    }
}

/// The report's section for a run of desktop configurations (empty for
/// other runs): a table, the goal line, the end-to-end times plotted.
pub fn report_section(results: &RunResults, dir: &Path) -> Result<String, String> {
    let rows: Vec<Row> = results.configurations.iter().filter_map(Row::of).collect();
    if rows.is_empty() {
        return Ok(String::new());
    }
    let mut text = String::from(
        "\n## The desktop: a user's PipeWire and its real-time rights\n\n\
         Threads are counted at the last census (SCHED_DEADLINE / FIFO / RR / OTHER).\n\n\
         | configuration | cycles | periods skipped | late cycles | skipped + late \
         | server threads | client threads | CPU reserved |\n\
         |---|--:|--:|--:|--:|---|---|--:|\n",
    );
    for r in &rows {
        let reserved = r.reserved.map_or("–".into(), |c| format!("{c:.3}"));
        let _ = writeln!(
            text,
            "| {} | {} | {} | {} | {} | {} | {} | {reserved} |",
            r.name,
            r.cycles,
            r.skipped,
            r.late,
            r.failed(),
            r.threads(0),
            r.threads(1)
        );
    }
    text.push_str(&goal(&rows));
    text.push_str(&plot_ends(results, &rows, dir)?);
    Ok(text)
}

/// The goal line: tessera's best against the best of the others.
fn goal(rows: &[Row]) -> String {
    let best = |tessera: bool| {
        rows.iter()
            .filter(|r| r.tessera == tessera && r.cycles > 0)
            .min_by_key(|r| r.failed())
    };
    let (Some(ours), Some(theirs)) = (best(true), best(false)) else {
        return "\n**Goal** (with tessera, skipped + late ≤ 1/20 of the best of the others): \
                the run lacks a tessera or another configuration with cycles, no comparison.\n"
            .into();
    };
    let limit = theirs.failed() as f64 * GOAL_FRACTION;
    let verdict = match (ours.failed() as f64) <= limit {
        true => "met",
        false => "not met",
    };
    format!(
        "\n**Goal** (with tessera, skipped + late ≤ 1/20 of the best of the others): {verdict} — \
         {} had {}, the best of the others, {}, had {} (1/20: {limit:.1}).\n",
        ours.name,
        ours.failed(),
        theirs.name,
        theirs.failed()
    )
}

/// Each configuration's end-to-end times against time, one panel each.
fn plot_ends(results: &RunResults, rows: &[Row], dir: &Path) -> Result<String, String> {
    let panels: Vec<SeriesPanel> = rows
        .iter()
        .filter_map(|r| {
            let result = results.configurations.iter().find(|c| c.name == r.name)?;
            let metric = result.metric(END_TO_END)?;
            Some(SeriesPanel {
                label: r.name,
                series: metric.series.iter().collect(),
            })
        })
        .collect();
    if panels.is_empty() {
        return Ok(String::new());
    }
    let files = plot::time_series(
        &dir.join("desktop-end-to-end"),
        "desktop: each cycle's end-to-end time (worst of every 10 ms)",
        "end-to-end (µs)",
        &panels,
    )
    .map_err(|e| e.to_string())?;
    let name = |p: &Path| {
        p.file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned())
    };
    Ok(format!(
        "\n![each cycle's end-to-end time, per configuration]({})\n\n[SVG]({})\n",
        name(&files.png),
        name(&files.svg)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tessera_sys::sched::{DeadlineFlags, DeadlineParams};

    fn result(name: &str, tessera: bool, skipped: u64, late: u64) -> ConfigurationResult {
        let mut census = Census::default();
        census.count(0, &Policy::Other { nice: 0 });
        census.count(
            1,
            &Policy::Deadline(DeadlineParams {
                runtime: Duration::from_micros(500),
                deadline: Duration::from_millis(10),
                period: Duration::from_millis(10),
                flags: DeadlineFlags::default(),
            }),
        );
        let mut counters = vec![Counter::count(TESSERA, u64::from(tessera))];
        counters.extend(census.counters());
        counters.extend(Counter::counts([
            (CYCLES, 1000),
            (SKIPPED, skipped),
            (LATE, late),
        ]));
        ConfigurationResult {
            labels: Default::default(),
            name: name.into(),
            counters,
            notes: Vec::new(),
            metrics: Vec::new(),
            why: None,
        }
    }

    #[test]
    fn a_census_counts_policies_and_reserved_cpu() {
        let mut c = Census::default();
        c.count(0, &Policy::RoundRobin { priority: 20 });
        c.count(0, &Policy::Batch { nice: 0 });
        c.count(1, &Policy::Fifo { priority: 88 });
        assert_eq!(c.threads, [[0, 0, 1, 1], [0, 1, 0, 0]]);
        assert_eq!(c.reserved_cpu, 0.0);
        assert!(c
            .describe()
            .starts_with("server threads 1 SCHED_RR, 1 SCHED_OTHER;"));
        let counters = c.counters();
        assert_eq!(counters.len(), 9);
        assert_eq!(counters[2].name, "desktop server threads SCHED_RR");
        assert_eq!(counters[2].value, 1.0);
    }

    #[test]
    fn the_section_tables_every_configuration_and_states_the_goal() {
        let mut results = RunResults::start("desktop");
        results.configurations = vec![
            result("no RT rights", false, 300, 100),
            result("stock RTKit", false, 100, 100),
            result("tessera's RTKit", true, 4, 5),
        ];
        let dir =
            std::env::temp_dir().join(format!("tessera-desktop-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let section = report_section(&results, &dir).unwrap();
        assert!(
            section.contains(
                "| stock RTKit | 1000 | 100 | 100 | 200 | 0 / 0 / 0 / 1 | 1 / 0 / 0 / 0 | 0.050 |"
            ),
            "{section}"
        );
        assert!(
            section.contains(": met — tessera's RTKit had 9"),
            "{section}"
        );
        results.configurations[2] = result("tessera's RTKit", true, 20, 5);
        let section = report_section(&results, &dir).unwrap();
        assert!(
            section.contains(": not met — tessera's RTKit had 25"),
            "{section}"
        );
        results.configurations.truncate(2);
        let section = report_section(&results, &dir).unwrap();
        assert!(section.contains("no comparison"), "{section}");
        assert_eq!(
            report_section(&RunResults::start("other"), &dir).unwrap(),
            ""
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
