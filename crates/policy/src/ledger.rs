//! The ledger of CPU capacity: which cores are shared with the rest of the
//! machine, which are partitioned into per-core root domains for tessera's
//! reservations, which are dedicated to one cell; admission control with an
//! explanation for every refusal; placement of reservations on cores.
//!
//! Invariants (checked by the property tests):
//! - on a partitioned core, the reservations' bandwidths (runtime / period)
//!   sum to at most the core's capacity and pass the EDF demand test, so
//!   every deadline — a time-triggered window's too — is met;
//! - the global reservations' bandwidths sum to at most the shared cores'
//!   capacity, none exceeds one core's, and at least `system_cores` cores
//!   stay shared;
//! - nothing else is ever placed on a dedicated core;
//! - a refused request leaves the ledger unchanged; a pinned grant never changes.
//!
//! It must never touch the kernel: the broker applies what the ledger decided.

use crate::bandwidth::{largest_fitting, Bandwidth};
use crate::cell::{
    fmt_us, validate_budget, Budget, CellPolicy, CellRequest, CoreRequest, Limits, Placement,
    RequestError, MIN_RUNTIME_NS,
};
use crate::edf::{self, Overload};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// What the ledger knows of the machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub limits: Limits,
    /// Deadline capacity of each core (the kernel's rt share minus the fair server's).
    pub capacity: Bandwidth,
    /// Cores that always stay with the rest of the system.
    pub system_cores: usize,
}

/// One SCHED_DEADLINE reservation: on a core, or global (`core: None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub core: Option<usize>,
    pub budget: Budget,
}

/// What a cell was granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub request: CellRequest,
    /// Cores given to the cell alone.
    pub dedicated: Vec<usize>,
    /// One reservation per core the cell runs on.
    pub reservations: Vec<Reservation>,
}

/// How a core is used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CoreMode {
    /// With the rest of the system; global reservations run here.
    Shared,
    /// Its own root domain, for tessera's per-core reservations.
    Partitioned,
    /// Given to one cell alone.
    Dedicated(String),
}

/// A core's state, for `tessera status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoreUsage {
    pub core: usize,
    pub mode: CoreMode,
    pub capacity: Bandwidth,
    /// Bandwidth reserved on this core (partitioned cores only).
    pub reserved: Bandwidth,
    pub cells: Vec<String>,
    /// The budgets of the reservations here that give way to a smaller
    /// one's resize of a period no longer than theirs
    /// ([`CellRequest::gives_way`]): room another owner may count on down
    /// to its own largest reservation's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub giving_way: Vec<Budget>,
}

impl CoreUsage {
    pub fn free(&self) -> Bandwidth {
        self.capacity.saturating_sub(self.reserved)
    }
}

/// Why a request was refused, and what would fit (for an invalid request,
/// what would make it valid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub cell: String,
    pub reason: String,
    pub would_fit: Option<String>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cell {:?} refused: {}", self.cell, self.reason)?;
        if let Some(s) = &self.would_fit {
            write!(f, "; {s}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Refusal {}

/// What a degradable resize ([`Ledger::resize_or_degrade`]) granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resized {
    pub grant: Grant,
    /// Less than asked was granted.
    pub degraded: bool,
    /// The cells that gave way to it ([`CellRequest::gives_way`]), as they
    /// were granted before: their smaller reservations go to the kernel
    /// before its own grow, and these back if that fails.
    pub gave_way: Vec<Grant>,
}

/// The capacity ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub machine: Machine,
    grants: BTreeMap<String, Grant>,
}

impl Ledger {
    pub fn new(machine: Machine) -> Ledger {
        Ledger {
            machine,
            grants: BTreeMap::new(),
        }
    }

    pub fn grants(&self) -> impl Iterator<Item = &Grant> {
        self.grants.values()
    }

    pub fn grant(&self, name: &str) -> Option<&Grant> {
        self.grants.get(name)
    }

    /// Decides whether `req` fits, and where, without changing anything.
    pub fn admit(&self, req: &CellRequest) -> Result<Grant, Refusal> {
        let refuse = |reason: String, would_fit: Option<String>| Refusal {
            cell: req.name.clone(),
            reason,
            would_fit,
        };
        req.validate(&self.machine.limits)
            .map_err(|e| refuse_invalid(&req.name, e))?;
        if self.grants.contains_key(&req.name) {
            return Err(refuse(
                "a cell with that name exists".into(),
                Some("destroy it first or choose another name".into()),
            ));
        }
        match (req.policy, req.budget) {
            (CellPolicy::Dedicated, _) => self.admit_dedicated(req).map_err(|(r, s)| refuse(r, s)),
            (CellPolicy::BestEffort, _) => {
                self.admit_best_effort(req).map_err(|(r, s)| refuse(r, s))
            }
            (_, Some(budget)) if req.placement == Placement::Global => self
                .admit_global(req, budget)
                .map_err(|(r, s)| refuse(r, s)),
            (_, Some(budget)) => self
                .admit_partitioned(req, budget)
                .map_err(|(r, s)| refuse(r, s)),
            (_, None) => unreachable!("validate() requires a budget for bandwidth cells"),
        }
    }

    /// Admits and records; on refusal nothing changes.
    pub fn insert(&mut self, req: &CellRequest) -> Result<Grant, Refusal> {
        let grant = self.admit(req)?;
        self.grants.insert(req.name.clone(), grant.clone());
        Ok(grant)
    }

    /// Like [`Ledger::insert`], but when `req` does not fit on the
    /// partitioned cores it names, the cells that give way there make room
    /// first, as for a degradable resize ([`Ledger::making_way_for`]; never
    /// below `req`'s own bandwidth, and only for a period no longer than
    /// theirs). With the grant, the grants of the cells that gave way as
    /// they were before: their smaller reservations go to the kernel before
    /// the new cell's members do. On §4.5's core, three of the peer's
    /// real-time threads appeared after its clients' workgroup had filled
    /// the core and were refused, where a resize would have been given way.
    /// Refused, and nothing changed, when it does not fit even then.
    pub fn insert_making_way(&mut self, req: &CellRequest) -> Result<(Grant, Vec<Grant>), Refusal> {
        let refusal = match self.insert(req) {
            Ok(grant) => return Ok((grant, Vec::new())),
            Err(refusal) => refusal,
        };
        let made = on_named_cores(req).and_then(|asked| self.making_way_for(&asked));
        let Some((mut trial, gave_way)) = made else {
            return Err(refusal);
        };
        let grant = trial.insert(req).map_err(|_| refusal)?;
        *self = trial;
        Ok((grant, gave_way))
    }

    /// Records a grant decided earlier (crash recovery), re-checking it.
    pub fn restore(&mut self, grant: Grant) -> Result<(), Refusal> {
        let mut trial = self.clone();
        trial
            .grants
            .insert(grant.request.name.clone(), grant.clone());
        match trial.violation() {
            Some(reason) => Err(Refusal {
                cell: grant.request.name.clone(),
                reason,
                would_fit: None,
            }),
            None => {
                *self = trial;
                Ok(())
            }
        }
    }

