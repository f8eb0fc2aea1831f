//! The packet driver: a cycle starts when a complete input package has
//! arrived on a UDP socket, and ends by sending the output packet.
//!
//! A package is `packets_per_package` datagrams of exactly `packet_size`
//! bytes (the music application uses 16); its start t1 is the arrival of its
//! first packet. Nodes read the package with
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
}

/// Cycles driven by packages arriving on a UDP socket.
#[derive(Debug)]
pub struct PacketDriver {
    socket: UdpSocket,
    config: PacketConfig,
    /// One datagram plus one byte, to detect oversized datagrams.
    scratch: Box<[u8]>,
    /// Packets of the current package received so far.
    received: usize,
    first_arrival_ns: u64,
    sender: Option<SocketAddr>,
    dropped: u64,
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
        if config.packets_per_package == 0 || config.packet_size == 0 {
            return Err(DriverError::Config(
                "packets_per_package and packet_size must be at least 1",
            ));
        }
        socket
            .set_read_timeout(Some(RECEIVE_POLL))
            .map_err(DriverError::io(
                "setting the packet socket's receive timeout",
            ))?;
        Ok(PacketDriver {
            socket,
            config,
            scratch: vec![0; config.packet_size + 1].into_boxed_slice(),
            received: 0,
            first_arrival_ns: 0,
            sender: None,
            dropped: 0,
        })
    }

    pub fn local_addr(&self) -> Result<SocketAddr, DriverError> {
        self.socket
            .local_addr()
            .map_err(DriverError::io("reading the packet socket's address"))
    }

    /// Datagrams dropped for having the wrong size.
    pub fn dropped_packets(&self) -> u64 {
        self.dropped
    }

    /// Receives one datagram into its place in `package`; `Ok(false)` when
    /// the receive timed out.
    fn receive_packet(&mut self, package: &mut [u8]) -> Result<bool, DriverError> {
        let (len, from) = match self.socket.recv_from(&mut self.scratch) {
            Ok(received) => received,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                return Ok(false)
            }
            Err(e) => {
                return Err(DriverError::Io {
                    context: "receiving a packet",
                    source: e,
                })
            }
        };
        if len != self.config.packet_size {
            self.dropped += 1;
            return Ok(true);
        }
        if self.received == 0 {
            self.first_arrival_ns = clock::monotonic_ns();
        }
        let size = self.config.packet_size;
        package[self.received * size..(self.received + 1) * size]
            .copy_from_slice(&self.scratch[..size]);
        self.received += 1;
        self.sender = Some(from);
        Ok(true)
    }
}

impl Driver for PacketDriver {
    fn packet_sizes(&self) -> (usize, usize) {
        (
            self.config.packets_per_package * self.config.packet_size,
            self.config.output_size,
        )
    }

    fn wait_cycle(
        &mut self,
        _period_ns: u64,
        package: &mut [u8],
        stop: &AtomicBool,
    ) -> Result<Option<CycleStart>, DriverError> {
        while self.received < self.config.packets_per_package {
            if stop.load(Ordering::Acquire) {
                return Ok(None);
            }
            self.receive_packet(package)?;
        }
        self.received = 0;
        Ok(Some(CycleStart {
            start_ns: self.first_arrival_ns,
            skipped_periods: 0,
            wakeup_latency_ns: 0,
        }))
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
