//! The `changing-demand` subject's run: the RAP service's experiment (seed
//! 000 §2.3). Each configuration starts a `tessera daemon` of its own
//! ([`crate::harness::daemon`]: a private run directory, adaptation on or off) and, in it,
//! one event-triggered cell per application, each under global EDF:
//!
//! - `video`: a 30 fps player's periodic task run by tessera's runtime in
//!   the cell, each job burning the share of a core the staircase and its
//!   bursts ask at its release ([`tessera_scenario::VideoDemand::share_at`]);
//! - `music`: the music application (seed 000 §3, [`crate::subject::music`]) on
//!   loopback, its synth's engine in this cell, its late cycles reported
//!   to the daemon as the cell's xruns; its network service and the SLABS
//!   emulating its device in cells of their own (`music-network`, `slabs`),
//!   pinned (never adapted) and left out of the figures, the same in every
//!   configuration. The synth's budget is sized from its own use in its
//!   cell during the warm-up ([`Calibration`]);
//! - JACK: Debian's jackd on its dummy driver with `tessera-jack-peer` load
//!   clients, every real-time thread reserved by `tessera guard jackd
//!   --fixed` (the audio-server subject's run, [`crate::subject::audio_server`]),
//!   its xruns reported by the guard. Left out, with the reason in the
//!   notes, when jackd or the peer is missing or does not start.
//!
//! The tasks report their misses to the daemon (`BrokerReport`), the music
//! application its synth's late cycles (`tessera_music::report`), so the
//! daemon's monitor holds budgets, use and misses over time; that series is
//! the run's measurement ([`series`]). Static budgets are the demand (peak
//! or mean) × (1 + margin); an adaptive configuration starts from them and
//! lets the daemon adapt.
//!
//! It owns one configuration's daemon, cells, tasks and processes, and
//! stops them all (tasks, the music application, JACK, then the daemon,
//! which is reset) however the run ends. It must never judge a result
//! beyond comparing it with the goal the issue states, and never run beside
//! another broker's cpusets.

mod series;

pub use series::{cell_metric, report_section, MISSES, TOTAL};

use crate::harness::daemon::PrivateDaemon;
use crate::harness::servers;
use crate::subject::audio_server::{self, AudioServerData, AudioServerRun, GuardPlace};
use crate::subject::contract::{Measured, Running, Stopped, Watched};
use crate::subject::music::{self, MusicData, MusicRun, Threads};
use series::{Group, Window};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tessera_broker::monitor::Sample;
use tessera_broker::Session;
use tessera_measure::Counter;
use tessera_music::protocol;
use tessera_policy::{Budget, CellRequest, Placement};
use tessera_runtime::{
    BrokerReport, CellJoin, Guarantee, NoNotifications, Periodic, Runtime, RuntimeConfig,
};
use tessera_scenario::{
    AudioClient, AudioServerSubject, ChangingDemand, Configuration, DemandSettings, GuardSettings,
    MusicSubject, Scenario, ServerKind, ServerSched, Sizing, Subject,
};
use tessera_workloads::periodic::burn_cpu;

/// The cells this run creates (the guard names its own after its threads).
pub const VIDEO: &str = "video";
/// The music application's synth (its engine's threads).
pub const MUSIC: &str = "music";
/// Its network service, and the SLABS's sender: pinned, outside the figures.
pub const MUSIC_NETWORK: &str = "music-network";
pub const SLABS: &str = "slabs";
/// The group of the guard's cells.
pub const JACK: &str = "jack";
/// jackd's `-P` (the guard moves every real-time thread to a reservation).
const JACK_PRIORITY: u32 = 10;
/// The synth's share of the package period during the warm-up, while its
/// use is measured: more than it uses, so that the use is its demand and
/// not its budget (the note says when it was not).
const CALIBRATION_SHARE: f64 = 0.35;
/// The first second of the warm-up is the application starting up: left
/// out of the calibration.
const CALIBRATION_SETTLE: Duration = Duration::from_secs(1);
/// The network service's CPU per package, 16 wake-ups each a VM exit:
/// 213 µs measured on this guest by `tessera music run` in the development
/// build (141–153 µs in the release build, docs/experiments.md).
const NETWORK_DEMAND: Duration = Duration::from_micros(213);
/// The SLABS's sender, sleeping between its 16 packets: about 40 % of a
/// core (scenarios/seed-4.1.toml), 290 µs per package.
const SLABS_DEMAND: Duration = Duration::from_micros(290);

