//! The graph's topology, edited on the control thread, and its compilation
//! into a [`CompiledGraph`]: execution order, activation counts, successor
//! lists and preallocated port buffers.
//!
//! This module owns the editable [`Graph`] (nodes, ports, connections) and the
//! compiler. It must never run on the real-time path: editing and compiling
//! allocate. The engine publishes compiled graphs through `switch`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::cell::CycleCell;
use crate::node::{Node, NodeId, NodeName};
use crate::port::{EventBuffer, PortDirection, PortId, PortKind, PortSpec};
use crate::profiler::NodeTiming;
use crate::sync::AtomicU32;
use crate::StreamConfig;

/// A node's processing state, shared between the graph description and the
/// compiled graphs that run it. Only the thread running the node in a cycle
/// touches the inside.
pub(crate) type SharedNode = CycleCell<Box<dyn Node>>;

/// An edit the graph refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("no node {0} in the graph")]
    UnknownNode(NodeId),
    #[error("node {node} has no port named {port:?}")]
    UnknownPort { node: NodeId, port: String },
    #[error("node {node} has no port {index}")]
    UnknownPortIndex { node: NodeId, index: u32 },
    #[error("a node named {0:?} already exists: node names must be unique")]
    DuplicateName(String),
    #[error("cannot connect a {from:?} port to a {to:?} port")]
    KindMismatch { from: PortKind, to: PortKind },
    #[error("connections go from an output port to an input port")]
    Direction,
    #[error("connecting {from:?} to {to:?} would close a cycle: the graph must stay acyclic")]
    Cycle { from: PortId, to: PortId },
    #[error("{from:?} is already connected to {to:?}")]
    AlreadyConnected { from: PortId, to: PortId },
    #[error("{from:?} is not connected to {to:?}")]
    NotConnected { from: PortId, to: PortId },
    #[error("the graph has {nodes} nodes, more than the engine's limit of {limit} (EngineConfig::max_nodes)")]
    TooManyNodes { nodes: usize, limit: usize },
}

/// A change clients are told about (on the notification thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphChange {
    ClientRegistered { node: NodeId, name: String },
    ClientUnregistered { node: NodeId, name: String },
    PortRegistered { port: PortId, name: String },
    PortUnregistered { port: PortId, name: String },
}

struct NodeEntry {
    name: String,
    ports: Vec<PortSpec>,
    state: Arc<SharedNode>,
}

/// The editable graph: nodes with their ports, and port-to-port connections.
#[derive(Default)]
pub struct Graph {
    nodes: BTreeMap<NodeId, NodeEntry>,
    /// (from output, to input)
    connections: BTreeSet<(PortId, PortId)>,
    next_id: u32,
    packet_writer: Option<NodeId>,
    changes: Vec<GraphChange>,
    /// Most nodes the engine running this graph accepts.
    node_limit: Option<usize>,
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a node under a unique name.
    pub fn add_node(&mut self, name: &str, node: Box<dyn Node>) -> Result<NodeId, GraphError> {
        if let Some(limit) = self.node_limit.filter(|limit| self.nodes.len() >= *limit) {
            return Err(GraphError::TooManyNodes {
                nodes: self.nodes.len() + 1,
                limit,
            });
        }
        if self.nodes.values().any(|entry| entry.name == name) {
            return Err(GraphError::DuplicateName(name.to_owned()));
        }
        let id = NodeId(self.next_id);
        self.next_id += 1;
        let ports = node.ports();
        self.changes.push(GraphChange::ClientRegistered {
            node: id,
            name: name.to_owned(),
        });
        for (index, spec) in ports.iter().enumerate() {
            self.changes.push(GraphChange::PortRegistered {
                port: PortId {
                    node: id,
                    index: index as u32,
                },
                name: format!("{name}:{}", spec.name),
            });
        }
        self.nodes.insert(
            id,
            NodeEntry {
                name: name.to_owned(),
                ports,
                state: Arc::new(CycleCell::new(node)),
            },
        );
        Ok(id)
    }

