//! The audio-server subject's network application (`[subject.network_app]`,
//! issue 21): two hosts — network namespaces on a veth pair
//! ([`tessera_workloads::lan`]) — each with its own jackd2 on the dummy
//! driver under a private server name, started inside the host, and a
//! network-audio client (`tessera-jack-peer --net-listen …`) that sends its
//! output to the other host over UDP and plays what it receives; in the
//! guard configurations a `tessera guard jackd --server NAME --pid PID` per
//! host, started like the audio-server subject's own ([`crate::harness::guard::start_guard`]).
//!
//! It owns the LAN, both hosts' processes and scratch directories: started
//! servers first, then the clients (which wait for t0 on their stdin), then
//! the guards; stopped the other way round — the clients end on their own at
//! the end of the run, the guards get SIGTERM by their PIDs before the
//! servers do — and the namespaces vanish with the LAN once nothing runs in
//! them, on error too (every handle stops what it holds when dropped). It
//! must never signal a process it did not start nor judge the numbers
//! ([`figures`] reports them).

mod figures;

pub use figures::{
    metric_name, report_section, HostData, HostFigures, NetworkAppData, NetworkFigures, HOSTS,
    XRUNS,
};

use super::figures::Window;
use super::{budgets, guard_files, guard_record, server_spec, GraphChain};
use crate::harness::guard::{start_guard, GuardChild};
use crate::harness::servers::{self, AudioServer, JackServer, OwnedChild};
use crate::scratch::Scratch;
use crate::subject::contract::{Measured, Running, Stopped, Watched};
use std::fs;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tessera_jack_peer::record::PeerRecord;
use tessera_scenario::{AudioServerSubject, Configuration, NetworkApp, Scenario, ServerSched};
use tessera_sys::clock::monotonic_ns;
use tessera_workloads::lan::{End, HostId, Lan};

/// The UDP port each client listens on in its host (jacktrip's).
const PORT: u16 = 4464;
/// How long the clients may take to end after the run's end.
const PEER_EXIT_WAIT: Duration = Duration::from_secs(15);
/// What the client says once it is open (tessera-jack-peer's netapp).
const CLIENT_OPEN: &str = "netapp open";
/// How long a client may take to exit after SIGTERM.
const CHILD_GRACE: Duration = Duration::from_secs(5);

/// One host: its server, client and guard. Fields drop in order: client,
/// guard, server, scratch directory.
struct Host {
    name: &'static str,
    peer: Option<OwnedChild>,
    guard: Option<GuardChild>,
    server: Option<AudioServer>,
    scratch: Scratch,
    /// Its namespace's id (`net:[ID]`), for the notes.
    namespace: u64,
    /// jackd's PID, for the notes.
    server_pid: tessera_sys::proc::Pid,
}

/// A configuration's two hosts. The hosts drop before the LAN, so nothing
/// runs in a namespace when its last handle goes.
pub struct NetworkAppRun {
    hosts: Vec<Host>,
    lan: Lan,
    sched: ServerSched,
    total: Duration,
    /// The audio period both servers run.
    period: Duration,
    t0: Option<u64>,
}

impl NetworkAppRun {
    /// Makes the LAN and starts both hosts' servers, clients and (under
    /// `ServerSched::Guard`) guards; the clients start at
    /// [`NetworkAppRun::release`].
    pub fn start(
        scenario: &Scenario,
        config: &Configuration,
        subject: &AudioServerSubject,
        app: NetworkApp,
    ) -> Result<NetworkAppRun, String> {
        let peer = servers::program_beside_us("tessera-jack-peer");
        if !servers::is_program(&peer) {
            return Err("tessera-jack-peer is not built: cargo build -p tessera-jack-peer".into());
        }
        let sched = config.server.clone().expect("validated with the subject");
        let mut lan = Lan::new();
        let ids = [
            lan.add_host(HOSTS[0]).map_err(|e| e.to_string())?,
            lan.add_host(HOSTS[1]).map_err(|e| e.to_string())?,
        ];
        let link = lan
            .link(End::Host(ids[0]), End::Host(ids[1]), None)
            .map_err(|e| e.to_string())?;
        let addresses = ids.map(|id| lan.address(link, End::Host(id)));
        let namespaces = lan.host_namespaces();
        let mut run = NetworkAppRun {
            hosts: Vec::new(),
            lan,
            sched: sched.clone(),
            total: scenario.total(),
            period: subject.period(),
            t0: None,
        };
        for (k, id) in ids.into_iter().enumerate() {
            let scratch = Scratch::create("tessera-audio")?;
            let server = start_server_in(&run.lan, id, subject, &sched, &scratch)?;
            run.hosts.push(Host {
                name: HOSTS[k],
                peer: None,
                guard: None,
                server_pid: server.pid(),
                server: Some(server),
                scratch,
                namespace: namespaces[k].1,
            });
        }
        for (k, id) in ids.into_iter().enumerate() {
            let (own, other) = (addresses[k], addresses[1 - k]);
            let host = &mut run.hosts[k];
            let server = host.server.as_ref().expect("started");
            let addresses = (own, other);
            let client = start_client(
                &run.lan,
                id,
                server,
                addresses,
                app,
                run.total,
                &host.scratch,
            )?;
            host.peer = Some(client);
        }
        if let ServerSched::Guard(settings) = &sched {
            let mut args = settings.args();
            if let Some(core) = scenario.core {
                args.extend(["--core".to_string(), core.to_string()]);
            }
            for host in &mut run.hosts {
                let server = host.server.as_ref().expect("started");
                host.guard = Some(start_guard(
                    server,
                    &args,
                    &guard_files(&host.scratch),
                    run.total,
                    None,
                )?);
            }
        }
        Ok(run)
    }

