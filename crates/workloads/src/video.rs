//! A video player, the Group 2 interference of seed 000 §4.1 (Cells D and
//! E) and the client of seed 003's GUI experiments: every 1/fps it reads
//! the next raw YUV 4:2:0 frame (CIF, 352×288, by default) of a large file,
//! converts it to RGB and submits it to its render client, with the
//! frame's deadline (release + period).
//!
//! The file is generated once (a deterministic moving pattern) and reused;
//! streaming it through the page cache into the player's buffer is what
//! evicts the neighbours' cache lines, the interference the seed saw.
//!
//! Per release it measures the response time (release → frame submitted)
//! and counts a miss when that exceeds the period; releases that pass while
//! a frame is late are skipped (the frame is not shown, the video keeps its
//! time base) and take the late frame's end as theirs, as the periodic
//! task's do. It must never pick its scheduling (the setup hook does), and
//! its timed loop never allocates: the file, the buffers and the records
//! are all made before the release.

use crate::periodic::{record, PeriodicStats};
use crate::threads::{LoadReport, LoadThreads, Setup, Span, ThreadWork, Window};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_services::render::{
    ClientSpec, Render, RenderClient, RenderConfig, RenderReport, Submit,
};
use tessera_sys::clock::{monotonic_ns, sleep_monotonic};

/// CIF, the frame size of seeds 000 and 003, and a YUV 4:2:0 frame's
/// bytes: what a scenario's video plays.
pub use tessera_policy::media::{frame_bytes, CIF_HEIGHT, CIF_WIDTH};
/// Records kept for a player that runs until stopped: an hour of frames.
const UNBOUNDED_RECORDS: Duration = Duration::from_secs(3600);

/// One player.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoSpec {
    pub name: String,
    /// Frames per second, in (0, 240].
    pub fps: f64,
    /// Frame size in pixels (both even: 4:2:0 halves the chroma planes).
    pub width: usize,
    pub height: usize,
    /// Frames in the file, played in a loop.
    pub frames: usize,
    /// Where the file is generated (and found again).
    pub dir: PathBuf,
    pub window: Window,
}

impl VideoSpec {
    /// A CIF player at 30 fps over a 300-frame file (10 s, ≈ 45 MB).
    pub fn cif(name: &str, dir: &Path, window: Window) -> VideoSpec {
        VideoSpec {
            name: name.into(),
            fps: 30.0,
            width: CIF_WIDTH,
            height: CIF_HEIGHT,
            frames: 300,
            dir: dir.to_path_buf(),
            window,
        }
    }

    pub fn period(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.fps)
    }

    /// Releases its records have room for.
    pub fn max_releases(&self) -> usize {
        let span = self.window.run_for.unwrap_or(UNBOUNDED_RECORDS);
        (span.as_secs_f64() * self.fps) as usize + 2
    }

    /// The render client it needs: its frame size, three slots, a record
    /// per release.
    pub fn client(&self) -> ClientSpec {
        ClientSpec {
            samples: self.max_releases(),
            ..ClientSpec::new(&self.name, self.width, self.height)
        }
    }

    fn check(&self) -> io::Result<()> {
        let invalid = |why: String| Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        if !(self.fps > 0.0 && self.fps <= 240.0) {
            return invalid(format!("{}: {} fps (give (0, 240])", self.name, self.fps));
        }
        if self.width < 2 || self.height < 2 || self.width % 2 == 1 || self.height % 2 == 1 {
            return invalid(format!(
                "{}: a {}×{} frame (4:2:0 needs even sides of at least 2)",
                self.name, self.width, self.height
            ));
        }
        if self.frames == 0 {
            return invalid(format!("{}: a file of no frames", self.name));
        }
        Ok(())
    }
}

