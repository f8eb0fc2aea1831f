//! The netphone as a scenario's subject (seed 004 §4): mike and speaker in
//! hosts of their own across a shaped link, each role scheduled as the
//! configuration says (a cell, plain), mike's packets marked real-time or
//! not, a flood on the link if the subject asks, and, if the configuration
//! names a `service` role, the speaker's packets through a real-time flow
//! of the network service process (`tessera serve net`, started inside
//! the speaker's host, its real-time thread in that role's cell: seed 004
//! §3.4's real-time packets first on the receiving host). Reported, for
//! the packets sent after the warm-up: T4 − T1 (the seed's end-to-end
//! delay, with its 10 ms goal as the deadline; histogram, tail, and
//! T2 − T1, T3 − T1, T4 − T1 against time over the 2 s around the worst
//! packet, as the seed's Figures 2–3), the delay's parts (mike's wake-up,
//! T2 − T1, T3 − T2, T4 − T3), the packets lost or stamped out of order,
//! the service's counters of the speaker's flow, and the seed's Tables 1–2
//! in its own units beside this run's numbers.
//!
//! Owns starting and stopping the netphone around the runner's release,
//! the service process (stopped by its PID however the run ends, its log
//! directory removed) and the report section. It must never judge a
//! result, nor leave the service running past its configuration.

use crate::subject::contract::{Measured, Running, Stopped};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cells::{role, setup_for};
use crate::figures::{latency_metric, within_cell};
use crate::harness::net_service::{await_listening, flow_counters, flow_note, spawn_service};
use crate::harness::servers::{program_beside_us, unique, OwnedChild};
use tessera_measure::{ConfigurationResult, Counter, RunResults, Series};
use tessera_scenario::{
    Configuration, NetphoneSettings, Scenario, Sched, ServicePlan, Subject,
    NETPHONE_ROLES as ROLES, NETPHONE_SERVICE_ROLE as SERVICE_ROLE,
};
use tessera_services::net::{Class, Discipline};
use tessera_sys::clock::{monotonic_ns, realtime_ns};
use tessera_workloads::netphone::{
    Hooks, Launch, Netphone, NetphoneReport, NetphoneSpec, Receive, Record, SpeakerHost,
};

/// The seed's end-to-end delay, and the metric its table reports.
pub const METRIC: &str = "end-to-end delay (T4 − T1)";
/// The seed's goal: "to limit the system delay to 10 ms".
pub const GOAL: Duration = Duration::from_millis(10);
/// Mike's wake-up after its timer expired.
const WAKE_METRIC: &str = "mike wake-up (wake − T1)";
const SENDER_METRIC: &str = "at the sender (T2 − T1)";
const NETWORK_METRIC: &str = "in the network (T3 − T2)";
const RECEIVER_METRIC: &str = "at the receiver (T4 − T3)";
/// Width of the seed's figures' window.
const WINDOW_NS: u64 = 2_000_000_000;
/// Note prefixes the report section looks for.
const STREAM_NOTE: &str = "netphone: ";
const PACKETS_NOTE: &str = "netphone packets: ";
const SEED_NOTE: &str = "seed 004 counterpart: ";
/// Labels: the stream's settings and roles, the seed's row it meets.
const STREAM: &str = "netphone stream";
const SEED_COUNTERPART: &str = "seed 004 counterpart";
/// Counters of the flood, when there was one.
const FLOOD_DATAGRAMS: &str = "flood datagrams sent";
const FLOOD_REFUSED: &str = "flood sends refused";
const SERVICE_NOTE: &str = "network service: ";

/// The netphone, set up and waiting for the release.
pub(crate) struct NetphoneRun {
    phone: Netphone,
    settings: NetphoneSettings,
    roles: String,
    seed: Option<&'static SeedRow>,
    /// The release on CLOCK_REALTIME, where the stamps are.
    t0_realtime: u64,
    service: Option<ServiceWatch>,
}

/// What it measured, with what the report says of the configuration.
pub(crate) struct NetphoneData {
    report: NetphoneReport,
    settings: NetphoneSettings,
    roles: String,
    seed: Option<&'static SeedRow>,
    t0_realtime: u64,
    service: Option<ServiceWatch>,
}

