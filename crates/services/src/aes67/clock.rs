//! The media clock of AES67 streams: where its time comes from, and the
//! label every report carries. An RTP timestamp is the time since the PTP
//! epoch in samples at the stream's rate, mod 2^32 (SDP's
//! `a=mediaclk:direct=0`); that time is read off `CLOCK_REALTIME` plus an
//! offset in whole seconds, which is PTP's when this host's system clock
//! follows a grandmaster through linuxptp (ptp4l with software timestamping,
//! or with hardware timestamping and phc2sys copying the NIC's clock), and
//! the kernel's TAI−UTC offset otherwise — the system clock, labelled so.
//!
//! A host whose ptp4l adjusts no clock (`free_running 1`, software
//! timestamping: [`MediaClock::follow_free_running`]) follows the
//! grandmaster itself: its media clock is `CLOCK_REALTIME` minus this
//! host's offset from the grandmaster as ptp4l measures it, a line fitted
//! to ptp4l's last measurements ([`super::follow`]: the offset and its
//! rate), read from ptp4l (`GET TIME_STATUS_NP`, `GET PORT_PROPERTIES_NP`
//! through pmc) every [`PTP_POLL`] by the clock's follower thread, which
//! moves the offset by what the line says at that instant (never counted
//! as a step: the nodes keep their positions). When ptp4l stops answering,
//! its port is not SLAVE, the grandmaster is gone or its last sync is
//! stale, PTP is lost: the line is kept, so the media clock keeps its last
//! offset and goes on at its last rate, the loss is counted with its time
//! and reason, the label says "PTP lost at …, playing on its last rate",
//! and the streams play on. Each measurement is recorded — ptp4l's offset
//! and the media clock's (what it adds, plus ptp4l's) — for reports. Two
//! machines whose ptp4l runs free follow one grandmaster this way exactly
//! as this machine's namespaces do, which share one `CLOCK_REALTIME` that
//! no slave may adjust.
//!
//! It owns the detection (one `pmc` run against ptp4l's management socket,
//! and a look in /proc for phc2sys), the pure reading of pmc's answers, and
//! the conversions between `CLOCK_MONOTONIC` instants, media time and RTP
//! timestamps. The offset between `CLOCK_MONOTONIC` and media time is
//! captured when the clock is made and again on [`MediaClock::refresh`]: it
//! moves only when the system clock is stepped (slewing, ptp4l's and
//! phc2sys's usual way, changes the rate of `CLOCK_MONOTONIC` and
//! `CLOCK_REALTIME` alike — but ptp4l steps the clock once when it first
//! locks, and an NTP daemon steps it at boot) or when a free-running
//! ptp4l's measurements move it. A clock's clones share the offset and a
//! count of its refreshes, so a [`ClockFollower`] thread can take it again
//! at every step while the real-time readers see the change with one
//! atomic load, and nodes re-anchor their positions on it.
//!
//! It must never allocate, lock or make a system call in the real-time
//! conversions ([`MediaClock::media_ns_at`], [`MediaClock::rtp_timestamp_at`],
//! [`MediaClock::monotonic_ns_of`], [`MediaClock::steps`]); detection,
//! refresh and following make system calls, lock and run `pmc`, so they
//! never run on a real-time thread. It never starts, stops or configures
//! linuxptp, and never adjusts a clock.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::follow::{Answer, Follow, Loss, Measurement};
use tessera_aes67::rtp::samples_at;
use tessera_sys::clock;
use tessera_sys::event::{ClockSteps, Epoll, EventFd, Readiness, Trigger};

const NS: u64 = 1_000_000_000;
/// pmc waits 100 ms after its last command for answers, then exits; this
/// bounds a pmc that hangs anyway.
const PMC_TIMEOUT: Duration = Duration::from_secs(2);
/// What detection asks ptp4l (PORT_PROPERTIES_NP rather than PORT_DATA_SET:
/// it has the port's state too, and its timestamping and interface).
const PMC_QUERIES: [&str; 4] = [
    "GET TIME_STATUS_NP",
    "GET PORT_PROPERTIES_NP",
    "GET TIME_PROPERTIES_DATA_SET",
    "GET DEFAULT_DATA_SET",
];
/// What following a free-running ptp4l asks it: the offset and the port.
const FOLLOW_QUERIES: [&str; 2] = ["GET TIME_STATUS_NP", "GET PORT_PROPERTIES_NP"];
/// How often a clock following a free-running ptp4l asks it (a pmc run
/// takes 100 ms of it, waiting for answers): twice ptp4l's sync interval
/// at AES67's 8 syncs a second. The offset moves by the line's rate over
/// this much at a time (2.5 µs at 10 ppm).
pub const PTP_POLL: Duration = Duration::from_millis(250);
/// Most measurements kept for [`MediaClock::take_offsets`] between two
/// takes (about three hours of polls): older ones are dropped.
const MAX_RECORDS: usize = 1 << 15;
/// How a following clock's system clock relates to the grandmaster.
const FOLLOWS_FREE_RUNNING: &str =
    "ptp4l runs free (free_running 1): tessera adds its measured offset";

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum ClockSource {
    /// ptp4l reports a grandmaster and this host's system clock follows it.
    Ptp {
        /// SDP form: "39-A7-94-FF-FE-07-CB-D0" (pmc's "39a794.fffe.07cbd0").
        grandmaster: String,
        domain: u8,
        /// pmc's word: "SLAVE", or "MASTER" on the grandmaster (pmc shows
        /// ptp4l's GRAND_MASTER state as MASTER).
        port_state: String,
        /// ptp4l's last master_offset (0 on the grandmaster).
        offset_ns: i64,
        /// Added to `CLOCK_REALTIME` to make the grandmaster's time: its
        /// currentUtcOffset under the PTP timescale (TAI), 0 under an
        /// arbitrary one — a ptp4l grandmaster on the system clock (`-S`)
        /// announces its UTC clock as such, and its slaves copy it as is.
        utc_offset_s: i32,
        /// "ptp4l -S (software timestamping)", "phc2sys pid N", or "this
        /// host is the grandmaster".
        system_clock_follows: String,
    },
    /// No usable PTP: why, in words, and how to get it.
    System { why: String },
}

