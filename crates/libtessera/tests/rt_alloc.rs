//! The interval and hint calls allocate nothing: the allocation guard
//! counts what a thread marked real-time does with the heap while a
//! joined member marks cycles. Its own test binary: the guard's counters
//! are process-wide. Best-effort when not root (the calls are the same).

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
    // SAFETY: a live handle, not used after.
    let closed = unsafe { tessera_workgroup_close(wg) };
    assert!(closed >= 0, "close: {closed}");
}
