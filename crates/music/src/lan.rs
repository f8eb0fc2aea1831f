//! The seed's LAN inside one machine: the SLABS on the far side of a veth
//! pair, in a network namespace of its own; the application in the
//! machine's namespace, as on the seed's second machine.
//!
//! It owns the namespace and the pair, and both live only while a [`Lan`]
//! does: the namespace is anonymous (held by a file, never named under
//! /run/netns) and deleting one end of a veth pair deletes the other, so
//! even a crash leaves nothing behind. It must never touch an interface it
//! did not create.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::mpsc;
use std::thread::JoinHandle;

use tessera_sys::net::{enter_new_net_namespace, join_net_namespace};

/// The private block each run's /30 comes from.
const BLOCK: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 0);
/// /30 subnets in [`BLOCK`]'s /16.
const SUBNETS: u32 = 1 << 14;

#[derive(Debug, thiserror::Error)]
pub enum LanError {
    #[error("the SLABS's network namespace: {0}")]
    Namespace(#[from] tessera_sys::Error),
    #[error("`ip {command}` failed: {message} (fix: run as root, with iproute2 installed)")]
    Ip { command: String, message: String },
    #[error("the SLABS's network namespace: its thread ended early")]
    Thread,
}

/// A veth pair between this machine and the SLABS's namespace.
pub struct Lan {
    namespace: File,
    device: String,
    app_address: Ipv4Addr,
    slabs_address: Ipv4Addr,
}

fn ip(args: &[&str]) -> Result<(), LanError> {
    let command = args.join(" ");
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| LanError::Ip {
            command: command.clone(),
            message: e.to_string(),
        })?;
    match output.status.success() {
        true => Ok(()),
        false => Err(LanError::Ip {
            command,
            message: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        }),
    }
}

/// This process's /30: (the application's address, the SLABS's).
fn addresses(pid: u32) -> (Ipv4Addr, Ipv4Addr) {
    let base = u32::from(BLOCK) + (pid % SUBNETS) * 4;
    (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
}

impl Lan {
    /// Creates the SLABS's namespace and the veth pair, addressed and up.
    /// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN).
    pub fn create() -> Result<Lan, LanError> {
        let pid = std::process::id();
        let (app_address, slabs_address) = addresses(pid);
        // Interface names hold 15 bytes; a pid has at most 7 digits.
        let (device, peer) = (format!("tslabs{pid}"), format!("tslabsp{pid}"));
        let (tid_tx, tid_rx) = mpsc::channel();
        let (moved_tx, moved_rx) = mpsc::channel::<bool>();
        let inside = {
            let (peer, slabs) = (peer.clone(), format!("{slabs_address}/30"));
            std::thread::spawn(move || -> Result<File, LanError> {
                let namespace = enter_new_net_namespace()?;
                let _ = tid_tx.send(tessera_sys::proc::current_tid());
                if moved_rx.recv() != Ok(true) {
                    return Err(LanError::Thread);
                }
                // `ip` started from this thread runs in its namespace.
                ip(&["addr", "add", &slabs, "dev", &peer])?;
                ip(&["link", "set", &peer, "up"])?;
                ip(&["link", "set", "lo", "up"])?;
                Ok(namespace)
            })
        };
        let outside = tid_rx.recv().map_err(|_| LanError::Thread).and_then(|tid| {
            let (tid, app) = (tid.to_string(), format!("{app_address}/30"));
            ip(&[
                "link", "add", &device, "type", "veth", "peer", "name", &peer, "netns", &tid,
            ])?;
            ip(&["addr", "add", &app, "dev", &device])?;
            ip(&["link", "set", &device, "up"])
        });
        let _ = moved_tx.send(outside.is_ok());
        match (outside, join(inside)) {
            (Ok(()), Ok(namespace)) => Ok(Lan {
                namespace,
                device,
                app_address,
                slabs_address,
            }),
            // The thread's own error says more than the hand-over's.
            (Err(LanError::Thread), Err(error)) | (Err(error), _) | (Ok(()), Err(error)) => {
                let _ = ip(&["link", "del", &device]);
                Err(error)
            }
        }
    }

    /// The application's end, in this machine's namespace.
    pub fn app_address(&self) -> Ipv4Addr {
        self.app_address
    }

    /// The SLABS's end, inside its namespace.
    pub fn slabs_address(&self) -> Ipv4Addr {
        self.slabs_address
    }
}

/// The application's socket address (any port): on loopback, or at its end
/// of `lan`.
pub fn app_bind(lan: Option<&Lan>) -> SocketAddr {
    let host = lan.map_or(Ipv4Addr::LOCALHOST, Lan::app_address);
    SocketAddr::new(host.into(), 0)
}

/// Starts `slabs` (the emulator) on its own thread: inside the SLABS's
/// namespace across `lan` (its sockets, and the threads it starts, are
/// there), else beside the application.
pub fn spawn_slabs<R: Send + 'static>(
    lan: Option<&Lan>,
    slabs: impl FnOnce() -> R + Send + 'static,
) -> Result<JoinHandle<Result<R, LanError>>, LanError> {
    let namespace = lan
        .map(|lan| lan.namespace.try_clone())
        .transpose()
        .map_err(|e| tessera_sys::Error::from_io("hold the SLABS's network namespace", &e))?;
    std::thread::Builder::new()
        .name("slabs-send".into())
        .spawn(move || {
            if let Some(namespace) = namespace {
                join_net_namespace(&namespace)?;
            }
            Ok(slabs())
        })
        .map_err(|e| tessera_sys::Error::from_io("start the SLABS emulator's thread", &e).into())
}

fn join(thread: JoinHandle<Result<File, LanError>>) -> Result<File, LanError> {
    thread.join().unwrap_or(Err(LanError::Thread))
}

impl Drop for Lan {
    fn drop(&mut self) {
        // The namespace goes with the last handle and socket; the pair goes
        // now, both ends at once.
        let _ = ip(&["link", "del", &self.device]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_process_has_its_own_slash_30() {
        assert_eq!(
            addresses(7),
            (Ipv4Addr::new(10, 213, 0, 29), Ipv4Addr::new(10, 213, 0, 30))
        );
        let (app, slabs) = addresses(SUBNETS - 1);
        assert_eq!(
            (app, slabs),
            (
                Ipv4Addr::new(10, 213, 255, 253),
                Ipv4Addr::new(10, 213, 255, 254)
            )
        );
        assert_eq!(addresses(SUBNETS), addresses(0));
    }
}
