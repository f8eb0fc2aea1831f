//! The threads of an interference load: each is set up (by the caller's
//! hook: a cell, a priority, nothing), waits for the common release, runs the
//! load's body inside its time window, and reports the CPU time it consumed
//! and the work it did.
//!
//! Owns the release/stop protocol shared by every in-process load (hog, EP,
//! streamer, I/O). It must never choose a thread's scheduling, and nothing
//! here may block longer than [`POLL`] without looking at the stop flag.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns, thread_cpu_ns};

/// Longest sleep between two looks at the stop flag.
pub const POLL: Duration = Duration::from_millis(50);

/// A thread's setup hook: join a cell, set a priority; an error is reported
/// and the thread does no work.
pub type Setup = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// When a load runs, relative to the common release time t0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Window {
    pub start_after: Duration,
    /// How long it runs; `None`: until stopped.
    pub run_for: Option<Duration>,
}

impl Window {
    /// From t0 until stopped.
    pub fn always() -> Window {
        Window::default()
    }

    /// From t0 for `run_for`.
    pub fn lasting(run_for: Duration) -> Window {
        Window {
            start_after: Duration::ZERO,
            run_for: Some(run_for),
        }
    }
}

/// What a body sees: whether it should go on.
pub struct Span<'a> {
    end_ns: u64,
    stop: &'a AtomicBool,
}

impl Span<'_> {
    pub fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed) && monotonic_ns() < self.end_ns
    }

    /// Sleeps until `at_ns` (capped at the window's end), waking every
    /// [`POLL`] to honour a stop.
    pub fn sleep_until(&self, at_ns: u64) {
        sleep_polling(at_ns.min(self.end_ns), self.stop);
    }
}

fn sleep_polling(at_ns: u64, stop: &AtomicBool) {
    let poll = POLL.as_nanos() as u64;
    while !stop.load(Ordering::Relaxed) {
        let now = monotonic_ns();
        if now >= at_ns {
            return;
        }
        sleep_until_monotonic_ns(at_ns.min(now + poll));
    }
}

/// What one thread did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ThreadWork {
    /// CPU time consumed inside the window (`CLOCK_THREAD_CPUTIME_ID`).
    pub cpu_ns: u64,
    /// Wall time the window lasted for this thread.
    pub wall_ns: u64,
    /// Work done, in the load's unit (see [`LoadReport::unit`]).
    pub units: u64,
    pub error: Option<String>,
}

/// What a load did, all threads together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadReport {
    pub name: String,
    /// Unit of `units`, e.g. "bytes", "pairs", "slices".
    pub unit: &'static str,
    pub threads: Vec<ThreadWork>,
}

impl LoadReport {
    pub fn cpu_ns(&self) -> u64 {
        self.threads.iter().map(|t| t.cpu_ns).sum()
    }

    pub fn units(&self) -> u64 {
        self.threads.iter().map(|t| t.units).sum()
    }

    /// The longest window among the threads, in seconds.
    pub fn wall_s(&self) -> f64 {
        self.threads.iter().map(|t| t.wall_ns).max().unwrap_or(0) as f64 / 1e9
    }

    /// CPUs kept busy on average: CPU time over wall time.
    pub fn cpus_used(&self) -> f64 {
        match self.wall_s() {
            w if w > 0.0 => self.cpu_ns() as f64 / 1e9 / w,
            _ => 0.0,
        }
    }

    pub fn errors(&self) -> Vec<&str> {
        self.threads
            .iter()
            .filter_map(|t| t.error.as_deref())
            .collect()
    }

    /// One line for a report, e.g. "hog: 2 threads, 1.98 CPUs, 12 slices".
    pub fn describe(&self) -> String {
        let mut text = format!(
            "{}: {} thread(s), {:.2} CPUs busy over {:.1} s, {} {}",
            self.name,
            self.threads.len(),
            self.cpus_used(),
            self.wall_s(),
            self.units(),
            self.unit
        );
        for e in self.errors() {
            text.push_str(&format!("; error: {e}"));
        }
        text
    }
}

/// The threads of one load, set up and waiting for [`LoadThreads::start`].
pub struct LoadThreads {
    name: String,
    unit: &'static str,
    stop: Arc<AtomicBool>,
    starts: Vec<mpsc::Sender<u64>>,
    handles: Vec<JoinHandle<ThreadWork>>,
}

