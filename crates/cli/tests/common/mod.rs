//! The harness of the `tessera` binary's end-to-end tests: the machine
//! (tessera-testkit's guard, which resets it last), the processes a test
//! started (killed first), and waiting with a timeout.

// Each test binary uses a part of it.
#![allow(dead_code)]

pub mod session;

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The machine (tessera-testkit's guard, which resets it last) plus the
/// processes this test started, killed first.
pub struct Machine {
    pub dir: PathBuf,
    pub children: Vec<Child>,
    _machine: tessera_testkit::Machine,
}

impl Machine {
    pub fn tessera(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
        c.env("TESSERA_RUN_DIR", &self.dir).stdin(Stdio::null());
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        run_logged(&mut self.tessera(), args)
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "tessera {args:?} failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        serde_json::from_str(&self.ok(args)).expect("JSON output")
    }

    pub fn start_daemon(&mut self, config: Option<&Path>) -> usize {
        let mut cmd = self.tessera();
        cmd.arg("daemon").arg("--run-dir").arg(&self.dir);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        let child = cmd.spawn().expect("start the daemon");
        self.children.push(child);
        wait_until("the daemon answers", || {
            UnixStream::connect(self.dir.join("tessera.sock")).is_ok()
        });
        self.children.len() - 1
    }

    pub fn spawn(&mut self, cmd: &mut Command) -> u32 {
        let child = cmd.spawn().expect("spawn");
        let pid = child.id();
        self.children.push(child);
        pid
    }

    /// The daemon's cells as JSON.
    pub fn cells(&self) -> Vec<serde_json::Value> {
        let out = self
            .tessera()
            .args(["cell", "list", "--json"])
            .output()
            .expect("run tessera cell list");
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .expect("cell list's JSON")
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The cells reserving a thread of `pid`.
    pub fn cells_of(&self, pid: i32) -> Vec<serde_json::Value> {
        self.cells()
            .into_iter()
            .filter(|c| {
                c["members"]
                    .as_array()
                    .is_some_and(|m| m.iter().any(|m| m["pid"] == pid))
            })
            .collect()
    }

    pub fn kill(&mut self, index: usize) {
        let _ = self.children[index].kill();
        let _ = self.children[index].wait();
    }
}

impl Drop for Machine {
    /// The last started first: clients before their servers.
    fn drop(&mut self) {
        for c in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn privileged(test: &str) -> Option<Machine> {
    let machine = tessera_testkit::privileged(test)?;
    Some(Machine {
        dir: machine.dir(),
        children: Vec::new(),
        _machine: machine,
    })
}

pub fn wait_until(what: &str, done: impl FnMut() -> bool) {
    wait_until_within(what, Duration::from_secs(10), done)
}

pub fn wait_until_within(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < within, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `tessera` (`command`) with `args`, echoing the command line and
/// its output into the test's log.
pub fn run_logged(command: &mut Command, args: &[&str]) -> Output {
    let out = command
        .args(args)
        .output()
        .expect("run tessera (or setpriv, util-linux)");
    eprintln!(
        "$ tessera {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `tessera` with `args` as nobody, without capabilities.
pub fn as_nobody(m: &Machine, args: &[&str]) -> Output {
    eprintln!("(as nobody, without capabilities)");
    run_logged(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
            ])
            .arg(env!("CARGO_BIN_EXE_tessera"))
            .env("TESSERA_RUN_DIR", &m.dir)
            .stdin(Stdio::null()),
        args,
    )
}

/// Marks the environment of everything a test's benchmark starts (its
/// children inherit it), so that a survivor can be found after it exited.
pub const MARKER_VAR: &str = "TESSERA_TEST_MARK";

/// Processes whose environment carries `marker`.
pub fn marked_processes(marker: &str) -> Vec<String> {
    let needle = format!("{MARKER_VAR}={marker}");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
            environ.split(|b| *b == 0).any(|v| v == needle.as_bytes())
        })
        .map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            format!(
                "{}: {}",
                e.file_name().to_string_lossy(),
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            )
        })
        .collect()
}

/// Files of a benchmark run `pid` that must be gone: jackd's in /dev/shm,
/// its runs' scratch directories and PipeWire's runtime directories.
pub fn leftover_files(pid: u32) -> Vec<String> {
    let shm = format!("tessera-{pid}-");
    let scratch = [
        format!("tessera-audio-{pid}-"),
        format!("tessera-pw-{pid}-"),
    ];
    let names = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    let mut found: Vec<String> = names(Path::new("/dev/shm"))
        .into_iter()
        .filter(|f| f.contains(&shm))
        .collect();
    found.extend(
        names(&std::env::temp_dir())
            .into_iter()
            .filter(|f| scratch.iter().any(|s| f.starts_with(s))),
    );
    found
}

/// Whether this machine can run a benchmark: `programs`, and
/// tessera-jack-peer built beside tessera (else skipped, or failed under
/// CI=true, which builds every binary first).
pub fn can_run_bench(test: &str, programs: &[&str]) -> bool {
    let peer = Path::new(env!("CARGO_BIN_EXE_tessera")).with_file_name("tessera-jack-peer");
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|p| !tessera_sys::process::installed(p))
        .chain((!peer.is_file()).then_some("tessera-jack-peer (cargo build --bins)"))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!("SKIPPED {test}: missing {}", missing.join(", "));
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}, and CI=true requires it");
    }
    eprintln!("{msg}");
    false
}