/// One periodic task in its cell.
struct Task {
    name: &'static str,
    period: Duration,
    runtime: Runtime,
}

impl Task {
    /// Its worker, judged by its period on its grid, its misses in its
    /// cell's metric.
    fn watched(&self) -> impl Iterator<Item = Watched> + '_ {
        self.runtime.workers().iter().map(|w| Watched {
            tid: w.tid,
            metric: cell_metric(self.name),
            deadline: Some(self.period),
            period: Some(self.period),
            budget: None,
            chain: None,
            thread_metric: None,
        })
    }
}

/// `threads` with their misses counted in `group`'s cell metric (the
/// subject reports the daemon's view, not the application's own metrics).
fn in_cell(group: &str, threads: Vec<Watched>) -> impl Iterator<Item = Watched> + '_ {
    threads.into_iter().map(move |w| Watched {
        metric: cell_metric(group),
        thread_metric: None,
        ..w
    })
}

/// One configuration's daemon, cells and loads. Fields drop in order:
/// tasks, the music application, JACK, the session, the daemon (reset and
/// stopped) last.
pub(crate) struct DemandRun {
    tasks: Vec<Task>,
    music: Option<MusicRun>,
    jack: Option<AudioServerRun>,
    session: Option<Session>,
    daemon: Option<PrivateDaemon>,
    /// When the staircase starts (the end of the warm-up), CLOCK_MONOTONIC
    /// ns; 0 until the release.
    origin: Arc<AtomicU64>,
    /// From t0 to the staircase's start.
    warmup: Duration,
    /// Sizes the synth's cell at the end of the warm-up; its note.
    calibration: Option<std::thread::JoinHandle<String>>,
    subject: ChangingDemand,
    settings: DemandSettings,
    notes: Vec<String>,
}

/// What a finished run left for the metrics.
pub(crate) struct DemandData {
    samples: Vec<Sample>,
    music: Option<MusicData>,
    jack: Option<AudioServerData>,
    subject: ChangingDemand,
    adapting: bool,
    notes: Vec<String>,
}