/// `tessera serve net` in the speaker's host, as the netphone holds it:
/// stopped by its PID and its log directory removed when dropped (when
/// the speaker has let go of its flow, or the start failed).
struct ServiceProcess {
    child: Option<OwnedChild>,
    log_dir: PathBuf,
    watch: Arc<Mutex<ServiceState>>,
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let stopped = child.stop();
            if let Ok(mut state) = self.watch.lock() {
                state.stopped = Some(stopped);
            }
        }
        let _ = std::fs::remove_dir_all(&self.log_dir);
    }
}

/// What the report says of the service: where it listened, how its
/// real-time thread ran, its PID and how it ended.
struct ServiceWatch {
    socket: PathBuf,
    real_time: String,
    state: Arc<Mutex<ServiceState>>,
}

#[derive(Default)]
struct ServiceState {
    pid: Option<i32>,
    stopped: Option<String>,
}

impl ServiceWatch {
    fn describe(&self) -> String {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let pid = state
            .pid
            .map_or("not started".into(), |p| format!("pid {p}"));
        let stopped = state.stopped.as_deref().unwrap_or("still running");
        format!(
            "{SERVICE_NOTE}`tessera serve net` in the speaker's host ({pid}, socket {}), its \
             real-time thread {}; {stopped}",
            self.socket.display(),
            self.real_time
        )
    }
}

/// The launch hook that starts the service in the speaker's host with
/// its real-time thread scheduled by `sched`, listening at `socket`, and
/// what watches it.
fn service_launch(sched: &Sched, link_bps: u64, socket: PathBuf) -> (Launch, ServiceWatch) {
    let state = Arc::new(Mutex::new(ServiceState::default()));
    let watch = ServiceWatch {
        socket: socket.clone(),
        real_time: match &sched.cell {
            Some(cell) => format!("in cell {cell:?}"),
            None => "SCHED_OTHER (no cell)".into(),
        },
        state: Arc::clone(&state),
    };
    // What `spawn_service` reads of a plan: the discipline and the link.
    let plan = ServicePlan {
        discipline: Discipline::MClock,
        reservation_bps: 0,
        class: Class::RealTime,
        streamer: false,
        link_bps,
    };
    let sched = sched.clone();
    let launch: Launch = Box::new(move |host: &SpeakerHost<'_>| {
        let log_dir = socket
            .parent()
            .expect("a socket in a directory")
            .to_path_buf();
        std::fs::create_dir_all(&log_dir).map_err(|e| format!("{}: {e}", log_dir.display()))?;
        let mut process = ServiceProcess {
            child: None,
            log_dir: log_dir.clone(),
            watch: state,
        };
        let command = host.command(&program_beside_us("tessera"))?;
        let child = spawn_service(command, &plan, &socket, &log_dir, &sched)?;
        if let Ok(mut state) = process.watch.lock() {
            state.pid = Some(child.pid());
        }
        let child = process.child.insert(child);
        await_listening(child, &socket, &log_dir)?;
        Ok(Box::new(process))
    });
    (launch, watch)
}

impl NetphoneRun {
    pub(crate) fn start(
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<NetphoneRun, String> {
        let Subject::Netphone(subject) = &scenario.subject else {
            unreachable!("called for netphone subjects only")
        };
        let settings = config
            .netphone
            .clone()
            .expect("validated for netphone subjects");
        let hook = |name| -> tessera_workloads::Setup {
            Box::new(setup_for(role(config, name), scenario.core))
        };
        let (receive, launch, service) = match settings.service {
            true => {
                let dir = std::env::temp_dir().join(unique("tessera-netphone-service"));
                let socket = dir.join("net.sock");
                let sched = role(config, SERVICE_ROLE);
                let (launch, watch) = service_launch(sched, subject.link_bps, socket.clone());
                (Receive::Service { socket }, Some(launch), Some(watch))
            }
            false => (Receive::Socket, None, None),
        };
        let spec = NetphoneSpec {
            stream: settings.stream,
            duration: scenario.total(),
            link_bps: subject.link_bps,
            marked: settings.marked,
            flood: subject.flood,
            receive,
        };
        let hooks = Hooks {
            mike: hook("mike"),
            speaker: hook("speaker"),
            service: launch,
        };
        let scheds = ROLES.map(|r| role(config, r));
        let mut roles = ROLES
            .iter()
            .zip(&scheds)
            .map(|(r, s)| format!("{r} {}", s.describe()))
            .collect::<Vec<_>>();
        if settings.service {
            let sched = role(config, SERVICE_ROLE).describe();
            roles.push(format!("{SERVICE_ROLE} {sched}"));
        }
        let roles = roles.join(", ");
        let tessera = settings.marked && scheds.iter().all(|s| s.cell.is_some());
        let plain = !settings.marked && scheds.iter().all(|s| s.is_plain());
        Ok(NetphoneRun {
            phone: Netphone::start(&spec, hooks)?,
            seed: seed_row(settings.stream.hz, subject.flood, tessera, plain),
            settings,
            roles,
            t0_realtime: 0,
            service,
        })
    }

    /// Mike's first tick and the flood at `t0` (CLOCK_MONOTONIC).
    pub(crate) fn release(&mut self, t0: u64) {
        self.t0_realtime = t0 + realtime_ns() - monotonic_ns();
        self.phone.release(t0);
    }

    pub(crate) fn finish(self) -> NetphoneData {
        NetphoneData {
            report: self.phone.finish(),
            settings: self.settings,
            roles: self.roles,
            seed: self.seed,
            t0_realtime: self.t0_realtime,
            service: self.service,
        }
    }
}

/// The packets' counts after the warm-up, a counter each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Packets {
    sent: u64,
    lost: u64,
    unstamped: u64,
    out_of_order: u64,
    refused: u64,
    unexpected: u64,
}

