//! The audio-server subject's figures from the clients' record: per cycle
//! (grouped by JACK's frame counter) when each load client finished after
//! the cycle's start (the thesis's Fig. 4.16), the cycle's end-to-end time
//! (last client finished), the period between cycle starts; xruns as the
//! clients were notified of them, late cycles (end-to-end > period),
//! incomplete cycles (a client that was open did not run) and lost periods.
//! Also the report's section: the headline figures of every configuration
//! and how they compare with the thesis's finding.
//!
//! It computes and states; it must never call a result good or bad beyond
//! saying in which direction it differs from the thesis.

use crate::figures::latency_histogram;
pub use crate::jack_peer::Window;
use crate::jack_peer::{cycles, periods, thinned, Cycle, MONITOR};
use crate::subject::contract::SCHEDULING;
use std::fmt::Write as _;
use tessera_jack_peer::record::PeerRecord;
use tessera_measure::{ConfigurationResult, Counter, Metric, RunResults, Summary};
use tessera_scenario::AudioServerSubject;

pub const END_TO_END: &str = "cycle end-to-end";
pub const CLIENT_END: &str = "client end";
pub const PERIOD: &str = "period";

/// One configuration's headline figures. They travel as its counters
/// ([`Headline::counters`]) beside a note saying them in words
/// ([`Headline::note`], which also names the scheduling), so the report's
/// section can be rewritten from results.json.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Headline {
    pub sched: String,
    pub cycles: u64,
    pub xruns: u64,
    pub late: u64,
    pub incomplete: u64,
    /// Cycles late or incomplete (or both).
    pub failed: u64,
    /// The buffer the server gave its clients: frames and rate (Hz).
    pub served: Option<(u64, u64)>,
    pub lost: u64,
    /// Bandwidth reserved ÷ used, over every guarded thread.
    pub reserved_per_used: Option<f64>,
}

const HEADLINE: &str = "audio server";
pub const CYCLES: &str = "audio server cycles";
pub const XRUNS: &str = "audio server xruns";
pub const LATE: &str = "audio server late cycles";
pub const INCOMPLETE: &str = "audio server incomplete cycles";
pub const FAILED: &str = "audio server failed cycles";
pub const LOST: &str = "audio server periods lost";
pub const RESERVED_PER_USED: &str = "audio server reserved ÷ used";
pub const SERVED_FRAMES: &str = "audio server frames per period";
pub const SERVED_RATE: &str = "audio server rate (Hz)";

impl Headline {
    pub fn note(&self) -> String {
        let ratio = self
            .reserved_per_used
            .map_or("–".to_string(), |r| format!("{r:.2}"));
        format!(
            "{HEADLINE} {}: {} cycles, {} xruns, {} late cycles, {} incomplete cycles, \
             {} failed cycles, {} periods lost, reserved ÷ used {ratio}",
            self.sched, self.cycles, self.xruns, self.late, self.incomplete, self.failed, self.lost
        )
    }

    /// The figures as counters (the ratio only when there is one).
    pub fn counters(&self) -> Vec<Counter> {
        let mut counters = Counter::counts([
            (CYCLES, self.cycles),
            (XRUNS, self.xruns),
            (LATE, self.late),
            (INCOMPLETE, self.incomplete),
            (FAILED, self.failed),
            (LOST, self.lost),
        ]);
        counters.extend(
            self.reserved_per_used
                .map(|r| Counter::new(RESERVED_PER_USED, r, "ratio")),
        );
        if let Some((frames, rate)) = self.served {
            counters.push(Counter::count(SERVED_FRAMES, frames));
            counters.push(Counter::new(SERVED_RATE, rate as f64, "Hz"));
        }
        counters
    }

    /// The headline of a configuration's counters, its scheduling named
    /// by its label; None if the configuration has no headline.
    pub fn from_result(result: &ConfigurationResult) -> Option<Headline> {
        let count = |name| result.count(name);
        Some(Headline {
            sched: result.label(SCHEDULING).unwrap_or("–").to_string(),
            cycles: count(CYCLES)?,
            xruns: count(XRUNS)?,
            late: count(LATE)?,
            incomplete: count(INCOMPLETE)?,
            failed: count(FAILED)?,
            lost: count(LOST)?,
            reserved_per_used: result.counter(RESERVED_PER_USED).map(|c| c.value),
            served: count(SERVED_FRAMES).zip(count(SERVED_RATE)),
        })
    }

