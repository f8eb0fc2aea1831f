//! External load generators, when installed: Debian's `rt-app` (periodic
//! real-time tasks from a JSON description) and `stress-ng` (CPU, memory,
//! I/O stressors). Each runs as a child process in a process group of its
//! own, started and stopped on the experiment's timeline; stopping ends the
//! whole group (SIGTERM, then SIGKILL after [`GRACE`]).
//!
//! It must never leave a process behind, and never choose a scheduling
//! policy itself: rt-app's policy comes from the caller's [`RtAppPolicy`],
//! and the caller's setup hook gets the child's pid (e.g. to join a cell).

use crate::threads::{Window, POLL};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns};
use tessera_sys::proc::Pid;
use tessera_sys::process::{installed, signal_group};

/// How long a generator may take to exit after SIGTERM.
pub const GRACE: Duration = Duration::from_secs(3);

/// The setup of an external process, given its pid once it started.
pub type ProcessSetup = Box<dyn FnOnce(Pid) -> Result<(), String> + Send>;

#[derive(Debug, Clone, PartialEq)]
pub struct ExternalSpec {
    pub name: String,
    pub program: String,
    pub args: Vec<String>,
    pub window: Window,
    /// Files written for this run of the generator (its configuration):
    /// removed once it has ended.
    pub files: Vec<PathBuf>,
}

/// What became of the external generator.
#[derive(Debug, Clone, PartialEq)]
pub struct ExternalReport {
    pub name: String,
    pub command: String,
    pub ran_s: f64,
    /// How it ended, e.g. "stopped (signal 15)" or "exit status 0".
    pub ending: String,
    pub error: Option<String>,
}

impl ExternalReport {
    pub fn describe(&self) -> String {
        let mut text = format!(
            "{}: `{}` ran {:.1} s, {}",
            self.name, self.command, self.ran_s, self.ending
        );
        if let Some(e) = &self.error {
            text.push_str(&format!("; error: {e}"));
        }
        text
    }
}

/// An external generator waiting for its window.
pub struct ExternalLoad {
    stop: Arc<AtomicBool>,
    start: Option<mpsc::Sender<u64>>,
    handle: JoinHandle<ExternalReport>,
}

