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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tessera_broker::{BrokerError, ErrorCode, Session};
use tessera_measure::{ConfigurationResult, MachineInfo, RunResults};
use tessera_music::app::DEADLINE;
use tessera_music::windows::WindowSummary;
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns};
use tessera_sys::proc::{self, Pid};
use tessera_workloads::{ep, hog, LoadThreads};

use crate::cells::Cells;
use crate::cells::{cell_name, setup_for};
use crate::interference::load_window;
use crate::interference::media::Media;
use crate::subject::music::{self, MusicRun};
use tessera_scenario::{Configuration, LoadKind, Scenario};

/// The goal: no process's RSS grows by more than this over the run.
pub const RSS_GOAL_KIB: u64 = 1024;
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

/// One process at one sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessSample {
    pub pid: Pid,
    /// Its command name, PID and relation to the run, e.g.
    /// "tessera 4242 (this run)".
    pub name: String,
    pub rss_kib: u64,
    pub fds: u64,
}

/// Every tessera process, once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Minutes measured so far: 0 at the end of the warm-up.
    pub minute: u32,
    /// Seconds since the release.
    pub elapsed_s: f64,
    pub processes: Vec<ProcessSample>,
}

/// The application's Δt in one minute of the run (the packages that began
/// in it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MinuteDt {
    /// 1 for the first minute after the warm-up.
    pub minute: u64,
    pub packages: u64,
    pub misses: u64,
    /// Of the misses, those whose sender (the emulated SLABS) stalled
    /// mid-package.
    pub sender_misses: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl From<&WindowSummary> for MinuteDt {
    fn from(w: &WindowSummary) -> MinuteDt {
        let us = |ns: u64| ns as f64 / 1000.0;
        MinuteDt {
            minute: w.index + 1,
            packages: w.packages,
            misses: w.misses,
            sender_misses: w.sender_misses,
            mean_us: w.mean_ns / 1000.0,
            p50_us: us(w.p50_ns),
            p99_us: us(w.p99_ns),
            p999_us: us(w.p999_ns),
            max_us: us(w.max_ns),
        }
    }
}

/// One process over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessVerdict {
    pub name: String,
    /// Samples it was in.
    pub samples: usize,
    pub first_kib: u64,
    pub last_kib: u64,
    /// Last − first: the goal's measure.
    pub growth_kib: i64,
    /// Last − the sample after the first minute (start-up left out).
    pub growth_after_first_minute_kib: Option<i64>,
    pub peak_kib: u64,
    pub first_fds: u64,
    pub last_fds: u64,
    pub peak_fds: u64,
    /// `growth_kib` ≤ [`RSS_GOAL_KIB`].
    pub rss_met: bool,
    /// No more descriptors at the end than at the start.
    pub fds_flat: bool,
}

/// The misses per minute over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MissTrend {
    /// Minutes with Δt (the run's own, not a sliver after its end).
    pub minutes: usize,
    pub total: u64,
    pub most_in_a_minute: u64,
    /// Mean misses per minute of the first and of the last ⌊n/2⌋ minutes.
    pub first_half_per_minute: f64,
    pub second_half_per_minute: f64,
    /// Least-squares slope, misses per minute per minute.
    pub slope: f64,
    /// The second half had significantly more misses than the first: more
    /// than three standard deviations of the difference of the halves'
    /// sums, + 1. The deviation is the larger of two: the Poisson one
    /// (√ of both sums) and the one the minutes' own spread gives (√(n/2 ×
    /// (s₁² + s₂²)), Welch's): misses on a virtual machine come in bursts,
    /// far more spread than Poisson counts, and a Poisson test alone calls
    /// noise a trend.
    pub rising: bool,
}

/// The run against the goals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub processes: Vec<ProcessVerdict>,
    pub misses: MissTrend,
    /// Every process within [`RSS_GOAL_KIB`].
    pub rss_met: bool,
    pub fds_flat: bool,
    pub misses_flat: bool,
}

/// What the soak measured (results.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SoakResults {
    pub tool_version: String,
    pub started_at: String,
    pub machine: MachineInfo,
    pub scenario: String,
    pub configuration: String,
    /// Minutes asked for.
    pub minutes: u32,
    pub warmup_s: f64,
    pub deadline_us: f64,
    pub rss_goal_kib: u64,
    /// Whether the run got to its end (false while it runs).
    pub finished: bool,
    pub samples: Vec<Sample>,
    pub minutes_dt: Vec<MinuteDt>,
    pub notes: Vec<String>,
    pub verdict: Verdict,
}

