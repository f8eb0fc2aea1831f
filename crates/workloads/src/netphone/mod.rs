//! The netphone of seed 004 §4 across an emulated LAN: **mike**, in a host
//! of its own, sends a datagram on every tick of an absolute timer (1500
//! bytes at 100 Hz, 1.2 Mbit/s, or 4 KB at 500 Hz, 16 Mbit/s); **speaker**,
//! in another host, receives them and drops the data. Each packet gets the
//! seed's four stamps, all on `CLOCK_REALTIME` — the clock of the kernel's
//! packet stamps, shared by every namespace of the machine, so no clock
//! synchronisation stands between them:
//!
//! - T1, the triggering event: the timer's expiry (the instant mike asked
//!   to be woken at). Mike's own wake-up is recorded beside it, so a
//!   descheduled mike shows as delay, as it did in the seed;
//! - T2, when the packet left for the network: the kernel's software
//!   transmit stamp, taken as the driver takes it — after the link's queue;
//! - T3, when it came off the network: the kernel's receive stamp;
//! - T4, when it was delivered: the clock read as the receive returns.
//!
//! The mike's and the speaker's threads are set up by the caller's hooks
//! (a cell, nothing); with `marked`, mike's packets carry the real-time
//! marks (`tessera_sys::marking`), which the link's priority queue serves
//! first. With `flood`, a third host sends UDP datagrams to another port of
//! the speaker's host as fast as its link takes them, through mike's host
//! and onto the same link as the netphone (see [`network`]). With
//! [`Receive::Service`], the speaker's packets come through a real-time
//! flow of tessera's network service instead of a socket of its own
//! ([`ServiceInbox`]); the caller's [`Launch`] hook starts the service
//! inside the speaker's host.
//!
//! Owns the run and the joining of the stamps into one [`Record`] per
//! packet, and holds what the launch hook returned until the speaker has
//! let go of its flow. The timed loops (mike's sends, speaker's receives)
//! must never allocate or print; nothing here may leave a host, a thread
//! or a socket behind, nor keep the hook's handle (whose drop stops the
//! service) past the run.

mod flood;
mod mike;
pub mod network;
mod speaker;

use std::any::Any;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::lan::LanError;
use crate::threads::Setup;
use flood::{Flood, FloodReport};
use mike::MikeLog;
use network::PhoneLan;
use speaker::{Arrival, SpeakerLog};
pub use speaker::{Delivery, Inbox, ServiceInbox, SocketInbox};
pub use tessera_policy::media::Stream;
use tessera_services::net::FlowStatus;
use tessera_sys::clock::realtime_ns;

/// How long the speaker waits for stragglers after mike's last packet, and
/// mike for the stamps of packets still queued.
const GRACE: Duration = Duration::from_millis(500);
/// Bytes of a packet's header: its sequence number and T1.
const HEADER_BYTES: usize = Stream::HEADER_BYTES;

/// One netphone run.
#[derive(Debug, Clone, PartialEq)]
pub struct NetphoneSpec {
    pub stream: Stream,
    /// How long mike sends.
    pub duration: Duration,
    /// The shaped rate of the link between mike and speaker.
    pub link_bps: u64,
    /// Mike's packets carry the real-time marks.
    pub marked: bool,
    /// A flood to the speaker's host shares the link.
    pub flood: bool,
    /// Where the speaker's packets come from.
    pub receive: Receive,
}

/// Where the speaker takes mike's packets from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Receive {
    /// A UDP socket of its own ([`SocketInbox`]).
    #[default]
    Socket,
    /// A real-time flow of the network service listening at `socket`
    /// ([`ServiceInbox`]): the service binds the speaker's address, so it
    /// must run inside the speaker's host — started there by the hooks'
    /// [`Launch`] (without one, the flow is refused unless a service there
    /// already listens at `socket`).
    Service { socket: PathBuf },
}

/// How mike's and the speaker's threads are set up (join a cell, nothing),
/// each on its own thread, inside its host, before its socket opens; and
/// what starts the network service the speaker receives through.
pub struct Hooks {
    pub mike: Setup,
    pub speaker: Setup,
    pub service: Option<Launch>,
}