impl DemandRun {
    /// Starts the daemon, creates the cells at their configured budgets and
    /// starts the music application, the tasks and JACK; the staircase and
    /// the SLABS wait for the release.
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
            music: None,
            jack: None,
            session: Some(daemon.session()?),
            daemon: Some(daemon),
            origin: Arc::new(AtomicU64::new(0)),
            warmup: scenario.warmup,
            calibration: None,
            subject: subject.clone(),
            settings,
            notes: Vec::new(),
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
        if let Some(music) = &subject.music {
            run.start_music(music, scenario)?;
        }
        run.start_video(scenario.duration)?;
        if let Some(jack) = &subject.jack {
            run.start_jack(jack, scenario.total());
        }
        Ok(run)
    }

    /// A static budget: `share` of `period` × (1 + margin).
    fn static_runtime(&self, share: f64, period: Duration) -> Duration {
        period.mul_f64((share * (1.0 + self.subject.margin)).min(1.0))
    }

    /// The music application in its cells: the synth's at
    /// [`CALIBRATION_SHARE`] until the end of the warm-up (then sized by
    /// [`Calibration`]), the network's and the SLABS's their demand × (1 +
    /// margin), pinned; every budget per package period.
    fn start_music(&mut self, music: &MusicSubject, scenario: &Scenario) -> Result<(), String> {
        let period = Duration::from_nanos(protocol::package_period_ns());
        let budget = |demand: Duration| {
            self.static_runtime(demand.as_secs_f64() / period.as_secs_f64(), period)
        };
        let synth_budget = period.mul_f64(CALIBRATION_SHARE);
        let network_budget = budget(NETWORK_DEMAND);
        let slabs_budget = budget(SLABS_DEMAND);
        let synth = self.create(CellRequest::event_triggered(
            MUSIC,
            synth_budget.as_nanos() as u64,
            period.as_nanos() as u64,
        ))?;
        let network = self.create(pinned(MUSIC_NETWORK, network_budget, period))?;
        let slabs = self.create(pinned(SLABS, slabs_budget, period))?;
        let threads = Threads::in_cells(&synth, &network, &slabs);
        self.music = Some(MusicRun::start_in(music, scenario, threads)?);
        let factor = 1.0 + self.subject.margin;
        self.notes.push(format!(
            "music: {} pads held, work factor {}; synth budget {synth_budget:?} every {period:?} \
             during the warm-up; pinned, with reclaiming, outside the figures: network \
             {network_budget:?}, SLABS {slabs_budget:?} ({NETWORK_DEMAND:?} and \
             {SLABS_DEMAND:?} per package × {factor:.2})",
            music.pads.len(),
            music.synth.work_factor,
        ));
        Ok(())
    }

    /// Creates `request` in the daemon, under global EDF; the join of its
    /// threads, whose reports go to the daemon.
    fn create(&mut self, mut request: CellRequest) -> Result<CellJoin, String> {
        request.placement = Placement::Global;
        let name = request.name.clone();
        let session = self.session.as_mut().expect("running");
        session
            .create_cell(request, true)
            .map_err(|e| format!("cell {name:?}: {e}"))?;
        let paths = self.daemon.as_ref().expect("running").paths().clone();
        Ok(CellJoin::with(name, move || Session::daemon_at(&paths)))
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
        let sized = self.settings.sizing.name();
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
        let join = self.create(CellRequest::event_triggered(
            cell,
            budget.as_nanos() as u64,
            period.as_nanos() as u64,
        ))?;
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
            period,
            runtime,
        });
        Ok(())
    }

    /// jackd with its clients and the guard, in this daemon's broker; left
    /// out with the reason if it cannot run.
    fn start_jack(&mut self, jack: &tessera_scenario::JackLoad, total: Duration) {
        if !tessera_sys::process::installed("jackd") {
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
            network: None,
        };
        // Held to their budgets (no reclaiming): what is reserved is what
        // is guaranteed, and the budget is what the RAP service adapts.
        let sched = ServerSched::Guard(GuardSettings {
            no_reclaim: true,
            fixed: Some(jack.fixed_pct),
            ..GuardSettings::default()
        });
        let place = GuardPlace {
            core: Some("global".into()),
            broker_dir: self.daemon.as_ref().map(|d| d.dir().to_path_buf()),
            record: true,
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

    /// Starts the staircase at the end of the warm-up, and the SLABS and
    /// JACK's clients' timeline at t0.
    pub(crate) fn release(&mut self, t0: u64) -> Result<(), String> {
        self.origin
            .store(t0 + self.warmup.as_nanos() as u64, Ordering::Release);
        if let Some(music) = &mut self.music {
            music.release(t0)?;
            let calibration = Calibration {
                paths: self.daemon.as_ref().expect("running").paths().clone(),
                from_ns: t0 + CALIBRATION_SETTLE.as_nanos() as u64,
                until_ns: t0 + self.warmup.as_nanos() as u64,
                sizing: self.settings.sizing,
                margin: self.subject.margin,
            };
            self.calibration = Some(
                std::thread::Builder::new()
                    .name("calibration".into())
                    .spawn(move || calibration.run())
                    .map_err(|e| format!("calibration thread: {e}"))?,
            );
        }
        if let Some(jack) = &mut self.jack {
            if let Err(e) = jack.release(t0) {
                self.notes
                    .push(format!("jack: its clients did not start: {e}"));
            }
        }
        Ok(())
    }

    /// Stops the tasks, the music application (once its SLABS has sent
    /// every package) and JACK, reads the daemon's series, stops the daemon.
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
        if let Some(calibration) = self.calibration.take() {
            notes.push(
                calibration
                    .join()
                    .unwrap_or_else(|_| "music: the calibration panicked".into()),
            );
        }
        let music = self.music.take().map(MusicRun::finish);
        let jack = self.jack.take().map(AudioServerRun::finish);
        drop(self.session.take());
        // The tasks' last reports and the monitor's last sample.
        let daemon = self.daemon.take().expect("running");
        let samples = daemon.samples();
        notes.extend(daemon.stop());
        DemandData {
            samples,
            music,
            jack,
            subject: self.subject.clone(),
            adapting: self.settings.adapt,
            notes,
        }
    }
}

