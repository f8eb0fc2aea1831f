//! A client's way to the broker: the daemon's socket when one answers,
//! otherwise the broker embedded in this process, working on the same state
//! file under an exclusive lock so that clients never race.
//!
//! Both speak the same [`Request`]s and give the same answers; the embedded
//! broker takes the caller's identity from the kernel too (SO_PEERCRED of a
//! socket pair this process makes). Opening a service ends here: the broker
//! says where it listens, the session connects. It must never hold the lock
//! between operations (other clients would block). Between two operations
//! an embedded session keeps its broker ([`Resident`]) as long as no one
//! else saved the state meanwhile: opening a broker re-admits every cell.

use crate::broker::{Broker, ResetReport};
use crate::config::Config;
use crate::daemon::handle;
use crate::error::{BrokerError, ErrorCode};
use crate::monitor::Sample;
use crate::paths::Paths;
use crate::protocol::{
    BudgetChange, CellInfo, HelloReply, MemberBudget, Request, RequestLine, ResizeCellsReply,
    ResizeMembersReply, ResizeReply, StatusReport, PROTOCOL_VERSION,
};
use crate::registry::{ServiceEntry, ServiceInfo, ServicePolicy};
use crate::state::Reported;
use crate::workgroup::{WorkgroupInfo, WorkgroupShape};
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tessera_policy::{Budget, CellRequest};
use tessera_sys::ipc::PeerCredentials;

/// Where requests go.
pub enum Session {
    Daemon {
        socket: PathBuf,
        reader: BufReader<UnixStream>,
        writer: UnixStream,
        next_id: u64,
    },
    Embedded {
        paths: Paths,
        resident: Option<Box<Resident>>,
    },
}

/// An embedded broker kept from one operation to the next. Opening one
/// re-admits every cell of the saved state (each member's scheduling and
/// cpus checked and applied again): with a guard's 70 cells and no daemon,
/// its ten batches a second cost half a CPU in that alone. While the state
/// file is the one it saved last it is used as it is; when another
/// process's broker replaced the file, the kept broker takes that state
/// as saved ([`Broker::reload`]: two guards without a daemon, each
/// re-opening after the other's every batch, used a tenth of a CPU each
/// for five threads). Its caller's credentials are read once.
pub struct Resident {
    broker: Broker,
    saved: Option<Stamp>,
    credentials: PeerCredentials,
}

/// Which version of the state file is on disk: it is replaced whole at
/// every save (a new inode, a new change time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    changed_ns: i128,
    modified_ns: i128,
    len: u64,
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Some(Stamp {
            inode: m.ino(),
            changed_ns: ns(m.ctime(), m.ctime_nsec()),
            modified_ns: ns(m.mtime(), m.mtime_nsec()),
            len: m.len(),
        })
    }
}

impl Resident {
    /// The broker this session kept, with the state on disk if another
    /// broker saved since; the first time, a broker opened from it.
    fn take_or_open(
        kept: Option<Box<Resident>>,
        paths: &Paths,
    ) -> Result<Box<Resident>, BrokerError> {
        let on_disk = Stamp::of(&paths.state());
        if let Some(mut kept) = kept {
            if kept.saved.is_none() || kept.saved != on_disk {
                kept.broker.reload()?;
            }
            return Ok(kept);
        }
        let label = format!("embedded (pid {})", tessera_sys::proc::current_pid());
        let (broker, _notes) = Broker::open(paths.clone(), Config::default(), label)?;
        Ok(Box::new(Resident {
            broker,
            saved: None,
            credentials: own_credentials()?,
        }))
    }
}

