//! The packet driver: a cycle starts when a complete input package has
//! arrived on a UDP socket, and ends by sending the output packet.
//!
//! A package is `packets_per_package` datagrams of exactly `packet_size`
//! bytes (the music application uses 16); its start t1 is the arrival of its
//! first packet, as the kernel stamped it. With `index_at`, each packet carries its index in the
//! package (a little-endian u16 at that byte offset) and the driver keeps in
//! step with the sender: a package missing a packet is dropped whole (and
//! counted), and the next package starts at the next packet of index 0 — one
//! lost datagram never shifts every later package. Without it, packages are
//! counted off by arrival. Nodes read the package with
//! [`crate::ProcessContext::package`]; the node designated with
//! [`crate::Graph::set_packet_writer`] fills the output packet
//! ([`crate::ProcessContext::packet_out`]), which is sent to `reply_to` or
//! else to the sender of the package's last packet. The engine records the
//! response time Δt = output written − t1.
//!
//! This module owns the socket and the package assembly. It must never
//! allocate after construction: buffers are sized up front and datagrams of
//! the wrong size are dropped and counted, not resized for.

use std::io::ErrorKind;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tessera_sys::clock;
use tessera_sys::net::receive_stamped;

use super::{CycleStart, Driver, DriverError};

/// How long one receive may block before the driver re-checks its stop flag.
const RECEIVE_POLL: Duration = Duration::from_millis(100);

/// Shape of the packages and the output packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketConfig {
    /// K: datagrams per package.
    pub packets_per_package: usize,
    /// Bytes of every input datagram.
    pub packet_size: usize,
    /// Bytes of the output packet.
    pub output_size: usize,
    /// Where output packets go; `None`: back to the sender.
    pub reply_to: Option<SocketAddr>,
    /// Byte offset of each packet's index in its package (u16, little
    /// endian); `None`: packages are counted off by arrival.
    pub index_at: Option<usize>,
}

/// Puts datagrams together into packages: the assembly both the packet
/// driver and the network service (`tessera-services`) do. Pure: no socket,
/// no clock, no allocation.
#[derive(Debug, Clone)]
pub struct PackageAssembler {
    packets_per_package: usize,
    packet_size: usize,
    index_at: Option<usize>,
    /// Packets of the current package received so far.
    received: usize,
    first_arrival_ns: u64,
    dropped: u64,
    incomplete: u64,
}

impl PackageAssembler {
    /// Checks the shape: at least one packet of at least one byte, and the
    /// index inside the packet.
    pub fn new(config: &PacketConfig) -> Result<PackageAssembler, DriverError> {
        if config.packets_per_package == 0 || config.packet_size == 0 {
            return Err(DriverError::Config(
                "packets_per_package and packet_size must be at least 1",
            ));
        }
        if config
            .index_at
            .is_some_and(|at| at + 2 > config.packet_size)
        {
            return Err(DriverError::Config(
                "index_at must leave 2 bytes inside the packet",
            ));
        }
        Ok(PackageAssembler {
            packets_per_package: config.packets_per_package,
            packet_size: config.packet_size,
            index_at: config.index_at,
            received: 0,
            first_arrival_ns: 0,
            dropped: 0,
            incomplete: 0,
        })
    }

    /// Bytes of a whole package.
    pub fn package_size(&self) -> usize {
        self.packets_per_package * self.packet_size
    }

    /// Takes one datagram that arrived at `arrival_ns` into its place in
    /// `package`; returns the package's start (its first packet's arrival)
    /// when this datagram completed it.
    pub fn accept(&mut self, datagram: &[u8], arrival_ns: u64, package: &mut [u8]) -> Option<u64> {
        if datagram.len() != self.packet_size {
            self.dropped += 1;
            return None;
        }
        if !self.in_step(datagram) {
            return None;
        }
        if self.received == 0 {
            self.first_arrival_ns = arrival_ns;
        }
        let size = self.packet_size;
        package[self.received * size..(self.received + 1) * size].copy_from_slice(datagram);
        self.received += 1;
        if self.received < self.packets_per_package {
            return None;
        }
        self.received = 0;
        Some(self.first_arrival_ns)
    }

    /// Datagrams dropped for having the wrong size, or (with `index_at`) an
    /// index out of step.
    pub fn dropped_packets(&self) -> u64 {
        self.dropped
    }

    /// Packages dropped whole because one of their packets never arrived
    /// (with `index_at` only).
    pub fn incomplete_packages(&self) -> u64 {
        self.incomplete
    }

    /// Whether `datagram` may take the next place; realigns on a packet of
    /// index 0 when the current package lost one.
    fn in_step(&mut self, datagram: &[u8]) -> bool {
        let Some(at) = self.index_at else {
            return true;
        };
        let index = u16::from_le_bytes([datagram[at], datagram[at + 1]]) as usize;
        if index == self.received {
            return true;
        }
        if self.received > 0 {
            self.incomplete += 1;
        }
        self.received = 0;
        if index == 0 {
            return true;
        }
        self.dropped += 1;
        false
    }
}

