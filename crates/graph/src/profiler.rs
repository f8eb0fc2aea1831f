//! The always-on profiler: per cycle and per node timings kept in a
//! preallocated ring of the last N cycles, written out after the run as CSV
//! or JSON.
//!
//! This module owns the ring and the output formats. Recording must never
//! allocate: the ring is sized at engine start (`EngineConfig::profile_cycles`
//! × `EngineConfig::max_nodes` node rows) and overwritten oldest first.
//!
//! # Columns
//!
//! All times are nanoseconds; absolute times are `CLOCK_MONOTONIC`, node
//! times are offsets from the cycle's start.
//!
//! Cycles (`write_cycles_csv`, JSON `cycles`):
//!
//! | column | meaning |
//! |---|---|
//! | `cycle` | cycle sequence number |
//! | `start_ns` | cycle start: timer expiry seen by the driver, or arrival of the first packet of the input package (t1) |
//! | `period_ns` | actual period: this start minus the previous cycle's start (0 for the first cycle recorded by the engine) |
//! | `nominal_period_ns` | frames / sample rate |
//! | `deadline_ns` | the cycle's deadline, relative to its start |
//! | `driver_end_ns` | cycle start → last node finished (JACK2's "driver end"; pw-top's BUSY is its per-node counterpart) |
//! | `dsp_load` | `driver_end_ns / nominal_period_ns` (busy / period, like jack_cpu_load before smoothing) |
//! | `xrun` | 1 if the cycle ended after its scheduled start plus `deadline_ns` (`wakeup_latency_ns + driver_end_ns > deadline_ns`), or periods were lost since a previous cycle that was on time |
//! | `skipped_periods` | periods the timer driver skipped to realign after a late cycle |
//! | `wakeup_latency_ns` | driver wake-up latency: start minus the scheduled wake-up (timer driver; 0 otherwise), cyclictest's latency |
//! | `thread_cpu_ns` | CPU time (`CLOCK_THREAD_CPUTIME_ID`) the engine's threads consumed for this cycle: the driver's whole cycle plus the node runs on workers |
//! | `budget_set_ns`, `budget_used_ns` | the reservation's budget and its consumption this period, from the runtime's [`BudgetProbe`] (0 without one) |
//! | `response_ns` | response time Δt: output written − start (packet driver; empty otherwise) |
//! | `nodes` | nodes run in the cycle |
//!
//! Nodes (`write_nodes_csv`, JSON `nodes`):
//!
//! | column | meaning |
//! |---|---|
//! | `cycle` | cycle sequence number |
//! | `node`, `name` | node id and name |
//! | `thread` | 0 = driver thread, k = worker k |
//! | `signalled_ns` | when its last predecessor finished (0 for sources: the driver starts them) |
//! | `awake_ns` | when a thread started running it (pw-top's WAIT ends here) |
//! | `finished_ns` | when its process callback returned |
//! | `latency_ns` | scheduling latency: `awake_ns − signalled_ns` (pw-top WAIT) |
//! | `duration_ns` | `finished_ns − awake_ns` (pw-top BUSY, JACK2's client duration) |
//! | `cpu_ns` | CPU time its process callback consumed on its thread's CPU-time clock |

use std::io::{self, Write};

use crate::node::NodeName;

/// A node's timestamps in the current cycle (absolute `CLOCK_MONOTONIC` ns).
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeTiming {
    pub signalled_ns: u64,
    pub awake_ns: u64,
    pub finished_ns: u64,
    pub cpu_ns: u64,
    pub thread: u16,
}

/// Budget of the reservation the engine runs in, for one period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    pub set_ns: u64,
    pub used_ns: u64,
}

/// Supplies the budget columns; installed by the cell runtime. Called on the
/// driver thread at the end of every cycle: it must not allocate or block.
pub trait BudgetProbe: Send {
    fn sample(&mut self, cycle: &CycleRecord) -> Budget;
}