    /// Puts back `grant`, which this ledger held before a change of that
    /// cell alone (a resize whose members the kernel then refused): the
    /// ledger held it beside every other grant it holds now, so it is not
    /// admitted again. Cheaper than keeping a copy of the whole ledger for
    /// the rollback, which a guard's batch of sixty resizes made sixty
    /// times over.
    pub fn put_back(&mut self, grant: Grant) {
        self.grants.insert(grant.request.name.clone(), grant);
        debug_assert!(self.violation().is_none(), "{:?}", self.violation());
    }

    pub fn release(&mut self, name: &str) -> Option<Grant> {
        self.grants.remove(name)
    }

    /// Changes a bandwidth cell's budget in place (same cores); refused for
    /// pinned cells and when the new budget does not fit, with the largest
    /// runtime that would.
    pub fn resize(&mut self, name: &str, budget: Budget) -> Result<Grant, Refusal> {
        let grant = self.resized(name, budget)?;
        match self.resize_violation(&grant) {
            None => {
                self.grants.insert(name.to_string(), grant.clone());
                Ok(grant)
            }
            Some(reason) => {
                let fit = match self.largest_resize(&grant) {
                    Some(runtime) => would_fit(runtime, &budget),
                    None => "nothing would fit now".into(),
                };
                Err(refuse_resize(name, reason, Some(fit)))
            }
        }
    }

    /// Like [`Ledger::resize`], but when `budget` does not fit, the cells
    /// that give way on its cores make room first ([`CellRequest::gives_way`],
    /// [`Ledger::making_way_for`]), and if it still does not fit, grants the
    /// largest runtime at the same period that does (a window's deadline
    /// shrinking with it). Refused, and nothing changed, only when not even
    /// the kernel's minimum runtime fits, or the cell may not be resized
    /// (pinned, dedicated, best-effort, an invalid budget).
    pub fn resize_or_degrade(&mut self, name: &str, budget: Budget) -> Result<Resized, Refusal> {
        let grant = self.resized(name, budget)?;
        if self.resize_violation(&grant).is_none() {
            self.grants.insert(name.to_string(), grant.clone());
            return Ok(Resized {
                grant,
                degraded: false,
                gave_way: Vec::new(),
            });
        }
        let made = self.making_way_for(&grant);
        let ledger = made.as_ref().map_or(&*self, |(trial, _)| trial);
        let (grant, degraded) = ledger.degraded(name, grant, budget)?;
        let gave_way = match made {
            Some((trial, gave_way)) => {
                *self = trial;
                gave_way
            }
            None => Vec::new(),
        };
        self.grants.insert(name.to_string(), grant.clone());
        Ok(Resized {
            grant,
            degraded,
            gave_way,
        })
    }

    /// `grant` (the cell's asked for `budget`) as it fits in this ledger:
    /// as it is (`false`), or at the largest runtime that does (`true`).
    fn degraded(&self, name: &str, grant: Grant, budget: Budget) -> Result<(Grant, bool), Refusal> {
        let Some(reason) = self.resize_violation(&grant) else {
            return Ok((grant, false));
        };
        let Some(runtime) = self.largest_resize(&grant) else {
            return Err(refuse_resize(
                name,
                reason,
                Some("nothing would fit now".into()),
            ));
        };
        let smaller = budget.with_runtime(runtime, is_window(&grant));
        let grant = self.resized(name, smaller)?;
        if let Some(reason) = self.resize_violation(&grant) {
            return Err(refuse_resize(name, reason, None));
        }
        Ok((grant, true))
    }

    /// This ledger with the cells that give way on `grant`'s partitioned
    /// cores capped — their reservations there ([`Within`]), all alike, at the largest
    /// bandwidth at which `grant` fits beside them, but never below
    /// `grant`'s largest reservation's (max-min fairness: the smaller
    /// asker is served first; when it does not fit even then, they are
    /// capped at that floor and it is degraded into what is left) — and
    /// their grants before. None when no such cell holds more than
    /// that floor there. On §4.5's core, a workgroup's ten members filled
    /// what the server's cells left, and the server's driver, wanting 40 µs
    /// of each cycle, was held at 13 µs: throttled every cycle, it stalled
    /// the whole graph.
    fn making_way_for(&self, grant: &Grant) -> Option<(Ledger, Vec<Grant>)> {
        let cores: Vec<usize> = grant.reservations.iter().filter_map(|r| r.core).collect();
        let floor = grant
            .reservations
            .iter()
            .map(|r| r.budget.bandwidth())
            .max()?;
        let period = grant
            .reservations
            .iter()
            .map(|r| r.budget.period_ns)
            .max()?;
        let within = Within {
            cores: &cores,
            period_ns: period,
        };
        let on_cores = |r: &&Reservation| within.holds(r);
        let giving: Vec<&Grant> = self
            .grants
            .values()
            .filter(|g| g.request.gives_way && g.request.name != grant.request.name)
            .filter(|g| {
                g.reservations
                    .iter()
                    .filter(on_cores)
                    .any(|r| r.budget.bandwidth() > floor)
            })
            .collect();
        let top = giving
            .iter()
            .flat_map(|g| g.reservations.iter().filter(on_cores))
            .map(|r| r.budget.bandwidth())
            .max()?;
        let trial = std::cell::RefCell::new(self.clone());
        let capped_at = |level: Bandwidth| {
            let mut trial = trial.borrow_mut();
            for g in &giving {
                let capped = capped_on(Grant::clone(g), &within, level);
                trial.grants.insert(g.request.name.clone(), capped);
            }
        };
        let fits = |level: u64| {
            capped_at(Bandwidth(level));
            trial.borrow().resize_violation(grant).is_none()
        };
        let level = largest_fitting(floor.0, top.0, fits).unwrap_or(floor.0);
        capped_at(Bandwidth(level));
        let before = giving.into_iter().cloned().collect();
        Some((trial.into_inner(), before))
    }

    /// Gives each reservation of an event-triggered cell a budget of its
    /// own — `budgets[k]` for reservation `k`, all of one period (a
    /// workgroup's members share the cycle, not its work) — through
    /// admission; the cell's budget becomes the largest. With `degrade`,
    /// when they do not fit, every runtime is capped at the largest value
    /// that fits (the largest members give up what is missing; the
    /// smallest keep theirs); `true` with a degraded grant. Refused, and
    /// nothing changed, when they do not fit without degrading or the cell
    /// may not be resized.
    pub fn resize_each(
        &mut self,
        name: &str,
        budgets: &[Budget],
        degrade: bool,
    ) -> Result<(Grant, bool), Refusal> {
        let grant = self.resized_each(name, budgets)?;
        let Some(reason) = self.resize_violation(&grant) else {
            self.grants.insert(name.to_string(), grant.clone());
            return Ok((grant, false));
        };
        let cap = self.largest_cap(&grant);
        let (true, Some(cap)) = (degrade, cap) else {
            let fit = cap.map_or("nothing would fit now".into(), |c| {
                format!("each runtime capped at {}", fmt_us(c))
            });
            return Err(refuse_resize(name, reason, Some(fit)));
        };
        let grant = capped(grant, cap);
        self.grants.insert(name.to_string(), grant.clone());
        Ok((grant, true))
    }

