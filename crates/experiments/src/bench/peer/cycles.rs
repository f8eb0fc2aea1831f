//! The per-cycle arithmetic every configuration shares: a cycle's nodes
//! with their times, the work no schedule can avoid, the overhead, and a
//! configuration's [`Figures`] from its cycles.
//!
//! It is pure: it must never run anything, read a file or know which engine
//! the cycles came from.

use tessera_measure::LatencyHistogram;

use super::setup::{Figures, Options, Topology, HISTOGRAM_MAX_NS};

/// A node's place in the fan-out (every chain node is a load).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Source,
    Load,
    Sink,
}

impl Role {
    pub(super) fn of(name: &str, topology: Topology) -> Role {
        match (topology, name) {
            (Topology::FanOut, "source") => Role::Source,
            (Topology::FanOut, "sink") => Role::Sink,
            _ => Role::Load,
        }
    }
}

/// A node's times in one cycle, in ns from the cycle's start.
#[derive(Debug, Clone, Copy)]
pub struct NodeTimes {
    pub role: Role,
    pub signalled_ns: u64,
    pub awake_ns: u64,
    pub finished_ns: u64,
    /// CPU time of its process callback.
    pub work_ns: u64,
}

/// One cycle's nodes; times are relative to `start_ns` (0).
#[derive(Debug, Clone)]
pub struct CycleNodes {
    pub start_ns: u64,
    pub nodes: Vec<NodeTimes>,
}

impl CycleNodes {
    /// Cycle start → last node finished.
    pub fn end_to_end_ns(&self) -> u64 {
        let end = self.nodes.iter().map(|n| n.finished_ns).max().unwrap_or(0);
        end.saturating_sub(self.start_ns)
    }

    /// The least time `cores` threads need for this cycle's work in
    /// `topology`: chain, all work in sequence; fan-out, the longer of the
    /// critical path and the total work spread over the cores.
    pub fn unavoidable_work_ns(&self, topology: Topology, cores: usize) -> u64 {
        let total: u64 = self.nodes.iter().map(|n| n.work_ns).sum();
        match topology {
            Topology::Chain => total,
            Topology::FanOut => {
                let of = |role| {
                    self.nodes
                        .iter()
                        .filter(move |n: &&NodeTimes| n.role == role)
                };
                let longest_load = of(Role::Load).map(|n| n.work_ns).max().unwrap_or(0);
                let path: u64 = of(Role::Source)
                    .chain(of(Role::Sink))
                    .map(|n| n.work_ns)
                    .sum::<u64>()
                    + longest_load;
                path.max(total / cores.max(1) as u64)
            }
        }
    }

    /// End-to-end time not explained by the nodes' own work (0 if the work
    /// explains all of it).
    pub fn overhead_ns(&self, topology: Topology, cores: usize) -> u64 {
        self.end_to_end_ns()
            .saturating_sub(self.unavoidable_work_ns(topology, cores))
    }
}

/// A configuration's figures from its cycles (no wake-up latency, no xruns:
/// the caller adds what its engine tells).
pub(super) fn figures(
    name: String,
    topology: Topology,
    options: &Options,
    cycles: &[CycleNodes],
) -> Figures {
    let mut overhead = LatencyHistogram::new(HISTOGRAM_MAX_NS);
    let mut scheduling = LatencyHistogram::new(HISTOGRAM_MAX_NS);
    let mut cycle_time = LatencyHistogram::new(HISTOGRAM_MAX_NS);
    let mut late_cycles = 0;
    for cycle in cycles {
        overhead.record(cycle.overhead_ns(topology, options.cores));
        cycle_time.record(cycle.end_to_end_ns());
        late_cycles += u64::from(cycle.end_to_end_ns() > options.period_ns());
        for node in &cycle.nodes {
            scheduling.record(node.awake_ns.saturating_sub(node.signalled_ns));
        }
    }
    Figures {
        name,
        overhead,
        scheduling,
        wakeup: None,
        cycle_time,
        cycles: cycles.len() as u64,
        xruns: None,
        late_cycles,
        notes: vec![format!(
            "{} loads of {:.0} % of the period, {} cores",
            options.loads,
            options.load_fraction * 100.0,
            options.cores
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(role: Role, signalled: u64, awake: u64, finished: u64, work: u64) -> NodeTimes {
        NodeTimes {
            role,
            signalled_ns: signalled,
            awake_ns: awake,
            finished_ns: finished,
            work_ns: work,
        }
    }

    #[test]
    fn chain_overhead_is_end_to_end_minus_all_work() {
        let cycle = CycleNodes {
            start_ns: 0,
            nodes: vec![
                node(Role::Load, 0, 10, 110, 100),
                node(Role::Load, 110, 130, 230, 100),
            ],
        };
        assert_eq!(cycle.end_to_end_ns(), 230);
        assert_eq!(cycle.overhead_ns(Topology::Chain, 2), 30);
    }

    #[test]
    fn fan_out_overhead_counts_the_cores_the_loads_must_share() {
        let mut nodes = vec![node(Role::Source, 0, 0, 10, 10)];
        nodes.extend((0..4).map(|_| node(Role::Load, 10, 10, 300, 100)));
        nodes.push(node(Role::Sink, 300, 300, 310, 10));
        let cycle = CycleNodes { start_ns: 0, nodes };
        // Path: 10 + 100 + 10 = 120; spread: 420 / 2 = 210.
        assert_eq!(cycle.unavoidable_work_ns(Topology::FanOut, 2), 210);
        assert_eq!(cycle.overhead_ns(Topology::FanOut, 2), 100);
        // On one core only the sum is unavoidable.
        assert_eq!(cycle.unavoidable_work_ns(Topology::FanOut, 1), 420);
        // The critical path wins when cores are plenty.
        assert_eq!(cycle.unavoidable_work_ns(Topology::FanOut, 8), 120);
    }

    #[test]
    fn figures_count_late_cycles_against_the_period() {
        let options = Options::new("unused".into());
        let period = options.period_ns();
        let cycle = |end: u64| CycleNodes {
            start_ns: 0,
            nodes: vec![node(Role::Load, 0, 5, end, 10)],
        };
        let f = figures(
            "x".into(),
            Topology::Chain,
            &options,
            &[cycle(period), cycle(period + 1)],
        );
        assert_eq!((f.cycles, f.late_cycles, f.xruns), (2, 1, None));
        assert_eq!(f.scheduling.quantile(0.5), 5);
    }
}
