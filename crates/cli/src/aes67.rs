//! `tessera aes67 run` and `tessera net streams`: an AES67 host — a graph
//! in a cell of its own whose nodes receive and send RTP streams through
//! the network service — and the streams announced on the network. Thin:
//! the host, the nodes and the media clock live in `tessera_services::aes67`;
//! this file parses and prints.

use crate::failure::{failed, Failure};
use crate::netclient::{refused, ServiceArgs};
use crate::parse::invalid;
use crate::progress::show_progress;
use clap::Args;
use std::fmt::Write;
use std::io::IsTerminal;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_aes67::playout::DEFAULT_MAX_SLIP_PPM;
use tessera_aes67::rtp::DYNAMIC_PAYLOAD_TYPES;
use tessera_aes67::{Encoding, HeardSession, SessionDescription, StreamFormat};
use tessera_broker::{BrokerError, ErrorCode, Mode, Session};
use tessera_policy::CellRequest;
use tessera_runtime::CellJoin;
use tessera_services::aes67::host::{
    buffer_for, buffer_short, Host, HostConfig, HostReport, Route, MIN_BUFFER_PACKETS,
};
use tessera_services::aes67::{origin_towards, MediaClock, Playout, StreamSpec, PAYLOAD_TYPE};
use tessera_services::net::client::{self, Announcement};
use tessera_sys::process::{catch_termination, take_termination};

pub const EXAMPLES: &str = "Examples:\n  \
    sudo tessera serve net &                     # the network service, in its cell\n  \
    sudo tessera aes67 run --interface 192.168.1.10 --send 239.69.1.1:5004 --route tone --announce\n  \
    sudo tessera aes67 run --interface 192.168.1.10 --receive 239.69.1.2:5004 --send 239.69.1.1:5004 --route forward\n  \
    sudo tessera aes67 run --interface 10.0.0.1 --receive 239.69.1.2:5004 --send 239.69.1.1:5004 --route marker --seconds 60 --json\n  \
    tessera aes67 run --receive-sap \"PipeWire RTP\" --send 224.0.0.56:46002 --route forward --playout arrival\n  \
    sudo tessera aes67 run --sdp stage.sdp --playout arrival --max-slip-ppm 100 --route tone --json\n  \
    sudo tessera aes67 run --interface 10.0.1.1 --secondary-interface 10.0.2.1 \\\n      \
    --receive 239.69.1.1:5004,239.70.1.1:5004 --send 239.69.2.1:5004,239.70.2.1:5004   # ST 2022-7\n  \
    tessera net streams\n\n\
    Streams are 48 kHz L24 stereo with 1 ms packets and payload type 96 unless told otherwise;\n\
    a received stream's SDP (--sdp, --receive-sap, or a SAP announcement of its address) gives\n\
    its format and payload type instead. The media clock is PTP when ptp4l runs (its management\n\
    socket at --ptp-uds), else this machine's clock: every report says which. With a ptp4l that\n\
    adjusts no clock (free_running 1), --ptp-free-running adds its measured offset instead.";

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub service: ServiceArgs,
    /// This host's address on the streams' network: multicast is joined and sent there.
    #[arg(long, default_value = "0.0.0.0")]
    pub interface: Ipv4Addr,
    /// This host's address on the second network, for streams of two paths (ST 2022-7).
    #[arg(long)]
    pub secondary_interface: Option<Ipv4Addr>,
    /// A stream to receive: its group (or this host's unicast address) and port, then after a comma its address on the second network if it comes by two; repeatable.
    #[arg(long, value_parser = stream_address)]
    pub receive: Vec<StreamAddress>,
    /// A stream to receive, found by (part of) its name among the SAP announcements the service heard; repeatable.
    #[arg(long)]
    pub receive_sap: Vec<String>,
    /// A stream to receive as the SDP file describes it (address, format, payload type); repeatable.
    #[arg(long)]
    pub sdp: Vec<PathBuf>,
    /// A stream to send: its group or unicast destination and port, then after a comma its address on the second network; repeatable.
    #[arg(long, value_parser = stream_address)]
    pub send: Vec<StreamAddress>,
    /// The RTP payload type of the sent streams (dynamic: 96–127), announced in their SDP.
    #[arg(long, default_value_t = PAYLOAD_TYPE)]
    pub payload_type: u8,
    /// forward (received k → sent k), marker (round-trip latency on received/sent k), or tone.
    #[arg(long, default_value = "forward")]
    pub route: String,
    #[arg(long, default_value = "L24")]
    pub encoding: String,
    #[arg(long, default_value_t = 2)]
    pub channels: u16,
    #[arg(long, default_value_t = 48_000)]
    pub rate: u32,
    /// Packet time: 125us, 250us, 333us, 1ms or 4ms.
    #[arg(long, default_value = "1ms")]
    pub ptime: String,
    /// How far behind the clock received streams play (AES67's link offset).
    #[arg(long, default_value = "2ms")]
    pub latency: String,
    /// Packets each jitter buffer holds [default: twice the packets the latency spans, at least 16].
    #[arg(long)]
    pub buffer: Option<usize>,
    /// media-clock (senders on this media clock) or arrival (a sender with a clock of its own, as PipeWire).
    #[arg(long, default_value = "media-clock")]
    pub playout: String,
    /// With --playout arrival: most frames dropped or repeated to follow the sender's clock, per million played.
    #[arg(long, default_value_t = DEFAULT_MAX_SLIP_PPM)]
    pub max_slip_ppm: u32,
    /// The graph's cell: its reservation every cycle, e.g. 300us.
    #[arg(long, default_value = "300us")]
    pub budget: String,
    /// Run the graph without a cell even when privileged.
    #[arg(long)]
    pub no_cell: bool,
    /// Announce the sent streams (SAP, through the network service).
    #[arg(long)]
    pub announce: bool,
    /// ptp4l's management socket, for the media clock.
    #[arg(long, default_value = "/var/run/ptp4l")]
    pub ptp_uds: PathBuf,
    /// ptp4l adjusts no clock (free_running 1): the media clock adds its measured offset from the grandmaster.
    #[arg(long)]
    pub ptp_free_running: bool,
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct StreamsArgs {
    #[command(flatten)]
    pub service: ServiceArgs,
    #[arg(long)]
    pub json: bool,
}