/// Frame `index` of the test video: a moving luma texture with a bright
/// square crossing it and slowly shifting colours.
pub fn write_frame(index: usize, width: usize, height: usize, out: &mut [u8]) {
    let (luma, chroma) = out.split_at_mut(width * height);
    let (u_plane, v_plane) = chroma.split_at_mut((width / 2) * (height / 2));
    let (box_x, box_y, side) = ((index * 4) % width, (index * 3) % height, 48);
    for (y, row) in luma.chunks_exact_mut(width).enumerate() {
        for (x, p) in row.iter_mut().enumerate() {
            let inside = x.wrapping_sub(box_x) < side && y.wrapping_sub(box_y) < side;
            *p = if inside {
                235
            } else {
                16 + (((x + 2 * index) ^ (y + index)) % 220) as u8
            };
        }
    }
    let half = width / 2;
    for (i, (u, v)) in u_plane.iter_mut().zip(v_plane.iter_mut()).enumerate() {
        let (cx, cy) = (i % half, i / half);
        *u = (96 + (cx + index) % 64) as u8;
        *v = (96 + (cy + 2 * index) % 64) as u8;
    }
}

/// The test video of `frames` frames of `width` × `height` in `dir`:
/// generated on the first call, reused while it has the right size. A new
/// file appears whole (written aside, then renamed), so players starting
/// together never read a partial one.
pub fn video_file(dir: &Path, width: usize, height: usize, frames: usize) -> io::Result<PathBuf> {
    static WRITERS: AtomicUsize = AtomicUsize::new(0);
    let bytes = frame_bytes(width, height);
    let path = dir.join(format!("tessera-video-{width}x{height}-{frames}.yuv"));
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == (bytes * frames) as u64) {
        return Ok(path);
    }
    std::fs::create_dir_all(dir)?;
    let aside = path.with_extension(format!(
        "yuv.{}-{}.part",
        std::process::id(),
        WRITERS.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut out = io::BufWriter::with_capacity(1 << 20, File::create(&aside)?);
        let mut frame = vec![0u8; bytes];
        for i in 0..frames {
            write_frame(i, width, height, &mut frame);
            out.write_all(&frame)?;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&aside, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&aside);
    }
    written.map(|()| path)
}

/// One pixel, BT.601 limited range (Y 16–235, chroma 16–240 about 128) to
/// RGB, in integers as decoders do.
pub fn yuv_to_rgb(y: u8, u: u8, v: u8) -> [u8; 3] {
    let c = 298 * (i32::from(y) - 16);
    let (d, e) = (i32::from(u) - 128, i32::from(v) - 128);
    let clamp = |x: i32| ((x + 128) >> 8).clamp(0, 255) as u8;
    [
        clamp(c + 409 * e),
        clamp(c - 100 * d - 208 * e),
        clamp(c + 516 * d),
    ]
}

/// A whole I420 frame to packed RGB rows (`rgb` holds width × height × 3
/// bytes); each chroma sample serves a 2×2 block of luma.
pub fn i420_to_rgb(yuv: &[u8], width: usize, height: usize, rgb: &mut [u8]) {
    let (luma, chroma) = yuv.split_at(width * height);
    let (u_plane, v_plane) = chroma.split_at((width / 2) * (height / 2));
    let half = width / 2;
    for (y, (luma_row, rgb_row)) in luma
        .chunks_exact(width)
        .zip(rgb.chunks_exact_mut(width * 3))
        .take(height)
        .enumerate()
    {
        let u_row = &u_plane[(y / 2) * half..][..half];
        let v_row = &v_plane[(y / 2) * half..][..half];
        for (x, (&l, out)) in luma_row.iter().zip(rgb_row.chunks_exact_mut(3)).enumerate() {
            out.copy_from_slice(&yuv_to_rgb(l, u_row[x / 2], v_row[x / 2]));
        }
    }
}

/// What a player did.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoReport {
    /// CPU time, wall time, frames played (its thread).
    pub load: LoadReport,
    /// Response time of every release (release → submitted), misses
    /// (response > period), skipped releases; deadline = period.
    pub frames: PeriodicStats,
    /// Frames the render service queued.
    pub queued: u64,
    /// Frames the render service refused (every slot was waiting).
    pub refused: u64,
}

