//! tessera against the real peers (issue 3 item 8, issue 9 item 5): Debian's
//! jackd2 and PipeWire, each with its dummy driver, against tessera's timer
//! driver, on the same machine, in one run, 64 frames at 48 kHz, each
//! configuration run after the other:
//!
//! 1. `cyclictest` (rt-tests), one thread at the period and the priority of
//!    the audio threads: what the kernel itself costs a periodic wake-up
//!    (module `cyclictest`);
//! 2. tessera's engine ([`tessera_graph::TimerDriver`], driver + 1 worker,
//!    SCHED_FIFO) on a chain of N `load` nodes, then on a fan-out (source →
//!    N loads in parallel → sink) (module `engine`);
//! 3. jackd2 (`jackd -R -P <prio> -d dummy`) under a private server name,
//!    then PipeWire (headless, its Dummy-Driver, quantum and rate forced to
//!    the run's) in a private runtime directory, each with
//!    `tessera-jack-peer` hosting the equivalent JACK clients (through
//!    `pw-jack` on PipeWire), chain then fan-out (module `clients`); each
//!    server is stopped by its PID, even on failure ([`crate::harness::servers`]).
//!
//! # Figures, per cycle (module `cycles`)
//!
//! * overhead: (last node finished − cycle start) − the nodes' own work that
//!   no schedule can avoid. Chain: the sum of every node's work. Fan-out: the
//!   larger of the critical path's work (source + longest load + sink) and the
//!   total work divided by the cores the graph can use (2 loads cannot share
//!   a core without taking turns). A node's work is its process callback's
//!   CPU time (thread CPU-time clock), measured the same way on every side.
//! * the cycle start: tessera's is the driver's actual wake-up. JACK2's is
//!   what `jack_get_cycle_times` reports, its frame timer's (DLL-filtered)
//!   wake-up estimate, in µs. PipeWire's libjack reports there its driver's
//!   *scheduled* timer expiry (exactly one period apart), which puts the
//!   kernel's timer latency into the overhead that tessera's start leaves
//!   out; PipeWire's cycle starts instead at its first client's wake-up.
//!   That leaves PipeWire's driver and its hand-off to the first client out
//!   of PipeWire's overhead, so tessera ÷ PipeWire errs against tessera; a
//!   note gives how long after the scheduled start the first client woke.
//! * scheduling latency: node awake − node signalled (tessera: its profiler;
//!   JACK clients: awake − predecessor's callback finished, or cycle start —
//!   0 for PipeWire's first client by construction).
//! * driver wake-up latency: actual cycle start − scheduled (tessera's timer
//!   driver), compared with cyclictest's latency.
//! * xruns: as each engine counts them (PipeWire's libjack notifies JACK
//!   clients of none: not counted); late cycles: end-to-end > period,
//!   counted the same way for every configuration.
//!
//! # Machine state
//!
//! cyclictest asks the kernel for a CPU wake-up latency target of 0 µs
//! (`/dev/cpu_dma_latency`, PM QoS) while it runs: idle CPUs then poll
//! instead of halting, which on a virtual machine saves a VM exit and entry
//! per wake-up. The run holds the same target for every configuration
//! ([`Options::cpu_latency_target`]), so all of them see the same machine;
//! without it, cyclictest runs with `--laptop` (no target) like the others.
//!
//! This module owns the run, its options, errors and results. It must never
//! judge a result pass/fail (it reports ratios against the goals) and never
//! leave a server running.

mod clients;
mod cycles;
mod cyclictest;
mod engine;
mod setup;
mod table;

pub use setup::*;

pub use clients::{parse_peer_file, CycleStart, PeerFile};
pub use cycles::{CycleNodes, NodeTimes, Role};
pub use cyclictest::parse_cyclictest_histogram;
pub use table::table;

use std::fs;
use std::path::PathBuf;

use crate::harness::servers;

use tessera_measure::{ConfigurationResult, Counter, Metric, RunResults};

pub struct PeerOutcome {
    pub results: RunResults,
    pub figures: Vec<Figures>,
    /// The text table with ratios.
    pub table: String,
    pub report_dir: PathBuf,
}

/// Runs every configuration once, writes `results.json` and the report into
/// `out_dir`, and returns the figures. `progress` gets one line per step.
pub fn run(options: &Options, mut progress: impl FnMut(&str)) -> Result<PeerOutcome, PeerError> {
    check_programs(options)?;
    fs::create_dir_all(&options.out_dir).map_err(|e| PeerError::Write(e.to_string()))?;
    let _latency_target = match options.cpu_latency_target {
        true => Some(CpuLatencyTarget::hold_zero()?),
        false => None,
    };
    let mut step = |name: &str| progress(&format!("{name}, {:.0} s", options.seconds));
    let mut figures = Vec::new();
    step("cyclictest");
    figures.push(cyclictest::run(options)?);
    for topology in Topology::ALL {
        step(&format!("tessera {}", topology.name()));
        figures.push(engine::run(options, topology)?);
    }
    for kind in SERVERS {
        let server = clients::start_server(options, kind)?;
        for topology in Topology::ALL {
            step(&clients::configuration(kind, topology));
            figures.push(clients::run(options, &server, topology)?);
        }
        server.stop();
    }
    finish(options, figures)
}

