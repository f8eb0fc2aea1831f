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
//! (the monitor counts them), and a thread that runs the graph is woken for
//! every cycle — the driver's timer wakes the daemon's data loop, each
//! client's eventfd wakes its process thread — so it blocks about once a
//! cycle, while the main loops block only when a message comes. A thread of
//! the server or of a client is in step with the graph when, over a window
//! of at least [`WINDOW`] and [`WINDOW_CYCLES`] cycles, its voluntary
//! context switches number between [`MIN_WAKES_PER_CYCLE`] and
//! [`MAX_WAKES_PER_CYCLE`] per cycle (measured on Debian 12: the daemon's
//! data loop 1.3 per cycle, its main loop none, a client's 50 ms timer 0.4).
//!
//! It owns only this judgement: it reads /proc and must never change a
//! thread.

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

/// Whether `wakes` over `cycles` graph cycles is in step with the graph.
pub fn in_step(wakes: u64, cycles: u64) -> bool {
    if cycles == 0 {
        return false;
    }
    let per_cycle = wakes as f64 / cycles as f64;
    (MIN_WAKES_PER_CYCLE..=MAX_WAKES_PER_CYCLE).contains(&per_cycle)
}

/// A window under way: the cycles heard and each candidate's voluntary
/// switches when it opened.
struct Window {
    opened: Instant,
    cycles: u64,
    switches: BTreeMap<Tid, u64>,
}

/// Judges candidate threads window after window.
#[derive(Default)]
pub struct Lockstep {
    window: Option<Window>,
}

impl Lockstep {
    pub fn new() -> Lockstep {
        Lockstep::default()
    }

    /// Given the graph's cycle count now and the threads that may run it,
    /// returns those found in step over the window that just closed (none
    /// while it is open) and opens the next one. A candidate first seen
    /// during a window is judged over the next.
    pub fn judge(&mut self, cycles: u64, candidates: &[(Pid, Tid)]) -> Vec<(Pid, Tid)> {
        let now = Instant::now();
        let found = match &self.window {
            Some(w) if now.duration_since(w.opened) < WINDOW => return Vec::new(),
            Some(w) if cycles.saturating_sub(w.cycles) < WINDOW_CYCLES => return Vec::new(),
            Some(w) => candidates
                .iter()
                .filter(|(pid, tid)| {
                    let (Some(&before), Ok(after)) = (
                        w.switches.get(tid),
                        proc::thread_voluntary_switches(*pid, *tid),
                    ) else {
                        return false;
                    };
                    in_step(after.saturating_sub(before), cycles - w.cycles)
                })
                .copied()
                .collect(),
            None => Vec::new(),
        };
        self.window = Some(Window {
            opened: now,
            cycles,
            switches: candidates
                .iter()
                .filter_map(|&(pid, tid)| {
                    Some((tid, proc::thread_voluntary_switches(pid, tid).ok()?))
                })
                .collect(),
        });
        found
    }
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
    fn a_thread_is_judged_only_once_a_window_has_closed() {
        let me = proc::current_pid();
        let tid = proc::current_tid();
        let mut l = Lockstep::new();
        assert!(
            l.judge(0, &[(me, tid)]).is_empty(),
            "the first window opens"
        );
        assert!(
            l.judge(1000, &[(me, tid)]).is_empty(),
            "open for less than {WINDOW:?}"
        );
    }

    #[test]
    fn a_thread_woken_once_a_cycle_is_found() {
        let me = proc::current_pid();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (tick, ticks) = std::sync::mpsc::channel::<bool>();
        // A thread that blocks once per "cycle".
        let worker = std::thread::spawn(move || {
            tid_tx.send(proc::current_tid()).unwrap();
            while ticks.recv().unwrap_or(false) {}
        });
        let busy = tid_rx.recv().unwrap();
        let mut l = Lockstep::new();
        l.judge(0, &[(me, busy)]);
        let cycles = 64;
        for _ in 0..cycles {
            tick.send(true).unwrap();
            std::thread::sleep(WINDOW / cycles as u32);
        }
        std::thread::sleep(Duration::from_millis(20));
        let found = l.judge(cycles, &[(me, busy)]);
        tick.send(false).unwrap();
        worker.join().unwrap();
        assert_eq!(found, [(me, busy)]);
    }
}
