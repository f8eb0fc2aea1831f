//! The audio server a guard protects and the processes that are its
//! clients: which process is JACK2's `jackd` for a server name, which is
//! PipeWire's daemon, and which processes are connected to either.
//!
//! JACK2 clients map the server's semaphore files
//! (`/dev/shm/jack_sem.<uid>_<server>_<client>`), so a scan of /proc finds
//! them without the server's help. PipeWire's clients are listed by the
//! server itself (`pw-mon`'s report of its client objects: each carries the
//! kernel-checked `pipewire.sec.pid`). Not `pw-dump`, which binds every
//! object of the graph and reads every node's and port's parameters: with
//! 64 clients its runs were a quarter of the guard's CPU, uncounted.
//!
//! A PipeWire daemon is reached where it listens, whoever runs it: its
//! [`Endpoint`] (the runtime directory and socket name the daemon started
//! with, from /proc/PID/environ, else `/run/user/UID`) is given to `pw-mon`
//! and to the guard's own JACK client, so that root guards a user's session
//! PipeWire as well as its own. Root connects as itself rather than as the
//! server's owner: it passes the runtime directory's and the socket's
//! permissions (CAP_DAC_OVERRIDE), PipeWire 0.3.65's native protocol checks
//! no peer for an ordinary client (module-access restricts only
//! flatpak/portal clients), and the guard needs root anyway for
//! SCHED_DEADLINE; a process of its own as the user would add a second
//! program to keep alive for nothing. Checked on Debian 12: root's
//! `pw-cli`, `pw-mon`, `pw-dump` and pw-jack clients join a user's 0700
//! runtime directory.
//!
//! It only reads the machine; it must never signal or change a process but
//! the `pw-mon` it started (ended with the scan), and
//! it finds a server by the PID it is given when one is given, never by name
//! alone when the name is ambiguous.

use crate::{fail, GuardError};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tessera_sys::event::EventFd;
use tessera_sys::proc::{self, Pid};

/// Which kind of server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerKind {
    /// JACK2's jackd, by server name (`jackd -n NAME`; "default" otherwise).
    Jack { name: String },
    /// PipeWire's daemon, reached at its endpoint.
    PipeWire(Endpoint),
    /// Any program: its own real-time threads, no clients.
    Process,
}

/// A running server, identified across PID reuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub kind: ServerKind,
    pub pid: Pid,
    start_time: u64,
}

impl Server {
    /// JACK2's server `name`: the process at `pid` when given, else the one
    /// process that maps the server's semaphores and is a JACK server.
    pub fn jack(name: &str, pid: Option<Pid>) -> Result<Server, GuardError> {
        let kind = ServerKind::Jack { name: name.into() };
        if let Some(pid) = pid {
            return Server::at(kind, pid);
        }
        let marker = jack_marker(name, tessera_sys::caps::euid());
        let found: Vec<Pid> = user_processes()
            .filter(|&p| is_jack_server_name(&proc::process_name(p)))
            .filter(|&p| proc::maps_contain(p, &marker))
            .collect();
        let pid = only_one(found, &format!("a JACK2 server named {name:?}"), "jackd")?;
        Server::at(kind, pid)
    }

    /// PipeWire's daemon: the process at `pid` when given (any user's),
    /// else the one `pipewire` process of this user.
    pub fn pipewire(pid: Option<Pid>) -> Result<Server, GuardError> {
        let pid = match pid {
            Some(pid) => pid,
            None => {
                let found = pipewire_daemons(|uid| uid == tessera_sys::caps::euid());
                only_one(found, "a PipeWire daemon of this user", "pipewire")?
            }
        };
        Server::at(ServerKind::PipeWire(Endpoint::of(pid)?), pid)
    }

    /// Any process, by PID.
    pub fn process(pid: Pid) -> Result<Server, GuardError> {
        Server::at(ServerKind::Process, pid)
    }

    fn at(kind: ServerKind, pid: Pid) -> Result<Server, GuardError> {
        let start_time = proc::start_time(pid).map_err(|_| {
            fail(
                format!("no process {pid}"),
                "check the PID (`ps -e`); the server may have exited",
            )
        })?;
        Ok(Server {
            kind,
            pid,
            start_time,
        })
    }

    pub fn is_alive(&self) -> bool {
        proc::is_same_process(self.pid, self.start_time)
    }

    /// "jackd (server "default", pid 4820)".
    pub fn describe(&self) -> String {
        let name = proc::process_name(self.pid);
        match &self.kind {
            ServerKind::Jack { name: server } => {
                format!("{name} (JACK2 server {server:?}, pid {})", self.pid)
            }
            ServerKind::PipeWire(e) => format!(
                "{name} (PipeWire of uid {} at {}, pid {})",
                e.uid,
                e.socket_path().display(),
                self.pid
            ),
            ServerKind::Process => format!("{name} (pid {})", self.pid),
        }
    }

