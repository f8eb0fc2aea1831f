//! An application that cannot start (its socket taken) says which socket,
//! and leaves no thread behind. Its own test binary: it counts the
//! process's threads, which a concurrent test would change.

#[test]
fn a_taken_socket_is_refused_by_name_and_nothing_keeps_running() {
    use tessera_music::app::{App, AppConfig, Roles};
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let pid = std::process::id() as tessera_sys::proc::Pid;
    let threads = || tessera_sys::proc::threads_of(pid).map(|t| t.len()).ok();
    let before = threads();
    let err = App::start(AppConfig {
        bind: addr,
        service: None,
        osc: None,
        synth: tessera_synth::SynthConfig {
            oscillators_per_object: 8,
            ..Default::default()
        },
        warmup_packages: 0,
        expected_packages: 10,
        workers: 0,
        roles: Roles::default(),
        report: None,
        package_log: None,
        timings: Default::default(),
    })
    .err()
    .expect("the socket is taken")
    .to_string();
    assert!(err.contains(&addr.to_string()), "{err}");
    // The console and the engine it had started wind down on their own.
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while threads() != before && std::time::Instant::now() < give_up {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(threads(), before, "no thread left behind");
}
