//! `tessera daemon` answering RTKit's D-Bus interface, as root, on a
//! private system bus (a `dbus-daemon` of the test's own, named to every
//! process through DBUS_SYSTEM_BUS_ADDRESS), against real clients: Debian's
//! PipeWire started as a test user with no real-time rights, pw-jack
//! clients, python's libdbus binding, busctl. Every test removes the bus,
//! the user and the processes it made, and resets the machine.

mod common;

use common::session::TestUser;
use common::{privileged, wait_until, Machine};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_rtkit::private_bus::PrivateBus;
use tessera_sys::sched::{self, Policy};
use tessera_testkit::Rng;

const USER: &str = "tessera-rtkit-test";
const NAME: &str = "org.freedesktop.RealtimeKit1";
const PATH: &str = "/org/freedesktop/RealtimeKit1";

/// The machine, a private bus, a test user, and a daemon answering RTKit.
/// Dropped in this order: the processes, the user, the bus, and last the
/// machine (reset, and handed to the next test).
struct Desktop {
    user: TestUser,
    bus: PrivateBus,
    m: Machine,
    daemon: Option<usize>,
}

impl Drop for Desktop {
    fn drop(&mut self) {
        for c in &mut self.m.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Desktop {
    fn new(test: &str, config: &str) -> Option<Desktop> {
        let m = privileged(test)?;
        // The user's processes reach the test's directory.
        std::fs::set_permissions(&m.dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let bus = PrivateBus::start(&m.dir).expect("a private system bus");
        std::fs::write(m.dir.join("daemon.toml"), config).unwrap();
        let mut d = Desktop {
            user: common::session::test_user(USER),
            bus,
            m,
            daemon: None,
        };
        d.start_daemon();
        Some(d)
    }

    /// The test's daemon, on the private bus, logging to daemon.log.
    fn daemon_command(&self) -> Command {
        let log = std::fs::File::create(self.m.dir.join("daemon.log")).unwrap();
        let mut cmd = self.m.tessera();
        cmd.args(["daemon", "--run-dir"])
            .arg(&self.m.dir)
            .arg("--config")
            .arg(self.m.dir.join("daemon.toml"))
            .env("DBUS_SYSTEM_BUS_ADDRESS", &self.bus.address)
            .stderr(log);
        cmd
    }

    fn start_daemon(&mut self) {
        let mut cmd = self.daemon_command();
        let index = self.m.children.len();
        self.m.children.push(cmd.spawn().expect("start the daemon"));
        self.daemon = Some(index);
        wait_until("the daemon serves RTKit's name", || {
            self.daemon_log().contains("rtkit: serving")
        });
    }

    fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.m.dir.join("daemon.log")).unwrap_or_default()
    }

    fn kill_daemon(&mut self) {
        let index = self.daemon.take().expect("a daemon runs");
        self.m.kill(index);
    }

    /// SIGKILL to the daemon, and a new one with `config`.
    fn restart_with(&mut self, config: &str) {
        std::fs::write(self.m.dir.join("daemon.toml"), config).unwrap();
        self.kill_daemon();
        self.start_daemon();
    }

    /// A command run as the test user, on the private bus, with a runtime
    /// directory of its own (as a login session has).
    fn as_user(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let runtime = self.user.runtime_dir(&self.m.dir.join("xdg")).unwrap();
        let mut cmd = self.user.command(&runtime, program);
        cmd.env("DBUS_SYSTEM_BUS_ADDRESS", &self.bus.address);
        cmd
    }

    /// A process the test user runs that waits, with RLIMIT_RTTIME set as
    /// RTKit requires (or not).
    fn user_sleeper(&mut self, rttime: bool) -> i32 {
        let mut cmd = match rttime {
            true => {
                let mut c = self.as_user("prlimit");
                c.args(["--rttime=200000:200000", "sleep", "120"]);
                c
            }
            false => {
                let mut c = self.as_user("sleep");
                c.arg("120");
                c
            }
        };
        let pid = self.m.spawn(&mut cmd) as i32;
        if rttime {
            // prlimit sets the limit in the child before it runs sleep: a
            // request that came first would see none.
            wait_until("the sleeper has its RLIMIT_RTTIME", || {
                matches!(tessera_sys::proc::rttime_hard_limit_us(pid), Ok(Some(_)))
            });
        }
        pid
    }

    /// `busctl` against the private bus, as `uid` (None: root).
    fn busctl(&self, uid: Option<u32>, args: &[&str]) -> (bool, String) {
        let mut cmd = match uid {
            Some(_) => self.as_user("busctl"),
            None => Command::new("busctl"),
        };
        cmd.arg(format!("--address={}", self.bus.address))
            .args(args);
        let out = cmd.output().expect("run busctl (systemd)");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// MakeThreadRealtimeWithPID(pid, tid, priority) through busctl.
    fn realtime(&self, uid: Option<u32>, pid: i32, tid: i32, priority: u32) -> (bool, String) {
        let (pid, tid, priority) = (pid.to_string(), tid.to_string(), priority.to_string());
        self.busctl(
            uid,
            &[
                "call",
                NAME,
                PATH,
                NAME,
                "MakeThreadRealtimeWithPID",
                "ttu",
                &pid,
                &tid,
                &priority,
            ],
        )
    }
}

impl Desktop {
    /// The test user's PipeWire, its data thread reserved through RTKit:
    /// its index among the children, its pid and that thread.
    fn start_pipewire(&mut self) -> (usize, i32, i32) {
        let mut pipewire = self.as_user("pipewire");
        pipewire.stderr(std::fs::File::create(self.m.dir.join("pipewire.log")).unwrap());
        let index = self.m.children.len();
        let pid = self.m.spawn(&mut pipewire) as i32;
        let tid = self.reserved_thread("PipeWire's data thread", pid);
        (index, pid, tid)
    }

    /// A pw-jack client of the test user (tessera-jack-peer, one load of
    /// `load` of each cycle), its process thread reserved through RTKit:
    /// its index among the children and its pid.
    fn start_pw_jack_client(&mut self, load: f64) -> (usize, i32) {
        let mut client = self.as_user("pw-jack");
        client
            .arg(jack_peer())
            .args(["--topology", "chain", "--loads", "1", "--load"])
            .arg(load.to_string())
            .args(["--seconds", "60"])
            .arg("--out")
            .arg(self.m.dir.join("xdg/peer.json"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.m.dir.join("client.log")).unwrap());
        let index = self.m.children.len();
        let pid = self.m.spawn(&mut client) as i32;
        // Its clients open and active: a thread reserved while the peer
        // set up may have exited since (pw-jack's setup asks for some).
        self.wait_for("the client records", Duration::from_secs(15), |d| {
            let log = std::fs::read_to_string(d.m.dir.join("client.log"));
            log.is_ok_and(|log| log.contains(" s recording"))
        });
        self.reserved_thread("the client's process thread", pid);
        (index, pid)
    }

    /// The thread of `pid` its cell reserves, once it has one.
    fn reserved_thread(&self, what: &str, pid: i32) -> i32 {
        let reserved = format!("{what} is reserved");
        self.wait_for(&reserved, Duration::from_secs(15), |d| {
            !d.m.cells_of(pid).is_empty()
        });
        let cell = &self.m.cells_of(pid)[0];
        cell["members"][0]["tid"].as_i64().expect("a member's tid") as i32
    }

    /// SIGKILL to child `index` while a thread of the pw-jack client
    /// `client` runs (state R): the client's work is inside PipeWire's
    /// cycle, so the graph is mid-cycle. Looks for up to 2 s; whether it
    /// was caught so.
    fn kill_mid_cycle(&mut self, index: usize, client: i32) -> bool {
        let stats: Vec<String> = tessera_sys::proc::threads_of(client)
            .unwrap_or_default()
            .iter()
            .map(|t| format!("/proc/{client}/task/{t}/stat"))
            .collect();
        let running = || {
            stats.iter().any(|stat| {
                std::fs::read_to_string(stat)
                    .ok()
                    .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('R')))
                    .unwrap_or(false)
            })
        };
        let since = Instant::now();
        while !running() && since.elapsed() < Duration::from_secs(2) {
            std::hint::spin_loop();
        }
        let caught = running();
        self.m.kill(index);
        caught
    }

