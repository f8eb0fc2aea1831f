//! The adaptive-budget controller: the budget stays in [min, max], covers
//! the prediction with its increment, rises by the bump on a join or an
//! xrun, uses the fewest fragments that make the period enforceable,
//! settles under a constant load, and keeps its bandwidth across a change of
//! audio period.

use proptest::prelude::*;
use tessera_policy::adaptive::fragments;
use tessera_policy::cell::MIN_RUNTIME_NS;
use tessera_policy::*;

const P128: u64 = 1_333_333; // 128 frames at 96 kHz
const P64: u64 = 666_666; // 64 frames at 96 kHz

/// The defaults, holding a bump until the whole window refills (as the
/// thesis did) so that the window's arithmetic is easy to follow.
fn controller(audio_period_ns: u64) -> Adaptive {
    let config = AdaptiveConfig {
        hold_samples: 16,
        ..AdaptiveConfig::default()
    };
    Adaptive::new(config, audio_period_ns).unwrap()
}

/// Fills the window with samples of `per_period` ns.
fn feed(a: &mut Adaptive, per_period: u64) {
    for _ in 0..a.config().predictor.window {
        a.observe(per_period * 10, 10);
    }
}

#[test]
fn starts_at_the_initial_budget_and_holds_it_until_the_window_fills() {
    let mut a = controller(P128);
    assert_eq!(a.wanted(), Budget::new(P128 / 2, P128));
    a.observe(100_000, 1);
    assert_eq!(
        a.wanted().runtime_ns,
        P128 / 2,
        "one sample does not decide"
    );
    feed(&mut a, 100_000);
    assert_eq!(a.wanted().runtime_ns, 120_000, "prediction × (100 + 20) %");
    assert!(!a.report().holding);
}

#[test]
fn the_thesis_fragments_double_a_667_us_period_and_its_budget() {
    let mut a = controller(P64);
    assert_eq!(a.fragments(), 2);
    assert_eq!(a.reservation_period_ns(), 2 * P64);
    feed(&mut a, 200_000);
    assert_eq!(a.wanted(), Budget::new(480_000, 2 * P64));
}

#[test]
fn the_budget_is_clamped_to_5_and_95_percent_of_the_period() {
    let mut a = controller(1_000_000 * 2);
    feed(&mut a, 1_000);
    assert_eq!(a.wanted().runtime_ns, 100_000, "m = P/100 · 5");
    feed(&mut a, 1_999_000);
    assert_eq!(a.wanted().runtime_ns, 1_900_000, "M = 95 % of P");
}

#[test]
fn a_join_bumps_10_percent_at_the_minimum_and_20_above() {
    let mut a = controller(2_000_000);
    feed(&mut a, 1_000);
    a.on_join();
    assert_eq!(a.wanted().runtime_ns, 110_000);
    feed(&mut a, 500_000);
    assert_eq!(a.wanted().runtime_ns, 600_000);
    a.on_xrun();
    assert_eq!(a.wanted().runtime_ns, 720_000);
    assert_eq!(a.report().samples, 0, "the queue is flushed");
    a.observe(100_000, 1);
    assert_eq!(a.wanted().runtime_ns, 720_000, "the bump stands");
    feed(&mut a, 100_000);
    assert_eq!(a.wanted().runtime_ns, 120_000, "until the queue refills");
    assert_eq!(a.report().bumps, 2);
}

#[test]
fn a_bump_starts_from_what_was_granted_when_that_is_more() {
    let mut a = controller(2_000_000);
    feed(&mut a, 500_000);
    a.granted(Budget::new(1_000_000, 2_000_000), false);
    a.on_join();
    assert_eq!(a.wanted().runtime_ns, 1_200_000);
}

#[test]
fn degraded_grants_are_counted_and_the_need_is_asked_again() {
    let mut a = controller(P128);
    feed(&mut a, 300_000);
    let wanted = a.wanted();
    assert_eq!(a.update(), Some(wanted));
    a.granted(Budget::new(200_000, P128), true);
    a.granted(Budget::new(250_000, P128), true);
    let r = a.report();
    assert_eq!((r.degradations, r.degraded), (2, true));
    assert_eq!(a.update(), Some(wanted), "capacity may have been freed");
    a.granted(wanted, false);
    assert_eq!(a.update(), None, "nothing to change");
    assert!(!a.report().degraded);
}

