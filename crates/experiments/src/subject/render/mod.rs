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

use crate::subject::contract::{Measured, Running, Stopped, Watched};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cells::setup_for;
use crate::figures::latency_histogram;
use crate::harness::servers::{
    await_ready, log_tail, program_beside_us, spawn_after, unique, OwnedChild,
};
use tessera_broker::Session;
use tessera_measure::plot::{self, Labelled, RangeBar, RangeGroup, RangePanel};
use tessera_measure::{ConfigurationResult, Counter, Metric, RunResults, Series, Summary};
use tessera_scenario::{
    Configuration, PlayerGroup, RenderServer, RenderSettings, Scenario, Subject,
};
use tessera_services::render::client;
use tessera_services::render::service::sla_task_name;
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
/// How the note naming the server begins (the report takes the server's
/// name from it).
const RENDER_NOTE: &str = "render: ";
/// The label naming a configuration's render server.
const SERVER: &str = "render server";
const GROUP_NOTE: &str = "group ";
const PLAYER_NOTE: &str = "player ";
/// The counter of the cores the server ran on.
const CORES: &str = "render cores";

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
            let slas = |s: &Status| s.clients.iter().filter(|c| c.has_sla()).count();
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

    /// The row of a configuration's counters and the server named by its
    /// label; None if it is not a render configuration.
    fn from_result(result: &ConfigurationResult, groups: &[GroupRow]) -> Option<ConfigRow> {
        let server = result.label(SERVER)?;
        Some(ConfigRow {
            server: server.into(),
            cores: result.count(CORES)? as usize,
            players: players(groups.iter().map(|g| (g.name.as_str(), g.count))),
        })
    }
}

/// The groups that played and how many players each: "cheap ×8 + 60fps ×4".
fn players<'a>(groups: impl Iterator<Item = (&'a str, usize)>) -> String {
    groups
        .map(|(name, count)| format!("{name} ×{count}"))
        .collect::<Vec<_>>()
        .join(" + ")
}

/// A counter's name: "group cheap: frames", "player cheap-1: service mean".
fn counter_name(of: &str, name: &str, what: &str) -> String {
    format!("{of} {name}: {what}")
}

/// The counters of one group or player of a configuration.
struct Figures<'a> {
    result: &'a ConfigurationResult,
    /// [`GROUP`] or [`PLAYER`].
    of: &'static str,
    name: &'a str,
}

impl Figures<'_> {
    fn value(&self, what: &str) -> Option<f64> {
        let name = counter_name(self.of, self.name, what);
        Some(self.result.counter(&name)?.value)
    }

    fn count(&self, what: &str) -> Option<usize> {
        Some(self.value(what)? as usize)
    }
}

