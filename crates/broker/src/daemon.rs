//! `tessera daemon`: the broker behind a Unix socket (protocol v1), shared by
//! every tessera client on the machine, with a reaper that releases the
//! cells of processes that exit.
//!
//! The socket is the owner's and root's alone unless the config names a
//! group (or the world); peers are identified by SO_PEERCRED. It must never
//! let one bad line or one dying client disturb the others.

use crate::broker::Broker;
use crate::config::{group_id, Config};
use crate::error::{BrokerError, ErrorCode};
use crate::paths::Paths;
use crate::protocol::{HelloReply, Request, Response, PROTOCOL_VERSION};
use crate::registry::ServiceEntry;
use crate::state::{Owner, ProcessId, Reported};
use crate::wire::{self, Incoming};
use crate::workgroup;
use std::io::{BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_sys::ipc::{peer_credentials, PeerCredentials};

/// How often the reaper looks for exited clients.
pub const REAP_INTERVAL: Duration = Duration::from_millis(200);
/// How long a batch of budget changes may wait to be saved (the reaper
/// saves it): at most this much of them is lost if the daemon dies.
pub const BUDGET_SAVE_DELAY: Duration = Duration::from_secs(1);

/// Runs one request against the broker on behalf of `peer`.
pub fn handle(
    broker: &mut Broker,
    request: Request,
    peer: PeerCredentials,
) -> Result<serde_json::Value, BrokerError> {
    let json = |v: serde_json::Result<serde_json::Value>| {
        v.map_err(|e| BrokerError::new(ErrorCode::Internal, e.to_string(), ""))
    };
    match request {
        Request::Hello => json(serde_json::to_value(HelloReply {
            protocol: PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").into(),
            mode: broker.mode().clone(),
            pid: tessera_sys::proc::current_pid(),
        })),
        Request::CreateCell { request, bind } => {
            let process = if bind {
                Some(ProcessId::of(peer.pid)?)
            } else {
                None
            };
            let owner = Owner {
                uid: peer.uid,
                process,
            };
            json(serde_json::to_value(broker.create_cell(request, owner)?))
        }
        Request::DestroyCell { name } => {
            broker.destroy_cell(&name, peer.uid)?;
            Ok(serde_json::Value::Null)
        }
        Request::ListCells => json(serde_json::to_value(broker.list())),
        Request::ShowCell { name } => json(serde_json::to_value(broker.show(&name)?)),
        Request::Attach {
            cell,
            pid,
            tid,
            cpuset_only,
        } => json(serde_json::to_value(broker.attach_as(
            &cell,
            pid,
            tid,
            peer.uid,
            cpuset_only,
        )?)),
        Request::Detach { tid } => {
            broker.detach(tid, peer.uid)?;
            Ok(serde_json::Value::Null)
        }
        Request::MoveMember { tid, to } => {
            broker.move_member(tid, &to, peer.uid)?;
            Ok(serde_json::Value::Null)
        }
        Request::ResizeCell {
            name,
            budget,
            degrade,
        } => json(serde_json::to_value(
            broker.resize_cell(&name, budget, degrade, peer.uid)?,
        )),
        Request::ResizeCells { changes, degrade } => json(serde_json::to_value(
            broker.resize_cells(changes, degrade, peer.uid)?,
        )),
        Request::ResizeMembers {
            name,
            budgets,
            degrade,
        } => json(serde_json::to_value(
            broker.resize_members(&name, &budgets, degrade, peer.uid)?,
        )),
        Request::Status => json(serde_json::to_value(broker.status())),
        Request::Reset => json(serde_json::to_value(broker.reset(peer.uid)?)),
        Request::RegisterService {
            name,
            socket,
            policy,
        } => {
            let entry = ServiceEntry {
                name,
                socket,
                process: ProcessId::of(peer.pid)?,
                owner_uid: peer.uid,
                policy,
            };
            json(serde_json::to_value(broker.register_service(entry)?))
        }
        Request::UnregisterService { name } => {
            broker.unregister_service(&name, peer.uid)?;
            Ok(serde_json::Value::Null)
        }
        Request::OpenService { name } => {
            json(serde_json::to_value(broker.open_service(&name, &peer)?))
        }
        Request::ListServices => json(serde_json::to_value(broker.list_services())),
        Request::Report {
            cell,
            misses,
            xruns,
        } => json(serde_json::to_value(broker.report(
            &cell,
            Reported { misses, xruns },
            peer.uid,
        )?)),
        Request::Monitor {
            since_ms,
            fresh_within_ms,
        } => json(serde_json::to_value(
            broker.monitor(since_ms, fresh_within_ms),
        )),
        Request::OpenWorkgroup { name, create } => json(serde_json::to_value(workgroup::open(
            broker, &name, create, &peer,
        )?)),
        Request::JoinWorkgroup { name, tid } => json(serde_json::to_value(workgroup::join(
            broker, &name, tid, &peer,
        )?)),
        Request::LeaveWorkgroup { name, tid } => {
            workgroup::leave(broker, &name, tid, &peer)?;
            Ok(serde_json::Value::Null)
        }
    }
}

/// Answers one request line: runs its request, or says why it is refused
/// (the broker untouched). None for a blank line, which gets no reply.
pub fn answer_line(broker: &Mutex<Broker>, line: &[u8], peer: PeerCredentials) -> Option<Response> {
    let reply = match wire::judge(line)? {
        Ok(req) => {
            let mut b = broker.lock().unwrap_or_else(|p| p.into_inner());
            response(req.id, handle(&mut b, req.request, peer))
        }
        Err(rejected) => response(rejected.id, Err(rejected.error)),
    };
    Some(reply)
}

pub fn response(id: u64, outcome: Result<serde_json::Value, BrokerError>) -> Response {
    match outcome {
        Ok(result) => Response {
            v: PROTOCOL_VERSION,
            id,
            ok: true,
            result: Some(result),
            error: None,
        },
        Err(e) => Response {
            v: PROTOCOL_VERSION,
            id,
            ok: false,
            result: None,
            error: Some(e),
        },
    }
}

/// Answers a client's lines, each non-blank one with exactly one reply in
/// order, until it hangs up: a malformed line is answered like any other,
/// so one bad line never costs a client its connection.
fn serve_connection(broker: Arc<Mutex<Broker>>, stream: UnixStream) {
    let Ok(peer) = peer_credentials(&stream) else {
        return;
    };
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        let reply = match wire::read_line(&mut reader, &mut line) {
            Ok(Incoming::Closed) | Err(_) => return,
            Ok(Incoming::Overlong) => response(0, Err(wire::overlong())),
            Ok(Incoming::Line) => match answer_line(&broker, &line, peer) {
                Some(reply) => reply,
                None => continue,
            },
        };
        if write_reply(&mut writer, &reply).is_err() {
            return;
        }
    }
}

