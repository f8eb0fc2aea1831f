//! `tessera bench lowest` end to end: as root, a very short search (one
//! server, two sizes, 2 s trials) runs plain and guarded trials, prints
//! every figure as JSON, writes its report and plot, and leaves no process
//! and no scratch directory behind; malformed sizes are refused before
//! anything runs. Asserts behaviour, never timing.

mod common;

use common::{leftover_files, marked_processes, privileged, run_logged};
use std::process::Stdio;

fn assert_trial(trial: &serde_json::Value) {
    let frames = trial["frames"].as_u64().expect("frames");
    assert!([256, 512].contains(&frames), "tried {frames}: {trial}");
    for field in ["failures", "xruns", "late", "skipped", "cycles"] {
        assert!(trial[field].is_u64(), "{field} missing: {trial}");
    }
    assert!(trial["cycles"].as_u64().unwrap() > 0, "no cycle: {trial}");
    assert!(trial["duration_s"].as_f64().unwrap() > 2.0, "{trial}");
    assert!(trial["latency_ms"].as_f64().unwrap() > 5.0, "{trial}");
    let held = trial["held"].as_bool().expect("held");
    assert_eq!(held, trial["failures"] == 0 && trial["refused"].is_null());
    // The interference ran: both rt-app tasks for the trial, not refused.
    let notes: Vec<&str> = trial["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    for task in ["rt-app-1: ", "rt-app-2: ", "stress-ng: "] {
        let note = notes.iter().find(|n| n.starts_with(task));
        let note = note.unwrap_or_else(|| panic!("no {task} note: {notes:?}"));
        assert!(
            !note.contains("error") && !note.contains("exit status: 2"),
            "{note}"
        );
        assert!(
            !note.contains("ran 0.") && !note.contains("never started"),
            "{note}"
        );
    }
}

/// The configuration's answer agrees with its trials: its lowest size
/// held, and the size below it, if tried, did not.
fn assert_consistent(config: &serde_json::Value) {
    let trials = config["trials"].as_array().expect("trials");
    assert!(!trials.is_empty(), "no trial: {config}");
    trials.iter().for_each(assert_trial);
    let held_at = |frames: u64| {
        trials
            .iter()
            .find(|t| t["frames"] == frames)
            .map(|t| t["held"] == true)
    };
    match config["lowest_frames"].as_u64() {
        Some(lowest) => {
            assert_eq!(held_at(lowest), Some(true), "{config}");
            assert_ne!(held_at(lowest / 2), Some(true), "{config}");
            assert!(config["latency_ms"].as_f64().unwrap() > 0.0);
        }
        None => assert_eq!(
            held_at(512),
            Some(false),
            "none held, so 512 failed: {config}"
        ),
    }
}

#[test]
fn a_short_search_runs_both_configurations_reports_and_leaves_nothing_running() {
    let test = "a_short_search_runs_both_configurations";
    let Some(m) = privileged(test) else { return };
    if !common::can_run_bench(test, &["jackd", "rt-app", "stress-ng"]) {
        return;
    }
    let out = m.dir.join("lowest");
    let marker = format!("{}-{}", std::process::id(), test);
    let child = m
        .tessera()
        .env(common::MARKER_VAR, &marker)
        .args([
            "bench",
            "lowest",
            "--servers",
            "jackd",
            "--frames",
            "256,512",
        ])
        .args(["--seconds", "2", "--warmup", "0.5", "--json", "--out"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tessera bench lowest");
    let pid = child.id();
    let output = child.wait_with_output().expect("wait for tessera");
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "tessera bench lowest failed");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON output");

    assert_eq!(json["frames"], serde_json::json!([256, 512]));
    assert_eq!(
        (json["rate"].as_u64(), json["clients"].as_u64()),
        (Some(48_000), Some(10))
    );
    assert!(json["search"].as_str().unwrap().contains("monotonic"));
    assert!(json["stopped"].is_null(), "{}", json["stopped"]);
    let servers = json["servers"].as_array().expect("servers");
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0]["server"], "jackd");
    let configs = servers[0]["configs"].as_array().expect("configs");
    let names: Vec<&str> = configs
        .iter()
        .map(|c| c["config"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["plain", "guarded"]);
    assert_eq!(configs[0]["scheduling"], "fifo:70");
    assert_eq!(configs[1]["scheduling"], "guard");
    configs.iter().for_each(assert_consistent);
    let ratio = &servers[0]["ratio"];
    assert!(ratio.is_null() || ratio.as_f64().unwrap() > 0.0, "{ratio}");

    for file in [
        "lowest.json",
        "README.md",
        "failures-by-buffer.png",
        "failures-by-buffer.svg",
    ] {
        assert!(out.join(file).is_file(), "{file} not written");
    }
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(readme.contains("| jackd | plain |"), "{readme}");

    assert_eq!(
        marked_processes(&marker),
        Vec::<String>::new(),
        "left running"
    );
    assert_eq!(leftover_files(pid), Vec::<String>::new(), "left behind");
}

#[test]
fn sizes_that_are_not_powers_of_two_are_refused_before_anything_runs() {
    let dir = std::env::temp_dir().join(format!("tessera-lowest-refused-{}", std::process::id()));
    let out = run_logged(
        std::process::Command::new(env!("CARGO_BIN_EXE_tessera")).stdin(Stdio::null()),
        &[
            "bench",
            "lowest",
            "--frames",
            "100,256",
            "--out",
            dir.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("100 frames"), "{stderr}");
    assert!(stderr.contains("powers of two"), "{stderr}");
    assert!(!dir.exists(), "a refused run wrote {}", dir.display());
}
