//! The `aes67` subject of a scenario file: hosts (network namespaces on a
//! bridge, named a, b, c, d) passing AES67 streams along a chain and back,
//! or one host whose streams come back to it (one service's load alone) —
//! `hosts`, `streams` each way between neighbours, `channels`, `encoding`,
//! `rate`, `ptime`, each receiver's `latency` (the link offset) and the
//! round trip's `deadline`; `[subject.foreign]`: host a is a device of
//! another maker instead (a sender on a clock `clock_ppm` off with `jitter`
//! of its own, payload type `payload_type`), which b plays by arrival,
//! slipping at most `max_slip_ppm`; `[subject.paths]`: a and b joined by
//! two paths (ST 2022-7), each losing `loss_percent` of the packets and
//! delaying them `delay` plus up to `jitter`; `ptp = true`: the hosts run
//! linuxptp on the bridge (a the grandmaster, the others' media clocks
//! following it) — and how a configuration runs it: `streams`, `cut` (when
//! the second path goes down, into the measured window), `ptp_lost` (when
//! the slaves' ptp4l stop, into the measured window), and `subject`: one
//! scheduling for every thread, or the roles `graph`
//! (each host's engine thread) and `service` (each host's network service
//! real-time thread) each as `cell:NAME`, `fifo:P` or `plain`. `{host}` in
//! a cell's name stands for the host's letter, so `cell:graph-{host}` puts
//! each host's graph in a cell of its own (graph-a, graph-b, …).
//!
//! Owns that part of parsing and validation, with the line of every
//! refusal: formats AES67 and the engine take, a latency the packets can
//! meet, a deadline the chain can meet, a bridge that carries the streams,
//! a reservation slot for every thread that joins a reserved cell. Like
//! the rest of `scenario`, it must never touch the machine.

use super::{
    duration, opt_duration, refuse, RawSubject, RawSubjectSched, Refusal, Scenario, Sched,
};
use serde::Deserialize;
use std::ops::Range;
use std::time::Duration;
use tessera_aes67::{Encoding, StreamFormat};
use tessera_policy::CoreRequest;
use toml::Spanned;

/// The roles a configuration schedules, on every host.
pub const ROLES: [&str; 2] = ["graph", "service"];
/// The hosts' names, in chain order; `{host}` in a cell's name stands for
/// one of them.
pub const HOST_NAMES: [&str; 4] = ["a", "b", "c", "d"];
/// What `{host}` is replaced by.
pub const HOST_PATTERN: &str = "{host}";
/// Most streams each way between two neighbours.
pub const MAX_STREAMS: usize = 32;
/// Most channels a stream carries here (AES67's usual 8).
const MAX_CHANNELS: u16 = 8;
/// What `hosts` and `streams` count, for refusals.
const CHAIN: &str = "a chain a → b … and back, or 1: a host looped to itself";
const EACH_WAY: &str = "each way between neighbours";
/// AES67's packet times, µs.
const PACKET_TIMES_US: [u32; 5] = [125, 250, 333, 1000, 4000];
/// Longest link offset: what a jitter buffer is sized for.
const MAX_LATENCY: Duration = Duration::from_millis(50);
/// The bridge is a gigabit LAN; the network service keeps 5 % free.
const BRIDGE_BPS: u64 = 950_000_000;
/// The round trip's deadline unless the subject gives one (the goal of
/// issue 13 for two hosts and 1 ms packets).
const DEFAULT_DEADLINE: Duration = Duration::from_millis(4);
/// Each receiver's link offset unless the subject gives one (as `tessera
/// aes67 run`'s).
const DEFAULT_LATENCY: Duration = Duration::from_millis(2);

/// `[subject.foreign]`: host a is a device of another maker.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawForeign {
    jitter: Option<Spanned<String>>,
    clock_ppm: Option<Spanned<f64>>,
    payload_type: Option<Spanned<u8>>,
    max_slip_ppm: Option<Spanned<u32>>,
}

/// `[subject.paths]`: two impaired paths between a and b.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPaths {
    loss_percent: Option<Spanned<f64>>,
    delay: Option<Spanned<String>>,
    jitter: Option<Spanned<String>>,
}

