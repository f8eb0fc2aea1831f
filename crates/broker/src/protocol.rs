//! The control protocol, version 1: one JSON object per line each way over
//! the broker's Unix socket.
//!
//! Request: `{"v":1,"id":7,"op":"create-cell","request":{...},"bind":true}`.
//! Reply:   `{"v":1,"id":7,"ok":true,"result":{...}}` or
//!          `{"v":1,"id":7,"ok":false,"error":{"code":"refused","message":"...","fix":"..."}}`.
//! A malformed line gets a `malformed` error and the connection stays usable.
//! The peer's identity is the kernel's (SO_PEERCRED), never a field here.
//! docs/protocol.md lists every operation with examples.
//!
//! It must never carry behaviour: only the shapes of messages.

use crate::error::BrokerError;
use crate::facts::Mode;
use crate::registry::ServicePolicy;
use crate::state::Member;
use crate::workgroup::WorkgroupShape;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use tessera_policy::{Bandwidth, Budget, CellRequest, CoreUsage, Grant};

pub const PROTOCOL_VERSION: u32 = 1;

/// An operation on the broker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    /// Version handshake; answers with the broker's mode and version.
    Hello,
    /// Admit and create a cell. With `bind`, the cell lives only as long as
    /// the requesting process.
    CreateCell {
        request: CellRequest,
        #[serde(default)]
        bind: bool,
    },
    DestroyCell {
        name: String,
    },
    ListCells,
    ShowCell {
        name: String,
    },
    /// Join process `pid`'s threads (all, or only `tid`) to `cell`. With
    /// `cpuset_only`, a bandwidth cell gives them its cpuset and affinity
    /// but no reservation slot: they keep their own scheduling policy.
    Attach {
        cell: String,
        pid: i32,
        #[serde(default)]
        tid: Option<i32>,
        #[serde(default)]
        cpuset_only: bool,
    },
    /// Take a thread out of its cell, restoring its scheduling.
    Detach {
        tid: i32,
    },
    /// Move a thread from its cell to cell `to` (both the caller's) without
    /// letting go of it: a reserved thread takes `to`'s parameters, then
    /// its cpuset, and is never unreserved in between; leaving `to` later
    /// gives it back the scheduling it had before its first cell.
    MoveMember {
        tid: i32,
        to: String,
    },
    /// Change a bandwidth cell's budget through admission and re-apply it
    /// to its threads. With `degrade`, a budget that does not fit is cut to
    /// the largest runtime that does instead of refused.
    ResizeCell {
        name: String,
        budget: Budget,
        #[serde(default)]
        degrade: bool,
    },
    /// Several `ResizeCell`s as one admission decision, in the order given
    /// (shrinking ones first, so that growing ones see the room), saved
    /// once: a guard's changes of one control interval. Each change
    /// succeeds or fails alone; the reply says which, and the cores after.
    ResizeCells {
        changes: Vec<BudgetChange>,
        #[serde(default)]
        degrade: bool,
    },
    /// Give members of an event-triggered cell budgets of their own (a
    /// workgroup's callback and workers), one admission decision; the
    /// cell's reservations no member named hold the largest. With
    /// `degrade`, budgets that do not fit are capped at the largest
    /// runtime that does.
    ResizeMembers {
        name: String,
        budgets: Vec<MemberBudget>,
        #[serde(default)]
        degrade: bool,
    },
    Status,
    /// Destroy every cell and restore the machine (root only).
    Reset,
    /// Register the requesting process as service `name`, listening on
    /// `socket`, admitting its owner, root and whom `policy` lists.
    RegisterService {
        name: String,
        socket: PathBuf,
        #[serde(default)]
        policy: ServicePolicy,
    },
    UnregisterService {
        name: String,
    },
    /// Where service `name` listens, if its policy admits the requester.
    OpenService {
        name: String,
    },
    ListServices,
    /// Add deadline misses and xruns (since the last report) to a cell's
    /// counters: the cell's owner reports what its programs saw.
    Report {
        cell: String,
        #[serde(default)]
        misses: u64,
        #[serde(default)]
        xruns: u64,
    },
    /// The monitor's samples after `since_ms` (Unix ms; all without), a
    /// fresh one first if the newest is older than `fresh_within_ms`.
    Monitor {
        #[serde(default)]
        since_ms: Option<u64>,
        #[serde(default = "default_freshness")]
        fresh_within_ms: u64,
    },
    /// Open workgroup `name` (the requester's user's, or any for root);
    /// with `create`, a workgroup of that shape bound to the requesting
    /// process when no cell has the name.
    OpenWorkgroup {
        name: String,
        #[serde(default)]
        create: Option<WorkgroupShape>,
    },
    /// Make thread `tid` of the requesting process a member of workgroup
    /// `name`: it takes one of the cell's reservations.
    JoinWorkgroup {
        name: String,
        tid: i32,
    },
    /// Take thread `tid` (of the requesting process) out of workgroup `name`.
    LeaveWorkgroup {
        name: String,
        tid: i32,
    },
}