    /// The cells that reserve a thread of `pid` or are bound to it.
    fn cells_held_for(&self, pid: i32) -> Vec<serde_json::Value> {
        let reserves = |c: &serde_json::Value| {
            let members = c["members"].as_array();
            members.is_some_and(|m| m.iter().any(|m| m["pid"] == pid))
        };
        let cells = self.m.cells().into_iter();
        cells
            .filter(|c| c["bound_to_pid"] == pid || reserves(c))
            .collect()
    }

    /// The logs of the daemon and the peers, for a failure's message.
    fn logs(&self) -> String {
        ["daemon.log", "pipewire.log", "client.log", "python.log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.m.dir.join(f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {f}\n{}\n", tail.join("\n"))
            })
            .collect()
    }

    fn wait_for(&self, what: &str, within: Duration, mut done: impl FnMut(&Desktop) -> bool) {
        let start = Instant::now();
        while !done(self) {
            assert!(
                start.elapsed() < within,
                "timed out waiting until {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn is_deadline(tid: i32) -> bool {
    matches!(sched::get_policy(tid), Ok(Policy::Deadline(_)))
}

/// PipeWire's threads, by name.
fn threads_named(pid: i32) -> Vec<(i32, String)> {
    tessera_sys::proc::threads_of(pid)
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t, tessera_sys::proc::thread_name(pid, t)))
        .collect()
}

