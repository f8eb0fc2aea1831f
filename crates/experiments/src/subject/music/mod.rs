//! The music application as a scenario's subject (seed 000 §4.1): the SLABS
//! emulator, the network service, the synth cell and the console, each role
//! scheduled as the configuration says (a cell, a FIFO priority, plain).
//! Reported: Δt = t2 − t1 at the network with the seed's 1.4059 ms deadline
//! (histogram, time series of each 100 ms's worst, misses counted on the
//! exact values), tf − t0 at the emulator, the emulator's send jitter and
//! the synth cell's CPU time per cycle; notes with what the network lost.
//! With the synth in a cell, its late cycles go to that cell's broker while
//! it runs (`tessera_music::report`), as the broker's monitor's misses.
//!
//! Owns starting and stopping the application around the runner's release,
//! with its threads scheduled as a configuration says or as a caller sets
//! them up ([`Threads`], e.g. cells of another daemon). It must never judge
//! a result.

use crate::subject::contract::{Measured, Running, Stopped, Watched};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::cells::{cell_name, own_role, role, setup_for};
use crate::harness::net_service::{ServiceData, ServiceRun};
use tessera_measure::{Counter, Metric, Series};
use tessera_music::app::{App, AppConfig, AppReport, Roles, ThreadHook, Timings, DEADLINE};
use tessera_music::emulator::{self, held_pads, EmulatorConfig, EmulatorReport};
use tessera_music::lan::{self, Lan, LanError, Shaping};
use tessera_music::windows::WindowSummary;
use tessera_music::{protocol, EMULATOR_METRIC, LATENESS_METRIC, RESPONSE_METRIC, SERVICE_METRIC};
use tessera_runtime::CellJoin;
use tessera_scenario::{Configuration, MusicSubject, Scenario, Sched, Subject};
use tessera_services::network::NetworkReport;
use tessera_synth::Gesture;

/// The seed's §4.1 experiment as shipped (scenarios/seed-4.1.toml).
pub const SEED_SCENARIO: &str = include_str!("../../../../../scenarios/seed-4.1.toml");
/// Seconds per configuration of the shipped scenario at scale 1.
pub(crate) const SEED_SECONDS: f64 = 180.0;
/// Runs longer than this keep Δt per [`WINDOW`] instead of every package's
/// (which, with the engine's profile of every cycle, takes over 3 KB a
/// package: some 18 GB an hour).
const LONG_RUN: Duration = Duration::from_secs(15 * 60);
/// A long run's window of Δt.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Packages a long run keeps the timing of (the last 12 s).
const RECENT_PACKAGES: usize = 1 << 14;

/// The shipped §4.1 scenario with each configuration lasting about
/// `seconds`. Without CAP_SYS_NICE, only its two Group 1 configurations,
/// every thread best-effort (SCHED_OTHER), renamed to say so.
pub fn seed_scenario(seconds: f64, privileged: bool) -> Result<Scenario, String> {
    let scenario =
        Scenario::parse(SEED_SCENARIO, "scenarios/seed-4.1.toml").map_err(|e| e.to_string())?;
    let mut scenario = scenario.scaled(seconds / SEED_SECONDS);
    if !privileged {
        scenario.configurations.truncate(2);
        for c in &mut scenario.configurations {
            c.subject = Sched::default();
            c.roles.clear();
            c.interference
                .iter_mut()
                .for_each(|(_, s)| *s = Sched::default());
            c.name = c.name.replace("(cells)", "(best-effort, no cells)");
        }
        scenario.baseline = scenario.configurations.first().map(|c| c.name.clone());
    }
    Ok(scenario)
}

/// Metric of the synth cell's communication thread's CPU time per cycle.
pub const CYCLE_CPU_METRIC: &str = "synth cycle CPU time";
/// FIFO priority of the emulator's answer thread when its sender is
/// scheduled (a cell or FIFO).
const ANSWER_PRIORITY: u32 = 90;
/// Δt up to the answer's hand-over to the network service process.
pub const HANDED_OVER_METRIC: &str = "Δt to the service (t2' − t1)";
/// Width of one point of the Δt time series (its worst value).
const SERIES_BUCKET_NS: u64 = 100_000_000;