const SENT: &str = "netphone packets sent";
const LOST: &str = "netphone packets lost";
const UNSTAMPED: &str = "netphone packets without a transmit stamp";
const OUT_OF_ORDER: &str = "netphone packets stamped out of order";
const REFUSED: &str = "netphone sends refused";
const UNEXPECTED: &str = "netphone unexpected datagrams";

impl Packets {
    /// The report's cell and the note's text after [`PACKETS_NOTE`].
    fn describe(&self) -> String {
        format!(
            "{} sent after the warm-up, {} lost, {} without a transmit stamp, {} \
             stamped out of order; {} sends refused, {} unexpected datagrams",
            self.sent, self.lost, self.unstamped, self.out_of_order, self.refused, self.unexpected
        )
    }

    fn counters(&self) -> Vec<Counter> {
        Counter::counts([
            (SENT, self.sent),
            (LOST, self.lost),
            (UNSTAMPED, self.unstamped),
            (OUT_OF_ORDER, self.out_of_order),
            (REFUSED, self.refused),
            (UNEXPECTED, self.unexpected),
        ])
    }

    fn from_result(result: &ConfigurationResult) -> Option<Packets> {
        Some(Packets {
            sent: result.count(SENT)?,
            lost: result.count(LOST)?,
            unstamped: result.count(UNSTAMPED)?,
            out_of_order: result.count(OUT_OF_ORDER)?,
            refused: result.count(REFUSED)?,
            unexpected: result.count(UNEXPECTED)?,
        })
    }
}