impl Hooks {
    /// Both threads as they are (SCHED_OTHER), no service started.
    pub fn plain() -> Hooks {
        Hooks {
            mike: Box::new(|| Ok(())),
            speaker: Box::new(|| Ok(())),
            service: None,
        }
    }
}

/// Starts the network service inside the speaker's host, once the LAN
/// exists and before the speaker opens its flow, and returns when it
/// listens. What it returns is held until the speaker has let go of its
/// flow (or the start failed), then dropped: dropping it must stop the
/// service.
pub type Launch = Box<dyn FnOnce(&SpeakerHost<'_>) -> Result<Box<dyn Any + Send>, String>>;

/// The speaker's host, for a [`Launch`] hook.
pub struct SpeakerHost<'a>(&'a PhoneLan);

impl SpeakerHost<'_> {
    /// `program`, to be started inside the host.
    pub fn command(&self, program: &Path) -> Result<Command, String> {
        self.0.speaker_command(program)
    }

    /// Runs `work` on a thread inside the host and returns what it
    /// returned; the threads it starts stay in the host.
    pub fn run<R: Send + 'static>(
        &self,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, String> {
        self.0
            .spawn_in_speaker_host("speaker-host", work)
            .map_err(|e| e.to_string())?
            .join()
            .map_err(|_| "a thread in the speaker's host panicked".to_string())?
            .map_err(|e| e.to_string())
    }
}

/// One packet mike sent (or tried to), with the stamps it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub t1_ns: u64,
    /// When mike ran after the timer expired.
    pub wake_ns: u64,
    /// None: the send failed, or its stamp never came.
    pub t2_ns: Option<u64>,
    /// None (with T4): lost.
    pub t3_ns: Option<u64>,
    pub t4_ns: Option<u64>,
}

impl Record {
    pub fn delivered(&self) -> bool {
        self.t4_ns.is_some()
    }

    /// T4 − T1, the seed's end-to-end delay.
    pub fn end_to_end_ns(&self) -> Option<u64> {
        Some(self.t4_ns?.saturating_sub(self.t1_ns))
    }
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct NetphoneReport {
    pub stream: Stream,
    /// One per packet, in sending order.
    pub records: Vec<Record>,
    /// Sends the kernel refused.
    pub send_errors: u64,
    /// Datagrams the speaker took that were not one of mike's packets (or
    /// one already delivered).
    pub unexpected: u64,
    pub flood: Option<FloodReport>,
    /// The network service's counters of the speaker's flow, read when
    /// the speaker was done (None: no service).
    pub service: Option<Result<FlowStatus, String>>,
    /// Setup or run failures, in words.
    pub errors: Vec<String>,
}

impl NetphoneReport {
    pub fn lost(&self) -> usize {
        self.records.iter().filter(|r| !r.delivered()).count()
    }
}

/// A netphone, set up and waiting for [`Netphone::release`].
pub struct Netphone {
    stream: Stream,
    /// The launch hook's handle; dropped before the LAN.
    service: Option<Box<dyn Any + Send>>,
    lan: PhoneLan,
    release: Option<mpsc::Sender<u64>>,
    mike: JoinHandle<Result<MikeLog, LanError>>,
    speaker: JoinHandle<Result<SpeakerLog, LanError>>,
    flood: Option<Flood>,
    stops: Stops,
    errors: Vec<String>,
}

/// When mike sends its last tick and when the speaker stops waiting
/// (CLOCK_REALTIME ns; never, until set). Dropped — a netphone dropped
/// unfinished, as by a failing test — it stops both at once, so that no
/// thread or socket keeps a host alive.
struct Stops {
    mike: Arc<AtomicU64>,
    speaker: Arc<AtomicU64>,
}

impl Stops {
    fn new() -> Stops {
        Stops {
            mike: Arc::new(AtomicU64::new(u64::MAX)),
            speaker: Arc::new(AtomicU64::new(u64::MAX)),
        }
    }

    fn mike_now(&self) {
        self.mike.store(realtime_ns(), Ordering::Relaxed);
    }

