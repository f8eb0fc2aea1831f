//! Seed 003 §5 as a scenario's subject: the render service (`tessera serve
//! render`) or its single-threaded baseline (`--baseline`) as a process of
//! its own, and the configuration's video players (`tessera render play`),
//! a process each, all started at the release: they connect, probe and
//! agree their SLAs during the warm-up and play from one common instant
//! after it (the seed's synchronised arrivals). Reported per group of
//! players: t_fb − t_req of every frame (a histogram, a series per player,
//! misses against the next release), each player's min/mean/p99/max,
//! counters and SLA in a note; and a report section with the seed's
//! Figures 6–9 as tables (each client's min, mean and max, the misses of
//! each group marked), the ratio of the mean service time on 2 cores to 1,
//! one client against many, each client's range as a plot and the
//! distribution of the service times (CDF) per configuration.
//!
//! Owns the processes of one configuration: started with their logs in a
//! private temporary directory (removed after), stopped by the PIDs it
//! started (SIGTERM, then SIGKILL after a grace time) however the run
//! ends; a player still running [`PATIENCE`] after its last frame was due
//! is killed; the server's cells are checked gone from the broker once it
//! has exited (destroyed, and said so, if not). The server joins the
//! broker the runner uses (its cells must share one ledger with the
//! scenario's: the cpuset layout is the machine's), under a name of its
//! own. It must never judge a result, signal a process it did not start,
//! or leave a process, a cell or a file behind.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::runner::{latency_histogram, setup_for};
use crate::servers::{await_ready, log_tail, program_beside_us, spawn_after, unique, OwnedChild};
use tessera_broker::Session;
use tessera_measure::plot::{self, Labelled, RangeBar, RangeGroup, RangePanel};
use tessera_measure::{Metric, RunResults, Series, Summary};
use tessera_scenario::{
    Configuration, PlayerGroup, RenderServer, RenderSettings, Scenario, Subject,
};
use tessera_services::render::client;
use tessera_services::render::wire::{ClientStatus, ServerKind, Status};
use tessera_sys::clock::monotonic_ns;
use tessera_workloads::render_player::PlayerReport;

/// The metric of a group's frames: "service time (t_fb − t_req) of NAME".
pub const METRIC_PREFIX: &str = "service time (t_fb − t_req) of ";
/// How long a process may take to exit after SIGTERM.
const GRACE: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(20);
/// How long a player waits for its last frames (the player's own drain).
const PLAYER_DRAIN: Duration = Duration::from_secs(5);
/// How long after its last frame and drain a player is waited for.
const PATIENCE: Duration = Duration::from_secs(30);
/// How often the server's status is read while the players play.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// A player that starts this much after the common start is reported late.
const LATE_START: Duration = Duration::from_millis(1);
/// Note prefixes the report section reads.
const RENDER_NOTE: &str = "render: ";
const GROUP_NOTE: &str = "group ";
const PLAYER_NOTE: &str = "player ";

/// A temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One player process.
struct Player {
    group: usize,
    name: String,
    child: OwnedChild,
    out: PathBuf,
    log: PathBuf,
}

/// The server and the players of one configuration, running.
pub(crate) struct RenderRun {
    /// Declared before `dir`: stopped before its directory goes.
    server: OwnedChild,
    players: Vec<Player>,
    dir: TempDir,
    name: String,
    socket: PathBuf,
    summary: String,
    settings: RenderSettings,
    groups: Vec<PlayerGroup>,
    /// CPUs the server's reservations or thread may use.
    cores: usize,
    warmup: Duration,
    start_at: u64,
    watch: Option<Watch>,
}

/// What the configuration measured.
pub(crate) struct RenderData {
    settings: RenderSettings,
    groups: Vec<PlayerGroup>,
    cores: usize,
    summary: String,
    start_at: u64,
    /// Per player: its group's index, name, and report or why none.
    reports: Vec<(usize, String, Result<PlayerReport, String>)>,
    seen: Seen,
    notes: Vec<String>,
}

impl RenderRun {
    /// Starts the server and waits until it answers; the players start at
    /// the release.
    pub(crate) fn start(scenario: &Scenario, config: &Configuration) -> Result<RenderRun, String> {
        let Subject::Render(subject) = &scenario.subject else {
            unreachable!("called for render subjects only")
        };
        let settings = config
            .render
            .clone()
            .expect("validated for render subjects");
        let dir = TempDir(std::env::temp_dir().join(unique("tessera-render")));
        std::fs::create_dir_all(&dir.0).map_err(|e| format!("{}: {e}", dir.0.display()))?;
        let name = unique("render");
        let socket = dir.0.join("render.sock");
        let log = dir.0.join("server.log");
        // A server orphaned by a runner that died still stops by itself.
        let lifetime = scenario.total() + PLAYER_DRAIN + PATIENCE + Duration::from_secs(60);
        let mut command = Command::new(program_beside_us("tessera"));
        command
            .args(["serve", "render", "--name", &name, "--socket"])
            .arg(&socket)
            .args([
                "--screen",
                &format!("{}x{}", subject.screen.0, subject.screen.1),
                "--scale",
                &settings.scale.to_string(),
                "--seconds",
                &lifetime.as_secs().to_string(),
            ]);
        match settings.server {
            RenderServer::Baseline => command.arg("--baseline"),
            RenderServer::Service => command.args([
                "--best-effort",
                &format!("{}%", settings.best_effort),
                "--probing",
                &format!("{}%", settings.probing),
            ]),
        };
        if let Some(cores) = &settings.cores {
            command.args(["--cores", &cpu_list(cores)]);
        }
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        // The baseline in a cell starts there: its thread's affinity must
        // lie within the cell's cpuset from the first instant.
        let build = "build it: cargo build -p tessera-cli";
        let child = spawn_after(&mut command, setup_for(&config.subject, None), build)?;
        let online = tessera_sys::kernel::online_cpus().map_or(1, |c| c.len());
        let mut run = RenderRun {
            server: OwnedChild::new(child, "the render server", GRACE),
            players: Vec::new(),
            dir,
            name,
            socket,
            summary: String::new(),
            cores: settings.cores.as_ref().map_or(online, Vec::len),
            groups: settings.players(subject),
            settings,
            warmup: scenario.warmup,
            start_at: 0,
            watch: None,
        };
        run.summary = await_summary(&mut run.server, &run.socket, &log)?;
        Ok(run)
    }

