//! Helpers shared by the engine's integration tests.

#![allow(dead_code)] // each test binary uses a different subset

use std::time::Duration;

use tessera_graph::{Node, PortSpec, ProcessContext};

/// How long a test waits for something that should take milliseconds.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A node made of a port list and a process closure.
pub struct FnNode<F> {
    ports: Vec<PortSpec>,
    process: F,
}

impl<F: FnMut(&mut ProcessContext<'_>) + Send + 'static> FnNode<F> {
    pub fn boxed(ports: Vec<PortSpec>, process: F) -> Box<dyn Node> {
        Box::new(FnNode { ports, process })
    }
}

impl<F: FnMut(&mut ProcessContext<'_>) + Send + 'static> Node for FnNode<F> {
    fn ports(&self) -> Vec<PortSpec> {
        self.ports.clone()
    }

    fn process(&mut self, ctx: &mut ProcessContext<'_>) {
        (self.process)(ctx)
    }
}

/// A source writing `value` to every sample of its output `out`.
pub fn constant(value: f32) -> Box<dyn Node> {
    FnNode::boxed(vec![PortSpec::audio_out("out")], move |ctx| {
        ctx.audio_out(0).fill(value)
    })
}
