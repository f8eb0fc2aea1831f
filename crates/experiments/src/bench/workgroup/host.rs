//! The benchmark's C host (host.c beside this file): compiled with `cc`
//! against libtessera's header and this build's libtessera.so when a run
//! starts — as a plug-in host builds against the library — and started
//! once per configuration, in `workgroup` mode (its threads join a
//! workgroup) or `fifo` mode (SCHED_FIFO threads only).
//!
//! It owns the compiled host and its scratch directory. It must never read
//! the host's records (cycles.rs does) nor start anything but the host.

use super::results::{Options, HIGH_PCT, LOW_PCT, PERIOD_NS, PRIORITY, THREADS};
use crate::harness::servers::{self, OwnedChild};
use crate::scratch::Scratch;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tessera_sys::sched::Policy;

const SOURCE: &str = include_str!("host.c");
/// How long the host may take to write its records after SIGTERM.
const GRACE: Duration = Duration::from_secs(5);

/// The host, compiled into a scratch directory (with the library beside it).
pub(super) struct Host {
    scratch: Scratch,
    exe: PathBuf,
}

/// How the host's threads are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Workgroup,
    Fifo,
}

impl Host {
    /// Writes host.c and tessera.h into a scratch directory, copies this
    /// build's libtessera.so (found beside the running program) there under
    /// its soname too, and compiles the host against it, with an rpath to
    /// it: later builds do not change the run's library.
    pub fn compile() -> Result<Host, String> {
        let library = servers::program_beside_us("libtessera.so");
        if !library.is_file() {
            return Err(
                "libtessera.so is not built beside tessera: cargo build -p libtessera".into(),
            );
        }
        let scratch = Scratch::create("tessera-wg-host")?;
        for name in ["libtessera.so", "libtessera.so.0"] {
            std::fs::copy(&library, scratch.file(name))
                .map_err(|e| format!("copy {}: {e}", library.display()))?;
        }
        let dir = scratch.path();
        let write = |name: &str, text: &str| {
            std::fs::write(scratch.file(name), text).map_err(|e| format!("write {name}: {e}"))
        };
        write("host.c", SOURCE)?;
        write("tessera.h", tessera::HEADER)?;
        let exe = scratch.file("host");
        let out = Command::new("cc")
            .arg(scratch.file("host.c"))
            .arg(format!("-I{}", dir.display()))
            .arg(format!("-L{}", dir.display()))
            .arg(format!("-Wl,-rpath,{}", dir.display()))
            .args(["-O2", "-Wall", "-ltessera", "-lpthread", "-o"])
            .arg(&exe)
            .output()
            .map_err(|e| format!("cc (Debian: apt-get install gcc): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "compiling the host: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(Host { scratch, exe })
    }

    /// Starts the host in `mode` on the cycle grid from `t0_ns`, writing
    /// its records to `out` (its log beside), asking the broker of
    /// `run_dir`; returns once its threads exist.
    pub fn start(
        &self,
        mode: Mode,
        workgroup: &str,
        t0_ns: u64,
        options: &Options,
        out: &Path,
        run_dir: &Path,
    ) -> Result<OwnedChild, String> {
        let mode_arg = match mode {
            Mode::Workgroup => "workgroup",
            Mode::Fifo => "fifo",
        };
        let log = self.log();
        let (out_log, err_log) = servers::log_to(&log)?;
        let numbers = [
            u64::from(PRIORITY),
            PERIOD_NS,
            t0_ns,
            options.seconds,
            options.step_seconds,
            LOW_PCT,
            HIGH_PCT,
        ];
        let child = Command::new(&self.exe)
            .args([mode_arg, workgroup])
            .args(numbers.map(|v| v.to_string()))
            .arg(out)
            .env("TESSERA_RUN_DIR", run_dir)
            .stdin(Stdio::null())
            .stdout(out_log)
            .stderr(err_log)
            .spawn()
            .map_err(|e| format!("starting the host: {e}"))?;
        let mut host = OwnedChild::new(child, "the workgroup host", GRACE);
        let pid = host.pid();
        servers::await_ready(&mut host, &log, "the workgroup host", || {
            real_time_threads(pid) >= THREADS
        })?;
        Ok(host)
    }

    /// The host's stderr.
    pub fn log(&self) -> PathBuf {
        self.scratch.file("host.log")
    }
}

/// The threads of `pid` at SCHED_FIFO or SCHED_DEADLINE: the host's,
/// once it started them (and, in a workgroup, they joined).
fn real_time_threads(pid: tessera_sys::proc::Pid) -> usize {
    tessera_sys::proc::threads_of(pid)
        .unwrap_or_default()
        .into_iter()
        .filter(|&t| {
            matches!(
                tessera_sys::sched::get_policy(t),
                Ok(Policy::Fifo { .. } | Policy::Deadline(_))
            )
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_compiles_against_the_header_and_the_library() {
        if !tessera_sys::process::installed("cc") {
            eprintln!("SKIPPED the_host_compiles: no cc (apt-get install build-essential)");
            return;
        }
        let host = Host::compile().unwrap();
        assert!(host.exe.is_file());
    }
}
