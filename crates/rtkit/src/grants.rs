//! What tessera's RTKit granted to which thread, and the adaptation of the
//! reserved threads' budgets.
//!
//! A realtime request becomes a cell `rtkit-<tid>`: one event-triggered
//! SCHED_DEADLINE reservation under global EDF (a desktop keeps all its
//! cores; no exclusive cpuset is taken), owned by the caller's user (so the
//! broker's quota holds for the socket and the bus together), bound to the
//! thread's process (its exit releases the cell, through the broker's
//! reaper), reclaiming spare bandwidth (GRUB), with RESET_ON_FORK. Its
//! budget starts at the controller's minimum (5 %) of a 10 ms period and
//! then follows the thread:
//! every [`INTERVAL`] its CPU time and wake-ups are read, the period is
//! learned from the wake-ups (an audio thread waits once a cycle), and the
//! guard's controller (`tessera_policy::Adaptive`) asks admission for the
//! budget (degraded to what fits, never refused).
//!
//! The threads left on RTKit's SCHED_RR (the fifo fallback) are reported
//! to the broker after every change ([`Broker::set_unguaranteed`]), so that
//! its monitor's samples, and `tessera top`, label them unguaranteed; its
//! state keeps them, so that a restarted daemon labels them still and keeps
//! trying them for a reservation.
//!
//! It must never hold the broker's lock across a call to the bus, and never
//! leave a thread it gave up on with a policy it set: a reservation goes
//! back through the broker, RTKit's own answers back to SCHED_OTHER.

use crate::limits::{self, Bursts, Caller, Limits, RtkitError, Target};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_broker::config::RtkitFallback;
use tessera_broker::state::{Owner, ProcessId, UnguaranteedThread};
use tessera_broker::{Broker, BrokerError, ErrorCode};
use tessera_policy::{Adaptive, AdaptiveConfig, Budget, CellRequest, Placement};
use tessera_sys::proc::{self, ThreadUsage};
use tessera_sys::sched::{self, Policy, Tid};

/// How often reserved threads' budgets are re-decided.
pub const INTERVAL: Duration = Duration::from_millis(200);

/// The period a reservation starts with, before the thread's wake-ups tell
/// its own: long enough for any audio buffer; the thread reclaims spare
/// bandwidth (GRUB) beyond its budget while the period is learned.
pub const INITIAL_PERIOD_NS: u64 = 10_000_000;

/// The prefix of the cells this module makes (`rtkit-<tid>`).
pub const CELL_PREFIX: &str = "rtkit-";

/// How often a thread left on RTKit's SCHED_RR is tried for a reservation.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Wake-ups in an interval below which it tells nothing of the period.
const MIN_WAKEUPS: u64 = 4;

/// A learned period differing from the one in force by more than this
/// fraction moves the reservation (noise must not move it every interval).
const PERIOD_CHANGE: f64 = 0.2;

/// What a thread holds, as reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantKind {
    /// A reservation: the budget in force.
    Reserved { cell: String, budget: Budget },
    /// RTKit's own answer, SCHED_RR without a guarantee (admission refused).
    Unguaranteed { priority: u32, why: String },
    /// A nice level (MakeThreadHighPriority).
    Nice { nice: i32 },
}

/// One granted thread, as reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantStatus {
    pub pid: i32,
    pub tid: Tid,
    pub uid: u32,
    pub thread: String,
    pub kind: GrantKind,
}

struct Reservation {
    cell: String,
    controller: Adaptive,
    usage: ThreadUsage,
    set: Budget,
}

enum Held {
    Reserved(Box<Reservation>),
    /// RTKit's SCHED_RR; `since` the last try for a reservation.
    Unguaranteed {
        priority: u32,
        why: String,
        since: Instant,
    },
    Nice {
        nice: i32,
    },
}

struct Grant {
    target: Target,
    held: Held,
}

/// The table of grants, over the broker that admits them.
pub struct Grants {
    broker: Arc<Mutex<Broker>>,
    limits: Limits,
    fallback: RtkitFallback,
    controller: AdaptiveConfig,
    bursts: Bursts,
    threads: BTreeMap<Tid, Grant>,
}

