//! The `render` subject of a scenario file (seed 003 §5, Experiments A and
//! B): groups of video players (`[[subject.group]]`: how many, their frame
//! rate, frames, rendering work per frame, probe frames, outstanding
//! frames), the screen, the window scale and the service's shares; and how
//! a configuration runs them (`render = { server = "service", cores = "1",
//! groups = […], count = N, sla = false, best_effort = "10%", … }`): the
//! render service or its single-threaded baseline, on which cores, which
//! groups play and whether they ask for SLAs.
//!
//! Owns that part of parsing and validation, with the line of every
//! refusal, and the arithmetic of how long the players need to probe and
//! agree before they play (the scenario's warm-up when it gives none).
//! Like the rest of `scenario`, it must never touch the machine beyond
//! reading facts.

use super::{duration, refuse, RawSubject, Refusal, Sched};
use crate::video::frame_rate;
use serde::Deserialize;
use std::ops::Range;
use std::time::Duration;
use tessera_policy::sla::SlaRules;
use toml::Spanned;

/// Largest frame or screen side the render service accepts.
pub use tessera_policy::media::MAX_SIDE;
/// Most players in one configuration (the service admits 64 clients).
const MAX_PLAYERS: usize = 32;
/// Most frames in flight a player may ask for (its pool has 3 slots).
const MAX_OUTSTANDING: u32 = 3;
/// The window scale's range (the service's).
const SCALES: (f64, f64) = (0.1, 16.0);
/// Time for the processes to start and connect before any probing.
const CONNECT_TIME: Duration = Duration::from_secs(2);
/// A generous CPU cost of a frame beside its rendering work (copying it in
/// and compositing a CIF frame: about 1.2 ms on the dev profile), for the
/// estimate of the probing time.
const FRAME_COST_ESTIMATE: Duration = Duration::from_millis(2);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGroup {
    name: Spanned<String>,
    count: Option<Spanned<usize>>,
    fps: Option<Spanned<f64>>,
    frames: Spanned<usize>,
    spin: Option<Spanned<String>>,
    probes: Option<Spanned<usize>>,
    outstanding: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRenderConfiguration {
    server: Spanned<String>,
    cores: Option<Spanned<String>>,
    groups: Option<Spanned<Vec<String>>>,
    count: Option<Spanned<usize>>,
    sla: Option<Spanned<bool>>,
    best_effort: Option<Spanned<String>>,
    probing: Option<Spanned<String>>,
    scale: Option<Spanned<f64>>,
}

/// A group of identical video players.
#[derive(Debug, Clone, PartialEq)]
pub struct PlayerGroup {
    pub name: String,
    pub count: usize,
    pub fps: f64,
    pub frames: usize,
    /// Rendering work per frame (the seed's expensive requests), on the
    /// serving thread's CPU clock from the moment it takes the frame.
    pub spin: Duration,
    /// Probe frames before asking for an SLA; 0: best-effort.
    pub probes: usize,
    pub outstanding: u32,
}

impl PlayerGroup {
    pub fn period(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.fps)
    }

    /// How long its frames take to play.
    pub fn play_time(&self) -> Duration {
        self.period().mul_f64(self.frames as f64)
    }

    /// Player `index` (0-based)'s name.
    pub fn player(&self, index: usize) -> String {
        format!("{}-{}", self.name, index + 1)
    }
}

/// The players and the service's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderSubject {
    pub screen: (usize, usize),
    pub scale: f64,
    /// Shares in % of a core (every 10 ms).
    pub best_effort: f64,
    pub probing: f64,
    pub groups: Vec<PlayerGroup>,
}

impl RenderSubject {
    /// Every group's frames multiplied by `factor` (at least one): the
    /// short runs.
    pub fn scale(&mut self, factor: f64) {
        for g in &mut self.groups {
            g.frames = ((g.frames as f64 * factor).ceil() as usize).max(1);
        }
    }
}

/// Which server a configuration runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenderServer {
    /// `tessera serve render`: per-client reservations, SLAs.
    Service,
    /// `tessera serve render --baseline`: one thread, arrival order.
    Baseline,
}

impl RenderServer {
    pub fn name(self) -> &'static str {
        match self {
            RenderServer::Service => "service",
            RenderServer::Baseline => "baseline",
        }
    }
}

