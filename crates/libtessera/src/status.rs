//! The return codes of the C API and their messages: 0 is success, a
//! positive code a success with a caveat, a negative one a failure that
//! changed nothing. Broker errors map onto them here and nowhere else.
//!
//! It must never allocate in [`strerror`]: a real-time caller may ask.

use std::ffi::{c_char, CStr};
use tessera_broker::{BrokerError, ErrorCode};

/// Success.
pub const TESSERA_OK: i32 = 0;
/// Success, but best-effort: no reservation backs the workgroup (no
/// daemon, no privileges, or the broker runs best-effort).
pub const TESSERA_BEST_EFFORT: i32 = 1;
/// A null pointer where one was required.
pub const TESSERA_ERR_NULL: i32 = -1;
/// An argument out of range (a name that is not UTF-8, a deadline before
/// its start, a token of another thread).
pub const TESSERA_ERR_INVALID: i32 = -2;
/// No workgroup of that name, or the thread is not its member.
pub const TESSERA_ERR_NOT_FOUND: i32 = -3;
/// Another user's workgroup.
pub const TESSERA_ERR_PERMISSION: i32 = -4;
/// Admission refused: the workgroup is full, or its budget does not fit.
pub const TESSERA_ERR_REFUSED: i32 = -5;
/// The calling thread is not a member of this workgroup.
pub const TESSERA_ERR_NOT_JOINED: i32 = -6;
/// The calling thread is already a member of a workgroup.
pub const TESSERA_ERR_ALREADY_JOINED: i32 = -7;
/// `interval_finish` or `interval_update` without `interval_start`.
pub const TESSERA_ERR_NO_INTERVAL: i32 = -8;
/// The broker failed (its state, the kernel, or a bug): see its log.
pub const TESSERA_ERR_BROKER: i32 = -9;

/// The code of a broker error.
pub fn of_broker(e: &BrokerError) -> i32 {
    match e.code {
        ErrorCode::NotFound => TESSERA_ERR_NOT_FOUND,
        ErrorCode::Permission => TESSERA_ERR_PERMISSION,
        ErrorCode::Refused | ErrorCode::Quota => TESSERA_ERR_REFUSED,
        ErrorCode::Invalid | ErrorCode::Malformed => TESSERA_ERR_INVALID,
        _ => TESSERA_ERR_BROKER,
    }
}

/// What a code means, as a static C string.
pub fn strerror(code: i32) -> *const c_char {
    message(code).as_ptr()
}

/// What a code means.
pub fn message(code: i32) -> &'static CStr {
    match code {
        TESSERA_OK => c"success",
        TESSERA_BEST_EFFORT => {
            c"best-effort: no reservation backs this workgroup (no tessera daemon, no privileges, or a best-effort broker)"
        }
        TESSERA_ERR_NULL => c"a null pointer was passed",
        TESSERA_ERR_INVALID => c"an argument is out of range",
        TESSERA_ERR_NOT_FOUND => c"no such workgroup, or the thread is not its member",
        TESSERA_ERR_PERMISSION => c"the workgroup belongs to another user",
        TESSERA_ERR_REFUSED => {
            c"admission refused: the workgroup is full (see tessera_workgroup_max_parallel_threads) or its budget does not fit"
        }
        TESSERA_ERR_NOT_JOINED => c"the calling thread is not a member of this workgroup",
        TESSERA_ERR_ALREADY_JOINED => c"the calling thread is already a member of a workgroup",
        TESSERA_ERR_NO_INTERVAL => c"no interval was started on this thread",
        TESSERA_ERR_BROKER => c"the tessera broker failed (see its log)",
        _ => c"unknown tessera error code",
    }
}