    /// Removes a node and its connections. Its state is dropped on the
    /// control thread once the last compiled graph using it is retired.
    pub fn remove_node(&mut self, node: NodeId) -> Result<(), GraphError> {
        let entry = self
            .nodes
            .remove(&node)
            .ok_or(GraphError::UnknownNode(node))?;
        self.connections
            .retain(|(from, to)| from.node != node && to.node != node);
        if self.packet_writer == Some(node) {
            self.packet_writer = None;
        }
        for (index, spec) in entry.ports.iter().enumerate() {
            self.changes.push(GraphChange::PortUnregistered {
                port: PortId {
                    node,
                    index: index as u32,
                },
                name: format!("{}:{}", entry.name, spec.name),
            });
        }
        self.changes.push(GraphChange::ClientUnregistered {
            node,
            name: entry.name,
        });
        Ok(())
    }

    /// The port of `node` named `name`.
    pub fn port(&self, node: NodeId, name: &str) -> Result<PortId, GraphError> {
        let entry = self.nodes.get(&node).ok_or(GraphError::UnknownNode(node))?;
        let index = entry
            .ports
            .iter()
            .position(|spec| spec.name == name)
            .ok_or_else(|| GraphError::UnknownPort {
                node,
                port: name.to_owned(),
            })?;
        Ok(PortId {
            node,
            index: index as u32,
        })
    }

    /// The node named `name`.
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .iter()
            .find(|(_, entry)| entry.name == name)
            .map(|(id, _)| *id)
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Connects an output port to an input port of the same kind.
    pub fn connect(&mut self, from: PortId, to: PortId) -> Result<(), GraphError> {
        let (from_spec, to_spec) = (self.spec(from)?, self.spec(to)?);
        if from_spec.direction != PortDirection::Output || to_spec.direction != PortDirection::Input
        {
            return Err(GraphError::Direction);
        }
        if from_spec.kind != to_spec.kind {
            return Err(GraphError::KindMismatch {
                from: from_spec.kind,
                to: to_spec.kind,
            });
        }
        if self.connections.contains(&(from, to)) {
            return Err(GraphError::AlreadyConnected { from, to });
        }
        if self.reaches(to.node, from.node) {
            return Err(GraphError::Cycle { from, to });
        }
        self.connections.insert((from, to));
        Ok(())
    }

    pub fn disconnect(&mut self, from: PortId, to: PortId) -> Result<(), GraphError> {
        if self.connections.remove(&(from, to)) {
            Ok(())
        } else {
            Err(GraphError::NotConnected { from, to })
        }
    }

    /// Designates the node given the packet driver's output packet
    /// ([`crate::ProcessContext::packet_out`]).
    pub fn set_packet_writer(&mut self, node: Option<NodeId>) -> Result<(), GraphError> {
        if let Some(id) = node {
            self.nodes.get(&id).ok_or(GraphError::UnknownNode(id))?;
        }
        self.packet_writer = node;
        Ok(())
    }

    pub(crate) fn set_node_limit(&mut self, limit: usize) {
        self.node_limit = Some(limit);
    }

    /// Registrations since the last call, oldest first.
    pub(crate) fn take_changes(&mut self) -> Vec<GraphChange> {
        std::mem::take(&mut self.changes)
    }

    fn spec(&self, port: PortId) -> Result<&PortSpec, GraphError> {
        let entry = self
            .nodes
            .get(&port.node)
            .ok_or(GraphError::UnknownNode(port.node))?;
        entry
            .ports
            .get(port.index as usize)
            .ok_or(GraphError::UnknownPortIndex {
                node: port.node,
                index: port.index,
            })
    }

    fn successors(&self, node: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.connections
            .iter()
            .filter(move |(from, _)| from.node == node)
            .map(|(_, to)| to.node)
    }

