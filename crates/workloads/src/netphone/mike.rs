//! Mike: on every tick of an absolute wall-clock timer it sends one packet
//! carrying its sequence number and T1 (the tick's expiry) to the speaker,
//! then takes whatever transmit stamps (T2) the kernel has queued for it.
//! A mike that wakes late sends the ticks it missed at once, each with its
//! own T1: the delay is the packets', none is skipped.
//!
//! Owns the send loop and its log. The loop must never allocate, print or
//! block on anything but its timer and the send; its log is sized before
//! the release.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use super::{write_header, Stream, GRACE};
use crate::threads::Setup;
use tessera_sys::clock::{monotonic_ns, realtime_ns, sleep_until_realtime_ns};
use tessera_sys::marking::{mark, PRIORITY_REAL_TIME, TOS_EXPEDITED};
use tessera_sys::net::{enable_transmit_timestamps, take_transmit_stamp};

/// How often mike looks for the last stamps after its last packet.
const STAMP_POLL_NS: u64 = 1_000_000;

pub(crate) struct MikeConfig {
    pub to: SocketAddr,
    pub stream: Stream,
    pub packets: u64,
    pub marked: bool,
}

/// One tick's packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sent {
    pub t1_ns: u64,
    pub wake_ns: u64,
    pub t2_ns: Option<u64>,
}

#[derive(Debug, Default)]
pub(crate) struct MikeLog {
    /// Indexed by sequence number.
    pub sends: Vec<Sent>,
    pub send_errors: u64,
}

/// Sets mike's thread up, opens its socket, says so on `ready`, waits for
/// the release (CLOCK_MONOTONIC ns) and sends until its packets are out or
/// their ticks pass `until` (CLOCK_REALTIME ns).
pub(crate) fn run(
    config: MikeConfig,
    setup: Setup,
    ready: &mpsc::Sender<Result<(), String>>,
    release: &mpsc::Receiver<u64>,
    until: &AtomicU64,
) -> MikeLog {
    let socket = match setup().and_then(|()| open(&config)) {
        Ok(socket) => socket,
        Err(e) => {
            let _ = ready.send(Err(e));
            return MikeLog::default();
        }
    };
    let _ = ready.send(Ok(()));
    let Ok(t0) = release.recv() else {
        return MikeLog::default();
    };
    // The release on the wall clock, where T1 and the kernel's stamps are.
    let first_tick = t0
        .saturating_add(realtime_ns())
        .saturating_sub(monotonic_ns());
    let mut mike = Mike::new(&config, socket);
    mike.send_ticks(first_tick, config.stream.period_ns(), until);
    mike.collect_last_stamps(realtime_ns() + GRACE.as_nanos() as u64);
    mike.log
}

/// A socket stamping what it sends, marked real-time if asked.
fn open(config: &MikeConfig) -> Result<UdpSocket, String> {
    let socket = UdpSocket::bind("0.0.0.0:0").map_err(|e| format!("mike's socket: {e}"))?;
    if config.marked {
        mark(&socket, PRIORITY_REAL_TIME, TOS_EXPEDITED).map_err(|e| e.to_string())?;
    }
    enable_transmit_timestamps(&socket).map_err(|e| format!("transmit stamps: {e}"))?;
    Ok(socket)
}

struct Mike {
    socket: UdpSocket,
    to: SocketAddr,
    packets: u64,
    packet: Vec<u8>,
    /// The sequence number of each stamp id: the kernel numbers the sends
    /// that reached it, so a refused send takes no id.
    seq_of_id: Vec<u64>,
    log: MikeLog,
}

impl Mike {
    fn new(config: &MikeConfig, socket: UdpSocket) -> Mike {
        let packets = config.packets as usize;
        Mike {
            socket,
            to: config.to,
            packets: config.packets,
            packet: vec![0u8; config.stream.packet_bytes],
            seq_of_id: Vec::with_capacity(packets),
            log: MikeLog {
                sends: Vec::with_capacity(packets),
                ..MikeLog::default()
            },
        }
    }

    /// The timed loop: one packet per tick.
    fn send_ticks(&mut self, first_tick: u64, period_ns: u64, until: &AtomicU64) {
        for seq in 0..self.packets {
            let t1 = first_tick + seq * period_ns;
            if t1 > until.load(Ordering::Relaxed) {
                return;
            }
            sleep_until_realtime_ns(t1);
            // Stopped while asleep: this tick is past the end.
            if t1 > until.load(Ordering::Relaxed) {
                return;
            }
            tessera_rtguard::rt_section(|| self.tick(seq, t1));
        }
    }

    fn tick(&mut self, seq: u64, t1_ns: u64) {
        let wake_ns = realtime_ns();
        write_header(&mut self.packet, seq, t1_ns);
        match self.socket.send_to(&self.packet, self.to) {
            Ok(_) => self.seq_of_id.push(seq),
            Err(_) => self.log.send_errors += 1,
        }
        self.log.sends.push(Sent {
            t1_ns,
            wake_ns,
            t2_ns: None,
        });
        self.take_stamps();
    }

    /// Moves the stamps the kernel queued so far into the log.
    fn take_stamps(&mut self) {
        while let Ok(Some(stamp)) = take_transmit_stamp(&self.socket) {
            let seq = self.seq_of_id.get(stamp.id as usize).copied();
            if let Some(sent) = seq.and_then(|s| self.log.sends.get_mut(s as usize)) {
                sent.t2_ns = Some(stamp.realtime_ns);
            }
        }
    }

    /// Waits until `deadline_ns` (CLOCK_REALTIME) at most for the stamps of
    /// packets that were still queued when the last one was sent.
    fn collect_last_stamps(&mut self, deadline_ns: u64) {
        loop {
            self.take_stamps();
            let missing = self.log.sends.iter().filter(|s| s.t2_ns.is_none()).count();
            let now = realtime_ns();
            if missing <= self.log.send_errors as usize || now >= deadline_ns {
                return;
            }
            sleep_until_realtime_ns(now + STAMP_POLL_NS);
        }
    }
}
