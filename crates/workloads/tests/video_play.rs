//! End to end: two CIF players at 30 fps into a one-thread render service
//! for about a second. Every frame is composited or counted as dropped, the
//! counts agree on both sides, and neither the players' loops nor the
//! service's touch the heap. Asserts behaviour, never speed. Its own test
//! binary: the allocation guard's counters are process-wide.

use std::time::Duration;
use tessera_rtguard::{assert_no_rt_allocations, CountingAllocator};
use tessera_workloads::video::{self, VideoSpec};
use tessera_workloads::{LoadReport, Window};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn two_players_feed_one_gui_for_a_second() {
    let dir = std::env::temp_dir().join(format!("tessera-video-e2e-{}", std::process::id()));
    let spec = VideoSpec {
        frames: 40,
        ..VideoSpec::cif("player", &dir, Window::lasting(Duration::from_secs(1)))
    };
    let (players, gui) = video::play_into_gui(&spec, 2, 1).unwrap();
    assert_eq!(players.len(), 2);
    assert_eq!(gui.clients.len(), 2);
    let gui_load = LoadReport::from(&gui);
    assert!(gui_load.errors().is_empty(), "{}", gui_load.describe());
    assert_eq!(gui_load.units(), gui.composited());
    for (player, client) in players.iter().zip(&gui.clients) {
        let stats = &player.frames;
        assert!(
            player.load.errors().is_empty(),
            "{}",
            player.load.describe()
        );
        assert_eq!(client.name, stats.name);
        // One release per period of the 1 s window (the machine may delay
        // a frame, never add or lose a release).
        assert!(
            (20..=40).contains(&stats.released()),
            "{} releases",
            stats.released()
        );
        let played = player.load.units();
        assert_eq!(played + stats.skipped, stats.released());
        assert_eq!(player.queued + player.refused, played);
        assert_eq!(client.submitted, player.queued);
        assert_eq!(client.dropped, player.refused);
        assert_eq!(client.composited, client.submitted, "drained at stop");
        assert_eq!(client.samples.len() as u64, client.composited);
        assert!(client.late <= client.composited);
        assert!(stats.late <= stats.released());
        assert_eq!(stats.deadline_us, stats.period_us);
        assert!(stats.response_us.iter().all(|r| *r >= 0.0));
    }
    assert_eq!(
        gui.threads[0].frames,
        gui.composited(),
        "one thread served every frame"
    );
    assert_no_rt_allocations();
    std::fs::remove_dir_all(&dir).unwrap();
}