/// What the counters of groups and players count.
const GROUP: &str = "group";
const PLAYER: &str = "player";
const G_PLAYERS: &str = "players";
const G_FPS: &str = "fps";
const G_SPIN: &str = "spin";
const G_SLOW: &str = "service over the deadline";
const FRAMES: &str = "frames";
const SHOWN: &str = "shown";
const MISSED: &str = "missed";
const LATE: &str = "shown after the next release";
const NOT_SENT: &str = "not sent";
const LOST: &str = "lost";
const P_MIN: &str = "service min";
const P_MEAN: &str = "service mean";
const P_P99: &str = "service p99";
const P_MAX: &str = "service max";
const P_BOUND: &str = "SLA bound";
const P_OVER: &str = "over the SLA bound";
const P_CPU: &str = "server CPU per frame";
const P_STARTED: &str = "started after the common start";
const P_THROTTLED: &str = "throttled (server's count)";

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

    /// The row's figures, and the players' frames shown late, not sent and
    /// lost, as counters.
    fn counters(&self, late: usize, not_sent: usize, lost: usize) -> Vec<Counter> {
        let name = |what| counter_name(GROUP, &self.name, what);
        let count = |what, n: usize| Counter::count(name(what), n as u64);
        vec![
            count(G_PLAYERS, self.count),
            Counter::new(name(G_FPS), self.fps, "frames/s"),
            Counter::new(name(G_SPIN), self.spin_us, "us"),
            count(FRAMES, self.frames),
            count(SHOWN, self.shown),
            count(MISSED, self.missed),
            count(G_SLOW, self.slow),
            count(LATE, late),
            count(NOT_SENT, not_sent),
            count(LOST, lost),
        ]
    }

    /// The group `name`'s row of a configuration's counters.
    fn from_result(result: &ConfigurationResult, name: &str) -> Option<GroupRow> {
        let f = Figures {
            result,
            of: GROUP,
            name,
        };
        Some(GroupRow {
            name: name.into(),
            count: f.count(G_PLAYERS)?,
            fps: f.value(G_FPS)?,
            spin_us: f.value(G_SPIN)?,
            frames: f.count(FRAMES)?,
            shown: f.count(SHOWN)?,
            missed: f.count(MISSED)?,
            slow: f.count(G_SLOW)?,
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
        }
    }

    fn note(&self, sla: &str) -> String {
        let bound = match self.bound {
            Some((ms, over)) => format!("bound {ms:.3}, over {over}"),
            None => "bound –, over –".into(),
        };
        format!(
            "{PLAYER_NOTE}{} (group {}): frames {}, shown {}, late {}, not sent {}, lost {}, \
             missed {}; ms min {:.3}, mean {:.3}, p99 {:.3}, max {:.3}, {bound}; server CPU per \
             frame cpu_ms {:.3}; started_ms {:.1}; SLA: {sla}",
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
        )
    }

    /// The row's figures as counters (times in ms).
    fn counters(&self) -> Vec<Counter> {
        let name = |what| counter_name(PLAYER, &self.name, what);
        let count = |what, n: usize| Counter::count(name(what), n as u64);
        let ms = |what, value| Counter::new(name(what), value, "ms");
        let mut counters = vec![
            count(FRAMES, self.frames),
            count(SHOWN, self.shown),
            count(LATE, self.late),
            count(NOT_SENT, self.not_sent),
            count(LOST, self.lost),
            count(MISSED, self.missed),
            ms(P_MIN, self.min),
            ms(P_MEAN, self.mean),
            ms(P_P99, self.p99),
            ms(P_MAX, self.max),
            ms(P_CPU, self.cpu),
            ms(P_STARTED, self.started_ms),
        ];
        if let Some((bound, over)) = self.bound {
            counters.extend([ms(P_BOUND, bound), count(P_OVER, over)]);
        }
        counters
    }

    /// The player `name`'s row of a configuration's counters.
    fn from_result(result: &ConfigurationResult, name: &str, group: &str) -> Option<PlayerRow> {
        let f = Figures {
            result,
            of: PLAYER,
            name,
        };
        Some(PlayerRow {
            name: name.into(),
            group: group.into(),
            frames: f.count(FRAMES)?,
            shown: f.count(SHOWN)?,
            late: f.count(LATE)?,
            not_sent: f.count(NOT_SENT)?,
            lost: f.count(LOST)?,
            missed: f.count(MISSED)?,
            min: f.value(P_MIN)?,
            mean: f.value(P_MEAN)?,
            p99: f.value(P_P99)?,
            max: f.value(P_MAX)?,
            bound: f.value(P_BOUND).zip(f.count(P_OVER)),
            cpu: f.value(P_CPU)?,
            started_ms: f.value(P_STARTED)?,
        })
    }
}

fn percent(part: usize, whole: usize) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

