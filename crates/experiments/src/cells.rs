//! The cells of one configuration and the setup of the threads that join
//! them (a scenario cell's name in this run, a role's scheduling, the setup
//! hook of a thread scheduled by a configuration): cells are created bound to this process through
//! `tessera_broker::Session` and destroyed when the guard drops — after the
//! configuration, on error, on panic — so that no run leaks bandwidth into
//! the next; and which threads were set up by a subject.
//!
//! A leaf of this crate. It must never decide what a configuration asks
//! for: callers do.

use std::sync::{Arc, Mutex};
use tessera_broker::{BrokerError, CellInfo, Session};
use tessera_policy::CellRequest;
use tessera_scenario::{Configuration, Sched};
use tessera_sys::sched::{self, Policy};

/// Cells created for one configuration, destroyed (newest first) on drop.
#[derive(Default)]
pub struct Cells(Vec<String>);

impl Cells {
    /// Creates a cell bound to this process and remembers to destroy it.
    pub fn create(
        &mut self,
        session: &mut Session,
        request: CellRequest,
    ) -> Result<CellInfo, BrokerError> {
        let name = request.name.clone();
        let info = session.create_cell(request, true)?;
        self.0.push(name);
        Ok(info)
    }
}

impl Cells {
    /// Destroys the cells now (newest first), retrying once: a thread that
    /// just left can still hold the cell for an instant. Returns what could
    /// not be destroyed, so that the run reports it.
    pub fn destroy(&mut self) -> Vec<String> {
        let mut failures = Vec::new();
        let Ok(mut session) = Session::connect() else {
            return vec!["no broker to destroy the cells".into()];
        };
        while let Some(name) = self.0.pop() {
            let first = session.destroy_cell(&name);
            if first.is_err() {
                std::thread::sleep(std::time::Duration::from_millis(200));
                if let Err(e) = session.destroy_cell(&name) {
                    failures.push(format!("cell {name:?} not destroyed: {e}"));
                }
            }
        }
        failures
    }
}

impl Drop for Cells {
    fn drop(&mut self) {
        self.destroy();
    }
}

/// Sets up the calling thread: joins `cell` (through a session of its own),
/// or is pinned to `core`; then SCHED_FIFO at `fifo` if given.
pub fn setup_thread(
    cell: Option<&str>,
    fifo: Option<u32>,
    core: Option<usize>,
) -> Result<(), String> {
    match (cell, core) {
        (Some(c), _) => Session::connect()
            .and_then(|mut s| s.join_current_thread(c))
            .map_err(|e| e.to_string())?,
        (None, Some(core)) => {
            tessera_sys::affinity::set_affinity(0, &[core]).map_err(|e| e.to_string())?
        }
        (None, None) => {}
    }
    if let Some(priority) = fifo {
        sched::set_policy(0, &Policy::Fifo { priority }).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The real name of a scenario cell in this run (cells are machine-global).
pub(crate) fn cell_name(name: &str) -> String {
    format!("sc-{name}-{}", std::process::id())
}

/// The setup of a thread scheduled by `sched`.
pub(crate) fn setup_for(
    sched: &Sched,
    core: Option<usize>,
) -> impl FnOnce() -> Result<(), String> + Send + Clone {
    let cell = sched.cell.as_deref().map(cell_name);
    let fifo = sched.fifo;
    move || setup_thread(cell.as_deref(), fifo, core)
}

/// The scheduling of `role` in `config`: its own entry, else the subject's.
pub(crate) fn role<'a>(config: &'a Configuration, name: &str) -> &'a Sched {
    own_role(config, name).unwrap_or(&config.subject)
}

/// `role`'s own entry in `config`, if it has one.
pub(crate) fn own_role<'a>(config: &'a Configuration, name: &str) -> Option<&'a Sched> {
    config.roles.iter().find(|(r, _)| r == name).map(|(_, s)| s)
}

/// The threads whose setup ran, as they ran it: the tids a subject's
/// [`crate::subject::Running::watched`] names.
#[derive(Clone, Default)]
pub(crate) struct SetUp(Arc<Mutex<Vec<i32>>>);

impl SetUp {
    /// `setup`, then the calling thread remembered.
    pub(crate) fn recording(
        &self,
        setup: impl FnOnce() -> Result<(), String> + Send + Clone,
    ) -> impl FnOnce() -> Result<(), String> + Send + Clone {
        let threads = self.clone();
        move || {
            setup()?;
            if let Ok(mut tids) = threads.0.lock() {
                tids.push(tessera_sys::proc::current_tid());
            }
            Ok(())
        }
    }

    pub(crate) fn tids(&self) -> Vec<i32> {
        self.0.lock().map(|t| t.clone()).unwrap_or_default()
    }
}
