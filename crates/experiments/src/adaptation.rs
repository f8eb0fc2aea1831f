//! The `changing-demand` subject's run: the RAP service's experiment (seed
//! 000 §2.3). Each configuration starts a `tessera daemon` of its own
//! ([`daemon`]: a private run directory, adaptation on or off) and, in it,
//! one event-triggered cell per application, each under global EDF:
//!
//! - `video`: a 30 fps player's periodic task run by tessera's runtime in
//!   the cell, each job burning the share of a core the staircase and its
//!   bursts ask at its release ([`crate::scenario::VideoDemand::share_at`]);
//! - `audio`: a steady audio-like periodic task (in place of the music
//!   application, whose misses do not reach the broker yet);
//! - JACK: Debian's jackd on its dummy driver with `tessera-jack-peer` load
//!   clients, every real-time thread reserved by `tessera guard jackd
//!   --fixed` (the audio-server subject's run, [`crate::audio_server`]),
//!   its xruns reported by the guard. Left out, with the reason in the
//!   notes, when jackd or the peer is missing or does not start.
//!
//! The tasks report their misses to the daemon (`BrokerReport`), so the
//! daemon's monitor holds budgets, use and misses over time; that series is
//! the run's measurement ([`series`]). Static budgets are the demand (peak
//! or mean) × (1 + margin); an adaptive configuration starts from them and
//! lets the daemon adapt.
//!
//! It owns one configuration's daemon, cells, tasks and processes, and
//! stops them all (tasks, JACK, then the daemon, which is reset) however
//! the run ends. It must never judge a result beyond comparing it with the
//! goal the issue states, and never run beside another broker's cpusets.

#![forbid(unsafe_code)]

mod daemon;
mod series;

pub use series::{cell_metric, report_section, MISSES, TOTAL};

use crate::audio_server::{self, AudioServerData, AudioServerRun, GuardPlace};
use crate::scenario::{
    AudioClient, AudioServerSubject, ChangingDemand, Configuration, DemandSettings, GuardSettings,
    Scenario, ServerKind, ServerSched, Sizing, Subject,
};
use crate::servers;
use daemon::PrivateDaemon;
use series::{Group, Window};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tessera_broker::monitor::Sample;
use tessera_broker::Session;
use tessera_measure::Metric;
use tessera_policy::{CellRequest, Placement};
use tessera_runtime::{
    BrokerReport, CellJoin, Guarantee, NoNotifications, Periodic, Runtime, RuntimeConfig,
};
use tessera_workloads::periodic::burn_cpu;

/// The cells this run creates (the guard names its own after its threads).
pub const VIDEO: &str = "video";
pub const AUDIO: &str = "audio";
/// The group of the guard's cells.
pub const JACK: &str = "jack";
/// jackd's `-P` (the guard moves every real-time thread to a reservation).
const JACK_PRIORITY: u32 = 10;

/// One periodic task in its cell.
struct Task {
    name: &'static str,
    runtime: Runtime,
}

/// One configuration's daemon, cells and loads. Fields drop in order:
/// tasks, JACK, the session, the daemon (reset and stopped) last.
pub(crate) struct DemandRun {
    tasks: Vec<Task>,
    jack: Option<AudioServerRun>,
    session: Option<Session>,
    daemon: Option<PrivateDaemon>,
    /// When the staircase starts (the end of the warm-up), CLOCK_MONOTONIC
    /// ns; 0 until the release.
    origin: Arc<AtomicU64>,
    /// From t0 to the staircase's start.
    warmup: Duration,
    subject: ChangingDemand,
    settings: DemandSettings,
    notes: Vec<String>,
}

/// What a finished run left for the metrics.
pub(crate) struct DemandData {
    samples: Vec<Sample>,
    jack: Option<AudioServerData>,
    subject: ChangingDemand,
    notes: Vec<String>,
}

impl DemandRun {
    /// Starts the daemon, creates the cells at their configured budgets and
    /// starts the tasks and JACK; the staircase waits for the release.
    pub(crate) fn start(scenario: &Scenario, config: &Configuration) -> Result<DemandRun, String> {
        let Subject::ChangingDemand(subject) = &scenario.subject else {
            unreachable!("called for changing-demand subjects only")
        };
        let settings = config.demand.expect("validated with the subject");
        let mut rap = subject.adaptation.clone();
        rap.enabled = settings.adapt;
        let daemon = PrivateDaemon::start(subject.monitor_interval, &rap)?;
        let mut run = DemandRun {
            tasks: Vec::new(),
            jack: None,
            session: Some(daemon.session()?),
            daemon: Some(daemon),
            origin: Arc::new(AtomicU64::new(0)),
            warmup: scenario.warmup,
            subject: subject.clone(),
            settings,
            notes: vec![match settings.adapt {
                true => series::ADAPTING.to_string(),
                false => series::STATIC.to_string(),
            }],
        };
        if settings.adapt {
            run.notes.push(format!(
                "the daemon adapts every {} ms (headroom {} %, grows by at least {} %, shrinks \
                 below {} % after {} calm intervals, at most {} % of a period); monitor every {:?}",
                rap.interval_ms,
                rap.headroom_pct,
                rap.grow_pct,
                rap.shrink_below_pct,
                rap.patience,
                rap.max_share_pct,
                subject.monitor_interval
            ));
        }
        run.start_video(scenario.duration)?;
        if let Some(audio) = subject.audio.clone() {
            let budget = run.static_runtime(audio.load, audio.period);
            let work = audio.period.mul_f64(audio.load);
            run.start_task(AUDIO, audio.period, budget, move |_| work)?;
            run.notes.push(format!(
                "audio: {:.0} % of every {:?}, budget {:?}",
                audio.load * 100.0,
                audio.period,
                budget
            ));
        }
        if let Some(jack) = &subject.jack {
            run.start_jack(jack, scenario.total());
        }
        Ok(run)
    }