/// A media clock: its source and the offset from `CLOCK_MONOTONIC` to
/// media time (ns since the PTP epoch) captured at the last refresh,
/// shared with its clones.
#[derive(Debug, Clone)]
pub struct MediaClock {
    source: ClockSource,
    offset: Arc<Offset>,
    /// A free-running ptp4l this clock follows.
    ptp: Option<Arc<Following>>,
}

/// A free-running ptp4l followed: where it answers, and what was made of
/// its answers (locked by the follower thread and reports only).
#[derive(Debug)]
struct Following {
    uds: PathBuf,
    domain: u8,
    state: Mutex<FollowState>,
}

#[derive(Debug, Default)]
struct FollowState {
    follow: Follow,
    /// What the media clock adds to `CLOCK_REALTIME` now: minus the
    /// offset from the grandmaster.
    correction_ns: i64,
    records: Vec<OffsetRecord>,
}

/// One measurement of ptp4l as a following clock took it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct OffsetRecord {
    /// The sync's ingress, `CLOCK_REALTIME` ns.
    pub at_ns: u64,
    /// This host's system clock − the grandmaster's, as ptp4l measured it.
    pub ptp4l_ns: i64,
    /// The media clock − the grandmaster's, then: ptp4l's offset plus what
    /// the media clock added when the sync came.
    pub media_ns: i64,
}

/// A following clock's state, for reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PtpFollowing {
    /// Whether ptp4l's measurements come (false: playing on the last rate).
    pub locked: bool,
    /// Losses of PTP so far.
    pub losses: u64,
    pub last_loss: Option<Loss>,
    /// What the media clock adds to `CLOCK_REALTIME` now, ns.
    pub correction_ns: i64,
    /// The offset's rate, fitted to ptp4l's measurements, ns per second.
    pub rate_ppb: f64,
}

/// Media time − `CLOCK_MONOTONIC` (about 1.8 × 10^18 ns: an i64 holds it
/// until 2262), and how many times it was taken again since the first.
#[derive(Debug, Default)]
struct Offset {
    media_minus_monotonic_ns: AtomicI64,
    refreshes: AtomicU64,
}

impl MediaClock {
    /// Asks the ptp4l at `uds` (its management socket; ptp4l's default is
    /// /var/run/ptp4l) in `domain` through one pmc run, and looks whether
    /// the system clock follows it: PTP when its port is SLAVE to a
    /// grandmaster or this host is the grandmaster, and the system clock
    /// is the one ptp4l disciplines (software timestamping) or a phc2sys
    /// process runs; else the system clock with the reason. Not real-time
    /// safe: it runs a process for up to [`PMC_TIMEOUT`].
    pub fn detect(uds: &Path, domain: u8) -> MediaClock {
        let source = match pmc(uds, domain, &PMC_QUERIES) {
            Ok(output) => classify(&parse_pmc(&output), uds, domain, phc2sys_pid()),
            Err(why) => ClockSource::System { why },
        };
        MediaClock::new(source)
    }

    /// The system clock, labelled as such with `why`.
    pub fn system(why: &str) -> MediaClock {
        MediaClock::new(ClockSource::System { why: why.into() })
    }

    /// Follows the grandmaster of the ptp4l at `uds` in `domain`, which
    /// adjusts no clock (`free_running 1`, software timestamping), by
    /// adding its measured offset (module docs) once the clock's
    /// [`MediaClock::follow`] thread runs. Its port must be SLAVE (a
    /// free-running port stays UNCALIBRATED until told `SET
    /// SYNCHRONIZATION_UNCERTAIN_NP 0`); on the grandmaster itself the
    /// clock is the system clock, labelled PTP as [`MediaClock::detect`]
    /// does; otherwise the system clock with the reason. Not real-time
    /// safe: it runs pmc.
    pub fn follow_free_running(uds: &Path, domain: u8) -> MediaClock {
        let answers = match pmc(uds, domain, &PMC_QUERIES) {
            Ok(output) => parse_pmc(&output),
            Err(why) => return MediaClock::system(&why),
        };
        // No phc2sys counts here: a slave it classifies as PTP stamps
        // with the system clock.
        let mut source = classify(&answers, uds, domain, None);
        match &mut source {
            ClockSource::Ptp {
                port_state,
                system_clock_follows,
                ..
            } if port_state == "SLAVE" => *system_clock_follows = FOLLOWS_FREE_RUNNING.into(),
            _ => return MediaClock::new(source),
        }
        let mut state = FollowState::default();
        if let Some(m) = state.follow.take(answer_of(&answers), clock::realtime_ns()) {
            state.correction_ns = -m.offset_ns;
        }
        let ptp = Following {
            uds: uds.to_path_buf(),
            domain,
            state: Mutex::new(state),
        };
        MediaClock::made(source, Some(Arc::new(ptp)))
    }