    /// Starts every player, to play from the release plus the warm-up.
    pub(crate) fn release(&mut self, t0: u64) -> Result<(), String> {
        self.start_at = t0 + self.warmup.as_nanos() as u64;
        for (index, group) in self.groups.iter().enumerate() {
            for i in 0..group.count {
                let player = self.spawn_player(index, group, group.player(i))?;
                self.players.push(player);
            }
        }
        self.watch = Some(Watch::start(self.socket.clone()));
        Ok(())
    }

    fn spawn_player(
        &self,
        group_index: usize,
        group: &PlayerGroup,
        name: String,
    ) -> Result<Player, String> {
        let out = self.dir.0.join(format!("{name}.json"));
        let log = self.dir.0.join(format!("{name}.log"));
        let file = |path: &Path| {
            std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))
        };
        let mut command = Command::new(program_beside_us("tessera"));
        command
            .args(["render", "play", "--json", "--socket"])
            .arg(&self.socket)
            .args([
                "--player",
                &name,
                "--fps",
                &group.fps.to_string(),
                "--frames",
                &group.frames.to_string(),
                "--spin",
                &format!("{}ns", group.spin.as_nanos()),
                "--probes",
                &group.probes.to_string(),
                "--outstanding",
                &group.outstanding.to_string(),
                "--start-at",
                &self.start_at.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(file(&out)?)
            .stderr(file(&log)?);
        let child = command
            .spawn()
            .map_err(|e| format!("starting `tessera render play` for {name}: {e}"))?;
        Ok(Player {
            group: group_index,
            child: OwnedChild::new(child, format!("player {name}"), GRACE),
            name,
            out,
            log,
        })
    }

    /// Waits for the players' reports, stops the server and checks that
    /// its cells are gone.
    pub(crate) fn finish(mut self) -> RenderData {
        let last_frame = self.groups.iter().map(PlayerGroup::play_time).max();
        let due = (self.start_at + last_frame.unwrap_or_default().as_nanos() as u64)
            .saturating_sub(monotonic_ns());
        let give_up = Instant::now() + Duration::from_nanos(due) + PLAYER_DRAIN + PATIENCE;
        let reports = std::mem::take(&mut self.players)
            .into_iter()
            .map(|mut p| {
                let report = match p.child.wait_until(give_up) {
                    Some(status) => read_report(&p.out, &p.log, status),
                    None => Err(format!(
                        "no report: still running {PATIENCE:?} after its last frame was due ({})",
                        p.child.stop()
                    )),
                };
                (p.group, p.name, report)
            })
            .collect();
        let seen = self.watch.take().map(Watch::finish).unwrap_or_default();
        let pid = self.server.pid();
        let mut notes = vec![self.server.stop()];
        notes.push(cells_left(&format!("{}-{pid}-", self.name)));
        RenderData {
            settings: self.settings,
            groups: self.groups,
            cores: self.cores,
            summary: self.summary,
            start_at: self.start_at,
            reports,
            seen,
            notes,
        }
    }
}

fn cpu_list(cores: &[usize]) -> String {
    cores
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn status(socket: &Path) -> Result<Status, String> {
    client::connect(socket)
        .and_then(client::status)
        .map_err(|e| e.to_string())
}

/// Waits until the server answers at `socket` and has printed its summary
/// line (it prints it once registered); the line, or the log's end.
fn await_summary(server: &mut OwnedChild, socket: &Path, log: &Path) -> Result<String, String> {
    let summary = || {
        std::fs::read_to_string(log)
            .ok()
            .and_then(|t| t.lines().next().map(str::to_string))
            .filter(|l| l.contains("(pid "))
    };
    let ready = || summary().is_some() && status(socket).is_ok();
    await_ready(server, log, "the render server", ready)?;
    Ok(summary().unwrap_or_default())
}

/// A player's JSON report, or what its log says.
fn read_report(
    out: &Path,
    log: &Path,
    status: std::process::ExitStatus,
) -> Result<PlayerReport, String> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    serde_json::from_str::<PlayerReport>(&text)
        .map_err(|e| format!("no report ({status}; {e}): {}", log_tail(log)))
}

