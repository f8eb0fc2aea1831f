//! Copies each audio input `in<k>` to its output `out<k>`.

use crate::node::{Node, ProcessContext};
use crate::port::PortSpec;

/// `channels` audio inputs copied to as many outputs.
pub struct Passthrough {
    channels: usize,
}

impl Passthrough {
    pub fn new(channels: usize) -> Self {
        Passthrough { channels }
    }
}

impl Node for Passthrough {
    fn ports(&self) -> Vec<PortSpec> {
        let inputs = (0..self.channels).map(|k| PortSpec::audio_in(format!("in{k}")));
        let outputs = (0..self.channels).map(|k| PortSpec::audio_out(format!("out{k}")));
        inputs.chain(outputs).collect()
    }

    fn process(&mut self, ctx: &mut ProcessContext<'_>) {
        for channel in 0..self.channels {
            let input = ctx.audio_in(channel);
            ctx.audio_out(channel).copy_from_slice(input);
        }
    }
}