fn jack_peer() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_tessera")).with_file_name("tessera-jack-peer")
}

#[test]
fn a_users_pipewire_and_its_pw_jack_client_get_reservations_through_rtkit() {
    let Some(mut d) = Desktop::new("rtkit_pipewire", "rtkit = true\n") else {
        return;
    };
    let (ok, props) = d.busctl(
        Some(d.user.uid),
        &[
            "get-property",
            NAME,
            PATH,
            NAME,
            "RTTimeUSecMax",
            "MaxRealtimePriority",
            "MinNiceLevel",
        ],
    );
    assert!(ok, "{props}");
    assert_eq!(
        props.split_whitespace().collect::<Vec<_>>(),
        ["x", "200000", "i", "20", "i", "-15"]
    );

    // PipeWire as an ordinary user: no rlimits, no portal; module-rt asks
    // RTKit on the system bus, which is tessera.
    let (_, pw, tid) = d.start_pipewire();
    let cell = &d.m.cells_of(pw)[0];
    assert_eq!(
        cell["owner_uid"], d.user.uid,
        "the user's quota holds it: {cell}"
    );
    assert_eq!(cell["bound_to_pid"], pw, "its exit releases it");
    assert!(is_deadline(tid), "thread {tid} of {:?}", threads_named(pw));
    let Ok(Policy::Deadline(params)) = sched::get_policy(tid) else {
        unreachable!()
    };
    assert!(params.flags.contains(sched::DeadlineFlags::RESET_ON_FORK));

    // A pw-jack client of the user: its process thread is reserved too,
    // and released when the client is killed.
    let (client_index, client_pid) = d.start_pw_jack_client(0.05);
    d.m.kill(client_index);
    d.wait_for(
        "the client's reservation is released",
        Duration::from_secs(5),
        |d| d.m.cells_of(client_pid).is_empty(),
    );
    let log = d.daemon_log();
    assert!(
        log.contains(&format!("uid {} (pid {pw})", d.user.uid)),
        "{log}"
    );
}

#[test]
fn another_users_thread_is_refused_and_nothing_changes() {
    let Some(mut d) = Desktop::new("rtkit_other_user", "rtkit = true\n") else {
        return;
    };
    // root's process, asked for by the test user.
    let mut cmd = Command::new("prlimit");
    cmd.args(["--rttime=200000:200000", "sleep", "60"]);
    let roots = d.m.spawn(&mut cmd) as i32;
    let (ok, text) = d.realtime(Some(d.user.uid), roots, roots, 10);
    assert!(!ok, "{text}");
    assert!(
        text.contains("Access denied") || text.contains("not to the caller"),
        "{text}"
    );
    assert!(d.daemon_log().contains(&format!(
        "process {roots} belongs to uid 0, not to the caller"
    )));
    assert!(!is_deadline(roots));
    assert!(d.m.cells().is_empty());

    // The user's own process, without RLIMIT_RTTIME: RTKit's rule refuses.
    let unlimited = d.user_sleeper(false);
    let (ok, _) = d.realtime(Some(d.user.uid), unlimited, unlimited, 10);
    assert!(!ok);
    assert!(d.daemon_log().contains("RLIMIT_RTTIME is unlimited"));
    // Above the priority ceiling.
    let limited = d.user_sleeper(true);
    let (ok, _) = d.realtime(Some(d.user.uid), limited, limited, 21);
    assert!(!ok);
    assert!(d.m.cells().is_empty());
    // Root-only methods.
    for method in ["ResetKnown", "ResetAll", "Exit"] {
        let (ok, text) = d.busctl(Some(d.user.uid), &["call", NAME, PATH, NAME, method]);
        assert!(!ok, "{method} by a user: {text}");
    }
    // Granted at last, for the user's own limited process.
    let (ok, text) = d.realtime(Some(d.user.uid), limited, limited, 10);
    assert!(ok, "{text}");
    assert!(is_deadline(limited));
}