impl ExternalLoad {
    /// Prepares the generator; it starts at its window's start after
    /// [`ExternalLoad::start`]. Refused at once if the program is missing.
    pub fn spawn(spec: ExternalSpec, setup: ProcessSetup) -> Result<ExternalLoad, String> {
        if !installed(&spec.program) {
            return Err(format!(
                "{} is not installed (Debian: apt-get install {})",
                spec.program, spec.program
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (start, start_rx) = mpsc::channel::<u64>();
        let handle = std::thread::Builder::new()
            .name(format!("ext-{}", spec.name).chars().take(15).collect())
            .spawn(move || {
                let report = supervise(&spec, setup, start_rx, &flag);
                for file in &spec.files {
                    let _ = std::fs::remove_file(file);
                }
                report
            })
            .map_err(|e| format!("start a supervisor thread: {e}"))?;
        Ok(ExternalLoad {
            stop,
            start: Some(start),
            handle,
        })
    }

    pub fn start(&self, t0_ns: u64) {
        if let Some(s) = &self.start {
            let _ = s.send(t0_ns);
        }
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Waits until the generator's window ended and its group is gone.
    pub fn join(mut self) -> ExternalReport {
        self.start = None;
        self.handle.join().unwrap_or_else(|_| ExternalReport {
            name: "?".into(),
            command: String::new(),
            ran_s: 0.0,
            ending: "supervisor panicked".into(),
            error: Some("the supervisor thread panicked".into()),
        })
    }
}

fn supervise(
    spec: &ExternalSpec,
    setup: ProcessSetup,
    start: mpsc::Receiver<u64>,
    stop: &AtomicBool,
) -> ExternalReport {
    let mut report = ExternalReport {
        name: spec.name.clone(),
        command: std::iter::once(spec.program.as_str())
            .chain(spec.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        ran_s: 0.0,
        ending: "never started".into(),
        error: None,
    };
    let Ok(t0) = start.recv() else {
        return report;
    };
    let begin = t0 + spec.window.start_after.as_nanos() as u64;
    let end = spec
        .window
        .run_for
        .map_or(u64::MAX, |d| begin + d.as_nanos() as u64);
    while !stop.load(Ordering::Relaxed) && monotonic_ns() < begin {
        sleep_until_monotonic_ns(begin.min(monotonic_ns() + POLL.as_nanos() as u64));
    }
    if stop.load(Ordering::Relaxed) {
        return report;
    }
    use std::os::unix::process::CommandExt;
    let mut child = match Command::new(&spec.program)
        .args(&spec.args)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            report.error = Some(format!("start {}: {e}", spec.program));
            return report;
        }
    };
    let started = Instant::now();
    let pid = child.id() as Pid;
    if let Err(e) = setup(pid) {
        report.error = Some(format!("setup: {e}"));
        report.ending = end_group(&mut child, pid);
        return report;
    }
    report.ending = loop {
        match child.try_wait() {
            Ok(Some(status)) => break format!("{status}"),
            Ok(None) if stop.load(Ordering::Relaxed) || monotonic_ns() >= end => {
                break end_group(&mut child, pid)
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(e) => break format!("wait failed: {e}"),
        }
    };
    report.ran_s = started.elapsed().as_secs_f64();
    report
}

/// Ends every process of the child's group and reaps the child.
fn end_group(child: &mut Child, pgid: Pid) -> String {
    let _ = signal_group(pgid, false);
    let give_up = Instant::now() + GRACE;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break format!("stopped ({status})"),
            Ok(None) if Instant::now() < give_up => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = signal_group(pgid, true);
                break format!("killed after {GRACE:?}: {:?}", child.wait().ok());
            }
        }
    };
    // Workers that outlived their parent belong to the group still.
    let _ = signal_group(pgid, true);
    status
}

/// How rt-app schedules its threads (it sets the policy itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtAppPolicy {
    Other,
    Fifo(u32),
}

/// One periodic rt-app thread.
#[derive(Debug, Clone, PartialEq)]
pub struct RtAppTask {
    pub name: String,
    pub period: Duration,
    pub run: Duration,
    pub policy: RtAppPolicy,
}

/// rt-app's JSON description of `tasks` running for `seconds`, its `run`
/// events at `ns_per_loop` (see [`rt_app_calibration`]), its per-task logs
/// in `log_dir`. Written for Debian's rt-app 1.0: `ftrace` is a boolean
/// there, and it writes a log per task whatever `log_size` says.
pub fn rt_app_config(
    tasks: &[RtAppTask],
    seconds: u64,
    ns_per_loop: u64,
    log_dir: &Path,
) -> String {
    let tasks: serde_json::Map<String, serde_json::Value> = tasks
        .iter()
        .map(|t| {
            let mut task = serde_json::json!({
                "instance": 1,
                "loop": -1,
                "run": t.run.as_micros() as u64,
                "timer": { "ref": format!("timer-{}", t.name), "period": t.period.as_micros() as u64 },
            });
            let (policy, priority) = match t.policy {
                RtAppPolicy::Other => ("SCHED_OTHER", 0),
                RtAppPolicy::Fifo(p) => ("SCHED_FIFO", p),
            };
            task["policy"] = policy.into();
            if priority > 0 {
                task["priority"] = priority.into();
            }
            (t.name.clone(), task)
        })
        .collect();
    rt_app_use_case(tasks.into(), seconds, ns_per_loop.into(), log_dir)
}

/// The `global` part rt-app 1.0 accepts around `tasks`.
fn rt_app_use_case(
    tasks: serde_json::Value,
    seconds: u64,
    calibration: serde_json::Value,
    log_dir: &Path,
) -> String {
    serde_json::json!({
        "tasks": tasks,
        "global": {
            "duration": seconds,
            "calibration": calibration,
            "default_policy": "SCHED_OTHER",
            "lock_pages": false,
            // A boolean in Debian 12's rt-app 1.0, which refuses the
            // later versions' "none" ("Invalid type for key ftrace").
            "ftrace": false,
            "logdir": log_dir.display().to_string(),
            "log_basename": "tessera-rt-app",
        }
    })
    .to_string()
}

