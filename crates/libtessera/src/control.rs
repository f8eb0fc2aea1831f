//! A workgroup's control thread (not real-time): it drains its members'
//! rings of per-cycle samples, feeds them to the policy's
//! [`WorkgroupControl`], and asks the broker for the budget it wants,
//! recording what was granted. [`Shared`] is what it shares with the
//! members and the joining and leaving threads: the members' [`Slot`]s,
//! claimed and handed back with atomics, and the closed flag and a drop
//! count; its reports sit under a lock only callers off the real-time path
//! take.
//!
//! It must never block a member: members only claim a slot, push into
//! their rings and hand the slot back, and the broker's joins and leaves
//! they defer are made here, on a slot's state, with no lock a member
//! takes (a deferred join made under a roster lock had a second member's
//! first cycle wait for the first one's broker round trip).
//! A budget that grows is asked for at once (a member overran, or is about
//! to); one that shrinks at most every [`SHRINK_EVERY`]: fed every cycle,
//! the prediction moves a little with each, and asking for each move had
//! the broker save its state 20 times a second and retune every member as
//! often — its CPU, not the members', was the workgroup's cost. A member
//! admission capped asks again for no more than it was refused only after
//! [`RETRY_CAPPED`]: asked at every tick, the broker capped it alike each
//! time.
//!
//! Each member holds a budget of its own; when several processes share a
//! workgroup, each controls its own members' budgets from their samples
//! and names only them, so neither takes from the other what its members
//! need.
//!
//! A slot's life, each step one atomic store or compare-and-swap by the
//! thread named: FREE → (joining thread) CLAIMED → PENDING (a deferred
//! join: the broker's join is this thread's to make), HELD (the broker
//! holds the member) or UNHELD (best-effort, or its join refused); PENDING
//! → (control) HELD or UNHELD; then (leaving thread) LEFT_HELD (the broker
//! still holds it: its leave is this thread's) or LEFT → (control) FREE,
//! once it took the member's last samples. A member that leaves while its
//! join is PENDING makes it LEFT; the control thread, finding its compare-
//! and-swap failed, leaves the broker's member it has just joined. The
//! ring's producing half rests in the slot while no member holds it
//! ([`Slot::producer`]); the claiming thread takes it, the leaving thread
//! puts it back before its release store, and the next claim comes only
//! after the control thread's FREE (acquire on each side), so that lock is
//! never contended.

use rtrb::{Consumer, Producer, RingBuffer};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_broker::{MemberBudget, Session};
use tessera_policy::workgroup::per_cycle_config;
use tessera_policy::{Budget, CycleSample, MemberReport, WorkgroupControl};

/// How often the control thread looks at the rings: a few cycles.
const TICK: Duration = Duration::from_millis(2);
/// The least time between two shrinking budget changes.
pub(crate) const SHRINK_EVERY: Duration = Duration::from_millis(250);
/// How long a member admission capped waits before asking again for no
/// more than it was refused (the room may have grown meanwhile).
const RETRY_CAPPED: Duration = Duration::from_millis(250);
/// Ticks to wait after the broker failed a change before asking again.
const BACKOFF_TICKS: u32 = 50;
/// Samples a member's ring holds: over a second of 2.7 ms cycles.
const RING_CYCLES: usize = 512;

/// A slot's states (see the module's doc).
/// cbindgen:ignore
pub mod state {
    pub const FREE: u8 = 0;
    pub const CLAIMED: u8 = 1;
    pub const PENDING: u8 = 2;
    pub const HELD: u8 = 3;
    pub const UNHELD: u8 = 4;
    pub const LEFT_HELD: u8 = 5;
    pub const LEFT: u8 = 6;
}

/// One member's place: its thread, its join's fate and its ring.
pub struct Slot {
    state: AtomicU8,
    tid: AtomicI32,
    /// The code of the broker's refusal of a deferred join (0: none).
    refusal: AtomicI32,
    /// The ring's producing half while no member holds it. Locked only by
    /// the thread that claimed the slot (to take it) and by that member
    /// leaving (to put it back): the slot's state orders the two, so the
    /// lock is never waited for.
    producer: Mutex<Option<Producer<CycleSample>>>,
}

impl Slot {
    pub fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    pub fn tid(&self) -> i32 {
        self.tid.load(Ordering::Relaxed)
    }

    /// The broker's refusal of this member's deferred join, if any.
    pub fn refusal(&self) -> Option<i32> {
        match self.refusal.load(Ordering::Relaxed) {
            0 => None,
            code => Some(code),
        }
    }

    fn producer(&self) -> MutexGuard<'_, Option<Producer<CycleSample>>> {
        self.producer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Compare-and-swap of the state, acquire and release.
    fn shift(&self, from: u8, to: u8) -> Result<u8, u8> {
        self.state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
    }
}

