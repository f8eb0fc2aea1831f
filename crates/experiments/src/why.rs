//! The run side of attribution (`tessera run --why`): traces the threads a
//! subject names ([`Watched`]) with a `tessera_why::Recorder` from before
//! its release to the end of the run, and folds what it found into the
//! configuration's `tessera_measure::Why` — per metric, the causes of the
//! misses in the measured part, the misses the subject counted beyond them
//! as "unknown", and the worst misses.
//!
//! A leaf. It must never change a thread's scheduling, nor fail a run:
//! without privileges or tracefs the result says why and every miss is
//! "unknown".

use crate::subject::Watched;
use std::collections::HashMap;
use std::time::Duration;
use tessera_measure::{Metric, MetricCauses, WatchedThread, Why};
use tessera_why::{Attribution, Causes, Miss, Recorder, Watch};

/// The threads that can be watched, each with its metric, and why the
/// others cannot.
fn watchable(threads: Vec<Watched>) -> (Vec<WatchedThread>, Vec<String>) {
    let ns = |d: Option<Duration>| d.map(|d| d.as_nanos() as u64);
    let mut watched = Vec::new();
    let mut refused = Vec::new();
    for t in threads {
        match tessera_why::watch(t.tid, ns(t.deadline), ns(t.period), ns(t.budget)) {
            Ok(watch) => watched.push(WatchedThread {
                metric: t.metric,
                thread_metric: t.thread_metric,
                watch: Watch {
                    chain: t.chain,
                    ..watch
                },
            }),
            Err(e) => refused.push(format!("thread {}: {e}", t.tid)),
        }
    }
    (watched, refused)
}

/// A configuration's threads being traced.
pub(crate) struct Tracing {
    recorder: Option<Recorder>,
    unavailable: Option<String>,
    watched: Vec<WatchedThread>,
    /// No thread could be watched yet: the first refresh that names one
    /// starts the tracing (a service's threads for the clients that agree
    /// their terms after the release).
    awaiting: bool,
}

/// What the tracing found, before the subject measured itself.
pub(crate) struct Traced {
    attribution: Attribution,
    watched: Vec<WatchedThread>,
}

/// Every cell's members now, by thread, if the broker answers.
fn cells_now() -> Option<HashMap<i32, String>> {
    tessera_broker::Session::connect()
        .map(|mut s| s.cell_of_threads())
        .ok()
}

/// Room in the rings for threads a subject names after the start: 20
/// threads of a 2.67 ms cycle (an audio server's clients).
const ROOM_CYCLES_PER_S: f64 = 7_500.0;

impl Tracing {
    /// Starts tracing `threads`; a thread that cannot be watched (gone,
    /// or without a deadline) is left out, and when none is left or the
    /// kernel's events cannot be read, the result says why.
    pub(crate) fn start(threads: Vec<Watched>) -> Tracing {
        let (watched, refused) = watchable(threads);
        if watched.is_empty() {
            let why = match refused.as_slice() {
                [] => "the subject names no thread to trace".to_string(),
                _ => format!("no thread could be watched ({})", refused.join("; ")),
            };
            return Tracing {
                awaiting: true,
                ..Tracing::unavailable(why, watched)
            };
        }
        let watches: Vec<_> = watched.iter().map(|w| w.watch).collect();
        match Recorder::start(&watches, cells_now().unwrap_or_default(), ROOM_CYCLES_PER_S) {
            Ok(recorder) => Tracing {
                recorder: Some(recorder),
                unavailable: None,
                watched,
                awaiting: false,
            },
            Err(e) => Tracing::unavailable(
                Attribution::unavailable(&e).unavailable.unwrap_or_default(),
                watched,
            ),
        }
    }

    /// Traces those of `threads` not traced yet (gone ones are left out);
    /// starts tracing if it awaited its first thread.
    pub(crate) fn refresh(&mut self, threads: Vec<Watched>) {
        let Some(recorder) = &self.recorder else {
            if self.awaiting && !threads.is_empty() {
                *self = Tracing::start(threads);
            }
            return;
        };
        let new = threads
            .into_iter()
            .filter(|t| !self.watched.iter().any(|w| w.watch.tid == t.tid))
            .collect();
        let (watched, _gone) = watchable(new);
        if !watched.is_empty() {
            recorder.watch_more(watched.iter().map(|w| w.watch).collect());
            self.watched.extend(watched);
        }
        if let Some(cells) = cells_now() {
            recorder.see_cells(cells);
        }
    }

    fn unavailable(why: String, watched: Vec<WatchedThread>) -> Tracing {
        Tracing {
            recorder: None,
            unavailable: Some(why),
            watched,
            awaiting: false,
        }
    }

    /// Stops tracing (before the subject stops: its teardown is no cycle).
    pub(crate) fn stop(self) -> Traced {
        let attribution = match self.recorder {
            Some(recorder) => recorder.stop(),
            None => Attribution {
                unavailable: self.unavailable,
                ..Attribution::default()
            },
        };
        Traced {
            attribution,
            watched: self.watched,
        }
    }
}

