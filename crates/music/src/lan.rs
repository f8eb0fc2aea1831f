//! The seed's LAN inside one machine: the SLABS on the far side of a veth
//! pair, in a host (network namespace) of its own; the application in the
//! machine's namespace, as on the seed's second machine.
//!
//! It owns only that shape of [`tessera_workloads::lan`]: one host, one
//! pair to the machine, shaped if asked. Like every such LAN it lives only while a
//! [`Lan`] does, leaves nothing behind even after a crash, and must never
//! touch an interface it did not create.

use std::net::{Ipv4Addr, SocketAddr};
use std::thread::JoinHandle;

use tessera_workloads::lan::{self, End, HostId, LinkId};
pub use tessera_workloads::lan::{LanError, Shaping};

/// A veth pair between this machine and the SLABS's namespace.
pub struct Lan {
    lan: lan::Lan,
    slabs: HostId,
    link: LinkId,
}

impl Lan {
    /// Creates the SLABS's namespace and the veth pair, addressed and up.
    /// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN).
    pub fn create() -> Result<Lan, LanError> {
        Lan::shaped(None)
    }

    /// As [`Lan::create`], the pair shaped both ways (the seed's gigabit
    /// link: `tc` tbf, real-time marked packets first).
    pub fn shaped(shaping: Option<Shaping>) -> Result<Lan, LanError> {
        let mut lan = lan::Lan::new();
        let slabs = lan.add_host("slabs")?;
        let link = lan.link(End::Machine, End::Host(slabs), shaping)?;
        Ok(Lan { lan, slabs, link })
    }

    /// The application's end, in this machine's namespace.
    pub fn app_address(&self) -> Ipv4Addr {
        self.lan.address(self.link, End::Machine)
    }

    /// The SLABS's end, inside its namespace.
    pub fn slabs_address(&self) -> Ipv4Addr {
        self.lan.address(self.link, End::Host(self.slabs))
    }

    /// The names of the pair's ends: (the application's, the SLABS's).
    pub fn devices(&self) -> (&str, &str) {
        (
            self.lan.device(self.link, End::Machine),
            self.lan.device(self.link, End::Host(self.slabs)),
        )
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
    match lan {
        Some(lan) => lan.lan.spawn_in(End::Host(lan.slabs), "slabs-send", slabs),
        None => lan::Lan::new().spawn_in(End::Machine, "slabs-send", slabs),
    }
}
