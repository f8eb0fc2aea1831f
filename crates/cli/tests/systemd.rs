//! `tessera install` under a live systemd, as on a distribution's machine:
//! a systemd booted as PID 1 of a container of this machine, with its own
//! system bus, in which the installed unit must start (`Type=notify`: ready
//! once its socket listens and it owns RTKit's bus name), answer an RTKit
//! client with a reservation, be restarted by systemd when it dies without
//! demoting the thread it reserved, give the bus name up when stopped, and
//! leave RTKit's own activation answering after it; and, configured with
//! `[[guard]] user = "*"`, guard a user's session PipeWire from inside the
//! unit's sandbox. The unit file's syntax is checked by `systemd-analyze
//! verify` in tests/install.rs; this runs it.
//!
//! The container has its own mount, PID, UTS, IPC and network namespaces;
//! its / is this machine's under an overlay whose writes go to a tmpfs, so
//! nothing installed reaches the machine. Its systemd manages a group of
//! its own in the named systemd and the unified cgroup hierarchies; the cpu and cpuset
//! hierarchies are the machine's, where the daemon makes its cells — which
//! `tessera reset` inside and the test's machine guard remove.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// What the container runs: the overlay, the file systems a systemd needs,
/// its cgroup, the binary under test, and a boot target of the system bus
/// and nothing else (none of the machine's enabled services).
const BOOT: &str = r#"set -eu
scratch=$1 group=$2 binary=$3
root=$scratch/root
mkdir -p "$scratch/layer" "$root"
mount -t tmpfs tmpfs "$scratch/layer"
mkdir "$scratch/layer/upper" "$scratch/layer/work"
mount -t overlay overlay \
  -o "lowerdir=/,upperdir=$scratch/layer/upper,workdir=$scratch/layer/work" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
# The container's console is the boot log, not the machine's console.
mount --bind "$scratch/boot.log" "$root/dev/console"
mount -t tmpfs tmpfs "$root/run"
mount -t tmpfs tmpfs "$root/tmp"
mount -t tmpfs tmpfs "$root/sys/fs/cgroup"
for h in systemd unified; do
  mkdir "$root/sys/fs/cgroup/$h"
  mount --bind "/sys/fs/cgroup/$h/$group" "$root/sys/fs/cgroup/$h"
done
for h in cpu cpuacct cpuset; do
  mkdir "$root/sys/fs/cgroup/$h"
  mount --bind "/sys/fs/cgroup/$h" "$root/sys/fs/cgroup/$h"
done
install -m 0755 "$binary" "$root/usr/local/sbin/tessera-under-test"
cat > "$root/etc/systemd/system/tessera-test.target" <<'EOF'
[Unit]
Description=tessera's systemd test: the system bus and nothing else
Requires=basic.target dbus.service
After=basic.target dbus.service
AllowIsolate=yes
EOF
export container=tessera-test
# Its log before its journal runs goes to the kernel's ring (dmesg): with
# the console as its log target, a boot now and then ended with systemd
# gone and nothing said.
exec chroot "$root" /lib/systemd/systemd --system --unit=tessera-test.target --log-target=kmsg
"#;

/// The container's start: into its group `$1` of the hierarchies its
/// systemd manages (the named systemd one and the unified one), then
/// namespaces of its own — a cgroup namespace rooted at those groups too,
/// so that its systemd finds itself at the root of the hierarchies it is
/// given and makes its groups under them, as under systemd-nspawn (without
/// it, a second boot failed, and the unified hierarchy's root got the
/// container's system.slice).
const ENTER: &str = r#"for h in systemd unified; do
  mkdir -p "/sys/fs/cgroup/$h/$1" && echo $$ > "/sys/fs/cgroup/$h/$1/cgroup.procs" || exit 1
done
shift
exec unshare --cgroup --mount --pid --fork --uts --ipc --net --propagation private \
  --kill-child "$@""#;

