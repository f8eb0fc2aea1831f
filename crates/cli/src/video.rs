//! `tessera load video`: video players feeding the GUI service, by
//! themselves (seed 000 §4.1's Group 2 loads). Thin: the players and the
//! service are in tessera-workloads and tessera-services; this prints what
//! they measured.

use crate::failure::Failure;
use crate::parse::invalid;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tessera_measure::Summary;
use tessera_workloads::video::{self, VideoSpec};
use tessera_workloads::{LoadReport, Window};

/// Runs `players` CIF players at `fps` into a gui of `gui_threads` threads
/// for `run_for` and prints frames, misses and response percentiles per player.
pub fn load(
    players: usize,
    fps: f64,
    gui_threads: usize,
    dir: Option<PathBuf>,
    run_for: Duration,
    json: bool,
) -> Result<ExitCode, Failure> {
    if !(1..=64).contains(&players) || !(1..=64).contains(&gui_threads) {
        return Err(invalid(
            "--players and --gui-threads must be 1–64",
            "e.g. --players 2 --gui-threads 1",
        )
        .into());
    }
    let dir = dir.unwrap_or_else(std::env::temp_dir);
    let spec = VideoSpec {
        fps,
        ..VideoSpec::cif("video", &dir, Window::lasting(run_for))
    };
    let (reports, gui) = video::play_into_gui(&spec, players, gui_threads)
        .map_err(|e| invalid(e, "e.g. --fps 30 --players 2"))?;
    let rows: Vec<serde_json::Value> = reports
        .iter()
        .map(|r| {
            let s = Summary::from_samples(&r.frames.response_us, Some(r.frames.deadline_us));
            serde_json::json!({
                "name": r.frames.name, "frames": r.load.units(), "released": r.frames.released(),
                "skipped": r.frames.skipped, "misses": r.frames.misses(), "queued": r.queued,
                "refused": r.refused, "period_us": r.frames.period_us, "p50_us": s.p50,
                "p99_us": s.p99, "max_us": s.max, "cpu_s": r.load.cpu_ns() as f64 / 1e9,
                "errors": r.load.errors(),
            })
        })
        .collect();
    let service_us: Vec<f64> = gui
        .clients
        .iter()
        .flat_map(|c| &c.samples)
        .map(|s| s.service_ns() as f64 / 1e3)
        .collect();
    let service = Summary::from_samples(&service_us, None);
    let gui_load = LoadReport::from(&gui);
    if json {
        let json = serde_json::json!({
            "players": rows,
            "gui": {
                "name": gui.name, "threads": gui.threads.len(), "composited": gui.composited(),
                "dropped": gui.dropped(), "late": gui.late(), "service_p50_us": service.p50,
                "service_p99_us": service.p99, "service_max_us": service.max,
                "cpu_s": gui_load.cpu_ns() as f64 / 1e9, "errors": gui_load.errors(),
            },
        });
        println!("{json}");
    } else {
        for (r, row) in reports.iter().zip(&rows) {
            println!(
                "{}: {} frames at {fps} fps, {} misses (response > {:.0} µs), response p50 {:.0} µs, p99 {:.0} µs; {} refused by the gui",
                r.frames.name, r.load.units(), r.frames.misses(), r.frames.period_us,
                row["p50_us"].as_f64().unwrap_or(0.0), row["p99_us"].as_f64().unwrap_or(0.0), r.refused
            );
        }
        println!(
            "{}; {}; service time p50 {:.0} µs, p99 {:.0} µs",
            gui_load.describe(),
            gui.describe(),
            service.p50,
            service.p99
        );
    }
    Ok(ExitCode::SUCCESS)
}