#[test]
fn past_the_quota_a_request_falls_back_to_rtkits_own_answer_or_is_refused() {
    let config = "rtkit = true\ndefault_quota = 0.01\nrtkit_fallback = \"fifo\"\n";
    let Some(mut d) = Desktop::new("rtkit_fallback", config) else {
        return;
    };
    let p = d.user_sleeper(true);
    let (ok, text) = d.realtime(Some(d.user.uid), p, p, 10);
    assert!(ok, "the fifo fallback grants: {text}");
    assert!(d.m.cells().is_empty(), "no reservation past the quota");
    let policy = sched::get_policy(p).unwrap();
    assert_eq!(policy, Policy::RoundRobin { priority: 10 });
    assert!(d.daemon_log().contains("UNGUARANTEED"));
    // The daemon reports the thread in its samples (a sample taken just
    // before the grant may come first), and `tessera top` labels it.
    wait_until("the daemon reports the thread unguaranteed", || {
        let sample = d.m.json(&["top", "--json", "-n", "1", "-d", "0.1"]);
        sample["unguaranteed"].as_array().is_some_and(|threads| {
            threads
                .iter()
                .any(|t| t["tid"] == p && t["priority"] == 10 && t["uid"] == d.user.uid)
        })
    });
    let text = d.m.ok(&["top", "-b", "-n", "1", "-d", "0.1"]);
    let row = text.lines().find(|l| l.starts_with(&p.to_string()));
    assert!(text.contains("UNGUARANTEED") && row.is_some(), "{text}");

    // A restarted daemon labels it still, and gives it a reservation once
    // the quota has room.
    d.kill_daemon();
    d.start_daemon();
    assert!(
        d.daemon_log().contains("1 grant(s) taken back"),
        "{}",
        d.daemon_log()
    );
    // Past several adaptations and a retry that the quota refused, the
    // thread is still granted and labelled (they once forgot it).
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        sched::get_policy(p).unwrap(),
        Policy::RoundRobin { priority: 10 }
    );
    let text = d.m.ok(&["top", "-b", "-n", "1", "-d", "0.1"]);
    assert!(text.contains("UNGUARANTEED"), "{text}");
    d.restart_with("rtkit = true\ndefault_quota = 0.5\nrtkit_fallback = \"fifo\"\n");
    d.wait_for(
        "the fallback thread is reserved after the restart",
        Duration::from_secs(10),
        |_| is_deadline(p),
    );
    assert_eq!(d.m.cells_of(p).len(), 1);

    d.restart_with("rtkit = true\ndefault_quota = 0.01\nrtkit_fallback = \"refuse\"\n");
    let q = d.user_sleeper(true);
    let (ok, text) = d.realtime(Some(d.user.uid), q, q, 10);
    assert!(!ok, "{text}");
    assert!(d.daemon_log().contains("quota"), "{}", d.daemon_log());
    assert_eq!(sched::get_policy(q).unwrap(), Policy::Other { nice: 0 });
}

#[test]
fn rtkits_per_user_limits_hold_and_reset_known_undoes_every_kind_of_grant() {
    let config = "rtkit = true\n[rtkit_limits]\nthreads_per_user = 2\nactions_per_burst = 4\n";
    let Some(mut d) = Desktop::new("rtkit_user_limits", config) else {
        return;
    };
    let uid = Some(d.user.uid);
    let [a, b, c] = [(); 3].map(|()| d.user_sleeper(true));
    assert!(d.realtime(uid, a, a, 10).0);
    assert!(d.realtime(uid, b, b, 10).0);
    // A third thread is past the user's threads (busctl prints the error's
    // name; the daemon's log has its text).
    let (ok, text) = d.realtime(uid, c, c, 10);
    assert!(!ok, "{text}");
    assert!(d.daemon_log().contains("holds 2 real-time threads"));
    assert_eq!(sched::get_policy(c).unwrap(), Policy::Other { nice: 0 });
    assert_eq!(d.m.cells().len(), 2);
    // MakeThreadHighPriorityWithPID: the nice level, with RESET_ON_FORK.
    let high = |d: &Desktop, pid: i32, nice: i32| {
        let (pid, nice) = (pid.to_string(), nice.to_string());
        // `--`: a negative nice level is not an option of busctl's.
        let args = [
            "--",
            "call",
            NAME,
            PATH,
            NAME,
            "MakeThreadHighPriorityWithPID",
            "tti",
        ];
        let args: Vec<&str> = args.into_iter().chain([&*pid, &*pid, &*nice]).collect();
        d.busctl(uid, &args)
    };
    let (ok, text) = high(&d, c, -10);
    assert!(ok, "{text}");
    assert_eq!(sched::get_policy(c).unwrap(), Policy::Other { nice: -10 });
    // A fifth request in the burst window is refused, whatever it asks.
    let (ok, text) = high(&d, c, -5);
    assert!(!ok, "{text}");
    assert!(d.daemon_log().contains("made 4 requests in 20 s"));
    assert_eq!(sched::get_policy(c).unwrap(), Policy::Other { nice: -10 });
    // Past several adaptations, root's ResetKnown finds all three grants.
    std::thread::sleep(Duration::from_millis(700));
    let (ok, text) = d.busctl(None, &["call", NAME, PATH, NAME, "ResetKnown"]);
    assert!(ok, "{text}");
    for pid in [a, b, c] {
        assert_eq!(sched::get_policy(pid).unwrap(), Policy::Other { nice: 0 });
    }
    assert!(d.m.cells().is_empty());
}