/// Takes the broker's lock, waiting up to `patience`.
pub fn hold_lock(paths: &Paths, patience: Duration) -> Result<File, BrokerError> {
    let path = paths.lock();
    paths.ensure().map_err(|e| {
        BrokerError::new(
            ErrorCode::State,
            format!("create {}: {e}", paths.dir.display()),
            "check permissions, or set TESSERA_RUN_DIR",
        )
    })?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| {
            BrokerError::new(
                ErrorCode::State,
                format!("open {}: {e}", path.display()),
                "check the run directory's permissions, or set TESSERA_RUN_DIR",
            )
        })?;
    let start = Instant::now();
    loop {
        if tessera_sys::ipc::try_lock_exclusive(&file)? {
            return Ok(file);
        }
        if start.elapsed() > patience {
            return Err(BrokerError::new(
                ErrorCode::Busy,
                format!(
                    "another tessera broker holds {} (a daemon, or another tessera command)",
                    path.display()
                ),
                "use the daemon's socket, or stop the other broker",
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// This process's pid, effective uid and effective gid as the kernel
/// records them for a socket's peer: the same facts the daemon reads from
/// its clients (a socket pair's peer is the process that made it).
fn own_credentials() -> Result<PeerCredentials, BrokerError> {
    let (ours, _theirs) = UnixStream::pair().map_err(|e| {
        BrokerError::new(
            ErrorCode::Internal,
            format!("create a socket pair to read this process's credentials: {e}"),
            "raise the open-file limit (ulimit -n)",
        )
    })?;
    Ok(tessera_sys::ipc::peer_credentials(&ours)?)
}

/// The daemon at `socket` refused the connection (file permissions).
fn not_accepted(socket: &Path) -> BrokerError {
    BrokerError::new(
        ErrorCode::Permission,
        format!(
            "the tessera daemon at {} does not accept you",
            socket.display()
        ),
        "ask its admin to set socket_group in /etc/tessera/daemon.toml and add you to that group",
    )
}

impl Session {
    /// The daemon if one answers (at TESSERA_RUN_DIR, or the system's at
    /// /run/tessera), else the embedded broker.
    pub fn connect() -> Result<Session, BrokerError> {
        let paths = Paths::from_env();
        let mut candidates = vec![paths.socket()];
        if std::env::var_os("TESSERA_RUN_DIR").is_none() {
            candidates.push(Paths::at("/run/tessera").socket());
        }
        for socket in candidates {
            match UnixStream::connect(&socket) {
                Ok(stream) => return Self::over(socket, stream),
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    return Err(not_accepted(&socket))
                }
                Err(_) => {}
            }
        }
        Ok(Session::embedded(paths))
    }

    /// The daemon at `paths` and nothing else: an error when none answers.
    pub fn daemon_at(paths: &Paths) -> Result<Session, BrokerError> {
        let socket = paths.socket();
        match UnixStream::connect(&socket) {
            Ok(stream) => Self::over(socket, stream),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                Err(not_accepted(&socket))
            }
            Err(e) => Err(BrokerError::new(
                ErrorCode::Busy,
                format!("no tessera daemon answers on {}: {e}", socket.display()),
                format!(
                    "start one: `tessera daemon --run-dir {}`",
                    paths.dir.display()
                ),
            )),
        }
    }

    /// The embedded broker at `paths`, even if a daemon runs (tests, recovery).
    pub fn embedded(paths: Paths) -> Session {
        Session::Embedded {
            paths,
            resident: None,
        }
    }

    fn over(socket: PathBuf, stream: UnixStream) -> Result<Session, BrokerError> {
        let writer = stream
            .try_clone()
            .map_err(|e| BrokerError::new(ErrorCode::State, format!("socket: {e}"), ""))?;
        Ok(Session::Daemon {
            socket,
            reader: BufReader::new(stream),
            writer,
            next_id: 1,
        })
    }

    /// Another session to the same broker (for another thread).
    pub fn sibling(&self) -> Result<Session, BrokerError> {
        match self {
            Session::Daemon { socket, .. } => {
                let stream = UnixStream::connect(socket).map_err(|e| {
                    BrokerError::new(
                        ErrorCode::Busy,
                        format!("connect to {}: {e}", socket.display()),
                        "is the daemon still running?",
                    )
                })?;
                Self::over(socket.clone(), stream)
            }
            Session::Embedded { paths, .. } => Ok(Session::embedded(paths.clone())),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Session::Daemon { socket, .. } => format!("daemon at {}", socket.display()),
            Session::Embedded { paths, .. } => {
                format!("embedded broker (state in {})", paths.dir.display())
            }
        }
    }

    /// Sends a request and returns its result.
    pub fn call(&mut self, request: Request) -> Result<serde_json::Value, BrokerError> {
        self.typed(request)
    }

    /// Sends a request and reads its result as a `T`. A daemon's reply is
    /// read straight into `T` (its result kept as raw JSON until then):
    /// read into a `serde_json::Value` first, a status of a hundred cells
    /// was most of what a guard spent asking the broker.
    fn typed<T: DeserializeOwned>(&mut self, request: Request) -> Result<T, BrokerError> {
        let unexpected = |e: serde_json::Error| {
            BrokerError::new(ErrorCode::Malformed, format!("unexpected reply: {e}"), "")
        };
        match self {
            Session::Daemon {
                reader,
                writer,
                next_id,
                socket,
            } => {
                let id = *next_id;
                *next_id += 1;
                let line = RequestLine {
                    v: PROTOCOL_VERSION,
                    id,
                    request,
                };
                let lost = |e: std::io::Error| {
                    BrokerError::new(
                        ErrorCode::Busy,
                        format!("the daemon at {} went away: {e}", socket.display()),
                        "restart it with `tessera daemon`; cells are recovered",
                    )
                };
                let mut text = serde_json::to_string(&line)
                    .map_err(|e| BrokerError::new(ErrorCode::Internal, e.to_string(), ""))?;
                text.push('\n');
                writer.write_all(text.as_bytes()).map_err(lost)?;
                let mut reply = String::new();
                if reader.read_line(&mut reply).map_err(lost)? == 0 {
                    return Err(lost(std::io::Error::other("connection closed")));
                }
                let reply: RawResponse = serde_json::from_str(&reply).map_err(|e| {
                    BrokerError::new(ErrorCode::Malformed, format!("daemon reply: {e}"), "")
                })?;
                serde_json::from_str(reply.result()?).map_err(unexpected)
            }
            Session::Embedded { paths, resident } => {
                let _lock = hold_lock(paths, Duration::from_secs(10))?;
                let mut kept = Resident::take_or_open(resident.take(), paths)?;
                kept.broker.reap();
                let result = handle(&mut kept.broker, request, kept.credentials);
                kept.saved = Stamp::of(&paths.state());
                *resident = Some(kept);
                serde_json::from_value(result?).map_err(unexpected)
            }
        }
    }

    pub fn hello(&mut self) -> Result<HelloReply, BrokerError> {
        self.typed(Request::Hello)
    }

    /// Creates a cell; with `bind`, it is released when this process exits.
    pub fn create_cell(
        &mut self,
        request: CellRequest,
        bind: bool,
    ) -> Result<CellInfo, BrokerError> {
        self.typed(Request::CreateCell { request, bind })
    }

    pub fn destroy_cell(&mut self, name: &str) -> Result<(), BrokerError> {
        self.call(Request::DestroyCell { name: name.into() })
            .map(drop)
    }

    pub fn list(&mut self) -> Result<Vec<CellInfo>, BrokerError> {
        self.typed(Request::ListCells)
    }

    /// Every thread in a cell on the machine, by tid, with its cell's name
    /// (empty when the broker cannot list them).
    pub fn cell_of_threads(&mut self) -> std::collections::HashMap<i32, String> {
        self.list()
            .unwrap_or_default()
            .into_iter()
            .flat_map(|c| {
                let name = c.name;
                c.members.into_iter().map(move |m| (m.tid, name.clone()))
            })
            .collect()
    }

    pub fn show(&mut self, name: &str) -> Result<CellInfo, BrokerError> {
        self.typed(Request::ShowCell { name: name.into() })
    }

    pub fn attach(
        &mut self,
        cell: &str,
        pid: i32,
        tid: Option<i32>,
    ) -> Result<Vec<i32>, BrokerError> {
        self.attach_as(cell, pid, tid, false)
    }

    /// Puts threads of `pid` (all, or only `tid`) into `cell`'s cpuset at
    /// their own scheduling policy: in a bandwidth cell they take no
    /// reservation slot (in other cells this is the same as `attach`).
    pub fn attach_cpuset_only(
        &mut self,
        cell: &str,
        pid: i32,
        tid: Option<i32>,
    ) -> Result<Vec<i32>, BrokerError> {
        self.attach_as(cell, pid, tid, true)
    }

    fn attach_as(
        &mut self,
        cell: &str,
        pid: i32,
        tid: Option<i32>,
        cpuset_only: bool,
    ) -> Result<Vec<i32>, BrokerError> {
        self.typed(Request::Attach {
            cell: cell.into(),
            pid,
            tid,
            cpuset_only,
        })
    }

    /// Joins the calling thread to `cell`.
    pub fn join_current_thread(&mut self, cell: &str) -> Result<(), BrokerError> {
        let tid = tessera_sys::proc::current_tid();
        self.attach(cell, tessera_sys::proc::current_pid(), Some(tid))
            .map(drop)
    }

    pub fn detach(&mut self, tid: i32) -> Result<(), BrokerError> {
        self.call(Request::Detach { tid }).map(drop)
    }

    /// Moves thread `tid` from its cell to cell `to`, reserved throughout
    /// (see [`Request::MoveMember`]).
    pub fn move_member(&mut self, tid: i32, to: &str) -> Result<(), BrokerError> {
        self.call(Request::MoveMember { tid, to: to.into() })
            .map(drop)
    }

    /// Changes a cell's budget; with `degrade`, the largest that fits when
    /// `budget` does not.
    pub fn resize_cell(
        &mut self,
        name: &str,
        budget: Budget,
        degrade: bool,
    ) -> Result<ResizeReply, BrokerError> {
        self.typed(Request::ResizeCell {
            name: name.into(),
            budget,
            degrade,
        })
    }

    /// Several budget changes as one admission decision (see
    /// `Request::ResizeCells`): one round trip, one save.
    pub fn resize_cells<'a>(
        &mut self,
        changes: impl IntoIterator<Item = (&'a str, Budget)>,
        degrade: bool,
    ) -> Result<ResizeCellsReply, BrokerError> {
        let changes = changes
            .into_iter()
            .map(|(name, budget)| BudgetChange {
                name: name.to_string(),
                budget,
            })
            .collect();
        self.typed(Request::ResizeCells { changes, degrade })
    }

    /// Budgets of their own for members of a cell (see
    /// `Request::ResizeMembers`); with `degrade`, capped at what fits.
    pub fn resize_members(
        &mut self,
        name: &str,
        budgets: Vec<MemberBudget>,
        degrade: bool,
    ) -> Result<ResizeMembersReply, BrokerError> {
        self.typed(Request::ResizeMembers {
            name: name.into(),
            budgets,
            degrade,
        })
    }

    pub fn status(&mut self) -> Result<StatusReport, BrokerError> {
        self.typed(Request::Status)
    }

    pub fn reset(&mut self) -> Result<ResetReport, BrokerError> {
        self.typed(Request::Reset)
    }

    /// Registers this process as service `name` listening on `socket` (an
    /// absolute path it has bound), admitting its owner, root and whom
    /// `policy` lists. Prefer [`ServiceRegistration`], which unregisters
    /// when dropped.
    pub fn register_service(
        &mut self,
        name: &str,
        socket: &Path,
        policy: ServicePolicy,
    ) -> Result<ServiceEntry, BrokerError> {
        self.typed(Request::RegisterService {
            name: name.into(),
            socket: socket.into(),
            policy,
        })
    }

    pub fn unregister_service(&mut self, name: &str) -> Result<(), BrokerError> {
        self.call(Request::UnregisterService { name: name.into() })
            .map(drop)
    }

    /// Opens service `name`: the broker checks this process against the
    /// service's policy and says where it listens; the stream returned is
    /// connected there. The service checks again when it accepts.
    pub fn open_service(&mut self, name: &str) -> Result<UnixStream, BrokerError> {
        let entry: ServiceEntry = self.typed(Request::OpenService { name: name.into() })?;
        connect_service(&entry)
    }

    /// Adds misses and xruns (since the last report) to `cell`'s counters;
    /// returns its totals.
    pub fn report(&mut self, cell: &str, misses: u64, xruns: u64) -> Result<Reported, BrokerError> {
        self.typed(Request::Report {
            cell: cell.into(),
            misses,
            xruns,
        })
    }

    /// The monitor's samples after `since_ms` (Unix ms), with one taken now
    /// if the newest is older than `fresh_within_ms`.
    pub fn monitor(
        &mut self,
        since_ms: Option<u64>,
        fresh_within_ms: u64,
    ) -> Result<Vec<Sample>, BrokerError> {
        self.typed(Request::Monitor {
            since_ms,
            fresh_within_ms,
        })
    }

    /// Opens workgroup `name`; with `create`, creates it (bound to this
    /// process) when no cell has the name.
    pub fn open_workgroup(
        &mut self,
        name: &str,
        create: Option<WorkgroupShape>,
    ) -> Result<WorkgroupInfo, BrokerError> {
        self.typed(Request::OpenWorkgroup {
            name: name.into(),
            create,
        })
    }

    /// Makes thread `tid` of this process a member of workgroup `name`.
    pub fn join_workgroup(&mut self, name: &str, tid: i32) -> Result<WorkgroupInfo, BrokerError> {
        self.typed(Request::JoinWorkgroup {
            name: name.into(),
            tid,
        })
    }

    /// Takes thread `tid` of this process out of workgroup `name`.
    pub fn leave_workgroup(&mut self, name: &str, tid: i32) -> Result<(), BrokerError> {
        self.call(Request::LeaveWorkgroup {
            name: name.into(),
            tid,
        })
        .map(drop)
    }

    /// The registered services, each with whether its process still runs.
    pub fn list_services(&mut self) -> Result<Vec<ServiceInfo>, BrokerError> {
        self.typed(Request::ListServices)
    }
}

/// Connects to a service the broker admitted us to.
fn connect_service(entry: &ServiceEntry) -> Result<UnixStream, BrokerError> {
    UnixStream::connect(&entry.socket).map_err(|e| {
        let (code, fix) = match e.kind() {
            std::io::ErrorKind::PermissionDenied => (
                ErrorCode::Permission,
                format!(
                    "ask the service's owner (uid {}) to make its socket connectable for you (its policy admits you)",
                    entry.owner_uid
                ),
            ),
            _ => (
                ErrorCode::NotFound,
                format!("is `tessera serve {}` running? restart it", entry.name),
            ),
        };
        BrokerError::new(
            code,
            format!(
                "service {:?} (pid {}) does not answer on {}: {e}",
                entry.name,
                entry.process.pid,
                entry.socket.display()
            ),
            fix,
        )
    })
}

/// A service's registration, held for as long as it serves: dropping it
/// unregisters the name (a service that crashes leaves a stale entry,
/// removed by the next registration or lookup of the name).
pub struct ServiceRegistration {
    session: Session,
    entry: ServiceEntry,
    registered: bool,
}

impl ServiceRegistration {
    /// Registers this process as service `name` on `socket` through `session`,
    /// which the registration keeps to unregister.
    pub fn register(
        mut session: Session,
        name: &str,
        socket: &Path,
        policy: ServicePolicy,
    ) -> Result<ServiceRegistration, BrokerError> {
        let entry = session.register_service(name, socket, policy)?;
        Ok(ServiceRegistration {
            session,
            entry,
            registered: true,
        })
    }

    pub fn entry(&self) -> &ServiceEntry {
        &self.entry
    }

    /// Unregisters now, with the broker's answer (dropping ignores it).
    pub fn unregister(mut self) -> Result<(), BrokerError> {
        self.registered = false;
        self.session.unregister_service(&self.entry.name)
    }
}

impl Drop for ServiceRegistration {
    fn drop(&mut self) {
        if self.registered {
            let _ = self.session.unregister_service(&self.entry.name);
        }
    }
}

/// A daemon's reply line as the client reads it: a
/// [`crate::protocol::Response`] with its result left as the JSON it came
/// as, for the caller's type.
#[derive(serde::Deserialize)]
struct RawResponse<'a> {
    ok: bool,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<BrokerError>,
}

impl<'a> RawResponse<'a> {
    /// Its result (JSON `null` when it has none), or its error.
    fn result(self) -> Result<&'a str, BrokerError> {
        if self.ok {
            return Ok(self.result.map_or("null", RawValue::get));
        }
        Err(self.error.unwrap_or(BrokerError::new(
            ErrorCode::Malformed,
            "reply without result or error",
            "",
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Response;

    /// What the daemon writes for `result` (or `error`), read back as the
    /// client reads it.
    fn read_back(
        ok: bool,
        result: Option<serde_json::Value>,
        error: Option<BrokerError>,
    ) -> Result<String, BrokerError> {
        let line = serde_json::to_string(&Response {
            v: PROTOCOL_VERSION,
            id: 7,
            ok,
            result,
            error,
        })
        .unwrap();
        let reply: RawResponse = serde_json::from_str(&line).unwrap();
        reply.result().map(str::to_string)
    }

    #[test]
    fn a_reply_is_read_as_the_json_its_result_came_as() {
        let cells = serde_json::json!([{"name": "a \"quoted\" cell", "runtime": 1000}]);
        let read = read_back(true, Some(cells.clone()), None).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&read).unwrap(),
            cells
        );
        assert_eq!(read_back(true, None, None).unwrap(), "null");
    }

    #[test]
    fn a_refusal_is_its_error_and_a_reply_without_either_is_malformed() {
        let refused = BrokerError::new(ErrorCode::Refused, "no room", "ask less");
        assert_eq!(read_back(false, None, Some(refused.clone())), Err(refused));
        assert_eq!(
            read_back(false, None, None).unwrap_err().code,
            ErrorCode::Malformed
        );
    }
}
