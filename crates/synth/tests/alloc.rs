//! `Synth::process` and `Synth::apply` never touch the heap, with every pad
//! pressed, pads moving, and oscillators migrating every few blocks.

use tessera_rtguard::{assert_no_rt_allocations, rt_section, CountingAllocator};
use tessera_synth::{Control, PadInput, Synth, SynthConfig, BLOCK, CHANNELS, PADS};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn processing_and_controls_do_not_allocate() {
    let config = SynthConfig {
        migration_seconds: 0.05,
        glide_seconds: 0.02,
        ..SynthConfig::default()
    };
    let mut synth = Synth::new(config).unwrap();
    let controls = [
        Control::Gain(0.5),
        Control::Table {
            pad: 3,
            table: 2,
            weights: [1.0; 128],
            bins: 53,
        },
        Control::Range {
            pad: 3,
            table: 2,
            base_hz: 300.0,
            octaves: 2,
        },
        Control::Migration { seconds: 0.1 },
        Control::Width { max_cents: 50.0 },
    ];
    let mut out = [[0.0f32; CHANNELS]; BLOCK];
    for block in 0..1500usize {
        let mut pads = [PadInput::default(); PADS];
        for (p, pad) in pads.iter_mut().enumerate() {
            let phase = (block + p * 37) as f32 * 0.01;
            *pad = PadInput {
                x: phase.sin().abs(),
                y: phase.cos().abs(),
                pressure: if block % 500 < 400 { 0.8 } else { 0.0 },
            };
        }
        rt_section(|| {
            synth.apply(&controls[block % controls.len()]);
            synth.process(&pads, &mut out);
        });
    }
    assert!(synth.objects_processed() > 0);
    assert_no_rt_allocations();
}