    fn new(source: ClockSource) -> MediaClock {
        MediaClock::made(source, None)
    }

    fn made(source: ClockSource, ptp: Option<Arc<Following>>) -> MediaClock {
        let clock = MediaClock {
            source,
            offset: Arc::default(),
            ptp,
        };
        let correction = clock.ptp.as_ref().map_or(0, |p| p.lock().correction_ns);
        clock.store_offset(clock.measure_offset(correction));
        clock
    }

    /// Media time − `CLOCK_MONOTONIC` now (with the kernel's TAI offset on
    /// the system clock), plus a following clock's `correction_ns`. A few
    /// clock reads and one system call.
    fn measure_offset(&self, correction_ns: i64) -> i64 {
        let utc_offset_s = match &self.source {
            ClockSource::Ptp { utc_offset_s, .. } => *utc_offset_s,
            ClockSource::System { .. } => clock::tai_offset_s(),
        };
        (clock::realtime_offset_ns()
            + i128::from(utc_offset_s) * NS as i128
            + i128::from(correction_ns)) as i64
    }

    fn store_offset(&self, ns: i64) {
        self.offset
            .media_minus_monotonic_ns
            .store(ns, Ordering::Relaxed);
    }

    fn offset_ns(&self) -> i128 {
        self.offset
            .media_minus_monotonic_ns
            .load(Ordering::Relaxed)
            .into()
    }

    /// Captures the offset from `CLOCK_MONOTONIC` to media time again, for
    /// this clock and its clones: after the system clock was stepped. Not
    /// real-time safe (a few clock reads, one system call); it does not
    /// detect the source again.
    pub fn refresh(&self) {
        // Under a following clock's lock: a poll's move between measuring
        // and storing would be lost.
        let state = self.ptp.as_ref().map(|p| p.lock());
        let correction = state.as_ref().map_or(0, |s| s.correction_ns);
        self.store_offset(self.measure_offset(correction));
        drop(state);
        // Release: a reader that sees the new count sees the new offset.
        self.offset.refreshes.fetch_add(1, Ordering::Release);
    }

    /// How many times the offset was taken again: a node that sees this
    /// change puts its position back onto the clock. Real-time safe.
    pub fn steps(&self) -> u64 {
        self.offset.refreshes.load(Ordering::Acquire)
    }

    /// Refreshes this clock (and its clones) at every step of the system
    /// clock, and asks a free-running ptp4l it follows every [`PTP_POLL`],
    /// on a thread of its own, until the follower is dropped. Not
    /// real-time safe.
    pub fn follow(&self) -> tessera_sys::Result<ClockFollower> {
        let steps = ClockSteps::new()?;
        let stop = EventFd::new()?;
        let epoll = Epoll::new()?;
        epoll.add(steps.as_fd(), 0, Trigger::Level)?;
        epoll.add(stop.as_fd(), 1, Trigger::Level)?;
        let (clock, stopped) = (self.clone(), stop.try_clone()?);
        let wake = match self.ptp {
            Some(_) => PTP_POLL,
            None => Duration::from_secs(60),
        };
        let thread = std::thread::Builder::new()
            .name("tessera-clock".into())
            .spawn(move || {
                let mut ready = [Readiness::EMPTY; 2];
                let mut next_poll = Instant::now();
                while stopped.drain() == 0 {
                    if steps.stepped() {
                        clock.refresh();
                    }
                    if clock.ptp.is_some() && Instant::now() >= next_poll {
                        next_poll = Instant::now() + PTP_POLL;
                        clock.poll_ptp();
                    }
                    let wait = next_poll.saturating_duration_since(Instant::now());
                    // An error (EINTR) only means looking again.
                    let _ = epoll.wait(&mut ready, wait.min(wake).max(Duration::from_millis(1)));
                }
            })
            .map_err(|e| tessera_sys::Error::from_io("spawning the clock's follower", &e))?;
        Ok(ClockFollower {
            stop,
            thread: Some(thread),
        })
    }

    /// Asks the followed ptp4l once and moves the offset to the fitted
    /// line's value now (by the change only: a step taken meanwhile stays).
    fn poll_ptp(&self) {
        let Some(ptp) = &self.ptp else { return };
        let answer = match pmc(&ptp.uds, ptp.domain, &FOLLOW_QUERIES) {
            Ok(output) => answer_of(&parse_pmc(&output)),
            Err(why) => Answer::Unusable(why),
        };
        let mut state = ptp.lock();
        let now = clock::realtime_ns();
        let before = state.correction_ns;
        if let Some(m) = state.follow.take(answer, now) {
            state.record(m, before);
        }
        let correction = state.follow.offset_at(now).map_or(before, |o| -o);
        state.correction_ns = correction;
        self.offset
            .media_minus_monotonic_ns
            .fetch_add(correction - before, Ordering::Relaxed);
    }

    /// A following clock's state now; `None` for other clocks.
    pub fn ptp_following(&self) -> Option<PtpFollowing> {
        let state = self.ptp.as_ref()?.lock();
        Some(PtpFollowing {
            locked: state.follow.locked(),
            losses: state.follow.losses(),
            last_loss: state.follow.last_loss().cloned(),
            correction_ns: state.correction_ns,
            rate_ppb: state.follow.line().map_or(0.0, |l| l.rate_ppb),
        })
    }

    /// The measurements a following clock took since the last call, oldest
    /// first (empty for other clocks).
    pub fn take_offsets(&self) -> Vec<OffsetRecord> {
        self.ptp
            .as_ref()
            .map_or_else(Vec::new, |p| std::mem::take(&mut p.lock().records))
    }