/// A sender that is not tessera's, in host a: RTP on a clock of its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ForeignSender {
    /// Each packet leaves up to this much late, at random.
    pub jitter: Duration,
    /// How far its clock runs from the machine's, parts per million.
    pub clock_ppm: f64,
    pub payload_type: u8,
    /// The receiver's slip rate limit.
    pub max_slip_ppm: u32,
}

/// Two paths between a and b (ST 2022-7), each a relay that loses and
/// delays packets at random.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RedundantPaths {
    /// The share of packets each path loses, 0–1.
    pub loss: f64,
    pub delay: Duration,
    pub jitter: Duration,
}

/// Hosts on a bridge passing streams along a chain and back.
#[derive(Debug, Clone, PartialEq)]
pub struct Aes67Subject {
    /// 2–4: a → b (→ c → d) and back the same way; 1: a → a, host a
    /// receiving the streams it sends (multicast loopback).
    pub hosts: usize,
    /// Streams each way between neighbours, unless a configuration says.
    pub streams: usize,
    pub format: StreamFormat,
    /// How far behind the media clock each receiver plays.
    pub latency: Duration,
    /// The round trip's deadline (the marker's).
    pub deadline: Duration,
    /// Host a is a foreign sender: b receives only, by arrival.
    pub foreign: Option<ForeignSender>,
    /// a and b are joined by two impaired paths instead of a bridge.
    pub paths: Option<RedundantPaths>,
    /// The hosts run linuxptp: a is the grandmaster, the others follow.
    pub ptp: bool,
}

impl Aes67Subject {
    /// Hops of the round trip: there and back between each neighbours, or
    /// a lone host's one loop.
    pub fn hops(&self) -> usize {
        (2 * (self.hosts - 1)).max(1)
    }

    /// The hosts' names, in chain order.
    pub fn host_names(&self) -> &'static [&'static str] {
        &HOST_NAMES[..self.hosts]
    }

    /// The hosts that run tessera (a service and a graph each): all but a
    /// foreign sender's.
    pub fn tessera_hosts(&self) -> &'static [&'static str] {
        match self.foreign {
            Some(_) => &HOST_NAMES[1..self.hosts],
            None => self.host_names(),
        }
    }
}

/// How one configuration runs the hosts (the roles' scheduling is the
/// configuration's `roles`, one per host: see [`role_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aes67Settings {
    pub streams: usize,
    /// When the second path goes down, into the measured window.
    pub cut: Option<Duration>,
    /// When the slaves' ptp4l stop, into the measured window.
    pub ptp_lost: Option<Duration>,
}

/// The configuration's role of `role` on host `host`, e.g. "graph b".
pub fn role_name(role: &str, host: &str) -> String {
    format!("{role} {host}")
}

/// The subject's keys.
pub(super) fn subject(s: &RawSubject, table: &Range<usize>) -> Result<Aes67Subject, Refusal> {
    let hosts = bounded(s.hosts.as_ref(), 2, 1..=HOST_NAMES.len(), "hosts", CHAIN)?;
    let streams = bounded(s.streams.as_ref(), 1, 1..=MAX_STREAMS, "streams", EACH_WAY)?;
    let format = format(s, table)?;
    let latency = opt_duration(&s.latency)?.unwrap_or(DEFAULT_LATENCY);
    let latency_span = s.latency.as_ref().map_or(table.clone(), Spanned::span);
    let packet = Duration::from_nanos(format.packet_time_ns());
    if latency <= packet || latency > MAX_LATENCY {
        return refuse(
            latency_span,
            format!(
                "latency {latency:?} must exceed the packet time {packet:?} (a receiver playing L \
                 behind the clock has at most L from a packet's stamp to play it, and the \
                 sender's cycle, both services and the wire take part of that) and be at most \
                 {MAX_LATENCY:?}"
            ),
        );
    }
    let subject = Aes67Subject {
        hosts,
        streams,
        format,
        latency,
        deadline: opt_duration(&s.deadline)?.unwrap_or(DEFAULT_DEADLINE),
        foreign: s.foreign.as_ref().map(foreign).transpose()?,
        paths: s.paths.as_ref().map(paths).transpose()?,
        ptp: s.ptp.as_ref().is_some_and(|p| *p.get_ref()),
    };
    if let (Some(p), true) = (&s.ptp, subject.ptp) {
        let why = match (hosts, &subject.foreign, &subject.paths) {
            (1, _, _) => Some("a lone host has no grandmaster but itself: give hosts ≥ 2"),
            (_, Some(_), _) => Some("a foreign sender plays by arrival, on no PTP: leave out ptp"),
            (_, _, Some(_)) => Some(
                "PTP runs on the hosts' bridge, and two paths have none: leave out ptp or \
                 [subject.paths]",
            ),
            _ => None,
        };
        if let Some(why) = why {
            return refuse(p.span(), why);
        }
    }
    for (span, what) in [
        (s.foreign.as_ref().map(Spanned::span), "[subject.foreign]"),
        (s.paths.as_ref().map(Spanned::span), "[subject.paths]"),
    ] {
        if let (Some(span), true) = (span, hosts != 2) {
            return refuse(span, format!("{what} joins hosts a and b: give hosts = 2"));
        }
    }
    if let (Some(_), Some(paths)) = (&s.foreign, &s.paths) {
        return refuse(
            paths.span(),
            "a foreign sender sends on one path here: give [subject.foreign] or \
             [subject.paths], not both",
        );
    }
    let least = subject.latency * subject.hops() as u32;
    if subject.deadline < least {
        let span = s.deadline.as_ref().map_or(table.clone(), Spanned::span);
        return refuse(
            span,
            format!(
                "deadline {:?} is below the round trip's {} hops × latency {latency:?} = {least:?}: \
                 give deadline ≥ {least:?}, or a shorter latency",
                subject.deadline,
                subject.hops()
            ),
        );
    }
    fits_the_bridge(
        &subject,
        streams,
        s.streams.as_ref().map_or(table.clone(), Spanned::span),
    )?;
    Ok(subject)
}

