//! The Migrator Synthesizer as an audio graph (seed 000 Fig. 5): one
//! [`ObjectNode`] per pad, all independent, and the [`MixerNode`] they feed,
//! which writes the output packet. The engine's ready queue hands the object
//! nodes to whichever of the synth cell's threads is free — the seed's
//! "dynamically assigns the rest of the hardware threads for the Migrator
//! Synthesizer objects to run".
//!
//! Both read the package the link driver received: the pads' state is the
//! last frame of its newest packet. Controls (OSC) arrive on each node's own
//! ring, routed by [`crate::control`], and are applied before the block.
//!
//! The graph plays exactly what [`tessera_synth::Synth::process`] plays for
//! the same input (tests compare them bit for bit). This module owns the
//! nodes; they must never allocate, lock or block: they run on the engine's
//! real-time threads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rtrb::Consumer;
use tessera_graph::{Node, PortSpec, ProcessContext};
use tessera_synth::{Control, Mixer, OutputBlock, PadVoice, BLOCK, CHANNELS};

use crate::protocol::{self, FRAMES_PER_PACKET};

/// Applies every control waiting on `ring`.
fn drain(ring: &mut Option<Consumer<Control>>, mut apply: impl FnMut(&Control)) {
    if let Some(ring) = ring {
        while let Ok(control) = ring.pop() {
            apply(&control);
        }
    }
}

/// One pad's Migrator object: renders its block, or silence when inactive.
pub struct ObjectNode {
    voice: PadVoice,
    controls: Option<Consumer<Control>>,
}

impl ObjectNode {
    pub fn new(voice: PadVoice, controls: Option<Consumer<Control>>) -> ObjectNode {
        ObjectNode { voice, controls }
    }
}

impl Node for ObjectNode {
    fn ports(&self) -> Vec<PortSpec> {
        vec![PortSpec::audio_out("out")]
    }

    fn process(&mut self, ctx: &mut ProcessContext<'_>) {
        let voice = &mut self.voice;
        drain(&mut self.controls, |c| voice.apply(c));
        let input = protocol::newest_packet(ctx.package()).map(|(_, packet)| {
            protocol::decode_input_pad(packet, FRAMES_PER_PACKET - 1, voice.pad())
        });
        let out: &mut [f32; BLOCK] = ctx
            .audio_out(0)
            .try_into()
            .expect("the stream's block is the synthesizer's 32 frames");
        // A malformed package (counted by the mixer) keeps the pad's level
        // moving towards silence rather than repeating a stale one.
        if !voice.render(input.unwrap_or_default(), out) {
            out.fill(0.0);
        }
    }
}

/// Sums the objects to the 8 channels and writes the output packet.
pub struct MixerNode {
    mixer: Mixer,
    objects: usize,
    controls: Option<Consumer<Control>>,
    block: OutputBlock,
    /// Packages with a malformed packet: answered as package `u32::MAX`.
    malformed: Arc<AtomicU64>,
}

impl MixerNode {
    pub fn new(
        mixer: Mixer,
        objects: usize,
        controls: Option<Consumer<Control>>,
        malformed: Arc<AtomicU64>,
    ) -> MixerNode {
        MixerNode {
            mixer,
            objects,
            controls,
            block: [[0.0; CHANNELS]; BLOCK],
            malformed,
        }
    }

    /// The name of input `pad`.
    pub fn input(pad: usize) -> String {
        format!("in{pad}")
    }
}

impl Node for MixerNode {
    fn ports(&self) -> Vec<PortSpec> {
        (0..self.objects)
            .map(|pad| PortSpec::audio_in(MixerNode::input(pad)))
            .collect()
    }

    fn process(&mut self, ctx: &mut ProcessContext<'_>) {
        let mixer = &mut self.mixer;
        drain(&mut self.controls, |c| {
            if let Control::Gain(gain) = *c {
                mixer.set_gain(gain);
            }
        });
        for frame in self.block.iter_mut() {
            *frame = [0.0; CHANNELS];
        }
        // Pad order, silent objects included: adding exact zeros changes no
        // sum, so this matches the sequential synthesizer bit for bit.
        for pad in 0..self.objects {
            let input: &[f32; BLOCK] = ctx
                .audio_in(pad)
                .try_into()
                .expect("the stream's block is the synthesizer's 32 frames");
            self.mixer.add(pad, input, &mut self.block);
        }
        self.mixer.finish(&mut self.block);
        let number = match protocol::newest_packet(ctx.package()) {
            Some((number, _)) => number,
            None => {
                self.malformed.fetch_add(1, Ordering::Relaxed);
                u32::MAX
            }
        };
        if let Some(out) = ctx.packet_out() {
            // The buffer is the driver's output packet, sized for the format.
            let _ = protocol::encode_output(number, &self.block, out);
        }
    }
}
