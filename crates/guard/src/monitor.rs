//! What the audio server tells its clients, heard by a JACK client of the
//! guard's own: the period (buffer size and sample rate), xruns, clients
//! coming and going, and the graph's cycles — the threads that wake in
//! step with them are the graph's (`crate::lockstep`).
//!
//! JACK2 (Debian's libjack) tells all of it by notice, and its shared
//! frame time advances a period per cycle: the guard's client there stays
//! out of the graph ([`notices`]), never woken by a cycle, adding no node
//! to the user's chain. PipeWire's libjack (`pw-jack`: the process must
//! start with PipeWire's libjack first on LD_LIBRARY_PATH, see
//! [`pipewire_jack_dir`]) sends JACK clients no xrun callbacks, and a
//! client outside the graph sees its frame time stand still: there the
//! guard's client takes part in every cycle, counting them, and hears an
//! overrun as the periods the graph skipped (the frame time jumped by more
//! than one period between two of its cycles).
//!
//! The callbacks only bump atomics (and a client's registration rings an
//! eventfd, a write that never blocks): the guard reads them on its own
//! schedule, so nothing here allocates, locks or blocks on a real-time
//! thread. It must never connect ports or change the server's settings.

use crate::server::Endpoint;
use crate::{fail, GuardError};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tessera_sys::event::EventFd;

mod notices;

/// Counters the callbacks raise.
#[derive(Debug, Default)]
struct Heard {
    frames: AtomicU32,
    rate: AtomicU32,
    cycles: AtomicU64,
    xruns: AtomicU64,
    skipped: AtomicU64,
    joins: AtomicU64,
    leaves: AtomicU64,
    /// Rung at each client registration ([`Monitor::ring_on_clients`]).
    doorbell: OnceLock<EventFd>,
}

impl Heard {
    /// A client came (`registered`) or went: counted, and the doorbell
    /// rung if one was given.
    fn client_registered(&self, registered: bool) {
        let counter = match registered {
            true => &self.joins,
            false => &self.leaves,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(doorbell) = self.doorbell.get() {
            doorbell.signal();
        }
    }
}

/// What the server has said so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Frames per period.
    pub frames: u32,
    /// Frames per second.
    pub rate: u32,
    /// Cycles the graph ran (the guard's client in them, on PipeWire).
    pub cycles: u64,
    pub xruns: u64,
    /// Periods the graph did not run, from the frame time's jumps.
    pub skipped: u64,
    /// Clients that registered since the monitor joined.
    pub joins: u64,
    pub leaves: u64,
}

impl Snapshot {
    /// The audio period, if the server has told it.
    pub fn period_ns(&self) -> Option<u64> {
        (self.frames > 0 && self.rate > 0)
            .then(|| self.frames as u64 * 1_000_000_000 / self.rate as u64)
    }
}

struct Notifications(Arc<Heard>);

impl jack::NotificationHandler for Notifications {
    fn sample_rate(&mut self, _: &jack::Client, rate: jack::Frames) -> jack::Control {
        self.0.rate.store(rate, Ordering::Relaxed);
        jack::Control::Continue
    }

    fn client_registration(&mut self, _: &jack::Client, _: &str, registered: bool) {
        self.0.client_registered(registered);
    }

    fn xrun(&mut self, _: &jack::Client) -> jack::Control {
        self.0.xruns.fetch_add(1, Ordering::Relaxed);
        jack::Control::Continue
    }
}

struct Cycles {
    heard: Arc<Heard>,
    /// The frame time of the previous cycle (None after a buffer-size
    /// change, when the next jump means nothing).
    last_frame: Option<jack::Frames>,
}

impl jack::ProcessHandler for Cycles {
    fn process(&mut self, _: &jack::Client, scope: &jack::ProcessScope) -> jack::Control {
        let now = scope.last_frame_time();
        let frames = scope.n_frames();
        self.heard.cycles.fetch_add(1, Ordering::Relaxed);
        if let Some(last) = self.last_frame {
            let skipped = skipped_periods(last, now, frames);
            if skipped > 0 {
                self.heard.skipped.fetch_add(skipped, Ordering::Relaxed);
            }
        }
        self.last_frame = Some(now);
        jack::Control::Continue
    }

    fn buffer_size(&mut self, _: &jack::Client, frames: jack::Frames) -> jack::Control {
        self.heard.frames.store(frames, Ordering::Relaxed);
        self.last_frame = None;
        jack::Control::Continue
    }
}

