//! `tessera install` and `tessera uninstall` into a temporary root (no root
//! user, no running systemd needed): exactly the shipped files with their
//! modes, nothing changed the second time, an admin's config kept, the rest
//! removed; the Debian package's assets the same files; the unit accepted by
//! `systemd-analyze verify` and the D-Bus policy by a private `dbus-daemon`
//! (each when the tool is there); and the daemon's READY=1 on a
//! NOTIFY_SOCKET. Every process a test starts is killed when it ends, even
//! when it fails, and every wait has a timeout.

mod common;

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tessera_testkit::Reaped;

const TIMEOUT: Duration = Duration::from_secs(10);

const BINARY: &str = "usr/bin/tessera";
const UNIT: &str = "usr/lib/systemd/system/tessera.service";
const POLICY: &str = "usr/share/dbus-1/system.d/org.freedesktop.RealtimeKit1.tessera.conf";
const CONFIG: &str = "etc/tessera/daemon.toml";

/// A scratch directory of one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("tessera-install-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the scratch directory");
        Scratch(dir)
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.0.join(relative)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tessera(args: &[&str]) -> Output {
    common::run_logged(
        Command::new(env!("CARGO_BIN_EXE_tessera")).stdin(Stdio::null()),
        args,
    )
}

/// `tessera VERB --root ROOT --json [extra]`, which must succeed.
fn json(verb: &str, root: &Path, extra: &[&str]) -> Value {
    let root = root.to_str().unwrap();
    let mut args = vec![verb, "--root", root, "--json"];
    args.extend(extra);
    let out = tessera(&args);
    assert!(out.status.success(), "tessera {args:?} failed");
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

/// Each file's action, by its path under the root.
fn actions(report: &Value, root: &Path) -> BTreeMap<String, String> {
    report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let path = Path::new(f["path"].as_str().unwrap());
            let relative = path.strip_prefix(root).unwrap().to_str().unwrap();
            (
                relative.to_string(),
                f["action"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn all(action: &str) -> BTreeMap<String, String> {
    [BINARY, UNIT, POLICY, CONFIG]
        .iter()
        .map(|p| (p.to_string(), action.to_string()))
        .collect()
}

/// Every file (not directory) under `root`, by relative path, with its mode.
fn files_under(root: &Path) -> BTreeMap<String, u32> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                dirs.push(path);
            } else {
                let relative = path.strip_prefix(root).unwrap().to_str().unwrap();
                found.insert(relative.to_string(), meta.permissions().mode() & 0o7777);
            }
        }
    }
    found
}

fn canonical(root: &Scratch) -> PathBuf {
    root.0.canonicalize().unwrap()
}

#[test]
fn install_writes_exactly_the_shipped_files_and_a_second_time_changes_nothing() {
    let scratch = Scratch::new("twice");
    let root = canonical(&scratch);
    let first = json("install", &root, &[]);
    assert_eq!(actions(&first, &root), all("written"));
    let expected: BTreeMap<String, u32> = [
        (BINARY, 0o755),
        (UNIT, 0o644),
        (POLICY, 0o644),
        (CONFIG, 0o644),
    ]
    .iter()
    .map(|(p, m)| (p.to_string(), *m))
    .collect();
    assert_eq!(files_under(&root), expected);
    assert_eq!(
        std::fs::read(root.join(BINARY)).unwrap(),
        std::fs::read(env!("CARGO_BIN_EXE_tessera")).unwrap(),
        "the installed binary is the one that ran"
    );
    // Not this machine's /: systemd is not told, and the command is given.
    assert_eq!(first["ran"], serde_json::json!([]));
    let enable = format!("systemctl --root={} enable tessera.service", root.display());
    assert_eq!(first["not_run"][0]["command"], enable.as_str());

    let inodes = |root: &Path| -> Vec<(u64, i64)> {
        expected
            .keys()
            .map(|p| {
                let m = std::fs::metadata(root.join(p)).unwrap();
                (m.ino(), m.mtime_nsec())
            })
            .collect()
    };
    let before = inodes(&root);
    let second = json("install", &root, &["--no-enable"]);
    assert_eq!(actions(&second, &root), all("unchanged"));
    assert_eq!(inodes(&root), before, "no file was rewritten");
    assert_eq!(files_under(&root), expected);
    assert_eq!(second["not_run"], serde_json::json!([]), "--no-enable");
}