impl LoadThreads {
    /// Spawns `count` threads named after the load; each runs `setup(i)`
    /// then, once released, `body(i, span)` which returns the units of work
    /// done or an error. Returns when every setup finished.
    pub fn spawn<B>(
        name: &str,
        unit: &'static str,
        count: usize,
        window: Window,
        mut setup: impl FnMut(usize) -> Setup,
        body: B,
    ) -> std::io::Result<LoadThreads>
    where
        B: Fn(usize, &Span) -> Result<u64, String> + Send + Sync + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let body = Arc::new(body);
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let mut load = LoadThreads {
            name: name.into(),
            unit,
            stop: Arc::clone(&stop),
            starts: Vec::new(),
            handles: Vec::new(),
        };
        for i in 0..count {
            let (start_tx, start_rx) = mpsc::channel::<u64>();
            let (stop, body, ready, hook) = (
                Arc::clone(&stop),
                Arc::clone(&body),
                ready_tx.clone(),
                setup(i),
            );
            let handle = std::thread::Builder::new()
                .name(format!("{name}-{i}").chars().take(15).collect())
                .spawn(move || {
                    let setup_result = hook();
                    let _ = ready.send(());
                    if let Err(e) = setup_result {
                        return ThreadWork {
                            error: Some(format!("setup: {e}")),
                            ..ThreadWork::default()
                        };
                    }
                    match start_rx.recv() {
                        Ok(t0) => run_window(t0, window, &stop, |span| body(i, span)),
                        Err(_) => ThreadWork::default(),
                    }
                });
            match handle {
                Ok(h) => {
                    load.handles.push(h);
                    load.starts.push(start_tx);
                }
                Err(e) => {
                    load.stop();
                    load.join();
                    return Err(e);
                }
            }
        }
        drop(ready_tx);
        for _ in 0..count {
            let _ = ready_rx.recv();
        }
        Ok(load)
    }

    /// Releases every thread: its window starts at `t0_ns` + `start_after`.
    pub fn start(&self, t0_ns: u64) {
        for s in &self.starts {
            let _ = s.send(t0_ns);
        }
    }

    /// Asks every thread to finish (within [`POLL`] plus one unit of work).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Waits for the threads (stopping them first if never started).
    pub fn join(mut self) -> LoadReport {
        self.starts.clear();
        let threads = self
            .handles
            .drain(..)
            .map(|h| {
                h.join().unwrap_or_else(|_| ThreadWork {
                    error: Some("the thread panicked".into()),
                    ..ThreadWork::default()
                })
            })
            .collect();
        LoadReport {
            name: self.name.clone(),
            unit: self.unit,
            threads,
        }
    }
}

fn run_window(
    t0_ns: u64,
    window: Window,
    stop: &AtomicBool,
    body: impl FnOnce(&Span) -> Result<u64, String>,
) -> ThreadWork {
    let start = t0_ns + window.start_after.as_nanos() as u64;
    let end_ns = window
        .run_for
        .map_or(u64::MAX, |d| start + d.as_nanos() as u64);
    sleep_polling(start, stop);
    let (cpu0, wall0) = (thread_cpu_ns(), monotonic_ns());
    let span = Span { end_ns, stop };
    let outcome = if span.running() { body(&span) } else { Ok(0) };
    let (units, error) = match outcome {
        Ok(u) => (u, None),
        Err(e) => (0, Some(e)),
    };
    ThreadWork {
        cpu_ns: thread_cpu_ns() - cpu0,
        wall_ns: monotonic_ns() - wall0,
        units,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreleased_threads_end_on_join() {
        let load = LoadThreads::spawn(
            "idle",
            "units",
            3,
            Window::always(),
            |_| Box::new(|| Ok(())),
            |_, _| Ok(1),
        )
        .unwrap();
        let report = load.join();
        assert_eq!(report.threads.len(), 3);
        assert_eq!(report.units(), 0, "never released, never ran");
    }

    #[test]
    fn setup_errors_are_reported_and_skip_the_work() {
        let load = LoadThreads::spawn(
            "refused",
            "units",
            2,
            Window::always(),
            |i| Box::new(move || if i == 1 { Err("no".into()) } else { Ok(()) }),
            |_, span| {
                while span.running() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(7)
            },
        )
        .unwrap();
        load.start(monotonic_ns());
        std::thread::sleep(Duration::from_millis(20));
        load.stop();
        let report = load.join();
        assert_eq!(report.units(), 7);
        assert_eq!(report.errors(), vec!["setup: no"]);
    }

    #[test]
    fn the_window_bounds_the_work() {
        let window = Window {
            start_after: Duration::from_millis(30),
            run_for: Some(Duration::from_millis(50)),
        };
        let t0 = monotonic_ns();
        let load = LoadThreads::spawn(
            "window",
            "units",
            1,
            window,
            |_| Box::new(|| Ok(())),
            move |_, span| {
                let began = monotonic_ns();
                while span.running() {
                    span.sleep_until(monotonic_ns() + 1_000_000);
                }
                Ok(u64::from(began >= t0 + 30_000_000))
            },
        )
        .unwrap();
        load.start(t0);
        let report = load.join();
        assert_eq!(report.units(), 1, "began after start_after");
        assert!(report.wall_s() >= 0.04 && report.errors().is_empty());
    }
}
