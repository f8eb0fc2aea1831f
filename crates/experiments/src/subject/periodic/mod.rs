//! The periodic subject: one task released every period, doing its work
//! (busy) and measured by its response time against its deadline — the
//! task the probe also runs, without work, as tessera's side of its
//! comparison.
//!
//! It owns the task's run and its result; it must never judge it.

use crate::cells::{setup_for, SetUp};
use crate::figures::task_metric;
use crate::subject::contract::{Measured, Running, Stopped, Subject, Watched};
use std::time::Duration;
use tessera_scenario::{Configuration, Scenario};
use tessera_workloads::{PeriodicSpec, PeriodicStats, PeriodicTask};

/// `[subject] kind = "periodic"`.
pub(crate) struct Kind;

impl Subject for Kind {
    fn runs(&self, scenario: &Scenario, _config: &Configuration) -> bool {
        matches!(scenario.subject, tessera_scenario::Subject::Periodic { .. })
    }

    fn start(
        &self,
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<Box<dyn Running>, String> {
        let tessera_scenario::Subject::Periodic {
            period,
            work,
            deadline,
        } = scenario.subject
        else {
            unreachable!("runs periodic subjects only")
        };
        TaskRun::start(
            scenario,
            config,
            "subject",
            (period, work, deadline),
            RESPONSE,
        )
    }
}

/// The metric of the periodic subject.
const RESPONSE: &str = "response time";

/// A periodic task as a subject, with the name of its metric.
pub(crate) struct TaskRun {
    task: PeriodicTask,
    metric: &'static str,
    /// Its thread, judged by the task's period and deadline.
    watched: Vec<Watched>,
}

/// What the task measured.
struct TaskData {
    stats: PeriodicStats,
    metric: &'static str,
}

impl TaskRun {
    /// Spawns task `name` (period, work, deadline) scheduled as the
    /// configuration's subject, for the whole run.
    pub(crate) fn start(
        scenario: &Scenario,
        config: &Configuration,
        name: &str,
        (period, work, deadline): (Duration, Duration, Duration),
        metric: &'static str,
    ) -> Result<Box<dyn Running>, String> {
        let mut spec = PeriodicSpec::new(name, period, work, scenario.total());
        spec.deadline = deadline;
        let set_up = SetUp::default();
        let setup = set_up.recording(setup_for(&config.subject, scenario.core));
        // It returns once the thread is set up: its tid is known.
        let task = PeriodicTask::spawn(spec, setup).map_err(|e| e.to_string())?;
        let watched = set_up
            .tids()
            .into_iter()
            .map(|tid| Watched {
                tid,
                metric: metric.to_string(),
                deadline: Some(deadline),
                period: Some(period),
                budget: None,
                chain: None,
                thread_metric: None,
            })
            .collect();
        Ok(Box::new(TaskRun {
            task,
            metric,
            watched,
        }))
    }
}

impl Running for TaskRun {
    fn release(&mut self, t0: u64) -> Result<(), String> {
        self.task.start(t0);
        Ok(())
    }

    fn watched(&self) -> Vec<Watched> {
        self.watched.clone()
    }

    fn stop(self: Box<Self>, _notes: &mut Vec<String>) -> Box<dyn Stopped> {
        self.task.stop();
        Box::new(TaskData {
            stats: self.task.join(),
            metric: self.metric,
        })
    }
}

impl Stopped for TaskData {
    fn measure(self: Box<Self>, scenario: &Scenario, _t0: u64) -> Measured {
        let (metric, counters, note) =
            task_metric(&self.stats, self.metric, Duration::ZERO, scenario.warmup);
        Measured::new(vec![metric], counters, vec![note])
    }
}