/// How one configuration runs the render subject.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderSettings {
    pub server: RenderServer,
    /// The service's reservations partitioned on these CPUs, or the
    /// baseline's thread pinned there; `None`: global EDF over the shared
    /// CPUs (the baseline: anywhere).
    pub cores: Option<Vec<usize>>,
    /// The groups that play, in the subject's order.
    pub groups: Vec<String>,
    /// Every group's count replaced by this.
    pub count: Option<usize>,
    /// `false`: no probes, every player best-effort.
    pub sla: bool,
    pub best_effort: f64,
    pub probing: f64,
    pub scale: f64,
}

impl RenderSettings {
    /// The groups as this configuration plays them.
    pub fn players(&self, subject: &RenderSubject) -> Vec<PlayerGroup> {
        subject
            .groups
            .iter()
            .filter(|g| self.groups.contains(&g.name))
            .map(|g| PlayerGroup {
                count: self.count.unwrap_or(g.count),
                probes: match self.sla && self.server == RenderServer::Service {
                    true => g.probes,
                    false => 0,
                },
                ..g.clone()
            })
            .collect()
    }

    /// The server and where it runs, in words.
    pub fn describe(&self) -> String {
        let cpus = |c: &[usize]| {
            let list: Vec<String> = c.iter().map(usize::to_string).collect();
            format!("CPU {}", list.join(","))
        };
        match (self.server, &self.cores) {
            (RenderServer::Service, Some(c)) => format!(
                "service, reservations partitioned on {} ({} core{})",
                cpus(c),
                c.len(),
                if c.len() == 1 { "" } else { "s" }
            ),
            (RenderServer::Service, None) => {
                "service, reservations under global EDF on the shared CPUs".into()
            }
            (RenderServer::Baseline, Some(c)) => {
                format!("baseline, its thread pinned to {}", cpus(c))
            }
            (RenderServer::Baseline, None) => "baseline, its thread on any CPU".into(),
        }
    }

    /// How long the players of this configuration need to connect, probe
    /// one probe at a time each through the probing share and agree: a
    /// generous estimate (every frame taken to cost its rendering work
    /// and `FRAME_COST_ESTIMATE`), rounded up to a second.
    pub fn negotiation_time(&self, subject: &RenderSubject) -> Duration {
        let probing_cpu: Duration = self
            .players(subject)
            .iter()
            .map(|g| (g.spin + FRAME_COST_ESTIMATE) * (g.count * g.probes) as u32)
            .sum();
        let time = CONNECT_TIME + probing_cpu.div_f64(self.probing / 100.0);
        Duration::from_secs(time.as_secs_f64().ceil() as u64)
    }
}

fn percent(value: &Spanned<String>, what: &str) -> Result<f64, Refusal> {
    let text = value.get_ref().trim();
    text.strip_suffix('%')
        .and_then(|n| n.trim().parse::<f64>().ok())
        .filter(|p| *p > 0.0 && *p <= 100.0)
        .ok_or_else(|| {
            (
                value.span(),
                format!("{what} {text:?}: give a percentage of a core in (0, 100], e.g. \"10%\""),
            )
        })
}

fn window_scale(value: &Spanned<f64>) -> Result<f64, Refusal> {
    let v = *value.get_ref();
    match v >= SCALES.0 && v <= SCALES.1 {
        true => Ok(v),
        false => refuse(
            value.span(),
            format!(
                "scale {v}: windows are {}–{} × their frames",
                SCALES.0, SCALES.1
            ),
        ),
    }
}

