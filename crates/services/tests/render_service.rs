//! The render service and its baseline end to end in one process (control
//! socket, front-end, rendering tasks, clients through the client library):
//! SLA negotiation from probes (an offer, too few probes, beyond capacity),
//! a client beyond its request rate throttled while the others are served,
//! the shared task serving earliest deadline first, a client that leaves
//! mid-action, snapshots with the expected pixels, the baseline serving the
//! same clients, and serving threads that never touch the heap. Its own
//! test binary: the allocation guard's counters are process-wide.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tessera_policy::sla::{KindRate, Terms};
use tessera_rtguard::{assert_no_rt_allocations, CountingAllocator};
use tessera_services::render::baseline::{BaselineConfig, BaselineServer};
use tessera_services::render::client::{self, Action, Display, DisplayError, Submitted};
use tessera_services::render::service::{RenderServer, Reservation, Reserve, ServerConfig};
use tessera_services::render::wire::{Done, Hello, ServerKind};
use tessera_services::render::Rect;
use tessera_sys::clock::monotonic_ns;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const PATIENCE: Duration = Duration::from_secs(10);
const FAR: u64 = 3_600_000_000_000;

/// Reservations in name only: the test runs unprivileged too.
struct InName;

impl Reserve for InName {
    fn reserve(&self, task: &str, runtime_ns: u64, period_ns: u64) -> Result<Reservation, String> {
        Ok(Reservation {
            join: None,
            note: format!("{task}: {runtime_ns}/{period_ns} (test, not enforced)"),
            release: None,
            misses: None,
        })
    }
}

fn socket_path(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tessera-render-{}-{test}.sock", std::process::id()))
}

fn start(test: &str, capacity_cores: f64) -> RenderServer {
    RenderServer::start(config(test, capacity_cores)).unwrap()
}

fn config(test: &str, capacity_cores: f64) -> ServerConfig {
    let mut config = ServerConfig::new(
        socket_path(test),
        capacity_cores,
        Arc::new(|_| Ok(())),
        Arc::new(InName),
    );
    config.screen_width = 64;
    config.screen_height = 48;
    config
}

fn hello(name: &str, window: Option<Rect>) -> Hello {
    Hello {
        name: name.into(),
        width: 8,
        height: 4,
        slots: 4,
        window,
    }
}

fn open(socket: &std::path::Path, hello: Hello) -> Display {
    Display::open(client::connect(socket).unwrap(), hello).unwrap()
}

fn action(deadline_ns: u64, probe: bool, spin_ns: u32) -> Action {
    Action {
        kind: 0,
        deadline_ns,
        probe,
        spin_ns,
        bands: 1,
    }
}

fn solid(rgb: [u8; 3]) -> Vec<u8> {
    rgb.repeat(8 * 4)
}

fn send(display: &mut Display, action: &Action, frame: &[u8]) -> u32 {
    match display.submit(action, frame).unwrap() {
        Submitted::Sent(id) => id,
        Submitted::NoSlot => panic!("no free slot"),
    }
}

fn done(display: &mut Display) -> Done {
    display
        .wait_done(PATIENCE)
        .unwrap()
        .expect("the action reached the screen")
}

fn terms(per_second: f64) -> Terms {
    Terms {
        rates: vec![KindRate {
            kind: 0,
            per_second,
        }],
        max_outstanding: 1,
    }
}

