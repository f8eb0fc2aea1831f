//! An emulated LAN inside one machine: hosts — anonymous network
//! namespaces — joined to each other or to the machine's own namespace by
//! veth pairs, each pair optionally shaped to a link of a set rate whose
//! queue sends packets marked real-time first, or joined on one subnet by a
//! bridge (a switch: a bridge device in a namespace of its own with a veth
//! to each host, multicast crossing it). Work runs inside a host as a
//! thread that joined its namespace, or as a child process started in it.
//!
//! It owns the namespaces, the pairs, their addresses, routes and queueing
//! disciplines, and all of them live only while the [`Lan`] does: a host's
//! namespace is held by a file and never named under /run/netns, so it
//! vanishes with its last handle, thread, process or socket — even when the
//! process dies; a pair between two hosts goes with their namespaces, and a
//! pair with an end in the machine's namespace is deleted on drop (deleting
//! one end deletes both), or with the host at its other end if the process
//! dies; a bridge and its pairs go with the bridge's namespace and the
//! hosts'; a queueing discipline goes with its device. It must never touch an
//! interface it did not create, nor change a setting of the machine's
//! namespace (forwarding is turned on inside hosts only).
//!
//! Addresses come from 10.213.0.0/16: each process has the /27 at its pid
//! modulo 2048, and each link takes the next /30 of it in turn, so that
//! parallel runs do not collide unless their pids agree modulo 2048 (and
//! then only on links to the machine's namespace: hosts see no one else's
//! addresses). A bridge's hosts share a /27 of 10.214.0.0/16, the next one
//! for each bridge the process makes (a bridge never reaches the machine's
//! namespace, so only the bridges one host is on must differ).

use std::fs::File;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use tessera_sys::net::{command_in_namespace, enter_new_net_namespace, join_net_namespace};

/// The private block every process's addresses come from.
const BLOCK: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 0);
/// A process's share of [`BLOCK`]: a /27, that is this many /30 links.
const LINKS_PER_PROCESS: u32 = 8;
/// /27s in [`BLOCK`]'s /16.
const PROCESS_SLOTS: u32 = 1 << 11;
/// Links this process created so far (their /30s and machine-side names).
static LINKS_CREATED: AtomicU32 = AtomicU32::new(0);
/// The private block bridges' subnets come from.
const BRIDGE_BLOCK: Ipv4Addr = Ipv4Addr::new(10, 214, 0, 0);
/// Hosts on one bridge: the usable addresses of its /27.
pub const MAX_BRIDGE_HOSTS: usize = 30;
/// Bridges this process created so far (their /27s).
static BRIDGES_CREATED: AtomicU32 = AtomicU32::new(0);

/// A token bucket's burst: the traffic of this long at the link's rate
/// passes at the speed of the machine (1 ms: 125 kB at 1 Gbit/s), …
const BURST_SECONDS: f64 = 1e-3;
/// … but never less than two jumbo frames, or larger packets would wait
/// for tokens that cannot accumulate.
const MIN_BURST_BYTES: u64 = 18_000;
/// How long a packet may wait in an unprioritised link's queue (tbf's own
/// byte FIFO is sized to hold this much at the link's rate). A prioritised
/// link's bands hold the device's txqueuelen packets each instead (1000
/// for a veth).
const QUEUE_LATENCY: &str = "10ms";

#[derive(Debug, thiserror::Error)]
pub enum LanError {
    #[error("a LAN host's network namespace: {0}")]
    Namespace(#[from] tessera_sys::Error),
    #[error("`{command}` failed: {message} (fix: run as root, with iproute2 installed)")]
    Command { command: String, message: String },
    #[error("a LAN host's thread ended early")]
    Thread,
    #[error("a LAN has at most {LINKS_PER_PROCESS} links at a time")]
    TooManyLinks,
    #[error("a bridge joins at most {MAX_BRIDGE_HOSTS} hosts")]
    TooManyOnBridge,
}

/// A host of a [`Lan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostId(usize);

/// A veth pair of a [`Lan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkId(usize);

/// A bridge of a [`Lan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BridgeId(usize);

/// Where one end of a pair is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The machine's own network namespace (this process's).
    Machine,
    Host(HostId),
}