#[test]
fn a_changed_config_is_kept_on_reinstall_and_uninstall_and_the_rest_is_removed() {
    let scratch = Scratch::new("kept");
    let root = canonical(&scratch);
    json("install", &root, &[]);
    let mine = "# the admin's own\nrtkit = false\n";
    std::fs::write(root.join(CONFIG), mine).unwrap();

    let again = json("install", &root, &[]);
    assert_eq!(actions(&again, &root)[CONFIG], "kept");
    assert_eq!(std::fs::read_to_string(root.join(CONFIG)).unwrap(), mine);

    let removed = json("uninstall", &root, &[]);
    let mut expected = all("removed");
    expected.insert(CONFIG.into(), "kept".into());
    assert_eq!(actions(&removed, &root), expected);
    assert_eq!(files_under(&root).into_keys().collect::<Vec<_>>(), [CONFIG]);
    assert_eq!(std::fs::read_to_string(root.join(CONFIG)).unwrap(), mine);
    let disable = format!(
        "systemctl --root={} disable tessera.service",
        root.display()
    );
    assert_eq!(removed["not_run"][0]["command"], disable.as_str());

    let twice = json("uninstall", &root, &[]);
    expected = all("absent");
    expected.insert(CONFIG.into(), "kept".into());
    assert_eq!(actions(&twice, &root), expected);
}

#[test]
fn uninstall_removes_an_unchanged_config_and_its_directory() {
    let scratch = Scratch::new("clean");
    let root = canonical(&scratch);
    json("install", &root, &["--no-enable"]);
    let removed = json("uninstall", &root, &[]);
    assert_eq!(actions(&removed, &root), all("removed"));
    assert_eq!(files_under(&root), BTreeMap::new());
    assert!(!root.join("etc/tessera").exists());
}

#[test]
fn install_refuses_a_root_that_does_not_exist() {
    let scratch = Scratch::new("missing");
    let out = tessera(&[
        "install",
        "--root",
        scratch.path("nowhere").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("fix: give an existing directory"));
}

/// The Debian package's assets ([package.metadata.deb]), by target path
/// under the root: (source, mode). The unit comes through systemd-units:
/// cargo-deb (3.x) installs `<maintainer-scripts>/tessera.service` into
/// usr/lib/systemd/system.
fn deb_assets() -> BTreeMap<String, (PathBuf, u32)> {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml::Table =
        toml::from_str(&std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap()).unwrap();
    let deb = &manifest["package"]["metadata"]["deb"];
    let mut assets = BTreeMap::new();
    for asset in deb["assets"].as_array().unwrap() {
        let [source, target, mode] = [0, 1, 2].map(|i| asset[i].as_str().unwrap());
        let source = crate_dir.join(source);
        // A target ending in / is a directory: the file keeps its name.
        let target = match target.strip_suffix('/') {
            Some(dir) => format!("{dir}/{}", source.file_name().unwrap().to_str().unwrap()),
            None => target.to_string(),
        };
        let mode = u32::from_str_radix(mode, 8).unwrap();
        assets.insert(target, (source, mode));
    }
    let scripts = crate_dir.join(deb["maintainer-scripts"].as_str().unwrap());
    assert_eq!(deb["systemd-units"]["unit-name"].as_str(), Some("tessera"));
    assets.insert(UNIT.into(), (scripts.join("tessera.service"), 0o644));
    assert_eq!(
        deb["conf-files"].as_array().unwrap(),
        &[toml::Value::from(format!("/{CONFIG}"))]
    );
    assets
}

#[test]
fn the_debian_package_ships_the_files_install_writes() {
    let scratch = Scratch::new("deb");
    let root = canonical(&scratch);
    json("install", &root, &["--no-enable"]);
    let installed = files_under(&root);
    let mut assets = deb_assets();
    // The package's documentation is its own; everything else must match.
    assets.retain(|target, _| !target.starts_with("usr/share/doc/"));
    assert_eq!(
        assets.keys().collect::<Vec<_>>(),
        installed.keys().collect::<Vec<_>>()
    );
    for (target, (source, mode)) in &assets {
        assert_eq!(installed[target], *mode, "{target}: mode");
        if target != BINARY {
            assert_eq!(
                std::fs::read(source).unwrap(),
                std::fs::read(root.join(target)).unwrap(),
                "{target}: the package's {} differs from what install writes",
                source.display()
            );
        }
    }
}

/// Runs `command` to its end, or kills it after TIMEOUT.
fn finish(command: &mut Command) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the tool");
    let mut started = Reaped(child);
    // Drained while it runs, so a full pipe cannot stall it.
    let stdout = drain(started.0.stdout.take().unwrap());
    let stderr = drain(started.0.stderr.take().unwrap());
    let start = Instant::now();
    while started.0.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < TIMEOUT,
            "{command:?} took over {TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Output {
        status: started.0.wait().unwrap(),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

/// Whether `tool` is on PATH; prints the skip if not.
fn have(tool: &str, test: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("SKIPPED {test}: {tool} is not installed");
    }
    found
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    if !have("systemd-analyze", "the_unit_passes_systemd_analyze_verify") {
        return;
    }
    let scratch = Scratch::new("verify");
    let root = scratch.path("root");
    std::fs::create_dir(&root).unwrap();
    json("install", &root, &["--no-enable"]);
    // verify checks that ExecStart's program exists on this machine: point
    // it at the installed one (`--root` would need a whole systemd tree).
    let unit = std::fs::read_to_string(root.join(UNIT)).unwrap();
    let exec = "ExecStart=/usr/bin/tessera daemon";
    assert!(unit.contains(exec), "the unit runs /usr/bin/tessera daemon");
    let local = unit.replace(
        exec,
        &format!("ExecStart={}/{BINARY} daemon", root.display()),
    );
    let checked = scratch.path("tessera.service");
    std::fs::write(&checked, local).unwrap();
    let out = finish(Command::new("systemd-analyze").arg("verify").arg(&checked));
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("systemd-analyze verify: {}\n{stderr}", out.status);
    assert!(out.status.success());
    // verify exits 0 on settings it ignores: any word about the unit fails.
    let complaints: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("tessera.service"))
        .collect();
    assert!(complaints.is_empty(), "{complaints:#?}");
}

