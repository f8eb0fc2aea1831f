//! The daemon's guards: for each `[[guard]]` table of daemon.toml, a
//! `tessera guard` child process, started again a few seconds after it
//! ends (the server was not running yet, or exited). A table with `user`
//! follows that user's (or every user's) session PipeWire instead: /proc is
//! looked at every second, and each `pipewire` daemon of the user gets a
//! `tessera guard pipewire --pid P` of its own while it runs. Each guard is a
//! process of its own, not a thread of the daemon: a PipeWire guard must
//! start with PipeWire's libjack, a JACK2 guard with JACK2's, and a guard
//! that fails must not take the broker down.
//!
//! It must never guard anything itself; the children reach the daemon
//! through its socket like any client. It never signals a process: a guard
//! ends by itself when its server exits.

use crate::server::{pipewire_daemons, Endpoint};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tessera_broker::config::{GuardEntry, Users};
use tessera_sys::proc::{self, Pid};

/// How long after a guard ended it is started again.
const RESTART_AFTER: Duration = Duration::from_secs(5);

/// How often /proc is looked at for session PipeWire daemons.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Starts a thread per entry that keeps its guards running; `log` gets a
/// line when one starts or ends.
pub fn keep_running(entries: Vec<GuardEntry>, exe: PathBuf, log: fn(&str)) {
    for entry in entries {
        let exe = exe.clone();
        let _ = std::thread::Builder::new()
            .name("tessera-guards".into())
            .spawn(move || match entry.users() {
                Ok(None) => loop {
                    let args = entry.args();
                    if let Some(mut child) = start(&exe, &args, log) {
                        ended(&args, child.wait(), log);
                    }
                    std::thread::sleep(RESTART_AFTER);
                },
                Ok(Some(users)) => follow_sessions(&exe, &entry, users, log),
                Err(e) => log(&format!("guard not started: {e}")),
            });
    }
}

/// A session daemon followed, and its guard.
struct Followed {
    guard: Option<(Child, Vec<String>)>,
    /// When its last guard ended (None: none has run yet).
    ended: Option<Instant>,
}

impl Followed {
    fn due(&self) -> bool {
        self.guard.is_none() && self.ended.is_none_or(|t| t.elapsed() >= RESTART_AFTER)
    }
}

/// One guard per PipeWire daemon of `users` for as long as the daemon runs:
/// started once its socket is there, again [`RESTART_AFTER`] after it ended
/// early, forgotten when the daemon is gone (a daemon is known by its PID
/// and start time, so a recycled PID is a new daemon).
fn follow_sessions(exe: &Path, entry: &GuardEntry, users: Users, log: fn(&str)) -> ! {
    let mut followed: BTreeMap<(Pid, u64), Followed> = BTreeMap::new();
    loop {
        for pid in pipewire_daemons(|uid| users.contains(uid)) {
            let Ok(started) = proc::start_time(pid) else {
                continue;
            };
            let f = followed.entry((pid, started)).or_insert(Followed {
                guard: None,
                ended: None,
            });
            if f.due() && Endpoint::of(pid).is_ok() {
                let args = entry.args_for_pid(pid);
                f.guard = start(exe, &args, log).map(|child| (child, args));
                f.ended = f.guard.is_none().then(Instant::now);
            }
        }
        for f in followed.values_mut() {
            if let Some((child, args)) = &mut f.guard {
                if let Ok(Some(status)) = child.try_wait() {
                    ended(args, Ok(status), log);
                    f.guard = None;
                    f.ended = Some(Instant::now());
                }
            }
        }
        followed
            .retain(|&(pid, started), f| f.guard.is_some() || proc::is_same_process(pid, started));
        std::thread::sleep(LOOK_EVERY);
    }
}

/// Starts `tessera ARGS`.
fn start(exe: &Path, args: &[String], log: fn(&str)) -> Option<Child> {
    let what = args[1..].join(" ");
    match Command::new(exe).args(args).stdin(Stdio::null()).spawn() {
        Ok(child) => {
            log(&format!(
                "guard started (pid {}): tessera {what}",
                child.id()
            ));
            Some(child)
        }
        Err(e) => {
            log(&format!("could not start tessera {what}: {e}"));
            None
        }
    }
}

/// Says how a guard ended.
fn ended(args: &[String], outcome: std::io::Result<ExitStatus>, log: fn(&str)) {
    let what = args[1..].join(" ");
    match outcome {
        Ok(status) => log(&format!("guard ended ({status}): tessera {what}")),
        Err(e) => log(&format!("guard lost: {e}")),
    }
}