    fn speaker_after(&self, grace: Duration) {
        let at = realtime_ns() + grace.as_nanos() as u64;
        self.speaker.store(at, Ordering::Relaxed);
    }
}

impl Drop for Stops {
    fn drop(&mut self) {
        self.mike_now();
        self.speaker_after(Duration::ZERO);
    }
}

impl Netphone {
    /// Creates the LAN, starts the service (by its hook), opens the
    /// speaker (receiving from now on) and mike (waiting for its release),
    /// each set up by its hook, and the flood. Needs root.
    pub fn start(spec: &NetphoneSpec, hooks: Hooks) -> Result<Netphone, String> {
        if !(Stream::MIN_PACKET..=Stream::MAX_PACKET).contains(&spec.stream.packet_bytes) {
            return Err(format!(
                "a netphone packet holds {}–{} bytes, not {}",
                Stream::MIN_PACKET,
                Stream::MAX_PACKET,
                spec.stream.packet_bytes
            ));
        }
        let lan = PhoneLan::create(spec.link_bps, spec.flood).map_err(|e| e.to_string())?;
        // Dropped (the service stopped) before the LAN if a step below fails.
        let service = match hooks.service {
            Some(launch) => {
                Some(launch(&SpeakerHost(&lan)).map_err(|e| format!("the network service: {e}"))?)
            }
            None => None,
        };
        let packets = spec.stream.packets(spec.duration);
        let stops = Stops::new();
        let (speaker_ready, ready) = mpsc::channel();
        let (to, stream, until) = (
            lan.speaker_address(),
            spec.stream,
            Arc::clone(&stops.speaker),
        );
        let receive = spec.receive.clone();
        let speaker = lan
            .spawn_speaker(move || {
                let setup = hooks.speaker;
                speaker::run(to, stream, packets, &receive, setup, &speaker_ready, &until)
            })
            .map_err(|e| e.to_string())?;
        let (mike_ready, mike_ready_rx) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let config = mike::MikeConfig {
            to,
            stream,
            packets,
            marked: spec.marked,
        };
        let until = Arc::clone(&stops.mike);
        let mike = lan
            .spawn_mike(move || mike::run(config, hooks.mike, &mike_ready, &release_rx, &until))
            .map_err(|e| e.to_string())?;
        let flood = match spec.flood {
            true => Some(Flood::start(&lan)?),
            false => None,
        };
        let mut phone = Netphone {
            stream,
            service,
            lan,
            release: Some(release),
            mike,
            speaker,
            flood,
            stops,
            errors: Vec::new(),
        };
        for (role, ready) in [("speaker", ready), ("mike", mike_ready_rx)] {
            match ready.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => phone.errors.push(format!("{role}: {e}")),
                Err(_) => phone
                    .errors
                    .push(format!("{role}: ended before it was ready")),
            }
        }
        match phone.errors.is_empty() {
            true => Ok(phone),
            false => Err(phone.finish().errors.join("; ")),
        }
    }

    /// Mike's first tick at `t0_ns` (CLOCK_MONOTONIC); the flood starts then.
    pub fn release(&mut self, t0_ns: u64) {
        if let Some(release) = self.release.take() {
            let _ = release.send(t0_ns);
        }
        if let Some(flood) = &self.flood {
            flood.release(t0_ns);
        }
    }

    /// Each host's name and namespace id (see [`crate::lan::Lan::host_namespaces`]).
    pub fn host_namespaces(&self) -> Vec<(String, u64)> {
        self.lan.host_namespaces()
    }

    /// Ends the run: mike sends the ticks that are due by now (it may be
    /// behind) and no later one; the speaker gets [`GRACE`] for the last
    /// arrivals; the service's handle is dropped; the flood stops; the LAN
    /// goes; the stamps are joined.
    pub fn finish(mut self) -> NetphoneReport {
        // An unreleased mike ends when its release can no longer come.
        self.release = None;
        self.stops.mike_now();
        let mike = joined(self.mike, "mike", &mut self.errors);
        self.stops.speaker_after(GRACE);
        let speaker = joined(self.speaker, "speaker", &mut self.errors);
        drop(self.service.take());
        let flood = self.flood.map(|f| f.finish(&self.lan));
        drop(self.lan);
        let mike = mike.unwrap_or_default();
        let speaker = speaker.unwrap_or_default();
        let (records, unexpected) = join_stamps(&mike, &speaker.arrivals);
        NetphoneReport {
            stream: self.stream,
            records,
            send_errors: mike.send_errors,
            unexpected: unexpected + speaker.unexpected,
            flood,
            service: speaker.service,
            errors: self.errors.into_iter().chain(speaker.error).collect(),
        }
    }
}