fn default_freshness() -> u64 {
    1000
}

/// The envelope of a request line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestLine {
    pub v: u32,
    #[serde(default)]
    pub id: u64,
    #[serde(flatten)]
    pub request: Request,
}

/// The fields every request line has, read before the operation's own: a
/// line whose operation is malformed is still answered with its `id`, and
/// one of another version is told so whatever its operation. It also keeps
/// `op` a string: serde would read an integer `op` as [`Request`]'s variant
/// index (`"op":9` as `reset`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Envelope {
    pub v: u32,
    #[serde(default)]
    pub id: u64,
    pub op: String,
}

/// The envelope of a reply line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub v: u32,
    pub id: u64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<BrokerError>,
}

/// A cell as reported to users.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellInfo {
    pub name: String,
    pub grant: Grant,
    pub owner_uid: u32,
    /// The process whose exit releases the cell; none for persistent cells.
    pub bound_to_pid: Option<i32>,
    pub members: Vec<Member>,
    /// Bandwidth the cell holds (its reservations', plus 1.0 per dedicated core).
    pub bandwidth: Bandwidth,
    /// Free reservation slots (bandwidth cells: one thread per reservation).
    pub free_slots: Option<usize>,
}

/// `tessera status`: capacity per core, cells, who holds what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    pub version: String,
    pub mode: Mode,
    pub banner: Option<String>,
    pub broker: String,
    pub kernel: String,
    pub capacity_per_core: Bandwidth,
    pub capacity_source: String,
    pub cores: Vec<CoreUsage>,
    pub global_reserved: Bandwidth,
    pub cells: Vec<CellInfo>,
}

/// The answer to `ResizeCell`: the budget now in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResizeReply {
    pub budget: Budget,
    /// Less than asked: the largest that fit.
    pub degraded: bool,
}

/// One cell's new budget in a `ResizeCells`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetChange {
    pub name: String,
    pub budget: Budget,
}

/// A member's budget in a `ResizeMembers`, and in its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberBudget {
    pub tid: i32,
    pub budget: Budget,
}

/// The answer to `ResizeMembers`: each member's budget now in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResizeMembersReply {
    pub budgets: Vec<MemberBudget>,
    /// Less than asked: capped at what fit.
    pub degraded: bool,
}

/// The answer to `ResizeCells`: each change's outcome, in order, and the
/// cores as they are after all of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResizeCellsReply {
    pub results: Vec<Result<ResizeReply, BrokerError>>,
    pub cores: Vec<CoreUsage>,
    /// Bandwidth free for global reservations on the shared cores.
    pub global_free: Bandwidth,
}