/// How the application's and the SLABS's threads start.
pub(crate) struct Threads {
    /// Each role's hook (join a cell, a FIFO priority, a core).
    roles: Roles,
    /// The synth's cell, whose misses go to the broker that the join
    /// reaches while the application runs; `None`: not reported.
    report: Option<CellJoin>,
    /// The SLABS's sender's setup, and its answer thread's.
    slabs: ThreadHook,
    answers: ThreadHook,
    /// The sender spins before each packet (a core of its own): not in a
    /// reservation, where spinning would spend the budget, nor at a FIFO
    /// priority, where it would starve its core.
    spin: bool,
    /// The synth's threads, as they start.
    started: Started,
}

/// The synth's threads, each recorded by its role's hook as it starts
/// (the engine sets its threads up before it returns), for `tessera run
/// --why` to trace. Not the network service's: it wakes for each of a
/// package's 16 datagrams, and its records overflowed rings sized for a
/// cycle a package (100 000 lost in 4 s).
#[derive(Clone, Default)]
struct Started(Arc<Mutex<Vec<i32>>>);

impl Started {
    /// `hook`, if any, then the calling thread recorded.
    fn recording(&self, hook: Option<ThreadHook>) -> Option<ThreadHook> {
        let started = self.clone();
        Some(Arc::new(move || {
            if let Some(hook) = &hook {
                hook()?;
            }
            started.tids().push(tessera_sys::proc::current_tid());
            Ok(())
        }))
    }

    fn tids(&self) -> std::sync::MutexGuard<'_, Vec<i32>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Each thread judged by the package's deadline, its misses counted
    /// in Δt: a package is late when a thread on its path is.
    fn watched(&self) -> Vec<Watched> {
        self.tids()
            .iter()
            .map(|&tid| Watched {
                tid,
                metric: RESPONSE_METRIC.to_string(),
                deadline: Some(DEADLINE),
                period: None,
                budget: None,
                chain: None,
                thread_metric: None,
            })
            .collect()
    }
}

impl Threads {
    /// As `config` schedules each role (its own entry, else the subject's),
    /// pinned to `core` if given; the SLABS's answer thread as its own
    /// `answers` entry says, else as its sender when that is plain, else
    /// [`answering`].
    fn scheduled(config: &Configuration, core: Option<usize>) -> Threads {
        let hook = |sched: &Sched| -> ThreadHook {
            let setup = setup_for(sched, core);
            Arc::new(move || setup.clone()())
        };
        let role_hook = |name: &str| {
            let sched = role(config, name);
            (!sched.is_plain() || core.is_some()).then(|| hook(sched))
        };
        let slabs = role(config, "slabs");
        let synth = role(config, "synth").cell.as_deref();
        let started = Started::default();
        Threads {
            roles: Roles {
                synth: started.recording(role_hook("synth")),
                network: role_hook("network"),
                console: role_hook("console"),
            },
            report: synth.map(|cell| CellJoin::connect(cell_name(cell))),
            slabs: hook(slabs),
            // A cell of its own keeps the answer thread from waiting behind
            // its sender: a reservation that reclaims idle bandwidth (GRUB)
            // takes it from FIFO threads too, and the sender's, behind on a
            // busy host, left the answers at FIFO 90 a fifth of the CPU —
            // half of them dropped by a full socket, the rest 40 ms late
            // (seed 000 §4.1, docs/experiments.md).
            answers: match (own_role(config, "answers"), slabs.is_plain()) {
                (Some(sched), _) => hook(sched),
                (None, true) => hook(slabs),
                (None, false) => answering(core),
            },
            spin: slabs.is_plain(),
            started,
        }
    }

    /// The synth, the network and the SLABS's sender each joining its cell
    /// (the synth's misses reported to its broker), the console as it
    /// starts, the SLABS's answer thread at a high FIFO priority.
    pub(crate) fn in_cells(synth: &CellJoin, network: &CellJoin, slabs: &CellJoin) -> Threads {
        let hook = |join: &CellJoin| -> ThreadHook { Arc::new(join.hook()) };
        let started = Started::default();
        Threads {
            roles: Roles {
                synth: started.recording(Some(hook(synth))),
                network: Some(hook(network)),
                console: None,
            },
            report: Some(synth.clone()),
            slabs: hook(slabs),
            answers: answering(None),
            spin: false,
            started,
        }
    }
}

