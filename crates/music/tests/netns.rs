//! The seed's two machines: the emulator in one network namespace, the
//! application in another, joined by a veth pair (10.213.0.1/30 and .2,
//! addressed inside the namespaces only). The test creates both namespaces
//! and removes them when it ends, failed or not. Root only: skipped (with
//! "SKIPPED") otherwise, a failure under CI=true.
//!
//! The application side runs in an event-triggered cell the test creates
//! (the machine is reset when the test ends). Each side runs as a child
//! process of this test binary, started with
//! `ip netns exec` on the `child_role` test, which does nothing unless
//! `TESSERA_MUSIC_ROLE` names a side.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use std::sync::Arc;
use tessera_broker::paths::Paths;
use tessera_music::app::{App, AppConfig, Roles, ThreadHook};
use tessera_music::emulator::{self, held_pads, EmulatorConfig};
use tessera_music::protocol;
use tessera_policy::CellRequest;
use tessera_runtime::CellJoin;
use tessera_synth::SynthConfig;

const ROLE: &str = "TESSERA_MUSIC_ROLE";
/// The cell the application side joins, and its broker's state directory.
const CELL: &str = "TESSERA_MUSIC_CELL";
const BROKER_DIR: &str = "TESSERA_MUSIC_BROKER_DIR";
/// The synth cell's reservation: ample for the light synthesizer of a
/// test build. Without one, a best-effort thread on two cores shared with a
/// spinning sender can stall for longer than the link holds.
const BUDGET_NS: u64 = 250_000;
/// The network cell's reservation: 16 receives and one send per package.
const NETWORK_BUDGET_NS: u64 = 200_000;
const APP_ADDR: &str = "10.213.0.1:47213";
const SECONDS: f64 = 1.0;
/// Longest any child may take before the test kills it.
const PATIENCE: Duration = Duration::from_secs(20);
/// Once packages flowed, this long without one ends the application side.
const QUIET: Duration = Duration::from_millis(500);

/// Two namespaces joined by a veth pair; deleted (with the pair) on drop.
struct Namespaces {
    names: Vec<String>,
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("run ip");
    assert!(status.success(), "ip {} failed", args.join(" "));
}

