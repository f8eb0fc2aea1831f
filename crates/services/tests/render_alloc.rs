//! The render service's serving path never touches the heap: a client
//! submits (and is refused when full) inside a real-time section while the
//! service threads composite inside theirs. Its own test binary: the
//! allocation guard's counters are process-wide.

use std::time::Duration;
use tessera_rtguard::{assert_no_rt_allocations, rt_section, CountingAllocator};
use tessera_services::render::{ClientSpec, Render, RenderConfig, Submit};
use tessera_sys::clock::monotonic_ns;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn submitting_and_compositing_allocate_nothing() {
    let mut render = Render::new(RenderConfig {
        threads: 2,
        ..RenderConfig::default()
    })
    .unwrap();
    let mut clients: Vec<_> = (0..2)
        .map(|i| {
            render
                .add_client(ClientSpec::new(&format!("c{i}"), 352, 288))
                .unwrap()
        })
        .collect();
    let service = render.start(|_| Box::new(|| Ok(()))).unwrap();
    let (mut queued, mut full) = (0u64, 0u64);
    let give_up = monotonic_ns() + 20_000_000_000;
    // Bursts of five frames into three slots: some are refused, the rest
    // are composited while the next burst waits.
    while (queued < 40 || full == 0) && monotonic_ns() < give_up {
        rt_section(|| {
            for client in clients.iter_mut() {
                for _ in 0..5 {
                    let deadline = monotonic_ns() + 33_000_000;
                    match client.submit(deadline, |rgb| rgb.fill(0x80)) {
                        Submit::Queued => queued += 1,
                        Submit::Full => full += 1,
                    }
                }
            }
        });
        std::thread::sleep(Duration::from_millis(5));
    }
    let report = service.stop();
    assert!(queued >= 40 && full > 0, "queued {queued}, refused {full}");
    assert_eq!(report.composited(), queued, "{report:?}");
    assert_eq!(report.dropped(), full);
    assert_no_rt_allocations();
}
