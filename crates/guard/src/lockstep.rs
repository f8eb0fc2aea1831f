//! Finding the threads an audio graph runs on when nobody made them
//! real-time: a user's PipeWire without RT rights (no rlimits, no RTKit)
//! runs its data loop, and its clients their process threads, at
//! SCHED_OTHER, and the guard adopts them.
//!
//! They are found from the graph itself, not from their names. PipeWire
//! 0.3.65 names no thread (every thread of the daemon reads `pipewire` in
//! /proc, and its clients' data threads carry the program's name; the
//! `data-loop.N` names came with later versions), and neither the core's nor
//! the nodes' properties in `pw-dump` give a thread id. What it does give is
//! the cycle: the guard's own JACK client runs in every cycle of the graph
//! (the monitor counts them; on JACK2 it counts them from the server's
//! frame time instead, outside the graph), and a thread that runs the
//! graph is woken for
//! every cycle — the driver's timer wakes the daemon's data loop, each
//! client's eventfd wakes its process thread — so it blocks about once a
//! cycle, while the main loops block only when a message comes. A thread of
//! the server or of a client is in step with the graph when, over a window
//! of at least [`WINDOW`] and [`WINDOW_CYCLES`] cycles, its voluntary
//! context switches number between [`MIN_WAKES_PER_CYCLE`] and
//! [`MAX_WAKES_PER_CYCLE`] per cycle (measured on Debian 12: the daemon's
//! data loop 1.3 per cycle, its main loop none, a client's 50 ms timer 0.4).
//!
//! A window in which a client came or went, or the server reported an
//! xrun in more than [`MAX_XRUNS_PER_CYCLE`] of its cycles, is not judged:
//! JACK2 tells every client of each, on a thread of libjack's own, and a
//! client's opening is a dozen requests and answers between the program's
//! thread and the server's — with 60 clients opening four a second, or the
//! graph overrunning every other cycle, jackd's request thread, the opening
//! program's main thread and the clients' notice threads woke as often as
//! the graph and were adopted as running it (jackd's at half a CPU), their
//! reservations at the audio period competing with the graph.
//!
//! It owns only this judgement: it reads /proc and must never change a
//! thread.

use crate::monitor::Snapshot;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tessera_sys::proc::{self, Pid};
use tessera_sys::sched::Tid;

/// The shortest window a thread is judged over.
pub const WINDOW: Duration = Duration::from_secs(1);
/// The fewest graph cycles a thread is judged over.
pub const WINDOW_CYCLES: u64 = 32;
/// Blocking fewer times than this per cycle: not woken by every cycle.
pub const MIN_WAKES_PER_CYCLE: f64 = 0.75;
/// Blocking more often than this per cycle: woken by something else too.
pub const MAX_WAKES_PER_CYCLE: f64 = 3.0;
/// More xruns than this per cycle: the window is not judged.
pub const MAX_XRUNS_PER_CYCLE: f64 = 0.1;

/// Whether `wakes` over `cycles` graph cycles is in step with the graph.
pub fn in_step(wakes: u64, cycles: u64) -> bool {
    if cycles == 0 {
        return false;
    }
    let per_cycle = wakes as f64 / cycles as f64;
    (MIN_WAKES_PER_CYCLE..=MAX_WAKES_PER_CYCLE).contains(&per_cycle)
}

/// Whether the server's notices and requests between `opened` and `now`
/// could have woken threads nearly as often as the graph (see the
/// module's doc).
fn notices_could_pass_for_cycles(opened: &Snapshot, now: &Snapshot) -> bool {
    let cycles = now.cycles.saturating_sub(opened.cycles);
    let xruns = now.xruns.saturating_sub(opened.xruns);
    let clients_changed = now.joins + now.leaves != opened.joins + opened.leaves;
    clients_changed || xruns as f64 > MAX_XRUNS_PER_CYCLE * cycles as f64
}

/// A candidate when a window opened: the times it had been given a CPU,
/// and its voluntary switches when they were read.
#[derive(Clone, Copy)]
struct Opened {
    runs: u64,
    switches: Option<u64>,
}

/// A window under way: what the server had said and each candidate when
/// it opened.
struct Window {
    opened: Instant,
    heard: Snapshot,
    threads: BTreeMap<Tid, Opened>,
}

/// Judges candidate threads window after window.
///
/// Reading a thread's voluntary switches means reading its /proc status,
/// which the kernel formats whole, a dozen times the cost of its
/// schedstat; most candidates are main loops that barely run. So every
/// candidate's runs (schedstat) are read, and its switches only when it
/// may be in step: it is new, or it ran at least [`MIN_WAKES_PER_CYCLE`]
/// times a cycle over the last window (a wake-up is a run, so a thread
/// that ran fewer times cannot be in step). A thread that starts running
/// in step after a quiet window is judged a window later.
#[derive(Default)]
pub struct Lockstep {
    window: Option<Window>,
}

impl Lockstep {
    pub fn new() -> Lockstep {
        Lockstep::default()
    }

    /// Whether the window closes at `cycles`: only then does [`Self::judge`]
    /// read anything, so the caller lists the candidates only then.
    pub fn is_due(&self, cycles: u64) -> bool {
        self.window.as_ref().is_none_or(|w| {
            w.opened.elapsed() >= WINDOW && cycles.saturating_sub(w.heard.cycles) >= WINDOW_CYCLES
        })
    }