/// The subject's metrics, counters and notes, for the packets whose T1
/// came after the warm-up.
pub(crate) fn metrics(data: NetphoneData, warmup: Duration) -> Measured {
    let report = &data.report;
    let from = data.t0_realtime + warmup.as_nanos() as u64;
    let measured: Vec<&Record> = report.records.iter().filter(|r| r.t1_ns >= from).collect();
    let delivered: Vec<&Record> = measured.iter().copied().filter(|r| r.delivered()).collect();
    let count = |n: usize| n as u64;
    let packets = Packets {
        sent: count(measured.len()),
        lost: count(measured.len() - delivered.len()),
        unstamped: count(delivered.iter().filter(|r| r.t2_ns.is_none()).count()),
        out_of_order: count(delivered.iter().filter(|r| !in_order(r)).count()),
        refused: report.send_errors,
        unexpected: report.unexpected,
    };
    let stream = format!("{}; {}", data.settings.describe(), data.roles);
    let mut notes = vec![
        format!("{STREAM_NOTE}{stream}"),
        format!("{PACKETS_NOTE}{}", packets.describe()),
    ];
    let mut labels = BTreeMap::from([(STREAM.to_string(), stream)]);
    if let Some(seed) = data.seed {
        notes.push(format!("{SEED_NOTE}{}", seed.describe()));
        labels.insert(SEED_COUNTERPART.to_string(), seed.describe());
    }
    let mut counters = packets.counters();
    if let Some(flood) = &report.flood {
        notes.push(flood.describe());
        counters.extend(Counter::counts([
            (FLOOD_DATAGRAMS, flood.datagrams),
            (FLOOD_REFUSED, flood.errors),
        ]));
    }
    notes.extend(data.service.as_ref().map(ServiceWatch::describe));
    match &report.service {
        Some(Ok(flow)) => {
            notes.push(format!(
                "{SERVICE_NOTE}the speaker's flow reserved {:.2} Mbit/s, limited to {:.2}; {}",
                flow.reservation_bps as f64 / 1e6,
                flow.limit_bps.unwrap_or(flow.reservation_bps) as f64 / 1e6,
                flow_note(flow)
            ));
            counters.extend(flow_counters(flow));
        }
        Some(Err(e)) => notes.push(format!("{SERVICE_NOTE}the speaker's flow's counters: {e}")),
        None => {}
    }
    notes.extend(report.errors.iter().map(|e| format!("netphone: {e}")));
    let part = |name: &str, of: fn(&Record) -> Option<u64>| {
        latency_metric(name, None, delivered.iter().filter_map(|r| of(r)))
    };
    let goal_us = GOAL.as_nanos() as f64 / 1000.0;
    let mut end_to_end = latency_metric(
        METRIC,
        Some(goal_us),
        delivered.iter().filter_map(|r| r.end_to_end_ns()),
    );
    if let Some(start) = window_start(&delivered) {
        end_to_end.series = window_series(&delivered, start);
        notes.push(format!(
            "T2/T3/T4 − T1 plotted over the 2 s from {:.2} s after the release (the worst \
             packet's)",
            start.saturating_sub(data.t0_realtime) as f64 / 1e9
        ));
    }
    let metrics = vec![
        end_to_end,
        part(WAKE_METRIC, |r| Some(r.wake_ns - r.t1_ns)),
        part(SENDER_METRIC, |r| Some(r.t2_ns? - r.t1_ns)),
        part(NETWORK_METRIC, |r| Some(r.t3_ns?.saturating_sub(r.t2_ns?))),
        part(RECEIVER_METRIC, |r| Some(r.t4_ns? - r.t3_ns?)),
    ];
    Measured {
        metrics,
        counters,
        labels,
        notes,
    }
}

/// Whether a delivered packet's stamps are in the order it travelled:
/// T1 ≤ wake-up ≤ T2 ≤ T3 ≤ T4 (a missing T2 is skipped).
fn in_order(r: &Record) -> bool {
    let (Some(t3), Some(t4)) = (r.t3_ns, r.t4_ns) else {
        return false;
    };
    let t2 = r.t2_ns.unwrap_or(r.wake_ns);
    r.t1_ns <= r.wake_ns && r.wake_ns <= t2 && t2 <= t3 && t3 <= t4
}

/// Where the 2 s of the seed's Figures 2–3 start (CLOCK_REALTIME ns): the
/// worst packet in the middle, unless the run ends or starts sooner.
fn window_start(delivered: &[&Record]) -> Option<u64> {
    let worst = delivered.iter().max_by_key(|r| r.end_to_end_ns())?;
    let first = delivered.first()?.t1_ns;
    let last = delivered.last()?.t1_ns;
    let start = worst
        .t1_ns
        .saturating_sub(WINDOW_NS / 2)
        // Late enough to hold the last packet, when the worst is near it.
        .min((last + 1).saturating_sub(WINDOW_NS))
        .max(first);
    Some(start)
}

/// T2 − T1, T3 − T1 and T4 − T1 in ms against T1 in s from `start`, for
/// the packets of the 2 s from there. (From the window's start, not the
/// run's: each configuration has a window of its own, and the plot's
/// panels share their axes.)
fn window_series(delivered: &[&Record], start: u64) -> Vec<Series> {
    let window: Vec<&&Record> = delivered
        .iter()
        .filter(|r| (start..start + WINDOW_NS).contains(&r.t1_ns))
        .collect();
    let series = |name: &str, stamp: fn(&Record) -> Option<u64>| {
        let mut s = Series::with_capacity(name, "ms", window.len());
        for r in &window {
            if let Some(at) = stamp(r) {
                let t = (r.t1_ns - start) as f64 / 1e9;
                s.push(t, at.saturating_sub(r.t1_ns) as f64 / 1e6);
            }
        }
        s
    };
    vec![
        series("T2 − T1", |r| r.t2_ns),
        series("T3 − T1", |r| r.t3_ns),
        series("T4 − T1", |r| r.t4_ns),
    ]
}