/// A system bus of its own: the defaults of Debian's system.conf that
/// matter here (nobody owns names or calls methods unless a policy says so)
/// and the installed root's system.d.
fn bus_config(socket: &Path, system_d: &Path) -> String {
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
  </policy>
  <includedir>{}</includedir>
</busconfig>
"#,
        socket.display(),
        system_d.display()
    )
}

/// Asks the bus at `address` for RTKit's name; the reply or the error.
fn request_rtkit_name(address: &str) -> String {
    let out = finish(Command::new("dbus-send").args([
        &format!("--bus={address}"),
        "--dest=org.freedesktop.DBus",
        "--print-reply",
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus.RequestName",
        "string:org.freedesktop.RealtimeKit1",
        "uint32:4",
    ]));
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_private_system_bus_accepts_the_policy() {
    if !have("dbus-daemon", "a_private_system_bus_accepts_the_policy") {
        return;
    }
    let scratch = Scratch::new("bus");
    let root = scratch.path("root");
    std::fs::create_dir(&root).unwrap();
    json("install", &root, &["--no-enable"]);
    let config = scratch.path("bus.conf");
    let system_d = root.join(POLICY).parent().unwrap().to_path_buf();
    std::fs::write(&config, bus_config(&scratch.path("bus.sock"), &system_d)).unwrap();

    let mut bus = Reaped(
        Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dbus-daemon"),
    );
    // It prints its address once the config (and the policy) is loaded.
    let stdout = bus.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let address = rx
        .recv_timeout(TIMEOUT)
        .expect("dbus-daemon prints its address");
    let address = address.trim().to_string();
    assert!(address.starts_with("unix:path="), "address {address:?}");

    // What the policy says, as the bus applies it: only root owns the name.
    let owned = request_rtkit_name(&address);
    let root_user = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    match root_user {
        true => assert!(owned.contains("uint32 1"), "root may own it: {owned}"),
        false => assert!(owned.contains("AccessDenied"), "only root owns it: {owned}"),
    }

    // A malformed policy is only logged, and the bus goes on: read its log.
    drop(rx);
    let _ = bus.0.kill();
    let _ = bus.0.wait();
    let mut log = String::new();
    bus.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    eprintln!("dbus-daemon: {log}");
    assert!(!log.contains("Encountered error"), "{log}");
}

#[test]
fn the_daemon_sends_ready_on_the_notify_socket() {
    let scratch = Scratch::new("notify");
    let socket_path = scratch.path("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    socket.set_read_timeout(Some(TIMEOUT)).unwrap();
    // An empty config: the defaults, whatever /etc/tessera holds here.
    let config = scratch.path("daemon.toml");
    std::fs::write(&config, "").unwrap();
    let _daemon = Reaped(
        Command::new(env!("CARGO_BIN_EXE_tessera"))
            .arg("daemon")
            .arg("--run-dir")
            .arg(scratch.path("run"))
            .arg("--config")
            .arg(&config)
            .env("NOTIFY_SOCKET", &socket_path)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the daemon"),
    );
    let mut message = [0u8; 4096];
    let n = socket
        .recv(&mut message)
        .expect("a notification within 10 s");
    let message = String::from_utf8_lossy(&message[..n]);
    let lines: Vec<&str> = message.lines().collect();
    assert!(lines.contains(&"READY=1"), "{message}");
    let socket = scratch.path("run/tessera.sock");
    let status = format!("STATUS=listening on {}", socket.display());
    assert!(lines.iter().any(|l| l.starts_with(&status)), "{message}");
    assert!(
        std::os::unix::net::UnixStream::connect(&socket).is_ok(),
        "READY=1 came once the socket listens"
    );
}
