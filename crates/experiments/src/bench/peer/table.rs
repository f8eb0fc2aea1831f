//! The run's text table: p50/p99/max in µs per configuration, cycles,
//! xruns and late cycles, then the ratios the goals are stated in
//! (tessera's overhead and scheduling latency over each peer's, tessera's
//! driver wake-up over cyclictest's).
//!
//! It only formats figures it is given; it must never judge them pass/fail
//! nor measure anything.

use tessera_measure::LatencyHistogram;

use super::clients::{configuration, label};
use super::setup::{Figures, Options, Topology, SERVERS};

fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

fn percentiles(h: &LatencyHistogram) -> String {
    if h.count() == 0 {
        return format!("{:>23}", "–");
    }
    format!(
        "{:>7.1} {:>7.1} {:>7.1}",
        us(h.quantile(0.5)),
        us(h.quantile(0.99)),
        us(h.max_ns())
    )
}

/// The run's table: p50/p99/max in µs per configuration, then the ratios the
/// issue's goals are stated in.
pub fn table(options: &Options, figures: &[Figures]) -> String {
    let mut out = header(options);
    for f in figures {
        out.push_str(&row(f));
    }
    out.push_str(&ratios(figures));
    out
}

fn header(options: &Options) -> String {
    format!(
        "{} frames @ {} Hz (period {:.1} µs), {} loads × {:.0} %, SCHED_FIFO {}, {:.0} s per configuration, \
         CPU latency target {}\n\
         all figures µs: p50 p99 max\n\n{:<18} {:>23} {:>23} {:>23} {:>7} {:>6} {:>6}\n",
        options.frames,
        options.sample_rate,
        options.period_ns() as f64 / 1_000.0,
        options.loads,
        options.load_fraction * 100.0,
        options.priority,
        options.seconds,
        if options.cpu_latency_target { "0 µs (all configurations)" } else { "none" },
        "configuration",
        "overhead",
        "scheduling latency",
        "driver wake-up",
        "cycles",
        "xruns",
        "late"
    )
}

fn row(f: &Figures) -> String {
    let empty = LatencyHistogram::new(2);
    let xruns = f.xruns.map_or("–".to_string(), |n| n.to_string());
    format!(
        "{:<18} {} {} {} {:>7} {:>6} {:>6}\n",
        f.name,
        percentiles(&f.overhead),
        percentiles(&f.scheduling),
        percentiles(f.wakeup.as_ref().unwrap_or(&empty)),
        f.cycles,
        xruns,
        f.late_cycles
    )
}

/// tessera against each peer, per topology, for every pair in `figures`.
fn ratios(figures: &[Figures]) -> String {
    let peers: Vec<&str> = SERVERS.iter().map(|k| label(*k)).collect();
    let mut out = format!(
        "\nratios (goal: overhead ≤ 0.50 × {}; wake-up p99 ≤ 1.20 × cyclictest)\n",
        peers.join(" and ")
    );
    let find = |name: &str| figures.iter().find(|f| f.name == name);
    for topology in Topology::ALL {
        let Some(t) = find(&format!("tessera {}", topology.name())) else {
            continue;
        };
        for kind in SERVERS {
            let Some(peer) = find(&configuration(kind, topology)) else {
                continue;
            };
            let over = format!("tessera/{}", label(kind));
            out.push_str(&ratio_line(
                topology,
                "overhead",
                &over,
                &t.overhead,
                &peer.overhead,
            ));
            out.push_str(&ratio_line(
                topology,
                "scheduling latency",
                &over,
                &t.scheduling,
                &peer.scheduling,
            ));
        }
        let cyclic = find("cyclictest").and_then(|c| c.wakeup.as_ref());
        if let (Some(c), Some(w)) = (cyclic, t.wakeup.as_ref()) {
            let over = "tessera/cyclictest";
            out.push_str(&ratio_line(topology, "driver wake-up", over, w, c));
        }
    }
    out
}

/// One ratio line: `a ÷ b` at p50 and p99.
fn ratio_line(
    topology: Topology,
    figure: &str,
    over: &str,
    a: &LatencyHistogram,
    b: &LatencyHistogram,
) -> String {
    format!(
        "  {:<8} {:<19} {:<18} p50 {:.2}  p99 {:.2}\n",
        topology.name(),
        figure,
        over,
        ratio(a.quantile(0.5), b.quantile(0.5)),
        ratio(a.quantile(0.99), b.quantile(0.99))
    )
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 / b as f64
    }
}

#[cfg(test)]
mod tests {
    use super::super::setup::HISTOGRAM_MAX_NS;
    use super::*;

    fn figures(name: &str, overhead_ns: u64, xruns: Option<u64>) -> Figures {
        let mut overhead = LatencyHistogram::new(HISTOGRAM_MAX_NS);
        overhead.record(overhead_ns);
        let mut scheduling = LatencyHistogram::new(HISTOGRAM_MAX_NS);
        scheduling.record(1_000);
        Figures {
            name: name.into(),
            overhead,
            scheduling,
            wakeup: None,
            cycle_time: LatencyHistogram::new(HISTOGRAM_MAX_NS),
            cycles: 1,
            xruns,
            late_cycles: 0,
            notes: Vec::new(),
        }
    }

    #[test]
    fn tessera_is_compared_with_both_peers() {
        let options = Options::new("unused".into());
        let all = [
            figures("tessera chain", 10_000, Some(0)),
            figures("JACK2 chain", 40_000, Some(2)),
            figures("PipeWire chain", 20_000, None),
        ];
        let text = table(&options, &all);
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("no line with {needle:?} in\n{text}"))
                .to_string()
        };
        assert!(line("overhead ≤ 0.50 × JACK2 and PipeWire").starts_with("ratios"));
        assert!(line("overhead            tessera/JACK2").contains("p50 0.25"));
        assert!(line("overhead            tessera/PipeWire").contains("p50 0.50"));
        assert!(line("latency  tessera/PipeWire").contains("p50 1.00"));
        // PipeWire tells its JACK clients of no xrun: not a zero.
        let pipewire = line("PipeWire chain ");
        assert_eq!(pipewire.split_whitespace().rev().nth(1), Some("–"));
        assert_eq!(
            line("JACK2 chain ").split_whitespace().rev().nth(1),
            Some("2")
        );
        // No fan-out figures, no fan-out ratios.
        assert!(!text.contains("fan-out  overhead"));
    }
}
