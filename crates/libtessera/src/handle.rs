//! libtessera for Rust callers: the C ABI's calls behind a safe handle, so
//! that a Rust host (tessera-jack-peer's JACK bridge) needs no `unsafe` of
//! its own. Every method is the C function of the same name; the handle
//! owns the pointer and closes it when dropped.
//!
//! It must never add behaviour the C ABI lacks: C and Rust hosts get the
//! same workgroup, the same codes and the same real-time path.

use crate::{
    tessera_join_token, tessera_member_stats, tessera_workgroup, tessera_workgroup_close,
    tessera_workgroup_interval_finish, tessera_workgroup_interval_start, tessera_workgroup_join,
    tessera_workgroup_join_deferred, tessera_workgroup_leave, tessera_workgroup_leave_deferred,
    tessera_workgroup_member_stats, tessera_workgroup_open_for, tessera_workgroup_open_on,
    TESSERA_ERR_INVALID, TESSERA_OK,
};
use std::ffi::CString;
use std::ptr::NonNull;

/// An open workgroup; closed (its members leave) when dropped.
pub struct WorkgroupHandle {
    raw: NonNull<tessera_workgroup>,
}

// SAFETY: the workgroup behind the pointer is shared by design: C hosts
// use one handle from every member thread. Its state is behind a lock the
// real-time path never takes, atomics, and each member's own thread-local;
// the pointer is freed only by `Drop`, when no other reference is left.
unsafe impl Send for WorkgroupHandle {}
// SAFETY: as for Send: every call through `&self` is one the C ABI allows
// from any thread at the same time.
unsafe impl Sync for WorkgroupHandle {}

/// A member's join, handed back to [`WorkgroupHandle::leave`].
pub struct JoinToken(tessera_join_token);

impl WorkgroupHandle {
    /// `tessera_workgroup_open_for`: the workgroup, created for up to
    /// `max_threads` members when none exists, with the open's code
    /// (`TESSERA_OK`, or `TESSERA_BEST_EFFORT` when nothing backs it).
    pub fn open(name: &str, max_threads: usize) -> Result<(WorkgroupHandle, i32), i32> {
        Self::open_where(name, max_threads, None)
    }

    /// `tessera_workgroup_open_on`: as [`WorkgroupHandle::open`], every
    /// member's reservation on CPU `core`, partitioned.
    pub fn open_on(
        name: &str,
        max_threads: usize,
        core: usize,
    ) -> Result<(WorkgroupHandle, i32), i32> {
        Self::open_where(name, max_threads, Some(core))
    }

    fn open_where(
        name: &str,
        max_threads: usize,
        core: Option<usize>,
    ) -> Result<(WorkgroupHandle, i32), i32> {
        let name = CString::new(name).map_err(|_| TESSERA_ERR_INVALID)?;
        let max_threads = i32::try_from(max_threads).map_err(|_| TESSERA_ERR_INVALID)?;
        let raw = match core {
            // SAFETY: a NUL-terminated name that lives through the call.
            None => unsafe { tessera_workgroup_open_for(name.as_ptr(), max_threads) },
            Some(core) => {
                let core = i32::try_from(core).map_err(|_| TESSERA_ERR_INVALID)?;
                // SAFETY: as above.
                unsafe { tessera_workgroup_open_on(name.as_ptr(), max_threads, core) }
            }
        };
        match NonNull::new(raw) {
            Some(raw) => Ok((WorkgroupHandle { raw }, crate::tessera_last_error())),
            None => Err(crate::tessera_last_error()),
        }
    }

    /// `tessera_workgroup_join`: the calling thread becomes a member; the
    /// code says whether a reservation backs it.
    pub fn join(&self) -> Result<(JoinToken, i32), i32> {
        self.join_through(tessera_workgroup_join)
    }

    /// `tessera_workgroup_join_deferred`: a member at once, its reservation
    /// made by the control thread (for a join inside a callback).
    pub fn join_deferred(&self) -> Result<(JoinToken, i32), i32> {
        self.join_through(tessera_workgroup_join_deferred)
    }

    fn join_through(
        &self,
        join: unsafe extern "C" fn(*mut tessera_workgroup, *mut tessera_join_token) -> i32,
    ) -> Result<(JoinToken, i32), i32> {
        let mut token = tessera_join_token { opaque: [0; 4] };
        // SAFETY: a live handle (freed only on drop) and a writable token.
        let code = unsafe { join(self.raw.as_ptr(), &mut token) };
        match code {
            c if c >= TESSERA_OK => Ok((JoinToken(token), c)),
            c => Err(c),
        }
    }

    /// `tessera_workgroup_leave`, from the thread that joined.
    pub fn leave(&self, token: JoinToken) -> i32 {
        // SAFETY: a live handle and the token its join filled.
        unsafe { tessera_workgroup_leave(self.raw.as_ptr(), &token.0) }
    }

    /// `tessera_workgroup_leave_deferred`: no longer a member at once, its
    /// reservation ended by the control thread within a tick.
    pub fn leave_deferred(&self, token: JoinToken) -> i32 {
        // SAFETY: a live handle and the token its join filled.
        unsafe { tessera_workgroup_leave_deferred(self.raw.as_ptr(), &token.0) }
    }

    /// `tessera_workgroup_interval_start` (CLOCK_MONOTONIC ns). Real-time safe.
    pub fn interval_start(&self, start_ns: u64, deadline_ns: u64) -> i32 {
        tessera_workgroup_interval_start(self.raw.as_ptr(), start_ns, deadline_ns)
    }

    /// `tessera_workgroup_interval_finish`. Real-time safe.
    pub fn interval_finish(&self) -> i32 {
        tessera_workgroup_interval_finish(self.raw.as_ptr())
    }

    /// `tessera_workgroup_member_stats` of member `tid`.
    pub fn member_stats(&self, tid: i32) -> Result<tessera_member_stats, i32> {
        let mut stats = tessera_member_stats::default();
        // SAFETY: a live handle and a writable record.
        match unsafe { tessera_workgroup_member_stats(self.raw.as_ptr(), tid, &mut stats) } {
            TESSERA_OK => Ok(stats),
            code => Err(code),
        }
    }
}

impl Drop for WorkgroupHandle {
    fn drop(&mut self) {
        // SAFETY: the handle from open, closed once, never used after.
        unsafe { tessera_workgroup_close(self.raw.as_ptr()) };
    }
}
