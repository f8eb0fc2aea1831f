//! The interval and hint calls, and a deferred join and leave, allocate
//! nothing: the allocation guard counts what a thread marked real-time
//! does with the heap while a joined member marks cycles, and while a
//! thread that was a member before joins and leaves deferred, as an audio
//! callback does. Its own test binary: the guard's counters are
//! process-wide. Best-effort (no daemon in its run directory): the calls
//! and the member places are the same.

use std::ffi::CString;
use tessera::*;
use tessera_rtguard::{assert_no_rt_allocations, rt_section, CountingAllocator};
use tessera_testkit::ScratchDir;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn interval_and_hint_calls_allocate_nothing() {
    let scratch = ScratchDir::new("rt_alloc");
    std::env::set_var("TESSERA_RUN_DIR", &scratch.paths.dir);
    let name = CString::new("wg-rt-alloc").unwrap();
    // SAFETY: a NUL-terminated name.
    let wg = unsafe { tessera_workgroup_open(name.as_ptr()) };
    assert!(!wg.is_null(), "open: {}", tessera_last_error());
    let mut token = tessera_join_token { opaque: [0; 4] };
    // SAFETY: a live handle and a writable token.
    let joined = unsafe { tessera_workgroup_join(wg, &mut token) };
    assert!(joined >= 0, "join: {joined}");
    let start = tessera_sys::clock::monotonic_ns();
    rt_section(|| {
        for i in 0..1000u64 {
            let begin = start + i * 1_000_000;
            assert_eq!(
                tessera_workgroup_interval_start(wg, begin, begin + 1_000_000),
                0
            );
            assert_eq!(tessera_workgroup_interval_update(wg, begin + 900_000), 0);
            assert_eq!(tessera_workgroup_interval_finish(wg), 0);
            assert_eq!(tessera_hint_update_target_work_duration(wg, 1_000_000), 0);
            assert_eq!(tessera_hint_report_actual_work_duration(wg, 100_000), 0);
        }
    });
    assert_no_rt_allocations();
    // SAFETY: the handle and token of the join above.
    assert_eq!(unsafe { tessera_workgroup_leave(wg, &token) }, 0);
    // The thread's membership was made once (its thread-local's
    // destructor registered): joins and leaves from a callback reuse it.
    rt_section(|| {
        for _ in 0..40 {
            // SAFETY: a live handle and a writable token.
            let joined = unsafe { tessera_workgroup_join_deferred(wg, &mut token) };
            assert!(joined >= 0, "deferred join: {joined}");
            let begin = tessera_sys::clock::monotonic_ns();
            assert_eq!(
                tessera_workgroup_interval_start(wg, begin, begin + 1_000_000),
                0
            );
            assert_eq!(tessera_workgroup_interval_finish(wg), 0);
            // SAFETY: the handle and token of the join above.
            assert_eq!(unsafe { tessera_workgroup_leave_deferred(wg, &token) }, 0);
            // The control thread frees the place within a tick (2 ms);
            // 40 joins at once would take more places than there are.
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    });
    assert_no_rt_allocations();
    // SAFETY: a live handle, not used after.
    let closed = unsafe { tessera_workgroup_close(wg) };
    assert!(closed >= 0, "close: {closed}");
}
