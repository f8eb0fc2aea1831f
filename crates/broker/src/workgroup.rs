//! Workgroups: a cell whose members (the threads of one audio cycle: the
//! server's callback and its workers, a host's plug-in threads) share one
//! deadline per cycle, each holding a reservation with a budget of its own.
//!
//! A workgroup is opened by name — created on first open, bound to the
//! process that created it — and joined by threads of any process of the
//! same user, or of root: a host joins its audio server's workgroup with
//! its own credentials, as it joins Apple's `kAudioDevicePropertyIOThreadOSWorkgroup`.
//! Any bandwidth cell can be opened as a workgroup; its capacity is its
//! number of reservations. Each member's budget is changed with
//! `resize-members` by its process (libtessera's controller), which names
//! only its own members. A thread that joins leaves
//! the cell it was in (a guard's reservation of its own): its program's
//! choice wins, as when it sets its own policy.
//!
//! It owns the checks a workgroup adds to a cell's (who may open it, its
//! capacity, who may take a member out); it must never touch the kernel or
//! the state but through the [`Broker`]'s operations.

use crate::broker::{Broker, Outcome};
use crate::error::{BrokerError, ErrorCode};
use crate::facts::Mode;
use crate::protocol::CellInfo;
use crate::state::{Owner, ProcessId};
use serde::{Deserialize, Serialize};
use tessera_policy::{Budget, CellPolicy, CellRequest, CoreRequest, Placement};
use tessera_sys::ipc::PeerCredentials;

/// The name of libtessera's control thread in a workgroup's process. It
/// wakes once a cycle, for the members' samples, but runs no part of the
/// graph: a guard that finds threads in step with the graph must not take
/// it for one of them (reserved at the audio period, and bumped at every
/// xrun, it grew to 90 % of a CPU and starved the members it serves).
pub const CONTROL_THREAD: &str = "tessera-wg";

/// What a workgroup created on its first open looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkgroupShape {
    /// How many members it holds at most (one reservation each, under
    /// global EDF: they may outnumber the cores).
    pub capacity: usize,
    /// Each member's budget until its cycles are measured.
    pub budget: Budget,
    /// Every member's reservation on this core, partitioned (a chain of
    /// members that run one after the other, beside their server's threads
    /// on the same core); None: global EDF on the shared cores (members
    /// that run in parallel).
    #[serde(default)]
    pub core: Option<usize>,
    /// The process it is bound to, whose user owns it: an audio server's,
    /// for which root (a guard) opens the server's workgroup, so that the
    /// server's clients — of the server's user — join it and it lives as
    /// long as the server. None: the caller's process.
    #[serde(default)]
    pub for_process: Option<i32>,
}

/// The name of the workgroup a guard opens for JACK server `server`, which
/// its clients join (`tessera_workgroup_open`, `tessera-jack-peer
/// --workgroup`), as a host joins its audio device's on macOS. None when
/// the server's name makes no cell name (see `CellRequest`'s rules).
pub fn jack_server_workgroup(server: &str) -> Option<String> {
    let name = format!("jack-{server}");
    tessera_policy::cell::validate_name(&name)
        .ok()
        .map(|()| name)
}

/// The name of the workgroup a guard opens for user `uid`'s PipeWire
/// (one session server per user), which its clients — pw-jack's among
/// them — join.
pub fn pipewire_server_workgroup(uid: u32) -> String {
    format!("pipewire-{uid}")
}

/// A workgroup as its members see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkgroupInfo {
    pub name: String,
    pub owner_uid: u32,
    /// How many members it can hold (`tessera_workgroup_max_parallel_threads`).
    pub capacity: usize,
    /// The members' thread ids.
    pub members: Vec<i32>,
    /// The cell's budget: the largest of its reservations' (a new member's
    /// until its process gives it its own).
    pub budget: Budget,
    /// Whether reservations are enforced, or the broker runs best-effort.
    pub mode: Mode,
}

/// Opens workgroup `name` for `peer`, creating it from `create` (bound to
/// the peer's process) when no cell has that name.
pub fn open(
    broker: &mut Broker,
    name: &str,
    create: Option<WorkgroupShape>,
    peer: &PeerCredentials,
) -> Outcome<WorkgroupInfo> {
    let cell = match (broker.show(name), create) {
        (Ok(cell), _) => cell,
        (Err(e), Some(shape)) if e.code == ErrorCode::NotFound => {
            let owner = owner_for(&shape, peer)?;
            broker.create_cell(request(name, shape), owner)?
        }
        (Err(e), _) => return Err(unknown(name, e)),
    };
    info(broker, cell, peer)
}

/// Who owns a workgroup created from `shape` for `peer`: the peer and its
/// process, or — root only — the process `shape` names and its user.
fn owner_for(shape: &WorkgroupShape, peer: &PeerCredentials) -> Outcome<Owner> {
    let pid = match shape.for_process {
        Some(pid) if pid != peer.pid && peer.uid != 0 => {
            return Err(BrokerError::new(
                ErrorCode::Permission,
                format!("only root opens a workgroup for another process ({pid})"),
                "open it from the process it is for, or as root (`tessera guard` opens an audio server's)",
            ))
        }
        Some(pid) => pid,
        None => peer.pid,
    };
    let uid = match pid == peer.pid {
        true => peer.uid,
        false => tessera_sys::proc::owner_uid(pid).map_err(|_| {
            BrokerError::new(
                ErrorCode::NotFound,
                format!("no process {pid} to open a workgroup for"),
                "give the pid of a running audio server",
            )
        })?,
    };
    Ok(Owner {
        uid,
        process: Some(ProcessId::of(pid)?),
    })
}