    /// A static budget: `share` of `period` × (1 + margin).
    fn static_runtime(&self, share: f64, period: Duration) -> Duration {
        period.mul_f64((share * (1.0 + self.subject.margin)).min(1.0))
    }

    fn start_video(&mut self, measured: Duration) -> Result<(), String> {
        let video = self.subject.video.clone();
        let share = self.subject.video_share(self.settings.sizing, measured);
        let period = video.period();
        let budget = self.static_runtime(share, period);
        let origin = Arc::clone(&self.origin);
        let work = move |release_ns: u64| {
            let origin = origin.load(Ordering::Acquire);
            let since = (origin != 0)
                .then(|| release_ns.checked_sub(origin))
                .flatten()
                .map(Duration::from_nanos);
            period.mul_f64(video.share_at(since))
        };
        self.start_task(VIDEO, period, budget, work)?;
        let sized = match self.settings.sizing {
            Sizing::Peak => "peak",
            Sizing::Mean => "mean",
        };
        self.notes.push(format!(
            "video: {} fps, steps {:?} of a core every {:?}, peak {:.3}, mean {:.3}; budget \
             {budget:?} every {period:?} (the {sized} × {:.2})",
            self.subject.video.fps,
            self.subject.video.steps,
            self.subject.video.step,
            self.subject.video.peak(),
            self.subject.video.mean(measured),
            1.0 + self.subject.margin
        ));
        Ok(())
    }

    /// Creates `cell` (bound to this process, global EDF) with `budget`
    /// every `period`, and a runtime whose one worker joins it and runs a
    /// periodic task burning `work(release)` per job, its misses reported
    /// to the daemon.
    fn start_task(
        &mut self,
        cell: &'static str,
        period: Duration,
        budget: Duration,
        work: impl Fn(u64) -> Duration + Send + 'static,
    ) -> Result<(), String> {
        let daemon = self.daemon.as_ref().expect("running");
        let session = self.session.as_mut().expect("running");
        let mut request =
            CellRequest::event_triggered(cell, budget.as_nanos() as u64, period.as_nanos() as u64);
        request.placement = Placement::Global;
        session
            .create_cell(request, true)
            .map_err(|e| format!("cell {cell:?}: {e}"))?;
        let paths = daemon.paths().clone();
        let join = CellJoin::with(cell, move || Session::daemon_at(&paths));
        let config = RuntimeConfig {
            workers: 1,
            cell: Some(join.clone()),
            watch_overruns: false,
            ..RuntimeConfig::default()
        };
        let mut builder = Runtime::builder(config);
        builder
            .periodic(Periodic::new(cell, period), move |ctx| {
                burn_cpu(work(ctx.release_ns()))
            })
            .map_err(|e| format!("{cell}: {e}"))?;
        let runtime = builder
            .start(BrokerReport::to(join, NoNotifications))
            .map_err(|e| format!("{cell}: {e}"))?;
        if let Guarantee::BestEffort(why) | Guarantee::Limited(why) = runtime.guarantee() {
            let why = why.clone();
            let _ = runtime.stop();
            return Err(format!(
                "{cell}: its reservation is not enforced here ({why}); the experiment needs root"
            ));
        }
        self.notes
            .extend(runtime.warnings().iter().map(|w| format!("{cell}: {w}")));
        self.tasks.push(Task {
            name: cell,
            runtime,
        });
        Ok(())
    }

