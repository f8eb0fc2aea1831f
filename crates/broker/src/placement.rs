//! Putting one thread into a cell and taking it out again: its cpuset, CPU
//! weight group, affinity and scheduling policy, with what it had before
//! recorded so that leaving restores it exactly.
//!
//! A join that fails half-way is rolled back before the error is returned.
//! It must never decide what a cell gets: it applies a [`Target`] derived
//! from the ledger's grant.

use crate::layout::Layout;
use crate::state::{Member, Original};
use std::time::Duration;
use tessera_policy::{CellPolicy, CoreMode, Grant, Ledger, Placement, Reservation};
use tessera_sys::cgroup::{Group, Hierarchy, Version};
use tessera_sys::sched::{self, DeadlineFlags, DeadlineParams, Policy};
use tessera_sys::{affinity, proc, Error, ErrorKind, Result};

/// Where a member thread should be and how it should be scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub cpuset: Option<Group>,
    pub cpu_group: Option<Group>,
    pub affinity: Option<Vec<usize>>,
    pub policy: Option<Policy>,
}

/// What the kernel may be asked to do in this mode.
#[derive(Debug, Clone)]
pub struct Enforcement {
    /// cpusets (root only).
    pub layout: Option<Layout>,
    /// Why there are no cpusets though this mode would have them (no
    /// cgroup v2 with the cpuset controller where we looked).
    pub layout_missing: Option<String>,
    /// the cpu controller (root only).
    pub cpu: Option<Hierarchy>,
    /// SCHED_DEADLINE (CAP_SYS_NICE).
    pub deadline: bool,
}

impl Enforcement {
    pub fn none() -> Enforcement {
        Enforcement {
            layout: None,
            layout_missing: None,
            cpu: None,
            deadline: false,
        }
    }

    /// The cpu-controller group of a best-effort cell.
    pub fn weight_group(&self, cell: &str) -> Option<Group> {
        let cpu = self.cpu.as_ref()?;
        Some(match self.weight_parent() {
            Some(parent) => parent.child(cell),
            None => cpu.root().child(&format!("tessera-weight-{cell}")),
        })
    }

    /// The group holding the weight groups (v1 `tessera/`; v2 keeps them at
    /// the top level, where the cpu controller is enabled).
    pub fn weight_parent(&self) -> Option<Group> {
        let cpu = self.cpu.as_ref()?;
        (cpu.version == Version::V1).then(|| cpu.root().child("tessera"))
    }
}

/// Whether a best-effort cell needs a cpu-controller group: only for a
/// weight other than the default. (With RT group scheduling compiled in, a
/// thread in such a group cannot be SCHED_FIFO: default-weight cells keep
/// their threads' cpu group so that FIFO threads can join them.)
pub fn weighted(grant: &Grant) -> bool {
    grant.request.policy == CellPolicy::BestEffort && grant.request.weight != DEFAULT_WEIGHT
}

pub const DEFAULT_WEIGHT: u32 = 100;

/// The SCHED_DEADLINE parameters of `reservation` of `grant` (a
/// workgroup's members each hold a budget of their own).
fn deadline_policy(grant: &Grant, reservation: &Reservation) -> Policy {
    let budget = reservation.budget;
    // RESET_ON_FORK: a deadline thread may not fork without it, and its
    // children must not inherit a reservation the ledger never granted.
    let mut flags = DeadlineFlags::RESET_ON_FORK;
    if grant.request.reclaim {
        flags = flags | DeadlineFlags::RECLAIM;
    }
    if grant.request.overrun_signal {
        flags = flags | DeadlineFlags::DL_OVERRUN;
    }
    Policy::Deadline(DeadlineParams {
        runtime: Duration::from_nanos(budget.runtime_ns),
        deadline: Duration::from_nanos(budget.deadline_ns),
        period: Duration::from_nanos(budget.period_ns),
        flags,
    })
}