/// A row of the seed's Tables 1–2: its number, its options, and T4 − T1's
/// min, max and mean in ms and variance in ms².
pub(crate) struct SeedRow(u32, &'static str, [f64; 4]);

impl SeedRow {
    fn describe(&self) -> String {
        let SeedRow(number, options, [min, max, mean, variance]) = self;
        format!(
            "experiment {number} ({options}): min {min} ms, max {max} ms, mean {mean} ms, \
             variance {variance} ms²"
        )
    }
}

/// Seed 004's Table 1 (RT: the kernel's real-time support; PP: its
/// preemption points) and Table 2 (the flood; postponed IP processing).
const SEED_ROWS: [SeedRow; 8] = [
    SeedRow(1, "RT+, ATM, PP+, 1.2 Mb/s", [2.5, 10.0, 3.3, 0.3]),
    SeedRow(
        2,
        "RT−, Ethernet, PP−, 1.2 Mb/s",
        [2.7, 445.0, 16.8, 2224.2],
    ),
    SeedRow(3, "RT−, ATM, PP−, 1.2 Mb/s", [2.4, 188.5, 5.3, 136.8]),
    SeedRow(4, "RT+, Ethernet, PP+, 1.2 Mb/s", [2.6, 39.9, 3.3, 1.7]),
    SeedRow(5, "RT+, ATM, PP−, 1.2 Mb/s", [2.5, 103.2, 3.3, 5.3]),
    SeedRow(6, "RT+, ATM, PP+, 16 Mb/s", [2.1, 26.5, 3.1, 3.8]),
    SeedRow(7, "IP flood, IP input postponed", [2.1, 7.3, 3.0, 0.3]),
    SeedRow(
        8,
        "IP flood, IP input not postponed",
        [2.1, 84.5, 5.8, 42.1],
    ),
];

/// The seed's experiment this configuration stands for: tessera (both
/// roles in cells, packets marked) for the seed's real-time kernel and
/// network, plain (neither) for its unmodified kernel on Ethernet; under
/// the flood, for IP processing postponed or not. Mixtures have none.
fn seed_row(hz: u32, flood: bool, tessera: bool, plain: bool) -> Option<&'static SeedRow> {
    let experiment = match (flood, tessera, plain, hz) {
        (true, true, _, _) => 7,
        (true, _, true, _) => 8,
        (false, true, _, 100) => 1,
        (false, _, true, 100) => 2,
        (false, true, _, 500) => 6,
        _ => return None,
    };
    SEED_ROWS.iter().find(|r| r.0 == experiment)
}

/// The report's netphone section: this run in the seed's units (T4 − T1 in
/// ms, variance in ms²), each configuration beside its counterpart in the
/// seed. Empty for other runs.
pub fn report_section(results: &RunResults) -> String {
    let mut rows = String::new();
    for c in &results.configurations {
        let Some(m) = c.metric(METRIC) else { continue };
        let s = &m.summary;
        let within = within_cell(s.misses);
        let _ = writeln!(
            rows,
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.3} | {within} | {} |",
            c.name,
            c.label(STREAM).unwrap_or("–"),
            Packets::from_result(c).map_or("–".into(), |p| p.describe()),
            s.min / 1000.0,
            s.max / 1000.0,
            s.mean / 1000.0,
            (s.stdev / 1000.0).powi(2),
            c.label(SEED_COUNTERPART).unwrap_or("–"),
        );
    }
    if rows.is_empty() {
        return String::new();
    }
    let flooded = results
        .configurations
        .iter()
        .any(|c| c.counter(FLOOD_DATAGRAMS).is_some());
    let table = match flooded {
        true => "Table 2",
        false => "Table 1",
    };
    format!(
        "\n## Netphone: end-to-end delay as in seed 004's {table}\n\n\
         T4 − T1 of every packet sent after the warm-up; variance in ms² (the seed's \
         10⁻⁶ s²); the seed's goal: at most {} ms.\n\n\
         | configuration | stream; roles | packets | min (ms) | max (ms) | mean (ms) | \
         variance (ms²) | ≤ {} ms | the seed |\n\
         |---|---|---|--:|--:|--:|--:|---|---|\n{rows}",
        GOAL.as_millis(),
        GOAL.as_millis()
    )
}

/// `[subject] kind = "netphone"`.
pub(crate) struct Kind;

