//! The audio server a guard protects and the processes that are its
//! clients: which process is JACK2's `jackd` for a server name, which is
//! PipeWire's daemon, and which processes are connected to either.
//!
//! JACK2 clients map the server's semaphore files
//! (`/dev/shm/jack_sem.<uid>_<server>_<client>`), so a scan of /proc finds
//! them without the server's help. PipeWire's clients are listed by the
//! server itself (`pw-cli ls Client`: each client object carries the
//! kernel-checked `pipewire.sec.pid`). Not `pw-dump`, which binds every
//! object of the graph and reads every node's and port's parameters: with
//! 64 clients its runs were a quarter of the guard's CPU, uncounted.
//!
//! A PipeWire daemon is reached where it listens, whoever runs it: its
//! [`Endpoint`] (the runtime directory and socket name the daemon started
//! with, from /proc/PID/environ, else `/run/user/UID`) is given to `pw-cli`
//! and to the guard's own JACK client, so that root guards a user's session
//! PipeWire as well as its own. Root connects as itself rather than as the
//! server's owner: it passes the runtime directory's and the socket's
//! permissions (CAP_DAC_OVERRIDE), PipeWire 0.3.65's native protocol checks
//! no peer for an ordinary client (module-access restricts only
//! flatpak/portal clients), and the guard needs root anyway for
//! SCHED_DEADLINE; a process of its own as the user would add a second
//! program to keep alive for nothing. Checked on Debian 12: root's
//! `pw-cli`, `pw-dump` and pw-jack clients join a user's 0700 runtime
//! directory.
//!
//! It only reads the machine; it must never signal or change a process, and
//! it finds a server by the PID it is given when one is given, never by name
//! alone when the name is ambiguous.

use crate::{fail, GuardError};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Instant;
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

/// The processes connected to a server, listed without holding up the
/// guard's loop: JACK2's from /proc at once, PipeWire's from a `pw-cli`
/// run in the background into a file. (A listing read through a pipe as
/// the guard's loop waited for it woke the loop thousands of times, and
/// the loop, holding the reservations' controllers, waited with it.)
#[derive(Default)]
pub struct ClientScan {
    listing: Option<Listing>,
}

impl ClientScan {
    pub fn new() -> ClientScan {
        ClientScan::default()
    }

    /// The server's clients (not the server, not the calling process) when
    /// a listing is ready, with when the listing began: at once for JACK2;
    /// for PipeWire the `pw-cli` started by an earlier call once it has
    /// ended (None while it runs, and when this call started it). A
    /// listing that failed (no `pw-cli`, the server gone) is an empty one.
    pub fn poll(&mut self, server: &Server) -> Option<(Instant, Vec<Pid>)> {
        let (began, found) = match &server.kind {
            ServerKind::Jack { name } => (Instant::now(), jack_client_pids(server.pid, name)),
            ServerKind::PipeWire(endpoint) => self.pipewire(endpoint)?,
            ServerKind::Process => (Instant::now(), Vec::new()),
        };
        Some((began, server.others(found)))
    }

    fn pipewire(&mut self, endpoint: &Endpoint) -> Option<(Instant, Vec<Pid>)> {
        let Some(listing) = &mut self.listing else {
            match Listing::start(endpoint) {
                Ok(listing) => self.listing = Some(listing),
                Err(_) => return Some((Instant::now(), Vec::new())),
            }
            return None;
        };
        if matches!(listing.child.try_wait(), Ok(None)) {
            return None;
        }
        let found = listing.clients(endpoint).unwrap_or_default();
        let began = listing.began;
        self.listing = None;
        Some((began, found))
    }
}

/// A `pw-cli ls Client` writing into an anonymous file.
struct Listing {
    child: Child,
    out: std::fs::File,
    began: Instant,
}