/// A role's log, or the reason it has none in `errors`.
fn joined<T>(
    thread: JoinHandle<Result<T, LanError>>,
    role: &str,
    errors: &mut Vec<String>,
) -> Option<T> {
    match thread.join() {
        Ok(Ok(log)) => Some(log),
        Ok(Err(e)) => {
            errors.push(format!("{role}: {e}"));
            None
        }
        Err(_) => {
            errors.push(format!("{role}: panicked"));
            None
        }
    }
}

/// One record per packet mike sent, with the speaker's stamps of the
/// packets it received; and how many arrivals matched none.
fn join_stamps(mike: &MikeLog, arrivals: &[Arrival]) -> (Vec<Record>, u64) {
    let mut records: Vec<Record> = mike
        .sends
        .iter()
        .enumerate()
        .map(|(seq, send)| Record {
            seq: seq as u64,
            t1_ns: send.t1_ns,
            wake_ns: send.wake_ns,
            t2_ns: send.t2_ns,
            t3_ns: None,
            t4_ns: None,
        })
        .collect();
    let mut unexpected = 0;
    for arrival in arrivals {
        match records.get_mut(arrival.seq as usize) {
            Some(r) if r.t1_ns == arrival.t1_ns && !r.delivered() => {
                r.t3_ns = Some(arrival.t3_ns);
                r.t4_ns = Some(arrival.t4_ns);
            }
            _ => unexpected += 1,
        }
    }
    (records, unexpected)
}

/// Writes a packet's header (sequence number, T1) into `packet`.
fn write_header(packet: &mut [u8], seq: u64, t1_ns: u64) {
    packet[..8].copy_from_slice(&seq.to_le_bytes());
    packet[8..HEADER_BYTES].copy_from_slice(&t1_ns.to_le_bytes());
}

/// A packet's (sequence number, T1), if it is long enough to hold them.
fn read_header(packet: &[u8]) -> Option<(u64, u64)> {
    let seq = u64::from_le_bytes(packet.get(..8)?.try_into().ok()?);
    let t1 = u64::from_le_bytes(packet.get(8..HEADER_BYTES)?.try_into().ok()?);
    Some((seq, t1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_a_runt_has_none() {
        let mut packet = [0u8; 32];
        write_header(&mut packet, 41, 1_700_000_000_123_456_789);
        assert_eq!(read_header(&packet), Some((41, 1_700_000_000_123_456_789)));
        assert_eq!(read_header(&packet[..15]), None);
    }

    #[test]
    fn stamps_join_by_sequence_and_the_rest_is_lost_or_unexpected() {
        let send = |t1_ns| mike::Sent {
            t1_ns,
            wake_ns: t1_ns + 1,
            t2_ns: Some(t1_ns + 2),
        };
        let mike = MikeLog {
            sends: vec![send(100), send(200), send(300)],
            ..MikeLog::default()
        };
        let arrival = |seq, t1_ns| Arrival {
            seq,
            t1_ns,
            t3_ns: t1_ns + 3,
            t4_ns: t1_ns + 4,
        };
        let arrivals = [
            arrival(2, 300),
            arrival(0, 100),
            arrival(0, 100), // a duplicate
            arrival(1, 999), // not what mike sent as 1
            arrival(7, 800), // never sent
        ];
        let (records, unexpected) = join_stamps(&mike, &arrivals);
        assert_eq!(unexpected, 3);
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].end_to_end_ns(), Some(4));
        assert_eq!(records[0].t2_ns, Some(102));
        assert!(!records[1].delivered());
        assert_eq!(records[2].t3_ns, Some(303));
    }
}
