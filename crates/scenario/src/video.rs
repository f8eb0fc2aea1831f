//! The video players and their gui among a scenario's interference (seed
//! 000 §4.1, Group 2): a video's frame rate, size and frames, the gui it
//! feeds, and that the gui runs wherever its videos do. A video's frame
//! geometry — the CIF size it plays unless told, the bytes of a YUV 4:2:0
//! frame — is `tessera_policy::media`'s, shared with the video workload.
//!
//! Owns that part of parsing and validation, with the line of every
//! refusal. Like the rest of the crate, it must never touch the machine.

use super::{
    refuse, required, threads, Configuration, LoadKind, RawInterference, Refusal, Scenario,
};
use crate::Interference;
use std::ops::Range;
use toml::Spanned;

pub use tessera_policy::media::{frame_bytes, CIF_HEIGHT, CIF_WIDTH};

/// Largest video frame side: a frame must fit the gui's screen once scaled.
const MAX_VIDEO_SIDE: usize = 1920;
/// Largest generated video file.
const MAX_VIDEO_FILE: usize = 2 << 30;

pub(crate) fn gui_load(i: &RawInterference) -> Result<LoadKind, Refusal> {
    if let Some(t) = i.start.as_ref().or(i.stop.as_ref()) {
        return refuse(
            t.span(),
            "a gui serves for the whole run: give start/stop to the videos that feed it",
        );
    }
    Ok(LoadKind::Gui {
        threads: threads(&i.threads)?,
    })
}

/// A video's frames per second: 30 unless given, at most 240.
pub(crate) fn frame_rate(value: &Option<Spanned<f64>>) -> Result<f64, Refusal> {
    match value {
        None => Ok(30.0),
        Some(f) if *f.get_ref() > 0.0 && *f.get_ref() <= 240.0 => Ok(*f.get_ref()),
        Some(f) => refuse(
            f.span(),
            format!("fps must be in (0, 240], not {}", f.get_ref()),
        ),
    }
}

pub(crate) fn video_load(i: &RawInterference, table: &Range<usize>) -> Result<LoadKind, Refusal> {
    let fps = frame_rate(&i.fps)?;
    let side = |value: &Option<Spanned<usize>>, default: usize, what: &str| match value {
        None => Ok(default),
        Some(v) if *v.get_ref() >= 2 && *v.get_ref() <= MAX_VIDEO_SIDE && v.get_ref() % 2 == 0 => {
            Ok(*v.get_ref())
        }
        Some(v) => refuse(
            v.span(),
            format!(
                "{what} must be even (YUV 4:2:0) and 2–{MAX_VIDEO_SIDE}, not {}",
                v.get_ref()
            ),
        ),
    };
    let width = side(&i.width, CIF_WIDTH, "width")?;
    let height = side(&i.height, CIF_HEIGHT, "height")?;
    let frame = frame_bytes(width, height);
    let frames = match &i.frames {
        None => 300,
        Some(n) if *n.get_ref() >= 1 && n.get_ref().saturating_mul(frame) <= MAX_VIDEO_FILE => {
            *n.get_ref()
        }
        Some(n) => {
            return refuse(
                n.span(),
                format!(
                    "frames must be at least 1 and the file at most {} MiB ({} frames of {width}×{height})",
                    MAX_VIDEO_FILE >> 20,
                    MAX_VIDEO_FILE / frame
                ),
            )
        }
    };
    let gui = required(&i.gui, table, "gui")?;
    Ok(LoadKind::Video {
        fps,
        width,
        height,
        frames,
        gui: gui.get_ref().clone(),
    })
}

/// Each video names a gui of the scenario.
pub(crate) fn video_links(
    raw: &[Spanned<RawInterference>],
    loads: &[Interference],
) -> Result<(), Refusal> {
    for (r, load) in raw.iter().zip(loads) {
        let (LoadKind::Video { gui, .. }, Some(span)) = (&load.kind, r.get_ref().gui.as_ref())
        else {
            continue;
        };
        let why = match loads.iter().find(|l| &l.name == gui).map(|l| &l.kind) {
            Some(LoadKind::Gui { .. }) => continue,
            Some(_) => format!("{gui:?} is not a gui (kind = \"gui\")"),
            None => format!(
                "no gui named {gui:?} is declared (add an interference with kind = \"gui\")"
            ),
        };
        return refuse(span.span(), why);
    }
    Ok(())
}

/// A video runs only where the gui it sends its frames to runs.
pub(crate) fn videos_have_their_gui(
    c: &Configuration,
    scenario: &Scenario,
    table: &Range<usize>,
) -> Result<(), Refusal> {
    for (name, _) in &c.interference {
        let Some(LoadKind::Video { gui, .. }) = scenario.load(name).map(|l| &l.kind) else {
            continue;
        };
        if !c.interference.iter().any(|(n, _)| n == gui) {
            return refuse(
                table.clone(),
                format!("video {name:?} sends its frames to gui {gui:?}, which does not run in configuration {:?}: add {gui} to its interference", c.name),
            );
        }
    }
    Ok(())
}
