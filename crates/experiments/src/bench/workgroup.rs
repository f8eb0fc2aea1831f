//! `tessera bench workgroup` (issue 25, deliverable 3): a C plug-in host —
//! one callback thread and three workers processing a synthetic chain whose
//! work steps from 30 % to 70 % of the period and back every few seconds
//! ([`host`]) — under seed 001 §4.4's interference (two rt-app SCHED_FIFO
//! tasks, 3 ms every 10 ms, at the host's priority, and `stress-ng --cpu
//! 2`), in four configurations one after the other in one run: its threads
//! in a workgroup with per-cycle feedback (libtessera), as SCHED_FIFO
//! threads under the guard's /proc sampling, under a fixed 95 % share, and
//! plain SCHED_FIFO. Each configuration has a daemon of its own
//! ([`PrivateDaemon`]); every process started is stopped by its PID.
//!
//! This module owns the run. [`cycles`] reads the host's records and
//! computes the figures, [`results`] holds them, [`report`] writes
//! workgroup.json, the per-cycle CSVs, the plot and README.md. It must
//! never judge a result pass/fail (the report states the goals beside the
//! figures), nor run two configurations at once.

mod cycles;
mod host;
mod report;
mod results;

pub use report::summary_table;
pub use results::*;

use crate::harness::daemon::PrivateDaemon;
use crate::harness::guard::{start_guard_of, GuardFiles, Guarded};
use crate::harness::servers::{self, OwnedChild};
use crate::scratch::Scratch;
use cycles::{Cycle, HostRecord};
use host::{Host, Mode};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tessera_policy::rap::RapConfig;
use tessera_sys::clock::monotonic_ns;
use tessera_workloads::external::{self, ExternalLoad, RtAppPolicy, RtAppTask};
use tessera_workloads::Window;

/// Between starting the host and its first cycle: the guard finds its
/// threads, the interference starts.
const LEAD: Duration = Duration::from_secs(2);
/// The host may take this much longer than its cycles to write its records.
const HOST_MARGIN: Duration = Duration::from_secs(10);
/// The daemon's monitor interval.
const MONITOR_INTERVAL: Duration = Duration::from_secs(1);
/// The workgroup's name.
const WORKGROUP: &str = "bench-workgroup";
/// How the interval calls' system calls are known.
const SYSCALLS: &str = "interval_start and interval_finish make 1 system call per cycle \
     together (interval_finish reads the thread's CPU clock, a cycle being measured from the \
     last one's finish; CLOCK_MONOTONIC is the vDSO's): counted with strace -c by \
     libtessera's test `syscalls` (cargo test -p libtessera --test c_programs)";

/// The run's seed 001 §4.4 interference, in words.
const INTERFERENCE: &str = "two rt-app tasks at SCHED_FIFO of the host's priority, each 3 ms \
     every 10 ms, and stress-ng --cpu 2 (SCHED_OTHER), from the first cycle; nothing pinned";

pub struct Outcome {
    pub results: WorkgroupResults,
    pub report: PathBuf,
}

/// Runs the four configurations and writes the report into the options'
/// directory — also when one fails or `interrupted` says so, then with what
/// was measured and why it stopped, and returns that error.
pub fn run(
    options: &Options,
    mut progress: impl FnMut(&str),
    interrupted: &dyn Fn() -> bool,
) -> Result<Outcome, String> {
    options.check()?;
    check_programs()?;
    let host = Host::compile()?;
    let started = Instant::now();
    let mut results = WorkgroupResults::start(options);
    let mut series: Vec<(Config, Vec<Cycle>)> = Vec::new();
    for config in Config::ALL {
        if interrupted() {
            results.stopped = Some("interrupted".into());
            break;
        }
        progress(&format!(
            "{}: {} s ({})",
            config.name(),
            options.seconds,
            config.scheduling()
        ));
        match run_configuration(config, &host, options, interrupted) {
            Ok((result, cycles)) => {
                progress(&format!(
                    "{}: {} of {} cycles missed",
                    config.name(),
                    result.missed,
                    result.cycles
                ));
                results.configs.push(result);
                series.push((config, cycles));
            }
            Err(e) => {
                results.stopped = Some(format!("{}: {e}", config.name()));
                break;
            }
        }
    }
    results.total_s = started.elapsed().as_secs_f64();
    let report = report::write(&results, &series, &options.out_dir)?;
    match &results.stopped {
        Some(why) => Err(format!("{why} (what was measured: {})", report.display())),
        None => Ok(Outcome { results, report }),
    }
}

/// Refuses at once what would make every configuration fail; calibrates
/// rt-app, once.
fn check_programs() -> Result<(), String> {
    if !tessera_sys::caps::is_root() {
        return Err(
            "needs root: the host runs SCHED_FIFO, the workgroup and the guard \
                    reserve SCHED_DEADLINE (run it with sudo)"
                .into(),
        );
    }
    for (program, package) in [
        ("cc", "gcc"),
        ("rt-app", "rt-app"),
        ("stress-ng", "stress-ng"),
    ] {
        if !tessera_sys::process::installed(program) {
            return Err(format!(
                "{program} is not installed (Debian: apt-get install {package})"
            ));
        }
    }
    if !servers::is_program(&servers::program_beside_us("tessera")) {
        return Err("the `tessera` binary is not built: cargo build -p tessera-cli".into());
    }
    external::rt_app_calibration(&std::env::temp_dir()).map(drop)
}

