//! Which network service a client command talks to (`net status`, `net
//! stream`, `net streams`, `aes67 run`), and how the service's refusals
//! become errors. A leaf: it must never import another module of the cli.

use clap::Args;
use std::path::PathBuf;
use tessera_broker::{BrokerError, ErrorCode};
use tessera_services::net::client;

/// Which service: by name through the broker, or at a socket.
#[derive(Args)]
pub struct ServiceArgs {
    #[arg(long, default_value = "net")]
    pub name: String,
    /// The service's socket, bypassing the broker's registry.
    #[arg(long)]
    pub socket: Option<PathBuf>,
}

impl ServiceArgs {
    pub fn connect(&self) -> Result<std::os::unix::net::UnixStream, BrokerError> {
        match &self.socket {
            Some(path) => client::connect(path),
            None => client::connect_by_name(&self.name),
        }
        .map_err(refused)
    }
}

/// The service said no (or could not be reached).
pub fn refused(e: impl std::fmt::Display) -> BrokerError {
    BrokerError::new(ErrorCode::Refused, e.to_string(), "")
}