    /// Starts both clients' timelines at `t0`.
    pub fn release(&mut self, t0: u64) -> Result<(), String> {
        for host in &mut self.hosts {
            let peer = host.peer.as_mut().expect("started");
            peer.tell(&t0.to_string()).map_err(|e| {
                let log = servers::log_tail(&host.scratch.file("peer.log"));
                format!("host {}: {e}: {log}", host.name)
            })?;
        }
        self.t0 = Some(t0);
        Ok(())
    }

    /// Waits for the clients to end, stops the guards and the servers, and
    /// reads what they recorded; the LAN goes last.
    pub fn finish(mut self) -> NetworkAppData {
        let mut notes = Vec::new();
        let mut hosts = Vec::new();
        for host in &mut self.hosts {
            notes.extend(wait_for_client(host, self.t0, self.total));
        }
        for host in &mut self.hosts {
            let budgets = host.guard.take().map(|guard| {
                let (ending, rows) = stop_guard(host, guard, self.t0);
                notes.extend(ending);
                rows
            });
            if let Some(server) = host.server.take() {
                server.stop();
            }
            hosts.push(HostData {
                name: host.name,
                record: read_record(host, self.t0),
                budgets,
            });
        }
        notes.push(self.hosts_note());
        NetworkAppData {
            sched: self.sched.clone(),
            hosts,
            notes,
        }
    }

    /// Which namespace and jackd each host had: what the run cleaned up.
    fn hosts_note(&self) -> String {
        let hosts: Vec<String> = self
            .hosts
            .iter()
            .map(|h| format!("{} net:[{}] jackd {}", h.name, h.namespace, h.server_pid))
            .collect();
        format!("{HOSTS_NOTE}{}", hosts.join(", "))
    }
}

/// The note naming each host's namespace and jackd.
pub const HOSTS_NOTE: &str = "network-app hosts: ";

/// jackd on the dummy driver at the subject's period, started from a
/// thread inside `host`'s namespace (the process it forks lives there).
fn start_server_in(
    lan: &Lan,
    host: HostId,
    subject: &AudioServerSubject,
    sched: &ServerSched,
    scratch: &Scratch,
) -> Result<AudioServer, String> {
    let spec = server_spec(subject, sched, None, scratch);
    lan.spawn_in(End::Host(host), "jackd-host", move || {
        JackServer::start(Path::new("jackd"), &spec)
    })
    .map_err(|e| e.to_string())?
    .join()
    .map_err(|_| "starting jackd: its thread panicked".to_string())?
    .map_err(|e| e.to_string())?
    .map(AudioServer::Jack)
}

/// `tessera-jack-peer --net-listen OWN:PORT --net-send-to OTHER:PORT`
/// inside `host`, a client of `server`, waiting for t0 on its stdin.
fn start_client(
    lan: &Lan,
    host: HostId,
    server: &AudioServer,
    (own, other): (Ipv4Addr, Ipv4Addr),
    app: NetworkApp,
    total: Duration,
    scratch: &Scratch,
) -> Result<OwnedChild, String> {
    let program = servers::program_beside_us("tessera-jack-peer");
    let mut command = lan
        .command(End::Host(host), &program.to_string_lossy())
        .map_err(|e| e.to_string())?;
    let (out, err) = servers::log_to(&scratch.file("peer.log"))?;
    command
        .envs(server.client_env())
        .args(["--net-listen", &format!("{own}:{PORT}")])
        .args(["--net-send-to", &format!("{other}:{PORT}")])
        .args(["--jitter", &app.jitter.to_string()])
        .args(["--t0-ns", "stdin"])
        .args(["--seconds", &total.as_secs_f64().to_string()])
        .arg("--out")
        .arg(scratch.file("peer.tsv"))
        .stdin(Stdio::piped())
        .stdout(out)
        .stderr(err);
    let child = command
        .spawn()
        .map_err(|e| format!("starting {}: {e}", program.display()))?;
    let mut client = OwnedChild::new(child, "tessera-jack-peer", CHILD_GRACE);
    // Open before anything else starts: a guard moving the server's threads
    // while the client registers can make its opening time out.
    let log = scratch.file("peer.log");
    servers::await_ready(&mut client, &log, "the network client", || {
        fs::read_to_string(&log).is_ok_and(|text| text.contains(CLIENT_OPEN))
    })?;
    Ok(client)
}