/// Where member `slot` of `grant` belongs under the current ledger. In a
/// bandwidth cell, `slot` None is a cpuset-only member (a followed
/// program's thread that is not real-time): it shares the first
/// reservation's cpuset and affinity and keeps its own policy.
pub fn target(
    grant: &Grant,
    slot: Option<usize>,
    ledger: &Ledger,
    enf: &Enforcement,
) -> Result<Target> {
    let mut t = Target {
        cpuset: None,
        cpu_group: None,
        affinity: None,
        policy: None,
    };
    let layout = enf.layout.as_ref();
    match grant.request.policy {
        CellPolicy::Dedicated => t.cpuset = layout.map(|l| l.cell_group(&grant.request.name)),
        CellPolicy::BestEffort => {
            t.cpu_group = weighted(grant)
                .then(|| enf.weight_group(&grant.request.name))
                .flatten();
            if let tessera_policy::CoreRequest::List(cores) = &grant.request.cores {
                best_effort_cores(&mut t, cores, ledger, layout)?;
            }
        }
        CellPolicy::EventTriggered | CellPolicy::TimeTriggered => {
            let reservation = match slot {
                Some(s) => grant.reservations.get(s),
                None => grant.reservations.first(),
            }
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Invalid,
                    "place a thread",
                    "no such reservation slot",
                    "",
                )
            })?;
            match (reservation.core, layout) {
                (Some(core), Some(l)) => t.cpuset = Some(l.core_group(core)),
                (None, Some(l)) if grant.request.placement == Placement::Global => {
                    t.cpuset = Some(l.system_group());
                    t.affinity = Some(ledger.shared_cores());
                }
                _ => t.affinity = Some(ledger.machine.limits.cores.clone()),
            }
            if enf.deadline && slot.is_some() {
                t.policy = Some(deadline_policy(grant, reservation));
            }
        }
    }
    Ok(t)
}

/// A best-effort cell restricted to cores: the partition group when it names
/// one partitioned core (its threads use that core's slack), else affinity.
fn best_effort_cores(
    t: &mut Target,
    cores: &[usize],
    ledger: &Ledger,
    layout: Option<&Layout>,
) -> Result<()> {
    let partitioned: Vec<usize> = cores
        .iter()
        .copied()
        .filter(|&c| ledger.core_usage(c).mode == CoreMode::Partitioned)
        .collect();
    match (partitioned.as_slice(), layout) {
        ([], _) => t.affinity = Some(cores.to_vec()),
        ([core], Some(l)) if cores.len() == 1 => t.cpuset = Some(l.core_group(*core)),
        _ => {
            return Err(Error::new(
                ErrorKind::Invalid,
                "place a best-effort thread",
                format!("cores {cores:?} mix partitioned core(s) {partitioned:?} with others"),
                "give a best-effort cell either one partitioned core or only shared cores",
            ))
        }
    }
    Ok(())
}

/// Records a thread's scheduling before it joins.
pub fn capture(pid: i32, tid: i32, slot: Option<usize>, t: &Target) -> Result<Member> {
    let original = Original {
        policy: sched::get_policy(tid)?,
        affinity: affinity::get_affinity(tid)?,
        cpuset: t
            .cpuset
            .as_ref()
            .map(|_| proc::cgroup_of(tid, Some("cpuset")))
            .transpose()?,
        cpu_group: t
            .cpu_group
            .as_ref()
            .map(|_| proc::cgroup_of(tid, Some("cpu")))
            .transpose()?,
    };
    Ok(Member {
        pid,
        tid,
        start_time: proc::start_time(tid)?,
        slot,
        original,
    })
}

fn move_to(g: &Group, tid: i32, pid: i32) -> Result<()> {
    // A move costs the kernel an RCU grace period (milliseconds) even into
    // the group the thread is in: an RTKit request waits for it.
    if g.holds(tid) {
        return Ok(());
    }
    match g.version {
        Version::V1 => g.add_thread(tid),
        // A single thread moves only inside a threaded subtree on v2.
        Version::V2 => g.add_process(pid),
    }
}

/// Applies `t` to the member's thread; on failure restores what was done.
pub fn join(m: &Member, t: &Target, enf: &Enforcement) -> Result<()> {
    let result = apply(m, t);
    if result.is_err() {
        let _ = restore(m, enf);
    }
    result
}

fn apply(m: &Member, t: &Target) -> Result<()> {
    if let Some(g) = &t.cpu_group {
        move_to(g, m.tid, m.pid)?;
    }
    match (&t.policy, &t.cpuset) {
        (Some(policy), Some(group)) if is_reserved(m.tid)? => deadline_carry(m, group, policy),
        (Some(policy), Some(group)) => deadline_into(m, group, policy),
        (policy, group) => {
            if let Some(g) = group {
                move_to(g, m.tid, m.pid)?;
            }
            if let Some(cpus) = &t.affinity {
                affinity::set_affinity(m.tid, cpus)?;
            }
            match policy {
                Some(p) => set_admitted(m.tid, p),
                None => Ok(()),
            }
        }
    }
}

