//! A long run's bounded timings (`Timings::Windows`): every package after
//! the warm-up is in exactly one window and in the run's totals, only the
//! last few timings are kept, and the network role's serving thread — which
//! summarises the windows — still never allocates. Its own test binary:
//! the allocation counters are process-wide.

mod common;

use std::time::Duration;

use tessera_music::app::Timings;
use tessera_music::run;
use tessera_rtguard::{assert_no_rt_allocations, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn a_windowed_run_counts_every_package_once_and_keeps_only_the_last_timings() {
    let mut options = common::light_options(2.0, 0..2);
    let _machine = common::cell_when_root(&mut options, "music windows");
    options.warmup = Duration::from_millis(200);
    options.timings = Timings::Windows {
        window: Duration::from_millis(250),
        recent: 100,
    };
    let outcome = run(&options).unwrap();
    let (app, emulator) = (&outcome.app, &outcome.emulator);
    assert_eq!(app.timings, options.timings);
    let warmup_packages = 200_000_000 / 725_623;
    let measured = emulator.answered - warmup_packages;
    assert_eq!(app.response.count(), measured, "{:?}", outcome.notes);
    assert_eq!(app.service.count(), measured);
    let windows = &app.windows;
    assert_eq!(
        windows.iter().map(|w| w.packages).sum::<u64>(),
        measured,
        "each package in one window"
    );
    // 1.8 s measured in windows of 0.25 s: 8 of them, the last a sliver
    // when the sender slipped — more when the host stalled it for long
    // (windows count by t1: its span, and the longest Δt after it).
    let span_ns = emulator.send_span_ns.saturating_sub(200_000_000) + app.response.max_ns();
    let most = (span_ns.div_ceil(250_000_000) + 1).max(9);
    assert!((7..=most).contains(&(windows.len() as u64)), "{windows:?}");
    assert!(windows.iter().enumerate().all(|(i, w)| w.index == i as u64
        && w.p50_ns <= w.p99_ns
        && w.p99_ns <= w.max_ns + w.max_ns / 500));
    assert_eq!(windows.iter().map(|w| w.misses).sum::<u64>(), app.misses);
    assert_eq!(app.lost_windows, 0);
    assert_eq!(app.network.timings.len(), 100, "only the last ones kept");
    assert!(app
        .network
        .timings
        .windows(2)
        .all(|p| p[0].t1_ns < p[1].t1_ns));
    assert!(app.cycle_cpu.count() > 0);
    assert_no_rt_allocations();
}