/// The graph's cell, destroyed when the run ends.
struct RunCell {
    session: Session,
    name: String,
}

impl Drop for RunCell {
    fn drop(&mut self) {
        if let Err(e) = self.session.destroy_cell(&self.name) {
            eprintln!(
                "tessera aes67: cell {:?} not destroyed: {}",
                self.name, e.message
            );
        }
    }
}

pub fn streams(args: StreamsArgs) -> Result<ExitCode, Failure> {
    let (sessions, unreadable) = client::streams(&args.service.connect()?).map_err(refused)?;
    let listing = Listing {
        sessions,
        unreadable,
    };
    crate::show::print(args.json, &listing, streams_table)
}

#[derive(serde::Serialize)]
struct Listing {
    sessions: Vec<HeardSession>,
    unreadable: u64,
}

fn streams_table(listing: &Listing) -> String {
    if listing.sessions.is_empty() {
        return format!(
            "no AES67 streams announced (SAP) on the network yet; {} datagrams on the SAP port \
             were not announcements of an audio stream\n",
            listing.unreadable
        );
    }
    let mut out = format!(
        "{:<32} {:<21} {:<13} {:>5} {:<16} {:<24}\n",
        "stream", "address", "format", "ptime", "from", "clock"
    );
    for heard in &listing.sessions {
        let d = &heard.description;
        let ptime_us = d.format.packet_time_ns() / 1000;
        let clock = d
            .ref_clock
            .as_ref()
            .map_or("-".into(), |c| format!("{c:?}"));
        let _ = writeln!(
            out,
            "{:<32} {:<21} {:<13} {:>4}µ {:<16} {:<24}",
            d.name,
            format!("{}:{}", d.destination, d.port),
            d.rtpmap(),
            ptime_us,
            heard.origin,
            clock
        );
    }
    out
}

