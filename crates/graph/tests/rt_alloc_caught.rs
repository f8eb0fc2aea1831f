//! The allocation guard catches a node that allocates in its process
//! callback. Its own test binary: the guard's counters are process-wide.

mod common;

use common::{FnNode, PATIENCE};
use tessera_graph::{Engine, EngineConfig, FreewheelDriver, Graph, StreamConfig};
use tessera_rtguard::{assert_no_rt_allocations, rt_allocations, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn a_node_that_allocates_is_caught() {
    let mut graph = Graph::new();
    graph
        .add_node(
            "allocates",
            FnNode::boxed(vec![], |ctx| {
                std::hint::black_box(vec![ctx.cycle(); 16]);
            }),
        )
        .unwrap();
    let stream = StreamConfig::new(64, 48_000).unwrap();
    let engine = Engine::start(graph, stream, FreewheelDriver, EngineConfig::default()).unwrap();
    assert!(engine.wait_for_cycles(10, PATIENCE));
    let report = engine.stop().unwrap();
    assert!(
        rt_allocations() >= report.cycles,
        "one allocation per cycle counted"
    );
    assert!(std::panic::catch_unwind(assert_no_rt_allocations).is_err());
}