/// Cycles driven by packages arriving on a UDP socket.
#[derive(Debug)]
pub struct PacketDriver {
    socket: UdpSocket,
    config: PacketConfig,
    assembler: PackageAssembler,
    /// One datagram plus one byte, to detect oversized datagrams.
    scratch: Box<[u8]>,
    sender: Option<SocketAddr>,
}

impl PacketDriver {
    /// Binds a UDP socket at `addr` (e.g. `"127.0.0.1:0"`).
    pub fn bind(addr: impl ToSocketAddrs, config: PacketConfig) -> Result<Self, DriverError> {
        let socket =
            UdpSocket::bind(addr).map_err(DriverError::io("binding the packet driver's socket"))?;
        Self::from_socket(socket, config)
    }

    /// Uses an already bound socket.
    pub fn from_socket(socket: UdpSocket, config: PacketConfig) -> Result<Self, DriverError> {
        let assembler = PackageAssembler::new(&config)?;
        socket
            .set_read_timeout(Some(RECEIVE_POLL))
            .map_err(DriverError::io(
                "setting the packet socket's receive timeout",
            ))?;
        tessera_sys::net::enable_receive_timestamps(&socket).map_err(DriverError::io(
            "asking for the packet socket's receive timestamps",
        ))?;
        Ok(PacketDriver {
            socket,
            config,
            assembler,
            scratch: vec![0; config.packet_size + 1].into_boxed_slice(),
            sender: None,
        })
    }

    pub fn local_addr(&self) -> Result<SocketAddr, DriverError> {
        self.socket
            .local_addr()
            .map_err(DriverError::io("reading the packet socket's address"))
    }

    /// Datagrams dropped for having the wrong size, or (with `index_at`) an
    /// index out of step.
    pub fn dropped_packets(&self) -> u64 {
        self.assembler.dropped_packets()
    }

    /// Packages dropped whole because one of their packets never arrived
    /// (with `index_at` only).
    pub fn incomplete_packages(&self) -> u64 {
        self.assembler.incomplete_packages()
    }

    /// Receives one datagram into its place in `package`; returns the
    /// package's start when it completed one, `None` on a timeout too.
    fn receive_packet(&mut self, package: &mut [u8]) -> Result<Option<u64>, DriverError> {
        let datagram = match receive_stamped(&self.socket, &mut self.scratch) {
            Ok(datagram) => datagram,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                return Ok(None)
            }
            Err(e) => {
                return Err(DriverError::Io {
                    context: "receiving a packet",
                    source: e,
                })
            }
        };
        self.sender = Some(datagram.from);
        let arrival = datagram.arrival_ns.unwrap_or_else(clock::monotonic_ns);
        Ok(self
            .assembler
            .accept(&self.scratch[..datagram.len], arrival, package))
    }
}

impl Driver for PacketDriver {
    fn packet_sizes(&self) -> (usize, usize) {
        (self.assembler.package_size(), self.config.output_size)
    }

    fn wait_cycle(
        &mut self,
        _period_ns: u64,
        package: &mut [u8],
        stop: &AtomicBool,
    ) -> Result<Option<CycleStart>, DriverError> {
        loop {
            if stop.load(Ordering::Acquire) {
                return Ok(None);
            }
            if let Some(start_ns) = self.receive_packet(package)? {
                return Ok(Some(CycleStart::event(start_ns)));
            }
        }
    }

    fn end_cycle(&mut self, output: &[u8]) -> Result<Option<u64>, DriverError> {
        let Some(destination) = self.config.reply_to.or(self.sender) else {
            return Ok(None);
        };
        self.socket
            .send_to(output, destination)
            .map_err(DriverError::io("sending the output packet"))?;
        Ok(Some(clock::monotonic_ns()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: usize = 4;
    const SIZE: usize = 8;

    fn packet(index: u16, tag: u8) -> [u8; SIZE] {
        let mut p = [tag; SIZE];
        p[..2].copy_from_slice(&index.to_le_bytes());
        p
    }

    #[test]
    fn a_lost_packet_drops_its_package_and_the_next_one_is_whole() {
        let config = PacketConfig {
            packets_per_package: K,
            packet_size: SIZE,
            output_size: 1,
            reply_to: None,
            index_at: Some(0),
        };
        let mut driver = PacketDriver::bind("127.0.0.1:0", config).unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = driver.local_addr().unwrap();
        // Package 1 loses its packet 2; a stray packet 3 follows; package 2 is whole.
        let sent = [
            (0, 1),
            (1, 1),
            (3, 1),
            (3, 9),
            (0, 2),
            (1, 2),
            (2, 2),
            (3, 2),
        ];
        for (index, tag) in sent {
            sender.send_to(&packet(index, tag), to).unwrap();
        }
        let mut package = vec![0u8; K * SIZE];
        let stop = AtomicBool::new(false);
        assert!(driver.wait_cycle(0, &mut package, &stop).unwrap().is_some());
        for i in 0..K {
            assert_eq!(
                &package[i * SIZE..(i + 1) * SIZE],
                &packet(i as u16, 2),
                "packet {i}"
            );
        }
        assert_eq!(driver.incomplete_packages(), 1);
        assert_eq!(
            driver.dropped_packets(),
            2,
            "package 1's packet 3 and the stray one"
        );
    }
}