/// The SLABS's answer thread, its sender scheduled: it only timestamps
/// arrivals, at [`ANSWER_PRIORITY`] (pinned to `core` if given), so the
/// device's measurement does not wait behind the interference.
fn answering(core: Option<usize>) -> ThreadHook {
    let setup = setup_for(
        &Sched {
            cell: None,
            fifo: Some(ANSWER_PRIORITY),
        },
        core,
    );
    Arc::new(move || setup.clone()())
}

/// What the SLABS plays: `music`'s pads held.
pub(crate) fn gesture(music: &MusicSubject) -> Gesture {
    held_pads(music.pads.iter().copied(), music.x, music.y, music.pressure)
}

/// The application and its emulator, running.
pub(crate) struct MusicRun {
    app: App,
    emulator: EmulatorConfig,
    slabs: ThreadHook,
    answers: ThreadHook,
    /// The network service process, the streamer and its peer, when the
    /// configuration runs through the service (seed 000 §4.2).
    service: Option<ServiceRun>,
    /// The veth pair to the SLABS's namespace; `None`: loopback.
    lan: Option<Lan>,
    sender: Option<JoinHandle<Result<Result<EmulatorReport, String>, LanError>>>,
    /// The windows [`MusicRun::windows`] took, for the metrics at the end.
    windows: Vec<WindowSummary>,
    started: Started,
}

/// What they measured.
pub(crate) struct MusicData {
    app: Result<AppReport, String>,
    emulator: Result<EmulatorReport, String>,
    /// How the SLABS reached the application.
    network: &'static str,
    service: Option<ServiceData>,
}

/// What a run of `scenario` keeps: Δt per window when it lasts over
/// [`LONG_RUN`], every package's otherwise.
fn timings_for(scenario: &Scenario) -> Timings {
    match scenario.total() > LONG_RUN {
        true => windowed(),
        false => Timings::Every,
    }
}

/// Δt per [`WINDOW`], and the last packages' timings.
pub(crate) fn windowed() -> Timings {
    Timings::Windows {
        window: WINDOW,
        recent: RECENT_PACKAGES,
    }
}

impl MusicRun {
    /// Starts the console, the synth cell's engine and the network service,
    /// each role joined as configured; the emulator waits for the release.
    /// A run over [`LONG_RUN`] keeps Δt per window.
    pub(crate) fn start(scenario: &Scenario, config: &Configuration) -> Result<MusicRun, String> {
        MusicRun::start_with(scenario, config, timings_for(scenario))
    }

    /// [`MusicRun::start`], keeping `timings`.
    pub(crate) fn start_with(
        scenario: &Scenario,
        config: &Configuration,
        timings: Timings,
    ) -> Result<MusicRun, String> {
        let Subject::Music(music) = &scenario.subject else {
            unreachable!("called for music subjects only")
        };
        // Through the service the link is shaped as the seed's: a gigabit
        // link, marked real-time packets first.
        let shaping = config.service.as_ref().map(|_| Shaping {
            rate_bps: music.link_bps,
            prio: true,
        });
        let lan = music
            .lan
            .then(|| Lan::shaped(shaping))
            .transpose()
            .map_err(|e| e.to_string())?;
        let service = match &config.service {
            Some(plan) => Some(ServiceRun::start(
                plan,
                lan.as_ref(),
                role(config, "service"),
                role(config, "streamer"),
                scenario.total().as_secs_f64() + 2.0,
            )?),
            None => None,
        };
        let threads = Threads::scheduled(config, scenario.core);
        MusicRun::launch(music, scenario, threads, (lan, service), timings)
    }

    /// `music` on loopback, its own socket, each thread started as
    /// `threads` says; the emulator waits for the release. A run over
    /// [`LONG_RUN`] keeps Δt per window.
    pub(crate) fn start_in(
        music: &MusicSubject,
        scenario: &Scenario,
        threads: Threads,
    ) -> Result<MusicRun, String> {
        MusicRun::launch(
            music,
            scenario,
            threads,
            (None, None),
            timings_for(scenario),
        )
    }

