//! `tessera-jack-peer`: the JACK side of tessera's peer benchmark
//! (`tessera bench peer`). It connects to a running jackd2 (the server named
//! by `JACK_DEFAULT_SERVER`, never starting one), opens JACK clients that do
//! exactly what tessera's `load` node does, connects them as a chain or a
//! fan-out, records every client's timings per cycle into preallocated
//! buffers, and writes them to a file in the format of [`record`].
//!
//! One process hosts all the clients; JACK2 still runs each client's process
//! callback on a real-time thread of its own, woken by the server's per-client
//! futex, exactly as if each client were a process of its own.
//!
//! It must never start or stop a JACK server (the benchmark owns jackd) nor
//! allocate, lock or print in a process callback.

mod client;
mod record;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::{LoadClient, XrunCounter};
use record::{Sample, Topology};

/// Time the graph runs before recording starts (JACK2's graph settles and
/// the clients' threads page in their stacks).
const WARM_UP: Duration = Duration::from_millis(500);
/// How long to wait for the server to accept the first client.
const SERVER_WAIT: Duration = Duration::from_secs(10);
/// Recording buffers hold this many more cycles than the nominal count.
const CYCLE_MARGIN: f64 = 1.25;

struct Options {
    topology: Topology,
    loads: usize,
    load_fraction: f64,
    seconds: f64,
    out: std::path::PathBuf,
}

const USAGE: &str = "usage: tessera-jack-peer --topology chain|fan-out [--loads 10] [--load 0.05] \
                     [--seconds 20] --out FILE   (server: $JACK_DEFAULT_SERVER)";

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        topology: Topology::Chain,
        loads: 10,
        load_fraction: 0.05,
        seconds: 20.0,
        out: std::path::PathBuf::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--topology" => options.topology = Topology::parse(&value)?,
            "--loads" => options.loads = number(&value)? as usize,
            "--load" => options.load_fraction = number(&value)?,
            "--seconds" => options.seconds = number(&value)?,
            "--out" => options.out = value.into(),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if options.out.as_os_str().is_empty() || options.loads == 0 {
        return Err("--out is required and --loads must be at least 1".into());
    }
    Ok(options)
}

fn main() -> ExitCode {
    let outcome = parse_options().and_then(|options| run(&options));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tessera-jack-peer: {message}\n{USAGE}");
            ExitCode::FAILURE
        }
    }
}

type Active = jack::AsyncClient<XrunCounter, LoadClient>;

fn run(options: &Options) -> Result<(), String> {
    // Like the benchmark's own process: no page faults in callbacks, so the
    // recording buffers reserved below are resident before the first cycle.
    tessera_sys::mem::lock_all_memory().map_err(|e| format!("locking memory: {e}"))?;
    let names = options.topology.client_names(options.loads);
    let recording = Arc::new(AtomicBool::new(false));
    let xruns = Arc::new(AtomicU64::new(0));
    let mut active: Vec<Active> = Vec::with_capacity(names.len());
    for (index, name) in names.iter().enumerate() {
        let fraction = match options.topology.is_load(index, names.len()) {
            true => options.load_fraction,
            false => 0.0,
        };
        active.push(open_client(name, fraction, options, &recording, &xruns)?);
    }
    connect(&active[0], &options.topology.connections(&names))?;
    std::thread::sleep(WARM_UP);
    recording.store(true, Ordering::Release);
    std::thread::sleep(Duration::from_secs_f64(options.seconds));
    recording.store(false, Ordering::Release);
    let xrun_count = xruns.load(Ordering::Relaxed);
    let mut samples: Vec<Vec<Sample>> = Vec::with_capacity(active.len());
    for client in active {
        let (_, _, handler) = client
            .deactivate()
            .map_err(|e| format!("deactivating a client: {e}"))?;
        samples.push(handler.into_samples());
    }
    let header = record::Header {
        topology: options.topology,
        clients: names,
        xruns: xrun_count,
        hosting: "one process, one JACK2 client thread per client".into(),
    };
    let file = std::fs::File::create(&options.out)
        .map_err(|e| format!("creating {}: {e}", options.out.display()))?;
    record::write(std::io::BufWriter::new(file), &header, &samples)
        .map_err(|e| format!("writing {}: {e}", options.out.display()))
}

/// Opens and activates one client, retrying while the server starts up.
fn open_client(
    name: &str,
    fraction: f64,
    options: &Options,
    recording: &Arc<AtomicBool>,
    xruns: &Arc<AtomicU64>,
) -> Result<Active, String> {
    let give_up = Instant::now() + SERVER_WAIT;
    let client = loop {
        match jack::Client::new(name, jack::ClientOptions::NO_START_SERVER) {
            Ok((client, _)) => break client,
            Err(e) if Instant::now() >= give_up => {
                return Err(format!(
                    "opening JACK client {name}: {e} (is jackd running?)"
                ))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let period_s = f64::from(client.buffer_size()) / f64::from(client.sample_rate());
    let capacity = (options.seconds / period_s * CYCLE_MARGIN) as usize + 16;
    let handler = LoadClient::new(
        &client,
        fraction * period_s,
        capacity,
        Arc::clone(recording),
    )
    .map_err(|e| format!("registering ports of {name}: {e}"))?;
    let notifications = XrunCounter::new(Arc::clone(xruns), name == "load-01");
    client
        .activate_async(notifications, handler)
        .map_err(|e| format!("activating {name}: {e}"))
}

fn connect(client: &Active, connections: &[(String, String)]) -> Result<(), String> {
    for (from, to) in connections {
        client
            .as_client()
            .connect_ports_by_name(from, to)
            .map_err(|e| format!("connecting {from} -> {to}: {e}"))?;
    }
    Ok(())
}