/// The subject's keys.
pub(super) fn subject(s: &RawSubject, table: &Range<usize>) -> Result<RenderSubject, Refusal> {
    let screen = match &s.screen {
        None => (1280, 720),
        Some(v) => v
            .get_ref()
            .split_once('x')
            .and_then(|(w, h)| Some((w.trim().parse().ok()?, h.trim().parse().ok()?)))
            .filter(|&(w, h): &(usize, usize)| {
                let sides = 1..=MAX_SIDE;
                sides.contains(&w) && sides.contains(&h)
            })
            .ok_or_else(|| {
                (
                    v.span(),
                    format!(
                        "screen {:?}: give WIDTHxHEIGHT, each side 1–{}, e.g. \"1280x720\"",
                        v.get_ref(),
                        MAX_SIDE
                    ),
                )
            })?,
    };
    let mut groups: Vec<PlayerGroup> = Vec::new();
    for g in &s.group {
        let group = player_group(g.get_ref(), g.span())?;
        if groups.iter().any(|x| x.name == group.name) {
            return refuse(
                g.get_ref().name.span(),
                format!("group {:?} is declared twice", group.name),
            );
        }
        groups.push(group);
    }
    if groups.is_empty() {
        return refuse(
            table.clone(),
            "a render subject needs players: add a [[subject.group]] with name, count, fps and \
             frames",
        );
    }
    Ok(RenderSubject {
        screen,
        scale: s.scale.as_ref().map_or(Ok(1.5), window_scale)?,
        best_effort: s
            .best_effort
            .as_ref()
            .map_or(Ok(40.0), |v| percent(v, "best_effort"))?,
        probing: s
            .probing
            .as_ref()
            .map_or(Ok(10.0), |v| percent(v, "probing"))?,
        groups,
    })
}

fn player_count(count: &Spanned<usize>) -> Result<usize, Refusal> {
    match count.get_ref() {
        &n if (1..=MAX_PLAYERS).contains(&n) => Ok(n),
        n => refuse(
            count.span(),
            format!("count must be 1–{MAX_PLAYERS}, not {n}"),
        ),
    }
}

fn player_group(g: &RawGroup, table: Range<usize>) -> Result<PlayerGroup, Refusal> {
    let name = g.name.get_ref().trim().to_string();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return refuse(
            g.name.span(),
            format!(
                "group name {name:?}: use letters, digits and '-' (players are NAME-1, NAME-2…)"
            ),
        );
    }
    let count = g.count.as_ref().map_or(Ok(1), player_count)?;
    let fps = frame_rate(&g.fps)?;
    if *g.frames.get_ref() == 0 {
        return refuse(g.frames.span(), "frames must be at least 1");
    }
    let spin = g.spin.as_ref().map_or(Ok(Duration::ZERO), duration)?;
    let period = Duration::from_secs_f64(1.0 / fps);
    if spin >= period {
        let span = g.spin.as_ref().map_or(table, Spanned::span);
        return refuse(
            span,
            format!("spin {spin:?} is not shorter than a frame period ({period:?}): every frame would miss"),
        );
    }
    let min_probes = SlaRules::default().min_probes as usize;
    let probes = match &g.probes {
        None => 0,
        Some(p) if *p.get_ref() == 0 || *p.get_ref() >= min_probes => *p.get_ref(),
        Some(p) => {
            return refuse(
                p.span(),
                format!(
                    "probes = {}: the service offers terms after {min_probes} probes; give 0 \
                     (best-effort) or at least {min_probes}",
                    p.get_ref()
                ),
            )
        }
    };
    let outstanding = match &g.outstanding {
        None => 1,
        Some(o) if (1..=MAX_OUTSTANDING).contains(o.get_ref()) => *o.get_ref(),
        Some(o) => {
            return refuse(
                o.span(),
                format!(
                    "outstanding must be 1–{MAX_OUTSTANDING} (a player's pool has {MAX_OUTSTANDING} slots), not {}",
                    o.get_ref()
                ),
            )
        }
    };
    Ok(PlayerGroup {
        name,
        count,
        fps,
        frames: *g.frames.get_ref(),
        spin,
        probes,
        outstanding,
    })
}