impl crate::subject::contract::Subject for Kind {
    fn runs(&self, scenario: &Scenario, _config: &Configuration) -> bool {
        matches!(scenario.subject, Subject::Netphone(_))
    }

    fn start(
        &self,
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<Box<dyn Running>, String> {
        Ok(Box::new(NetphoneRun::start(scenario, config)?))
    }

    fn report_section(&self, results: &RunResults, _dir: &Path) -> Result<String, String> {
        Ok(report_section(results))
    }
}

impl Running for NetphoneRun {
    fn release(&mut self, t0: u64) -> Result<(), String> {
        NetphoneRun::release(self, t0);
        Ok(())
    }

    fn stop(self: Box<Self>, _notes: &mut Vec<String>) -> Box<dyn Stopped> {
        Box::new(self.finish())
    }
}

impl Stopped for NetphoneData {
    fn measure(self: Box<Self>, scenario: &Scenario, _t0: u64) -> Measured {
        metrics(*self, scenario.warmup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figures::latency_histogram;

    #[test]
    fn each_configuration_kind_meets_its_counterpart_in_the_seed() {
        let number = |hz, flood, tessera, plain| seed_row(hz, flood, tessera, plain).map(|r| r.0);
        assert_eq!(number(100, false, true, false), Some(1));
        assert_eq!(number(100, false, false, true), Some(2));
        assert_eq!(number(500, false, true, false), Some(6));
        assert_eq!(number(500, false, false, true), None);
        assert_eq!(number(100, true, true, false), Some(7));
        assert_eq!(number(500, true, false, true), Some(8));
        assert_eq!(number(100, false, false, false), None, "a mixture");
    }

    #[test]
    fn the_packets_cell_is_rendered_from_the_counters() {
        let packets = Packets {
            sent: 6000,
            lost: 2,
            unstamped: 0,
            out_of_order: 1,
            refused: 0,
            unexpected: 3,
        };
        let delays = latency_histogram([1_000_000, 2_000_000].into_iter());
        let result = ConfigurationResult {
            labels: Default::default(),
            name: "tessera".into(),
            notes: vec![format!("{PACKETS_NOTE}{}", packets.describe())],
            metrics: vec![tessera_measure::Metric::latency(METRIC, None, delays)],
            counters: packets.counters(),
            why: None,
        };
        assert_eq!(result.count(LOST), Some(2));
        assert_eq!(Packets::from_result(&result), Some(packets));
        let results = RunResults {
            configurations: vec![result],
            ..RunResults::start("netphone")
        };
        let section = report_section(&results);
        assert!(
            section.contains(
                "| 6000 sent after the warm-up, 2 lost, 0 without a transmit stamp, 1 stamped \
                 out of order; 0 sends refused, 3 unexpected datagrams |"
            ),
            "{section}"
        );
    }

    fn record(seq: u64, t1_ns: u64, delay_ns: u64) -> Record {
        Record {
            seq,
            t1_ns,
            wake_ns: t1_ns,
            t2_ns: Some(t1_ns + 1),
            t3_ns: Some(t1_ns + 2),
            t4_ns: Some(t1_ns + delay_ns),
        }
    }

    #[test]
    fn the_window_is_two_seconds_around_the_worst_packet_within_the_run() {
        let t0 = 1_000_000_000_000;
        // One packet every 10 ms for 10 s; the worst at 7 s.
        let records: Vec<Record> = (0..1000)
            .map(|i| {
                let delay = if i == 700 { 9_000_000 } else { 3_000_000 };
                record(i, t0 + i * 10_000_000, delay)
            })
            .collect();
        let delivered: Vec<&Record> = records.iter().collect();
        let start = window_start(&delivered).unwrap();
        assert_eq!(start, t0 + 6_000_000_000);
        let series = window_series(&delivered, start);
        let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["T2 − T1", "T3 − T1", "T4 − T1"]);
        let times: Vec<f64> = series[2].points.iter().map(|p| p.0).collect();
        assert_eq!(times.len(), 200);
        assert!(times[0] == 0.0 && (times[199] - 1.99).abs() < 1e-9);
        assert!(series[2].points.iter().any(|p| (p.1 - 9.0).abs() < 1e-9));
        // The worst near the end: the window ends with the run.
        let late = &delivered[..710];
        assert_eq!(window_start(late), Some(t0 + 5_090_000_001));
        assert_eq!(window_series(late, t0 + 5_090_000_001)[0].points.len(), 200);
    }
}
