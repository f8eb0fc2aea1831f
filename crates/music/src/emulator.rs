//! The SLABS emulator (seed 000 §3.1): sends one input packet every
//! 45.35 µs — 16 of them a package every 0.7256 ms — played from a gesture
//! (held pads or a recorded file), and times each package's answer: t0 just
//! before the first packet of a package is sent, tf when its output packet
//! is received, response tf − t0.
//!
//! Pacing follows an absolute schedule from one start time (packet k at
//! start + k × 2/44 100 s), so the average rate never drifts: the sender
//! sleeps with `clock_nanosleep` until [`SPIN_NS`] before a packet's time,
//! then spins. A packet sent late is sent at once and the next ones catch
//! up; a sender more than a package behind slips the schedule by whole
//! packages instead (counted), so it never sends a burst. The lateness of
//! every send is kept, as the send jitter.
//!
//! This module owns the emulator's socket and threads. It must never block
//! without a timeout: every receive times out so that a silent peer ends the
//! run instead of hanging it.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tessera_measure::LatencyHistogram;
use tessera_synth::{Gesture, GesturePlayer, PadInput, PADS};
use tessera_sys::clock;

use crate::protocol::{
    self, InputHeader, FRAMES_PER_PACKET, INPUT_PACKET_SIZE, OUTPUT_PACKET_SIZE,
    PACKETS_PER_PACKAGE, SAMPLE_RATE,
};

/// The sender sleeps until this long before a packet's time, then spins:
/// a wake-up from `clock_nanosleep` is late by tens of µs, a packet every
/// 45 µs cannot afford that.
pub const SPIN_NS: u64 = 50_000;
/// Time between starting the threads and the first packet.
const START_DELAY_NS: u64 = 2_000_000;
/// How long one receive blocks before the receiver re-checks the run's end.
const RECEIVE_POLL: Duration = Duration::from_millis(20);
/// Largest response and lateness the histograms keep apart (1 s).
const HISTOGRAM_MAX_NS: u64 = 1_000_000_000;
/// Packages whose t0 is remembered at once (about 47 s of them), so a run
/// of an hour takes no more memory than one of a minute; an answer later
/// than that counts as unexpected.
const T0_SLOTS: u64 = 1 << 16;

/// What the emulator sends, where, and for how long.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// The music application's packet socket.
    pub to: SocketAddr,
    pub duration: Duration,
    /// The pads' input over time.
    pub gesture: Gesture,
    /// Packages at the start whose responses are not kept (warm-up).
    pub warmup_packages: u64,
    /// How long answers are awaited after the last packet was sent (the
    /// receiver stops at the last answer; this bounds a lost one).
    pub linger: Duration,
    /// The sender spins for the last this many ns before a packet's time
    /// (default [`SPIN_NS`]: a core of its own). 0: it only sleeps, as it
    /// must in a reservation, where spinning would spend the budget; a
    /// real-time thread sleeps without timer slack, so the jitter grows by
    /// the machine's wake-up latency only.
    pub spin_ns: u64,
}

impl EmulatorConfig {
    /// `duration` of `gesture` sent to `to`, no warm-up, 1 s of linger: a
    /// busy host stalls a vCPU for more than 200 ms now and then (a CI run
    /// stole 590 ms of one in a 1.4 s run, and 17 answers came after a
    /// 200 ms linger, counted unanswered).
    pub fn new(to: SocketAddr, duration: Duration, gesture: Gesture) -> EmulatorConfig {
        EmulatorConfig {
            to,
            duration,
            gesture,
            warmup_packages: 0,
            linger: Duration::from_secs(1),
            spin_ns: SPIN_NS,
        }
    }

    /// Whole packages that fit in the duration.
    pub fn packages(&self) -> u64 {
        self.duration.as_nanos() as u64 / protocol::package_period_ns()
    }
}

/// Held pads: `pads` pressed at (`x`, `y`) with `pressure` for the whole run.
pub fn held_pads(pads: impl IntoIterator<Item = usize>, x: f32, y: f32, pressure: f32) -> Gesture {
    Gesture::fixed(pads, PadInput { x, y, pressure })
}