fn write_reply(w: &mut UnixStream, r: &Response) -> std::io::Result<()> {
    let mut text = serde_json::to_string(r).map_err(std::io::Error::other)?;
    text.push('\n');
    w.write_all(text.as_bytes())
}

fn bind_socket(paths: &Paths, config: &Config) -> Result<UnixListener, BrokerError> {
    let path = paths.socket();
    if UnixStream::connect(&path).is_ok() {
        return Err(BrokerError::new(
            ErrorCode::Busy,
            format!("a tessera daemon already answers on {}", path.display()),
            "stop it first, or use it",
        ));
    }
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| {
        BrokerError::new(
            ErrorCode::State,
            format!("bind {}: {e}", path.display()),
            "check the run directory's permissions",
        )
    })?;
    let mode = match (&config.socket_group, config.socket_world) {
        (_, true) => 0o666,
        (Some(group), false) => {
            let gid = group_id(group).ok_or_else(|| {
                BrokerError::new(
                    ErrorCode::Invalid,
                    format!("socket_group {group:?} does not exist"),
                    "name a group from /etc/group",
                )
            })?;
            std::os::unix::fs::chown(&path, None, Some(gid)).map_err(|e| {
                BrokerError::new(
                    ErrorCode::State,
                    format!("chown {}: {e}", path.display()),
                    "",
                )
            })?;
            0o660
        }
        (None, false) => 0o600,
    };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(|e| {
        BrokerError::new(
            ErrorCode::State,
            format!("chmod {}: {e}", path.display()),
            "",
        )
    })?;
    Ok(listener)
}

/// Serves until the process is killed. `on_ready` is called once the socket
/// accepts connections (with the recovery notes), before any connection is
/// served: for logs, tests, and front-ends that share the broker (RTKit's
/// interface); its error stops the daemon before it serves.
pub fn run<E: From<BrokerError>>(
    paths: Paths,
    config: Config,
    on_ready: impl FnOnce(&Arc<Mutex<Broker>>, &[String]) -> Result<(), E>,
) -> Result<(), E> {
    let lock = crate::session::hold_lock(&paths, Duration::from_secs(10))?;
    let label = format!("daemon (pid {})", tessera_sys::proc::current_pid());
    let (mut broker, notes) = Broker::open(paths.clone(), config.clone(), label)?;
    broker.defer_budget_saves(BUDGET_SAVE_DELAY);
    let listener = bind_socket(&paths, &config)?;
    let broker = Arc::new(Mutex::new(broker));
    on_ready(&broker, &notes)?;
    let reaper = Arc::clone(&broker);
    std::thread::Builder::new()
        .name("tessera-reaper".into())
        .spawn(move || loop {
            std::thread::sleep(REAP_INTERVAL);
            let mut broker = reaper.lock().unwrap_or_else(|p| p.into_inner());
            let mut notes = broker.reap();
            if let Err(e) = broker.save_if_due() {
                notes.push(format!("budgets not saved: {e}"));
            }
            drop(broker);
            for n in notes {
                eprintln!("tessera daemon: {n}");
            }
        })
        .map_err(|e| BrokerError::new(ErrorCode::Internal, format!("start the reaper: {e}"), ""))?;
    start_monitor(Arc::clone(&broker), &config)?;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let b = Arc::clone(&broker);
        let _ = std::thread::Builder::new()
            .name("tessera-client".into())
            .spawn(move || serve_connection(b, stream));
    }
    drop(lock);
    Ok(())
}

/// The RAP service's coarse loop: samples every cell each monitor interval
/// and, when adaptation is enabled, adapts the budgets each adaptation
/// interval, logging every change with its reason.
fn start_monitor(broker: Arc<Mutex<Broker>>, config: &Config) -> Result<(), BrokerError> {
    let every = Duration::from_millis(config.monitor_interval_ms);
    let adaptation = config.adaptation.clone();
    let adapt_every = Duration::from_millis(adaptation.interval_ms);
    std::thread::Builder::new()
        .name("tessera-monitor".into())
        .spawn(move || {
            let mut last_adapted = std::time::Instant::now();
            loop {
                std::thread::sleep(every);
                let mut broker = broker.lock().unwrap_or_else(|p| p.into_inner());
                broker.sample();
                if adaptation.enabled && last_adapted.elapsed() >= adapt_every {
                    last_adapted = std::time::Instant::now();
                    for line in broker.adapt(&adaptation) {
                        eprintln!("tessera daemon: adapted {line}");
                    }
                }
            }
        })
        .map(drop)
        .map_err(|e| BrokerError::new(ErrorCode::Internal, format!("start the monitor: {e}"), ""))
}
