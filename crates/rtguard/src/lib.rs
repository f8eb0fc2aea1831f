//! Allocation guard for real-time sections.
//!
//! tessera's hot path must never touch the heap: an allocation can take a lock
//! inside the allocator or fault in fresh pages, and either can stall a cycle
//! past its deadline. This crate makes that rule checkable in tests:
//!
//! * [`CountingAllocator`] wraps [`std::alloc::System`]. Install it in a test
//!   binary with `#[global_allocator]`. For every allocation, reallocation and
//!   deallocation it looks at a per-thread "real-time" flag and, when the flag
//!   is set, bumps a global counter.
//! * [`rt_section`] / [`RtGuard`] set the flag for the current thread; engines
//!   wrap their cycle code in them. Marking is a `const`-initialised
//!   thread-local `Cell<bool>`, so it never allocates and costs a couple of
//!   instructions whether or not the allocator is installed.
//! * [`rt_allocations`], [`rt_frees`] and [`assert_no_rt_allocations`] read the
//!   counters.
//!
//! This crate owns only the flag and the counters. It must never allocate in
//! the allocator path, never block, and never print from inside the allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

thread_local! {
    /// Whether the current thread is inside a real-time section. `const`
    /// initialisation and a type without `Drop` mean the access never
    /// allocates and never registers a destructor.
    static REAL_TIME: Cell<bool> = const { Cell::new(false) };
}

static RT_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static RT_FREES: AtomicU64 = AtomicU64::new(0);
static ALL_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// A global allocator that forwards to [`System`] and counts what threads
/// marked real-time do with the heap.
///
/// ```text
/// #[global_allocator]
/// static ALLOC: tessera_rtguard::CountingAllocator = tessera_rtguard::CountingAllocator;
/// ```
pub struct CountingAllocator;

fn in_rt_section() -> bool {
    // `try_with` fails only while the thread is being torn down; a thread
    // being torn down is not in a real-time section.
    REAL_TIME.try_with(Cell::get).unwrap_or(false)
}

fn count_allocation() {
    ALL_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    if in_rt_section() {
        RT_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

fn count_free() {
    if in_rt_section() {
        RT_FREES.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees carry over; the counting touches only
// atomics and a const thread-local, neither of which allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: forwarded contract of `GlobalAlloc::alloc`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: forwarded contract of `GlobalAlloc::alloc_zeroed`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: forwarded contract of `GlobalAlloc::realloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count_free();
        // SAFETY: forwarded contract of `GlobalAlloc::dealloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Marks the current thread real-time until dropped, then restores the
/// previous mark (so sections nest).
#[must_use = "the thread is marked real-time only while the guard lives"]
pub struct RtGuard {
    previous: bool,
    // Not `Send`: the guard restores the flag of the thread that created it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl RtGuard {
    /// Marks the current thread real-time.
    pub fn enter() -> RtGuard {
        let previous = REAL_TIME.with(|flag| flag.replace(true));
        RtGuard {
            previous,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for RtGuard {
    fn drop(&mut self) {
        REAL_TIME.with(|flag| flag.set(self.previous));
    }
}

/// Runs `f` with the current thread marked real-time.
pub fn rt_section<R>(f: impl FnOnce() -> R) -> R {
    let _guard = RtGuard::enter();
    f()
}

/// Whether the current thread is marked real-time.
pub fn is_rt_thread() -> bool {
    in_rt_section()
}

/// Allocations and reallocations made by threads while marked real-time,
/// since the process started.
pub fn rt_allocations() -> u64 {
    RT_ALLOCATIONS.load(Ordering::Relaxed)
}

/// Deallocations made by threads while marked real-time.
pub fn rt_frees() -> u64 {
    RT_FREES.load(Ordering::Relaxed)
}

/// Whether [`CountingAllocator`] is the global allocator. It is once any
/// allocation has gone through it, which in practice is before `main`.
pub fn is_installed() -> bool {
    ALL_ALLOCATIONS.load(Ordering::Relaxed) > 0
}

/// Panics if the allocator is not installed (the check would be vacuous) or
/// if any real-time section allocated or freed heap memory.
pub fn assert_no_rt_allocations() {
    assert!(
        is_installed(),
        "tessera_rtguard::CountingAllocator is not the #[global_allocator]: the check would pass vacuously"
    );
    let (allocations, frees) = (rt_allocations(), rt_frees());
    assert!(
        allocations == 0 && frees == 0,
        "real-time sections touched the heap: {allocations} allocation(s), {frees} free(s)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_marks_and_restores_the_thread() {
        assert!(!is_rt_thread());
        {
            let _outer = RtGuard::enter();
            assert!(is_rt_thread());
            rt_section(|| assert!(is_rt_thread()));
            assert!(
                is_rt_thread(),
                "leaving a nested section keeps the outer mark"
            );
        }
        assert!(!is_rt_thread());
    }

    #[test]
    fn marking_is_per_thread() {
        let _guard = RtGuard::enter();
        let other = std::thread::spawn(is_rt_thread).join().unwrap();
        assert!(!other);
    }
}