#[test]
fn a_foreign_client_asks_for_its_own_thread_and_a_restarted_daemon_keeps_the_grant() {
    let Some(mut d) = Desktop::new("rtkit_restart", "rtkit = true\n") else {
        return;
    };
    // python's libdbus binding, as RTKit's own client library does it:
    // RLIMIT_RTTIME set, then MakeThreadRealtime for the calling thread.
    let script = "import dbus, resource, threading, time, sys\n\
        resource.setrlimit(resource.RLIMIT_RTTIME, (200000, 200000))\n\
        bus = dbus.SystemBus()\n\
        kit = dbus.Interface(bus.get_object('org.freedesktop.RealtimeKit1', '/org/freedesktop/RealtimeKit1'), 'org.freedesktop.RealtimeKit1')\n\
        kit.MakeThreadRealtime(dbus.UInt64(threading.get_native_id()), dbus.UInt32(5))\n\
        print('granted', flush=True)\n\
        time.sleep(120)\n";
    let mut cmd = d.as_user("python3");
    cmd.args(["-c", script])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(d.m.dir.join("python.log")).unwrap());
    let child: Child = cmd.spawn().expect("python3 with python3-dbus");
    let py = child.id() as i32;
    d.m.children.push(child);
    d.wait_for(
        "python's thread is reserved",
        Duration::from_secs(10),
        |_| is_deadline(py),
    );
    assert_eq!(d.m.cells_of(py).len(), 1);

    // SIGKILL: the reservation stays in force without its daemon…
    d.kill_daemon();
    assert!(is_deadline(py), "a dead daemon demotes nothing");
    // …and a new daemon takes it back and keeps adapting it.
    d.start_daemon();
    assert!(
        d.daemon_log().contains("1 grant(s) taken back"),
        "{}",
        d.daemon_log()
    );
    assert_eq!(d.m.cells_of(py).len(), 1);
    assert!(is_deadline(py));
    // ResetKnown (root) gives it back to SCHED_OTHER.
    let (ok, text) = d.busctl(None, &["call", NAME, PATH, NAME, "ResetKnown"]);
    assert!(ok, "{text}");
    assert!(!is_deadline(py));
    assert!(d.m.cells().is_empty());
}

/// One fuzzed call: a method (RTKit's, a misspelt one, or the properties
/// interface) with a body of a random shape. Ids are this test's own
/// threads (whose process has no RLIMIT_RTTIME, so RTKit's rule refuses)
/// or ids no thread has; nice levels are out of range, so nothing is ever
/// granted and the machine is left as it was.
fn fuzzed_call(
    bus: &zbus::blocking::Connection,
    rng: &mut Rng,
    own: &[u64],
) -> zbus::Result<zbus::message::Message> {
    let ids = [own[0], own[own.len() - 1], 0, 4_000_000, u64::MAX, 1 << 33];
    let id = *rng.pick(&ids);
    let other = *rng.pick(&ids);
    let priority = *rng.pick(&[0u32, 1, 20, 21, 99, 100, u32::MAX]);
    let nice = *rng.pick(&[-21i32, 20, i32::MIN, i32::MAX]);
    let methods = [
        "MakeThreadRealtime",
        "MakeThreadRealtimeWithPID",
        "MakeThreadHighPriority",
        "MakeThreadHighPriorityWithPID",
        "MakeThreadRealtimeWithPid",
        "Nonsense",
        "make_thread_realtime",
    ];
    let method = *rng.pick(&methods);
    let member = *rng.pick(&["Get", "GetAll", "Set", "Introspect"]);
    let property = *rng.pick(&["RTTimeUSecMax", "MinNiceLevel", "NoSuchProperty", ""]);
    let (iface, props) = (Some(NAME), Some("org.freedesktop.DBus.Properties"));
    match rng.next_u64() % 9 {
        0 => bus.call_method(Some(NAME), PATH, iface, method, &(id, priority)),
        1 => bus.call_method(Some(NAME), PATH, iface, method, &(id, other, priority)),
        2 => bus.call_method(Some(NAME), PATH, iface, method, &(id, nice)),
        3 => bus.call_method(Some(NAME), PATH, iface, method, &(id, other, nice)),
        4 => bus.call_method(Some(NAME), PATH, iface, method, &()),
        5 => bus.call_method(Some(NAME), PATH, iface, method, &("garbage", 1.5f64, true)),
        6 => bus.call_method(Some(NAME), PATH, iface, method, &(priority, id)),
        7 => bus.call_method(Some(NAME), PATH, props, member, &(NAME, property)),
        _ => bus.call_method(
            Some(NAME),
            "/not/the/object",
            iface,
            method,
            &(id, priority),
        ),
    }
}