/// Makes thread `tid` of the peer's process a member of workgroup `name`.
pub fn join(
    broker: &mut Broker,
    name: &str,
    tid: i32,
    peer: &PeerCredentials,
) -> Outcome<WorkgroupInfo> {
    let wg = open(broker, name, None, peer)?;
    if wg.members.contains(&tid) {
        return Ok(wg);
    }
    if wg.members.len() >= wg.capacity {
        return Err(BrokerError::new(
            ErrorCode::Refused,
            format!(
                "workgroup {name:?} is full: its {} member(s) (threads {:?}) hold all its reservations",
                wg.capacity, wg.members
            ),
            "join at most tessera_workgroup_max_parallel_threads threads; let another leave first",
        ));
    }
    if tessera_sys::proc::process_of(tid).ok() != Some(peer.pid) {
        return Err(BrokerError::new(
            ErrorCode::NotFound,
            format!("thread {tid} is not a thread of your process {}", peer.pid),
            "a thread joins from its own process (tessera_workgroup_join)",
        ));
    }
    // The program chose the workgroup for its thread: as when it sets the
    // thread's policy itself, that ends the reservation the thread had (a
    // guard's cell for it alone), whose owner finds it gone.
    if let Some(other) = broker.member_cell(tid).map(str::to_string) {
        broker.take_out(&other, tid)?;
    }
    broker.attach_as(name, peer.pid, Some(tid), peer.uid, false)?;
    open(broker, name, None, peer)
}

/// Takes thread `tid` out of workgroup `name`: the thread's own process
/// or root only.
pub fn leave(broker: &mut Broker, name: &str, tid: i32, peer: &PeerCredentials) -> Outcome<()> {
    let wg = open(broker, name, None, peer)?;
    if !wg.members.contains(&tid) {
        return Err(BrokerError::new(
            ErrorCode::NotFound,
            format!("thread {tid} is not a member of workgroup {name:?}"),
            "leave with the token its join filled",
        ));
    }
    let process = tessera_sys::proc::process_of(tid).ok();
    if peer.uid != 0 && process != Some(peer.pid) {
        return Err(BrokerError::new(
            ErrorCode::Permission,
            format!(
                "thread {tid} of workgroup {name:?} is not a thread of your process {}",
                peer.pid
            ),
            "a member leaves from its own process",
        ));
    }
    broker.detach(tid, peer.uid)
}

/// The cell a workgroup is: global EDF over the shared cores (or, asked
/// for, EDF on one partitioned core, giving way there to the other cells'
/// smaller reservations), one reservation per member, its
/// budgets adapted by its owner, reclaiming
/// what the others leave unused (GRUB, as the guard's reservations). A
/// member's wake-ups drift with its graph (each client starts when the one
/// before it finishes), so two of its cycles can fall in one reservation
/// period, and the second was throttled with bandwidth idle beside it:
/// §4.5's staircase of ten members, throttled in 355 of 430 misses with a
/// budget of 228 µs for 124 µs of work.
fn request(name: &str, shape: WorkgroupShape) -> CellRequest {
    let capacity = shape.capacity.max(1);
    let cores = match shape.core {
        // One reservation on it per member: a stacked cell.
        Some(core) => CoreRequest::List(vec![core; capacity]),
        None => CoreRequest::Count(capacity),
    };
    let mut req = CellRequest::new(name, CellPolicy::EventTriggered, cores, Some(shape.budget));
    match shape.core {
        None => req.placement = Placement::Global,
        // Its server's threads beside it come first: the members share
        // what those leave (see `CellRequest::gives_way`).
        Some(_) => req.gives_way = true,
    }
    req.owner_adapts = true;
    req.reclaim = true;
    req
}

fn unknown(name: &str, e: BrokerError) -> BrokerError {
    if e.code != ErrorCode::NotFound {
        return e;
    }
    BrokerError::new(
        ErrorCode::NotFound,
        format!("no workgroup named {name:?}"),
        "open it from the audio server first (tessera_workgroup_open creates it), or check the name with `tessera cell list`",
    )
}

fn info(broker: &Broker, cell: CellInfo, peer: &PeerCredentials) -> Outcome<WorkgroupInfo> {
    if peer.uid != 0 && cell.owner_uid != peer.uid {
        return Err(BrokerError::new(
            ErrorCode::Permission,
            format!(
                "workgroup {:?} belongs to uid {}, not to you (uid {})",
                cell.name, cell.owner_uid, peer.uid
            ),
            "a workgroup is joined by its owner's processes or root: run the host as the audio server's user",
        ));
    }
    let budget = cell
        .grant
        .request
        .budget
        .filter(|_| !cell.grant.reservations.is_empty());
    let Some(budget) = budget else {
        return Err(BrokerError::new(
            ErrorCode::Invalid,
            format!(
                "cell {:?} is not a workgroup: its threads hold no reservations",
                cell.name
            ),
            "open a bandwidth cell (event- or time-triggered), or another name to create a workgroup",
        ));
    };
    Ok(WorkgroupInfo {
        capacity: cell.grant.reservations.len(),
        members: cell
            .members
            .iter()
            .filter(|m| m.slot.is_some())
            .map(|m| m.tid)
            .collect(),
        budget,
        owner_uid: cell.owner_uid,
        mode: broker.mode().clone(),
        name: cell.name,
    })
}
