//! cyclictest (rt-tests) as a scenario's reference: one thread at the
//! probe's period and priority, started after the warm-up on the run's
//! core, its `-h` histogram read back as the kernel's own wake-up latency.
//!
//! It owns cyclictest's command line and histogram format for scenario runs
//! and the process it starts (killed at its limit); it must never run beside
//! the probe it is compared with, nor judge the numbers.

use std::fs::File;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_measure::LatencyHistogram;
use tessera_sys::clock::{monotonic_ns, sleep_until_monotonic_ns};

/// cyclictest waiting for its slot in a configuration: it starts after the
/// warm-up and runs for the measured duration, one thread on `core`.
pub struct Cyclictest {
    start: Option<mpsc::Sender<u64>>,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<LatencyHistogram, String>>,
}

impl Cyclictest {
    pub fn prepare(
        period: Duration,
        priority: Option<u32>,
        core: Option<usize>,
        warmup: Duration,
        duration: Duration,
    ) -> Cyclictest {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (start, start_rx) = mpsc::channel::<u64>();
        let handle = std::thread::spawn(move || {
            let t0 = start_rx.recv().map_err(|_| "never started".to_string())?;
            let begin = t0 + warmup.as_nanos() as u64;
            while monotonic_ns() < begin {
                if flag.load(Ordering::Relaxed) {
                    return Err("stopped before its start".into());
                }
                sleep_until_monotonic_ns(begin.min(monotonic_ns() + 50_000_000));
            }
            // Once started it ends by itself (-D) or is killed at its limit.
            run_cyclictest(period, priority, core, duration)
        });
        Cyclictest {
            start: Some(start),
            stop,
            handle,
        }
    }

    pub fn start(&self, t0: u64) {
        if let Some(s) = &self.start {
            let _ = s.send(t0);
        }
    }

    pub fn join(mut self) -> Result<LatencyHistogram, String> {
        self.start = None;
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .unwrap_or_else(|_| Err("cyclictest thread panicked".into()))
    }
}

/// The arguments of a cyclictest run like the probe's. `--laptop`: by
/// default cyclictest holds a 0 µs CPU wake-up latency target
/// (/dev/cpu_dma_latency) while it runs, so idle CPUs poll instead of
/// halting — on a VM that saves an exit and entry per wake-up, tens of µs.
/// The probe runs without it, so cyclictest must too, or the comparison
/// measures the power-management setting rather than the scheduler.
pub fn cyclictest_args(
    period: Duration,
    priority: Option<u32>,
    core: Option<usize>,
    duration: Duration,
    bound_us: u64,
) -> Vec<String> {
    let mut args = vec![
        "-q".to_string(),
        "--laptop".into(),
        "-m".into(),
        "-t".into(),
        "1".into(),
        format!("-i{}", period.as_micros()),
        format!("-p{}", priority.unwrap_or(0)),
        format!("-D{}", duration.as_secs().max(1)),
        format!("-h{bound_us}"),
    ];
    if let Some(c) = core {
        args.push(format!("-a{c}"));
    }
    args
}

fn run_cyclictest(
    period: Duration,
    priority: Option<u32>,
    core: Option<usize>,
    duration: Duration,
) -> Result<LatencyHistogram, String> {
    let bound_us = (2 * period.as_micros() as u64).max(10_000);
    let out_path =
        std::env::temp_dir().join(format!("tessera-cyclictest-{}.txt", std::process::id()));
    let out = File::create(&out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
    let mut child = Command::new("cyclictest")
        .args(cyclictest_args(period, priority, core, duration, bound_us))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start cyclictest: {e}"))?;
    let give_up = Instant::now() + duration + Duration::from_secs(10);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() > give_up => {
                let _ = child.kill();
                let _ = child.wait();
                break Err("cyclictest did not end in time; killed".to_string());
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => break Err(format!("wait for cyclictest: {e}")),
        }
    };
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    let status = status?;
    if !status.success() {
        return Err(format!("cyclictest failed ({status})"));
    }
    parse_histogram(&text, bound_us)
}

/// Reads cyclictest's `-h` output: "<µs> <count>" lines, and the overflow
/// count (recorded at the bound, where the histogram saturates).
pub fn parse_histogram(text: &str, bound_us: u64) -> Result<LatencyHistogram, String> {
    let mut h = LatencyHistogram::new(bound_us * 1000);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# Histogram Overflows:") {
            let overflows: u64 = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            (0..overflows).for_each(|_| h.record(bound_us * 1000));
            continue;
        }
        let mut fields = line.split_whitespace();
        if let (Some(us), Some(count)) = (fields.next(), fields.next()) {
            if let (Ok(us), Ok(count)) = (us.parse::<u64>(), count.parse::<u64>()) {
                (0..count).for_each(|_| h.record(us * 1000));
            }
        }
    }
    if h.count() == 0 {
        return Err("cyclictest printed no histogram".into());
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cyclictest_histograms_parse_with_overflows() {
        let out = "# /dev/cpu_dma_latency set to 0us\n000000 000000\n000003 000010\n000004 000005\n# Total: 000000016\n# Histogram Overflows: 00001\n";
        let h = parse_histogram(out, 100).unwrap();
        assert_eq!(h.count(), 16);
        assert_eq!(h.max_ns() / 1000, 100);
        assert!(parse_histogram("# nothing\n", 100).is_err());
    }

    #[test]
    fn cyclictest_runs_like_the_probe() {
        let args = cyclictest_args(
            Duration::from_millis(5),
            Some(80),
            Some(1),
            Duration::from_secs(10),
            10_000,
        );
        for a in ["-i5000", "-p80", "-D10", "-a1", "-h10000", "-m", "--laptop"] {
            assert!(args.iter().any(|x| x == a), "{a} missing from {args:?}");
        }
    }
}
