//! The in-process compositor of seed 000 §4.1 (Cell F): a
//! compositor that owns a fixed screen framebuffer and composites the frames
//! its clients submit into their windows, measuring how long each frame
//! waited and whether it was shown after its deadline.
//!
//! It owns the screen, each client's pool of frame buffers and the two
//! single-producer/single-consumer rings ([`rtrb`]) that cycle them between
//! the client ("free" → fill → "ready") and the service ("ready" → composite
//! → "free"), the wake-up word the clients bump, and the per-frame records.
//! Clients are registered before the service starts; every buffer, ring and
//! record is allocated then.
//!
//! It must never allocate, lock a client out or block a client on the
//! serving path: [`RenderClient::submit`] pops a free buffer or answers
//! [`Submit::Full`] at once (the frame is dropped and counted), and the
//! service threads only ever *try* a client's lock, so a thread busy with a
//! client makes the others pick another one. Service threads sleep on a
//! futex (no busy spinning) and look at the stop flag at least every
//! [`POLL`]. It never chooses its threads' scheduling: each thread runs the
//! caller's [`Setup`] hook (join a cell, set a priority) before it serves.
//!
//! Among the clients with a ready frame, a free thread serves the one whose
//! oldest frame has the earliest deadline (the front-end EDF of seed 003).

use super::screen::{composite, Geometry, Rect, Screen, BYTES_PER_PIXEL, MAX_SIDE};
use super::wake::Wake;
use crate::Setup;
use rtrb::{Consumer, Producer, RingBuffer};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_sys::clock::{monotonic_ns, thread_cpu_ns};

/// Longest sleep of a service thread between two looks at the stop flag.
pub const POLL: Duration = Duration::from_millis(50);
/// Most frame slots a client may have.
pub const MAX_SLOTS: usize = 64;

/// The service as a whole.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderConfig {
    pub name: String,
    /// Service threads (at least 1).
    pub threads: usize,
    pub screen_width: usize,
    pub screen_height: usize,
    /// Window size over frame size for windows placed automatically.
    pub scale: f32,
    /// Window opacity: 256 copies the frame, 0 leaves the screen as it is;
    /// in between, each pixel is blended with what is beneath it.
    pub opacity: u16,
}

impl Default for RenderConfig {
    /// "gui": one thread, a 1280×720 screen, windows 1.5 × their frames,
    /// 7/8 opaque.
    fn default() -> RenderConfig {
        RenderConfig {
            name: "gui".into(),
            threads: 1,
            screen_width: 1280,
            screen_height: 720,
            scale: 1.5,
            opacity: 224,
        }
    }
}

/// One client: the size of its frames, its window and its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSpec {
    pub name: String,
    /// Frame size, in pixels.
    pub width: usize,
    pub height: usize,
    /// Frames that can wait to be composited (1–[`MAX_SLOTS`]).
    pub slots: usize,
    /// Where its frames go; `None`: the next free tile, frame × scale.
    pub window: Option<Rect>,
    /// Frames whose times are kept (later ones are counted only).
    pub samples: usize,
}

impl ClientSpec {
    /// Three slots, an automatic window, 65 536 recorded frames.
    pub fn new(name: &str, width: usize, height: usize) -> ClientSpec {
        ClientSpec {
            name: name.into(),
            width,
            height,
            slots: 3,
            window: None,
            samples: 1 << 16,
        }
    }

    /// Bytes of one of its frames.
    pub fn frame_bytes(&self) -> usize {
        self.width * self.height * BYTES_PER_PIXEL
    }
}

/// Why a client or the service was refused.
#[derive(Debug)]
pub enum RenderError {
    /// A client or configuration value is out of range.
    Invalid(String),
    /// A service thread could not be created.
    Spawn(std::io::Error),
}

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenderError::Invalid(why) => write!(f, "render: {why}"),
            RenderError::Spawn(e) => write!(f, "render: cannot start a service thread: {e}"),
        }
    }
}

impl std::error::Error for RenderError {}

