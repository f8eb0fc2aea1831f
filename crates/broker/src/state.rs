//! The broker's persistent state: the ledger, every cell's owner and members
//! with what each member's scheduling looked like before tessera touched it,
//! the machine settings to restore, and the registered services. Saved
//! atomically after every change so that a broker killed at any point
//! recovers.
//!
//! It must never hold anything that cannot be re-derived or restored: no
//! file descriptors, no raw pointers, only facts.

use crate::registry::Services;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use tessera_policy::Ledger;
use tessera_sys::sched::Policy;

pub const STATE_VERSION: u32 = 1;

/// A process identified across PID reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: i32,
    pub start_time: u64,
}

impl ProcessId {
    pub fn of(pid: i32) -> tessera_sys::Result<ProcessId> {
        Ok(ProcessId {
            pid,
            start_time: tessera_sys::proc::start_time(pid)?,
        })
    }

    pub fn is_alive(&self) -> bool {
        tessera_sys::proc::is_same_process(self.pid, self.start_time)
    }
}

/// Who owns a cell: a user, and unless the cell is persistent, the process
/// whose exit releases it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub uid: u32,
    pub process: Option<ProcessId>,
}

/// A thread's scheduling before it joined a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Original {
    pub policy: Policy,
    pub affinity: Vec<usize>,
    /// cpuset path relative to the hierarchy's root, if it was moved.
    pub cpuset: Option<String>,
    /// cpu-controller path, if it was moved.
    pub cpu_group: Option<String>,
}

/// A thread in a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub pid: i32,
    pub tid: i32,
    /// Identifies the thread across TID reuse.
    pub start_time: u64,
    /// Index of the reservation it holds (bandwidth cells).
    pub slot: Option<usize>,
    pub original: Original,
}

impl Member {
    pub fn is_alive(&self) -> bool {
        tessera_sys::proc::is_same_process(self.tid, self.start_time)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellState {
    pub owner: Owner,
    pub members: Vec<Member>,
    pub created_unix: u64,
    /// What the cell's programs reported so far (absent from state files
    /// written before monitoring existed).
    #[serde(default)]
    pub reported: Reported,
}

/// Deadline misses and xruns a cell's programs reported, cumulative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Reported {
    pub misses: u64,
    pub xruns: u64,
}

/// A thread running real-time without a reservation, so that nothing
/// guarantees it CPU time: admission refused it, and RTKit's fallback
/// (`rtkit_fallback = "fifo"`) left it on SCHED_RR. Reported by what
/// granted it (`tessera_rtkit`) through [`crate::Broker::set_unguaranteed`],
/// and kept in the state so that a restarted daemon still labels it and
/// still tries it for a reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnguaranteedThread {
    pub pid: i32,
    pub tid: i32,
    pub uid: u32,
    pub name: String,
    /// Its SCHED_RR priority.
    pub priority: u32,
    /// Why it holds no reservation: admission's refusal.
    pub why: String,
}

/// Machine settings found before tessera changed them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Snapshot {
    /// The cpuset root's sched_load_balance (v1).
    pub root_load_balance: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub version: u32,
    pub ledger: Ledger,
    pub cells: BTreeMap<String, CellState>,
    pub snapshot: Snapshot,
    /// Absent from state files written before services existed.
    #[serde(default)]
    pub services: Services,
    /// Absent from state files written before RTKit's fallback was kept.
    #[serde(default)]
    pub unguaranteed: Vec<UnguaranteedThread>,
}

impl State {
    pub fn new(ledger: Ledger) -> State {
        State {
            version: STATE_VERSION,
            ledger,
            cells: BTreeMap::new(),
            snapshot: Snapshot::default(),
            services: Services::default(),
            unguaranteed: Vec::new(),
        }
    }

    /// Loads a state file; `Ok(None)` when there is none.
    pub fn load(path: &Path) -> Result<Option<State>, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("read {}: {e}", path.display())),
        };
        let state: State = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{} is not a tessera state file ({e}); `tessera reset` restores the machine and starts afresh",
                path.display()
            )
        })?;
        if state.version != STATE_VERSION {
            return Err(format!(
                "{} has state version {}, this tessera reads {}; run `tessera reset` with the tessera that wrote it",
                path.display(),
                state.version,
                STATE_VERSION
            ));
        }
        Ok(Some(state))
    }

    /// Writes the state atomically (`tessera_sys::file::replace`).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        tessera_sys::file::replace(path, text.as_bytes())
    }
}
