//! tessera's LAN music application (seed 000 §3, Fig. 5): the SLABS
//! multitouch interface, emulated, playing the Migrator Synthesizer across
//! UDP, with the response time measured at both ends.
//!
//! - [`protocol`]: the packet format (16 input packets of 2 frames per
//!   package, one output packet of 32 frames × 8 channels back);
//! - [`emulator`]: the SLABS — paced sender, tf − t0 per package;
//! - [`lan`]: the SLABS's network namespace and the veth pair to it;
//! - [`nodes`]: the Migrator Synthesizer as a graph (32 object nodes, the
//!   mixer), [`control`]: OSC routed to the nodes;
//! - [`app`]: Fig. 5 — the network service, the synth cell's engine and the
//!   console, each role on its own threads; Δt = t2 − t1 per package;
//! - [`windows`]: Δt aggregated per window for runs of an hour;
//! - [`report`]: the synth cell's deadline misses (the engine's late
//!   cycles) sent to the broker's monitor while the application runs;
//! - [`run`]: the application in its three cells (network, synth, console:
//!   the seed's Group 1) and the emulator, in one process on loopback or
//!   across a veth pair ([`lan`], the seed's LAN).
//!
//! This crate owns the application and its measurement. It must never
//! decide what a cell gets beyond asking for one: the broker admits it.

pub mod app;
pub mod control;
pub mod emulator;
pub mod lan;
pub mod nodes;
pub mod protocol;
pub mod report;
pub mod windows;

use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;
use tessera_broker::paths::Paths;
use tessera_broker::{BrokerError, Mode, Session};
use tessera_measure::machine::MachineWatch;
use tessera_measure::{ConfigurationResult, LatencyHistogram, Metric, RunResults, Summary};
use tessera_policy::{CellRequest, CoreRequest, Placement};
use tessera_runtime::CellJoin;
use tessera_services::network::{NetworkReport, PackageTiming};
use tessera_synth::{Gesture, GesturePlayer, OutputBlock, Synth, SynthConfig, BLOCK, CHANNELS};

use app::{App, AppConfig, AppError, AppReport, Roles, ThreadHook, DEADLINE};
use emulator::{EmulatorConfig, EmulatorError, EmulatorReport};
use lan::{Lan, LanError};

/// Metric names in the results.
pub const RESPONSE_METRIC: &str = "Δt (t2 − t1)";
pub const EMULATOR_METRIC: &str = "tf − t0";
pub const SERVICE_METRIC: &str = "t2 − last packet";
pub const LATENESS_METRIC: &str = "send lateness (jitter)";
pub const RATE_METRIC: &str = "achieved packet rate";

/// The synth cell's budget: this multiple of the measured p99 block time …
const BUDGET_FACTOR: u64 = 2;
/// … plus this for the link, the engine's own work and the host's noise …
const BUDGET_OVERHEAD_NS: u64 = 100_000;
/// … but at most this share of the package period, in percent.
const BUDGET_CAP_PERCENT: u64 = 60;
/// The network cell's budget per package: 16 wake-ups and receives, the
/// hand-over, one send — about 160–185 µs measured on a 2-vCPU KVM guest,
/// where every wake-up costs a VM exit — with room to catch up.
const NETWORK_BUDGET_NS: u64 = 250_000;
/// The console cell: a small global reservation; it only drains a ring.
const CONSOLE_BUDGET_NS: u64 = 500_000;
const CONSOLE_PERIOD_NS: u64 = 10_000_000;
/// Blocks timed to size the budget (after as many untimed ones).
const TIMED_BLOCKS: usize = 300;

/// What a run plays, for how long, and where it reports.
#[derive(Debug, Clone)]
pub struct Options {
    pub seconds: f64,
    pub gesture: Gesture,
    pub synth: SynthConfig,
    /// Packages at the start that are not measured (the seed's 1 s).
    pub warmup: Duration,
    /// Run each role in its cell when privileged.
    pub cell: bool,
    /// Threads of the synth cell beside the communication thread.
    pub workers: usize,
    /// Where OSC controls are taken; `None`: no OSC.
    pub osc: Option<std::net::SocketAddr>,
    /// The network role through the network service process (its socket
    /// and the flow to ask for); `None`: a socket of its own.
    pub service: Option<app::ServiceFlow>,
    /// Put the SLABS across a veth pair in a network namespace of its own
    /// (the seed's LAN, root only) instead of on loopback.
    pub lan: bool,
    /// The broker's state directory (embedded); `None`: the daemon or the
    /// default embedded broker.
    pub broker: Option<Paths>,
    /// Where results.json and the report go; `None`: nowhere.
    pub out_dir: Option<PathBuf>,
    /// What is kept of each package's timing (every one by default).
    pub timings: app::Timings,
}

