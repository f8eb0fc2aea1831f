//! `tessera guard` as a child of an experiment: `tessera guard jackd` or
//! `pipewire` against a server started here, or `tessera guard pid` against
//! a program started here (at an audio period given), asking a given broker, with
//! a dead-man time so that it never outlives the run by much, given time to
//! reserve the server's threads before the clients come.
//!
//! It owns that child: stopped by its PID when its handle drops. It must
//! never read the guard's record for a report (the subjects do).

use crate::harness::servers::{self, AudioServer, OwnedChild};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tessera_sys::clock::monotonic_ns;
use tessera_sys::proc::{self, Pid};
use tessera_sys::sched::{self, Policy};

/// How long the guard may take to exit after SIGTERM.
const CHILD_GRACE: Duration = Duration::from_secs(5);
/// Time the guard gets to find the server's threads before the clients come.
const GUARD_SETTLE: Duration = Duration::from_millis(300);
/// How long past [`GUARD_SETTLE`] the clients wait for the guard to have
/// reserved a thread of the server: a guard that cannot (no privileges)
/// is given no more.
const GUARD_READY_LIMIT: Duration = Duration::from_secs(5);
/// The guard outlives the run by this much at most if nobody stops it.
const GUARD_DEAD_MAN: Duration = Duration::from_secs(30);

/// `tessera guard` running as a child.
pub(crate) struct GuardChild {
    pub process: OwnedChild,
    /// When it started (CLOCK_MONOTONIC ns): its record's time origin.
    pub started_ns: u64,
}

/// Where the guard logs (stdout and stderr) and records (`--record`).
pub(crate) struct GuardFiles {
    pub log: PathBuf,
    /// None: it keeps no record, as users run it (a bench of its own cost).
    pub record: Option<PathBuf>,
}

/// What the guard guards.
pub(crate) enum Guarded<'a> {
    Server(&'a AudioServer),
    /// Any program's real-time threads, at the audio period given.
    Process {
        pid: Pid,
        period: Duration,
    },
}

/// `tessera guard jackd --server NAME --pid PID …` (or `pipewire --pid
/// PID …`), in the server's environment (and `broker_dir`'s broker),
/// logging and recording into `files`. Refused with the reason when this
/// build has no guard.
pub(crate) fn start_guard(
    server: &AudioServer,
    settings: &[String],
    files: &GuardFiles,
    total: Duration,
    broker_dir: Option<&Path>,
) -> Result<GuardChild, String> {
    start_guard_of(Guarded::Server(server), settings, files, total, broker_dir)
}

/// [`start_guard`] of what `guarded` says: a server, or `tessera guard pid
/// PID --period P …` for a program.
pub(crate) fn start_guard_of(
    guarded: Guarded,
    settings: &[String],
    files: &GuardFiles,
    total: Duration,
    broker_dir: Option<&Path>,
) -> Result<GuardChild, String> {
    let tessera = servers::program_beside_us("tessera");
    guard_available(&tessera)?;
    let mut command = Command::new(&tessera);
    command.arg("guard");
    if let Some(dir) = broker_dir {
        command.env("TESSERA_RUN_DIR", dir);
    }
    match guarded {
        Guarded::Server(server) => {
            command.envs(server.client_env());
            match server {
                AudioServer::Jack(jack) => command.args(["jackd", "--server", jack.name()]),
                AudioServer::PipeWire(_) => command.arg("pipewire"),
            };
            command.args(["--pid", &server.pid().to_string()]);
        }
        Guarded::Process { pid, period } => {
            command
                .args(["pid", &pid.to_string(), "--period"])
                .arg(format!("{}ns", period.as_nanos()));
        }
    }
    command.args(settings);
    if let Some(record) = &files.record {
        command.arg("--record").arg(record);
    }
    command
        .args(["--seconds", &(total + GUARD_DEAD_MAN).as_secs().to_string()])
        .arg("--quiet");
    let log = &files.log;
    let out = fs::File::create(log).map_err(|e| e.to_string())?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    command.stdin(Stdio::null()).stdout(out).stderr(err);
    let started_ns = monotonic_ns();
    let child = command
        .spawn()
        .map_err(|e| format!("starting {}: {e}", tessera.display()))?;
    let mut process = OwnedChild::new(child, "tessera guard", CHILD_GRACE);
    std::thread::sleep(GUARD_SETTLE);
    if let Guarded::Server(server) = guarded {
        wait_for_a_reservation(server.pid(), &mut process);
    }
    if let Some(status) = process.exited() {
        return Err(format!(
            "tessera guard exited at start ({status}): {}",
            servers::log_tail(log)
        ));
    }
    Ok(GuardChild {
        process,
        started_ns,
    })
}

/// Waits until a thread of `server` is SCHED_DEADLINE — the guard's loop
/// has begun reserving — for at most [`GUARD_READY_LIMIT`], or until the
/// guard exits. Its start (joining the server as a client, listing its
/// clients) took 0.5–0.8 s beside PipeWire, and clients that came before
/// it were counted as new ones reserved late (`bench guard-scale`: the
/// first client's threads 110–340 ms).
fn wait_for_a_reservation(server: Pid, guard: &mut OwnedChild) {
    let until = std::time::Instant::now() + GUARD_READY_LIMIT;
    while std::time::Instant::now() < until && guard.exited().is_none() {
        let reserved = proc::threads_of(server)
            .unwrap_or_default()
            .into_iter()
            .any(|tid| matches!(sched::get_policy(tid), Ok(Policy::Deadline(_))));
        if reserved {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `tessera guard` exists in this build.
fn guard_available(tessera: &Path) -> Result<(), String> {
    let help = Command::new(tessera)
        .args(["guard", "--help"])
        .stdin(Stdio::null())
        .output();
    match help {
        Ok(out) if out.status.success() => Ok(()),
        Ok(_) => Err(format!(
            "{} has no `guard` command yet: the guard configurations need `tessera guard` \
             (build it: cargo build -p tessera-cli)",
            tessera.display()
        )),
        Err(e) => Err(format!(
            "cannot run {} ({e}): the guard configurations need `tessera guard` \
             (build it: cargo build -p tessera-cli)",
            tessera.display()
        )),
    }
}