    /// The cell's grant with a budget of its own on each reservation, if
    /// the cell may be resized to them (capacity is not checked here).
    fn resized_each(&self, name: &str, budgets: &[Budget]) -> Result<Grant, Refusal> {
        let refuse = |reason: String| refuse_resize(name, reason, None);
        let old = self
            .grants
            .get(name)
            .ok_or_else(|| refuse("no such cell".into()))?;
        if old.request.policy != CellPolicy::EventTriggered {
            return Err(refuse(format!(
                "a {} cell has one budget for all its reservations",
                old.request.policy
            )));
        }
        if budgets.len() != old.reservations.len() {
            return Err(refuse(format!(
                "{} budget(s) given for its {} reservation(s)",
                budgets.len(),
                old.reservations.len()
            )));
        }
        let largest = budgets
            .iter()
            .copied()
            .max_by_key(|b| b.runtime_ns)
            .ok_or_else(|| refuse("it has no reservation to give a budget".into()))?;
        if budgets.iter().any(|b| b.period_ns != largest.period_ns) {
            return Err(refuse(
                "its reservations' budgets have different periods: give them one".into(),
            ));
        }
        let mut grant = self.resized(name, largest)?;
        for (r, b) in grant.reservations.iter_mut().zip(budgets) {
            validate_budget(b, grant.request.policy, &self.machine.limits)
                .map_err(|e| refuse_invalid(name, e))?;
            r.budget = *b;
        }
        Ok(grant)
    }

    /// The largest runtime every reservation of `grant` could be capped at
    /// (a reservation below it keeps its own) with no invariant broken, if
    /// at least the kernel's minimum fits.
    fn largest_cap(&self, grant: &Grant) -> Option<u64> {
        let fits = |cap: u64| self.resize_violation(&capped(grant.clone(), cap)).is_none();
        let top = grant
            .reservations
            .iter()
            .map(|r| r.budget.runtime_ns)
            .max()?;
        largest_fitting(MIN_RUNTIME_NS, top, fits)
    }

    /// The cell's grant with `budget` on all its reservations, if the cell
    /// may be resized to it (the ledger's capacity is not checked here).
    fn resized(&self, name: &str, budget: Budget) -> Result<Grant, Refusal> {
        let refuse = |reason: String| refuse_resize(name, reason, None);
        let old = self
            .grants
            .get(name)
            .ok_or_else(|| refuse("no such cell".into()))?;
        if old.request.pinned {
            return Err(refuse("it is pinned: its allocation never changes".into()));
        }
        if old.reservations.is_empty() {
            return Err(refuse(format!(
                "a {} cell has no budget",
                old.request.policy
            )));
        }
        let mut grant = old.clone();
        grant.request.budget = Some(budget);
        grant
            .request
            .validate(&self.machine.limits)
            .map_err(|e| refuse_invalid(name, e))?;
        for r in &mut grant.reservations {
            r.budget = budget;
        }
        Ok(grant)
    }

    /// Which invariant `grant` — its cell's reservations with a new budget
    /// on the same cores — would break, checking only what a resize can
    /// change: the sums and the demand of its partitioned cores and the
    /// global sum. The same answer as [`Ledger::violation`] on the ledger
    /// with `grant` in place (the property tests compare them) without a
    /// copy of every grant: a guard resizes dozens of cells an interval.
    fn resize_violation(&self, grant: &Grant) -> Option<String> {
        let name = &grant.request.name;
        let others = || {
            self.grants
                .iter()
                .filter(move |(n, _)| *n != name)
                .flat_map(|(_, g)| &g.reservations)
        };
        let mut cores: Vec<usize> = grant.reservations.iter().filter_map(|r| r.core).collect();
        cores.dedup();
        for core in cores {
            let budgets: Vec<Budget> = others()
                .chain(&grant.reservations)
                .filter(|r| r.core == Some(core))
                .map(|r| r.budget)
                .collect();
            let reserved: Bandwidth = budgets.iter().map(Budget::bandwidth).sum();
            if let Some(v) = core_violation(core, reserved, &budgets, self.machine.capacity) {
                return Some(v);
            }
        }
        let global: Vec<&Reservation> = grant
            .reservations
            .iter()
            .filter(|r| r.core.is_none())
            .collect();
        if global.is_empty() {
            return None;
        }
        if let Some(r) = global
            .iter()
            .find(|r| r.budget.bandwidth() > self.machine.capacity)
        {
            return Some(global_too_big(r.budget.bandwidth(), self.machine.capacity));
        }
        let total: Bandwidth = others()
            .chain(global.iter().copied())
            .filter(|r| r.core.is_none())
            .map(|r| r.budget.bandwidth())
            .sum();
        let cap = self
            .machine
            .capacity
            .times(self.shared_cores().len() as u64);
        (total > cap).then(|| global_over(total, cap))
    }

    /// This ledger with `grant` in place of its cell's, if no invariant
    /// breaks: the reference [`Ledger::resize_violation`] is checked against.
    #[cfg(test)]
    fn with_grant(&self, grant: &Grant) -> Result<Ledger, String> {
        let mut trial = self.clone();
        trial
            .grants
            .insert(grant.request.name.clone(), grant.clone());
        match trial.violation() {
            Some(reason) => Err(reason),
            None => Ok(trial),
        }
    }

    /// The largest runtime (same period, same cores) `grant`'s cell could be
    /// resized to, if at least the kernel's minimum fits. Feasibility only
    /// grows as a runtime shrinks, so a binary search finds it.
    fn largest_resize(&self, grant: &Grant) -> Option<u64> {
        let budget = grant.request.budget?;
        let window = is_window(grant);
        let fits = |runtime: u64| {
            let b = budget.with_runtime(runtime, window);
            let mut g = grant.clone();
            g.request.budget = Some(b);
            for r in &mut g.reservations {
                r.budget = b;
            }
            self.resize_violation(&g).is_none()
        };
        largest_fitting(MIN_RUNTIME_NS, budget.runtime_ns, fits)
    }

    /// Every core's mode and reservations.
    pub fn cores(&self) -> Vec<CoreUsage> {
        self.machine
            .limits
            .cores
            .iter()
            .map(|&core| self.core_usage(core))
            .collect()
    }

