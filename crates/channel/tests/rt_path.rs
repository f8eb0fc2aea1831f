//! The non-waiting calls never touch the heap: pushes, pops and bulk
//! copies, full and empty included, run inside a real-time section. Its own
//! test binary: the allocation guard's counters are process-wide.

use std::os::unix::net::UnixStream;
use tessera_channel::{Channel, ChannelError, Consumer};
use tessera_rtguard::{assert_no_rt_allocations, rt_section, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn pushing_and_popping_allocate_nothing() {
    // Both ends in this process: the hand-over works over a socket pair too.
    let (here, there) = UnixStream::pair().unwrap();
    let mut producer = Channel::create("rt", 64, 8)
        .unwrap()
        .hand_over_consumer(&here)
        .unwrap();
    let mut consumer = Consumer::open_from(&there).unwrap();
    let mut out = [0u8; 64];
    let bulk = [7u8; 300];
    rt_section(|| {
        for round in 0..100u8 {
            while producer.try_push(&[round; 64]).is_ok() {}
            assert!(matches!(
                producer.try_push(&[0; 65]),
                Err(ChannelError::TooLarge { .. })
            ));
            while consumer.try_pop(&mut out).is_ok() {}
            assert!(matches!(
                consumer.try_pop(&mut out),
                Err(ChannelError::Empty)
            ));
            assert_eq!(producer.write_bytes(&bulk).unwrap(), bulk.len());
            while consumer.read_bytes(&mut out).unwrap() > 0 {}
        }
    });
    assert_no_rt_allocations();
}