/// A link of a set rate: `tbf` on both ends, and with `prio` a
/// three-band strict-priority queue under it that serves packets by their
/// kernel priority (`SO_PRIORITY`) with the default priomap — priority 6
/// (`TC_PRIO_INTERACTIVE`, see `tessera_sys::marking`) in band 0, before
/// everything else. The band queue is `pfifo_fast`, the kernel's built-in
/// default discipline, whose bands and priomap are those of `prio`
/// (`prio` itself is not built into every kernel, this project's machines'
/// included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shaping {
    pub rate_bps: u64,
    pub prio: bool,
}

struct Host {
    name: String,
    namespace: File,
}

struct Link {
    ends: [End; 2],
    devices: [String; 2],
    addresses: [Ipv4Addr; 2],
}

/// A bridge's member hosts and their addresses on its subnet.
struct Bridge {
    members: Vec<(HostId, Ipv4Addr)>,
}

/// Hosts and the links between them; everything is removed when dropped.
#[derive(Default)]
pub struct Lan {
    hosts: Vec<Host>,
    links: Vec<Link>,
    bridges: Vec<Bridge>,
}

impl Lan {
    pub fn new() -> Lan {
        Lan::default()
    }

    /// A new host: an empty network namespace with its loopback up. Needs
    /// root (CAP_SYS_ADMIN, and CAP_NET_ADMIN inside).
    pub fn add_host(&mut self, name: &str) -> Result<HostId, LanError> {
        let namespace = std::thread::scope(|scope| {
            scope
                .spawn(enter_new_net_namespace)
                .join()
                .map_err(|_| LanError::Thread)
        })??;
        let id = HostId(self.hosts.len());
        self.hosts.push(Host {
            name: name.to_string(),
            namespace,
        });
        self.run(End::Host(id), "ip link set lo up")?;
        Ok(id)
    }

    /// A veth pair between `a` and `b`, addressed (a /30: `a` has the first
    /// address, `b` the second), up, and shaped on both ends if asked.
    pub fn link(&mut self, a: End, b: End, shaping: Option<Shaping>) -> Result<LinkId, LanError> {
        let id = LinkId(self.links.len());
        if id.0 >= LINKS_PER_PROCESS as usize {
            return Err(LanError::TooManyLinks);
        }
        let number = LINKS_CREATED.fetch_add(1, Ordering::Relaxed);
        let device = |end| match end {
            // Machine-wide, hence the process and the link's number (15
            // bytes at most: "tl" and 7 digits, "n" and 3).
            End::Machine => format!("tl{}n{}", std::process::id(), number % 1000),
            End::Host(_) => format!("lan{}", id.0),
        };
        let link = Link {
            ends: [a, b],
            devices: [device(a), device(b)],
            addresses: addresses(std::process::id(), number),
        };
        // Created from the machine's side when it has one, so that the
        // other end always goes into a host.
        let (from, to) = match b {
            End::Machine => (1, 0),
            End::Host(_) => (0, 1),
        };
        let End::Host(target) = link.ends[to] else {
            return Err(LanError::Command {
                command: "link the machine to itself".into(),
                message: "a pair needs at least one host".into(),
            });
        };
        self.with_resident(target, |tid| {
            let (near, far) = (&link.devices[from], &link.devices[to]);
            let add = format!("ip link add {near} type veth peer name {far} netns {tid}");
            self.run(link.ends[from], &add)
        })?;
        // Held from here on, so that drop deletes the pair whatever fails.
        self.links.push(link);
        for side in 0..2 {
            self.configure_end(id, side, shaping)?;
        }
        Ok(id)
    }