/// Most a foreign clock may be off: quartz clocks are within 100 ppm.
const MAX_CLOCK_PPM: f64 = 1000.0;

fn foreign(raw: &Spanned<RawForeign>) -> Result<ForeignSender, Refusal> {
    let r = raw.get_ref();
    let payload_type = r.payload_type.as_ref().map_or(Ok(101), |pt| {
        match tessera_aes67::rtp::DYNAMIC_PAYLOAD_TYPES.contains(pt.get_ref()) {
            true => Ok(*pt.get_ref()),
            false => refuse(
                pt.span(),
                format!(
                    "payload type {}: AES67 streams use a dynamic one, 96–127",
                    pt.get_ref()
                ),
            ),
        }
    })?;
    let clock_ppm = match &r.clock_ppm {
        None => 0.0,
        Some(p) if p.get_ref().abs() <= MAX_CLOCK_PPM => *p.get_ref(),
        Some(p) => {
            return refuse(
                p.span(),
                format!(
                    "clock_ppm must be within ±{MAX_CLOCK_PPM}, not {}",
                    p.get_ref()
                ),
            )
        }
    };
    Ok(ForeignSender {
        jitter: opt_duration(&r.jitter)?.unwrap_or_default(),
        clock_ppm,
        payload_type,
        max_slip_ppm: r
            .max_slip_ppm
            .as_ref()
            .map_or(tessera_aes67::playout::DEFAULT_MAX_SLIP_PPM, |m| {
                *m.get_ref()
            }),
    })
}

fn paths(raw: &Spanned<RawPaths>) -> Result<RedundantPaths, Refusal> {
    let r = raw.get_ref();
    let loss = match &r.loss_percent {
        None => 0.0,
        Some(l) if (0.0..=50.0).contains(l.get_ref()) => *l.get_ref() / 100.0,
        Some(l) => {
            return refuse(
                l.span(),
                format!("loss_percent must be 0–50, not {}", l.get_ref()),
            )
        }
    };
    Ok(RedundantPaths {
        loss,
        delay: opt_duration(&r.delay)?.unwrap_or_default(),
        jitter: opt_duration(&r.jitter)?.unwrap_or_default(),
    })
}

/// An optional count within `range`, `default` when absent.
fn bounded(
    value: Option<&Spanned<usize>>,
    default: usize,
    range: std::ops::RangeInclusive<usize>,
    what: &str,
    meaning: &str,
) -> Result<usize, Refusal> {
    match value {
        None => Ok(default),
        Some(v) if range.contains(v.get_ref()) => Ok(*v.get_ref()),
        Some(v) => refuse(
            v.span(),
            format!(
                "{what} must be {}–{} ({meaning}), not {}",
                range.start(),
                range.end(),
                v.get_ref()
            ),
        ),
    }
}

