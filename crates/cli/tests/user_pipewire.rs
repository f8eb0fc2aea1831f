//! `tessera guard` against a user's session PipeWire, as root: Debian's
//! PipeWire started as a test user with no real-time rights (no rtprio
//! limit, no RTKit: its system bus leads nowhere), so that its data loop
//! and its pw-jack client's process thread run at SCHED_OTHER; and with
//! real-time rights of its own, so that it makes its data loop SCHED_FIFO
//! itself. The guard
//! reaches the daemon in the user's runtime directory and adopts the
//! threads that run the graph; the daemon's `[[guard]] user` follows the
//! user's daemons as they start and stop. Every process started here is
//! killed, the user removed and the machine reset, even when a test fails.

mod common;

use common::session::TestUser;
use common::{privileged, wait_until_within, Machine};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tessera_sys::sched::{self, Policy};

const USER: &str = "tessera-userpw-test";

/// How long a guard may take to find a graph thread: PipeWire starting,
/// the guard's client joining, one window of the graph's cycles.
const FOUND_WITHIN: Duration = Duration::from_secs(20);

/// The machine and a test user. Dropped in this order: the processes, the
/// user, and last the machine (reset, and handed to the next test, which
/// may create the same user).
struct Session {
    user: TestUser,
    m: Machine,
}

impl Drop for Session {
    fn drop(&mut self) {
        for c in self.m.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Session {
    fn new(test: &str) -> Option<Session> {
        let m = privileged(test)?;
        // The user's processes reach their runtime directories in it.
        std::fs::set_permissions(&m.dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        Some(Session {
            user: common::session::test_user(USER),
            m,
        })
    }

    /// Starts a PipeWire daemon as the user in a session whose runtime
    /// directory is `xdg` (under the test's directory); returns its pid once
    /// its socket is there.
    fn start_pipewire(&mut self, xdg: &str) -> i32 {
        let runtime = self.user.runtime_dir(&self.m.dir.join(xdg)).unwrap();
        let cmd = self.user.command(&runtime, "pipewire");
        self.start_daemon_as(cmd, xdg, &runtime)
    }

    /// Starts PipeWire as the user with real-time rights of its own: its
    /// module-rt makes its data loop SCHED_FIFO itself, without RTKit.
    fn start_pipewire_with_rt_rights(&mut self, xdg: &str) -> i32 {
        let runtime = self.user.runtime_dir(&self.m.dir.join(xdg)).unwrap();
        let cmd = self.user.command_with_rt_rights(&runtime, "pipewire");
        self.start_daemon_as(cmd, xdg, &runtime)
    }

    fn start_daemon_as(
        &mut self,
        mut cmd: std::process::Command,
        xdg: &str,
        runtime: &Path,
    ) -> i32 {
        cmd.env("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent")
            .stderr(self.log(&format!("{xdg}-pipewire.log")));
        let pid = self.m.spawn(&mut cmd) as i32;
        wait_until_within("PipeWire's socket is there", FOUND_WITHIN, || {
            runtime.join("pipewire-0").exists()
        });
        pid
    }

    /// A pw-jack client of the user's daemon in `xdg`: tessera-jack-peer,
    /// one client of 5 % load.
    fn start_client(&mut self, xdg: &str) -> i32 {
        let runtime = self.m.dir.join(xdg);
        let mut cmd = self.user.command(&runtime, "pw-jack");
        cmd.arg(jack_peer())
            .args(["--topology", "chain", "--loads", "1", "--load", "0.05"])
            .args(["--seconds", "120", "--out"])
            .arg(runtime.join("peer.json"))
            .env("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent")
            .stdout(Stdio::null())
            .stderr(self.log("client.log"));
        self.m.spawn(&mut cmd) as i32
    }

    fn log(&self, name: &str) -> std::fs::File {
        std::fs::File::create(self.m.dir.join(name)).unwrap()
    }

    fn logs(&self) -> String {
        let mut text = String::new();
        for entry in std::fs::read_dir(&self.m.dir).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log") {
                let log = std::fs::read_to_string(&path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                text += &format!("--- {}\n{}\n", path.display(), tail.join("\n"));
            }
        }
        text
    }

    /// `tessera guard pipewire --pid PW ARGS` for `seconds`, logging to
    /// guard.log; its index among the children.
    fn start_guard(&mut self, pw: i32, seconds: u32, args: &[&str]) -> usize {
        let mut guard = self.m.tessera();
        guard
            .args(["guard", "pipewire", "--pid", &pw.to_string()])
            .args(["--seconds", &seconds.to_string()])
            .args(args)
            .stdout(Stdio::null())
            .stderr(self.log("guard.log"));
        self.m.spawn(&mut guard);
        self.m.children.len() - 1
    }

    /// Waits for the guard at `index` to stop by itself, successfully.
    fn guard_stopped(&mut self, index: usize) {
        let ended = wait_for(Duration::from_secs(20), || {
            self.m.children[index].try_wait().ok().flatten()
        });
        let status = ended.unwrap_or_else(|| panic!("the guard did not stop\n{}", self.logs()));
        assert!(status.success(), "the guard failed\n{}", self.logs());
    }

    /// The reserved threads of `pid`, once there are some.
    fn wait_for_reserved(&self, pid: i32, what: &str) -> Vec<i32> {
        let found = wait_for(FOUND_WITHIN, || {
            let tids = reserved_tids(&self.m, pid);
            (!tids.is_empty()).then_some(tids)
        });
        found.unwrap_or_else(|| {
            panic!(
                "timed out waiting until {what} is reserved\n{}",
                self.logs()
            )
        })
    }
}

fn jack_peer() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_tessera")).with_file_name("tessera-jack-peer")
}

/// The threads of `pid` the daemon's cells reserve.
fn reserved_tids(m: &Machine, pid: i32) -> Vec<i32> {
    m.cells_of(pid)
        .iter()
        .flat_map(|c| c["members"].as_array().cloned().unwrap_or_default())
        .filter(|member| member["pid"] == pid)
        .filter_map(|member| member["tid"].as_i64())
        .map(|tid| tid as i32)
        .collect()
}

/// The threads of `pid` and their policies.
fn policies(pid: i32) -> Vec<(i32, String, Policy)> {
    tessera_sys::proc::threads_of(pid)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|t| {
            let name = tessera_sys::proc::thread_name(pid, t);
            Some((t, name, sched::get_policy(t).ok()?))
        })
        .collect()
}

