//! Proves that `LatencyHistogram::record` never allocates after construction,
//! with a counting global allocator that counts only on the thread that set
//! its real-time flag (the test harness allocates on other threads).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use tessera_measure::LatencyHistogram;

struct CountingAllocator;

static ALLOCATIONS_IN_RT_SECTION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static IN_RT_SECTION: Cell<bool> = const { Cell::new(false) };
}

fn note_allocation() {
    if IN_RT_SECTION.with(Cell::get) {
        ALLOCATIONS_IN_RT_SECTION.fetch_add(1, Ordering::Relaxed);
    }
}

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Runs `section` as a real-time section and returns how many allocations it made.
fn allocations_in(section: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS_IN_RT_SECTION.load(Ordering::Relaxed);
    IN_RT_SECTION.with(|flag| flag.set(true));
    section();
    IN_RT_SECTION.with(|flag| flag.set(false));
    ALLOCATIONS_IN_RT_SECTION.load(Ordering::Relaxed) - before
}

#[test]
fn the_guard_sees_allocations() {
    assert!(allocations_in(|| drop(std::hint::black_box(vec![1u8; 64]))) > 0);
}

#[test]
fn record_allocates_nothing_after_construction() {
    let mut histogram = LatencyHistogram::new(1_000_000_000);
    let allocations = allocations_in(|| {
        // Zero, every magnitude up to the bound, and far beyond it (saturates).
        for i in 0..200_000u64 {
            histogram.record(i * i);
        }
        histogram.record(u64::MAX);
    });
    assert_eq!(allocations, 0, "record() allocated on a real-time thread");
    assert_eq!(histogram.count(), 200_001);
}