/// The answer to `Hello`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelloReply {
    pub protocol: u32,
    pub version: String,
    pub mode: Mode,
    pub pid: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The examples of docs/protocol.md parse as documented.
    #[test]
    fn documented_requests_parse() {
        let create = r#"{"v":1,"id":7,"op":"create-cell","bind":true,"request":{"name":"synth","policy":"event-triggered","cores":{"count":1},"budget":{"runtime_ns":400000,"deadline_ns":1333000,"period_ns":1333000},"placement":"partitioned","weight":100,"pinned":false,"reclaim":false,"overrun_signal":false}}"#;
        let line: RequestLine = serde_json::from_str(create).unwrap();
        assert_eq!(line.id, 7);
        match line.request {
            Request::CreateCell { request, bind } => {
                assert!(bind);
                assert_eq!(
                    request,
                    tessera_policy::CellRequest::event_triggered("synth", 400_000, 1_333_000)
                );
            }
            other => panic!("{other:?}"),
        }
        let minimal = r#"{"v":1,"op":"create-cell","request":{"name":"d","policy":"dedicated","cores":{"list":[2,3]},"budget":null}}"#;
        assert!(serde_json::from_str::<RequestLine>(minimal).is_ok());
        for op in ["hello", "status", "list-cells", "reset"] {
            let line: RequestLine =
                serde_json::from_str(&format!(r#"{{"v":1,"id":1,"op":"{op}"}}"#)).unwrap();
            assert_eq!(serde_json::to_value(&line).unwrap()["op"], op);
        }
        let attach: RequestLine =
            serde_json::from_str(r#"{"v":1,"id":2,"op":"attach","cell":"synth","pid":42}"#)
                .unwrap();
        assert_eq!(
            attach.request,
            Request::Attach {
                cell: "synth".into(),
                pid: 42,
                tid: None,
                cpuset_only: false
            }
        );
    }

    #[test]
    fn the_documented_resize_parses_and_degrade_defaults_to_off() {
        let line: RequestLine = serde_json::from_str(
            r#"{"v":1,"id":9,"op":"resize-cell","name":"synth","budget":{"runtime_ns":300000,"deadline_ns":1333000,"period_ns":1333000},"degrade":true}"#,
        )
        .unwrap();
        assert_eq!(
            line.request,
            Request::ResizeCell {
                name: "synth".into(),
                budget: Budget::new(300_000, 1_333_000),
                degrade: true
            }
        );
        let plain: RequestLine = serde_json::from_str(
            r#"{"v":1,"op":"resize-cell","name":"synth","budget":{"runtime_ns":1,"deadline_ns":2,"period_ns":2}}"#,
        )
        .unwrap();
        assert!(matches!(
            plain.request,
            Request::ResizeCell { degrade: false, .. }
        ));
        let reply: ResizeReply = serde_json::from_str(
            r#"{"budget":{"runtime_ns":250000,"deadline_ns":1333000,"period_ns":1333000},"degraded":true}"#,
        )
        .unwrap();
        assert!(reply.degraded);
        assert!(
            serde_json::from_str::<RequestLine>(r#"{"v":1,"op":"resize-cell","name":"x"}"#)
                .is_err()
        );
    }

    #[test]
    fn the_documented_service_requests_parse() {
        let register: RequestLine = serde_json::from_str(
            r#"{"v":1,"id":3,"op":"register-service","name":"net","socket":"/run/tessera-net.sock","policy":{"uids":[1000],"gids":[29]}}"#,
        )
        .unwrap();
        assert_eq!(
            register.request,
            Request::RegisterService {
                name: "net".into(),
                socket: "/run/tessera-net.sock".into(),
                policy: ServicePolicy {
                    uids: vec![1000],
                    gids: vec![29]
                }
            }
        );
        let owner_only: RequestLine = serde_json::from_str(
            r#"{"v":1,"op":"register-service","name":"net","socket":"/run/tessera-net.sock"}"#,
        )
        .unwrap();
        assert!(matches!(
            owner_only.request,
            Request::RegisterService { policy, .. } if policy == ServicePolicy::default()
        ));
        let open: RequestLine =
            serde_json::from_str(r#"{"v":1,"id":4,"op":"open-service","name":"net"}"#).unwrap();
        assert_eq!(open.request, Request::OpenService { name: "net".into() });
        for op in ["list-services", "unregister-service"] {
            let text = format!(r#"{{"v":1,"id":1,"op":"{op}","name":"net"}}"#);
            assert!(serde_json::from_str::<RequestLine>(&text).is_ok(), "{op}");
        }
        let info: crate::registry::ServiceInfo = serde_json::from_str(
            r#"{"name":"net","socket":"/run/tessera-net.sock","pid":812,"start_time":90412,"owner_uid":0,"policy":{"uids":[1000],"gids":[]},"alive":true}"#,
        )
        .unwrap();
        assert_eq!((info.entry.process.pid, info.alive), (812, true));
    }

    #[test]
    fn the_documented_workgroup_requests_parse() {
        let open: RequestLine = serde_json::from_str(
            r#"{"v":1,"id":5,"op":"open-workgroup","name":"jack","create":{"capacity":4,"budget":{"runtime_ns":500000,"deadline_ns":2666666,"period_ns":2666666}}}"#,
        )
        .unwrap();
        assert_eq!(
            open.request,
            Request::OpenWorkgroup {
                name: "jack".into(),
                create: Some(WorkgroupShape {
                    capacity: 4,
                    budget: Budget::new(500_000, 2_666_666),
                    core: None,
                    for_process: None,
                })
            }
        );
        let join: RequestLine =
            serde_json::from_str(r#"{"v":1,"op":"join-workgroup","name":"jack","tid":4242}"#)
                .unwrap();
        assert_eq!(
            join.request,
            Request::JoinWorkgroup {
                name: "jack".into(),
                tid: 4242
            }
        );
        assert!(serde_json::from_str::<RequestLine>(
            r#"{"v":1,"op":"leave-workgroup","name":"jack","tid":4242}"#
        )
        .is_ok());
        assert!(
            serde_json::from_str::<RequestLine>(r#"{"v":1,"op":"join-workgroup","name":"jack"}"#)
                .is_err(),
            "a join names its thread"
        );
    }

    #[test]
    fn unknown_operations_and_missing_fields_are_refused() {
        assert!(serde_json::from_str::<RequestLine>(r#"{"v":1,"op":"launch-missiles"}"#).is_err());
        assert!(serde_json::from_str::<RequestLine>(r#"{"v":1,"op":"destroy-cell"}"#).is_err());
        assert!(
            serde_json::from_str::<RequestLine>(r#"{"op":"status"}"#).is_err(),
            "the version is required"
        );
    }
}
