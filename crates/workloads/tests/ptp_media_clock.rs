//! The media clock's detection against the real linuxptp: two hosts on a
//! veth, ptp4l in each with software timestamping over layer 2, each with
//! its own management socket; the grandmaster has the lower priority1.
//! Detection reports the grandmaster as "this host is the grandmaster",
//! and the other host, once its port is SLAVE, as following that
//! grandmaster; on a socket where nobody listens it reports the system
//! clock, naming the path.
//!
//! Both ptp4l run with `free_running 1` — it never adjusts a clock (ptp4l
//! then opens none: linuxptp's clock.c sets the clock to CLOCK_INVALID) —
//! because the two namespaces share this machine's one CLOCK_REALTIME: a
//! slave would slew it, and even a ptp4l that ends up grandmaster writes
//! its frequency and leap status when it starts. A free-running slave
//! stays UNCALIBRATED (its servo never locks); the test sees that, then
//! tells it through `SET SYNCHRONIZATION_UNCERTAIN_NP 0` that its clock is
//! synchronised by other means — here the truth: it is the grandmaster's
//! clock — upon which linuxptp takes the port to SLAVE. phc2sys never runs.
//!
//! Root only (network namespaces): skipped otherwise, a failure under
//! CI=true. Its own test binary: it starts processes.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tessera_services::aes67::clock::{ClockSource, MediaClock};
use tessera_workloads::lan::{End, Lan};

const PTP4L: &str = "/usr/sbin/ptp4l";
const PMC: &str = "/usr/sbin/pmc";
const DEADLINE: Duration = Duration::from_secs(30);

/// Whether this test may run: prints why not, and fails under CI=true.
fn may_run(test: &str) -> bool {
    let why = if !tessera_sys::caps::is_root() {
        "needs root (network namespaces)"
    } else if !Path::new(PTP4L).exists() || !Path::new(PMC).exists() {
        "needs linuxptp (apt install linuxptp)"
    } else {
        return true;
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} skipped: {why}, and CI=true requires it to run");
    }
    eprintln!("skipped: {why}");
    false
}

/// The ptp4l processes this test started, killed by their pids when
/// dropped (also when the test fails), and their files.
struct Ptp4ls {
    dir: PathBuf,
    children: Vec<Child>,
}