/// What [`RenderClient::submit`] did with a frame.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submit {
    /// Queued for compositing.
    Queued,
    /// Every slot was still waiting: the frame was dropped (and counted).
    Full,
}

/// When one frame was made ready and composited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrameSample {
    /// Submitted (`CLOCK_MONOTONIC` ns).
    pub ready_ns: u64,
    /// Composited into the screen.
    pub done_ns: u64,
    /// The deadline the client gave.
    pub deadline_ns: u64,
}

impl FrameSample {
    /// Service time: ready → composited.
    pub fn service_ns(&self) -> u64 {
        self.done_ns.saturating_sub(self.ready_ns)
    }

    /// Composited after its deadline.
    pub fn late(&self) -> bool {
        self.done_ns > self.deadline_ns
    }
}

/// One client over the whole run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientReport {
    pub name: String,
    /// Frames queued (not counting the dropped ones).
    pub submitted: u64,
    pub composited: u64,
    /// Frames refused with [`Submit::Full`].
    pub dropped: u64,
    /// Frames composited after their deadline.
    pub late: u64,
    /// The first composited frames, in the order served.
    pub samples: Vec<FrameSample>,
    /// Composited frames beyond the samples' capacity.
    pub unrecorded: u64,
    pub window: Rect,
}

impl ClientReport {
    /// Frames queued but never composited (the service stopped first).
    pub fn pending(&self) -> u64 {
        self.submitted.saturating_sub(self.composited)
    }
}

/// One service thread over the whole run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ThreadReport {
    /// CPU time it consumed while serving.
    pub cpu_ns: u64,
    /// Wall time it served.
    pub wall_ns: u64,
    /// Frames it composited.
    pub frames: u64,
    /// Its setup failed: it served nothing.
    pub error: Option<String>,
}

/// What the service did, per client and per thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderReport {
    pub name: String,
    pub clients: Vec<ClientReport>,
    pub threads: Vec<ThreadReport>,
}

impl RenderReport {
    pub fn composited(&self) -> u64 {
        self.clients.iter().map(|c| c.composited).sum()
    }

    pub fn dropped(&self) -> u64 {
        self.clients.iter().map(|c| c.dropped).sum()
    }

    pub fn late(&self) -> u64 {
        self.clients.iter().map(|c| c.late).sum()
    }

    /// The frames in one line, e.g. "gui: 60 frames composited (3 late),
    /// 0 dropped" (its threads' CPU time and errors are in `threads`).
    pub fn describe(&self) -> String {
        format!(
            "{}: {} frames composited ({} late), {} dropped",
            self.name,
            self.composited(),
            self.late(),
            self.dropped()
        )
    }
}

/// A frame buffer travelling between a client and the service.
struct Frame {
    pixels: Box<[u8]>,
    ready_ns: u64,
    deadline_ns: u64,
}

/// Counters a client bumps and the report reads.
#[derive(Default)]
struct ClientCounters {
    submitted: AtomicU64,
    dropped: AtomicU64,
}

/// The service's end of one client: what only the thread holding its lock
/// touches.
struct Lane {
    ready: Consumer<Frame>,
    free: Producer<Frame>,
    composited: u64,
    late: u64,
    samples: Vec<FrameSample>,
    unrecorded: u64,
}

impl Lane {
    fn record(&mut self, sample: FrameSample) {
        self.composited += 1;
        self.late += u64::from(sample.late());
        if self.samples.len() < self.samples.capacity() {
            self.samples.push(sample);
        } else {
            self.unrecorded += 1;
        }
    }
}

struct Client {
    name: String,
    slots: usize,
    geometry: Geometry,
    counters: Arc<ClientCounters>,
    lane: Mutex<Lane>,
}

/// What the service threads share.
struct Shared {
    screen: Screen,
    clients: Vec<Client>,
    opacity: u16,
    wake: Arc<Wake>,
    stop: AtomicBool,
    /// Frames that can be waiting at once, all clients together.
    slots: usize,
}

