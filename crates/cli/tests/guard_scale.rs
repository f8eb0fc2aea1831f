//! `tessera bench guard-scale` end to end: as root, a small session (four
//! load clients on JACK2 and on PipeWire, 2 s together) is guarded, every
//! figure comes out as JSON — the guard's and the daemon's CPU, the delays
//! to each client's reservation, the graph's cycles and the client's
//! budgets (changes a second, reserved ÷ used) in the steady phase —
//! and no process and no scratch directory is left. Asserts behaviour,
//! never timing.

mod common;

use common::{leftover_files, marked_processes, privileged};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Longer than the run (two servers: 1 s of joining, 2 s settling, 2 s
/// together, and their start and stop) can take on a stalled host.
const DEADLINE: Duration = Duration::from_secs(240);

fn assert_server(s: &serde_json::Value) {
    assert_eq!(s["clients"], 4, "{s}");
    for phase in ["joining", "steady"] {
        for part in ["guard_pct", "daemon_pct", "total_pct"] {
            let pct = s[phase][part].as_f64().unwrap_or(-1.0);
            // In clock ticks (10 ms): a short phase may read 0.
            assert!((0.0..=200.0).contains(&pct), "{phase}.{part}: {s}");
        }
    }
    let seen = s["threads_seen"].as_u64().expect("threads_seen");
    let reserved = s["threads_reserved"].as_u64().expect("threads_reserved");
    // Seen real-time by polling every 2 ms: a thread the guard reserved
    // sooner is not counted.
    assert!(seen >= 1, "client threads turned real-time: {s}");
    assert!(
        (1..=seen).contains(&reserved),
        "the guard reserved client threads: {s}"
    );
    assert!(s["within_interval"].as_u64().unwrap() <= reserved, "{s}");
    let exited = s["exited_unreserved"].as_u64().expect("exited_unreserved");
    assert!(exited <= seen - reserved, "{s}");
    // Every client thread still real-time at the end was reserved by then.
    assert_eq!(s["unreserved_at_end"], 0, "{s}");
    assert!(s["deadline_at_end"].as_u64().unwrap() >= 1, "{s}");
    assert!(
        s["to_reservation_ms"]["p50"].as_f64().unwrap() >= 0.0,
        "{s}"
    );
    assert!(
        s["steady_cycles"].as_u64().unwrap() > 0,
        "the clients recorded the graph's cycles: {s}"
    );
    for field in ["xruns", "steady_late", "steady_lost"] {
        assert!(s[field].is_u64(), "{field}: {s}");
    }
    let budgets = &s["steady_budgets"];
    assert!(
        budgets["reserved_cpus"].as_f64().unwrap() > 0.0,
        "the client's reservations were read in the steady phase: {s}"
    );
    for field in ["changes_per_s", "used_cpus", "reserved_per_used"] {
        assert!(budgets[field].as_f64().unwrap() >= 0.0, "{field}: {s}");
    }
    // Applications joining in processes of their own are found and
    // reserved too (how soon is the bench's figure, not the test's).
    let apps = &s["applications"];
    assert_eq!(apps["started"], 2, "{s}");
    assert!(
        apps["threads_reserved"].as_u64().unwrap() >= 1,
        "an application's thread was reserved: {s}"
    );
    let (apps_seen, apps_reserved) = (
        apps["threads_seen"].as_u64().unwrap(),
        apps["threads_reserved"].as_u64().unwrap(),
    );
    assert!(apps_reserved <= apps_seen, "{s}");
    assert!(
        apps["exited_unreserved"].as_u64().unwrap() <= apps_seen - apps_reserved,
        "{s}"
    );
}

#[test]
fn a_small_session_is_guarded_and_measured_on_both_servers_and_nothing_is_left() {
    let test = "guard_scale_small_session";
    let Some(m) = privileged(test) else { return };
    if !common::can_run_bench(test, &["jackd", "pipewire", "pw-jack"]) {
        return;
    }
    let marker = format!("{}-{test}", std::process::id());
    let mut child = m
        .tessera()
        .env(common::MARKER_VAR, &marker)
        .args(["bench", "guard-scale", "--server", "both"])
        .args(["--clients", "4", "--steady", "2", "--apps", "2", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tessera bench guard-scale");
    let pid = child.id();
    let start = Instant::now();
    while child.try_wait().expect("wait for tessera").is_none() {
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("tessera bench guard-scale ran past {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().expect("its output");
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "tessera bench guard-scale failed");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON output");

    assert_eq!(json["interval_ms"], 100);
    let results = json["servers"].as_array().expect("servers");
    let names: Vec<&str> = results
        .iter()
        .filter_map(|s| s["server"].as_str())
        .collect();
    assert_eq!(names, ["jackd", "pipewire"]);
    results.iter().for_each(assert_server);

    assert_eq!(
        marked_processes(&marker),
        Vec::<String>::new(),
        "left running"
    );
    assert_eq!(leftover_files(pid), Vec::<String>::new(), "left behind");
}