    /// jackd with its clients and the guard, in this daemon's broker; left
    /// out with the reason if it cannot run.
    fn start_jack(&mut self, jack: &crate::scenario::JackLoad, total: Duration) {
        if !tessera_workloads::external::installed("jackd") {
            self.notes.push(
                "jack: left out: jackd is not installed (Debian: apt-get install jackd2)".into(),
            );
            return;
        }
        let subject = AudioServerSubject {
            server: ServerKind::Jack,
            frames: jack.frames,
            rate: jack.rate,
            priority: JACK_PRIORITY,
            clients: jack
                .clients
                .iter()
                .map(|&load| AudioClient {
                    load,
                    start: Duration::ZERO,
                    stop: None,
                })
                .collect(),
        };
        // Held to their budgets (no reclaiming): what is reserved is what
        // is guaranteed, and the budget is what the RAP service adapts.
        let sched = ServerSched::Guard(GuardSettings {
            no_reclaim: true,
            fixed: Some(jack.fixed_pct),
            increment: None,
        });
        let place = GuardPlace {
            core: Some("global".into()),
            broker_dir: self.daemon.as_ref().map(|d| d.dir().to_path_buf()),
        };
        match AudioServerRun::start_on(&subject, sched, None, total, &place) {
            Ok(run) => {
                self.jack = Some(run);
                self.notes.push(format!(
                    "jack: jackd -d dummy, {} frames at {} Hz, clients {:?} of the period in a \
                     chain, tessera guard jackd --fixed {} --no-reclaim --core global",
                    jack.frames, jack.rate, jack.clients, jack.fixed_pct
                ));
            }
            Err(e) => self.notes.push(format!("jack: left out: {e}")),
        }
    }

    /// Starts the staircase at the end of the warm-up and JACK's clients'
    /// timeline at t0.
    pub(crate) fn release(&mut self, t0: u64) -> Result<(), String> {
        self.origin
            .store(t0 + self.warmup.as_nanos() as u64, Ordering::Release);
        if let Some(jack) = &mut self.jack {
            if let Err(e) = jack.release(t0) {
                self.notes
                    .push(format!("jack: its clients did not start: {e}"));
            }
        }
        Ok(())
    }

    /// Stops the tasks and JACK, reads the daemon's series, stops the daemon.
    pub(crate) fn finish(mut self) -> DemandData {
        let mut notes = std::mem::take(&mut self.notes);
        for task in self.tasks.drain(..) {
            match task.runtime.stop() {
                Ok(report) => {
                    for t in report.tasks {
                        let c = t.counters;
                        notes.push(format!(
                            "{}: {} jobs released, {} late, {} dropped (whole run, warm-up \
                             included, as the task counted them)",
                            task.name, c.released, c.missed, c.dropped
                        ));
                    }
                }
                Err(e) => notes.push(format!("{}: {e}", task.name)),
            }
        }
        let jack = self.jack.take().map(AudioServerRun::finish);
        drop(self.session.take());
        // The tasks' last reports and the monitor's last sample.
        let daemon = self.daemon.take().expect("running");
        let samples = daemon.samples();
        notes.extend(daemon.stop());
        DemandData {
            samples,
            jack,
            subject: self.subject.clone(),
            notes,
        }
    }
}

/// The metrics and notes of a finished run; `t0` is the run's origin.
pub(crate) fn metrics(
    data: DemandData,
    scenario: &Scenario,
    t0: u64,
) -> (Vec<Metric>, Vec<String>) {
    let mut notes = data.notes;
    let video_period = data.subject.video.period().as_nanos() as u64;
    let mut groups = vec![Group {
        name: VIDEO,
        job_period_ns: video_period,
        shared_count: false,
    }];
    if let Some(audio) = &data.subject.audio {
        groups.push(Group {
            name: AUDIO,
            job_period_ns: audio.period.as_nanos() as u64,
            shared_count: false,
        });
    }
    if let (Some(jack), Some(_)) = (&data.subject.jack, &data.jack) {
        groups.push(Group {
            name: JACK,
            job_period_ns: jack.period().as_nanos() as u64,
            shared_count: true,
        });
    }
    let names: Vec<&str> = groups.iter().map(|g| g.name).collect();
    let jack_group = names.iter().position(|n| *n == JACK);
    let group_of = |cell: &str| names.iter().position(|n| *n == cell).or(jack_group);
    let window = Window {
        from_ns: t0 + scenario.warmup.as_nanos() as u64,
        to_ns: t0 + scenario.total().as_nanos() as u64,
        t0_ns: t0,
    };
    let (metrics, monitor_notes) = series::metrics(&data.samples, &window, &groups, &group_of);
    notes.extend(monitor_notes);
    if let Some(jack) = data.jack {
        // Its own figures (cycles, xruns, late cycles as the clients saw
        // them), kept as notes: its budget metrics are the guard's view,
        // which the daemon's adaptation overrides.
        let (_, jack_notes) = audio_server::metrics(jack, scenario, t0);
        notes.extend(jack_notes.into_iter().map(|n| format!("jack: {n}")));
    }
    (metrics, notes)
}

/// Whether this build can run the subject: the `tessera` binary beside us
/// (each configuration starts its daemon and guard from it).
pub fn tessera_built() -> bool {
    servers::is_program(&servers::program_beside_us("tessera"))
}