impl Ptp4ls {
    fn new() -> Ptp4ls {
        let dir = std::env::temp_dir().join(format!("tessera-ptp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test's directory");
        Ptp4ls {
            dir,
            children: Vec::new(),
        }
    }

    /// Starts ptp4l as `name` on `interface` in `command` (a ptp4l command
    /// inside a host): its management socket is returned.
    fn start(
        &mut self,
        mut command: Command,
        name: &str,
        interface: &str,
        priority1: u8,
    ) -> PathBuf {
        let uds = self.dir.join(format!("{name}.sock"));
        let config = self.dir.join(format!("{name}.cfg"));
        // Announces every 0.5 s and syncs 8 times a second (AES67's media
        // profile's rate) so that the roles settle within seconds.
        let text = format!(
            "[global]\npriority1 {priority1}\nuds_address {}\ntime_stamping software\n\
             network_transport L2\nfree_running 1\nlogAnnounceInterval -1\nlogSyncInterval -3\n",
            uds.display()
        );
        std::fs::write(&config, text).expect("write ptp4l's configuration");
        let log = File::create(self.dir.join(format!("{name}.log"))).expect("ptp4l's log");
        let child = command
            .arg("-f")
            .arg(&config)
            .args(["-i", interface, "-S", "-m"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("ptp4l's log"))
            .stderr(log)
            .spawn()
            .expect("start ptp4l");
        self.children.push(child);
        uds
    }

    fn logs(&self) -> String {
        ["gm", "follower"]
            .iter()
            .map(|name| {
                let log = std::fs::read_to_string(self.dir.join(format!("{name}.log")));
                format!("--- {name}'s ptp4l:\n{}", log.unwrap_or_default())
            })
            .collect()
    }
}

impl Drop for Ptp4ls {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// pmc's raw answers from `uds`, for the record and for failures.
fn pmc(uds: &Path, command: &[&str]) -> String {
    let output = Command::new(PMC)
        .args(["-u", "-b", "0", "-s"])
        .arg(uds)
        .args(["-d", "0"])
        .args(command)
        .output()
        .expect("run pmc");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

const QUERIES: [&str; 4] = [
    "GET TIME_STATUS_NP",
    "GET PORT_PROPERTIES_NP",
    "GET TIME_PROPERTIES_DATA_SET",
    "GET DEFAULT_DATA_SET",
];

/// Detects on `uds` until `done` holds of the source, for at most what is
/// left of [`DEADLINE`] from `start`.
fn detect_until(
    ptp: &Ptp4ls,
    uds: &Path,
    start: Instant,
    what: &str,
    done: impl Fn(&ClockSource) -> bool,
) -> MediaClock {
    loop {
        let clock = MediaClock::detect(uds, 0);
        if done(clock.source()) {
            eprintln!("{what} after {:?}: {}", start.elapsed(), clock.label());
            eprintln!("pmc answers then:\n{}", pmc(uds, &QUERIES));
            return clock;
        }
        if start.elapsed() > DEADLINE {
            panic!(
                "no {what} within {DEADLINE:?}: last {}\npmc answers:\n{}\n{}",
                clock.label(),
                pmc(uds, &QUERIES),
                ptp.logs()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn grandmaster_of(source: &ClockSource) -> Option<&str> {
    match source {
        ClockSource::Ptp { grandmaster, .. } => Some(grandmaster),
        ClockSource::System { .. } => None,
    }
}

#[test]
fn detection_follows_a_real_ptp4l_grandmaster_and_its_free_running_slave() {
    if !may_run("ptp media clock") {
        return;
    }
    let mut lan = Lan::new();
    let gm_host = lan.add_host("ptp-gm").unwrap();
    let follower_host = lan.add_host("ptp-follower").unwrap();
    let link = lan
        .link(End::Host(gm_host), End::Host(follower_host), None)
        .unwrap();
    let mut ptp = Ptp4ls::new();
    let start = Instant::now();
    let gm_command = lan.command(End::Host(gm_host), PTP4L).unwrap();
    let gm_uds = ptp.start(gm_command, "gm", lan.device(link, End::Host(gm_host)), 100);
    let follower_command = lan.command(End::Host(follower_host), PTP4L).unwrap();
    let interface = lan.device(link, End::Host(follower_host)).to_string();
    let follower_uds = ptp.start(follower_command, "follower", &interface, 200);
    let pids: Vec<u32> = ptp.children.iter().map(Child::id).collect();

    let gm = detect_until(&ptp, &gm_uds, start, "grandmaster", |s| {
        matches!(s, ClockSource::Ptp { system_clock_follows, .. }
            if system_clock_follows == "this host is the grandmaster")
    });
    let identity = grandmaster_of(gm.source()).unwrap().to_string();
    assert_eq!(identity.len(), 23, "{identity}");
    assert_eq!(
        gm.ptp_reference(),
        Some(("IEEE1588-2008".to_string(), identity.clone(), 0))
    );

    // free_running: the follower hears the grandmaster but never locks.
    let waiting = detect_until(
        &ptp,
        &follower_uds,
        start,
        "an UNCALIBRATED follower",
        |s| matches!(s, ClockSource::System { why } if why.contains("UNCALIBRATED")),
    );
    assert!(waiting.label().contains(&identity), "{}", waiting.label());
    let set = pmc(&follower_uds, &["SET SYNCHRONIZATION_UNCERTAIN_NP 0"]);
    assert!(set.contains("uncertain 0"), "{set}");

    // Measured once the path delay is: one clock, so within microseconds.
    let follower = detect_until(&ptp, &follower_uds, start, "a measuring SLAVE", |s| {
        matches!(s, ClockSource::Ptp { port_state, offset_ns, .. }
            if port_state == "SLAVE" && *offset_ns != 0)
    });
    assert_eq!(grandmaster_of(follower.source()), Some(identity.as_str()));
    let ClockSource::Ptp {
        utc_offset_s,
        system_clock_follows,
        offset_ns,
        ..
    } = follower.source()
    else {
        unreachable!()
    };
    assert!(offset_ns.abs() < 1_000_000, "{offset_ns} ns");
    assert_eq!(system_clock_follows, "ptp4l -S (software timestamping)");
    // A ptp4l grandmaster on the system clock announces an arbitrary
    // timescale (its UTC clock as it is): the media time is the wall clock.
    assert_eq!(*utc_offset_s, 0);
    let now = tessera_sys::clock::monotonic_ns();
    let wall = tessera_sys::clock::realtime_ns();
    let media = follower.media_ns_at(now);
    assert!(media.abs_diff(wall) < 50_000_000, "{media} against {wall}");

    drop(ptp);
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "ptp4l {pid} lives on"
        );
    }
}

#[test]
fn detection_where_no_ptp4l_listens_names_the_path() {
    let uds = std::env::temp_dir().join(format!("tessera-no-ptp4l-{}", std::process::id()));
    let clock = MediaClock::detect(&uds, 0);
    let ClockSource::System { why } = clock.source() else {
        panic!("{}", clock.label());
    };
    if Path::new(PMC).exists() {
        assert!(why.contains(&*uds.to_string_lossy()), "{why}");
    } else {
        assert!(why.contains("apt install linuxptp"), "{why}");
    }
    assert_eq!(clock.ptp_reference(), None);
    assert!(clock.label().starts_with("system clock, not PTP: "));
}