#[test]
fn ten_thousand_fuzzed_calls_get_replies_and_change_nothing() {
    // No burst limit in reach: every call in range goes on to the thread's
    // and its process's checks instead of stopping at the 26th.
    let config = "rtkit = true\n[rtkit_limits]\nactions_per_burst = 1000000\n";
    let Some(d) = Desktop::new("rtkit_fuzz", config) else {
        return;
    };
    // Threads of this process that stay alive through the test.
    let (_keep, park) = std::sync::mpsc::channel::<()>();
    let parked = std::thread::spawn(move || {
        let _ = park.recv();
    });
    let me = tessera_sys::proc::current_pid();
    let own: Vec<u64> = tessera_sys::proc::threads_of(me)
        .unwrap()
        .into_iter()
        .map(|t| t as u64)
        .collect();
    let before: Vec<Policy> = own
        .iter()
        .map(|t| sched::get_policy(*t as i32).unwrap())
        .collect();
    let bus = zbus::blocking::connection::Builder::address(d.bus.address.as_str())
        .unwrap()
        .method_timeout(Duration::from_secs(5))
        .build()
        .expect("connect to the private bus");
    let mut rng = Rng(0x7e55_e2a1_u64);
    let (mut replies, mut errors, mut rttime, mut burst) = (0, 0, 0, 0);
    for i in 0..10_000 {
        match fuzzed_call(&bus, &mut rng, &own) {
            Ok(_) => replies += 1,
            Err(zbus::Error::MethodError(_, text, _)) => {
                errors += 1;
                let text = text.unwrap_or_default();
                rttime += usize::from(text.contains("RLIMIT_RTTIME"));
                burst += usize::from(text.contains("requests in"));
            }
            Err(zbus::Error::FDO(_)) => errors += 1,
            Err(e) => panic!("call {i} got no reply: {e}\n{}", d.logs()),
        }
    }
    eprintln!(
        "10 000 fuzzed calls: {replies} answered, {errors} refused with an error \
         ({rttime} for RLIMIT_RTTIME, {burst} for the burst limit)"
    );
    assert!(errors > 9_000, "almost every fuzzed call is refused");
    assert_eq!(burst, 0, "the burst limit is out of reach");
    assert!(
        rttime > 0,
        "calls in range reach RTKit's RLIMIT_RTTIME rule"
    );
    assert!(d.m.cells().is_empty(), "nothing was reserved");
    let after: Vec<Policy> = own
        .iter()
        .map(|t| sched::get_policy(*t as i32).unwrap())
        .collect();
    assert_eq!(before, after, "no thread's scheduling changed");
    let (ok, props) = d.busctl(
        None,
        &["get-property", NAME, PATH, NAME, "MaxRealtimePriority"],
    );
    assert!(
        ok && props.contains("20"),
        "the interface still answers: {props}"
    );
    drop(_keep);
    parked.join().unwrap();
}

