//! Applications as the unit of guarantee, end to end as root: a program
//! with one thread it makes SCHED_FIFO and two busy threads at SCHED_OTHER
//! run under `tessera cell exec` — the FIFO thread takes the cell's
//! reservation, the busy ones get reservations of their own (the
//! application's share), SCHED_FIFO hogs outside cannot take the busy
//! threads' CPU below their floor, and everything is given back when the
//! program exits. With `--rt-only` the same hogs starve them: the share is
//! what protects them.

mod common;

use common::{privileged, wait_until_within, Machine};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};
use tessera_sys::sched::{self, Policy};

/// The application's floor, % of a CPU, split between its two busy threads.
const FLOOR_PCT: f64 = 20.0;
/// How long the hogs run.
const HOGGED: Duration = Duration::from_secs(3);

fn probe_path() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tessera")).with_file_name("tessera-thread-probe")
}

/// `tessera cell exec app [share flags] -- probe`: three threads, the first
/// made SCHED_FIFO, the other two working 15 % of every 10 ms.
fn exec_probe(m: &Machine, share: &[&str]) -> (Child, ChildStdin, Receiver<String>) {
    let mut cmd = m.tessera();
    cmd.args(["cell", "exec", "app"])
        .args(share)
        .arg("--")
        .arg(probe_path())
        .args(["--threads", "3", "--fifo", "1", "--busy", "15"])
        .args(["--delay-ms", "100", "--seconds", "60"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn tessera cell exec");
    let stdin = child.stdin.take().unwrap();
    let (tx, rx) = channel();
    for out in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                eprintln!("  | {line}");
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
    }
    (child, stdin, rx)
}

/// Collects lines until `done` holds for what was seen, or `within` passes.
fn lines_until(
    rx: &Receiver<String>,
    within: Duration,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let end = Instant::now() + within;
    let mut seen = Vec::new();
    while !done(&seen) {
        let left = end.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "timed out; saw: {seen:#?}");
        if let Ok(line) = rx.recv_timeout(left.min(Duration::from_millis(200))) {
            seen.push(line);
        }
    }
    seen
}

/// The probe's busy threads (index 1 and 2) by their `thread` lines.
fn busy_tids(lines: &[String]) -> Vec<i32> {
    lines
        .iter()
        .filter(|l| l.starts_with("thread index=1 ") || l.starts_with("thread index=2 "))
        .filter_map(|l| l.split(" tid=").nth(1)?.split(' ').next()?.parse().ok())
        .collect()
}

fn fifo_tid(lines: &[String]) -> Option<i32> {
    lines
        .iter()
        .find(|l| l.starts_with("thread index=0 "))
        .and_then(|l| l.split(" tid=").nth(1)?.split(' ').next()?.parse().ok())
}

fn cpu_ns(pid: i32, tid: i32) -> u64 {
    tessera_sys::proc::thread_cpu_ns(pid, tid).unwrap_or(0)
}

/// A SCHED_FIFO spinner on each core (the kernel's RT throttling leaves
/// normal threads 5 %), killed by its PID when dropped.
struct Hogs(Vec<Child>);

