//! `tessera why` end to end: live as root (a line per miss and the totals
//! as JSON, with the kernel's events read), and as an unprivileged user
//! (it says the events cannot be read and counts nothing but "unknown",
//! without failing). Each bounded by `--seconds`.

mod common;

use common::{as_nobody, privileged};
use std::process::{Command, Stdio};

/// A process whose one thread wakes every 2 ms and sleeps again.
fn sleeper(m: &mut common::Machine) -> u32 {
    m.spawn(
        Command::new("sh")
            .args(["-c", "while :; do sleep 0.002; done"])
            .stdin(Stdio::null())
            .stdout(Stdio::null()),
    )
}

#[test]
fn why_reads_the_kernel_events_as_root_and_prints_json() {
    let Some(mut m) = privileged("why_live") else {
        return;
    };
    let pid = sleeper(&mut m).to_string();
    let out = m.run(&[
        "why",
        "--pid",
        &pid,
        "--deadline",
        "100us",
        "--seconds",
        "1.5",
        "--json",
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    let totals = lines.last().expect("the totals");
    assert!(totals["unavailable"].is_null(), "{totals}");
    assert!(totals["cycles"].as_u64().unwrap() > 0, "{totals}");
    for miss in &lines[..lines.len() - 1] {
        assert!(miss["cause"].is_string() && miss["parts_us"].is_object());
    }
}

#[test]
fn why_without_privileges_says_so_and_reports_unknown() {
    let Some(mut m) = privileged("why_unprivileged") else {
        return;
    };
    let pid = sleeper(&mut m).to_string();
    let out = as_nobody(
        &m,
        &[
            "why",
            "--pid",
            &pid,
            "--deadline",
            "1ms",
            "--seconds",
            "0.5",
        ],
    );
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot be read"), "{stderr}");
    assert!(stderr.contains("\"unknown\""), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 misses"));
}