    pub fn source(&self) -> &ClockSource {
        &self.source
    }

    /// One line for reports: "PTP: grandmaster 39-A7-94-FF-FE-07-CB-D0
    /// domain 0, port SLAVE, offset 12 ns, UTC offset 37 s; ptp4l -S
    /// (software timestamping)" or "system clock, not PTP: WHY".
    pub fn label(&self) -> String {
        match &self.source {
            ClockSource::Ptp {
                grandmaster,
                domain,
                port_state,
                offset_ns,
                utc_offset_s,
                system_clock_follows,
            } => format!(
                "PTP: grandmaster {grandmaster} domain {domain}, port {port_state}, \
                 offset {offset_ns} ns, UTC offset {utc_offset_s} s; {system_clock_follows}{}",
                self.ptp_following().map_or(String::new(), |f| f.describe())
            ),
            ClockSource::System { why } => format!("system clock, not PTP: {why}"),
        }
    }

    /// The media time at `CLOCK_MONOTONIC` instant `monotonic_ns`, in ns
    /// since the PTP epoch: the instant plus the offset captured at the
    /// last refresh (REALTIME − MONOTONIC, plus PTP's UTC offset under PTP,
    /// the kernel's TAI offset otherwise). Real-time safe: arithmetic only.
    pub fn media_ns_at(&self, monotonic_ns: u64) -> u64 {
        (i128::from(monotonic_ns) + self.offset_ns()).max(0) as u64
    }

    /// The RTP timestamp of that instant at `sample_rate`: samples since
    /// the epoch, mod 2^32 (offset 0, as SDP's a=mediaclk:direct=0).
    /// Real-time safe.
    pub fn rtp_timestamp_at(&self, monotonic_ns: u64, sample_rate: u32) -> u32 {
        samples_at(self.media_ns_at(monotonic_ns), sample_rate) as u32
    }

    /// The inverse of [`Self::rtp_timestamp_at`]: the first
    /// `CLOCK_MONOTONIC` nanosecond at which RTP timestamp `ts` holds, in
    /// the 2^32 wrap nearest `near_monotonic_ns`. Real-time safe.
    ///
    /// # Panics
    /// If `sample_rate` is 0.
    pub fn monotonic_ns_of(&self, ts: u32, sample_rate: u32, near_monotonic_ns: u64) -> u64 {
        let near = samples_at(self.media_ns_at(near_monotonic_ns), sample_rate);
        let delta = ts.wrapping_sub(near as u32) as i32;
        let target = near.saturating_add_signed(i64::from(delta));
        let rate = u64::from(sample_rate);
        let media = target / rate * NS + (target % rate * NS).div_ceil(rate);
        (i128::from(media) - self.offset_ns()).max(0) as u64
    }

    /// For SDP's a=ts-refclk: Some(("IEEE1588-2008", grandmaster, domain))
    /// under PTP, None on the system clock (the caller then writes
    /// a=ts-refclk:localmac=… or nothing).
    pub fn ptp_reference(&self) -> Option<(String, String, u8)> {
        match &self.source {
            ClockSource::Ptp {
                grandmaster,
                domain,
                ..
            } => Some(("IEEE1588-2008".into(), grandmaster.clone(), *domain)),
            ClockSource::System { .. } => None,
        }
    }
}

/// An engine's cycles on the media clock's grid follow its steps too.
impl tessera_graph::GridClock for MediaClock {
    fn ahead_of_monotonic_ns(&self) -> u64 {
        self.media_ns_at(0)
    }
}

impl Following {
    fn lock(&self) -> MutexGuard<'_, FollowState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl FollowState {
    /// Records measurement `m`, taken while the media clock added
    /// `correction_ns`.
    fn record(&mut self, m: Measurement, correction_ns: i64) {
        if self.records.len() == MAX_RECORDS {
            self.records.remove(0);
        }
        self.records.push(OffsetRecord {
            at_ns: m.at_ns,
            ptp4l_ns: m.offset_ns,
            media_ns: m.offset_ns + correction_ns,
        });
    }
}

impl PtpFollowing {
    /// What a label adds: "; PTP lost at 13:52:07.250 UTC (why), playing
    /// on its last rate (+12.0 ppb)" while lost, the losses since while
    /// locked, nothing before any.
    fn describe(&self) -> String {
        let Some(loss) = &self.last_loss else {
            return String::new();
        };
        let at = time_of_day(loss.at_ns);
        match self.locked {
            false => format!(
                "; PTP lost at {at} ({}), playing on its last rate ({:+.1} ppb)",
                loss.why, self.rate_ppb
            ),
            true => format!(
                "; PTP lost {} time(s), last at {at} ({}), following again",
                self.losses, loss.why
            ),
        }
    }
}

/// `CLOCK_REALTIME` ns as "13:52:07.250 UTC".
fn time_of_day(realtime_ns: u64) -> String {
    let ms = realtime_ns / 1_000_000 % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03} UTC",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// What ptp4l's answers say of following it: a measurement from a SLAVE
/// port with a grandmaster present, or why not.
fn answer_of(answers: &PmcAnswers) -> Answer {
    let state = answers.ports.first().map_or("", |p| p.state.as_str());
    if state != "SLAVE" {
        return Answer::Unusable(match state {
            "" => "ptp4l answered without its port".into(),
            state => format!("ptp4l's port is {state}"),
        });
    }
    if !answers.gm_present {
        return Answer::Unusable("ptp4l hears no grandmaster".into());
    }
    if answers.ingress_time == 0 {
        return Answer::Unusable("ptp4l has measured no offset yet".into());
    }
    Answer::Measured(Measurement {
        at_ns: answers.ingress_time,
        offset_ns: answers.master_offset,
    })
}