    /// Starts the application across `network` (the LAN to the SLABS, the
    /// network service process) with `threads`.
    fn launch(
        music: &MusicSubject,
        scenario: &Scenario,
        threads: Threads,
        network: (Option<Lan>, Option<ServiceRun>),
        timings: Timings,
    ) -> Result<MusicRun, String> {
        let (lan, service) = network;
        let warmup_packages = scenario.warmup.as_nanos() as u64 / protocol::package_period_ns();
        let mut emulator = EmulatorConfig::new(
            "127.0.0.1:0".parse().expect("a socket address"),
            scenario.total(),
            gesture(music),
        );
        emulator.warmup_packages = warmup_packages;
        if !threads.spin {
            emulator.spin_ns = 0;
        }
        let app = App::start(AppConfig {
            bind: lan::app_bind(lan.as_ref()),
            service: service.as_ref().map(ServiceRun::music_flow),
            osc: None,
            synth: music.synth.clone(),
            warmup_packages,
            expected_packages: emulator.packages() as usize,
            workers: music.workers,
            roles: threads.roles,
            report: threads.report,
            package_log: None,
            timings,
        })
        .map_err(|e| e.to_string())?;
        emulator.to = app.local_addr();
        Ok(MusicRun {
            app,
            emulator,
            slabs: threads.slabs,
            answers: threads.answers,
            service,
            lan,
            sender: None,
            windows: Vec::new(),
            started: threads.started,
        })
    }

    /// The windows of Δt closed since the last call (`Timings::Windows`).
    pub(crate) fn windows(&mut self) -> Vec<WindowSummary> {
        let new = self.app.windows();
        self.windows.extend_from_slice(&new);
        new
    }

    /// Starts the emulator at `t0`, its threads set up as the
    /// [`Threads`] it was started with say.
    pub(crate) fn release(&mut self, t0: u64) -> Result<(), String> {
        let config = self.emulator.clone();
        let setup = Arc::clone(&self.slabs);
        let receiver = Arc::clone(&self.answers);
        let sender = lan::spawn_slabs(self.lan.as_ref(), move || {
            let sender = Box::new(move || {
                setup()?;
                tessera_sys::clock::sleep_until_monotonic_ns(t0);
                Ok(())
            });
            emulator::run_with(&config, sender, Box::new(move || receiver()))
                .map_err(|e| e.to_string())
        })
        .map_err(|e| format!("starting the SLABS emulator: {e}"))?;
        self.sender = Some(sender);
        Ok(())
    }

    /// Waits for the emulator to finish its packages, then stops the
    /// application.
    pub(crate) fn finish(self) -> MusicData {
        let emulator = match self.sender {
            Some(sender) => match sender.join() {
                Ok(Ok(report)) => report,
                Ok(Err(lan)) => Err(lan.to_string()),
                Err(_) => Err("the SLABS emulator panicked".into()),
            },
            None => Err("the SLABS emulator never started".into()),
        };
        // The service's counters of the music flow, read while it lives.
        let status = self.service.as_ref().map(ServiceRun::status);
        let taken = self.windows;
        let app = self.app.stop().map_err(|e| e.to_string()).map(|mut app| {
            app.windows.splice(0..0, taken);
            app
        });
        let service = self
            .service
            .zip(status)
            .map(|(run, status)| run.finish(status));
        MusicData {
            app,
            emulator,
            network: tessera_music::network_name(self.lan.is_some()),
            service,
        }
    }
}

impl MusicData {
    /// Every window of Δt (`Timings::Windows`), oldest first.
    pub(crate) fn windows(&self) -> Vec<WindowSummary> {
        self.app
            .as_ref()
            .map(|a| a.windows.clone())
            .unwrap_or_default()
    }
}