/// The group a thread is in now.
fn current_group(tid: i32, h: &Hierarchy) -> Result<Group> {
    Ok(child_path(
        &h.root(),
        &proc::cgroup_of(tid, Some("cpuset"))?,
    ))
}

/// Gives a thread its reservation inside `group` (a root domain of its own).
///
/// The kernel admits a SCHED_DEADLINE thread against the root domain of the
/// CPU it last ran on, and requires its affinity to span that domain. A
/// sleeping thread moved into the group stays on its old CPU until it wakes,
/// so it is brought onto the group's CPUs ([`wake_onto`]) before the
/// reservation is set.
fn deadline_into(m: &Member, group: &Group, policy: &Policy) -> Result<()> {
    move_to(group, m.tid, m.pid)?;
    let cpus = group.effective_cpus()?;
    affinity::set_affinity(m.tid, &cpus)?;
    wake_onto(m, &cpus)?;
    set_admitted(m.tid, policy)
}

/// Makes sure thread `m` last ran on one of `cpus`: a sleeping thread is
/// nudged awake (see `tessera_sys::nudge`), and the kernel wakes it on a CPU
/// of its affinity. A process cannot ptrace its own threads: one of ours is
/// given the same 100 ms to wake by itself (a periodic thread does).
fn wake_onto(m: &Member, cpus: &[usize]) -> Result<()> {
    let on_cpus = || proc::last_cpu(m.pid, m.tid).is_some_and(|c| cpus.contains(&c));
    if on_cpus() {
        return Ok(());
    }
    let own = m.pid == proc::current_pid();
    if !own {
        tessera_sys::nudge::nudge(m.tid)?;
    }
    for _ in 0..100 {
        if on_cpus() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    match own {
        true => Err(Error::new(
            ErrorKind::Invalid,
            format!("place thread {} of this process", m.tid),
            "it stayed asleep on a CPU outside the cell, and a process cannot wake its own threads from outside",
            "let the thread join itself (Session::join_current_thread)",
        )),
        // Nudged, it ran; the kernel has placed it within its affinity.
        false => Ok(()),
    }
}

/// How long a join waits for the kernel to agree with the ledger.
const KERNEL_CATCH_UP: Duration = Duration::from_millis(20);

/// Sets the policy of a thread joining a cell the ledger admitted. The
/// kernel's own count of the root domain's bandwidth may disagree with the
/// ledger for a moment — a reservation being released, root domains being
/// rebuilt by a cpuset change — and refuse (EBUSY) what fits: a CI run had
/// a 0.1 join refused with no SCHED_DEADLINE thread on the machine, right
/// after another test's cells and cpusets were removed. Retried for up to
/// [`KERNEL_CATCH_UP`]; a resize is not (its caller asks again at its next
/// interval, and a broker serving a guard must not stall).
fn set_admitted(tid: i32, policy: &Policy) -> Result<()> {
    let start = std::time::Instant::now();
    loop {
        match sched::set_policy(tid, policy) {
            Err(e) if e.kind == ErrorKind::Busy && start.elapsed() < KERNEL_CATCH_UP => {
                std::thread::sleep(Duration::from_millis(1));
            }
            done => return done,
        }
    }
}

fn is_reserved(tid: i32) -> Result<bool> {
    Ok(matches!(sched::get_policy(tid)?, Policy::Deadline(_)))
}

/// Gives a thread already on SCHED_DEADLINE (a member moving between
/// cells) its new reservation inside `group`: the parameters first, in the
/// root domain it is in (one sched_setattr, applied or refused whole),
/// then the cpuset, which the kernel admits against the new root domain
/// for what the thread now holds and which sets its affinity. It is never
/// unreserved in between: the kernel moves a reservation with its cpuset.
/// Parameters the kernel refuses in the domain the thread leaves (EBUSY:
/// that domain's count is full, which the ledger need not see) go the
/// other way: the cpuset first, with what it holds now, then the
/// parameters, in the domain the ledger admitted them to.
fn deadline_carry(m: &Member, group: &Group, policy: &Policy) -> Result<()> {
    match set_where_it_is(m, policy) {
        Ok(()) => move_to(group, m.tid, m.pid),
        Err(e) if e.kind == ErrorKind::Busy => {
            move_to(group, m.tid, m.pid)?;
            set_where_it_is(m, policy)
        }
        Err(e) => Err(e),
    }
}

/// Sets a reserved thread's parameters in its own root domain.
///
/// A thread asleep since a cpuset change took the CPU it last ran on out of
/// its root domain (the core it is moving to, just partitioned, say) is
/// still counted on that CPU: the kernel checks its new parameters against
/// that CPU's domain, which its affinity no longer spans, and refuses them
/// (EPERM, or EBUSY from that domain's count). It is woken onto its
/// affinity first, then given them.
fn set_where_it_is(m: &Member, policy: &Policy) -> Result<()> {
    match sched::set_policy(m.tid, policy) {
        Err(e) if matches!(e.kind, ErrorKind::Permission | ErrorKind::Busy) => {
            match stranded_from(m) {
                Some(cpus) => {
                    wake_onto(m, &cpus)?;
                    sched::set_policy(m.tid, policy)
                }
                None => Err(e),
            }
        }
        other => other,
    }
}

/// Thread `m`'s affinity when it last ran on a CPU outside it.
fn stranded_from(m: &Member) -> Option<Vec<usize>> {
    let last = proc::last_cpu(m.pid, m.tid)?;
    let cpus = affinity::get_affinity(m.tid).ok()?;
    (!cpus.contains(&last)).then_some(cpus)
}

/// Gives a member its cell's new parameters after a resize (the layout is
/// unchanged). A thread on SCHED_DEADLINE gets them in one sched_setattr,
/// which the kernel applies or refuses as a whole, so a refused resize
/// leaves the thread on its old reservation, never unreserved as a failed
/// join would. A thread that lost its reservation joins again, as after
/// recovery.
pub fn retune(m: &Member, t: &Target, enf: &Enforcement) -> Result<()> {
    let Some(want) = &t.policy else {
        return Ok(());
    };
    match sched::get_policy(m.tid)? {
        have if have == *want => Ok(()),
        Policy::Deadline(_) => sched::set_policy(m.tid, want),
        _ => join(m, t, enf),
    }
}

/// Re-homes a member after the layout changed; the cpuset move carries a
/// reservation with it.
pub fn rehome(m: &Member, t: &Target, enf: &Enforcement) -> Result<()> {
    if let (Some(g), Some(layout)) = (&t.cpuset, &enf.layout) {
        if current_group(m.tid, &layout.hierarchy)? != *g {
            move_to(g, m.tid, m.pid)?;
        }
    }
    if let Some(cpus) = &t.affinity {
        affinity::set_affinity(m.tid, cpus)?;
    }
    Ok(())
}

/// Puts a member's thread back as it was. A thread that exited needs nothing.
pub fn restore(m: &Member, enf: &Enforcement) -> Result<()> {
    if !m.is_alive() {
        return Ok(());
    }
    let result = restore_live(m, enf);
    match result {
        Err(e) if !m.is_alive() || e.kind == ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn restore_live(m: &Member, enf: &Enforcement) -> Result<()> {
    // Only a thread still on a reservation gets its old policy back: one
    // whose program re-set its policy meanwhile keeps the program's choice,
    // and a cpuset-only member's policy was never tessera's to restore.
    let reserved = matches!(sched::get_policy(m.tid)?, Policy::Deadline(_));
    if reserved {
        sched::set_policy(m.tid, &Policy::Other { nice: 0 })?;
    }
    if let (Some(path), Some(layout)) = (&m.original.cpuset, &enf.layout) {
        let home = original_group(&layout.hierarchy, path, layout);
        move_to(&home, m.tid, m.pid)?;
    }
    if let (Some(path), Some(cpu)) = (&m.original.cpu_group, &enf.cpu) {
        move_to(&child_path(&cpu.root(), path), m.tid, m.pid)?;
    }
    // The kernel masks the original CPUs with the cpuset's, so CPUs now
    // exclusive to a cell are left out; only an empty result is refused.
    match affinity::set_affinity(m.tid, &m.original.affinity) {
        Err(e) if e.kind != ErrorKind::Invalid => return Err(e),
        _ => {}
    }
    if reserved && m.original.policy != (Policy::Other { nice: 0 }) {
        sched::set_policy(m.tid, &m.original.policy)?;
    }
    Ok(())
}

fn child_path(root: &Group, path: &str) -> Group {
    let mut g = root.clone();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        g = g.child(part);
    }
    g
}

/// The group a thread came from; while the shield is up, tasks of the root
/// live in the system group instead.
fn original_group(h: &Hierarchy, path: &str, layout: &Layout) -> Group {
    let g = child_path(&h.root(), path);
    if g == h.root() || !g.exists() {
        layout.system_group()
    } else {
        g
    }
}