impl Shared {
    /// The client whose oldest ready frame has the earliest deadline, among
    /// those no other thread holds; locked. Never waits for a lock.
    fn pick(&self) -> Option<(usize, MutexGuard<'_, Lane>)> {
        let mut best: Option<(u64, usize, MutexGuard<'_, Lane>)> = None;
        for (index, client) in self.clients.iter().enumerate() {
            let lane = match client.lane.try_lock() {
                Ok(lane) => lane,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => continue,
            };
            if let Ok(frame) = lane.ready.peek() {
                if best.as_ref().is_none_or(|(d, _, _)| frame.deadline_ns < *d) {
                    best = Some((frame.deadline_ns, index, lane));
                }
            }
        }
        best.map(|(_, index, lane)| (index, lane))
    }

    /// Composites one ready frame, if any; whether it did.
    fn serve_one(&self) -> bool {
        let Some((index, mut lane)) = self.pick() else {
            return false;
        };
        let Ok(frame) = lane.ready.pop() else {
            return false;
        };
        composite(
            &frame.pixels,
            &self.clients[index].geometry,
            &self.screen,
            self.opacity,
        );
        lane.record(FrameSample {
            ready_ns: frame.ready_ns,
            done_ns: monotonic_ns(),
            deadline_ns: frame.deadline_ns,
        });
        // The frame goes back to the pool it came from; the pool holds
        // exactly `slots` frames, so the free ring always has room.
        let _ = lane.free.push(frame);
        true
    }

    /// A service thread's life after its setup: serve until stopped, then
    /// composite what is still queued (at most every slot once).
    fn serve(&self) -> u64 {
        let _real_time = tessera_rtguard::RtGuard::enter();
        let mut frames = 0;
        loop {
            let seen = self.wake.seen();
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            if self.serve_one() {
                frames += 1;
            } else {
                self.wake.sleep(seen, POLL);
            }
        }
        for _ in 0..self.slots {
            if !self.serve_one() {
                break;
            }
        }
        frames
    }
}

/// A client's handle: fills free frame buffers and queues them. Owned by
/// one thread (it is `Send`, not `Sync`).
pub struct RenderClient {
    free: Consumer<Frame>,
    ready: Producer<Frame>,
    counters: Arc<ClientCounters>,
    wake: Arc<Wake>,
    width: usize,
    height: usize,
}

impl RenderClient {
    pub fn width(&self) -> usize {
        self.width
    }

    pub fn height(&self) -> usize {
        self.height
    }

    /// Fills a free frame buffer (width × height × 3 bytes, RGB rows) with
    /// `fill` and queues it with its deadline (`CLOCK_MONOTONIC` ns). If
    /// every slot is still waiting, `fill` is not called, the frame is
    /// counted as dropped and [`Submit::Full`] returned at once. Never
    /// allocates, never blocks.
    pub fn submit(&mut self, deadline_ns: u64, fill: impl FnOnce(&mut [u8])) -> Submit {
        let Ok(mut frame) = self.free.pop() else {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return Submit::Full;
        };
        fill(&mut frame.pixels);
        frame.deadline_ns = deadline_ns;
        frame.ready_ns = monotonic_ns();
        // Room is certain: the ready ring holds as many frames as the pool.
        let _ = self.ready.push(frame);
        self.counters.submitted.fetch_add(1, Ordering::Relaxed);
        self.wake.notify_one();
        Submit::Queued
    }

    /// Frames dropped so far because every slot was waiting.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }
}

/// The service before it starts: its configuration and clients.
pub struct Render {
    config: RenderConfig,
    screen: Screen,
    clients: Vec<Client>,
    wake: Arc<Wake>,
}

impl Render {
    /// A service with a black screen and no client yet.
    pub fn new(config: RenderConfig) -> Result<Render, RenderError> {
        if !(1..=MAX_SIDE).contains(&config.screen_width)
            || !(1..=MAX_SIDE).contains(&config.screen_height)
        {
            return Err(RenderError::Invalid(format!(
                "a {}×{} screen (each side 1–{MAX_SIDE})",
                config.screen_width, config.screen_height
            )));
        }
        if !(config.scale > 0.0 && config.scale <= 16.0) {
            return Err(RenderError::Invalid(format!(
                "window scale {} (give (0, 16])",
                config.scale
            )));
        }
        Ok(Render {
            screen: Screen::new(config.screen_width, config.screen_height),
            config,
            clients: Vec::new(),
            wake: Arc::new(Wake::default()),
        })
    }