impl Listing {
    fn start(endpoint: &Endpoint) -> Result<Listing, GuardError> {
        let could_not = |e: std::io::Error| {
            fail(
                format!("could not run pw-cli: {e}"),
                "install pipewire-bin (`apt-get install pipewire-bin`)",
            )
        };
        let out = tempfile::tempfile().map_err(could_not)?;
        let child = Command::new("pw-cli")
            .args(["ls", "Client"])
            .envs(endpoint.client_env())
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(could_not)?)
            .stderr(Stdio::null())
            .spawn()
            .map_err(could_not)?;
        Ok(Listing {
            child,
            out,
            began: Instant::now(),
        })
    }

    /// The client PIDs it printed, its own left out, once it has ended.
    fn clients(&mut self, endpoint: &Endpoint) -> Result<Vec<Pid>, GuardError> {
        let status = self
            .child
            .wait()
            .map_err(|e| fail(format!("pw-cli: {e}"), ""))?;
        if !status.success() {
            return Err(fail(
                format!("pw-cli failed ({status})"),
                format!(
                    "is PipeWire still listening at {}?",
                    endpoint.socket_path().display()
                ),
            ));
        }
        let mut text = String::new();
        self.out
            .seek(SeekFrom::Start(0))
            .and_then(|_| self.out.read_to_string(&mut text))
            .map_err(|e| fail(format!("reading pw-cli's output: {e}"), ""))?;
        // pw-cli is a client too while it lists them.
        let itself = self.child.id() as Pid;
        Ok(parse_pipewire_clients(&text)
            .into_iter()
            .filter(|&pid| pid != itself)
            .collect())
    }
}

impl Drop for Listing {
    /// A guard that stops while `pw-cli` runs leaves no process behind.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
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

    /// The environment a PipeWire client (pw-cli, PipeWire's libjack)
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

/// The client PIDs in `pw-cli ls Client`'s listing: each object starts
/// with a line `id N, type PipeWire:Interface:Client/V`, its properties
/// follow one a line (`pipewire.sec.pid = "4242"`, a changed one marked
/// with a leading `*`).
pub fn parse_pipewire_clients(listing: &str) -> Vec<Pid> {
    let mut in_client = false;
    let mut pids = Vec::new();
    for line in listing.lines() {
        let line = line.trim_start_matches([' ', '\t', '*']);
        if let Some(object) = line.strip_prefix("id ") {
            in_client = object.contains("type PipeWire:Interface:Client/");
            continue;
        }
        let Some((key, value)) = line.split_once(" = ") else {
            continue;
        };
        if in_client && key == "pipewire.sec.pid" {
            pids.extend(value.trim_matches('"').parse::<Pid>().ok());
        }
    }
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipewire_clients_come_from_the_client_objects() {
        // As PipeWire 0.3.65's `pw-cli ls Client` prints them.
        let listing = "\tid 30, type PipeWire:Interface:Client/3\n \t\tobject.serial = \"39\"\n \t\tpipewire.sec.pid = \"4242\"\n \t\tapplication.name = \"jack_simple_client\"\n\tid 31, type PipeWire:Interface:Client/3\n*\t\tpipewire.sec.pid = \"4243\"\n\tid 32, type PipeWire:Interface:Client/3\n \t\tapplication.name = \"no pid\"\n\tid 0, type PipeWire:Interface:Core/4\n \t\tpipewire.sec.pid = \"10\"\n";
        assert_eq!(parse_pipewire_clients(listing), vec![4242, 4243]);
        assert!(parse_pipewire_clients("not a listing").is_empty());
    }

    #[test]
    fn a_pipewire_listing_runs_in_the_background_and_a_failed_one_is_empty() {
        if Command::new("pw-cli").arg("--version").output().is_err() {
            eprintln!("skipped: no pw-cli (apt-get install pipewire-bin)");
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
        let mut scan = ClientScan::new();
        let asked = Instant::now();
        assert!(
            scan.poll(&server).is_none(),
            "the first call only starts pw-cli"
        );
        let (began, clients) = loop {
            if let Some(listing) = scan.poll(&server) {
                break listing;
            }
            assert!(
                asked.elapsed() < std::time::Duration::from_secs(10),
                "pw-cli never ended"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert!(began >= asked);
        assert!(clients.is_empty(), "no server, no clients: {clients:?}");
    }

    #[test]
    fn a_jack_semaphore_names_its_server() {
        assert_eq!(jack_marker("tguard", 0), "/dev/shm/jack_sem.0_tguard_");
    }
}
