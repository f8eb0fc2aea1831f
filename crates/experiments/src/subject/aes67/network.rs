//! The aes67 subject's network: its hosts (network namespaces) on one
//! bridge, or — for redundant paths — a and b joined by two paths, each a
//! host of its own between them whose relay forwards the streams' groups,
//! losing and delaying packets as the subject says (this kernel has no
//! netem); the cut of the second path during the run (its relay drops
//! everything from then on, as a failed switch would: taking its links
//! down with `ip` would fork this process mid-run, and its real-time
//! threads would take copy-on-write faults); and a foreign device's
//! senders started inside its host.
//!
//! It owns the LAN (removed when dropped), the relays (stopped before the
//! LAN goes) and the cut's thread. It knows addresses and groups only as plain data: which stream
//! goes where is the subject's.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use tessera_scenario::aes67::RedundantPaths;
use tessera_sys::clock::monotonic_ns;
use tessera_workloads::foreign_sender::{ForeignSender, ForeignSenderSpec};
use tessera_workloads::impair::{Impairment, Relay, RelayedGroup};
use tessera_workloads::lan::{End, HostId, Lan};

/// The FIFO priority of what emulates the world outside the hosts — the
/// paths' relays, a foreign device's sender: their timing is theirs, not
/// the machine's load's.
pub(super) const OUTSIDE_FIFO: u32 = 70;

/// The hosts and what joins them.
pub(super) struct Network {
    lan: Lan,
    ids: Vec<HostId>,
    /// Each host's address on the primary network, and on the secondary.
    interfaces: Vec<(Ipv4Addr, Option<Ipv4Addr>)>,
    /// The hosts' device on their bridge (none on two paths).
    bridge_device: Option<String>,
    /// The paths' relays, first path first (none on a bridge).
    relays: Vec<Relay>,
    /// A foreign device's senders.
    devices: Vec<ForeignSender>,
}

/// A group a path's relay forwards, and which host sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PathGroup {
    pub group: SocketAddrV4,
    /// 0: a sends it to b; 1: b to a.
    pub sender: usize,
}

impl Network {
    /// `names`' hosts on one bridge.
    pub(super) fn bridged(names: &[&str]) -> Result<Network, String> {
        let mut lan = Lan::new();
        let ids = add_hosts(&mut lan, names)?;
        let bridge = lan.bridge(&ids).map_err(|e| e.to_string())?;
        let interfaces = ids
            .iter()
            .map(|&id| (lan.bridge_address(bridge, id), None))
            .collect();
        Ok(Network {
            bridge_device: Some(lan.bridge_device(bridge)),
            lan,
            ids,
            interfaces,
            relays: Vec::new(),
            devices: Vec::new(),
        })
    }

