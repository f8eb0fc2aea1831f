//! A media clock follows the system clock's steps: while a follower runs,
//! a step of `CLOCK_REALTIME` makes the clock (and every clone of it, as
//! the stream nodes hold) take its offset again and count the step, so the
//! nodes re-anchor. The test steps the machine's clock 1 µs forward and
//! straight back: the clock ends where it would have been.

use std::time::{Duration, Instant};

use tessera_services::aes67::MediaClock;
use tessera_sys::clock::step_realtime;

/// Whether `done` holds within two seconds.
fn within_two_seconds(done: impl Fn() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(2);
    while !done() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

#[test]
fn each_step_of_the_system_clock_is_followed() {
    // Root for CAP_SYS_TIME; the machine's lock keeps other privileged
    // tests from timing anything across the step.
    let Some(_machine) = tessera_testkit::privileged("media clock steps") else {
        return;
    };
    let clock = MediaClock::system("a test of steps");
    let node = clock.clone();
    let follower = clock.follow().unwrap();
    assert_eq!(node.steps(), 0);
    let forward = step_realtime(1_000);
    let seen = within_two_seconds(|| node.steps() == 1);
    let back = step_realtime(-1_000);
    let seen_back = within_two_seconds(|| node.steps() == 2);
    forward.and(back).unwrap();
    assert!(seen && seen_back, "{} steps seen of 2", node.steps());
    drop(follower);
    step_realtime(1_000).and(step_realtime(-1_000)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(node.steps(), 2, "a dropped follower follows no more");
}
