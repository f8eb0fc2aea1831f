//! [`CycleCell`]: interior mutability whose exclusivity comes from the cycle's
//! activation order instead of a lock.
//!
//! In a cycle, a node's state and its output buffers are written only by the
//! thread running that node, and read by its successors only after the
//! activation counter handed them over (an acquire/release chain, see
//! `activation`). Between cycles only the driver thread touches them. This
//! module owns the one place where that argument turns into `unsafe` access;
//! it must never be used for data whose access is not ordered that way.

use std::cell::UnsafeCell;

/// A value shared between the engine's threads, accessed under the cycle
/// protocol's happens-before edges.
pub(crate) struct CycleCell<T>(UnsafeCell<T>);

// SAFETY: the engine hands a `CycleCell` to one thread at a time (the node's
// runner in a cycle, the driver between cycles) or to several readers at once
// after the last write happened-before their reads; `T: Send` is enough for
// moving that access between threads.
unsafe impl<T: Send> Sync for CycleCell<T> {}

impl<T> CycleCell<T> {
    pub(crate) fn new(value: T) -> Self {
        CycleCell(UnsafeCell::new(value))
    }

    /// # Safety
    /// No thread may write the value while the returned reference lives.
    pub(crate) unsafe fn get(&self) -> &T {
        // SAFETY: guaranteed by the caller.
        unsafe { &*self.0.get() }
    }

    /// # Safety
    /// No other thread may access the value while the returned reference
    /// lives, and the caller must not create a second reference to it.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn get_mut(&self) -> &mut T {
        // SAFETY: guaranteed by the caller.
        unsafe { &mut *self.0.get() }
    }
}