    /// Cycles that failed — late, incomplete, or lost altogether — as a
    /// fraction of the cycles due (xruns are the server's own count of
    /// the same failures, and PipeWire's JACK clients hear of none).
    fn failed(&self) -> f64 {
        let failed = self.failed + self.lost;
        failed as f64 / (self.cycles + self.lost).max(1) as f64
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The metrics, the headline and notes of one configuration's record.
pub(super) fn measure(
    record: &PeerRecord,
    subject: &AudioServerSubject,
    window: &Window,
) -> (Vec<Metric>, Headline, Vec<String>) {
    let period_ns = subject.period().as_nanos() as u64;
    let period_us = Some(us(period_ns));
    let mut notes = Vec::new();
    if record.period != (subject.frames, subject.rate) {
        notes.push(format!(
            "the server gave its clients {} frames at {} Hz, not the scenario's {} at {}",
            record.period.0, record.period.1, subject.frames, subject.rate
        ));
    }
    let all = cycles(record);
    let measured: Vec<&Cycle> = all.iter().filter(|c| window.contains(c.start_ns)).collect();
    let (periods, lost) = periods(&measured, subject.frames);
    let end_to_end: Vec<(f64, u64)> = measured
        .iter()
        .filter_map(|c| Some((window.t(c.start_ns), c.end_to_end()?)))
        .collect();
    let is_late = |c: &Cycle| c.end_to_end().is_some_and(|e| e > period_ns);
    let late = measured.iter().filter(|c| is_late(c)).count() as u64;
    let xruns = match record.client(MONITOR) {
        Some(_) => record
            .xrun_ns
            .iter()
            .filter(|t| window.contains(**t))
            .count() as u64,
        None => record.xruns,
    };
    let headline = Headline {
        sched: String::new(),
        cycles: measured.len() as u64,
        xruns,
        late,
        incomplete: measured.iter().filter(|c| c.missing > 0).count() as u64,
        failed: measured
            .iter()
            .filter(|c| is_late(c) || c.missing > 0)
            .count() as u64,
        lost,
        reserved_per_used: None,
        served: Some((u64::from(record.period.0), u64::from(record.period.1))),
    };
    notes.push(format!(
        "{} xruns notified in the whole run (warm-up included); {} cycles with load clients",
        record.xruns,
        end_to_end.len()
    ));
    let mut e2e = Metric::latency(
        END_TO_END,
        period_us,
        latency_histogram(end_to_end.iter().map(|&(_, e)| e)),
    );
    e2e.summary.misses = Some(late);
    let points: Vec<(f64, f64)> = end_to_end.iter().map(|&(t, e)| (t, us(e))).collect();
    e2e.series = vec![thinned("end-to-end", &points)];
    let mut period = Metric::latency(PERIOD, None, latency_histogram(periods.iter().map(|p| p.1)));
    let points: Vec<(f64, f64)> = periods.iter().map(|&(s, p)| (window.t(s), us(p))).collect();
    period.series = vec![thinned("period", &points)];
    let metrics = vec![
        e2e,
        client_end(record, &measured, window, period_us),
        period,
    ];
    (metrics, headline, notes)
}

/// When each load client finished, relative to the cycle's start: one
/// series per client, statistics over all of them.
fn client_end(
    record: &PeerRecord,
    cycles: &[&Cycle],
    window: &Window,
    period_us: Option<f64>,
) -> Metric {
    let mut per_client: Vec<Vec<(f64, f64)>> = vec![Vec::new(); record.clients.len()];
    for c in cycles {
        for &(client, end) in &c.ends {
            per_client[client].push((window.t(c.start_ns), us(end)));
        }
    }
    let all: Vec<f64> = per_client.iter().flatten().map(|&(_, v)| v).collect();
    let series = per_client
        .iter()
        .enumerate()
        .filter(|(_, points)| !points.is_empty())
        .map(|(k, points)| thinned(record.clients[k].clone(), points))
        .collect();
    Metric {
        name: CLIENT_END.into(),
        unit: "us".into(),
        deadline: period_us,
        summary: Summary::from_samples(&all, period_us),
        histogram: None,
        series,
    }
}

/// The report's section for a run of audio-server configurations (empty
/// for other runs): their headline figures in one table, then how they
/// compare with the thesis.
pub fn report_section(results: &RunResults) -> String {
    let rows: Vec<(&str, Headline, Option<f64>)> = results
        .configurations
        .iter()
        .filter_map(|c| {
            let headline = Headline::from_result(c)?;
            let p99 = c.metric(END_TO_END).map(|m| m.summary.p99);
            Some((c.name.as_str(), headline, p99))
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut text = "\n## The audio server: xruns and failed cycles\n\n\
        | configuration | scheduling | cycles | xruns | late | incomplete | failed (late or incomplete) \
        | periods lost | end-to-end p99 (µs) | reserved ÷ used |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n"
        .to_string();
    for (name, h, p99) in &rows {
        let ratio = h
            .reserved_per_used
            .map_or("–".into(), |r| format!("{r:.2}"));
        let p99 = p99.map_or("–".into(), |p| format!("{p:.1}"));
        let _ = writeln!(
            text,
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {p99} | {ratio} |",
            h.sched, h.cycles, h.xruns, h.late, h.incomplete, h.failed, h.lost
        );
    }
    text.push_str(&comparison(&rows));
    text
}

/// The best guard configuration against each FIFO one: the direction of
/// each difference in failed cycles, and whether it is the thesis's
/// (reservations at least as good as FIFO).
fn comparison(rows: &[(&str, Headline, Option<f64>)]) -> String {
    let percent = |h: &Headline| 100.0 * h.failed();
    let rates: Vec<String> = rows
        .iter()
        .map(|(name, h, _)| format!("{name} {:.3} %", percent(h)))
        .collect();
    let mut text = format!(
        "\n**Compared with the thesis** (its finding is in the description above). \
         Cycles late, incomplete or lost, of the cycles due: {}.",
        rates.join(", ")
    );
    let is_guard = |h: &Headline| h.sched.starts_with("guard");
    let best_guard = rows
        .iter()
        .filter(|(_, h, _)| is_guard(h) && h.cycles > 0)
        .min_by(|a, b| a.1.failed().total_cmp(&b.1.failed()));
    let fifo: Vec<&(&str, Headline, Option<f64>)> = rows
        .iter()
        .filter(|(_, h, _)| !is_guard(h) && h.cycles > 0)
        .collect();
    let Some((guard_name, guard, _)) = best_guard.filter(|_| !fifo.is_empty()) else {
        text.push_str(" The guard or FIFO measured no cycles: no comparison.\n");
        return text;
    };
    let verdicts: Vec<String> = fifo
        .iter()
        .map(|(name, h, _)| {
            let (g, f) = (guard.failed(), h.failed());
            match g.partial_cmp(&f) {
                Some(std::cmp::Ordering::Less) => format!("fewer than {name} (as in the thesis)"),
                Some(std::cmp::Ordering::Equal) => format!("as many as {name} (as in the thesis)"),
                _ => format!("more than {name} (unlike the thesis's reservations)"),
            }
        })
        .collect();
    let _ = writeln!(
        text,
        " The best guard configuration, {guard_name}, had {}.",
        verdicts.join("; ")
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_jack_peer::record::PeerRow;
    use tessera_scenario::{AudioClient, ServerKind};

    fn row(client: usize, frames: u32, start_ns: u64, finished_ns: u64) -> PeerRow {
        PeerRow {
            client,
            frames,
            start_ns,
            awake_ns: start_ns,
            finished_ns,
            cpu_ns: 0,
        }
    }

    fn subject() -> AudioServerSubject {
        AudioServerSubject {
            server: ServerKind::Jack,
            frames: 128,
            rate: 96_000,
            priority: 10,
            clients: vec![
                AudioClient {
                    load: 0.1,
                    start: std::time::Duration::ZERO,
                    stop: None
                };
                2
            ],
            network: None,
        }
    }

    #[test]
    fn cycles_give_end_to_end_late_incomplete_and_lost_periods() {
        let p = 1_333_333;
        let record = PeerRecord {
            clients: vec!["load-01".into(), "load-02".into(), "monitor".into()],
            period: (128, 96_000),
            xrun_ns: vec![2 * p, 99 * p],
            rows: vec![
                // Cycle 1: both loads, end-to-end 400 µs.
                row(2, 128, p, p + 10_000),
                row(0, 128, p, p + 200_000),
                row(1, 128, p, p + 400_000),
                // Cycle 2: load-02 missed it.
                row(2, 256, 2 * p, 2 * p + 5_000),
                row(0, 256, 2 * p, 2 * p + 200_000),
                // Cycle 3 lost; cycle 4 late.
                row(2, 512, 4 * p, 4 * p + 5_000),
                row(0, 512, 4 * p, 4 * p + 900_000),
                row(1, 512, 4 * p, 4 * p + 1_500_000),
            ],
            ..PeerRecord::default()
        };
        let window = Window {
            from_ns: p,
            to_ns: 10 * p,
            t0_ns: 0,
        };
        let (metrics, h, notes) = measure(&record, &subject(), &window);
        assert_eq!(
            (h.cycles, h.xruns, h.late, h.incomplete, h.failed, h.lost),
            (3, 1, 1, 1, 2, 1)
        );
        let e2e = metrics.iter().find(|m| m.name == END_TO_END).unwrap();
        assert_eq!((e2e.summary.count, e2e.summary.misses), (3, Some(1)));
        let ends = metrics.iter().find(|m| m.name == CLIENT_END).unwrap();
        assert_eq!(
            ends.series.len(),
            2,
            "one series per load, none for the monitor"
        );
        assert_eq!(ends.summary.count, 5);
        let period = metrics.iter().find(|m| m.name == PERIOD).unwrap();
        assert_eq!(period.summary.count, 1);
        assert!(notes.iter().all(|n| !n.contains("not the scenario's")));
    }

    #[test]
    fn headline_counters_round_trip_and_feed_the_section() {
        let h = Headline {
            sched: "guard:reclaim".into(),
            cycles: 1000,
            xruns: 2,
            late: 3,
            incomplete: 0,
            failed: 3,
            lost: 1,
            reserved_per_used: Some(1.5),
            served: Some((64, 48_000)),
        };
        let fifo = Headline {
            sched: "fifo:15".into(),
            xruns: 50,
            late: 30,
            failed: 30,
            reserved_per_used: None,
            ..h.clone()
        };
        let mut results = RunResults::start("t");
        for (name, headline) in [("fifo", &fifo), ("guard", &h)] {
            let result = ConfigurationResult {
                labels: [(SCHEDULING.to_string(), headline.sched.clone())].into(),
                name: name.into(),
                counters: headline.counters(),
                notes: vec!["subject x".into(), headline.note()],
                metrics: vec![],
                why: None,
            };
            assert_eq!(Headline::from_result(&result).as_ref(), Some(headline));
            results.configurations.push(result);
        }
        let guard = &results.configurations[1];
        assert_eq!(guard.count(XRUNS), Some(2));
        assert_eq!(guard.counter(RESERVED_PER_USED).map(|c| c.value), Some(1.5));
        assert_eq!(results.configurations[0].counter(RESERVED_PER_USED), None);
        let section = report_section(&results);
        assert!(
            section.contains("| guard | guard:reclaim | 1000 | 2 | 3 | 0 | 3 | 1 | – | 1.50 |"),
            "{section}"
        );
        assert!(
            section.contains("guard, had fewer than fifo (as in the thesis)"),
            "{section}"
        );
        assert_eq!(report_section(&RunResults::start("other")), "");
    }

    #[test]
    fn series_keep_the_worst_of_each_bin() {
        let s = thinned("x", &[(0.0, 1.0), (0.005, 7.0), (0.011, 2.0)]);
        assert_eq!(s.points, [(0.0, 7.0), (0.011, 2.0)]);
    }
}