/// One cycle's row.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct CycleRecord {
    pub cycle: u64,
    pub start_ns: u64,
    pub period_ns: u64,
    pub nominal_period_ns: u64,
    pub deadline_ns: u64,
    pub driver_end_ns: u64,
    pub dsp_load: f64,
    pub xrun: bool,
    pub skipped_periods: u64,
    pub wakeup_latency_ns: u64,
    pub thread_cpu_ns: u64,
    pub budget_set_ns: u64,
    pub budget_used_ns: u64,
    pub response_ns: Option<u64>,
    pub nodes: u32,
}

/// One node's row in one cycle.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct NodeRecord {
    pub cycle: u64,
    pub node: u32,
    pub name: NodeName,
    pub thread: u16,
    pub signalled_ns: u64,
    pub awake_ns: u64,
    pub finished_ns: u64,
    pub latency_ns: u64,
    pub duration_ns: u64,
    pub cpu_ns: u64,
}

impl NodeRecord {
    /// The row of a node whose cycle started at `start_ns`.
    pub(crate) fn new(
        cycle: u64,
        start_ns: u64,
        node: u32,
        name: NodeName,
        t: &NodeTiming,
    ) -> Self {
        let offset = |at: u64| at.saturating_sub(start_ns);
        NodeRecord {
            cycle,
            node,
            name,
            thread: t.thread,
            signalled_ns: offset(t.signalled_ns),
            awake_ns: offset(t.awake_ns),
            finished_ns: offset(t.finished_ns),
            latency_ns: t.awake_ns.saturating_sub(t.signalled_ns),
            duration_ns: t.finished_ns.saturating_sub(t.awake_ns),
            cpu_ns: t.cpu_ns,
        }
    }
}

/// The ring of the last `capacity` cycles. Written by the driver thread only.
pub(crate) struct Profiler {
    max_nodes: usize,
    cycles: Box<[CycleRecord]>,
    nodes: Box<[NodeRecord]>,
    /// Slot the next cycle goes to.
    next: usize,
    recorded: usize,
}

impl Profiler {
    pub(crate) fn new(capacity: usize, max_nodes: usize) -> Self {
        let capacity = capacity.max(1);
        Profiler {
            max_nodes,
            cycles: vec![CycleRecord::default(); capacity].into_boxed_slice(),
            nodes: vec![NodeRecord::default(); capacity * max_nodes].into_boxed_slice(),
            next: 0,
            recorded: 0,
        }
    }

    /// Records a cycle and its nodes (at most `max_nodes`), overwriting the
    /// oldest cycle when full. Allocation-free.
    pub(crate) fn record(&mut self, cycle: CycleRecord, nodes: impl Iterator<Item = NodeRecord>) {
        let slot = self.next;
        let rows = &mut self.nodes[slot * self.max_nodes..(slot + 1) * self.max_nodes];
        let mut count = 0;
        for (row, node) in rows.iter_mut().zip(nodes) {
            *row = node;
            count += 1;
        }
        self.cycles[slot] = CycleRecord {
            nodes: count as u32,
            ..cycle
        };
        self.next = (slot + 1) % self.cycles.len();
        self.recorded += 1;
    }

    /// The recorded cycles, oldest first.
    pub(crate) fn into_profile(self) -> Profile {
        let capacity = self.cycles.len();
        let kept = self.recorded.min(capacity);
        let first = (self.next + capacity - kept) % capacity;
        let mut profile = Profile::default();
        for slot in (0..kept).map(|i| (first + i) % capacity) {
            let cycle = self.cycles[slot];
            let rows = &self.nodes[slot * self.max_nodes..];
            profile
                .nodes
                .extend_from_slice(&rows[..cycle.nodes as usize]);
            profile.cycles.push(cycle);
        }
        profile
    }
}

/// The profiler's contents after a run: see the module doc for the columns.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Profile {
    pub cycles: Vec<CycleRecord>,
    pub nodes: Vec<NodeRecord>,
}