fn all_normal(pid: i32) -> bool {
    policies(pid)
        .iter()
        .all(|(_, _, p)| matches!(p, Policy::Other { .. }))
}

fn wait_for<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > within {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn root_guards_a_users_pipewire_without_rt_rights_and_gives_its_threads_back() {
    let Some(mut s) = Session::new("guard_user_pipewire") else {
        return;
    };
    s.m.start_daemon(None);
    let pw = s.start_pipewire("xdg");
    let client = s.start_client("xdg");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        all_normal(pw) && all_normal(client),
        "without RT rights every thread is SCHED_OTHER: {:?} {:?}\n{}",
        policies(pw),
        policies(client),
        s.logs()
    );

    let index = s.start_guard(pw, 10, &[]);

    for (pid, what) in [
        (pw, "PipeWire's data loop"),
        (client, "the client's process thread"),
    ] {
        let tids = s.wait_for_reserved(pid, what);
        for tid in &tids {
            assert!(
                matches!(sched::get_policy(*tid), Ok(Policy::Deadline(_))),
                "{what}: thread {tid} reads back SCHED_DEADLINE: {:?}",
                policies(pid)
            );
        }
        assert!(
            tids.len() < policies(pid).len(),
            "{what}: only the graph's threads are adopted, not the main loop: {tids:?} of {:?}",
            policies(pid)
        );
    }

    s.guard_stopped(index);
    let log = std::fs::read_to_string(s.m.dir.join("guard.log")).unwrap();
    assert!(
        log.contains("runs the graph without real-time scheduling"),
        "{log}"
    );
    assert!(
        all_normal(pw) && all_normal(client),
        "every thread is SCHED_OTHER again: {:?} {:?}",
        policies(pw),
        policies(client)
    );
    assert!(s.m.cells().is_empty(), "no cell remains: {:?}", s.m.cells());
}