/// rt-app's ns per loop of its `run` event on this machine, measured by
/// rt-app itself once per process. Its calibration takes seconds (14 s on
/// the project's 2-vCPU VM): left to every run, the tasks would start that
/// late into the run's window.
pub fn rt_app_calibration(dir: &Path) -> Result<u64, String> {
    static MEASURED: OnceLock<Result<u64, String>> = OnceLock::new();
    MEASURED
        .get_or_init(|| measure_rt_app_calibration(dir))
        .clone()
}

/// A use case of one job that sleeps 1 ms: rt-app calibrates on CPU0
/// first and says what it found.
fn measure_rt_app_calibration(dir: &Path) -> Result<u64, String> {
    let path = dir.join(format!(
        "tessera-rt-app-{}-calibration.json",
        std::process::id()
    ));
    let task = serde_json::json!({ "calibrate": { "instance": 1, "loop": 1, "sleep": 1000 } });
    std::fs::write(&path, rt_app_use_case(task, 1, "CPU0".into(), dir))
        .map_err(|e| format!("write {}: {e}", path.display()))?;
    let output = Command::new("rt-app")
        .arg(&path)
        .stdin(Stdio::null())
        .output();
    let _ = std::fs::remove_file(&path);
    let output = output.map_err(|e| format!("run rt-app to calibrate it: {e}"))?;
    let text = String::from_utf8_lossy(&output.stderr) + String::from_utf8_lossy(&output.stdout);
    parse_calibration(&text).ok_or_else(|| {
        format!(
            "rt-app's calibration said no ns per loop ({}): {}",
            output.status,
            text.lines().take(4).collect::<Vec<_>>().join(" | ")
        )
    })
}

/// The ns per loop in rt-app's "pLoad = 8ns : calib_cpu 0".
fn parse_calibration(text: &str) -> Option<u64> {
    let after = text.split_once("pLoad = ")?.1;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().filter(|ns| *ns > 0)
}

/// An rt-app generator for `tasks`: writes its JSON into `dir`, rt-app
/// calibrated first (once per process).
pub fn rt_app(
    name: &str,
    tasks: &[RtAppTask],
    window: Window,
    dir: &Path,
) -> Result<ExternalSpec, String> {
    let seconds = window.run_for.map_or(3600, |d| d.as_secs().max(1));
    let ns_per_loop = rt_app_calibration(dir)?;
    let path: PathBuf = dir.join(format!("tessera-rt-app-{}-{name}.json", std::process::id()));
    std::fs::write(&path, rt_app_config(tasks, seconds, ns_per_loop, dir))
        .map_err(|e| format!("write {}: {e}", path.display()))?;
    Ok(ExternalSpec {
        name: name.into(),
        program: "rt-app".into(),
        args: vec![path.display().to_string()],
        window,
        files: vec![path],
    })
}

