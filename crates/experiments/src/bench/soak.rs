//! The long run (the seed's live demonstration, for an hour): the demo's
//! configuration with Group 2 — the music application in its cells under
//! the video players, the GUI and the EP benchmark (best-effort without
//! CAP_SYS_NICE) — run without a break for the minutes asked, and sampled
//! once a minute: the resident memory (VmRSS) and open file descriptors of
//! every tessera process (this one, whatever it started, any other running
//! the tessera binary, e.g. a daemon), and the application's Δt in that
//! minute (misses, p99, max). results.json is rewritten after every minute
//! (an interrupted run keeps what it measured, and [`rewrite_report`]
//! reports it); at the end come the report
//! ([`report`]: README.md with the table and the verdict against the goals,
//! plots) and the configuration's usual results and report in `run/`.
//!
//! The application keeps Δt per minute (`Timings::Windows`), the emulator
//! a ring of its packages' send times, the engine a few seconds of profile:
//! nothing they keep grows with the run, so what the samples show is what
//! leaks.
//!
//! Owns the sampling, the soak's results and their verdict. It must never
//! leave a cell, a thread or a process behind: everything started ends in
//! [`Live::finish`], error or not.

pub mod report;
mod results;

pub use results::*;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tessera_broker::{BrokerError, ErrorCode, Session};
use tessera_measure::{ConfigurationResult, MachineInfo, RunResults};
use tessera_music::app::DEADLINE;
use tessera_music::windows::WindowSummary;
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns};
use tessera_sys::proc::{self, Pid};
use tessera_workloads::{ep, hog, LoadReport, LoadThreads};

use crate::cells::Cells;
use crate::cells::{cell_name, setup_for};
use crate::interference::load_window;
use crate::interference::media::{load_counters, Media};
use crate::subject::music::{self, MusicRun};
use tessera_scenario::{Configuration, LoadKind, Scenario};

/// A minute's samples are taken this long after the minute's end, so that
/// its Δt window has closed (a window closes when a package of the next
/// one is answered).
const GRACE: Duration = Duration::from_secs(2);
/// How often the progress callback is called between samples.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Time between setting everything up and releasing it.
const RELEASE_DELAY: Duration = Duration::from_millis(50);
/// A process more than this many parents below this one is not looked for.
const MAX_DEPTH: usize = 64;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub minutes: u32,
    pub out_dir: PathBuf,
    /// Whether cells can be created (CAP_SYS_NICE): without, the demo's
    /// Group 2 configuration runs best-effort, labelled so.
    pub privileged: bool,
}

/// Where the run stands, for a progress line.
pub struct Progress<'a> {
    pub elapsed: Duration,
    pub total: Duration,
    pub minutes: u32,
    /// The last sample taken, and whether it was taken just now.
    pub sample: Option<&'a Sample>,
    pub new_sample: bool,
    /// The last minute of Δt summarised.
    pub minute: Option<&'a MinuteDt>,
    pub misses: u64,
}

pub struct Outcome {
    pub results: SoakResults,
    /// The configuration's usual results (Δt over the run, the emulator,
    /// the video players and the GUI), written with their report in
    /// `<out>/run`.
    pub run: RunResults,
    pub report_dir: PathBuf,
}

fn err(message: impl Into<String>) -> BrokerError {
    BrokerError::new(ErrorCode::Experiment, message, "")
}

/// The demo's configuration with Group 2 (the cells', or its best-effort
/// form without CAP_SYS_NICE) from the shipped §4.1 scenario, measured for
/// `minutes` after the scenario's warm-up.
pub fn scenario(minutes: u32, privileged: bool) -> Result<Scenario, String> {
    let mut scenario = music::seed_scenario(music::SEED_SECONDS, privileged)?;
    let index = scenario
        .configurations
        .iter()
        .position(|c| !c.interference.is_empty())
        .ok_or("the shipped §4.1 scenario has no configuration with Group 2")?;
    let config = scenario.configurations.swap_remove(index);
    scenario.name = format!("soak: {} for {minutes} min", scenario.name);
    scenario.baseline = Some(config.name.clone());
    scenario.configurations = vec![config];
    scenario.duration = Duration::from_secs(u64::from(minutes) * 60);
    Ok(scenario)
}

