//! `tessera-jack-peer`: JACK load clients for tessera's peer benchmark
//! (`tessera bench peer`) and its audio-server scenarios (`tessera run`,
//! `kind = "audio-server"`). It connects to a running server — jackd2 (the
//! server named by `JACK_DEFAULT_SERVER`) or PipeWire through `pw-jack` —
//! never starting one, opens JACK clients that do exactly what tessera's
//! `load` node does, connects them as a chain or a fan-out, records every
//! client's timings per cycle into preallocated buffers, and writes them to
//! a file in the format of [`record`].
//!
//! Clients open at launch, or on a timeline (a staircase, or a list of start
//! and stop times from a shared origin); each joins the end of the chain
//! and the chain closes up when one leaves. An optional monitor client,
//! connected to nothing, records every cycle and counts the xruns.
//!
//! With `--workgroup NAME` every load's process thread joins workgroup NAME
//! (libtessera; created, bound to this process, when none exists) and marks
//! its cycles ([`bridge`]): a guarded server's clients then get per-cycle
//! deadlines without the guard's /proc sampling.
//!
//! One process hosts all the clients; the server still runs each client's
//! process callback on a real-time thread of its own, woken by the server,
//! exactly as if each client were a process of its own.
//!
//! With `--net-listen` and `--net-send-to` it hosts instead one
//! network-audio client ([`netapp`]), which sends its input to another host
//! over UDP and plays what that host sends through a jitter buffer.
//!
//! It must never start or stop a server (its caller owns it) nor allocate,
//! lock or print in a process callback (the bridge's join and leave, once
//! each outside recording, aside).

mod bridge;
mod client;
mod jitter;
mod netapp;
mod options;

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bridge::{Bridge, Membership};
use client::{LoadClient, XrunCounter};
use options::{Options, Origin, USAGE, WARM_UP};
use tessera::handle::WorkgroupHandle;
use tessera_jack_peer::record::{self, Sample, WorkgroupMember};
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns};

/// How long to wait for the server to accept a client.
const SERVER_WAIT: Duration = Duration::from_secs(10);
/// Recording buffers hold this many more cycles than the nominal count.
const CYCLE_MARGIN: f64 = 1.25;
/// Longest sleep between looks at SIGINT/SIGTERM.
const POLL: Duration = Duration::from_millis(50);
/// How long the cycles under way get to finish once the run ends.
const SETTLE: Duration = Duration::from_millis(50);
/// Room for xrun times.
const MAX_XRUN_TIMES: usize = 100_000;
/// How long the loads get to leave the workgroup once the run ends. A
/// load whose thread still cycles leaves on its next cycle (85 ms at
/// most, 4096 frames at 48 kHz); one whose thread the server no longer
/// runs never will, and its member ends with the thread. At 5 s — the
/// harness's own grace after SIGTERM — a run whose graph had stalled was
/// killed instead of writing its record.
const LEAVE_WAIT: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("tessera-jack-peer: {message}\n{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tessera-jack-peer: {message}");
            ExitCode::FAILURE
        }
    }
}

type Active = jack::AsyncClient<XrunCounter, LoadClient>;

/// One client of the peer, open or not.
struct Slot {
    name: String,
    /// A load (the fan-out's source and sink and the monitor only pass on).
    load: bool,
    fraction: f64,
    start: Option<Duration>,
    stop: Option<Duration>,
    active: Option<Active>,
    tid: Option<Arc<AtomicI32>>,
    samples: Arc<Mutex<Vec<Sample>>>,
    /// Its membership of the workgroup (`--workgroup`).
    membership: Option<Arc<Membership>>,
}

/// What happens on the timeline, in order of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Close(usize),
    Record,
    Open(usize),
    End,
}

/// The clients, what they share, and the wires between them.
struct Peer<'a> {
    options: &'a Options,
    slots: Vec<Slot>,
    recording: Arc<AtomicBool>,
    quiet: Arc<AtomicBool>,
    xruns: Arc<AtomicU64>,
    xrun_times: Arc<Mutex<Vec<u64>>>,
    wires: BTreeSet<(String, String)>,
    period: (u32, u32),
    /// The workgroup the loads join (`--workgroup`).
    workgroup: Option<Arc<WorkgroupHandle>>,
    /// Each load's part in it, when recording stopped.
    members: Vec<WorkgroupMember>,
}

