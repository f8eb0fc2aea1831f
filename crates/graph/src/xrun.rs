//! Xrun reports: which nodes made a cycle miss its deadline, and by how much.
//!
//! Each node has an expected share of the cycle: the deadline split evenly
//! along the graph's longest chain of nodes. A node is named late when the
//! time from being signalled to finishing (scheduling latency + duration)
//! exceeded its share; the report lists the worst offenders first, with their
//! timestamps, so a slow node and a node the scheduler kept waiting are both
//! visible (jackaudio/jack2#149).
//!
//! This module owns the attribution rule. Reports are fixed-size values built
//! on the driver thread: building one must never allocate.

use crate::node::{NodeId, NodeName};
use crate::profiler::NodeTiming;

/// Late nodes an [`XrunReport`] keeps (the worst ones).
pub const MAX_LATE_NODES: usize = 8;

/// A node that took more than its share of a late cycle. Times are offsets
/// from the cycle's start, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LateNode {
    pub node: NodeId,
    pub name: NodeName,
    pub signalled_ns: u64,
    pub awake_ns: u64,
    pub finished_ns: u64,
    /// deadline / nodes on the longest chain.
    pub expected_share_ns: u64,
    /// (finished − signalled) − expected share.
    pub over_share_ns: u64,
}

/// A cycle that did not finish by its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XrunReport {
    pub cycle: u64,
    pub start_ns: u64,
    pub deadline_ns: u64,
    /// Cycle start → last node finished.
    pub driver_end_ns: u64,
    late: [LateNode; MAX_LATE_NODES],
    late_count: usize,
}

impl XrunReport {
    /// Attributes the xrun of a cycle to its nodes. `nodes` yields each node's
    /// id, name and absolute timestamps; `critical_path` is the number of
    /// nodes on the graph's longest chain.
    pub(crate) fn attribute(
        cycle: u64,
        start_ns: u64,
        deadline_ns: u64,
        driver_end_ns: u64,
        critical_path: u32,
        nodes: impl Iterator<Item = (NodeId, NodeName, NodeTiming)>,
    ) -> Self {
        let share = deadline_ns / u64::from(critical_path.max(1));
        let mut report = XrunReport {
            cycle,
            start_ns,
            deadline_ns,
            driver_end_ns,
            late: [LateNode::default(); MAX_LATE_NODES],
            late_count: 0,
        };
        for (node, name, timing) in nodes {
            let own = timing.finished_ns.saturating_sub(timing.signalled_ns);
            if own > share {
                report.insert(LateNode {
                    node,
                    name,
                    signalled_ns: timing.signalled_ns.saturating_sub(start_ns),
                    awake_ns: timing.awake_ns.saturating_sub(start_ns),
                    finished_ns: timing.finished_ns.saturating_sub(start_ns),
                    expected_share_ns: share,
                    over_share_ns: own - share,
                });
            }
        }
        report
    }

    /// Late nodes, most over their share first.
    pub fn late_nodes(&self) -> &[LateNode] {
        &self.late[..self.late_count]
    }

    /// How far past the deadline the cycle finished.
    pub fn late_by_ns(&self) -> u64 {
        self.driver_end_ns.saturating_sub(self.deadline_ns)
    }

    /// Keeps the list sorted by `over_share_ns`, dropping the smallest when
    /// full.
    fn insert(&mut self, late: LateNode) {
        let mut at = self.late_count;
        while at > 0 && self.late[at - 1].over_share_ns < late.over_share_ns {
            at -= 1;
        }
        if at == MAX_LATE_NODES {
            return;
        }
        let end = (self.late_count + 1).min(MAX_LATE_NODES);
        self.late.copy_within(at..end - 1, at + 1);
        self.late[at] = late;
        self.late_count = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(signalled: u64, finished: u64) -> NodeTiming {
        NodeTiming {
            signalled_ns: signalled,
            awake_ns: signalled,
            finished_ns: finished,
            ..NodeTiming::default()
        }
    }

    #[test]
    fn names_the_nodes_over_their_share_worst_first() {
        let nodes = [
            (NodeId(0), NodeName::new("src"), timing(0, 100)),
            (NodeId(1), NodeName::new("slow"), timing(100, 5_000)),
            (NodeId(2), NodeName::new("waited"), timing(5_000, 6_500)),
        ];
        // Deadline 3000 over a chain of 3: share 1000.
        let report = XrunReport::attribute(9, 0, 3_000, 6_500, 3, nodes.into_iter());
        let names: Vec<&str> = report
            .late_nodes()
            .iter()
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(names, ["slow", "waited"]);
        assert_eq!(report.late_nodes()[0].over_share_ns, 3_900);
        assert_eq!(report.late_by_ns(), 3_500);
    }

    #[test]
    fn keeps_only_the_worst_when_many_are_late() {
        let nodes =
            (0..20u64).map(|i| (NodeId(i as u32), NodeName::new("n"), timing(0, 2_000 + i)));
        let report = XrunReport::attribute(0, 0, 1_000, 3_000, 1, nodes);
        assert_eq!(report.late_nodes().len(), MAX_LATE_NODES);
        assert_eq!(report.late_nodes()[0].node, NodeId(19));
        assert_eq!(report.late_nodes()[MAX_LATE_NODES - 1].node, NodeId(12));
    }
}