/// The control thread's reports, read by stats calls (never on the
/// real-time path).
#[derive(Default)]
pub struct Reports {
    /// The control thread's last report, per member.
    pub members: Vec<MemberReport>,
    /// The workgroup's opening budget: what a member holds until the
    /// controller gives it its own.
    pub budget: Option<Budget>,
}

/// What the handle, its members and its control thread share.
pub struct Shared {
    pub name: String,
    closed: AtomicBool,
    /// Samples lost to a full ring.
    pub dropped: AtomicU64,
    slots: Box<[Slot]>,
    reports: Mutex<Reports>,
}

impl Shared {
    /// A workgroup's shared part with `slots` members' places, and the
    /// rings' consuming halves, one per slot, for the control thread.
    pub fn new(
        name: String,
        budget: Option<Budget>,
        slots: usize,
    ) -> (Shared, Vec<Consumer<CycleSample>>) {
        let (slots, consumers): (Vec<Slot>, Vec<_>) = (0..slots)
            .map(|_| {
                let (producer, consumer) = RingBuffer::new(RING_CYCLES);
                let slot = Slot {
                    state: AtomicU8::new(state::FREE),
                    tid: AtomicI32::new(0),
                    refusal: AtomicI32::new(0),
                    producer: Mutex::new(Some(producer)),
                };
                (slot, consumer)
            })
            .unzip();
        let shared = Shared {
            name,
            closed: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            slots: slots.into_boxed_slice(),
            reports: Mutex::new(Reports {
                budget,
                ..Reports::default()
            }),
        };
        (shared, consumers)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Never taken on the real-time path.
    pub fn reports(&self) -> MutexGuard<'_, Reports> {
        self.reports.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Claims a free slot for thread `tid` in `next` state (PENDING, HELD
    /// or UNHELD), handing out its ring: the slot's index and the ring's
    /// producing half, or None when every slot is taken. Real-time safe:
    /// compare-and-swaps and a lock no other thread holds.
    pub fn claim(&self, tid: i32, next: u8) -> Option<(usize, Producer<CycleSample>)> {
        let (index, slot) = self
            .slots
            .iter()
            .enumerate()
            .find(|(_, slot)| slot.shift(state::FREE, state::CLAIMED).is_ok())?;
        let producer = slot.producer().take();
        let Some(producer) = producer else {
            // Not reached: a FREE slot's producer is always back.
            slot.state.store(state::FREE, Ordering::Release);
            return None;
        };
        slot.tid.store(tid, Ordering::Relaxed);
        slot.refusal.store(0, Ordering::Relaxed);
        slot.state.store(next, Ordering::Release);
        Some((index, producer))
    }

    /// Gives slot `index` up before its member joined (the thread's
    /// membership was refused after the claim).
    pub fn unclaim(&self, index: usize, producer: Producer<CycleSample>) {
        let slot = &self.slots[index];
        *slot.producer() = Some(producer);
        slot.state.store(state::FREE, Ordering::Release);
    }

    /// The member in slot `index` left, handing back its ring: whether
    /// the broker's leave is now the caller's to make (a member the broker
    /// held, left without `deferred`; deferred, the control thread makes
    /// it). A join still PENDING is the control thread's to resolve.
    /// Real-time safe.
    pub fn hand_back(&self, index: usize, producer: Producer<CycleSample>, deferred: bool) -> bool {
        let slot = &self.slots[index];
        *slot.producer() = Some(producer);
        loop {
            let now = slot.state();
            let next = match now {
                state::HELD if deferred => state::LEFT_HELD,
                _ => state::LEFT,
            };
            if slot.shift(now, next).is_ok() {
                return now == state::HELD && !deferred;
            }
        }
    }

    /// Whether the join of the member in slot `index` is still waiting for
    /// the control thread.
    pub fn pending(&self, index: usize) -> bool {
        self.slots[index].state() == state::PENDING
    }
}

/// Starts the control thread of `shared`, taking its members' samples from
/// `rings` (one per slot) and resizing through `session` (none:
/// best-effort, samples counted but no budget asked).
pub fn spawn(
    shared: Arc<Shared>,
    rings: Vec<Consumer<CycleSample>>,
    session: Option<Session>,
    period_ns: u64,
) -> std::io::Result<JoinHandle<()>> {
    let control = WorkgroupControl::new(per_cycle_config(), period_ns)
        .expect("the library's config and the broker's period are valid");
    let known = vec![None; rings.len()];
    let mut run = Control {
        shared,
        session,
        control,
        rings,
        known,
        backoff: 0,
        last_shrink: None,
        capped_since: None,
    };
    std::thread::Builder::new()
        .name(tessera_broker::workgroup::CONTROL_THREAD.into())
        .spawn(move || run.serve())
}

struct Control {
    shared: Arc<Shared>,
    session: Option<Session>,
    control: WorkgroupControl,
    /// Each slot's ring.
    rings: Vec<Consumer<CycleSample>>,
    /// The member the controller has of each slot.
    known: Vec<Option<i32>>,
    backoff: u32,
    /// When a budget was last made smaller.
    last_shrink: Option<Instant>,
    /// When admission last capped a member.
    capped_since: Option<Instant>,
}

impl Control {
    fn serve(&mut self) {
        while !self.shared.is_closed() {
            for index in 0..self.rings.len() {
                self.tend(index);
            }
            self.resize();
            self.shared.reports().members = self.control.report();
            std::thread::park_timeout(TICK);
        }
    }

    /// Moves slot `index` along its life (the module's doc) and takes its
    /// member's samples.
    fn tend(&mut self, index: usize) {
        let shared = self.shared.clone();
        let slot = &shared.slots()[index];
        match slot.state() {
            // Its samples wait in the ring for the next tick, when the
            // controller knows the member.
            state::PENDING => return self.join(slot),
            state::HELD | state::UNHELD => self.know(index, slot.tid()),
            left @ (state::LEFT_HELD | state::LEFT) => {
                self.drain(index);
                if left == state::LEFT_HELD {
                    self.broker_leave(slot.tid());
                }
                if let Some(tid) = self.known[index].take() {
                    self.control.leave(tid);
                }
                slot.state.store(state::FREE, Ordering::Release);
                return;
            }
            _ => return,
        }
        self.drain(index);
    }

    /// The broker's join of a PENDING member; left again at once when the
    /// member left meanwhile.
    fn join(&mut self, slot: &Slot) {
        let tid = slot.tid();
        let Some(session) = self.session.as_mut() else {
            let _ = slot.shift(state::PENDING, state::UNHELD);
            return;
        };
        let next = match session.join_workgroup(&self.shared.name, tid) {
            Ok(_) => state::HELD,
            Err(e) => {
                slot.refusal
                    .store(crate::status::of_broker(&e), Ordering::Relaxed);
                state::UNHELD
            }
        };
        if slot.shift(state::PENDING, next).is_err() && next == state::HELD {
            // The member left while its join was made: its leave is ours.
            self.broker_leave(tid);
        }
    }

    fn broker_leave(&mut self, tid: i32) {
        if let Some(session) = self.session.as_mut() {
            // A thread that exited meanwhile the broker drops itself.
            let _ = session.leave_workgroup(&self.shared.name, tid);
        }
    }

    /// Slot `index` holds member `tid`: the controller has it too.
    fn know(&mut self, index: usize, tid: i32) {
        if self.known[index] == Some(tid) {
            return;
        }
        if let Some(old) = self.known[index].replace(tid) {
            self.control.leave(old);
        }
        self.control.join(tid);
    }

    fn drain(&mut self, index: usize) {
        let Some(tid) = self.known[index] else {
            // A member that left before the controller knew it: its
            // samples go with it.
            while self.rings[index].pop().is_ok() {}
            return;
        };
        while let Ok(sample) = self.rings[index].pop() {
            // A period the kernel cannot enforce is ignored: the
            // member's next cycles say more.
            let _ = self.control.observe(tid, sample);
        }
    }

    /// Whether the broker holds member `tid` (not a deferred join still
    /// pending or refused, nor one that left).
    fn broker_holds(&self, tid: i32) -> bool {
        self.shared
            .slots()
            .iter()
            .any(|s| s.tid() == tid && s.state() == state::HELD)
    }

    /// Asks the broker for the members' budgets that must change (those
    /// it holds), at once when one grows, at most every [`SHRINK_EVERY`]
    /// when all shrink.
    fn resize(&mut self) {
        if self.backoff > 0 {
            self.backoff -= 1;
            return;
        }
        if self
            .capped_since
            .is_some_and(|at| at.elapsed() >= RETRY_CAPPED)
        {
            self.control.retry_capped();
            self.capped_since = None;
        }
        let Some(next) = self.control.update() else {
            return;
        };
        if self.session.is_none() {
            return;
        }
        let changes: Vec<MemberBudget> = next
            .into_iter()
            .filter(|&(tid, budget)| {
                self.broker_holds(tid) && self.control.granted_budget(tid) != Some(budget)
            })
            .map(|(tid, budget)| MemberBudget { tid, budget })
            .collect();
        if changes.is_empty() {
            return;
        }
        let shrinks = changes.iter().all(|c| {
            self.control
                .granted_budget(c.tid)
                .is_some_and(|held| held.shrinks_to(c.budget))
        });
        if shrinks
            && self
                .last_shrink
                .is_some_and(|at| at.elapsed() < SHRINK_EVERY)
        {
            return;
        }
        let Some(session) = self.session.as_mut() else {
            return;
        };
        match session.resize_members(&self.shared.name, changes, true) {
            Ok(reply) => {
                if shrinks {
                    self.last_shrink = Some(Instant::now());
                }
                let granted: Vec<_> = reply.budgets.iter().map(|b| (b.tid, b.budget)).collect();
                self.control.granted(&granted, reply.degraded);
                self.capped_since = self.control.any_capped().then(Instant::now);
            }
            Err(_) => self.backoff = BACKOFF_TICKS,
        }
    }
}