/// The subject's metrics, counters and notes.
pub(crate) fn metrics(data: MusicData, warmup: Duration) -> Measured {
    let deadline_us = DEADLINE.as_nanos() as f64 / 1000.0;
    let mut metrics = Vec::new();
    let mut counters = Vec::new();
    let mut notes = Vec::new();
    if let Some(service) = &data.service {
        let (service_metrics, service_counters, service_notes) =
            crate::harness::net_service::metrics(service);
        metrics.extend(service_metrics);
        counters.extend(service_counters);
        notes.extend(service_notes);
    }
    let through_service = data.service.is_some();
    match data.app {
        Ok(app) => {
            // Through the service, t2 is when the answer went to it; the
            // service's own Δt (to the socket) is the seed's.
            let name = match through_service {
                true => HANDED_OVER_METRIC,
                false => RESPONSE_METRIC,
            };
            let mut response = Metric::latency(name, Some(deadline_us), app.response.clone());
            // Counted on the exact values: the histogram's 3 significant
            // digits would round a response just past the deadline onto it.
            response.summary.misses = Some(app.misses);
            response.series = vec![match app.timings {
                Timings::Every => {
                    let warmup_packages = warmup.as_nanos() / protocol::package_period_ns() as u128;
                    let timings = &app.network.timings;
                    worst_per_bucket(&timings[(warmup_packages as usize).min(timings.len())..])
                }
                Timings::Windows { window, .. } => {
                    notes.push(windows_note(&app, window));
                    counters.extend(Counter::counts([
                        ("Δt windows", app.windows.len() as u64),
                        ("Δt windows lost", app.lost_windows),
                    ]));
                    worst_per_window(&app.windows, window)
                }
            }];
            metrics.push(response);
            metrics.push(Metric::latency(SERVICE_METRIC, None, app.service.clone()));
            metrics.push(Metric::latency(
                CYCLE_CPU_METRIC,
                None,
                app.cycle_cpu.clone(),
            ));
            notes.push(format!(
                "synth cell: {} cycles, {} xruns, {} node panics, {} malformed packages",
                app.cycles, app.xruns, app.node_panics, app.malformed_packages
            ));
            notes.push(tessera_music::network_note(&app.network));
            notes.push(tessera_music::misses_note(app.misses, app.sender_misses));
            notes.push(format!(
                "console: {} lines, {} dropped",
                app.console.lines, app.console.dropped
            ));
            counters.extend(Counter::counts([
                ("synth cycles", app.cycles),
                ("synth xruns", app.xruns),
                ("synth node panics", app.node_panics),
                ("synth malformed packages", app.malformed_packages),
                ("Δt misses", app.misses),
                ("Δt misses with a slow sender", app.sender_misses),
                ("console lines", app.console.lines),
                ("console lines dropped", app.console.dropped),
            ]));
            counters.extend(network_counters(&app.network));
        }
        Err(e) => notes.push(format!("the application: {e}")),
    }
    match data.emulator {
        Ok(emulator) => {
            metrics.push(Metric::latency(
                EMULATOR_METRIC,
                Some(deadline_us),
                emulator.response.clone(),
            ));
            metrics.push(Metric::latency(
                LATENESS_METRIC,
                None,
                emulator.send_lateness.clone(),
            ));
            notes.push(format!(
                "SLABS emulator over {}: {} packages sent, {} answered, {} unexpected; {:.1} \
                 packets/s (nominal {:.1}); schedule slipped by {} packages",
                data.network,
                emulator.packages_sent,
                emulator.answered,
                emulator.unexpected,
                emulator.achieved_packet_rate(),
                emulator::nominal_packet_rate(),
                emulator.slipped_packages
            ));
            counters.extend(Counter::counts([
                ("SLABS packages sent", emulator.packages_sent),
                ("SLABS packages answered", emulator.answered),
                ("SLABS unexpected answers", emulator.unexpected),
                ("SLABS packages slipped", emulator.slipped_packages),
            ]));
            counters.push(Counter::new(
                "SLABS packet rate",
                emulator.achieved_packet_rate(),
                "packets/s",
            ));
        }
        Err(e) => notes.push(e),
    }
    Measured::new(metrics, counters, notes)
}

/// The network service's counts (as its note says them) as counters.
fn network_counters(n: &NetworkReport) -> Vec<Counter> {
    let us = |name, ns: f64| Counter::new(name, ns / 1000.0, "us");
    let mut counters = Counter::counts([
        ("network datagrams", n.datagrams),
        ("network packages handed over", n.packages),
        ("network packages answered", n.answered),
        ("network datagrams lost", n.dropped_packets),
        ("network incomplete packages", n.incomplete_packages),
        (
            "network packages without room in the synth cell",
            n.packages_lost,
        ),
        ("network answers lost", n.outputs_lost),
        ("network send errors", n.send_errors),
    ]);
    counters.extend([
        us(
            "network CPU per package",
            n.cpu_ns as f64 / n.packages.max(1) as f64,
        ),
        us(
            "network socket wait mean",
            n.socket_wait_total_ns as f64 / n.datagrams.max(1) as f64,
        ),
        us("network socket wait max", n.socket_wait_max_ns as f64),
    ]);
    counters
}

