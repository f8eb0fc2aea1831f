//! The broker's operations on its state and the kernel: create, resize and
//! destroy cells, attach and detach threads, reap dead clients, recover after a
//! crash, reset the machine; register, look up and list services.
//!
//! Every operation either completes and is persisted, or fails with a
//! [`BrokerError`] and leaves ledger, state and kernel as they were. It must
//! never make a decision the policy layer should make, and never touch the
//! kernel except through `placement`, `layout` and `tessera-sys`.

use crate::config::Config;
use crate::error::{BrokerError, ErrorCode};
use crate::facts::{Facts, Mode};
use crate::layout::{Layout, Shape};
use crate::monitor::{CellFacts, CellSample, Monitor, Sample};
use crate::paths::Paths;
use crate::placement::{self, Enforcement};
use crate::protocol::{
    BudgetChange, CellInfo, MemberBudget, ResizeCellsReply, ResizeMembersReply, ResizeReply,
    StatusReport,
};
use crate::registry::{self, ServiceEntry, ServiceInfo};
use crate::state::{CellState, Member, Owner, ProcessId, Reported, State, UnguaranteedThread};
use crate::stranded::{stranded_after, Progress};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use tessera_policy::rap::{self, CellView, RapConfig};
use tessera_policy::{
    largest_fitting, Bandwidth, Budget, CellPolicy, CellRequest, Grant, Ledger, Placement, Refusal,
    Resized,
};
use tessera_sys::cgroup::Hierarchy;
use tessera_sys::ipc::PeerCredentials;
use tessera_sys::proc::{self, Liveness};
use tessera_sys::sched::{self, Policy};

fn unknown_cell(name: &str) -> BrokerError {
    BrokerError::new(
        ErrorCode::NotFound,
        format!("no cell named {name:?}"),
        "`tessera cell list` shows the cells",
    )
}

/// What `reset` undid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ResetReport {
    pub cells_destroyed: Vec<String>,
    pub threads_restored: usize,
    pub groups_removed: usize,
    pub deadline_threads_demoted: Vec<i32>,
}

pub type Outcome<T> = Result<T, BrokerError>;

/// The broker: state, machine facts and what it may enforce.
pub struct Broker {
    pub facts: Facts,
    pub paths: Paths,
    pub config: Config,
    /// "daemon (pid N)" or "embedded (pid N)", for status.
    pub label: String,
    state: State,
    enf: Enforcement,
    monitor: Monitor,
    /// Adaptation rounds since each cell's last change or miss.
    calm: BTreeMap<String, u32>,
    /// Budget changes not yet saved, since when (see [`Broker::defer_budget_saves`]).
    unsaved_since: Option<Instant>,
    /// How long budget changes may wait to be saved; None: saved at once.
    budget_save_delay: Option<Duration>,
    /// The reaper's view of owners and members, each checked through a
    /// /proc file kept open.
    liveness: Liveness,
    /// Since when each member's CPU time stood still ([`stranded`]).
    progress: Progress,
    /// When the reaper last read every member ([`MEMBERS_EVERY`]).
    members_read: Option<Instant>,
}

/// How often the reaper reads every member's liveness (and CPU time), when
/// it looks at the owners at each call (the daemon's every 200 ms): a cell's
/// owner exiting frees its bandwidth and cores, which a newcomer may be
/// waiting for; a member that exited holds only its own reservation until
/// then, and its owner (a guard, a workgroup's controller) lets go of it
/// itself. With 65 members read five times a second the reaper was a
/// third of a point of a CPU (`bench guard-scale`, 2026-12-02).
pub const MEMBERS_EVERY: Duration = Duration::from_secs(1);