fn time_ns(text: &str, example: &str) -> Result<u64, BrokerError> {
    Ok(crate::parse::time(text, example)?.as_nanos() as u64)
}

fn route(text: &str) -> Result<Route, BrokerError> {
    match text {
        "forward" => Ok(Route::Forward),
        "tone" => Ok(Route::Tone),
        // A marker a second: far longer than any path's latency.
        "marker" => Ok(Route::Marker {
            interval_frames: 48_000,
        }),
        other => Err(invalid(
            format!("route {other:?}"),
            "use --route forward, --route marker or --route tone",
        )),
    }
}

fn playout(args: &RunArgs) -> Result<Playout, BrokerError> {
    match args.playout.as_str() {
        "media-clock" => Ok(Playout::MediaClock),
        "arrival" => Ok(Playout::Arrival {
            max_slip_ppm: args.max_slip_ppm,
        }),
        other => Err(invalid(
            format!("playout {other:?}"),
            "use --playout media-clock or --playout arrival",
        )),
    }
}

fn format(args: &RunArgs) -> Result<StreamFormat, BrokerError> {
    let encoding = Encoding::from_name(&args.encoding)
        .ok_or_else(|| invalid(format!("encoding {:?}", args.encoding), "use L16 or L24"))?;
    let ptime_us = (time_ns(&args.ptime, "--ptime 1ms")? / 1000) as u32;
    StreamFormat::with_packet_time(encoding, args.rate, args.channels, ptime_us)
        .map_err(|e| invalid(e.to_string(), "e.g. --rate 48000 --channels 8 --ptime 1ms"))
}

/// A stream's address, and its address on the second network if it has
/// one: `--receive 239.69.1.1:5004,239.70.1.1:5004`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamAddress {
    pub primary: SocketAddrV4,
    pub secondary: Option<SocketAddrV4>,
}

fn stream_address(text: &str) -> Result<StreamAddress, String> {
    let address = |a: &str| {
        a.trim()
            .parse::<SocketAddrV4>()
            .map_err(|_| format!("{a:?} is not ADDRESS:PORT, e.g. 239.69.1.1:5004"))
    };
    match text.split_once(',') {
        None => Ok(StreamAddress {
            primary: address(text)?,
            secondary: None,
        }),
        Some((a, b)) => Ok(StreamAddress {
            primary: address(a)?,
            secondary: Some(address(b)?),
        }),
    }
}

fn payload_type(args: &RunArgs) -> Result<u8, BrokerError> {
    match DYNAMIC_PAYLOAD_TYPES.contains(&args.payload_type) {
        true => Ok(args.payload_type),
        false => Err(invalid(
            format!("payload type {}", args.payload_type),
            "AES67 streams use a dynamic payload type: give --payload-type 96 to 127",
        )),
    }
}

/// The streams to receive: described by a file, found among the
/// announcements by name, or given by address — in the format an
/// announcement of that address gives, else the flags'.
fn received(args: &RunArgs, format: StreamFormat) -> Result<Vec<StreamSpec>, BrokerError> {
    let mut streams = Vec::new();
    for file in &args.sdp {
        let text = std::fs::read_to_string(file).map_err(|e| {
            invalid(
                format!("SDP file {}: {e}", file.display()),
                "give a readable file",
            )
        })?;
        let description = SessionDescription::parse(&text).map_err(|e| {
            invalid(
                format!("SDP file {}: {e}", file.display()),
                "give the stream's session description",
            )
        })?;
        streams.push(StreamSpec::from_description(&description));
    }
    if args.receive.is_empty() && args.receive_sap.is_empty() {
        return Ok(streams);
    }
    let (heard, _) = client::streams(&args.service.connect()?).map_err(refused)?;
    for (k, address) in args.receive.iter().enumerate() {
        let announced = heard.iter().find(|h| {
            let d = &h.description;
            SocketAddrV4::new(d.destination, d.port) == address.primary
        });
        let stream = match announced {
            Some(h) => StreamSpec::from_description(&h.description),
            None => StreamSpec::new(format!("rx{k}"), address.primary, format, PAYLOAD_TYPE),
        };
        streams.push(StreamSpec {
            secondary: address.secondary,
            ..stream
        });
    }
    for wanted in &args.receive_sap {
        let found = heard
            .iter()
            .find(|h| h.description.name.contains(wanted.as_str()))
            .ok_or_else(|| {
                BrokerError::new(
                    ErrorCode::NotFound,
                    format!("no announced stream is named like {wanted:?}"),
                    "list them with `tessera net streams` (announcements come every few seconds)",
                )
            })?;
        streams.push(StreamSpec::from_description(&found.description));
    }
    Ok(streams)
}