/// The streams' format: encoding, rate, channels and packet time.
fn format(s: &RawSubject, table: &Range<usize>) -> Result<StreamFormat, Refusal> {
    let encoding = match &s.encoding {
        None => Encoding::L24,
        Some(e) => Encoding::from_name(e.get_ref()).ok_or_else(|| {
            (
                e.span(),
                format!("encoding {:?}: use \"L16\" or \"L24\"", e.get_ref()),
            )
        })?,
    };
    let rate = match &s.rate {
        None => 48_000,
        Some(r) if tessera_policy::stream::SAMPLE_RATES.contains(r.get_ref()) => *r.get_ref(),
        Some(r) => {
            return refuse(
                r.span(),
                format!(
                    "rate {}: the graph engine runs 44100, 48000 or 96000 Hz",
                    r.get_ref()
                ),
            )
        }
    };
    let channels = match &s.channels {
        None => MAX_CHANNELS,
        Some(c) if (1..=MAX_CHANNELS).contains(c.get_ref()) => *c.get_ref(),
        Some(c) => {
            return refuse(
                c.span(),
                format!("channels must be 1–{MAX_CHANNELS}, not {}", c.get_ref()),
            )
        }
    };
    let ptime = match &s.ptime {
        None => Duration::from_millis(1),
        Some(p) => duration(p)?,
    };
    let ptime_us = ptime.as_micros() as u32;
    let ptime_span = s.ptime.as_ref().map_or(table.clone(), Spanned::span);
    if !PACKET_TIMES_US.contains(&ptime_us) {
        return refuse(
            ptime_span,
            format!(
                "ptime {ptime:?}: use one of AES67's packet times, 125us, 250us, 333us, 1ms or 4ms"
            ),
        );
    }
    StreamFormat::with_packet_time(encoding, rate, channels, ptime_us)
        .map_err(|e| (ptime_span, format!("the streams' format: {e}")))
}

/// Whether the busiest host's sent streams fit the bridge: a host in the
/// middle of the chain sends `streams` each way.
fn fits_the_bridge(
    subject: &Aes67Subject,
    streams: usize,
    span: Range<usize>,
) -> Result<(), Refusal> {
    let directions = if subject.hosts > 2 { 2 } else { 1 };
    let bps = stream_bps(&subject.format) * (streams * directions) as u64;
    if bps > BRIDGE_BPS {
        return refuse(
            span,
            format!(
                "{streams} streams send {:.0} Mbit/s from one host, more than the {:.0} Mbit/s a \
                 gigabit bridge carries (the service keeps 5 % free): give fewer streams or \
                 channels",
                bps as f64 / 1e6,
                BRIDGE_BPS as f64 / 1e6
            ),
        );
    }
    Ok(())
}

/// A stream's rate on the wire, bits/s (as its flow reserves it).
fn stream_bps(format: &StreamFormat) -> u64 {
    format.wire_bits_per_second()
}

/// A configuration's aes67 settings and each host's roles as written
/// (`{host}` replaced), with where they stand; the caller checks them as
/// any scheduling, then [`slots_suffice`].
pub(super) struct Aes67Configuration {
    pub settings: Aes67Settings,
    pub roles: Vec<(String, String, Range<usize>)>,
}

/// A configuration's own keys for an aes67 subject, as written.
pub(super) struct ConfigurationKeys<'a> {
    pub streams: Option<&'a Spanned<usize>>,
    pub cut: Option<&'a Spanned<String>>,
    pub ptp_lost: Option<&'a Spanned<String>>,
}