/// A configuration's `render`, for a render subject; `None` for others.
/// `sched` is the configuration's `subject`: the server process's cell
/// (the baseline's only; the service makes its own).
pub(super) fn configuration(
    raw: Option<&Spanned<RawRenderConfiguration>>,
    subject: Option<&RenderSubject>,
    sched: &Sched,
    online: &[usize],
    table: &Range<usize>,
) -> Result<Option<RenderSettings>, Refusal> {
    let (raw, subject) = match (raw, subject) {
        (None, None) => return Ok(None),
        (Some(raw), None) => return refuse(raw.span(), "only a render subject takes `render`"),
        (None, Some(_)) => {
            return refuse(
                table.clone(),
                "a render configuration needs `render = { server = \"service\" }` (or \
                 \"baseline\")",
            )
        }
        (Some(raw), Some(subject)) => (raw, subject),
    };
    let r = raw.get_ref();
    let server = match r.server.get_ref().as_str() {
        "service" => RenderServer::Service,
        "baseline" => RenderServer::Baseline,
        other => {
            return refuse(
                r.server.span(),
                format!("server {other:?}: use \"service\" (SLAs) or \"baseline\" (one thread, arrival order)"),
            )
        }
    };
    if server == RenderServer::Baseline {
        let service_only = [
            r.sla.as_ref().map(|v| ("sla", v.span())),
            r.best_effort.as_ref().map(|v| ("best_effort", v.span())),
            r.probing.as_ref().map(|v| ("probing", v.span())),
        ];
        if let Some((key, span)) = service_only.into_iter().flatten().next() {
            return refuse(
                span,
                format!("the baseline makes no agreements and has no shares: drop `{key}`"),
            );
        }
    }
    if sched.fifo.is_some() || (sched.cell.is_some() && server == RenderServer::Service) {
        return refuse(
            table.clone(),
            "a render configuration's `subject` may only put the baseline's process in a cell \
             (\"cell:NAME\", e.g. a dedicated core); the service makes its own cells",
        );
    }
    let cores = match &r.cores {
        None => None,
        Some(v) => {
            let list = tessera_sys::kernel::parse_cpu_list(v.get_ref())
                .map_err(|e| (v.span(), format!("cores: {e} (e.g. \"1\" or \"0,1\")")))?;
            if let Some(bad) = list.iter().find(|c| !online.contains(c)) {
                return refuse(
                    v.span(),
                    format!("CPU {bad} is not online (online: {online:?})"),
                );
            }
            Some(list)
        }
    };
    let groups = match &r.groups {
        None => subject.groups.iter().map(|g| g.name.clone()).collect(),
        Some(list) => {
            if let Some(unknown) = list
                .get_ref()
                .iter()
                .find(|n| !subject.groups.iter().any(|g| &&g.name == n))
            {
                return refuse(
                    list.span(),
                    format!("no group named {unknown:?} is declared in [[subject.group]]"),
                );
            }
            if list.get_ref().is_empty() {
                return refuse(list.span(), "groups is empty: name at least one group");
            }
            list.get_ref().clone()
        }
    };
    let count = r.count.as_ref().map(player_count).transpose()?;
    let settings = RenderSettings {
        server,
        cores,
        groups,
        count,
        sla: r.sla.as_ref().is_none_or(|s| *s.get_ref()),
        best_effort: r
            .best_effort
            .as_ref()
            .map_or(Ok(subject.best_effort), |v| percent(v, "best_effort"))?,
        probing: r
            .probing
            .as_ref()
            .map_or(Ok(subject.probing), |v| percent(v, "probing"))?,
        scale: r.scale.as_ref().map_or(Ok(subject.scale), window_scale)?,
    };
    let players: usize = settings.players(subject).iter().map(|g| g.count).sum();
    if players > MAX_PLAYERS {
        return refuse(
            raw.span(),
            format!("{players} players: at most {MAX_PLAYERS} play in one configuration"),
        );
    }
    Ok(Some(settings))
}

/// The warm-up of a render scenario: as written, else the longest time
/// any configuration's players need to connect, probe and agree; and the
/// duration must hold every configuration's play.
pub(super) fn warmup(
    subject: &RenderSubject,
    configurations: &[super::Configuration],
    given: Option<Duration>,
    measured: &Spanned<String>,
) -> Result<Duration, Refusal> {
    let settings = configurations.iter().filter_map(|c| c.render.as_ref());
    let longest = settings
        .clone()
        .flat_map(|s| s.players(subject))
        .max_by(|a, b| a.play_time().cmp(&b.play_time()));
    let span = measured.span();
    let measured = duration(measured)?;
    if let Some(g) = longest.filter(|g| g.play_time() > measured + Duration::from_millis(1)) {
        return refuse(
            span,
            format!(
                "duration {measured:?} is shorter than group {:?}'s play ({} frames at {} fps = \
                 {:.1} s): give duration = \"{}s\"",
                g.name,
                g.frames,
                g.fps,
                g.play_time().as_secs_f64(),
                g.play_time().as_secs_f64().ceil()
            ),
        );
    }
    Ok(given.unwrap_or_else(|| {
        settings
            .map(|s| s.negotiation_time(subject))
            .max()
            .unwrap_or(CONNECT_TIME)
    }))
}