/// The thread [`MediaClock::follow`] started; dropping it stops it.
#[derive(Debug)]
pub struct ClockFollower {
    stop: EventFd,
    thread: Option<JoinHandle<()>>,
}

impl Drop for ClockFollower {
    fn drop(&mut self) {
        self.stop.signal();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs pmc against the ptp4l whose management socket is `uds`, in
/// `domain`, with `queries` ("GET TIME_STATUS_NP", "SET …"): its standard
/// output, or why there is none. The one place tessera runs pmc; not
/// real-time safe (a process, for up to [`PMC_TIMEOUT`]).
pub fn pmc(uds: &Path, domain: u8, queries: &[&str]) -> Result<String, String> {
    let spawn = |program: &str| {
        Command::new(program)
            .args(["-u", "-b", "0", "-s"])
            .arg(uds)
            .args(["-d", &domain.to_string()])
            .args(queries)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
    };
    // Not on every PATH outside root's.
    let mut child = match spawn("pmc").or_else(|_| spawn("/usr/sbin/pmc")) {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("linuxptp is not installed (fix: apt install linuxptp)".into())
        }
        Err(e) => return Err(format!("pmc did not start: {e}")),
    };
    let deadline = Instant::now() + PMC_TIMEOUT;
    // Its output (a few kB) fits the pipe: read once it has exited.
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                // pmc's own socket, which it removes when it exits.
                let _ = std::fs::remove_file(format!("/var/run/pmc.{}", child.id()));
                return Err(format!(
                    "pmc got no answer from {} within {PMC_TIMEOUT:?}",
                    uds.display()
                ));
            }
        }
    };
    let (mut output, mut errors) = (String::new(), String::new());
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut output);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut errors);
    }
    if output.contains("RESPONSE MANAGEMENT") {
        return Ok(output);
    }
    let uds = uds.display();
    match errors.lines().find(|l| !l.trim().is_empty()) {
        // As when it may not bind its own socket: "uds: bind failed: …".
        Some(error) if !status.success() => Err(format!(
            "pmc could not ask the ptp4l at {uds}: {} (fix: run as root)",
            error.trim()
        )),
        _ => Err(format!(
            "no ptp4l answers at {uds} in domain {domain} (fix: run `ptp4l -i IFACE -S`, \
             or with hardware timestamping and phc2sys)"
        )),
    }
}

/// The pid of a running phc2sys, if any (the system clock is one per
/// machine, whatever namespace phc2sys runs in).
fn phc2sys_pid() -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid = entry.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            (comm.trim_end() == "phc2sys").then_some(pid)
        })
}

/// The answers of ptp4l that detection uses, as pmc prints them.
#[derive(Debug, Default, PartialEq)]
struct PmcAnswers {
    gm_present: bool,
    gm_identity: Option<String>,
    master_offset: i64,
    /// The last sync's ingress, CLOCK_REALTIME ns (0: none yet).
    ingress_time: u64,
    ports: Vec<Port>,
    utc_offset_s: i32,
    ptp_timescale: bool,
    clock_identity: Option<String>,
}

/// A port of ptp4l, from PORT_PROPERTIES_NP.
#[derive(Debug, Default, PartialEq)]
struct Port {
    state: String,
    timestamping: String,
    interface: String,
}

/// Reads pmc's output: a "… RESPONSE MANAGEMENT NAME" line opens each
/// answer, whose fields follow as "name value" lines.
fn parse_pmc(output: &str) -> PmcAnswers {
    let mut answers = PmcAnswers::default();
    let mut tlv = "";
    for line in output.lines() {
        if let Some((_, name)) = line.split_once("RESPONSE MANAGEMENT ") {
            tlv = name.trim();
            continue;
        }
        let Some((key, value)) = line.trim().split_once(char::is_whitespace) else {
            continue;
        };
        let value = value.trim();
        match (tlv, key) {
            ("TIME_STATUS_NP", "gmPresent") => answers.gm_present = value == "true",
            ("TIME_STATUS_NP", "gmIdentity") => answers.gm_identity = Some(value.into()),
            ("TIME_STATUS_NP", "master_offset") => {
                answers.master_offset = value.parse().unwrap_or(0)
            }
            ("TIME_STATUS_NP", "ingress_time") => answers.ingress_time = value.parse().unwrap_or(0),
            ("PORT_PROPERTIES_NP", "portIdentity") => answers.ports.push(Port::default()),
            ("PORT_PROPERTIES_NP", field) => {
                let Some(port) = answers.ports.last_mut() else {
                    continue;
                };
                match field {
                    "portState" => port.state = value.into(),
                    "timestamping" => port.timestamping = value.into(),
                    "interface" => port.interface = value.into(),
                    _ => {}
                }
            }
            ("TIME_PROPERTIES_DATA_SET", "currentUtcOffset") => {
                answers.utc_offset_s = value.parse().unwrap_or(0)
            }
            ("TIME_PROPERTIES_DATA_SET", "ptpTimescale") => answers.ptp_timescale = value == "1",
            ("DEFAULT_DATA_SET", "clockIdentity") => answers.clock_identity = Some(value.into()),
            _ => {}
        }
    }
    answers
}