    /// Hosts a and b joined by two paths, each a relay host forwarding
    /// `groups[path]` with `paths`' loss and delays.
    pub(super) fn two_paths(
        names: [&str; 2],
        paths: &RedundantPaths,
        groups: [Vec<PathGroup>; 2],
    ) -> Result<Network, String> {
        let mut lan = Lan::new();
        let ids = add_hosts(&mut lan, &names)?;
        let mut interfaces = vec![(Ipv4Addr::UNSPECIFIED, None); 2];
        let mut relays = Vec::new();
        for (path, groups) in groups.iter().enumerate() {
            let relay = lan
                .add_host(&format!("path{}", path + 1))
                .map_err(|e| e.to_string())?;
            let to_a = lan.link(End::Host(ids[0]), End::Host(relay), None);
            let to_b = lan.link(End::Host(relay), End::Host(ids[1]), None);
            let links = [
                to_a.map_err(|e| e.to_string())?,
                to_b.map_err(|e| e.to_string())?,
            ];
            for (host, link) in links.iter().enumerate() {
                let address = lan.address(*link, End::Host(ids[host]));
                match path {
                    0 => interfaces[host].0 = address,
                    _ => interfaces[host].1 = Some(address),
                }
            }
            // The relay's address towards each host.
            let towards = links.map(|l| lan.address(l, End::Host(relay)));
            let relayed: Vec<RelayedGroup> = groups
                .iter()
                .map(|g| RelayedGroup {
                    group: g.group,
                    from: towards[g.sender],
                    to: towards[1 - g.sender],
                })
                .collect();
            let impairment = Impairment {
                loss: paths.loss,
                delay: paths.delay,
                jitter: paths.jitter,
                seed: 26 + path as u64,
            };
            let started = lan
                .spawn_in(End::Host(relay), "lan-relay", move || {
                    Relay::start(&relayed, impairment, Some(OUTSIDE_FIFO))
                })
                .map_err(|e| e.to_string())?
                .join()
                .map_err(|_| "the relay's thread panicked".to_string())?
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("path {}'s relay: {e}", path + 1))?;
            relays.push(started);
        }
        Ok(Network {
            lan,
            ids,
            interfaces,
            bridge_device: None,
            relays,
            devices: Vec::new(),
        })
    }

    /// Host `i`'s address on the primary network and on the secondary.
    pub(super) fn interfaces(&self, i: usize) -> (Ipv4Addr, Option<Ipv4Addr>) {
        self.interfaces[i]
    }

    /// The hosts' device on their bridge, if they are on one.
    pub(super) fn bridge_device(&self) -> Option<&str> {
        self.bridge_device.as_deref()
    }

    pub(super) fn lan(&self) -> &Lan {
        &self.lan
    }

    pub(super) fn host(&self, i: usize) -> HostId {
        self.ids[i]
    }

    /// Starts a foreign sender per spec inside host `i`, at SCHED_FIFO
    /// [`OUTSIDE_FIFO`].
    pub(super) fn start_devices(
        &mut self,
        i: usize,
        specs: Vec<ForeignSenderSpec>,
    ) -> Result<(), String> {
        for spec in specs {
            let spec = ForeignSenderSpec {
                fifo_priority: Some(OUTSIDE_FIFO),
                ..spec
            };
            let device = self
                .lan
                .spawn_in(End::Host(self.ids[i]), "aes67-device", move || {
                    ForeignSender::start(spec)
                })
                .map_err(|e| e.to_string())?
                .join()
                .map_err(|_| "the device's thread panicked".to_string())?
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            self.devices.push(device);
        }
        Ok(())
    }

    /// Cuts the second path at `at_ns` (`CLOCK_MONOTONIC`), on a thread of
    /// its own, unless stopped before.
    pub(super) fn cut_at(&self, at_ns: u64) -> Result<Cut, String> {
        let cutter = self
            .relays
            .get(1)
            .map(Relay::cutter)
            .ok_or("a cut needs a second path")?;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("aes67-cut".into())
            .spawn(move || {
                let wait = Duration::from_nanos(at_ns.saturating_sub(monotonic_ns()));
                if stopped.recv_timeout(wait) != Err(mpsc::RecvTimeoutError::Timeout) {
                    return "aes67 cut: not made (the run ended first)".to_string();
                }
                cutter.cut();
                "aes67 cut: the second path dropped everything from then on".to_string()
            })
            .map_err(|e| format!("the cut's thread: {e}"))?;
        Ok(Cut { stop, thread })
    }

    /// Stops what emulates the world outside the hosts — the devices'
    /// senders, the paths' relays — with a note of what each did.
    pub(super) fn stop_outside(&mut self) -> Vec<String> {
        let devices = self.devices.drain(..).map(ForeignSender::stop);
        let mut notes: Vec<String> = devices
            .enumerate()
            .map(|(k, c)| {
                format!(
                    "aes67 foreign sender {} (SCHED_FIFO {OUTSIDE_FIFO}): sent {}, refused {}",
                    k + 1,
                    c.sent,
                    c.failed
                )
            })
            .collect();
        for (k, relay) in self.relays.drain(..).enumerate() {
            let c = relay.counts();
            notes.push(format!(
                "aes67 path {} (SCHED_FIFO {OUTSIDE_FIFO}): the relay forwarded {} packets, lost \
                 {}, dropped {} after a cut",
                k + 1,
                c.forwarded,
                c.lost,
                c.cut
            ));
        }
        notes
    }
}

fn add_hosts(lan: &mut Lan, names: &[&str]) -> Result<Vec<HostId>, String> {
    names
        .iter()
        .map(|name| lan.add_host(name))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())
}

/// A cut waiting for its time; [`Cut::finish`] says whether it was made.
pub(super) struct Cut {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<String>,
}

impl Cut {
    pub(super) fn finish(self) -> String {
        let _ = self.stop.send(());
        self.thread
            .join()
            .unwrap_or_else(|_| "aes67 cut: its thread panicked".into())
    }
}
