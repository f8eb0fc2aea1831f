//! The audio-server subject (seed 001 §4.4–4.6 on jackd2 and PipeWire) as
//! a scenario: it parses with its defaults, malformed ones are refused with
//! the line and the reason, PipeWire without its packages is refused, and
//! the shipped audio-server scenarios parse.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;
use tessera_scenario::{Scenario, ServerKind, ServerSched, Subject};

/// Tests that change PATH, or spawn programs found through it, take turns.
static ENVIRONMENT: Mutex<()> = Mutex::new(());

const JACK: &str = include_str!("fixtures/audio-server.toml");
/// `JACK` on PipeWire, which sets its own priority.
const PIPEWIRE: &str = include_str!("fixtures/audio-server-pipewire.toml");

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn environment() -> std::sync::MutexGuard<'static, ()> {
    ENVIRONMENT.lock().unwrap_or_else(|p| p.into_inner())
}

/// `JACK` with `from` replaced by `to`, refused: (line, reason).
fn refusal(from: &str, to: &str) -> (usize, String) {
    assert!(JACK.contains(from), "{from:?} not in JACK");
    let text = JACK.replacen(from, to, 1);
    let e = Scenario::parse(&text, "bad.toml").expect_err("should be refused");
    assert!(e.to_string().starts_with("bad.toml:"), "{e}");
    (e.line, e.reason)
}

fn installed(program: &str) -> bool {
    tessera_sys::process::installed(program)
}

fn pipewire_installed() -> bool {
    ServerKind::PipeWire
        .programs()
        .iter()
        .all(|(program, _)| installed(program))
}

#[test]
fn an_audio_server_parses_with_its_clients_and_schedulings() {
    let _env = environment();
    if !installed("jackd") {
        eprintln!("SKIPPED audio-server parsing: jackd is not installed (apt-get install jackd2)");
        return;
    }
    let text = format!(
        "{JACK}\n[[configuration]]\nname = \"g\"\nsubject = \"guard:no-reclaim,fixed=95\"\n\n\
         [[configuration]]\nname = \"plain default\"\n\n\
         [[configuration]]\nname = \"w\"\nsubject = \"guard:workgroup\"\n\n\
         [[configuration]]\nname = \"f\"\nsubject = \"guard:fixed=95,global\"\n"
    );
    let s = Scenario::parse(&text, "audio.toml").unwrap();
    let Subject::AudioServer(a) = &s.subject else {
        panic!("not an audio server: {:?}", s.subject)
    };
    assert_eq!(
        (a.server, a.frames, a.rate, a.priority),
        (ServerKind::Jack, 128, 96_000, 15)
    );
    assert_eq!(a.period().as_nanos(), 1_333_333);
    assert_eq!(a.clients.len(), 2);
    assert_eq!(a.clients[1].stop, Some(Duration::from_millis(2800)));
    let scheds: Vec<String> = s
        .configurations
        .iter()
        .map(|c| c.server.as_ref().unwrap().describe())
        .collect();
    assert_eq!(
        scheds,
        [
            "fifo:15",
            "guard:no-reclaim,fixed=95",
            "fifo:15",
            "guard:workgroup",
            "guard:fixed=95,global"
        ]
    );
    let Some(ServerSched::Guard(g)) = &s.configurations[1].server else {
        panic!()
    };
    assert_eq!(g.args(), ["--no-reclaim", "--fixed", "95"]);
    let Some(ServerSched::Guard(w)) = &s.configurations[3].server else {
        panic!()
    };
    // The clients' option: the guard's command line is its default.
    assert!(w.workgroup && w.args().is_empty());
    let Some(ServerSched::Guard(f)) = &s.configurations[4].server else {
        panic!()
    };
    // Its placement is the guard's `--core`, chosen where it starts.
    assert!(f.global && f.args() == ["--fixed", "95"]);
    assert!(s.configurations.iter().all(|c| c.needs_privilege()));
    let Subject::AudioServer(short) = s.scaled(0.5).subject else {
        panic!()
    };
    assert_eq!(short.clients[1].start, Duration::from_millis(250));
}