/// One configuration: a daemon, the host, the guard if the configuration
/// has one, the interference from the first cycle; the host's records read
/// once it ends.
fn run_configuration(
    config: Config,
    host: &Host,
    options: &Options,
    interrupted: &dyn Fn() -> bool,
) -> Result<(ConfigResult, Vec<Cycle>), String> {
    let daemon = PrivateDaemon::start(MONITOR_INTERVAL, &RapConfig::default())?;
    let scratch = Scratch::create("tessera-wg-bench")?;
    let records = scratch.file("cycles.tsv");
    let run = Duration::from_secs(options.seconds);
    let t0 = monotonic_ns() + LEAD.as_nanos() as u64;
    let mode = match config {
        Config::Workgroup => Mode::Workgroup,
        Config::Guard | Config::Fixed95 | Config::Fifo => Mode::Fifo,
    };
    let mut child = host.start(mode, WORKGROUP, t0, options, &records, daemon.dir())?;
    let guard = match guard_settings(config) {
        Some(settings) => {
            let files = GuardFiles {
                log: scratch.file("guard.log"),
                record: Some(scratch.file("guard.csv")),
            };
            let guarded = Guarded::Process {
                pid: child.pid(),
                period: Duration::from_nanos(PERIOD_NS),
            };
            Some(start_guard_of(
                guarded,
                &settings,
                &files,
                LEAD + run,
                Some(daemon.dir()),
            )?)
        }
        None => None,
    };
    let loads = interference()?;
    loads.iter().for_each(|l| l.start(t0));
    let ended = await_host(&mut child, t0, run, interrupted);
    loads.iter().for_each(ExternalLoad::stop);
    let mut notes: Vec<String> = loads.into_iter().map(|l| l.join().describe()).collect();
    if let Some(mut guard) = guard {
        notes.push(guard.process.stop());
    }
    notes.extend(daemon.stop());
    ended.map_err(|e| format!("{e}: {}", servers::log_tail(&host.log())))?;
    let text = std::fs::read_to_string(&records)
        .map_err(|e| format!("the host's records {}: {e}", records.display()))?;
    let record = HostRecord::parse(&text)?;
    let step_cycles = options.step_seconds * 1_000_000_000 / PERIOD_NS;
    let result = cycles::figures(config, &record, step_cycles, notes);
    Ok((result, record.cycles()))
}

/// The guard's arguments in `config`, if it has one.
fn guard_settings(config: Config) -> Option<Vec<String>> {
    let rt_only = "--rt-only".to_string();
    match config {
        Config::Guard => Some(vec![rt_only]),
        Config::Fixed95 => Some(vec![rt_only, "--fixed".into(), "95".into()]),
        Config::Workgroup | Config::Fifo => None,
    }
}

/// The §4.4 interference, waiting for its start.
fn interference() -> Result<Vec<ExternalLoad>, String> {
    let no_setup = || -> external::ProcessSetup { Box::new(|_| Ok(())) };
    let mut loads = Vec::new();
    for name in ["rt-app-1", "rt-app-2"] {
        let task = RtAppTask {
            name: name.into(),
            period: Duration::from_millis(10),
            run: Duration::from_millis(3),
            policy: RtAppPolicy::Fifo(PRIORITY),
        };
        let spec = external::rt_app(name, &[task], Window::always(), &std::env::temp_dir())?;
        loads.push(ExternalLoad::spawn(spec, no_setup())?);
    }
    let stress = external::stress_ng("stress-ng", &["--cpu".into(), "2".into()], Window::always());
    loads.push(ExternalLoad::spawn(stress, no_setup())?);
    Ok(loads)
}

/// Waits for the host to run its cycles and write its records.
fn await_host(
    child: &mut OwnedChild,
    t0: u64,
    run: Duration,
    interrupted: &dyn Fn() -> bool,
) -> Result<(), String> {
    let lead = Duration::from_nanos(t0.saturating_sub(monotonic_ns()));
    let give_up = Instant::now() + lead + run + HOST_MARGIN;
    loop {
        if let Some(status) = child.wait_until(Instant::now() + Duration::from_millis(200)) {
            return match status.success() {
                true => Ok(()),
                false => Err(format!("the host failed ({status})")),
            };
        }
        if interrupted() {
            return Err("interrupted".into());
        }
        if Instant::now() >= give_up {
            return Err("the host did not end in time".into());
        }
    }
}

impl WorkgroupResults {
    fn start(options: &Options) -> WorkgroupResults {
        WorkgroupResults {
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            started_at: tessera_measure::results::rfc3339_utc(std::time::SystemTime::now()),
            machine: tessera_measure::MachineInfo::detect().describe(),
            period_ns: PERIOD_NS,
            threads: THREADS,
            low_pct: LOW_PCT,
            high_pct: HIGH_PCT,
            seconds: options.seconds,
            step_seconds: options.step_seconds,
            interference: INTERFERENCE.to_string(),
            syscalls: SYSCALLS.to_string(),
            configs: Vec::new(),
            total_s: 0.0,
            stopped: None,
        }
    }
}