/// Whether cells named `prefix…` are left in the broker; any left are
/// destroyed (the server owned them, and it is gone).
fn cells_left(prefix: &str) -> String {
    let mut session = match Session::connect() {
        Ok(s) => s,
        Err(e) => return format!("its cells could not be checked: {e}"),
    };
    let left: Vec<String> = match session.list() {
        Ok(cells) => cells
            .into_iter()
            .map(|c| c.name)
            .filter(|n| n.starts_with(prefix))
            .collect(),
        Err(e) => return format!("its cells could not be checked: {e}"),
    };
    if left.is_empty() {
        return format!("its cells ({prefix}…) are gone");
    }
    let failed: Vec<String> = left
        .iter()
        .filter_map(|n| session.destroy_cell(n).err().map(|e| format!("{n}: {e}")))
        .collect();
    format!(
        "cells left by the server after it exited: {left:?}; destroyed by the runner{}",
        match failed.as_slice() {
            [] => String::new(),
            f => format!(", except {}", f.join(", ")),
        }
    )
}

/// The server's status read every [`WATCH_EVERY`] while the players play:
/// what the SLAs held once all had agreed, and each client's last counters.
struct Watch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Seen>,
}

#[derive(Default)]
struct Seen {
    /// The status with the most clients holding an SLA.
    agreed: Option<Status>,
    /// Each client's latest counters, by name.
    clients: BTreeMap<String, ClientStatus>,
    error: Option<String>,
}

