//! Scenarios with video players and their gui (seed 000 §4.1, Group 2): the
//! kinds parse with their defaults, bad values are refused with the line
//! and the reason, and a video needs its gui wherever it runs.

use tessera_scenario::{LoadKind, Scenario};

const MEDIA: &str = include_str!("fixtures/media.toml");

/// `MEDIA` with `from` replaced by `to`, refused: (line, reason), after
/// checking that the message starts with the file name.
fn refusal(from: &str, to: &str) -> (usize, String) {
    assert!(MEDIA.contains(from), "{from:?} not in MEDIA");
    let text = MEDIA.replacen(from, to, 1);
    let e = Scenario::parse(&text, "bad.toml").expect_err("should be refused");
    assert!(e.to_string().starts_with("bad.toml:"), "{e}");
    (e.line, e.reason)
}

/// The reason of a refusal that names the line of `to`'s last line.
fn refused(from: &str, to: &str) -> String {
    let (line, reason) = refusal(from, to);
    let at = MEDIA.find(from).expect("checked") + to.rfind('\n').map_or(0, |i| i + 1);
    let text = MEDIA.replacen(from, to, 1);
    assert_eq!(line, text[..at].matches('\n').count() + 1, "{reason}");
    reason
}

#[test]
fn gui_and_video_parse_with_their_defaults() {
    let s = Scenario::parse(MEDIA, "media.toml").unwrap();
    assert_eq!(s.load("gui").unwrap().kind, LoadKind::Gui { threads: 1 });
    assert_eq!(
        s.load("tt").unwrap().kind,
        LoadKind::Video {
            fps: 30.0,
            width: 352,
            height: 288,
            frames: 30,
            gui: "gui".into()
        }
    );
    assert_eq!(
        s.load("et").unwrap().kind,
        LoadKind::Video {
            fps: 25.0,
            width: 176,
            height: 144,
            frames: 50,
            gui: "gui".into()
        }
    );
    assert!(s.configurations[0].interference.is_empty());
    assert_eq!(s.configurations[1].interference.len(), 3);
    let fractional = MEDIA.replace("fps = 25", "fps = 29.97");
    let s = Scenario::parse(&fractional, "media.toml").unwrap();
    assert!(matches!(s.load("et").unwrap().kind, LoadKind::Video { fps, .. } if fps == 29.97));
    let two_threads = MEDIA.replace("threads = 1", "threads = 2");
    let s = Scenario::parse(&two_threads, "media.toml").unwrap();
    assert_eq!(s.load("gui").unwrap().kind, LoadKind::Gui { threads: 2 });
}

#[test]
fn bad_video_values_are_refused_with_their_line() {
    let reason = refused("fps = 25", "fps = 0");
    assert!(reason.contains("fps must be in (0, 240]"), "{reason}");
    let reason = refused("fps = 25", "fps = 241");
    assert!(reason.contains("(0, 240]"), "{reason}");
    let reason = refused("fps = 25", "fps = -30");
    assert!(reason.contains("(0, 240]"), "{reason}");
    let reason = refused("width = 176", "width = 175");
    assert!(reason.contains("even"), "{reason}");
    let reason = refused("height = 144", "height = 4096");
    assert!(reason.contains("2–1920"), "{reason}");
    let reason = refused("frames = 50", "frames = 0");
    assert!(reason.contains("frames must be at least 1"), "{reason}");
    let reason = refused("frames = 50", "frames = 1000000");
    assert!(reason.contains("MiB"), "{reason}");
    let reason = refused("threads = 1", "threads = 0");
    assert!(reason.contains("threads must be"), "{reason}");
    let reason = refused("frames = 30\ngui = \"gui\"", "frames = 30\ngui = \"nope\"");
    assert!(reason.contains("no gui named \"nope\""), "{reason}");
    let reason = refused("frames = 30\ngui = \"gui\"", "frames = 30\ngui = \"hog\"");
    assert!(reason.contains("\"hog\" is not a gui"), "{reason}");
    let reason = refused("kind = \"video\"", "kind = \"vid\"");
    assert!(reason.contains("gui, video"), "{reason}");
    let reason = refused("threads = 1", "threads = 1\nstart = \"1s\"");
    assert!(reason.contains("serves for the whole run"), "{reason}");
}

#[test]
fn a_video_needs_its_gui() {
    let text = MEDIA.replacen("frames = 30\ngui = \"gui\"\n", "frames = 30\n", 1);
    let e = Scenario::parse(&text, "bad.toml").unwrap_err();
    assert!(e.reason.contains("missing key `gui`"), "{e}");
    assert_eq!(e.line, 15, "the video's table: {e}");
    // A configuration running a video without its gui.
    let (line, reason) = refusal(
        "interference = { gui = \"plain\", tt",
        "interference = { tt",
    );
    assert_eq!(line, 40, "the configuration's table: {reason}");
    assert!(
        reason.contains("video \"tt\" sends its frames to gui \"gui\", which does not run"),
        "{reason}"
    );
}