fn enforcement(mode: &Mode) -> Enforcement {
    match mode {
        Mode::Guaranteed => {
            let (layout, layout_missing) = match Layout::detect() {
                Ok(layout) => (Some(layout), None),
                Err(e) => (None, Some(e.to_string())),
            };
            Enforcement {
                layout,
                layout_missing,
                cpu: Hierarchy::cpu().ok(),
                deadline: true,
            }
        }
        Mode::ReservationsOnly => Enforcement {
            deadline: true,
            ..Enforcement::none()
        },
        Mode::BestEffort => Enforcement::none(),
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Broker {
    /// Opens the broker's state (creating it on first use; the caller holds
    /// the lock, which made the directory) and recovers:
    /// dead clients' cells are released, live ones re-checked on the kernel.
    pub fn open(paths: Paths, config: Config, label: String) -> Outcome<(Broker, Vec<String>)> {
        let facts = Facts::detect()?;
        let loaded = State::load(&paths.state())
            .map_err(|e| BrokerError::new(ErrorCode::State, e, "run `tessera reset`"))?;
        let enf = enforcement(&facts.mode);
        let fresh = State::new(Ledger::new(facts.machine.clone()));
        let monitor = Monitor::open(paths.monitor());
        let mut broker = Broker {
            facts,
            paths,
            config,
            label,
            state: fresh,
            enf,
            monitor,
            calm: BTreeMap::new(),
            unsaved_since: None,
            budget_save_delay: None,
            liveness: Liveness::default(),
            progress: Progress::default(),
            members_read: None,
        };
        let notes = match loaded {
            Some(old) => broker.recover(old),
            None => Vec::new(),
        };
        broker.persist()?;
        Ok((broker, notes))
    }

    /// Takes the state another live broker saved (an embedded one in
    /// another process, between two of this one's operations), as it
    /// saved it: that broker applied it to the kernel, so nothing is
    /// re-applied ([`Broker::open`] re-admits and re-places every member,
    /// which a crash's leftovers need and a hand-off does not). Cells of
    /// owners that died meanwhile go at the next [`Broker::reap`].
    pub fn reload(&mut self) -> Outcome<()> {
        let loaded = State::load(&self.paths.state())
            .map_err(|e| BrokerError::new(ErrorCode::State, e, "run `tessera reset`"))?;
        self.state = loaded.unwrap_or_else(|| State::new(Ledger::new(self.facts.machine.clone())));
        self.unsaved_since = None;
        Ok(())
    }

    pub fn mode(&self) -> &Mode {
        &self.facts.mode
    }

    /// Lets budget changes (`resize-cell`, `resize-cells`) wait up to
    /// `delay` to be saved, [`Broker::save_if_due`] saving them: a daemon
    /// serving a guard of 64 threads, or a workgroup's controller fed every
    /// cycle, would otherwise write its whole state several times a second.
    /// A crash loses at most `delay` of budget changes; recovery re-admits
    /// the cells at the budgets saved, and their owners adapt them again.
    pub fn defer_budget_saves(&mut self, delay: Duration) {
        self.budget_save_delay = Some(delay);
    }

    /// Saves budget changes that waited long enough.
    pub fn save_if_due(&mut self) -> Outcome<()> {
        match (self.unsaved_since, self.budget_save_delay) {
            (Some(since), Some(delay)) if since.elapsed() >= delay => self.persist(),
            _ => Ok(()),
        }
    }

    /// Saves the budget changes still waiting ([`Broker::defer_budget_saves`]):
    /// a daemon stopping cleanly loses none.
    pub fn save_unsaved(&mut self) -> Outcome<()> {
        match self.unsaved_since {
            Some(_) => self.persist(),
            None => Ok(()),
        }
    }

    /// Saves a budget change now, or marks it for [`Broker::save_if_due`].
    fn persist_soon(&mut self) -> Outcome<()> {
        match self.budget_save_delay {
            Some(_) => {
                self.unsaved_since.get_or_insert_with(Instant::now);
                Ok(())
            }
            None => self.persist(),
        }
    }

    fn persist(&mut self) -> Outcome<()> {
        self.unsaved_since = None;
        self.state.save(&self.paths.state()).map_err(|e| {
            BrokerError::new(
                ErrorCode::State,
                format!("write {}: {e}", self.paths.state().display()),
                "check free space and permissions",
            )
        })
    }

    /// Re-admits the cells of a saved state on this machine: cells whose
    /// owner died are released, members that died are dropped, live members
    /// are checked against the kernel and re-placed if they drifted.
    fn recover(&mut self, old: State) -> Vec<String> {
        let mut notes = Vec::new();
        self.state.snapshot = old.snapshot.clone();
        // Services are processes of their own: stale ones go on lookup.
        self.state.services = old.services.clone();
        // RTKit's fallback threads: their granter checks them on taking
        // them back (Grants::new).
        self.state.unguaranteed = old.unguaranteed.clone();
        let mut survivors = Vec::new();
        for (name, cell) in old.cells {
            let Some(grant) = old.ledger.grant(&name).cloned() else {
                continue;
            };
            let owner_dead = cell.owner.process.is_some_and(|p| !p.is_alive());
            if owner_dead {
                for m in &cell.members {
                    let _ = placement::restore(m, &self.enf);
                }
                notes.push(format!(
                    "released cell {name:?}: its process {} exited",
                    cell.owner.process.map(|p| p.pid).unwrap_or(0)
                ));
                continue;
            }
            match self.state.ledger.restore(grant) {
                Ok(()) => survivors.push((name, cell)),
                Err(refusal) => {
                    for m in &cell.members {
                        let _ = placement::restore(m, &self.enf);
                    }
                    notes.push(format!(
                        "released cell {name:?}: it no longer fits this machine ({})",
                        refusal.reason
                    ));
                }
            }
        }
        for (name, mut cell) in survivors {
            let before = cell.members.len();
            cell.members.retain(Member::is_alive);
            if cell.members.len() < before {
                notes.push(format!(
                    "cell {name:?}: {} exited thread(s) dropped",
                    before - cell.members.len()
                ));
            }
            self.state.cells.insert(name, cell);
        }
        if let Err(e) = self.apply_layout() {
            notes.push(format!("could not restore the cpuset layout: {e}"));
        }
        notes.extend(self.replace_drifted());
        notes
    }

    /// Re-applies members whose kernel scheduling no longer matches their cell.
    fn replace_drifted(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        let names: Vec<String> = self.state.cells.keys().cloned().collect();
        for name in names {
            let Some(grant) = self.state.ledger.grant(&name).cloned() else {
                continue;
            };
            let members = self.state.cells[&name].members.clone();
            for m in members {
                let Ok(t) = placement::target(&grant, m.slot, &self.state.ledger, &self.enf) else {
                    continue;
                };
                let drifted = match (&t.policy, sched::get_policy(m.tid)) {
                    (Some(want), Ok(have)) => *want != have,
                    _ => false,
                };
                let result = if drifted {
                    placement::join(&m, &t, &self.enf)
                } else {
                    placement::rehome(&m, &t, &self.enf)
                };
                if let Err(e) = result {
                    notes.push(format!(
                        "cell {name:?}: thread {} could not be re-placed: {e}",
                        m.tid
                    ));
                }
            }
        }
        notes
    }

    fn apply_layout(&mut self) -> Outcome<()> {
        if let Some(layout) = &self.enf.layout {
            layout.apply(&self.state.ledger, &mut self.state.snapshot)?;
        }
        Ok(())
    }

    fn needs_layout(req: &CellRequest) -> bool {
        req.policy == CellPolicy::Dedicated
            || (req.policy.needs_budget() && req.placement == Placement::Partitioned)
    }

    /// Why a cell that needs cpusets cannot have them, and the way out.
    fn no_cpusets(&self, req: &CellRequest) -> BrokerError {
        let (why, fix) = match &self.enf.layout_missing {
            // Root, yet no cpuset controller where we looked: a mount
            // namespace without cgroup2 (`ip netns exec` remounts /sys).
            Some(missing) => (
                format!("and none is mounted here: {missing}"),
                "in a network namespace, enter only its network (`nsenter \
                 --net=/run/netns/NAME`: `ip netns exec` hides the machine's cgroups), or use \
                 --placement global for an event-triggered cell",
            ),
            None => (
                "which need root".to_string(),
                "run as root, or use --placement global for an event-triggered cell",
            ),
        };
        BrokerError::new(
            ErrorCode::Refused,
            format!(
                "cell {:?} refused: a {} cell needs cpusets, {why}",
                req.name,
                describe(req)
            ),
            fix,
        )
    }

    /// Admits and creates a cell.
    pub fn create_cell(&mut self, req: CellRequest, owner: Owner) -> Outcome<CellInfo> {
        let name = req.name.clone();
        self.admit_cell(req, owner)?;
        self.persist()?;
        self.show(&name)
    }

    /// Admits and creates a cell for one thread of `pid` and attaches it,
    /// saving the state once (a realtime request waits for each save,
    /// 0.1–0.3 ms here: `tessera_sys::file::replace`). A thread that cannot
    /// be attached leaves no cell behind.
    pub fn create_cell_for_thread(
        &mut self,
        req: CellRequest,
        owner: Owner,
        pid: i32,
        tid: i32,
    ) -> Outcome<()> {
        let (name, uid) = (req.name.clone(), owner.uid);
        self.admit_cell(req, owner)?;
        if let Err(e) = self.attach(&name, pid, Some(tid), uid) {
            let _ = self.destroy_cell(&name, 0);
            return Err(e);
        }
        Ok(())
    }

    /// [`Broker::create_cell`] but for the save.
    fn admit_cell(&mut self, req: CellRequest, owner: Owner) -> Outcome<()> {
        if self.enf.layout.is_none()
            && self.facts.mode != Mode::BestEffort
            && Self::needs_layout(&req)
        {
            return Err(self.no_cpusets(&req));
        }
        self.check_quota(&req, owner.uid)?;
        let shape = Layout::shape(&self.state.ledger);
        let (_, gave_way) = self.state.ledger.insert_making_way(&req).map_err(|r| {
            BrokerError::new(
                ErrorCode::Refused,
                format!("cell {:?} refused: {}", r.cell, r.reason),
                r.would_fit.unwrap_or_default(),
            )
        })?;
        let result = self
            .apply_layout()
            .and_then(|()| self.make_weight_group(&req));
        if let Err(e) = result {
            self.state.ledger.release(&req.name);
            self.put_back_those_that_gave_way(&gave_way);
            let _ = self.apply_layout();
            return Err(e);
        }
        // The new cell has no member yet: the kernel sees its reservation
        // when a thread attaches, after the smaller ones that make its room.
        let name = req.name.clone();
        let retuned = self.retune_those_that_gave_way(&gave_way, |ledger| {
            ledger.release(&name);
        });
        if let Err(e) = retuned {
            let _ = self.apply_layout();
            return Err(e);
        }
        self.state.cells.insert(
            req.name.clone(),
            CellState {
                owner,
                members: Vec::new(),
                created_unix: now_unix(),
                reported: Default::default(),
            },
        );
        self.rehome_if_reshaped(&shape);
        Ok(())
    }

    fn make_weight_group(&self, req: &CellRequest) -> Outcome<()> {
        if req.policy != CellPolicy::BestEffort || req.weight == placement::DEFAULT_WEIGHT {
            return Ok(());
        }
        if let Some(parent) = self.enf.weight_parent() {
            parent.create(&["cpu"])?;
        }
        if let Some(g) = self.enf.weight_group(&req.name) {
            g.create(&["cpu"])?;
            g.set_weight(req.weight)?;
        }
        Ok(())
    }

    fn remove_weight_group(&self, name: &str) {
        if let Some(g) = self.enf.weight_group(name) {
            let _ = g.remove();
        }
        // The shared parent goes with the last weight group.
        if let Some(parent) = self.enf.weight_parent().filter(|p| p.children().is_empty()) {
            let _ = parent.remove();
        }
    }

    fn check_quota(&self, req: &CellRequest, uid: u32) -> Outcome<()> {
        let Some(quota) = self.config.quota_of(uid) else {
            return Ok(());
        };
        let held: Bandwidth = self
            .state
            .cells
            .iter()
            .filter(|(_, c)| c.owner.uid == uid)
            .filter_map(|(n, _)| self.state.ledger.grant(n))
            .flat_map(|g| g.reservations.iter().map(|r| r.budget.bandwidth()))
            .sum();
        let asked: Bandwidth = req
            .budget
            .map(|b| b.bandwidth().times(req.cores.count() as u64))
            .unwrap_or_default();
        let dedicated = if req.policy == CellPolicy::Dedicated {
            Bandwidth::ONE.times(req.cores.count() as u64)
        } else {
            Bandwidth::ZERO
        };
        if held + asked + dedicated > quota {
            let user = crate::config::user_name(uid).unwrap_or_else(|| uid.to_string());
            return Err(BrokerError::new(
                ErrorCode::Quota,
                format!(
                    "cell {:?} refused: user {user} (uid {uid}) holds {held} and asks {} more, over their quota of {quota}",
                    req.name,
                    asked + dedicated
                ),
                "ask for less, destroy another of your cells, or raise the quota in /etc/tessera/daemon.toml",
            ));
        }
        Ok(())
    }

    fn cell_owned_by(&self, name: &str, uid: u32) -> Outcome<&CellState> {
        let cell = self
            .state
            .cells
            .get(name)
            .ok_or_else(|| unknown_cell(name))?;
        if uid != 0 && cell.owner.uid != uid {
            return Err(BrokerError::new(
                ErrorCode::Permission,
                format!(
                    "cell {name:?} belongs to uid {}, not to you (uid {uid})",
                    cell.owner.uid
                ),
                "only a cell's owner or root may change it",
            ));
        }
        Ok(cell)
    }

    /// Destroys a cell: its threads get their scheduling back, its bandwidth
    /// returns to the ledger, its shielding is undone.
    pub fn destroy_cell(&mut self, name: &str, uid: u32) -> Outcome<()> {
        let cell = self.cell_owned_by(name, uid)?.clone();
        let shape = Layout::shape(&self.state.ledger);
        let mut first_error = None;
        for m in &cell.members {
            if let Err(e) = placement::restore(m, &self.enf) {
                first_error.get_or_insert(e);
            }
        }
        self.state.cells.remove(name);
        self.state.ledger.release(name);
        self.remove_weight_group(name);
        self.apply_layout()?;
        self.rehome_if_reshaped(&shape);
        self.persist()?;
        match first_error {
            Some(e) => Err(BrokerError::from(e)),
            None => Ok(()),
        }
    }

    /// Changes a bandwidth cell's budget through admission — with `degrade`,
    /// cut to the largest runtime that fits instead of refused — and gives
    /// every member the new reservation. On a kernel failure the ledger and
    /// the members go back to the old budget and the error is returned.
    pub fn resize_cell(
        &mut self,
        name: &str,
        budget: Budget,
        degrade: bool,
        uid: u32,
    ) -> Outcome<ResizeReply> {
        let reply = self.resize_unsaved(name, budget, degrade, uid)?;
        self.persist_soon()?;
        Ok(reply)
    }

    /// Several resizes as one decision, in the order given, saved once:
    /// each succeeds or fails alone (a refused one changes nothing).
    pub fn resize_cells(
        &mut self,
        changes: Vec<BudgetChange>,
        degrade: bool,
        uid: u32,
    ) -> Outcome<ResizeCellsReply> {
        let results: Vec<Outcome<ResizeReply>> = changes
            .into_iter()
            .map(|c| self.resize_unsaved(&c.name, c.budget, degrade, uid))
            .collect();
        if results.iter().any(Result::is_ok) {
            self.persist_soon()?;
        }
        Ok(ResizeCellsReply {
            results,
            cores: self.state.ledger.cores(),
            global_free: self.state.ledger.global_free(),
        })
    }

    /// Gives members of an event-triggered cell budgets of their own (a
    /// workgroup's callback and its workers), through admission as one
    /// decision; a reservation no member holds keeps room for the next
    /// member at the largest budget given, when that fits, else what it
    /// holds, else the least: an empty place never takes room from a
    /// member (on one core, §4.5's ten places at the first member's budget
    /// filled the core, capped that member, and left the server's threads
    /// beside it no room to grow: xruns from the first client on). With
    /// `degrade`, budgets that do not fit (the ledger's room or the owner's
    /// quota) are capped at the largest runtime that does. On a kernel
    /// failure the ledger and the members go back to the old budgets and
    /// the error is returned.
    pub fn resize_members(
        &mut self,
        name: &str,
        budgets: &[MemberBudget],
        degrade: bool,
        uid: u32,
    ) -> Outcome<ResizeMembersReply> {
        let before = self.held(name)?;
        let (grant, degraded) =
            self.admit_with_empty_places_giving_way(name, budgets, degrade, uid)?;
        self.retune_or_roll_back(name, before)?;
        let cell = &self.state.cells[name];
        let budgets = budgets
            .iter()
            .filter_map(|b| {
                let slot = cell.members.iter().find(|m| m.tid == b.tid)?.slot?;
                Some(MemberBudget {
                    tid: b.tid,
                    budget: grant.reservations[slot].budget,
                })
            })
            .collect();
        self.persist_soon()?;
        Ok(ResizeMembersReply { budgets, degraded })
    }

    /// [`Broker::resize_members`]' admission: the empty places at the
    /// largest budget if all fits, else as they are held, else at the
    /// least, and only then (with `degrade`) the members capped.
    fn admit_with_empty_places_giving_way(
        &mut self,
        name: &str,
        budgets: &[MemberBudget],
        degrade: bool,
        uid: u32,
    ) -> Outcome<(Grant, bool)> {
        let does_not_fit =
            |e: &BrokerError| matches!(e.code, ErrorCode::Refused | ErrorCode::Quota);
        for empty in [EmptyPlaces::Largest, EmptyPlaces::AsHeld] {
            match self.admit_members(name, budgets, empty, false, uid) {
                Err(e) if does_not_fit(&e) => continue,
                other => return other,
            }
        }
        self.admit_members(name, budgets, EmptyPlaces::Least, degrade, uid)
    }

    /// [`Broker::resize_members`]' admission with the empty places as
    /// `empty` says: the ledger's grant, and whether it was degraded
    /// (capped by the ledger or the owner's quota).
    fn admit_members(
        &mut self,
        name: &str,
        budgets: &[MemberBudget],
        empty: EmptyPlaces,
        degrade: bool,
        uid: u32,
    ) -> Outcome<(Grant, bool)> {
        let cell = self.cell_owned_by(name, uid)?;
        let slots = self.slot_budgets(name, cell, budgets, empty)?;
        let (slots, capped) = self.members_within_quota(name, slots, degrade, uid)?;
        let (grant, degraded) = self
            .state
            .ledger
            .resize_each(name, &slots, degrade)
            .map_err(refused)?;
        Ok((grant, degraded || capped))
    }

    /// One budget per reservation of `cell`: each named member's for its
    /// slot; another member's slot keeps its budget (a workgroup's members
    /// in another process have their own controller), at the named
    /// period; a slot no member holds, as `empty` says.
    fn slot_budgets(
        &self,
        name: &str,
        cell: &CellState,
        budgets: &[MemberBudget],
        empty: EmptyPlaces,
    ) -> Outcome<Vec<Budget>> {
        let grant = self
            .state
            .ledger
            .grant(name)
            .ok_or_else(|| unknown_cell(name))?;
        let largest = budgets
            .iter()
            .map(|b| b.budget)
            .max_by_key(|b| b.runtime_ns)
            .ok_or_else(|| {
                BrokerError::new(
                    ErrorCode::Invalid,
                    format!("no member's budget given for cell {name:?}"),
                    "name at least one member and its budget",
                )
            })?;
        let held: Vec<usize> = cell.members.iter().filter_map(|m| m.slot).collect();
        let mut slots: Vec<Budget> = grant
            .reservations
            .iter()
            .enumerate()
            .map(|(k, r)| match (held.contains(&k), empty) {
                (false, EmptyPlaces::Largest) => largest,
                (false, EmptyPlaces::Least) => least_place(largest.period_ns),
                _ => at_period(r.budget, largest.period_ns),
            })
            .collect();
        for b in budgets {
            let slot = cell
                .members
                .iter()
                .find(|m| m.tid == b.tid)
                .and_then(|m| m.slot)
                .ok_or_else(|| {
                    BrokerError::new(
                        ErrorCode::NotFound,
                        format!("thread {} holds no reservation of cell {name:?}", b.tid),
                        "name the cell's members (`tessera cell show`)",
                    )
                })?;
            slots[slot] = b.budget;
        }
        Ok(slots)
    }

    /// `slots` if the owner's quota allows them beside their other cells;
    /// with `degrade`, each capped at the largest runtime the quota allows
    /// (`true` when capped).
    fn members_within_quota(
        &self,
        name: &str,
        slots: Vec<Budget>,
        degrade: bool,
        uid: u32,
    ) -> Outcome<(Vec<Budget>, bool)> {
        let Some((quota, others)) = self.quota_beside(name, uid) else {
            return Ok((slots, false));
        };
        let room = quota.saturating_sub(others);
        let capped = |cap: u64| -> Vec<Budget> {
            let cut = |b: &Budget| Budget {
                runtime_ns: b.runtime_ns.min(cap),
                ..*b
            };
            slots.iter().map(cut).collect()
        };
        let total = |s: &[Budget]| s.iter().map(Budget::bandwidth).sum::<Bandwidth>();
        if total(&slots) <= room {
            return Ok((slots, false));
        }
        let min = tessera_policy::cell::MIN_RUNTIME_NS;
        let top = slots.iter().map(|b| b.runtime_ns).max().unwrap_or(min);
        let cap = largest_fitting(min, top, |cap| total(&capped(cap)) <= room);
        if let (true, Some(cap)) = (degrade, cap) {
            return Ok((capped(cap), true));
        }
        Err(BrokerError::new(
            ErrorCode::Quota,
            format!(
                "cell {name:?} cannot grow to {}: uid {uid}'s other cells hold {others} of a quota of {quota}",
                total(&slots)
            ),
            "ask for less, or with degrade for what the quota allows",
        ))
    }

    /// A resize through admission and onto the members, not yet saved.
    fn resize_unsaved(
        &mut self,
        name: &str,
        budget: Budget,
        degrade: bool,
        uid: u32,
    ) -> Outcome<ResizeReply> {
        self.cell_owned_by(name, uid)?;
        let (budget, capped) = self.resize_within_quota(name, budget, degrade, uid)?;
        let before = self.held(name)?;
        let resized = if degrade {
            self.state.ledger.resize_or_degrade(name, budget)
        } else {
            self.state.ledger.resize(name, budget).map(|grant| Resized {
                grant,
                degraded: false,
                gave_way: Vec::new(),
            })
        };
        let resized = resized.map_err(refused)?;
        let back = before.clone();
        self.retune_those_that_gave_way(&resized.gave_way, |ledger| ledger.put_back(back))?;
        self.retune_or_roll_back(name, before)?;
        Ok(ResizeReply {
            budget: resized.grant.request.budget.unwrap_or(budget),
            degraded: resized.degraded || capped,
        })
    }

    /// Gives the members of the cells that gave way to a resize or a new
    /// cell (`gave_way`: their grants before) their smaller reservations,
    /// before the asker's grow: the kernel admits per root domain, and a
    /// grow before the shrinks it needs is refused. When the kernel refuses
    /// one, the ledger takes the asker's change back first (`asker_back`),
    /// so that each step back fits, then every grant of those that gave way,
    /// and their members get their reservations back.
    fn retune_those_that_gave_way(
        &mut self,
        gave_way: &[Grant],
        asker_back: impl FnOnce(&mut Ledger),
    ) -> Outcome<()> {
        let Err(e) = gave_way
            .iter()
            .try_for_each(|g| self.retune_members(&g.request.name))
        else {
            return Ok(());
        };
        asker_back(&mut self.state.ledger);
        self.put_back_those_that_gave_way(gave_way);
        Err(e)
    }

    /// The grants of the cells that gave way (`gave_way`, as they were
    /// before), back in the ledger and on their members.
    fn put_back_those_that_gave_way(&mut self, gave_way: &[Grant]) {
        for g in gave_way {
            self.state.ledger.put_back(g.clone());
            let _ = self.retune_members(&g.request.name);
        }
    }

    /// What the ledger grants `name` now, to put back if a change of it
    /// fails ([`Broker::retune_or_roll_back`]).
    fn held(&self, name: &str) -> Outcome<Grant> {
        self.state
            .ledger
            .grant(name)
            .cloned()
            .ok_or_else(|| unknown_cell(name))
    }

    /// Gives the members of `name` the reservations of its new grant; when
    /// the kernel refuses one, the ledger gets `before` back, and the
    /// members already given the new budget the old one (the one refused
    /// still has it: sched_setattr is atomic).
    fn retune_or_roll_back(&mut self, name: &str, before: Grant) -> Outcome<()> {
        let Err(e) = self.retune_members(name) else {
            return Ok(());
        };
        self.state.ledger.put_back(before);
        let _ = self.retune_members(name);
        Err(e)
    }

    /// Gives every live member of `name` the reservation its grant says.
    /// Liveness is read from the files the reaper keeps open: a guard
    /// resizes dozens of cells ten times a second.
    fn retune_members(&mut self, name: &str) -> Outcome<()> {
        let grant = self
            .state
            .ledger
            .grant(name)
            .ok_or_else(|| unknown_cell(name))?;
        let cell = self
            .state
            .cells
            .get(name)
            .ok_or_else(|| unknown_cell(name))?;
        let live = &mut self.liveness;
        for m in cell
            .members
            .iter()
            .filter(|m| live.is_alive(m.tid, m.start_time))
        {
            let t = placement::target(grant, m.slot, &self.state.ledger, &self.enf)?;
            placement::retune(m, &t, &self.enf)?;
        }
        Ok(())
    }

    /// `budget` if the owner's quota allows it beside their other cells;
    /// with `degrade`, cut to what the quota allows (`true` when cut).
    fn resize_within_quota(
        &self,
        name: &str,
        budget: Budget,
        degrade: bool,
        uid: u32,
    ) -> Outcome<(Budget, bool)> {
        let (Some((quota, others)), Some(grant)) =
            (self.quota_beside(name, uid), self.state.ledger.grant(name))
        else {
            return Ok((budget, false));
        };
        let n = grant.reservations.len().max(1) as u64;
        let room = quota.saturating_sub(others);
        if budget.bandwidth().times(n) <= room {
            return Ok((budget, false));
        }
        let window = grant.request.policy == CellPolicy::TimeTriggered;
        let runtime = Bandwidth(room.0 / n).runtime_in(budget.period_ns);
        if degrade && runtime >= tessera_policy::cell::MIN_RUNTIME_NS {
            return Ok((budget.with_runtime(runtime, window), true));
        }
        Err(BrokerError::new(
            ErrorCode::Quota,
            format!(
                "cell {name:?} cannot grow to {budget}: uid {uid}'s other cells hold {others} of a quota of {quota}"
            ),
            "ask for less, or with --degrade for what the quota allows",
        ))
    }

    /// `uid`'s quota and what its cells other than `name` hold of it;
    /// None when `uid` has no quota.
    fn quota_beside(&self, name: &str, uid: u32) -> Option<(Bandwidth, Bandwidth)> {
        let quota = self.config.quota_of(uid)?;
        let others: Bandwidth = self
            .state
            .cells
            .iter()
            .filter(|(other, c)| c.owner.uid == uid && other.as_str() != name)
            .filter_map(|(other, _)| self.state.ledger.grant(other))
            .flat_map(|g| g.reservations.iter().map(|r| r.budget.bandwidth()))
            .sum();
        Some((quota, others))
    }

    /// Moves every member to where the current layout wants it, if the
    /// layout's shape changed from `before`: a cell created or destroyed in
    /// the shared cores moves no one, and re-homing every member (a /proc
    /// read and an affinity call each) at every cell a guard opened was most
    /// of what the daemon did for a session of 60 JACK clients.
    fn rehome_if_reshaped(&mut self, before: &Shape) {
        if Layout::shape(&self.state.ledger) == *before {
            return;
        }
        for (name, cell) in &self.state.cells {
            let Some(grant) = self.state.ledger.grant(name) else {
                continue;
            };
            for m in &cell.members {
                if let Ok(t) = placement::target(grant, m.slot, &self.state.ledger, &self.enf) {
                    let _ = placement::rehome(m, &t, &self.enf);
                }
            }
        }
    }

    /// The cell thread `tid` (alive) is a member of, if any.
    pub(crate) fn member_cell(&self, tid: i32) -> Option<&str> {
        self.state
            .cells
            .iter()
            .find(|(_, c)| c.members.iter().any(|m| m.tid == tid && m.is_alive()))
            .map(|(n, _)| n.as_str())
    }

    /// Joins threads of `pid` (all of them, or only `tid`) to `cell`.
    pub fn attach(
        &mut self,
        cell: &str,
        pid: i32,
        tid: Option<i32>,
        uid: u32,
    ) -> Outcome<Vec<i32>> {
        self.attach_as(cell, pid, tid, uid, false)
    }

    /// [`Broker::attach`]; with `cpuset_only`, threads of a bandwidth cell
    /// take no reservation slot and keep their own scheduling policy (the
    /// non-real-time threads of a followed program).
    pub fn attach_as(
        &mut self,
        cell: &str,
        pid: i32,
        tid: Option<i32>,
        uid: u32,
        cpuset_only: bool,
    ) -> Outcome<Vec<i32>> {
        self.cell_owned_by(cell, uid)?;
        let owner = proc::owner_uid(pid).map_err(|_| {
            BrokerError::new(
                ErrorCode::NotFound,
                format!("no process {pid}"),
                "check the PID (`ps -e`)",
            )
        })?;
        if uid != 0 && owner != uid {
            return Err(BrokerError::new(
                ErrorCode::Permission,
                format!("process {pid} belongs to uid {owner}, not to you (uid {uid})"),
                "attach your own processes, or ask root",
            ));
        }
        let tids = match tid {
            Some(t) => {
                if proc::process_of(t).ok() != Some(pid) {
                    return Err(BrokerError::new(
                        ErrorCode::NotFound,
                        format!("thread {t} is not a thread of process {pid}"),
                        "list them with `ps -L -p PID`",
                    ));
                }
                vec![t]
            }
            None => proc::threads_of(pid)?,
        };
        if let Some((t, other)) = tids
            .iter()
            .find_map(|&t| self.member_cell(t).map(|c| (t, c.to_string())))
        {
            return Err(BrokerError::new(
                ErrorCode::Invalid,
                format!("thread {t} is already in cell {other:?}"),
                format!("detach it first: `tessera cell detach --tid {t}`"),
            ));
        }
        let mut joined = Vec::new();
        for t in tids {
            match self.join_one(cell, pid, t, cpuset_only) {
                Ok(()) => joined.push(t),
                Err(e) => {
                    for &done in &joined {
                        let _ = self.detach(done, 0);
                    }
                    self.persist()?;
                    return Err(e);
                }
            }
        }
        self.persist()?;
        Ok(joined)
    }

    fn join_one(&mut self, cell: &str, pid: i32, tid: i32, cpuset_only: bool) -> Outcome<()> {
        self.join_member(cell, cpuset_only, |slot, t| {
            placement::capture(pid, tid, slot, t)
        })
    }

    /// Joins to `cell` the member `member` makes for its slot and target,
    /// and gives its thread the cell's placement.
    fn join_member(
        &mut self,
        cell: &str,
        cpuset_only: bool,
        member: impl FnOnce(Option<usize>, &placement::Target) -> tessera_sys::Result<Member>,
    ) -> Outcome<()> {
        let grant = self
            .state
            .ledger
            .grant(cell)
            .cloned()
            .ok_or_else(|| unknown_cell(cell))?;
        let slot = if grant.reservations.is_empty() || cpuset_only {
            None
        } else {
            let taken: Vec<usize> = self.state.cells[cell]
                .members
                .iter()
                .filter_map(|m| m.slot)
                .collect();
            let free = (0..grant.reservations.len()).find(|s| !taken.contains(s));
            Some(free.ok_or_else(|| {
                BrokerError::new(
                    ErrorCode::Refused,
                    format!(
                        "cell {cell:?} has {} reservation(s), all held by threads {:?}: mainline SCHED_DEADLINE gives each thread its own reservation",
                        grant.reservations.len(),
                        self.state.cells[cell].members.iter().map(|m| m.tid).collect::<Vec<_>>()
                    ),
                    "create the cell with more --cores (one reservation per core), or another cell for this thread",
                )
            })?)
        };
        let t = placement::target(&grant, slot, &self.state.ledger, &self.enf)?;
        let member = member(slot, &t)?;
        placement::join(&member, &t, &self.enf)?;
        if let Some(c) = self.state.cells.get_mut(cell) {
            c.members.push(member);
        }
        Ok(())
    }

    /// Moves member `tid` from its cell to cell `to`, both `uid`'s: it
    /// keeps what it had before its first cell (given back when it leaves
    /// `to`), and a reserved thread takes `to`'s parameters before its
    /// cpuset, so the kernel never sees it unreserved and admits into the
    /// new root domain only what it will hold there. A move the kernel
    /// refuses leaves the thread as a failed join does: restored.
    pub fn move_member(&mut self, tid: i32, to: &str, uid: u32) -> Outcome<()> {
        let from = self.member_cell(tid).map(str::to_string).ok_or_else(|| {
            BrokerError::new(
                ErrorCode::NotFound,
                format!("thread {tid} is in no cell"),
                "attach it instead (`tessera cell attach`)",
            )
        })?;
        self.cell_owned_by(&from, uid)?;
        self.cell_owned_by(to, uid)?;
        if from == to {
            return Ok(());
        }
        let cell = self
            .state
            .cells
            .get_mut(&from)
            .ok_or_else(|| unknown_cell(&from))?;
        let index = cell
            .members
            .iter()
            .position(|m| m.tid == tid)
            .ok_or_else(|| unknown_cell(&from))?;
        let carried = cell.members.remove(index);
        let backup = carried.clone();
        let moved = self.join_member(to, false, |slot, _| Ok(Member { slot, ..carried }));
        if moved.is_err() {
            // Refused before its placement was tried (no slot in `to`), or
            // after (restored already): either way it leaves tessera.
            let _ = placement::restore(&backup, &self.enf);
        }
        self.persist()?;
        moved
    }

    /// Takes a thread out of its cell and restores its scheduling.
    pub fn detach(&mut self, tid: i32, uid: u32) -> Outcome<()> {
        let name = self
            .state
            .cells
            .iter()
            .find(|(_, c)| c.members.iter().any(|m| m.tid == tid))
            .map(|(n, _)| n.clone())
            .ok_or_else(|| {
                BrokerError::new(
                    ErrorCode::NotFound,
                    format!("thread {tid} is in no cell"),
                    "`tessera cell list` shows the members",
                )
            })?;
        self.cell_owned_by(&name, uid)?;
        self.take_out(&name, tid)
    }

    /// Takes member `tid` out of cell `name` and restores its scheduling;
    /// who may is the caller's check.
    pub(crate) fn take_out(&mut self, name: &str, tid: i32) -> Outcome<()> {
        let Some(cell) = self.state.cells.get_mut(name) else {
            return Err(unknown_cell(name));
        };
        let Some(index) = cell.members.iter().position(|m| m.tid == tid) else {
            return Err(BrokerError::new(
                ErrorCode::NotFound,
                format!("thread {tid} is not a member of cell {name:?}"),
                "`tessera cell list` shows the members",
            ));
        };
        let member = cell.members.remove(index);
        placement::restore(&member, &self.enf)?;
        self.persist()
    }

    /// Releases cells whose owner process exited and, every
    /// [`MEMBERS_EVERY`], drops exited members and gives stranded ones
    /// their reservation again. Returns what it did, for the log.
    pub fn reap(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        let live = &mut self.liveness;
        // A guard binds dozens of cells to one process: each is read once.
        let mut alive: BTreeMap<ProcessId, bool> = BTreeMap::new();
        let dead: Vec<String> = self
            .state
            .cells
            .iter()
            .filter(|(_, c)| {
                c.owner.process.is_some_and(|p| {
                    !*alive
                        .entry(p)
                        .or_insert_with(|| live.is_alive(p.pid, p.start_time))
                })
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in dead {
            match self.destroy_cell(&name, 0) {
                Ok(()) => notes.push(format!("released cell {name:?}: its process exited")),
                Err(e) => notes.push(format!("released cell {name:?} with an error: {e}")),
            }
        }
        let now = Instant::now();
        if self
            .members_read
            .is_some_and(|at| now.saturating_duration_since(at) < MEMBERS_EVERY)
        {
            self.forget_the_released();
            return notes;
        }
        self.members_read = Some(now);
        let mut changed = false;
        let mut still: Vec<(String, Member)> = Vec::new();
        let live = &mut self.liveness;
        let progress = &mut self.progress;
        let ledger = &self.state.ledger;
        for (name, cell) in self.state.cells.iter_mut() {
            let before = cell.members.len();
            let period_of = |slot: usize| {
                let grant = ledger.grant(name)?;
                Some(grant.reservations.get(slot)?.budget.period_ns)
            };
            cell.members.retain(|m| {
                let Some(cpu_ns) = live.cpu_ns(m.tid, m.start_time) else {
                    return false;
                };
                let id = (m.tid, m.start_time);
                if let Some(period_ns) = m.slot.and_then(period_of) {
                    if progress.stood_still(id, cpu_ns, now, stranded_after(period_ns)) {
                        still.push((name.clone(), m.clone()));
                    }
                }
                true
            });
            if cell.members.len() != before {
                changed = true;
                notes.push(format!(
                    "cell {name:?}: {} exited thread(s) dropped",
                    before - cell.members.len()
                ));
            }
        }
        for (name, m) in still {
            notes.extend(self.revive_if_stranded(&name, &m, now));
        }
        self.forget_the_released();
        if changed {
            let _ = self.persist();
        }
        notes
    }

    /// Gives member `m` of cell `name`, whose CPU time stood still, its
    /// reservation again if it is runnable and SCHED_DEADLINE — stranded
    /// by the kernel ([`stranded`]): SCHED_OTHER, then its reservation.
    fn revive_if_stranded(&mut self, name: &str, m: &Member, now: Instant) -> Option<String> {
        self.progress.restart((m.tid, m.start_time), now);
        let reserved = matches!(sched::get_policy(m.tid), Ok(Policy::Deadline(_)));
        if !reserved || !proc::is_runnable(m.pid, m.tid) {
            return None;
        }
        let grant = self.state.ledger.grant(name)?;
        let period_ns = grant.reservations.get(m.slot?)?.budget.period_ns;
        let revived = sched::demote_from_deadline(m.tid).and_then(|_| {
            let t = placement::target(grant, m.slot, &self.state.ledger, &self.enf)?;
            placement::retune(m, &t, &self.enf)
        });
        let what = format!(
            "cell {name:?}: thread {} was runnable and got no CPU for {:.1} s or more, its \
             reservation no longer replenished by the kernel",
            m.tid,
            stranded_after(period_ns).as_secs_f64()
        );
        Some(match revived {
            Ok(()) => format!("{what}: given its reservation again"),
            Err(e) => format!("{what}: its reservation could not be given again: {e}"),
        })
    }

    /// Closes the liveness files of owners and members no cell holds now.
    fn forget_the_released(&mut self) {
        let held: BTreeSet<(i32, u64)> = self
            .state
            .cells
            .values()
            .flat_map(|c| {
                let owner = c.owner.process.map(|p| (p.pid, p.start_time));
                let members = c.members.iter().map(|m| (m.tid, m.start_time));
                owner.into_iter().chain(members)
            })
            .collect();
        self.liveness
            .retain(|id, started| held.contains(&(id, started)));
        self.progress.retain(|id| held.contains(&id));
    }

    /// Destroys every cell and returns the machine to its state before
    /// tessera: cpusets, load balancing, weights, scheduling policies.
    pub fn reset(&mut self, uid: u32) -> Outcome<ResetReport> {
        if uid != 0 && self.facts.mode == Mode::Guaranteed {
            return Err(BrokerError::new(
                ErrorCode::Permission,
                "reset changes the whole machine",
                "run `sudo tessera reset`",
            ));
        }
        let mut report = ResetReport {
            groups_removed: self
                .enf
                .layout
                .as_ref()
                .map_or(0, |l| l.existing_groups().len()),
            ..ResetReport::default()
        };
        let names: Vec<String> = self.state.cells.keys().cloned().collect();
        for name in names {
            report.threads_restored += self.state.cells[&name]
                .members
                .iter()
                .filter(|m| m.is_alive())
                .count();
            self.destroy_cell(&name, 0)?;
            report.cells_destroyed.push(name);
        }
        if let Some(layout) = &self.enf.layout {
            // Groups left by a tessera whose state was lost: their deadline
            // threads were tessera's reservations; demote them so they can move.
            for g in &layout.existing_groups() {
                for tid in g.threads().unwrap_or_default() {
                    if sched::demote_from_deadline(tid).unwrap_or(false) {
                        report.deadline_threads_demoted.push(tid);
                    }
                }
            }
            layout.teardown(&mut self.state.snapshot)?;
        }
        if let Some(cpu) = &self.enf.cpu {
            let root = cpu.root();
            let ours = |g: &tessera_sys::cgroup::Group| {
                g.name() == "tessera" || g.name().starts_with("tessera-")
            };
            for g in root.children().into_iter().filter(ours) {
                for group in g.children().iter().chain(std::iter::once(&g)) {
                    let _ = crate::layout::move_all(group, &root);
                    let _ = group.remove();
                }
            }
        }
        // Services are not the machine's settings: they keep their names.
        let services = std::mem::take(&mut self.state.services);
        self.state = State::new(Ledger::new(self.facts.machine.clone()));
        self.state.services = services;
        self.persist()?;
        Ok(report)
    }

    pub fn list(&self) -> Vec<CellInfo> {
        self.state
            .cells
            .keys()
            .filter_map(|n| self.show(n).ok())
            .collect()
    }

    pub fn show(&self, name: &str) -> Outcome<CellInfo> {
        let cell = self
            .state
            .cells
            .get(name)
            .ok_or_else(|| unknown_cell(name))?;
        let grant = self
            .state
            .ledger
            .grant(name)
            .ok_or_else(|| unknown_cell(name))?;
        let slots = grant.reservations.len();
        Ok(CellInfo {
            name: name.to_string(),
            grant: grant.clone(),
            owner_uid: cell.owner.uid,
            bound_to_pid: cell.owner.process.map(|p| p.pid),
            members: cell.members.clone(),
            bandwidth: grant
                .reservations
                .iter()
                .map(|r| r.budget.bandwidth())
                .sum::<Bandwidth>()
                + Bandwidth::ONE.times(grant.dedicated.len() as u64),
            free_slots: (slots > 0).then(|| {
                slots.saturating_sub(cell.members.iter().filter(|m| m.slot.is_some()).count())
            }),
        })
    }

    /// Registers `entry` (its name, socket and owner checked) for its
    /// process; a live holder of the name keeps it, a stale one is replaced.
    pub fn register_service(&mut self, entry: ServiceEntry) -> Outcome<ServiceEntry> {
        registry::check_name(&entry.name)?;
        registry::check_socket(&entry.socket, entry.owner_uid)?;
        self.state.services.register(entry.clone())?;
        self.persist()?;
        Ok(entry)
    }

    /// Removes service `name` (its owner or root).
    pub fn unregister_service(&mut self, name: &str, uid: u32) -> Outcome<()> {
        self.state.services.unregister(name, uid)?;
        self.persist()
    }

    /// The live service `name` if its policy admits `caller`; a stale entry
    /// met on the way is removed.
    pub fn open_service(&mut self, name: &str, caller: &PeerCredentials) -> Outcome<ServiceEntry> {
        let found = self.state.services.lookup(name).cloned();
        if self.state.services.take_stale(name).is_some() {
            self.persist()?;
        }
        let entry = found?;
        entry.admit(caller)?;
        Ok(entry)
    }

    pub fn list_services(&self) -> Vec<ServiceInfo> {
        self.state.services.list()
    }

    /// Adds what a cell's program reports (misses and xruns since its last
    /// report) to the cell's counters. Its owner or root only.
    pub fn report(&mut self, name: &str, reported: Reported, uid: u32) -> Outcome<Reported> {
        self.cell_owned_by(name, uid)?;
        let cell = self
            .state
            .cells
            .get_mut(name)
            .ok_or_else(|| unknown_cell(name))?;
        cell.reported.misses = cell.reported.misses.saturating_add(reported.misses);
        cell.reported.xruns = cell.reported.xruns.saturating_add(reported.xruns);
        let total = cell.reported;
        self.persist()?;
        Ok(total)
    }

    /// Samples every cell now (see [`crate::monitor`]).
    pub fn sample(&mut self) -> Sample {
        let ledger = &self.state.ledger;
        let cells = self.state.cells.iter().filter_map(|(name, state)| {
            Some(CellFacts {
                name,
                grant: ledger.grant(name)?,
                state,
            })
        });
        self.monitor
            .sample(cells, &self.state.unguaranteed, &mut self.liveness)
            .clone()
    }

    /// The real-time threads that hold no reservation, for the monitor's
    /// samples (`tessera top`) and the next daemon: RTKit's fallback
    /// reports every change of the threads it left on SCHED_RR, saved when
    /// the list changed.
    pub fn set_unguaranteed(&mut self, threads: Vec<UnguaranteedThread>) -> Outcome<()> {
        if threads == self.state.unguaranteed {
            return Ok(());
        }
        self.state.unguaranteed = threads;
        self.persist()
    }

    /// The threads last reported unguaranteed, also by a daemon before this
    /// one (their threads may have ended since).
    pub fn unguaranteed(&self) -> &[UnguaranteedThread] {
        &self.state.unguaranteed
    }

    /// The samples after `since_unix_ms`; a fresh one first when the newest
    /// is older than `fresh_within_ms` (a viewer of an embedded broker, or
    /// of a daemon between its samples, sees now).
    pub fn monitor(&mut self, since_unix_ms: Option<u64>, fresh_within_ms: u64) -> Vec<Sample> {
        let now_ms = crate::monitor::unix_ms();
        let stale = self
            .monitor
            .latest()
            .is_none_or(|s| s.t_unix_ms + fresh_within_ms <= now_ms);
        if stale {
            self.sample();
        }
        self.monitor.since(since_unix_ms)
    }

    /// One round of the RAP service's adaptation (seed 000 §2.3): the
    /// policy's plan from the latest sample, applied change by change
    /// through admission — shrinks first; a grow that no longer fits gets
    /// what does. Pinned and time-triggered cells, and those their owner
    /// adapts (the guard's), are never changed. Every
    /// change made is noted for the next sample and returned as a log line.
    ///
    /// The capacity the plan shares is the cells' bandwidth plus every
    /// core's free bandwidth; admission has the last word where a cell's
    /// reservations are partitioned and the free bandwidth is on other
    /// cores.
    pub fn adapt(&mut self, config: &RapConfig) -> Vec<String> {
        let Some(sample) = self.monitor.latest().cloned() else {
            return Vec::new();
        };
        let views: Vec<CellView> = sample
            .cells
            .iter()
            .filter_map(|c| self.cell_view(c))
            .collect();
        let held: Bandwidth = views
            .iter()
            .map(|v| {
                Bandwidth::of(v.budget.runtime_ns, v.budget.period_ns)
                    .times(u64::from(v.reservations))
            })
            .sum();
        let free: Bandwidth = self.state.ledger.cores().iter().map(|c| c.free()).sum();
        let mut lines = Vec::new();
        let mut changed = std::collections::BTreeSet::new();
        for change in rap::plan(&views, held + free, config) {
            // As its owner: a grow stays within the owner's quota.
            let owner = self
                .state
                .cells
                .get(&change.cell)
                .map_or(0, |c| c.owner.uid);
            let line = match self.resize_cell(&change.cell, change.to, !change.is_shrink(), owner) {
                Ok(reply) if reply.budget != change.to => {
                    format!("{change}; admitted {} µs", reply.budget.runtime_ns / 1000)
                }
                Ok(_) => change.to_string(),
                Err(e) => format!("cell {}: not adapted ({e})", change.cell),
            };
            changed.insert(change.cell);
            self.monitor.note_change(line.clone());
            lines.push(line);
        }
        for view in &views {
            let calm = self.calm.entry(view.name.clone()).or_insert(0);
            *calm = match view.misses == 0 && !changed.contains(&view.name) {
                true => calm.saturating_add(1),
                false => 0,
            };
        }
        self.calm
            .retain(|name, _| self.state.cells.contains_key(name));
        lines
    }

    /// A sampled bandwidth cell as the adaptation policy sees it.
    fn cell_view(&self, cell: &CellSample) -> Option<CellView> {
        let request = &self.state.ledger.grant(&cell.name)?.request;
        let budget = request.budget?;
        Some(CellView {
            name: cell.name.clone(),
            budget,
            reservations: cell.reservations as u32,
            // A time-triggered window's deadline is its runtime: no resize
            // keeps it. A cell its owner adapts is the owner's to change.
            pinned: request.pinned
                || request.owner_adapts
                || request.policy == CellPolicy::TimeTriggered,
            weight: request.weight,
            floor_ns: 0,
            used_ns: cell.used_ns,
            misses: cell.misses + cell.xruns,
            calm: self.calm.get(&cell.name).copied().unwrap_or(0),
        })
    }

    pub fn status(&self) -> StatusReport {
        StatusReport {
            version: env!("CARGO_PKG_VERSION").to_string(),
            mode: self.facts.mode.clone(),
            banner: self.facts.mode.banner(),
            broker: self.label.clone(),
            kernel: self.facts.kernel.clone(),
            capacity_per_core: self.facts.machine.capacity,
            capacity_source: self.facts.capacity_source.clone(),
            cores: self.state.ledger.cores(),
            global_reserved: self.state.ledger.global_reserved(),
            cells: self.list(),
        }
    }
}

/// What a workgroup's reservation that no member holds gets when the
/// members' budgets change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EmptyPlaces {
    /// The largest budget named: room for the next member to join.
    Largest,
    /// What it holds, at the named period.
    AsHeld,
    /// The least a place holds ([`least_place`]).
    Least,
}

/// The budget of a place no member holds when the members need all the
/// room: 1 % of the period (the guard's floor), which the next member's
/// controller raises at its join.
fn least_place(period_ns: u64) -> Budget {
    Budget::new(
        (period_ns / 100).max(tessera_policy::cell::MIN_RUNTIME_NS),
        period_ns,
    )
}

/// `budget`'s bandwidth at another period (a workgroup's cycle changed).
fn at_period(budget: Budget, period_ns: u64) -> Budget {
    if budget.period_ns == period_ns {
        return budget;
    }
    let runtime = budget.bandwidth().runtime_in(period_ns);
    Budget::new(runtime.max(tessera_policy::cell::MIN_RUNTIME_NS), period_ns)
}

/// An admission refusal as the protocol reports it: the fix is what would fit.
fn refused(r: Refusal) -> BrokerError {
    BrokerError::new(
        ErrorCode::Refused,
        format!("cell {:?} refused: {}", r.cell, r.reason),
        r.would_fit.unwrap_or_default(),
    )
}

fn describe(req: &CellRequest) -> String {
    match req.policy {
        CellPolicy::Dedicated => "dedicated".into(),
        p => format!("{p} ({:?}-placed)", req.placement).to_lowercase(),
    }
}