impl Watch {
    fn start(socket: PathBuf) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Seen::default();
            let slas = |s: &Status| {
                s.clients
                    .iter()
                    .filter(|c| c.share != "best-effort")
                    .count()
            };
            while !flag.load(Ordering::Relaxed) {
                match status(&socket) {
                    Ok(s) => {
                        for c in &s.clients {
                            seen.clients.insert(c.name.clone(), c.clone());
                        }
                        if seen.agreed.as_ref().is_none_or(|a| slas(&s) > slas(a)) {
                            seen.agreed = Some(s);
                        }
                    }
                    Err(e) => seen.error = Some(e),
                }
                let until = Instant::now() + WATCH_EVERY;
                while !flag.load(Ordering::Relaxed) && Instant::now() < until {
                    std::thread::sleep(POLL * 5);
                }
            }
            seen
        });
        Watch { stop, thread }
    }

    fn finish(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// What the report says of a configuration's server and players.
#[derive(Debug, Clone, PartialEq)]
struct ConfigRow {
    server: String,
    cores: usize,
    /// The groups that played and how many players each: "cheap ×8".
    players: String,
}

impl ConfigRow {
    fn note(&self, settings: &RenderSettings, where_: &str) -> String {
        let shares = match settings.server {
            RenderServer::Service => format!(
                "shares: best-effort {} %, probing {} %; ",
                settings.best_effort, settings.probing
            ),
            RenderServer::Baseline => String::new(),
        };
        format!(
            "{RENDER_NOTE}{} on {} core{} ({where_}); players: {}; {shares}window scale {}",
            self.server,
            self.cores,
            if self.cores == 1 { "" } else { "s" },
            self.players,
            settings.scale
        )
    }

    fn parse(note: &str) -> Option<ConfigRow> {
        let rest = note.strip_prefix(RENDER_NOTE)?;
        let (server, rest) = rest.split_once(" on ")?;
        let (cores, rest) = rest.split_once(" core")?;
        let players = rest.split_once("; players: ")?.1.split(';').next()?;
        Some(ConfigRow {
            server: server.into(),
            cores: cores.parse().ok()?,
            players: players.into(),
        })
    }
}

/// A group's totals.
#[derive(Debug, Clone, PartialEq)]
struct GroupRow {
    name: String,
    count: usize,
    fps: f64,
    spin_us: f64,
    frames: usize,
    shown: usize,
    missed: usize,
    /// Shown frames whose service time exceeded the deadline (the period):
    /// the seed's measure, without a player's own late sends.
    slow: usize,
}

impl GroupRow {
    fn note(&self, group: &PlayerGroup, late: usize, not_sent: usize, lost: usize) -> String {
        format!(
            "{GROUP_NOTE}{}: players {}, fps {}, spin_us {}, probes {}, outstanding {}; frames \
             {}, shown {}, missed {}, service over the deadline slow {}; missed {:.3} %: {late} \
             shown after the next release, {not_sent} not sent, {lost} lost",
            self.name,
            self.count,
            self.fps,
            self.spin_us,
            group.probes,
            group.outstanding,
            self.frames,
            self.shown,
            self.missed,
            self.slow,
            percent(self.missed, self.frames)
        )
    }

    fn parse(note: &str) -> Option<GroupRow> {
        let (name, rest) = note.strip_prefix(GROUP_NOTE)?.split_once(": ")?;
        let f = fields(rest);
        Some(GroupRow {
            name: name.into(),
            count: number(&f, "players")?,
            fps: number(&f, "fps")?,
            spin_us: number(&f, "spin_us")?,
            frames: number(&f, "frames")?,
            shown: number(&f, "shown")?,
            missed: number(&f, "missed")?,
            slow: number(&f, "slow")?,
        })
    }

    fn period_ms(&self) -> f64 {
        1e3 / self.fps
    }
}

/// A player's counters and service times.
#[derive(Debug, Clone, PartialEq)]
struct PlayerRow {
    name: String,
    group: String,
    frames: usize,
    shown: usize,
    late: usize,
    not_sent: usize,
    lost: usize,
    missed: usize,
    /// Service times of its shown frames, ms.
    min: f64,
    mean: f64,
    p99: f64,
    max: f64,
    /// The SLA's service-time bound (ms) and the frames over it.
    bound: Option<(f64, usize)>,
    /// The server's CPU time per frame, mean (ms).
    cpu: f64,
    /// How long after the common start it started playing (ms).
    started_ms: f64,
    sla: String,
}

impl PlayerRow {
    fn of(group: &str, report: &PlayerReport, start_at: u64) -> PlayerRow {
        let bound = report.offer.as_ref().and_then(|o| {
            let ns = o.service_time_ns.first()?.service_time_ns;
            let over = report.service_ns.iter().filter(|&&s| s > ns).count();
            Some((ns as f64 / 1e6, over))
        });
        let ms = |us: f64| us / 1e3;
        PlayerRow {
            name: report.name.clone(),
            group: group.into(),
            frames: report.frames,
            shown: report.shown,
            late: report.late,
            not_sent: report.not_sent,
            lost: report.lost,
            missed: report.misses,
            min: ms(report.times.min_us),
            mean: ms(report.times.mean_us),
            p99: ms(report.times.p99_us),
            max: ms(report.times.max_us),
            bound,
            cpu: ms(report.cpu_mean_us),
            started_ms: report.started_ns.saturating_sub(start_at) as f64 / 1e6,
            sla: report.sla_note.clone(),
        }
    }

    fn note(&self) -> String {
        let bound = match self.bound {
            Some((ms, over)) => format!("bound {ms:.3}, over {over}"),
            None => "bound –, over –".into(),
        };
        format!(
            "{PLAYER_NOTE}{} (group {}): frames {}, shown {}, late {}, not sent {}, lost {}, \
             missed {}; ms min {:.3}, mean {:.3}, p99 {:.3}, max {:.3}, {bound}; server CPU per \
             frame cpu_ms {:.3}; started_ms {:.1}; SLA: {}",
            self.name,
            self.group,
            self.frames,
            self.shown,
            self.late,
            self.not_sent,
            self.lost,
            self.missed,
            self.min,
            self.mean,
            self.p99,
            self.max,
            self.cpu,
            self.started_ms,
            self.sla
        )
    }

    fn parse(note: &str) -> Option<PlayerRow> {
        let (head, rest) = note.strip_prefix(PLAYER_NOTE)?.split_once(": ")?;
        let (name, group) = head.split_once(" (group ")?;
        let (numbers, sla) = rest.split_once("; SLA: ")?;
        let f = fields(numbers);
        let bound = match (number(&f, "bound"), number(&f, "over")) {
            (Some(ms), Some(over)) => Some((ms, over)),
            _ => None,
        };
        Some(PlayerRow {
            name: name.into(),
            group: group.strip_suffix(')')?.into(),
            frames: number(&f, "frames")?,
            shown: number(&f, "shown")?,
            late: number(&f, "late")?,
            not_sent: number(&f, "sent")?,
            lost: number(&f, "lost")?,
            missed: number(&f, "missed")?,
            min: number(&f, "min")?,
            mean: number(&f, "mean")?,
            p99: number(&f, "p99")?,
            max: number(&f, "max")?,
            bound,
            cpu: number(&f, "cpu_ms")?,
            started_ms: number(&f, "started_ms")?,
            sla: sla.into(),
        })
    }
}

/// "key value" pairs of a note, split at commas and semicolons; the key
/// is the word before the value.
fn fields(text: &str) -> Vec<(&str, &str)> {
    text.split([',', ';'])
        .filter_map(|part| part.trim().rsplit_once(' '))
        .map(|(key, value)| (key.rsplit(' ').next().unwrap_or(key), value))
        .collect()
}

fn number<T: std::str::FromStr>(fields: &[(&str, &str)], key: &str) -> Option<T> {
    fields.iter().find(|(k, _)| *k == key)?.1.parse().ok()
}

fn percent(part: usize, whole: usize) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

/// Each group's metric and the configuration's notes.
pub(crate) fn metrics(data: RenderData) -> (Vec<Metric>, Vec<String>) {
    let where_ = match (&data.settings.cores, data.settings.server) {
        (Some(c), RenderServer::Service) => format!("CPU {}, partitioned", cpu_list(c)),
        (None, RenderServer::Service) => "global EDF on the shared CPUs".into(),
        (Some(c), RenderServer::Baseline) => format!("its thread pinned to CPU {}", cpu_list(c)),
        (None, RenderServer::Baseline) => "its thread on any CPU".into(),
    };
    let row = ConfigRow {
        server: data.settings.server.name().into(),
        cores: data.cores,
        players: data
            .groups
            .iter()
            .map(|g| format!("{} ×{}", g.name, g.count))
            .collect::<Vec<_>>()
            .join(" + "),
    };
    let mut notes = vec![
        row.note(&data.settings, &where_),
        format!("server: {}", data.summary),
    ];
    if let Some(s) = data
        .seen
        .agreed
        .as_ref()
        .filter(|s| s.server == ServerKind::Render)
    {
        notes.push(agreed_note(s));
    }
    let mut metrics = Vec::new();
    let mut player_notes = Vec::new();
    for (index, group) in data.groups.iter().enumerate() {
        let reports: Vec<(&String, &Result<PlayerReport, String>)> = data
            .reports
            .iter()
            .filter(|(g, _, _)| *g == index)
            .map(|(_, name, r)| (name, r))
            .collect();
        let ok: Vec<&PlayerReport> = reports
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok())
            .collect();
        for (name, report) in &reports {
            match report {
                Ok(r) => {
                    let mut note = PlayerRow::of(&group.name, r, data.start_at).note();
                    if let Some(c) = data.seen.clients.get(*name) {
                        let _ = write!(note, "; server's count: {} throttled", c.throttled);
                    }
                    player_notes.push(note);
                }
                Err(e) => player_notes.push(format!("{name}: {e}")),
            }
        }
        let sum = |f: fn(&PlayerReport) -> usize| ok.iter().map(|r| f(r)).sum::<usize>();
        let planned = group.frames * group.count;
        let row = GroupRow {
            name: group.name.clone(),
            count: group.count,
            fps: group.fps,
            spin_us: group.spin.as_secs_f64() * 1e6,
            frames: planned,
            shown: sum(|r| r.shown),
            // A player without a report missed every frame.
            missed: sum(|r| r.misses) + group.frames * (group.count - ok.len()),
            slow: ok
                .iter()
                .flat_map(|r| &r.service_ns)
                .filter(|&&ns| ns > group.period().as_nanos() as u64)
                .count(),
        };
        notes.push(row.note(group, sum(|r| r.late), sum(|r| r.not_sent), sum(|r| r.lost)));
        notes.push(send_delay_note(group, &ok));
        metrics.push(group_metric(group, &ok, data.start_at));
    }
    let late: Vec<String> = data
        .reports
        .iter()
        .filter_map(|(_, name, r)| {
            let r = r.as_ref().ok()?;
            let by = r.started_ns.saturating_sub(data.start_at);
            (by > LATE_START.as_nanos() as u64).then(|| format!("{name} +{:.2} s", by as f64 / 1e9))
        })
        .collect();
    if !late.is_empty() {
        notes.push(format!(
            "started after the common start (probing and agreeing outlasted the warm-up; give a \
             longer warmup): {}",
            late.join(", ")
        ));
    }
    notes.extend(player_notes);
    if let Some(e) = &data.seen.error {
        notes.push(format!("the server's status, last failure: {e}"));
    }
    notes.extend(data.notes);
    (metrics, notes)
}

