//! The audio-server subject (seed 001 §4.4–4.6 on jackd2 and PipeWire):
//! it parses with its defaults, malformed ones are refused with the line
//! and the reason, and (as root) a short run on a private jackd — and on a
//! private PipeWire when its daemon starts — records cycles and leaves no
//! server behind. Asserts behaviour, never speed.

mod common;

use common::{built, within};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;
use tessera_experiments::audio_server::{Headline, CLIENT_END, END_TO_END};
use tessera_experiments::runner;
use tessera_experiments::scenario::{Scenario, ServerKind, ServerSched, Subject};

/// Tests that change PATH, or spawn programs found through it, take turns.
static ENVIRONMENT: Mutex<()> = Mutex::new(());

const JACK: &str = r#"name = "audio"
duration = "2500ms"
warmup = "500ms"
core = "last"

[subject]
kind = "audio-server"
server = "jackd"
frames = 128
rate = 96000
priority = 15

[[subject.client]]
load = 0.1

[[subject.client]]
load = 0.1
start = "500ms"
stop = "2800ms"

[[configuration]]
name = "fifo"
subject = "fifo:15"
"#;

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// `JACK` on PipeWire, which sets its own priority.
fn on_pipewire() -> String {
    JACK.replace("server = \"jackd\"", "server = \"pipewire\"")
        .replace("priority = 15\n", "")
        .replace("subject = \"fifo:15\"", "subject = \"fifo\"")
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
    tessera_experiments::servers::PIPEWIRE_PROGRAMS
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
         [[configuration]]\nname = \"plain default\"\n"
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
    assert_eq!(scheds, ["fifo:15", "guard:no-reclaim,fixed=95", "fifo:15"]);
    let Some(ServerSched::Guard(g)) = &s.configurations[1].server else {
        panic!()
    };
    assert_eq!(g.args(), ["--no-reclaim", "--fixed", "95"]);
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
    let pipewire = on_pipewire();
    let refused = |dir: &Path| {
        std::env::set_var("PATH", dir);
        let result = Scenario::parse(&pipewire, "pw.toml");
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
    let s = Scenario::parse(&pipewire, "pw.toml").unwrap();
    assert_eq!(s.configurations[0].server, Some(ServerSched::Fifo(None)));
    let with_priority = pipewire.replace("subject = \"fifo\"", "subject = \"fifo:88\"");
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

/// Processes or /dev/shm files of a server this process started.
fn leftovers() -> Vec<String> {
    let marker = format!("tessera-{}-", std::process::id());
    let mut found: Vec<String> = std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.contains(&marker))
        .collect();
    let pw_marker = format!("tessera-pw-{}-", std::process::id());
    found.extend(
        std::fs::read_dir(std::env::temp_dir())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| f.contains(&pw_marker)),
    );
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let server = cmdline.starts_with("jackd") || cmdline.contains("/jackd ");
        if server && (cmdline.contains(&marker)) {
            found.push(format!(
                "process {}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
        let pipewire = cmdline.trim() == "pipewire" || cmdline.starts_with("/usr/bin/pipewire ");
        if pipewire {
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            if String::from_utf8_lossy(&environ).contains(&pw_marker) {
                found.push(format!("pipewire {}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// Runs `text` as root for its one configuration; None (after printing
/// why) when the test cannot run here.
fn short_run(test: &str, text: &str) -> Option<tessera_measure::ConfigurationResult> {
    let machine = tessera_testkit::privileged(test)?;
    if !built(test, "tessera-jack-peer") {
        return None;
    }
    std::env::set_var("TESSERA_RUN_DIR", machine.dir());
    let scenario = Scenario::parse(text, "audio.toml").unwrap();
    let dir = machine.dir().join("report");
    let outcome = within(Duration::from_secs(90), move || {
        runner::run(&scenario, &dir, |_| {}).map_err(|e| e.to_string())
    })
    .unwrap();
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
    outcome.results.configurations.into_iter().next()
}

fn assert_cycles_recorded(result: &tessera_measure::ConfigurationResult) {
    let notes = result.notes.join("; ");
    let headline = result
        .notes
        .iter()
        .find_map(|n| Headline::parse(n))
        .unwrap_or_else(|| panic!("no headline: {notes}"));
    // 2.5 s measured at 1333 µs: about 1875 cycles.
    assert!(headline.cycles > 1000, "{notes}");
    let e2e = result.metric(END_TO_END).expect("end-to-end");
    assert!(e2e.summary.count > 1000, "{notes}");
    let ends = result.metric(CLIENT_END).expect("client end");
    assert_eq!(ends.series.len(), 2, "one series per client: {notes}");
}

#[test]
fn a_short_jackd_run_records_cycles_and_leaves_no_jackd() {
    let _env = environment();
    if !installed("jackd") {
        eprintln!("SKIPPED jackd run: jackd is not installed (apt-get install jackd2)");
        return;
    }
    let Some(result) = short_run("audio-server on jackd", JACK) else {
        return;
    };
    assert!(
        !result.notes.iter().any(|n| n.starts_with("not run")),
        "{:?}",
        result.notes
    );
    assert_cycles_recorded(&result);
}

#[test]
fn a_short_pipewire_run_records_cycles_when_its_daemon_starts() {
    let _env = environment();
    if !pipewire_installed() {
        eprintln!("SKIPPED PipeWire run: not installed (apt-get install pipewire pipewire-bin pipewire-jack)");
        return;
    }
    let text = on_pipewire();
    let Some(result) = short_run("audio-server on PipeWire", &text) else {
        return;
    };
    if let Some(why) = result.notes.iter().find(|n| n.starts_with("not run")) {
        eprintln!("SKIPPED PipeWire run: its daemon did not start here: {why}");
        return;
    }
    assert_cycles_recorded(&result);
}