#[test]
fn root_guards_a_users_pipewire_real_time_by_its_own_rights_and_gives_its_threads_back() {
    let Some(mut s) = Session::new("guard_user_pipewire_rtprio") else {
        return;
    };
    s.m.start_daemon(None);
    let pw = s.start_pipewire_with_rt_rights("xdg");
    let fifo = |pid: i32| -> Vec<i32> {
        policies(pid)
            .into_iter()
            .filter(|(_, _, p)| matches!(p, Policy::Fifo { .. }))
            .map(|(tid, _, _)| tid)
            .collect()
    };
    let made_fifo = wait_for(FOUND_WITHIN, || {
        let tids = fifo(pw);
        (!tids.is_empty()).then_some(tids)
    })
    .unwrap_or_else(|| {
        panic!(
            "with real-time rights PipeWire makes its data loop SCHED_FIFO: {:?}\n{}",
            policies(pw),
            s.logs()
        )
    });

    // With the server's workgroup for its clients: `pipewire-UID`, bound
    // to PipeWire and owned by its user, closed when the guard stops.
    let index = s.start_guard(pw, 8, &["--workgroup", "2"]);

    let reserved = s.wait_for_reserved(pw, "PipeWire's SCHED_FIFO data loop");
    let workgroup = tessera_broker::workgroup::pipewire_server_workgroup(s.user.uid);
    let cell =
        s.m.cells()
            .into_iter()
            .find(|c| c["name"] == workgroup.as_str());
    let cell = cell.unwrap_or_else(|| panic!("{workgroup} is open\n{}", s.logs()));
    assert_eq!(
        (&cell["bound_to_pid"], &cell["owner_uid"]),
        (&serde_json::json!(pw), &serde_json::json!(s.user.uid)),
        "{cell}"
    );
    for tid in &made_fifo {
        assert!(
            reserved.contains(tid),
            "the thread PipeWire made SCHED_FIFO ({tid}) is reserved: {reserved:?}"
        );
        assert!(
            matches!(sched::get_policy(*tid), Ok(Policy::Deadline(_))),
            "thread {tid} reads back SCHED_DEADLINE: {:?}",
            policies(pw)
        );
    }

    s.guard_stopped(index);
    assert_eq!(
        fifo(pw),
        made_fifo,
        "the data loop is SCHED_FIFO again, as PipeWire set it: {:?}",
        policies(pw)
    );
    assert!(s.m.cells().is_empty(), "no cell remains: {:?}", s.m.cells());
}

#[test]
fn the_daemon_follows_a_users_pipewire_daemons_as_they_come_and_go() {
    let Some(mut s) = Session::new("guard_user_pipewire_daemon") else {
        return;
    };
    let config = s.m.dir.join("daemon.toml");
    // `user = "*"`, every user's PipeWire, where no other user runs one
    // (CI): the test must not guard a desktop it did not start.
    let others = others_pipewire(s.user.uid);
    let user = match others.is_empty() {
        true => "*",
        false => {
            eprintln!("other users run PipeWire ({others:?}): guarding {USER} by name");
            USER
        }
    };
    std::fs::write(
        &config,
        format!("[[guard]]\nserver = \"pipewire\"\nuser = \"{user}\"\n"),
    )
    .unwrap();
    let log = s.log("daemon.log");
    let mut daemon = s.m.tessera();
    daemon
        .args(["daemon", "--run-dir"])
        .arg(&s.m.dir)
        .arg("--config")
        .arg(&config)
        .stderr(log);
    s.m.spawn(&mut daemon);
    let socket = s.m.dir.join("tessera.sock");
    wait_until_within("the daemon answers", FOUND_WITHIN, || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });

    // A daemon started after the broker, then a second one.
    let first = s.start_pipewire("xdg1");
    let first_index = s.m.children.len() - 1;
    s.wait_for_reserved(first, "the first PipeWire's data loop");
    let second = s.start_pipewire("xdg2");
    s.wait_for_reserved(second, "the second PipeWire's data loop");

    // The first exits: its guard releases it and ends; the second stays.
    s.m.kill(first_index);
    let released = wait_for(FOUND_WITHIN, || {
        reserved_tids(&s.m, first).is_empty().then_some(())
    });
    assert!(
        released.is_some(),
        "the first PipeWire's cells are gone\n{}",
        s.logs()
    );
    let ended = format!("--pid {first} --quiet");
    let daemon_log = || std::fs::read_to_string(s.m.dir.join("daemon.log")).unwrap_or_default();
    let said = wait_for(FOUND_WITHIN, || {
        daemon_log()
            .lines()
            .any(|l| l.contains("guard ended") && l.contains(&ended))
            .then_some(())
    });
    assert!(said.is_some(), "its guard ended\n{}", s.logs());
    assert!(
        !reserved_tids(&s.m, second).is_empty(),
        "the second PipeWire is still guarded\n{}",
        s.logs()
    );
    let guarded: Vec<String> = daemon_log()
        .lines()
        .filter(|l| l.contains("guard started"))
        .map(String::from)
        .collect();
    let of = |pid: i32| format!("--pid {pid} ");
    assert!(
        guarded
            .iter()
            .all(|l| l.contains(&of(first)) || l.contains(&of(second))),
        "guards only for the user's daemons: {guarded:?}"
    );
}

/// The PipeWire daemons of users other than root and `test_uid`.
fn others_pipewire(test_uid: u32) -> Vec<i32> {
    use tessera_sys::proc;
    proc::all_pids()
        .unwrap_or_default()
        .into_iter()
        .filter(|&pid| proc::thread_name(pid, pid) == "pipewire")
        .filter(|&pid| proc::owner_uid(pid).is_ok_and(|uid| uid != 0 && uid != test_uid))
        .collect()
}