/// What ptp4l's answers (and a phc2sys's pid) make of the media clock.
fn classify(answers: &PmcAnswers, uds: &Path, domain: u8, phc2sys: Option<u32>) -> ClockSource {
    let system = |why: String| ClockSource::System { why };
    let ports = &answers.ports;
    let (Some(gm), Some(port)) = (&answers.gm_identity, ports.first()) else {
        return system(format!(
            "ptp4l at {} answered without its port or grandmaster",
            uds.display()
        ));
    };
    let grandmaster = sdp_identity(gm);
    let is_gm = answers.clock_identity.as_ref() == Some(gm);
    let with_state = |state: &str| ports.iter().find(|p| p.state == state);
    let port = match with_state("SLAVE").or(with_state("MASTER")) {
        Some(p) if p.state == "SLAVE" && answers.gm_present => p,
        Some(p) if p.state == "MASTER" && is_gm => p,
        _ => {
            let why = match port.state.as_str() {
                "LISTENING" => "no grandmaster heard".to_string(),
                "UNCALIBRATED" => format!(
                    "locking onto grandmaster {grandmaster} (it stays so when ptp4l runs \
                     with free_running 1, adjusting no clock)"
                ),
                _ => "neither following a grandmaster nor one".to_string(),
            };
            return system(format!("ptp4l's port is {}: {why}", port.state));
        }
    };
    // SOFTWARE and LEGACY_HW stamp with, and discipline, the system clock;
    // the others a NIC's clock, which phc2sys ties to the system clock.
    let software = matches!(port.timestamping.as_str(), "SOFTWARE" | "LEGACY_HW");
    let interface = &port.interface;
    let follows = match (is_gm, software, phc2sys) {
        (true, true, _) => "this host is the grandmaster".to_string(),
        (true, false, Some(pid)) => format!("this host is the grandmaster, phc2sys pid {pid}"),
        (false, true, _) => "ptp4l -S (software timestamping)".to_string(),
        (false, false, Some(pid)) => format!("phc2sys pid {pid}"),
        (_, false, None) => {
            return system(format!(
                "ptp4l {} the NIC's clock but no phc2sys ties it to the system clock (fix: \
                 phc2sys {} -w)",
                if is_gm { "serves" } else { "synchronises" },
                if is_gm {
                    format!("-s CLOCK_REALTIME -c {interface}")
                } else {
                    format!("-s {interface}")
                }
            ))
        }
    };
    ClockSource::Ptp {
        grandmaster,
        domain,
        port_state: port.state.clone(),
        offset_ns: answers.master_offset,
        utc_offset_s: if answers.ptp_timescale {
            answers.utc_offset_s
        } else {
            0
        },
        system_clock_follows: follows,
    }
}

