//! Without privileges the runtime still runs, and says it is best-effort.
//! Its own test binary: it forces the broker's best-effort mode through the
//! environment, which is process-wide.

mod common;

use common::*;
use std::time::Duration;
use tessera_testkit::ScratchDir;

use tessera_runtime::{CellJoin, Guarantee, NoNotifications, Periodic, Runtime, RuntimeConfig};

#[test]
fn in_a_best_effort_broker_the_runtime_runs_and_says_so() {
    std::env::set_var("TESSERA_FORCE_BEST_EFFORT", "1");
    let m = ScratchDir::new("best-effort");
    m.session()
        .create_cell(bandwidth_cell("be", 1000, 10_000, true), true)
        .unwrap();
    let config = RuntimeConfig {
        cell: Some(CellJoin::embedded("be", m.paths.clone())),
        ..Default::default()
    };
    let mut b = Runtime::builder(config);
    let tick = b
        .periodic(Periodic::new("tick", Duration::from_millis(2)), |_| {})
        .unwrap();
    let runtime = b.start(NoNotifications).unwrap();
    match runtime.guarantee() {
        Guarantee::BestEffort(reason) => assert!(reason.contains("BEST-EFFORT"), "{reason}"),
        other => panic!("expected best-effort, got {other:?}"),
    }
    assert!(wait_until(|| runtime.counters(tick).completed >= 5));
    runtime.stop().unwrap();
}
