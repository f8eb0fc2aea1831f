//! The broker's error: an [`ErrorCode`] saying what kind of failure it is, what is
//! wrong, and the fix. The codes' wire names (docs/protocol.md) are defined
//! here and nowhere else; callers decide by matching an [`ErrorCode`], never by
//! comparing its name. It must never carry a decision (an exit code, a
//! retry): those belong to whoever matches it.

use serde::{Deserialize, Serialize};
use std::fmt;
use tessera_sys::ErrorKind;

/// What kind of failure an error is. On the wire each is its kebab-case
/// name (`NotFound` is `"not-found"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorCode {
    /// A request line the broker could not read (docs/protocol.md).
    Malformed,
    /// A request of another protocol version.
    Version,
    /// A parameter out of range.
    Invalid,
    /// Admission control refused: the fix says what would fit.
    Refused,
    /// The user's quota would be exceeded.
    Quota,
    /// An unknown cell, process, thread or service.
    NotFound,
    /// Not the owner, or not root.
    Permission,
    /// Held by someone else (a name, the daemon's socket).
    Busy,
    /// The kernel refused an operation.
    Kernel,
    /// The broker's state (its files) could not be read or written.
    State,
    /// A bug, or a thread that could not start: something that should not
    /// fail did.
    Internal,
    /// An experiment failed: the one crate above the broker that has no
    /// error type of its own yet. It never travels over the broker's socket.
    Experiment,
}

/// A failed operation: a stable code, what is wrong, and the fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerError {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default)]
    pub fix: String,
}

impl BrokerError {
    pub fn new(code: ErrorCode, message: impl Into<String>, fix: impl Into<String>) -> BrokerError {
        BrokerError {
            code,
            message: message.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for BrokerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        if !self.fix.is_empty() {
            write!(f, " (fix: {})", self.fix)?;
        }
        Ok(())
    }
}

impl std::error::Error for BrokerError {}

impl From<tessera_sys::Error> for BrokerError {
    fn from(e: tessera_sys::Error) -> BrokerError {
        let code = match e.kind {
            ErrorKind::Permission => ErrorCode::Permission,
            ErrorKind::NotFound => ErrorCode::NotFound,
            ErrorKind::Invalid => ErrorCode::Invalid,
            _ => ErrorCode::Kernel,
        };
        BrokerError::new(code, format!("{}: {}", e.action, e.cause), e.fix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_travel_by_their_documented_names() {
        let e = BrokerError::new(ErrorCode::NotFound, "no cell named \"x\"", "");
        let line = serde_json::to_string(&e).unwrap();
        assert_eq!(
            line,
            r#"{"code":"not-found","message":"no cell named \"x\"","fix":""}"#
        );
        let back: BrokerError =
            serde_json::from_str(r#"{"code":"refused","message":"m"}"#).unwrap();
        assert_eq!((back.code, back.fix.as_str()), (ErrorCode::Refused, ""));
    }
}