#[test]
fn a_hundred_kills_of_daemon_client_or_pipewire_mid_cycle_leave_nothing_behind() {
    let Some(mut d) = Desktop::new("rtkit_kills", "rtkit = true\n") else {
        return;
    };
    let name_owned = name_owner(&d.bus);
    let (mut pipewire, mut pw, _) = d.start_pipewire();
    let (mut killed, mut mid_cycle) = (Vec::new(), 0);
    for round in 0..100 {
        // A pw-jack client of PipeWire, its process thread reserved, in
        // its cycles (a third of each its own work).
        let (client, client_pid) = d.start_pw_jack_client(0.3);
        killed.push(client_pid);
        match round % 3 {
            // The daemon dies with both grants in force; a new one takes
            // them back, and the bus gives the name to it. Then the client
            // dies mid-cycle under the new daemon.
            0 => {
                d.kill_daemon();
                d.wait_for(
                    "the bus drops the dead daemon's name",
                    Duration::from_secs(5),
                    |_| !name_owned(),
                );
                d.start_daemon();
                assert!(name_owned());
                for pid in [pw, client_pid] {
                    let cells = d.m.cells_of(pid);
                    assert!(
                        !cells.is_empty(),
                        "round {round}: {pid} taken back: {cells:?}\n{}",
                        d.logs()
                    );
                }
                mid_cycle += usize::from(d.kill_mid_cycle(client, client_pid));
            }
            // The client dies mid-cycle.
            1 => mid_cycle += usize::from(d.kill_mid_cycle(client, client_pid)),
            // PipeWire dies mid-cycle under its client; the client, its
            // server gone, is ended too, and the user starts PipeWire again.
            _ => {
                mid_cycle += usize::from(d.kill_mid_cycle(pipewire, client_pid));
                killed.push(pw);
                d.wait_for(
                    "the dead PipeWire's cells are released",
                    Duration::from_secs(5),
                    |d| d.cells_held_for(pw).is_empty(),
                );
                d.m.kill(client);
                (pipewire, pw, _) = d.start_pipewire();
            }
        }
        d.wait_for(
            "the killed client's cells are released",
            Duration::from_secs(5),
            |d| d.cells_held_for(client_pid).is_empty(),
        );
        let cells = d.m.cells();
        assert_eq!(
            cells.len(),
            1,
            "round {round}: PipeWire's cell alone: {cells:?}"
        );
    }
    eprintln!("{mid_cycle} of 100 processes killed while the client was in its cycle");
    assert!(mid_cycle >= 50, "{mid_cycle} of 100 kills mid-cycle");
    d.m.kill(pipewire);
    d.wait_for(
        "the last PipeWire is released",
        Duration::from_secs(5),
        |d| d.m.cells().is_empty(),
    );
    for pid in killed {
        assert!(!tessera_sys::proc::is_running(pid));
    }
    d.kill_daemon();
    d.wait_for("the name is given back", Duration::from_secs(5), |_| {
        !name_owned()
    });
}

/// Processes frozen as a suspend freezes user space, in a freezer cgroup of
/// the test's own: cgroup v1's freezer where it is mounted, else cgroup
/// v2's `cgroup.freeze`. Dropped, they are thawed, moved back to the root
/// cgroup and the cgroup is removed, also when the test fails.
struct Frozen {
    dir: PathBuf,
    root: PathBuf,
    v1: bool,
    pids: Vec<i32>,
}

impl Frozen {
    fn new(pids: &[i32]) -> Frozen {
        let v1 = Path::new("/sys/fs/cgroup/freezer/cgroup.procs").exists();
        let root = match v1 {
            true => PathBuf::from("/sys/fs/cgroup/freezer"),
            false if Path::new("/sys/fs/cgroup/unified/cgroup.procs").exists() => {
                PathBuf::from("/sys/fs/cgroup/unified")
            }
            false => PathBuf::from("/sys/fs/cgroup"),
        };
        let dir = root.join(format!("tessera-test-freeze-{}", std::process::id()));
        std::fs::create_dir(&dir).expect("create a freezer cgroup");
        let frozen = Frozen {
            dir,
            root,
            v1,
            pids: pids.to_vec(),
        };
        for pid in pids {
            std::fs::write(frozen.dir.join("cgroup.procs"), pid.to_string()).unwrap();
        }
        frozen.set(true);
        wait_until("the processes are frozen", || frozen.is_frozen());
        frozen
    }

    fn set(&self, freeze: bool) {
        let (file, value) = match (self.v1, freeze) {
            (true, true) => ("freezer.state", "FROZEN"),
            (true, false) => ("freezer.state", "THAWED"),
            (false, true) => ("cgroup.freeze", "1"),
            (false, false) => ("cgroup.freeze", "0"),
        };
        std::fs::write(self.dir.join(file), value).unwrap();
    }

