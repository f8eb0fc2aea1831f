//! The audio server a guard protects and the processes that are its
//! clients: which process is JACK2's `jackd` for a server name, which is
//! PipeWire's daemon, and which processes are connected to either.
//!
//! JACK2 clients map the server's semaphore files
//! (`/dev/shm/jack_sem.<uid>_<server>_<client>`), so a scan of /proc finds
//! them without the server's help. PipeWire's clients are listed by the
//! server itself (`pw-dump`: each client object carries the kernel-checked
//! `pipewire.sec.pid`).
//!
//! It only reads the machine; it must never signal or change a process, and
//! it finds a server by the PID it is given when one is given, never by name
//! alone when the name is ambiguous.

use crate::{fail, GuardError};
use std::process::Command;
use tessera_sys::proc::{self, Pid};

/// Which kind of server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerKind {
    /// JACK2's jackd, by server name (`jackd -n NAME`; "default" otherwise).
    Jack { name: String },
    /// PipeWire's daemon (the one `pw-dump` reaches with this environment).
    PipeWire,
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
        Server::one(
            kind,
            found,
            &format!("a JACK2 server named {name:?}"),
            "jackd",
        )
    }

    /// PipeWire's daemon: the process at `pid` when given, else the one
    /// `pipewire` process of this user.
    pub fn pipewire(pid: Option<Pid>) -> Result<Server, GuardError> {
        if let Some(pid) = pid {
            return Server::at(ServerKind::PipeWire, pid);
        }
        let uid = tessera_sys::caps::euid();
        let found: Vec<Pid> = user_processes()
            .filter(|&p| proc::process_name(p) == "pipewire")
            .filter(|&p| proc::owner_uid(p).ok() == Some(uid))
            .collect();
        Server::one(ServerKind::PipeWire, found, "a PipeWire daemon", "pipewire")
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

    fn one(
        kind: ServerKind,
        found: Vec<Pid>,
        what: &str,
        hint: &str,
    ) -> Result<Server, GuardError> {
        match found.as_slice() {
            [pid] => Server::at(kind, *pid),
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
            ServerKind::PipeWire => format!("{name} (PipeWire, pid {})", self.pid),
            ServerKind::Process => format!("{name} (pid {})", self.pid),
        }
    }

    /// The processes connected to the server now (not the server itself,
    /// not the calling process).
    pub fn clients(&self) -> Vec<Pid> {
        let me = proc::current_pid();
        let mut pids = match &self.kind {
            ServerKind::Jack { name } => {
                let uid = proc::owner_uid(self.pid).unwrap_or(0);
                let marker = jack_marker(name, uid);
                user_processes()
                    .filter(|&p| p != self.pid && p != me)
                    .filter(|&p| proc::maps_contain(p, &marker))
                    .collect()
            }
            ServerKind::PipeWire => pipewire_client_pids().unwrap_or_default(),
            ServerKind::Process => Vec::new(),
        };
        pids.retain(|&p| p != self.pid && p != me);
        pids.sort_unstable();
        pids.dedup();
        pids
    }
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

/// The PIDs of PipeWire's clients, from `pw-dump` (the server's own list;
/// `pipewire.sec.pid` comes from the socket's peer credentials).
pub fn pipewire_client_pids() -> Result<Vec<Pid>, GuardError> {
    let out = Command::new("pw-dump")
        .arg("--no-colors")
        .output()
        .map_err(|e| {
            fail(
                format!("could not run pw-dump: {e}"),
                "install pipewire-bin (`apt-get install pipewire-bin`)",
            )
        })?;
    if !out.status.success() {
        return Err(fail(
            format!(
                "pw-dump failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            "is PipeWire running for this user (XDG_RUNTIME_DIR, PIPEWIRE_REMOTE)?",
        ));
    }
    parse_pipewire_clients(&String::from_utf8_lossy(&out.stdout))
}

/// The client PIDs in `pw-dump`'s JSON.
pub fn parse_pipewire_clients(json: &str) -> Result<Vec<Pid>, GuardError> {
    let objects: Vec<serde_json::Value> = serde_json::from_str(json)
        .map_err(|e| fail(format!("pw-dump printed no JSON array: {e}"), ""))?;
    let pid_of = |o: &serde_json::Value| -> Option<Pid> {
        let props = o.get("info")?.get("props")?;
        let v = props.get("pipewire.sec.pid")?;
        v.as_i64()
            .or_else(|| v.as_str()?.parse().ok())
            .and_then(|p| Pid::try_from(p).ok())
    };
    Ok(objects
        .iter()
        .filter(|o| o.get("type").and_then(|t| t.as_str()) == Some("PipeWire:Interface:Client"))
        .filter_map(pid_of)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipewire_clients_come_from_the_client_objects() {
        let dump = r#"[
          {"id": 0, "type": "PipeWire:Interface:Core", "info": {"props": {"pipewire.sec.pid": 10}}},
          {"id": 31, "type": "PipeWire:Interface:Client", "info": {"props": {"pipewire.sec.pid": 4242, "application.name": "jack_simple_client"}}},
          {"id": 32, "type": "PipeWire:Interface:Client", "info": {"props": {"pipewire.sec.pid": "4243"}}},
          {"id": 33, "type": "PipeWire:Interface:Client", "info": {"props": {}}}
        ]"#;
        assert_eq!(parse_pipewire_clients(dump).unwrap(), vec![4242, 4243]);
        assert!(parse_pipewire_clients("not json").is_err());
    }

    #[test]
    fn a_jack_semaphore_names_its_server() {
        assert_eq!(jack_marker("tguard", 0), "/dev/shm/jack_sem.0_tguard_");
    }
}