#[test]
fn probes_lead_to_an_offer_too_few_or_too_much_to_a_reasoned_refusal() {
    let mut config = config("sla", 0.5);
    // On a busy virtual machine one probe of 200 µs has measured 36 ms of
    // CPU time (CI, twice), and the default p99 of 25 probes is their
    // maximum: that one probe sized the offer past a core. The median keeps
    // this test about the negotiation, not about the host.
    config.rules.quantile = 0.5;
    let server = RenderServer::start(config).unwrap();
    let mut display = open(server.socket(), hello("player", None));
    let frame = solid([1, 2, 3]);
    for _ in 0..5 {
        send(&mut display, &action(FAR, true, 200_000), &frame);
        done(&mut display);
    }
    match display.terms(&terms(30.0)) {
        Err(DisplayError::Refused(reason)) => assert!(reason.contains("5 of 20"), "{reason}"),
        other => panic!("an offer from 5 probes: {other:?}"),
    }
    for _ in 0..20 {
        send(&mut display, &action(FAR, true, 200_000), &frame);
        done(&mut display);
    }
    let offer = display
        .terms(&terms(30.0))
        .expect("an offer from 25 probes");
    let kind = offer.service_time_ns[0];
    assert!(
        kind.cost_ns >= 200_000,
        "the cost covers the spin: {offer:?}"
    );
    assert!(kind.service_time_ns >= kind.cost_ns);
    assert_eq!(offer.period_ns, 1_000_000_000 / 30);
    match display.terms(&terms(3000.0)) {
        Err(DisplayError::Refused(reason)) => assert!(reason.contains("left"), "{reason}"),
        other => panic!("beyond the capacity: {other:?}"),
    }
    // The refusal did not spoil the offer's terms: ask again and accept.
    display.terms(&terms(30.0)).unwrap();
    let reservation = display.accept().unwrap();
    assert!(reservation.contains("client-"), "{reservation}");
    send(&mut display, &action(FAR, false, 0), &frame);
    assert!(done(&mut display).shown_ns > 0);
    let status = display.status().unwrap();
    assert!(status.committed_cores > 0.0, "{status:?}");
    assert!(status.clients[0].share.starts_with("SLA"), "{status:?}");
    drop(display);
    server.stop();
}

/// Probes and agrees terms of `per_second` actions of 1 ms.
fn agree(display: &mut Display, per_second: f64) {
    for _ in 0..20 {
        send(display, &action(FAR, true, 1_000_000), &solid([0; 3]));
        done(display);
    }
    display.terms(&terms(per_second)).unwrap();
    display.accept().unwrap();
}

#[test]
fn a_client_beyond_its_rate_is_throttled_and_the_others_are_served() {
    let server = start("throttle", 1.5);
    let mut flooder = open(server.socket(), hello("flooder", None));
    let mut player = open(server.socket(), hello("player", None));
    agree(&mut flooder, 20.0);
    agree(&mut player, 20.0);
    let frame = solid([5, 5, 5]);
    let start = monotonic_ns();
    // The flooder keeps every slot full; its gate lets 20 actions/s by.
    let mut flooded = 0;
    let mut played = Vec::new();
    while monotonic_ns() - start < 500_000_000 {
        while let Submitted::Sent(_) = flooder
            .submit(&action(FAR, false, 1_000_000), &frame)
            .unwrap()
        {}
        while flooder.try_done().unwrap().is_some() {
            flooded += 1;
        }
        if player.in_flight() == 0 {
            send(&mut player, &action(FAR, false, 1_000_000), &frame);
        }
        if let Some(done) = player.try_done().unwrap() {
            played.push(done);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let elapsed_s = (monotonic_ns() - start) as f64 / 1e9;
    let status = player.status().unwrap();
    let flooder_status = status.clients.iter().find(|c| c.name == "flooder").unwrap();
    assert!(flooder_status.throttled > 0, "{status:?}");
    // burst (2) + rate × t, and one more for the rounding of the window.
    assert!(
        f64::from(flooded) <= 3.0 + 20.0 * elapsed_s,
        "{flooded} actions in {elapsed_s} s"
    );
    assert!(played.len() >= 5, "the player was served: {played:?}");
    drop((flooder, player));
    server.stop();
}

#[test]
fn the_shared_task_serves_the_earliest_deadline_first() {
    let server = start("edf", 1.0);
    let mut busy = open(server.socket(), hello("busy", None));
    let mut clients: Vec<Display> = ["late", "middle", "urgent"]
        .iter()
        .map(|n| open(server.socket(), hello(n, None)))
        .collect();
    let frame = solid([9, 9, 9]);
    // Keeps the best-effort task busy while the others queue.
    send(&mut busy, &action(FAR, false, 300_000_000), &frame);
    std::thread::sleep(Duration::from_millis(50));
    let now = monotonic_ns();
    for (i, display) in clients.iter_mut().enumerate() {
        let deadline = now + FAR - i as u64 * 1_000_000_000;
        send(display, &action(deadline, false, 0), &frame);
    }
    done(&mut busy);
    let shown: Vec<u64> = clients.iter_mut().map(|d| done(d).shown_ns).collect();
    assert!(
        shown[2] <= shown[1] && shown[1] <= shown[0],
        "urgent, middle, late: {shown:?}"
    );
    drop((busy, clients));
    server.stop();
}

#[test]
fn a_client_leaving_mid_action_leaves_the_others_served() {
    let server = start("leave", 1.0);
    let mut leaver = open(server.socket(), hello("leaver", None));
    let mut stayer = open(server.socket(), hello("stayer", None));
    let frame = solid([1, 1, 1]);
    let half = Action {
        bands: 2,
        ..action(FAR, false, 0)
    };
    send(&mut leaver, &half, &frame);
    done(&mut leaver);
    // Half an action: its first band only, then the client is gone.
    send(&mut leaver, &Action { bands: 4, ..half }, &frame);
    drop(leaver);
    for _ in 0..10 {
        send(&mut stayer, &action(FAR, false, 0), &frame);
        done(&mut stayer);
    }
    let status = client::status(client::connect(server.socket()).unwrap()).unwrap();
    assert_eq!(status.clients.len(), 1, "{status:?}");
    assert_eq!(status.clients[0].actions, 10);
    server.stop();
}

#[test]
fn a_snapshot_shows_the_frames_where_their_windows_are() {
    let server = start("snapshot", 1.0);
    let mut display = open(server.socket(), hello("red", Some(Rect::new(10, 20, 8, 4))));
    send(&mut display, &action(FAR, false, 0), &solid([255, 0, 0]));
    done(&mut display);
    let png = client::snapshot(client::connect(server.socket()).unwrap()).unwrap();
    let decoder = png::Decoder::new(&png[..]);
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), (64, 48));
    let at = |x: usize, y: usize| &pixels[(y * 64 + x) * 3..(y * 64 + x) * 3 + 3];
    assert_eq!(at(10, 20), &[255, 0, 0]);
    assert_eq!(at(17, 23), &[255, 0, 0]);
    assert_eq!(at(9, 20), &[0, 0, 0]);
    assert_eq!(at(18, 23), &[0, 0, 0]);
    drop(display);
    server.stop();
}

