//! The flood of seed 004's Table 2: "intensive IP traffic from an external
//! source to the receiving host". From its own host, one thread sends
//! Ethernet-sized UDP datagrams to a port of the speaker's host as fast as
//! its link takes them (a blocking socket: the link's queue paces it), from
//! the release until stopped. At the speaker's host a socket nobody reads
//! takes them: the host does its whole receive path for each, then drops it.
//!
//! Owns the flooder and the sink. It must never send anywhere but the
//! speaker's host inside the LAN, and it stops when dropped.

use std::io;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use super::network::PhoneLan;
use crate::lan::LanError;
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns};

/// UDP payload of a flood datagram: a full Ethernet frame's.
const DATAGRAM_BYTES: usize = 1472;
/// Longest a send may block before the flooder looks at its stop flag.
const SEND_TIMEOUT: Duration = Duration::from_millis(50);

/// What the flood sent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FloodReport {
    pub datagrams: u64,
    pub bytes: u64,
    pub seconds: f64,
    /// Sends refused (not counted above).
    pub errors: u64,
    /// UDP datagrams that reached the speaker's host, the flood's and the
    /// netphone's (None: its counters could not be read).
    pub arrived: Option<u64>,
    pub error: Option<String>,
}

impl FloodReport {
    /// "flood: 1 234 567 datagrams of 1472 B, 951.2 Mbit/s offered over 60.0 s".
    pub fn describe(&self) -> String {
        let mbps = match self.seconds {
            s if s > 0.0 => self.bytes as f64 * 8.0 / s / 1e6,
            _ => 0.0,
        };
        let mut text = format!(
            "flood: {} datagrams of {DATAGRAM_BYTES} B, {mbps:.1} Mbit/s sent over {:.1} s, {} refused",
            self.datagrams, self.seconds, self.errors
        );
        if let Some(n) = self.arrived {
            text.push_str(&format!(
                "; {n} UDP datagrams (the flood's and the netphone's) reached the speaker's host"
            ));
        }
        if let Some(e) = &self.error {
            text.push_str(&format!("; error: {e}"));
        }
        text
    }
}

pub(crate) struct Flood {
    stop: Arc<AtomicBool>,
    release: Option<mpsc::Sender<u64>>,
    thread: Option<JoinHandle<Result<FloodReport, LanError>>>,
    /// Held for the flood's life: the datagrams' destination.
    _sink: UdpSocket,
}

impl Flood {
    /// Opens the sink and starts the flooder, which waits for its release.
    pub(crate) fn start(lan: &PhoneLan) -> Result<Flood, String> {
        let sink = lan.flood_sink()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (release, release_rx) = mpsc::channel();
        let to = lan.flood_address();
        let flag = Arc::clone(&stop);
        let thread = lan
            .spawn_flooder(move || flood(to, &release_rx, &flag))
            .ok_or("the LAN has no flood host")?
            .map_err(|e| e.to_string())?;
        Ok(Flood {
            stop,
            release: Some(release),
            thread: Some(thread),
            _sink: sink,
        })
    }

    /// The flood starts at `t0_ns` (CLOCK_MONOTONIC).
    pub(crate) fn release(&self, t0_ns: u64) {
        if let Some(release) = &self.release {
            let _ = release.send(t0_ns);
        }
    }

    /// Stops the flooder and counts what reached the speaker's host.
    pub(crate) fn finish(mut self, lan: &PhoneLan) -> FloodReport {
        self.stop.store(true, Ordering::Relaxed);
        self.release = None;
        let joined = self.thread.take().map(JoinHandle::join);
        let mut report = match joined {
            Some(Ok(Ok(report))) => report,
            Some(Ok(Err(e))) => failed(e.to_string()),
            Some(Err(_)) => failed("the flooder panicked".into()),
            None => failed("the flooder never started".into()),
        };
        match lan.speaker_udp_arrivals() {
            Ok(n) => report.arrived = Some(n),
            Err(e) => report.error = report.error.or(Some(e)),
        }
        report
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn failed(error: String) -> FloodReport {
    FloodReport {
        error: Some(error),
        ..FloodReport::default()
    }
}

/// The flooder's thread: waits for the release, then sends until stopped.
fn flood(
    to: std::net::SocketAddr,
    release: &mpsc::Receiver<u64>,
    stop: &AtomicBool,
) -> FloodReport {
    let socket = UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect(to).map(|()| s))
        .and_then(|s| s.set_write_timeout(Some(SEND_TIMEOUT)).map(|()| s));
    let socket = match socket {
        Ok(socket) => socket,
        Err(e) => return failed(format!("the flooder's socket to {to}: {e}")),
    };
    let Ok(t0) = release.recv() else {
        return FloodReport::default();
    };
    sleep_until_monotonic_ns(t0);
    let datagram = [0x5Au8; DATAGRAM_BYTES];
    let mut report = FloodReport::default();
    while !stop.load(Ordering::Relaxed) {
        match socket.send(&datagram) {
            Ok(n) => {
                report.datagrams += 1;
                report.bytes += n as u64;
            }
            // The link's queue was full for a while: try again.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => report.errors += 1,
        }
    }
    report.seconds = monotonic_ns().saturating_sub(t0) as f64 / 1e9;
    report
}