fn agreed_note(s: &Status) -> String {
    let shares: Vec<String> = s
        .clients
        .iter()
        .map(|c| format!("{} {}", c.name, c.share))
        .collect();
    format!(
        "SLAs held {:.3} of {:.3} cores at their most; {}",
        s.committed_cores,
        s.capacity_cores,
        shares.join("; ")
    )
}

/// How late the group's players sent their frames after their releases
/// (t_req − release; a frame's release is the last one before it was
/// sent, exact for delays under a period): a player's own lateness, which
/// counts against its deadline but not in the service time.
fn send_delay_note(group: &PlayerGroup, reports: &[&PlayerReport]) -> String {
    let period = group.period().as_nanos() as u64;
    let mut delays: Vec<u64> = reports
        .iter()
        .flat_map(|r| {
            r.sent_ns
                .iter()
                .map(|&t| t.saturating_sub(r.started_ns) % period)
        })
        .collect();
    delays.sort_unstable();
    let at = |q: f64| {
        let i = ((delays.len().max(1) - 1) as f64 * q).round() as usize;
        delays.get(i).map_or(0.0, |&ns| ns as f64 / 1e6)
    };
    let over = |ms: u64| delays.iter().filter(|&&d| d > ms * 1_000_000).count();
    format!(
        "{} sent its frames after their releases by p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; \
         {} frames over 1 ms late, {} over 5 ms (the players' own lateness, SCHED_OTHER \
         processes beside the server: it counts against their deadlines, not in the service \
         time)",
        group.name,
        at(0.5),
        at(0.99),
        at(1.0),
        over(1),
        over(5)
    )
}

/// A group's service times: exact summary, every frame in the histogram, a
/// series per player against the time since the common start.
fn group_metric(group: &PlayerGroup, reports: &[&PlayerReport], start_at: u64) -> Metric {
    let samples: Vec<u64> = reports
        .iter()
        .flat_map(|r| r.service_ns.iter().copied())
        .collect();
    let us: Vec<f64> = samples.iter().map(|&v| v as f64 / 1e3).collect();
    let deadline_us = group.period().as_nanos() as f64 / 1e3;
    let series = reports
        .iter()
        .map(|r| {
            let mut s = Series::with_capacity(r.name.clone(), "ms", r.service_ns.len());
            for (&sent, &service) in r.sent_ns.iter().zip(&r.service_ns) {
                let t = sent as f64 / 1e9 - start_at as f64 / 1e9;
                s.push(t, service as f64 / 1e6);
            }
            s
        })
        .collect();
    Metric {
        summary: Summary::from_samples(&us, Some(deadline_us)),
        series,
        ..Metric::latency(
            format!("{METRIC_PREFIX}{}", group.name),
            Some(deadline_us),
            latency_histogram(samples.into_iter()),
        )
    }
}