    pub fn core_usage(&self, core: usize) -> CoreUsage {
        let mut usage = CoreUsage {
            core,
            mode: CoreMode::Shared,
            capacity: self.machine.capacity,
            reserved: Bandwidth::ZERO,
            cells: Vec::new(),
            giving_way: Vec::new(),
        };
        for g in self.grants.values() {
            if g.dedicated.contains(&core) {
                usage.mode = CoreMode::Dedicated(g.request.name.clone());
                usage.cells.push(g.request.name.clone());
            }
            for r in g.reservations.iter().filter(|r| r.core == Some(core)) {
                usage.mode = CoreMode::Partitioned;
                usage.reserved = usage.reserved + r.budget.bandwidth();
                usage.cells.push(g.request.name.clone());
                if g.request.gives_way {
                    usage.giving_way.push(r.budget);
                }
            }
        }
        usage
    }

    /// Cores still in the shared root domain.
    pub fn shared_cores(&self) -> Vec<usize> {
        self.cores()
            .into_iter()
            .filter(|c| c.mode == CoreMode::Shared)
            .map(|c| c.core)
            .collect()
    }

    /// Bandwidth of all global reservations.
    pub fn global_reserved(&self) -> Bandwidth {
        self.grants
            .values()
            .flat_map(|g| &g.reservations)
            .filter(|r| r.core.is_none())
            .map(|r| r.budget.bandwidth())
            .sum()
    }

    /// The budgets of the reservations on `core`.
    fn budgets_on(&self, core: usize) -> Vec<Budget> {
        self.grants
            .values()
            .flat_map(|g| &g.reservations)
            .filter(|r| r.core == Some(core))
            .map(|r| r.budget)
            .collect()
    }

    /// Whether `budget` fits on `core` beside what is there.
    fn fits_on(&self, core: usize, budget: Budget) -> Result<(), Overload> {
        let mut budgets = self.budgets_on(core);
        budgets.push(budget);
        edf::feasible(&budgets, self.machine.capacity)
    }

    /// The largest runtime (same period; a window's deadline shrinking with
    /// it) that fits on `core`, if any.
    fn largest_runtime_on(&self, core: usize, budget: &Budget) -> Option<u64> {
        let window = budget.deadline_ns == budget.runtime_ns;
        let with = |runtime_ns: u64| budget.with_runtime(runtime_ns, window);
        largest_fitting(MIN_RUNTIME_NS, budget.runtime_ns, |r| {
            self.fits_on(core, with(r)).is_ok()
        })
    }

    /// The first broken invariant, if any.
    pub fn violation(&self) -> Option<String> {
        let cores = self.cores();
        for c in &cores {
            let budgets = self.budgets_on(c.core);
            if let Some(v) = core_violation(c.core, c.reserved, &budgets, c.capacity) {
                return Some(v);
            }
            if matches!(c.mode, CoreMode::Dedicated(_)) && c.cells.len() > 1 {
                return Some(format!(
                    "core {} is dedicated to {} but also used by {:?}",
                    c.core,
                    c.cells[0],
                    &c.cells[1..]
                ));
            }
        }
        let shared = cores.iter().filter(|c| c.mode == CoreMode::Shared).count();
        if shared < self.machine.system_cores {
            return Some(format!(
                "only {shared} core(s) would stay with the rest of the system; {} must",
                self.machine.system_cores
            ));
        }
        if let Some(r) = self
            .grants
            .values()
            .flat_map(|g| &g.reservations)
            .find(|r| r.core.is_none() && r.budget.bandwidth() > self.machine.capacity)
        {
            return Some(global_too_big(r.budget.bandwidth(), self.machine.capacity));
        }
        let global = self.global_reserved();
        let global_cap = self.machine.capacity.times(shared as u64);
        (global > global_cap).then(|| global_over(global, global_cap))
    }

    /// Shared cores that may leave the shared domain, highest first (CPU 0
    /// keeps the system's housekeeping, as with isolcpus).
    fn convertible_cores(&self, count: usize) -> Vec<usize> {
        let shared = self.shared_cores();
        let keep = self.machine.system_cores.max(1);
        let global = self.global_reserved();
        let mut out = Vec::new();
        for &core in shared.iter().rev() {
            let remaining = shared.len() - out.len() - 1;
            if out.len() == count || remaining < keep {
                break;
            }
            if global > self.machine.capacity.times(remaining as u64) {
                break;
            }
            out.push(core);
        }
        out
    }

    fn admit_dedicated(&self, req: &CellRequest) -> Result<Grant, (String, Option<String>)> {
        let n = req.cores.count();
        let available = self.convertible_cores(usize::MAX);
        let chosen = match &req.cores {
            CoreRequest::Count(_) => available.iter().copied().take(n).collect::<Vec<_>>(),
            CoreRequest::List(list) => {
                if let Some(c) = list.iter().find(|c| !available.contains(c)) {
                    return Err((
                        format!("core {c} cannot be dedicated: {}", self.why_busy(*c)),
                        Some(format!("free to dedicate: {}", list_or_none(&available))),
                    ));
                }
                list.clone()
            }
        };
        if chosen.len() < n {
            return Err((
                format!(
                    "needs {n} dedicated core(s); {} can be given while keeping {} core(s) for the rest of the system",
                    available.len(),
                    self.machine.system_cores
                ),
                Some(format!("free to dedicate: {}", list_or_none(&available))),
            ));
        }
        Ok(Grant {
            request: req.clone(),
            dedicated: chosen,
            reservations: Vec::new(),
        })
    }

    fn why_busy(&self, core: usize) -> String {
        let usage = self.core_usage(core);
        match usage.mode {
            CoreMode::Dedicated(owner) => format!("it is dedicated to {owner:?}"),
            CoreMode::Partitioned => format!("it carries reservations of {:?}", usage.cells),
            CoreMode::Shared => format!(
                "it is needed by the rest of the system ({} core(s) stay shared, and global reservations need {})",
                self.machine.system_cores,
                self.global_reserved()
            ),
        }
    }

    fn admit_best_effort(&self, req: &CellRequest) -> Result<Grant, (String, Option<String>)> {
        if let CoreRequest::List(list) = &req.cores {
            if let Some(c) = list
                .iter()
                .find(|&&c| matches!(self.core_usage(c).mode, CoreMode::Dedicated(_)))
            {
                return Err((
                    format!("core {c} is dedicated: {}", self.why_busy(*c)),
                    None,
                ));
            }
        }
        Ok(Grant {
            request: req.clone(),
            dedicated: Vec::new(),
            reservations: Vec::new(),
        })
    }

    /// Bandwidth the shared cores still have for global reservations.
    pub fn global_free(&self) -> Bandwidth {
        let shared = self.shared_cores().len() as u64;
        let cap = self.machine.capacity.times(shared);
        cap.saturating_sub(self.global_reserved())
    }