/// The metrics and notes of a finished run; `t0` is the run's origin.
pub(crate) fn metrics(data: DemandData, scenario: &Scenario, t0: u64) -> Measured {
    let mut notes = data.notes;
    let mut counters = Vec::new();
    let video_period = data.subject.video.period().as_nanos() as u64;
    let mut groups = vec![Group {
        name: VIDEO,
        job_period_ns: video_period,
        shared_count: false,
    }];
    if data.subject.music.is_some() {
        groups.push(Group {
            name: MUSIC,
            job_period_ns: protocol::package_period_ns(),
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
    let group_of = |cell: &str| match cell {
        MUSIC_NETWORK | SLABS => None,
        _ => names.iter().position(|n| *n == cell).or(jack_group),
    };
    let window = Window {
        from_ns: t0 + scenario.warmup.as_nanos() as u64,
        to_ns: t0 + scenario.total().as_nanos() as u64,
        t0_ns: t0,
    };
    let (metrics, monitor_notes) = series::metrics(&data.samples, &window, &groups, &group_of);
    notes.extend(monitor_notes);
    if let Some(music) = data.music {
        // Its own figures (Δt, cycles, xruns), kept as notes and counters
        // named "music: …": the daemon's monitor holds what the adaptation
        // saw.
        let music = music::metrics(music, scenario.warmup);
        counters.extend(prefixed("music", music.counters));
        notes.extend(music.notes.into_iter().map(|n| format!("music: {n}")));
    }
    if let Some(jack) = data.jack {
        // Its own figures (cycles, xruns, late cycles as the clients saw
        // them), kept as notes and counters named "jack: …": its budget
        // metrics are the guard's view, which the daemon's adaptation
        // overrides.
        let jack = audio_server::metrics(jack, scenario, t0);
        counters.extend(prefixed("jack", jack.counters));
        notes.extend(jack.notes.into_iter().map(|n| format!("jack: {n}")));
    }
    let adaptation = match data.adapting {
        true => series::ON,
        false => series::OFF,
    };
    Measured::new(metrics, counters, notes).label(series::ADAPTATION, adaptation)
}

/// Counters of a program of the run named as its notes are: "jack: …".
fn prefixed(program: &str, counters: Vec<Counter>) -> impl Iterator<Item = Counter> + '_ {
    counters.into_iter().map(move |c| Counter {
        name: format!("{program}: {}", c.name),
        ..c
    })
}

/// A cell of the music application's that is the same in every
/// configuration: `budget` every `period`, never adapted, reclaiming idle
/// time (GRUB) so that a package that outgrows the budget does not wait, as
/// in the seed's runs.
fn pinned(name: &str, budget: Duration, period: Duration) -> CellRequest {
    CellRequest {
        pinned: true,
        reclaim: true,
        ..CellRequest::event_triggered(name, budget.as_nanos() as u64, period.as_nanos() as u64)
    }
}

/// The synth's static budget, found as by hand from its profile: its
/// use per package period in its cell over the warm-up (as the daemon's
/// monitor sampled it, under the same load as the run), the largest
/// sample for the peak, their mean for the mean, × (1 + margin); set when
/// the warm-up ends. The adaptive configuration starts from it too.
struct Calibration {
    paths: tessera_broker::paths::Paths,
    from_ns: u64,
    until_ns: u64,
    sizing: Sizing,
    margin: f64,
}

impl Calibration {
    /// Waits for the warm-up's end, sizes the cell; the note saying how.
    fn run(self) -> String {
        tessera_sys::clock::sleep_until_monotonic_ns(self.until_ns);
        match self.size() {
            Ok(note) => note,
            Err(e) => format!("music: not calibrated, the synth kept its warm-up budget: {e}"),
        }
    }

    fn size(&self) -> Result<String, String> {
        let mut session = Session::daemon_at(&self.paths).map_err(|e| e.to_string())?;
        let samples = session.monitor(None, 0).map_err(|e| e.to_string())?;
        let (budget, used) = self.uses(&samples);
        let budget = budget.ok_or("no sample of the music cell")?;
        if used.is_empty() {
            return Err("no use of the music cell measured in the warm-up".into());
        }
        let demand = match self.sizing {
            Sizing::Peak => used.iter().copied().max().unwrap_or(0) as f64,
            Sizing::Mean => used.iter().sum::<u64>() as f64 / used.len() as f64,
        };
        let runtime = ((demand * (1.0 + self.margin)) as u64)
            .clamp(tessera_policy::cell::MIN_RUNTIME_NS, budget.period_ns);
        let reply = session
            .resize_cell(
                MUSIC,
                Budget {
                    runtime_ns: runtime,
                    ..budget
                },
                true,
            )
            .map_err(|e| e.to_string())?;
        let held_short = used.iter().any(|&u| u * 100 >= budget.runtime_ns * 90);
        Ok(format!(
            "music: synth sized for the {} of its use per period in the warm-up ({} samples, {} \
             µs) × {:.2}: {} µs every {} µs{}",
            self.sizing.name(),
            used.len(),
            demand as u64 / 1000,
            1.0 + self.margin,
            reply.budget.runtime_ns / 1000,
            reply.budget.period_ns / 1000,
            match held_short {
                true => " (it used 90 % or more of its warm-up budget: its demand may be more)",
                false => "",
            }
        ))
    }

    /// The music cell's warm-up budget and its use per period in every
    /// sample of the calibration window.
    fn uses(&self, samples: &[Sample]) -> (Option<Budget>, Vec<u64>) {
        let cells = samples
            .iter()
            .filter(|s| (self.from_ns..=self.until_ns).contains(&s.t_mono_ns))
            .filter_map(|s| s.cells.iter().find(|c| c.name == MUSIC));
        let mut budget = None;
        let mut used = Vec::new();
        for cell in cells {
            budget = budget.or(cell.budget);
            used.extend(cell.used_ns);
        }
        (budget, used)
    }
}

/// Whether this build can run the subject: the `tessera` binary beside us
/// (each configuration starts its daemon and guard from it).
pub fn tessera_built() -> bool {
    servers::is_program(&servers::program_beside_us("tessera"))
}

/// `[subject] kind = "changing-demand"`.
pub(crate) struct Kind;

impl crate::subject::contract::Subject for Kind {
    fn runs(&self, scenario: &Scenario, _config: &Configuration) -> bool {
        matches!(scenario.subject, Subject::ChangingDemand(_))
    }

    fn start(
        &self,
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<Box<dyn Running>, String> {
        Ok(Box::new(DemandRun::start(scenario, config)?))
    }

    fn report_section(
        &self,
        results: &tessera_measure::RunResults,
        _dir: &std::path::Path,
    ) -> Result<String, String> {
        Ok(report_section(results))
    }
}

impl Running for DemandRun {
    fn release(&mut self, t0: u64) -> Result<(), String> {
        DemandRun::release(self, t0)
    }

    /// The video task's worker, the music application's synth threads and
    /// jackd's chain, each counted in its cell's metric.
    fn watched(&self) -> Vec<Watched> {
        let mut threads: Vec<Watched> = self.tasks.iter().flat_map(Task::watched).collect();
        if let Some(music) = &self.music {
            threads.extend(in_cell(MUSIC, music.watched()));
        }
        if let Some(jack) = &self.jack {
            threads.extend(in_cell(JACK, jack.watched()));
        }
        threads
    }

    fn stop(self: Box<Self>, _notes: &mut Vec<String>) -> Box<dyn Stopped> {
        Box::new(self.finish())
    }
}

impl Stopped for DemandData {
    fn measure(self: Box<Self>, scenario: &Scenario, t0: u64) -> Measured {
        metrics(*self, scenario, t0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_programs_threads_count_in_their_cells_metric() {
        let chain = Watched {
            tid: 7,
            metric: "cycle end-to-end".into(),
            deadline: Some(Duration::from_millis(5)),
            period: Some(Duration::from_millis(5)),
            budget: None,
            chain: None,
            thread_metric: Some("client end".into()),
        };
        let moved: Vec<Watched> = in_cell(JACK, vec![chain.clone()]).collect();
        assert_eq!(
            moved,
            [Watched {
                metric: cell_metric(JACK),
                thread_metric: None,
                ..chain
            }]
        );
    }
}
