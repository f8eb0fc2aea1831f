//! The calling thread's membership and its real-time path: marking a
//! cycle's start, deadline and finish, or reporting its work (ADPF).
//!
//! A member's state lives in its own thread (a thread-local), so the
//! interval calls take no lock and share nothing with other threads but
//! the wait-free ring (rtrb) that carries each cycle's sample to the
//! workgroup's control thread.
//!
//! A cycle's sample is the thread's CPU time since its previous cycle
//! finished, not only inside the interval: the reservation is charged for
//! all of it — the audio server waking the thread, its port buffers, the
//! hand-off to the next client — and a budget learnt from the interval
//! alone was short by that much (the JACK bridge's members at 1.3 ms:
//! throttled in most cycles, `tessera why` finding ~140 µs of work per
//! cycle where the callbacks measured ~100). A cycle that starts more than
//! [`FRESH_AFTER_PERIODS`] periods after the last finish (the thread did
//! something else meanwhile, or nothing marked cycles) is measured from its
//! start. So `interval_finish` reads the thread's CPU clock
//! (CLOCK_THREAD_CPUTIME_ID: one system call) and CLOCK_MONOTONIC (the vDSO
//! answers without one), and `interval_start` reads the CPU clock only for
//! such a fresh cycle.
//! They must never allocate, block, or touch the broker: joining (where the
//! thread-local is first used, and its destructor registered) and leaving
//! do that, off the real-time path.

use crate::control::Shared;
use crate::status::{
    TESSERA_ERR_ALREADY_JOINED, TESSERA_ERR_INVALID, TESSERA_ERR_NOT_JOINED,
    TESSERA_ERR_NO_INTERVAL, TESSERA_OK,
};
use rtrb::Producer;
use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tessera_policy::CycleSample;
use tessera_sys::clock;

/// A cycle starting this many periods after the last one finished is
/// measured from its own start.
pub(crate) const FRESH_AFTER_PERIODS: u64 = 2;

/// A cycle in progress on this thread.
#[derive(Debug, Clone, Copy)]
struct Interval {
    start_ns: u64,
    /// The cycle's period: its deadline as `interval_start` gave it. A
    /// deadline that `interval_update` moves says when this cycle is late,
    /// not how long the next one is (the reservation's period follows the
    /// cycles, not one cycle's extension).
    period_ns: u64,
    deadline_ns: u64,
    cpu_start_ns: u64,
}

/// This thread's membership of one workgroup.
pub struct Membership {
    pub shared: Arc<Shared>,
    /// The address of the C handle it was joined through.
    pub handle: usize,
    pub tid: i32,
    /// Its place in the workgroup ([`Shared::claim`]).
    pub slot: usize,
    ring: Producer<CycleSample>,
    interval: Option<Interval>,
    /// When the last cycle finished (CLOCK_MONOTONIC) and the thread's
    /// CPU clock then.
    finished: Option<(u64, u64)>,
    /// ADPF's target work duration, ns (0: none yet).
    target_ns: u64,
}

thread_local! {
    /// Whether [`MEMBER`] was ever set on this thread: checked first, so a
    /// thread that never joined never touches (and registers the
    /// destructor of) the membership from its real-time path.
    static JOINED: Cell<bool> = const { Cell::new(false) };
    static MEMBER: RefCell<Option<Membership>> = const { RefCell::new(None) };
}

/// Makes this thread a member through `handle`, with its ring from
/// `slot`; refused (the ring given back) when it is a member of a
/// workgroup still open.
pub fn enter(
    shared: Arc<Shared>,
    handle: usize,
    tid: i32,
    slot: usize,
    ring: Producer<CycleSample>,
) -> Result<(), (i32, Producer<CycleSample>)> {
    MEMBER.with(|m| {
        let mut m = m.borrow_mut();
        if m.as_ref().is_some_and(|old| !old.shared.is_closed()) {
            return Err((TESSERA_ERR_ALREADY_JOINED, ring));
        }
        *m = Some(Membership {
            shared,
            handle,
            tid,
            slot,
            ring,
            interval: None,
            finished: None,
            target_ns: 0,
        });
        JOINED.with(|j| j.set(true));
        Ok(())
    })
}

/// Whether this thread is a member of a workgroup still open.
pub fn is_member() -> bool {
    JOINED.with(Cell::get)
        && MEMBER.with(|m| {
            m.borrow()
                .as_ref()
                .is_some_and(|old| !old.shared.is_closed())
        })
}