impl Grants {
    /// A table over `broker`, taking back the reservations a previous
    /// daemon made (cells `rtkit-<tid>` whose process still runs).
    pub fn new(broker: Arc<Mutex<Broker>>, limits: Limits, fallback: RtkitFallback) -> Grants {
        let mut grants = Grants {
            broker,
            limits,
            fallback,
            controller: AdaptiveConfig {
                // Many threads open at once (a server and its clients, ten or
                // more): each starts at the least it could want, so that they
                // all fit before the first samples size them, and reclaiming
                // (GRUB) covers what that first interval shows it lacks.
                initial_budget_pct: AdaptiveConfig::default().min_budget_pct,
                ..AdaptiveConfig::default()
            },
            bursts: Bursts::default(),
            threads: BTreeMap::new(),
        };
        grants.adopt_existing();
        grants
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn broker(&self) -> std::sync::MutexGuard<'_, Broker> {
        self.broker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// MakeThreadRealtime(WithPID): a reservation for the thread, or what
    /// the fallback says when admission refuses it.
    pub fn make_realtime(
        &mut self,
        caller: Caller,
        pid: Option<u64>,
        tid: u64,
        priority: u32,
    ) -> Result<GrantKind, RtkitError> {
        limits::check_priority(&self.limits, priority)?;
        self.bursts
            .admit(caller.uid, Instant::now(), &self.limits)?;
        let target = Target::check(caller, pid, tid)?;
        limits::check_rttime(&self.limits, target.pid)?;
        self.check_thread_count(&target)?;
        self.release(target.tid);
        let granted = self.grant_realtime(target, priority);
        self.report_unguaranteed();
        granted
    }

    /// A reservation for `target`, whose previous grant is released, or
    /// the fallback's answer.
    fn grant_realtime(&mut self, target: Target, priority: u32) -> Result<GrantKind, RtkitError> {
        let held = match self.reserve(&target) {
            Ok(r) => Held::Reserved(Box::new(r)),
            Err(refusal) => self.fall_back(&target, priority, refusal)?,
        };
        if !target.still_same() {
            self.undo(target.tid, held);
            return Err(RtkitError::failed(
                format!("thread {} changed while it was being granted", target.tid),
                "ask again from the thread's own process",
            ));
        }
        let kind = describe(&held);
        self.threads.insert(target.tid, Grant { target, held });
        Ok(kind)
    }

    /// MakeThreadHighPriority(WithPID): SCHED_OTHER at the nice level (a
    /// reservation the thread held is released first).
    pub fn make_high_priority(
        &mut self,
        caller: Caller,
        pid: Option<u64>,
        tid: u64,
        nice: i32,
    ) -> Result<GrantKind, RtkitError> {
        limits::check_nice(&self.limits, nice)?;
        self.bursts
            .admit(caller.uid, Instant::now(), &self.limits)?;
        let target = Target::check(caller, pid, tid)?;
        self.release(target.tid);
        self.report_unguaranteed();
        sched::set_policy_reset_on_fork(target.tid, &Policy::Other { nice }).map_err(|e| {
            RtkitError::failed(format!("set thread {}'s nice level: {e}", target.tid), "")
        })?;
        let held = Held::Nice { nice };
        let kind = describe(&held);
        self.threads.insert(target.tid, Grant { target, held });
        Ok(kind)
    }

    /// ResetKnown: every thread this interface granted back to SCHED_OTHER
    /// (reservations released through the broker). Root only.
    pub fn reset_known(&mut self, caller: Caller) -> Result<usize, RtkitError> {
        only_root(caller, "ResetKnown")?;
        let tids: Vec<Tid> = self.threads.keys().copied().collect();
        for tid in &tids {
            self.release(*tid);
            // RTKit's reset is SCHED_OTHER, also for a thread the broker gave
            // back the SCHED_RR it had before its reservation.
            let _ = sched::set_policy(*tid, &Policy::Other { nice: 0 });
        }
        self.report_unguaranteed();
        Ok(tids.len())
    }

    /// ResetAll: [`Grants::reset_known`], and every SCHED_FIFO/RR thread of
    /// every process not of root back to SCHED_OTHER (RTKit's answer to a
    /// starving system). Reservations the broker made for others stay:
    /// they are admitted and cannot starve the machine. Root only.
    pub fn reset_all(&mut self, caller: Caller) -> Result<usize, RtkitError> {
        let mut count = self.reset_known(caller)?;
        for pid in proc::all_pids().unwrap_or_default() {
            if proc::owner_uid(pid).map_or(true, |uid| uid == 0) {
                continue;
            }
            for tid in proc::threads_of(pid).unwrap_or_default() {
                let real_time = matches!(
                    sched::get_policy(tid),
                    Ok(Policy::Fifo { .. } | Policy::RoundRobin { .. })
                );
                if real_time && sched::set_policy(tid, &Policy::Other { nice: 0 }).is_ok() {
                    count += 1;
                }
            }
        }
        Ok(count)
    }

    /// Re-decides every reservation's budget from what its thread did
    /// since the last call; forgets threads that exited or whose program
    /// set its own policy (the broker restores what it reserved).
    pub fn adapt(&mut self) -> Vec<String> {
        let mut log = Vec::new();
        let tids: Vec<Tid> = self.threads.keys().copied().collect();
        for tid in tids {
            if let Some(why) = self.gone_or_taken_back(tid) {
                log.push(format!("released thread {tid}: {why}"));
                self.release(tid);
                continue;
            }
            if let Err(e) = self.adapt_one(tid) {
                log.push(format!("thread {tid}: budget not changed: {e}"));
            }
            if let Some(line) = self.retry_unguaranteed(tid) {
                log.push(line);
            }
        }
        self.report_unguaranteed();
        log
    }

    /// A thread left on RTKit's SCHED_RR when admission refused it gets its
    /// reservation once there is room (capacity is freed as budgets settle
    /// and threads leave), tried every [`RETRY_AFTER`].
    fn retry_unguaranteed(&mut self, tid: Tid) -> Option<String> {
        let g = self.threads.get(&tid)?;
        let Held::Unguaranteed { since, .. } = &g.held else {
            return None;
        };
        if since.elapsed() < RETRY_AFTER {
            return None;
        }
        let target = g.target;
        match self.reserve(&target) {
            Ok(r) => {
                let line = format!(
                    "thread {tid} now reserved in cell {} ({} µs every {} µs)",
                    r.cell,
                    r.set.runtime_ns / 1000,
                    r.set.period_ns / 1000
                );
                self.threads.insert(
                    tid,
                    Grant {
                        target,
                        held: Held::Reserved(Box::new(r)),
                    },
                );
                Some(line)
            }
            Err(refusal) => {
                let Some(Grant {
                    held: Held::Unguaranteed { since, why, .. },
                    ..
                }) = self.threads.get_mut(&tid)
                else {
                    return None;
                };
                *since = Instant::now();
                // The label says why now; the log, when that changed.
                let now = refusal.to_string();
                (now != *why).then(|| {
                    *why = now;
                    format!("thread {tid} still unguaranteed: {why}")
                })
            }
        }
    }

    /// What every granted thread holds.
    pub fn status(&self) -> Vec<GrantStatus> {
        self.threads
            .values()
            .map(|g| GrantStatus {
                pid: g.target.pid,
                tid: g.target.tid,
                uid: g.target.uid,
                thread: proc::thread_name(g.target.pid, g.target.tid),
                kind: describe(&g.held),
            })
            .collect()
    }

    /// Tells the broker which threads are left on RTKit's SCHED_RR, for
    /// its monitor's samples (`tessera top` labels them unguaranteed).
    fn report_unguaranteed(&self) {
        let threads = self
            .threads
            .values()
            .filter_map(|g| match &g.held {
                Held::Unguaranteed { priority, why, .. } => Some(UnguaranteedThread {
                    pid: g.target.pid,
                    tid: g.target.tid,
                    uid: g.target.uid,
                    name: proc::thread_name(g.target.pid, g.target.tid),
                    priority: *priority,
                    why: why.clone(),
                }),
                _ => None,
            })
            .collect();
        // A state that cannot be saved loses only the label's survival of a
        // restart; the broker's other changes report the same failure.
        let _ = self.broker().set_unguaranteed(threads);
    }

    fn check_thread_count(&self, target: &Target) -> Result<(), RtkitError> {
        let held = self
            .threads
            .values()
            .filter(|g| g.target.uid == target.uid && g.target.tid != target.tid)
            .count();
        if held >= self.limits.threads_per_user {
            return Err(RtkitError::denied(
                format!(
                    "uid {} holds {held} real-time threads, RTKit's limit",
                    target.uid
                ),
                "let some of them end, or ask root for a cell (`tessera cell create`)",
            ));
        }
        Ok(())
    }

    /// Admits and attaches the thread's reservation at the budget its
    /// controller starts with; when that does not fit, at the least it
    /// could want, raised to what fits (the caller waits for each round
    /// trip to the kernel, so the first try is the one that usually fits).
    fn reserve(&mut self, target: &Target) -> Result<Reservation, BrokerError> {
        let mut controller = Adaptive::new(self.controller, INITIAL_PERIOD_NS)
            .map_err(|e| BrokerError::new(ErrorCode::Invalid, e.to_string(), e.fix.clone()))?;
        let cell = format!("{CELL_PREFIX}{}", target.tid);
        let wanted = controller.wanted();
        let least = Budget::new(controller.bounds().0, wanted.period_ns);
        let opened = self
            .open(&cell, target, wanted)
            .map(|()| wanted)
            .or_else(|_| self.open(&cell, target, least).map(|()| least))?;
        controller.granted(opened, false);
        let mut r = Reservation {
            cell,
            set: opened,
            controller,
            usage: ThreadUsage::kept_open(target.pid, target.tid),
        };
        if opened != wanted {
            self.apply(&mut r, target.uid)?;
        }
        Ok(r)
    }

    /// Creates cell `cell` with `budget` for the thread and attaches it.
    fn open(&self, cell: &str, target: &Target, budget: Budget) -> Result<(), BrokerError> {
        let mut request = CellRequest::event_triggered(cell, budget.runtime_ns, budget.period_ns);
        request.placement = Placement::Global;
        request.reclaim = true;
        request.owner_adapts = true;
        let owner = Owner {
            uid: target.uid,
            process: Some(ProcessId {
                pid: target.pid,
                start_time: target.process_start,
            }),
        };
        self.broker()
            .create_cell_for_thread(request, owner, target.pid, target.tid)
    }

    /// What a request admission refused gets.
    fn fall_back(
        &self,
        target: &Target,
        priority: u32,
        refusal: BrokerError,
    ) -> Result<Held, RtkitError> {
        let why = refusal.to_string();
        match self.fallback {
            RtkitFallback::Refuse => Err(RtkitError::denied(
                format!(
                    "no reservation for thread {}: {}",
                    target.tid, refusal.message
                ),
                refusal.fix,
            )),
            RtkitFallback::Fifo => {
                sched::set_policy_reset_on_fork(target.tid, &Policy::RoundRobin { priority })
                    .map_err(|e| {
                        RtkitError::failed(format!("make thread {} SCHED_RR: {e}", target.tid), "")
                    })?;
                Ok(Held::Unguaranteed {
                    priority,
                    why,
                    since: Instant::now(),
                })
            }
        }
    }

    /// Learns the thread's period, feeds its controller and asks admission
    /// for the budget it wants.
    fn adapt_one(&mut self, tid: Tid) -> Result<(), BrokerError> {
        let Some(Grant { target, held }) = self.threads.remove(&tid) else {
            return Ok(());
        };
        // Only reservations adapt; the other grants go back as they were.
        let mut r = match held {
            Held::Reserved(r) => r,
            other => {
                self.threads.insert(
                    tid,
                    Grant {
                        target,
                        held: other,
                    },
                );
                return Ok(());
            }
        };
        let outcome = observe(&mut r).and_then(|()| self.apply(&mut r, target.uid));
        self.threads.insert(
            tid,
            Grant {
                target,
                held: Held::Reserved(r),
            },
        );
        outcome
    }

    /// Asks admission for what the controller wants, when it differs from
    /// what is set, and records what was granted.
    fn apply(&self, r: &mut Reservation, uid: u32) -> Result<(), BrokerError> {
        let Some(ask) = r.controller.update() else {
            return Ok(());
        };
        let reply = self.broker().resize_cell(&r.cell, ask, true, uid)?;
        let short = reply.budget.runtime_ns < r.controller.wanted().runtime_ns;
        r.controller.granted(reply.budget, reply.degraded || short);
        r.set = reply.budget;
        Ok(())
    }

    /// Why a granted thread must be forgotten, if it must.
    fn gone_or_taken_back(&self, tid: Tid) -> Option<&'static str> {
        let g = self.threads.get(&tid)?;
        if !g.target.still_same() {
            return Some("it exited");
        }
        let policy = sched::get_policy(tid).ok()?;
        let kept = match g.held {
            Held::Reserved(_) => matches!(policy, Policy::Deadline(_)),
            Held::Unguaranteed { .. } => matches!(policy, Policy::RoundRobin { .. }),
            Held::Nice { .. } => true,
        };
        (!kept).then_some("its program set its own scheduling")
    }

