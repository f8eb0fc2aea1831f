//! libtessera: workgroups for audio hosts and plug-ins, in C.
//!
//! A workgroup is a cell whose members — the threads of one audio cycle:
//! a server's callback and its workers, a host's plug-in threads — share
//! one deadline per cycle. A thread joins it (and gets a reservation of
//! its own), marks each cycle's start, deadline and finish
//! (`tessera_workgroup_interval_*`, after Apple's `os_workgroup_interval_*`)
//! or reports its work (`tessera_hint_*`, after Android's ADPF), and the
//! library's control thread turns those exact per-cycle samples into the
//! budget the broker admits (the AQuoSA feedback of
//! `tessera_policy::workgroup`). docs/workgroups.md is the user's guide;
//! `include/tessera.h` is generated from this file by cbindgen (the test
//! `header` fails when it is stale; `TESSERA_BLESS=1` rewrites it).
//!
//! Rust callers use the same calls through [`handle::WorkgroupHandle`].
//!
//! Why this crate has `unsafe`: it is a C ABI. C hands it raw pointers (a
//! name, a workgroup handle, a token, a stats record) that Rust cannot check;
//! each `unsafe` block says what the C caller's contract guarantees. Null
//! pointers are refused with `TESSERA_ERR_NULL`, and no call panics across
//! the boundary: a panic becomes `TESSERA_ERR_BROKER`. The interval and hint
//! calls never dereference the handle (they compare its address with the
//! calling thread's membership), so they stay safe even on a closed one.
//!
//! It must never make a decision of its own (the policy decides, the
//! broker admits) nor allocate, lock or block on the interval path.

use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

mod control;
pub mod handle;
mod member;
pub mod status;
mod workgroup;

pub use status::*;
use workgroup::Workgroup;

/// The C header, `include/tessera.h`: for tools that compile C hosts
/// against this build (`tessera bench workgroup`).
/// cbindgen:ignore
pub const HEADER: &str = include_str!("../include/tessera.h");

/// A workgroup, opened by name (opaque).
#[allow(non_camel_case_types)]
pub struct tessera_workgroup {
    inner: Workgroup,
}

/// Filled by `tessera_workgroup_join`, passed back to
/// `tessera_workgroup_leave` (as Apple's `os_workgroup_join_token_s`).
#[allow(non_camel_case_types)]
#[repr(C)]
pub struct tessera_join_token {
    pub opaque: [u64; 4],
}

/// A member's counts, as the control thread last saw them.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct tessera_member_stats {
    /// Cycles marked (or reported).
    pub cycles: u64,
    /// Cycles that used more CPU than the member's budget per cycle.
    pub overruns: u64,
    /// Cycles that finished after their deadline.
    pub misses: u64,
    /// The runtime of this member's reservation, per reservation period.
    pub budget_ns: u64,
    /// The reservation period (a whole number of cycles).
    pub period_ns: u64,
    /// `TESSERA_OK`, or the code of the broker's refusal of the member's
    /// deferred join (it marks its cycles without a reservation).
    pub join_code: i32,
}

std::thread_local! {
    static LAST_ERROR: std::cell::Cell<i32> = const { std::cell::Cell::new(TESSERA_OK) };
}

/// Runs `f`, turning a panic into `TESSERA_ERR_BROKER`.
fn guarded(f: impl FnOnce() -> i32) -> i32 {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(TESSERA_ERR_BROKER)
}

/// Runs a member's call through the handle's address (never dereferenced:
/// the membership is the calling thread's own), or refuses a null handle.
fn on_member(wg: *mut tessera_workgroup, f: impl FnOnce(usize) -> i32) -> i32 {
    if wg.is_null() {
        return TESSERA_ERR_NULL;
    }
    guarded(|| f(wg as usize))
}

/// Runs `f` on the workgroup behind `wg` and writes what it answers into
/// `out`, returning its code; a null `wg` or `out` is refused.
///
/// # Safety
/// `wg` is null or a live handle from open; `out` is null or writable.
unsafe fn answer_into<T>(
    wg: *const tessera_workgroup,
    out: *mut T,
    f: impl FnOnce(&Workgroup) -> Result<(T, i32), i32>,
) -> i32 {
    guarded(|| {
        // SAFETY: the caller's contract (null or live).
        let Some(w) = (unsafe { workgroup(wg) }) else {
            return TESSERA_ERR_NULL;
        };
        if out.is_null() {
            return TESSERA_ERR_NULL;
        }
        match f(w) {
            Ok((answer, code)) => {
                // SAFETY: not null, writable by the caller's contract.
                unsafe { out.write(answer) };
                code
            }
            Err(code) => code,
        }
    })
}