fn sent(args: &RunArgs, format: StreamFormat, payload_type: u8) -> Vec<StreamSpec> {
    args.send
        .iter()
        .enumerate()
        .map(|(k, address)| StreamSpec {
            secondary: address.secondary,
            ..StreamSpec::new(
                format!("tessera-{}-{k}", std::process::id()),
                address.primary,
                format,
                payload_type,
            )
        })
        .collect()
}

/// Packets each jitter buffer holds: `--buffer`, refused when a received
/// stream's packets would not hold the latency, or by default room for the
/// latency twice over in the smallest packets received.
fn buffer(
    args: &RunArgs,
    latency_frames: u32,
    receive: &[StreamSpec],
) -> Result<usize, BrokerError> {
    let smallest = receive.iter().map(|s| s.format.frames_per_packet).min();
    let Some(given) = args.buffer else {
        return Ok(smallest.map_or(MIN_BUFFER_PACKETS, |p| buffer_for(latency_frames, p)));
    };
    match smallest.and_then(|p| buffer_short(given, latency_frames, p)) {
        Some(needed) => Err(invalid(
            format!(
                "--buffer {given} holds less than --latency {} and a packet: every packet would \
                 come too early",
                args.latency
            ),
            &format!("give --buffer {needed}, or leave it out"),
        )),
        None => Ok(given),
    }
}

/// The graph's cell and its threads' hook, or why there is none.
fn cell(args: &RunArgs, period_ns: u64) -> Result<(Option<RunCell>, String), BrokerError> {
    if args.no_cell {
        return Ok((None, "no cell (--no-cell): SCHED_OTHER".into()));
    }
    if Mode::detect() == Mode::BestEffort {
        return Ok((
            None,
            "BEST-EFFORT: no CAP_SYS_NICE, so no cell and nothing guaranteed (run as root, or \
             `sudo setcap cap_sys_nice+ep $(which tessera)`)"
                .into(),
        ));
    }
    let budget_ns = time_ns(&args.budget, "--budget 300us")?;
    let name = format!("aes67-{}", std::process::id());
    let request = CellRequest {
        reclaim: true,
        ..CellRequest::event_triggered(&name, budget_ns, period_ns)
    };
    let mut session = Session::connect()?;
    session.create_cell(request, true)?;
    let note = format!(
        "cell {name:?}: {} µs every {} µs (SCHED_DEADLINE, reclaiming)",
        budget_ns / 1000,
        period_ns / 1000
    );
    Ok((Some(RunCell { session, name }), note))
}

fn service_socket(service: &ServiceArgs) -> PathBuf {
    service
        .socket
        .clone()
        .unwrap_or_else(|| tessera_broker::paths::Paths::from_env().service_socket(&service.name))
}

