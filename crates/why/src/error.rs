//! Errors of attribution: why the kernel's events cannot be read here, or
//! why a thread cannot be watched, each with the fix.
//!
//! It must never be used to report a late cycle: a miss whose cause is not
//! known is a miss of cause "unknown", not an error.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum WhyError {
    /// The kernel's events cannot be read (no privilege, no tracefs, a
    /// kernel without the tracepoints): attribution is unavailable.
    #[error("the kernel's scheduling events cannot be read: {cause}")]
    Unavailable { cause: String, fix: String },
    /// A tracepoint's format file says something this decoder cannot read.
    #[error("the format of tracepoint {event} is unreadable: {cause}")]
    Format { event: String, cause: String },
    /// The thread cannot be watched as asked (no deadline to judge it by,
    /// or it does not exist).
    #[error("thread {tid} cannot be watched: {cause}")]
    Watch {
        tid: i32,
        cause: String,
        fix: String,
    },
}

impl WhyError {
    pub fn fix(&self) -> &str {
        match self {
            WhyError::Unavailable { fix, .. } | WhyError::Watch { fix, .. } => fix,
            WhyError::Format { .. } => "report the kernel version: its tracepoint changed shape",
        }
    }

    /// A kernel-layer failure while opening or reading the events.
    pub(crate) fn unavailable(e: tessera_sys::Error) -> WhyError {
        WhyError::Unavailable {
            cause: format!("{}: {}", e.action, e.cause),
            fix: e.fix,
        }
    }
}
