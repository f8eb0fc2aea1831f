//! The `audio-server` subject of a scenario file: a real audio server
//! (Debian's jackd2 on its dummy driver, or PipeWire headless) with JACK
//! load clients in a chain — listed one by one (`[[subject.client]]`) or
//! started as a staircase (`[subject.staircase]`) — and how a
//! configuration schedules it: `fifo:P` / `fifo` (as the server sets
//! itself), or `guard[:no-reclaim|fixed=PCT|increment=PCT|rt-only|app-share=PCT|workgroup|workgroup=core|global]`
//! (the same, plus `tessera guard`; with `workgroup` the load clients mark
//! their cycles in a workgroup, under global EDF, or with `workgroup=core`
//! on the scenario's core beside the guard's reservations; with `global`
//! the guard's reservations are under global EDF instead of on the
//! scenario's core). With `[subject.network_app]`
//! ([`network_app`]) the subject is two hosts instead, each a jackd with a
//! network-audio client.
//!
//! Owns that part of parsing and validation, with the line of every
//! refusal. Like the rest of `scenario`, it must never touch the machine
//! beyond looking for the programs it needs.

pub mod network_app;

pub use network_app::NetworkApp;
pub(super) use network_app::RawNetworkApp;

use super::{duration, opt_duration, refuse, required, RawSubject, Refusal};
use serde::Deserialize;
use std::ops::Range;
use std::time::Duration;
use toml::Spanned;

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// Debian's jackd2 (`jackd -d dummy`).
    Jack,
    /// PipeWire, headless (its Dummy-Driver), clients through `pw-jack`.
    PipeWire,
}

impl ServerKind {
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Jack => "jackd",
            ServerKind::PipeWire => "pipewire",
        }
    }

    /// The programs it needs, with the Debian package of each.
    pub fn programs(self) -> &'static [(&'static str, &'static str)] {
        match self {
            ServerKind::Jack => &[("jackd", "jackd2")],
            ServerKind::PipeWire => &PIPEWIRE_PROGRAMS,
        }
    }
}

/// The programs a PipeWire server needs, with their Debian packages.
const PIPEWIRE_PROGRAMS: [(&str, &str); 3] = [
    ("pipewire", "pipewire"),
    ("pw-metadata", "pipewire-bin"),
    ("pw-jack", "pipewire-jack"),
];

/// One JACK load client (the thesis's dnl): busy `load` of every period,
/// from `start` to `stop` (from the start of the run), at the end of the
/// chain when it joins.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioClient {
    pub load: f64,
    pub start: Duration,
    pub stop: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AudioServerSubject {
    pub server: ServerKind,
    pub frames: u32,
    pub rate: u32,
    /// jackd's `-P` where a configuration names none (guard, `fifo`).
    pub priority: u32,
    /// In chain order; the peer names them load-01, load-02, …
    pub clients: Vec<AudioClient>,
    /// Two hosts, each this server with a network-audio client, instead of
    /// one server with load clients.
    pub network: Option<NetworkApp>,
}

impl AudioServerSubject {
    pub fn period(&self) -> Duration {
        Duration::from_nanos(u64::from(self.frames) * 1_000_000_000 / u64::from(self.rate))
    }

    /// Multiplies the clients' start and stop times by `factor`.
    pub fn scale(&mut self, factor: f64) {
        for c in &mut self.clients {
            c.start = c.start.mul_f64(factor);
            c.stop = c.stop.map(|s| s.mul_f64(factor));
        }
    }
}

/// How a configuration runs the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerSched {
    /// As the server and its clients set themselves: jackd `-P P` (its
    /// clients run 5 below), PipeWire its own priority (None).
    Fifo(Option<u32>),
    /// The same, plus `tessera guard` reserving every real-time thread.
    Guard(GuardSettings),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardSettings {
    /// Hold every thread to its budget (the guard reclaims by default).
    pub no_reclaim: bool,
    /// A fixed share of the period for the server and its clients
    /// together, %, split among their threads, instead of adapting.
    pub fixed: Option<u32>,
    /// Headroom over the predicted use, %.
    pub increment: Option<u32>,
    /// Reserve the real-time threads only (`--rt-only`), not the
    /// applications' other threads.
    pub rt_only: bool,
    /// The floor of each application's share, % (`--app-share`).
    pub app_share: Option<u32>,
    /// The load clients join a workgroup (`tessera-jack-peer --workgroup`)
    /// and mark every cycle: their budgets follow each cycle's work, not
    /// the guard's sampling, which leaves them to the workgroup.
    pub workgroup: bool,
    /// The workgroup's reservations on the scenario's core, partitioned,
    /// beside the guard's (`--workgroup-core`), as a fixed share's
    /// threads are; otherwise under global EDF.
    pub workgroup_on_core: bool,
    /// The guard's reservations under global EDF (`--core global`) rather
    /// than on the scenario's core, as a workgroup's members always are:
    /// the comparison with them on the same placement.
    pub global: bool,
}