#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    #[error("{context}: {source}")]
    Io {
        context: &'static str,
        source: std::io::Error,
    },
    #[error("the emulator's receiver thread panicked")]
    Panicked,
    #[error("setting up the emulator's thread: {0}")]
    Setup(String),
}

fn io(context: &'static str) -> impl FnOnce(std::io::Error) -> EmulatorError {
    move |source| EmulatorError::Io { context, source }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct EmulatorReport {
    pub packages_sent: u64,
    pub packets_sent: u64,
    /// Packages whose answer arrived (warm-up included).
    pub answered: u64,
    /// Output packets that were malformed, duplicated or answered nothing sent.
    pub unexpected: u64,
    /// Sends the kernel refused.
    pub send_errors: u64,
    /// Package periods the schedule slipped by after the sender fell more
    /// than a package behind (0 when pacing held).
    pub slipped_packages: u64,
    /// tf − t0 of every answered package after the warm-up.
    pub response: LatencyHistogram,
    /// Actual minus scheduled send time of every packet: the send jitter.
    pub send_lateness: LatencyHistogram,
    /// From the first packet's send to the last's.
    pub send_span_ns: u64,
}

impl EmulatorReport {
    /// Packets per second actually sent (nominal: 22 050).
    pub fn achieved_packet_rate(&self) -> f64 {
        match self.packets_sent {
            0 | 1 => 0.0,
            n => (n - 1) as f64 * 1e9 / self.send_span_ns.max(1) as f64,
        }
    }

    pub fn unanswered(&self) -> u64 {
        self.packages_sent.saturating_sub(self.answered)
    }
}

/// Packets per second the SLABS sends.
pub fn nominal_packet_rate() -> f64 {
    f64::from(SAMPLE_RATE) / FRAMES_PER_PACKET as f64
}

/// A thread's setup hook (join a cell, set a priority).
pub type Setup = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// Sends the gesture for the configured duration, waits for the last
/// answers, and reports. Blocks the calling thread, which does the pacing
/// (and spins: give it a core of its own).
pub fn run(config: &EmulatorConfig) -> Result<EmulatorReport, EmulatorError> {
    run_with(config, Box::new(|| Ok(())), Box::new(|| Ok(())))
}

/// [`run`] with each half set up first: the calling thread, which sends,
/// runs `sender`; the answer thread runs `receiver` (a sender in a
/// reservation resets its children to SCHED_OTHER, where the answers would
/// wait behind every other task).
pub fn run_with(
    config: &EmulatorConfig,
    sender_setup: Setup,
    receiver_setup: Setup,
) -> Result<EmulatorReport, EmulatorError> {
    let any: SocketAddr = match config.to {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(any).map_err(io("binding the emulator's socket"))?;
    socket
        .set_read_timeout(Some(RECEIVE_POLL))
        .map_err(io("setting the emulator's receive timeout"))?;
    let receive_socket = socket
        .try_clone()
        .map_err(io("sharing the emulator's socket"))?;
    let packages = config.packages();
    let first_sends = Arc::new(FirstSends::new(packages));
    let sending_done = Arc::new(AtomicBool::new(false));
    let mut receiver = Receiver {
        socket: receive_socket,
        first_sends: Arc::clone(&first_sends),
        packages,
        sending_done: Arc::clone(&sending_done),
        linger_ns: config.linger.as_nanos() as u64,
        warmup_packages: config.warmup_packages,
        answered: 0,
        unexpected: 0,
        response: LatencyHistogram::new(HISTOGRAM_MAX_NS),
    };
    let receiving = std::thread::Builder::new()
        .name("slabs-receive".into())
        .spawn(move || {
            receiver_setup().map_err(EmulatorError::Setup)?;
            receiver.run();
            Ok(receiver)
        })
        .map_err(io("starting the emulator's receiver"))?;
    let mut sender = Sender::new(socket, config, first_sends);
    if let Err(e) = sender_setup() {
        sending_done.store(true, Ordering::Release);
        let _ = receiving.join();
        return Err(EmulatorError::Setup(e));
    }
    sender.run(packages);
    sending_done.store(true, Ordering::Release);
    let receiver = receiving.join().map_err(|_| EmulatorError::Panicked)??;
    Ok(EmulatorReport {
        packages_sent: packages,
        packets_sent: sender.packets_sent,
        answered: receiver.answered,
        unexpected: receiver.unexpected,
        send_errors: sender.send_errors,
        slipped_packages: sender.slipped_packages,
        response: receiver.response,
        send_lateness: sender.lateness,
        send_span_ns: sender.last_send_ns.saturating_sub(sender.first_send_ns),
    })
}

/// t0 of the packages sent and not yet answered, in a ring of
/// [`T0_SLOTS`] (or fewer, for a short run), each slot tagged with its
/// package: written by the sender, taken by the receiver.
struct FirstSends {
    t0_ns: Box<[AtomicU64]>,
    package: Box<[AtomicU64]>,
}

impl FirstSends {
    fn new(packages: u64) -> FirstSends {
        let slots = packages.clamp(1, T0_SLOTS);
        let ring = || (0..slots).map(|_| AtomicU64::new(0)).collect();
        FirstSends {
            t0_ns: ring(),
            package: ring(),
        }
    }

    fn slot(&self, package: u64) -> usize {
        (package % self.t0_ns.len() as u64) as usize
    }

    /// Package `package` was first sent at `t0_ns`.
    fn sent(&self, package: u64, t0_ns: u64) {
        let slot = self.slot(package);
        self.package[slot].store(package, Ordering::Relaxed);
        self.t0_ns[slot].store(t0_ns, Ordering::Release);
    }

    /// Takes package `package`'s t0, which marks it answered: `None` when
    /// it was answered before, or its slot has been taken by a later one.
    fn take(&self, package: u64) -> Option<u64> {
        let slot = self.slot(package);
        let t0_ns = self.t0_ns[slot].swap(0, Ordering::AcqRel);
        if t0_ns == 0 {
            return None;
        }
        if self.package[slot].load(Ordering::Relaxed) != package {
            // A later package's: give it back.
            let _ =
                self.t0_ns[slot].compare_exchange(0, t0_ns, Ordering::AcqRel, Ordering::Relaxed);
            return None;
        }
        Some(t0_ns)
    }
}

/// The paced half: encodes and sends every packet on schedule.
struct Sender {
    socket: UdpSocket,
    to: SocketAddr,
    player: GesturePlayer,
    /// t0 of each package, read by the receiver.
    first_sends: Arc<FirstSends>,
    lateness: LatencyHistogram,
    packets_sent: u64,
    send_errors: u64,
    slipped_packages: u64,
    first_send_ns: u64,
    last_send_ns: u64,
    spin_ns: u64,
}

impl Sender {
    fn new(socket: UdpSocket, config: &EmulatorConfig, first_sends: Arc<FirstSends>) -> Sender {
        Sender {
            socket,
            to: config.to,
            player: GesturePlayer::new(config.gesture.clone()),
            first_sends,
            lateness: LatencyHistogram::new(HISTOGRAM_MAX_NS),
            packets_sent: 0,
            send_errors: 0,
            slipped_packages: 0,
            first_send_ns: 0,
            last_send_ns: 0,
            spin_ns: config.spin_ns,
        }
    }

    fn run(&mut self, packages: u64) {
        let mut buf = [0u8; INPUT_PACKET_SIZE];
        let mut start_ns = clock::monotonic_ns() + START_DELAY_NS;
        let package_period_ns = protocol::package_period_ns();
        for packet in 0..packages * PACKETS_PER_PACKAGE as u64 {
            self.encode(packet, &mut buf);
            let mut scheduled_ns = start_ns + protocol::packet_offset_ns(packet);
            let first_of_package = packet % PACKETS_PER_PACKAGE as u64 == 0;
            let behind_ns = clock::monotonic_ns().saturating_sub(scheduled_ns);
            // More than a package behind (the sender was preempted): slip
            // the schedule by whole packages rather than catch up in a burst
            // that a real SLABS never sends and a receiver's socket buffer
            // may not hold.
            if first_of_package && behind_ns > package_period_ns {
                let slipped = behind_ns / package_period_ns;
                start_ns += slipped * package_period_ns;
                scheduled_ns += slipped * package_period_ns;
                self.slipped_packages += slipped;
            }
            wait_until(scheduled_ns, self.spin_ns);
            let now = clock::monotonic_ns();
            let package = packet / PACKETS_PER_PACKAGE as u64;
            // t0 is stored before the send: on loopback the answer can be
            // under way before send_to even returns.
            if first_of_package {
                self.first_sends.sent(package, now);
            }
            match self.socket.send_to(&buf, self.to) {
                Ok(_) => self.packets_sent += 1,
                Err(_) => self.send_errors += 1,
            }
            self.lateness.record(now - scheduled_ns);
            if packet == 0 {
                self.first_send_ns = now;
            }
            self.last_send_ns = now;
        }
    }

    /// Packet `packet`'s two frames, read from the gesture at their sample
    /// times.
    fn encode(&mut self, packet: u64, buf: &mut [u8]) {
        let mut frames = [[PadInput::default(); PADS]; FRAMES_PER_PACKET];
        for (f, frame) in frames.iter_mut().enumerate() {
            let sample = packet * FRAMES_PER_PACKET as u64 + f as u64;
            *frame = *self.player.advance(sample as f64 / f64::from(SAMPLE_RATE));
        }
        let header = InputHeader {
            package: (packet / PACKETS_PER_PACKAGE as u64) as u32,
            index: (packet % PACKETS_PER_PACKAGE as u64) as u16,
        };
        protocol::encode_input(header, &frames, buf)
            .expect("the buffer is one input packet and the index is below 16");
    }
}

/// Sleeps until `spin_ns` before `at_ns`, then spins until it.
fn wait_until(at_ns: u64, spin_ns: u64) {
    if at_ns > clock::monotonic_ns() + spin_ns {
        clock::sleep_until_monotonic_ns(at_ns - spin_ns);
    }
    while clock::monotonic_ns() < at_ns {
        std::hint::spin_loop();
    }
}

/// The answering half: matches output packets to their packages' t0.
struct Receiver {
    socket: UdpSocket,
    first_sends: Arc<FirstSends>,
    packages: u64,
    sending_done: Arc<AtomicBool>,
    linger_ns: u64,
    warmup_packages: u64,
    answered: u64,
    unexpected: u64,
    response: LatencyHistogram,
}

impl Receiver {
    /// Receives until every package is answered, or the linger after the
    /// last send has passed.
    fn run(&mut self) {
        let mut buf = [0u8; OUTPUT_PACKET_SIZE + 1];
        let mut give_up_ns = u64::MAX;
        while self.answered < self.packages {
            let now = clock::monotonic_ns();
            if give_up_ns == u64::MAX && self.sending_done.load(Ordering::Acquire) {
                give_up_ns = now + self.linger_ns;
            }
            if now >= give_up_ns {
                return;
            }
            match self.socket.recv(&mut buf) {
                Ok(len) => self.answer(&buf[..len], clock::monotonic_ns()),
                // Timeouts re-check the end; a refused packet (ICMP from a
                // peer not yet listening) is no answer.
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock
                            | ErrorKind::TimedOut
                            | ErrorKind::Interrupted
                            | ErrorKind::ConnectionRefused
                    ) => {}
                Err(_) => return,
            }
        }
    }

    fn answer(&mut self, packet: &[u8], tf_ns: u64) {
        // Taking t0 out marks the package answered: a second answer to it
        // finds none and counts as unexpected.
        let sent = protocol::decode_output_package(packet)
            .ok()
            .filter(|&p| u64::from(p) < self.packages)
            .and_then(|p| Some((p, self.first_sends.take(u64::from(p))?)));
        let Some((package, t0_ns)) = sent else {
            self.unexpected += 1;
            return;
        };
        self.answered += 1;
        if u64::from(package) >= self.warmup_packages {
            self.response.record(tf_ns.saturating_sub(t0_ns));
        }
    }
}
