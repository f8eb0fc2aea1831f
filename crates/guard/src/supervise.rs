//! The daemon's guards: for each `[[guard]]` table of daemon.toml, a
//! `tessera guard` child process, started again a few seconds after it
//! ends (the server was not running yet, or exited). Each guard is a
//! process of its own, not a thread of the daemon: a PipeWire guard must
//! start with PipeWire's libjack, a JACK2 guard with JACK2's, and a guard
//! that fails must not take the broker down.
//!
//! It must never guard anything itself; the children reach the daemon
//! through its socket like any client.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use tessera_broker::config::GuardEntry;

/// How long after a guard ended it is started again.
const RESTART_AFTER: Duration = Duration::from_secs(5);

/// Starts a thread per entry that keeps its guard running; `log` gets a line
/// when one starts or ends.
pub fn keep_running(entries: Vec<GuardEntry>, exe: PathBuf, log: fn(&str)) {
    for entry in entries {
        let exe = exe.clone();
        let _ = std::thread::Builder::new()
            .name("tessera-guards".into())
            .spawn(move || loop {
                run_once(&exe, &entry, log);
                std::thread::sleep(RESTART_AFTER);
            });
    }
}

fn run_once(exe: &PathBuf, entry: &GuardEntry, log: fn(&str)) {
    let args = entry.args();
    let what = args[1..].join(" ");
    match Command::new(exe).args(&args).stdin(Stdio::null()).spawn() {
        Ok(mut child) => {
            log(&format!(
                "guard started (pid {}): tessera {what}",
                child.id()
            ));
            match child.wait() {
                Ok(status) => log(&format!("guard ended ({status}): tessera {what}")),
                Err(e) => log(&format!("guard lost: {e}")),
            }
        }
        Err(e) => log(&format!("could not start tessera {what}: {e}")),
    }
}