impl GuardSettings {
    /// Its options on `tessera guard`'s command line.
    pub fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if self.no_reclaim {
            args.push("--no-reclaim".to_string());
        }
        if let Some(p) = self.fixed {
            args.extend(["--fixed".to_string(), p.to_string()]);
        }
        if let Some(p) = self.increment {
            args.extend(["--increment".to_string(), p.to_string()]);
        }
        if self.rt_only {
            args.push("--rt-only".to_string());
        }
        if let Some(p) = self.app_share {
            args.extend(["--app-share".to_string(), p.to_string()]);
        }
        args
    }
}

const SCHED_FORMS: &str = "fifo:P (jackd -P P), fifo (the server's own priority), guard, \
                           guard:no-reclaim, guard:fixed=PCT, guard:increment=PCT, guard:rt-only, guard:app-share=PCT, \
                           guard:workgroup, guard:workgroup=core, guard:global (options joined by commas)";
/// Lowest jackd -P: JACK2 runs its clients 5 below the server.
const MIN_JACK_PRIORITY: u32 = 6;
const MAX_JACK_PRIORITY: u32 = 94;

impl ServerSched {
    /// A configuration's `subject` for an audio server.
    pub fn parse(text: &str, subject: &AudioServerSubject) -> Result<ServerSched, String> {
        let text = text.trim();
        let (head, options) = text.split_once(':').unwrap_or((text, ""));
        match (head.trim(), subject.server) {
            ("fifo", ServerKind::Jack) if options.is_empty() => {
                Ok(ServerSched::Fifo(Some(subject.priority)))
            }
            ("fifo", ServerKind::Jack) => jack_priority(options).map(|p| ServerSched::Fifo(Some(p))),
            ("fifo", ServerKind::PipeWire) if options.is_empty() => Ok(ServerSched::Fifo(None)),
            ("fifo", ServerKind::PipeWire) => Err(format!(
                "PipeWire sets its own real-time priority (88, module-rt): write \"fifo\", not {text:?}"
            )),
            ("guard", _) => guard_settings(options).map(ServerSched::Guard),
            _ => Err(format!(
                "{text:?} is not an audio server's scheduling: an audio server schedules itself \
                 ({SCHED_FORMS})"
            )),
        }
    }

    /// jackd's -P in this configuration (None for PipeWire).
    pub fn jack_priority(&self, subject: &AudioServerSubject) -> Option<u32> {
        match (subject.server, self) {
            (ServerKind::PipeWire, _) => None,
            (ServerKind::Jack, ServerSched::Fifo(p)) => p.or(Some(subject.priority)),
            (ServerKind::Jack, ServerSched::Guard(_)) => Some(subject.priority),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            ServerSched::Fifo(Some(p)) => format!("fifo:{p}"),
            ServerSched::Fifo(None) => "fifo".into(),
            ServerSched::Guard(g) => {
                let mut options = Vec::new();
                if g.no_reclaim {
                    options.push("no-reclaim".to_string());
                }
                options.extend(g.fixed.map(|p| format!("fixed={p}")));
                options.extend(g.increment.map(|p| format!("increment={p}")));
                if g.rt_only {
                    options.push("rt-only".to_string());
                }
                options.extend(g.app_share.map(|p| format!("app-share={p}")));
                match (g.workgroup, g.workgroup_on_core) {
                    (true, true) => options.push("workgroup=core".to_string()),
                    (true, false) => options.push("workgroup".to_string()),
                    _ => {}
                }
                if g.global {
                    options.push("global".to_string());
                }
                match options.is_empty() {
                    true => "guard".into(),
                    false => format!("guard:{}", options.join(",")),
                }
            }
        }
    }

