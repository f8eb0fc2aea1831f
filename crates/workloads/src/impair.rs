//! An impaired network path for emulated LANs: a relay, on a host between
//! two others, that forwards the multicast groups it is given from one of
//! its interfaces to the other, losing a share of the datagrams at random
//! and holding each of the others for a base delay plus a uniformly random
//! part — what `tc netem loss P delay D J` does, for kernels built without
//! netem (this project's VM has no `sch_netem`). Like netem with jitter,
//! it lets a datagram overtake one held longer.
//!
//! It owns its sockets and a thread per group, made in the caller's
//! network namespace (start it from a thread of the relay's LAN host); it
//! never touches an interface, and stops when dropped.

use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::random::Random;
use tessera_sys::clock::monotonic_ns;

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
    pub lost: u64,
}

#[derive(Default)]
struct Counters {
    forwarded: AtomicU64,
    lost: AtomicU64,
}

/// A running relay; dropping it stops its threads.
pub struct Relay {
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    threads: Vec<JoinHandle<()>>,
}

/// How long a relay's thread waits for a datagram before it looks at its
/// held ones and at the stop flag again.
const POLL: Duration = Duration::from_millis(20);
const LARGEST_DATAGRAM: usize = 1500;

impl Relay {
    /// Joins each group on its `from` interface and starts forwarding.
    pub fn start(groups: &[RelayedGroup], impairment: Impairment) -> std::io::Result<Relay> {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let mut relay = Relay {
            stop: stop.clone(),
            counters: counters.clone(),
            threads: Vec::new(),
        };
        for (k, relayed) in groups.iter().enumerate() {
            let inbound = tessera_sys::net::bind_udp_shared(relayed.group)?;
            inbound.join_multicast_v4(relayed.group.ip(), &relayed.from)?;
            let outbound = UdpSocket::bind((relayed.to, 0))?;
            tessera_sys::net::set_multicast_interface(&outbound, relayed.to)?;
            outbound.set_multicast_loop_v4(false)?;
            outbound.set_multicast_ttl_v4(32)?;
            let mut path = Path {
                inbound,
                outbound,
                group: relayed.group,
                impairment,
                random: Random::new(impairment.seed ^ (k as u64 + 1).wrapping_mul(0x9e37_79b9)),
                held: BinaryHeap::new(),
            };
            let (stop, counters) = (stop.clone(), counters.clone());
            relay.threads.push(
                std::thread::Builder::new()
                    .name("lan-relay".into())
                    .spawn(move || path.run(&stop, &counters))?,
            );
        }
        Ok(relay)
    }

    pub fn counts(&self) -> RelayCounts {
        RelayCounts {
            forwarded: self.counters.forwarded.load(Ordering::Relaxed),
            lost: self.counters.lost.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
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

struct Path {
    inbound: UdpSocket,
    outbound: UdpSocket,
    group: SocketAddrV4,
    impairment: Impairment,
    random: Random,
    held: BinaryHeap<Held>,
}

impl Path {
    fn run(&mut self, stop: &AtomicBool, counters: &Counters) {
        let mut buf = [0u8; LARGEST_DATAGRAM];
        while !stop.load(Ordering::Relaxed) {
            let now = monotonic_ns();
            let wait = self
                .held
                .peek()
                .map_or(POLL, |h| Duration::from_nanos(h.due.0.saturating_sub(now)))
                .clamp(Duration::from_micros(50), POLL);
            let _ = self.inbound.set_read_timeout(Some(wait));
            if let Ok(len) = self.inbound.recv(&mut buf) {
                self.take(&buf[..len], counters);
            }
            self.send_due(counters);
        }
    }

    fn take(&mut self, datagram: &[u8], counters: &Counters) {
        if self.random.next() < self.impairment.loss {
            counters.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let extra = self.random.next() * self.impairment.jitter.as_nanos() as f64;
        let due = monotonic_ns() + self.impairment.delay.as_nanos() as u64 + extra as u64;
        self.held.push(Held {
            due: std::cmp::Reverse(due),
            datagram: datagram.to_vec(),
        });
    }

    fn send_due(&mut self, counters: &Counters) {
        let now = monotonic_ns();
        while self.held.peek().is_some_and(|h| h.due.0 <= now) {
            let Some(held) = self.held.pop() else { break };
            if self.outbound.send_to(&held.datagram, self.group).is_ok() {
                counters.forwarded.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
