//! Debian's jackd2 for tests: a server of a private name on its dummy
//! driver, started by a test, ready once its real-time thread runs,
//! stopped by its PID and its /dev/shm files removed when the handle drops
//! (error or not).
//!
//! It must never touch a server it did not start.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_sys::sched::{self, Policy};

/// How long jackd may take to run its real-time thread.
const READY_WAIT: Duration = Duration::from_secs(10);
/// How long jackd may take to exit after SIGTERM before it is killed.
const STOP_WAIT: Duration = Duration::from_secs(3);

/// A jackd started here (`jackd -n NAME -R -P 70 -d dummy -r 48000 -p FRAMES`).
pub struct Jackd {
    child: Child,
    name: String,
}

impl Jackd {
    /// Starts it and waits until its real-time thread runs. Use one name
    /// for every run of a test: a killed jackd keeps its entry in JACK's
    /// server registry (8 entries), which only a server of the same name
    /// reclaims.
    pub fn start(name: &str, frames: u32) -> Jackd {
        let child = Command::new("jackd")
            .args([
                "-n", name, "-R", "-P", "70", "-d", "dummy", "-r", "48000", "-p",
            ])
            .arg(frames.to_string())
            .env("JACK_NO_AUDIO_RESERVATION", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start jackd (apt-get install jackd2): {e}"));
        let jackd = Jackd {
            child,
            name: name.to_string(),
        };
        let start = Instant::now();
        while fifo_threads(jackd.pid()).is_empty() {
            assert!(
                start.elapsed() < READY_WAIT,
                "jackd {name} ran no real-time thread within {READY_WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        jackd
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The server's name (`JACK_DEFAULT_SERVER` for its clients).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops it (by its PID) and reaps it: SIGTERM, so that it removes its
    /// shared memory on the way out (killed, it left ~100 MB in
    /// /dev/shm/jack-UID-N until the next server reclaimed it), and SIGKILL
    /// if it has not exited within [`STOP_WAIT`].
    pub fn kill(&mut self) {
        let _ = tessera_sys::process::terminate(self.pid());
        let start = Instant::now();
        while start.elapsed() < STOP_WAIT {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Jackd {
    fn drop(&mut self) {
        self.kill();
        let uid = tessera_sys::caps::euid();
        let prefixes = [
            format!("jack_{}_{uid}_", self.name),
            format!("jack_sem.{uid}_{}_", self.name),
        ];
        for entry in std::fs::read_dir("/dev/shm")
            .into_iter()
            .flatten()
            .flatten()
        {
            let file = entry.file_name().to_string_lossy().into_owned();
            if prefixes.iter().any(|p| file.starts_with(p)) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// The threads of `pid` at SCHED_FIFO.
pub fn fifo_threads(pid: i32) -> Vec<i32> {
    tessera_sys::proc::threads_of(pid)
        .unwrap_or_default()
        .into_iter()
        .filter(|&t| matches!(sched::get_policy(t), Ok(Policy::Fifo { .. })))
        .collect()
}