#[test]
fn malformed_audio_servers_name_line_and_reason() {
    let _env = environment();
    if !installed("jackd") {
        eprintln!("SKIPPED audio-server refusals: jackd is not installed (apt-get install jackd2)");
        return;
    }
    let (line, reason) = refusal("server = \"jackd\"", "server = \"esd\"");
    assert_eq!(line, 8);
    assert!(
        reason.contains("unknown server \"esd\" (jackd, pipewire)"),
        "{reason}"
    );
    let (line, reason) = refusal("frames = 128", "frames = 100");
    assert_eq!(line, 9);
    assert!(reason.contains("power of two from 16 to 4096"), "{reason}");
    let (_, reason) = refusal("frames = 128", "frames = 8192");
    assert!(reason.contains("not 8192"), "{reason}");
    let (line, reason) = refusal("load = 0.1\nstart", "load = 0.95\nstart");
    assert!((6..=20).contains(&line), "{line}");
    assert!(reason.contains("add up to 1.05"), "{reason}");
    let (line, reason) = refusal("subject = \"fifo:15\"", "subject = \"cell:x\"");
    assert_eq!(line, 23);
    assert!(reason.contains("schedules itself"), "{reason}");
    let (_, reason) = refusal("subject = \"fifo:15\"", "subject = \"guard:turbo\"");
    assert!(
        reason.contains("unknown guard option \"turbo\""),
        "{reason}"
    );
    let (_, reason) = refusal("subject = \"fifo:15\"", "subject = \"guard:fixed=0\"");
    assert!(reason.contains("percentage from 1 to 100"), "{reason}");
    let (line, reason) = refusal("priority = 15", "priority = 3");
    assert_eq!(line, 11);
    assert!(reason.contains("5 below the server"), "{reason}");
    let (_, reason) = refusal(
        "[[configuration]]",
        "[subject.staircase]\nclients = 2\nload = 0.1\nevery = \"1s\"\n\n[[configuration]]",
    );
    assert!(reason.contains("not both"), "{reason}");
    let (_, reason) = refusal("start = \"500ms\"\nstop = \"2800ms\"", "start = \"9s\"");
    assert!(reason.contains("after the run ends"), "{reason}");
}

#[test]
fn pipewire_is_refused_without_its_packages_and_schedules_itself() {
    let _env = environment();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let bin = std::env::temp_dir().join(format!("tessera-no-pw-jack-{}", std::process::id()));
    std::fs::create_dir_all(&bin).unwrap();
    for program in ["pipewire", "pw-metadata"] {
        let _ = std::os::unix::fs::symlink("/bin/true", bin.join(program));
    }
    let refused = |dir: &Path| {
        std::env::set_var("PATH", dir);
        let result = Scenario::parse(PIPEWIRE, "pw.toml");
        std::env::set_var("PATH", &path);
        result.expect_err("refused")
    };
    let empty = std::env::temp_dir().join(format!("tessera-empty-path-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let e = refused(&empty);
    assert_eq!(e.line, 8, "{e}");
    assert!(e.reason.contains("apt-get install pipewire)"), "{e}");
    let e = refused(&bin);
    assert!(
        e.reason
            .contains("pw-jack is not installed (Debian: apt-get install pipewire-jack)"),
        "{e}"
    );
    assert_eq!(std::env::var_os("PATH").unwrap_or_default(), path);
    let _ = std::fs::remove_dir_all(&bin);
    let _ = std::fs::remove_dir_all(&empty);
    if !pipewire_installed() {
        eprintln!("SKIPPED PipeWire's own scheduling: PipeWire is not installed");
        return;
    }
    let s = Scenario::parse(PIPEWIRE, "pw.toml").unwrap();
    assert_eq!(s.configurations[0].server, Some(ServerSched::Fifo(None)));
    let with_priority = PIPEWIRE.replace("subject = \"fifo\"", "subject = \"fifo:88\"");
    let e = Scenario::parse(&with_priority, "pw.toml").unwrap_err();
    assert!(e.reason.contains("PipeWire sets its own"), "{e}");
}

#[test]
fn the_shipped_audio_server_scenarios_parse() {
    let _env = environment();
    let mut names = vec![
        "thesis-4.4-jack",
        "thesis-4.5",
        "thesis-4.6",
        "thesis-4.6-32",
    ];
    if pipewire_installed() {
        names.push("thesis-4.4-pipewire");
    }
    if !installed("jackd") {
        eprintln!("SKIPPED the shipped audio-server scenarios: jackd is not installed");
        return;
    }
    for name in names {
        let s = Scenario::from_file(&repo(&format!("scenarios/{name}.toml")))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(s.subject, Subject::AudioServer(_)), "{name}");
        assert!(s
            .configurations
            .iter()
            .any(|c| matches!(c.server, Some(ServerSched::Guard(_)))));
        assert!(
            s.description.contains("thesis"),
            "{name}: the thesis's finding"
        );
    }
    let stairs = Scenario::from_file(&repo("scenarios/thesis-4.5.toml")).unwrap();
    let Subject::AudioServer(a) = &stairs.subject else {
        panic!()
    };
    assert_eq!(a.clients.len(), 10);
    assert_eq!(a.clients[9].start.as_secs(), 54);
    let load: f64 = a.clients.iter().map(|c| c.load).sum();
    assert!((load - 0.75).abs() < 1e-9);
}