    /// Gives up what thread `tid` holds, if anything.
    fn release(&mut self, tid: Tid) {
        if let Some(g) = self.threads.remove(&tid) {
            self.undo(tid, g.held);
        }
    }

    fn undo(&self, tid: Tid, held: Held) {
        match held {
            // The broker restores the policy the thread had; a cell the
            // reaper already released is not found, which is fine.
            Held::Reserved(r) => {
                let _ = self.broker().destroy_cell(&r.cell, 0);
            }
            // RTKit's reset: SCHED_OTHER at nice 0 (a thread that exited
            // has nothing to reset).
            Held::Unguaranteed { .. } | Held::Nice { .. } => {
                let _ = sched::set_policy(tid, &Policy::Other { nice: 0 });
            }
        }
    }

    /// Takes back what a daemon that ran before granted: its reservations
    /// ([`Grants::adopt_reservations`]) and the threads its fallback left
    /// on SCHED_RR ([`Grants::adopt_unguaranteed`]).
    fn adopt_existing(&mut self) {
        self.adopt_reservations();
        self.adopt_unguaranteed();
        self.report_unguaranteed();
    }

    /// Each thread the broker's state lists as left on RTKit's SCHED_RR
    /// that still is — a thread of the same process, of the same user, at
    /// the same priority — is labelled again and tried for a reservation at
    /// the next adaptation; the others are dropped from the list.
    fn adopt_unguaranteed(&mut self) {
        let listed = self.broker().unguaranteed().to_vec();
        for t in listed {
            let same_user = proc::owner_uid(t.pid).ok() == Some(t.uid);
            let in_process = proc::threads_of(t.pid).is_ok_and(|tids| tids.contains(&t.tid));
            let still_rr = matches!(
                sched::get_policy(t.tid),
                Ok(Policy::RoundRobin { priority }) if priority == t.priority
            );
            if !(same_user && in_process && still_rr) {
                continue;
            }
            let target = Target {
                pid: t.pid,
                tid: t.tid,
                uid: t.uid,
                process_start: proc::start_time(t.pid).unwrap_or(0),
                thread_start: proc::thread_start_time(t.pid, t.tid).unwrap_or(0),
            };
            let held = Held::Unguaranteed {
                priority: t.priority,
                why: t.why,
                since: Instant::now()
                    .checked_sub(RETRY_AFTER)
                    .unwrap_or_else(Instant::now),
            };
            self.threads.insert(t.tid, Grant { target, held });
        }
    }