    pub fn is_guard(&self) -> bool {
        matches!(self, ServerSched::Guard(_))
    }
}

fn jack_priority(text: &str) -> Result<u32, String> {
    let p: u32 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a FIFO priority"))?;
    if (MIN_JACK_PRIORITY..=MAX_JACK_PRIORITY).contains(&p) {
        Ok(p)
    } else {
        Err(format!(
            "jackd's priority must be {MIN_JACK_PRIORITY}–{MAX_JACK_PRIORITY} (JACK2 runs its clients 5 below the server), not {p}"
        ))
    }
}

fn guard_settings(options: &str) -> Result<GuardSettings, String> {
    let mut settings = GuardSettings::default();
    let percent = |key: &str, value: &str, range: Range<u32>| -> Result<u32, String> {
        value
            .trim()
            .parse()
            .ok()
            .filter(|p| range.contains(p))
            .ok_or(format!(
                "guard {key}={value}: give a percentage from {} to {}",
                range.start,
                range.end - 1
            ))
    };
    for option in options.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        match option.split_once('=') {
            None if option == "no-reclaim" => settings.no_reclaim = true,
            None if option == "rt-only" => settings.rt_only = true,
            None if option == "workgroup" => settings.workgroup = true,
            None if option == "global" => settings.global = true,
            Some(("workgroup", "core")) => {
                settings.workgroup = true;
                settings.workgroup_on_core = true;
            }
            Some(("app-share", v)) => settings.app_share = Some(percent("app-share", v, 1..101)?),
            Some(("fixed", v)) => settings.fixed = Some(percent("fixed", v, 1..101)?),
            Some(("increment", v)) => settings.increment = Some(percent("increment", v, 0..1001)?),
            _ => {
                return Err(format!(
                    "unknown guard option {option:?} (no-reclaim, fixed=PCT, increment=PCT, \
                     rt-only, app-share=PCT, workgroup, workgroup=core, global)"
                ))
            }
        }
    }
    if settings.workgroup_on_core && settings.global {
        return Err(
            "guard workgroup=core puts the workgroup beside the guard on the scenario's core: \
             give it or global, not both"
                .into(),
        );
    }
    if settings.rt_only && settings.app_share.is_some() {
        return Err(
            "guard rt-only reserves no application share: give rt-only or app-share=PCT, not both"
                .into(),
        );
    }
    Ok(settings)
}

// The file's shape for this kind.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClient {
    load: Spanned<f64>,
    start: Option<Spanned<String>>,
    stop: Option<Spanned<String>>,
}

/// `clients` clients of `load` each, one every `every` from `first`,
/// all stopping at `stop` (if given).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStaircase {
    clients: Spanned<usize>,
    load: Spanned<f64>,
    every: Spanned<String>,
    first: Option<Spanned<String>>,
    stop: Option<Spanned<String>>,
}

const MAX_CLIENTS: usize = 64;

/// Validates an `audio-server` subject; `total` is the run's length.
pub(super) fn subject(
    s: &RawSubject,
    table: &Range<usize>,
    total: Duration,
    installed: impl Fn(&str) -> bool,
) -> Result<AudioServerSubject, Refusal> {
    let server_value = required(&s.server, table, "server")?;
    let server = match server_value.get_ref().as_str() {
        "jackd" => ServerKind::Jack,
        "pipewire" => ServerKind::PipeWire,
        other => {
            return refuse(
                server_value.span(),
                format!("unknown server {other:?} (jackd, pipewire)"),
            )
        }
    };
    for (program, package) in server.programs() {
        if !installed(program) {
            return refuse(
                server_value.span(),
                format!("{program} is not installed (Debian: apt-get install {package})"),
            );
        }
    }
    let (frames, rate) = frames_and_rate(s, table)?;
    let priority = priority(s, server)?;
    let network = s
        .network_app
        .as_ref()
        .map(|raw| network_app::subject(raw, s, server))
        .transpose()?;
    let clients = match network {
        Some(_) => Vec::new(),
        None => clients(s, table, total)?,
    };
    Ok(AudioServerSubject {
        server,
        frames,
        rate,
        priority,
        clients,
        network,
    })
}

