//! Nodes (JACK's "clients") and the view of a cycle they get while running:
//! the [`Node`] trait, [`NodeId`], [`NodeName`] and [`ProcessContext`].
//!
//! This module owns the node-facing API. `process` runs on a real-time thread:
//! a node must never allocate, lock, block, print or make a blocking system
//! call in it. Everything a node needs in a cycle (its port buffers, the
//! driver's packet, the cycle's time) comes through the context.

use crate::cell::CycleCell;
use crate::graph::{CompiledGraph, CompiledNode};
use crate::port::{EventBuffer, PortSpec};

/// A node's identity in a graph; never reused within one graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct NodeId(pub u32);

/// No node: fills unused entries of fixed-size reports.
impl Default for NodeId {
    fn default() -> Self {
        NodeId(u32::MAX)
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A processing node.
pub trait Node: Send + 'static {
    /// The node's ports, in a fixed order: a port's index in this list is its
    /// [`crate::PortId::index`], and `ProcessContext::audio_in(i)` is the
    /// `i`-th audio input in this list (likewise for the other kinds).
    /// Called once, off the real-time path, when the node is added.
    fn ports(&self) -> Vec<PortSpec>;

    /// Processes one cycle. Real-time: see the module doc.
    fn process(&mut self, ctx: &mut ProcessContext<'_>);
}

/// Bytes kept of a node's name where names must live without allocation
/// (compiled graph, profiler, xrun reports).
pub const NODE_NAME_BYTES: usize = 32;

/// A node's name stored inline, truncated to [`NODE_NAME_BYTES`] on a
/// character boundary.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeName {
    len: u8,
    bytes: [u8; NODE_NAME_BYTES],
}

impl NodeName {
    pub fn new(name: &str) -> Self {
        let mut end = name.len().min(NODE_NAME_BYTES);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0; NODE_NAME_BYTES];
        bytes[..end].copy_from_slice(&name.as_bytes()[..end]);
        NodeName {
            len: end as u8,
            bytes,
        }
    }

    pub fn as_str(&self) -> &str {
        // Built from a &str cut at a character boundary.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl std::fmt::Debug for NodeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

impl std::fmt::Display for NodeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for NodeName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// What a node sees of the current cycle.
///
/// Port accessors take the index of the port among the node's ports of that
/// kind and direction, and panic when it is out of range (a programming error,
/// like slice indexing). Audio slices are exactly [`Self::frames`] long.
pub struct ProcessContext<'a> {
    pub(crate) graph: &'a CompiledGraph,
    pub(crate) node: &'a CompiledNode,
    pub(crate) cycle: u64,
    pub(crate) cycle_start_ns: u64,
    pub(crate) cycle_due_ns: u64,
    /// The driver's input package, read-only for every node in a cycle.
    pub(crate) package: &'a [u8],
    /// The driver's output packet, present only for the designated writer.
    pub(crate) packet_out: Option<&'a CycleCell<Box<[u8]>>>,
}

impl<'a> ProcessContext<'a> {
    /// Frames in this cycle's buffers.
    pub fn frames(&self) -> usize {
        self.graph.stream.frames() as usize
    }

    pub fn sample_rate(&self) -> u32 {
        self.graph.stream.sample_rate()
    }

    /// The cycle's period (frames / sample rate) in nanoseconds.
    pub fn period_ns(&self) -> u64 {
        self.graph.stream.period_ns()
    }

    /// The cycle's sequence number: consecutive cycles have consecutive
    /// numbers, across graph edits too.
    pub fn cycle(&self) -> u64 {
        self.cycle
    }

    /// When the cycle started (`CLOCK_MONOTONIC` ns): the timer expiry or the
    /// arrival of the input package's first packet.
    pub fn cycle_start_ns(&self) -> u64 {
        self.cycle_start_ns
    }

    pub fn audio_inputs(&self) -> usize {
        self.node.audio_in.len()
    }

    pub fn audio_outputs(&self) -> usize {
        self.node.audio_out.len()
    }

    /// The samples arriving at audio input `port`: the writer's own buffer when
    /// exactly one output is connected (no copy), the sum of the writers when
    /// several are, silence when none is.
    pub fn audio_in(&self, port: usize) -> &'a [f32] {
        let buffer = &self.graph.audio[self.node.audio_in[port].read as usize];
        // SAFETY: an input buffer is written only by predecessors (already
        // finished: their activation released it to this node), by this
        // node's runner before `process` (mixing), or never (silence).
        // Nothing writes it until the cycle ends.
        unsafe { buffer.get() }
    }

    /// The buffer of audio output `port`, to be filled with `frames` samples.
    pub fn audio_out(&mut self, port: usize) -> &mut [f32] {
        let buffer = &self.graph.audio[self.node.audio_out[port] as usize];
        // SAFETY: only this node writes its output buffers, and its readers
        // run after it finishes; `&mut self` prevents two live references.
        unsafe { buffer.get_mut() }
    }

    /// The events arriving at event input `port`, ordered by frame.
    pub fn events_in(&self, port: usize) -> &'a EventBuffer {
        let buffer = &self.graph.events[self.node.event_in[port].read as usize];
        // SAFETY: as for `audio_in`.
        unsafe { buffer.get() }
    }

    /// The (cleared) buffer of event output `port`.
    pub fn events_out(&mut self, port: usize) -> &mut EventBuffer {
        let buffer = &self.graph.events[self.node.event_out[port] as usize];
        // SAFETY: as for `audio_out`.
        unsafe { buffer.get_mut() }
    }

    /// When the cycle was due (`CLOCK_MONOTONIC` ns): the timer's expiry,
    /// however late the driver woke — the grid a node that keeps time
    /// against a clock (a media clock) should stand on, so that wake-up
    /// jitter stays out of its timing. The start, for drivers that wait for
    /// an event.
    pub fn cycle_due_ns(&self) -> u64 {
        self.cycle_due_ns
    }

    /// The input package of a packet driver (empty for other drivers).
    pub fn package(&self) -> &'a [u8] {
        self.package
    }

    /// The output packet of a packet driver, for the node designated with
    /// [`crate::Graph::set_packet_writer`]; `None` for every other node.
    pub fn packet_out(&mut self) -> Option<&mut [u8]> {
        // SAFETY: in a cycle only the designated writer is given the output
        // cell, and the driver reads it only after the cycle ends; `&mut self`
        // prevents two live references.
        self.packet_out
            .map(|cell| unsafe { &mut cell.get_mut()[..] })
    }
}