/// The workgroup behind `wg`, or None for a null pointer.
///
/// # Safety
/// `wg` is null or a pointer returned by `tessera_workgroup_open` and not
/// yet closed, as the C API's contract says.
unsafe fn workgroup<'a>(wg: *const tessera_workgroup) -> Option<&'a Workgroup> {
    // SAFETY: the caller's contract: null, or a live handle from open.
    unsafe { wg.as_ref() }.map(|w| &w.inner)
}

/// What code a return value of `tessera_*` means (a static string).
#[no_mangle]
pub extern "C" fn tessera_strerror(code: i32) -> *const c_char {
    status::strerror(code)
}

/// The code of this thread's last `tessera_workgroup_open` that returned
/// NULL (or `TESSERA_OK`, `TESSERA_BEST_EFFORT` after one that did not).
#[no_mangle]
pub extern "C" fn tessera_last_error() -> i32 {
    LAST_ERROR.with(|e| e.get())
}

/// Opens workgroup `name` (1–64 bytes of a-z, 0-9, `-`, `_`, `.`) through
/// the broker with this process's credentials, creating it, bound to this
/// process, when none exists. NULL on failure: `tessera_last_error` says
/// why. Without a broker the workgroup is best-effort (see
/// `tessera_workgroup_guaranteed`).
///
/// # Safety
/// `name` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tessera_workgroup_open(name: *const c_char) -> *mut tessera_workgroup {
    // SAFETY: the caller's contract, passed on.
    unsafe { open_handle(name, None, None) }
}

/// Opens workgroup `name` as `tessera_workgroup_open` does; when it creates
/// it, for up to `max_threads` members (1–64; under global EDF they may
/// outnumber the cores: a callback and its workers). An existing workgroup
/// keeps its capacity (`tessera_workgroup_max_parallel_threads`).
///
/// # Safety
/// `name` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tessera_workgroup_open_for(
    name: *const c_char,
    max_threads: i32,
) -> *mut tessera_workgroup {
    let Some(capacity) = members(max_threads) else {
        LAST_ERROR.with(|e| e.set(TESSERA_ERR_INVALID));
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's contract, passed on.
    unsafe { open_handle(name, Some(capacity), None) }
}

/// Opens workgroup `name` as `tessera_workgroup_open_for` does; when it
/// creates it, every member's reservation is on CPU `core`, partitioned
/// (EDF on that core alone, with nothing else of the machine on it): for
/// members that run one after the other — a chain of JACK clients — beside
/// their audio server's threads on the same core. Members that run in
/// parallel (a host's workers) belong under `tessera_workgroup_open_for`'s
/// global EDF. `TESSERA_ERR_INVALID` for a core that is not online or
/// `max_threads` outside 1–64; `TESSERA_ERR_REFUSED` when the core cannot
/// take the members' opening budgets.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tessera_workgroup_open_on(
    name: *const c_char,
    max_threads: i32,
    core: i32,
) -> *mut tessera_workgroup {
    let online = tessera_sys::kernel::online_cpus().unwrap_or_default();
    let core = usize::try_from(core).ok().filter(|c| online.contains(c));
    let (Some(capacity), Some(core)) = (members(max_threads), core) else {
        LAST_ERROR.with(|e| e.set(TESSERA_ERR_INVALID));
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's contract, passed on.
    unsafe { open_handle(name, Some(capacity), Some(core)) }
}

/// `max_threads` as a workgroup's capacity, if within 1–64.
fn members(max_threads: i32) -> Option<usize> {
    let members = 1..=tessera_policy::MAX_GLOBAL_RESERVATIONS;
    usize::try_from(max_threads)
        .ok()
        .filter(|n| members.contains(n))
}

/// Every open: the handle, or NULL with the thread's last error set.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
unsafe fn open_handle(
    name: *const c_char,
    capacity: Option<usize>,
    core: Option<usize>,
) -> *mut tessera_workgroup {
    let mut opened = None;
    let code = guarded(|| {
        if name.is_null() {
            return TESSERA_ERR_NULL;
        }
        // SAFETY: not null, and NUL-terminated by the caller's contract.
        let name = unsafe { CStr::from_ptr(name) };
        let Ok(name) = name.to_str() else {
            return TESSERA_ERR_INVALID;
        };
        match Workgroup::open(name, capacity, core) {
            Ok(wg) => {
                let code = if wg.guaranteed() {
                    TESSERA_OK
                } else {
                    TESSERA_BEST_EFFORT
                };
                opened = Some(wg);
                code
            }
            Err(code) => code,
        }
    });
    LAST_ERROR.with(|e| e.set(code));
    match opened {
        Some(inner) => Box::into_raw(Box::new(tessera_workgroup { inner })),
        None => std::ptr::null_mut(),
    }
}

/// Closes a workgroup handle: its control thread stops, members joined
/// through it leave, and a workgroup this process created is destroyed.
///
/// # Safety
/// `wg` is null or a handle from `tessera_workgroup_open`, not used after.
#[no_mangle]
pub unsafe extern "C" fn tessera_workgroup_close(wg: *mut tessera_workgroup) -> i32 {
    if wg.is_null() {
        return TESSERA_ERR_NULL;
    }
    // SAFETY: a handle from open (Box::into_raw), closed once by contract.
    let wg = unsafe { Box::from_raw(wg) };
    guarded(move || wg.inner.close())
}

/// 1 when the workgroup's members get reservations, 0 when best-effort.
///
/// # Safety
/// `wg` is null or a live handle from `tessera_workgroup_open`.
#[no_mangle]
pub unsafe extern "C" fn tessera_workgroup_guaranteed(wg: *const tessera_workgroup) -> i32 {
    // SAFETY: the caller's contract (null or live).
    match unsafe { workgroup(wg) } {
        Some(w) => i32::from(w.guaranteed()),
        None => TESSERA_ERR_NULL,
    }
}

/// How many members the workgroup can hold (one reservation each).
///
/// # Safety
/// `wg` is null or a live handle from `tessera_workgroup_open`.
#[no_mangle]
pub unsafe extern "C" fn tessera_workgroup_max_parallel_threads(
    wg: *const tessera_workgroup,
) -> i32 {
    // SAFETY: the caller's contract (null or live).
    match unsafe { workgroup(wg) } {
        Some(w) => i32::try_from(w.capacity()).unwrap_or(i32::MAX),
        None => TESSERA_ERR_NULL,
    }
}

/// Makes the calling thread a member: it gets a reservation of the
/// workgroup's budget. `TESSERA_BEST_EFFORT` when none backs it.
///
/// # Safety
/// `wg` is null or a live handle; `token` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tessera_workgroup_join(
    wg: *mut tessera_workgroup,
    token: *mut tessera_join_token,
) -> i32 {
    // SAFETY: the caller's contract (null or live; token null or writable).
    unsafe { join_with(wg, token, Workgroup::join) }
}

