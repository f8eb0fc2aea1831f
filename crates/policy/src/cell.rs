//! What a cell asks for: its multiplexing policy (the seed's four), its cores
//! and its CPU budget, and the validation of those against the kernel's legal
//! ranges and the machine's size.
//!
//! It must never consult the ledger: validity does not depend on what else
//! runs; admission (the ledger's) does.

use crate::bandwidth::Bandwidth;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The seed's multiplexing policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellPolicy {
    /// Whole cores for this cell alone; every other task is moved off them.
    Dedicated,
    /// A fixed window of `runtime` at the start of every `period`.
    TimeTriggered,
    /// A constant-bandwidth server: at most `runtime` every `period`, woken by events.
    EventTriggered,
    /// No guarantee: a weight relative to other best-effort cells.
    BestEffort,
}

impl CellPolicy {
    pub const ALL: [CellPolicy; 4] = [
        CellPolicy::Dedicated,
        CellPolicy::TimeTriggered,
        CellPolicy::EventTriggered,
        CellPolicy::BestEffort,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CellPolicy::Dedicated => "dedicated",
            CellPolicy::TimeTriggered => "time-triggered",
            CellPolicy::EventTriggered => "event-triggered",
            CellPolicy::BestEffort => "best-effort",
        }
    }

    pub fn parse(s: &str) -> Option<CellPolicy> {
        CellPolicy::ALL.into_iter().find(|p| p.name() == s)
    }

    pub fn needs_budget(self) -> bool {
        matches!(self, CellPolicy::TimeTriggered | CellPolicy::EventTriggered)
    }
}

impl fmt::Display for CellPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a bandwidth cell's reservations live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// One reservation per core, each core its own root domain (an exclusive
    /// cpuset): the guarantee of uniprocessor EDF.
    #[default]
    Partitioned,
    /// Reservations in the shared root domain under global EDF: admitted by
    /// the sum over the shared cores; tardiness is bounded, not zero.
    Global,
}

/// Which cores: any `n`, or exactly these. For a bandwidth cell under
/// global EDF, `Count` is its number of reservations in the shared domain;
/// an event-triggered partitioned cell may name one core several times
/// ([`CellRequest::stacked_core`]): that many reservations on that core.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CoreRequest {
    Count(usize),
    List(Vec<usize>),
}

impl CoreRequest {
    pub fn count(&self) -> usize {
        match self {
            CoreRequest::Count(n) => *n,
            CoreRequest::List(l) => l.len(),
        }
    }
}

/// A CBS budget: `runtime` every `period`, due `deadline` after release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    pub runtime_ns: u64,
    pub deadline_ns: u64,
    pub period_ns: u64,
}

impl Budget {
    /// Whether `to` is this budget made smaller: less runtime in the same
    /// period (a change of period is not).
    pub fn shrinks_to(&self, to: Budget) -> bool {
        to.period_ns == self.period_ns && to.runtime_ns < self.runtime_ns
    }

    pub fn new(runtime_ns: u64, period_ns: u64) -> Budget {
        Budget {
            runtime_ns,
            deadline_ns: period_ns,
            period_ns,
        }
    }

    /// The same budget with another runtime: a time-triggered `window`
    /// keeps its deadline equal to its runtime, others keep theirs.
    pub fn with_runtime(&self, runtime_ns: u64, window: bool) -> Budget {
        Budget {
            runtime_ns,
            deadline_ns: if window { runtime_ns } else { self.deadline_ns },
            period_ns: self.period_ns,
        }
    }

    /// The kernel's measure (runtime / period).
    pub fn bandwidth(&self) -> Bandwidth {
        Bandwidth::of(self.runtime_ns, self.period_ns)
    }

    /// runtime / min(deadline, period): a sum of densities ≤ 1 suffices
    /// for EDF with constrained deadlines (the demand test's fallback).
    pub fn density(&self) -> Bandwidth {
        Bandwidth::of(self.runtime_ns, self.deadline_ns.min(self.period_ns))
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "runtime {} every {}",
            fmt_us(self.runtime_ns),
            fmt_us(self.period_ns)
        )?;
        if self.deadline_ns != self.period_ns {
            write!(f, " (deadline {})", fmt_us(self.deadline_ns))?;
        }
        Ok(())
    }
}

/// Nanoseconds as microseconds for messages ("466 µs").
pub fn fmt_us(ns: u64) -> String {
    if ns.is_multiple_of(1000) {
        format!("{} µs", ns / 1000)
    } else {
        format!("{:.1} µs", ns as f64 / 1000.0)
    }
}