/// Waits until the host's client ended on its own, or stops it; a note if
/// it failed.
fn wait_for_client(host: &mut Host, t0: Option<u64>, total: Duration) -> Option<String> {
    let (peer, t0) = (host.peer.as_mut()?, t0?);
    let end = t0 + (total + PEER_EXIT_WAIT).as_nanos() as u64;
    let wait = Duration::from_nanos(end.saturating_sub(monotonic_ns()));
    let failed = |how: String| {
        let log = servers::log_tail(&host.scratch.file("peer.log"));
        format!("host {}: network client {how}: {log}", host.name)
    };
    match peer.wait_until(Instant::now() + wait) {
        Some(status) if status.success() => None,
        Some(status) => Some(failed(format!("failed ({status})"))),
        None => Some(failed(peer.stop())),
    }
}

/// Stops the host's guard and reads its record; a note if it did not end
/// cleanly.
fn stop_guard(
    host: &Host,
    mut guard: GuardChild,
    t0: Option<u64>,
) -> (Option<String>, Result<Vec<budgets::BudgetRow>, String>) {
    let ending = guard.process.stop();
    let note = (!ending.contains("exit status: 0")).then(|| {
        let log = servers::log_tail(&host.scratch.file("guard.log"));
        format!("host {}: {ending}: {log}", host.name)
    });
    let origin = budgets::Origin {
        guard_started_ns: guard.started_ns,
        t0_ns: t0.unwrap_or(guard.started_ns),
    };
    (note, budgets::read(&guard_record(&host.scratch), &origin))
}

fn read_record(host: &Host, t0: Option<u64>) -> Result<PeerRecord, String> {
    if t0.is_none() {
        return Err("the clients never started".into());
    }
    let log = host.scratch.file("peer.log");
    fs::read_to_string(host.scratch.file("peer.tsv"))
        .map_err(|e| {
            format!(
                "no record from host {}'s client ({e}): {}",
                host.name,
                servers::log_tail(&log)
            )
        })
        .and_then(|text| PeerRecord::parse(&text))
}

/// The metrics, counters and notes of a finished run; `t0` is the run's origin.
pub fn metrics(data: NetworkAppData, scenario: &Scenario, t0: u64) -> Measured {
    let window = Window::of_run(scenario, t0);
    let mut measured = figures::measure(&data, &window);
    measured.notes.extend(data.notes);
    measured
}

/// `[subject] kind = "audio-server"` with a network application.
pub(crate) struct Kind;

impl crate::subject::contract::Subject for Kind {
    fn runs(&self, scenario: &Scenario, _config: &Configuration) -> bool {
        matches!(&scenario.subject, tessera_scenario::Subject::AudioServer(a) if a.network.is_some())
    }

    fn start(
        &self,
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<Box<dyn Running>, String> {
        let tessera_scenario::Subject::AudioServer(subject) = &scenario.subject else {
            unreachable!("runs audio-server subjects only")
        };
        let app = subject.network.expect("runs network applications only");
        Ok(Box::new(NetworkAppRun::start(
            scenario, config, subject, app,
        )?))
    }

    fn report_section(
        &self,
        results: &tessera_measure::RunResults,
        _dir: &Path,
    ) -> Result<String, String> {
        Ok(report_section(results))
    }
}

impl Running for NetworkAppRun {
    fn release(&mut self, t0: u64) -> Result<(), String> {
        NetworkAppRun::release(self, t0)
    }

    /// Each host's graph — its jackd and its client's JACK thread — as a
    /// chain of its own (`tessera run --why`), its late periods counted in
    /// the host's jackd xruns.
    fn watched(&self) -> Vec<Watched> {
        self.hosts
            .iter()
            .enumerate()
            .flat_map(|(chain, host)| {
                let record = host.guard.as_ref().map(|_| guard_record(&host.scratch));
                GraphChain {
                    server: host.server.as_ref().map(AudioServer::pid),
                    clients: host.peer.as_ref().map(OwnedChild::pid),
                    period: self.period,
                    guard_record: record.as_deref(),
                    rtkit_grants: false,
                }
                .threads(chain as u32, &metric_name(XRUNS, host.name), None)
            })
            .collect()
    }

    fn stop(self: Box<Self>, _notes: &mut Vec<String>) -> Box<dyn Stopped> {
        Box::new(self.finish())
    }
}

impl Stopped for NetworkAppData {
    fn measure(self: Box<Self>, scenario: &Scenario, t0: u64) -> Measured {
        metrics(*self, scenario, t0)
    }
}