/// As `tessera_workgroup_join`, without waiting for the broker: the
/// calling thread is a member at once and its reservation follows within
/// a few milliseconds, made by the workgroup's control thread. For a
/// thread that joins from inside its first cycle (an audio callback),
/// where the broker's answer would make that cycle late. A refusal shows
/// in `tessera_member_stats.join_code`. Real-time safe: it claims one of
/// the member places made at open (each with its ring) by a
/// compare-and-swap, allocates nothing and waits for no other thread (the
/// first join of a thread aside, where the C library registers the
/// thread-local's destructor). `TESSERA_ERR_REFUSED` when every place is
/// taken (twice `max_parallel_threads`, at least 16).
///
/// # Safety
/// `wg` is null or a live handle; `token` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tessera_workgroup_join_deferred(
    wg: *mut tessera_workgroup,
    token: *mut tessera_join_token,
) -> i32 {
    // SAFETY: the caller's contract (null or live; token null or writable).
    unsafe { join_with(wg, token, Workgroup::join_deferred) }
}

/// A way to join: [`Workgroup::join`] or [`Workgroup::join_deferred`],
/// answering the member's thread id and its code.
type Join = fn(&Workgroup, usize) -> Result<(i32, i32), i32>;

/// A join by `join`, its token written into `token`.
///
/// # Safety
/// `wg` is null or a live handle; `token` is null or writable.
unsafe fn join_with(wg: *mut tessera_workgroup, token: *mut tessera_join_token, join: Join) -> i32 {
    // SAFETY: the caller's contract (null or live; token null or writable).
    unsafe {
        answer_into(wg, token, |w| {
            let (tid, code) = join(w, wg as usize)?;
            let filled = tessera_join_token {
                opaque: [tid as u64, wg as u64, 0, 0],
            };
            Ok((filled, code))
        })
    }
}

/// Ends the calling thread's membership (`token` from its join): when
/// this returns, its reservation has ended and its scheduling is what it
/// was before the join.
///
/// # Safety
/// `wg` is null or a live handle; `token` is null or readable.
#[no_mangle]
pub unsafe extern "C" fn tessera_workgroup_leave(
    wg: *mut tessera_workgroup,
    token: *const tessera_join_token,
) -> i32 {
    // SAFETY: the caller's contract (null or live; token null or readable).
    unsafe { leave_with(wg, token, Workgroup::leave) }
}