/// A request for a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellRequest {
    pub name: String,
    pub policy: CellPolicy,
    pub cores: CoreRequest,
    pub budget: Option<Budget>,
    #[serde(default)]
    pub placement: Placement,
    /// Relative weight of a best-effort cell (100 is the default of cgroup v2).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// An allocation that must never change once granted.
    #[serde(default)]
    pub pinned: bool,
    /// Its owner adapts its budget itself (the guard's adaptive or fixed
    /// shares, seed 001 §3.4): the RAP service leaves it as it leaves a
    /// pinned cell, but unlike a pinned one its owner may resize it. Two
    /// controllers on one budget would fight, and the RAP service sees only
    /// a coarse interval's mean use per period, where the guard counts the
    /// thread's own cycles, predicts from the worst of recent ones and
    /// reacts to xruns.
    #[serde(default)]
    pub owner_adapts: bool,
    /// Its reservations on a partitioned core give way to another cell's
    /// degradable resize there that does not fit, or to a new cell on the
    /// cores it names that does not fit, when that cell's period
    /// is no longer than theirs: they are capped, all alike, at the largest
    /// bandwidth at which the other fits, never below the other's own
    /// (max-min: a cell gives way to a smaller one, never to a larger).
    /// A workgroup on its server's core: its members take the room the
    /// server's threads leave, and give it back when those grow.
    #[serde(default)]
    pub gives_way: bool,
    /// Let the reservations reclaim unused bandwidth (GRUB, SCHED_FLAG_RECLAIM).
    #[serde(default)]
    pub reclaim: bool,
    /// Signal a thread that overruns its runtime (SIGXCPU, SCHED_FLAG_DL_OVERRUN).
    #[serde(default)]
    pub overrun_signal: bool,
}

fn default_weight() -> u32 {
    100
}

/// The machine facts validation needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub cores: Vec<usize>,
    pub min_period_ns: u64,
    pub max_period_ns: u64,
}

/// Why a request is malformed (independent of what else runs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    pub field: &'static str,
    pub problem: String,
    pub fix: String,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (fix: {})", self.field, self.problem, self.fix)
    }
}

impl std::error::Error for RequestError {}

pub const MIN_RUNTIME_NS: u64 = 1024;

/// The most reservations one global cell (or one stacked on a core) holds:
/// a workgroup's members (a host's callback and worker threads, a chain of
/// clients), as many as a host runs.
pub const MAX_GLOBAL_RESERVATIONS: usize = 64;

fn bad(field: &'static str, problem: impl Into<String>, fix: impl Into<String>) -> RequestError {
    RequestError {
        field,
        problem: problem.into(),
        fix: fix.into(),
    }
}

impl CellRequest {
    /// A cell with the defaults: partitioned, weight 100, not pinned, left
    /// to the RAP service, no reclaiming, no overrun signal.
    pub fn new(
        name: impl Into<String>,
        policy: CellPolicy,
        cores: CoreRequest,
        budget: Option<Budget>,
    ) -> CellRequest {
        CellRequest {
            name: name.into(),
            policy,
            cores,
            budget,
            placement: Placement::Partitioned,
            weight: default_weight(),
            pinned: false,
            owner_adapts: false,
            gives_way: false,
            reclaim: false,
            overrun_signal: false,
        }
    }

    /// One reservation of `runtime` every `period` (deadline = period).
    pub fn event_triggered(
        name: impl Into<String>,
        runtime_ns: u64,
        period_ns: u64,
    ) -> CellRequest {
        Self::new(
            name,
            CellPolicy::EventTriggered,
            CoreRequest::Count(1),
            Some(Budget::new(runtime_ns, period_ns)),
        )
    }

    /// A window of `window` at the start of every `period`.
    pub fn time_triggered(name: impl Into<String>, window_ns: u64, period_ns: u64) -> CellRequest {
        let budget = Budget {
            runtime_ns: window_ns,
            deadline_ns: window_ns,
            period_ns,
        };
        Self::new(
            name,
            CellPolicy::TimeTriggered,
            CoreRequest::Count(1),
            Some(budget),
        )
    }

    pub fn dedicated(name: impl Into<String>, cores: CoreRequest) -> CellRequest {
        Self::new(name, CellPolicy::Dedicated, cores, None)
    }