    fn is_frozen(&self) -> bool {
        let read = |file: &str| std::fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        match self.v1 {
            true => read("freezer.state").trim() == "FROZEN",
            false => read("cgroup.events").lines().any(|l| l == "frozen 1"),
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.set(false);
        for pid in &self.pids {
            let _ = std::fs::write(self.root.join("cgroup.procs"), pid.to_string());
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
fn a_suspend_simulated_with_the_freezer_keeps_every_grant() {
    let Some(mut d) = Desktop::new("rtkit_freeze", "rtkit = true\n") else {
        return;
    };
    let p = d.user_sleeper(true);
    assert!(d.realtime(Some(d.user.uid), p, p, 10).0);
    let cell = d.m.cells_of(p)[0]["name"].clone();
    let daemon = d.m.children[d.daemon.expect("a daemon runs")].id() as i32;
    // What a suspend freezes: the granted program and the daemon itself
    // (its adaptation sees a gap of seconds when it thaws).
    {
        let _frozen = Frozen::new(&[p, daemon]);
        std::thread::sleep(Duration::from_secs(3));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(is_deadline(p), "no demotion over the freeze");
    let cells = d.m.cells_of(p);
    assert!(cells.len() == 1 && cells[0]["name"] == cell, "{cells:?}");
    assert!(!d.daemon_log().contains("released"), "{}", d.daemon_log());
    // The daemon still grants.
    let q = d.user_sleeper(true);
    assert!(d.realtime(Some(d.user.uid), q, q, 10).0);
    assert!(is_deadline(q));
}

/// Whether RTKit's name has an owner on `bus`, asked of the bus itself.
fn name_owner(bus: &PrivateBus) -> impl Fn() -> bool {
    let connection = zbus::blocking::connection::Builder::address(bus.address.as_str())
        .unwrap()
        .build()
        .unwrap();
    let dbus = zbus::blocking::fdo::DBusProxy::new(&connection).unwrap();
    move || {
        dbus.name_has_owner(NAME.try_into().unwrap())
            .unwrap_or(false)
    }
}

#[test]
fn ready_comes_once_the_socket_listens_and_the_bus_name_is_owned() {
    let Some(mut d) = Desktop::new("rtkit_ready", "rtkit = true\n") else {
        return;
    };
    let owned = name_owner(&d.bus);
    d.kill_daemon();
    d.wait_for("the bus drops the name", Duration::from_secs(5), |_| {
        !owned()
    });
    // systemd's Type=notify: READY=1 on the datagram socket it names.
    let notify = d.m.dir.join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut daemon = d.daemon_command();
    daemon.env("NOTIFY_SOCKET", &notify);
    d.m.children.push(daemon.spawn().expect("start the daemon"));
    let mut message = [0u8; 4096];
    let n = socket.recv(&mut message).expect("READY=1 within 10 s");
    let message = String::from_utf8_lossy(&message[..n]);
    assert!(message.lines().any(|l| l == "READY=1"), "{message}");
    assert!(owned(), "READY=1 came after the name was owned");
    assert!(std::os::unix::net::UnixStream::connect(d.m.dir.join("tessera.sock")).is_ok());
}

#[test]
fn a_daemon_that_cannot_own_the_name_fails_and_says_why() {
    let Some(d) = Desktop::new("rtkit_name_taken", "rtkit = true\n") else {
        return;
    };
    // A second daemon, on a run directory of its own, finds the name taken.
    let second = d.m.dir.join("second");
    std::fs::create_dir(&second).unwrap();
    let mut second =
        d.m.tessera()
            .args(["daemon", "--run-dir"])
            .arg(&second)
            .arg("--config")
            .arg(d.m.dir.join("daemon.toml"))
            .env("DBUS_SYSTEM_BUS_ADDRESS", &d.bus.address)
            .stderr(Stdio::piped())
            .spawn()
            .expect("run a second daemon");
    let start = Instant::now();
    while second.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(10) {
            let _ = second.kill();
            let _ = second.wait();
            panic!("a second daemon served instead of failing");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = second.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("owned by another program"), "{err}");
    assert!(err.contains("systemctl stop rtkit-daemon"), "{err}");
}

#[test]
fn one_quota_holds_for_the_socket_and_the_bus_together() {
    let config =
        "rtkit = true\nsocket_world = true\ndefault_quota = 0.3\nrtkit_fallback = \"refuse\"\n";
    let Some(mut d) = Desktop::new("rtkit_one_quota", config) else {
        return;
    };
    let as_user_tessera = |d: &Desktop, args: &[&str]| {
        let mut cmd = d.as_user(env!("CARGO_BIN_EXE_tessera"));
        cmd.env("TESSERA_RUN_DIR", &d.m.dir).args(args);
        let out = cmd.output().expect("run tessera as the user");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Most of the user's quota taken through the socket…
    let (ok, err) = as_user_tessera(
        &d,
        &[
            "cell",
            "create",
            "mine",
            "--policy",
            "event-triggered",
            "--runtime",
            "2800us",
            "--period",
            "10ms",
        ],
    );
    assert!(ok, "{err}");
    // …leaves too little for a reservation through the bus.
    let p = d.user_sleeper(true);
    let (ok, text) = d.realtime(Some(d.user.uid), p, p, 10);
    assert!(!ok, "{text}");
    assert!(d.daemon_log().contains("quota"), "{}", d.logs());
    assert!(!is_deadline(p));
    // Given back through the socket, it is the bus's to use.
    let (ok, err) = as_user_tessera(&d, &["cell", "destroy", "mine"]);
    assert!(ok, "{err}");
    let (ok, text) = d.realtime(Some(d.user.uid), p, p, 10);
    assert!(ok, "{text}\n{}", d.logs());
    assert!(is_deadline(p));
}