/// Ends this thread's membership through `handle`.
pub fn exit(handle: usize) -> Result<Membership, i32> {
    if !JOINED.with(Cell::get) {
        return Err(TESSERA_ERR_NOT_JOINED);
    }
    MEMBER.with(|m| {
        let mut m = m.borrow_mut();
        match m.as_ref() {
            Some(old) if old.handle == handle => Ok(m.take().expect("checked above")),
            _ => Err(TESSERA_ERR_NOT_JOINED),
        }
    })
}

impl Membership {
    /// The ring's producing half, to hand back to its slot.
    pub fn into_ring(self) -> Producer<CycleSample> {
        self.ring
    }
}

/// Runs `f` on this thread's membership through `handle`, or says why not.
/// Real-time safe: no allocation (the thread-local was made at join).
fn with_member(handle: usize, f: impl FnOnce(&mut Membership) -> i32) -> i32 {
    if !JOINED.with(Cell::get) {
        return TESSERA_ERR_NOT_JOINED;
    }
    MEMBER.with(|m| match m.try_borrow_mut() {
        Ok(mut m) => match m.as_mut() {
            Some(member) if member.handle == handle && !member.shared.is_closed() => f(member),
            _ => TESSERA_ERR_NOT_JOINED,
        },
        Err(_) => TESSERA_ERR_NOT_JOINED,
    })
}

/// A cycle starts at `start_ns` and must finish by `deadline_ns`
/// (CLOCK_MONOTONIC).
pub fn interval_start(handle: usize, start_ns: u64, deadline_ns: u64) -> i32 {
    if deadline_ns <= start_ns {
        return TESSERA_ERR_INVALID;
    }
    with_member(handle, |m| {
        let period_ns = deadline_ns - start_ns;
        let cpu_start_ns = match m.finished {
            Some((at_ns, cpu_ns))
                if start_ns.saturating_sub(at_ns) <= FRESH_AFTER_PERIODS * period_ns =>
            {
                cpu_ns
            }
            _ => clock::thread_cpu_ns(),
        };
        m.interval = Some(Interval {
            start_ns,
            period_ns,
            deadline_ns,
            cpu_start_ns,
        });
        TESSERA_OK
    })
}

/// The cycle's deadline moved (this cycle's only: its period stays).
pub fn interval_update(handle: usize, deadline_ns: u64) -> i32 {
    with_member(handle, |m| match m.interval.as_mut() {
        Some(i) if deadline_ns > i.start_ns => {
            i.deadline_ns = deadline_ns;
            TESSERA_OK
        }
        Some(_) => TESSERA_ERR_INVALID,
        None => TESSERA_ERR_NO_INTERVAL,
    })
}

/// The cycle's work is done: its CPU time and whether it was late go to
/// the control thread.
pub fn interval_finish(handle: usize) -> i32 {
    with_member(handle, |m| {
        let Some(i) = m.interval.take() else {
            return TESSERA_ERR_NO_INTERVAL;
        };
        let (cpu_now_ns, now_ns) = (clock::thread_cpu_ns(), clock::monotonic_ns());
        m.finished = Some((now_ns, cpu_now_ns));
        let sample = CycleSample {
            cpu_ns: cpu_now_ns.saturating_sub(i.cpu_start_ns),
            period_ns: i.period_ns,
            late: now_ns > i.deadline_ns,
        };
        send(m, sample);
        TESSERA_OK
    })
}

/// ADPF's `updateTargetWorkDuration`: the cycle's period and deadline.
pub fn update_target(handle: usize, target_ns: i64) -> i32 {
    if target_ns <= 0 {
        return TESSERA_ERR_INVALID;
    }
    with_member(handle, |m| {
        m.target_ns = target_ns as u64;
        TESSERA_OK
    })
}

/// ADPF's `reportActualWorkDuration`: one cycle's work, measured by the
/// caller; late when over the target.
pub fn report_actual(handle: usize, actual_ns: i64) -> i32 {
    if actual_ns < 0 {
        return TESSERA_ERR_INVALID;
    }
    with_member(handle, |m| {
        if m.target_ns == 0 {
            return TESSERA_ERR_NO_INTERVAL;
        }
        let sample = CycleSample {
            cpu_ns: actual_ns as u64,
            period_ns: m.target_ns,
            late: actual_ns as u64 > m.target_ns,
        };
        send(m, sample);
        TESSERA_OK
    })
}

/// Hands a sample to the control thread; a full ring (the control thread
/// stalled) drops it and counts the drop.
fn send(m: &mut Membership, sample: CycleSample) {
    if m.ring.push(sample).is_err() {
        m.shared.dropped.fetch_add(1, Ordering::Relaxed);
    }
}