    /// Whether a path of connections leads from `start` to `target` (or they
    /// are the same node).
    fn reaches(&self, start: NodeId, target: NodeId) -> bool {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start];
        while let Some(node) = stack.pop() {
            if node == target {
                return true;
            }
            if seen.insert(node) {
                stack.extend(self.successors(node));
            }
        }
        false
    }

    /// Compiles the graph for `stream`: see [`CompiledGraph`].
    pub(crate) fn compile(
        &self,
        stream: StreamConfig,
        limits: Limits,
        version: u64,
    ) -> Result<CompiledGraph, GraphError> {
        if self.nodes.len() > limits.max_nodes {
            return Err(GraphError::TooManyNodes {
                nodes: self.nodes.len(),
                limit: limits.max_nodes,
            });
        }
        let order = self.topological_order();
        let position: BTreeMap<NodeId, u32> = order
            .iter()
            .enumerate()
            .map(|(i, id)| (*id, i as u32))
            .collect();
        let mut buffers = BufferPlan::new(stream.frames() as usize, limits.event_capacity);
        // Output buffers first: inputs refer to them.
        let outputs: BTreeMap<PortId, u32> = order
            .iter()
            .flat_map(|id| self.ports_of(*id, PortDirection::Output))
            .map(|(port, kind)| (port, buffers.add(kind)))
            .collect();
        let nodes = order
            .iter()
            .map(|id| self.compile_node(*id, &position, &outputs, &mut buffers))
            .collect::<Vec<_>>();
        let sources = nodes
            .iter()
            .enumerate()
            .filter(|(_, node)| node.predecessors == 0)
            .map(|(i, _)| i as u32)
            .collect();
        let critical_path = critical_path(&nodes);
        Ok(CompiledGraph {
            version,
            stream,
            critical_path,
            sources,
            packet_writer: self.packet_writer.map(|id| position[&id]),
            audio: buffers.audio.into_boxed_slice(),
            events: buffers.events.into_boxed_slice(),
            nodes: nodes.into_boxed_slice(),
        })
    }

    /// Kahn's algorithm; ties broken by node id so compilation is
    /// deterministic.
    fn topological_order(&self) -> Vec<NodeId> {
        let mut pending: BTreeMap<NodeId, usize> = self
            .nodes
            .keys()
            .map(|id| (*id, self.predecessor_nodes(*id).len()))
            .collect();
        let mut ready: BTreeSet<NodeId> = pending
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(id, _)| *id)
            .collect();
        let mut order = Vec::with_capacity(self.nodes.len());
        while let Some(node) = ready.pop_first() {
            order.push(node);
            for next in self.successor_nodes(node) {
                let count = pending.get_mut(&next).expect("successor is a node");
                *count -= 1;
                if *count == 0 {
                    ready.insert(next);
                }
            }
        }
        order
    }

    fn predecessor_nodes(&self, node: NodeId) -> BTreeSet<NodeId> {
        self.connections
            .iter()
            .filter(|(_, to)| to.node == node)
            .map(|(from, _)| from.node)
            .collect()
    }

    fn successor_nodes(&self, node: NodeId) -> BTreeSet<NodeId> {
        self.successors(node).collect()
    }

    fn ports_of(
        &self,
        node: NodeId,
        direction: PortDirection,
    ) -> impl Iterator<Item = (PortId, PortKind)> + '_ {
        self.nodes[&node]
            .ports
            .iter()
            .enumerate()
            .filter(move |(_, spec)| spec.direction == direction)
            .map(move |(index, spec)| {
                let port = PortId {
                    node,
                    index: index as u32,
                };
                (port, spec.kind)
            })
    }

    fn compile_node(
        &self,
        id: NodeId,
        position: &BTreeMap<NodeId, u32>,
        outputs: &BTreeMap<PortId, u32>,
        buffers: &mut BufferPlan,
    ) -> CompiledNode {
        let (mut audio_in, mut event_in) = (Vec::new(), Vec::new());
        for (port, kind) in self.ports_of(id, PortDirection::Input) {
            let writers: Box<[u32]> = self
                .connections
                .iter()
                .filter(|(_, to)| *to == port)
                .map(|(from, _)| outputs[from])
                .collect();
            let input = buffers.input(kind, writers);
            match kind {
                PortKind::Audio => audio_in.push(input),
                PortKind::Event => event_in.push(input),
            }
        }
        let (mut audio_out, mut event_out) = (Vec::new(), Vec::new());
        for (port, kind) in self.ports_of(id, PortDirection::Output) {
            match kind {
                PortKind::Audio => audio_out.push(outputs[&port]),
                PortKind::Event => event_out.push(outputs[&port]),
            }
        }
        CompiledNode {
            id,
            name: NodeName::new(&self.nodes[&id].name),
            state: Arc::clone(&self.nodes[&id].state),
            predecessors: self.predecessor_nodes(id).len() as u32,
            counter: AtomicU32::new(0),
            successors: self
                .successor_nodes(id)
                .iter()
                .map(|next| position[next])
                .collect(),
            audio_in: audio_in.into(),
            audio_out: audio_out.into(),
            event_in: event_in.into(),
            event_out: event_out.into(),
            timing: CycleCell::new(NodeTiming::default()),
        }
    }
}