/// A configuration's `streams`, `cut`, `ptp_lost` and `subject` for an
/// aes67 subject.
pub(super) fn configuration(
    ConfigurationKeys {
        streams,
        cut,
        ptp_lost,
    }: ConfigurationKeys,
    value: Option<&Spanned<RawSubjectSched>>,
    subject: &Aes67Subject,
    table: &Range<usize>,
) -> Result<Aes67Configuration, Refusal> {
    let count = bounded(
        streams,
        subject.streams,
        1..=MAX_STREAMS,
        "streams",
        EACH_WAY,
    )?;
    fits_the_bridge(subject, count, streams.map_or(table.clone(), Spanned::span))?;
    let cut = match cut {
        Some(c) if subject.paths.is_none() => {
            return refuse(
                c.span(),
                "cut takes the second path down: give the subject [subject.paths]",
            )
        }
        Some(c) => Some(duration(c)?),
        None => None,
    };
    let ptp_lost = match ptp_lost {
        Some(l) if !subject.ptp => {
            return refuse(
                l.span(),
                "ptp_lost stops the slaves' ptp4l: give the subject ptp = true",
            )
        }
        Some(l) => Some(duration(l)?),
        None => None,
    };
    let written: Vec<(String, String, Range<usize>)> = match value.map(|v| (v.get_ref(), v.span()))
    {
        None => Vec::new(),
        Some((RawSubjectSched::All(text), span)) => ROLES
            .iter()
            .map(|r| (r.to_string(), text.clone(), span.clone()))
            .collect(),
        Some((RawSubjectSched::Roles(map), span)) => {
            if let Some(other) = map.keys().find(|k| !ROLES.contains(&k.as_str())) {
                return refuse(
                    span,
                    format!(
                        "unknown role {other:?} (an aes67 configuration's subject has {}; \
                         streams is a key of the configuration itself)",
                        ROLES.join(", ")
                    ),
                );
            }
            map.iter()
                .map(|(r, text)| (r.clone(), text.clone(), span.clone()))
                .collect()
        }
    };
    let mut roles = Vec::new();
    for (role, text, span) in &written {
        if role == "service" {
            service_sched(text, span)?;
        }
        for host in subject.tessera_hosts() {
            let text = text.replace(HOST_PATTERN, host);
            roles.push((role_name(role, host), text, span.clone()));
        }
    }
    Ok(Aes67Configuration {
        settings: Aes67Settings {
            streams: count,
            cut,
            ptp_lost,
        },
        roles,
    })
}

/// The service's real-time thread runs in a cell, at a FIFO priority, or
/// plain — not both (the service joins its cell itself).
fn service_sched(text: &str, span: &Range<usize>) -> Result<(), Refusal> {
    let sched = Sched::parse(&text.replace(HOST_PATTERN, "a")).map_err(|e| (span.clone(), e))?;
    if sched.cell.is_some() && sched.fifo.is_some() {
        return refuse(
            span.clone(),
            format!(
                "service = {text:?}: the network service's real-time thread runs in a cell \
                 (\"cell:NAME\"), at a priority (\"fifo:P\") or \"plain\", not both"
            ),
        );
    }
    Ok(())
}