/// What a run of `Timings::Windows` kept.
fn windows_note(app: &AppReport, window: Duration) -> String {
    format!(
        "a long run: Δt kept per {:.0} s window ({} windows, {} lost) and over the run, \
         the timings of the last {} packages only, the synth cell's CPU time per cycle of its \
         last {} cycles",
        window.as_secs_f64(),
        app.windows.len(),
        app.lost_windows,
        app.network.timings.len(),
        app.cycle_cpu.count()
    )
}

/// Δt over time in a long run: the worst of each window, at its start.
fn worst_per_window(windows: &[WindowSummary], window: Duration) -> Series {
    let mut series = Series::with_capacity(RESPONSE_METRIC, "us", windows.len());
    for w in windows.iter().filter(|w| w.packages > 0) {
        series.push(
            w.index as f64 * window.as_secs_f64(),
            w.max_ns as f64 / 1000.0,
        );
    }
    series
}

/// Δt over time: the worst of each [`SERIES_BUCKET_NS`].
fn worst_per_bucket(timings: &[tessera_services::network::PackageTiming]) -> Series {
    let Some(first) = timings.first() else {
        return Series::with_capacity(RESPONSE_METRIC, "us", 0);
    };
    let span = timings
        .last()
        .map_or(0, |l| l.t1_ns.saturating_sub(first.t1_ns));
    let mut series = Series::with_capacity(
        RESPONSE_METRIC,
        "us",
        (span / SERIES_BUCKET_NS) as usize + 1,
    );
    let mut bucket = (0u64, 0u64);
    for t in timings {
        let index = t.t1_ns.saturating_sub(first.t1_ns) / SERIES_BUCKET_NS;
        if index != bucket.0 {
            series.push(bucket.0 as f64 * 0.1, bucket.1 as f64 / 1000.0);
            bucket = (index, 0);
        }
        bucket.1 = bucket.1.max(t.response_ns());
    }
    series.push(bucket.0 as f64 * 0.1, bucket.1 as f64 / 1000.0);
    series
}

/// `[subject] kind = "music"`.
pub(crate) struct Kind;

impl crate::subject::contract::Subject for Kind {
    fn runs(&self, scenario: &Scenario, _config: &Configuration) -> bool {
        matches!(scenario.subject, Subject::Music(_))
    }

    fn start(
        &self,
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<Box<dyn Running>, String> {
        Ok(Box::new(MusicRun::start(scenario, config)?))
    }
}

impl Running for MusicRun {
    fn release(&mut self, t0: u64) -> Result<(), String> {
        MusicRun::release(self, t0)
    }

    fn watched(&self) -> Vec<Watched> {
        self.started.watched()
    }

    fn stop(self: Box<Self>, _notes: &mut Vec<String>) -> Box<dyn Stopped> {
        Box::new(self.finish())
    }
}

impl Stopped for MusicData {
    fn measure(self: Box<Self>, scenario: &Scenario, _t0: u64) -> Measured {
        metrics(*self, scenario.warmup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_services_counts_are_counters() {
        let report = NetworkReport {
            datagrams: 4000,
            packages: 1000,
            answered: 998,
            dropped_packets: 3,
            packages_lost: 2,
            cpu_ns: 5_000_000,
            socket_wait_total_ns: 8_000_000,
            socket_wait_max_ns: 40_000,
            ..NetworkReport::default()
        };
        let counters = network_counters(&report);
        let value = |name: &str| counters.iter().find(|c| c.name == name).map(|c| c.value);
        assert_eq!(value("network packages handed over"), Some(1000.0));
        assert_eq!(value("network datagrams lost"), Some(3.0));
        assert_eq!(
            value("network packages without room in the synth cell"),
            Some(2.0)
        );
        assert_eq!(value("network CPU per package"), Some(5.0));
        assert_eq!(value("network socket wait mean"), Some(2.0));
        assert_eq!(value("network socket wait max"), Some(40.0));
    }
}