impl Traced {
    /// The causes of `metrics`' misses released from `from_ns` on (the
    /// end of the warm-up, CLOCK_MONOTONIC): per metric with misses, the
    /// traced misses of its threads by cause — each also for the releases
    /// of its period its cycle ran past (a cell's runtime counts each a
    /// miss, dropped), as far as the subject counted them — and what the
    /// subject counted beyond them as "unknown".
    pub(crate) fn why(self, metrics: &[Metric], from_ns: u64) -> Why {
        let a = self.attribution;
        let measured: Vec<_> = a
            .misses
            .iter()
            .filter(|m| m.release_ns >= from_ns)
            .collect();
        let watched = |tid: i32| self.watched.iter().find(|w| w.watch.tid == tid);
        // `counted`: the subject's count of the metric's misses, if it
        // counted them (without one, every traced miss is shown).
        let traced = |name: &str, counted: Option<u64>| {
            // Each traced miss with how many of the metric's it stands for.
            let mut mine: Vec<(&Miss, u64)> = measured
                .iter()
                .filter_map(|&m| {
                    let w = watched(m.tid)?;
                    match (w.metric == name, w.thread_metric.as_deref() == Some(name)) {
                        (true, _) => Some((m, 1)),
                        (false, true) => Some((m, u64::from(m.late_threads))),
                        _ => None,
                    }
                })
                .filter(|&(_, n)| n > 0)
                .collect();
            // Longest first: where the trace judged more late than the
            // subject counted (a chain from its driver's timer, the subject
            // from the cycle's start), those it counted are the longest —
            // but a miss whose records were lost last: its response is
            // anything (a client's teardown as the run ended).
            mine.sort_by(|a, b| {
                (a.0.records_lost, b.0.response_us)
                    .partial_cmp(&(b.0.records_lost, a.0.response_us))
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            let mut causes = Causes::default();
            let mut left = counted.unwrap_or(u64::MAX);
            for &(m, n) in &mine {
                if left == 0 {
                    break;
                }
                causes.add_n(m, n.min(left));
                left -= n.min(left);
            }
            for (m, _) in mine {
                let period = watched(m.tid).and_then(|w| w.watch.period_ns);
                let overrun = period.map_or(0, |p| m.releases_overrun(p)).min(left);
                causes.add_overrun(m, overrun);
                left -= overrun;
            }
            causes
        };
        let mut names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
        names.extend(self.watched.iter().map(|w| w.metric.as_str()));
        names.extend(
            self.watched
                .iter()
                .filter_map(|w| w.thread_metric.as_deref()),
        );
        let mut by_metric = Vec::new();
        for name in names {
            if by_metric.iter().any(|m: &MetricCauses| m.metric == name) {
                continue;
            }
            let counted = metrics
                .iter()
                .find(|m| m.name == name)
                .and_then(|m| m.summary.misses);
            let seen = traced(name, counted);
            if counted.unwrap_or(0) > 0 || seen.total() > 0 {
                by_metric.push(MetricCauses::new(name, counted, &seen));
            }
        }
        let mut worst: Vec<_> = measured.into_iter().cloned().collect();
        worst.sort_by(|x, y| y.response_us.total_cmp(&x.response_us));
        worst.truncate(tessera_measure::why::WORST);
        Why {
            unavailable: a.unavailable,
            watched: self.watched,
            cycles: a.cycles,
            lost: a.lost,
            metrics: by_metric,
            worst,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_why::Cause;

    fn miss(tid: i32, release_ns: u64, cause: Cause) -> Miss {
        Miss {
            release_ns,
            tid,
            comm: "subject".into(),
            cpu: 0,
            cause,
            response_us: release_ns as f64,
            deadline_us: 1.0,
            parts_us: [(cause, 10.0)].into_iter().collect(),
            holders: vec![],
            throttled: false,
            faults: 0,
            records_lost: false,
            late_threads: 0,
        }
    }

    /// A metric the subject counted `misses` of.
    fn counted(name: &str, misses: u64) -> Metric {
        let mut m = Metric::latency(
            name,
            Some(1.0),
            tessera_measure::LatencyHistogram::new(1000),
        );
        m.summary.misses = Some(misses);
        m
    }

    fn watched(tid: i32, metric: &str) -> WatchedThread {
        WatchedThread {
            metric: metric.into(),
            thread_metric: None,
            watch: Watch {
                tid,
                deadline_ns: 1000,
                period_ns: None,
                budget_ns: None,
                chain: None,
            },
        }
    }

    #[test]
    fn misses_count_in_their_threads_metric_after_the_warm_up_and_the_rest_are_unknown() {
        let traced = Traced {
            attribution: Attribution {
                misses: vec![
                    miss(1, 5, Cause::Throttled),
                    miss(1, 20, Cause::Throttled),
                    miss(2, 30, Cause::WokenLate),
                ],
                ..Attribution::default()
            },
            watched: vec![watched(1, "response time"), watched(2, "other")],
        };
        let why = traced.why(&[counted("response time", 3)], 10);
        assert_eq!(why.metrics.len(), 2);
        let r = &why.metrics[0];
        assert_eq!((r.metric.as_str(), r.misses), ("response time", Some(3)));
        assert_eq!(
            r.causes[&Cause::Throttled],
            1,
            "the warm-up's miss is left out"
        );
        assert_eq!(r.causes[&Cause::Unknown], 2);
        assert_eq!(why.metrics[1].causes[&Cause::WokenLate], 1);
        assert_eq!(why.worst.len(), 2);
        assert_eq!(why.worst[0].release_ns, 30, "longest first");
    }

    #[test]
    fn a_cycle_that_ran_past_its_next_releases_explains_their_misses() {
        // A 10 µs period; a throttled cycle of 31 µs ran past 3 releases,
        // which the runtime counted as misses too.
        let traced = || {
            let mut long = miss(1, 20, Cause::Throttled);
            long.response_us = 31.0;
            let mut short = miss(1, 100, Cause::Throttled);
            short.response_us = 5.0;
            let mut watch = watched(1, "response time");
            watch.watch.period_ns = Some(10_000);
            Traced {
                attribution: Attribution {
                    misses: vec![long, short],
                    ..Attribution::default()
                },
                watched: vec![watch],
            }
        };
        let causes = |misses| {
            let r = &traced().why(&[counted("response time", misses)], 0).metrics[0];
            (r.causes[&Cause::Throttled], r.causes[&Cause::Unknown])
        };
        assert_eq!(causes(5), (5, 0));
        assert_eq!(causes(6), (5, 1));
        assert_eq!(causes(3), (3, 0), "never more than the subject counted");
    }

    #[test]
    fn a_chains_late_periods_count_once_per_period_and_once_per_late_client_the_longest_first() {
        let late = |release_ns, response_us, late_threads| Miss {
            response_us,
            late_threads,
            ..miss(2, release_ns, Cause::WaitedForCpu)
        };
        let mut own_work = late(40, 5.0, 1);
        own_work.cause = Cause::OwnWork;
        let client = WatchedThread {
            thread_metric: Some("client end".into()),
            ..watched(2, "end to end")
        };
        let traced = Traced {
            attribution: Attribution {
                misses: vec![late(10, 30.0, 2), late(20, 20.0, 3), own_work],
                ..Attribution::default()
            },
            watched: vec![client],
        };
        // The subject counted 2 late periods (the trace 3: the shortest is
        // left out) and 7 clients ending late.
        let why = traced.why(&[counted("end to end", 2), counted("client end", 7)], 0);
        let by = |name: &str| why.metrics.iter().find(|m| m.metric == name).unwrap();
        let periods = by("end to end");
        assert_eq!(periods.causes[&Cause::WaitedForCpu], 2);
        assert_eq!(periods.causes[&Cause::OwnWork], 0);
        let clients = by("client end");
        assert_eq!(clients.causes[&Cause::WaitedForCpu], 5);
        assert_eq!(clients.causes[&Cause::OwnWork], 1);
        assert_eq!(clients.causes[&Cause::Unknown], 1);
    }

    #[test]
    fn a_miss_whose_records_were_lost_is_matched_last_however_long() {
        let mut lost = miss(1, 900, Cause::Unknown);
        lost.records_lost = true;
        let traced = Traced {
            attribution: Attribution {
                misses: vec![lost, miss(1, 30, Cause::Throttled)],
                ..Attribution::default()
            },
            watched: vec![watched(1, "response")],
        };
        let why = traced.why(&[counted("response", 1)], 0);
        assert_eq!(why.metrics[0].causes[&Cause::Throttled], 1);
        assert_eq!(why.metrics[0].causes[&Cause::Unknown], 0);
    }

    #[test]
    fn no_thread_to_trace_says_so() {
        let why = Tracing::start(vec![]).stop().why(&[], 0);
        assert_eq!(
            why.unavailable.as_deref(),
            Some("the subject names no thread to trace")
        );
    }

    #[test]
    fn tracing_awaits_a_subject_whose_threads_start_after_the_release() {
        let mut tracing = Tracing::start(Vec::new());
        assert!(tracing.awaiting && tracing.recorder.is_none());
        tracing.refresh(Vec::new());
        assert!(tracing.awaiting, "still nothing to trace");
        // A thread that cannot be watched (gone) leaves it waiting.
        tracing.refresh(vec![crate::subject::Watched {
            tid: i32::MAX,
            metric: "response time".into(),
            deadline: Some(Duration::from_millis(1)),
            period: None,
            budget: None,
            chain: None,
            thread_metric: None,
        }]);
        assert!(tracing.awaiting && tracing.recorder.is_none());
    }
}