    fn admit_global(
        &self,
        req: &CellRequest,
        budget: Budget,
    ) -> Result<Grant, (String, Option<String>)> {
        let n = req.cores.count() as u64;
        let free = self.global_free();
        let need = budget.bandwidth().times(n);
        if budget.bandwidth() > self.machine.capacity || need > free {
            let per = Bandwidth(free.0 / n.max(1)).min(self.machine.capacity);
            return Err((
                format!(
                    "needs {} of a core ({} × {}) in the shared domain; {} is free there",
                    need,
                    n,
                    budget.bandwidth(),
                    free
                ),
                Some(would_fit(per.runtime_in(budget.period_ns), &budget)),
            ));
        }
        let reservations = (0..n).map(|_| Reservation { core: None, budget }).collect();
        Ok(Grant {
            request: req.clone(),
            dedicated: Vec::new(),
            reservations,
        })
    }

    fn admit_partitioned(
        &self,
        req: &CellRequest,
        budget: Budget,
    ) -> Result<Grant, (String, Option<String>)> {
        if let Some(core) = req.stacked_core() {
            return self.admit_stacked(req, budget, core);
        }
        let n = req.cores.count();
        let candidates = self.partition_candidates(req);
        let chosen: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&c| self.fits_on(c, budget).is_ok())
            .collect();
        let chosen = self.keep_system_cores(chosen, n);
        if chosen.len() < n {
            return Err(self.explain_partitioned(req, &budget, &candidates));
        }
        let reservations = chosen
            .iter()
            .map(|&core| Reservation {
                core: Some(core),
                budget,
            })
            .collect();
        Ok(Grant {
            request: req.clone(),
            dedicated: Vec::new(),
            reservations,
        })
    }

    /// A stacked cell's reservations, all of `budget` on `core`, if the
    /// core may be partitioned and they pass its EDF test together with
    /// what is there.
    fn admit_stacked(
        &self,
        req: &CellRequest,
        budget: Budget,
        core: usize,
    ) -> Result<Grant, (String, Option<String>)> {
        let n = req.cores.count();
        if self
            .keep_system_cores(self.partition_candidates(req), 1)
            .is_empty()
        {
            return Err((
                format!(
                    "core {core} cannot take reservations (it is dedicated, or kept for the rest of the system: {} core(s))",
                    self.machine.system_cores
                ),
                None,
            ));
        }
        let fits = |b: Budget| {
            let mut budgets = self.budgets_on(core);
            budgets.extend(std::iter::repeat_n(b, n));
            edf::feasible(&budgets, self.machine.capacity).is_ok()
        };
        if !fits(budget) {
            let runtime = largest_fitting(MIN_RUNTIME_NS, budget.runtime_ns, |r| {
                fits(budget.with_runtime(r, false))
            });
            return Err((
                format!(
                    "needs {} of core {core} ({n} × {}); {} is free there",
                    budget.bandwidth().times(n as u64),
                    budget.bandwidth(),
                    self.core_usage(core).free()
                ),
                Some(match runtime {
                    Some(r) => format!("{n} × {}", would_fit(r, &budget)),
                    None => "nothing would fit now".into(),
                }),
            ));
        }
        let reservation = Reservation {
            core: Some(core),
            budget,
        };
        Ok(Grant {
            request: req.clone(),
            dedicated: Vec::new(),
            reservations: vec![reservation; n],
        })
    }

    /// Cores that may take a partitioned reservation, in order of
    /// preference: already-partitioned cores with the most free first (to
    /// keep the rest of the machine shared), then shared cores that may leave
    /// the shared domain; only the listed ones for an explicit core list.
    fn partition_candidates(&self, req: &CellRequest) -> Vec<usize> {
        let mut partitioned: Vec<CoreUsage> = self
            .cores()
            .into_iter()
            .filter(|u| u.mode == CoreMode::Partitioned)
            .collect();
        partitioned.sort_by(|a, b| b.free().cmp(&a.free()).then(a.core.cmp(&b.core)));
        let mut cores: Vec<usize> = partitioned.iter().map(|u| u.core).collect();
        cores.extend(self.convertible_cores(usize::MAX));
        if let CoreRequest::List(list) = &req.cores {
            cores.retain(|c| list.contains(c));
        }
        cores
    }

    /// Takes `n` of the candidate cores without converting so many shared
    /// cores that the system or the global reservations lose their room.
    fn keep_system_cores(&self, candidates: Vec<usize>, n: usize) -> Vec<usize> {
        let shared = self.shared_cores();
        let allowed = self.convertible_cores(usize::MAX).len();
        let mut converted = 0;
        let mut out = Vec::new();
        for c in candidates {
            if out.len() == n {
                break;
            }
            if shared.contains(&c) {
                if converted == allowed {
                    continue;
                }
                converted += 1;
            }
            out.push(c);
        }
        out
    }

    fn explain_partitioned(
        &self,
        req: &CellRequest,
        budget: &Budget,
        candidates: &[usize],
    ) -> (String, Option<String>) {
        let n = req.cores.count();
        let where_ = if n == 1 {
            "on a single core".to_string()
        } else {
            format!("on each of {n} cores")
        };
        let mut best: Vec<(usize, Bandwidth, Option<u64>)> = candidates
            .iter()
            .map(|&c| {
                (
                    c,
                    self.core_usage(c).free(),
                    self.largest_runtime_on(c, budget),
                )
            })
            .collect();
        best.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
        let Some(&(core, free, _)) = best.first() else {
            let reason = format!(
                "needs {} of a core {where_}; no core can take reservations (the others are dedicated or kept for the rest of the system: {} core(s))",
                budget.bandwidth(),
                self.machine.system_cores
            );
            return (reason, None);
        };
        let mut reason = format!(
            "needs {} of a core {where_}; the most free on any core is {free} (core {core})",
            budget.bandwidth()
        );
        if let Err(Overload::Demand {
            interval_ns,
            demand_ns,
        }) = self.fits_on(core, *budget)
        {
            reason.push_str(&format!(
                ", but its deadline of {} cannot be met there: {} of runtime would be due within {}",
                fmt_us(budget.deadline_ns),
                fmt_us(demand_ns),
                fmt_us(interval_ns)
            ));
        }
        let fit = match best.get(n - 1) {
            Some(&(_, _, Some(runtime))) if best.len() >= n => would_fit(runtime, budget),
            _ if best.len() < n => format!("only {} core(s) can take reservations", best.len()),
            _ => "nothing would fit now".into(),
        };
        (reason, Some(fit))
    }
}

/// `grant` with every reservation's runtime at most `cap` (the cell's
/// budget, the largest, too).
fn capped(mut grant: Grant, cap: u64) -> Grant {
    for r in &mut grant.reservations {
        r.budget.runtime_ns = r.budget.runtime_ns.min(cap);
    }
    if let Some(b) = grant.request.budget.as_mut() {
        b.runtime_ns = b.runtime_ns.min(cap);
    }
    grant
}

/// The reservations that give way to an asker: on its partitioned cores,
/// and of a period no shorter than its own — a thread of the same cycle or
/// a faster one (the server's driver beside its clients' workgroup), never
/// a background share of a longer period, which has time to wait (on §4.5's
/// core the peer's eleven notification threads, at 1 % each, took a fifth
/// of it from the members).
struct Within<'a> {
    cores: &'a [usize],
    period_ns: u64,
}