/// How long a command inside may take, and the boot.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A systemd booted as PID 1 of a container; killed, with everything in
/// it, and its cgroup and scratch directory removed when dropped.
struct Container {
    /// `unshare`, whose child is the container's systemd.
    unshare: Child,
    /// The container's systemd, as this machine numbers it.
    init: u32,
    /// Its group in the named systemd and the unified hierarchies.
    group: String,
    /// The overlay's mount point (the container's /), in its mount
    /// namespace, and the boot's log.
    scratch: PathBuf,
}

impl Container {
    fn boot() -> Container {
        assert!(
            Path::new("/sys/fs/cgroup/systemd/cgroup.procs").exists(),
            "this test boots systemd in the named systemd cgroup hierarchy (a cgroup v1 or \
             hybrid layout, as this machine mounts it): /sys/fs/cgroup/systemd is missing"
        );
        // Each container's own names: a second boot in one process must not
        // meet the first one's group or scratch directory.
        static BOOTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let id = format!(
            "{}-{}",
            std::process::id(),
            BOOTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let scratch = std::env::temp_dir().join(format!("tessera-systemd-{id}"));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).unwrap();
        let script = scratch.join("boot.sh");
        std::fs::write(&script, BOOT).unwrap();
        let log = std::fs::File::create(scratch.join("boot.log")).unwrap();
        let group = format!("tessera-test-{id}");
        let unshare = Command::new("sh")
            .args(["-c", ENTER, "sh"])
            .arg(&group)
            .arg("sh")
            .arg(&script)
            .arg(&scratch)
            .arg(&group)
            .arg(env!("CARGO_BIN_EXE_tessera"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("run unshare (util-linux)");
        // Its child is the container's init only once the shell has become
        // unshare: before, the shell's own children (`mkdir`) are listed,
        // and one taken for the init had exited by the first `nsenter` (a
        // CI run: "cannot open /proc/PID/ns/ipc", the boot never seen).
        let comm = format!("/proc/{}/comm", unshare.id());
        let children = format!("/proc/{0}/task/{0}/children", unshare.id());
        let mut init = None;
        common::wait_until("unshare has started the container's init", || {
            let is_unshare = std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "unshare");
            init = std::fs::read_to_string(&children)
                .ok()
                .filter(|_| is_unshare)
                .and_then(|c| c.split_whitespace().next()?.parse().ok());
            init.is_some()
        });
        let container = Container {
            unshare,
            init: init.unwrap(),
            group,
            scratch,
        };
        container.wait_for_boot();
        container
    }

    /// Until systemd says the boot is done: `running`, or the test fails
    /// with what did not start. (Until the boot script has become systemd,
    /// systemctl finds no systemd, `offline`.)
    fn wait_for_boot(&self) {
        let start = std::time::Instant::now();
        let mut state = String::new();
        while start.elapsed() < TIMEOUT {
            state = self.text("systemctl is-system-running");
            if matches!(state.as_str(), "running" | "degraded" | "maintenance") {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(
            state,
            "running",
            "{}\nboot log: {}",
            self.text("systemctl --failed --no-pager"),
            std::fs::read_to_string(self.scratch.join("boot.log")).unwrap_or_default()
        );
    }

    /// `sh -c script` inside, with the test's log echoing it.
    fn sh(&self, script: &str) -> Output {
        let out = Command::new("timeout")
            .arg(TIMEOUT.as_secs().to_string())
            .args(["nsenter", "-t"])
            .arg(self.init.to_string())
            .args(["-m", "-p", "-u", "-i", "-n", "chroot"])
            .arg(self.scratch.join("root"))
            .args(["/bin/sh", "-c", script])
            .env_clear()
            .env("PATH", "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::null())
            .output()
            .expect("run nsenter (util-linux)");
        eprintln!(
            "# {script}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// What `script` printed, whether it succeeded or not.
    fn text(&self, script: &str) -> String {
        String::from_utf8_lossy(&self.sh(script).stdout)
            .trim()
            .to_string()
    }

    /// What `script` printed; it must succeed.
    fn ok(&self, script: &str) -> String {
        let out = self.sh(script);
        assert!(
            out.status.success(),
            "`{script}` failed inside the container: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.text("journalctl -u tessera.service --no-pager -n 30")
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A property of tessera.service.
    fn unit(&self, property: &str) -> String {
        self.ok(&format!(
            "systemctl show -p {property} --value tessera.service"
        ))
    }

    /// Who owns RTKit's bus name: the owner's process, or None.
    fn rtkit_owner(&self) -> Option<u32> {
        let out = self.sh(
            "busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
             GetConnectionUnixProcessID s org.freedesktop.RealtimeKit1",
        );
        let text = String::from_utf8_lossy(&out.stdout);
        out.status
            .success()
            .then(|| text.trim().strip_prefix("u ")?.parse().ok())
            .flatten()
    }

    /// The cells (`tessera cell list --json`) holding a thread of `pid`.
    fn cells_of(&self, pid: &str) -> Vec<serde_json::Value> {
        let cells: serde_json::Value =
            serde_json::from_str(&self.ok("tessera-under-test cell list --json")).unwrap();
        let pid: u64 = pid.parse().unwrap();
        let holds = |cell: &serde_json::Value| {
            cell["members"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["pid"] == pid))
        };
        cells
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| holds(c))
            .cloned()
            .collect()
    }

    /// The scheduling classes of `pid`'s threads, as ps names them (`TS`,
    /// `FF`, `RR`, `DLN`).
    fn classes(&self, pid: &str) -> Vec<String> {
        self.text(&format!("ps -L -o cls= -p {pid}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    }

    /// The scheduling policy of process `pid` inside, as chrt names it.
    fn policy(&self, pid: &str) -> String {
        self.ok(&format!("chrt -p {pid}"))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // The init's death kills every process of its PID namespace and
        // unmounts its mount namespace.
        let _ = Command::new("kill")
            .args(["-KILL", &self.init.to_string()])
            .status();
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
        for hierarchy in ["systemd", "unified"] {
            remove_cgroup(
                &Path::new("/sys/fs/cgroup")
                    .join(hierarchy)
                    .join(&self.group),
            );
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// Removes `dir` and the groups under it, deepest first, once the killed
/// processes have left them.
fn remove_cgroup(dir: &Path) {
    for _ in 0..100 {
        let _ = Command::new("find")
            .arg(dir)
            .args(["-depth", "-type", "d", "-exec", "rmdir", "{}", ";"])
            .stderr(Stdio::null())
            .status();
        if !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("could not remove {}", dir.display());
}

#[test]
fn the_installed_service_runs_under_systemd_restarts_and_gives_rtkit_back() {
    let Some(_machine) = common::privileged("tessera.service under a live systemd") else {
        return;
    };
    let c = Container::boot();

    // Installed and started as `tessera install` does it: ready only once
    // it owns RTKit's name, so the owner is known as systemctl returns.
    let report: serde_json::Value =
        serde_json::from_str(&c.ok("tessera-under-test install --json")).unwrap();
    assert!(
        report["ran"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "systemctl enable --now tessera.service"),
        "{report}"
    );
    assert_eq!(c.unit("ActiveState"), "active");
    let main: u32 = c.unit("MainPID").parse().unwrap();
    assert_eq!(c.rtkit_owner(), Some(main), "tessera owns RTKit's name");

    // An RTKit client's request, over the system bus, becomes a
    // reservation of the thread.
    let sleeper = c.ok("prlimit --rttime=200000 sleep 600 >/dev/null 2>&1 & echo $!");
    c.ok(&format!(
        "busctl call org.freedesktop.RealtimeKit1 /org/freedesktop/RealtimeKit1 \
         org.freedesktop.RealtimeKit1 MakeThreadRealtimeWithPID ttu {sleeper} {sleeper} 10"
    ));
    assert!(c.policy(&sleeper).contains("SCHED_DEADLINE"));

    // Killed, it is restarted by systemd, recovers its cells and leaves
    // the reserved thread reserved.
    c.ok(&format!("kill -KILL {main}"));
    common::wait_until_within("systemd has restarted tessera", TIMEOUT, || {
        c.unit("NRestarts") == "1" && c.unit("ActiveState") == "active"
    });
    let restarted: u32 = c.unit("MainPID").parse().unwrap();
    assert_ne!(restarted, main);
    assert_eq!(c.rtkit_owner(), Some(restarted));
    assert!(
        c.policy(&sleeper).contains("SCHED_DEADLINE"),
        "not demoted by the restart"
    );
    assert_eq!(
        c.cells_of(&sleeper).len(),
        1,
        "the recovered cells hold the thread"
    );

    // Stopped, it gives the name up, and an RTKit call activates
    // rtkit-daemon through RTKit's own activation file.
    c.ok("systemctl stop tessera.service");
    assert_eq!(c.rtkit_owner(), None, "the name is given up");
    c.ok(
        "busctl get-property org.freedesktop.RealtimeKit1 /org/freedesktop/RealtimeKit1 \
         org.freedesktop.RealtimeKit1 MaxRealtimePriority",
    );
    assert_eq!(c.ok("systemctl is-active rtkit-daemon.service"), "active");

    // Stopped, the daemon left its cells for the next one; uninstalled,
    // none comes: the thread is given back and the unit is gone.
    assert!(c.policy(&sleeper).contains("SCHED_DEADLINE"));
    let report: serde_json::Value =
        serde_json::from_str(&c.ok("tessera-under-test uninstall --json")).unwrap();
    assert_eq!(report["reset"]["threads_restored"], 1, "{report}");
    assert!(c.policy(&sleeper).contains("SCHED_OTHER"));
    assert!(!c.sh("systemctl cat tessera.service").status.success());

    guards_a_users_session_pipewire_from_its_sandbox(&c);
}

/// A user's PipeWire without real-time rights (no RLIMIT_RTPRIO, no bus to
/// ask RTKit on), the only one in the container.
const USERS_PIPEWIRE: &str = r#"set -e
useradd --no-create-home --shell /usr/sbin/nologin tessera-desk
uid=$(id -u tessera-desk) gid=$(id -g tessera-desk)
install -d -m 0700 -o "$uid" -g "$gid" "/run/user/$uid"
setpriv --reuid="$uid" --regid="$gid" --clear-groups \
  env -i PATH=/usr/bin:/bin HOME="/run/user/$uid" XDG_RUNTIME_DIR="/run/user/$uid" \
  DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent \
  pipewire >/tmp/pipewire.log 2>&1 &
echo $!"#;

/// Installed again with `[[guard]] user = "*"`, the service guards a
/// user's session PipeWire from inside its sandbox. (Part of the test
/// above: one systemd boot per test process — a second one, in the same
/// process, sometimes found its systemd gone before it said why.)
fn guards_a_users_session_pipewire_from_its_sandbox(c: &Container) {
    c.ok("tessera-under-test install --no-enable --json");
    c.ok(
        "printf '[[guard]]\\nserver = \"pipewire\"\\nuser = \"*\"\\n' >> /etc/tessera/daemon.toml",
    );
    c.ok("systemctl start tessera.service");
    let pipewire = c.ok(USERS_PIPEWIRE);
    assert!(
        !c.classes(&pipewire).iter().any(|class| class != "TS"),
        "PipeWire has no real-time rights of its own"
    );

    // The daemon finds the user's PipeWire in /proc and starts a guard for
    // it, which reaches it as its owner and adopts the threads that run its
    // graph: all from inside the unit's hardening.
    let mut reserved = vec![];
    common::wait_until_within("the user's PipeWire is guarded", TIMEOUT, || {
        reserved = c.cells_of(&pipewire);
        !reserved.is_empty()
    });
    assert!(c.classes(&pipewire).iter().any(|class| class == "DLN"));
    assert!(c
        .text("journalctl -u tessera.service --no-pager")
        .contains(&format!("--pid {pipewire}")));

    // Uninstalled (stopped, and no daemon to come), PipeWire's threads are
    // back to the scheduling PipeWire set.
    c.ok("tessera-under-test uninstall");
    assert!(c.classes(&pipewire).iter().all(|class| class == "TS"));
}