impl Namespaces {
    fn create() -> Namespaces {
        let pid = std::process::id();
        let mut namespaces = Namespaces { names: Vec::new() };
        let sides = [("a", "10.213.0.1/30"), ("b", "10.213.0.2/30")];
        for (side, _) in sides {
            let name = format!("tmusic-{side}-{pid}");
            ip(&["netns", "add", &name]);
            namespaces.names.push(name);
        }
        let link = |side: &str| format!("tmv{side}{pid}");
        let (a, b) = (&namespaces.names[0], &namespaces.names[1]);
        ip(&[
            "link",
            "add",
            &link("a"),
            "netns",
            a,
            "type",
            "veth",
            "peer",
            "name",
            &link("b"),
            "netns",
            b,
        ]);
        for ((side, address), ns) in sides.iter().zip(&namespaces.names) {
            ip(&["-n", ns, "addr", "add", address, "dev", &link(side)]);
            ip(&["-n", ns, "link", "set", &link(side), "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        namespaces
    }

    /// This test binary's `child_role` test as `role`, inside namespace `ns`,
    /// with `env` set.
    fn spawn(&self, ns: usize, role: &str, env: &[(&str, &str)]) -> Child {
        let exe = std::env::current_exe().expect("the test binary");
        Command::new("ip")
            .args(["netns", "exec", &self.names[ns]])
            .arg(exe)
            .args(["child_role", "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a child in a namespace")
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// Lines a child prints, as they come.
fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// The text from `marker` on, of the first line holding it, within the
/// patience (the harness prints its own words before a test's first line).
fn line_with(rx: &mpsc::Receiver<String>, marker: &str) -> String {
    let give_up = Instant::now() + PATIENCE;
    loop {
        let left = give_up.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no {marker} line"));
        if let Some(at) = line.find(marker) {
            return line[at..].to_string();
        }
    }
}

/// The value of `key=` in a line of `key=value` words.
fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

fn light_synth() -> SynthConfig {
    SynthConfig {
        oscillators_per_object: 8,
        ..SynthConfig::default()
    }
}

fn packages() -> u64 {
    EmulatorConfig::new(
        APP_ADDR.parse().unwrap(),
        Duration::from_secs_f64(SECONDS),
        held_pads(0..2, 0.5, 0.5, 0.8),
    )
    .packages()
}

/// The application side: answers the emulator's packages until it has
/// answered them all, they stopped coming, or the patience ran out.
fn app_side() {
    let cell = std::env::var(CELL).expect("the cell's name");
    let paths = Paths::at(std::path::PathBuf::from(
        std::env::var_os(BROKER_DIR).expect("the broker's directory"),
    ));
    let hook = |name: String| {
        let join = CellJoin::embedded(name, paths.clone());
        Some(Arc::new(join.hook()) as ThreadHook)
    };
    let app = App::start(AppConfig {
        bind: APP_ADDR.parse().unwrap(),
        osc: None,
        synth: light_synth(),
        warmup_packages: 0,
        expected_packages: packages() as usize,
        workers: 0,
        roles: Roles {
            synth: hook(cell.clone()),
            network: hook(format!("{cell}-net")),
            console: None,
        },
        package_log: None,
    })
    .expect("start the application");
    println!("READY");
    let give_up = Instant::now() + PATIENCE;
    let mut seen = (0, Instant::now());
    while app.cycles() < packages() && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(10));
        match app.cycles() {
            n if n != seen.0 => seen = (n, Instant::now()),
            n if n > 0 && seen.1.elapsed() > QUIET => break,
            _ => {}
        }
    }
    let report = app.stop().expect("stop the application");
    println!(
        "APP cycles={} responses={}",
        report.cycles,
        report.response.count()
    );
}

fn emulator_side() {
    let to: SocketAddr = APP_ADDR.parse().unwrap();
    let config = EmulatorConfig::new(
        to,
        Duration::from_secs_f64(SECONDS),
        held_pads(0..2, 0.5, 0.5, 0.8),
    );
    let report = emulator::run(&config).expect("run the emulator");
    println!(
        "EMU sent={} answered={} unexpected={} responses={} send_errors={}",
        report.packages_sent,
        report.answered,
        report.unexpected,
        report.response.count(),
        report.send_errors
    );
}

#[test]
fn child_role() {
    match std::env::var(ROLE).as_deref() {
        Ok("app") => app_side(),
        Ok("emulator") => emulator_side(),
        _ => {}
    }
}

/// Waits for a child, killing it after the patience.
fn finish(mut child: Child) {
    let give_up = Instant::now() + PATIENCE;
    while child.try_wait().expect("wait for a child").is_none() {
        if Instant::now() >= give_up {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a child did not finish in {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn emulator_and_application_across_two_namespaces() {
    let Some(machine) = tessera_testkit::privileged("music across two network namespaces") else {
        return;
    };
    let cell = format!("music-netns-{}", std::process::id());
    let request = CellRequest {
        reclaim: true,
        ..CellRequest::event_triggered(&cell, BUDGET_NS, protocol::package_period_ns())
    };
    machine.session().create_cell(request, false).unwrap();
    // The network service gets a cell of its own, as in the seed's Fig. 5.
    let network = CellRequest {
        reclaim: true,
        ..CellRequest::event_triggered(
            format!("{cell}-net"),
            NETWORK_BUDGET_NS,
            protocol::package_period_ns(),
        )
    };
    machine.session().create_cell(network, false).unwrap();
    let namespaces = Namespaces::create();
    let dir = machine.dir();
    let env = [(CELL, cell.as_str()), (BROKER_DIR, dir.to_str().unwrap())];
    let mut app = namespaces.spawn(0, "app", &env);
    let app_lines = lines(&mut app);
    line_with(&app_lines, "READY");
    let mut emulator = namespaces.spawn(1, "emulator", &[]);
    let emulator_lines = lines(&mut emulator);
    let emu = line_with(&emulator_lines, "EMU");
    let app_report = line_with(&app_lines, "APP");
    finish(emulator);
    finish(app);
    let sent = field(&emu, "sent");
    assert_eq!(sent, packages());
    assert_eq!(field(&emu, "answered"), sent, "{emu} / {app_report}");
    assert_eq!(field(&emu, "unexpected"), 0, "{emu}");
    assert_eq!(field(&emu, "responses"), sent, "{emu}");
    assert_eq!(field(&app_report, "cycles"), sent, "{app_report}");
    assert_eq!(field(&app_report, "responses"), sent, "{app_report}");
}