impl Within<'_> {
    fn holds(&self, r: &Reservation) -> bool {
        r.core.is_some_and(|c| self.cores.contains(&c)) && r.budget.period_ns >= self.period_ns
    }
}

/// `grant` with each of its reservations `within` at most `level` of
/// bandwidth (the kernel's minimum runtime at least), its budget the
/// largest of them.
fn capped_on(mut grant: Grant, within: &Within, level: Bandwidth) -> Grant {
    let window = is_window(&grant);
    for r in &mut grant.reservations {
        let runtime = level.runtime_in(r.budget.period_ns).max(MIN_RUNTIME_NS);
        if within.holds(r) && runtime < r.budget.runtime_ns {
            r.budget = r.budget.with_runtime(runtime, window);
        }
    }
    let largest = grant
        .reservations
        .iter()
        .map(|r| r.budget)
        .max_by_key(|b| b.runtime_ns);
    if let (Some(b), Some(largest)) = (grant.request.budget.as_mut(), largest) {
        b.runtime_ns = largest.runtime_ns;
        b.deadline_ns = largest.deadline_ns;
    }
    grant
}

/// The grant `req` would have on the partitioned cores it names: one
/// reservation of its budget per core listed (a stacked cell's all on
/// one). None for a request that names none, or is not a partitioned
/// bandwidth cell.
fn on_named_cores(req: &CellRequest) -> Option<Grant> {
    let CoreRequest::List(cores) = &req.cores else {
        return None;
    };
    let partitioned = req.policy.needs_budget() && req.placement == Placement::Partitioned;
    let budget = req.budget.filter(|_| partitioned)?;
    Some(Grant {
        request: req.clone(),
        dedicated: Vec::new(),
        reservations: cores
            .iter()
            .map(|&core| Reservation {
                core: Some(core),
                budget,
            })
            .collect(),
    })
}

fn is_window(grant: &Grant) -> bool {
    grant.request.policy == CellPolicy::TimeTriggered
}

/// What breaks on a partitioned core carrying `reserved` in `budgets`.
fn core_violation(
    core: usize,
    reserved: Bandwidth,
    budgets: &[Budget],
    capacity: Bandwidth,
) -> Option<String> {
    if reserved > capacity {
        return Some(format!(
            "core {core} would carry {reserved} against a capacity of {capacity}"
        ));
    }
    match edf::feasible(budgets, capacity) {
        Err(Overload::Demand {
            interval_ns,
            demand_ns,
        }) => Some(format!(
            "core {core} would owe {} of runtime within {} of a release: a deadline would be missed",
            fmt_us(demand_ns),
            fmt_us(interval_ns)
        )),
        _ => None,
    }
}

fn global_too_big(bandwidth: Bandwidth, capacity: Bandwidth) -> String {
    format!("a global reservation of {bandwidth} would exceed one core's capacity {capacity}")
}

fn global_over(total: Bandwidth, capacity: Bandwidth) -> String {
    format!("global reservations {total} would exceed the shared cores' capacity {capacity}")
}

fn refuse_resize(name: &str, reason: String, would_fit: Option<String>) -> Refusal {
    Refusal {
        cell: name.to_string(),
        reason,
        would_fit,
    }
}

/// The fix goes where a client reads what to do, not into the reason.
fn refuse_invalid(name: &str, e: RequestError) -> Refusal {
    Refusal {
        cell: name.to_string(),
        reason: format!("{}: {}", e.field, e.problem),
        would_fit: Some(e.fix),
    }
}

fn would_fit(runtime: u64, budget: &Budget) -> String {
    if runtime < MIN_RUNTIME_NS {
        return "nothing would fit now".into();
    }
    // Round down to a whole microsecond so the suggestion itself fits.
    let runtime = runtime / 1000 * 1000;
    format!(
        "runtime ≤ {} at period {} would fit",
        fmt_us(runtime),
        fmt_us(budget.period_ns)
    )
}

