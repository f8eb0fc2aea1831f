//! Proves that `LatencyHistogram::record` never allocates after construction:
//! the recording runs as a real-time section under tessera's counting
//! allocator.

use tessera_measure::LatencyHistogram;
use tessera_rtguard::{assert_no_rt_allocations, rt_section, CountingAllocator};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

#[test]
fn record_allocates_nothing_after_construction() {
    let mut histogram = LatencyHistogram::new(1_000_000_000);
    rt_section(|| {
        // Zero, every magnitude up to the bound, and far beyond it (saturates).
        for i in 0..200_000u64 {
            histogram.record(i * i);
        }
        histogram.record(u64::MAX);
    });
    assert_no_rt_allocations();
    assert_eq!(histogram.count(), 200_001);
}