/// A real server's quantum (`frames`, a power of two) and `rate`.
pub(super) fn frames_and_rate(s: &RawSubject, table: &Range<usize>) -> Result<(u32, u32), Refusal> {
    let frames = required(&s.frames, table, "frames")?;
    if !frames.get_ref().is_power_of_two() || !(16..=4096).contains(frames.get_ref()) {
        return refuse(
            frames.span(),
            format!(
                "frames must be a power of two from 16 to 4096, not {}",
                frames.get_ref()
            ),
        );
    }
    let rate = required(&s.rate, table, "rate")?;
    if !(8_000..=192_000).contains(rate.get_ref()) {
        return refuse(
            rate.span(),
            format!("rate must be 8000–192000 Hz, not {}", rate.get_ref()),
        );
    }
    Ok((*frames.get_ref(), *rate.get_ref()))
}

fn priority(s: &RawSubject, server: ServerKind) -> Result<u32, Refusal> {
    match (&s.priority, server) {
        (None, _) => Ok(10),
        (Some(p), ServerKind::PipeWire) => refuse(
            p.span(),
            "PipeWire sets its own real-time priority (88, module-rt): remove `priority`",
        ),
        (Some(p), ServerKind::Jack) => {
            jack_priority(&p.get_ref().to_string()).map_err(|e| (p.span(), e))
        }
    }
}

fn clients(
    s: &RawSubject,
    table: &Range<usize>,
    total: Duration,
) -> Result<Vec<AudioClient>, Refusal> {
    let clients = match (&s.staircase, s.client.as_slice()) {
        (Some(_), [_, ..]) => {
            return refuse(
                table.clone(),
                "give [[subject.client]] or [subject.staircase], not both",
            )
        }
        (Some(stairs), []) => staircase(stairs)?,
        (None, []) => {
            return refuse(
                table.clone(),
                "an audio server needs load clients: [[subject.client]] (load, start, stop) or [subject.staircase]",
            )
        }
        (None, listed) => listed.iter().map(client).collect::<Result<Vec<_>, _>>()?,
    };
    if clients.len() > MAX_CLIENTS {
        return refuse(
            table.clone(),
            format!("at most {MAX_CLIENTS} clients, not {}", clients.len()),
        );
    }
    if let Some(late) = clients.iter().find(|c| c.start >= total) {
        return refuse(
            table.clone(),
            format!(
                "a client starts at {:?}, after the run ends ({total:?})",
                late.start
            ),
        );
    }
    let sum: f64 = clients.iter().map(|c| c.load).sum();
    if sum >= 1.0 {
        return refuse(
            table.clone(),
            format!("the clients' loads add up to {sum:.2} of the period: no cycle could finish"),
        );
    }
    Ok(clients)
}

fn load(value: &Spanned<f64>) -> Result<f64, Refusal> {
    let v = *value.get_ref();
    if v > 0.0 && v < 1.0 {
        Ok(v)
    } else {
        refuse(
            value.span(),
            format!("a client's load is a fraction of the period in (0, 1), not {v}"),
        )
    }
}

fn client(spanned: &Spanned<RawClient>) -> Result<AudioClient, Refusal> {
    let c = spanned.get_ref();
    let start = opt_duration(&c.start)?.unwrap_or(Duration::ZERO);
    let stop = opt_duration(&c.stop)?;
    if stop.is_some_and(|t| t <= start) {
        return refuse(spanned.span(), "a client must stop after it starts");
    }
    Ok(AudioClient {
        load: load(&c.load)?,
        start,
        stop,
    })
}

fn staircase(spanned: &Spanned<RawStaircase>) -> Result<Vec<AudioClient>, Refusal> {
    let s = spanned.get_ref();
    let count = *s.clients.get_ref();
    if !(1..=MAX_CLIENTS).contains(&count) {
        return refuse(
            s.clients.span(),
            format!("clients must be 1–{MAX_CLIENTS}, not {count}"),
        );
    }
    let every = duration(&s.every)?;
    let first = opt_duration(&s.first)?.unwrap_or(Duration::ZERO);
    let stop = opt_duration(&s.stop)?;
    let last_start = first + every * (count as u32 - 1);
    if stop.is_some_and(|t| t <= last_start) {
        return refuse(
            spanned.span(),
            format!("the last client starts at {last_start:?}: stop must be later"),
        );
    }
    let load = load(&s.load)?;
    Ok((0..count as u32)
        .map(|k| AudioClient {
            load,
            start: first + every * k,
            stop,
        })
        .collect())
}