/// Runs the soak and writes its results and report into `options.out_dir`.
pub fn run(options: &Options, mut progress: impl FnMut(&Progress)) -> Result<Outcome, BrokerError> {
    let scenario = scenario(options.minutes, options.privileged).map_err(err)?;
    let config = &scenario.configurations[0];
    let dir = &options.out_dir;
    std::fs::create_dir_all(dir).map_err(|e| err(format!("create {}: {e}", dir.display())))?;
    let mut results = SoakResults {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        started_at: tessera_measure::results::rfc3339_utc(std::time::SystemTime::now()),
        machine: MachineInfo::detect(),
        scenario: scenario.name.clone(),
        configuration: config.name.clone(),
        minutes: options.minutes,
        warmup_s: scenario.warmup.as_secs_f64(),
        deadline_us: DEADLINE.as_nanos() as f64 / 1000.0,
        rss_goal_kib: RSS_GOAL_KIB,
        finished: false,
        samples: Vec::with_capacity(options.minutes as usize + 1),
        minutes_dt: Vec::with_capacity(options.minutes as usize + 2),
        notes: Vec::new(),
        verdict: verdict(&[], &[]),
    };
    // Real-time threads must not page-fault: lock the memory, as `tessera
    // run` does. Locked, RSS is all the process has allocated.
    let locked = tessera_sys::mem::lock_all_memory();
    if let Err(e) = &locked {
        results.notes.push(format!("memory not locked: {e}"));
    }
    let mut cells = Cells::default();
    let outcome = create_cells(&scenario, config, &mut cells).and_then(|()| {
        let machine = tessera_measure::machine::MachineWatch::start();
        let mut live = Live::default();
        let t0 = live.start(&scenario, config);
        let driven = t0.and_then(|t0| {
            let save = |r: &SoakResults| r.save(&dir.join("results.json"));
            drive(&scenario, &mut live, t0, &mut results, save, &mut progress).map(|()| t0)
        });
        let finished = live.finish();
        let t0 = driven?;
        let (mut configuration, windows) = collect(&scenario, config, t0, finished);
        let taken = machine.taken();
        configuration.notes.extend(taken.note());
        configuration.counters.extend(taken.counters());
        Ok((configuration, windows))
    });
    let destroyed = cells.destroy();
    if locked.is_ok() {
        let _ = tessera_sys::mem::unlock_all_memory();
    }
    let (mut configuration, windows) = outcome.map_err(err)?;
    configuration.notes.extend(destroyed);
    results.minutes_dt = windows.iter().map(MinuteDt::from).collect();
    results.notes.extend(configuration.notes.iter().cloned());
    results.finished = true;
    results.judge();
    results
        .save(&dir.join("results.json"))
        .map_err(|e| err(format!("results.json: {e}")))?;
    let mut run = RunResults::start(scenario.name.clone());
    run.description = scenario.description.clone();
    run.duration_s = scenario.duration.as_secs_f64();
    run.warmup_s = scenario.warmup.as_secs_f64();
    run.baseline = scenario.baseline.clone();
    run.configurations.push(configuration);
    crate::runner::write(&run, &dir.join("run"))?;
    report::write(&results, Some(&run), dir).map_err(err)?;
    Ok(Outcome {
        results,
        run,
        report_dir: dir.clone(),
    })
}

fn create_cells(
    scenario: &Scenario,
    config: &Configuration,
    cells: &mut Cells,
) -> Result<(), String> {
    let mut session = Session::connect().map_err(|e| e.to_string())?;
    for name in config.cells() {
        let spec = scenario.cell(name).expect("validated");
        let request = tessera_policy::CellRequest {
            name: cell_name(name),
            ..spec.request.clone()
        };
        cells
            .create(&mut session, request)
            .map_err(|e| format!("cell {name:?}: {e}"))?;
    }
    Ok(())
}

/// The application, the guis and videos, the load threads.
#[derive(Default)]
struct Live {
    music: Option<MusicRun>,
    media: Media,
    loads: Vec<LoadThreads>,
}