/// Sizes the compiler needs from the engine's configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max_nodes: usize,
    pub event_capacity: usize,
}

/// Allocates port buffers while compiling. Buffer 0 of each kind is the
/// shared silence / empty buffer read by unconnected inputs.
struct BufferPlan {
    frames: usize,
    event_capacity: usize,
    audio: Vec<CycleCell<Box<[f32]>>>,
    events: Vec<CycleCell<EventBuffer>>,
}

impl BufferPlan {
    fn new(frames: usize, event_capacity: usize) -> Self {
        let mut plan = BufferPlan {
            frames,
            event_capacity,
            audio: Vec::new(),
            events: Vec::new(),
        };
        plan.add(PortKind::Audio);
        plan.add(PortKind::Event);
        plan
    }

    fn add(&mut self, kind: PortKind) -> u32 {
        match kind {
            PortKind::Audio => {
                self.audio
                    .push(CycleCell::new(vec![0.0; self.frames].into_boxed_slice()));
                self.audio.len() as u32 - 1
            }
            PortKind::Event => {
                self.events.push(CycleCell::new(EventBuffer::with_capacity(
                    self.event_capacity,
                )));
                self.events.len() as u32 - 1
            }
        }
    }

    /// Where an input with these writers reads: silence, the single writer's
    /// buffer in place, or a mix buffer of its own.
    fn input(&mut self, kind: PortKind, writers: Box<[u32]>) -> Input {
        match writers.len() {
            0 => Input {
                read: 0,
                mix_from: writers,
            },
            1 => Input {
                read: writers[0],
                mix_from: Box::new([]),
            },
            _ => Input {
                read: self.add(kind),
                mix_from: writers,
            },
        }
    }
}

/// Longest chain of nodes, counted in nodes: the cycle's deadline is split
/// evenly along it to give each node its expected share.
fn critical_path(nodes: &[CompiledNode]) -> u32 {
    // Nodes are in topological order, so one forward pass suffices.
    let mut depth = vec![1u32; nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        for &next in node.successors.iter() {
            depth[next as usize] = depth[next as usize].max(depth[i] + 1);
        }
    }
    depth.into_iter().max().unwrap_or(0)
}

/// Where an input port reads in a cycle.
pub(crate) struct Input {
    /// Buffer index read by the node.
    pub read: u32,
    /// When two or more writers are connected: their buffers, summed (audio)
    /// or merged (events) into `read` before the node runs. Empty otherwise.
    pub mix_from: Box<[u32]>,
}

/// One node of a compiled graph.
pub(crate) struct CompiledNode {
    pub id: NodeId,
    pub name: NodeName,
    pub state: Arc<SharedNode>,
    /// Distinct predecessor nodes: the activation counter's reset value.
    pub predecessors: u32,
    /// Activation counter: predecessors still to finish in this cycle.
    pub counter: AtomicU32,
    /// Positions of distinct successor nodes in the compiled order.
    pub successors: Box<[u32]>,
    pub audio_in: Box<[Input]>,
    pub audio_out: Box<[u32]>,
    pub event_in: Box<[Input]>,
    pub event_out: Box<[u32]>,
    /// This cycle's timestamps, written by the signaller and the runner,
    /// read by the driver after the cycle.
    pub timing: CycleCell<NodeTiming>,
}

/// A graph ready to run: everything a cycle needs, allocated up front.
pub(crate) struct CompiledGraph {
    /// Increases with every publication.
    pub version: u64,
    pub stream: StreamConfig,
    /// Nodes in topological order.
    pub nodes: Box<[CompiledNode]>,
    /// Positions of nodes without predecessors: started by the driver.
    pub sources: Box<[u32]>,
    pub critical_path: u32,
    pub packet_writer: Option<u32>,
    pub audio: Box<[CycleCell<Box<[f32]>>]>,
    pub events: Box<[CycleCell<EventBuffer>]>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::{Mixer, Passthrough, Sine};

    fn limits() -> Limits {
        Limits {
            max_nodes: 16,
            event_capacity: 4,
        }
    }

    fn stream() -> StreamConfig {
        StreamConfig::new(64, 48_000).unwrap()
    }

