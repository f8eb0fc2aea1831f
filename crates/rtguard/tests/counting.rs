//! The allocator installed for real: allocations inside a real-time section
//! are counted, allocations outside are not.

use tessera_rtguard::{rt_allocations, rt_frees, rt_section, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn counts_only_allocations_made_in_rt_sections() {
    assert!(tessera_rtguard::is_installed());
    let outside = vec![1u8; 64];
    assert_eq!(
        rt_allocations(),
        0,
        "allocations outside a section are not counted"
    );

    let before = rt_allocations();
    let inside = rt_section(|| std::hint::black_box(vec![2u8; 64]));
    assert_eq!(
        rt_allocations(),
        before + 1,
        "the allocation inside the section is counted"
    );

    rt_section(|| drop(inside));
    assert_eq!(rt_frees(), 1, "the free inside the section is counted");
    drop(outside);
    assert_eq!(rt_frees(), 1);
}