/// pmc's "39a794.fffe.07cbd0" as SDP writes it: "39-A7-94-FF-FE-07-CB-D0"
/// (anything else is kept as it is).
fn sdp_identity(pmc: &str) -> String {
    let hex: Vec<u8> = pmc.bytes().filter(|&b| b != b'.').collect();
    if hex.len() != 16 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return pmc.into();
    }
    let pairs: Vec<String> = hex
        .chunks(2)
        .map(|p| String::from_utf8_lossy(p).to_uppercase())
        .collect();
    pairs.join("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    // pmc's answers, captured in crates/workloads/tests/ptp_media_clock.rs
    // (linuxptp 3.1.1, two ptp4l -S with free_running 1 on a veth). The
    // grandmaster's TIME_PROPERTIES_DATA_SET, the same as the slave's, is
    // left out.
    const GRANDMASTER: &str = "
sending: GET TIME_STATUS_NP
sending: GET PORT_PROPERTIES_NP
sending: GET TIME_PROPERTIES_DATA_SET
sending: GET DEFAULT_DATA_SET
	b640bf.fffe.bc2997-0 seq 0 RESPONSE MANAGEMENT TIME_STATUS_NP 
		master_offset              0
		ingress_time               0
		cumulativeScaledRateOffset +0.000000000
		scaledLastGmPhaseChange    0
		gmTimeBaseIndicator        0
		lastGmPhaseChange          0x0000'0000000000000000.0000
		gmPresent                  false
		gmIdentity                 b640bf.fffe.bc2997
	b640bf.fffe.bc2997-1 seq 1 RESPONSE MANAGEMENT PORT_PROPERTIES_NP 
		portIdentity            b640bf.fffe.bc2997-1
		portState               MASTER
		timestamping            SOFTWARE
		interface               lan0
	b640bf.fffe.bc2997-0 seq 3 RESPONSE MANAGEMENT DEFAULT_DATA_SET 
		twoStepFlag             1
		slaveOnly               0
		numberPorts             1
		priority1               100
		clockClass              248
		clockAccuracy           0xfe
		offsetScaledLogVariance 0xffff
		priority2               128
		clockIdentity           b640bf.fffe.bc2997
		domainNumber            0
";
    const SLAVE: &str = "
sending: GET TIME_STATUS_NP
sending: GET PORT_PROPERTIES_NP
	521739.fffe.aed30f-0 seq 0 RESPONSE MANAGEMENT TIME_STATUS_NP 
		master_offset              891
		ingress_time               1795447839562916005
		cumulativeScaledRateOffset +0.000000000
		scaledLastGmPhaseChange    0
		gmTimeBaseIndicator        0
		lastGmPhaseChange          0x0000'0000000000000000.0000
		gmPresent                  true
		gmIdentity                 b640bf.fffe.bc2997
sending: GET TIME_PROPERTIES_DATA_SET
sending: GET DEFAULT_DATA_SET
	521739.fffe.aed30f-1 seq 1 RESPONSE MANAGEMENT PORT_PROPERTIES_NP 
		portIdentity            521739.fffe.aed30f-1
		portState               SLAVE
		timestamping            SOFTWARE
		interface               lan0
	521739.fffe.aed30f-0 seq 2 RESPONSE MANAGEMENT TIME_PROPERTIES_DATA_SET 
		currentUtcOffset      37
		leap61                0
		leap59                0
		currentUtcOffsetValid 0
		ptpTimescale          0
		timeTraceable         0
		frequencyTraceable    0
		timeSource            0xa0
	521739.fffe.aed30f-0 seq 3 RESPONSE MANAGEMENT DEFAULT_DATA_SET 
		twoStepFlag             1
		slaveOnly               0
		numberPorts             1
		priority1               200
		clockClass              248
		clockAccuracy           0xfe
		offsetScaledLogVariance 0xffff
		priority2               128
		clockIdentity           521739.fffe.aed30f
		domainNumber            0
";
    const GM_SDP: &str = "B6-40-BF-FF-FE-BC-29-97";
    const UDS: &str = "/var/run/ptp4l";

    fn classify_text(output: &str, phc2sys: Option<u32>) -> ClockSource {
        classify(&parse_pmc(output), Path::new(UDS), 0, phc2sys)
    }

    fn why(source: ClockSource) -> String {
        match source {
            ClockSource::System { why } => why,
            ptp => panic!("{ptp:?}"),
        }
    }

    #[test]
    fn pmc_output_is_read_field_by_field() {
        let answers = parse_pmc(SLAVE);
        let port = Port {
            state: "SLAVE".into(),
            timestamping: "SOFTWARE".into(),
            interface: "lan0".into(),
        };
        assert_eq!(
            answers,
            PmcAnswers {
                gm_present: true,
                gm_identity: Some("b640bf.fffe.bc2997".into()),
                master_offset: 891,
                ingress_time: 1_795_447_839_562_916_005,
                ports: vec![port],
                utc_offset_s: 37,
                ptp_timescale: false,
                clock_identity: Some("521739.fffe.aed30f".into()),
            }
        );
        assert_eq!(
            parse_pmc("sending: GET TIME_STATUS_NP\n"),
            PmcAnswers::default()
        );
    }

    #[test]
    fn a_software_slave_follows_its_grandmaster_on_its_timescale() {
        let expected = ClockSource::Ptp {
            grandmaster: GM_SDP.into(),
            domain: 0,
            port_state: "SLAVE".into(),
            offset_ns: 891,
            utc_offset_s: 0,
            system_clock_follows: "ptp4l -S (software timestamping)".into(),
        };
        assert_eq!(classify_text(SLAVE, None), expected);
        // Under the PTP timescale the grandmaster's time is TAI.
        let tai = SLAVE.replace("ptpTimescale          0", "ptpTimescale          1");
        let ClockSource::Ptp { utc_offset_s, .. } = classify_text(&tai, None) else {
            panic!()
        };
        assert_eq!(utc_offset_s, 37);
    }

    #[test]
    fn the_grandmaster_is_its_own_reference() {
        let source = classify_text(GRANDMASTER, None);
        let ClockSource::Ptp {
            grandmaster,
            port_state,
            system_clock_follows,
            ..
        } = &source
        else {
            panic!("{source:?}")
        };
        assert_eq!(
            (grandmaster.as_str(), port_state.as_str()),
            (GM_SDP, "MASTER")
        );
        assert_eq!(system_clock_follows, "this host is the grandmaster");
    }

    #[test]
    fn ports_not_yet_following_give_the_system_clock_and_why() {
        // Captured a moment before SLAVE's, which differs from it in the
        // port's state and the offset only (811 ns then).
        let uncalibrated = SLAVE.replace("SLAVE", "UNCALIBRATED");
        let why_unc = why(classify_text(&uncalibrated, None));
        assert!(
            why_unc.starts_with("ptp4l's port is UNCALIBRATED"),
            "{why_unc}"
        );
        assert!(why_unc.contains(GM_SDP), "{why_unc}");
        let listening = GRANDMASTER.replace("MASTER\n", "LISTENING\n");
        let why_listening = why(classify_text(&listening, None));
        assert_eq!(
            why_listening,
            "ptp4l's port is LISTENING: no grandmaster heard"
        );
        assert!(why(classify_text("", None)).contains(UDS));
    }

    #[test]
    fn a_nics_clock_counts_only_with_phc2sys() {
        let hardware = SLAVE.replace("SOFTWARE", "HARDWARE");
        let why_hw = why(classify_text(&hardware, None));
        assert!(why_hw.contains("no phc2sys") && why_hw.contains("phc2sys -s lan0 -w"));
        let ClockSource::Ptp {
            system_clock_follows,
            ..
        } = classify_text(&hardware, Some(42))
        else {
            panic!()
        };
        assert_eq!(system_clock_follows, "phc2sys pid 42");
    }

    #[test]
    fn a_followed_slave_gives_measurements_and_anything_else_says_why() {
        assert_eq!(
            answer_of(&parse_pmc(SLAVE)),
            Answer::Measured(Measurement {
                at_ns: 1_795_447_839_562_916_005,
                offset_ns: 891
            })
        );
        let why = |text: &str| match answer_of(&parse_pmc(text)) {
            Answer::Unusable(why) => why,
            measured => panic!("{measured:?}"),
        };
        let uncalibrated = SLAVE.replace("SLAVE", "UNCALIBRATED");
        assert_eq!(why(&uncalibrated), "ptp4l's port is UNCALIBRATED");
        let alone = SLAVE.replace("gmPresent                  true", "gmPresent false");
        assert_eq!(why(&alone), "ptp4l hears no grandmaster");
        let unmeasured = SLAVE.replace("1795447839562916005", "0");
        assert_eq!(why(&unmeasured), "ptp4l has measured no offset yet");
        assert_eq!(why(""), "ptp4l answered without its port");
    }

    #[test]
    fn a_loss_is_said_with_its_time_and_the_rate_played_on() {
        let day = 86_400 * NS;
        let at_ns = 20_000 * day + (13 * 3600 + 52 * 60 + 7) * NS + 250_000_000;
        let lost = PtpFollowing {
            locked: false,
            losses: 1,
            last_loss: Some(Loss {
                at_ns,
                why: "ptp4l's port is LISTENING".into(),
            }),
            correction_ns: -5,
            rate_ppb: 12.0,
        };
        assert_eq!(
            lost.describe(),
            "; PTP lost at 13:52:07.250 UTC (ptp4l's port is LISTENING), playing on its last \
             rate (+12.0 ppb)"
        );
        let again = PtpFollowing {
            locked: true,
            ..lost.clone()
        };
        assert_eq!(
            again.describe(),
            "; PTP lost 1 time(s), last at 13:52:07.250 UTC (ptp4l's port is LISTENING), \
             following again"
        );
        let never = PtpFollowing {
            last_loss: None,
            losses: 0,
            ..lost
        };
        assert_eq!(never.describe(), "");
    }

    #[test]
    fn identities_are_written_as_sdp_writes_them() {
        assert_eq!(
            sdp_identity("39a794.fffe.07cbd0"),
            "39-A7-94-FF-FE-07-CB-D0"
        );
        assert_eq!(sdp_identity("not-an-id"), "not-an-id");
    }

    fn clock_at(media_minus_monotonic_ns: i64) -> MediaClock {
        let clock = MediaClock {
            source: ClockSource::System {
                why: "a test".into(),
            },
            offset: Arc::default(),
            ptp: None,
        };
        clock.store_offset(media_minus_monotonic_ns);
        clock
    }

    #[test]
    fn a_refresh_reaches_every_clone_and_is_counted() {
        let clock = clock_at(5);
        let clone = clock.clone();
        assert_eq!((clone.media_ns_at(0), clone.steps()), (5, 0));
        clock.refresh();
        assert_eq!(clone.steps(), 1);
        let tai = clock::tai_ns();
        assert!(clone.media_ns_at(clock::monotonic_ns()).abs_diff(tai) < 10_000_000);
    }

    #[test]
    fn rtp_timestamps_count_samples_since_the_epoch_mod_2_32() {
        let clock = clock_at(1_000_000_000);
        assert_eq!(clock.media_ns_at(500_000_000), 1_500_000_000);
        assert_eq!(clock.rtp_timestamp_at(0, 48_000), 48_000);
        assert_eq!(clock.rtp_timestamp_at(20_833, 48_000), 48_000);
        assert_eq!(clock.rtp_timestamp_at(20_834, 48_000), 48_001);
        // 2026 at 96 kHz: 1.8e14 samples, far beyond 2^32.
        let now = clock_at(1_795_447_839_562_916_005);
        let samples = 1_795_447_839_562_916_005u128 * 96_000 / 1_000_000_000;
        assert_eq!(now.rtp_timestamp_at(0, 96_000), samples as u32);
    }

    #[test]
    fn the_instant_of_a_timestamp_is_found_in_the_nearest_wrap() {
        let clock = clock_at(1_795_447_839_562_916_005);
        for rate in [44_100, 48_000, 96_000] {
            let near = 5_000_000_000u64;
            let ts = clock.rtp_timestamp_at(near, rate);
            for delta in [-70_000i32, -1, 0, 1, 70_000, i32::MAX / 2] {
                let wanted = ts.wrapping_add_signed(delta);
                let at = clock.monotonic_ns_of(wanted, rate, near);
                assert_eq!(clock.rtp_timestamp_at(at, rate), wanted, "{rate} {delta}");
                assert_ne!(
                    clock.rtp_timestamp_at(at - 1, rate),
                    wanted,
                    "{rate} {delta}"
                );
                let expected = near as i128 + delta as i128 * 1_000_000_000 / rate as i128;
                assert!((at as i128 - expected).abs() <= 1_000_000_000 / rate as i128);
            }
        }
    }

    #[test]
    fn the_system_clock_reads_tai_as_the_kernel_has_it() {
        let clock = MediaClock::system("no PTP in unit tests");
        let (media, tai) = (clock.media_ns_at(clock::monotonic_ns()), clock::tai_ns());
        assert!(media.abs_diff(tai) < 10_000_000, "{media} against {tai}");
        assert_eq!(clock.ptp_reference(), None);
        assert_eq!(clock.label(), "system clock, not PTP: no PTP in unit tests");
    }

    #[test]
    fn sources_travel_as_json_and_clocks_between_threads() {
        fn shareable<T: Clone + Send + Sync>() {}
        shareable::<MediaClock>();
        let source = classify_text(SLAVE, None);
        let json = serde_json::to_string(&source).unwrap();
        assert!(
            json.starts_with(r#"{"kind":"ptp","grandmaster":"B6-40"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<ClockSource>(&json).unwrap(), source);
    }
}
