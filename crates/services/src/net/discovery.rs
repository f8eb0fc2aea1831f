//! Discovery of AES67 streams by SAP (RFC 2974): the network service's
//! thread that announces the streams its clients send (their SDP, again
//! every interval, and a deletion when the client leaves) and listens to
//! everyone's announcements, so that `tessera net streams` can list the
//! streams on the network — tessera's own and those of PipeWire, devices
//! and other hosts.
//!
//! It listens on the AES67 SAP group and on the one Debian 12's PipeWire
//! uses, and announces on both. It owns its sockets and the directory; the
//! control thread reaches it through a mutex, which no real-time thread
//! ever takes. It must never announce a description it did not check.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_aes67::sap::{self, Directory, HeardSession, SapPacket};
use tessera_aes67::SessionDescription;
use tessera_sys::clock::monotonic_ns;

/// How often a description is announced again (AES67 devices announce
/// every 30 s or faster; a listener that joins late waits at most this).
pub const INTERVAL: Duration = Duration::from_secs(5);
/// A session not heard for this long is gone (a sender that died sends no
/// deletion): ten intervals of the slowest announcers commonly met.
const FORGET_AFTER: Duration = Duration::from_secs(300);
/// How long the thread waits for an announcement before looking at its
/// own schedule and the stop flag.
const TICK: Duration = Duration::from_millis(100);

/// Where discovery listens and announces.
#[derive(Debug, Clone)]
pub struct DiscoveryConfig {
    /// The address of the interface to join and announce on (0.0.0.0: the
    /// routing table's choice).
    pub interface: Ipv4Addr,
    pub groups: Vec<Ipv4Addr>,
    pub port: u16,
    pub interval: Duration,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            interface: Ipv4Addr::UNSPECIFIED,
            groups: vec![sap::SAP_GROUP, sap::SAP_GROUP_PIPEWIRE],
            port: sap::SAP_PORT,
            interval: INTERVAL,
        }
    }
}

/// A description being announced.
struct Announcement {
    id: u64,
    packet: SapPacket,
}

#[derive(Default)]
struct Shared {
    directory: Directory,
    announced: Vec<Announcement>,
    /// Datagrams on the SAP port that were not announcements we read.
    unreadable: u64,
    next_id: u64,
    /// Announce at the next tick, not at the next interval.
    announce_now: bool,
}

/// The running discovery thread.
pub struct Discovery {
    shared: Arc<Mutex<Shared>>,
    sender: Arc<UdpSocket>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    config: DiscoveryConfig,
}

impl Discovery {
    /// Joins the groups and starts the thread.
    pub fn start(config: DiscoveryConfig) -> std::io::Result<Discovery> {
        let sockets = config
            .groups
            .iter()
            .map(|&group| listen(group, config.port, config.interface))
            .collect::<std::io::Result<Vec<_>>>()?;
        let sender = UdpSocket::bind(SocketAddrV4::new(config.interface, 0))?;
        sender.set_multicast_loop_v4(true)?;
        sender.set_multicast_ttl_v4(32)?;
        if !config.interface.is_unspecified() {
            tessera_sys::net::set_multicast_interface(&sender, config.interface)?;
        }
        let sender = Arc::new(sender);
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let run = Runner {
            sockets,
            sender: sender.clone(),
            shared: shared.clone(),
            stop: stop.clone(),
            config: config.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("tessera-net-sap".into())
            .spawn(move || run.run())?;
        Ok(Discovery {
            shared,
            sender,
            stop,
            thread: Some(thread),
            config,
        })
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Announces `sdp` (checked first) until retracted, from the address
    /// its origin line names; its id.
    pub fn announce(&self, sdp: &str) -> Result<u64, String> {
        let description = SessionDescription::parse(sdp).map_err(|e| {
            format!("the description to announce: {e}; fix: send an SDP of one audio stream")
        })?;
        let origin = description.origin_address;
        let mut shared = self.shared();
        shared.next_id += 1;
        let id = shared.next_id;
        shared.announced.push(Announcement {
            id,
            packet: SapPacket::announce(origin, sdp),
        });
        shared.announce_now = true;
        Ok(id)
    }

    /// Stops announcing `id` and tells the network it is gone.
    pub fn retract(&self, id: u64) {
        let mut shared = self.shared();
        let Some(at) = shared.announced.iter().position(|a| a.id == id) else {
            return;
        };
        let gone = shared.announced.remove(at).packet;
        drop(shared);
        let deletion = SapPacket {
            deletion: true,
            ..gone
        };
        send_to_groups(&self.sender, &self.config, &deletion.to_bytes());
    }

    /// The sessions heard, and how many datagrams on the SAP port could
    /// not be read as one.
    pub fn sessions(&self) -> (Vec<HeardSession>, u64) {
        let shared = self.shared();
        (
            shared.directory.sessions().cloned().collect(),
            shared.unreadable,
        )
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        let ids: Vec<u64> = self.shared().announced.iter().map(|a| a.id).collect();
        for id in ids {
            self.retract(id);
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A socket hearing `group`: bound shared, so PipeWire or another listener
/// on this host hears it too.
fn listen(group: Ipv4Addr, port: u16, interface: Ipv4Addr) -> std::io::Result<UdpSocket> {
    let socket = tessera_sys::net::bind_udp_shared(SocketAddrV4::new(group, port))?;
    socket.join_multicast_v4(&group, &interface)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// Sends `packet` to every group (a lost announcement is made good by the
/// next one).
fn send_to_groups(sender: &UdpSocket, config: &DiscoveryConfig, packet: &[u8]) {
    for &group in &config.groups {
        let _ = sender.send_to(packet, SocketAddrV4::new(group, config.port));
    }
}

/// The thread's own state.
struct Runner {
    sockets: Vec<UdpSocket>,
    sender: Arc<UdpSocket>,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    config: DiscoveryConfig,
}

impl Runner {
    fn run(self) {
        let mut buffer = vec![0u8; 65_536];
        let mut next_announcement = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            self.hear(&mut buffer);
            let due = self.take_announce_now() || Instant::now() >= next_announcement;
            if due {
                self.announce();
                next_announcement = Instant::now() + self.config.interval;
            }
            std::thread::sleep(TICK);
        }
    }

    fn take_announce_now(&self) -> bool {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut shared.announce_now)
    }

    /// Takes every datagram waiting on the SAP sockets.
    fn hear(&self, buffer: &mut [u8]) {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let now = monotonic_ns();
        for socket in &self.sockets {
            while let Ok(len) = socket.recv(buffer) {
                if shared.directory.heard(&buffer[..len], now).is_err() {
                    shared.unreadable += 1;
                }
            }
        }
        shared.directory.expire(now, FORGET_AFTER.as_nanos() as u64);
    }

    fn announce(&self) {
        let packets: Vec<Vec<u8>> = {
            let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            shared
                .announced
                .iter()
                .map(|a| a.packet.to_bytes())
                .collect()
        };
        for packet in &packets {
            send_to_groups(&self.sender, &self.config, packet);
        }
    }
}
