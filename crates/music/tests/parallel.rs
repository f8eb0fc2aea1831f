//! The Migrator graph — 32 object nodes run by whichever engine thread is
//! free (the communication thread too, or not), then the mixer — plays exactly what the sequential synthesizer
//! plays for the same input, bit for bit, package after package, while pads
//! are pressed, moved and released.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera_graph::{package_link, Engine, EngineConfig, LinkConfig, StreamConfig};
use tessera_music::app::migrator_graph;
use tessera_music::control::control_rings;
use tessera_music::protocol::{
    self, InputHeader, FRAMES_PER_PACKAGE, INPUT_PACKET_SIZE, OUTPUT_PACKET_SIZE,
    PACKETS_PER_PACKAGE, SAMPLE_RATE,
};
use tessera_synth::{Control, OutputBlock, PadInput, Synth, SynthConfig, BLOCK, CHANNELS, PADS};

fn pads_at(block: usize) -> [PadInput; PADS] {
    std::array::from_fn(|p| {
        // Pads take turns: each pressed for a while, then released.
        let pressed = !(block / 40 + p).is_multiple_of(3) && p % 4 != 1;
        PadInput {
            x: (p as f32 / PADS as f32),
            y: ((block / 25 + p) % 4) as f32 / 4.0 + 0.1,
            pressure: if pressed {
                0.3 + 0.02 * (p % 10) as f32
            } else {
                0.0
            },
        }
    })
}

fn package(number: u32, pads: &[PadInput; PADS]) -> Vec<u8> {
    let mut package = vec![0u8; PACKETS_PER_PACKAGE * INPUT_PACKET_SIZE];
    for (index, packet) in package.chunks_exact_mut(INPUT_PACKET_SIZE).enumerate() {
        let header = InputHeader {
            package: number,
            index: index as u16,
        };
        protocol::encode_input(header, &[*pads; 2], packet).unwrap();
    }
    package
}

#[test]
fn the_parallel_graph_plays_what_the_synthesizer_plays() {
    // The communication thread running objects beside one worker, and kept
    // to communication while two workers run them (the seed's arrangement).
    for (workers, driver_runs_nodes) in [(1, true), (2, false)] {
        plays_what_the_synthesizer_plays(EngineConfig {
            workers,
            driver_runs_nodes,
            max_nodes: PADS + 1,
            ..EngineConfig::default()
        });
    }
}

fn plays_what_the_synthesizer_plays(engine_config: EngineConfig) {
    let config = SynthConfig {
        oscillators_per_object: 8,
        migration_seconds: 0.2,
        ..SynthConfig::default()
    };
    let mut reference = Synth::new(config.clone()).unwrap();
    let (mut router, rings) = control_rings(PADS);
    let graph = migrator_graph(
        Synth::new(config).unwrap(),
        rings,
        Arc::new(AtomicU64::new(0)),
    )
    .unwrap();
    let (mut service, driver) = package_link(LinkConfig {
        package_size: PACKETS_PER_PACKAGE * INPUT_PACKET_SIZE,
        output_size: OUTPUT_PACKET_SIZE,
        depth: 4,
    })
    .unwrap();
    let stream = StreamConfig::new(FRAMES_PER_PACKAGE as u32, SAMPLE_RATE).unwrap();
    let engine = Engine::start(graph, stream, driver, engine_config).unwrap();
    let mut expected: OutputBlock = [[0.0; CHANNELS]; BLOCK];
    let mut got: OutputBlock = [[0.0; CHANNELS]; BLOCK];
    let mut output = vec![0u8; OUTPUT_PACKET_SIZE];
    let mut heard = false;
    for block in 0..400 {
        if block == 150 {
            // A control between blocks: the gain to the mixer, the width to
            // every object, in both.
            for control in [Control::Gain(0.5), Control::Width { max_cents: 20.0 }] {
                reference.apply(&control);
                router.route(control);
            }
        }
        let pads = pads_at(block);
        assert!(service.send_package(block as u64, &package(block as u32, &pads)));
        let give_up = Instant::now() + Duration::from_secs(10);
        let start = loop {
            if let Some(start) = service.receive_output(&mut output) {
                break start;
            }
            assert!(Instant::now() < give_up, "block {block} answered");
            std::thread::sleep(Duration::from_micros(200));
        };
        assert_eq!(start, block as u64, "the answer carries its package's t1");
        assert_eq!(
            protocol::decode_output(&output, &mut got).unwrap(),
            block as u32
        );
        reference.process(&pads, &mut expected);
        let bits = |b: &OutputBlock| b.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&expected), "block {block}");
        heard |= expected.iter().flatten().any(|x| *x != 0.0);
    }
    assert!(heard, "the pads made sound");
    let report = engine.stop().unwrap();
    assert_eq!(report.cycles, 400);
    assert_eq!(report.node_panics, 0);
}
