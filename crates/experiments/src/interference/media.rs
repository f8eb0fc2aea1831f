//! The video players and the GUI service of one configuration (seed 000
//! §4.1, Group 2: Cells D, E and F): each gui is a render service whose
//! clients are the videos that name it, each video a player thread sending
//! it frames. Reported: each video's frame response time (release → frame
//! submitted, the period as deadline) and each gui's service time (frame
//! ready → composited, misses = frames composited after their deadline).
//!
//! Owns the order: a gui starts (its clients registered) before the videos
//! that feed it, and stops after them, compositing what they left queued.
//! It must never judge a result, and everything it started ends in
//! [`Media::finish`], whatever failed.

use super::window::load_window;
use crate::cells::setup_for;
use crate::figures::{latency_histogram, task_metric};
use std::time::Duration;
use tessera_measure::{Counter, Metric, Series};
use tessera_scenario::{Configuration, LoadKind, Scenario};
use tessera_services::render::{Render, RenderConfig, RenderReport, RenderService};
use tessera_workloads::video::{self, VideoLoad, VideoReport, VideoSpec};
use tessera_workloads::LoadReport;

/// The guis and videos started for one configuration.
#[derive(Default)]
pub(crate) struct Media {
    guis: Vec<RenderService>,
    videos: Vec<VideoLoad>,
}

/// What they reported.
#[derive(Default)]
pub(crate) struct MediaData {
    guis: Vec<RenderReport>,
    videos: Vec<VideoReport>,
}

impl Media {
    /// Starts every gui of the configuration with its videos as clients,
    /// then the videos (set up, waiting for [`Media::release`]). What
    /// started before an error is kept for [`Media::finish`].
    pub(crate) fn start(
        &mut self,
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<(), String> {
        let load = |name: &str| scenario.load(name).expect("validated");
        for (gui_name, gui_sched) in &config.interference {
            let LoadKind::Gui { threads } = load(gui_name).kind else {
                continue;
            };
            let mut render = Render::new(RenderConfig {
                name: gui_name.clone(),
                threads,
                ..RenderConfig::default()
            })
            .map_err(|e| e.to_string())?;
            let mut players = Vec::new();
            for (name, sched) in &config.interference {
                let video = load(name);
                let LoadKind::Video {
                    fps,
                    width,
                    height,
                    frames,
                    ref gui,
                } = video.kind
                else {
                    continue;
                };
                if gui != gui_name {
                    continue;
                }
                let spec = VideoSpec {
                    name: name.clone(),
                    fps,
                    width,
                    height,
                    frames,
                    dir: std::env::temp_dir(),
                    window: load_window(video, scenario.total()),
                };
                let client = render
                    .add_client(spec.client())
                    .map_err(|e| e.to_string())?;
                players.push((spec, sched, client));
            }
            let setup = setup_for(gui_sched, scenario.core);
            let service = render
                .start(|_| Box::new(setup.clone()))
                .map_err(|e| e.to_string())?;
            self.guis.push(service);
            for (spec, sched, client) in players {
                let setup = Box::new(setup_for(sched, scenario.core));
                let player = video::spawn(&spec, client, setup)
                    .map_err(|e| format!("{}: {e}", spec.name))?;
                self.videos.push(player);
            }
        }
        Ok(())
    }

    /// Releases the videos (their windows start at `t0` + their start).
    pub(crate) fn release(&self, t0: u64) {
        self.videos.iter().for_each(|v| v.start(t0));
    }

    /// Stops and joins the videos, then stops the guis.
    pub(crate) fn finish(self) -> MediaData {
        self.videos.iter().for_each(VideoLoad::stop);
        let videos = self.videos.into_iter().map(VideoLoad::join).collect();
        let guis = self.guis.into_iter().map(RenderService::stop).collect();
        MediaData { guis, videos }
    }
}

/// The metrics, counters and notes of what ran, warm-up left out: per
/// video "<name> frame response time" and its frames' counts, per gui
/// "<name> service time".
pub(crate) fn collect(
    data: &MediaData,
    scenario: &Scenario,
    t0: u64,
) -> (Vec<Metric>, Vec<Counter>, Vec<String>) {
    let (mut metrics, mut counters, mut notes) = (Vec::new(), Vec::new(), Vec::new());
    for v in &data.videos {
        let start = scenario
            .load(&v.frames.name)
            .map_or(Duration::ZERO, |l| l.start);
        let name = format!("{} frame response time", v.frames.name);
        let (metric, frame_counters, note) = task_metric(&v.frames, &name, start, scenario.warmup);
        metrics.push(metric);
        counters.extend(frame_counters);
        counters.extend(Counter::counts([
            (format!("{} frames queued", v.frames.name), v.queued),
            (format!("{} frames refused", v.frames.name), v.refused),
        ]));
        notes.push(format!(
            "{note}; {} frames queued, {} refused by the gui",
            v.queued, v.refused
        ));
        counters.extend(load_counters(&v.load));
        notes.push(v.load.describe());
    }
    let measure_from = t0 + scenario.warmup.as_nanos() as u64;
    for gui in &data.guis {
        metrics.push(service_time(gui, measure_from, t0));
        let load = LoadReport::from(gui);
        counters.extend(load_counters(&load));
        notes.push(load.describe());
        notes.push(gui.describe());
    }
    (metrics, counters, notes)
}

/// What a load did over its whole run: "NAME CPU time" (ms) and its work
/// ("NAME UNIT", e.g. "ep pairs").
pub(crate) fn load_counters(report: &LoadReport) -> Vec<Counter> {
    vec![
        Counter::new(
            format!("{} CPU time", report.name),
            report.cpu_ns() as f64 / 1e6,
            "ms",
        ),
        Counter::count(format!("{} {}", report.name, report.unit), report.units()),
    ]
}

/// A gui's service time over the frames made ready after `measure_from`,
/// one series per client (times in s from `t0`).
fn service_time(report: &RenderReport, measure_from: u64, t0: u64) -> Metric {
    let measured = || {
        report
            .clients
            .iter()
            .flat_map(|c| &c.samples)
            .filter(|s| s.ready_ns >= measure_from)
    };
    let series = report
        .clients
        .iter()
        .map(|c| {
            let mut series = Series::with_capacity(&c.name, "us", c.samples.len());
            for s in c.samples.iter().filter(|s| s.ready_ns >= measure_from) {
                series.push((s.ready_ns - t0) as f64 / 1e9, s.service_ns() as f64 / 1e3);
            }
            series
        })
        .collect();
    let mut metric = Metric {
        series,
        ..Metric::latency(
            format!("{} service time", report.name),
            None,
            latency_histogram(measured().map(|s| s.service_ns())),
        )
    };
    metric.summary.misses = Some(measured().filter(|s| s.late()).count() as u64);
    metric
}