    /// A bridge joining `hosts` on one /27: a bridge device in a namespace
    /// of its own (a host of this LAN, named "bridgeN") with a veth to each
    /// host, whose end there is "brN" with the next address of the subnet.
    /// Multicast crosses it, flooded to every host (no IGMP snooping: as a
    /// switch without a querier, and whatever joins appear).
    pub fn bridge(&mut self, hosts: &[HostId]) -> Result<BridgeId, LanError> {
        if hosts.len() > MAX_BRIDGE_HOSTS {
            return Err(LanError::TooManyOnBridge);
        }
        let id = BridgeId(self.bridges.len());
        let switch = End::Host(self.add_host(&format!("bridge{}", id.0))?);
        let subnet = bridge_subnet(BRIDGES_CREATED.fetch_add(1, Ordering::Relaxed));
        self.run(switch, "ip link add switch type bridge mcast_snooping 0")?;
        self.run(switch, "ip link set switch up")?;
        self.switch_without_netfilter(switch)?;
        let device = self.bridge_device(id);
        let mut members = Vec::new();
        for (k, &host) in hosts.iter().enumerate() {
            let port = format!("port{k}");
            self.with_resident(host, |tid| {
                let add = format!("ip link add {port} type veth peer name {device} netns {tid}");
                self.run(switch, &add)
            })?;
            self.run(switch, &format!("ip link set {port} master switch"))?;
            self.run(switch, &format!("ip link set {port} up"))?;
            let address = Ipv4Addr::from(u32::from(subnet) + k as u32 + 1);
            self.run(
                End::Host(host),
                &format!("ip addr add {address}/27 dev {device}"),
            )?;
            self.run(End::Host(host), &format!("ip link set {device} up"))?;
            members.push((host, address));
        }
        self.bridges.push(Bridge { members });
        Ok(id)
    }

    /// A switch filters nothing: with br_netfilter loaded (Docker loads
    /// it), every bridged frame would cross iptables, a third of a
    /// datagram's cost in the kernel. The settings are the switch's
    /// namespace's own, so the machine's stay as they are.
    fn switch_without_netfilter(&self, switch: End) -> Result<(), LanError> {
        if !std::path::Path::new("/proc/sys/net/bridge").exists() {
            return Ok(());
        }
        self.run(
            switch,
            "sysctl -qw net.bridge.bridge-nf-call-iptables=0 \
             net.bridge.bridge-nf-call-ip6tables=0 net.bridge.bridge-nf-call-arptables=0",
        )
    }

    /// The name of every host's end of `bridge`'s veths, in the host.
    pub fn bridge_device(&self, bridge: BridgeId) -> String {
        format!("br{}", bridge.0)
    }

    /// `host`'s address on `bridge`.
    ///
    /// # Panics
    /// If `host` is not on `bridge`.
    pub fn bridge_address(&self, bridge: BridgeId, host: HostId) -> Ipv4Addr {
        self.bridges[bridge.0]
            .members
            .iter()
            .find(|(h, _)| *h == host)
            .map(|(_, a)| *a)
            .expect("a host on the bridge")
    }

    fn configure_end(
        &self,
        link: LinkId,
        side: usize,
        shaping: Option<Shaping>,
    ) -> Result<(), LanError> {
        let l = &self.links[link.0];
        let (end, device) = (l.ends[side], l.devices[side].as_str());
        let address = format!("{}/30", l.addresses[side]);
        self.run(end, &format!("ip addr add {address} dev {device}"))?;
        if let Some(shaping) = shaping {
            self.shape(end, device, shaping)?;
        }
        self.run(end, &format!("ip link set {device} up"))
    }

    fn shape(&self, end: End, device: &str, shaping: Shaping) -> Result<(), LanError> {
        let burst = ((shaping.rate_bps as f64 / 8.0 * BURST_SECONDS) as u64).max(MIN_BURST_BYTES);
        let tbf = format!(
            "tc qdisc add dev {device} root handle 1: tbf rate {}bit burst {burst} latency {QUEUE_LATENCY}",
            shaping.rate_bps
        );
        self.run(end, &tbf)?;
        if shaping.prio {
            self.run(
                end,
                &format!("tc qdisc add dev {device} parent 1:1 handle 10: pfifo_fast"),
            )?;
        }
        Ok(())
    }

    /// Sets the MTU of both ends of `link`.
    pub fn set_mtu(&self, link: LinkId, mtu: u32) -> Result<(), LanError> {
        let l = &self.links[link.0];
        for (end, device) in l.ends.iter().zip(&l.devices) {
            self.run(*end, &format!("ip link set {device} mtu {mtu}"))?;
        }
        Ok(())
    }

    /// Takes `link` down at both ends (a cable pulled: whatever is sent on
    /// it is lost) or up again.
    pub fn set_link_up(&self, link: LinkId, up: bool) -> Result<(), LanError> {
        let l = &self.links[link.0];
        let state = if up { "up" } else { "down" };
        for (end, device) in l.ends.iter().zip(&l.devices) {
            self.run(*end, &format!("ip link set {device} {state}"))?;
        }
        Ok(())
    }

