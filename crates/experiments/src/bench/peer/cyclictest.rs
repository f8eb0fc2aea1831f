//! cyclictest (rt-tests) as the run's floor: one thread at the period and
//! the priority of the audio threads, its histogram file read back as the
//! kernel's own wake-up latency.
//!
//! It owns cyclictest's command line and histogram format; it must never
//! set the machine's latency target itself (the run holds one for every
//! configuration, or asks for `--laptop`).

use std::fs;
use std::process::Command;

use tessera_measure::LatencyHistogram;

use super::setup::{run_to_end, tool, Figures, Options, PeerError, HISTOGRAM_MAX_NS};

/// Bound of cyclictest's histogram, in µs (its resolution is 1 µs).
const HISTOGRAM_US: u64 = 20_000;

pub(super) fn run(options: &Options) -> Result<Figures, PeerError> {
    let histfile = options.out_dir.join("cyclictest-histogram.txt");
    let interval_us = options.period_ns() / 1_000;
    let mut command = Command::new(&options.cyclictest);
    if !options.cpu_latency_target {
        command.arg("--laptop");
    }
    command
        .args(["-m", "-q", "-t", "1"])
        .arg(format!("-p{}", options.priority))
        .arg(format!("-i{interval_us}"))
        .arg(format!("-D{}", options.seconds.ceil() as u64))
        .arg(format!("-h{HISTOGRAM_US}"))
        .arg(format!("--histfile={}", histfile.display()));
    run_to_end(
        &mut command,
        "cyclictest",
        "run as root (cyclictest needs SCHED_FIFO and mlockall)",
    )?;
    let text = fs::read_to_string(&histfile).map_err(tool("reading cyclictest's histogram", ""))?;
    let wakeup = parse_cyclictest_histogram(&text)?;
    let empty = || LatencyHistogram::new(HISTOGRAM_MAX_NS);
    Ok(Figures {
        name: "cyclictest".into(),
        cycles: wakeup.count(),
        overhead: empty(),
        scheduling: empty(),
        cycle_time: empty(),
        wakeup: Some(wakeup),
        xruns: None,
        late_cycles: 0,
        notes: vec![format!(
            "cyclictest -m -q -t 1 -p{} -i{interval_us} (1 µs resolution){}",
            options.priority,
            if options.cpu_latency_target {
                ""
            } else {
                " --laptop"
            }
        )],
    })
}

/// cyclictest's histogram file: `#` comment lines, then `bucket_us count`
/// rows (one count column per thread; one thread here).
pub fn parse_cyclictest_histogram(text: &str) -> Result<LatencyHistogram, PeerError> {
    let parse_error = |message: String| PeerError::Parse {
        what: "cyclictest".into(),
        message,
    };
    let mut histogram = LatencyHistogram::new(HISTOGRAM_MAX_NS);
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let mut fields = line.split_whitespace().map(str::parse::<u64>);
        let (Some(Ok(bucket_us)), Some(Ok(count))) = (fields.next(), fields.next()) else {
            return Err(parse_error(format!("histogram row {line:?}")));
        };
        for _ in 0..count {
            histogram.record(bucket_us * 1_000);
        }
    }
    if histogram.count() == 0 {
        return Err(parse_error("an empty histogram".into()));
    }
    Ok(histogram)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cyclictest_histogram_rows_become_samples() {
        let text = "# Histogram\n000001 000003\n000002 000001\n# Total: 000000004\n# Max Latencies: 00002\n";
        let h = parse_cyclictest_histogram(text).unwrap();
        assert_eq!(h.count(), 4);
        assert_eq!(h.quantile(0.5), 1_000);
        assert!(parse_cyclictest_histogram("# nothing\n").is_err());
    }
}