/// Everything the player's loop touches, made before its release.
struct Player {
    client: RenderClient,
    file: File,
    yuv: Vec<u8>,
    /// Where frames the service refused are converted all the same.
    scratch: Vec<u8>,
    frames_in_file: u64,
    width: usize,
    height: usize,
    period_ns: u64,
    stats: PeriodicStats,
    queued: u64,
    refused: u64,
}

impl Player {
    fn play(&mut self, span: &Span) -> Result<u64, String> {
        let period = self.period_ns;
        let mut release = monotonic_ns();
        let (mut index, mut played) = (0u64, 0u64);
        while span.running() {
            span.sleep_until(release);
            if !span.running() {
                break;
            }
            let done = tessera_rtguard::rt_section(|| self.frame(index, release))
                .map_err(|e| format!("reading the video file: {e}"))?;
            played += 1;
            record(&mut self.stats, done - release.min(done), period);
            release += period;
            index += 1;
            while release < done {
                record(&mut self.stats, done - release, period);
                self.stats.skipped += 1;
                release += period;
                index += 1;
            }
        }
        Ok(played)
    }

    /// Reads, converts and submits frame `index` released at `release`;
    /// returns when it was submitted.
    fn frame(&mut self, index: u64, release: u64) -> io::Result<u64> {
        let offset = (index % self.frames_in_file) * self.yuv.len() as u64;
        self.file.read_exact_at(&mut self.yuv, offset)?;
        let (yuv, width, height) = (&self.yuv, self.width, self.height);
        let deadline = release + self.period_ns;
        match self
            .client
            .submit(deadline, |rgb| i420_to_rgb(yuv, width, height, rgb))
        {
            Submit::Queued => self.queued += 1,
            Submit::Full => {
                i420_to_rgb(yuv, width, height, &mut self.scratch);
                self.refused += 1;
            }
        }
        Ok(monotonic_ns())
    }
}

/// A player whose thread is set up and waits for [`VideoLoad::start`].
pub struct VideoLoad {
    threads: LoadThreads,
    player: Arc<Mutex<Option<Player>>>,
}

/// Makes (or finds) the video file and starts the player's thread, which
/// runs `setup` and waits for [`VideoLoad::start`]. Units: frames played.
pub fn spawn(spec: &VideoSpec, client: RenderClient, setup: Setup) -> io::Result<VideoLoad> {
    spec.check()?;
    if (client.width(), client.height()) != (spec.width, spec.height) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: {}×{} frames for a {}×{} render client",
                spec.name,
                spec.width,
                spec.height,
                client.width(),
                client.height()
            ),
        ));
    }
    let path = video_file(&spec.dir, spec.width, spec.height, spec.frames)?;
    let period = spec.period();
    let player = Player {
        client,
        file: File::open(&path)?,
        yuv: vec![0; frame_bytes(spec.width, spec.height)],
        scratch: vec![0; spec.width * spec.height * 3],
        frames_in_file: spec.frames as u64,
        width: spec.width,
        height: spec.height,
        period_ns: period.as_nanos() as u64,
        stats: PeriodicStats {
            name: spec.name.clone(),
            response_us: Vec::with_capacity(spec.max_releases()),
            late: 0,
            skipped: 0,
            deadline_us: period.as_secs_f64() * 1e6,
            period_us: period.as_secs_f64() * 1e6,
            setup_error: None,
        },
        queued: 0,
        refused: 0,
    };
    let player = Arc::new(Mutex::new(Some(player)));
    let shared = Arc::clone(&player);
    let mut hook = Some(setup);
    let threads = LoadThreads::spawn(
        &spec.name,
        "frames",
        1,
        spec.window,
        move |_| hook.take().unwrap_or_else(|| Box::new(|| Ok(()))),
        move |_, span| {
            let mut state = shared
                .lock()
                .map_err(|_| "the player's state is poisoned")?;
            let player = state.as_mut().ok_or("the player ran twice")?;
            player.play(span)
        },
    )?;
    Ok(VideoLoad { threads, player })
}