    /// Registers a client and allocates its frame pool, rings and records;
    /// returns its handle.
    pub fn add_client(&mut self, spec: ClientSpec) -> Result<RenderClient, RenderError> {
        if !(1..=MAX_SIDE).contains(&spec.width) || !(1..=MAX_SIDE).contains(&spec.height) {
            return Err(RenderError::Invalid(format!(
                "client {:?}: {}×{} frames (each side 1–{MAX_SIDE})",
                spec.name, spec.width, spec.height
            )));
        }
        if !(1..=MAX_SLOTS).contains(&spec.slots) {
            return Err(RenderError::Invalid(format!(
                "client {:?}: {} slots (give 1–{MAX_SLOTS})",
                spec.name, spec.slots
            )));
        }
        let rect = spec.window.unwrap_or_else(|| {
            let side = |n: usize| ((n as f32 * self.config.scale) as usize).max(1);
            Rect::tile(
                self.clients.len(),
                side(spec.width),
                side(spec.height),
                (self.screen.width(), self.screen.height()),
            )
        });
        let (mut free_in, free_out) = RingBuffer::new(spec.slots);
        let (ready_in, ready_out) = RingBuffer::new(spec.slots);
        for _ in 0..spec.slots {
            let frame = Frame {
                pixels: vec![0; spec.frame_bytes()].into_boxed_slice(),
                ready_ns: 0,
                deadline_ns: 0,
            };
            let _ = free_in.push(frame);
        }
        let counters = Arc::new(ClientCounters::default());
        self.clients.push(Client {
            name: spec.name.clone(),
            slots: spec.slots,
            geometry: Geometry::new(spec.width, spec.height, rect, &self.screen),
            counters: Arc::clone(&counters),
            lane: Mutex::new(Lane {
                ready: ready_out,
                free: free_in,
                composited: 0,
                late: 0,
                samples: Vec::with_capacity(spec.samples),
                unrecorded: 0,
            }),
        });
        Ok(RenderClient {
            free: free_out,
            ready: ready_in,
            counters,
            wake: Arc::clone(&self.wake),
            width: spec.width,
            height: spec.height,
        })
    }

    /// Starts the service threads; each runs `setup(i)` first (a failed
    /// setup is reported and that thread serves nothing). Returns once every
    /// setup is done.
    pub fn start(
        self,
        mut setup: impl FnMut(usize) -> Setup,
    ) -> Result<RenderService, RenderError> {
        let threads = self.config.threads.max(1);
        let shared = Arc::new(Shared {
            slots: self.clients.iter().map(|c| c.slots).sum(),
            screen: self.screen,
            clients: self.clients,
            opacity: self.config.opacity,
            wake: self.wake,
            stop: AtomicBool::new(false),
        });
        let mut service = RenderService {
            name: self.config.name.clone(),
            shared: Arc::clone(&shared),
            handles: Vec::with_capacity(threads),
        };
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        for i in 0..threads {
            let (shared, hook, ready) = (Arc::clone(&shared), setup(i), ready_tx.clone());
            let spawned = std::thread::Builder::new()
                .name(
                    format!("{}-{i}", self.config.name)
                        .chars()
                        .take(15)
                        .collect(),
                )
                .spawn(move || {
                    let setup_result = hook();
                    let _ = ready.send(());
                    if let Err(e) = setup_result {
                        return ThreadReport {
                            error: Some(format!("setup: {e}")),
                            ..ThreadReport::default()
                        };
                    }
                    let (cpu0, wall0) = (thread_cpu_ns(), monotonic_ns());
                    let frames = shared.serve();
                    ThreadReport {
                        cpu_ns: thread_cpu_ns() - cpu0,
                        wall_ns: monotonic_ns() - wall0,
                        frames,
                        error: None,
                    }
                });
            match spawned {
                Ok(handle) => service.handles.push(handle),
                Err(e) => {
                    service.stop();
                    return Err(RenderError::Spawn(e));
                }
            }
        }
        drop(ready_tx);
        for _ in 0..threads {
            let _ = ready_rx.recv();
        }
        Ok(service)
    }
}

/// The running service.
pub struct RenderService {
    name: String,
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<ThreadReport>>,
}

impl RenderService {
    /// The screen as composited so far.
    pub fn screen(&self) -> &Screen {
        &self.shared.screen
    }

