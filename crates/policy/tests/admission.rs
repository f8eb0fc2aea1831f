//! Admission and placement: the invariants hold for any sequence of requests,
//! refusals change nothing, and explanations say what would fit.

use proptest::prelude::*;
use tessera_policy::cell::Limits;
use tessera_policy::*;

fn machine(cores: usize, capacity: f64) -> Machine {
    Machine {
        limits: Limits {
            cores: (0..cores).collect(),
            min_period_ns: 100_000,
            max_period_ns: 4_194_304_000,
        },
        capacity: Bandwidth::from_fraction(capacity),
        system_cores: 1,
    }
}

fn request(
    name: &str,
    policy: CellPolicy,
    cores: CoreRequest,
    budget: Option<Budget>,
    placement: Placement,
) -> CellRequest {
    CellRequest {
        placement,
        ..CellRequest::new(name, policy, cores, budget)
    }
}

fn et(name: &str, runtime_us: u64, period_us: u64) -> CellRequest {
    CellRequest::event_triggered(name, runtime_us * 1000, period_us * 1000)
}

#[test]
fn refusal_names_the_most_free_core_and_what_fits() {
    let mut ledger = Ledger::new(machine(2, 0.90));
    ledger.insert(&et("other", 733, 1333)).unwrap(); // 0.55 on core 1
    let before = ledger.clone();
    let refusal = ledger.insert(&et("synth", 800, 1333)).unwrap_err();
    assert_eq!(ledger, before, "a refusal must change nothing");
    assert_eq!(
        refusal.to_string(),
        "cell \"synth\" refused: needs 0.60 of a core on a single core; the most free on any core \
         is 0.35 (core 1); runtime ≤ 466 µs at period 1333 µs would fit"
    );
}

#[test]
fn partitioned_reservations_prefer_cores_already_partitioned_and_keep_cpu0_shared() {
    let mut ledger = Ledger::new(machine(4, 0.90));
    let a = ledger.insert(&et("a", 100, 1000)).unwrap();
    assert_eq!(a.reservations[0].core, Some(3));
    let b = ledger.insert(&et("b", 100, 1000)).unwrap();
    assert_eq!(
        b.reservations[0].core,
        Some(3),
        "packs onto the partitioned core"
    );
    let big = ledger.insert(&et("big", 800, 1000)).unwrap();
    assert_eq!(
        big.reservations[0].core,
        Some(2),
        "converts the next core when needed"
    );
    assert_eq!(ledger.shared_cores(), vec![0, 1]);
}

#[test]
fn dedicated_cores_take_nothing_else_and_leave_a_system_core() {
    let mut ledger = Ledger::new(machine(2, 0.90));
    let d = ledger
        .insert(&request(
            "music",
            CellPolicy::Dedicated,
            CoreRequest::Count(1),
            None,
            Placement::Partitioned,
        ))
        .unwrap();
    assert_eq!(d.dedicated, vec![1]);
    let err = ledger
        .insert(&request(
            "second",
            CellPolicy::Dedicated,
            CoreRequest::List(vec![1]),
            None,
            Placement::Partitioned,
        ))
        .unwrap_err();
    assert!(err.reason.contains("dedicated to \"music\""), "{err}");
    let err = ledger.insert(&et("synth", 100, 1000)).unwrap_err();
    assert!(
        err.reason.contains("no core can take reservations"),
        "{err}"
    );
    let mut global = et("global", 100, 1000);
    global.placement = Placement::Global;
    ledger.insert(&global).unwrap();
}

#[test]
fn pinned_cells_are_never_resized() {
    let mut ledger = Ledger::new(machine(2, 0.90));
    let mut req = et("synth", 400, 1333);
    req.pinned = true;
    ledger.insert(&req).unwrap();
    let err = ledger
        .resize("synth", Budget::new(300_000, 1_333_000))
        .unwrap_err();
    assert!(err.reason.contains("pinned"));
    ledger.insert(&et("loose", 100, 1000)).unwrap();
    ledger
        .resize("loose", Budget::new(200_000, 1_000_000))
        .unwrap();
    let err = ledger
        .resize("loose", Budget::new(900_000, 1_000_000))
        .unwrap_err();
    assert!(err.reason.contains("capacity"), "{err}");
}

#[test]
fn duplicate_names_and_bad_parameters_are_refused() {
    let mut ledger = Ledger::new(machine(2, 0.90));
    ledger.insert(&et("synth", 100, 1000)).unwrap();
    assert!(ledger
        .insert(&et("synth", 100, 1000))
        .unwrap_err()
        .reason
        .contains("exists"));
    assert!(ledger
        .insert(&et("x", 2000, 1000))
        .unwrap_err()
        .reason
        .contains("runtime"));
    assert!(ledger
        .insert(&et("y", 10, 50))
        .unwrap_err()
        .reason
        .contains("period"));
}