impl VideoLoad {
    /// Releases the player: it starts at `t0_ns` + the window's start.
    pub fn start(&self, t0_ns: u64) {
        self.threads.start(t0_ns);
    }

    /// Asks the player to stop (within [`crate::threads::POLL`] plus a frame).
    pub fn stop(&self) {
        self.threads.stop();
    }

    /// Waits for the player (stopping it first if never started).
    pub fn join(self) -> VideoReport {
        let load = self.threads.join();
        let player = self.player.lock().ok().and_then(|mut p| p.take());
        let (mut frames, queued, refused) = match player {
            Some(p) => (p.stats, p.queued, p.refused),
            None => (
                PeriodicStats {
                    name: load.name.clone(),
                    response_us: Vec::new(),
                    late: 0,
                    skipped: 0,
                    deadline_us: 0.0,
                    period_us: 0.0,
                    setup_error: None,
                },
                0,
                0,
            ),
        };
        frames.setup_error = load
            .errors()
            .iter()
            .find_map(|e| e.strip_prefix("setup: "))
            .map(str::to_string);
        VideoReport {
            load,
            frames,
            queued,
            refused,
        }
    }
}

/// The render service's threads as a load (units: frames composited), so
/// that a gui is reported like every other load.
impl From<&RenderReport> for LoadReport {
    fn from(gui: &RenderReport) -> LoadReport {
        LoadReport {
            name: gui.name.clone(),
            unit: "frames",
            threads: gui
                .threads
                .iter()
                .map(|t| ThreadWork {
                    cpu_ns: t.cpu_ns,
                    wall_ns: t.wall_ns,
                    units: t.frames,
                    error: t.error.clone(),
                })
                .collect(),
        }
    }
}

