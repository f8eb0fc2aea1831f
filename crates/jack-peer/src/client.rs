//! The JACK clients of the peer: [`LoadClient`] is tessera's `load` node as
//! a JACK client (busy for a fraction of the period on the thread's CPU-time
//! clock, audio `in` copied to `out`), timing itself every cycle and telling
//! which thread runs it, and with `--workgroup` marking each cycle in the
//! workgroup through its [`Bridge`]; [`XrunCounter`] counts the server's
//! xrun notifications (and, for the monitor, when each came).
//!
//! The process callback must never allocate nor wait (but for the bridge's
//! join on the first cycle and its leave once the run is quiet, both
//! outside recording): samples go into a vector reserved before activation, taken with `try_lock` (the main
//! thread locks it only once recording has stopped, so the callback never
//! finds it taken while it matters), and stop being recorded when it is
//! full. The record is read before the clients close: JACK2 ends a client's
//! thread with `pthread_cancel`, which may abort the process (a thread held
//! in a reservation at that moment), and the run's record must survive it.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tessera_sys::clock;

use crate::bridge::Bridge;
use crate::record::{self, Sample};

pub struct LoadClient {
    input: jack::Port<jack::AudioIn>,
    output: jack::Port<jack::AudioOut>,
    busy_ns: u64,
    samples: Arc<Mutex<Vec<Sample>>>,
    recording: Arc<AtomicBool>,
    /// Raised at the end: cycles do no work, so the threads are parked in
    /// JACK's wait when the clients close.
    quiet: Arc<AtomicBool>,
    /// The thread running the process callback (0 until the first cycle).
    tid: Arc<AtomicI32>,
    /// Its membership of the workgroup (`--workgroup`).
    bridge: Option<Bridge>,
    rate: u64,
}

impl LoadClient {
    /// A client busy `busy_s` seconds of CPU time per cycle, recording up to
    /// `capacity` cycles while `recording` is raised, idle once `quiet` is.
    pub fn new(
        client: &jack::Client,
        busy_s: f64,
        capacity: usize,
        recording: Arc<AtomicBool>,
        quiet: Arc<AtomicBool>,
    ) -> Result<LoadClient, jack::Error> {
        Ok(LoadClient {
            input: client.register_port("in", jack::AudioIn::default())?,
            output: client.register_port("out", jack::AudioOut::default())?,
            busy_ns: (busy_s * 1e9) as u64,
            samples: Arc::new(Mutex::new(Vec::with_capacity(capacity))),
            recording,
            quiet,
            tid: Arc::new(AtomicI32::new(0)),
            bridge: None,
            rate: u64::from(client.sample_rate()).max(1),
        })
    }

    /// Makes its process thread a member of the bridge's workgroup.
    pub fn with_bridge(mut self, bridge: Bridge) -> LoadClient {
        self.bridge = Some(bridge);
        self
    }

    /// The process thread's id, once it ran a cycle.
    pub fn thread_id(&self) -> Arc<AtomicI32> {
        Arc::clone(&self.tid)
    }

    /// Where the samples go; lock it only after recording stopped.
    pub fn samples(&self) -> Arc<Mutex<Vec<Sample>>> {
        Arc::clone(&self.samples)
    }

    /// Spins like tessera's `Load` node; returns the CPU time it took.
    fn work(&mut self, scope: &jack::ProcessScope) -> u64 {
        let start = clock::thread_cpu_ns();
        while clock::thread_cpu_ns().saturating_sub(start) < self.busy_ns {
            std::hint::spin_loop();
        }
        self.output
            .as_mut_slice(scope)
            .copy_from_slice(self.input.as_slice(scope));
        clock::thread_cpu_ns().saturating_sub(start)
    }
}

impl jack::ProcessHandler for LoadClient {
    fn process(&mut self, client: &jack::Client, scope: &jack::ProcessScope) -> jack::Control {
        let awake_ns = clock::monotonic_ns();
        if self.tid.load(Ordering::Relaxed) == 0 {
            self.tid
                .store(tessera_sys::proc::current_tid(), Ordering::Relaxed);
        }
        if self.quiet.load(Ordering::Acquire) {
            if let Some(bridge) = &mut self.bridge {
                bridge.leave();
            }
            return jack::Control::Continue;
        }
        // JACK's own clock at the same moment: maps its cycle start onto
        // CLOCK_MONOTONIC whatever clock this libjack reads.
        let jack_awake_us = client.time();
        // JACK2 reports the cycle's start as its frame timer's wake-up
        // estimate, in µs of its own clock.
        let cycle = scope.cycle_times();
        if let (Some(bridge), Ok(times)) = (&mut self.bridge, &cycle) {
            let start_ns = record::cycle_start_ns(awake_ns, jack_awake_us, times.current_usecs);
            let period_ns = u64::from(scope.n_frames()) * 1_000_000_000 / self.rate;
            bridge.begin(start_ns, period_ns);
        }
        let cpu_ns = self.work(scope);
        if let Some(bridge) = &mut self.bridge {
            bridge.end();
        }
        let finished_ns = clock::monotonic_ns();
        let recording = self.recording.load(Ordering::Acquire);
        let samples = recording.then(|| self.samples.try_lock().ok()).flatten();
        if let (Some(mut samples), Ok(times)) = (samples, cycle) {
            if samples.len() < samples.capacity() {
                samples.push(Sample {
                    cycle_frames: times.current_frames,
                    cycle_start_us: times.current_usecs,
                    jack_awake_us,
                    awake_ns,
                    finished_ns,
                    cpu_ns,
                });
            }
        }
        jack::Control::Continue
    }
}

/// Counts xruns; only one client (`counting`) counts, since JACK2 notifies
/// every client of each xrun. With `times`, it also notes when each came
/// (CLOCK_MONOTONIC ns; notifications arrive on a thread that is not the
/// process thread, and the list has room reserved up front).
pub struct XrunCounter {
    xruns: Arc<AtomicU64>,
    counting: bool,
    times: Option<Arc<Mutex<Vec<u64>>>>,
}

impl XrunCounter {
    pub fn new(xruns: Arc<AtomicU64>, counting: bool) -> Self {
        XrunCounter {
            xruns,
            counting,
            times: None,
        }
    }

    pub fn with_times(mut self, times: Arc<Mutex<Vec<u64>>>) -> Self {
        self.times = Some(times);
        self
    }
}

impl jack::NotificationHandler for XrunCounter {
    fn xrun(&mut self, _: &jack::Client) -> jack::Control {
        if self.counting {
            self.xruns.fetch_add(1, Ordering::Relaxed);
            if let Some(Ok(mut times)) = self.times.as_ref().map(|t| t.try_lock()) {
                if times.len() < times.capacity() {
                    times.push(clock::monotonic_ns());
                }
            }
        }
        jack::Control::Continue
    }
}
