//! Graph publication: how a graph compiled on the control thread replaces the
//! running one between two cycles, and how the replaced one goes back to the
//! control thread to be freed (JACK2's two-state switch, with queues).
//!
//! The control thread builds the next [`CompiledGraph`] (order, counters,
//! buffers) off the real-time path and pushes it into a single-producer,
//! single-consumer queue (`rtrb`). At the start of a cycle the driver takes
//! the newest published graph, if any, and pushes the graph it replaces into
//! a second SPSC queue going back. The control thread drains that queue and
//! drops the old graphs: nothing is freed on the real-time thread, and a
//! cycle runs entirely on one graph, so no cycle is dropped or repeated.
//!
//! This module owns the two queues. It must never block or allocate on the
//! driver's side: if the return queue is full, the driver keeps the current
//! graph for one more cycle instead of waiting.
//!
//! # Memory ordering
//!
//! `rtrb` writes a slot and then publishes it with a `Release` store of its
//! write index; the consumer loads that index with `Acquire` before reading
//! the slot. Pushing a compiled graph therefore makes every write the control
//! thread made while building it visible to the driver before its first
//! cycle. In the other direction, the driver retires a graph only after the
//! cycle that last used it ended, which it observed with an `Acquire` load
//! that synchronises with every runner's last access (see `activation`); the
//! retirement push releases that to the control thread, which drops the graph
//! after its `Acquire` pop.

use std::time::{Duration, Instant};

use rtrb::{Consumer, Producer, RingBuffer};

use crate::graph::CompiledGraph;

/// Control thread's end.
pub(crate) struct GraphPublisher {
    pending: Producer<Box<CompiledGraph>>,
    retired: Consumer<Box<CompiledGraph>>,
}

/// Driver's end.
pub(crate) struct GraphReceiver {
    pending: Consumer<Box<CompiledGraph>>,
    retired: Producer<Box<CompiledGraph>>,
}

/// The driver has not taken published graphs for a while (it is stopped or
/// stalled), so there is no room to publish another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the driver has not picked up the previously published graphs within {0:?}")]
pub struct PublishTimeout(pub Duration);

/// Creates the queues; `depth` graphs can wait for the driver at once.
pub(crate) fn channel(depth: usize) -> (GraphPublisher, GraphReceiver) {
    let (pending_tx, pending_rx) = RingBuffer::new(depth);
    // Room for every pending graph to retire the one before it, plus the
    // running one: the driver then never has to defer a switch while the
    // control thread keeps draining.
    let (retired_tx, retired_rx) = RingBuffer::new(depth + 1);
    (
        GraphPublisher {
            pending: pending_tx,
            retired: retired_rx,
        },
        GraphReceiver {
            pending: pending_rx,
            retired: retired_tx,
        },
    )
}

impl GraphPublisher {
    /// Publishes `graph`, waiting up to `timeout` for room if the driver is
    /// behind. Frees retired graphs first.
    pub(crate) fn publish(
        &mut self,
        graph: Box<CompiledGraph>,
        timeout: Duration,
    ) -> Result<(), PublishTimeout> {
        let give_up = Instant::now() + timeout;
        let mut graph = graph;
        loop {
            self.free_retired();
            match self.pending.push(graph) {
                Ok(()) => return Ok(()),
                Err(rtrb::PushError::Full(back)) => graph = back,
            }
            if Instant::now() >= give_up {
                return Err(PublishTimeout(timeout));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Drops the graphs the driver has retired; returns how many.
    pub(crate) fn free_retired(&mut self) -> usize {
        let mut freed = 0;
        while let Ok(graph) = self.retired.pop() {
            drop(graph);
            freed += 1;
        }
        freed
    }
}

impl GraphReceiver {
    /// Driver, between cycles: replaces `current` by the newest published
    /// graph and retires the replaced ones. Returns whether it switched.
    pub(crate) fn switch(&mut self, current: &mut Box<CompiledGraph>) -> bool {
        let mut switched = false;
        while !self.retired.is_full() {
            let Ok(next) = self.pending.pop() else { break };
            let old = std::mem::replace(current, next);
            // Cannot fail: checked for room above, and this is the only
            // producer.
            let _ = self.retired.push(old);
            switched = true;
        }
        switched
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Graph, Limits};
    use crate::StreamConfig;

    fn compiled(version: u64) -> Box<CompiledGraph> {
        let limits = Limits {
            max_nodes: 4,
            event_capacity: 1,
        };
        let stream = StreamConfig::new(32, 48_000).unwrap();
        Box::new(Graph::new().compile(stream, limits, version).unwrap())
    }

    #[test]
    fn driver_takes_the_newest_and_returns_the_old_ones() {
        let (mut publisher, mut receiver) = channel(2);
        let mut current = compiled(0);
        assert!(!receiver.switch(&mut current));
        publisher.publish(compiled(1), Duration::ZERO).unwrap();
        publisher.publish(compiled(2), Duration::ZERO).unwrap();
        assert!(receiver.switch(&mut current));
        assert_eq!(current.version, 2);
        assert_eq!(publisher.free_retired(), 2, "versions 0 and 1 come back");
    }

    #[test]
    fn publishing_into_a_stalled_driver_times_out() {
        let (mut publisher, _receiver) = channel(1);
        publisher.publish(compiled(1), Duration::ZERO).unwrap();
        let err = publisher
            .publish(compiled(2), Duration::from_millis(5))
            .unwrap_err();
        assert_eq!(err, PublishTimeout(Duration::from_millis(5)));
    }
}