    /// `found` less the server itself and the calling process, in order.
    fn others(&self, mut found: Vec<Pid>) -> Vec<Pid> {
        let me = proc::current_pid();
        found.retain(|&p| p != self.pid && p != me);
        found.sort_unstable();
        found.dedup();
        found
    }
}

/// The processes connected to a server, found without holding up the
/// guard's loop: JACK2's from /proc at once; PipeWire's from the server's
/// own client objects, which a `pw-mon` started once reports as they come
/// and go, read by a thread of the scan's own. (Before, a `pw-cli ls
/// Client` ran at each client's registration and every 10 s: a new client
/// process was reserved 200–330 ms after its threads turned real-time when
/// it came first, and at the 10 s rescan when it came later. A listing
/// read through a pipe by the guard's loop itself woke the loop thousands
/// of times, and the loop, holding the reservations' controllers, waited
/// with it: hence the thread.)
pub struct ClientScan {
    objects: Option<ClientObjects>,
    /// Rung when the client objects change.
    doorbell: EventFd,
}

impl ClientScan {
    /// A scan that rings `doorbell` when PipeWire's clients change.
    pub fn ringing(doorbell: EventFd) -> ClientScan {
        ClientScan {
            objects: None,
            doorbell,
        }
    }

    /// The server's clients (not the server, not the calling process) when
    /// there is news of them, with when it was read: at once for JACK2;
    /// for PipeWire when its client objects changed since the last call
    /// (None otherwise, and while the report begins). A scan that failed
    /// (no `pw-mon`, the server gone) finds none.
    pub fn poll(&mut self, server: &Server) -> Option<(Instant, Vec<Pid>)> {
        let found = match &server.kind {
            ServerKind::Jack { name } => jack_client_pids(server.pid, name),
            ServerKind::PipeWire(endpoint) => self.pipewire(endpoint)?,
            ServerKind::Process => Vec::new(),
        };
        Some((Instant::now(), server.others(found)))
    }

    fn pipewire(&mut self, endpoint: &Endpoint) -> Option<Vec<Pid>> {
        let Some(objects) = &self.objects else {
            match ClientObjects::start(endpoint, self.doorbell.try_clone().ok()) {
                Ok(objects) => self.objects = Some(objects),
                Err(_) => return Some(Vec::new()),
            }
            return None;
        };
        objects.take_news()
    }
}

/// PipeWire's client objects as a `pw-mon` of the scan's own reports them.
struct ClientObjects {
    child: Child,
    reader: Option<std::thread::JoinHandle<()>>,
    seen: Arc<Mutex<Seen>>,
}

/// The client objects seen so far: object id → PID.
#[derive(Default)]
struct Seen {
    pids: BTreeMap<u32, Pid>,
    changed: bool,
}

impl ClientObjects {
    fn start(endpoint: &Endpoint, doorbell: Option<EventFd>) -> Result<ClientObjects, GuardError> {
        let mut child = Command::new("pw-mon")
            .arg("-N")
            .envs(endpoint.client_env())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                fail(
                    format!("could not run pw-mon: {e}"),
                    "install pipewire-bin (`apt-get install pipewire-bin`)",
                )
            })?;
        let out = child.stdout.take().expect("piped above");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let itself = child.id() as Pid;
        let filled = seen.clone();
        let reader = std::thread::Builder::new()
            .name("tessera-pw-mon".into())
            .spawn(move || read_client_objects(out, itself, &filled, doorbell))
            .map_err(|e| fail(format!("could not start pw-mon's reader: {e}"), ""))?;
        Ok(ClientObjects {
            child,
            reader: Some(reader),
            seen,
        })
    }

    /// The clients' PIDs if their objects changed since the last call.
    fn take_news(&self) -> Option<Vec<Pid>> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if !std::mem::take(&mut seen.changed) {
            return None;
        }
        Some(seen.pids.values().copied().collect())
    }
}

/// Follows `pw-mon`'s report in `out` until it ends, keeping `seen` (its
/// own client object, `itself`, left out) and ringing `doorbell` at each
/// change.
fn read_client_objects(
    out: std::process::ChildStdout,
    itself: Pid,
    seen: &Mutex<Seen>,
    doorbell: Option<EventFd>,
) {
    let mut report = MonitorReport::default();
    for line in BufReader::new(out).lines() {
        let Ok(line) = line else {
            break;
        };
        let Some(change) = report.feed(&line) else {
            continue;
        };
        {
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            match change {
                ClientChange::Seen { pid, .. } if pid == itself => continue,
                ClientChange::Seen { id, pid } => seen.pids.insert(id, pid),
                ClientChange::Gone { id } => seen.pids.remove(&id),
            };
            seen.changed = true;
        }
        if let Some(doorbell) = &doorbell {
            doorbell.signal();
        }
    }
}