impl Hogs {
    fn start() -> Hogs {
        let cores = tessera_sys::kernel::online_cpus().expect("online cpus");
        Hogs(
            cores
                .iter()
                .map(|core| {
                    Command::new("chrt")
                        .args(["-f", "50", "taskset", "-c", &core.to_string()])
                        .args(["sh", "-c", "while :; do :; done"])
                        .spawn()
                        .expect("start a FIFO hog")
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

/// What each busy thread got, % of a CPU, while the hogs ran.
fn share_under_hogs(pid: i32, tids: &[i32]) -> Vec<f64> {
    let before: Vec<u64> = tids.iter().map(|&t| cpu_ns(pid, t)).collect();
    let start = Instant::now();
    {
        let _hogs = Hogs::start();
        std::thread::sleep(HOGGED);
    }
    let elapsed = start.elapsed().as_nanos() as f64;
    tids.iter()
        .zip(before)
        .map(|(&t, b)| (cpu_ns(pid, t) - b) as f64 * 100.0 / elapsed)
        .collect()
}

fn probe_pid(lines: &[String]) -> i32 {
    lines
        .iter()
        .find_map(|l| l.strip_prefix("probe pid=")?.trim().parse().ok())
        .expect("the probe said its pid")
}

fn create_global_cell(m: &Machine) {
    m.ok(&[
        "cell",
        "create",
        "app",
        "--policy",
        "event-triggered",
        "--runtime",
        "1ms",
        "--period",
        "10ms",
        "--placement",
        "global",
    ]);
}

fn end(mut child: Child, stdin: ChildStdin) {
    drop(stdin);
    let status = child.wait().expect("tessera cell exec ends");
    assert!(status.success(), "the program's status: {status:?}");
}

#[test]
fn a_programs_busy_threads_get_its_share_and_keep_their_floor_under_fifo_hogs() {
    let Some(m) = privileged("app-share-exec") else {
        return;
    };
    create_global_cell(&m);
    let floor = FLOOR_PCT.to_string();
    let (child, mut stdin, rx) = exec_probe(&m, &["--app-share", &floor]);
    let lines = lines_until(&rx, Duration::from_secs(20), |seen| {
        seen.iter()
            .filter(|l| l.contains("the application's share"))
            .count()
            >= 2
            && seen.iter().any(|l| l.contains("its own reservation"))
    });
    let pid = probe_pid(&lines);
    let busy = busy_tids(&lines);
    assert_eq!(busy.len(), 2, "two busy threads: {lines:#?}");
    let fifo = fifo_tid(&lines).expect("the FIFO thread");
    for tid in busy.iter().chain([&fifo]) {
        assert!(
            matches!(sched::get_policy(*tid), Ok(Policy::Deadline(_))),
            "thread {tid} is in a reservation"
        );
    }
    let cells: Vec<String> = m
        .cells()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    for tid in &busy {
        assert!(
            cells.contains(&format!("app-app-{tid}")),
            "share cell of {tid}: {cells:?}"
        );
    }

    let got = share_under_hogs(pid, &busy);
    eprintln!("busy threads under the hogs, % of a CPU: {got:?}");
    let part = FLOOR_PCT / 2.0;
    for (tid, pct) in busy.iter().zip(&got) {
        assert!(
            *pct >= part * 0.8,
            "busy thread {tid} got {pct:.1} % of a CPU under the hogs; its floor is {part} %"
        );
    }

    stdin.write_all(b"").unwrap();
    end(child, stdin);
    wait_until_within("the share cells are gone", Duration::from_secs(5), || {
        m.cells().len() == 1
    });
    assert_eq!(
        m.json(&["cell", "show", "app", "--json"])["members"]
            .as_array()
            .unwrap()
            .len(),
        0,
        "no member is left behind"
    );
}

#[test]
fn without_a_share_the_same_hogs_starve_the_busy_threads() {
    let Some(m) = privileged("app-share-rt-only") else {
        return;
    };
    create_global_cell(&m);
    let (child, stdin, rx) = exec_probe(&m, &["--rt-only"]);
    let lines = lines_until(&rx, Duration::from_secs(20), |seen| {
        seen.iter().any(|l| l.contains("its own reservation"))
            && seen.iter().filter(|l| l.contains("best-effort")).count() >= 2
    });
    // A window passes: nothing is shared with --rt-only.
    std::thread::sleep(Duration::from_millis(1500));
    let pid = probe_pid(&lines);
    let busy = busy_tids(&lines);
    assert_eq!(busy.len(), 2);
    for tid in &busy {
        assert!(
            matches!(sched::get_policy(*tid), Ok(Policy::Other { .. })),
            "thread {tid} stays SCHED_OTHER"
        );
    }
    let got = share_under_hogs(pid, &busy);
    eprintln!("busy threads under the hogs, % of a CPU: {got:?}");
    let part = FLOOR_PCT / 2.0;
    assert!(
        got.iter().all(|pct| *pct < part * 0.8),
        "unshared, the hogs take the busy threads' CPU: {got:?}"
    );
    end(child, stdin);
    assert_eq!(m.cells().len(), 1, "only the cell made here");
}