    #[test]
    fn compiles_order_counters_and_buffers() {
        let mut graph = Graph::new();
        let a = graph
            .add_node("a", Box::new(Sine::new(440.0, 0.5)))
            .unwrap();
        let b = graph
            .add_node("b", Box::new(Sine::new(220.0, 0.5)))
            .unwrap();
        let mix = graph
            .add_node("mix", Box::new(Mixer::new(vec![1.0, 1.0])))
            .unwrap();
        let thru = graph
            .add_node("thru", Box::new(Passthrough::new(1)))
            .unwrap();
        graph
            .connect(
                graph.port(a, "out").unwrap(),
                graph.port(mix, "in0").unwrap(),
            )
            .unwrap();
        graph
            .connect(
                graph.port(b, "out").unwrap(),
                graph.port(mix, "in1").unwrap(),
            )
            .unwrap();
        graph
            .connect(
                graph.port(b, "out").unwrap(),
                graph.port(mix, "in0").unwrap(),
            )
            .unwrap();
        graph
            .connect(
                graph.port(mix, "out").unwrap(),
                graph.port(thru, "in0").unwrap(),
            )
            .unwrap();

        let compiled = graph.compile(stream(), limits(), 1).unwrap();
        let names: Vec<&str> = compiled.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "mix", "thru"]);
        assert_eq!(&*compiled.sources, &[0, 1]);
        assert_eq!(compiled.nodes[2].predecessors, 2);
        assert_eq!(compiled.critical_path, 3);
        let mix_node = &compiled.nodes[2];
        assert_eq!(
            mix_node.audio_in[0].mix_from.len(),
            2,
            "two writers are mixed"
        );
        assert!(
            mix_node.audio_in[1].mix_from.is_empty(),
            "one writer is read in place"
        );
        assert_eq!(mix_node.audio_in[1].read, compiled.nodes[1].audio_out[0]);
        assert_eq!(compiled.nodes[3].audio_in[0].read, mix_node.audio_out[0]);
    }

    #[test]
    fn refuses_cycles_kind_mismatches_and_direction() {
        let mut graph = Graph::new();
        let a = graph.add_node("a", Box::new(Passthrough::new(1))).unwrap();
        let b = graph.add_node("b", Box::new(Passthrough::new(1))).unwrap();
        let (a_out, a_in) = (
            graph.port(a, "out0").unwrap(),
            graph.port(a, "in0").unwrap(),
        );
        let (b_out, b_in) = (
            graph.port(b, "out0").unwrap(),
            graph.port(b, "in0").unwrap(),
        );
        graph.connect(a_out, b_in).unwrap();
        assert!(matches!(
            graph.connect(b_out, a_in),
            Err(GraphError::Cycle { .. })
        ));
        assert!(matches!(
            graph.connect(a_out, a_in),
            Err(GraphError::Cycle { .. })
        ));
        assert_eq!(graph.connect(b_in, a_in), Err(GraphError::Direction));
        assert!(matches!(
            graph.add_node("a", Box::new(Passthrough::new(1))),
            Err(GraphError::DuplicateName(_))
        ));
    }

    #[test]
    fn removal_drops_connections_and_reports_changes() {
        let mut graph = Graph::new();
        let a = graph.add_node("a", Box::new(Passthrough::new(1))).unwrap();
        let b = graph.add_node("b", Box::new(Passthrough::new(1))).unwrap();
        graph
            .connect(
                graph.port(a, "out0").unwrap(),
                graph.port(b, "in0").unwrap(),
            )
            .unwrap();
        graph.take_changes();
        graph.remove_node(a).unwrap();
        let compiled = graph.compile(stream(), limits(), 2).unwrap();
        assert_eq!(compiled.nodes.len(), 1);
        assert_eq!(compiled.nodes[0].predecessors, 0);
        let changes = graph.take_changes();
        assert!(changes.contains(&GraphChange::ClientUnregistered {
            node: a,
            name: "a".into()
        }));
        assert!(changes
            .iter()
            .any(|c| matches!(c, GraphChange::PortUnregistered { name, .. } if name == "a:in0")));
    }

    #[test]
    fn too_many_nodes_is_refused() {
        let mut graph = Graph::new();
        for i in 0..3 {
            graph
                .add_node(&format!("n{i}"), Box::new(Passthrough::new(1)))
                .unwrap();
        }
        let limits = Limits {
            max_nodes: 2,
            event_capacity: 1,
        };
        assert!(matches!(
            graph.compile(stream(), limits, 1),
            Err(GraphError::TooManyNodes { nodes: 3, limit: 2 })
        ));
    }
}