/// Header of [`Profile::write_cycles_csv`].
pub const CYCLES_CSV_HEADER: &str = "cycle,start_ns,period_ns,nominal_period_ns,deadline_ns,driver_end_ns,dsp_load,xrun,skipped_periods,wakeup_latency_ns,thread_cpu_ns,budget_set_ns,budget_used_ns,response_ns,nodes";
/// Header of [`Profile::write_nodes_csv`].
pub const NODES_CSV_HEADER: &str =
    "cycle,node,name,thread,signalled_ns,awake_ns,finished_ns,latency_ns,duration_ns,cpu_ns";

impl Profile {
    pub fn write_cycles_csv(&self, mut out: impl Write) -> io::Result<()> {
        writeln!(out, "{CYCLES_CSV_HEADER}")?;
        for c in &self.cycles {
            let response = c.response_ns.map(|r| r.to_string()).unwrap_or_default();
            writeln!(
                out,
                "{},{},{},{},{},{},{:.6},{},{},{},{},{},{},{},{}",
                c.cycle,
                c.start_ns,
                c.period_ns,
                c.nominal_period_ns,
                c.deadline_ns,
                c.driver_end_ns,
                c.dsp_load,
                u8::from(c.xrun),
                c.skipped_periods,
                c.wakeup_latency_ns,
                c.thread_cpu_ns,
                c.budget_set_ns,
                c.budget_used_ns,
                response,
                c.nodes
            )?;
        }
        Ok(())
    }

    /// Node names are written as they are; names containing commas or quotes
    /// are quoted CSV-style.
    pub fn write_nodes_csv(&self, mut out: impl Write) -> io::Result<()> {
        writeln!(out, "{NODES_CSV_HEADER}")?;
        for n in &self.nodes {
            writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{}",
                n.cycle,
                n.node,
                csv_field(n.name.as_str()),
                n.thread,
                n.signalled_ns,
                n.awake_ns,
                n.finished_ns,
                n.latency_ns,
                n.duration_ns,
                n.cpu_ns
            )?;
        }
        Ok(())
    }

    /// `{"cycles": [...], "nodes": [...]}` with the CSV columns as fields.
    pub fn write_json(&self, out: impl Write) -> io::Result<()> {
        serde_json::to_writer_pretty(out, self).map_err(io::Error::from)
    }
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycle(n: u64) -> CycleRecord {
        CycleRecord {
            cycle: n,
            ..CycleRecord::default()
        }
    }

    fn node(cycle: u64) -> NodeRecord {
        let timing = NodeTiming {
            signalled_ns: 1_000,
            awake_ns: 1_500,
            finished_ns: 4_000,
            cpu_ns: 2_000,
            thread: 1,
        };
        NodeRecord::new(cycle, 1_000, 3, NodeName::new("a,b"), &timing)
    }

    #[test]
    fn ring_keeps_the_last_cycles_in_order() {
        let mut profiler = Profiler::new(3, 2);
        for n in 0..5 {
            profiler.record(cycle(n), [node(n)].into_iter());
        }
        let profile = profiler.into_profile();
        let cycles: Vec<u64> = profile.cycles.iter().map(|c| c.cycle).collect();
        assert_eq!(cycles, [2, 3, 4]);
        assert_eq!(profile.nodes.len(), 3);
        assert_eq!(profile.nodes[0].cycle, 2);
    }

    #[test]
    fn node_rows_are_relative_to_the_cycle_start() {
        let row = node(0);
        assert_eq!(
            (row.signalled_ns, row.awake_ns, row.finished_ns),
            (0, 500, 3_000)
        );
        assert_eq!((row.latency_ns, row.duration_ns), (500, 2_500));
    }

    #[test]
    fn csv_quotes_names_and_has_one_field_per_column() {
        let mut profiler = Profiler::new(2, 1);
        profiler.record(cycle(0), [node(0)].into_iter());
        let profile = profiler.into_profile();
        let mut out = Vec::new();
        profile.write_nodes_csv(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\"a,b\""));
        let mut cycles_csv = Vec::new();
        profile.write_cycles_csv(&mut cycles_csv).unwrap();
        let text = String::from_utf8(cycles_csv).unwrap();
        let columns = CYCLES_CSV_HEADER.split(',').count();
        for line in text.lines() {
            assert_eq!(line.split(',').count(), columns, "{line}");
        }
    }
}