    /// Stops the threads (each composites what is still queued first) and
    /// reports. Returns within [`POLL`] plus the frames left to composite.
    pub fn stop(self) -> RenderReport {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.wake.notify_all();
        let threads = self
            .handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| ThreadReport {
                    error: Some("the service thread panicked".into()),
                    ..ThreadReport::default()
                })
            })
            .collect();
        let clients = self
            .shared
            .clients
            .iter()
            .map(|c| {
                let mut lane = c.lane.lock().unwrap_or_else(|p| p.into_inner());
                ClientReport {
                    name: c.name.clone(),
                    submitted: c.counters.submitted.load(Ordering::Relaxed),
                    composited: lane.composited,
                    dropped: c.counters.dropped.load(Ordering::Relaxed),
                    late: lane.late,
                    samples: std::mem::take(&mut lane.samples),
                    unrecorded: lane.unrecorded,
                    window: c.geometry.rect,
                }
            })
            .collect();
        RenderReport {
            name: self.name,
            clients,
            threads,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_setup(_: usize) -> Setup {
        Box::new(|| Ok(()))
    }

    fn solid(rgb: [u8; 3]) -> impl FnOnce(&mut [u8]) {
        move |pixels: &mut [u8]| {
            for p in pixels.chunks_exact_mut(3) {
                p.copy_from_slice(&rgb);
            }
        }
    }

    fn opaque() -> RenderConfig {
        RenderConfig {
            screen_width: 64,
            screen_height: 48,
            opacity: 256,
            ..RenderConfig::default()
        }
    }

    #[test]
    fn an_opaque_frame_fills_its_window_and_nothing_else() {
        let mut render = Render::new(opaque()).unwrap();
        let mut spec = ClientSpec::new("a", 8, 4);
        spec.window = Some(Rect::new(10, 5, 16, 8));
        let mut client = render.add_client(spec).unwrap();
        assert_eq!(client.submit(u64::MAX, solid([255, 0, 0])), Submit::Queued);
        let service = render.start(no_setup).unwrap();
        let red = 0xffff_0000;
        let give_up = monotonic_ns() + 10_000_000_000;
        while service.screen().pixel(25, 12) != red && monotonic_ns() < give_up {
            std::thread::sleep(Duration::from_millis(1));
        }
        let screen = service.screen();
        assert_eq!(screen.pixel(10, 5), red, "top left of the window");
        assert_eq!(screen.pixel(25, 12), red, "bottom right of the window");
        assert_eq!(screen.pixel(9, 5), 0, "left of it: untouched");
        assert_eq!(screen.pixel(26, 12), 0, "right of it: untouched");
        assert_eq!(screen.pixel(10, 13), 0, "below it: untouched");
        let report = service.stop();
        assert_eq!(report.clients[0].composited, 1);
        assert_eq!(report.clients[0].late, 0);
    }

    #[test]
    fn a_full_ring_answers_full_and_counts_a_drop() {
        let mut render = Render::new(opaque()).unwrap();
        let mut spec = ClientSpec::new("a", 4, 4);
        spec.slots = 2;
        let mut client = render.add_client(spec).unwrap();
        assert_eq!(client.submit(1, solid([1, 2, 3])), Submit::Queued);
        assert_eq!(client.submit(2, solid([1, 2, 3])), Submit::Queued);
        let mut called = false;
        assert_eq!(client.submit(3, |_| called = true), Submit::Full);
        assert!(!called, "a full ring does not ask for the pixels");
        assert_eq!(client.dropped(), 1);
        let report = render.start(no_setup).unwrap().stop();
        let c = &report.clients[0];
        assert_eq!((c.submitted, c.composited, c.dropped), (2, 2, 1));
        assert_eq!(c.late, 2, "deadlines 1 and 2 ns are long past");
        assert_eq!(c.samples.len(), 2);
        assert!(c
            .samples
            .iter()
            .all(|s| s.late() && s.done_ns >= s.ready_ns));
    }

    #[test]
    fn frames_are_served_earliest_deadline_first() {
        let mut render = Render::new(opaque()).unwrap();
        let mut late_client = render.add_client(ClientSpec::new("later", 4, 4)).unwrap();
        let mut urgent = render.add_client(ClientSpec::new("urgent", 4, 4)).unwrap();
        let far = monotonic_ns() + 60_000_000_000;
        assert_eq!(late_client.submit(far + 1, solid([0; 3])), Submit::Queued);
        assert_eq!(urgent.submit(far, solid([0; 3])), Submit::Queued);
        let report = render.start(no_setup).unwrap().stop();
        let done = |i: usize| report.clients[i].samples[0].done_ns;
        assert!(done(1) <= done(0), "the earlier deadline went first");
    }

    #[test]
    fn frames_are_served_while_running_and_slots_are_reused() {
        let mut render = Render::new(RenderConfig {
            threads: 2,
            ..opaque()
        })
        .unwrap();
        let mut client = render.add_client(ClientSpec::new("a", 16, 16)).unwrap();
        let service = render.start(no_setup).unwrap();
        let mut queued = 0;
        let give_up = monotonic_ns() + 10_000_000_000;
        // Ten times the pool: only possible if the service gives slots back.
        while queued < 30 && monotonic_ns() < give_up {
            if client.submit(u64::MAX, solid([9, 9, 9])) == Submit::Queued {
                queued += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let report = service.stop();
        let c = &report.clients[0];
        assert_eq!(c.submitted, queued);
        assert_eq!(c.composited, c.submitted, "{report:?}");
        assert_eq!(
            report.threads.iter().map(|t| t.frames).sum::<u64>(),
            c.composited
        );
        assert!(report.describe().contains("composited"));
    }

    #[test]
    fn failed_setups_are_reported() {
        let render = Render::new(opaque()).unwrap();
        let report = render
            .start(|_| Box::new(|| Err("refused".into())))
            .unwrap()
            .stop();
        assert_eq!(report.threads[0].error.as_deref(), Some("setup: refused"));
        assert_eq!(report.threads[0].frames, 0);
    }

    #[test]
    fn bad_clients_are_refused() {
        let mut render = Render::new(opaque()).unwrap();
        let mut spec = ClientSpec::new("a", 4, 4);
        spec.slots = 0;
        assert!(render.add_client(spec).is_err());
        assert!(render.add_client(ClientSpec::new("b", 0, 4)).is_err());
        assert!(Render::new(RenderConfig {
            screen_width: 0,
            ..RenderConfig::default()
        })
        .is_err());
    }

    #[test]
    fn automatic_windows_are_tiled() {
        let mut render = Render::new(RenderConfig::default()).unwrap();
        for name in ["a", "b", "c", "d"] {
            render.add_client(ClientSpec::new(name, 352, 288)).unwrap();
        }
        let report = render.start(no_setup).unwrap().stop();
        let w: Vec<Rect> = report.clients.iter().map(|c| c.window).collect();
        assert_eq!((w[0].x, w[0].y, w[0].width, w[0].height), (0, 0, 528, 432));
        assert_eq!((w[1].x, w[1].y), (528, 0));
        assert_eq!(
            (w[2].x, w[2].y),
            (0, 720 - 432),
            "the second row overlaps the first"
        );
        assert_eq!(w[2].height, 432);
    }
}