fn run(options: &Options) -> Result<(), String> {
    // No page faults in callbacks: the recording buffers reserved below are
    // resident before the first cycle. Under a finite memlock limit (an
    // ordinary user outside the audio group) locking would break the JACK
    // library's own loading, so the peer runs unlocked and says so.
    if tessera_sys::mem::can_lock_all_memory() {
        tessera_sys::mem::lock_all_memory().map_err(|e| format!("locking memory: {e}"))?;
    } else {
        eprintln!(
            "tessera-jack-peer: memory NOT locked: RLIMIT_MEMLOCK is finite \
             (fix: `memlock unlimited` for the user in /etc/security/limits.d/, as the audio group has)"
        );
    }
    tessera_sys::process::catch_termination().map_err(|e| e.to_string())?;
    if let Some(net) = &options.net {
        return netapp::run(options, net);
    }
    let mut peer = Peer::new(options, open_workgroup(options)?);
    for index in 0..peer.slots.len() {
        if peer.slots[index].start.is_none() {
            peer.open(index)?;
        }
    }
    peer.rewire()?;
    let t0 = origin(options)?;
    for (at, event) in peer.timeline(t0) {
        if !wait_until(at) {
            break;
        }
        log(t0, &event, &peer);
        match event {
            Event::Open(index) => peer.open(index).and_then(|()| peer.rewire())?,
            Event::Close(index) => peer.close(index).and_then(|()| peer.rewire())?,
            Event::Record => peer.recording.store(true, Ordering::Release),
            Event::End => break,
        }
    }
    peer.recording.store(false, Ordering::Release);
    // Read before the members leave (on their first quiet cycle).
    peer.members = peer.workgroup_members();
    peer.quiet.store(true, Ordering::Release);
    peer.await_members_out();
    log(t0, &Event::End, &peer);
    // The cycles under way finish (and stop touching the samples) before
    // the record is written, and the record before any client closes.
    std::thread::sleep(SETTLE);
    peer.write(t0)?;
    for index in 0..peer.slots.len() {
        peer.close(index)?;
    }
    Ok(())
}

/// The workgroup of `--workgroup`, for as many members as there are loads
/// when it is created here (on `--workgroup-core`'s core, if given).
fn open_workgroup(options: &Options) -> Result<Option<Arc<WorkgroupHandle>>, String> {
    let Some(name) = &options.workgroup else {
        return Ok(None);
    };
    let message = |code| tessera::status::message(code).to_string_lossy();
    let opened = match options.workgroup_core {
        Some(core) => WorkgroupHandle::open_on(name, options.loads, core),
        None => WorkgroupHandle::open(name, options.loads),
    };
    match opened {
        Ok((workgroup, code)) => {
            eprintln!("tessera-jack-peer: workgroup {name}: {}", message(code));
            Ok(Some(Arc::new(workgroup)))
        }
        Err(code) => Err(format!("opening workgroup {name}: {}", message(code))),
    }
}

/// One line on stderr per event (never from a process callback): the
/// caller's log then shows how far the timeline got.
fn log(t0: u64, event: &Event, peer: &Peer) {
    let t = (monotonic_ns() as i64 - t0 as i64) as f64 / 1e9;
    let what = match event {
        Event::Open(i) => format!("open {}", peer.slots[*i].name),
        Event::Close(i) => format!("close {}", peer.slots[*i].name),
        Event::Record => "recording".into(),
        Event::End => "end: closing every client".into(),
    };
    eprintln!("tessera-jack-peer: {t:+.3} s {what}");
}

/// The run's origin, t0 (CLOCK_MONOTONIC ns), once the clients that open
/// at launch are open.
fn origin(options: &Options) -> Result<u64, String> {
    match options.t0 {
        Origin::AfterWarmUp => Ok(monotonic_ns() + WARM_UP.as_nanos() as u64),
        Origin::At(ns) => Ok(ns),
        Origin::Stdin => t0_from_stdin(),
    }
}

/// The origin the caller sends once it releases the run (a closed stdin
/// means it gave up).
fn t0_from_stdin() -> Result<u64, String> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| format!("reading t0 from stdin: {e}"))?;
    line.trim()
        .parse()
        .map_err(|_| format!("no t0 on stdin ({:?})", line.trim()))
}

/// Sleeps until `at` (CLOCK_MONOTONIC ns); false if a stop was requested.
fn wait_until(at: u64) -> bool {
    loop {
        if tessera_sys::process::take_termination().is_some() {
            return false;
        }
        let now = monotonic_ns();
        if now >= at {
            return true;
        }
        sleep_until_monotonic_ns(at.min(now + POLL.as_nanos() as u64));
    }
}

