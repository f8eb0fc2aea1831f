//! An impaired network path for emulated LANs: a relay, on a host between
//! two others, that forwards the multicast groups it is given from one of
//! its interfaces to the other, losing a share of the datagrams at random
//! and holding each of the others for a base delay plus a uniformly random
//! part — what `tc netem loss P delay D J` does, for kernels built without
//! netem (this project's VM has no `sch_netem`). Like netem with jitter,
//! it lets a datagram overtake one held longer.
//!
//! A path can be cut ([`PathCut`]): from then on the relay drops all, as a
//! failed switch on the path would.
//!
//! It owns its sockets and two threads per group, made in the caller's
//! network namespace (start it from a thread of the relay's LAN host); it
//! never touches an interface, and stops when dropped.

use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::random::Random;
use tessera_sys::clock::monotonic_ns;
use tessera_sys::sched::{set_policy, Policy};

/// What the path does to each datagram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impairment {
    /// The share lost, 0–1.
    pub loss: f64,
    /// Every datagram's least delay…
    pub delay: Duration,
    /// …plus up to this much more, uniformly at random.
    pub jitter: Duration,
    pub seed: u64,
}

/// One group the relay carries: joined on `from`, sent on from `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayedGroup {
    pub group: SocketAddrV4,
    pub from: Ipv4Addr,
    pub to: Ipv4Addr,
}

/// What the relay did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RelayCounts {
    pub forwarded: u64,
    /// Lost at random.
    pub lost: u64,
    /// Dropped because the path was cut.
    pub cut: u64,
}

#[derive(Default)]
struct Counters {
    forwarded: AtomicU64,
    lost: AtomicU64,
    cut: AtomicU64,
}

/// Cuts a relay's path (from another thread): everything after is dropped,
/// as when a switch on the path fails. No process is started, so a
/// real-time thread of the caller's process takes no page fault for it (a
/// fork would make every page it writes copy-on-write).
#[derive(Clone)]
pub struct PathCut(Arc<AtomicBool>);

impl PathCut {
    pub fn cut(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A running relay; dropping it stops its threads.
pub struct Relay {
    stop: Arc<AtomicBool>,
    cut: Arc<AtomicBool>,
    counters: Arc<Counters>,
    threads: Vec<JoinHandle<()>>,
}

/// How long a relay's reader waits for a datagram, and its writer for a
/// datagram to hold, before looking at the stop flag again.
const POLL: Duration = Duration::from_millis(20);
const LARGEST_DATAGRAM: usize = 1500;

impl Relay {
    /// Joins each group on its `from` interface and starts forwarding, its
    /// threads at SCHED_FIFO `fifo_priority` if given (the path's timing is
    /// then its own, not the machine's load's). Per group a reader takes
    /// datagrams and decides their fate, and a writer sends each when due:
    /// it waits on a channel, whose timeout is as fine as the kernel's
    /// high-resolution timers (a socket's receive timeout counts in ticks).
    pub fn start(
        groups: &[RelayedGroup],
        impairment: Impairment,
        fifo_priority: Option<u32>,
    ) -> std::io::Result<Relay> {
        let stop = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let mut relay = Relay {
            stop: stop.clone(),
            cut: cut.clone(),
            counters: counters.clone(),
            threads: Vec::new(),
        };
        let spawn = |work: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name("lan-relay".into())
                .spawn(move || {
                    if let Some(priority) = fifo_priority {
                        // Without the right, it relays as any program does.
                        let _ = set_policy(0, &Policy::Fifo { priority });
                    }
                    work()
                })
        };
        for (k, relayed) in groups.iter().enumerate() {
            let inbound = tessera_sys::net::bind_udp_shared(relayed.group)?;
            inbound.join_multicast_v4(relayed.group.ip(), &relayed.from)?;
            inbound.set_read_timeout(Some(POLL))?;
            let outbound = UdpSocket::bind((relayed.to, 0))?;
            tessera_sys::net::set_multicast_interface(&outbound, relayed.to)?;
            outbound.set_multicast_loop_v4(false)?;
            outbound.set_multicast_ttl_v4(32)?;
            let (hold, held) = mpsc::channel();
            let mut reader = Reader {
                inbound,
                impairment,
                random: Random::new(impairment.seed ^ (k as u64 + 1).wrapping_mul(0x9e37_79b9)),
                hold,
            };
            let writer = Writer {
                outbound,
                group: relayed.group,
                held,
                cut: cut.clone(),
            };
            let (stop, counters) = (stop.clone(), counters.clone());
            let writing = counters.clone();
            relay
                .threads
                .push(spawn(Box::new(move || reader.run(&stop, &counters)))?);
            relay
                .threads
                .push(spawn(Box::new(move || writer.run(&writing)))?);
        }
        Ok(relay)
    }

    pub fn counts(&self) -> RelayCounts {
        RelayCounts {
            forwarded: self.counters.forwarded.load(Ordering::Relaxed),
            lost: self.counters.lost.load(Ordering::Relaxed),
            cut: self.counters.cut.load(Ordering::Relaxed),
        }
    }

    /// What cuts this relay's path.
    pub fn cutter(&self) -> PathCut {
        PathCut(self.cut.clone())
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The readers stop, and their writers once the channel closes.
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// A datagram held until `due` (the heap's top is the earliest).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Held {
    due: std::cmp::Reverse<u64>,
    datagram: Vec<u8>,
}

/// Takes a group's datagrams: loses some, gives the others a time to go.
struct Reader {
    inbound: UdpSocket,
    impairment: Impairment,
    random: Random,
    hold: mpsc::Sender<Held>,
}

impl Reader {
    fn run(&mut self, stop: &AtomicBool, counters: &Counters) {
        let mut buf = [0u8; LARGEST_DATAGRAM];
        while !stop.load(Ordering::Relaxed) {
            let Ok(len) = self.inbound.recv(&mut buf) else {
                continue;
            };
            if self.random.next() < self.impairment.loss {
                counters.lost.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let extra = self.random.next() * self.impairment.jitter.as_nanos() as f64;
            let due = monotonic_ns() + self.impairment.delay.as_nanos() as u64 + extra as u64;
            let held = Held {
                due: std::cmp::Reverse(due),
                datagram: buf[..len].to_vec(),
            };
            if self.hold.send(held).is_err() {
                return;
            }
        }
    }
}

/// Sends a group's held datagrams, each when due, earliest first.
struct Writer {
    outbound: UdpSocket,
    group: SocketAddrV4,
    held: mpsc::Receiver<Held>,
    cut: Arc<AtomicBool>,
}

impl Writer {
    fn run(&self, counters: &Counters) {
        let mut queue = BinaryHeap::new();
        loop {
            let now = monotonic_ns();
            while queue.peek().is_some_and(|h: &Held| h.due.0 <= now) {
                let Some(held) = queue.pop() else { break };
                if self.cut.load(Ordering::Relaxed) {
                    counters.cut.fetch_add(1, Ordering::Relaxed);
                } else if self.outbound.send_to(&held.datagram, self.group).is_ok() {
                    counters.forwarded.fetch_add(1, Ordering::Relaxed);
                }
            }
            let wait = queue
                .peek()
                .map_or(POLL, |h| Duration::from_nanos(h.due.0.saturating_sub(now)));
            match self.held.recv_timeout(wait) {
                Ok(held) => queue.push(held),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}
