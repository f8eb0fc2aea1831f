//! Joining threads to a cell: which broker to ask (the daemon, or an
//! embedded broker at given paths), and the thread-start hook that joins the
//! calling thread to the cell's reservation and locks memory.
//!
//! It owns the way to a [`Session`]. It must never decide what a cell gets:
//! the broker does.

use std::sync::Arc;

use tessera_broker::paths::Paths;
use tessera_broker::{BrokerError, Session};

type Connect = dyn Fn() -> Result<Session, BrokerError> + Send + Sync;

/// A cell to join, and how to reach its broker.
#[derive(Clone)]
pub struct CellJoin {
    cell: String,
    connect: Arc<Connect>,
}

impl std::fmt::Debug for CellJoin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellJoin")
            .field("cell", &self.cell)
            .finish()
    }
}

impl CellJoin {
    /// `cell` of the broker [`Session::connect`] finds (the daemon, else an
    /// embedded broker at `TESSERA_RUN_DIR` or the default run directory).
    pub fn connect(cell: impl Into<String>) -> CellJoin {
        CellJoin::with(cell, Session::connect)
    }

    /// `cell` of the embedded broker whose state lives at `paths`.
    pub fn embedded(cell: impl Into<String>, paths: Paths) -> CellJoin {
        CellJoin::with(cell, move || Ok(Session::embedded(paths.clone())))
    }

    /// `cell` of the broker `connect` opens a session to.
    pub fn with(
        cell: impl Into<String>,
        connect: impl Fn() -> Result<Session, BrokerError> + Send + Sync + 'static,
    ) -> CellJoin {
        CellJoin {
            cell: cell.into(),
            connect: Arc::new(connect),
        }
    }

    pub fn cell(&self) -> &str {
        &self.cell
    }

    pub fn session(&self) -> Result<Session, BrokerError> {
        (self.connect)()
    }

    /// Joins the calling thread to the cell (its reservation slot, cpuset).
    pub fn join_current_thread(&self) -> Result<(), BrokerError> {
        self.session()?.join_current_thread(&self.cell)
    }

    /// A thread-start hook for engines that create their own threads (the
    /// graph engine's `ThreadSetup` wraps it): joins the calling thread to
    /// the cell and locks the process's memory.
    pub fn hook(&self) -> impl Fn() -> Result<(), String> + Send + Sync + Clone {
        let join = self.clone();
        move || {
            join.join_current_thread()
                .map_err(|e| format!("join cell {:?}: {e}", join.cell))?;
            tessera_sys::mem::lock_all_memory().map_err(|e| e.to_string())
        }
    }
}

/// [`CellJoin::hook`] for `cell` of the broker [`Session::connect`] finds.
pub fn join_hook(cell: &str) -> impl Fn() -> Result<(), String> + Send + Sync + Clone {
    CellJoin::connect(cell).hook()
}