fn list_or_none(cores: &[usize]) -> String {
    if cores.is_empty() {
        "none".into()
    } else {
        format!("{cores:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::CoreRequest;
    use proptest::prelude::*;

    fn machine() -> Machine {
        Machine {
            limits: Limits {
                cores: vec![0, 1, 2],
                min_period_ns: 100_000,
                max_period_ns: 4_194_304_000,
            },
            capacity: Bandwidth::from_fraction(0.9),
            system_cores: 1,
        }
    }

    /// A cell: its share of the period (permille), partitioned or global,
    /// a window (deadline = runtime) or not, and one of three periods.
    fn arb_cell() -> impl Strategy<Value = (u64, bool, bool, usize)> {
        (1u64..700, any::<bool>(), any::<bool>(), 0usize..3)
    }

    fn request(
        i: usize,
        (permille, global, window, period): (u64, bool, bool, usize),
    ) -> CellRequest {
        let period = [1_000_000, 1_333_000, 10_000_000][period];
        let runtime = (period * permille / 1000).max(MIN_RUNTIME_NS);
        let mut r = if window && !global {
            CellRequest::time_triggered(format!("c{i}"), runtime, period)
        } else {
            CellRequest::event_triggered(format!("c{i}"), runtime, period)
        };
        if global {
            r.placement = Placement::Global;
        } else {
            r.cores = CoreRequest::Count(1);
        }
        r
    }

    /// `old` at `permille` of its period (a window's deadline with it).
    fn resized_by(old: Budget, permille: u64) -> Budget {
        let runtime = (old.period_ns * permille / 1000).max(MIN_RUNTIME_NS);
        old.with_runtime(runtime, old.deadline_ns == old.runtime_ns)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn a_resize_is_judged_as_the_whole_ledger_would_judge_it(
            cells in proptest::collection::vec(arb_cell(), 1..12),
            resizes in proptest::collection::vec((0usize..12, 1u64..950), 1..8),
        ) {
            let mut ledger = Ledger::new(machine());
            for (i, c) in cells.iter().enumerate() {
                let _ = ledger.insert(&request(i, *c));
            }
            let names: Vec<String> = ledger.grants.keys().cloned().collect();
            prop_assume!(!names.is_empty());
            for (pick, permille) in resizes {
                let name = &names[pick % names.len()];
                let budget = resized_by(ledger.grants[name].request.budget.unwrap(), permille);
                let Ok(grant) = ledger.resized(name, budget) else { continue };
                let whole = ledger.with_grant(&grant).err();
                prop_assert_eq!(ledger.resize_violation(&grant), whole);
                let _ = ledger.resize_or_degrade(name, budget);
                prop_assert_eq!(ledger.violation(), None);
            }
        }

        #[test]
        fn a_budget_per_reservation_is_judged_as_the_whole_ledger_would_and_degrades_by_a_cap(
            cells in proptest::collection::vec(arb_cell(), 0..8),
            members in 1usize..6,
            shares in proptest::collection::vec(1u64..900, 6),
            degrade in any::<bool>(),
            stacked_on in proptest::option::of(1usize..3),
        ) {
            let mut ledger = Ledger::new(machine());
            for (i, c) in cells.iter().enumerate() {
                let _ = ledger.insert(&request(i, *c));
            }
            let mut wg = CellRequest::event_triggered("wg", MIN_RUNTIME_NS, 1_333_000);
            match stacked_on {
                Some(core) => wg.cores = CoreRequest::List(vec![core; members]),
                None => {
                    wg.placement = Placement::Global;
                    wg.cores = CoreRequest::Count(members);
                }
            }
            prop_assume!(ledger.insert(&wg).is_ok());
            let budgets: Vec<Budget> = shares[..members]
                .iter()
                .map(|p| Budget::new((1_333_000 * p / 1000).max(MIN_RUNTIME_NS), 1_333_000))
                .collect();
            let grant = ledger.resized_each("wg", &budgets).unwrap();
            let whole = ledger.with_grant(&grant).err();
            prop_assert_eq!(ledger.resize_violation(&grant), whole.clone());
            let before = ledger.clone();
            match ledger.resize_each("wg", &budgets, degrade) {
                Ok((g, degraded)) => {
                    prop_assert_eq!(degraded, whole.is_some());
                    let cap = g.reservations.iter().map(|r| r.budget.runtime_ns).max().unwrap();
                    for (r, asked) in g.reservations.iter().zip(&budgets) {
                        // Each keeps its own below the cap, and is cut to it above.
                        prop_assert_eq!(r.budget.runtime_ns, asked.runtime_ns.min(cap));
                    }
                    prop_assert_eq!(g.request.budget.map(|b| b.runtime_ns), Some(cap));
                }
                Err(_) => prop_assert_eq!(&ledger, &before),
            }
            prop_assert_eq!(ledger.violation(), None);
        }

        #[test]
        fn a_cell_that_gives_way_never_goes_below_the_smaller_asker_and_the_asker_gets_no_less(
            cells in proptest::collection::vec(arb_cell(), 0..6),
            members in 1usize..6,
            member_permille in 1u64..400,
            resizes in proptest::collection::vec((0usize..8, 1u64..950), 1..8),
        ) {
            let mut ledger = Ledger::new(machine());
            for (i, c) in cells.iter().enumerate() {
                let _ = ledger.insert(&request(i, *c));
            }
            let runtime = (1_333_000 * member_permille / 1000).max(MIN_RUNTIME_NS);
            let mut wg = CellRequest::event_triggered("wg", runtime, 1_333_000);
            wg.cores = CoreRequest::List(vec![2; members]);
            wg.gives_way = true;
            prop_assume!(ledger.insert(&wg).is_ok());
            let names: Vec<String> =
                ledger.grants.keys().filter(|n| *n != "wg").cloned().collect();
            prop_assume!(!names.is_empty());
            for (pick, permille) in resizes {
                let name = &names[pick % names.len()];
                let budget = resized_by(ledger.grants[name].request.budget.unwrap(), permille);
                let members_before = ledger.grants["wg"].clone();
                let mut unyielding = ledger.clone();
                unyielding.grants.get_mut("wg").unwrap().request.gives_way = false;
                let without = unyielding.resize_or_degrade(name, budget).ok();
                let Ok(resized) = ledger.resize_or_degrade(name, budget) else {
                    prop_assert!(without.is_none());
                    continue;
                };
                prop_assert_eq!(ledger.violation(), None);
                if let Some(without) = without {
                    let runtime = |g: &Grant| g.request.budget.unwrap().runtime_ns;
                    prop_assert!(runtime(&resized.grant) >= runtime(&without.grant));
                }
                let asked = resized.grant.reservations.iter().map(|r| r.budget.bandwidth()).max();
                let on_2 = resized.grant.reservations.iter().any(|r| r.core == Some(2));
                let members_after = &ledger.grants["wg"];
                for (before, after) in members_before.reservations.iter().zip(&members_after.reservations) {
                    prop_assert!(after.budget.runtime_ns <= before.budget.runtime_ns);
                    if after.budget != before.budget {
                        // Only for an asker on the members' core, of a
                        // period no longer, and never below it.
                        prop_assert!(on_2);
                        prop_assert!(budget.period_ns <= after.budget.period_ns);
                        let floor = asked.unwrap().runtime_in(after.budget.period_ns);
                        prop_assert!(after.budget.runtime_ns >= floor.max(MIN_RUNTIME_NS));
                    }
                }
                prop_assert_eq!(resized.gave_way.is_empty(), members_after == &members_before);
            }
        }
    }

    proptest! {
        #[test]
        fn a_new_cell_is_given_way_only_down_to_its_own_bandwidth_and_is_never_refused_for_it(
            members in 1usize..6,
            member_permille in 1u64..400,
            news in proptest::collection::vec((1u64..500, 0usize..3, any::<bool>()), 1..8),
        ) {
            let mut ledger = Ledger::new(machine());
            let runtime = (1_333_000 * member_permille / 1000).max(MIN_RUNTIME_NS);
            let mut wg = CellRequest::event_triggered("wg", runtime, 1_333_000);
            wg.cores = CoreRequest::List(vec![2; members]);
            wg.gives_way = true;
            prop_assume!(ledger.insert(&wg).is_ok());
            for (i, (permille, period, on_2)) in news.into_iter().enumerate() {
                let period = [1_000_000, 1_333_000, 10_000_000][period];
                let runtime = (period * permille / 1000).max(MIN_RUNTIME_NS);
                let core = if on_2 { 2 } else { 1 };
                let req = CellRequest::event_triggered(format!("n{i}"), runtime, period)
                    .on_cores(vec![core]);
                let before = ledger.clone();
                let mut unyielding = ledger.clone();
                unyielding.grants.get_mut("wg").unwrap().request.gives_way = false;
                let without = unyielding.insert(&req);
                let Ok((_, gave_way)) = ledger.insert_making_way(&req) else {
                    prop_assert!(without.is_err());
                    prop_assert_eq!(&ledger, &before);
                    continue;
                };
                prop_assert_eq!(ledger.violation(), None);
                let asked = Budget::new(runtime, period).bandwidth();
                let (old, new) = (&before.grants["wg"], &ledger.grants["wg"]);
                for (b, a) in old.reservations.iter().zip(&new.reservations) {
                    prop_assert!(a.budget.runtime_ns <= b.budget.runtime_ns);
                    if a.budget != b.budget {
                        prop_assert!(without.is_err() && on_2 && period <= a.budget.period_ns);
                        let floor = asked.runtime_in(a.budget.period_ns).max(MIN_RUNTIME_NS);
                        prop_assert!(a.budget.runtime_ns >= floor);
                    }
                }
                prop_assert_eq!(gave_way.is_empty(), old == new);
            }
        }
    }

    /// A workgroup of four members at 20 % on core 2, and the server's
    /// driver beside them at 5 %.
    fn a_workgroup_beside_its_server() -> Ledger {
        let mut ledger = Ledger::new(machine());
        let mut wg = CellRequest::event_triggered("wg", 200_000, 1_000_000).on_cores(vec![2; 4]);
        wg.gives_way = true;
        ledger.insert(&wg).unwrap();
        let driver = CellRequest::event_triggered("driver", 50_000, 1_000_000).on_cores(vec![2]);
        ledger.insert(&driver).unwrap();
        ledger
    }

    #[test]
    fn a_workgroup_gives_way_to_its_servers_smaller_thread_down_to_what_it_needs() {
        let mut ledger = a_workgroup_beside_its_server();
        assert_eq!(
            ledger.core_usage(2).giving_way,
            vec![Budget::new(200_000, 1_000_000); 4]
        );
        // 15 % beside 4 × 20 % passes the core's 90 %: the members go to
        // 18.75 % each, and the driver has all it asked.
        let resized = ledger
            .resize_or_degrade("driver", Budget::new(150_000, 1_000_000))
            .unwrap();
        assert!(!resized.degraded);
        assert_eq!(resized.grant.request.budget.unwrap().runtime_ns, 150_000);
        assert_eq!(resized.gave_way.len(), 1);
        assert_eq!(
            resized.gave_way[0].reservations[0].budget.runtime_ns,
            200_000
        );
        for r in &ledger.grant("wg").unwrap().reservations {
            assert!(
                (187_000..=187_500).contains(&r.budget.runtime_ns),
                "{:?}",
                r.budget
            );
        }
        assert_eq!(ledger.violation(), None);
    }

    #[test]
    fn a_workgroup_never_gives_way_to_a_larger_reservation() {
        let mut ledger = a_workgroup_beside_its_server();
        // 30 % is more than any member's 20 %: what is free (10 %) is all.
        let resized = ledger
            .resize_or_degrade("driver", Budget::new(300_000, 1_000_000))
            .unwrap();
        assert!(resized.degraded);
        assert!(resized.gave_way.is_empty());
        let runtime = resized.grant.request.budget.unwrap().runtime_ns;
        assert!((99_000..=100_001).contains(&runtime), "{runtime}");
        let members = &ledger.grant("wg").unwrap().reservations;
        assert!(members.iter().all(|r| r.budget.runtime_ns == 200_000));
    }

    /// A workgroup of four members at 22.5 % on core 2: the core's 90 %.
    fn a_full_workgroup_core() -> Ledger {
        let mut ledger = Ledger::new(machine());
        let mut wg = CellRequest::event_triggered("wg", 225_000, 1_000_000).on_cores(vec![2; 4]);
        wg.gives_way = true;
        ledger.insert(&wg).unwrap();
        ledger
    }

    #[test]
    fn a_new_cell_on_a_full_workgroup_core_is_given_way_down_to_its_own_bandwidth() {
        let mut ledger = a_full_workgroup_core();
        // A new 5 % thread there fits only if the members give way, to
        // 21.25 % each.
        let thread = CellRequest::event_triggered("thread", 50_000, 1_000_000).on_cores(vec![2]);
        assert!(ledger.admit(&thread).is_err());
        let (grant, gave_way) = ledger.insert_making_way(&thread).unwrap();
        assert_eq!(grant.reservations[0].budget.runtime_ns, 50_000);
        assert_eq!(gave_way.len(), 1);
        assert_eq!(gave_way[0].request.name, "wg");
        assert_eq!(gave_way[0].reservations[0].budget.runtime_ns, 225_000);
        for r in &ledger.grant("wg").unwrap().reservations {
            let runtime = r.budget.runtime_ns;
            assert!((212_000..=212_500).contains(&runtime), "{runtime}");
        }
        assert_eq!(ledger.violation(), None);
    }

    #[test]
    fn a_new_cell_larger_than_a_member_or_of_a_longer_period_is_refused_as_before() {
        let mut ledger = a_full_workgroup_core();
        let before = ledger.clone();
        let larger = CellRequest::event_triggered("larger", 300_000, 1_000_000).on_cores(vec![2]);
        let slower = CellRequest::event_triggered("slower", 40_000, 2_000_000).on_cores(vec![2]);
        for req in [larger, slower] {
            let refused = ledger.insert_making_way(&req).unwrap_err();
            assert!(refused.reason.contains("core 2"), "{refused}");
            assert_eq!(ledger, before);
        }
    }

    #[test]
    fn a_stacked_cell_puts_its_reservations_on_one_core_when_they_fit_together() {
        let mut ledger = Ledger::new(machine());
        let stacked = |name: &str, runtime, n| {
            CellRequest::event_triggered(name, runtime, 1_000_000).on_cores(vec![2; n])
        };
        let g = ledger.insert(&stacked("chain", 200_000, 4)).unwrap();
        assert_eq!(g.reservations.len(), 4);
        assert!(g.reservations.iter().all(|r| r.core == Some(2)));
        assert_eq!(ledger.core_usage(2).mode, CoreMode::Partitioned);
        assert_eq!(ledger.violation(), None);
        // 4 × 20 % is there; 2 × 10 % more would pass 90 %.
        let refused = ledger.insert(&stacked("more", 100_000, 2)).unwrap_err();
        assert!(refused.reason.contains("2 × "), "{refused}");
        assert!(refused.would_fit.unwrap().contains("runtime ≤ 50 µs"));
        // Only an event-triggered partitioned cell may name a core twice.
        let mut global = stacked("global", 100_000, 2);
        global.placement = Placement::Global;
        let twice = ledger.insert(&global).unwrap_err();
        assert!(twice.reason.contains("named twice"), "{twice}");
    }

    #[test]
    fn a_budget_per_reservation_needs_one_per_reservation_and_one_period() {
        let mut ledger = Ledger::new(machine());
        let mut wg = CellRequest::event_triggered("wg", 100_000, 1_000_000);
        wg.placement = Placement::Global;
        wg.cores = CoreRequest::Count(2);
        ledger.insert(&wg).unwrap();
        let b = |runtime, period| Budget::new(runtime, period);
        let one = ledger.resize_each("wg", &[b(100_000, 1_000_000)], false);
        assert!(one
            .unwrap_err()
            .reason
            .contains("1 budget(s) given for its 2"));
        let mixed =
            ledger.resize_each("wg", &[b(100_000, 1_000_000), b(100_000, 2_000_000)], false);
        assert!(mixed.unwrap_err().reason.contains("different periods"));
        let (g, degraded) = ledger
            .resize_each("wg", &[b(300_000, 1_000_000), b(100_000, 1_000_000)], false)
            .unwrap();
        assert!(!degraded);
        let runtimes: Vec<u64> = g.reservations.iter().map(|r| r.budget.runtime_ns).collect();
        assert_eq!(runtimes, [300_000, 100_000]);
        assert_eq!(g.request.budget, Some(b(300_000, 1_000_000)));
    }
}