pub fn run(args: RunArgs) -> Result<ExitCode, Failure> {
    // Everything the arguments can get wrong is refused before anything
    // (a cell, a flow) is made.
    let format = format(&args)?;
    let route = route(&args.route)?;
    let playout = playout(&args)?;
    let payload_type = payload_type(&args)?;
    if args.receive.is_empty()
        && args.receive_sap.is_empty()
        && args.sdp.is_empty()
        && args.send.is_empty()
    {
        return Err(invalid(
            "no streams to receive or send",
            "give --receive, --receive-sap, --sdp or --send (see the examples in --help)",
        )
        .into());
    }
    let two_paths = args
        .receive
        .iter()
        .chain(&args.send)
        .any(|a| a.secondary.is_some());
    if two_paths && args.secondary_interface.is_none() {
        return Err(invalid(
            "streams with a second path but no second interface",
            "give --secondary-interface, this host's address on the second network",
        )
        .into());
    }
    let receive = received(&args, format)?;
    let send = sent(&args, format, payload_type);
    let latency_ns = time_ns(&args.latency, "--latency 2ms")?;
    let latency_frames = (latency_ns * u64::from(args.rate) / 1_000_000_000) as u32;
    let buffer_packets = buffer(&args, latency_frames, &receive)?;
    let clock = match args.ptp_free_running {
        true => MediaClock::follow_free_running(&args.ptp_uds, 0),
        false => MediaClock::detect(&args.ptp_uds, 0),
    };
    let frames = format.frames_per_packet.max(tessera_graph::MIN_FRAMES);
    let period_ns = u64::from(frames) * 1_000_000_000 / u64::from(args.rate);
    let (run_cell, cell_note) = cell(&args, period_ns)?;
    let setup = run_cell.as_ref().map(|c| {
        let hook = CellJoin::connect(c.name.clone()).hook();
        Arc::new(move |_| hook().map_err(Into::into)) as tessera_graph::ThreadSetup
    });
    let config = HostConfig {
        name: "host".into(),
        service: service_socket(&args.service),
        interface: args.interface,
        secondary_interface: args.secondary_interface,
        receive,
        send,
        route,
        frames,
        sample_rate: args.rate,
        latency_frames,
        buffer_packets,
        playout,
        clock: clock.clone(),
        workers: 0,
        setup,
    };
    let announced = match args.announce {
        true => announce(&args, &config, &clock)?,
        false => Vec::new(),
    };
    if !args.json {
        for stream in &config.receive {
            eprintln!("tessera aes67: receiving {}", received_line(stream));
        }
        eprintln!("tessera aes67: media clock: {}", clock.label());
        eprintln!("tessera aes67: graph: {cell_note}");
    }
    catch_termination().map_err(|e| failed(e.to_string(), ""))?;
    let mut host = Host::start(config).map_err(refused)?;
    watch(&mut host, args.seconds, args.json);
    let report = host.stop().map_err(refused)?;
    drop(announced);
    drop(run_cell);
    let printed = crate::show::print(args.json, &report, host_table)?;
    match report.streams.iter().any(|s| s.counts.service_gone) {
        true => Err(BrokerError::new(
            ErrorCode::Refused,
            "the network service stopped during the run: its streams went silent",
            "start it again (`tessera serve net`), then the run",
        )
        .into()),
        false => Ok(printed),
    }
}

/// "rx0 at 239.69.1.1:5004: L24/48000/2, 1000 µs packets, payload type 101 (its SDP)".
fn received_line(stream: &StreamSpec) -> String {
    let f = &stream.format;
    let secondary = stream
        .secondary
        .map_or(String::new(), |a| format!(" and {a}"));
    let (payload, from) = match stream.described {
        true => (format!("payload type {}", stream.payload_type), "its SDP"),
        false => ("any dynamic payload type".into(), "the flags"),
    };
    format!(
        "{} at {}{secondary}: {}/{}/{}, {} µs packets, {payload} ({from})",
        stream.name,
        stream.address,
        f.encoding.name(),
        f.sample_rate,
        f.channels,
        f.packet_time_ns() / 1000
    )
}

/// The sent streams' announcements, held for the run.
fn announce(
    args: &RunArgs,
    config: &HostConfig,
    clock: &MediaClock,
) -> Result<Vec<Announcement>, BrokerError> {
    config
        .send
        .iter()
        .enumerate()
        .map(|(k, stream)| {
            let session_id = u64::from(std::process::id()) << 16 | k as u64;
            let origin = origin_towards(args.interface, stream.address);
            let sdp = stream.describe(origin, session_id, clock).to_sdp();
            client::announce(args.service.connect()?, &sdp).map_err(refused)
        })
        .collect()
}