    /// Sends everything `host` does not reach directly through `via`, to
    /// the other end of that link.
    pub fn route_default(&self, host: HostId, via: LinkId) -> Result<(), LanError> {
        let gateway = self.peer_address(via, End::Host(host));
        let device = self.device(via, End::Host(host));
        let route = format!("ip route add default via {gateway} dev {device}");
        self.run(End::Host(host), &route)
    }

    /// Lets `host` forward packets between its links (IPv4, in its own
    /// namespace only: /proc/sys/net is the namespace of the thread that
    /// opens it).
    pub fn forward(&self, host: HostId) -> Result<(), LanError> {
        const SWITCH: &str = "/proc/sys/net/ipv4/ip_forward";
        self.spawn_in(End::Host(host), "lan-forward", || {
            tessera_sys::error::write_text(std::path::Path::new(SWITCH), "1")
        })?
        .join()
        .map_err(|_| LanError::Thread)??
        .map_err(LanError::from)
    }

    /// Lets `host`'s loopback carry multicast (it does not by default):
    /// a host alone can then hear its own groups — SAP, streams — without
    /// any of them leaving it.
    pub fn multicast_on_loopback(&self, host: HostId) -> Result<(), LanError> {
        self.run(End::Host(host), "ip link set lo multicast on")?;
        self.run(End::Host(host), "ip route add 224.0.0.0/4 dev lo")
    }

    /// Reads a file of /proc/thread-self/net (the network's counters as
    /// `host` sees them), e.g. "snmp".
    pub fn read_net_file(&self, host: HostId, name: &str) -> Result<String, LanError> {
        let path = format!("/proc/thread-self/net/{name}");
        self.spawn_in(End::Host(host), "lan-counters", move || {
            tessera_sys::error::read_text(std::path::Path::new(&path))
        })?
        .join()
        .map_err(|_| LanError::Thread)??
        .map_err(LanError::from)
    }

    /// `end`'s address on `link`.
    ///
    /// # Panics
    /// If `end` is not an end of `link`.
    pub fn address(&self, link: LinkId, end: End) -> Ipv4Addr {
        let l = &self.links[link.0];
        l.addresses[side_of(l, end)]
    }

    /// The address of the end of `link` that is not `end`.
    pub fn peer_address(&self, link: LinkId, end: End) -> Ipv4Addr {
        let l = &self.links[link.0];
        l.addresses[1 - side_of(l, end)]
    }

    /// `end`'s device name on `link` (inside its namespace).
    pub fn device(&self, link: LinkId, end: End) -> &str {
        let l = &self.links[link.0];
        &l.devices[side_of(l, end)]
    }

    /// Each host's name and its namespace's id (the inode number that
    /// /proc/PID/ns/net links name as `net:[ID]`, and `lsns` lists).
    pub fn host_namespaces(&self) -> Vec<(String, u64)> {
        use std::os::unix::fs::MetadataExt;
        self.hosts
            .iter()
            .map(|h| {
                (
                    h.name.clone(),
                    h.namespace.metadata().map_or(0, |m| m.ino()),
                )
            })
            .collect()
    }

    /// A handle on `host`'s namespace (it keeps the namespace alive).
    pub fn namespace(&self, host: HostId) -> Result<File, LanError> {
        self.hosts[host.0]
            .namespace
            .try_clone()
            .map_err(|e| tessera_sys::Error::from_io("hold a LAN host's namespace", &e).into())
    }

