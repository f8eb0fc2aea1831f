//! Following an unmodified program in a cell, as root against the real
//! kernel, with `tessera-thread-probe` as the program: the thread it makes
//! SCHED_FIFO later reads back the cell's reservation, its other threads
//! sit in the cell's cpuset at their own policy, the real-time thread that
//! finds no free reservation is named and keeps SCHED_FIFO, and every
//! thread is restored when the program exits or following stops.
//!
//! Each test holds the machine alone (tessera-testkit, which resets it when
//! dropped, even on failure); its probe is killed and reaped by its guard.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};
use tessera_guard::follow::{self, FollowEvent, FollowOptions, Follower};
use tessera_policy::CellRequest;
use tessera_sys::proc;
use tessera_sys::sched::{self, Policy};
use tessera_testkit::privileged;

const PROBE: &str = env!("CARGO_BIN_EXE_tessera-thread-probe");

/// The probe's command: `threads` threads, the first `fifo` made SCHED_FIFO
/// after 300 ms; it lives until its stdin closes (at most 60 s).
fn probe(threads: usize, fifo: usize) -> Command {
    let mut cmd = Command::new(PROBE);
    cmd.args([
        "--threads",
        &threads.to_string(),
        "--fifo",
        &fifo.to_string(),
    ])
    .args([
        "--delay-ms",
        "300",
        "--report-after-ms",
        "3000",
        "--seconds",
        "60",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped());
    cmd
}

/// The probe's output lines, read on a thread of their own.
fn lines_of(child: &mut Child) -> Receiver<String> {
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// One `policy` line: the thread's own reading of its policy once moved.
#[derive(Debug, Clone)]
struct Report {
    tid: i32,
    policy: String,
}

/// `key=value` of a probe line (the policy is the rest of the line).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    let rest = &line[at..];
    Some(if key == "policy" {
        rest
    } else {
        rest.split(' ').next().unwrap_or(rest)
    })
}

/// Steps the follower until every probe thread reported its policy (or
/// 15 s pass); returns the last report of each thread index and the events.
fn follow_until_reported(
    follower: &mut Follower,
    lines: &Receiver<String>,
    threads: usize,
) -> (BTreeMap<usize, Report>, Vec<FollowEvent>) {
    let (all, events) = follow_until_lines(follower, lines, threads);
    (all.into_iter().collect(), events)
}

/// Steps the follower until the probe printed `count` policy lines (or
/// 15 s pass); returns them in order, by thread index, and the events.
fn follow_until_lines(
    follower: &mut Follower,
    lines: &Receiver<String>,
    count: usize,
) -> (Vec<(usize, Report)>, Vec<FollowEvent>) {
    let mut reports = Vec::new();
    let mut events = Vec::new();
    let start = Instant::now();
    while reports.len() < count {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the probe's threads did not all report; so far {reports:?}; events: {events:#?}"
        );
        events.extend(follower.step(Duration::from_millis(20)));
        while let Ok(line) = lines.try_recv() {
            eprintln!("probe: {line}");
            if !line.starts_with("policy ") {
                continue;
            }
            let index = field(&line, "index").unwrap().parse().unwrap();
            let tid = field(&line, "tid").unwrap().parse().unwrap();
            let policy = field(&line, "policy").unwrap().to_string();
            reports.push((index, Report { tid, policy }));
        }
    }
    (reports, events)
}