impl<'a> Peer<'a> {
    fn new(options: &'a Options, workgroup: Option<Arc<WorkgroupHandle>>) -> Peer<'a> {
        let names = options.topology.client_names(options.loads);
        let count = names.len();
        let mut loads = 0;
        let mut slots: Vec<Slot> = names
            .into_iter()
            .enumerate()
            .map(|(index, name)| {
                let is_load = options.topology.is_load(index, count);
                let k = loads;
                loads += usize::from(is_load);
                let pick = |v: &[Option<Duration>]| if is_load { v[k] } else { None };
                Slot {
                    name,
                    load: is_load,
                    fraction: if is_load {
                        options.load_fractions[k]
                    } else {
                        0.0
                    },
                    start: pick(&options.starts),
                    stop: pick(&options.stops),
                    active: None,
                    tid: None,
                    samples: Arc::default(),
                    membership: None,
                }
            })
            .collect();
        if options.monitor {
            slots.push(Slot {
                name: "monitor".into(),
                load: false,
                fraction: 0.0,
                start: None,
                stop: None,
                active: None,
                tid: None,
                samples: Arc::default(),
                membership: None,
            });
        }
        Peer {
            options,
            slots,
            recording: Arc::new(AtomicBool::new(false)),
            quiet: Arc::new(AtomicBool::new(false)),
            xruns: Arc::new(AtomicU64::new(0)),
            xrun_times: Arc::new(Mutex::new(Vec::with_capacity(MAX_XRUN_TIMES))),
            wires: BTreeSet::new(),
            period: (0, 0),
            workgroup,
            members: Vec::new(),
        }
    }

    /// Every event from `t0` on, in time order.
    fn timeline(&self, t0: u64) -> Vec<(u64, Event)> {
        let at = |d: Duration| t0 + d.as_nanos() as u64;
        let end = Duration::from_secs_f64(self.options.seconds);
        let mut events = vec![(t0, Event::Record), (at(end), Event::End)];
        for (index, slot) in self.slots.iter().enumerate() {
            events.extend(slot.start.map(|s| (at(s), Event::Open(index))));
            events.extend(slot.stop.map(|s| (at(s), Event::Close(index))));
        }
        events.retain(|(time, _)| *time <= at(end));
        events.sort();
        events
    }

    /// Whether the slot is the one that counts xruns: the monitor if there
    /// is one (it is open for the whole run), else the first client.
    fn counts_xruns(&self, index: usize) -> bool {
        match self.options.monitor {
            true => self.slots[index].name == "monitor",
            false => index == 0,
        }
    }

    /// Opens and activates the slot's client, retrying while the server
    /// starts up.
    fn open(&mut self, index: usize) -> Result<(), String> {
        let name = self.slots[index].name.clone();
        let client = connect(&name)?;
        self.period = (client.buffer_size(), client.sample_rate());
        let period_s = f64::from(client.buffer_size()) / f64::from(client.sample_rate());
        let open_for =
            self.options.seconds - self.slots[index].start.map_or(0.0, |s| s.as_secs_f64());
        let capacity = (open_for.max(0.0) / period_s * CYCLE_MARGIN) as usize + 16;
        let mut handler = LoadClient::new(
            &client,
            self.slots[index].fraction * period_s,
            capacity,
            Arc::clone(&self.recording),
            Arc::clone(&self.quiet),
        )
        .map_err(|e| format!("registering ports of {name}: {e}"))?;
        if let Some(workgroup) = self.workgroup.as_ref().filter(|_| self.slots[index].load) {
            let bridge = Bridge::new(Arc::clone(workgroup));
            self.slots[index].membership = Some(bridge.membership());
            handler = handler.with_bridge(bridge);
        }
        let counting = self.counts_xruns(index);
        let mut notifications = XrunCounter::new(Arc::clone(&self.xruns), counting);
        if counting && self.options.monitor {
            notifications = notifications.with_times(Arc::clone(&self.xrun_times));
        }
        self.slots[index].tid = Some(handler.thread_id());
        self.slots[index].samples = handler.samples();
        let active = client
            .activate_async(notifications, handler)
            .map_err(|e| format!("activating {name}: {e}"))?;
        self.slots[index].active = Some(active);
        Ok(())
    }

    /// Deactivates and closes the slot's client (its samples stay).
    fn close(&mut self, index: usize) -> Result<(), String> {
        let slot = &mut self.slots[index];
        if let Some(active) = slot.active.take() {
            active
                .deactivate()
                .map_err(|e| format!("deactivating {}: {e}", slot.name))?;
        }
        Ok(())
    }

    /// Wires the open clients as the topology says, through whichever
    /// client is open; ports the server lacks (PipeWire without a sound
    /// card has no `system` ports) are left out.
    fn rewire(&mut self) -> Result<(), String> {
        // The names the server gave: another program's client may hold
        // ours (a second peer), and the server then named ours anew.
        let open: Vec<String> = self
            .slots
            .iter()
            .filter(|s| s.name != "monitor")
            .filter_map(|s| Some(s.active.as_ref()?.as_client().name().to_string()))
            .collect();
        let Some(via) = self.slots.iter().rev().find_map(|s| s.active.as_ref()) else {
            return Ok(());
        };
        let via = via.as_client();
        let wanted: BTreeSet<(String, String)> = match open.is_empty() {
            true => BTreeSet::new(),
            false => self
                .options
                .topology
                .connections(&open)
                .into_iter()
                .collect(),
        };
        let exists = |port: &str| via.port_by_name(port).is_some();
        for (from, to) in self.wires.difference(&wanted) {
            if exists(from) && exists(to) {
                let _ = via.disconnect_ports_by_name(from, to);
            }
        }
        for (from, to) in wanted.difference(&self.wires) {
            if exists(from) && exists(to) {
                via.connect_ports_by_name(from, to)
                    .map_err(|e| format!("connecting {from} -> {to}: {e}"))?;
            }
        }
        self.wires = wanted;
        Ok(())
    }

    /// Waits (at most [`LEAVE_WAIT`]) until every load's thread is out of
    /// the workgroup: it leaves on its first quiet cycle, and must not be
    /// inside the broker's calls when its client closes.
    fn await_members_out(&self) {
        let give_up = Instant::now() + LEAVE_WAIT;
        let all_out = || {
            self.slots
                .iter()
                .filter_map(|s| s.membership.as_ref())
                .all(|m| m.is_out())
        };
        while !all_out() && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Each load's part in the workgroup now: its join's code and
    /// libtessera's counts for its thread.
    fn workgroup_members(&self) -> Vec<WorkgroupMember> {
        let Some(workgroup) = &self.workgroup else {
            return Vec::new();
        };
        self.slots
            .iter()
            .filter_map(|slot| {
                let joined = slot.membership.as_ref()?.joined();
                let tid = slot.tid.as_ref().map_or(0, |t| t.load(Ordering::Relaxed));
                let stats = workgroup.member_stats(tid).unwrap_or_default();
                Some(WorkgroupMember {
                    client: slot.name.clone(),
                    joined,
                    cycles: stats.cycles,
                    overruns: stats.overruns,
                    misses: stats.misses,
                    budget_ns: stats.budget_ns,
                    period_ns: stats.period_ns,
                })
            })
            .collect()
    }

    fn write(&self, t0: u64) -> Result<(), String> {
        let xrun_ns = self
            .xrun_times
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default();
        let header = record::PeerRecord {
            topology: self.options.topology.name().into(),
            clients: self.slots.iter().map(|s| s.name.clone()).collect(),
            xruns: self.xruns.load(Ordering::Relaxed),
            hosting: "one process, one JACK client thread per client".into(),
            period: self.period,
            t0_ns: t0,
            threads: self
                .slots
                .iter()
                .map(|s| s.tid.as_ref().map_or(0, |t| t.load(Ordering::Relaxed)))
                .collect(),
            xrun_ns,
            network: Vec::new(),
            workgroup: self.members.clone(),
            rows: Vec::new(),
        };
        let samples: Vec<Vec<Sample>> = self
            .slots
            .iter()
            .map(|s| {
                s.samples
                    .lock()
                    .map(|mut v| std::mem::take(&mut *v))
                    .unwrap_or_default()
            })
            .collect();
        let out = &self.options.out;
        let file =
            std::fs::File::create(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
        record::write(std::io::BufWriter::new(file), &header, &samples)
            .map_err(|e| format!("writing {}: {e}", out.display()))
    }
}

/// A client of the server, retrying while the server starts up.
fn connect(name: &str) -> Result<jack::Client, String> {
    let give_up = Instant::now() + SERVER_WAIT;
    loop {
        match jack::Client::new(name, jack::ClientOptions::NO_START_SERVER) {
            Ok((client, _)) => return Ok(client),
            Err(e) if Instant::now() >= give_up => {
                return Err(format!(
                    "opening JACK client {name}: {e} (is the server running?)"
                ))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}