#[test]
fn a_bump_stands_for_hold_samples_only() {
    let mut a = Adaptive::new(AdaptiveConfig::default(), P128).unwrap();
    feed(&mut a, 100_000);
    a.on_xrun();
    a.observe(100_000, 1);
    a.observe(100_000, 1);
    assert!(a.report().holding, "two samples do not decide");
    a.observe(100_000, 1);
    assert!(!a.report().holding, "the third does (hold_samples = 3)");
    assert_eq!(a.wanted().runtime_ns, 120_000);
}

#[test]
fn noise_within_the_hysteresis_changes_nothing() {
    let mut a = controller(P128);
    feed(&mut a, 300_000);
    let held = a.wanted();
    a.granted(held, false);
    // 3 % more use: inside the 5 % band, the increment covers it.
    feed(&mut a, 309_000);
    assert_eq!(a.update(), None);
    // 10 % more: outside it.
    feed(&mut a, 330_000);
    assert_eq!(a.update(), Some(a.wanted()));
    // 10 % less: the budget shrinks too.
    a.granted(a.wanted(), false);
    feed(&mut a, 297_000);
    assert_eq!(a.update(), Some(a.wanted()));
}

#[test]
fn a_buffer_size_change_rescales_and_flushes() {
    let mut a = controller(P128);
    feed(&mut a, 300_000);
    let before = a.wanted();
    a.set_audio_period(P64).unwrap();
    assert_eq!(a.fragments(), 2);
    assert_eq!(a.report().samples, 0);
    assert_eq!(a.wanted().period_ns, 2 * P64);
    let diff = a.wanted().bandwidth().0.abs_diff(before.bandwidth().0);
    assert!(diff <= 2, "{} vs {}", a.wanted(), before);
}

#[test]
fn bad_configs_are_refused_with_the_field() {
    let mut c = AdaptiveConfig {
        increment_pct: 101,
        ..AdaptiveConfig::default()
    };
    assert_eq!(Adaptive::new(c, P128).unwrap_err().field, "increment_pct");
    c.increment_pct = 20;
    c.predictor.window = 0;
    assert_eq!(
        Adaptive::new(c, P128).unwrap_err().field,
        "predictor.window"
    );
    c.predictor.window = 4;
    c.min_budget_pct = 96;
    assert!(Adaptive::new(c, P128).is_err());
    assert!(Adaptive::new(AdaptiveConfig::default(), 0).is_err());
}

#[test]
fn percentile_and_mean_predictors() {
    let config = |kind| AdaptiveConfig {
        predictor: PredictorConfig { kind, window: 4 },
        increment_pct: 0,
        ..AdaptiveConfig::default()
    };
    let mut mean = Adaptive::new(config(PredictorKind::Mean), 2_000_000).unwrap();
    let mut p50 = Adaptive::new(config(PredictorKind::Percentile(50)), 2_000_000).unwrap();
    for s in [200_000, 400_000, 600_000, 800_000] {
        mean.observe(s, 1);
        p50.observe(s, 1);
    }
    assert_eq!(mean.wanted().runtime_ns, 500_000);
    assert_eq!(p50.wanted().runtime_ns, 400_000);
}

#[derive(Debug, Clone)]
enum Op {
    Observe(u64, u64),
    Join,
    Xrun,
    Grant(u64, bool),
    Period(u64),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u64..5_000_000, 0u64..20).prop_map(|(c, n)| Op::Observe(c, n)),
        1 => Just(Op::Join),
        1 => Just(Op::Xrun),
        1 => (0u64..2_000_000, any::<bool>()).prop_map(|(r, d)| Op::Grant(r, d)),
        1 => (50_000u64..20_000_000).prop_map(Op::Period),
    ]
}

fn arb_config() -> impl Strategy<Value = AdaptiveConfig> {
    (
        0u32..=100,
        0u32..50,
        50u32..=100,
        0u32..=100,
        prop_oneof![
            Just(PredictorKind::Max),
            Just(PredictorKind::Mean),
            (0u8..=100).prop_map(PredictorKind::Percentile)
        ],
        1usize..20,
        (0u32..60, 0u32..60),
        100_000u64..5_000_000,
    )
        .prop_map(
            |(inc, min, max, initial, kind, window, (bump, at_min), enforce)| AdaptiveConfig {
                increment_pct: inc,
                min_budget_pct: min,
                max_budget_pct: max,
                initial_budget_pct: initial,
                predictor: PredictorConfig { kind, window },
                join_bump_pct: bump,
                join_bump_at_min_pct: at_min,
                xrun_bump_pct: at_min,
                xrun_bump_at_min_pct: bump,
                hysteresis_pct: 5,
                hold_samples: window,
                min_enforceable_period_ns: enforce,
            },
        )
}