#[test]
fn the_baseline_serves_the_same_clients_in_arrival_order_without_agreements() {
    let baseline = BaselineServer::start(BaselineConfig {
        socket: socket_path("baseline"),
        screen_width: 64,
        screen_height: 48,
        scale: 1.0,
        opacity: 256,
        policy: Arc::new(|_| Ok(())),
        setup: None,
    })
    .unwrap();
    let mut display = open(baseline.socket(), hello("player", None));
    assert_eq!(display.server(), ServerKind::Baseline);
    let frame = solid([0, 0, 255]);
    for i in 0..5 {
        let id = send(
            &mut display,
            &Action {
                bands: 2,
                ..action(FAR, false, 0)
            },
            &frame,
        );
        assert_eq!(done(&mut display).action, id, "action {i}");
    }
    assert!(matches!(
        display.terms(&terms(30.0)),
        Err(DisplayError::Refused(_))
    ));
    let status = client::status(client::connect(baseline.socket()).unwrap()).unwrap();
    assert_eq!(status.clients[0].actions, 5);
    drop(display);
    baseline.stop();
}

#[test]
fn garbage_and_bad_hellos_are_refused_with_a_reason() {
    use std::io::Write;
    let server = start("garbage", 1.0);
    let mut stream = client::connect(server.socket()).unwrap();
    stream.write_all(&5u32.to_le_bytes()).unwrap();
    stream.write_all(b"hello").unwrap();
    let reply: tessera_services::render::wire::Welcome =
        tessera_services::control::receive(&stream).unwrap();
    assert!(format!("{reply:?}").contains("fix"), "{reply:?}");
    let bad = Display::open(
        client::connect(server.socket()).unwrap(),
        Hello {
            width: 0,
            ..hello("bad", None)
        },
    );
    assert!(matches!(bad, Err(DisplayError::Refused(_))));
    // The service still serves.
    let mut display = open(server.socket(), hello("good", None));
    send(&mut display, &action(FAR, false, 0), &solid([1, 1, 1]));
    done(&mut display);
    drop(display);
    server.stop();
}

#[test]
fn serving_threads_never_touch_the_heap() {
    let server = start("alloc", 1.5);
    let mut display = open(server.socket(), hello("player", None));
    agree(&mut display, 50.0);
    let mut other = open(server.socket(), hello("other", None));
    for _ in 0..50 {
        send(
            &mut display,
            &action(FAR, false, 100_000),
            &solid([2, 2, 2]),
        );
        send(&mut other, &action(FAR, false, 100_000), &solid([3, 3, 3]));
        done(&mut display);
        done(&mut other);
    }
    drop((display, other));
    server.stop();
    assert_no_rt_allocations();
}