fn arb_request() -> impl Strategy<Value = CellRequest> {
    (
        0usize..4,
        1u64..1000,
        1usize..4,
        proptest::bool::ANY,
        proptest::option::of(proptest::collection::vec(0usize..4, 1..3)),
        0u32..1000,
    )
        .prop_map(|(kind, permille, n, global, list, name)| {
            let policy = CellPolicy::ALL[kind];
            let period = 1_000_000;
            let budget = policy
                .needs_budget()
                .then(|| Budget::new((period * permille / 1000).max(2000), period))
                .map(|b| {
                    if policy == CellPolicy::TimeTriggered {
                        Budget {
                            deadline_ns: b.runtime_ns,
                            ..b
                        }
                    } else {
                        b
                    }
                });
            let placement = if global && policy == CellPolicy::EventTriggered {
                Placement::Global
            } else {
                Placement::Partitioned
            };
            let cores = match list {
                Some(l) => CoreRequest::List(l),
                None => CoreRequest::Count(n),
            };
            request(&format!("c{name}"), policy, cores, budget, placement)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn invariants_hold_for_any_sequence(
        cores in 1usize..5,
        ops in proptest::collection::vec((arb_request(), proptest::bool::weighted(0.2)), 1..25),
    ) {
        let mut ledger = Ledger::new(machine(cores, 0.90));
        for (req, release) in ops {
            if release {
                ledger.release(&req.name);
                continue;
            }
            let before = ledger.clone();
            match ledger.insert(&req) {
                Ok(grant) => {
                    for r in &grant.reservations {
                        if let Some(core) = r.core {
                            prop_assert!(!matches!(before.core_usage(core).mode, CoreMode::Dedicated(_)));
                        }
                    }
                    for &core in &grant.dedicated {
                        prop_assert_eq!(before.core_usage(core).mode, CoreMode::Shared);
                    }
                }
                Err(_) => prop_assert_eq!(&ledger, &before),
            }
            prop_assert_eq!(ledger.violation(), None);
            for usage in ledger.cores() {
                prop_assert!(usage.reserved <= usage.capacity, "core {} over capacity", usage.core);
                if let CoreMode::Dedicated(_) = usage.mode {
                    prop_assert_eq!(usage.cells.len(), 1);
                }
            }
        }
    }
}

#[test]
fn time_triggered_windows_pass_the_demand_test_not_a_density_test() {
    let mut ledger = Ledger::new(machine(2, 0.90));
    let window = |name: &str, runtime_us: u64| {
        request(
            name,
            CellPolicy::TimeTriggered,
            CoreRequest::List(vec![1]),
            Some(Budget {
                runtime_ns: runtime_us * 1000,
                deadline_ns: runtime_us * 1000,
                period_ns: 10_000_000,
            }),
            Placement::Partitioned,
        )
    };
    ledger
        .insert(&window("video", 2000))
        .expect("a 2 ms window every 10 ms fits an empty core");
    let refusal = ledger.insert(&et("synth", 400, 1333)).unwrap_err();
    assert!(refusal.reason.contains("cannot be met there"), "{refusal}");
    assert!(
        refusal
            .would_fit
            .as_deref()
            .unwrap_or("")
            .contains("would fit"),
        "{refusal}"
    );
}

#[test]
fn a_resize_that_does_not_fit_says_what_would() {
    let mut ledger = Ledger::new(machine(2, 0.90));
    ledger.insert(&et("other", 733, 1333)).unwrap();
    ledger.insert(&et("synth", 100, 1333)).unwrap();
    let before = ledger.clone();
    let refusal = ledger
        .resize("synth", Budget::new(800_000, 1_333_000))
        .unwrap_err();
    assert_eq!(ledger, before);
    assert_eq!(
        refusal.would_fit.as_deref(),
        Some("runtime ≤ 466 µs at period 1333 µs would fit")
    );
    let Resized {
        grant, degraded, ..
    } = ledger
        .resize_or_degrade("synth", Budget::new(800_000, 1_333_000))
        .unwrap();
    assert!(degraded);
    let runtime = grant.request.budget.unwrap().runtime_ns;
    assert!((466_000..467_000).contains(&runtime), "{runtime}");
    assert_eq!(ledger.violation(), None);
}

#[test]
fn degrading_a_window_shrinks_its_deadline_with_it() {
    let mut ledger = Ledger::new(machine(2, 0.90));
    ledger.insert(&et("other", 5000, 10_000)).unwrap();
    let window = request(
        "video",
        CellPolicy::TimeTriggered,
        CoreRequest::Count(1),
        Some(Budget {
            runtime_ns: 1_000_000,
            deadline_ns: 1_000_000,
            period_ns: 10_000_000,
        }),
        Placement::Partitioned,
    );
    ledger.insert(&window).unwrap();
    let asked = Budget {
        runtime_ns: 6_000_000,
        deadline_ns: 6_000_000,
        period_ns: 10_000_000,
    };
    let Resized {
        grant, degraded, ..
    } = ledger.resize_or_degrade("video", asked).unwrap();
    let b = grant.request.budget.unwrap();
    assert!(degraded);
    assert_eq!(b.deadline_ns, b.runtime_ns);
    assert!(b.runtime_ns < 6_000_000);
}

#[test]
fn only_bandwidth_cells_that_are_not_pinned_resize() {
    let mut ledger = Ledger::new(machine(4, 0.90));
    let mut pinned = et("pinned", 100, 1000);
    pinned.pinned = true;
    ledger.insert(&pinned).unwrap();
    ledger
        .insert(&CellRequest::dedicated("d", CoreRequest::Count(1)))
        .unwrap();
    ledger.insert(&CellRequest::best_effort("be", 100)).unwrap();
    let before = ledger.clone();
    for (name, why) in [
        ("pinned", "pinned"),
        ("d", "no budget"),
        ("be", "no budget"),
        ("nope", "no such cell"),
    ] {
        let err = ledger
            .resize_or_degrade(name, Budget::new(50_000, 1_000_000))
            .unwrap_err();
        assert!(err.reason.contains(why), "{name}: {err}");
    }
    assert_eq!(ledger, before);
}

/// A budget for `grant`'s cell: a window for a time-triggered cell.
fn resize_budget(grant: &Grant, permille: u64, period_ns: u64) -> Budget {
    let runtime = (period_ns * permille / 1000).max(2000);
    match grant.request.policy {
        CellPolicy::TimeTriggered => Budget {
            runtime_ns: runtime,
            deadline_ns: runtime,
            period_ns,
        },
        _ => Budget::new(runtime, period_ns),
    }
}

fn with_runtime(b: Budget, runtime_ns: u64) -> Budget {
    Budget {
        runtime_ns,
        deadline_ns: if b.deadline_ns == b.runtime_ns {
            runtime_ns
        } else {
            b.deadline_ns
        },
        ..b
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn resizing_never_overbooks_and_degrades_to_the_largest_that_fits(
        cores in 1usize..5,
        ops in proptest::collection::vec((arb_request(), proptest::bool::weighted(0.2)), 1..15),
        resizes in proptest::collection::vec(
            (0usize..15, 1u64..1000, prop_oneof![Just(500_000u64), Just(1_000_000), Just(1_333_000), Just(10_000_000)], proptest::bool::weighted(0.75)),
            1..10,
        ),
    ) {
        let mut ledger = Ledger::new(machine(cores, 0.90));
        for (mut req, pinned) in ops {
            req.pinned = pinned;
            let _ = ledger.insert(&req);
        }
        let names: Vec<String> = ledger.grants().map(|g| g.request.name.clone()).collect();
        prop_assume!(!names.is_empty());
        for (pick, permille, period, degrade) in resizes {
            let name = &names[pick % names.len()];
            let old = ledger.grant(name).unwrap().clone();
            let asked = resize_budget(&old, permille, period);
            let before = ledger.clone();
            let outcome = if degrade {
                ledger.resize_or_degrade(name, asked).map(|r| (r.grant, r.degraded))
            } else {
                ledger.resize(name, asked).map(|g| (g, false))
            };
            match outcome {
                Ok((grant, degraded)) => {
                    prop_assert!(!old.request.pinned, "a pinned cell changed");
                    prop_assert_eq!(ledger.grant(name), Some(&grant));
                    let got = grant.request.budget.unwrap();
                    prop_assert_eq!(got.period_ns, asked.period_ns);
                    prop_assert!(grant.reservations.iter().all(|r| r.budget == got));
                    prop_assert_eq!(
                        grant.reservations.iter().map(|r| r.core).collect::<Vec<_>>(),
                        old.reservations.iter().map(|r| r.core).collect::<Vec<_>>(),
                        "a resize keeps the cores"
                    );
                    if degraded {
                        prop_assert!(got.runtime_ns < asked.runtime_ns);
                        let mut more = before.clone();
                        let bigger = with_runtime(got, got.runtime_ns + 1);
                        prop_assert!(more.resize(name, bigger).is_err(),
                            "{} fits too, {} is not the largest", bigger, got);
                    } else {
                        prop_assert_eq!(got, asked);
                    }
                }
                Err(_) => prop_assert_eq!(&ledger, &before, "a refusal changed the ledger"),
            }
            prop_assert_eq!(ledger.violation(), None);
            for usage in ledger.cores() {
                prop_assert!(usage.reserved <= usage.capacity, "core {} over capacity", usage.core);
            }
        }
    }
}