/// Whole periods of `frames` between two cycles starting at frame times
/// `last` and `now`, beyond the one expected (frame times wrap at 2³²).
fn skipped_periods(last: jack::Frames, now: jack::Frames, frames: jack::Frames) -> u64 {
    if frames == 0 {
        return 0;
    }
    let advanced = now.wrapping_sub(last);
    u64::from((advanced / frames).saturating_sub(1))
}

/// JACK2's graph cycles, counted from the frame time of the cycle in
/// progress as the guard reads it.
#[derive(Debug, Default)]
struct FrameCycles {
    /// The frame time counted up to (a whole number of periods after the
    /// first reading).
    counted_to: Option<jack::Frames>,
    cycles: u64,
}

impl FrameCycles {
    /// The cycles counted once the frame time has reached `now`, with
    /// periods of `frames`. A frame time that went back (the server
    /// restarted) starts the count again from there.
    fn advance(&mut self, now: jack::Frames, frames: jack::Frames) -> u64 {
        let Some(last) = self.counted_to.filter(|_| frames > 0) else {
            self.counted_to = Some(now);
            return self.cycles;
        };
        let advanced = now.wrapping_sub(last);
        if advanced > jack::Frames::MAX / 2 {
            self.counted_to = Some(now);
            return self.cycles;
        }
        let whole = advanced / frames;
        self.cycles += u64::from(whole);
        self.counted_to = Some(last.wrapping_add(whole * frames));
        self.cycles
    }
}

/// How the guard's client hears the graph.
enum Client {
    /// JACK2: by notice, outside the graph.
    Notices(notices::Notices, FrameCycles),
    /// PipeWire: in every cycle (kept open: its callbacks count).
    InGraph {
        _client: jack::AsyncClient<Notifications, Cycles>,
    },
}

/// The guard's JACK client, active while it lives.
pub struct Monitor {
    heard: Arc<Heard>,
    client: Client,
}

impl Monitor {
    /// Joins JACK2's server `server` as client `name`, outside its graph.
    pub fn join_jack(server: &str, name: &str) -> Result<Monitor, GuardError> {
        std::env::set_var("JACK_DEFAULT_SERVER", server);
        let (client, heard) = open(name)?;
        let notices = notices::Notices::activate(client, heard.clone())?;
        Ok(Monitor {
            heard,
            client: Client::Notices(notices, FrameCycles::default()),
        })
    }

    /// Joins the PipeWire daemon at `endpoint` (any user's) as client `name`,
    /// in every cycle of its graph. PipeWire's libjack reads where to
    /// connect from the environment when the client opens: this process is
    /// pointed at the daemon first (a guard process guards one server).
    pub fn join_pipewire(endpoint: &Endpoint, name: &str) -> Result<Monitor, GuardError> {
        for (var, value) in endpoint.client_env() {
            std::env::set_var(var, value);
        }
        let (client, heard) = open(name)?;
        let client = client
            .activate_async(
                Notifications(heard.clone()),
                Cycles {
                    heard: heard.clone(),
                    last_frame: None,
                },
            )
            .map_err(|e| {
                fail(
                    format!("could not activate the guard's JACK client: {e}"),
                    "",
                )
            })?;
        Ok(Monitor {
            heard,
            client: Client::InGraph { _client: client },
        })
    }

    /// Rings `doorbell` whenever a client registers or leaves, so that
    /// the guard looks for the client's process at once instead of at the
    /// end of its interval.
    pub fn ring_on_clients(&self, doorbell: EventFd) {
        let _ = self.heard.doorbell.set(doorbell);
    }

    /// Whether the guard's client runs in the graph's cycles (its thread
    /// is then one of the graph's).
    pub fn in_graph(&self) -> bool {
        matches!(self.client, Client::InGraph { .. })
    }

    /// What the server has said so far.
    pub fn snapshot(&mut self) -> Snapshot {
        let h = &self.heard;
        let frames = h.frames.load(Ordering::Relaxed);
        let cycles = match &mut self.client {
            Client::Notices(notices, counted) => counted.advance(notices.cycle_frame(), frames),
            Client::InGraph { .. } => h.cycles.load(Ordering::Relaxed),
        };
        Snapshot {
            frames,
            rate: h.rate.load(Ordering::Relaxed),
            cycles,
            xruns: h.xruns.load(Ordering::Relaxed),
            skipped: h.skipped.load(Ordering::Relaxed),
            joins: h.joins.load(Ordering::Relaxed),
            leaves: h.leaves.load(Ordering::Relaxed),
        }
    }
}

