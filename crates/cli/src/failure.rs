//! What a command's failure is, as the libraries said it, and the exit
//! status each kind gives: 3 refused (admission or quota), 4 not permitted,
//! 5 not found, 1 anything else. A leaf: it must never import another
//! module of the cli.

use tessera_broker::{BrokerError, ErrorCode};
use tessera_guard::GuardError;
use tessera_sys::ErrorKind;

/// A command's failure: the broker's, the guard's, or its own.
#[derive(Debug)]
pub enum Failure {
    Broker(BrokerError),
    Guard(GuardError),
    /// The command's own: a program, file or channel it uses failed.
    Failed {
        message: String,
        fix: String,
    },
}

/// The command's own failure: what went wrong and the fix.
pub fn failed(message: impl Into<String>, fix: impl Into<String>) -> Failure {
    Failure::Failed {
        message: message.into(),
        fix: fix.into(),
    }
}

impl Failure {
    pub fn message(&self) -> String {
        match self {
            Failure::Broker(e) => e.message.clone(),
            Failure::Guard(e) => e.message(),
            Failure::Failed { message, .. } => message.clone(),
        }
    }

    pub fn fix(&self) -> &str {
        match self {
            Failure::Broker(e) => &e.fix,
            Failure::Guard(e) => e.fix(),
            Failure::Failed { fix, .. } => fix,
        }
    }

    /// The process's exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Broker(e) | Failure::Guard(GuardError::Broker(e)) => broker_exit_code(e.code),
            Failure::Guard(GuardError::Kernel(e)) => match e.kind {
                ErrorKind::Permission => 4,
                ErrorKind::NotFound => 5,
                _ => 1,
            },
            Failure::Guard(GuardError::Missing { .. }) => 5,
            Failure::Guard(GuardError::Failed { .. }) | Failure::Failed { .. } => 1,
        }
    }
}

fn broker_exit_code(code: ErrorCode) -> u8 {
    match code {
        ErrorCode::Refused | ErrorCode::Quota => 3,
        ErrorCode::Permission => 4,
        ErrorCode::NotFound => 5,
        _ => 1,
    }
}

impl From<BrokerError> for Failure {
    fn from(e: BrokerError) -> Failure {
        Failure::Broker(e)
    }
}

impl From<GuardError> for Failure {
    fn from(e: GuardError) -> Failure {
        Failure::Guard(e)
    }
}

impl From<tessera_sys::Error> for Failure {
    fn from(e: tessera_sys::Error) -> Failure {
        Failure::Broker(e.into())
    }
}