    pub fn best_effort(name: impl Into<String>, weight: u32) -> CellRequest {
        CellRequest {
            weight,
            ..Self::new(name, CellPolicy::BestEffort, CoreRequest::Count(0), None)
        }
    }

    /// The same request on exactly these cores.
    pub fn on_cores(self, cores: Vec<usize>) -> CellRequest {
        CellRequest {
            cores: CoreRequest::List(cores),
            ..self
        }
    }

    /// Checks the request on its own; the ledger decides whether it fits.
    pub fn validate(&self, limits: &Limits) -> Result<(), RequestError> {
        validate_name(&self.name)?;
        self.validate_cores(limits)?;
        match (self.policy.needs_budget(), &self.budget) {
            (true, None) => Err(bad(
                "budget",
                format!("a {} cell needs a runtime and a period", self.policy),
                "give e.g. --runtime 400us --period 1333us",
            )),
            (false, Some(_)) => Err(bad(
                "budget",
                format!("a {} cell takes no runtime/period", self.policy),
                "drop --runtime/--period, or use --policy event-triggered",
            )),
            (true, Some(b)) => validate_budget(b, self.policy, limits),
            (false, None) => Ok(()),
        }?;
        if self.policy == CellPolicy::BestEffort && !(1..=10_000).contains(&self.weight) {
            return Err(bad(
                "weight",
                format!("{} is outside 1–10000", self.weight),
                "use a weight from 1 to 10000 (100 is normal)",
            ));
        }
        if self.policy == CellPolicy::TimeTriggered && self.placement == Placement::Global {
            return Err(bad(
                "placement",
                "a time-triggered window is per core",
                "use --placement partitioned",
            ));
        }
        Ok(())
    }

    /// The core of an event-triggered partitioned cell whose list names one
    /// core several times: that many reservations on it, EDF on one core
    /// (a workgroup whose members run one after the other, a chain of
    /// clients, beside their server's threads).
    pub fn stacked_core(&self) -> Option<usize> {
        let CoreRequest::List(list) = &self.cores else {
            return None;
        };
        let stackable =
            self.policy == CellPolicy::EventTriggered && self.placement == Placement::Partitioned;
        match list.as_slice() {
            [first, _, ..] if stackable && list.iter().all(|c| c == first) => Some(*first),
            _ => None,
        }
    }

    /// A bandwidth cell under global EDF: its count is of reservations in
    /// the shared domain, which may outnumber the cores (admission is by
    /// their sum, as the kernel's).
    fn is_global_bandwidth(&self) -> bool {
        self.policy.needs_budget() && self.placement == Placement::Global
    }

