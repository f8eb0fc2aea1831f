//! A console writer never touches the heap: lines formatted in place and
//! pushed, full rings dropping and counting, to a console thread of this
//! process and to the console service, all inside a real-time section. Its
//! own test binary: the allocation guard's counters are process-wide.

use std::sync::Arc;
use std::time::Duration;
use tessera_rtguard::{assert_no_rt_allocations, rt_section, CountingAllocator};
use tessera_services::console::{
    self, ConsoleBuilder, ConsoleService, ConsoleWriter, ServiceConfig,
};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

/// Bursts larger than the ring, so that some lines are dropped; returns
/// how many went through.
fn write_bursts(writer: &mut ConsoleWriter, burst: usize) -> u64 {
    let mut written = 0;
    for round in 0..20u32 {
        rt_section(|| {
            for i in 0..burst {
                let load = f64::from(round) / 3.0;
                let sent = writer.line(format_args!("round {round} line {i}: load {load:.3} µs"));
                written += u64::from(sent);
            }
        });
        std::thread::sleep(Duration::from_millis(15));
    }
    written
}

#[test]
fn writing_lines_allocates_nothing_in_process_or_to_the_service() {
    let mut builder = ConsoleBuilder::new(64);
    let mut local = builder.writer().unwrap();
    let console = builder.start(Box::new(std::io::sink()), None).unwrap();
    let written = write_bursts(&mut local, 100);
    assert!(local.dropped() > 0, "bursts overflow the ring");
    drop(local);
    let report = console.stop().unwrap();
    assert_eq!(
        (report.lines, report.dropped),
        (written, 20 * 100 - written)
    );

    let socket =
        std::env::temp_dir().join(format!("tessera-console-alloc-{}.sock", std::process::id()));
    let service = ConsoleService::start(ServiceConfig {
        socket,
        sink: Box::new(std::io::sink()),
        setup: None,
        policy: Arc::new(|_| Ok(())),
    })
    .unwrap();
    let mut remote = console::connect(service.socket().to_str().unwrap(), "alloc").unwrap();
    let burst = console::service::WRITER_LINES + 100;
    let written = write_bursts(&mut remote, burst);
    assert!(remote.dropped() > 0, "bursts overflow the ring");
    drop(remote);
    let report = service.stop().unwrap();
    assert_eq!(report.lines, written);
    assert_eq!(report.dropped, (20 * burst) as u64 - written);
    assert_no_rt_allocations();
}