fn apply(a: &mut Adaptive, op: &Op) {
    match *op {
        Op::Observe(c, n) => a.observe(c, n),
        Op::Join => a.on_join(),
        Op::Xrun => a.on_xrun(),
        Op::Grant(r, d) => {
            let p = a.reservation_period_ns();
            a.granted(Budget::new(r.min(p), p), d)
        }
        Op::Period(p) => a.set_audio_period(p).unwrap(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn the_budget_stays_in_bounds_and_covers_the_prediction(
        config in arb_config(),
        period in 50_000u64..20_000_000,
        ops in proptest::collection::vec(arb_op(), 0..60),
    ) {
        let mut a = Adaptive::new(config, period).unwrap();
        for op in &ops {
            apply(&mut a, op);
            let w = a.wanted();
            let (min, max) = a.bounds();
            prop_assert!(min <= w.runtime_ns && w.runtime_ns <= max, "{w} outside [{min}, {max}]");
            prop_assert!(w.runtime_ns <= w.deadline_ns && w.deadline_ns == w.period_ns);
            prop_assert_eq!(w.period_ns, a.reservation_period_ns());
            if let Some(p) = a.prediction() {
                let need = p as u128 * a.fragments() as u128
                    * (100 + config.increment_pct) as u128 / 100;
                prop_assert!(w.runtime_ns as u128 >= need.min(max as u128),
                    "{w} below the prediction {p} × {} × (1 + I)", a.fragments());
            }
        }
    }

    #[test]
    fn a_join_or_an_xrun_raises_the_budget_by_the_bump(
        config in arb_config(),
        period in 50_000u64..20_000_000,
        ops in proptest::collection::vec(arb_op(), 0..30),
        xrun in any::<bool>(),
    ) {
        let mut a = Adaptive::new(config, period).unwrap();
        for op in ops.iter().filter(|o| !matches!(o, Op::Grant(..))) {
            apply(&mut a, op);
        }
        let before = a.wanted().runtime_ns;
        let (min, max) = a.bounds();
        let pct = match (xrun, before <= min) {
            (false, true) => config.join_bump_at_min_pct,
            (false, false) => config.join_bump_pct,
            (true, true) => config.xrun_bump_at_min_pct,
            (true, false) => config.xrun_bump_pct,
        };
        if xrun { a.on_xrun() } else { a.on_join() }
        let expected = (before + before * pct as u64 / 100).clamp(min, max);
        prop_assert_eq!(a.wanted().runtime_ns, expected);
        prop_assert!(a.wanted().runtime_ns >= before);
    }

    #[test]
    fn fragments_are_the_fewest_that_make_the_period_enforceable(
        audio in 1u64..10_000_000,
        enforce in 1u64..10_000_000,
    ) {
        let f = fragments(audio, enforce);
        prop_assert!(f >= 1);
        prop_assert!(audio * f >= enforce);
        prop_assert!(f == 1 || audio * (f - 1) < enforce);
    }

    #[test]
    fn a_constant_load_settles_on_a_constant_budget(
        config in arb_config(),
        period in 50_000u64..20_000_000,
        load_pct in 0u64..100,
    ) {
        let mut a = Adaptive::new(config, period).unwrap();
        let per_period = period * load_pct / 100;
        feed(&mut a, per_period);
        let settled = a.wanted();
        let need = per_period * a.fragments() * (100 + config.increment_pct as u64) / 100;
        let (min, max) = a.bounds();
        prop_assert_eq!(settled.runtime_ns, need.clamp(min, max));
        for _ in 0..3 * config.predictor.window {
            a.observe(per_period * 7, 7);
            prop_assert_eq!(a.wanted(), settled, "no oscillation");
        }
    }

    #[test]
    fn a_period_change_keeps_the_bandwidth(
        config in arb_config(),
        from in 50_000u64..20_000_000,
        to in 50_000u64..20_000_000,
        load_pct in 0u64..100,
    ) {
        prop_assume!(from != to);
        let mut a = Adaptive::new(config, from).unwrap();
        feed(&mut a, from * load_pct / 100);
        let before = a.wanted();
        a.set_audio_period(to).unwrap();
        let after = a.wanted();
        prop_assert_eq!(a.fragments(), fragments(to, config.min_enforceable_period_ns));
        prop_assert_eq!(after.period_ns, a.reservation_period_ns());
        prop_assert_eq!(a.report().samples, 0);
        // The bandwidth is kept unless the new bounds clamp it.
        let kept = before.runtime_ns as u128 * after.period_ns as u128 / before.period_ns as u128;
        let (min, max) = a.bounds();
        prop_assert_eq!(after.runtime_ns as u128, kept.clamp(min as u128, max as u128));
    }
}

#[test]
fn wants_that_fit_the_room_are_left_alone() {
    let wanted = [Budget::new(400_000, P128), Budget::new(200_000, P128)];
    let out = compress(&wanted, &[13_333, 13_333], Bandwidth::from_fraction(0.9));
    assert_eq!(out, wanted);
}

#[test]
fn floors_that_do_not_fit_are_returned_for_admission_to_judge() {
    let wanted = [Budget::new(1_000_000, P128), Budget::new(1_000_000, P128)];
    let out = compress(&wanted, &[700_000, 700_000], Bandwidth::from_fraction(0.9));
    assert!(out.iter().all(|b| b.runtime_ns == 700_000), "{out:?}");
}

proptest! {
    /// A fixed share is shared out whole, in proportion to the weights: the
    /// parts sum to the share (less the rounding; more only by the minimum
    /// runtime's floor), each keeps its period, and a larger weight never
    /// gets less.
    #[test]
    fn a_fixed_share_is_shared_out_whole_in_proportion(
        weights in proptest::collection::vec(0u64..1_300_000, 1..14),
        total_pct in 1u64..=90,
    ) {
        let weighed: Vec<Budget> = weights.iter().map(|&w| Budget::new(w, P128)).collect();
        let total = Bandwidth::from_fraction(total_pct as f64 / 100.0);
        let out = share_out(&weighed, total);
        prop_assert_eq!(out.len(), weighed.len());
        let sum: Bandwidth = out.iter().map(Budget::bandwidth).sum();
        let floors = Bandwidth::of(MIN_RUNTIME_NS, P128).times(out.len() as u64);
        prop_assert!(sum <= total + floors, "{} > {}", sum, total);
        // Each part loses under a nanosecond of runtime and a few units of
        // the fixed point to truncation.
        let slack = Bandwidth((Bandwidth::of(1, P128).0 + 3) * out.len() as u64);
        prop_assert!(sum + slack >= total, "{} < {}", sum, total);
        for (o, w) in out.iter().zip(&weighed) {
            prop_assert_eq!(o.period_ns, w.period_ns);
            prop_assert!(o.runtime_ns >= MIN_RUNTIME_NS);
        }
        for (i, j) in (0..out.len()).flat_map(|i| (0..out.len()).map(move |j| (i, j))) {
            if weighed[i].runtime_ns >= weighed[j].runtime_ns {
                prop_assert!(out[i].runtime_ns >= out[j].runtime_ns);
            }
        }
    }

    /// A full core squeezes every reservation alike: the results fit the
    /// room (to the bandwidth's rounding), none falls below its floor or
    /// rises above its want, and a larger want never gets less.
    #[test]
    fn compression_fits_the_room_keeps_floors_and_order(
        wants in proptest::collection::vec(20_000u64..1_300_000, 1..14),
        room_pct in 10u64..=90,
    ) {
        let floor = 13_333;
        let wanted: Vec<Budget> = wants.iter().map(|&w| Budget::new(w, P128)).collect();
        let floors = vec![floor; wanted.len()];
        let room = Bandwidth::from_fraction(room_pct as f64 / 100.0);
        let out = compress(&wanted, &floors, room);
        prop_assert_eq!(out.len(), wanted.len());
        let floors_fit = floor as f64 / P128 as f64 * wanted.len() as f64 <= room_pct as f64 / 100.0;
        for (o, w) in out.iter().zip(&wanted) {
            prop_assert!(o.runtime_ns >= floor.min(w.runtime_ns) && o.runtime_ns <= w.runtime_ns);
            prop_assert_eq!(o.period_ns, w.period_ns);
        }
        if floors_fit {
            let total: Bandwidth = out.iter().map(Budget::bandwidth).sum();
            prop_assert!(total.0 <= room.0 + wanted.len() as u64, "{} > {}", total, room);
        }
        for (i, j) in (0..wanted.len()).flat_map(|i| (0..wanted.len()).map(move |j| (i, j))) {
            if wanted[i].runtime_ns >= wanted[j].runtime_ns {
                prop_assert!(out[i].runtime_ns >= out[j].runtime_ns);
            }
        }
    }
}