impl Drop for ClientObjects {
    /// A guard that stops leaves no `pw-mon` behind.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// What one line of `pw-mon`'s report changed of the client objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientChange {
    /// Client object `id` is process `pid`'s.
    Seen {
        id: u32,
        pid: Pid,
    },
    Gone {
        id: u32,
    },
}

/// Reads `pw-mon`'s report a line at a time (PipeWire 0.3.65): blocks that
/// begin `added:`, `changed:` or `removed:`, then `\tid: N`, for a present
/// object `\ttype: PipeWire:Interface:Client (version 3)` and its
/// properties one a line (`\t\tpipewire.sec.pid = "4242"`, a changed one
/// marked with a leading `*`). A change is known at the line that completes
/// it: no block has an end of its own.
#[derive(Debug, Default)]
pub struct MonitorReport {
    block: Block,
    id: Option<u32>,
    client: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Block {
    #[default]
    Other,
    Present,
    Removed,
}

impl MonitorReport {
    pub fn feed(&mut self, line: &str) -> Option<ClientChange> {
        let block = match line {
            "added:" | "changed:" => Some(Block::Present),
            "removed:" => Some(Block::Removed),
            _ => None,
        };
        if let Some(block) = block {
            *self = MonitorReport {
                block,
                ..MonitorReport::default()
            };
            return None;
        }
        let line = line.trim_start_matches([' ', '\t', '*']);
        if let Some(id) = line.strip_prefix("id: ") {
            self.id = id.trim().parse().ok();
            return match (self.block, self.id) {
                (Block::Removed, Some(id)) => Some(ClientChange::Gone { id }),
                _ => None,
            };
        }
        if let Some(kind) = line.strip_prefix("type: ") {
            self.client = kind.starts_with("PipeWire:Interface:Client ");
            return None;
        }
        let (Block::Present, true, Some(id)) = (self.block, self.client, self.id) else {
            return None;
        };
        let value = line.strip_prefix("pipewire.sec.pid = ")?;
        let pid = value.trim().trim_matches('"').parse().ok()?;
        Some(ClientChange::Seen { id, pid })
    }
}

/// The processes that map JACK2 server `name`'s semaphores (the server at
/// `server` runs as their owner).
fn jack_client_pids(server: Pid, name: &str) -> Vec<Pid> {
    let uid = proc::owner_uid(server).unwrap_or(0);
    let marker = jack_marker(name, uid);
    user_processes()
        .filter(|&p| p != server)
        .filter(|&p| proc::maps_contain(p, &marker))
        .collect()
}

/// The one process `found` as `what`.
fn only_one(found: Vec<Pid>, what: &str, hint: &str) -> Result<Pid, GuardError> {
    match found.as_slice() {
        [pid] => Ok(*pid),
        [] => Err(fail(
            format!("found no running {what}"),
            format!("start it first, or name its process with --pid (`pgrep -a {hint}`)"),
        )),
        many => Err(fail(
            format!("{} processes look like {what}: {many:?}", many.len()),
            "name the one to guard with --pid",
        )),
    }
}

/// Where a PipeWire daemon listens: the runtime directory and socket name
/// its owner's session gave it. PipeWire's clients find the socket from the
/// same variables the daemon read ([`Endpoint::client_env`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The daemon's owner.
    pub uid: u32,
    pub runtime_dir: PathBuf,
    /// The socket's name in `runtime_dir` ("pipewire-0").
    pub socket: String,
}

impl Endpoint {
    /// The endpoint of the PipeWire daemon `pid`, as it computes it:
    /// PIPEWIRE_RUNTIME_DIR, else XDG_RUNTIME_DIR, else the owner's
    /// `/run/user/UID`; PIPEWIRE_CORE, else "pipewire-0".
    pub fn of(pid: Pid) -> Result<Endpoint, GuardError> {
        let uid = proc::owner_uid(pid).map_err(|_| {
            fail(
                format!("no process {pid}"),
                "check the PID (`pgrep -a pipewire`); the server may have exited",
            )
        })?;
        let var = |name| proc::environment_variable(pid, name).filter(|v| !v.is_empty());
        let runtime_dir = var("PIPEWIRE_RUNTIME_DIR")
            .or_else(|| var("XDG_RUNTIME_DIR"))
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(format!("/run/user/{uid}")));
        let endpoint = Endpoint {
            uid,
            runtime_dir,
            socket: var("PIPEWIRE_CORE").unwrap_or_else(|| "pipewire-0".into()),
        };
        if !endpoint.socket_path().exists() {
            return Err(fail(
                format!(
                    "PipeWire (pid {pid}, uid {uid}) has no socket at {}",
                    endpoint.socket_path().display()
                ),
                "wait until it has started; a daemon started with another runtime directory \
                 must have it in its environment (XDG_RUNTIME_DIR or PIPEWIRE_RUNTIME_DIR)",
            ));
        }
        Ok(endpoint)
    }

    pub fn socket_path(&self) -> PathBuf {
        self.runtime_dir.join(&self.socket)
    }

    /// The environment a PipeWire client (pw-mon, PipeWire's libjack)
    /// needs to connect to this daemon, whatever its own would say.
    pub fn client_env(&self) -> [(&'static str, &std::ffi::OsStr); 3] {
        let dir = self.runtime_dir.as_os_str();
        [
            ("XDG_RUNTIME_DIR", dir),
            ("PIPEWIRE_RUNTIME_DIR", dir),
            ("PIPEWIRE_REMOTE", std::ffi::OsStr::new(&self.socket)),
        ]
    }
}