    /// Each cell `rtkit-<tid>` whose member still runs gets a new controller.
    fn adopt_reservations(&mut self) {
        let cells = self.broker().list();
        for cell in cells {
            let Some(tid) = cell
                .name
                .strip_prefix(CELL_PREFIX)
                .and_then(|t| t.parse::<Tid>().ok())
            else {
                continue;
            };
            let (Some(member), Some(budget)) = (cell.members.first(), cell.grant.request.budget)
            else {
                continue;
            };
            let pid = member.pid;
            let target = Target {
                pid,
                tid,
                uid: cell.owner_uid,
                process_start: proc::start_time(pid).unwrap_or(0),
                thread_start: proc::thread_start_time(pid, tid).unwrap_or(0),
            };
            let Ok(mut controller) = Adaptive::new(self.controller, INITIAL_PERIOD_NS) else {
                continue;
            };
            controller.granted(budget, false);
            let r = Reservation {
                cell: cell.name.clone(),
                controller,
                usage: ThreadUsage::kept_open(pid, tid),
                set: budget,
            };
            self.threads.insert(
                tid,
                Grant {
                    target,
                    held: Held::Reserved(Box::new(r)),
                },
            );
        }
    }
}

/// Reads what the thread did, moves the reservation to the period its
/// wake-ups show, and gives the controller the CPU time per cycle.
fn observe(r: &mut Reservation) -> Result<(), BrokerError> {
    let delta = r.usage.advance(true).map_err(BrokerError::from)?;
    let learned = delta
        .woken
        .and_then(|woken| learned_period(delta.elapsed_ns, woken));
    if let Some(period) = learned {
        let current = r.controller.report().audio_period_ns;
        if (period as f64 - current as f64).abs() > PERIOD_CHANGE * current as f64 {
            r.controller
                .set_audio_period(period)
                .map_err(|e| BrokerError::new(ErrorCode::Invalid, e.to_string(), e.fix.clone()))?;
        }
    }
    let period = r.controller.report().audio_period_ns;
    let elapsed = delta.elapsed_ns / period;
    r.controller
        .observe(delta.cpu_ns, elapsed.min(delta.wakes().max(1)));
    Ok(())
}