/// A configuration as the report section reads it back.
struct Configured<'a> {
    name: &'a str,
    row: ConfigRow,
    groups: Vec<GroupRow>,
    players: Vec<PlayerRow>,
}

impl Configured<'_> {
    /// Mean service time of every shown frame, ms.
    fn mean(&self) -> f64 {
        let shown: usize = self.players.iter().map(|p| p.shown).sum();
        let total: f64 = self.players.iter().map(|p| p.mean * p.shown as f64).sum();
        total / shown.max(1) as f64
    }

    /// The server's mean CPU time per frame shown, ms.
    fn cpu(&self) -> f64 {
        let shown: usize = self.players.iter().map(|p| p.shown).sum();
        let total: f64 = self.players.iter().map(|p| p.cpu * p.shown as f64).sum();
        total / shown.max(1) as f64
    }
}

fn configured(results: &RunResults) -> Vec<Configured<'_>> {
    results
        .configurations
        .iter()
        .filter_map(|c| {
            let row = c.notes.iter().find_map(|n| ConfigRow::parse(n))?;
            Some(Configured {
                name: &c.name,
                row,
                groups: c.notes.iter().filter_map(|n| GroupRow::parse(n)).collect(),
                players: c.notes.iter().filter_map(|n| PlayerRow::parse(n)).collect(),
            })
        })
        .collect()
}

/// The seed's finding for configurations of these groups.
fn seed_finding(groups: &[GroupRow]) -> Option<&'static str> {
    let players: usize = groups.iter().map(|g| g.count).sum();
    let cheap = groups.iter().all(|g| g.spin_us == 0.0);
    let rates = (
        groups.iter().any(|g| g.fps == 30.0),
        groups.iter().any(|g| g.fps == 60.0),
    );
    Some(match (rates, cheap, players) {
        ((true, true), false, _) => {
            "Seed Fig. 9 (4 players at 30 fps and 4 at 60 fps, expensive requests): Nano-X on \
             Linux and on Tessellation missed at least 50 % of the 60 fps players' deadlines; \
             GuiServ, moving CPU bandwidth from the 30 fps to the 60 fps players, almost none on \
             one hardware thread, and none with more."
        }
        ((true, false), true, 1) => {
            "Seed §5.1, one player, inexpensive requests: Nano-X/Linux mean 0.271 ms (min \
             0.242, max 0.443), Nano-X/Tess 0.255 (0.252, 0.298), GuiServ 0.891 (0.395, 1.391) \
             — its front-end polled every millisecond, adding ~0.5 ms on average."
        }
        ((true, false), true, 8) => {
            "Seed Fig. 6 (8 players, inexpensive requests): Nano-X/Linux had the largest means \
             and ranges; GuiServ and Nano-X/Tess stable service times with little variation; \
             GuiServ's means rise along the order in which the clients send, one step per \
             hardware thread."
        }
        ((true, false), false, 4) => {
            "Seed Fig. 7 (4 players, expensive requests): on one hardware thread all display \
             systems alike; GuiServ's mean halved each time its hardware threads doubled."
        }
        ((true, false), false, 8) => {
            "Seed Fig. 8 (8 players, expensive requests; one hardware thread overloaded): \
             Nano-X/Linux varied widely, GuiServ and Nano-X/Tess stayed stable; GuiServ's mean \
             halved each time its hardware threads doubled; missed deadlines boxed per group."
        }
        _ => return None,
    })
}

/// The report's render section: the seed's Figures 6–9 as tables and
/// plots, the 2-core/1-core ratio, one client against many, and the CDFs.
/// Empty for other runs.
pub fn report_section(results: &RunResults, dir: &Path) -> Result<String, String> {
    let all = configured(results);
    if all.is_empty() {
        return Ok(String::new());
    }
    let mut text = String::from(
        "\n## Render service: seed 003 §5\n\n\
         Service time t_fb − t_req of every frame a player showed, in ms. Each cell: a \
         client's mean (min–max). Per group, **marked** when any: *missed* — frames shown \
         after the player's next release, not sent (all its slots in flight) or never shown, \
         as the player counts them (a frame the player itself sent late counts too); \
         *service time > deadline* — frames whose t_fb − t_req exceeded the period, the \
         seed's measure (the tables above count these).\n",
    );
    let mut signatures: Vec<&str> = Vec::new();
    for c in &all {
        if !signatures.contains(&c.row.players.as_str()) {
            signatures.push(&c.row.players);
        }
    }
    for (i, signature) in signatures.iter().enumerate() {
        let figure: Vec<&Configured> = all.iter().filter(|c| c.row.players == *signature).collect();
        text.push_str(&figure_section(&figure, signature, dir, i)?);
    }
    text.push_str(&ratio_section(&all));
    text.push_str(&alone_section(&all));
    text.push_str(&cdf_section(results, dir)?);
    Ok(text)
}

