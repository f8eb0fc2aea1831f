//! `tessera bench rtkit`: how long a realtime request through tessera's
//! RTKit interface takes, from the D-Bus call to the calling thread reading
//! back SCHED_DEADLINE — idle, and under `stress-ng --cpu` on every core —
//! against a daemon of its own on a private system bus (the machine's bus
//! and its RTKit are never touched).
//!
//! Each request comes from a new thread of this process (a new reservation
//! each time, as PipeWire's and its clients' threads come), which exits
//! once it has read its policy back; the daemon's adaptation releases the
//! cell. Beside each request, another new thread pings the daemon
//! (`org.freedesktop.DBus.Peer.Ping`): the same trip through dbus-daemon
//! and back with no grant in it, the part of a request's time tessera does
//! not spend. It owns the daemon, the bus and the load it starts, and stops them
//! even when a request fails; it must never judge the figures.

use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_broker::paths::Paths;
use tessera_broker::Session;
use tessera_measure::Summary;
use tessera_rtkit::bus::{BUS_NAME, OBJECT_PATH};
use tessera_rtkit::private_bus::PrivateBus;
use tessera_sys::sched::{self, Policy};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Requests per configuration.
    pub requests: usize,
    /// Pause between requests (the released cells' bandwidth returns).
    pub interval: Duration,
    /// The `tessera` binary that runs the daemon.
    pub tessera: PathBuf,
}

/// One configuration's requests.
#[derive(Debug, Clone, Serialize)]
pub struct Configuration {
    pub name: String,
    /// The interference, as a command line (empty: none).
    pub load: String,
    /// From the call to SCHED_DEADLINE read back, µs, over granted requests.
    pub granted_us: Summary,
    /// A ping of the daemon through the bus and back, µs: the request's
    /// trip without the grant.
    pub bus_round_trip_us: Summary,
    /// Requests answered with an error (admission refused, or other).
    pub refused: u64,
}

/// The run's results.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub requests: usize,
    pub interval_ms: u64,
    pub configurations: Vec<Configuration>,
    /// p99 under load over p99 idle.
    pub p99_ratio_loaded_to_idle: f64,
}