    /// Given what the server has said so far (its cycles, xruns and
    /// clients) and the threads that may run the graph, returns those found
    /// in step over the window that just closed (none while it is open, nor
    /// when the server's notices may have woken them) and opens the next
    /// one. A candidate first seen during a window is judged over the next.
    pub fn judge(&mut self, heard: Snapshot, candidates: &[(Pid, Tid)]) -> Vec<(Pid, Tid)> {
        let cycles = heard.cycles;
        if !self.is_due(cycles) {
            return Vec::new();
        }
        let now = Instant::now();
        let window = self
            .window
            .take()
            .filter(|w| !notices_could_pass_for_cycles(&w.heard, &heard));
        let mut found = Vec::new();
        let mut threads = BTreeMap::new();
        for &(pid, tid) in candidates {
            let Ok((_, runs)) = proc::thread_schedstat(pid, tid) else {
                continue;
            };
            let before = window
                .as_ref()
                .and_then(|w| Some((w.heard.cycles, *w.threads.get(&tid)?)));
            let plausible = before.is_none_or(|(then, b)| {
                could_be_in_step(runs.saturating_sub(b.runs), cycles - then)
            });
            let switches = plausible
                .then(|| proc::thread_voluntary_switches(pid, tid).ok())
                .flatten();
            if let (Some((then, b)), Some(now)) = (before, switches) {
                if b.switches
                    .is_some_and(|b| in_step(now.saturating_sub(b), cycles - then))
                {
                    found.push((pid, tid));
                }
            }
            threads.insert(tid, Opened { runs, switches });
        }
        self.window = Some(Window {
            opened: now,
            heard,
            threads,
        });
        found
    }
}

/// Whether a thread given a CPU `runs` times over `cycles` graph cycles
/// may have woken once a cycle (it cannot have woken more often than it
/// ran).
fn could_be_in_step(runs: u64, cycles: u64) -> bool {
    cycles > 0 && runs as f64 >= MIN_WAKES_PER_CYCLE * cycles as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn about_one_wake_per_cycle_is_in_step() {
        // Debian 12's PipeWire: the data loop 60 wakes in 47 cycles.
        assert!(in_step(60, 47));
        assert!(in_step(47, 47));
        // Its main loop, and a client's 50 ms timer against 1024-frame cycles.
        assert!(!in_step(0, 47));
        assert!(!in_step(20, 47));
        // A thread woken by something faster than the graph.
        assert!(!in_step(200, 47));
        assert!(!in_step(5, 0));
    }

    #[test]
    fn a_thread_that_ran_less_than_once_a_cycle_is_not_read_further() {
        assert!(could_be_in_step(36, 47));
        assert!(
            could_be_in_step(400, 47),
            "preempted often: its wake-ups decide"
        );
        assert!(!could_be_in_step(30, 47));
        assert!(!could_be_in_step(30, 0));
    }

    #[test]
    fn a_thread_is_judged_only_once_a_window_has_closed() {
        let me = proc::current_pid();
        let tid = proc::current_tid();
        let mut l = Lockstep::new();
        assert!(
            l.judge(heard(0, 0), &[(me, tid)]).is_empty(),
            "the first window opens"
        );
        assert!(
            l.judge(heard(1000, 0), &[(me, tid)]).is_empty(),
            "open for less than {WINDOW:?}"
        );
    }

    fn heard(cycles: u64, xruns: u64) -> Snapshot {
        Snapshot {
            cycles,
            xruns,
            ..Snapshot::default()
        }
    }

    /// Judges a thread that blocks once per "cycle" over one window of 64
    /// cycles, at whose end the server has said `end`.
    fn judge_a_thread_woken_once_a_cycle(end: Snapshot) -> bool {
        let me = proc::current_pid();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (tick, ticks) = std::sync::mpsc::channel::<bool>();
        let worker = std::thread::spawn(move || {
            tid_tx.send(proc::current_tid()).unwrap();
            while ticks.recv().unwrap_or(false) {}
        });
        let busy = tid_rx.recv().unwrap();
        let mut l = Lockstep::new();
        l.judge(Snapshot::default(), &[(me, busy)]);
        let cycles = end.cycles;
        for _ in 0..cycles {
            tick.send(true).unwrap();
            std::thread::sleep(WINDOW / cycles as u32);
        }
        std::thread::sleep(Duration::from_millis(20));
        let found = l.judge(end, &[(me, busy)]);
        tick.send(false).unwrap();
        worker.join().unwrap();
        found == [(me, busy)]
    }

    #[test]
    fn a_thread_woken_once_a_cycle_is_found() {
        assert!(judge_a_thread_woken_once_a_cycle(heard(64, 0)));
        assert!(
            judge_a_thread_woken_once_a_cycle(heard(64, 6)),
            "an xrun now and then"
        );
    }

    #[test]
    fn a_window_of_xruns_or_clients_coming_and_going_is_not_judged() {
        assert!(!judge_a_thread_woken_once_a_cycle(heard(64, 32)));
        let joined = Snapshot {
            joins: 1,
            ..heard(64, 0)
        };
        assert!(!judge_a_thread_woken_once_a_cycle(joined));
        let left = Snapshot {
            leaves: 2,
            ..heard(64, 0)
        };
        assert!(notices_could_pass_for_cycles(&heard(0, 0), &left));
        assert!(!notices_could_pass_for_cycles(&heard(0, 0), &heard(64, 6)));
    }
}