    /// Starts `work` on a thread named `name` inside `end`: its sockets, and
    /// the threads and processes it starts, are there.
    pub fn spawn_in<R: Send + 'static>(
        &self,
        end: End,
        name: &str,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Result<JoinHandle<Result<R, LanError>>, LanError> {
        let namespace = match end {
            End::Machine => None,
            End::Host(host) => Some(self.namespace(host)?),
        };
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if let Some(namespace) = namespace {
                    join_net_namespace(&namespace)?;
                }
                Ok(work())
            })
            .map_err(|e| tessera_sys::Error::from_io("start a LAN host's thread", &e).into())
    }

    /// `program`, to be started inside `end` (a child process joins the
    /// host's namespace before it runs).
    pub fn command(&self, end: End, program: &str) -> Result<Command, LanError> {
        let mut command = Command::new(program);
        if let End::Host(host) = end {
            command_in_namespace(&mut command, &self.hosts[host.0].namespace)?;
        }
        Ok(command)
    }

    /// Runs `command` (a program and its arguments, separated by spaces:
    /// no argument here contains one) inside `end` to its end.
    fn run(&self, end: End, command: &str) -> Result<(), LanError> {
        let failed = |message: String| LanError::Command {
            command: command.to_string(),
            message,
        };
        let mut words = command.split_whitespace();
        let program = words.next().unwrap_or_default();
        let output = self
            .command(end, program)?
            .args(words)
            .output()
            .map_err(|e| failed(e.to_string()))?;
        match output.status.success() {
            true => Ok(()),
            false => Err(failed(
                String::from_utf8_lossy(&output.stderr).trim().to_string(),
            )),
        }
    }

    /// Runs `f` with the thread id of a thread sitting in `host`'s
    /// namespace: `ip` finds a namespace by a task in it.
    fn with_resident<R>(
        &self,
        host: HostId,
        f: impl FnOnce(tessera_sys::sched::Tid) -> Result<R, LanError>,
    ) -> Result<R, LanError> {
        let namespace = self.namespace(host)?;
        let (tid_tx, tid_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let resident = scope.spawn(move || -> Result<(), LanError> {
                join_net_namespace(&namespace)?;
                let _ = tid_tx.send(tessera_sys::proc::current_tid());
                let _ = done_rx.recv();
                Ok(())
            });
            let result = tid_rx.recv().map_err(|_| LanError::Thread).and_then(f);
            drop(done_tx);
            let joined = resident.join().unwrap_or(Err(LanError::Thread));
            match (result, joined) {
                // The thread's own error says more than the hand-over's.
                (Err(LanError::Thread), Err(error)) => Err(error),
                (result, _) => result,
            }
        })
    }
}

fn side_of(link: &Link, end: End) -> usize {
    link.ends
        .iter()
        .position(|e| *e == end)
        .expect("an end of the link")
}

/// The /30 of this process's `number`th link: (first end, second end).
fn addresses(pid: u32, number: u32) -> [Ipv4Addr; 2] {
    let slash_27 = (pid % PROCESS_SLOTS) * LINKS_PER_PROCESS * 4;
    let base = u32::from(BLOCK) + slash_27 + (number % LINKS_PER_PROCESS) * 4;
    [Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2)]
}

/// The /27 of this process's `number`th bridge.
fn bridge_subnet(number: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(BRIDGE_BLOCK) + (number % PROCESS_SLOTS) * 32)
}

impl Drop for Lan {
    fn drop(&mut self) {
        // Pairs with an end here go now, both ends at once; the hosts'
        // namespaces, with the pairs between them, go with their last
        // handle (these, and whatever threads or sockets still hold them).
        for link in &self.links {
            if let Some(side) = link.ends.iter().position(|e| *e == End::Machine) {
                let _ = self.run(End::Machine, &format!("ip link del {}", link.devices[side]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_process_has_its_own_slash_27_and_each_link_a_slash_30_of_it() {
        assert_eq!(
            addresses(7, 0),
            [
                Ipv4Addr::new(10, 213, 0, 225),
                Ipv4Addr::new(10, 213, 0, 226)
            ]
        );
        assert_eq!(
            addresses(7, 1),
            [
                Ipv4Addr::new(10, 213, 0, 229),
                Ipv4Addr::new(10, 213, 0, 230)
            ]
        );
        assert_eq!(addresses(7, LINKS_PER_PROCESS), addresses(7, 0));
        assert_eq!(
            addresses(PROCESS_SLOTS - 1, LINKS_PER_PROCESS - 1),
            [
                Ipv4Addr::new(10, 213, 255, 253),
                Ipv4Addr::new(10, 213, 255, 254)
            ]
        );
        assert_eq!(addresses(PROCESS_SLOTS, 3), addresses(0, 3));
    }

    #[test]
    fn each_bridge_has_a_slash_27_of_its_own() {
        assert_eq!(bridge_subnet(0), Ipv4Addr::new(10, 214, 0, 0));
        assert_eq!(bridge_subnet(9), Ipv4Addr::new(10, 214, 1, 32));
        assert_eq!(
            bridge_subnet(PROCESS_SLOTS - 1),
            Ipv4Addr::new(10, 214, 255, 224)
        );
        assert_eq!(bridge_subnet(PROCESS_SLOTS), bridge_subnet(0));
    }
}
