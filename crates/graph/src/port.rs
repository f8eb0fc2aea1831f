//! Ports and what flows through them: audio ports carry one block of `f32`
//! samples per cycle, event ports carry timestamped events (MIDI bytes or
//! short OSC-like messages) in a fixed-capacity, preallocated [`EventBuffer`].
//!
//! This module owns port descriptions and the event buffer. It must never
//! allocate once a buffer exists: pushing into a full buffer is an error, not
//! a reallocation.

use crate::node::NodeId;

/// What a port carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum PortKind {
    Audio,
    Event,
}

/// Which way data flows through a port, seen from its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum PortDirection {
    Input,
    Output,
}

/// A port as a node declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    pub name: String,
    pub kind: PortKind,
    pub direction: PortDirection,
}

impl PortSpec {
    pub fn audio_in(name: impl Into<String>) -> Self {
        Self::new(name, PortKind::Audio, PortDirection::Input)
    }
    pub fn audio_out(name: impl Into<String>) -> Self {
        Self::new(name, PortKind::Audio, PortDirection::Output)
    }
    pub fn event_in(name: impl Into<String>) -> Self {
        Self::new(name, PortKind::Event, PortDirection::Input)
    }
    pub fn event_out(name: impl Into<String>) -> Self {
        Self::new(name, PortKind::Event, PortDirection::Output)
    }

    fn new(name: impl Into<String>, kind: PortKind, direction: PortDirection) -> Self {
        PortSpec {
            name: name.into(),
            kind,
            direction,
        }
    }
}

/// A port of a node in a graph: the node and the port's position in the
/// node's [`crate::Node::ports`] list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortId {
    pub node: NodeId,
    pub index: u32,
}

/// Bytes an event carries inline: a MIDI message or a short message.
pub const EVENT_BYTES: usize = 48;

/// What an event's bytes mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Midi,
    /// An OSC-like message: address and arguments encoded by the application.
    Message,
}

/// A timestamped event. Stored inline (no heap) so buffers of events can be
/// preallocated and copied on the real-time path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Frame offset within the cycle.
    pub frame: u32,
    pub kind: EventKind,
    len: u8,
    bytes: [u8; EVENT_BYTES],
}

/// An event's payload is longer than [`EVENT_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("event payload of {0} bytes exceeds the {EVENT_BYTES}-byte limit")]
pub struct EventTooLong(pub usize);

impl Event {
    pub fn midi(frame: u32, bytes: &[u8]) -> Result<Self, EventTooLong> {
        Self::new(frame, EventKind::Midi, bytes)
    }

    pub fn message(frame: u32, bytes: &[u8]) -> Result<Self, EventTooLong> {
        Self::new(frame, EventKind::Message, bytes)
    }

    fn new(frame: u32, kind: EventKind, payload: &[u8]) -> Result<Self, EventTooLong> {
        if payload.len() > EVENT_BYTES {
            return Err(EventTooLong(payload.len()));
        }
        let mut bytes = [0; EVENT_BYTES];
        bytes[..payload.len()].copy_from_slice(payload);
        Ok(Event {
            frame,
            kind,
            len: payload.len() as u8,
            bytes,
        })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// The event buffer of a port is full; the event was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("event buffer full ({0} events)")]
pub struct EventBufferFull(pub usize);

/// A fixed-capacity list of events, allocated once when the graph is compiled.
#[derive(Debug)]
pub struct EventBuffer {
    events: Vec<Event>,
}

impl EventBuffer {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        EventBuffer {
            events: Vec::with_capacity(capacity),
        }
    }

    /// Appends an event; fails instead of growing when the buffer is full.
    pub fn push(&mut self, event: Event) -> Result<(), EventBufferFull> {
        if self.events.len() == self.events.capacity() {
            return Err(EventBufferFull(self.events.capacity()));
        }
        self.events.push(event);
        Ok(())
    }

    pub fn events(&self) -> &[Event] {
        &self.events
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.events.capacity()
    }

    pub(crate) fn clear(&mut self) {
        self.events.clear();
    }

    /// Replaces the contents by the events of `sources` ordered by frame
    /// (stable: equal frames keep source order). Events past the capacity are
    /// dropped.
    pub(crate) fn merge_from<'a>(&mut self, sources: impl Iterator<Item = &'a EventBuffer>) {
        self.clear();
        for source in sources {
            for event in source.events() {
                if self.push(*event).is_err() {
                    break;
                }
            }
        }
        // Insertion sort: in place, stable, and fast for the short, mostly
        // sorted runs of a cycle.
        for i in 1..self.events.len() {
            let mut j = i;
            while j > 0 && self.events[j - 1].frame > self.events[j].frame {
                self.events.swap(j - 1, j);
                j -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_buffer_refuses_instead_of_growing() {
        let mut buffer = EventBuffer::with_capacity(2);
        let e = Event::midi(0, &[0x90, 60, 100]).unwrap();
        buffer.push(e).unwrap();
        buffer.push(e).unwrap();
        assert_eq!(buffer.push(e), Err(EventBufferFull(2)));
        assert_eq!(buffer.capacity(), 2);
    }

    #[test]
    fn merge_orders_by_frame() {
        let mut a = EventBuffer::with_capacity(4);
        let mut b = EventBuffer::with_capacity(4);
        a.push(Event::midi(5, &[1]).unwrap()).unwrap();
        a.push(Event::midi(9, &[2]).unwrap()).unwrap();
        b.push(Event::message(1, b"/x").unwrap()).unwrap();
        b.push(Event::midi(5, &[3]).unwrap()).unwrap();
        let mut merged = EventBuffer::with_capacity(8);
        merged.merge_from([&a, &b].into_iter());
        let frames: Vec<u32> = merged.events().iter().map(|e| e.frame).collect();
        assert_eq!(frames, [1, 5, 5, 9]);
        assert_eq!(merged.events()[1].bytes(), &[1], "stable for equal frames");
    }

    #[test]
    fn oversized_payload_is_rejected() {
        assert_eq!(Event::message(0, &[0; 49]), Err(EventTooLong(49)));
    }
}
