//! `tessera serve net` and `tessera net …`: the network service process,
//! its status, and the abusive streamer of seed 000 §4.2 with its far-side
//! peer. Thin: the service lives in `tessera_services::net`, the streamer
//! in `tessera_workloads::streamer`; this file parses and prints.

use crate::failure::Failure;
use crate::netclient::{refused, ServiceArgs};
use crate::parse::invalid;
use crate::show;
use clap::{Args, Subcommand};
use std::fmt::Write;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tessera_broker::{BrokerError, ServicePolicy};
use tessera_services::net::discovery::DiscoveryConfig;
use tessera_services::net::host::{Host, HostOptions};
use tessera_services::net::{client, Class, Discipline, Flow, FlowRequest, Status};
use tessera_sys::process::{catch_termination, take_termination};
use tessera_workloads::streamer;

pub const SERVE_EXAMPLES: &str = "Examples:\n  \
    sudo tessera serve net\n  \
    sudo tessera serve net --device veth0 --budget 300us --period 1ms\n  \
    sudo tessera serve net --discipline fifo --link-rate 1gbit   # a service without QoS\n  \
    sudo ip netns exec lan1 tessera serve net --placement global   # no cpusets in there\n  \
    tessera serve net --no-cell --allow-uid 1000\n\n\
    The service registers with the broker as NAME (default net); clients open it by\n\
    name. It runs until Ctrl-C or SIGTERM, then gives its cell and name back.";

pub const NET_EXAMPLES: &str = "Examples:\n  \
    tessera net status\n  \
    tessera net status --json\n  \
    tessera net streams\n  \
    tessera net stream --peer 10.213.0.2:9000 --seconds 30\n  \
    tessera net stream-peer --bind 10.213.0.2:9000 --seconds 30";

#[derive(Args)]
pub struct ServeNetArgs {
    /// The name clients open the service by.
    #[arg(long, default_value = "net")]
    pub name: String,
    /// Where to listen (default: the broker's run directory).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// mclock (reservations, weights, limits; real-time flows first) or fifo (no QoS).
    #[arg(long, default_value = "mclock")]
    pub discipline: String,
    /// The link's rate each way, e.g. 1gbit, 240mbit (default: measured from --device, else 1gbit).
    #[arg(long)]
    pub link_rate: Option<String>,
    /// The interface whose tbf shaping or speed is the link's rate.
    #[arg(long)]
    pub device: Option<String>,
    /// The real-time thread's reservation, e.g. 300us.
    #[arg(long, default_value = "300us")]
    pub budget: String,
    #[arg(long, default_value = "1ms")]
    pub period: String,
    /// partitioned (a core of its own) | global (EDF over the shared cores; no cpusets needed,
    /// as under `ip netns exec`).
    #[arg(long, default_value = "partitioned")]
    pub placement: String,
    /// Run without a cell even when privileged.
    #[arg(long)]
    pub no_cell: bool,
    /// Run the real-time thread in this existing cell instead of a new one.
    #[arg(long, conflicts_with = "no_cell")]
    pub cell: Option<String>,
    /// Admit this uid too (its owner and root always pass); repeatable.
    #[arg(long)]
    pub allow_uid: Vec<u32>,
    /// Admit this gid too; repeatable.
    #[arg(long)]
    pub allow_gid: Vec<u32>,
    /// Stop after this many seconds (default: until Ctrl-C or SIGTERM).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Neither announce clients' AES67 streams nor listen to others' (SAP).
    #[arg(long)]
    pub no_discovery: bool,
    /// The address of the interface SAP joins and announces on (0.0.0.0: the routing table's choice).
    #[arg(long, default_value = "0.0.0.0")]
    pub sap_interface: Ipv4Addr,
}

