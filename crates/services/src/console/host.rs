//! The console service's process (`tessera serve console`): where its
//! lines go (stdout or a log file), the cell its console thread may join,
//! and its registration with the broker under a name writers open it by.
//!
//! It owns the registration and gives it back however the service ends (a
//! crashed process's registration is found stale by the broker). It must
//! never run without saying how its console thread is scheduled.

use super::service::{ConsoleService, ServiceConfig};
use super::{ConsoleError, ConsoleReport};
use crate::control::ThreadHook;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use tessera_broker::paths::Paths;
use tessera_broker::{ServicePolicy, ServiceRegistration, Session};
use tessera_runtime::CellJoin;

/// How the service process runs.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// The name writers open it by.
    pub name: String,
    /// Where it listens; default: the broker's run directory.
    pub socket: Option<PathBuf>,
    /// Where the lines go (appended); default: stdout.
    pub log: Option<PathBuf>,
    /// Run the console thread in this existing cell.
    pub cell: Option<String>,
    /// Whom the service admits beside its owner and root.
    pub policy: ServicePolicy,
}

/// A running service process: stopping it unregisters the name, then
/// stops the service.
pub struct Host {
    registration: ServiceRegistration,
    service: ConsoleService,
    /// What the service runs on, in words, for the start line.
    pub summary: String,
}

impl Host {
    /// Opens the output, starts the service and registers it.
    pub fn start(options: &HostOptions) -> Result<Host, ConsoleError> {
        let socket = options
            .socket
            .clone()
            .unwrap_or_else(|| Paths::from_env().service_socket(&options.name));
        let (sink, output): (Box<dyn Write + Send>, String) = match &options.log {
            Some(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| ConsoleError::Log {
                        path: path.clone(),
                        source,
                    })?;
                (Box::new(file), path.display().to_string())
            }
            None => (Box::new(std::io::stdout()), "stdout".into()),
        };
        let (setup, scheduling) = match &options.cell {
            Some(cell) => (
                Some(Arc::new(CellJoin::connect(cell.clone()).hook()) as ThreadHook),
                format!("cell {cell:?}"),
            ),
            None => (
                None,
                "best-effort, nothing guaranteed (give --cell NAME to run it in a cell)".into(),
            ),
        };
        let policy = options.policy.clone();
        let service = ConsoleService::start(ServiceConfig {
            socket: socket.clone(),
            sink,
            setup,
            policy: Arc::new(move |caller| policy.allows(caller)),
        })?;
        let registration = ServiceRegistration::register(
            Session::connect()?,
            &options.name,
            &socket,
            options.policy.clone(),
        )?;
        Ok(Host {
            registration,
            service,
            summary: format!(
                "console service {:?} (pid {}) at {}: lines to {output}; console thread: \
                 {scheduling}",
                options.name,
                std::process::id(),
                socket.display(),
            ),
        })
    }

    /// Unregisters, takes no more writers, writes out what they queued, and
    /// reports every writer.
    pub fn stop(self) -> Result<ConsoleReport, ConsoleError> {
        // Dropping the registration unregisters (a failure leaves a stale
        // entry, which the broker removes).
        drop(self.registration);
        self.service.stop()
    }
}