/// Runs until the time is up or a signal, with a progress line.
fn watch(host: &mut Host, seconds: f64, json: bool) {
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let terminal = std::io::stderr().is_terminal();
    let mut last_line = 0;
    while Instant::now() < end && take_termination().is_none() {
        std::thread::sleep(Duration::from_millis(200));
        host.collect();
        if host.counts().iter().any(|s| s.counts.service_gone) {
            break;
        }
        let elapsed = start.elapsed().as_secs();
        if json || (!terminal && elapsed == last_line) {
            continue;
        }
        last_line = elapsed;
        show_progress(terminal, &progress(host, elapsed, seconds), false, true);
    }
    if terminal && !json {
        eprintln!();
    }
}

fn progress(host: &Host, elapsed: u64, seconds: f64) -> String {
    let counts = host.counts();
    let received: u64 = counts.iter().map(|s| s.counts.jitter.stored).sum();
    let lost: u64 = counts.iter().map(|s| s.counts.jitter.lost).sum();
    let late: u64 = counts.iter().map(|s| s.counts.jitter.late).sum();
    let sent: u64 = counts.iter().map(|s| s.counts.sent).sum();
    format!(
        "tessera aes67: {elapsed:>4} / {seconds:.0} s  received {received}  lost {lost}  late \
         {late}  sent {sent}"
    )
}

fn host_table(report: &HostReport) -> String {
    let mut out = format!(
        "media clock: {}\n{} cycles, {} xruns\n",
        report.clock, report.cycles, report.xruns
    );
    for (node, xruns) in &report.late_nodes {
        let _ = writeln!(out, "  late in {xruns} xruns: {node}");
    }
    let _ = writeln!(
        out,
        "{:<28} {:<4} {:>9} {:>7} {:>7} {:>7} {:>9} {:>8} {:>7} {:>9} {:>14}",
        "stream",
        "way",
        "packets",
        "lost",
        "late",
        "dups",
        "reordered",
        "resyncs",
        "slips",
        "sent",
        "age p99.9 (ms)"
    );
    for s in &report.streams {
        let c = &s.counts;
        let j = &c.jitter;
        let age = s
            .packet_age_ns(0.999)
            .map_or("–".into(), |ns| format!("{:.2}", ns as f64 / 1e6));
        let _ = writeln!(
            out,
            "{:<28} {:<4} {:>9} {:>7} {:>7} {:>7} {:>9} {:>8} {:>7} {:>9} {age:>14}",
            s.name,
            s.direction,
            j.stored,
            j.lost,
            j.late,
            j.duplicates + c.merge.duplicates,
            j.reordered,
            c.resyncs,
            c.frames_dropped + c.frames_repeated,
            c.sent
        );
        if j.unsent > 0 {
            let _ = writeln!(
                out,
                "  {} packets the sender never sent (its timestamps skipped them: its own xruns)",
                j.unsent
            );
        }
        if c.late_arrivals + c.late_in_host > 0 {
            let _ = writeln!(
                out,
                "  late: {} reached this host's socket late (the sender or the network: a longer \
                 --latency absorbs them), {} were held up in this host",
                c.late_arrivals, c.late_in_host
            );
        }
        let [primary, secondary] = c.merge.paths;
        if secondary.received > 0 || primary.lost + secondary.lost > 0 {
            let _ = writeln!(
                out,
                "  paths: primary {} received, {} lost; secondary {} received, {} lost",
                primary.received, primary.lost, secondary.received, secondary.lost
            );
        }
        if c.wrong_payload_type > 0 {
            let _ = writeln!(
                out,
                "  {} packets of another payload type dropped",
                c.wrong_payload_type
            );
        }
    }
    if report.markers_written > 0 {
        let mut sorted = report.latencies_ns.clone();
        sorted.sort_unstable();
        let at = |q: f64| {
            let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
            sorted.get(i).map_or(0.0, |&ns| ns as f64 / 1e6)
        };
        let _ = writeln!(
            out,
            "round trip (marker): {} found of {} ({} lost): p50 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms",
            sorted.len(),
            report.markers_written,
            report.markers_lost,
            at(0.5),
            at(0.999),
            at(1.0)
        );
    }
    out
}