#[derive(Subcommand)]
pub enum NetCommand {
    /// The service's capacity and every flow's counters: bytes, packets, drops, delays.
    #[command(after_help = NET_EXAMPLES)]
    Status {
        #[command(flatten)]
        service: ServiceArgs,
        #[arg(long)]
        json: bool,
    },
    /// The AES67 streams announced (SAP) on the network, as the service heard them.
    #[command(after_help = crate::aes67::EXAMPLES)]
    Streams(crate::aes67::StreamsArgs),
    /// The abusive streamer (seed 000 §4.2): send and receive as much as the service lets it.
    #[command(after_help = NET_EXAMPLES)]
    Stream(StreamArgs),
    /// The streamer's far-side peer: counts what it is sent, sends what it is granted.
    #[command(after_help = NET_EXAMPLES)]
    StreamPeer(StreamPeerArgs),
}

#[derive(Args)]
pub struct StreamArgs {
    #[command(flatten)]
    pub service: ServiceArgs,
    /// The far-side peer (`tessera net stream-peer`).
    #[arg(long)]
    pub peer: SocketAddr,
    /// The local address of the flow.
    #[arg(long, default_value = "0.0.0.0:0")]
    pub bind: SocketAddr,
    /// A reservation for the streamer's flow, e.g. 100mbit (default none).
    #[arg(long)]
    pub reservation: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub weight: u32,
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Join this cell first (seed 000's Cell X).
    #[arg(long)]
    pub cell: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct StreamPeerArgs {
    #[arg(long)]
    pub bind: SocketAddr,
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    #[arg(long)]
    pub json: bool,
}

/// A rate flag: bits/s, or with kbit, mbit or gbit.
fn parse_rate(text: &str) -> Result<u64, BrokerError> {
    tessera_scenario::parse_rate(text).map_err(|e| invalid(e, "e.g. 240mbit, 1gbit"))
}

pub fn serve(args: ServeNetArgs) -> Result<ExitCode, Failure> {
    let discipline = match args.discipline.as_str() {
        "mclock" => Discipline::MClock,
        "fifo" => Discipline::Fifo,
        other => {
            return Err(invalid(
                format!("discipline {other:?}"),
                "use --discipline mclock or --discipline fifo",
            )
            .into())
        }
    };
    let options = HostOptions {
        name: args.name.clone(),
        socket: args.socket.clone(),
        discipline,
        link_bps: args.link_rate.as_deref().map(parse_rate).transpose()?,
        device: args.device.clone(),
        budget_ns: crate::parse::time(&args.budget, "--budget 300us")?.as_nanos() as u64,
        period_ns: crate::parse::time(&args.period, "--period 1ms")?.as_nanos() as u64,
        placement: crate::parse::placement(&args.placement)?,
        no_cell: args.no_cell,
        cell: args.cell.clone(),
        policy: ServicePolicy {
            uids: args.allow_uid.clone(),
            gids: args.allow_gid.clone(),
        },
        discovery: (!args.no_discovery).then(|| DiscoveryConfig {
            interface: args.sap_interface,
            ..DiscoveryConfig::default()
        }),
    };
    let host = crate::serve::until_stopped(args.seconds, || {
        let host = Host::start(&options).map_err(refused)?;
        println!("{}", host.summary);
        Ok(host)
    })?;
    drop(host);
    println!("network service {:?} stopped", args.name);
    Ok(ExitCode::SUCCESS)
}

pub fn run(command: NetCommand) -> Result<ExitCode, Failure> {
    match command {
        NetCommand::Status { service, json } => {
            let stream = service.connect()?;
            let status = client::ask_status(&stream).map_err(refused)?;
            show::print(json, &status, status_table)
        }
        NetCommand::Streams(args) => crate::aes67::streams(args),
        NetCommand::Stream(args) => stream(args),
        NetCommand::StreamPeer(args) => stream_peer(args),
    }
}

fn stream(args: StreamArgs) -> Result<ExitCode, Failure> {
    if let Some(cell) = &args.cell {
        tessera_runtime::CellJoin::connect(cell.clone()).join_current_thread()?;
    }
    let reservation_bps = args.reservation.as_deref().map(parse_rate).transpose()?;
    let request = FlowRequest {
        name: "streamer".into(),
        class: Class::Bulk,
        reservation_bps: reservation_bps.unwrap_or(0),
        weight: args.weight,
        limit_bps: None,
        bind: args.bind,
        peer: Some(args.peer),
        max_datagram: streamer::DATAGRAM,
        slots: 1024,
        response_deadline_ns: None,
        multicast: None,
        rtp_clock_rate: None,
    };
    let mut flow = Flow::open(args.service.connect()?, &request).map_err(refused)?;
    let stop = stop_after(args.seconds);
    let report = streamer::stream(&mut flow, args.peer, &stop).map_err(refused)?;
    show::print(args.json, &report, |r| {
        format!(
            "streamer: sent {:.1} Mbit/s, received {:.1} Mbit/s over {:.1} s\n",
            r.sent_mbps(),
            r.received_mbps(),
            r.seconds
        )
    })
}

fn stream_peer(args: StreamPeerArgs) -> Result<ExitCode, Failure> {
    let socket = UdpSocket::bind(args.bind)
        .and_then(|s| {
            s.set_read_timeout(Some(Duration::from_millis(50)))
                .map(|()| s)
        })
        .map_err(|e| {
            invalid(
                format!("cannot bind {}: {e}", args.bind),
                "give an address of this host that is free",
            )
        })?;
    let stop = stop_after(args.seconds);
    let report = streamer::serve_peer(&socket, &stop).map_err(refused)?;
    show::print(args.json, &report, |r| {
        format!(
            "stream peer: received {} bytes, sent {} bytes\n",
            r.received_bytes, r.sent_bytes
        )
    })
}

/// A flag set after `seconds` (or at Ctrl-C/SIGTERM).
fn stop_after(seconds: f64) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let _ = catch_termination();
    std::thread::spawn(move || {
        let end = std::time::Instant::now() + Duration::from_secs_f64(seconds);
        while std::time::Instant::now() < end && take_termination().is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    stop
}

fn mbps(bps: u64) -> String {
    format!("{:.1}", bps as f64 / 1e6)
}

fn status_table(status: &Status) -> String {
    let mut out = format!(
        "network service (pid {}), {} discipline: link {} Mbit/s, CPU {} Mbit/s, {} of {} Mbit/s \
         committed\nreal-time thread: {}\n",
        status.pid,
        status.discipline,
        mbps(status.link_bps),
        mbps(status.cpu_bps),
        mbps(status.committed_bps),
        mbps(status.usable_bps),
        status.real_time
    );
    if status.flows.is_empty() {
        out.push_str("no flows\n");
        return out;
    }
    let _ = writeln!(
        out,
        "{:>4}  {:<10} {:>7}  {:<9} {:>9} {:>6}  {:>10} {:>10} {:>7}  {:>9} {:>9}  {:>9}",
        "id",
        "flow",
        "pid",
        "class",
        "reserved",
        "weight",
        "in MB",
        "out MB",
        "drops",
        "in p99µs",
        "out p99µs",
        "Δt p99µs"
    );
    for f in &status.flows {
        let _ = writeln!(
            out,
            "{:>4}  {:<10} {:>7}  {:<9} {:>9} {:>6}  {:>10.1} {:>10.1} {:>7}  {:>9.0} {:>9.0}  {:>9.0}",
            f.id,
            f.name,
            f.client_pid,
            f.class.name(),
            mbps(f.reservation_bps),
            f.weight,
            f.received.bytes as f64 / 1e6,
            f.sent.bytes as f64 / 1e6,
            f.received.drops + f.received.overflowed + f.sent.drops,
            f.received.queueing.p99_ns as f64 / 1e3,
            f.sent.queueing.p99_ns as f64 / 1e3,
            f.response.p99_ns as f64 / 1e3
        );
        if let Some(rtp) = &f.rtp {
            let _ = writeln!(
                out,
                "      RTP: {} packets, {} lost, {} reordered, {} duplicates, {} restarts, {} not \
                 RTP, jitter {:.1} µs (SSRC {:08x})",
                rtp.packets,
                rtp.lost,
                rtp.reordered,
                rtp.duplicates,
                rtp.restarts,
                rtp.not_rtp,
                rtp.jitter_us,
                rtp.ssrc
            );
        }
    }
    out
}