/// Opens a client of the server the environment names as `name`, never
/// starting a server, with what it says of the period so far.
fn open(name: &str) -> Result<(jack::Client, Arc<Heard>), GuardError> {
    let (client, _status) =
        jack::Client::new(name, jack::ClientOptions::NO_START_SERVER).map_err(|e| {
            fail(
                format!("could not join the JACK server as a client: {e}"),
                "is the server running? JACK2: give its name (-n / JACK_DEFAULT_SERVER); PipeWire: its --pid, so that its socket is found",
            )
        })?;
    let heard = Arc::new(Heard::default());
    heard.frames.store(client.buffer_size(), Ordering::Relaxed);
    heard.rate.store(client.sample_rate(), Ordering::Relaxed);
    Ok((client, heard))
}

/// Where PipeWire keeps its libjack (what `pw-jack` puts first on
/// LD_LIBRARY_PATH), if it is installed.
pub fn pipewire_jack_dir() -> Option<PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ]
    .iter()
    .map(|lib| PathBuf::from(lib).join("pipewire-0.3/jack"))
    .find(|dir| dir.join("libjack.so.0").exists())
}

/// PipeWire speaks JACK through its own libjack, which the dynamic loader
/// finds only if it is first on LD_LIBRARY_PATH when the process starts (as
/// `pw-jack` arranges): so a guard of PipeWire starts its program again that
/// way, with the same arguments. Returns at once in the restarted program;
/// otherwise returns only with why it could not restart.
pub fn reexec_with_pipewire_jack() -> Result<(), GuardError> {
    use std::os::unix::process::CommandExt;
    const MARK: &str = "TESSERA_GUARD_PW_JACK";
    if std::env::var_os(MARK).is_some() {
        return Ok(());
    }
    let dir = pipewire_jack_dir().ok_or_else(|| GuardError::Missing {
        message: "PipeWire's JACK library is not installed".into(),
        fix: "apt-get install pipewire-jack".into(),
    })?;
    let path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", dir.display()),
        _ => dir.display().to_string(),
    };
    let exe = std::env::current_exe().map_err(|e| {
        fail(
            format!("where is this program: {e}"),
            "run it by its full path",
        )
    })?;
    let err = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("LD_LIBRARY_PATH", path)
        .env(MARK, "1")
        .exec();
    Err(fail(
        format!("could not restart with PipeWire's libjack: {err}"),
        "run it under pw-jack: pw-jack tessera guard pipewire",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_period_comes_from_frames_and_rate() {
        let s = Snapshot {
            frames: 64,
            rate: 48_000,
            ..Snapshot::default()
        };
        assert_eq!(s.period_ns(), Some(1_333_333));
        assert_eq!(Snapshot::default().period_ns(), None);
    }

    #[test]
    fn jack2s_cycles_are_whole_periods_of_its_frame_time() {
        let mut c = FrameCycles::default();
        assert_eq!(c.advance(1000, 64), 0, "the first reading only starts");
        assert_eq!(c.advance(1000 + 64 * 3 + 10, 64), 3);
        // The part of a period left over counts with the next reading.
        assert_eq!(c.advance(1000 + 64 * 4, 64), 4);
        // The frame time wraps at 2^32.
        let mut c = FrameCycles::default();
        c.advance(u32::MAX - 63, 64);
        assert_eq!(c.advance(64, 64), 2);
        // A restarted server's frame time starts again: nothing counted.
        assert_eq!(c.advance(10, 64), 2);
        assert_eq!(c.advance(10 + 128, 64), 4);
        // No period known yet: nothing counted, the reading kept.
        let mut c = FrameCycles::default();
        c.advance(500, 0);
        assert_eq!(c.advance(500 + 128, 64), 2);
    }

    #[test]
    fn only_jumps_beyond_one_period_are_skipped_periods() {
        assert_eq!(skipped_periods(1000, 1064, 64), 0);
        assert_eq!(skipped_periods(1000, 1000 + 3 * 64, 64), 2);
        assert_eq!(skipped_periods(1000, 1000 + 64 + 10, 64), 0);
        // The frame time wraps.
        assert_eq!(skipped_periods(u32::MAX - 31, 32 + 64, 64), 1);
        // Standing still (a restart) or no period known: nothing.
        assert_eq!(skipped_periods(1000, 1000, 64), 0);
        assert_eq!(skipped_periods(1000, 5000, 0), 0);
    }
}