/// What they left.
struct Finished {
    music: Option<music::MusicData>,
    media: crate::interference::media::MediaData,
    loads: Vec<LoadReport>,
}

impl Live {
    /// Sets everything up and releases it; returns t0, the release.
    fn start(&mut self, scenario: &Scenario, config: &Configuration) -> Result<u64, String> {
        self.music = Some(MusicRun::start_with(scenario, config, music::windowed())?);
        self.media.start(scenario, config)?;
        for (name, sched) in &config.interference {
            let load = scenario.load(name).expect("validated");
            let window = load_window(load, scenario.total());
            let setup = setup_for(sched, scenario.core);
            let hook = |_| Box::new(setup.clone()) as tessera_workloads::Setup;
            let io_error = |e: std::io::Error| format!("{name}: {e}");
            let threads = match &load.kind {
                LoadKind::Ep { threads } => ep::spawn(name, *threads, window, hook),
                LoadKind::Hog { threads, load } => {
                    let spec = hog::HogSpec {
                        name: name.clone(),
                        threads: *threads,
                        load: *load,
                        window,
                    };
                    hog::spawn(&spec, hook)
                }
                // Started by Media::start.
                LoadKind::Gui { .. } | LoadKind::Video { .. } => continue,
                other => return Err(format!("{name}: the soak runs no {other:?} load")),
            };
            self.loads.push(threads.map_err(io_error)?);
        }
        let t0 = monotonic_ns() + RELEASE_DELAY.as_nanos() as u64;
        if let Some(m) = &mut self.music {
            m.release(t0)?;
        }
        self.loads.iter().for_each(|l| l.start(t0));
        self.media.release(t0);
        Ok(t0)
    }

    /// The windows closed since the last call.
    fn windows(&mut self) -> Vec<WindowSummary> {
        self.music
            .as_mut()
            .map(MusicRun::windows)
            .unwrap_or_default()
    }

    /// Stops and joins everything, whatever state it is in.
    fn finish(self) -> Finished {
        self.loads.iter().for_each(LoadThreads::stop);
        let media = self.media.finish();
        let music = self.music.map(MusicRun::finish);
        let loads = self.loads.into_iter().map(LoadThreads::join).collect();
        Finished {
            music,
            media,
            loads,
        }
    }
}

/// The release time of each sample: the end of the warm-up, then each
/// minute's end (plus [`GRACE`]), the last at the run's end.
fn sample_at(scenario: &Scenario, t0: u64, minute: u32) -> u64 {
    let warmup = t0 + scenario.warmup.as_nanos() as u64;
    match minute {
        0 => warmup,
        m => (warmup + (Duration::from_secs(60 * u64::from(m)) + GRACE).as_nanos() as u64)
            .min(t0 + scenario.total().as_nanos() as u64),
    }
}

