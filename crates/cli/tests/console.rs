//! `tessera serve console` end to end, across processes and unprivileged:
//! writers in other processes open it by name through the broker and their
//! lines arrive in order after their name and pid; a writer killed is
//! noticed and reported; the service's report on SIGTERM counts every
//! writer; and a service that stopped or was killed leaves its writers
//! dropping lines (counted), never waiting.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tessera_services::console::{self, service::WRITER_LINES, ConsoleWriter};
use tessera_testkit::Reaped;

const CHILD_LINES: usize = 100;

/// Runs in a child process: writes lines to the console service named in
/// the environment, says so, and holds its writer if asked to (to be
/// killed). (Invoked by the test below through the test binary.)
#[test]
fn console_writer_helper() {
    let Ok(lines) = std::env::var("TESSERA_TEST_CONSOLE_LINES") else {
        return;
    };
    let mut writer = console::connect("console", "child").unwrap();
    for i in 0..lines.parse::<usize>().unwrap() {
        assert!(writer.line(format_args!("child line {i}")));
    }
    println!("written");
    std::io::stdout().flush().unwrap();
    if std::env::var("TESSERA_TEST_CONSOLE_HOLD").is_ok() {
        std::thread::sleep(Duration::from_secs(60));
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn serve(dir: &Path, extra: &[&str], stderr: &Path) -> Reaped {
    let child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .env("TESSERA_RUN_DIR", dir)
        .args(["serve", "console"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .expect("start tessera serve console");
    Reaped(child)
}

/// A writer process: `lines` lines, then exit (or hold its writer).
fn writer_process(dir: &Path, lines: usize, hold: bool) -> Reaped {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "console_writer_helper",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("TESSERA_RUN_DIR", dir)
    .env("TESSERA_TEST_CONSOLE_LINES", lines.to_string())
    .stdout(Stdio::piped());
    if hold {
        cmd.env("TESSERA_TEST_CONSOLE_HOLD", "1");
    }
    let mut child = cmd.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("written") {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the writer process died before it wrote"
        );
    }
    // The rest of its output (its test harness's) goes nowhere, not into a
    // closed pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Reaped(child)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Writes twice a ring's worth into a console that is gone: at most a
/// ring's worth lands in the dead ring, the rest is dropped and counted,
/// and neither the lines nor letting go of the writer waits.
fn drops_without_waiting(mut writer: ConsoleWriter) {
    let start = Instant::now();
    let written = (0..2 * WRITER_LINES)
        .filter(|i| writer.line(format_args!("into the void {i}")))
        .count();
    assert!(
        written <= WRITER_LINES,
        "{written} lines into a ring of {WRITER_LINES}"
    );
    assert_eq!(writer.dropped(), (2 * WRITER_LINES - written) as u64);
    drop(writer);
    assert!(
        start.elapsed() < Duration::from_millis(300),
        "took {:?}",
        start.elapsed()
    );
}

#[test]
fn writers_in_other_processes_reach_the_console_service_and_outlive_it() {
    let scratch = tessera_testkit::ScratchDir::new("console-service");
    let dir: PathBuf = scratch.paths.dir.clone();
    std::env::set_var("TESSERA_RUN_DIR", &dir);
    let log = dir.join("console.log");
    let stderr = dir.join("serve.err");
    let mut service = serve(&dir, &["--log", log.to_str().unwrap()], &stderr);
    let service_pid = service.0.id() as i32;
    wait_until("the service is registered", || {
        tessera_broker::Session::connect()
            .and_then(|mut s| s.list_services())
            .is_ok_and(|services| services.iter().any(|s| s.entry.name == "console"))
    });

    // A writer process that writes and exits, one that is killed holding
    // its writer, and this process.
    let mut done = writer_process(&dir, CHILD_LINES, false);
    let done_pid = done.0.id();
    assert!(done.0.wait().unwrap().success());
    let mut killed = writer_process(&dir, 1, true);
    let killed_pid = killed.0.id();
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    let mut parent = console::connect("console", "parent").unwrap();
    assert_eq!(parent.console_pid(), service_pid);
    assert!(parent.line(format_args!("parent line")));
    wait_until("the killed writer is noticed", || {
        read(&log).contains(&format!(
            "console: child[{killed_pid}] died: 1 lines, 0 dropped"
        ))
    });
    wait_until("the parent's line arrives", || {
        read(&log).contains("parent line")
    });
    let text = read(&log);
    let lines: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with(&format!("child[{done_pid}]: ")))
        .map(String::from)
        .collect();
    let expected: Vec<String> = (0..CHILD_LINES)
        .map(|i| format!("child[{done_pid}]: child line {i}"))
        .collect();
    assert_eq!(lines, expected, "{text}");
    assert!(text.contains(&format!(
        "console: child[{done_pid}] closed: {CHILD_LINES} lines, 0 dropped"
    )));

    // SIGTERM: the service reports every writer on its way out.
    tessera_sys::process::terminate(service_pid).unwrap();
    assert!(service.0.wait().unwrap().success());
    let report = read(&stderr);
    for expected in [
        format!("child[{done_pid}]: {CHILD_LINES} lines, 0 dropped, closed"),
        format!("child[{killed_pid}]: 1 lines, 0 dropped, died"),
        format!("parent[{}]: 1 lines, 0 dropped, open", std::process::id()),
    ] {
        assert!(report.contains(&expected), "{expected:?} not in\n{report}");
    }
    drops_without_waiting(parent);

    // Killed outright this time, reached by its socket.
    let socket = dir.join("console.sock");
    let mut service = serve(&dir, &["--socket", socket.to_str().unwrap()], &stderr);
    wait_until("the second service is registered", || {
        tessera_broker::Session::connect()
            .and_then(|mut s| s.list_services())
            .is_ok_and(|services| {
                services.iter().any(|s| {
                    s.entry.name == "console" && s.entry.process.pid == service.0.id() as i32
                })
            })
    });
    let mut writer = console::connect(socket.to_str().unwrap(), "parent").unwrap();
    assert!(writer.line(format_args!("before the kill")));
    service.0.kill().unwrap();
    service.0.wait().unwrap();
    drops_without_waiting(writer);
}