/// A probe child killed and reaped when dropped (when a test fails early).
struct Reaped(Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn cpuset_of(tid: i32) -> String {
    proc::cgroup_of(tid, Some("cpuset")).unwrap_or_default()
}

fn event_triggered(name: &str, runtime_us: u64, period_us: u64) -> CellRequest {
    CellRequest::event_triggered(name, runtime_us * 1000, period_us * 1000)
}

fn is_deadline_of(policy: &Policy, runtime_us: u64, period_us: u64) -> bool {
    matches!(policy, Policy::Deadline(p)
        if p.runtime == Duration::from_micros(runtime_us) && p.period == Duration::from_micros(period_us))
}

#[test]
fn the_thread_made_fifo_later_gets_the_reservation_and_the_others_the_cpuset() {
    let Some(m) = privileged("follow-readback") else {
        return;
    };
    let mut s = m.session();
    let info = s
        .create_cell(event_triggered("probe", 400, 1333), true)
        .unwrap();
    let core = info.grant.reservations[0].core.expect("partitioned");
    let core_group = format!("/tessera/core{core}");

    let launched =
        follow::spawn_in_cell(m.session(), "probe", probe(3, 1), FollowOptions::default()).unwrap();
    let follow::Launched {
        mut child,
        mut follower,
    } = launched;
    let pid = child.id() as i32;
    let lines = lines_of(&mut child);
    let stdin: Option<ChildStdin> = child.stdin.take();
    let mut child = Reaped(Some(child));
    eprintln!("mechanism: {}", follower.mechanism());

    let (reports, events) = follow_until_reported(&mut follower, &lines, 3);
    for e in &events {
        eprintln!("follow: {e}");
    }
    assert!(
        reports[&0]
            .policy
            .starts_with("SCHED_DEADLINE runtime 400 µs deadline 1333 µs period 1333 µs"),
        "the thread made FIFO reads back the cell's reservation: {reports:?}"
    );
    assert!(is_deadline_of(
        &sched::get_policy(reports[&0].tid).unwrap(),
        400,
        1333
    ));
    assert_eq!(cpuset_of(reports[&0].tid), core_group);
    for i in [1, 2] {
        let r = &reports[&i];
        assert!(
            r.policy.starts_with("SCHED_OTHER"),
            "thread {i} keeps its own policy: {r:?}"
        );
        assert_eq!(
            cpuset_of(r.tid),
            core_group,
            "thread {i} runs in the cell's cpuset"
        );
    }
    assert_eq!(cpuset_of(pid), core_group, "so does the main thread");
    assert!(events
        .iter()
        .any(|e| matches!(e, FollowEvent::Reserved { tid, .. } if *tid == reports[&0].tid)));

    // The program ends: following ends with it and nothing is left behind.
    drop(stdin);
    let status = follow::Launched {
        child: child.0.take().unwrap(),
        follower,
    }
    .wait(|| None, |e| eprintln!("follow: {e}"))
    .unwrap();
    assert!(status.success());
    assert!(
        s.show("probe").unwrap().members.is_empty(),
        "no member is left behind"
    );
    s.destroy_cell("probe").unwrap();
}

#[test]
fn a_real_time_thread_without_a_free_reservation_is_named_and_keeps_fifo() {
    let Some(m) = privileged("follow-no-slot") else {
        return;
    };
    let mut s = m.session();
    s.create_cell(event_triggered("one", 300, 1000), true)
        .unwrap();
    let launched =
        follow::spawn_in_cell(m.session(), "one", probe(3, 2), FollowOptions::default()).unwrap();
    let follow::Launched {
        mut child,
        mut follower,
    } = launched;
    let lines = lines_of(&mut child);
    let _stdin = child.stdin.take();
    let _child = Reaped(Some(child));

    let (reports, events) = follow_until_reported(&mut follower, &lines, 3);
    for e in &events {
        eprintln!("follow: {e}");
    }
    // Which of the two FIFO threads gets the one reservation is a race.
    let (reserved, extra): (Vec<&Report>, Vec<&Report>) = [&reports[&0], &reports[&1]]
        .into_iter()
        .partition(|r| r.policy.starts_with("SCHED_DEADLINE"));
    assert_eq!((reserved.len(), extra.len()), (1, 1), "{reports:?}");
    let extra = extra[0];
    assert!(
        extra.policy.starts_with("SCHED_FIFO priority 10"),
        "{extra:?}"
    );
    assert_eq!(
        sched::get_policy(extra.tid).unwrap(),
        Policy::Fifo { priority: 10 },
        "the extra thread keeps what its program set"
    );
    let named = events.iter().find_map(|e| match e {
        FollowEvent::NoReservation { tid, .. } if *tid == extra.tid => Some(e.to_string()),
        _ => None,
    });
    let named = named.expect("the extra thread is named");
    assert!(named.contains(&format!("thread {}", extra.tid)), "{named}");
    assert!(named.contains("probe-"), "{named}");
    assert!(named.contains("--cores 2"), "{named}");

    let restored = follower.stop();
    assert!(
        restored
            .iter()
            .any(|e| matches!(e, FollowEvent::Restored { tid, .. } if *tid == reserved[0].tid)),
        "{restored:?}"
    );
    assert_eq!(
        sched::get_policy(reserved[0].tid).unwrap(),
        Policy::Fifo { priority: 10 },
        "the reserved thread gets back the policy its program set"
    );
    assert!(s.show("one").unwrap().members.is_empty());
    s.destroy_cell("one").unwrap();
}

#[test]
fn following_a_running_program_and_stopping_restores_every_thread() {
    let Some(m) = privileged("follow-stop") else {
        return;
    };
    let mut s = m.session();
    let info = s
        .create_cell(event_triggered("late", 300, 1000), true)
        .unwrap();
    let core_group = format!("/tessera/core{}", info.grant.reservations[0].core.unwrap());
    let mut child = probe(2, 1).spawn().unwrap();
    let pid = child.id() as i32;
    let lines = lines_of(&mut child);
    let _stdin = child.stdin.take();
    let _child = Reaped(Some(child));
    // Wait until the probe's threads exist, as for `attach --follow`.
    let start = Instant::now();
    while proc::threads_of(pid).unwrap_or_default().len() < 4 {
        assert!(start.elapsed() < Duration::from_secs(5), "probe threads");
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = cpuset_of(pid);
    let options = FollowOptions {
        watch: tessera_guard::watch::WatchOptions {
            force_polling: true,
            children: true,
            ..Default::default()
        },
        ..FollowOptions::default()
    };
    let mut follower = Follower::start(m.session(), "late", pid, options).unwrap();
    assert!(follower
        .mechanism()
        .starts_with("/proc polling every 50 ms"));
    let (reports, _) = follow_until_reported(&mut follower, &lines, 2);
    assert!(
        reports[&0].policy.starts_with("SCHED_DEADLINE"),
        "{reports:?}"
    );
    assert_eq!(cpuset_of(reports[&1].tid), core_group);

    let restored = follower.stop();
    assert!(restored.len() >= 3, "every live thread: {restored:?}");
    assert_eq!(
        sched::get_policy(reports[&0].tid).unwrap(),
        Policy::Fifo { priority: 10 }
    );
    for tid in proc::threads_of(pid).unwrap() {
        assert_ne!(cpuset_of(tid), core_group, "thread {tid} left the cell");
        assert!(!matches!(sched::get_policy(tid), Ok(Policy::Deadline(_))));
    }
    assert_eq!(before, cpuset_of(pid));
    assert!(s.show("late").unwrap().members.is_empty());
    s.destroy_cell("late").unwrap();
}

#[test]
fn a_program_that_takes_its_reservation_back_is_named_reserved_again_then_left() {
    let Some(m) = privileged("follow-retake") else {
        return;
    };
    let mut s = m.session();
    s.create_cell(event_triggered("retake", 300, 1000), true)
        .unwrap();
    // One FIFO thread that sets SCHED_FIFO again four times, once more than
    // the follower re-reserves it (FollowOptions::retakes is 3).
    let mut cmd = probe(1, 1);
    cmd.args(["--retakes", "4", "--report-after-ms", "1500"]);
    let follow::Launched {
        mut child,
        mut follower,
    } = follow::spawn_in_cell(m.session(), "retake", cmd, FollowOptions::default()).unwrap();
    let lines = lines_of(&mut child);
    let _stdin = child.stdin.take();
    let _child = Reaped(Some(child));

    let (reports, events) = follow_until_lines(&mut follower, &lines, 5);
    for e in &events {
        eprintln!("follow: {e}");
    }
    let policies: Vec<&str> = reports.iter().map(|(_, r)| r.policy.as_str()).collect();
    assert!(
        policies[..4]
            .iter()
            .all(|p| p.starts_with("SCHED_DEADLINE")),
        "reserved at first and after each of three take-backs: {policies:?}"
    );
    assert!(
        policies[4].starts_with("SCHED_FIFO priority 10"),
        "then left as its program wants: {policies:?}"
    );
    let tid = reports[0].1.tid;
    let took_back = events
        .iter()
        .filter(|e| matches!(e, FollowEvent::TookBack { tid: t, .. } if *t == tid))
        .count();
    assert_eq!(took_back, 4, "each take-back is said");
    let left = events
        .iter()
        .find(|e| matches!(e, FollowEvent::LeftAlone { tid: t, .. } if *t == tid))
        .expect("the thread is said to be left alone")
        .to_string();
    assert!(
        left.contains("probe-0") && left.contains("SCHED_FIFO"),
        "{left}"
    );
    assert_eq!(
        s.show("retake").unwrap().free_slots,
        Some(1),
        "its reservation is freed"
    );
    drop(follower);
    s.destroy_cell("retake").unwrap();
}