/// The period a thread's wake-ups show: the interval over the times it
/// gave up the CPU of its own accord, within SCHED_DEADLINE's range; None
/// when it woke too seldom to tell.
pub fn learned_period(elapsed_ns: u64, woken: u64) -> Option<u64> {
    (woken >= MIN_WAKEUPS).then(|| (elapsed_ns / woken).clamp(100_000, 1_000_000_000))
}

fn describe(held: &Held) -> GrantKind {
    match held {
        Held::Reserved(r) => GrantKind::Reserved {
            cell: r.cell.clone(),
            budget: r.set,
        },
        Held::Unguaranteed { priority, why, .. } => GrantKind::Unguaranteed {
            priority: *priority,
            why: why.clone(),
        },
        Held::Nice { nice } => GrantKind::Nice { nice: *nice },
    }
}

fn only_root(caller: Caller, method: &str) -> Result<(), RtkitError> {
    if caller.uid == 0 {
        return Ok(());
    }
    Err(RtkitError::denied(
        format!("{method} is root's (the caller is uid {})", caller.uid),
        format!("run it as root: `busctl call org.freedesktop.RealtimeKit1 /org/freedesktop/RealtimeKit1 org.freedesktop.RealtimeKit1 {method}`"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_period_is_learned_from_enough_wake_ups() {
        // 150 wake-ups in 200 ms: PipeWire's 64 frames at 48 kHz.
        assert_eq!(learned_period(200_000_000, 150), Some(1_333_333));
        assert_eq!(learned_period(200_000_000, 3), None, "too few to tell");
        assert_eq!(learned_period(200_000_000, 10_000_000), Some(100_000));
        assert_eq!(learned_period(u64::MAX, 4), Some(1_000_000_000));
    }
}