/// Every thread that joins a reserved cell needs a reservation slot of its
/// own (one per core the cell asks for): refused at `span`, naming the cell
/// and the threads, with the fix.
pub(super) fn slots_suffice(
    roles: &[(String, Sched)],
    scenario: &Scenario,
    span: &Range<usize>,
) -> Result<(), Refusal> {
    for cell in &scenario.cells {
        let joining: Vec<&str> = roles
            .iter()
            .filter(|(_, s)| s.cell.as_deref() == Some(cell.name.as_str()))
            .map(|(role, _)| role.as_str())
            .collect();
        let slots = match &cell.request.cores {
            CoreRequest::List(l) => l.len(),
            CoreRequest::Count(n) => *n,
        };
        if cell.request.budget.is_none() || joining.len() <= slots {
            continue;
        }
        return refuse(
            span.clone(),
            format!(
                "cell {:?} is joined by {} threads ({}) but has {slots} reservation slot(s), one \
                 per core: give each host a cell of its own (\"cell:NAME-{HOST_PATTERN}\", with \
                 cells NAME-a, NAME-b, … declared), or give the cell count = {}",
                cell.name,
                joining.len(),
                joining.join(", "),
                joining.len()
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{Scenario, Subject};
    use super::*;

    const GOOD: &str = r#"name = "aes67"
duration = "2s"
warmup = "500ms"

[subject]
kind = "aes67"
hosts = 3
streams = 2
channels = 8
encoding = "L24"
ptime = "1ms"
latency = "1.5ms"
deadline = "8ms"

[[cell]]
name = "graph-a"
policy = "event-triggered"
placement = "global"
runtime = "200us"
period = "1ms"

[[cell]]
name = "graph-b"
policy = "event-triggered"
placement = "global"
runtime = "200us"
period = "1ms"

[[cell]]
name = "graph-c"
policy = "event-triggered"
placement = "global"
runtime = "200us"
period = "1ms"

[[cell]]
name = "net"
policy = "event-triggered"
placement = "global"
count = 2
runtime = "100us"
period = "1ms"

[[configuration]]
name = "plain"
subject = "plain"

[[configuration]]
name = "cells"
streams = 4
subject = { graph = "cell:graph-{host}", service = "fifo:60" }
"#;

    fn parse(text: &str) -> Result<Scenario, (usize, String)> {
        Scenario::parse(text, "aes67.toml").map_err(|e| (e.line, e.reason))
    }

    /// `GOOD` with `from` replaced by `to`, refused: (line, reason).
    fn refusal(from: &str, to: &str) -> (usize, String) {
        assert!(GOOD.contains(from), "{from:?} not in GOOD");
        parse(&GOOD.replacen(from, to, 1)).expect_err("refused")
    }

    fn line_of(text: &str) -> usize {
        GOOD.lines()
            .position(|l| l.contains(text))
            .expect("in GOOD")
            + 1
    }

    #[test]
    fn a_good_file_parses_into_hosts_roles_and_streams() {
        let s = parse(GOOD).unwrap();
        let Subject::Aes67(subject) = &s.subject else {
            panic!("{:?}", s.subject)
        };
        assert_eq!((subject.hosts, subject.streams, subject.hops()), (3, 2, 4));
        assert_eq!(subject.format.frames_per_packet, 48);
        assert_eq!(subject.format.channels, 8);
        assert_eq!(subject.latency, Duration::from_micros(1500));
        assert_eq!(subject.deadline, Duration::from_millis(8));
        let plain = &s.configurations[0];
        assert_eq!(
            plain.aes67,
            Some(Aes67Settings {
                streams: 2,
                cut: None,
                ptp_lost: None
            })
        );
        assert_eq!(plain.roles.len(), 6);
        assert!(plain.roles.iter().all(|(_, s)| s.is_plain()));
        assert!(plain.needs_privilege(), "namespaces need root");
        let cells = &s.configurations[1];
        assert_eq!(
            cells.aes67,
            Some(Aes67Settings {
                streams: 4,
                cut: None,
                ptp_lost: None
            })
        );
        let role = |name: &str| &cells.roles.iter().find(|(r, _)| r == name).unwrap().1;
        assert_eq!(role("graph c").cell.as_deref(), Some("graph-c"));
        assert_eq!(role("service b").fifo, Some(60));
        assert_eq!(cells.cells(), ["graph-a", "graph-b", "graph-c"]);
    }

    #[test]
    fn subject_mistakes_name_their_line() {
        let cases = [
            ("hosts = 3", "hosts = 5", "hosts = 5", "1–4"),
            ("streams = 2", "streams = 33", "streams = 33", "1–32"),
            ("channels = 8", "channels = 9", "channels = 9", "1–8"),
            ("encoding = \"L24\"", "encoding = \"PCMU\"", "PCMU", "L16"),
            ("ptime = \"1ms\"", "ptime = \"2ms\"", "2ms", "125us"),
            (
                "latency = \"1.5ms\"",
                "latency = \"1ms\"",
                "latency = \"1ms\"",
                "exceed the packet time",
            ),
            (
                "deadline = \"8ms\"",
                "deadline = \"4ms\"",
                "4ms",
                "deadline ≥ 6ms",
            ),
        ];
        for (from, to, at, why) in cases {
            let text = GOOD.replacen(from, to, 1);
            let (line, reason) = parse(&text).expect_err(to);
            let expected = text.lines().position(|l| l.contains(at)).unwrap() + 1;
            assert_eq!(line, expected, "{to}: {reason}");
            assert!(reason.contains(why), "{to}: {reason}");
        }
    }

    #[test]
    fn a_payload_over_the_mtu_and_a_rate_the_engine_does_not_run_are_refused() {
        let (line, reason) = refusal("ptime = \"1ms\"", "ptime = \"4ms\"");
        assert_eq!(line, line_of("ptime"));
        assert!(reason.contains("1440"), "{reason}");
        let (line, reason) = refusal("encoding = \"L24\"", "encoding = \"L24\"\nrate = 88200");
        assert_eq!(line, line_of("encoding") + 1);
        assert!(reason.contains("44100, 48000 or 96000"), "{reason}");
    }

    #[test]
    fn configuration_mistakes_name_their_line_and_the_fix() {
        let at = line_of("subject = { graph");
        let (line, reason) = refusal("service = \"fifo:60\"", "servise = \"fifo:60\"");
        assert_eq!(line, at);
        assert!(reason.contains("unknown role \"servise\""), "{reason}");
        let (line, reason) = refusal("cell:graph-{host}", "cell:graph");
        assert_eq!(line, at);
        assert!(reason.contains("no cell named \"graph\""), "{reason}");
        let (line, reason) = refusal("\"fifo:60\"", "\"cell:net, fifo:60\"");
        assert_eq!(line, at);
        assert!(reason.contains("not both"), "{reason}");
        let (line, reason) = refusal("streams = 4", "streams = 40");
        assert_eq!(line, line_of("streams = 4"));
        assert!(reason.contains("1–32"), "{reason}");
    }

    #[test]
    fn a_lone_host_is_one_hop() {
        let lone = GOOD.replacen("hosts = 3", "hosts = 1", 1);
        let s = parse(&lone).unwrap();
        let Subject::Aes67(subject) = &s.subject else {
            panic!("{:?}", s.subject)
        };
        assert_eq!((subject.hosts, subject.hops()), (1, 1));
        assert_eq!(subject.host_names(), ["a"]);
        let (_, reason) = refusal("hosts = 3", "hosts = 0");
        assert!(reason.contains("looped to itself"), "{reason}");
    }

    #[test]
    fn a_shared_reserved_cell_needs_a_slot_per_thread() {
        // Three services in a cell of two reservations.
        let (line, reason) = refusal("\"fifo:60\"", "\"cell:net\"");
        assert_eq!(line, line_of("subject = { graph"));
        assert!(
            reason.contains("cell \"net\" is joined by 3 threads"),
            "{reason}"
        );
        assert!(reason.contains("count = 3"), "{reason}");
        // Two hosts fit it.
        let two = GOOD
            .replacen("hosts = 3", "hosts = 2", 1)
            .replacen("\"fifo:60\"", "\"cell:net\"", 1)
            .replacen("deadline = \"8ms\"", "deadline = \"4ms\"", 1);
        assert!(parse(&two).is_ok());
    }

    #[test]
    fn the_streams_must_fit_a_gigabit_bridge() {
        // A middle host sends 32 streams each way: 2 × 32 × 9.5 Mbit/s fits;
        // at 96 kHz in 333 µs packets (19.4 Mbit/s each) they do not.
        let full = GOOD.replacen("streams = 2", "streams = 32", 1);
        assert!(parse(&full).is_ok());
        let fast = full
            .replacen("encoding = \"L24\"", "encoding = \"L24\"\nrate = 96000", 1)
            .replacen("ptime = \"1ms\"", "ptime = \"333us\"", 1);
        let (line, reason) = parse(&fast).expect_err("over a gigabit");
        assert_eq!(line, line_of("streams = 2"));
        assert!(reason.contains("gigabit"), "{reason}");
    }

    /// Two hosts, one stream, with `extra` appended to the subject.
    fn two_hosts(extra: &str) -> String {
        GOOD.replacen("hosts = 3", "hosts = 2", 1).replacen(
            "deadline = \"8ms\"",
            &format!("deadline = \"4ms\"\n{extra}"),
            1,
        )
    }

    #[test]
    fn a_foreign_sender_is_host_a_and_only_b_runs_tessera() {
        let text = two_hosts(
            "\n[subject.foreign]\njitter = \"1ms\"\nclock_ppm = 50.0\npayload_type = 102\n",
        );
        let s = parse(&text).unwrap();
        let Subject::Aes67(subject) = &s.subject else {
            panic!("{:?}", s.subject)
        };
        let foreign = subject.foreign.unwrap();
        assert_eq!(foreign.jitter, Duration::from_millis(1));
        assert_eq!((foreign.clock_ppm, foreign.payload_type), (50.0, 102));
        assert_eq!(
            foreign.max_slip_ppm,
            tessera_aes67::playout::DEFAULT_MAX_SLIP_PPM
        );
        assert_eq!(subject.tessera_hosts(), ["b"]);
        let roles: Vec<&str> = s.configurations[1]
            .roles
            .iter()
            .map(|(r, _)| r.as_str())
            .collect();
        assert_eq!(roles, ["graph b", "service b"]);
        let (_, reason) = parse(&text.replacen("payload_type = 102", "payload_type = 8", 1))
            .expect_err("a static payload type");
        assert!(reason.contains("96–127"), "{reason}");
        let (_, reason) = parse(&GOOD.replacen(
            "deadline = \"8ms\"",
            "deadline = \"8ms\"\n\n[subject.foreign]\njitter = \"1ms\"\n",
            1,
        ))
        .expect_err("three hosts");
        assert!(reason.contains("hosts = 2"), "{reason}");
    }

    #[test]
    fn two_paths_lose_delay_and_one_may_be_cut() {
        let text =
            two_hosts("\n[subject.paths]\nloss_percent = 1.0\ndelay = \"1ms\"\njitter = \"1ms\"\n")
                .replacen("streams = 4", "streams = 4\ncut = \"1s\"", 1);
        let s = parse(&text).unwrap();
        let Subject::Aes67(subject) = &s.subject else {
            panic!("{:?}", s.subject)
        };
        let paths = subject.paths.unwrap();
        assert_eq!(paths.loss, 0.01);
        assert_eq!(
            (paths.delay, paths.jitter),
            (Duration::from_millis(1), Duration::from_millis(1))
        );
        assert_eq!(
            s.configurations[1].aes67.unwrap().cut,
            Some(Duration::from_secs(1))
        );
        let (_, reason) = parse(&GOOD.replacen("streams = 4", "streams = 4\ncut = \"1s\"", 1))
            .expect_err("a cut of one path");
        assert!(reason.contains("[subject.paths]"), "{reason}");
        let (_, reason) = parse(&text.replacen("loss_percent = 1.0", "loss_percent = 60.0", 1))
            .expect_err("60 %");
        assert!(reason.contains("0–50"), "{reason}");
    }

    #[test]
    fn hosts_may_run_ptp_and_a_configuration_lose_it() {
        let text =
            two_hosts("ptp = true\n").replacen("streams = 4", "streams = 4\nptp_lost = \"1s\"", 1);
        let s = parse(&text).unwrap();
        let Subject::Aes67(subject) = &s.subject else {
            panic!("{:?}", s.subject)
        };
        assert!(subject.ptp);
        let lost = |s: &Scenario, k: usize| s.configurations[k].aes67.unwrap().ptp_lost;
        assert_eq!(lost(&s, 1), Some(Duration::from_secs(1)));
        assert_eq!(lost(&s, 0), None);
        assert_eq!(lost(&s.scaled(0.5), 1), Some(Duration::from_millis(500)));
        let (_, reason) = parse(&GOOD.replacen("streams = 4", "streams = 4\nptp_lost = \"1s\"", 1))
            .expect_err("no PTP to lose");
        assert!(reason.contains("ptp = true"), "{reason}");
        let lone = two_hosts("ptp = true\n").replacen("hosts = 2", "hosts = 1", 1);
        let (_, reason) = parse(&lone).expect_err("a lone host");
        assert!(reason.contains("hosts ≥ 2"), "{reason}");
        let paths = two_hosts("ptp = true\n\n[subject.paths]\nloss_percent = 1.0\n");
        let (_, reason) = parse(&paths).expect_err("two paths");
        assert!(reason.contains("bridge"), "{reason}");
        let off = parse(&two_hosts("ptp = false\n")).unwrap();
        assert!(matches!(&off.subject, Subject::Aes67(a) if !a.ptp));
    }

    #[test]
    fn the_shipped_scenarios_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        for (name, hosts, configurations) in [
            ("aes67-two-hosts.toml", 2, 4),
            ("aes67-chain.toml", 3, 4),
            ("aes67-streams.toml", 2, 5),
            ("aes67-one-service.toml", 1, 4),
            ("aes67-foreign.toml", 2, 2),
            ("aes67-redundant.toml", 2, 2),
            ("aes67-redundant-cut.toml", 2, 2),
            ("aes67-ptp.toml", 2, 3),
        ] {
            let s = Scenario::from_file(&dir.join(name)).unwrap_or_else(|e| panic!("{e}"));
            let Subject::Aes67(subject) = &s.subject else {
                panic!("{name}: {:?}", s.subject)
            };
            assert_eq!(subject.hosts, hosts, "{name}");
            assert_eq!(s.configurations.len(), configurations, "{name}");
        }
    }
}
