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

use crate::facts::Mode;
use crate::state::Member;
use serde::{Deserialize, Serialize};
use tessera_policy::{Bandwidth, CellRequest, CoreUsage, Grant};

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
    /// Join process `pid`'s threads (all, or only `tid`) to `cell`.
    Attach {
        cell: String,
        pid: i32,
        #[serde(default)]
        tid: Option<i32>,
    },
    /// Take a thread out of its cell, restoring its scheduling.
    Detach {
        tid: i32,
    },
    Status,
    /// Destroy every cell and restore the machine (root only).
    Reset,
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

/// A structured error: a stable code, the problem, and the fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    pub code: String,
    pub message: String,
    #[serde(default)]
    pub fix: String,
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
    pub error: Option<WireError>,
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

/// The answer to `Hello`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelloReply {
    pub protocol: u32,
    pub version: String,
    pub mode: Mode,
    pub pid: i32,
}