/// The running PipeWire daemons (processes named `pipewire`, which
/// `pipewire-pulse` and WirePlumber are not) whose owner `uid_matches`.
pub fn pipewire_daemons(uid_matches: impl Fn(u32) -> bool) -> Vec<Pid> {
    user_processes()
        .filter(|&p| proc::process_name(p) == "pipewire")
        .filter(|&p| proc::owner_uid(p).is_ok_and(&uid_matches))
        .collect()
}

/// The part of a JACK2 semaphore path that names the server (JACK2's
/// Linux futex semaphores live in /dev/shm under this prefix).
fn jack_marker(server: &str, uid: u32) -> String {
    format!("/dev/shm/jack_sem.{uid}_{server}_")
}

fn is_jack_server_name(comm: &str) -> bool {
    matches!(comm, "jackd" | "jackdbus")
}

/// User processes (kernel threads have no maps worth reading).
fn user_processes() -> impl Iterator<Item = Pid> {
    proc::all_pids()
        .unwrap_or_default()
        .into_iter()
        .filter(|&p| !proc::is_kernel_thread(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `report` to a fresh reader, line by line.
    fn changes(report: &str) -> Vec<ClientChange> {
        let mut reader = MonitorReport::default();
        report.lines().filter_map(|l| reader.feed(l)).collect()
    }

    #[test]
    fn pipewire_clients_come_and_go_with_their_client_objects() {
        // As PipeWire 0.3.65's `pw-mon -N` prints them.
        let report = "added:\n\tid: 30\n\tpermissions: rwxm\n\ttype: PipeWire:Interface:Client (version 3)\n \tproperties:\n \t\tpipewire.protocol = \"protocol-native\"\n \t\tpipewire.sec.pid = \"4242\"\n \t\tapplication.name = \"jack_simple_client\"\nadded:\n\tid: 40\n\ttype: PipeWire:Interface:Node (version 3)\n \tproperties:\n \t\tpipewire.sec.pid = \"10\"\nchanged:\n\tid: 31\n\ttype: PipeWire:Interface:Client (version 3)\n*\tproperties:\n*\t\tpipewire.sec.pid = \"4243\"\nremoved:\n\tid: 30\nadded:\n\tid: 32\n\ttype: PipeWire:Interface:Client (version 3)\n \t\tapplication.name = \"no pid\"\n";
        assert_eq!(
            changes(report),
            vec![
                ClientChange::Seen { id: 30, pid: 4242 },
                ClientChange::Seen { id: 31, pid: 4243 },
                ClientChange::Gone { id: 30 },
            ]
        );
        assert!(changes("not a report\n\tid: 3\n").is_empty());
    }

    #[test]
    fn a_pipewire_scan_without_a_server_finds_no_client() {
        if Command::new("pw-mon").arg("--version").output().is_err() {
            eprintln!("skipped: no pw-mon (apt-get install pipewire-bin)");
            return;
        }
        let nowhere =
            std::env::temp_dir().join(format!("tessera-no-pipewire-{}", std::process::id()));
        let server = Server {
            kind: ServerKind::PipeWire(Endpoint {
                uid: tessera_sys::caps::euid(),
                runtime_dir: nowhere,
                socket: "pipewire-0".into(),
            }),
            pid: proc::current_pid(),
            start_time: 0,
        };
        let doorbell = EventFd::new().unwrap();
        let mut scan = ClientScan::ringing(doorbell.try_clone().unwrap());
        assert!(scan.poll(&server).is_none(), "the first call starts pw-mon");
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(scan.poll(&server).is_none(), "no server, no news");
        assert_eq!(doorbell.drain(), 0, "nothing rang");
        drop(scan);
    }

    #[test]
    fn a_jack_semaphore_names_its_server() {
        assert_eq!(jack_marker("tguard", 0), "/dev/shm/jack_sem.0_tguard_");
    }
}
