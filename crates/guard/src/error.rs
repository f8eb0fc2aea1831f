//! The guard's error: a refusal or failure of the broker or the kernel it
//! passes on, or one of its own, each with what went wrong and the fix. It
//! must never decide what a failure means to a user (an exit status):
//! whoever matches it does.

use std::fmt;
use tessera_broker::BrokerError;

/// A guard's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardError {
    /// The broker refused or failed an operation the guard asked for.
    Broker(BrokerError),
    /// The kernel refused an operation (through `tessera-sys`).
    Kernel(tessera_sys::Error),
    /// Something the guard needs is not installed: what, and how to get it.
    Missing { message: String, fix: String },
    /// The guard itself failed: what went wrong and the fix.
    Failed { message: String, fix: String },
}

impl GuardError {
    /// What went wrong, in words.
    pub fn message(&self) -> String {
        match self {
            GuardError::Broker(e) => e.message.clone(),
            GuardError::Kernel(e) => format!("{}: {}", e.action, e.cause),
            GuardError::Missing { message, .. } | GuardError::Failed { message, .. } => {
                message.clone()
            }
        }
    }

    /// What to do about it; empty when nothing is known.
    pub fn fix(&self) -> &str {
        match self {
            GuardError::Broker(e) => &e.fix,
            GuardError::Kernel(e) => &e.fix,
            GuardError::Missing { fix, .. } | GuardError::Failed { fix, .. } => fix,
        }
    }
}

/// The guard's own failure: what went wrong and the fix.
pub(crate) fn fail(message: impl Into<String>, fix: impl Into<String>) -> GuardError {
    GuardError::Failed {
        message: message.into(),
        fix: fix.into(),
    }
}

impl fmt::Display for GuardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message())?;
        if !self.fix().is_empty() {
            write!(f, " (fix: {})", self.fix())?;
        }
        Ok(())
    }
}

impl std::error::Error for GuardError {}

impl From<BrokerError> for GuardError {
    fn from(e: BrokerError) -> GuardError {
        GuardError::Broker(e)
    }
}

impl From<tessera_sys::Error> for GuardError {
    fn from(e: tessera_sys::Error) -> GuardError {
        GuardError::Kernel(e)
    }
}