fn figure_section(
    figure: &[&Configured],
    signature: &str,
    dir: &Path,
    index: usize,
) -> Result<String, String> {
    let first = figure[0];
    let mut text = format!("\n### {signature}\n\n");
    if let Some(seed) = seed_finding(&first.groups) {
        let _ = writeln!(text, "{seed}\n");
    }
    let names: Vec<&str> = first.players.iter().map(|p| p.name.as_str()).collect();
    let _ = writeln!(
        text,
        "| configuration | {} | all: mean | server CPU per frame | missed | service time > \
         deadline |\n|---|{}--:|--:|---|---|",
        names.join(" | "),
        "--:|".repeat(names.len())
    );
    for c in figure {
        let cells: Vec<String> = names
            .iter()
            .map(|n| match c.players.iter().find(|p| p.name == *n) {
                Some(p) => format!("{:.2} ({:.2}–{:.2})", p.mean, p.min, p.max),
                None => "–".into(),
            })
            .collect();
        let _ = writeln!(
            text,
            "| {} | {} | {:.2} | {:.2} | {} | {} |",
            c.name,
            cells.join(" | "),
            c.mean(),
            c.cpu(),
            missed_cell(&c.groups, |g| g.missed),
            missed_cell(&c.groups, |g| g.slow)
        );
    }
    let groups: Vec<RangeGroup> = first
        .groups
        .iter()
        .map(|g| RangeGroup {
            label: format!("{} ({} fps)", g.name, g.fps),
            deadline: Some(g.period_ms()),
        })
        .collect();
    let panels: Vec<RangePanel> = figure
        .iter()
        .map(|c| RangePanel {
            caption: format!(
                "{}: missed {}",
                c.name,
                missed_cell(&c.groups, |g| g.missed).replace("**", "")
            ),
            bars: c
                .players
                .iter()
                .map(|p| RangeBar {
                    label: p.name.clone(),
                    group: first
                        .groups
                        .iter()
                        .position(|g| g.name == p.group)
                        .unwrap_or(0),
                    min: p.min,
                    mean: p.mean,
                    max: p.max,
                })
                .collect(),
        })
        .collect();
    let stem = dir.join(format!("render-clients-{}", index + 1));
    let files = plot::ranges(
        &stem,
        &format!("Service time per client: {signature}"),
        ("service time", "ms"),
        &groups,
        &panels,
    )
    .map_err(|e| e.to_string())?;
    let _ = write!(
        text,
        "\n![each client's min, mean and max: {signature}]({})\n\n[(SVG)]({})\n",
        file_name(&files.png),
        file_name(&files.svg)
    );
    Ok(text)
}