/// `players` players of `spec` (named "<name>-<i>") into one render
/// service ("gui", default screen) of `gui_threads` threads, nobody's
/// scheduling touched: the gui starts
/// first, the players run their window (which must end) from a common
/// release, then the gui stops and composites what is left.
pub fn play_into_gui(
    spec: &VideoSpec,
    players: usize,
    gui_threads: usize,
) -> Result<(Vec<VideoReport>, RenderReport), String> {
    if spec.window.run_for.is_none() {
        return Err("the players' window must end (give run_for)".into());
    }
    let specs: Vec<VideoSpec> = (0..players)
        .map(|i| VideoSpec {
            name: format!("{}-{i}", spec.name),
            ..spec.clone()
        })
        .collect();
    let mut render = Render::new(RenderConfig {
        threads: gui_threads,
        ..RenderConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let clients = specs
        .iter()
        .map(|s| render.add_client(s.client()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let service = render
        .start(|_| Box::new(|| Ok(())))
        .map_err(|e| e.to_string())?;
    let mut loads = Vec::new();
    for (s, client) in specs.iter().zip(clients) {
        match spawn(s, client, Box::new(|| Ok(()))) {
            Ok(load) => loads.push(load),
            Err(e) => {
                loads.into_iter().for_each(|l: VideoLoad| drop(l.join()));
                drop(service.stop());
                return Err(format!("{}: {e}", s.name));
            }
        }
    }
    let t0 = monotonic_ns() + 20_000_000;
    loads.iter().for_each(|l| l.start(t0));
    let reports: Vec<VideoReport> = loads.into_iter().map(VideoLoad::join).collect();
    // Let the last frames reach the screen before stopping it.
    sleep_monotonic(Duration::from_millis(5));
    Ok((reports, service.stop()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessera-video-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn known_pixels_convert_exactly() {
        assert_eq!(yuv_to_rgb(16, 128, 128), [0, 0, 0], "black");
        assert_eq!(yuv_to_rgb(235, 128, 128), [255, 255, 255], "white");
        assert_eq!(yuv_to_rgb(81, 90, 240), [255, 0, 0], "BT.601 red");
        assert_eq!(yuv_to_rgb(41, 240, 110), [0, 0, 255], "BT.601 blue");
        assert_eq!(yuv_to_rgb(126, 128, 128), [128, 128, 128], "mid grey");
        assert_eq!(yuv_to_rgb(0, 0, 0), [0, 135, 0], "out of range clamps");
    }

    #[test]
    fn a_frame_converts_with_its_chroma_shared_by_2x2_blocks() {
        let (w, h) = (4, 2);
        // Luma: black row above white; chroma: neutral left, red-ish right.
        let mut yuv = vec![16, 16, 16, 16, 235, 235, 235, 235];
        yuv.extend([128, 90]); // U
        yuv.extend([128, 240]); // V
        let mut rgb = vec![0; w * h * 3];
        i420_to_rgb(&yuv, w, h, &mut rgb);
        assert_eq!(&rgb[..3], &[0, 0, 0]);
        assert_eq!(&rgb[12..15], &[255, 255, 255]);
        assert_eq!(&rgb[6..9], &yuv_to_rgb(16, 90, 240), "top right");
        assert_eq!(&rgb[21..24], &yuv_to_rgb(235, 90, 240), "bottom right");
    }

    #[test]
    fn the_file_is_generated_once_with_the_right_size() {
        let dir = temp_dir("file");
        let path = video_file(&dir, 16, 8, 5).unwrap();
        let bytes = frame_bytes(16, 8) as u64;
        assert_eq!(bytes, 16 * 8 * 3 / 2);
        assert_eq!(frame_bytes(CIF_WIDTH, CIF_HEIGHT), 152_064);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 5 * bytes);
        // Frames differ (the pattern moves) and are deterministic.
        let data = std::fs::read(&path).unwrap();
        assert_ne!(
            data[..bytes as usize],
            data[bytes as usize..2 * bytes as usize]
        );
        let mut frame = vec![0; bytes as usize];
        write_frame(3, 16, 8, &mut frame);
        assert_eq!(frame[..], data[3 * bytes as usize..4 * bytes as usize]);
        // Reused as it is: a changed byte survives the next call.
        let mut marked = data.clone();
        marked[0] ^= 0xff;
        std::fs::write(&path, &marked).unwrap();
        assert_eq!(video_file(&dir, 16, 8, 5).unwrap(), path);
        assert_eq!(std::fs::read(&path).unwrap(), marked);
        // The wrong size is regenerated.
        std::fs::write(&path, b"short").unwrap();
        video_file(&dir, 16, 8, 5).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), data);
        let leftovers = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(leftovers, 1, "no partial file is left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_specs_are_refused() {
        let dir = temp_dir("bad");
        let mut render = Render::new(RenderConfig::default()).unwrap();
        let good = VideoSpec::cif("v", &dir, Window::always());
        for bad in [
            VideoSpec {
                fps: 0.0,
                ..good.clone()
            },
            VideoSpec {
                fps: 241.0,
                ..good.clone()
            },
            VideoSpec {
                width: 351,
                ..good.clone()
            },
            VideoSpec {
                frames: 0,
                ..good.clone()
            },
        ] {
            let client = render.add_client(good.client()).unwrap();
            let e = spawn(&bad, client, Box::new(|| Ok(())))
                .err()
                .expect("refused");
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        }
        let small = render.add_client(ClientSpec::new("s", 16, 16)).unwrap();
        assert!(spawn(&good, small, Box::new(|| Ok(()))).is_err());
    }

    #[test]
    fn a_failed_setup_plays_nothing() {
        let dir = temp_dir("setup");
        let spec = VideoSpec {
            frames: 2,
            ..VideoSpec::cif("v", &dir, Window::lasting(Duration::from_millis(100)))
        };
        let mut render = Render::new(RenderConfig::default()).unwrap();
        let client = render.add_client(spec.client()).unwrap();
        let load = spawn(&spec, client, Box::new(|| Err("refused".into()))).unwrap();
        load.start(monotonic_ns());
        let report = load.join();
        assert_eq!(report.frames.setup_error.as_deref(), Some("refused"));
        assert_eq!(report.frames.released(), 0);
        assert_eq!(report.load.units(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