/// The daemon with RTKit on a private bus, in a directory of its own; all
/// of it stopped, its cells reset and the directory removed when dropped.
struct Stage {
    dir: PathBuf,
    daemon: Child,
    bus: PrivateBus,
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        let _ = Session::embedded(Paths::at(&self.dir)).reset();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The daemon's config: RTKit's interface, its rate limits out of the way
/// of a benchmark that asks hundreds of times a minute, and a refusal
/// counted as one (not RTKit's SCHED_RR, which is no reservation).
const CONFIG: &str =
    "rtkit = true\n[rtkit_limits]\nactions_per_burst = 1000000\nthreads_per_user = 1000\n";

fn start_stage(tessera: &Path) -> Result<Stage, String> {
    let dir = std::env::temp_dir().join(format!("tessera-bench-rtkit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let bus = PrivateBus::start(&dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("daemon.toml"), CONFIG).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(dir.join("daemon.log")).map_err(|e| e.to_string())?;
    let daemon = Command::new(tessera)
        .args(["daemon", "--run-dir"])
        .arg(&dir)
        .arg("--config")
        .arg(dir.join("daemon.toml"))
        .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
        .stdin(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("start {} daemon: {e}", tessera.display()))?;
    Ok(Stage { dir, daemon, bus })
}

/// A call from a new thread, as a request comes: its round trip, µs.
fn call_from_new_thread(
    connection: &zbus::blocking::Connection,
    call: impl FnOnce(&zbus::blocking::Connection, u64) -> Result<(), String> + Send + 'static,
) -> Result<f64, String> {
    let connection = connection.clone();
    std::thread::spawn(move || {
        let tid = tessera_sys::proc::current_tid() as u64;
        let start = Instant::now();
        call(&connection, tid)?;
        Ok(start.elapsed().as_secs_f64() * 1e6)
    })
    .join()
    .map_err(|_| "the requesting thread panicked".to_string())?
}

/// Waits until the daemon owns RTKit's name on the private bus.
fn connect(stage: &mut Stage) -> Result<zbus::blocking::Connection, String> {
    let connection = zbus::blocking::connection::Builder::address(stage.bus.address.as_str())
        .and_then(|b| b.method_timeout(Duration::from_secs(5)).build())
        .map_err(|e| format!("connect to the private bus: {e}"))?;
    let dbus = zbus::blocking::fdo::DBusProxy::new(&connection).map_err(|e| e.to_string())?;
    let start = Instant::now();
    while !dbus
        .name_has_owner(BUS_NAME.try_into().map_err(|e| format!("{e}"))?)
        .unwrap_or(false)
    {
        if stage.daemon.try_wait().ok().flatten().is_some() || start.elapsed().as_secs() > 10 {
            let log = std::fs::read_to_string(stage.dir.join("daemon.log")).unwrap_or_default();
            return Err(format!("the daemon did not serve {BUS_NAME}: {log}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(connection)
}

/// One request from a new thread: its time to SCHED_DEADLINE, or why not.
/// The daemon sets the policy before it replies, so it is read once: a
/// thread that spun waiting as SCHED_RR would be killed by its own
/// RLIMIT_RTTIME.
fn one_request(connection: &zbus::blocking::Connection) -> Result<f64, String> {
    call_from_new_thread(connection, |connection, tid| {
        call(connection, BUS_NAME, "MakeThreadRealtime", &(tid, 10u32))?;
        match sched::get_policy(0) {
            Ok(Policy::Deadline(_)) => Ok(()),
            other => Err(format!("granted, but the thread is {other:?}")),
        }
    })
}

/// A ping of the daemon from a new thread: the bus's share of a request.
fn one_ping(connection: &zbus::blocking::Connection) -> Result<f64, String> {
    call_from_new_thread(connection, |connection, _| {
        call(connection, "org.freedesktop.DBus.Peer", "Ping", &())
    })
}

/// A method of the daemon's object, its reply dropped.
fn call<B>(
    connection: &zbus::blocking::Connection,
    interface: &str,
    method: &str,
    body: &B,
) -> Result<(), String>
where
    B: serde::Serialize + zbus::zvariant::DynamicType,
{
    connection
        .call_method(Some(BUS_NAME), OBJECT_PATH, Some(interface), method, body)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// `stress-ng --cpu N` on every core, for the loaded configuration.
fn start_load(cores: usize) -> Result<(String, Child), String> {
    let args = [
        "--cpu".to_string(),
        cores.to_string(),
        "--quiet".to_string(),
    ];
    let child = Command::new("stress-ng")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("start stress-ng: {e} (fix: apt-get install stress-ng)"))?;
    Ok((format!("stress-ng {}", args.join(" ")), child))
}

fn measure(
    name: &str,
    load: String,
    connection: &zbus::blocking::Connection,
    options: &Options,
    progress: &mut impl FnMut(&str),
) -> Configuration {
    let mut granted = Vec::with_capacity(options.requests);
    let mut pings = Vec::with_capacity(options.requests);
    let mut refused = 0;
    for i in 0..options.requests {
        if let Ok(us) = one_ping(connection) {
            pings.push(us);
        }
        std::thread::sleep(options.interval / 2);
        match one_request(connection) {
            Ok(us) => granted.push(us),
            Err(e) => {
                refused += 1;
                if refused == 1 {
                    progress(&format!("{name}: request {i} refused: {e}"));
                }
            }
        }
        if (i + 1) % (options.requests / 10).max(1) == 0 {
            progress(&format!(
                "{name}: {} of {} requests",
                i + 1,
                options.requests
            ));
        }
        std::thread::sleep(options.interval / 2);
    }
    Configuration {
        name: name.to_string(),
        load,
        granted_us: Summary::from_samples(&granted, None),
        bus_round_trip_us: Summary::from_samples(&pings, None),
        refused,
    }
}

/// Runs both configurations; needs root (the daemon reserves).
pub fn run(options: &Options, mut progress: impl FnMut(&str)) -> Result<Results, String> {
    if !tessera_sys::caps::is_root() {
        return Err(
            "the benchmark's daemon makes SCHED_DEADLINE reservations (fix: run it as root)".into(),
        );
    }
    // RTKit's rule: the requesting process has RLIMIT_RTTIME set.
    sched::set_rttime_limit_us(200_000).map_err(|e| e.to_string())?;
    let mut stage = start_stage(&options.tessera)?;
    let connection = connect(&mut stage)?;
    let idle = measure("idle", String::new(), &connection, options, &mut progress);
    let cores = tessera_sys::kernel::online_cpus().map_or(1, |c| c.len());
    let (load, mut hog) = start_load(cores)?;
    // stress-ng's workers start before the first request.
    std::thread::sleep(Duration::from_millis(500));
    let loaded = measure("under load", load, &connection, options, &mut progress);
    let _ = hog.kill();
    let _ = hog.wait();
    Ok(Results {
        requests: options.requests,
        interval_ms: options.interval.as_millis() as u64,
        p99_ratio_loaded_to_idle: loaded.granted_us.p99 / idle.granted_us.p99,
        configurations: vec![idle, loaded],
    })
}
