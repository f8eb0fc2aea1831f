//! The application share of a program followed into a cell (`tessera cell
//! exec`, `cell attach --follow`): its busy threads that are not real-time
//! get reservations of their own beside the cell's — the mechanism and its
//! cost are [`crate::share`]'s — each in a cell `<cell>-app-<tid>` bound to
//! the follower's process, on the cores of the cell's own reservations (or
//! global when the cell's are), adapted once a window to what the thread
//! used, never below its part of the floor. All of a window's changes go
//! to the broker as one decision.
//!
//! It owns those cells and nothing else: it must never touch a thread it
//! did not put in one, and it gives every one back on [`ShareCells::release_all`].

use crate::share::{self, AppShare, Busy, Sampled};
use crate::GuardError;
use std::collections::BTreeMap;
use tessera_broker::Session;
use tessera_policy::application::share_wanted;
use tessera_policy::{Adaptive, AdaptiveConfig, Bandwidth, Budget, CellRequest, Placement};
use tessera_sys::proc::{Pid, ThreadUsage};
use tessera_sys::sched::Tid;

/// One thread in its share cell.
struct ShareCell {
    pid: Pid,
    cell: String,
    controller: Adaptive,
    usage: ThreadUsage,
    set: Budget,
}

/// The share cells of one followed program.
pub struct ShareCells {
    share: AppShare,
    parent: String,
    /// The core of the parent cell's reservations; None: global.
    core: Option<usize>,
    busy: Busy,
    cells: BTreeMap<Tid, ShareCell>,
}

/// A thread just given its share.
pub struct Opened {
    pub cell: String,
    pub used: Bandwidth,
    pub budget: Budget,
}

impl ShareCells {
    pub fn new(share: AppShare, parent: &str, core: Option<usize>) -> ShareCells {
        ShareCells {
            share,
            parent: parent.to_string(),
            core,
            busy: Busy::default(),
            cells: BTreeMap::new(),
        }
    }

    /// Once a window, what the candidates used; the busy ones are returned
    /// for the caller to take out of wherever they are and [`Self::open`].
    pub fn busy(&mut self, candidates: &[(Pid, Tid)]) -> Vec<Sampled> {
        let sampled = self.busy.sample(candidates).unwrap_or_default();
        sampled.into_iter().filter(Sampled::is_busy).collect()
    }

    /// Gives thread `tid` a share cell sized to what it `used`.
    pub fn open(
        &mut self,
        session: &mut Session,
        pid: Pid,
        tid: Tid,
        used: Bandwidth,
    ) -> Result<Opened, GuardError> {
        let cell = format!("{}-app-{tid}", self.parent);
        let mut controller = share_controller()?;
        controller.observe(used.runtime_in(share::PERIOD_NS), 1);
        let opening = Budget::new(controller.bounds().0, share::PERIOD_NS);
        let mut request =
            CellRequest::event_triggered(&cell, opening.runtime_ns, opening.period_ns);
        match self.core {
            Some(core) => request = request.on_cores(vec![core]),
            None => request.placement = Placement::Global,
        }
        request.reclaim = true;
        request.owner_adapts = true;
        session.create_cell(request, true)?;
        if let Err(e) = session.attach(&cell, pid, Some(tid)) {
            let _ = session.destroy_cell(&cell);
            return Err(e.into());
        }
        self.cells.insert(
            tid,
            ShareCell {
                pid,
                cell: cell.clone(),
                controller,
                usage: ThreadUsage::kept_open(pid, tid),
                set: opening,
            },
        );
        self.resize(session, &[tid]);
        Ok(Opened {
            cell,
            used,
            budget: self.cells[&tid].set,
        })
    }

    /// Feeds each share's controller what its thread used since the last
    /// time (at most once a window) and applies the budgets wanted, in one
    /// request.
    pub fn adapt(&mut self, session: &mut Session) {
        let mut due = Vec::new();
        for (&tid, c) in self.cells.iter_mut() {
            if c.usage.age() < share::WINDOW {
                continue;
            }
            if let Ok(delta) = c.usage.advance(false) {
                let periods = delta.elapsed_ns / share::PERIOD_NS;
                c.controller.observe(delta.cpu_ns, periods.max(1));
                due.push(tid);
            }
        }
        self.resize(session, &due);
    }

    /// Asks for what each of `tids` wants, raised to its part of the floor,
    /// as one admission decision (degraded to what fits).
    fn resize(&mut self, session: &mut Session, tids: &[Tid]) {
        let floor = share_wanted(Bandwidth::ZERO, self.share.floor, self.cells.len(), 0)
            .runtime_in(share::PERIOD_NS);
        let asks: Vec<(Tid, Budget)> = tids
            .iter()
            .filter_map(|tid| {
                let c = self.cells.get(tid)?;
                let wanted = c.controller.wanted();
                let target = Budget::new(wanted.runtime_ns.max(floor), wanted.period_ns);
                Some((*tid, c.controller.update_to(target)?))
            })
            .collect();
        if asks.is_empty() {
            return;
        }
        let changes = asks
            .iter()
            .map(|(tid, budget)| (self.cells[tid].cell.as_str(), *budget));
        let Ok(reply) = session.resize_cells(changes, true) else {
            return;
        };
        for ((tid, _), result) in asks.iter().zip(reply.results) {
            if let (Some(c), Ok(granted)) = (self.cells.get_mut(tid), result) {
                c.controller.granted(granted.budget, granted.degraded);
                c.set = granted.budget;
            }
        }
    }

    /// Takes thread `tid` out of its share (the program set its own policy,
    /// or it exited): it keeps a policy its program set since.
    pub fn release(&mut self, session: &mut Session, tid: Tid) -> bool {
        let Some(c) = self.cells.remove(&tid) else {
            return false;
        };
        let _ = session.detach(tid);
        let _ = session.destroy_cell(&c.cell);
        true
    }

    /// Every share given back.
    pub fn release_all(&mut self, session: &mut Session) -> Vec<(Pid, Tid)> {
        let tids: Vec<(Pid, Tid)> = self.cells.iter().map(|(&t, c)| (c.pid, t)).collect();
        for &(_, tid) in &tids {
            self.release(session, tid);
        }
        tids
    }
}

/// A share's controller, with the guard's default settings.
fn share_controller() -> Result<Adaptive, GuardError> {
    share::controller(AdaptiveConfig::default(), share::PERIOD_NS)
        .map_err(|e| crate::fail(format!("share budget: {e}"), e.fix.clone()))
}