    fn validate_cores(&self, limits: &Limits) -> Result<(), RequestError> {
        let n = limits.cores.len();
        match &self.cores {
            CoreRequest::Count(0) if self.policy != CellPolicy::BestEffort => Err(bad(
                "cores",
                "a cell needs at least one core",
                "give --cores 1 or more",
            )),
            CoreRequest::Count(c) if self.is_global_bandwidth() && *c > MAX_GLOBAL_RESERVATIONS => {
                Err(bad(
                    "cores",
                    format!("asks for {c} reservations in the shared domain"),
                    format!("ask for at most {MAX_GLOBAL_RESERVATIONS}"),
                ))
            }
            CoreRequest::Count(c) if *c > n && !self.is_global_bandwidth() => Err(bad(
                "cores",
                format!("asks for {c} cores; this machine has {n}"),
                format!("ask for at most {n}"),
            )),
            CoreRequest::List(list) => {
                if let Some(c) = list.iter().find(|c| !limits.cores.contains(c)) {
                    return Err(bad(
                        "cores",
                        format!("core {c} does not exist (online: {:?})", limits.cores),
                        "name online cores",
                    ));
                }
                if self.stacked_core().is_some() && list.len() > MAX_GLOBAL_RESERVATIONS {
                    return Err(bad(
                        "cores",
                        format!("asks for {} reservations on one core", list.len()),
                        format!("ask for at most {MAX_GLOBAL_RESERVATIONS}"),
                    ));
                }
                let mut sorted = list.clone();
                sorted.sort_unstable();
                sorted.dedup();
                if sorted.len() != list.len() && self.stacked_core().is_none() {
                    return Err(bad(
                        "cores",
                        "a core is named twice",
                        "name each core once (an event-triggered partitioned cell may name one core only, several times: that many reservations on it)",
                    ));
                }
                if list.is_empty() && self.policy != CellPolicy::BestEffort {
                    return Err(bad("cores", "empty core list", "name at least one core"));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Whether `name` can name a cell (it names a cgroup directory too).
pub fn validate_name(name: &str) -> Result<(), RequestError> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(bad(
            "name",
            format!("{name:?} is not a valid cell name"),
            "use 1–48 letters, digits, '-' or '_' (it names a cgroup directory)",
        ))
    }
}

pub(crate) fn validate_budget(
    b: &Budget,
    policy: CellPolicy,
    limits: &Limits,
) -> Result<(), RequestError> {
    if b.period_ns < limits.min_period_ns || b.period_ns > limits.max_period_ns {
        return Err(bad(
            "period",
            format!(
                "{} is outside the kernel's range {} – {}",
                fmt_us(b.period_ns),
                fmt_us(limits.min_period_ns),
                fmt_us(limits.max_period_ns)
            ),
            "choose a period inside that range",
        ));
    }
    if b.runtime_ns < MIN_RUNTIME_NS {
        return Err(bad(
            "runtime",
            format!(
                "{} ns is below the kernel's minimum of 1024 ns",
                b.runtime_ns
            ),
            "ask for at least 2 µs",
        ));
    }
    if b.runtime_ns > b.period_ns {
        return Err(bad(
            "runtime",
            format!(
                "runtime {} exceeds the period {}",
                fmt_us(b.runtime_ns),
                fmt_us(b.period_ns)
            ),
            "a reservation gives at most one core: runtime ≤ period (use more cores for more)",
        ));
    }
    if b.deadline_ns < b.runtime_ns || b.deadline_ns > b.period_ns {
        return Err(bad(
            "deadline",
            format!(
                "deadline {} is not between runtime and period",
                fmt_us(b.deadline_ns)
            ),
            "runtime ≤ deadline ≤ period",
        ));
    }
    if policy == CellPolicy::TimeTriggered && b.deadline_ns != b.runtime_ns {
        return Err(bad(
            "deadline",
            "a time-triggered window's deadline is its runtime",
            "omit --deadline for time-triggered cells",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    #[test]
    fn only_less_runtime_in_the_same_period_is_a_shrink() {
        let held = Budget::new(500, 1000);
        assert!(held.shrinks_to(Budget::new(400, 1000)));
        assert!(!held.shrinks_to(Budget::new(500, 1000)));
        assert!(!held.shrinks_to(Budget::new(600, 1000)));
        assert!(!held.shrinks_to(Budget::new(100, 2000)));
    }

    use super::*;

    fn limits() -> Limits {
        Limits {
            cores: vec![0, 1],
            min_period_ns: 100_000,
            max_period_ns: 4_194_304_000,
        }
    }

    fn et(runtime_us: u64, period_us: u64) -> CellRequest {
        CellRequest::event_triggered("synth", runtime_us * 1000, period_us * 1000)
    }

    #[test]
    fn accepts_a_sane_request() {
        et(400, 1333).validate(&limits()).unwrap();
    }

    #[test]
    fn names_the_bad_field() {
        assert_eq!(
            et(2000, 1333).validate(&limits()).unwrap_err().field,
            "runtime"
        );
        assert_eq!(et(10, 50).validate(&limits()).unwrap_err().field, "period");
        assert_eq!(
            et(10, 5_000_000).validate(&limits()).unwrap_err().field,
            "period"
        );
        let mut r = et(400, 1333);
        r.cores = CoreRequest::Count(3);
        let e = r.validate(&limits()).unwrap_err();
        assert!(e.problem.contains("this machine has 2"), "{e}");
        r.cores = CoreRequest::List(vec![7]);
        assert_eq!(r.validate(&limits()).unwrap_err().field, "cores");
        // Under global EDF the count is of reservations, not cores.
        r.cores = CoreRequest::Count(4);
        r.placement = Placement::Global;
        r.validate(&limits()).unwrap();
        r.cores = CoreRequest::Count(MAX_GLOBAL_RESERVATIONS + 1);
        assert_eq!(r.validate(&limits()).unwrap_err().field, "cores");
        r = et(400, 1333);
        r.name = "../etc".into();
        assert_eq!(r.validate(&limits()).unwrap_err().field, "name");
        r = et(400, 1333);
        r.policy = CellPolicy::BestEffort;
        assert_eq!(r.validate(&limits()).unwrap_err().field, "budget");
    }
}
