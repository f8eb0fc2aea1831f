//! The interference of one configuration: hogs, EP kernels, memory
//! streams, I/O, periodic tasks, rt-app, stress-ng and build loads, each
//! in its window of the run and set up as its scheduling says, and the
//! video players with their guis ([`media`]). Reported: each periodic
//! load's response times and slack, each load's own summary as a note, the
//! videos' and guis' figures.
//!
//! It owns what it started: everything ends in [`Loads::stop`] and
//! [`Stopping::join`], whatever failed. It must never judge a result, nor
//! touch the subject.

pub(crate) mod media;
mod window;

pub(crate) use window::load_window;

use crate::cells::{cell_name, setup_for, SetUp};
use crate::figures::{slack_metric, task_metric};
use crate::subject::Watched;
use std::time::Duration;
use tessera_broker::Session;
use tessera_measure::{Counter, Metric};
use tessera_scenario::{Configuration, Interference, LoadKind, Scenario, Sched};
use tessera_workloads::external::{self, ExternalLoad, ExternalReport, RtAppPolicy, RtAppTask};
use tessera_workloads::{
    build, ep, hog, io, stream, LoadReport, LoadThreads, PeriodicSpec, PeriodicStats, PeriodicTask,
};

/// The loads started for one configuration.
#[derive(Default)]
pub(crate) struct Loads {
    periodic: Vec<(String, PeriodicTask)>,
    /// The periodic tasks' threads, for `tessera run --why`.
    watched: Vec<Watched>,
    threads: Vec<LoadThreads>,
    external: Vec<ExternalLoad>,
    /// Video players and their guis.
    media: media::Media,
}

/// Loads told to stop, not yet joined.
pub(crate) struct Stopping {
    periodic: Vec<(String, PeriodicTask)>,
    threads: Vec<LoadThreads>,
    external: Vec<ExternalLoad>,
    media: media::MediaData,
}

/// What the loads reported.
pub(crate) struct LoadsData {
    periodic: Vec<PeriodicStats>,
    media: media::MediaData,
    /// Each thread load's and external load's own report.
    threads: Vec<LoadReport>,
    external: Vec<ExternalReport>,
}

