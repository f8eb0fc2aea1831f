//! The application's real-time path — package assembly, the Migrator node,
//! the output packet — allocates nothing per cycle. Its own test binary: the
//! allocation counters are process-wide.

mod common;

use tessera_music::run;
use tessera_rtguard::{assert_no_rt_allocations, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn the_migrator_cycle_never_allocates() {
    let mut options = common::light_options(1.0, [0, 5, 31]);
    let _machine = common::cell_when_root(&mut options, "music cycle allocations");
    let outcome = run(&options).unwrap();
    assert!(outcome.app.cycles > 1000, "the engine ran its cycles");
    assert_no_rt_allocations();
}