/// Each group's metric, the configuration's counters and notes.
pub(crate) fn metrics(data: RenderData) -> Measured {
    let where_ = match (&data.settings.cores, data.settings.server) {
        (Some(c), RenderServer::Service) => format!("CPU {}, partitioned", cpu_list(c)),
        (None, RenderServer::Service) => "global EDF on the shared CPUs".into(),
        (Some(c), RenderServer::Baseline) => format!("its thread pinned to CPU {}", cpu_list(c)),
        (None, RenderServer::Baseline) => "its thread on any CPU".into(),
    };
    let row = ConfigRow {
        server: data.settings.server.name().into(),
        cores: data.cores,
        players: players(data.groups.iter().map(|g| (g.name.as_str(), g.count))),
    };
    let mut counters = vec![Counter::count(CORES, row.cores as u64)];
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
        counters.extend([
            Counter::new(SLA_CORES, s.committed_cores, "cores"),
            Counter::new(CAPACITY_CORES, s.capacity_cores, "cores"),
        ]);
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
                    let row = PlayerRow::of(&group.name, r, data.start_at);
                    let mut note = row.note(&r.sla_note);
                    counters.extend(row.counters());
                    if let Some(c) = data.seen.clients.get(*name) {
                        let _ = write!(note, "; server's count: {} throttled", c.throttled);
                        let throttled = counter_name(PLAYER, &row.name, P_THROTTLED);
                        counters.push(Counter::count(throttled, c.throttled));
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
        let (late, not_sent, lost) = (sum(|r| r.late), sum(|r| r.not_sent), sum(|r| r.lost));
        notes.push(row.note(group, late, not_sent, lost));
        counters.extend(row.counters(late, not_sent, lost));
        let (delay_note, delay_counters) = send_delays(group, &ok);
        notes.push(delay_note);
        counters.extend(delay_counters);
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
    Measured::new(metrics, counters, notes).label(SERVER, row.server)
}

/// The counters of the SLAs' cores at their most and the server's cores.
const SLA_CORES: &str = "render SLAs' cores at their most";
const CAPACITY_CORES: &str = "render capacity in cores";

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
/// counts against its deadline but not in the service time. A note and
/// the same figures as counters.
fn send_delays(group: &PlayerGroup, reports: &[&PlayerReport]) -> (String, Vec<Counter>) {
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
    let name = |what| counter_name(GROUP, &group.name, what);
    let counters = vec![
        Counter::new(name("send delay p50"), at(0.5), "ms"),
        Counter::new(name("send delay p99"), at(0.99), "ms"),
        Counter::new(name("send delay max"), at(1.0), "ms"),
        Counter::count(name("frames sent over 1 ms late"), over(1) as u64),
        Counter::count(name("frames sent over 5 ms late"), over(5) as u64),
    ];
    let note = format!(
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
    );
    (note, counters)
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

/// The render configurations of a run, from their counters: the groups
/// are those with a service-time metric, their players its series.
fn configured(results: &RunResults) -> Vec<Configured<'_>> {
    results
        .configurations
        .iter()
        .filter_map(|c| {
            let played: Vec<(&str, &Metric)> = c
                .metrics
                .iter()
                .filter_map(|m| Some((m.name.strip_prefix(METRIC_PREFIX)?, m)))
                .collect();
            let groups: Vec<GroupRow> = played
                .iter()
                .filter_map(|(group, _)| GroupRow::from_result(c, group))
                .collect();
            let players = played
                .iter()
                .flat_map(|(group, m)| m.series.iter().map(move |s| (*group, s.name.as_str())))
                .filter_map(|(group, player)| PlayerRow::from_result(c, player, group))
                .collect();
            Some(Configured {
                name: &c.name,
                row: ConfigRow::from_result(c, &groups)?,
                groups,
                players,
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

/// `[subject] kind = "render"`.
pub(crate) struct Kind;

impl crate::subject::contract::Subject for Kind {
    fn runs(&self, scenario: &Scenario, _config: &Configuration) -> bool {
        matches!(scenario.subject, Subject::Render(_))
    }

    fn start(
        &self,
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<Box<dyn Running>, String> {
        Ok(Box::new(RenderRun::start(scenario, config)?))
    }

    fn report_section(&self, results: &RunResults, dir: &Path) -> Result<String, String> {
        report_section(results, dir)
    }
}

impl Running for RenderRun {
    fn release(&mut self, t0: u64) -> Result<(), String> {
        RenderRun::release(self, t0)
    }

    /// The tasks serving SLAs, each judged by its player group's frame
    /// period, its misses counted in the group's metric. The shared tasks
    /// (best-effort, probing, the front-end, the baseline's one thread)
    /// serve every group and are not named: their misses are "unknown".
    fn watched(&self) -> Vec<Watched> {
        let Ok(status) = status(&self.socket) else {
            return Vec::new();
        };
        let server = self.server.pid();
        let tasks: Vec<(String, i32)> = tessera_sys::proc::threads_of(server)
            .unwrap_or_default()
            .into_iter()
            .map(|tid| (tessera_sys::proc::thread_name(server, tid), tid))
            .collect();
        status
            .clients
            .iter()
            .filter(|c| c.has_sla())
            .filter_map(|c| {
                let player = self.players.iter().find(|p| p.name == c.name)?;
                let group = &self.groups[player.group];
                let task = sla_task_name(c.client);
                let &(_, tid) = tasks.iter().find(|(name, _)| *name == task)?;
                Some(Watched {
                    tid,
                    metric: format!("{METRIC_PREFIX}{}", group.name),
                    deadline: Some(group.period()),
                    period: None,
                    budget: None,
                    chain: None,
                    thread_metric: None,
                })
            })
            .collect()
    }

    fn stop(self: Box<Self>, _notes: &mut Vec<String>) -> Box<dyn Stopped> {
        Box::new(self.finish())
    }
}

impl Stopped for RenderData {
    fn measure(self: Box<Self>, _scenario: &Scenario, _t0: u64) -> Measured {
        metrics(*self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_read_back_as_written() {
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
        };
        let sla = "cell \"render-1-client-3\", 3600 µs every 16666 µs; (SCHED_DEADLINE)";
        assert!(player.note(sla).ends_with(sla));
        let best_effort = PlayerRow {
            name: "60fps-4".into(),
            bound: None,
            ..player.clone()
        };
        let group = GroupRow {
            name: "60fps".into(),
            count: 2,
            fps: 60.0,
            spin_us: 0.0,
            frames: 2000,
            shown: 1996,
            missed: 6,
            slow: 3,
        };
        let spec = PlayerGroup {
            name: "60fps".into(),
            count: 2,
            fps: 60.0,
            frames: 1000,
            spin: Duration::ZERO,
            probes: 25,
            outstanding: 1,
        };
        let row = ConfigRow {
            server: "service".into(),
            cores: 2,
            players: "60fps ×2".into(),
        };
        let settings = RenderSettings {
            server: RenderServer::Service,
            cores: None,
            groups: vec!["60fps".into()],
            count: None,
            sla: true,
            best_effort: 10.0,
            probing: 10.0,
            scale: 1.0,
        };
        let note = row.note(&settings, "global EDF on the shared CPUs");
        assert!(note.contains("best-effort 10 %"), "{note}");
        let mut counters = vec![Counter::count(CORES, 2)];
        counters.extend(group.counters(2, 4, 0));
        counters.extend(player.counters());
        counters.extend(best_effort.counters());
        let series = |name: &str| Series::with_capacity(name, "ms", 0);
        let result = ConfigurationResult {
            labels: [(SERVER.to_string(), row.server.clone())].into(),
            name: "service, 2 cores".into(),
            notes: vec![note, group.note(&spec, 2, 4, 0)],
            metrics: vec![Metric {
                series: vec![series("60fps-3"), series("60fps-4")],
                ..Metric::latency(
                    format!("{METRIC_PREFIX}60fps"),
                    Some(16_667.0),
                    latency_histogram(std::iter::empty()),
                )
            }],
            counters,
            why: None,
        };
        assert_eq!(result.count("group 60fps: not sent"), Some(4));
        assert_eq!(
            result
                .counter("player 60fps-3: service mean")
                .map(|c| c.value),
            Some(4.25)
        );
        let results = RunResults {
            configurations: vec![result],
            ..RunResults::start("render")
        };
        let all = configured(&results);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].row, row);
        assert_eq!(all[0].groups, [group]);
        assert_eq!(all[0].players, [player, best_effort]);
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
