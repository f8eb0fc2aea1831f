//! `tessera-jack-peer` as the subjects that host its load clients run and
//! count it: the child process on the run's timeline (started waiting for
//! t0, released, awaited or cut short; [`PeerClients`]), its command line
//! for a subject's clients, the cycles of its
//! record (`tessera_jack_peer::record`) — each grouped by JACK's frame
//! counter with when every load client finished, the periods between
//! cycles and the periods skipped — the measured window of a run they are
//! counted in, and series thinned for results.json.
//!
//! A leaf shared by the audio-server and desktop subjects: it computes,
//! never reports, and must never name a subject.

use crate::harness::servers::{self, OwnedChild};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tessera_jack_peer::record::PeerRecord;
use tessera_measure::Series;
use tessera_scenario::{AudioServerSubject, Scenario};

/// Series keep the worst value of every bin this long (s): a 90 s run
/// would otherwise plot 67 500 points per client.
const BIN_S: f64 = 0.01;

/// The peer's client that records every cycle and loads nothing.
pub(crate) const MONITOR: &str = "monitor";
/// How long the clients may take to end after the run's end.
const PEER_EXIT_WAIT: Duration = Duration::from_secs(15);
/// How long the clients may take to exit after SIGTERM.
const CHILD_GRACE: Duration = Duration::from_secs(5);

/// `tessera-jack-peer` hosting a subject's clients, as a child waiting for
/// the run's origin on its stdin, logging into its log file.
pub(crate) struct PeerClients {
    process: OwnedChild,
    log: PathBuf,
}

impl PeerClients {
    /// The peer's program beside this one, or why it cannot run.
    pub(crate) fn program() -> Result<PathBuf, String> {
        let program = servers::program_beside_us("tessera-jack-peer");
        match servers::is_program(&program) {
            true => Ok(program),
            false => Err("tessera-jack-peer is not built: cargo build -p tessera-jack-peer".into()),
        }
    }

    /// Starts `command` (the peer with its arguments, through pw-jack for
    /// PipeWire) pinned to `core`, logging into `log`.
    pub(crate) fn start(
        command: &mut Command,
        core: Option<usize>,
        log: &Path,
    ) -> Result<PeerClients, String> {
        let (out, err) = servers::log_to(log)?;
        command.stdin(Stdio::piped()).stdout(out).stderr(err);
        let child = servers::spawn_on(command, core, "pipewire-jack")?;
        Ok(PeerClients {
            process: OwnedChild::new(child, "tessera-jack-peer", CHILD_GRACE),
            log: log.to_path_buf(),
        })
    }

    pub(crate) fn pid(&self) -> tessera_sys::proc::Pid {
        self.process.pid()
    }

    /// Starts the clients' timeline at `t0`.
    pub(crate) fn release(&mut self, t0: u64) -> Result<(), String> {
        let log = &self.log;
        self.process
            .tell(&t0.to_string())
            .map_err(|e| format!("{e}: {}", servers::log_tail(log)))
    }

    /// Stops the clients now (SIGTERM by their PID) instead of waiting for
    /// the end of their timeline: the run was interrupted.
    pub(crate) fn cut_short(&mut self) {
        self.process.stop();
    }

    /// Waits until the clients released at `t0` ended on their own (at the
    /// end of the run, `total` after t0), or stops them; a note if they
    /// failed.
    pub(crate) fn wait_for_end(&mut self, t0: u64, total: Duration) -> Option<String> {
        let end = t0 + (total + PEER_EXIT_WAIT).as_nanos() as u64;
        let wait = Duration::from_nanos(end.saturating_sub(tessera_sys::clock::monotonic_ns()));
        match self.process.wait_until(Instant::now() + wait) {
            Some(status) if status.success() => None,
            Some(status) => Some(format!(
                "tessera-jack-peer failed ({status}): {}",
                servers::log_tail(&self.log)
            )),
            None => Some(self.process.stop()),
        }
    }
}

/// The measured part of the run (CLOCK_MONOTONIC ns) and its origin.
pub struct Window {
    pub from_ns: u64,
    pub to_ns: u64,
    pub t0_ns: u64,
}

impl Window {
    /// A run of `scenario` whose origin is `t0` (ns): after its warm-up,
    /// to its end.
    pub fn of_run(scenario: &Scenario, t0: u64) -> Window {
        Window {
            from_ns: t0 + scenario.warmup.as_nanos() as u64,
            to_ns: t0 + scenario.total().as_nanos() as u64,
            t0_ns: t0,
        }
    }

    pub(crate) fn contains(&self, ns: u64) -> bool {
        (self.from_ns..self.to_ns).contains(&ns)
    }

