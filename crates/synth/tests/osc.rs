//! OSC: every control survives encode → parse, and garbage is refused
//! without a panic.

use proptest::prelude::*;
use tessera_synth::osc::{parse_message, parse_packet, OscError};
use tessera_synth::Control;

fn control() -> impl Strategy<Value = Control> {
    prop_oneof![
        (0.0f32..=4.0).prop_map(Control::Gain),
        (
            0u8..32,
            0u8..4,
            prop::collection::vec(0.0f32..10.0, 1..=128)
        )
            .prop_filter_map("weights must not all be zero", |(pad, table, w)| {
                let mut weights = [0.0; 128];
                weights[..w.len()].copy_from_slice(&w);
                (w.iter().sum::<f32>() > 0.0).then_some(Control::Table {
                    pad,
                    table,
                    weights,
                    bins: w.len() as u8,
                })
            }),
        (0u8..32, 0u8..4, 10.0f32..=10_000.0, 1u8..=8).prop_map(
            |(pad, table, base_hz, octaves)| Control::Range {
                pad,
                table,
                base_hz,
                octaves
            }
        ),
        (0.05f32..=600.0).prop_map(|seconds| Control::Migration { seconds }),
        (0.0f32..=2400.0).prop_map(|max_cents| Control::Width { max_cents }),
    ]
}

fn bundle(elements: &[&[u8]]) -> Vec<u8> {
    let mut b = b"#bundle\0".to_vec();
    b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1]);
    for e in elements {
        b.extend_from_slice(&(e.len() as i32).to_be_bytes());
        b.extend_from_slice(e);
    }
    b
}

proptest! {
    #[test]
    fn controls_round_trip(c in control()) {
        let mut buf = [0u8; 1024];
        let len = c.encode(&mut buf).unwrap();
        prop_assert_eq!(len % 4, 0);
        prop_assert_eq!(parse_message(&buf[..len]), Ok(c.clone()));
        let mut got = Vec::new();
        let b = bundle(&[&buf[..len], &buf[..len]]);
        prop_assert_eq!(parse_packet(&b, &mut |c| got.push(c)), Ok(()));
        prop_assert_eq!(got, vec![c.clone(), c]);
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse_packet(&bytes, &mut |_| {});
    }

    #[test]
    fn corrupted_messages_never_panic(c in control(), at in 0usize..600, byte in any::<u8>(), cut in 0usize..600) {
        let mut buf = [0u8; 1024];
        let len = c.encode(&mut buf).unwrap();
        buf[at % len] = byte;
        let _ = parse_packet(&buf[..len], &mut |_| {});
        let _ = parse_packet(&buf[..cut % (len + 1)], &mut |_| {});
    }
}

#[test]
fn strictness() {
    let mut buf = [0u8; 64];
    let len = Control::Gain(1.0).encode(&mut buf).unwrap();
    assert_eq!(parse_message(&buf[..len - 1]), Err(OscError::Truncated));
    let mut longer = buf[..len].to_vec();
    longer.extend_from_slice(&[0; 4]);
    assert_eq!(parse_message(&longer), Err(OscError::TrailingBytes));
    assert_eq!(
        parse_message(b"/migrator/gain\0\0,s\0\0abc\0"),
        Err(OscError::UnsupportedType(b's'))
    );
    assert_eq!(
        parse_message(b"/nope\0\0\0,\0\0\0"),
        Err(OscError::UnknownAddress)
    );
    assert_eq!(
        parse_message(b"/migrator/gain\0\0"),
        Err(OscError::MissingTypeTags)
    );
    // Floats are accepted where integers are meant, if integral (Pd, Max).
    let mut pd = b"/migrator/range\0,ffff\0\0\0".to_vec();
    for x in [3.0f32, 1.0, 220.0, 2.0] {
        pd.extend_from_slice(&x.to_be_bytes());
    }
    assert_eq!(
        parse_message(&pd),
        Ok(Control::Range {
            pad: 3,
            table: 1,
            base_hz: 220.0,
            octaves: 2
        })
    );
    let deep = (0..10).fold(parse_free_gain(), |inner, _| bundle(&[&inner]));
    assert_eq!(parse_packet(&deep, &mut |_| {}), Err(OscError::BadBundle));
}

fn parse_free_gain() -> Vec<u8> {
    let mut buf = [0u8; 64];
    let len = Control::Gain(0.5).encode(&mut buf).unwrap();
    buf[..len].to_vec()
}