impl Options {
    /// `seconds` of `gesture` with the seed's synthesizer, 1 s of warm-up,
    /// in a cell when privileged, no report.
    pub fn new(seconds: f64, gesture: Gesture) -> Options {
        Options {
            seconds,
            gesture,
            synth: SynthConfig::default(),
            warmup: Duration::from_secs(1),
            cell: true,
            workers: 0,
            osc: None,
            service: None,
            lan: false,
            broker: None,
            out_dir: None,
            timings: app::Timings::Every,
        }
    }

    fn warmup_packages(&self) -> u64 {
        self.warmup.as_nanos() as u64 / protocol::package_period_ns()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MusicError {
    #[error(transparent)]
    App(#[from] AppError),
    #[error("the emulator: {0}")]
    Emulator(#[from] EmulatorError),
    #[error("the application's cell: {0}")]
    Cell(#[from] BrokerError),
    #[error("the report: {0}")]
    Report(String),
    #[error("the emulator's thread panicked")]
    Panicked,
    #[error(transparent)]
    Lan(#[from] LanError),
}

/// What a run measured.
pub struct Outcome {
    pub results: RunResults,
    pub app: AppReport,
    pub emulator: EmulatorReport,
    /// How the engine ran (cell and budget, or why not).
    pub notes: Vec<String>,
    pub report_dir: Option<PathBuf>,
}

/// Starts the application and the emulator in this process, on loopback or
/// across a LAN, for `options.seconds`, and returns (and writes, given
/// `out_dir`) the results.
pub fn run(options: &Options) -> Result<Outcome, MusicError> {
    let mut notes = Vec::new();
    let cells = match options.cell && Mode::detect() == Mode::Guaranteed {
        true => Some(GroupOne::create(options, &mut notes)?),
        false => {
            notes.push(
                "no cells: every thread runs best-effort (SCHED_OTHER); nothing is guaranteed"
                    .into(),
            );
            None
        }
    };
    let lan = options.lan.then(Lan::create).transpose()?;
    if let Some(lan) = &lan {
        notes.push(format!(
            "LAN: the application at {}, the SLABS at {} in a network namespace of its own, \
             joined by a veth pair",
            lan.app_address(),
            lan.slabs_address()
        ));
    }
    let duration = Duration::from_secs_f64(options.seconds);
    let mut emulator_config = EmulatorConfig::new(
        "127.0.0.1:0".parse().expect("a socket address"),
        duration,
        options.gesture.clone(),
    );
    emulator_config.warmup_packages = options.warmup_packages();
    if let Some(dir) = &options.out_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| MusicError::Report(format!("{}: {e}", dir.display())))?;
    }
    let app = App::start(AppConfig {
        bind: lan::app_bind(lan.as_ref()),
        service: options.service.clone(),
        osc: options.osc,
        synth: options.synth.clone(),
        warmup_packages: options.warmup_packages(),
        expected_packages: emulator_config.packages() as usize,
        workers: options.workers,
        roles: cells.as_ref().map(GroupOne::roles).unwrap_or_default(),
        report: cells.as_ref().map(GroupOne::synth),
        package_log: options.out_dir.as_ref().map(|d| d.join("packages.csv")),
        timings: options.timings,
    })?;
    emulator_config.to = app.local_addr();
    let machine = MachineWatch::start();
    let emulator = lan::spawn_slabs(lan.as_ref(), move || emulator::run(&emulator_config))?
        .join()
        .map_err(|_| MusicError::Panicked)???;
    let app = app.stop()?;
    let taken = machine.taken();
    notes.extend(taken.note());
    drop((cells, lan));
    let mut results = results(options, &app, &emulator, &notes);
    if let Some(c) = results.configurations.first_mut() {
        c.counters.extend(taken.counters());
    }
    if let Some(dir) = &options.out_dir {
        write(&results, dir)?;
    }
    Ok(Outcome {
        results,
        app,
        emulator,
        notes,
        report_dir: options.out_dir.clone(),
    })
}

/// How the SLABS reaches the application, as reports name it.
pub fn network_name(lan: bool) -> &'static str {
    match lan {
        true => "LAN (veth pair, SLABS in its own namespace)",
        false => "loopback",
    }
}

fn results(
    options: &Options,
    app: &AppReport,
    emulator: &EmulatorReport,
    notes: &[String],
) -> RunResults {
    let deadline_us = Some(DEADLINE.as_nanos() as f64 / 1000.0);
    let mut results = RunResults::start("music: SLABS emulator and Migrator Synthesizer");
    results.duration_s = options.seconds;
    results.warmup_s = options.warmup.as_secs_f64();
    let rate = emulator.achieved_packet_rate();
    let mut configuration_notes = notes.to_vec();
    configuration_notes.push(format!(
        "{} packages sent, {} answered, {} unexpected answers; {} cycles, {} xruns, {} malformed packages",
        emulator.packages_sent,
        emulator.answered,
        emulator.unexpected,
        app.cycles,
        app.xruns,
        app.malformed_packages
    ));
    configuration_notes.push(network_note(&app.network));
    configuration_notes.push(misses_note(app.misses, app.sender_misses));
    configuration_notes.push(format!(
        "pacing: {rate:.1} packets/s (nominal {:.1}), send lateness p50 {:.1} µs, p99 {:.1} µs, \
         schedule slipped by {} packages",
        emulator::nominal_packet_rate(),
        emulator.send_lateness.quantile(0.5) as f64 / 1000.0,
        emulator.send_lateness.quantile(0.99) as f64 / 1000.0,
        emulator.slipped_packages
    ));
    results.configurations.push(ConfigurationResult {
        labels: Default::default(),
        name: network_name(options.lan).into(),
        counters: Vec::new(),
        notes: configuration_notes,
        metrics: vec![
            Metric::latency(RESPONSE_METRIC, deadline_us, app.response.clone()),
            Metric::latency(SERVICE_METRIC, None, app.service.clone()),
            Metric::latency(EMULATOR_METRIC, deadline_us, emulator.response.clone()),
            Metric::latency(LATENESS_METRIC, None, emulator.send_lateness.clone()),
            Metric {
                name: RATE_METRIC.into(),
                unit: "packets/s".into(),
                deadline: None,
                summary: Summary::from_samples(&[rate], None),
                histogram: None,
                series: Vec::new(),
            },
        ],
        why: None,
    });
    results
}

fn write(results: &RunResults, dir: &std::path::Path) -> Result<(), MusicError> {
    let fail = |e: &dyn std::fmt::Display| MusicError::Report(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
    results
        .save(&dir.join("results.json"))
        .map_err(|e| fail(&e))?;
    tessera_measure::write_report(results, dir).map_err(|e| fail(&e))?;
    Ok(())
}

/// The sender's span of a package beyond which a miss is blamed on it.
const SENDER_SLACK_NS: u64 = 200_000;

/// The longest a sender may take to send a package before its misses are
/// blamed on it: the pacing of its 16 packets plus [`SENDER_SLACK_NS`].
fn sender_span_ns() -> u64 {
    protocol::packet_offset_ns(protocol::PACKETS_PER_PACKAGE as u64 - 1) + SENDER_SLACK_NS
}

/// Whether a package's sender took over [`sender_span_ns`] to send it (the
/// SLABS stalled mid-package): a miss of it is the sender's.
pub fn sender_stalled(timing: &PackageTiming) -> bool {
    timing.complete_ns.saturating_sub(timing.t1_ns) > sender_span_ns()
}

/// Misses (Δt over the deadline) among `timings` after the warm-up, and
/// how many of them the sender stalled ([`sender_stalled`]).
pub fn count_misses(timings: &[PackageTiming], warmup_packages: u64) -> (u64, u64) {
    let deadline = DEADLINE.as_nanos() as u64;
    let measured = timings.iter().skip(warmup_packages as usize);
    measured
        .filter(|t| t.response_ns() > deadline)
        .fold((0, 0), |(misses, sender), t| {
            (misses + 1, sender + u64::from(sender_stalled(t)))
        })
}

/// Where Δt's misses came from: the sender taking longer than its pacing to
/// send a package (the SLABS stalled mid-package) or the receiving side
/// answering late after the last packet.
pub fn miss_note(timings: &[PackageTiming], warmup_packages: u64) -> String {
    let (misses, sender) = count_misses(timings, warmup_packages);
    misses_note(misses, sender)
}

/// [`miss_note`] of counts: `misses`, of which `sender` the sender's.
pub fn misses_note(misses: u64, sender: u64) -> String {
    format!(
        "of {misses} misses, {sender} had a sender that took over {:.0} µs to send its package \
         (the SLABS stalled mid-package), {} were late after the last packet (the receiving side)",
        sender_span_ns() as f64 / 1000.0,
        misses - sender
    )
}

/// What the network service lost, and where.
pub fn network_note(n: &NetworkReport) -> String {
    format!(
        "network: {} datagrams, {} packages handed over, {} answered; lost: {} datagrams \
         (wrong size or out of step), {} incomplete packages, {} packages the synth cell had \
         no room for, {} answers, {} send errors; receive buffer {} KiB; CPU {:.1} µs per \
         package; datagrams waited in the socket {:.1} µs on average, at most {:.1} µs; \
         joining its cell took {:.1} ms, its longest gap between passes {:.1} ms",
        n.datagrams,
        n.packages,
        n.answered,
        n.dropped_packets,
        n.incomplete_packages,
        n.packages_lost,
        n.outputs_lost,
        n.send_errors,
        n.receive_buffer / 1024,
        n.cpu_ns as f64 / 1000.0 / n.packages.max(1) as f64,
        n.socket_wait_total_ns as f64 / 1000.0 / n.datagrams.max(1) as f64,
        n.socket_wait_max_ns as f64 / 1000.0,
        n.setup_ns as f64 / 1e6,
        n.longest_pass_gap_ns as f64 / 1e6
    )
}

/// The seed's Group 1 cells (Table 1: music application, network service,
/// console service), destroyed when dropped.
struct GroupOne {
    session: Session,
    joins: [CellJoin; 3],
}

impl GroupOne {
    /// Sizes the synth cell's budget from the synthesizer's measured block
    /// time and asks the broker for the three cells: synth and network
    /// event-triggered per package period, partitioned; the console a small
    /// global reservation.
    fn create(options: &Options, notes: &mut Vec<String>) -> Result<GroupOne, MusicError> {
        let id = std::process::id();
        let period_ns = protocol::package_period_ns();
        let block_p99 = block_times(&options.synth, &options.gesture)?.quantile(0.99);
        let wanted = BUDGET_FACTOR * block_p99 + BUDGET_OVERHEAD_NS;
        let budget = wanted.min(period_ns * BUDGET_CAP_PERCENT / 100);
        let slots = options.workers + 1;
        notes.push(format!(
            "synth cell: event-triggered with reclaiming, {slots} reservation(s) of {:.0} µs every \
             {:.1} µs ({BUDGET_FACTOR} × p99 block time {:.0} µs + {} µs{}); network cell: {} µs \
             every {:.1} µs; console cell: {} µs every {} ms, global",
            budget as f64 / 1000.0,
            period_ns as f64 / 1000.0,
            block_p99 as f64 / 1000.0,
            BUDGET_OVERHEAD_NS / 1000,
            if budget < wanted {
                ", capped at 60 % of the period"
            } else {
                ""
            },
            NETWORK_BUDGET_NS / 1000,
            period_ns as f64 / 1000.0,
            CONSOLE_BUDGET_NS / 1000,
            CONSOLE_PERIOD_NS / 1_000_000,
        ));
        // Reclaiming (GRUB) lets a cycle that outgrows its budget use the
        // core's idle time instead of being throttled while packets wait.
        let requests = [
            CellRequest {
                reclaim: true,
                cores: CoreRequest::Count(slots),
                ..CellRequest::event_triggered(format!("music-synth-{id}"), budget, period_ns)
            },
            CellRequest {
                reclaim: true,
                ..CellRequest::event_triggered(
                    format!("music-net-{id}"),
                    NETWORK_BUDGET_NS,
                    period_ns,
                )
            },
            CellRequest {
                placement: Placement::Global,
                ..CellRequest::event_triggered(
                    format!("music-console-{id}"),
                    CONSOLE_BUDGET_NS,
                    CONSOLE_PERIOD_NS,
                )
            },
        ];
        let join = |name: &str| match &options.broker {
            Some(paths) => CellJoin::embedded(name, paths.clone()),
            None => CellJoin::connect(name),
        };
        let mut session = match &options.broker {
            Some(paths) => Session::embedded(paths.clone()),
            None => Session::connect()?,
        };
        let joins = requests.clone().map(|r| join(&r.name));
        let mut created = Vec::new();
        for request in requests {
            let name = request.name.clone();
            if let Err(e) = session.create_cell(request, true) {
                destroy_all(&mut session, &created);
                return Err(e.into());
            }
            created.push(name);
        }
        Ok(GroupOne { session, joins })
    }

    /// The synth's cell, its misses reported to the broker.
    fn synth(&self) -> CellJoin {
        self.joins[0].clone()
    }

    fn roles(&self) -> Roles {
        let hook = |join: &CellJoin| Some(Arc::new(join.hook()) as ThreadHook);
        Roles {
            synth: hook(&self.joins[0]),
            network: hook(&self.joins[1]),
            console: hook(&self.joins[2]),
        }
    }
}

impl Drop for GroupOne {
    fn drop(&mut self) {
        let names: Vec<String> = self.joins.iter().map(|j| j.cell().to_string()).collect();
        destroy_all(&mut self.session, &names);
    }
}

/// Destroys `names`, retrying once: a thread that just left can hold its
/// cell for an instant.
fn destroy_all(session: &mut Session, names: &[String]) {
    for name in names {
        if session.destroy_cell(name).is_err() {
            std::thread::sleep(Duration::from_millis(200));
            if let Err(e) = session.destroy_cell(name) {
                eprintln!("tessera music: cell {name:?} not destroyed: {e}");
            }
        }
    }
}

/// The CPU time of synthesizer blocks for this input, on the calling
/// thread (outside any cell; its thread CPU clock, so that a preemption
/// does not count): [`TIMED_BLOCKS`] of them, after as many untimed ones.
pub fn block_times(
    config: &SynthConfig,
    gesture: &Gesture,
) -> Result<LatencyHistogram, MusicError> {
    let mut synth = Synth::new(config.clone()).map_err(AppError::from)?;
    let pads = *GesturePlayer::new(gesture.clone()).advance(0.0);
    let mut block: OutputBlock = [[0.0; CHANNELS]; BLOCK];
    let mut times = LatencyHistogram::new(1_000_000_000);
    for i in 0..2 * TIMED_BLOCKS {
        let start = tessera_sys::clock::thread_cpu_ns();
        synth.process(&pads, &mut block);
        if i >= TIMED_BLOCKS {
            times.record(tessera_sys::clock::thread_cpu_ns() - start);
        }
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(span_us: u64, service_us: u64) -> PackageTiming {
        let t1_ns = 1_000_000_000;
        let complete_ns = t1_ns + span_us * 1000;
        PackageTiming {
            t1_ns,
            complete_ns,
            t2_ns: complete_ns + service_us * 1000,
        }
    }

    #[test]
    fn misses_are_blamed_on_the_sender_or_on_the_receiving_side() {
        let timings = [
            timing(4000, 100), // warm-up: not counted
            timing(680, 200),  // on time
            timing(3000, 150), // the SLABS stalled mid-package
            timing(681, 900),  // answered late
            timing(700, 800),  // answered late
        ];
        assert_eq!(
            miss_note(&timings, 1),
            "of 3 misses, 1 had a sender that took over 880 µs to send its package (the SLABS \
             stalled mid-package), 2 were late after the last packet (the receiving side)"
        );
    }
}