    /// Seconds from the run's origin.
    pub(crate) fn t(&self, ns: u64) -> f64 {
        ns.saturating_sub(self.t0_ns) as f64 / 1e9
    }

    /// The window's start and end, in seconds from the run's origin.
    pub(crate) fn seconds(&self) -> (f64, f64) {
        (self.t(self.from_ns), self.t(self.to_ns))
    }
}

/// One cycle: its start, and when each load client that ran finished.
pub(crate) struct Cycle {
    pub frames: u32,
    pub start_ns: u64,
    /// (client, finished − start).
    pub ends: Vec<(usize, u64)>,
    /// Load clients that were open but did not run.
    pub missing: usize,
}

impl Cycle {
    pub fn end_to_end(&self) -> Option<u64> {
        self.ends.iter().map(|&(_, e)| e).max()
    }
}

/// The cycles of the record, in order; every client that is not the
/// monitor is a load.
pub(crate) fn cycles(record: &PeerRecord) -> Vec<Cycle> {
    let monitor = record.client(MONITOR);
    let mut rows = record.rows.clone();
    rows.sort_by_key(|r| (r.frames, r.client));
    // Each load's first and last cycle: it was open in between.
    let mut open: Vec<Option<(u32, u32)>> = vec![None; record.clients.len()];
    for r in rows.iter().filter(|r| Some(r.client) != monitor) {
        let span = open[r.client].get_or_insert((r.frames, r.frames));
        span.1 = r.frames;
    }
    rows.chunk_by(|a, b| a.frames == b.frames)
        .map(|group| {
            let frames = group[0].frames;
            let start_ns = group.iter().map(|r| r.start_ns).min().unwrap_or(0);
            let ends: Vec<(usize, u64)> = group
                .iter()
                .filter(|r| Some(r.client) != monitor)
                .map(|r| (r.client, r.finished_ns.saturating_sub(start_ns)))
                .collect();
            let expected = open
                .iter()
                .flatten()
                .filter(|(first, last)| (*first..=*last).contains(&frames))
                .count();
            Cycle {
                frames,
                start_ns,
                missing: expected.saturating_sub(ends.len()),
                ends,
            }
        })
        .collect()
}

/// Periods between consecutive cycles (ns, with the later cycle's start)
/// and the periods skipped between recorded cycles.
pub(crate) fn periods(cycles: &[&Cycle], frames: u32) -> (Vec<(u64, u64)>, u64) {
    let mut periods = Vec::with_capacity(cycles.len());
    let mut lost = 0;
    for pair in cycles.windows(2) {
        let step = pair[1].frames.wrapping_sub(pair[0].frames);
        if step == frames {
            periods.push((
                pair[1].start_ns,
                pair[1].start_ns.saturating_sub(pair[0].start_ns),
            ));
        } else if frames > 0 && step > frames && step % frames == 0 {
            lost += u64::from(step / frames - 1);
        }
    }
    (periods, lost)
}

/// The worst value of every [`BIN_S`] of time-ordered points.
pub(crate) fn thinned(name: impl Into<String>, points: &[(f64, f64)]) -> Series {
    let mut bins: Vec<(f64, f64)> = Vec::new();
    for &(t, v) in points {
        match bins.last_mut() {
            Some((start, worst)) if t - *start < BIN_S => *worst = worst.max(v),
            _ => bins.push((t, v)),
        }
    }
    let mut series = Series::with_capacity(name, "us", bins.len());
    bins.into_iter().for_each(|(t, v)| {
        series.push(t, v);
    });
    series
}

/// The peer's command line for the subject's clients on the run's
/// timeline (its origin on stdin): a chain, a monitor, each client's load,
/// start and stop.
pub(crate) fn peer_args(subject: &AudioServerSubject, total: Duration) -> Vec<String> {
    let list = |f: &dyn Fn(&tessera_scenario::AudioClient) -> String| {
        subject.clients.iter().map(f).collect::<Vec<_>>().join(",")
    };
    vec![
        "--topology".into(),
        "chain".into(),
        "--monitor".into(),
        "--loads".into(),
        subject.clients.len().to_string(),
        "--load".into(),
        list(&|c| c.load.to_string()),
        "--starts".into(),
        list(&|c| c.start.as_secs_f64().to_string()),
        "--stops".into(),
        list(&|c| c.stop.map_or("-".into(), |s| s.as_secs_f64().to_string())),
        "--t0-ns".into(),
        "stdin".into(),
        "--seconds".into(),
        total.as_secs_f64().to_string(),
    ]
}