/// A stress-ng generator with the caller's stressor arguments, e.g.
/// `["--cpu", "2", "--cpu-load", "50"]`.
pub fn stress_ng(name: &str, args: &[String], window: Window) -> ExternalSpec {
    ExternalSpec {
        name: name.into(),
        program: "stress-ng".into(),
        args: args
            .iter()
            .cloned()
            .chain(["--quiet".to_string()])
            .collect(),
        window,
        files: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(ms: u64) -> Window {
        Window::lasting(Duration::from_millis(ms))
    }

    /// No live process of group `pgid` is left (reads every /proc/*/stat;
    /// a zombie waiting for init to reap it runs nothing).
    fn group_is_gone(pgid: Pid) -> bool {
        tessera_sys::proc::all_pids()
            .unwrap()
            .into_iter()
            .all(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // Fields after the command's closing parenthesis: state ppid pgrp.
                let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
                let fields: Vec<&str> = rest.split_whitespace().take(3).collect();
                fields.len() < 3 || fields[0] == "Z" || fields[2] != pgid.to_string()
            })
    }

    /// Runs `spec` to its end; returns its report and process group.
    fn run(spec: ExternalSpec) -> (ExternalReport, i32) {
        let (tx, rx) = mpsc::channel();
        let load = ExternalLoad::spawn(
            spec,
            Box::new(move |pid| {
                let _ = tx.send(pid);
                Ok(())
            }),
        )
        .unwrap();
        load.start(monotonic_ns());
        let report = load.join();
        (report, rx.recv_timeout(Duration::from_secs(5)).unwrap())
    }

    #[test]
    fn a_missing_program_is_refused() {
        let spec = ExternalSpec {
            name: "x".into(),
            program: "no-such-generator-tessera".into(),
            args: vec![],
            window: window(10),
            files: Vec::new(),
        };
        let err = ExternalLoad::spawn(spec, Box::new(|_| Ok(())))
            .err()
            .unwrap();
        assert!(err.contains("not installed"), "{err}");
    }

    #[test]
    fn a_generator_is_stopped_with_its_whole_group_and_its_files_removed() {
        // `sh` forks a child that would outlive a plain kill of the parent.
        let config = std::env::temp_dir().join(format!("tessera-ext-{}.conf", std::process::id()));
        std::fs::write(&config, "x").unwrap();
        let spec = ExternalSpec {
            name: "sh".into(),
            program: "sh".into(),
            args: vec!["-c".into(), "sleep 30 & sleep 30; wait".into()],
            window: window(300),
            files: vec![config.clone()],
        };
        let (report, pgid) = run(spec);
        assert!(!config.exists(), "the generator's file is removed");
        assert!(
            report.ending.starts_with("stopped"),
            "{}",
            report.describe()
        );
        assert!(report.ran_s >= 0.25, "{}", report.describe());
        std::thread::sleep(Duration::from_millis(100));
        assert!(group_is_gone(pgid), "a process of group {pgid} survived");
    }

    #[test]
    fn stress_ng_loads_a_cpu_and_stops() {
        if !installed("stress-ng") {
            eprintln!("SKIPPED stress_ng_loads_a_cpu_and_stops: stress-ng not installed");
            return;
        }
        let spec = stress_ng("cpu", &["--cpu".into(), "1".into()], window(1000));
        let (report, pgid) = run(spec);
        assert!(report.error.is_none(), "{}", report.describe());
        std::thread::sleep(Duration::from_millis(100));
        assert!(group_is_gone(pgid), "a stress-ng process survived");
    }

    #[test]
    fn rt_app_config_names_policy_period_and_run() {
        let tasks = [RtAppTask {
            name: "t1".into(),
            period: Duration::from_millis(10),
            run: Duration::from_millis(3),
            policy: RtAppPolicy::Fifo(10),
        }];
        let json: serde_json::Value =
            serde_json::from_str(&rt_app_config(&tasks, 30, 8, Path::new("/tmp"))).unwrap();
        let t1 = &json["tasks"]["t1"];
        assert_eq!(t1["run"], 3000);
        assert_eq!(t1["timer"]["period"], 10000);
        assert_eq!(t1["policy"], "SCHED_FIFO");
        assert_eq!(t1["priority"], 10);
        assert_eq!(json["global"]["duration"], 30);
        assert_eq!(json["global"]["calibration"], 8);
        assert_eq!(
            json["global"]["ftrace"], false,
            "rt-app 1.0 refuses a string"
        );
    }

    #[test]
    fn rt_apps_calibration_is_read_from_what_it_prints() {
        let printed = "[rt-app] <notice> Calibrate ns per loop\n\
                       [rt-app] <notice> pLoad = 8ns : calib_cpu 0\n";
        assert_eq!(parse_calibration(printed), Some(8));
        assert_eq!(parse_calibration("[rt-app] <crit> Invalid type"), None);
        assert_eq!(parse_calibration("pLoad = 0ns"), None);
    }
}