/// As `tessera_workgroup_leave`, without asking the broker: the calling
/// thread is no longer a member at once (it marks no more cycles), and
/// the workgroup's control thread ends its reservation within a few
/// milliseconds. For a thread that leaves from inside a cycle (an audio
/// callback), where the broker's answer would make that cycle late.
/// Real-time safe as `tessera_workgroup_join_deferred`: it hands its
/// member place back with a compare-and-swap.
///
/// # Safety
/// `wg` is null or a live handle; `token` is null or readable.
#[no_mangle]
pub unsafe extern "C" fn tessera_workgroup_leave_deferred(
    wg: *mut tessera_workgroup,
    token: *const tessera_join_token,
) -> i32 {
    // SAFETY: the caller's contract (null or live; token null or readable).
    unsafe { leave_with(wg, token, Workgroup::leave_deferred) }
}

/// A way to leave: [`Workgroup::leave`] or [`Workgroup::leave_deferred`].
type Leave = fn(&Workgroup, usize) -> Result<(), i32>;

/// A leave by `leave`, checked against `token`.
///
/// # Safety
/// `wg` is null or a live handle; `token` is null or readable.
unsafe fn leave_with(
    wg: *mut tessera_workgroup,
    token: *const tessera_join_token,
    leave: Leave,
) -> i32 {
    guarded(|| {
        // SAFETY: the caller's contract (null or live).
        let Some(w) = (unsafe { workgroup(wg) }) else {
            return TESSERA_ERR_NULL;
        };
        // SAFETY: null or readable by the caller's contract.
        let Some(token) = (unsafe { token.as_ref() }) else {
            return TESSERA_ERR_NULL;
        };
        let tid = tessera_sys::proc::current_tid();
        if token.opaque[0] != tid as u64 || token.opaque[1] != wg as u64 {
            return TESSERA_ERR_INVALID;
        }
        match leave(w, wg as usize) {
            Ok(()) => TESSERA_OK,
            Err(code) => code,
        }
    })
}

/// A cycle starts at `start_ns` and must end by `deadline_ns`, both
/// CLOCK_MONOTONIC; called by each member for its part of the cycle.
/// Real-time safe: no allocation, no lock, one system call.
#[no_mangle]
pub extern "C" fn tessera_workgroup_interval_start(
    wg: *mut tessera_workgroup,
    start_ns: u64,
    deadline_ns: u64,
) -> i32 {
    on_member(wg, |handle| {
        member::interval_start(handle, start_ns, deadline_ns)
    })
}

/// The current cycle's deadline moved: whether this cycle is late is
/// judged by it, while its period (the reservation's) stays what
/// `interval_start` gave. Real-time safe, no system call.
#[no_mangle]
pub extern "C" fn tessera_workgroup_interval_update(
    wg: *mut tessera_workgroup,
    deadline_ns: u64,
) -> i32 {
    on_member(wg, |handle| member::interval_update(handle, deadline_ns))
}

/// The calling member's work of the cycle is done. Real-time safe: no
/// allocation, no lock, one system call.
#[no_mangle]
pub extern "C" fn tessera_workgroup_interval_finish(wg: *mut tessera_workgroup) -> i32 {
    on_member(wg, member::interval_finish)
}

/// ADPF's `reportActualWorkDuration`: the calling member's work in its
/// last cycle, in ns. Real-time safe, no system call.
#[no_mangle]
pub extern "C" fn tessera_hint_report_actual_work_duration(
    wg: *mut tessera_workgroup,
    actual_ns: i64,
) -> i32 {
    on_member(wg, |handle| member::report_actual(handle, actual_ns))
}

/// ADPF's `updateTargetWorkDuration`: the cycle's period and deadline for
/// the calling member's reports, in ns.
#[no_mangle]
pub extern "C" fn tessera_hint_update_target_work_duration(
    wg: *mut tessera_workgroup,
    target_ns: i64,
) -> i32 {
    on_member(wg, |handle| member::update_target(handle, target_ns))
}

/// Member `tid`'s counts and its budget, into `out`.
/// `TESSERA_ERR_NOT_FOUND` until the control thread saw the member.
///
/// # Safety
/// `wg` is null or a live handle; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tessera_workgroup_member_stats(
    wg: *const tessera_workgroup,
    tid: i32,
    out: *mut tessera_member_stats,
) -> i32 {
    // SAFETY: the caller's contract (null or live; out null or writable).
    unsafe {
        answer_into(wg, out, |w| {
            let report = w.member_report(tid).ok_or(TESSERA_ERR_NOT_FOUND)?;
            let budget = w.budget_of(tid);
            let stats = tessera_member_stats {
                cycles: report.cycles,
                overruns: report.overruns,
                misses: report.misses,
                budget_ns: budget.map_or(0, |b| b.runtime_ns),
                period_ns: budget.map_or(0, |b| b.period_ns),
                join_code: w.refusal(tid).unwrap_or(TESSERA_OK),
            };
            Ok((stats, TESSERA_OK))
        })
    }
}