/// "cheap 0", or "60fps **12 (0.300 %)**, 30fps 0": `count` of each
/// group's frames, marked when any.
fn missed_cell(groups: &[GroupRow], count: fn(&GroupRow) -> usize) -> String {
    groups
        .iter()
        .map(|g| match count(g) {
            0 => format!("{} 0", g.name),
            m => format!("{} **{m} ({:.3} %)**", g.name, percent(m, g.frames)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The mean on 2 cores over the mean on 1, for the service, per set of
/// players that ran on both.
fn ratio_section(all: &[Configured]) -> String {
    let service = |cores: usize, players: &str| {
        all.iter()
            .find(|c| c.row.server == "service" && c.row.cores == cores && c.row.players == players)
    };
    let mut rows = String::new();
    let mut seen: Vec<&str> = Vec::new();
    for c in all {
        let players = c.row.players.as_str();
        if seen.contains(&players) {
            continue;
        }
        seen.push(players);
        if let (Some(one), Some(two)) = (service(1, players), service(2, players)) {
            let _ = writeln!(
                rows,
                "| {players} | {:.3} | {:.3} | {:.2} |",
                one.mean(),
                two.mean(),
                two.mean() / one.mean()
            );
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "\n### The service on 2 cores against 1\n\n\
         Mean service time of every frame shown (ms). The seed: GuiServ's mean halved each time \
         its hardware threads doubled (ratio 0.5).\n\n\
         | players | 1 core | 2 cores | 2 cores / 1 core |\n|---|--:|--:|--:|\n{rows}"
    )
}

/// One player alone against several of its group, on the same server and
/// cores: its service time, and whether each stayed within its SLA's bound.
fn alone_section(all: &[Configured]) -> String {
    let mut rows = String::new();
    for alone in all.iter().filter(|c| c.players.len() == 1) {
        let group = &alone.players[0].group;
        let together = all.iter().filter(|c| {
            c.players.len() > 1
                && c.row.server == alone.row.server
                && c.row.cores == alone.row.cores
                && c.groups.len() == 1
                && &c.groups[0].name == group
        });
        for many in together {
            let max = many.players.iter().map(|p| p.max).fold(0.0, f64::max);
            let over: Option<usize> = many.players.iter().map(|p| p.bound.map(|b| b.1)).sum();
            let bound = many
                .players
                .iter()
                .filter_map(|p| p.bound.map(|b| b.0))
                .fold(None, |m: Option<f64>, b| Some(m.map_or(b, |m| m.min(b))));
            let p = &alone.players[0];
            let _ = writeln!(
                rows,
                "| {} on {} core{} | {group} | {:.2} / {:.2} / {:.2} | {} | {:.2} / {:.2} | {} | {} |",
                alone.row.server,
                alone.row.cores,
                if alone.row.cores == 1 { "" } else { "s" },
                p.min,
                p.mean,
                p.max,
                many.players.len(),
                many.mean(),
                max,
                bound.map_or("–".into(), |b| format!("{b:.1}")),
                over.map_or("–".into(), |o| o.to_string()),
            );
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "\n### One player against many\n\n\
         A player alone (min / mean / max, ms) and its group's players together (mean / max, \
         ms), with the SLA's service-time bound and how many frames exceeded it.\n\n\
         | server | group | alone: min / mean / max | players together | together: mean / max \
         | SLA bound (ms) | frames over the bound |\n|---|---|--:|--:|--:|--:|--:|\n{rows}"
    )
}

/// One CDF per group, a line per configuration.
fn cdf_section(results: &RunResults, dir: &Path) -> Result<String, String> {
    let mut text = String::new();
    let names: Vec<&str> = results
        .metric_names()
        .into_iter()
        .filter(|n| n.starts_with(METRIC_PREFIX))
        .collect();
    for (i, metric) in names.iter().enumerate() {
        let with: Vec<(&str, &Metric)> = results
            .configurations
            .iter()
            .filter_map(|c| Some((c.name.as_str(), c.metric(metric)?)))
            .collect();
        let histograms: Vec<Labelled<_>> = with
            .iter()
            .filter_map(|&(label, m)| {
                Some(Labelled {
                    label,
                    data: m.histogram.as_ref()?,
                })
            })
            .collect();
        let deadline = with.iter().find_map(|(_, m)| m.deadline);
        let group = metric.trim_start_matches(METRIC_PREFIX);
        let files = plot::cdf(
            &dir.join(format!("render-cdf-{}", i + 1)),
            &format!("Service times of {group}: distribution per configuration"),
            "service time",
            &histograms,
            deadline,
        )
        .map_err(|e| e.to_string())?;
        let _ = write!(
            text,
            "\n![CDF of the service times of {group}]({})\n\n[(SVG)]({})\n",
            file_name(&files.png),
            file_name(&files.svg)
        );
    }
    Ok(match text.is_empty() {
        true => text,
        false => format!("\n### Distribution of the service times\n{text}"),
    })
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_read_back_as_written() {
        let player = PlayerRow {
            name: "60fps-3".into(),
            group: "60fps".into(),
            frames: 1000,
            shown: 998,
            late: 1,
            not_sent: 2,
            lost: 0,
            missed: 3,
            min: 3.1,
            mean: 4.25,
            p99: 9.5,
            max: 12.0,
            bound: Some((16.667, 1)),
            cpu: 3.1,
            started_ms: 0.0,
            sla: "cell \"render-1-client-3\", 3600 µs every 16666 µs; (SCHED_DEADLINE)".into(),
        };
        assert_eq!(PlayerRow::parse(&player.note()), Some(player.clone()));
        let best_effort = PlayerRow {
            bound: None,
            sla: "best-effort (no probes asked)".into(),
            ..player
        };
        assert_eq!(PlayerRow::parse(&best_effort.note()), Some(best_effort));
        let group = GroupRow {
            name: "cheap".into(),
            count: 8,
            fps: 30.0,
            spin_us: 0.0,
            frames: 8000,
            shown: 7990,
            missed: 12,
            slow: 3,
        };
        let spec = PlayerGroup {
            name: "cheap".into(),
            count: 8,
            fps: 30.0,
            frames: 1000,
            spin: Duration::ZERO,
            probes: 25,
            outstanding: 1,
        };
        assert_eq!(GroupRow::parse(&group.note(&spec, 10, 2, 0)), Some(group));
        let row = ConfigRow {
            server: "service".into(),
            cores: 2,
            players: "30fps ×4 + 60fps ×4".into(),
        };
        let settings = RenderSettings {
            server: RenderServer::Service,
            cores: None,
            groups: vec!["30fps".into(), "60fps".into()],
            count: None,
            sla: true,
            best_effort: 10.0,
            probing: 10.0,
            scale: 1.0,
        };
        let note = row.note(&settings, "global EDF on the shared CPUs");
        assert_eq!(ConfigRow::parse(&note), Some(row));
        assert!(note.contains("best-effort 10 %"), "{note}");
    }

    #[test]
    fn misses_are_marked_per_group() {
        let group = |name: &str, missed| GroupRow {
            name: name.into(),
            count: 4,
            fps: 30.0,
            spin_us: 2400.0,
            frames: 4000,
            shown: 4000,
            missed,
            slow: missed / 2,
        };
        let groups = [group("60fps", 12), group("30fps", 0)];
        assert_eq!(
            missed_cell(&groups, |g| g.missed),
            "60fps **12 (0.300 %)**, 30fps 0"
        );
        assert_eq!(
            missed_cell(&groups, |g| g.slow),
            "60fps **6 (0.150 %)**, 30fps 0"
        );
    }
}
