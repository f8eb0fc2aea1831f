//! The kernel's own limits that shape admission: real-time throttling
//! (sched_rt_runtime_us / sched_rt_period_us), the fair server's reserved
//! share (Linux 6.12+), the legal SCHED_DEADLINE period range, online CPUs.
//!
//! It reads the real values and says where each came from; it must never
//! hard-code a figure without labelling it as an assumption.

use crate::error::{read_text, Error, ErrorKind, Result};
use std::path::Path;
use std::time::Duration;

/// The smallest runtime the kernel accepts for SCHED_DEADLINE.
pub const DEADLINE_MIN_RUNTIME: Duration = Duration::from_nanos(1024);

fn read_number(path: &str) -> Option<i64> {
    read_text(Path::new(path)).ok()?.trim().parse().ok()
}

/// (min, max) SCHED_DEADLINE period; falls back to the kernel defaults.
/// Read once per process: every reservation set is checked against it
/// (a daemon resizing 60 reservations ten times a second would read two
/// sysctls 1 200 times a second), and they are set at boot, if ever.
pub fn deadline_period_range() -> (Duration, Duration) {
    static RANGE: std::sync::OnceLock<(Duration, Duration)> = std::sync::OnceLock::new();
    *RANGE.get_or_init(read_deadline_period_range)
}

fn read_deadline_period_range() -> (Duration, Duration) {
    let min = read_number("/proc/sys/kernel/sched_deadline_period_min_us").unwrap_or(100);
    let max = read_number("/proc/sys/kernel/sched_deadline_period_max_us").unwrap_or(4_194_304);
    (
        Duration::from_micros(min.max(0) as u64),
        Duration::from_micros(max.max(0) as u64),
    )
}

/// How much of each CPU SCHED_DEADLINE threads may use, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadlineCapacity {
    /// Fraction of one CPU available to user deadline threads.
    pub per_cpu: f64,
    /// sched_rt_runtime_us / sched_rt_period_us (1.0 when throttling is off).
    pub rt_share: f64,
    /// The fair server's share per CPU (0 before Linux 6.12).
    pub fair_server_share: f64,
    /// Where the figures came from, for explanations.
    pub source: String,
}

/// Reads the capacity the kernel grants deadline threads on each CPU.
pub fn deadline_capacity() -> DeadlineCapacity {
    let runtime = read_number("/proc/sys/kernel/sched_rt_runtime_us");
    let period = read_number("/proc/sys/kernel/sched_rt_period_us");
    let (rt_share, rt_source) = match (runtime, period) {
        (Some(r), Some(p)) if r < 0 => {
            (1.0, format!("rt throttling off (runtime {r}, period {p})"))
        }
        (Some(r), Some(p)) if p > 0 => (
            r as f64 / p as f64,
            format!("sched_rt_runtime_us {r} / sched_rt_period_us {p}"),
        ),
        _ => (0.95, "sched_rt_* unreadable, assumed 0.95".to_string()),
    };
    let (fair_server_share, fair_source) = fair_server_share();
    DeadlineCapacity {
        per_cpu: (rt_share - fair_server_share).max(0.0),
        rt_share,
        fair_server_share,
        source: format!("{rt_source}, {fair_source}"),
    }
}

/// The fair server (a deadline server that keeps SCHED_OTHER alive) takes
/// its bandwidth from the same pool since Linux 6.12. Its parameters live in
/// debugfs, which is often unmounted or locked down; then the kernel default
/// (50 ms every 1 s) is assumed and labelled so.
fn fair_server_share() -> (f64, String) {
    let release = kernel_release();
    if !at_least(&release, 6, 12) {
        return (
            0.0,
            format!("no fair server before 6.12 (kernel {release})"),
        );
    }
    let base = "/sys/kernel/debug/sched/fair_server/cpu0";
    match (
        read_number(&format!("{base}/runtime")),
        read_number(&format!("{base}/period")),
    ) {
        (Some(r), Some(p)) if p > 0 => (
            r as f64 / p as f64,
            format!("fair server {r} ns / {p} ns (debugfs)"),
        ),
        _ => (
            0.05,
            "fair server assumed at the kernel default 0.05 (debugfs unreadable)".to_string(),
        ),
    }
}

/// The running kernel's release, e.g. "6.18.44-fc".
pub fn kernel_release() -> String {
    read_text(Path::new("/proc/sys/kernel/osrelease"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse::<u32>().ok());
    let (Some(ma), Some(mi)) = (parts.next(), parts.next()) else {
        return false;
    };
    (ma, mi) >= (major, minor)
}

/// Parses a kernel CPU list such as "0-3,8,10-11".
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || {
            Error::new(
                ErrorKind::Invalid,
                format!("parse CPU list {:?}", text.trim()),
                format!("{part:?} is not a CPU number or range"),
                "write CPUs as e.g. 0-3,8",
            )
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats CPUs as a kernel CPU list ("0-3,8").
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        out.push(if sorted[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", sorted[i])
        });
        i += 1;
    }
    out.join(",")
}

/// The CPUs the kernel has online.
pub fn online_cpus() -> Result<Vec<usize>> {
    parse_cpu_list(&read_text(Path::new("/sys/devices/system/cpu/online"))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_round_trip() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(format_cpu_list(&[11, 0, 1, 2, 3, 8, 10]), "0-3,8,10-11");
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<usize>::new());
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
    }

    #[test]
    fn release_comparison() {
        assert!(at_least("6.18.44-fc-v669", 6, 12));
        assert!(!at_least("6.1.0-13-amd64", 6, 12));
        assert!(at_least("7.0.1", 6, 12));
    }

    #[test]
    fn capacity_is_a_fraction() {
        let cap = deadline_capacity();
        assert!(cap.per_cpu > 0.0 && cap.per_cpu <= 1.0, "{cap:?}");
    }
}