/// Refuses to start when a program is missing, before anything runs.
fn check_programs(options: &Options) -> Result<(), PeerError> {
    let missing: Vec<String> = options
        .programs()
        .into_iter()
        .filter(|(program, _)| !servers::is_program(program))
        .map(|(program, package)| format!("{} ({package})", program.display()))
        .collect();
    match missing.is_empty() {
        true => Ok(()),
        false => Err(PeerError::Tool {
            what: "missing programs".into(),
            message: missing.join(", "),
            fix: INSTALL_FIX,
        }),
    }
}

/// Writes `results.json`, the report and the table.
fn finish(options: &Options, figures: Vec<Figures>) -> Result<PeerOutcome, PeerError> {
    let write_error = |e: &dyn std::fmt::Display| PeerError::Write(e.to_string());
    let results = results(options, &figures);
    results
        .save(&options.out_dir.join("results.json"))
        .map_err(|e| write_error(&e))?;
    tessera_measure::write_report(&results, &options.out_dir).map_err(|e| write_error(&e))?;
    let table = table(options, &figures);
    fs::write(options.out_dir.join("figures.txt"), &table).map_err(|e| write_error(&e))?;
    Ok(PeerOutcome {
        results,
        figures,
        table,
        report_dir: options.out_dir.clone(),
    })
}

// ------------------------------------------------------------ machine state

const CPU_DMA_LATENCY: &str = "/dev/cpu_dma_latency";

/// A PM QoS CPU latency request: in force while the file stays open.
struct CpuLatencyTarget {
    _file: fs::File,
}

impl CpuLatencyTarget {
    fn hold_zero() -> Result<CpuLatencyTarget, PeerError> {
        use std::io::Write;
        let mut file = fs::OpenOptions::new()
            .write(true)
            .open(CPU_DMA_LATENCY)
            .map_err(tool(format!("opening {CPU_DMA_LATENCY}"), "run as root"))?;
        // The kernel takes a binary s32 in µs.
        file.write_all(&0i32.to_ne_bytes())
            .map_err(tool(format!("writing {CPU_DMA_LATENCY}"), "run as root"))?;
        Ok(CpuLatencyTarget { _file: file })
    }
}

// ------------------------------------------------------------------ output

fn results(options: &Options, figures: &[Figures]) -> RunResults {
    let mut results =
        RunResults::start("tessera vs JACK2 and PipeWire (dummy drivers) vs cyclictest");
    results.duration_s = options.seconds;
    results.warmup_s = WARM_UP.as_secs_f64();
    results.baseline = Some("JACK2 chain".into());
    let period_us = Some(options.period_ns() as f64 / 1_000.0);
    for f in figures {
        let mut metrics = Vec::new();
        if f.cycle_time.count() > 0 {
            metrics.push(Metric::latency(OVERHEAD, None, f.overhead.clone()));
            metrics.push(Metric::latency(
                SCHEDULING_LATENCY,
                None,
                f.scheduling.clone(),
            ));
            metrics.push(Metric::latency(CYCLE_TIME, period_us, f.cycle_time.clone()));
        }
        if let Some(wakeup) = &f.wakeup {
            metrics.push(Metric::latency(WAKEUP_LATENCY, None, wakeup.clone()));
        }
        let mut notes = f.notes.clone();
        let xruns = f
            .xruns
            .map_or("xruns not counted".to_string(), |n| format!("{n} xruns"));
        notes.push(format!(
            "{} cycles, {xruns}, {} late cycles",
            f.cycles, f.late_cycles
        ));
        let mut counters = Counter::counts([(CYCLES, f.cycles), (LATE_CYCLES, f.late_cycles)]);
        counters.extend(f.xruns.map(|n| Counter::count(XRUNS, n)));
        results.configurations.push(ConfigurationResult {
            labels: Default::default(),
            name: f.name.clone(),
            counters,
            notes,
            metrics,
            why: None,
        });
    }
    results
}

/// The directory a run writes to by default: `results/peer-<unix time>`.
pub fn default_out_dir() -> PathBuf {
    super::output::default_dir("peer")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_is_named_before_anything_runs() {
        let mut options = Options::new("unused".into());
        options.jackd = "/nonexistent/jackd".into();
        let error = check_programs(&options).unwrap_err();
        assert!(error.to_string().contains("/nonexistent/jackd (jackd2)"));
        assert!(error.fix().contains("pipewire-jack"));
        let needed: Vec<&str> = options.programs().iter().map(|(_, p)| *p).collect();
        assert!(needed.contains(&"pipewire-jack") && needed.contains(&"rt-tests"));
        assert_eq!(CONFIGURATIONS, 7);
    }
}