impl Loads {
    /// Sets up every load of `config` (videos after their guis), waiting
    /// for [`Loads::release`]. What started before an error is kept for
    /// [`Loads::stop`].
    pub(crate) fn start(
        &mut self,
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<(), String> {
        self.media.start(scenario, config)?;
        for (name, sched) in &config.interference {
            let load = scenario.load(name).expect("validated");
            start_load(scenario, load, sched, self)?;
        }
        Ok(())
    }

    /// The periodic tasks' threads, each judged by its period and
    /// deadline, its misses counted in "NAME response time".
    pub(crate) fn watched(&self) -> Vec<Watched> {
        self.watched.clone()
    }

    /// Releases every load at `t0`.
    pub(crate) fn release(&self, t0: u64) {
        self.periodic.iter().for_each(|(_, t)| t.start(t0));
        self.threads.iter().for_each(|t| t.start(t0));
        self.external.iter().for_each(|e| e.start(t0));
        self.media.release(t0);
    }

    /// Tells every load to stop; the guis finish what their videos left.
    pub(crate) fn stop(self) -> Stopping {
        self.periodic.iter().for_each(|(_, t)| t.stop());
        self.threads.iter().for_each(LoadThreads::stop);
        self.external.iter().for_each(ExternalLoad::stop);
        Stopping {
            media: self.media.finish(),
            periodic: self.periodic,
            threads: self.threads,
            external: self.external,
        }
    }
}

impl Stopping {
    /// Waits for every load to end and takes its report.
    pub(crate) fn join(self) -> LoadsData {
        LoadsData {
            periodic: self.periodic.into_iter().map(|(_, t)| t.join()).collect(),
            media: self.media,
            threads: self.threads.into_iter().map(LoadThreads::join).collect(),
            external: self.external.into_iter().map(ExternalLoad::join).collect(),
        }
    }
}

impl LoadsData {
    /// Each periodic load's response times and slack after the warm-up,
    /// then the videos' and guis' figures, then what the thread loads did
    /// (their CPU time and work, whole run) and how the external ones ran.
    pub(crate) fn measure(
        &self,
        scenario: &Scenario,
        t0: u64,
    ) -> (Vec<Metric>, Vec<Counter>, Vec<String>) {
        let mut metrics = Vec::new();
        let mut counters = Vec::new();
        let mut notes = Vec::new();
        for stats in &self.periodic {
            let start = scenario
                .load(&stats.name)
                .map_or(Duration::ZERO, |l| l.start);
            let (metric, task_counters, note) = task_metric(
                stats,
                &format!("{} response time", stats.name),
                start,
                scenario.warmup,
            );
            metrics.push(metric);
            counters.extend(task_counters);
            metrics.push(slack_metric(stats, start, scenario.warmup));
            notes.push(note);
        }
        let (media_metrics, media_counters, media_notes) =
            media::collect(&self.media, scenario, t0);
        metrics.extend(media_metrics);
        counters.extend(media_counters);
        notes.extend(media_notes);
        for report in &self.threads {
            counters.extend(media::load_counters(report));
            notes.push(report.describe());
        }
        for report in &self.external {
            counters.push(Counter::new(
                format!("{} ran", report.name),
                report.ran_s,
                "s",
            ));
            notes.push(report.describe());
        }
        (metrics, counters, notes)
    }
}

fn start_load(
    scenario: &Scenario,
    load: &Interference,
    sched: &Sched,
    live: &mut Loads,
) -> Result<(), String> {
    let total = scenario.total();
    let window = load_window(load, total);
    let setup = setup_for(sched, scenario.core);
    let hook = |_| Box::new(setup.clone()) as tessera_workloads::Setup;
    let name = load.name.as_str();
    let io_error = |e: std::io::Error| format!("{name}: {e}");
    match &load.kind {
        LoadKind::Hog {
            threads,
            load: share,
        } => {
            let spec = hog::HogSpec {
                name: name.into(),
                threads: *threads,
                load: *share,
                window,
            };
            live.threads
                .push(hog::spawn(&spec, hook).map_err(io_error)?);
        }
        LoadKind::Ep { threads } => live
            .threads
            .push(ep::spawn(name, *threads, window, hook).map_err(io_error)?),
        LoadKind::Stream { threads, mebibytes } => {
            let spec = stream::StreamSpec {
                name: name.into(),
                threads: *threads,
                mebibytes: *mebibytes,
                window,
            };
            live.threads
                .push(stream::spawn(&spec, hook).map_err(io_error)?);
        }
        LoadKind::Io {
            threads,
            block_kib,
            file_mib,
            sync_mib,
        } => {
            let spec = io::IoSpec {
                name: name.into(),
                threads: *threads,
                dir: std::env::temp_dir(),
                block_kib: *block_kib,
                file_mib: *file_mib,
                sync_mib: *sync_mib,
                window,
            };
            live.threads.push(io::spawn(&spec, hook).map_err(io_error)?);
        }
        LoadKind::Periodic { period, work } => {
            let mut spec = PeriodicSpec::new(name, *period, *work, window.run_for.unwrap_or(total));
            spec.start_after = load.start;
            let deadline = spec.deadline;
            let set_up = SetUp::default();
            // It returns once its thread is set up: the thread is known.
            let task = PeriodicTask::spawn(spec, set_up.recording(setup)).map_err(io_error)?;
            live.watched
                .extend(set_up.tids().into_iter().map(|tid| Watched {
                    tid,
                    metric: format!("{name} response time"),
                    deadline: Some(deadline),
                    period: Some(*period),
                    budget: None,
                    chain: None,
                    thread_metric: None,
                }));
            live.periodic.push((name.into(), task));
        }
        LoadKind::RtApp { period, run } => {
            let task = RtAppTask {
                name: name.into(),
                period: *period,
                run: *run,
                policy: sched.fifo.map_or(RtAppPolicy::Other, RtAppPolicy::Fifo),
            };
            let spec = external::rt_app(name, &[task], window, &std::env::temp_dir())?;
            let core = scenario.core;
            let pin = Box::new(move |pid| match core {
                Some(c) => {
                    tessera_sys::affinity::set_affinity(pid, &[c]).map_err(|e| e.to_string())
                }
                None => Ok(()),
            });
            live.external.push(ExternalLoad::spawn(spec, pin)?);
        }
        LoadKind::StressNg { args } => {
            let mut args = args.clone();
            if let Some(p) = sched.fifo {
                args.extend([
                    "--sched".into(),
                    "fifo".into(),
                    "--sched-prio".into(),
                    p.to_string(),
                ]);
            }
            let spec = external::stress_ng(name, &args, window);
            live.external
                .push(ExternalLoad::spawn(spec, attach_to_cell(sched))?);
        }
        LoadKind::Build { processes } => {
            let spec =
                build::spec(name, *processes, window, &std::env::temp_dir()).map_err(io_error)?;
            live.external
                .push(ExternalLoad::spawn(spec, attach_to_cell(sched))?);
        }
        // Started together, guis before their videos, by media::Media::start.
        LoadKind::Gui { .. } | LoadKind::Video { .. } => {}
    }
    Ok(())
}

/// The setup of an external load's process: attached to its cell, if any
/// (the processes it starts later follow it there).
fn attach_to_cell(sched: &Sched) -> external::ProcessSetup {
    let cell = sched.cell.as_deref().map(cell_name);
    Box::new(move |pid| match cell {
        Some(c) => Session::connect()
            .and_then(|mut s| s.attach(&c, pid, None))
            .map(drop)
            .map_err(|e| e.to_string()),
        None => Ok(()),
    })
}