impl SoakResults {
    pub fn load(path: &Path) -> Result<SoakResults, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn save(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The verdict of the samples and minutes so far.
    fn judge(&mut self) {
        let minutes: Vec<&MinuteDt> = self
            .minutes_dt
            .iter()
            .filter(|m| m.minute <= u64::from(self.minutes))
            .collect();
        self.verdict = verdict(&self.samples, &minutes);
    }
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
        let steal = tessera_measure::machine::StealWatch::start();
        let mut live = Live::default();
        let t0 = live.start(&scenario, config);
        let driven = t0.and_then(|t0| {
            let save = |r: &SoakResults| r.save(&dir.join("results.json"));
            drive(&scenario, &mut live, t0, &mut results, save, &mut progress).map(|()| t0)
        });
        let finished = live.finish();
        let t0 = driven?;
        let (mut configuration, windows) = collect(&scenario, config, t0, finished);
        configuration.notes.extend(steal.note());
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
    notes: Vec<String>,
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
        let notes = self
            .loads
            .into_iter()
            .map(|l| l.join().describe())
            .collect();
        Finished {
            music,
            media,
            notes,
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
        let (music_metrics, music_counters, music_notes) = music::metrics(data, scenario.warmup);
        metrics.extend(music_metrics);
        counters.extend(music_counters);
        notes.extend(music_notes);
    }
    let (media_metrics, media_counters, media_notes) =
        crate::interference::media::collect(&finished.media, scenario, t0);
    metrics.extend(media_metrics);
    counters.extend(media_counters);
    notes.extend(media_notes);
    notes.extend(finished.notes);
    let result = ConfigurationResult {
        name: config.name.clone(),
        counters,
        notes,
        metrics,
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

/// The samples and minutes against the goals.
pub fn verdict(samples: &[Sample], minutes: &[&MinuteDt]) -> Verdict {
    let mut names: Vec<&str> = Vec::new();
    for p in samples.iter().flat_map(|s| &s.processes) {
        if !names.contains(&p.name.as_str()) {
            names.push(&p.name);
        }
    }
    let processes: Vec<ProcessVerdict> = names
        .into_iter()
        .filter_map(|name| process_verdict(name, samples))
        .collect();
    let misses = miss_trend(minutes);
    Verdict {
        rss_met: processes.iter().all(|p| p.rss_met),
        fds_flat: processes.iter().all(|p| p.fds_flat),
        misses_flat: !misses.rising,
        processes,
        misses,
    }
}

fn process_verdict(name: &str, samples: &[Sample]) -> Option<ProcessVerdict> {
    let seen: Vec<(u32, &ProcessSample)> = samples
        .iter()
        .filter_map(|s| Some((s.minute, s.processes.iter().find(|p| p.name == name)?)))
        .collect();
    let (_, first) = *seen.first()?;
    let (_, last) = *seen.last()?;
    let growth = |from: &ProcessSample| last.rss_kib as i64 - from.rss_kib as i64;
    let growth_kib = growth(first);
    Some(ProcessVerdict {
        name: name.to_string(),
        samples: seen.len(),
        first_kib: first.rss_kib,
        last_kib: last.rss_kib,
        growth_kib,
        growth_after_first_minute_kib: seen.iter().find(|(m, _)| *m == 1).map(|(_, p)| growth(p)),
        peak_kib: seen.iter().map(|(_, p)| p.rss_kib).max().unwrap_or(0),
        first_fds: first.fds,
        last_fds: last.fds,
        peak_fds: seen.iter().map(|(_, p)| p.fds).max().unwrap_or(0),
        rss_met: growth_kib <= RSS_GOAL_KIB as i64,
        fds_flat: last.fds <= first.fds,
    })
}

fn miss_trend(minutes: &[&MinuteDt]) -> MissTrend {
    let n = minutes.len();
    let counts: Vec<f64> = minutes.iter().map(|m| m.misses as f64).collect();
    let half = n / 2;
    let per_minute = |c: &[f64]| match c.len() {
        0 => 0.0,
        len => c.iter().sum::<f64>() / len as f64,
    };
    let (first, second) = (&counts[..half], &counts[n - half..]);
    let (sum_first, sum_second) = (first.iter().sum::<f64>(), second.iter().sum::<f64>());
    MissTrend {
        minutes: n,
        total: minutes.iter().map(|m| m.misses).sum(),
        most_in_a_minute: minutes.iter().map(|m| m.misses).max().unwrap_or(0),
        first_half_per_minute: per_minute(first),
        second_half_per_minute: per_minute(second),
        slope: slope(&counts),
        rising: sum_second - sum_first > 3.0 * deviation_of_difference(first, second) + 1.0,
    }
}

/// The standard deviation of the difference of two halves' sums (see
/// [`MissTrend::rising`]).
fn deviation_of_difference(first: &[f64], second: &[f64]) -> f64 {
    let sum = |c: &[f64]| c.iter().sum::<f64>();
    let poisson = sum(first) + sum(second);
    let spread = first.len() as f64 * (variance(first) + variance(second));
    poisson.max(spread).sqrt()
}

/// The sample variance (0 for fewer than 2 values).
fn variance(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
}

/// Least-squares slope of `values` against their index (0 for fewer than 2).
fn slope(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    if values.len() < 2 {
        return 0.0;
    }
    let mean_x = (n - 1.0) / 2.0;
    let mean_y = values.iter().sum::<f64>() / n;
    let (num, den) = values
        .iter()
        .enumerate()
        .fold((0.0, 0.0), |(num, den), (i, y)| {
            let dx = i as f64 - mean_x;
            (num + dx * (y - mean_y), den + dx * dx)
        });
    num / den
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