/// Samples each minute until the run's end, saving the results each time.
fn drive(
    scenario: &Scenario,
    live: &mut Live,
    t0: u64,
    results: &mut SoakResults,
    save: impl Fn(&SoakResults) -> Result<(), String>,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(), String> {
    let total = scenario.total();
    let tick = PROGRESS_EVERY.as_nanos() as u64;
    let mut minute = 0;
    let mut misses = 0;
    while minute <= results.minutes {
        let due = sample_at(scenario, t0, minute);
        let now = monotonic_ns();
        let new_sample = now >= due;
        if new_sample {
            let elapsed_s = now.saturating_sub(t0) as f64 / 1e9;
            results.samples.push(sample(minute, elapsed_s));
            for w in live.windows() {
                misses += w.misses;
                results.minutes_dt.push(MinuteDt::from(&w));
            }
            results.judge();
            save(results)?;
            minute += 1;
        }
        progress(&Progress {
            elapsed: Duration::from_nanos(now.saturating_sub(t0)),
            total,
            minutes: results.minutes,
            sample: results.samples.last(),
            new_sample,
            minute: results.minutes_dt.last(),
            misses,
        });
        if !new_sample {
            sleep_until_monotonic_ns(due.min(now + tick));
        }
    }
    Ok(())
}

/// Writes the report of the soak in `dir` again from its results.json (and
/// run/results.json, if the run got that far): a run cut short has only
/// its results, rewritten each minute.
pub fn rewrite_report(dir: &Path) -> Result<SoakResults, String> {
    let mut results = SoakResults::load(&dir.join("results.json"))?;
    // Judged again: the verdict follows this build's criteria.
    results.judge();
    results.save(&dir.join("results.json"))?;
    let run_file = dir.join("run").join("results.json");
    let run = match run_file.exists() {
        true => Some(RunResults::load(&run_file).map_err(|e| e.to_string())?),
        false => None,
    };
    report::write(&results, run.as_ref(), dir)?;
    Ok(results)
}

/// The configuration's usual metrics and notes (as `tessera run` reports
/// them), and every window of Δt.
fn collect(
    scenario: &Scenario,
    config: &Configuration,
    t0: u64,
    finished: Finished,
) -> (ConfigurationResult, Vec<WindowSummary>) {
    let mut notes = vec![format!(
        "the music application: {}; interference: {}",
        config
            .roles
            .iter()
            .map(|(r, s)| format!("{r} {}", s.describe()))
            .collect::<Vec<_>>()
            .join(", "),
        config
            .interference
            .iter()
            .map(|(n, s)| format!("{n} {}", s.describe()))
            .collect::<Vec<_>>()
            .join(", ")
    )];
    let mut metrics = Vec::new();
    let mut counters = Vec::new();
    let mut windows = Vec::new();
    if let Some(data) = finished.music {
        windows = data.windows();
        let music = music::metrics(data, scenario.warmup);
        metrics.extend(music.metrics);
        counters.extend(music.counters);
        notes.extend(music.notes);
    }
    let (media_metrics, media_counters, media_notes) =
        crate::interference::media::collect(&finished.media, scenario, t0);
    metrics.extend(media_metrics);
    counters.extend(media_counters);
    notes.extend(media_notes);
    for report in &finished.loads {
        counters.extend(load_counters(report));
        notes.push(report.describe());
    }
    let result = ConfigurationResult {
        labels: Default::default(),
        name: config.name.clone(),
        counters,
        notes,
        metrics,
        why: None,
    };
    (result, windows)
}

/// Every tessera process now: its RSS and open descriptors.
pub fn sample(minute: u32, elapsed_s: f64) -> Sample {
    let processes = tessera_processes()
        .into_iter()
        .filter_map(|(pid, name)| {
            Some(ProcessSample {
                pid,
                name,
                rss_kib: proc::resident_kib(pid).ok()?,
                fds: proc::open_fds(pid).ok()? as u64,
            })
        })
        .collect();
    Sample {
        minute,
        elapsed_s,
        processes,
    }
}

/// The processes to sample, each with its name, PID and relation to the
/// run: this one, every process it started (and theirs), and any other
/// that runs the tessera binary (a daemon, a service process).
pub fn tessera_processes() -> Vec<(Pid, String)> {
    let me = proc::current_pid();
    let pids = proc::all_pids().unwrap_or_default();
    let parents: HashMap<Pid, Pid> = pids
        .iter()
        .filter_map(|&p| Some((p, proc::parent_of(p).ok()?)))
        .collect();
    let below_me = |mut pid: Pid| {
        for _ in 0..MAX_DEPTH {
            match parents.get(&pid) {
                Some(&parent) if parent == me => return true,
                Some(&parent) if parent > 1 => pid = parent,
                _ => return false,
            }
        }
        false
    };
    pids.iter()
        .filter(|&&pid| !proc::is_kernel_thread(pid))
        .filter_map(|&pid| {
            let comm = proc::process_name(pid);
            let relation = match pid {
                _ if pid == me => "this run",
                _ if below_me(pid) => "started by this run",
                _ if runs_tessera(pid, &comm) => "another tessera process",
                _ => return None,
            };
            Some((pid, format!("{comm} {pid} ({relation})")))
        })
        .collect()
}

/// Whether a process runs the tessera binary (perhaps since replaced).
fn runs_tessera(pid: Pid, comm: &str) -> bool {
    comm == "tessera"
        || proc::executable(pid).is_ok_and(|exe| {
            exe.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.trim_end_matches(" (deleted)") == "tessera")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(minute: u32, processes: &[(&str, u64, u64)]) -> Sample {
        Sample {
            minute,
            elapsed_s: f64::from(minute) * 60.0,
            processes: processes
                .iter()
                .map(|&(name, rss_kib, fds)| ProcessSample {
                    pid: 1,
                    name: name.into(),
                    rss_kib,
                    fds,
                })
                .collect(),
        }
    }

    fn minute(minute: u64, misses: u64) -> MinuteDt {
        MinuteDt {
            minute,
            packages: 82_000,
            misses,
            sender_misses: 0,
            mean_us: 1000.0,
            p50_us: 1000.0,
            p99_us: 1200.0,
            p999_us: 1300.0,
            max_us: 1400.0,
        }
    }

    #[test]
    fn rss_growth_is_judged_per_process_from_its_first_sample_to_its_last() {
        let samples = [
            sample(0, &[("run", 100_000, 40)]),
            sample(1, &[("run", 100_800, 41), ("daemon", 5_000, 9)]),
            sample(2, &[("run", 101_000, 40), ("daemon", 7_000, 10)]),
        ];
        let v = verdict(&samples, &[]);
        let run = &v.processes[0];
        assert_eq!(
            (run.growth_kib, run.growth_after_first_minute_kib),
            (1_000, Some(200))
        );
        assert_eq!((run.peak_kib, run.peak_fds), (101_000, 41));
        assert!(run.rss_met && run.fds_flat);
        let daemon = &v.processes[1];
        assert_eq!((daemon.samples, daemon.growth_kib), (2, 2_000));
        assert!(!daemon.rss_met && !daemon.fds_flat);
        assert!(!v.rss_met && !v.fds_flat);
    }

    /// The trend of these misses, a minute each.
    fn trend_of(misses: &[u64]) -> MissTrend {
        let minutes: Vec<MinuteDt> = misses.iter().zip(1..).map(|(&m, i)| minute(i, m)).collect();
        miss_trend(&minutes.iter().collect::<Vec<_>>())
    }

    #[test]
    fn misses_rise_only_beyond_three_deviations() {
        let trend = trend_of(&[3, 0, 5, 1, 2, 4]);
        assert_eq!((trend.total, trend.most_in_a_minute), (15, 5));
        assert!(!trend.rising, "{trend:?}");
        let trend = trend_of(&[0, 1, 0, 10, 20, 30]);
        assert!(trend.rising && trend.slope > 5.0, "{trend:?}");
        assert_eq!(trend.second_half_per_minute, 20.0);
        let none = miss_trend(&[]);
        assert!(!none.rising && none.slope == 0.0);
    }

    #[test]
    fn bursts_of_misses_are_not_a_trend_beyond_their_own_spread() {
        // Rising by Poisson counts (350 more against 3 √1650 ≈ 122), but
        // the minutes spread by hundreds either way.
        let trend = trend_of(&[100, 400, 150, 500, 120, 380]);
        assert!(!trend.rising, "{trend:?}");
    }

    #[test]
    fn the_soak_runs_the_demos_configuration_with_group_2_for_the_minutes_asked() {
        for privileged in [true, false] {
            let s = scenario(60, privileged).unwrap();
            assert_eq!(s.configurations.len(), 1);
            let c = &s.configurations[0];
            assert!(
                c.interference.iter().any(|(n, _)| n == "video1"),
                "{}",
                c.name
            );
            assert_eq!(c.needs_privilege(), privileged, "{}", c.name);
            assert_eq!(s.duration, Duration::from_secs(3600));
            assert_eq!(s.warmup, Duration::from_secs(1));
        }
    }

    #[test]
    fn this_process_is_sampled() {
        let s = super::sample(0, 0.0);
        let me = s
            .processes
            .iter()
            .find(|p| p.pid == proc::current_pid())
            .expect("this process is a tessera process of its run");
        assert!(me.name.ends_with("(this run)") && me.rss_kib > 0 && me.fds >= 3);
    }
}
